"""The timeline measurement through the CLI, the store and the report (issue 29, second part):
`rooflab measure timeline` prints the contract, its runs reach the views `timeline_modes` and
`latest_timeline_kernels`, and the report draws one step per mode. Real runs on this CPU."""

from __future__ import annotations

import json
import shutil

import duckdb
import pytest

from rooflab.cli.measure_timeline import COLUMNS
from rooflab.roofline.diagnosis import GAPS_SHARE
from tests.conftest import UNJUDGED, run_rooflab

CONFIG = {
    "backend": "cpu",
    "timing": {"warmup_s": 0.01, "min_time_s": 0.02, "min_samples": 3},
    "disturbance": UNJUDGED,
    "timelines": {"small": {"layers": 4, "hidden": 32}},
}


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    folder = tmp_path_factory.mktemp("timeline")
    config = folder / "c.yaml"
    config.write_text(json.dumps(CONFIG))
    result = run_rooflab(
        "measure", "timeline", "--config", config, "--format", "json", "--out", folder / "runs"
    )
    assert result.returncode == 0, result.stderr
    return folder, json.loads(result.stdout), result.stderr


def test_the_cli_prints_one_object_per_mode(measured):
    _, rows, stderr = measured
    assert [(r["scenario"], r["mode"]) for r in rows] == [("small", "eager"), ("small", "fused")]
    assert "mode graph skipped: CUDA graphs need a GPU" in stderr
    for row in rows:
        assert set(row) == set(COLUMNS)
        assert row["step_s"] > 0 and row["gap_s"] == pytest.approx(row["step_s"] - row["busy_s"])
    assert [r["kernels"] for r in rows] == [16, 1]


def test_an_unknown_scenario_is_one_clear_error(measured):
    folder, _, _ = measured
    config = folder / "c.yaml"
    result = run_rooflab("measure", "timeline", "--config", config, "--scenario", "x", refused=True)
    assert result.returncode == 2
    assert "no timeline scenario x in the config; timelines: small" in result.stderr


def test_the_store_and_the_report_show_each_mode(measured, tmp_path):
    folder, rows, _ = measured
    db = tmp_path / "store.duckdb"
    assert run_rooflab("store", "ingest", "--db", db, "--results", folder / "runs").returncode == 0
    with duckdb.connect(str(db), read_only=True) as con:
        modes = con.execute(
            "SELECT mode, step_s, kernels, says FROM timeline_modes ORDER BY mode"
        ).fetchall()
        kernels = con.execute(
            "SELECT mode, count(*) FROM latest_timeline_kernels GROUP BY mode ORDER BY mode"
        ).fetchall()
    assert [(m, s, k) for m, s, k, _ in modes] == [
        (r["mode"], r["step_s"], r["kernels"]) for r in rows
    ]
    for mode, step_s, count, says in modes:
        assert says.startswith(f"{mode}: {step_s * 1e6:.3g} μs per step in {count} kernels, ")
    assert kernels == [("eager", 16), ("fused", 1)]
    report = tmp_path / "report"
    built = run_rooflab("report", "--db", db, "--out", report)
    assert built.returncode == 0, built.stderr
    page = (report / "index.html").read_text()
    assert "Step timeline: small" in page and (report / "timeline_small.png").is_file()
    assert "eager: " in page and " per step in 16 kernels" in page


def test_timeline_modes_have_a_history_and_are_compared(measured, tmp_path):
    """A second run of the same scenario: each mode a key of `history` and of `rooflab compare`
    (the measured stages' schedules are keys the same way)."""
    folder, _, _ = measured
    runs = tmp_path / "runs"
    shutil.copytree(folder / "runs", runs)
    again = run_rooflab("measure", "timeline", "--config", folder / "c.yaml", "--out", runs)
    assert again.returncode == 0, again.stderr
    db = tmp_path / "store.duckdb"
    assert run_rooflab("store", "ingest", "--db", db, "--results", runs).returncode == 0
    compared = run_rooflab("compare", "--db", db, "--format", "json")
    assert compared.returncode == 0, compared.stderr
    keys = {row["key"]: row for row in json.loads(compared.stdout)}
    assert set(keys) == {"small/eager warm", "small/fused warm"}
    assert all(row["method"] == "samples" and row["verdict"] for row in keys.values())


def test_each_mode_is_diagnosed_on_the_machines_ceilings(measured, quick_ceilings_run, tmp_path):
    """Issue 43: each measured step gets a diagnosis (kind timeline) on the bound the
    timeline_modes view gives it; launch_gaps exactly where its gaps pass GAPS_SHARE of the
    step, predicted at its busy time."""
    folder, _, _ = measured
    results = tmp_path / "results"
    shutil.copytree(folder / "runs", results / "timeline")
    shutil.copytree(quick_ceilings_run[1], results / "ceilings" / quick_ceilings_run[1].name)
    db = tmp_path / "store.duckdb"
    rebuilt = run_rooflab("store", "rebuild", "--db", db, "--results", results)
    assert rebuilt.returncode == 0, rebuilt.stderr
    explained = run_rooflab("explain", "--db", db, "--format", "json")
    steps = {d["key"]: d for d in json.loads(explained.stdout) if d["kind"] == "timeline"}
    assert set(steps) == {"small/eager", "small/fused"}
    with duckdb.connect(str(db), read_only=True) as con:
        modes = con.execute("SELECT mode, bound_s, step_s, busy_s, gap_s FROM timeline_modes")
        modes = {mode: figures for mode, *figures in modes.fetchall()}
    for key, diagnosis in steps.items():
        bound_s, step_s, busy_s, gap_s = modes[key.split("/")[1]]
        assert diagnosis["efficiency"] == pytest.approx(bound_s / step_s)
        assert (diagnosis["cause"] == "launch_gaps") == (gap_s > GAPS_SHARE * step_s)
        if diagnosis["cause"] == "launch_gaps":
            assert diagnosis["predicted_s"] == pytest.approx(busy_s)
            assert diagnosis["evidence"]["timeline_steps.gap_s"] == pytest.approx(gap_s)
        else:
            assert diagnosis["evidence"]["timeline_modes.bound_s"] == pytest.approx(bound_s)
