"""What a measuring job writes: one Parquet file per table (docs/store.md), in one run folder.

- `tables`: the tables, their columns and types, the schema version;
- `run_folder`: writing a run folder whole or not at all, reading it back checked in full, and the
  run's identity (run id, commit and dirty flag, settings hash);
- `writable`: checking, before measuring, that the run folder can be written; and `space_for`, how
  every writer says that a write ran out of space (DiskFull, one line naming the file).
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
    read_runs,
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
    POINT_VIEWS,
    SCHEMA_VERSION,
    TABLES,
    timed_rows,
)
from rooflab.records.writable import (
    DiskFull,
    NotWritable,
    check_writable,
    disk_full,
    out_of_space,
    space_for,
)

__all__ = [
    "DERIVED_TABLES",
    "MEASURED_TABLES",
    "POINT_VIEWS",
    "SCHEMA_VERSION",
    "TABLES",
    "DiskFull",
    "NotWritable",
    "RecordError",
    "RunFolder",
    "RunFolderError",
    "check_writable",
    "conform_types",
    "disk_full",
    "find_run_folders",
    "git_state",
    "new_run_id",
    "out_of_space",
    "read_run",
    "read_run_folder",
    "read_runs",
    "read_table_file",
    "run_ids_of",
    "space_for",
    "stable_hash",
    "timed_rows",
    "to_table",
    "utc_now",
    "write_run",
]
