"""The DuckDB store: real Parquet runs written by records.write_run, real DuckDB files."""

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rooflab import store
from rooflab.cli import main
from rooflab.records import MEASURED_TABLES, POINT_VIEWS, TABLES
from rooflab.roofline import build_analysis, build_points, write_analysis
from rooflab.store import (
    QueryError,
    RunsSetAside,
    StoreError,
    StoreLocked,
    connect_read_only,
    ingest,
    query,
    rebuild,
    writer,
)
from rooflab.store.comparisons import STORE_TABLES
from tests.conftest import run_rooflab
from tests.store_runs import (
    T0,
    ceilings_run,
    file_row_counts,
    gemm_run,
    rows,
    store_row_counts,
    two_machines,
    write_roofline_points,
)

REPO = Path(__file__).resolve().parents[1]


# -- realistic runs -----------------------------------------------------------------------------


def big_gemm_run(out, started_at, n_samples_rows):
    """A GEMM run whose samples table is large (written with pyarrow: faster than row dicts)."""
    run_dir = gemm_run(out, started_at=started_at, n_samples=1)
    run_id = run_dir.name
    samples = pa.table(
        {
            "run_id": pa.repeat(run_id, n_samples_rows),
            "config_id": pa.repeat("decode/fp32/nn/m1_n64_k64", n_samples_rows),
            "cache_state": pa.repeat("warm", n_samples_rows),
            "sample_idx": np.arange(n_samples_rows, dtype=np.int64),
            "seconds": np.full(n_samples_rows, 1e-5),
            "clock_mhz": np.full(n_samples_rows, 3000.0),
            "amount": np.full(n_samples_rows, 2.0 * 64 * 64),
            "amount_unit": pa.repeat("FLOP", n_samples_rows),
            "wait_s": np.zeros(n_samples_rows),
            "cpu_s": np.full(n_samples_rows, 1e-5),
            "involuntary_switches": np.zeros(n_samples_rows, dtype=np.int64),
            "disturbed": np.zeros(n_samples_rows, dtype=bool),
            "round": np.zeros(n_samples_rows, dtype=np.int64),
        },
        schema=TABLES["samples"],
    )
    pq.write_table(samples, run_dir / "samples.parquet")
    return run_dir


# -- helpers --------------------------------------------------------------------------------------


@pytest.fixture
def results(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    return folder


@pytest.fixture
def db(results, empty_store):
    """results/rooflab.duckdb: a store with no runs yet (conftest's empty one, copied)."""
    return Path(shutil.copyfile(empty_store, results / "rooflab.duckdb"))


@contextlib.contextmanager
def hold_store(db, *, read_only, seconds=30.0) -> Iterator[subprocess.Popen]:
    """Another process with the store open, as a user's duckdb shell would have it (killed on
    leaving the block)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; "
            f"c = duckdb.connect(sys.argv[1], read_only={read_only}); c.execute('SELECT 1'); "
            f"print('locked', flush=True); time.sleep({seconds})",
            str(db),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def fail_after_storing_samples(patch: pytest.MonkeyPatch) -> None:
    """The store's writer fails (a full disk) right after it inserts a run's samples: its runs,
    conditions and samples are in by then."""
    real_insert = writer._Writer._insert

    def insert_then_fail(self, name, table):
        real_insert(self, name, table)
        if name == "samples":
            raise duckdb.IOException("disk full")

    patch.setattr(writer._Writer, "_insert", insert_then_fail)


# -- ingest ---------------------------------------------------------------------------------------


def test_empty_store_has_every_table_and_view(results):
    db = results / "new.duckdb"  # made here, from nothing
    report = ingest(db, results)
    assert report.added_run_ids == [] and report.present_run_ids == []
    with duckdb.connect(str(db), read_only=True) as connection:  # one connection, 60 queries
        for name in [*TABLES, *store.VIEWS_SQL]:
            assert connection.execute(f"SELECT count(*) FROM {name}").fetchone() == (0,), name
    columns = query(db, "SELECT * FROM gemm_points").column_names
    assert columns == POINT_VIEWS["gemm_points"][1]  # the table it was until schema 6
    assert query(db, "SELECT * FROM timed_points").column_names == TABLES["timed_points"].names


def test_ingest_twice_adds_nothing(results, db):
    run_dirs = two_machines(results)
    first = ingest(db, results)
    assert sorted(first.added_run_ids) == sorted(d.name for d in run_dirs)
    expected = file_row_counts(run_dirs)
    assert store_row_counts(db) == expected
    assert first.rows_added == {k: v for k, v in expected.items() if k in first.rows_added}
    second = ingest(db, results)
    assert second.added_run_ids == []
    assert sorted(second.present_run_ids) == sorted(first.added_run_ids)
    assert store_row_counts(db) == expected
    # types come through: timestamps with time zone, booleans
    (run,) = rows(db, f"SELECT * FROM runs WHERE run_id = '{run_dirs[0].name}'")
    assert run["started_at"] == T0 and run["git_dirty"] is False


def test_rerun_of_a_sweep_is_kept_and_latest_gemm_points_picks_it(results, db):
    older = gemm_run(results, started_at=T0, median_scale=2.0)
    other_machine = gemm_run(results, machine_id="m-beta", started_at=T0, median_scale=5.0)
    ingest(db, results)
    newer = gemm_run(results, started_at=T0 + timedelta(days=1), median_scale=1.0)
    assert ingest(db, results).added_run_ids == [newer.name]
    runs = rows(db, "SELECT run_id FROM runs WHERE sweep = 'decode' ORDER BY started_at")
    assert {r["run_id"] for r in runs} == {older.name, newer.name, other_machine.name}
    latest = rows(
        db,
        "SELECT machine_id, run_id, config_id, cache_state, median_s, host, device_name, "
        "started_at FROM latest_gemm_points ORDER BY machine_id, config_id, cache_state",
    )
    alpha = [r for r in latest if r["machine_id"] == "m-alpha"]
    beta = [r for r in latest if r["machine_id"] == "m-beta"]
    assert len(alpha) == len(beta) == 4  # 2 timed configurations × 2 cache states
    assert {r["run_id"] for r in alpha} == {newer.name}
    assert {r["run_id"] for r in beta} == {other_machine.name}
    point = next(r for r in alpha if r["config_id"].endswith("m32_n64_k64"))
    assert point["median_s"] == pytest.approx(32e-5)
    assert point["host"] == "alpha" and point["started_at"] == T0 + timedelta(days=1)


def test_latest_ceilings_keeps_machines_apart(results, db):
    ceilings_run(results, machine_id="m-alpha", started_at=T0, dram_b_per_s=40e9)
    newest_alpha = ceilings_run(results, machine_id="m-alpha", started_at=T0 + timedelta(hours=1))
    beta = ceilings_run(results, machine_id="m-beta", dram_b_per_s=80e9)
    gemm_run(results, machine_id="m-alpha", started_at=T0 + timedelta(hours=2))  # not ceilings
    ingest(db, results)
    latest = rows(
        db,
        "SELECT machine_id, run_id, host, device_name, value FROM latest_ceilings "
        "WHERE name = 'DRAM' ORDER BY machine_id",
    )
    assert [(r["machine_id"], r["run_id"], r["value"]) for r in latest] == [
        ("m-alpha", newest_alpha.name, 50e9),
        ("m-beta", beta.name, 80e9),
    ]
    assert latest[1]["device_name"] == "Intel Xeon 8480+"
    per_machine = rows(db, "SELECT machine_id, count(*) AS n FROM latest_ceilings GROUP BY 1")
    assert sorted((r["machine_id"], r["n"]) for r in per_machine) == [("m-alpha", 4), ("m-beta", 4)]
    machines = rows(db, "SELECT * FROM machine_summary ORDER BY machine_id")
    assert [
        (m["machine_id"], m["n_runs"], m["n_ceilings_runs"], m["n_gemm_runs"]) for m in machines
    ] == [("m-alpha", 3, 2, 1), ("m-beta", 1, 1, 0)]
    assert machines[0]["latest_ceilings_run"] == newest_alpha.name
    assert machines[0]["last_started_at"] == T0 + timedelta(hours=2)


def test_run_summary_has_one_row_per_run(results, db):
    gemm = gemm_run(results, n_samples=5)
    ceilings = ceilings_run(results, started_at=T0 + timedelta(hours=1))
    ingest(db, results)
    summary = {r["run_id"]: r for r in rows(db, "SELECT * FROM run_summary")}
    assert set(summary) == {gemm.name, ceilings.name}
    g = summary[gemm.name]
    assert g["kind"] == "gemm" and g["sweep"] == "decode" and g["backend"] == "cpu"
    assert g["cache_states"] == "cold,warm"
    # conditions in GHz (2.9 .. 3.1) and per-sample clocks in MHz (2950 .. 2954), all in MHz
    assert g["clock_min_mhz"] == pytest.approx(2900.0)
    assert g["clock_max_mhz"] == pytest.approx(3100.0)
    assert (g["n_gemm_points"], g["n_noisy"], g["n_failed_correctness"]) == (4, 2, 1)
    assert g["git_commit"] == "abc123def4567890" and g["git_dirty"] is False
    c = summary[ceilings.name]
    assert (c["kind"], c["cache_states"], c["n_gemm_points"]) == ("ceilings", "warm", 0)
    assert c["clock_min_mhz"] == pytest.approx(3100.0)
    assert c["clock_max_mhz"] == pytest.approx(3200.0)


def test_run_summary_counts_disturbed_measurements_and_the_busy_warning(results, db, capsys):
    warning = "busy machine: other processes used 1.00 CPUs (this run needs 2)"
    busy = gemm_run(results, disturbed_m=32, busy_warning=warning)
    quiet = gemm_run(results, started_at=T0 + timedelta(hours=1))
    old = ceilings_run(results, started_at=T0 + timedelta(hours=2))  # no disturbance columns
    ingest(db, results)
    summary = {r["run_id"]: r for r in rows(db, "SELECT * FROM run_summary")}
    assert (summary[busy.name]["n_disturbed"], summary[busy.name]["n_judged"]) == (1, 4)
    assert summary[busy.name]["busy_warning"] == warning
    assert (summary[quiet.name]["n_disturbed"], summary[quiet.name]["busy_warning"]) == (0, None)
    assert summary[old.name]["n_disturbed"] is None  # recorded before disturbance was
    assert main(["runs", "--db", str(db)]) == 0
    captured = capsys.readouterr()
    lines = {line.split()[0]: line for line in captured.out.splitlines()[1:]}
    assert " 1/4 " in lines[busy.name] and " busy " in lines[busy.name]
    assert " 0/4 " in lines[quiet.name] and " busy " not in lines[quiet.name]
    assert f"rooflab: run {busy.name}: {warning}" in captured.err
    disturbed = rows(db, "SELECT run_id, config_id, cache_state FROM gemm_points WHERE disturbed")
    assert disturbed == [
        {"run_id": busy.name, "config_id": "decode/fp32/nn/m32_n64_k64", "cache_state": "cold"}
    ]
    # the newest run of that configuration is clean, and the latest view shows it
    assert rows(db, "SELECT count(*) AS n FROM latest_gemm_points WHERE disturbed") == [{"n": 0}]


def test_hidden_partial_folders_are_ignored(results, db):
    good = gemm_run(results)
    partial = gemm_run(results, started_at=T0 + timedelta(hours=1))
    partial.rename(partial.with_name(f".{partial.name}.partial"))  # as a killed job leaves it
    gemm_run(results / ".snakemake", started_at=T0 + timedelta(hours=2))  # hidden ancestor
    report = ingest(db, results)
    assert report.added_run_ids == [good.name]
    assert store_row_counts(db) == file_row_counts([good])


def test_corrupt_parquet_is_named_and_nothing_of_its_run_is_stored(results, db):
    first = gemm_run(results, started_at=T0)
    broken = gemm_run(results, started_at=T0 + timedelta(hours=1))
    after = gemm_run(results, started_at=T0 + timedelta(hours=2))
    samples = broken / "samples.parquet"
    samples.write_bytes(samples.read_bytes()[: samples.stat().st_size // 2])  # truncated copy
    with pytest.raises(RunsSetAside, match=r"1 run\(s\) set aside") as caught:
        ingest(db, results)
    message = str(caught.value)
    assert str(samples) in message and "\n" not in message
    ((run_id, reason),) = caught.value.report.bad_runs
    assert run_id == broken.name and reason.startswith(f"{samples}: cannot read this Parquet file")
    assert store_row_counts(db, broken.name) == dict.fromkeys(MEASURED_TABLES, 0)
    assert store_row_counts(db, after.name) == file_row_counts([after])  # it went on
    assert store_row_counts(db, first.name) == file_row_counts([first])  # whole, kept


@pytest.mark.parametrize(
    "name",
    [
        "roofline_points",  # only the roofline step's file replaces points; a run never holds it
        "latest_gemm_points",  # a view's name: a table of that name would shadow the view
        "gemm-points",  # not an SQL identifier of ours
        "run_comparisons",  # the store's own table, derived from the samples at ingest
    ],
)
def test_a_run_folder_cannot_hold_a_table_of_a_reserved_or_odd_name(results, db, name):
    run_dir = gemm_run(results)
    pq.write_table(pq.read_table(run_dir / "timed_points.parquet"), run_dir / f"{name}.parquet")
    with pytest.raises(StoreError, match=f"cannot hold a table named '{name}'"):
        ingest(db, results)
    assert store_row_counts(db) == dict.fromkeys(MEASURED_TABLES, 0)
    assert query(db, "SELECT * FROM roofline_points").num_rows == 0
    tables = {row["table_name"] for row in rows(db, "SELECT table_name FROM duckdb_tables()")}
    assert tables == {*TABLES, *STORE_TABLES}  # no table was made from the file


def test_a_failure_while_storing_a_run_rolls_all_of_it_back(results, db, monkeypatch):
    run_dir = gemm_run(results)
    fail_after_storing_samples(monkeypatch)
    with pytest.raises(StoreError, match=r"samples\.parquet: cannot store it in table samples"):
        ingest(db, results)
    monkeypatch.undo()
    assert store_row_counts(db) == dict.fromkeys(MEASURED_TABLES, 0)
    assert ingest(db, results).added_run_ids == [run_dir.name]


def test_a_column_of_the_wrong_type_is_named(results, db):
    run_dir = gemm_run(results)
    points = pq.read_table(run_dir / "timed_points.parquet")
    index = points.column_names.index("median_s")
    wrong = pa.array(["fast"] * points.num_rows)
    pq.write_table(points.set_column(index, "median_s", wrong), run_dir / "timed_points.parquet")
    with pytest.raises(StoreError, match=r"timed_points\.parquet: column median_s does not fit"):
        ingest(db, results)
    assert store_row_counts(db) == dict.fromkeys(MEASURED_TABLES, 0)


def test_columns_of_a_newer_schema_are_added(results, db):
    old = gemm_run(results)
    ingest(db, results)
    newer = gemm_run(results, started_at=T0 + timedelta(hours=1))
    points = pq.read_table(newer / "timed_points.parquet")
    with_energy = points.append_column("energy_j", pa.array([0.5] * points.num_rows))
    pq.write_table(with_energy, newer / "timed_points.parquet")
    report = ingest(db, results)
    assert report.added_columns == ["timed_points.energy_j"]
    energy = rows(db, "SELECT run_id, count(energy_j) AS n FROM timed_points GROUP BY 1")
    assert {r["run_id"]: r["n"] for r in energy} == {old.name: 0, newer.name: 4}


# -- roofline points ------------------------------------------------------------------------------


def test_roofline_points_replace_the_points_of_the_runs_they_name(results, db):
    def counts():
        found = rows(db, "SELECT run_id, count(*) AS n FROM roofline_points GROUP BY 1")
        return {r["run_id"]: r["n"] for r in found}

    write_roofline_points(results, {"run-a": 2})
    report = ingest(db, results)
    assert (report.roofline_rows_removed, report.roofline_rows_inserted) == (0, 2)
    write_roofline_points(results, {"run-b": 3})
    ingest(db, results)
    assert counts() == {"run-a": 2, "run-b": 3}  # older points stay
    write_roofline_points(results, {"run-a": 1})
    report = ingest(db, results)
    assert report.roofline_run_ids == ["run-a"]
    assert (report.roofline_rows_removed, report.roofline_rows_inserted) == (2, 1)
    assert counts() == {"run-a": 1, "run-b": 3}  # recomputed points replace
    ingest(db, results)
    assert counts() == {"run-a": 1, "run-b": 3}  # idempotent


# -- locks, kills, rebuild ------------------------------------------------------------------------


def test_a_locked_store_waits_then_says_what_to_do(results, db):
    ingest(db, results)
    with hold_store(db, read_only=False) as holder:
        started = time.monotonic()
        with pytest.raises(StoreLocked) as caught:
            ingest(db, results, lock_timeout_s=1.0)
        assert time.monotonic() - started >= 1.0
        with pytest.raises(StoreLocked, match="open for writing in another process"):
            connect_read_only(db, lock_timeout_s=0.0)
    message = str(caught.value)
    assert f"{db} is locked by another process (PID {holder.pid}" in message
    assert "ingest waited 1 s" in message and "Close that session" in message
    assert f"duckdb -readonly {db}" in message and "rooflab query" in message
    assert "rooflab sql" in message and "\n" not in message


def test_a_read_only_session_blocks_ingest_but_not_readers(results, db):
    ingest(db, results)
    with hold_store(db, read_only=True) as holder:
        assert query(db, "SELECT count(*) AS n FROM runs").to_pylist() == [{"n": 0}]
        with pytest.raises(StoreLocked) as caught:
            ingest(db, results, lock_timeout_s=0.3)
    message = str(caught.value)
    assert f"{db} is open read-only in another process (PID {holder.pid}" in message
    assert "still blocks ingest while it stays open" in message and "rooflab query" in message


def test_ingest_goes_ahead_when_the_lock_is_released_in_time(results, db):
    run_dir = gemm_run(results)
    ingest(db, results)
    with hold_store(db, read_only=False, seconds=0.5):
        assert ingest(db, results, lock_timeout_s=15.0).present_run_ids == [run_dir.name]


@pytest.mark.slow  # a real ingest killed part way
def test_a_killed_ingest_leaves_no_partial_run(results, db):
    run_dirs = [big_gemm_run(results, T0 + timedelta(minutes=i), 150_000) for i in range(8)]
    # The worker says when it starts inserting a run's samples: by then the run's `runs` and
    # `conditions` rows are in its open transaction.
    script = textwrap.dedent(
        """
        import sys
        from rooflab import store
        from rooflab.store import writer
        real_insert = writer._Writer._insert
        def announced_insert(self, name, table):
            if name == "samples":
                print("inserting samples", flush=True)
            real_insert(self, name, table)
        writer._Writer._insert = announced_insert
        store.ingest(sys.argv[1], sys.argv[2], on_run_added=lambda r: print(r, flush=True))
        """
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", script, str(db), str(results)], stdout=subprocess.PIPE, text=True
    )
    lines = []
    while lines.count("inserting samples") < 3:  # inside the third run's transaction
        line = worker.stdout.readline()
        assert line, "the ingest ended before it could be killed"
        lines.append(line.strip())
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    committed = {line for line in lines if line != "inserting samples"}
    stored = {r["run_id"] for r in rows(db, "SELECT run_id FROM runs")}
    assert len(committed) == 2 and committed <= stored and len(stored) < len(run_dirs)
    for run_dir in run_dirs:
        expected = file_row_counts([run_dir])
        if run_dir.name not in stored:
            expected = dict.fromkeys(MEASURED_TABLES, 0)
        assert store_row_counts(db, run_dir.name) == expected, run_dir.name
    ingest(db, results)  # the next ingest completes the rest
    assert store_row_counts(db) == file_row_counts(run_dirs)


def test_rebuild_gives_the_same_rows_and_a_failed_rebuild_keeps_the_old_store(results, db):
    run_dirs = two_machines(results)
    write_roofline_points(results, {run_dirs[1].name: 3})
    ingest(db, results)
    summary_sql = "SELECT * FROM run_summary ORDER BY run_id"
    before = (store_row_counts(db), rows(db, summary_sql), rows(db, "FROM roofline_points"))
    report = rebuild(db, results)
    assert sorted(report.added_run_ids) == sorted(d.name for d in run_dirs)
    assert (store_row_counts(db), rows(db, summary_sql), rows(db, "FROM roofline_points")) == before
    # A failure of the store itself (here: the disk) before the rename: the old store stays.
    with pytest.MonkeyPatch.context() as patch:
        fail_after_storing_samples(patch)
        with pytest.raises(StoreError, match=r"samples\.parquet: .*disk full.*ingest stopped"):
            rebuild(db, results)
    assert store_row_counts(db) == before[0]
    assert sorted(p.name for p in results.glob("*rooflab.duckdb*")) == ["rooflab.duckdb"]
    # A bad run is set aside: the new store holds every other run.
    samples = run_dirs[0] / "samples.parquet"
    samples.write_bytes(samples.read_bytes()[:100])
    with pytest.raises(RunsSetAside, match=r"samples\.parquet") as caught:
        rebuild(db, results)
    assert [run_id for run_id, _ in caught.value.report.bad_runs] == [run_dirs[0].name]
    assert store_row_counts(db) == file_row_counts(run_dirs[1:])
    assert sorted(p.name for p in results.glob("*rooflab.duckdb*")) == ["rooflab.duckdb"]


# -- queries and the CLI --------------------------------------------------------------------------


def test_rebuild_derives_every_kept_run_whatever_the_current_config(
    results, db, tmp_path, monkeypatch
):
    """Two campaigns with different sweeps, the second's roofline step (as before the fix) deriving
    only its own sweep: `rooflab store rebuild` gives back the Roofline points of both."""
    ceilings = ceilings_run(results)
    table = pq.read_table(ceilings / "ceilings.parquet")  # the sweeps' fp32 GEMMs need a roof
    fp32 = {**table.to_pylist()[-1], "name": "fp32_fma", "dtype": "fp32", "value": 400e9}
    pq.write_table(pa.Table.from_pylist([*table.to_pylist(), fp32], table.schema),
                   ceilings / "ceilings.parquet")  # fmt: skip
    gemm_run(results, sweep="decode", started_at=T0 + timedelta(hours=1))
    prefill = gemm_run(results, sweep="prefill", started_at=T0 + timedelta(hours=2))
    write_analysis(build_analysis([ceilings], [prefill]), results / "roofline")
    ingest(db, results)
    sweeps = "SELECT sweep, count(*) AS n FROM roofline_points GROUP BY 1 ORDER BY 1"
    assert [r["sweep"] for r in rows(db, sweeps)] == ["prefill"]  # what the derived file held
    monkeypatch.chdir(tmp_path)  # no config/config.yaml here: no stages
    assert main(["store", "rebuild", "--db", str(db), "--results", str(results)]) == 0
    after = {r["sweep"]: r["n"] for r in rows(db, sweeps)}
    assert set(after) == {"decode", "prefill"} and after["decode"] == after["prefill"] > 0
    # the same rows as the roofline step now derives from every kept run
    inputs = rows(db, "SELECT kind, count(*) AS n FROM roofline_inputs GROUP BY 1 ORDER BY 1")
    assert inputs == [{"kind": "ceilings", "n": 1}, {"kind": "gemm", "n": 2}]


def test_query_is_read_only_and_a_missing_store_is_explained(results):
    db = results / "new.duckdb"
    with pytest.raises(StoreError, match=r"no store at .*rooflab store rebuild"):
        query(db, "SELECT 1")
    ingest(db, results)
    with pytest.raises(QueryError, match="read-only"):
        query(db, "DELETE FROM runs")
    assert list(query(db, "SELECT 42 AS answer", as_pandas=True)["answer"]) == [42]


def test_cli_query_json_and_csv(results, db, capsys):
    run_dir = gemm_run(results)
    assert main(["store", "ingest", "--db", str(db), "--results", str(results)]) == 0
    assert "added 1 run(s), 0 already there" in capsys.readouterr().out
    sql = "SELECT run_id, started_at, git_dirty FROM runs"
    assert main(["query", sql, "--db", str(db), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"run_id": run_dir.name, "started_at": "2025-03-01T09:00:00+00:00", "git_dirty": False}
    ]
    sql = "SELECT config_id, median_s FROM gemm_points WHERE cache_state = 'warm' ORDER BY m"
    assert main(["query", sql, "--db", str(db), "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "config_id,median_s",
        "decode/fp32/nn/m1_n64_k64,1e-05",
        "decode/fp32/nn/m32_n64_k64,0.00032",
    ]


def test_cli_sql_error_is_one_line_with_status_2(results, db, capsys):
    ingest(db, results)
    assert main(["query", "SELECT * FROM no_such_table", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rooflab: error: query failed: Catalog Error") and err.count("\n") == 1
    assert main(["runs", "--db", str(results / "missing.duckdb")]) == 2
    assert "no store at" in capsys.readouterr().err


def test_cli_runs_lists_the_summary_oldest_first(results, db, capsys):
    run_dirs = two_machines(results)
    assert main(["store", "rebuild", "--db", str(db), "--results", str(results)]) == 0
    assert "rebuilt from" in capsys.readouterr().out
    assert main(["runs", "--db", str(db), "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in listed] == sorted(d.name for d in run_dirs)  # ids start with time
    assert main(["runs", "--db", str(db)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["run_id", "kind", "sweep"] and len(table) == 5


def test_installed_console_script_runs_a_query(results, db):
    ingest(db, results)
    result = run_rooflab("query", "SELECT 1 AS one", "--db", str(db), cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["one", "1"]


def test_every_timed_point_without_a_roofline_point_is_named_with_why(results):
    beta = ceilings_run(results, machine_id="m-beta")  # fp64 only: no roof for fp32 GEMMs
    alpha_gemm = gemm_run(results, machine_id="m-alpha", started_at=T0 + timedelta(hours=1))
    beta_gemm = gemm_run(results, machine_id="m-beta", started_at=T0 + timedelta(hours=2))
    points = build_points([beta], [alpha_gemm, beta_gemm])
    assert points.model == []
    timed = pq.read_table(alpha_gemm / "timed_points.parquet").num_rows
    assert len(points.dropped) == 2 * timed
    alpha, beta = points.dropped[:timed], points.dropped[timed:]
    assert {(d["reason"], d["why"]) for d in alpha} == {
        ("no_ceilings_run", "no ceilings run of its machine m-alpha")
    }
    assert {(d["reason"], d["why"]) for d in beta} == {
        ("no_compute_ceiling", "no fp32_fma compute ceiling measured")
    }
