"""A run folder: written whole or not at all, and read back checked in full.

Every row carries `run_id`; the `runs` row carries `schema_version`, machine identity, commit and
dirty flag. Measurements are held in memory and written once, at the end. A run folder appears
whole or not at all: files are written under a hidden `.<run_id>.partial/` folder that is renamed
into place last; readers skip hidden folders, so a killed job leaves nothing they could mistake for
a result.

Reading a run folder back (find_run_folders, read_run_folder: what ingest and rebuild store) checks
every file in full first, so a truncated or foreign file is named before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rooflab.records.tables import DERIVED_TABLES, POINT_VIEWS, TABLES
from rooflab.records.writable import space_for


class RecordError(ValueError):
    """Rows that do not fit the table they are written to."""


class RunFolderError(RecordError):
    """A kept run folder that cannot be read back whole; the message names the file."""


def new_run_id(now: datetime | None = None) -> str:
    """Sortable by start time, unique across machines."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%S}Z-{uuid.uuid4().hex[:8]}"


def utc_now() -> datetime:
    return datetime.now(UTC)


def stable_hash(value: object) -> str:
    """A short hash of JSON-able settings (key order does not matter)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def git_state(path: Path | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the rooflab checkout that measured; (None, None) outside git."""
    path = path or Path(__file__).resolve().parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=path, capture_output=True, text=True, check=True, timeout=10
        ).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        status = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())


def to_table(name: str, rows: list[dict]) -> pa.Table:
    schema = TABLES[name]
    extra = {key for row in rows for key in row} - set(schema.names)
    if extra:
        raise RecordError(f"table {name}: unknown column(s) {', '.join(sorted(extra))}")
    columns = {field.name: [row.get(field.name) for row in rows] for field in schema}
    try:
        return pa.table(columns, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise RecordError(f"table {name}: {error}") from None


def write_run(out_dir: str | Path, run_id: str, tables: dict[str, list[dict]]) -> Path:
    """Write `tables` as `out_dir/<run_id>/<table>.parquet`, all or nothing."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    arrow_tables = {name: to_table(name, rows) for name, rows in tables.items()}  # fail early
    final = out_dir / run_id
    partial = out_dir / f".{run_id}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    # a full disk: one line naming the run folder, and no half-written `.partial` left behind
    with space_for(final, "the run's tables", partial=[partial]):
        partial.mkdir()
        for name, table in arrow_tables.items():
            path = partial / f"{name}.parquet"
            pq.write_table(table, path)
            with path.open("rb") as stream:
                os.fsync(stream.fileno())
    os.rename(partial, final)  # atomic on one filesystem: the run appears whole
    _fsync_dir(out_dir)
    return final


def _fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def read_run(run_dir: str | Path) -> dict[str, pa.Table]:
    run_dir = Path(run_dir)
    tables = {path.stem: pq.read_table(path) for path in sorted(run_dir.glob("*.parquet"))}
    return with_timed_points(run_dir, tables)


def read_runs(run_dirs: Iterable[str | Path]) -> Iterator[tuple[dict, dict[str, pa.Table]]]:
    """Each run folder's one `runs` row and its tables (read_run), in turn."""
    for run_dir in run_dirs:
        tables = read_run(run_dir)
        (run,) = tables["runs"].to_pylist()
        yield run, tables


def with_timed_points(run_dir: Path, tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """A run folder written before schema 6 holds gemm_points or workload_points: read back as
    the one timed_points table, each row with its kind."""
    import pyarrow as pa

    legacy = {n: tables.pop(n) for n in POINT_VIEWS if n in tables}
    if legacy:
        kinds = [
            table.append_column(
                "kind", pa.array([POINT_VIEWS[name][0]] * table.num_rows, pa.string())
            )
            for name, table in legacy.items()
        ]
        merged = pa.concat_tables(
            [*kinds, TABLES["timed_points"].empty_table()], promote_options="permissive"
        )
        tables["timed_points"] = conform_types(
            run_dir / "timed_points.parquet", "timed_points", merged
        )
    return tables


# -- reading run folders back (ingest, rebuild) --------------------------------------------------

# A table of a newer rooflab that this one does not know is stored under its own name.
_TABLE_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass
class RunFolder:
    run_id: str  # the folder name: write_run names the folder after the run
    path: Path


# -- reading and checking the files ---------------------------------------------------------------


def find_run_folders(results_dir: str | Path) -> list[RunFolder]:
    """Run folders under `results_dir`, oldest first; hidden folders (partial writes) skipped."""
    folders = []
    for dirpath, dirnames, filenames in os.walk(results_dir):
        dirnames[:] = sorted(name for name in dirnames if not name.startswith("."))
        if "runs.parquet" in filenames:
            folders.append(RunFolder(Path(dirpath).name, Path(dirpath)))
            dirnames[:] = []  # a run folder holds tables, not runs
    return sorted(folders, key=lambda folder: (folder.run_id, str(folder.path)))


def read_table_file(path: Path) -> pa.Table:
    """The whole file, decoded: a truncated or corrupt file fails here, before any write."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as error:
        reason = _one_line(error).replace(f"Could not open Parquet input source '{path}': ", "")
        raise RunFolderError(f"{path}: cannot read this Parquet file ({reason})") from None


def conform_types(path: Path, name: str, table: pa.Table) -> pa.Table:
    """Cast the columns that records.TABLES knows to their types; others pass through."""
    import pyarrow as pa

    if "run_id" not in table.column_names:
        raise RunFolderError(f"{path}: no run_id column")
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
                raise RunFolderError(
                    f"{path}: column {column_name} does not fit {wanted} ({_one_line(error)})"
                ) from None
    return table


def run_ids_of(table: pa.Table) -> set:
    import pyarrow.compute as pc

    return set(pc.unique(table.column("run_id")).to_pylist())


def read_run_folder(folder: RunFolder, reserved: Collection[str] = ()) -> dict[str, pa.Table]:
    """Every table of a run, read in full and checked: one runs row, every row of this run."""
    tables = {}
    for path in sorted(folder.path.glob("*.parquet")):
        name = path.stem
        allowed = name in POINT_VIEWS or name not in reserved  # a table before schema 6
        if name in DERIVED_TABLES or not _TABLE_NAME.fullmatch(name) or not allowed:
            raise RunFolderError(f"{path}: a run folder cannot hold a table named {name!r}")
        table = conform_types(path, name, read_table_file(path))
        if table.num_rows and run_ids_of(table) != {folder.run_id}:
            others = sorted(map(str, run_ids_of(table) - {folder.run_id}))
            raise RunFolderError(
                f"{path}: rows of run(s) {', '.join(others)} in the folder of run {folder.run_id}"
            )
        tables[name] = table
    if "runs" not in tables:  # removed since the folder was found
        raise RunFolderError(f"{folder.path / 'runs.parquet'}: no such file")
    if tables["runs"].num_rows != 1:
        raise RunFolderError(
            f"{folder.path / 'runs.parquet'}: {tables['runs'].num_rows} rows, expected one"
        )
    tables = with_timed_points(folder.path, tables)
    order = [name for name in TABLES if name in tables] + sorted(set(tables) - set(TABLES))
    return {name: tables[name] for name in order}


# -- connections ----------------------------------------------------------------------------------


def _one_line(error: Exception) -> str:
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip())
