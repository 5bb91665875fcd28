"""The result store: the only code that opens DuckDB (`results/rooflab.duckdb`, docs/store.md).

- `connection`: opening the file (locks, read-only connections), `query`, the errors;
- `views`: the named views every reader uses;
- `writer`: `ingest` and `rebuild`, the only writers;
- `integrity`: `read_back`, every table read whole before a writer says it succeeded, and how a
  write of the store fails in one line (out of space, a damaged block).
`space_for` and DiskFull are records': re-exported for the report, which writes its files through
them (a full disk: one line naming the file, nothing half-written left).
Reading the kept run folders back is `rooflab.records`' (`find_run_folders`, `read_run_folder`).
"""

from rooflab.records import DiskFull, space_for
from rooflab.store.connection import (
    DEFAULT_DB,
    QueryError,
    QueryRefused,
    StoreError,
    StoreLocked,
    connect_read_only,
    query,
    query_capped,
    read_view,
    split_statements,
)
from rooflab.store.integrity import StoreDamaged, read_back
from rooflab.store.views import VIEWS_SQL
from rooflab.store.writer import DEFAULT_RESULTS, IngestReport, RunsSetAside, ingest, rebuild

__all__ = [
    "DEFAULT_DB",
    "DEFAULT_RESULTS",
    "VIEWS_SQL",
    "DiskFull",
    "IngestReport",
    "QueryError",
    "QueryRefused",
    "RunsSetAside",
    "StoreDamaged",
    "StoreError",
    "StoreLocked",
    "connect_read_only",
    "ingest",
    "query",
    "query_capped",
    "read_back",
    "read_view",
    "rebuild",
    "space_for",
    "split_statements",
]
