"""What a measuring job writes: one Parquet file per table (DESIGN.md §5), in one run folder.

- `tables`: the tables, their columns and types, the schema version;
- `run_folder`: writing a run folder whole or not at all, reading it back checked in full, and the
  run's identity (run id, commit and dirty flag, settings hash);
- `writable`: checking, before measuring, that the run folder can be written.
"""

from rooflab.records.run_folder import (
    RecordError,
    RunFolder,
    RunFolderError,
    conform_types,
    find_run_folders,
    git_state,
    new_run_id,
    read_run,
    read_run_folder,
    read_table_file,
    run_ids_of,
    stable_hash,
    to_table,
    utc_now,
    write_run,
)
from rooflab.records.tables import (
    DERIVED_TABLES,
    MEASURED_TABLES,
    SCHEMA_VERSION,
    TABLES,
    timed_rows,
)
from rooflab.records.writable import NotWritable, check_writable

__all__ = [
    "DERIVED_TABLES",
    "MEASURED_TABLES",
    "SCHEMA_VERSION",
    "TABLES",
    "NotWritable",
    "RecordError",
    "RunFolder",
    "RunFolderError",
    "check_writable",
    "conform_types",
    "find_run_folders",
    "git_state",
    "new_run_id",
    "read_run",
    "read_run_folder",
    "read_table_file",
    "run_ids_of",
    "stable_hash",
    "timed_rows",
    "to_table",
    "utc_now",
    "write_run",
]
