"""Opening the store: locks, read-only connections and queries.

Locks (found by experiment with DuckDB 2.0.1): a process that has the file open read-write blocks
every other process, readers included; a process that has it open read-only blocks writers (ingest,
rebuild) but not other readers. So an open `duckdb -readonly results/rooflab.duckdb` shell stops
ingest until it is closed, while `rooflab query` and `rooflab sql` hold the file only while one
statement runs.

duckdb and pyarrow are imported inside the functions: the CLI imports the store for StoreError on
every command, and importing them takes about 0.35 s.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rooflab.records import SCHEMA_VERSION
from rooflab.store.views import VIEWS_SQL

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    import pyarrow as pa

DEFAULT_DB = Path("results/rooflab.duckdb")
LOCK_RETRY_INTERVAL_S = 0.2
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.+?) \(PID (\d+)\)")


class StoreError(Exception):
    """The store or a file to ingest cannot be used; the message says which and why."""


class StoreLocked(StoreError):
    """Another process holds the database file."""


# The store's schema version (store.versions): the records.SCHEMA_VERSION of the rooflab that last
# wrote its tables, one row of this table.
VERSION_TABLE = "store_schema"


class StoreTooNew(StoreError):
    """A store or run folder written by a newer rooflab than this one."""


def stored_version(connection: duckdb.DuckDBPyConnection) -> int | None:
    """The store's schema version: its `store_schema` row; for a store written before that table,
    the newest `runs.schema_version` it holds (0 where it holds no run); None for a new, empty
    file."""
    tables = {
        row[0].lower()
        for row in connection.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
        ).fetchall()
    }
    for table in (VERSION_TABLE, "runs"):
        if table in tables:
            (newest,) = connection.execute(f"SELECT max(schema_version) FROM {table}").fetchall()
            return int(newest[0] or 0)
    return None


def refuse_newer(version: int | None, where: Path | str) -> None:
    """StoreTooNew where `version` (of a store or a run folder at `where`) is newer than this
    rooflab's."""
    if version is not None and version > SCHEMA_VERSION:
        raise StoreTooNew(
            f"{where}: written by a newer rooflab (schema version {version}; this rooflab reads "
            f"versions up to {SCHEMA_VERSION}): upgrade rooflab to read it"
        )


class QueryError(StoreError):
    """The SQL of a query failed."""


class QueryRefused(QueryError):
    """The SQL would read or write outside the store, change it, or change a setting."""


def _lock_holder(message: str) -> str:
    match = _LOCK_HOLDER.search(message)
    return f" (PID {match.group(2)}, {match.group(1)})" if match else ""


def _is_lock_error(error: Exception) -> bool:
    return "Could not set lock" in str(error)


# A reader's connection reads the store and nothing else: no other file, directory or URL (COPY
# TO, read_text, EXPORT DATABASE, ATTACH, INSTALL and LOAD are refused), no extension loaded or
# fetched on its own, no spill files (temp_directory ''; queries run in memory), and, once
# TimeZone is set, no setting can be changed back (lock_configuration).
_READER_CONFIG = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "temp_directory": "",
}


def _open(
    db_path: Path, *, read_only: bool, lock_timeout_s: float, action: str, locked: bool = False
) -> duckdb.DuckDBPyConnection:
    """Connect, retrying while another process holds the lock, then StoreLocked. `locked`: the
    reader's settings (_READER_CONFIG), locked before the connection is returned."""
    import duckdb

    deadline = time.monotonic() + lock_timeout_s
    config = _READER_CONFIG if locked else {}
    while True:
        try:
            connection = duckdb.connect(str(db_path), read_only=read_only, config=config)
            break
        except duckdb.IOException as error:
            if not _is_lock_error(error):
                raise StoreError(f"{db_path}: cannot open the store ({_one_line(error)})") from None
            if time.monotonic() >= deadline:
                raise StoreLocked(
                    _locked_message(db_path, str(error), read_only, lock_timeout_s, action)
                ) from None
            time.sleep(LOCK_RETRY_INTERVAL_S)
        except duckdb.Error as error:
            raise StoreError(f"{db_path}: cannot open the store ({_one_line(error)})") from None
    connection.execute("SET TimeZone = 'UTC'")  # timestamps read the same on every machine
    if locked:
        connection.execute("SET lock_configuration = true")
    return connection


def _locked_message(
    db_path: Path, error: str, read_only: bool, waited_s: float, action: str
) -> str:
    holder = _lock_holder(error)
    if read_only:
        return (
            f"{db_path} is open for writing in another process{holder} (an ingest, or a session "
            f"opened without -readonly); {action} waited {waited_s:g} s. Run it again when that "
            "process has finished or closed the file."
        )
    read_hint = (
        'use `rooflab sql` or `rooflab query "SQL"`, which hold the file only while one query runs'
    )
    # DuckDB adds this sentence when the holder has the file open read-only.
    if "able to open this database in read-only mode" in error:
        return (
            f"{db_path} is open read-only in another process{holder}; {action} waited "
            f"{waited_s:g} s. A read-only session (such as `duckdb -readonly {db_path}`) still "
            f"blocks {action} while it stays open: close it and run again. To read while the "
            f"workflow runs, {read_hint}."
        )
    return (
        f"{db_path} is locked by another process{holder} that has it open for writing; {action} "
        f"waited {waited_s:g} s. Close that session and run again. To look at results, "
        f"{read_hint}; a `duckdb -readonly {db_path}` shell also reads it, but blocks writers "
        "until it is closed."
    )


def connect_read_only(
    db_path: str | Path = DEFAULT_DB, *, lock_timeout_s: float = 10.0
) -> duckdb.DuckDBPyConnection:
    """A read-only connection that reads the store and nothing else (_READER_CONFIG); other
    readers may be open at the same time, a writer may not."""
    db_path = Path(db_path)
    if not db_path.is_file():
        raise StoreError(f"no store at {db_path}; run the workflow or `rooflab store rebuild`")
    connection = _open(
        db_path, read_only=True, lock_timeout_s=lock_timeout_s, action="the query", locked=True
    )
    try:
        refuse_newer(stored_version(connection), db_path)
    except StoreError:
        connection.close()
        raise
    return connection


def _one_line(error: Exception) -> str:
    """DuckDB's message without the caret diagram under it."""
    lines = str(error).split("\n\nLINE ")[0].splitlines()
    return " ".join(line.strip() for line in lines if line.strip())


def query(
    db_path: str | Path,
    sql: str,
    *,
    params: list | None = None,
    as_pandas: bool = False,
    lock_timeout_s: float = 10.0,
) -> pa.Table | pd.DataFrame:
    """Run `sql` (with `?` placeholders bound to `params`) on a read-only connection; the result
    as a pyarrow Table (or pandas DataFrame).

    The store only: SQL that would read or write another file, change the store or change a
    setting raises QueryRefused, and nothing of it happens."""
    result, _ = _run_query(db_path, sql, params, lock_timeout_s)
    return result.to_pandas() if as_pandas else result


def query_capped(
    db_path: str | Path,
    sql: str,
    *,
    limit: int | None,
    timeout_s: float | None,
    lock_timeout_s: float = 10.0,
) -> tuple[pa.Table, bool]:
    """query() for a person at a terminal: at most `limit` rows (None: all), and whether more
    exist; stopped after `timeout_s` seconds (None: never) with QueryError saying so."""
    return _run_query(db_path, sql, None, lock_timeout_s, limit, timeout_s)


def _run_query(db_path, sql, params, lock_timeout_s, limit=None, timeout_s=None):
    import threading

    import duckdb
    import pyarrow as pa

    connection = connect_read_only(db_path, lock_timeout_s=lock_timeout_s)
    timer = threading.Timer(timeout_s, connection.interrupt) if timeout_s else None
    try:
        if timer:
            timer.start()
        relation = connection.sql(sql, params=params)
        if relation is None:
            return pa.table({}), False
        if limit is not None:
            relation = relation.limit(limit + 1)  # one more: whether rows were left out
        result = relation.to_arrow_table()
    except duckdb.InterruptException:
        raise QueryError(
            f"query stopped after {timeout_s:g} s (--timeout); nothing was changed"
        ) from None
    except duckdb.Error as error:
        refused = _refusal(error)
        if refused:
            raise QueryRefused(f"query refused: {refused}") from None
        raise QueryError(f"query failed: {_one_line(error)}") from None
    finally:
        if timer:
            timer.cancel()
        connection.close()
    if limit is not None and result.num_rows > limit:
        return result.slice(0, limit), True
    return result, False


def split_statements(sql: str) -> list[str]:
    """The statements of a script, as DuckDB's parser splits them (a `;` inside a string or a
    comment does not end one); QueryError when it cannot be parsed."""
    import duckdb

    try:
        return [statement.query for statement in duckdb.extract_statements(sql)]
    except duckdb.Error as error:
        raise QueryError(f"query failed: {_one_line(error)}") from None


_QUOTED = re.compile(r'"([^"]*)"')


def _refusal(error: Exception) -> str | None:
    """Why the reader's settings refused a statement, in a few words; None for other errors."""
    import duckdb

    message = _one_line(error)
    quoted = _QUOTED.search(message)
    name = quoted.group(1) if quoted else "?"
    reads_only = "`rooflab query` reads the store and nothing else"
    if isinstance(error, duckdb.PermissionException):
        if "extension" in message.lower():
            return f"it installs or loads an extension; {reads_only}"
        return f"it reads or writes outside the store (file {name}); {reads_only}"
    if "the file belongs to an attached database" in message:
        return f"it writes to the store's own file ({name}); {reads_only}"
    if "configuration has been locked" in message:
        return f"it changes the setting {name}; a query's settings are fixed"
    if "attached in read-only mode" in message:
        return (
            f"it would change the store ({name}), which is read-only here; only `rooflab store "
            "ingest` and `rooflab store rebuild` write it"
        )
    return None


# -- writing --------------------------------------------------------------------------------------


_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")


def read_view(
    connection: duckdb.DuckDBPyConnection,
    name: str,
    *,
    order_by: tuple[str, ...] = (),
    **equal: object,
) -> pd.DataFrame:
    """The rows of one named view whose columns equal the values given, ordered by `order_by`
    (column names): how a reader such as the report gets its numbers, with no SQL of its own."""
    import duckdb

    if name not in VIEWS_SQL:
        raise StoreError(f"no view {name!r}; views: {', '.join(VIEWS_SQL)}")
    for column in (*equal, *order_by):
        if not _IDENTIFIER.fullmatch(column):
            raise StoreError(f"view {name}: {column!r} is not a column name")
    where = " AND ".join(f"{column} = ?" for column in equal)
    sql = f"SELECT * FROM {name}" + (f" WHERE {where}" if where else "")
    sql += f" ORDER BY {', '.join(order_by)}" if order_by else ""
    try:
        return connection.execute(sql, list(equal.values())).df()
    except duckdb.CatalogException as error:
        raise StoreError(
            f"the store lacks view {name} or one of its columns ({_one_line(error)}); a store "
            "written by an older rooflab gets the current views at its next `rooflab store "
            "ingest`"
        ) from None
    except duckdb.Error as error:
        raise StoreError(f"view {name}: {_one_line(error)}") from None
