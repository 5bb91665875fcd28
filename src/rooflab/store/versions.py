"""The store's schema version: the records.SCHEMA_VERSION of the rooflab that last wrote its tables
and views, kept in the one-row table `store_schema`. A writer (ingest, rebuild) migrates an older
store step by step up to its own version before it writes anything, and every reader and writer
refuses a store of a newer rooflab in one line, naming both versions: its tables may mean what
this rooflab cannot know. A run folder of a newer rooflab is set aside at ingest the same way.

A migration step turns a store of version v - 1 into v (MIGRATIONS[v]). Versions 1 to 5 only added
tables and columns, which the writer adds to a store of any version (writer.ensure_schema: ALTER
TABLE ADD COLUMN), so they have no step; a change that is not an addition (a table merged, a
column renamed, retyped or dropped, a stored value recomputed) gets its step here, tested on the
store of the version before it (tests/fixtures/store/).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rooflab.records import POINT_VIEWS, SCHEMA_VERSION
from rooflab.store.connection import VERSION_TABLE, refuse_newer, stored_version

if TYPE_CHECKING:
    import duckdb


def _one_timed_points_table(connection: duckdb.DuckDBPyConnection) -> None:
    """6: the tables gemm_points and workload_points become the one table timed_points, each row
    with its kind; their names stay as its views (store.views), which ensure_schema makes anew."""
    tables = {
        name
        for (name,) in connection.execute(
            "SELECT table_name FROM duckdb_tables() "
            "WHERE database_name = current_database() AND schema_name = 'main'"
        ).fetchall()
    }
    old = [(name, kind) for name, (kind, _) in POINT_VIEWS.items() if name in tables]
    if not old:
        return
    parts = " UNION ALL BY NAME ".join(
        f"SELECT '{kind}' AS kind, * FROM {name}" for name, kind in old
    )
    connection.execute(f"CREATE TABLE timed_points AS {parts}")
    for name, _ in old:
        connection.execute(f"DROP TABLE {name}")


MIGRATIONS: dict[int, Callable[[duckdb.DuckDBPyConnection], None]] = {6: _one_timed_points_table}


def migrate(connection: duckdb.DuckDBPyConnection, db_path: Path) -> list[int]:
    """Bring the store up to SCHEMA_VERSION before a writer adds to it: each MIGRATIONS step past
    its version, in order, then its `store_schema` row. The steps that ran (none for a new store
    or one already at this version). StoreTooNew for a store of a newer rooflab."""
    version = stored_version(connection)
    refuse_newer(version, db_path)
    steps = [] if version is None else [v for v in sorted(MIGRATIONS) if version < v]
    for step in steps:
        MIGRATIONS[step](connection)
    connection.execute(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (schema_version INTEGER)")
    connection.execute(f"DELETE FROM {VERSION_TABLE}")
    connection.execute(f"INSERT INTO {VERSION_TABLE} VALUES (?)", [SCHEMA_VERSION])
    return steps
