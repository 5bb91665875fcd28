"""The result store: the only code that opens DuckDB (`results/rooflab.duckdb`, DESIGN.md §5).

- `connection`: opening the file (locks, read-only connections), `query`, the errors;
- `views`: the named views every reader uses;
- `writer`: `ingest` and `rebuild`, the only writers.
Reading the kept run folders back is `rooflab.records`' (`find_run_folders`, `read_run_folder`).
"""

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
from rooflab.store.views import VIEWS_SQL
from rooflab.store.writer import DEFAULT_RESULTS, IngestReport, RunsSetAside, ingest, rebuild

__all__ = [
    "DEFAULT_DB",
    "DEFAULT_RESULTS",
    "VIEWS_SQL",
    "IngestReport",
    "QueryError",
    "QueryRefused",
    "RunsSetAside",
    "StoreError",
    "StoreLocked",
    "connect_read_only",
    "ingest",
    "query",
    "query_capped",
    "read_view",
    "rebuild",
    "split_statements",
]
