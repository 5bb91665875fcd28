"""Writing the store: `ingest` and `rebuild`, the only code that writes DuckDB.

`ingest` copies the Parquet files the measuring jobs wrote into the store. Measured runs are the
non-hidden folders under the results folder that hold `runs.parquet`; each is inserted in one
transaction (all of its tables or none), and a run already in `runs` is skipped, so ingesting twice
adds nothing and a killed ingest leaves no partial run. Every file of a run is read and checked in
full before anything of it is written. A run with a bad file (truncated, corrupt, of another run,
or not fitting the store's tables) is set aside: nothing of it is stored, its files stay as they
are, and the report names it with the file and the reason (IngestReport.bad_runs); every other run
is stored. A failure of the store itself (disk full, out of memory) stops the ingest; a full disk
and a damaged block are said in one line naming the file (store.integrity). Ingest and rebuild
say they succeeded only after every table of the store they wrote has been read back whole.

The derived tables the roofline step writes (`roofline/<table>.parquet`, records.DERIVED_TABLES)
replace, in one transaction, the store's derived rows of the runs that step read (its
`roofline_inputs`); rows of runs it did not read stay. A bad derived file is reported
(IngestReport.bad_derived) and none of them replaces anything: the store keeps the earlier ones.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rooflab.records import (
    DERIVED_TABLES,
    RunFolder,
    RunFolderError,
    conform_types,
    find_run_folders,
    read_run_folder,
    read_table_file,
    run_ids_of,
)
from rooflab.store.comparisons import (
    STORE_TABLES,
    ensure_comparisons_table,
    refresh_comparisons,
)
from rooflab.store.connection import (
    DEFAULT_DB,
    StoreError,
    StoreLocked,
    StoreTooNew,
    _one_line,
    _open,
    refuse_newer,
    stored_version,
)
from rooflab.store.integrity import quoted, read_back, store_failures
from rooflab.store.versions import migrate
from rooflab.store.views import VIEWS_SQL, make_views

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

DEFAULT_RESULTS = Path("results")
# What a write of the store that ran out of space leaves (store_failures: one line naming the file)
_INGEST_KEPT = (
    "the runs stored before stay, the others were not stored: free space, then run "
    "`rooflab store ingest` again"
)
_REBUILD_KEPT = "the store is as it was and the new one was removed: free space, then rebuild"
ROOFLINE_FOLDER = Path("roofline")  # the derived tables, <table>.parquet
# Arrow schema -> DuckDB column types: fixed in a process; asking was most of a new store's tables
_COLUMN_TYPES: dict[pa.Schema, list[tuple[str, str]]] = {}


@dataclass
class IngestReport:
    db_path: Path
    added_run_ids: list[str] = field(default_factory=list)
    present_run_ids: list[str] = field(default_factory=list)  # already in the store: skipped
    rows_added: dict[str, int] = field(default_factory=dict)  # per table, over the added runs
    added_columns: list[str] = field(default_factory=list)  # "table.column" of newer schemas
    roofline_run_ids: list[str] = field(default_factory=list)  # derived rows replaced for these
    roofline_rows_removed: int = 0
    roofline_rows_inserted: int = 0
    # Set aside, not stored: (run_id, reason naming the file); the run folders are left as they are.
    bad_runs: list[tuple[str, str]] = field(default_factory=list)
    # (file, reason): a bad derived file; the store's derived rows were not replaced.
    bad_derived: list[tuple[str, str]] = field(default_factory=list)
    # Temporary files of a rebuild that was killed (its process is gone), removed by rebuild.
    stale_removed: list[Path] = field(default_factory=list)

    def set_aside_lines(self) -> list[str]:
        """One line per run or derived file set aside, naming it, the file and the reason."""
        lines = [
            f"run {run_id} set aside, not stored: {reason}" for run_id, reason in self.bad_runs
        ]
        lines += [
            f"derived tables not replaced (the store keeps the earlier ones): {reason}"
            for _, reason in self.bad_derived
        ]
        return lines


class RunsSetAside(StoreError):
    """Ingest or rebuild stored every good run but set some aside (or a derived file); `report`
    says which and why."""

    def __init__(self, report: IngestReport):
        self.report = report
        what = [f"{len(report.bad_runs)} run(s) set aside, not stored"] if report.bad_runs else []
        what += ["the derived tables not replaced"] if report.bad_derived else []
        reasons = "; ".join(reason for _, reason in report.bad_runs + report.bad_derived)
        super().__init__(
            f"{' and '.join(what)}: {reasons} (every other run is stored: "
            f"{len(report.added_run_ids)} added); fix or remove the bad files, then ingest again"
        )


class _BadFile(StoreError):
    """Rows of a file that the store cannot take (not a failure of the store); names `path`."""

    def __init__(self, message: str, path: Path | None = None):
        super().__init__(message)
        self.path = path


# DuckDB errors of the store itself, not of the rows being stored: they stop an ingest.
def _store_failure(error: Exception) -> bool:
    import duckdb

    failures = (
        duckdb.IOException,
        duckdb.OutOfMemoryException,
        duckdb.FatalException,
        duckdb.InternalException,
    )
    return isinstance(error, failures)


class _Writer:
    """A read-write connection with the store's tables and views, inserting runs. A store of an
    older rooflab is migrated first (store.versions), with its tables, in one transaction."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, db_path: Path):
        self.connection = connection
        self.columns: dict[str, set[str]] = {}
        self.transaction(lambda: self._bring_up_to_date(db_path))

    def _bring_up_to_date(self, db_path: Path) -> None:
        # first: a step sees the store as its version left it
        self.ensure_schema(views_anew=bool(migrate(self.connection, db_path)))

    def _load_columns(self) -> None:
        rows = self.connection.execute(
            "SELECT table_name, column_name FROM duckdb_columns() "
            "WHERE database_name = current_database() AND schema_name = 'main'"
        ).fetchall()
        self.columns = {}
        for table_name, column_name in rows:
            self.columns.setdefault(table_name.lower(), set()).add(column_name.lower())

    def _column_types(self, table: pa.Table) -> list[tuple[str, str]]:
        """(name, DuckDB type) of each column of an Arrow table; DuckDB asked once per schema."""
        if table.schema not in _COLUMN_TYPES:
            self.connection.register("_incoming_schema", table.slice(0, 0))
            try:
                described = self.connection.execute("DESCRIBE SELECT * FROM _incoming_schema")
                _COLUMN_TYPES[table.schema] = [(row[0], row[1]) for row in described.fetchall()]
            finally:
                self.connection.unregister("_incoming_schema")
        return _COLUMN_TYPES[table.schema]

    def _create_table(self, name: str, table: pa.Table) -> None:
        columns = [f"{quoted(c)} {t}" for c, t in self._column_types(table)]
        if name == "runs":
            columns.append("PRIMARY KEY (run_id)")  # a second copy of a run cannot get in
        self.connection.execute(f"CREATE TABLE IF NOT EXISTS {quoted(name)} ({', '.join(columns)})")

    def ensure_schema(self, views_anew: bool = False) -> None:
        """Every table and column of records.TABLES (so queries work on an empty store), views.
        `views_anew`: make every view anew (a migration changed the tables they read)."""
        from rooflab.records import TABLES

        self._load_columns()
        added = []
        for name, schema in TABLES.items():
            added += self._fit_columns(name, schema.empty_table())  # an older store grows
        # the store's own table, which view `comparisons` reads
        comparisons = ensure_comparisons_table(
            self.connection, self.columns.get("run_comparisons", set())
        )
        make_views(self.connection, anew=views_anew or comparisons or bool(added))

    def run_ids(self) -> set[str]:
        return {row[0] for row in self.connection.execute("SELECT run_id FROM runs").fetchall()}

    def _fit_columns(self, name: str, table: pa.Table) -> list[str]:
        """Create the table or add the columns it lacks (a newer schema); the names added."""
        if name not in self.columns:
            self._create_table(name, table)
            self.columns[name] = {c.lower() for c in table.column_names}
            return [f"{name}.{c}" for c in table.column_names]
        if {c.lower() for c in table.column_names} <= self.columns[name]:
            return []  # nothing to add: no need for the columns' types
        added = []
        for column, duckdb_type in self._column_types(table):
            if column.lower() not in self.columns[name]:
                self.connection.execute(
                    f"ALTER TABLE {quoted(name)} ADD COLUMN {quoted(column)} {duckdb_type}"
                )
                self.columns[name].add(column.lower())
                added.append(f"{name}.{column}")
        return added

    def _insert(self, name: str, table: pa.Table) -> None:
        self.connection.register("_incoming", table)
        try:
            self.connection.execute(f"INSERT INTO {quoted(name)} BY NAME SELECT * FROM _incoming")
        finally:
            self.connection.unregister("_incoming")

    def transaction(self, work: Callable[[], None]) -> None:
        """Run `work` in one transaction: all of it is stored, or none."""
        self.connection.execute("BEGIN TRANSACTION")
        try:
            work()
            self.connection.execute("COMMIT")
        except BaseException:
            import duckdb

            # DuckDB may have ended it already (a failed write, a full disk): nothing to undo
            with contextlib.suppress(duckdb.TransactionException):
                self.connection.execute("ROLLBACK")
            self._load_columns()  # columns added in the transaction are gone again
            raise

    def insert_run(self, folder: RunFolder, tables: dict[str, pa.Table], report) -> None:
        import duckdb

        added_columns: list[str] = []

        def work() -> None:
            for name, table in tables.items():
                try:
                    added_columns.extend(self._fit_columns(name, table))
                    self._insert(name, table)
                except duckdb.Error as error:
                    kind = StoreError if _store_failure(error) else _BadFile
                    raise kind(
                        f"{folder.path / (name + '.parquet')}: cannot store it in table {name} "
                        f"({_one_line(error)})"
                    ) from None

        self.transaction(work)
        report.added_run_ids.append(folder.run_id)
        report.added_columns.extend(added_columns)
        for name, table in tables.items():
            report.rows_added[name] = report.rows_added.get(name, 0) + table.num_rows

    def replace_derived(self, folder: Path, report: IngestReport) -> None:
        """In one transaction, per derived table (records.DERIVED_TABLES): delete the store's rows
        of the runs the roofline step read, then insert its file's rows. A bad file is reported
        (report.bad_derived) and nothing is replaced: the files are one step's, kept together."""
        import duckdb

        tables = {}
        for name in DERIVED_TABLES:
            path = folder / f"{name}.parquet"
            if not path.is_file():
                continue
            try:
                tables[name] = (path, conform_types(path, name, read_table_file(path)))
            except RunFolderError as error:
                report.bad_derived.append((str(path), str(error)))
                continue
            if tables[name][1].column("run_id").null_count:
                report.bad_derived.append((str(path), f"{path}: rows without a run_id"))
        if report.bad_derived:
            return
        # The runs read (roofline_inputs; an older roofline step wrote only points): their derived
        # rows are replaced whole; rows of other runs stay.
        run_ids = sorted(set().union(*(run_ids_of(table) for _, table in tables.values())))
        removed = {}

        def work() -> None:
            for name, (path, table) in tables.items():
                try:
                    self._fit_columns(name, table)
                    (removed[name],) = self.connection.execute(
                        f"DELETE FROM {quoted(name)} WHERE list_contains(?, run_id)", [run_ids]
                    ).fetchone()
                    self._insert(name, table)
                except duckdb.Error as error:
                    message = f"{path}: cannot store it in table {name} ({_one_line(error)})"
                    if _store_failure(error):
                        raise StoreError(message) from None
                    raise _BadFile(message, path) from None

        try:
            self.transaction(work)
        except _BadFile as error:
            report.bad_derived.append((str(error.path), str(error)))
            return
        report.roofline_run_ids = run_ids
        report.roofline_rows_removed = removed.get("roofline_points", 0)
        if "roofline_points" in tables:
            report.roofline_rows_inserted = tables["roofline_points"][1].num_rows


def _run_version(folder: RunFolder) -> int | None:
    """The schema version its runs row names (None: unreadable; read_run_folder says why)."""
    import pyarrow.parquet as pq

    try:
        column = pq.read_table(folder.path / "runs.parquet", columns=["schema_version"])[0]
        return column[0].as_py() if len(column) else None
    except Exception:  # any unreadable file: read_run_folder says why
        return None


def _ingest_with(
    writer: _Writer,
    results_dir: Path,
    report: IngestReport,
    on_run_added: Callable[[str], None] | None,
) -> None:
    """Store each run the store lacks, setting aside (report.bad_runs) those with a bad file."""
    present = writer.run_ids()
    for folder in find_run_folders(results_dir):
        if folder.run_id in present:
            report.present_run_ids.append(folder.run_id)
            continue
        try:
            refuse_newer(_run_version(folder), folder.path / "runs.parquet")
            tables = read_run_folder(folder, reserved={*VIEWS_SQL, *STORE_TABLES})
            if tables["runs"].column("run_id")[0].as_py() != folder.run_id:
                raise _BadFile(
                    f"{folder.path / 'runs.parquet'}: run_id "
                    f"{tables['runs'].column('run_id')[0].as_py()} differs from its folder name"
                )
            writer.insert_run(folder, tables, report)
        except (_BadFile, RunFolderError, StoreTooNew) as error:
            report.bad_runs.append((folder.run_id, str(error)))
            continue
        except StoreError as error:
            raise StoreError(
                f"{error}; ingest stopped: run {folder.run_id} and the runs after it were not "
                f"stored ({len(report.added_run_ids)} added before it)"
            ) from None
        present.add(folder.run_id)
        if on_run_added is not None:
            on_run_added(folder.run_id)
    writer.replace_derived(results_dir / ROOFLINE_FOLDER, report)
    # every key's newest run against the one before it, while both runs' samples are here
    writer.transaction(lambda: refresh_comparisons(writer.connection))


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
    strict: bool = True,
) -> IngestReport:
    """Add the runs under `results_dir` that the store lacks, then the roofline points.

    Idempotent; one transaction per run. A run with a bad file is set aside (report.bad_runs,
    naming the file and the reason) and every other run is stored; then, if `strict`, RunsSetAside
    (carrying the report) is raised, so that a caller that ignores the report still fails. Waits up
    to `lock_timeout_s` for another process that holds the file, then raises StoreLocked.
    `on_run_added(run_id)` is called after each run is committed. Then every table is read back
    whole (read_back): StoreDamaged names a table that cannot be; DiskFull a store that ran out of
    space (the runs committed before stay).
    """
    db_path, results_dir = Path(db_path), _results_folder(results_dir)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    report = IngestReport(db_path)
    with store_failures(db_path, "runs into it", _INGEST_KEPT, lock_timeout_s=lock_timeout_s):
        connection = _open(db_path, read_only=False, lock_timeout_s=lock_timeout_s, action="ingest")
        try:
            _ingest_with(_Writer(connection, db_path), results_dir, report, on_run_added)
        finally:
            connection.close()
        read_back(db_path, lock_timeout_s=lock_timeout_s)  # succeeded: every table reads whole
    return _checked(report, strict)


def _checked(report: IngestReport, strict: bool) -> IngestReport:
    if strict and (report.bad_runs or report.bad_derived):
        raise RunsSetAside(report)
    return report


def rebuild(
    db_path: str | Path = DEFAULT_DB,
    results_dir: str | Path = DEFAULT_RESULTS,
    *,
    lock_timeout_s: float = 10.0,
    strict: bool = True,
) -> IngestReport:
    """Recreate the store from the kept files; on any failure the old store stays as it was.

    The new store is written to a hidden file next to the old one and renamed over it. The old
    file is held open meanwhile so that no ingest writes to it and gets lost. Runs with a bad file
    are set aside as by `ingest` (not in the new store; RunsSetAside after the rename if `strict`).
    Temporary files of an earlier rebuild whose process is gone are removed first
    (report.stale_removed).
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
    if old is not None:  # a newer rooflab's store: rebuilt here it would lose what it knows
        try:
            refuse_newer(stored_version(old), db_path)
        except StoreTooNew:
            old.close()
            raise
    report = IngestReport(db_path)
    try:
        report.stale_removed = _remove_stale_rebuilds(db_path)
        for path in _with_wal(new_path):
            path.unlink(missing_ok=True)
        with store_failures(new_path, "the new store", _REBUILD_KEPT, lock_timeout_s=0):
            connection = _open(new_path, read_only=False, lock_timeout_s=0, action="rebuild")
            try:
                _ingest_with(_Writer(connection, db_path), results_dir, report, None)
                connection.execute("CHECKPOINT")  # everything in the file, no WAL to carry along
            finally:
                connection.close()
            read_back(new_path, lock_timeout_s=0)  # the new store reads whole before it replaces
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
    return _checked(report, strict)


def _remove_stale_rebuilds(db_path: Path) -> list[Path]:
    """Remove `.<name>.rebuild-<pid>` and its WAL where no process <pid> is alive (a killed
    rebuild); the paths removed."""
    pattern = re.compile(re.escape(f".{db_path.name}.rebuild-") + r"(\d+)(\.wal)?")
    removed = []
    for path in sorted(db_path.parent.iterdir()):
        match = pattern.fullmatch(path.name)
        if match and path.is_file() and not _alive(int(match.group(1))):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True  # this rebuild's own file: removed by the rebuild itself
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    except (OverflowError, OSError):
        return False
    return True


def _wal(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".wal")


def _with_wal(db_path: Path) -> Iterator[Path]:
    yield db_path
    yield _wal(db_path)
