"""The result store: the only code that opens DuckDB (`results/rooflab.duckdb`, DESIGN.md §5).

`ingest` copies the Parquet files the measuring jobs wrote into the store. Measured runs are the
non-hidden folders under the results folder that hold `runs.parquet`; each is inserted in one
transaction (all of its tables or none), and a run already in `runs` is skipped, so ingesting twice
adds nothing and a killed ingest leaves no partial run. Every file of a run is read and checked in
full before anything of it is written. A bad file stops the ingest: the error names the file, the
runs before it stay (each complete), that run and the ones after it are not written.

The derived `roofline/roofline_points.parquet` replaces, run by run, the points the store has for
the runs it names; points of runs it does not name stay.

Locks (found by experiment with DuckDB 2.0.1): a process that has the file open read-write blocks
every other process, readers included; a process that has it open read-only blocks writers (ingest,
rebuild) but not other readers. So an open `duckdb -readonly results/rooflab.duckdb` shell stops
ingest until it is closed, while `rooflab query` holds the file only for one query.

duckdb and pyarrow are imported inside the functions: the CLI imports this module for StoreError on
every command, and importing them takes about 0.35 s.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    import pyarrow as pa

DEFAULT_DB = Path("results/rooflab.duckdb")
DEFAULT_RESULTS = Path("results")
ROOFLINE_POINTS_FILE = Path("roofline") / "roofline_points.parquet"
LOCK_RETRY_INTERVAL_S = 0.2

VIEWS_SQL = {
    # Per machine and backend (a GPU backend may share the host's machine_id), the ceilings of the
    # most recent ceilings run.
    "latest_ceilings": """
        WITH latest_run AS (
            SELECT run_id, machine_id, backend, host, device_name, started_at
            FROM runs
            WHERE kind = 'ceilings'
            QUALIFY row_number() OVER (
                PARTITION BY machine_id, backend ORDER BY started_at DESC, run_id DESC
            ) = 1
        )
        SELECT l.machine_id, l.backend, l.host, l.device_name, l.started_at, c.*
        FROM ceilings AS c
        JOIN latest_run AS l USING (run_id)
    """,
    # Per machine, backend, configuration and cache state, the point of the latest run that timed
    # it (a configuration whose latest check failed keeps its older timing here).
    "latest_gemm_points": """
        SELECT r.machine_id, r.backend, r.host, r.device_name, r.started_at, g.*
        FROM gemm_points AS g
        JOIN runs AS r USING (run_id)
        QUALIFY row_number() OVER (
            PARTITION BY r.machine_id, r.backend, g.config_id, g.cache_state
            ORDER BY r.started_at DESC, g.run_id DESC
        ) = 1
    """,
    # One row per machine and backend: what a cluster campaign ran where. Each machine's points are
    # computed against its own ceilings only (roofline.py), so this is also the list of Rooflines.
    "machine_summary": """
        SELECT machine_id, backend,
            arg_max(host, started_at) AS host,
            arg_max(device_name, started_at) AS device_name,
            count(*) AS n_runs,
            count(*) FILTER (WHERE kind = 'ceilings') AS n_ceilings_runs,
            count(*) FILTER (WHERE kind = 'gemm') AS n_gemm_runs,
            arg_max(run_id, started_at) FILTER (WHERE kind = 'ceilings') AS latest_ceilings_run,
            min(started_at) AS first_started_at,
            max(started_at) AS last_started_at
        FROM runs
        GROUP BY machine_id, backend
    """,
    # One row per counters run (issue 7): the tool, what it profiled, and whether any of it can
    # reach a Roofline point (status as rooflab.experiments.counters.counters_status gives it).
    "counters_summary": """
        WITH profiles AS (
            SELECT run_id, any_value(tool) AS tool, max(tool_version) AS tool_version,
                max(chip) AS chip,
                count(*) FILTER (WHERE status IN ('ok', 'partial')) AS n_profiled,
                count(*) FILTER (WHERE status = 'partial') AS n_partial,
                count(*) FILTER (WHERE status = 'unavailable') AS n_unavailable,
                count(*) FILTER (WHERE status = 'skipped') AS n_skipped,
                string_agg(DISTINCT reason, ' | ') FILTER (WHERE status = 'unavailable')
                    AS unavailable_reason
            FROM counters
            WHERE metric IS NULL
            GROUP BY run_id
        ),
        calibration AS (
            SELECT run_id, count(*) AS n_calibrations,
                count(*) FILTER (WHERE trusted) AS n_trusted,
                count(*) FILTER (WHERE trusted AND pairing IS NOT NULL) AS n_admitted
            FROM counter_calibration
            GROUP BY run_id
        )
        SELECT r.run_id, r.machine_id, r.backend, r.host, r.device_name, r.sweep, r.started_at,
            p.tool, p.tool_version, p.chip,
            CASE WHEN coalesce(p.n_unavailable, 0) > 0 AND coalesce(p.n_profiled, 0) = 0
                     THEN 'unavailable'
                 WHEN coalesce(p.n_unavailable, 0) > 0 OR coalesce(p.n_partial, 0) > 0
                     THEN 'partial'
                 WHEN coalesce(p.n_profiled, 0) > 0 THEN 'ok'
                 ELSE 'none' END AS status,
            p.unavailable_reason,
            coalesce(p.n_profiled, 0) AS n_profiled,
            coalesce(p.n_unavailable, 0) AS n_unavailable,
            coalesce(p.n_skipped, 0) AS n_skipped,
            coalesce(c.n_calibrations, 0) AS n_calibrations,
            coalesce(c.n_trusted, 0) AS n_trusted,
            coalesce(c.n_admitted, 0) AS n_admitted
        FROM runs AS r
        LEFT JOIN profiles AS p USING (run_id)
        LEFT JOIN calibration AS c USING (run_id)
        WHERE r.kind = 'counters'
    """,
    # One row per run. The clock is in MHz: the measured CPU clock for CPU runs, the SM clock for
    # GPU runs, from the condition readings and the reading taken after each sample.
    # n_disturbed of n_judged: the run's GEMM points, sweep points and ceilings flagged disturbed
    # (null for runs recorded before disturbance was); busy_warning: the quiet check's warning.
    "run_summary": """
        WITH gemm AS (
            SELECT run_id, count(*) AS n_gemm_points, count(*) FILTER (WHERE noisy) AS n_noisy
            FROM gemm_points
            GROUP BY run_id
        ),
        disturbed AS (
            SELECT run_id, count(*) FILTER (WHERE disturbed) AS n_disturbed,
                count(*) AS n_judged
            FROM (
                SELECT run_id, disturbed FROM gemm_points
                UNION ALL SELECT run_id, disturbed FROM ceilings
                UNION ALL SELECT run_id, disturbed FROM ceiling_sweep
            )
            WHERE disturbed IS NOT NULL
            GROUP BY run_id
        ),
        failed AS (
            SELECT run_id, count(DISTINCT config_id) AS n_failed_correctness
            FROM correctness
            WHERE NOT passed
            GROUP BY run_id
        ),
        cache AS (
            SELECT run_id, string_agg(DISTINCT cache_state, ',' ORDER BY cache_state)
                AS cache_states
            FROM (
                SELECT run_id, cache_state FROM gemm_points
                UNION ALL SELECT run_id, cache_state FROM samples
                UNION ALL SELECT run_id, cache_state FROM ceilings
            )
            WHERE cache_state IS NOT NULL
            GROUP BY run_id
        ),
        clock AS (
            SELECT run_id, min(clock_mhz) AS clock_min_mhz, max(clock_mhz) AS clock_max_mhz
            FROM (
                SELECT c.run_id,
                    CASE WHEN r.backend = 'cpu' THEN c.cpu_ghz_measured * 1000
                         ELSE c.sm_clock_mhz END AS clock_mhz
                FROM conditions AS c
                JOIN runs AS r USING (run_id)
                UNION ALL SELECT run_id, clock_mhz FROM samples
            )
            GROUP BY run_id
        )
        SELECT r.run_id, r.kind, r.sweep, r.started_at, r.ended_at, r.host, r.machine_id,
            r.backend, r.device_name, cache.cache_states, clock.clock_min_mhz,
            clock.clock_max_mhz, coalesce(gemm.n_gemm_points, 0) AS n_gemm_points,
            coalesce(gemm.n_noisy, 0) AS n_noisy,
            disturbed.n_disturbed, disturbed.n_judged,
            r.busy_warning,
            coalesce(failed.n_failed_correctness, 0) AS n_failed_correctness,
            r.git_commit, r.git_dirty, r.schema_version
        FROM runs AS r
        LEFT JOIN gemm USING (run_id)
        LEFT JOIN disturbed USING (run_id)
        LEFT JOIN failed USING (run_id)
        LEFT JOIN cache USING (run_id)
        LEFT JOIN clock USING (run_id)
    """,
}

# A table of a newer rooflab that this one does not know is stored under its own name.
_TABLE_NAME = re.compile(r"[a-z][a-z0-9_]*")
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.+?) \(PID (\d+)\)")


class StoreError(Exception):
    """The store or a file to ingest cannot be used; the message says which and why."""


class StoreLocked(StoreError):
    """Another process holds the database file."""


class QueryError(StoreError):
    """The SQL of a query failed."""


@dataclass
class IngestReport:
    db_path: Path
    added_run_ids: list[str] = field(default_factory=list)
    present_run_ids: list[str] = field(default_factory=list)  # already in the store: skipped
    rows_added: dict[str, int] = field(default_factory=dict)  # per table, over the added runs
    added_columns: list[str] = field(default_factory=list)  # "table.column" of newer schemas
    roofline_run_ids: list[str] = field(default_factory=list)  # runs whose points were replaced
    roofline_rows_removed: int = 0
    roofline_rows_inserted: int = 0


@dataclass
class _RunFolder:
    run_id: str  # the folder name: write_run names the folder after the run
    path: Path


# -- reading and checking the files ---------------------------------------------------------------


def find_run_folders(results_dir: str | Path) -> list[_RunFolder]:
    """Run folders under `results_dir`, oldest first; hidden folders (partial writes) skipped."""
    folders = []
    for dirpath, dirnames, filenames in os.walk(results_dir):
        dirnames[:] = sorted(name for name in dirnames if not name.startswith("."))
        if "runs.parquet" in filenames:
            folders.append(_RunFolder(Path(dirpath).name, Path(dirpath)))
            dirnames[:] = []  # a run folder holds tables, not runs
    return sorted(folders, key=lambda folder: (folder.run_id, str(folder.path)))


def _read_parquet(path: Path) -> pa.Table:
    """The whole file, decoded: a truncated or corrupt file fails here, before any write."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as error:
        raise StoreError(f"{path}: cannot read this Parquet file ({_one_line(error)})") from None


def _conform(path: Path, name: str, table: pa.Table) -> pa.Table:
    """Cast the columns that records.TABLES knows to their types; others pass through."""
    import pyarrow as pa

    from rooflab.records import TABLES

    if "run_id" not in table.column_names:
        raise StoreError(f"{path}: no run_id column")
    known = TABLES.get(name)
    if known is None:
        return table
    for index, column_name in enumerate(table.column_names):
        if column_name not in known.names:
            continue
        wanted = known.field(column_name).type
        if table.schema.field(index).type != wanted:
            try:
                table = table.set_column(index, column_name, table.column(index).cast(wanted))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
                raise StoreError(
                    f"{path}: column {column_name} does not fit {wanted} ({_one_line(error)})"
                ) from None
    return table


def _distinct_run_ids(table: pa.Table) -> set:
    import pyarrow.compute as pc

    return set(pc.unique(table.column("run_id")).to_pylist())


def read_run_folder(folder: _RunFolder) -> dict[str, pa.Table]:
    """Every table of a run, read in full and checked: one runs row, every row of this run."""
    from rooflab.records import TABLES

    tables = {}
    for path in sorted(folder.path.glob("*.parquet")):
        name = path.stem
        if name == "roofline_points" or not _TABLE_NAME.fullmatch(name) or name in VIEWS_SQL:
            raise StoreError(f"{path}: a run folder cannot hold a table named {name!r}")
        table = _conform(path, name, _read_parquet(path))
        if table.num_rows and _distinct_run_ids(table) != {folder.run_id}:
            others = sorted(map(str, _distinct_run_ids(table) - {folder.run_id}))
            raise StoreError(
                f"{path}: rows of run(s) {', '.join(others)} in the folder of run {folder.run_id}"
            )
        tables[name] = table
    if tables["runs"].num_rows != 1:
        raise StoreError(
            f"{folder.path / 'runs.parquet'}: {tables['runs'].num_rows} rows, expected one"
        )
    order = [name for name in TABLES if name in tables] + sorted(set(tables) - set(TABLES))
    return {name: tables[name] for name in order}


# -- connections ----------------------------------------------------------------------------------


def _lock_holder(message: str) -> str:
    match = _LOCK_HOLDER.search(message)
    return f" (PID {match.group(2)}, {match.group(1)})" if match else ""


def _is_lock_error(error: Exception) -> bool:
    return "Could not set lock" in str(error)


def _open(
    db_path: Path, *, read_only: bool, lock_timeout_s: float, action: str
) -> duckdb.DuckDBPyConnection:
    """Connect, retrying while another process holds the lock, then StoreLocked."""
    import duckdb

    deadline = time.monotonic() + lock_timeout_s
    while True:
        try:
            connection = duckdb.connect(str(db_path), read_only=read_only)
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
    read_hint = 'use `rooflab query "SQL"`, which holds the file only while one query runs'
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
        f"waited {waited_s:g} s. Close that session and run again. To look at results, open the "
        f"store read-only instead: `duckdb -readonly {db_path}` (close it before the next "
        f"ingest: it blocks writers while open) or {read_hint}."
    )


def connect_read_only(
    db_path: str | Path = DEFAULT_DB, *, lock_timeout_s: float = 10.0
) -> duckdb.DuckDBPyConnection:
    """A read-only connection; other readers may be open at the same time, a writer may not."""
    db_path = Path(db_path)
    if not db_path.is_file():
        raise StoreError(f"no store at {db_path}; run the workflow or `rooflab store rebuild`")
    return _open(db_path, read_only=True, lock_timeout_s=lock_timeout_s, action="the query")


def _one_line(error: Exception) -> str:
    """DuckDB's message without the caret diagram under it."""
    lines = str(error).split("\n\nLINE ")[0].splitlines()
    return " ".join(line.strip() for line in lines if line.strip())


def query(
    db_path: str | Path,
    sql: str,
    *,
    as_pandas: bool = False,
    lock_timeout_s: float = 10.0,
) -> pa.Table | pd.DataFrame:
    """Run `sql` on a read-only connection; the result as a pyarrow Table (or pandas DataFrame)."""
    import duckdb
    import pyarrow as pa

    connection = connect_read_only(db_path, lock_timeout_s=lock_timeout_s)
    try:
        relation = connection.sql(sql)
        result = relation.to_arrow_table() if relation is not None else pa.table({})
    except duckdb.Error as error:
        raise QueryError(f"query failed: {_one_line(error)}") from None
    finally:
        connection.close()
    return result.to_pandas() if as_pandas else result


# -- writing --------------------------------------------------------------------------------------


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


class _Writer:
    """A read-write connection with the store's tables and views, inserting runs."""

    def __init__(self, connection: duckdb.DuckDBPyConnection):
        self.connection = connection
        self.columns: dict[str, set[str]] = {}
        self.ensure_schema()

    def _load_columns(self) -> None:
        rows = self.connection.execute(
            "SELECT table_name, column_name FROM duckdb_columns() "
            "WHERE database_name = current_database() AND schema_name = 'main'"
        ).fetchall()
        self.columns = {}
        for table_name, column_name in rows:
            self.columns.setdefault(table_name.lower(), set()).add(column_name.lower())

    def _column_types(self, table: pa.Table) -> list[tuple[str, str]]:
        """(name, DuckDB type) of each column of an Arrow table."""
        self.connection.register("_incoming_schema", table.slice(0, 0))
        try:
            described = self.connection.execute("DESCRIBE SELECT * FROM _incoming_schema")
            return [(row[0], row[1]) for row in described.fetchall()]
        finally:
            self.connection.unregister("_incoming_schema")

    def _create_table(self, name: str, table: pa.Table) -> None:
        columns = [f"{_quote(c)} {t}" for c, t in self._column_types(table)]
        if name == "runs":
            columns.append("PRIMARY KEY (run_id)")  # a second copy of a run cannot get in
        self.connection.execute(f"CREATE TABLE IF NOT EXISTS {_quote(name)} ({', '.join(columns)})")

    def ensure_schema(self) -> None:
        """Every table and column of records.TABLES (so queries work on an empty store), views."""
        from rooflab.records import TABLES

        self._load_columns()
        for name, schema in TABLES.items():
            self._fit_columns(name, schema.empty_table())  # a store of an older rooflab grows
        for name, sql in VIEWS_SQL.items():
            self.connection.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")

    def run_ids(self) -> set[str]:
        return {row[0] for row in self.connection.execute("SELECT run_id FROM runs").fetchall()}

    def _fit_columns(self, name: str, table: pa.Table) -> list[str]:
        """Create the table or add the columns it lacks (a newer schema); the names added."""
        if name not in self.columns:
            self._create_table(name, table)
            self.columns[name] = {c.lower() for c in table.column_names}
            return [f"{name}.{c}" for c in table.column_names]
        added = []
        for column, duckdb_type in self._column_types(table):
            if column.lower() not in self.columns[name]:
                self.connection.execute(
                    f"ALTER TABLE {_quote(name)} ADD COLUMN {_quote(column)} {duckdb_type}"
                )
                self.columns[name].add(column.lower())
                added.append(f"{name}.{column}")
        return added

    def _insert(self, name: str, table: pa.Table) -> None:
        self.connection.register("_incoming", table)
        try:
            self.connection.execute(f"INSERT INTO {_quote(name)} BY NAME SELECT * FROM _incoming")
        finally:
            self.connection.unregister("_incoming")

    def transaction(self, work: Callable[[], None]) -> None:
        """Run `work` in one transaction: all of it is stored, or none."""
        self.connection.execute("BEGIN TRANSACTION")
        try:
            work()
            self.connection.execute("COMMIT")
        except BaseException:
            self.connection.execute("ROLLBACK")
            self._load_columns()  # columns added in the transaction are gone again
            raise

    def insert_run(self, folder: _RunFolder, tables: dict[str, pa.Table], report) -> None:
        import duckdb

        added_columns: list[str] = []

        def work() -> None:
            for name, table in tables.items():
                try:
                    added_columns.extend(self._fit_columns(name, table))
                    self._insert(name, table)
                except duckdb.Error as error:
                    raise StoreError(
                        f"{folder.path / (name + '.parquet')}: cannot store it in table {name} "
                        f"({_one_line(error)})"
                    ) from None

        self.transaction(work)
        report.added_run_ids.append(folder.run_id)
        report.added_columns.extend(added_columns)
        for name, table in tables.items():
            report.rows_added[name] = report.rows_added.get(name, 0) + table.num_rows

    def replace_roofline_points(self, path: Path, report: IngestReport) -> None:
        """Delete the store's points of the runs the file names, then insert the file's rows."""
        import duckdb

        table = _conform(path, "roofline_points", _read_parquet(path))
        if table.column("run_id").null_count:
            raise StoreError(f"{path}: rows without a run_id")
        run_ids = sorted(_distinct_run_ids(table))
        removed = 0

        def work() -> None:
            nonlocal removed
            try:
                self._fit_columns("roofline_points", table)
                (removed,) = self.connection.execute(
                    "DELETE FROM roofline_points WHERE list_contains(?, run_id)", [run_ids]
                ).fetchone()
                self._insert("roofline_points", table)
            except duckdb.Error as error:
                raise StoreError(
                    f"{path}: cannot store it in table roofline_points ({_one_line(error)})"
                ) from None

        self.transaction(work)
        report.roofline_run_ids = run_ids
        report.roofline_rows_removed = removed
        report.roofline_rows_inserted = table.num_rows


def _ingest_with(
    writer: _Writer,
    results_dir: Path,
    report: IngestReport,
    on_run_added: Callable[[str], None] | None,
) -> None:
    present = writer.run_ids()
    for folder in find_run_folders(results_dir):
        if folder.run_id in present:
            report.present_run_ids.append(folder.run_id)
            continue
        try:
            tables = read_run_folder(folder)
            if tables["runs"].column("run_id")[0].as_py() != folder.run_id:
                raise StoreError(
                    f"{folder.path / 'runs.parquet'}: run_id "
                    f"{tables['runs'].column('run_id')[0].as_py()} differs from its folder name"
                )
            writer.insert_run(folder, tables, report)
        except StoreError as error:
            raise StoreError(
                f"{error}; ingest stopped: run {folder.run_id} and the runs after it were not "
                f"stored ({len(report.added_run_ids)} added before it)"
            ) from None
        present.add(folder.run_id)
        if on_run_added is not None:
            on_run_added(folder.run_id)
    roofline_file = results_dir / ROOFLINE_POINTS_FILE
    if roofline_file.is_file():
        writer.replace_roofline_points(roofline_file, report)


def _results_folder(results_dir: str | Path) -> Path:
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise StoreError(f"no results folder at {results_dir}")
    return results_dir


def ingest(
    db_path: str | Path = DEFAULT_DB,
    results_dir: str | Path = DEFAULT_RESULTS,
    *,
    lock_timeout_s: float = 10.0,
    on_run_added: Callable[[str], None] | None = None,
) -> IngestReport:
    """Add the runs under `results_dir` that the store lacks, then the roofline points.

    Idempotent; one transaction per run. Stops at the first bad file (StoreError naming it); the
    runs added before it stay. Waits up to `lock_timeout_s` for another process that holds the
    file, then raises StoreLocked. `on_run_added(run_id)` is called after each run is committed.
    """
    db_path, results_dir = Path(db_path), _results_folder(results_dir)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    report = IngestReport(db_path)
    connection = _open(db_path, read_only=False, lock_timeout_s=lock_timeout_s, action="ingest")
    try:
        _ingest_with(_Writer(connection), results_dir, report, on_run_added)
    finally:
        connection.close()
    return report


def rebuild(
    db_path: str | Path = DEFAULT_DB,
    results_dir: str | Path = DEFAULT_RESULTS,
    *,
    lock_timeout_s: float = 10.0,
) -> IngestReport:
    """Recreate the store from the kept files; on any failure the old store stays as it was.

    The new store is written to a hidden file next to the old one and renamed over it. The old
    file is held open meanwhile so that no ingest writes to it and gets lost.
    """
    db_path, results_dir = Path(db_path), _results_folder(results_dir)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    new_path = db_path.with_name(f".{db_path.name}.rebuild-{os.getpid()}")
    old = None
    if db_path.exists():
        try:
            old = _open(db_path, read_only=False, lock_timeout_s=lock_timeout_s, action="rebuild")
        except StoreLocked:
            raise
        except StoreError:
            old = None  # an unreadable store is what rebuild is for
    try:
        for path in _with_wal(new_path):
            path.unlink(missing_ok=True)
        report = IngestReport(db_path)
        connection = _open(new_path, read_only=False, lock_timeout_s=0, action="rebuild")
        try:
            _ingest_with(_Writer(connection), results_dir, report, None)
            connection.execute("CHECKPOINT")  # everything in the file, no WAL to carry along
        finally:
            connection.close()
        if old is not None:
            old.close()
            old = None
        # A WAL left by a killed writer of the old file would be replayed onto the new one.
        _wal(db_path).unlink(missing_ok=True)
        os.replace(new_path, db_path)
    except BaseException:
        for path in _with_wal(new_path):
            path.unlink(missing_ok=True)
        raise
    finally:
        if old is not None:
            old.close()
    return report


def _wal(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".wal")


def _with_wal(db_path: Path) -> Iterator[Path]:
    yield db_path
    yield _wal(db_path)
