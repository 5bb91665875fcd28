"""The timeline measurement on a real GPU (experiments.timeline, issue 29): eager (4L launches),
graph (the eager step captured once and replayed) and fused (2L launches) each pass their check
against the float64 step, their rows fit the schema, the graph replay leaves less of its step to
launch gaps than eager launches do, and a per-kernel timeline comes back for eager and fused (for
graph too, or its busy_method says why not), measured on a step queued behind a spin kernel."""

from __future__ import annotations

import pytest

from rooflab.experiments.timeline import MODES, run_timeline, timeline_ledger
from rooflab.experiments.timing import TimingSettings
from rooflab.records import to_table

FAST = TimingSettings.from_config(
    {"warmup_s": 0.02, "min_time_s": 0.05, "min_samples": 5},
    {"quiet_wait_s": 0, "max_other_cpus": 1e6, "max_steal_fraction": 1.0},
)
LAYERS, HIDDEN = 16, 1024
HELD = "queued whole behind a spin kernel"


@pytest.fixture(scope="module")
def measured(cuda) -> dict[str, list[dict]]:
    spec = {"layers": LAYERS, "hidden": HIDDEN, "dtype": "fp32", "modes": list(MODES), "seed": 0}
    return run_timeline(cuda, "decode", spec, FAST, run_id="timeline-gpu")


def _steps(tables) -> dict[str, dict]:
    return {row["mode"]: row for row in tables["timeline_steps"]}


def _kernels(tables, mode: str) -> list[dict]:
    return [row for row in tables["timeline_kernels"] if row["mode"] == mode]


def test_every_mode_runs_and_every_table_fits_its_schema(measured):
    for name, rows in measured.items():
        assert to_table(name, rows).num_rows == len(rows) > 0, name
    steps = _steps(measured)
    assert list(steps) == list(MODES)
    for mode, row in steps.items():
        ledger = timeline_ledger(LAYERS, HIDDEN, 4, mode, "cuda")
        assert (row["flops"], row["bytes"], row["kernels"]) == ledger
        assert row["n_samples"] >= 5 and row["step_s"] == row["median_s"] > 0
        assert row["busy_s"] is not None and row["busy_s"] > 0
        assert row["gap_s"] == pytest.approx(row["step_s"] - row["busy_s"])
    assert (steps["eager"]["kernels"], steps["graph"]["kernels"]) == (4 * LAYERS, 4 * LAYERS)
    assert steps["fused"]["kernels"] == 2 * LAYERS


def test_the_graph_replay_has_a_smaller_gap_than_eager_launches(measured):
    steps = _steps(measured)
    assert steps["graph"]["gap_s"] < steps["eager"]["gap_s"]
    assert steps["eager"]["gap_s"] > 0  # 64 small launches: the host, not the kernels, sets it


@pytest.mark.parametrize("mode", ["eager", "fused"])
def test_eager_and_fused_have_a_per_kernel_timeline_from_a_held_step(measured, mode):
    step = _steps(measured)[mode]
    rows = _kernels(measured, mode)
    assert HELD in step["busy_method"], step["busy_method"]
    _check_rows(rows, step)


def test_graph_has_a_per_kernel_timeline_or_says_why_not(measured):
    step = _steps(measured)["graph"]
    rows = _kernels(measured, "graph")
    if not rows:
        assert step["busy_method"].startswith("no per-kernel timeline"), step["busy_method"]
        return
    assert "event record nodes" in step["busy_method"]
    _check_rows(rows, step)


def _check_rows(rows: list[dict], step: dict) -> None:
    assert [row["position"] for row in rows] == list(range(step["kernels"]))
    names = {"gemv", "bias_add", "relu", "residual_add", "bias_relu_residual"}
    assert {row["kernel"] for row in rows} <= names
    assert [row["layer"] for row in rows][:: len(rows) // LAYERS] == list(range(LAYERS))
    previous_end = 0.0
    for row in rows:
        assert previous_end <= row["start_s"] <= row["end_s"]
        previous_end = row["end_s"]
    assert sum(row["duration_s"] for row in rows) == pytest.approx(step["busy_s"], rel=1e-9)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_each_dtype_passes_its_check_in_every_mode(cuda, dtype):
    spec = {"layers": 32, "hidden": 200, "dtype": dtype, "modes": list(MODES), "seed": 5}
    tables = run_timeline(cuda, "odd", spec, FAST)  # H not a multiple of the GEMV's 32 columns
    assert [row["mode"] for row in tables["timeline_steps"]] == list(MODES)
