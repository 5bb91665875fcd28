"""Imported profiles' timelines and points in the store's views and in the report (issue 45,
item 2): the recorded MLP traces (tests/fixtures/torch, real torch.profiler output) imported on
this host's quick ceilings, the MLP twice (the views read its newer run), derived and ingested.
Each view's figures are checked against imports.torch_timeline, the command line's reading of
the same file; the report's Gantt chart draws one bar per top-level operator."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from rooflab.backends.selection import select_backend
from rooflab.cli.imports import timeline_lines
from rooflab.experiments.imported_runs import import_tables
from rooflab.imports import read_profile
from rooflab.imports.torch_timeline import trace_timeline
from rooflab.records import write_run
from rooflab.report.build import build_report
from rooflab.roofline import analyse_results
from rooflab.roofline.imported_timeline import critical_path_rows
from tests.import_store import TRACES, import_store
from tests.report_pages import layers_of, store_of, tables_of
from tests.store_runs import rows


@pytest.fixture(scope="module")
def store(tmp_path_factory, quick_ceilings_run):
    """(the store, {name: its newest import run id}, the mlp run imported first)."""
    _, ceilings = quick_ceilings_run
    imports = [("mlp", "mlp.json.gz"), ("mlp_unfused", "mlp_unfused.json.gz")]
    imports.append(("mlp", "mlp.json.gz"))  # again: a newer run of the same import
    db, run_ids, notes = import_store(tmp_path_factory.mktemp("report_imports"), ceilings, imports)
    assert notes == []
    return db, {"mlp_unfused": run_ids[1], "mlp": run_ids[2]}, run_ids[0]


@pytest.fixture(scope="module")
def timeline():
    """The recorded MLP trace's timeline as `rooflab import torch` works it out."""
    profile = read_profile("torch", TRACES / "mlp.json.gz")
    return profile, trace_timeline(profile, top=100)


@pytest.fixture(scope="module")
def report(store, tmp_path_factory):
    db, _, _ = store
    return build_report(db, tmp_path_factory.mktemp("report"), images=False)


def test_each_lane_is_busy_and_waits_as_the_trace_says(store, timeline):
    db, runs, _ = store
    _, expected = timeline
    (lane,) = rows(db, "SELECT * FROM imported_timeline WHERE name = 'mlp'")
    (want,) = expected["lanes"]  # a CPU trace of one thread: one lane
    assert lane["run_id"] == runs["mlp"] and lane["lane"] == want["lane"]
    assert lane["events"] == want["events"] == 48
    assert lane["busy_s"] == pytest.approx(want["busy_s"], rel=1e-9)
    assert lane["gap_s"] == pytest.approx(want["gaps_s"], rel=1e-9) and lane["gap_s"] > 0
    assert lane["busy_s"] < lane["span_s"] <= lane["end_to_end_s"]
    # the end to end is the profiler steps' (the Python time before a step's first op counts)
    assert lane["end_to_end_s"] == pytest.approx(expected["end_to_end_s"], rel=1e-9)
    assert lane["trace_start_s"] == 0 and lane["first_s"] > 0
    assert lane["busy_fraction"] == pytest.approx(lane["busy_s"] / lane["end_to_end_s"])
    assert lane["says"].startswith(f"{want['lane']}: 48 events, 2.59 ms busy")


def test_the_critical_path_is_the_one_the_command_line_walks(store, timeline):
    db, runs, _ = store
    _, expected = timeline
    path = rows(db, f"SELECT * FROM imported_critical_path WHERE run_id = '{runs['mlp']}' "
                    "ORDER BY position")  # fmt: skip
    assert [p["index"] for p in path] == [s["index"] for s in expected["critical_path"]["steps"]]
    assert path[0]["path_s"] == pytest.approx(expected["critical_path"]["total_s"], rel=1e-9)
    assert path[0]["path_busy_s"] + path[0]["path_waiting_s"] == pytest.approx(path[0]["path_s"])
    (lane,) = rows(db, "SELECT * FROM imported_timeline WHERE name = 'mlp'")
    # one thread: the path is its lane, from its first event to its last
    assert lane["path_s"] == pytest.approx(lane["span_s"])
    assert lane["on_path_s"] == pytest.approx(lane["busy_s"])


def test_the_gantt_rows_are_the_newest_runs_top_level_operators(store, timeline, tmp_path):
    db, runs, older = store
    profile, _ = timeline
    bars = rows(db, "SELECT * FROM latest_imported_operators WHERE name = 'mlp' ORDER BY start_s")
    top = [op for op in profile.operators if not op["nested"]]
    assert [b["index"] for b in bars] == [op["index"] for op in top]
    assert {b["run_id"] for b in bars} == {runs["mlp"]} != {older}
    assert all(b["end_s"] == pytest.approx(b["start_s"] + b["time_s"]) for b in bars)
    assert all(b["on_critical_path"] for b in bars)  # one thread: all of it is the path
    nested = rows(db, f"SELECT index FROM imported_operators WHERE run_id = '{runs['mlp']}' "
                      "AND nested")  # fmt: skip
    assert nested and not {n["index"] for n in nested} & {b["index"] for b in bars}
    # aten::linear holds no work of its own (its addmm does): no point, and why
    linear = [b for b in bars if b["op"] == "aten::linear"]
    assert linear and all(b["efficiency"] is None and b["unplaced"] for b in linear)


def test_top_operators_rank_by_share_of_the_end_to_end_time(store, timeline):
    db, _, _ = store
    _, expected = timeline
    top = rows(db, "SELECT * FROM imported_top_operators WHERE name = 'mlp' ORDER BY rank")
    assert [t["rank"] for t in top] == list(range(1, len(top) + 1))
    assert [t["op"] for t in top] == [t["op"] for t in expected["top_operators"]]
    shares = [t["share"] for t in top]
    assert shares == pytest.approx([t["share"] for t in expected["top_operators"]])
    assert shares == sorted(shares, reverse=True) and 0.5 < sum(shares) <= 1
    assert sum(t["calls"] for t in top) == 48 and all(t["device_time_s"] is None for t in top)
    assert top[0]["op"] == "autograd::engine::evaluate_function: AddmmBackward0"


def test_imported_points_keep_the_nested_operators_that_hold_the_work(store):
    db, runs, _ = store
    points = rows(db, "SELECT * FROM latest_imported_points WHERE name = 'mlp'")
    assert {p["run_id"] for p in points} == {runs["mlp"]}
    addmm = [p for p in points if p["op"] == "aten::addmm"]
    assert len(addmm) == 6 and all(p["nested"] and p["intensity"] > 0 for p in addmm)
    assert json.loads(addmm[0]["input_dims"])[1] == [64, 256]
    assert all(p["level"] and p["limiter"] and p["cause"] for p in addmm)


def test_the_report_draws_each_imports_timeline_and_roofline(report):
    for name in ("mlp", "mlp_unfused"):
        assert f"import_timeline_{name}" in report.charts
        assert f"import_roofline_{name}" in report.charts
    page = report.index.read_text(encoding="utf-8")
    assert "Imported trace timeline: mlp" in page
    assert page.count("Critical path of the trace's dependencies: ") == 2
    mlp, unfused = tables_of(page, "import-top-operators")  # the imports by name
    header, first, *_ = mlp
    assert header[:3] == ["rank", "operator", "calls"] and "share of end to end" in header
    assert first[:2] == ["1", "autograd::engine::evaluate_function: AddmmBackward0"]
    assert len(mlp) == 1 + 10  # the first ten; the query for the rest is under the table
    assert "FROM imported_top_operators WHERE" in page
    assert unfused[1][1] == "autograd::engine::evaluate_function: MmBackward0"


def test_the_gantt_chart_has_one_bar_per_top_level_operator(report, timeline):
    profile, _ = timeline
    spec = report.specs["import_timeline_mlp"]
    bars, ticks, text = layers_of(spec)
    assert [_mark(layer) for layer in (bars, ticks, text)] == ["bar", "tick", "text"]
    data = pd.DataFrame(spec["datasets"][bars["data"]["name"]])
    top = [op for op in profile.operators if not op["nested"]]
    assert sorted(data["index"]) == sorted(op["index"] for op in top)
    encoding = bars["encoding"]
    assert encoding["y"]["field"] == "lane"
    assert (encoding["x"]["field"], encoding["x2"]["field"]) == ("start_us", "end_us")
    assert (data.end_us > data.start_us).all()
    tick = pd.DataFrame(spec["datasets"][ticks["data"]["name"]])
    assert len(tick) == 1 and tick.end_us.iloc[0] >= data.end_us.max()


def test_the_imported_roofline_draws_the_placed_operators(report, store):
    db, _, _ = store
    placed = rows(db, "SELECT index, op FROM latest_imported_points WHERE name = 'mlp' "
                      "AND intensity IS NOT NULL")  # fmt: skip
    spec = report.specs["import_roofline_mlp"]
    points = [layer for layer in layers_of(spec) if _mark(layer) == "point"]
    drawn = {
        row["config_id"] for layer in points for row in spec["datasets"][layer["data"]["name"]]
    }
    assert drawn == {f"#{p['index']} {p['op']}" for p in placed}
    assert len(placed) >= 12  # the six addmm and the backward mm, at least


def _mark(layer: dict) -> str:
    mark = layer["mark"]
    return mark if isinstance(mark, str) else mark["type"]


def test_a_gpu_kernel_on_the_path_leads_back_to_the_op_that_launched_it(tmp_path):
    """Constructed (no CUDA trace is recorded here yet): the MLP trace with one made-up kernel
    launched by its first addmm and ending last. The walk goes back from it to its launch."""
    profile = read_profile("torch", TRACES / "mlp.json.gz")
    addmm = next(op for op in profile.operators if op["op"] == "aten::addmm")
    end = max(op["start_s"] + op["time_s"] for op in profile.operators)
    kernel = dict(addmm) | {
        "index": len(profile.operators),
        "op": "made_up_gemm_kernel",
        "kind": "kernel",
        "parent": addmm["index"],
        "nested": False,
        "thread": "stream 7",
        "start_s": end,
        "launch_s": addmm["start_s"],
    }
    profile.operators.append(kernel)
    tables = import_tables(profile, "gpu_made_up", select_backend("cpu"))
    run_id = tables["runs"][0]["run_id"]
    write_run(tmp_path / "runs", run_id, tables)
    path = critical_path_rows([tmp_path / "runs" / run_id])
    assert path[-1]["op"] == "made_up_gemm_kernel"
    assert any(step["lane"].startswith("cpu") for step in path)
    # in the store: its stream's launch-to-kernel gap, and the command line's line for it
    results = tmp_path / "results"
    write_run(results / "imports" / "gpu" / "runs", run_id, tables)
    db = store_of(results, analyse_results(results))
    (lane,) = rows(
        db, "SELECT median_launch_delay_s, says FROM imported_timeline WHERE lane LIKE 'gpu%'"
    )
    assert lane["median_launch_delay_s"] == pytest.approx(end - addmm["start_s"])
    assert "after their launch" in lane["says"]
    lines = timeline_lines(trace_timeline(profile))
    assert any(line.startswith("launch to kernel: median ") for line in lines)
