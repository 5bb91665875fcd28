"""The store's schema version (store.versions): a store of an older rooflab opens and is migrated
at its first write, a store or run folder of a newer one is refused in one line. The old store is
tests/fixtures/store/schema5.duckdb.gz, written by rooflab at schema version 5 (README there)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rooflab.store.connection as connection_module
import rooflab.store.versions as versions
import rooflab.store.views as views_module
from rooflab.backends.cpu import CpuBackend
from rooflab.experiments.gemm import run_gemm_sweep
from rooflab.experiments.timing import TimingSettings
from rooflab.records import POINT_VIEWS, SCHEMA_VERSION, TABLES, write_run
from rooflab.store import RunsSetAside, StoreError, ingest, query, rebuild
from rooflab.store.connection import VERSION_TABLE, StoreTooNew
from tests.conftest import UNJUDGED, run_rooflab
from tests.store_runs import rows

FIXTURES = Path(__file__).parent / "fixtures" / "store"
FIXTURE = FIXTURES / "schema5.duckdb.gz"
SWEEP = {"m": [1], "n": [16], "k": [16], "dtypes": ["fp64"], "layouts": ["nn"]}
SWEEP |= {"cache_states": ["warm"], "seed": 0}


def old_store(tmp_path: Path, fixture: Path = FIXTURE) -> Path:
    db = tmp_path / "old.duckdb"
    with gzip.open(fixture) as packed, db.open("wb") as out:
        shutil.copyfileobj(packed, out)
    return db


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """A results folder with one real, tiny GEMM run of this rooflab."""
    timing = TimingSettings.from_config(
        {"warmup_s": 0.01, "min_time_s": 0.01, "min_samples": 3, "rounds": 1}, UNJUDGED
    )
    tables = run_gemm_sweep(CpuBackend(), "v", SWEEP, timing)
    results = tmp_path_factory.mktemp("versions") / "results"
    write_run(results / "sweeps" / "v" / "runs", tables["runs"][0]["run_id"], tables)
    return results


def version_of(db: Path) -> int:
    (row,) = rows(db, f"SELECT schema_version FROM {VERSION_TABLE}")
    return row["schema_version"]


def newer_refused(path: Path) -> str:
    """What rooflab says of a store or run file one schema version past its own."""
    return (
        f"{path}: written by a newer rooflab (schema version {SCHEMA_VERSION + 1}; this rooflab "
        f"reads versions up to {SCHEMA_VERSION}): upgrade rooflab to read it"
    )


def test_a_store_of_schema_5_opens_then_is_brought_up_to_date_by_its_next_ingest(
    tmp_path, measured
):
    db = old_store(tmp_path)
    with duckdb.connect(str(db), read_only=True) as raw:
        tables = {row[0] for row in raw.execute("SHOW TABLES").fetchall()}
        assert VERSION_TABLE not in tables  # written before the store kept its version
        (old_run,) = raw.execute("SELECT run_id FROM runs WHERE schema_version = 5").fetchall()
        old_points = raw.sql("SELECT * FROM gemm_points ORDER BY ALL").to_arrow_table()
    assert "gemm_points" in tables and "timed_points" not in tables and old_points.num_rows == 8
    # an older store opens for reading as it is
    assert [r["run_id"] for r in rows(db, "SELECT run_id FROM runs")] == [old_run[0]]
    report = ingest(db, measured)
    assert len(report.added_run_ids) == 1
    assert version_of(db) == SCHEMA_VERSION
    runs = rows(db, "SELECT run_id, schema_version FROM runs ORDER BY run_id")
    assert {r["run_id"] for r in runs} == {old_run[0], *report.added_run_ids}
    for name, schema in TABLES.items():  # every table has every column of this rooflab
        have = {r["column_name"] for r in rows(db, f"DESCRIBE {name}")}
        assert set(schema.empty_table().column_names) <= have, name
    # 6: its GEMM points moved into timed_points (kind gemm); gemm_points is a view of them with
    # the same columns and values
    columns = ", ".join(old_points.column_names)
    where = f"WHERE run_id = '{old_run[0]}' ORDER BY ALL"
    moved = query(db, f"SELECT {columns} FROM gemm_points {where}")
    assert moved.to_pylist() == old_points.to_pylist()
    kinds = rows(db, "SELECT kind, count(*) AS n FROM timed_points GROUP BY kind")
    assert kinds == [{"kind": "gemm", "n": 8 + 1}]  # and the new run's one point
    assert rows(db, "SELECT count(*) AS n FROM workload_points") == [{"n": 0}]
    views = query(db, "SELECT view_name FROM duckdb_views() WHERE NOT internal").column(0)
    assert {"gemm_points", "workload_points"} <= set(views.to_pylist())


def test_a_store_of_schema_6_takes_new_runs_without_a_migration_step(tmp_path, measured):
    db = old_store(tmp_path, FIXTURES / "schema6.duckdb.gz")
    assert version_of(db) == 6
    before = rows(db, "SELECT * FROM gemm_points ORDER BY ALL")
    assert len(before) == 8
    report = ingest(db, measured)
    assert len(report.added_run_ids) == 1 and version_of(db) == SCHEMA_VERSION
    after = rows(db, "SELECT * FROM gemm_points ORDER BY ALL")
    kept = [row for row in after if row["run_id"] not in report.added_run_ids]
    # its rows as they were, in the columns they had; a column added since is null in them
    assert [{column: row[column] for column in before[0]} for row in kept] == before
    assert all(row["footprint_bytes"] is None for row in kept)


def test_a_view_is_made_anew_where_its_sql_is_not_this_rooflabs_and_only_there(
    tmp_path, measured, monkeypatch
):
    db = tmp_path / "rooflab.duckdb"
    ingest(db, measured)
    with duckdb.connect(str(db)) as raw:
        (digest,) = raw.execute(
            "SELECT comment FROM duckdb_views() WHERE view_name = 'imported_top_operators'"
        ).fetchone()
        # a view an older rooflab, or a user, made: no digest
        raw.execute("CREATE OR REPLACE VIEW latest_ceilings AS SELECT 1 AS old")
        # one that carries the digest of this rooflab's SQL is taken as made from it
        raw.execute("CREATE OR REPLACE VIEW imported_top_operators AS SELECT 3 AS kept")
        raw.execute(f"COMMENT ON VIEW imported_top_operators IS '{digest}'")
    # and a view whose SQL this rooflab changed
    changed = dict(views_module.VIEWS_SQL, run_summary="SELECT 2 AS changed")
    monkeypatch.setattr(views_module, "VIEWS_SQL", changed)
    ingest(db, measured)
    assert rows(db, "SELECT * FROM run_summary") == [{"changed": 2}]
    assert "old" not in query(db, "SELECT * FROM latest_ceilings").column_names
    assert rows(db, "SELECT * FROM imported_top_operators") == [{"kept": 3}]


def test_a_run_folder_written_before_schema_6_is_read_into_timed_points(tmp_path, measured):
    """A run folder of rooflab at schema 5 holds gemm_points.parquet: ingest and rebuild read it
    as timed_points of kind gemm."""
    results = tmp_path / "results"
    shutil.copytree(measured, results)
    (points_file,) = results.glob("sweeps/v/runs/*/timed_points.parquet")
    points = pq.read_table(points_file)
    gemm_columns = POINT_VIEWS["gemm_points"][1]
    pq.write_table(points.select(gemm_columns), points_file.with_name("gemm_points.parquet"))
    points_file.unlink()
    for store in (ingest, rebuild):
        db = tmp_path / f"{store.__name__}.duckdb"
        store(db, results)
        stored = rows(db, "SELECT * FROM timed_points")
        assert [row["kind"] for row in stored] == ["gemm"]
        assert {c: stored[0][c] for c in gemm_columns} == points.select(gemm_columns).to_pylist()[0]


def test_migration_steps_run_once_in_order_up_to_this_version(tmp_path, measured, monkeypatch):
    db = tmp_path / "store.duckdb"
    ingest(db, measured)
    assert version_of(db) == SCHEMA_VERSION
    ran = []
    newer = SCHEMA_VERSION + 2
    for module in (versions, connection_module):
        monkeypatch.setattr(module, "SCHEMA_VERSION", newer)

    def step(version):
        def run(connection):
            ran.append(version)
            (count,) = connection.execute("SELECT count(*) FROM runs").fetchall()[0]
            assert count == 1  # a step sees the store as its version left it

        return run

    monkeypatch.setattr(versions, "MIGRATIONS", {newer: step(newer), newer - 1: step(newer - 1)})
    ingest(db, measured)
    assert ran == [SCHEMA_VERSION + 1, SCHEMA_VERSION + 2] and version_of(db) == newer
    ingest(db, measured)
    assert ran == [SCHEMA_VERSION + 1, SCHEMA_VERSION + 2]  # nothing runs twice

    def failing(connection):
        connection.execute("CREATE TABLE half_done (x INTEGER)")
        raise RuntimeError("step failed")

    monkeypatch.setattr(versions, "MIGRATIONS", {newer + 1: failing})
    for module in (versions, connection_module):
        monkeypatch.setattr(module, "SCHEMA_VERSION", newer + 1)
    with pytest.raises(RuntimeError, match="step failed"):
        ingest(db, measured)
    assert version_of(db) == newer  # all of a migration or none of it
    assert not query(db, "SELECT * FROM duckdb_tables() WHERE table_name = 'half_done'")


def test_a_store_of_a_newer_rooflab_is_refused_in_one_line_and_left_as_it_is(tmp_path, measured):
    db = tmp_path / "store.duckdb"
    ingest(db, measured)
    with duckdb.connect(str(db)) as raw:
        raw.execute(f"UPDATE {VERSION_TABLE} SET schema_version = {SCHEMA_VERSION + 1}")
    before = db.read_bytes()
    says = newer_refused(db)
    for call in (lambda: query(db, "SELECT 1"), lambda: ingest(db, measured)):
        with pytest.raises(StoreTooNew) as refused:
            call()
        assert str(refused.value) == says
    with pytest.raises(StoreTooNew):
        rebuild(db, measured)
    assert db.read_bytes() == before
    result = run_rooflab("query", "SELECT count(*) FROM runs", "--db", db)
    assert result.returncode == 2 and result.stderr == f"rooflab: error: {says}\n"
    assert issubclass(StoreTooNew, StoreError)


def test_a_run_folder_of_a_newer_rooflab_is_set_aside_naming_its_version(tmp_path, measured):
    results = tmp_path / "results"
    shutil.copytree(measured, results)
    (runs_file,) = results.glob("sweeps/v/runs/*/runs.parquet")
    runs = pq.read_table(runs_file)
    column = runs.schema.get_field_index("schema_version")
    newer = pa.array([SCHEMA_VERSION + 1], type=runs.schema.field(column).type)
    pq.write_table(runs.set_column(column, "schema_version", newer), runs_file)
    with pytest.raises(RunsSetAside) as set_aside:
        ingest(tmp_path / "store.duckdb", results)
    ((run_id, reason),) = set_aside.value.report.bad_runs
    assert run_id == runs_file.parent.name
    assert reason == newer_refused(runs_file)
    assert rows(tmp_path / "store.duckdb", "SELECT count(*) AS n FROM runs") == [{"n": 0}]
