"""Your workloads in the report (issue 28): two implementations of the same work side by side with
what the pair says, each workload's time against the param its cases vary in, workload points on
the Roofline as labelled stars with their own legend entry and a line joining each pair, and one
sentence for a point far below its roof.

Pure tests of the chart functions on frames shaped like their views; a small constructed store
(rows inserted into an empty store: made-up values, never a measurement) for the view columns
behind them; and a store of real measurements made the way tests/test_report.py makes its own
(the quick ceilings run conftest shares, a real `rooflab measure gemm`, real workload runs through
`rooflab measure workload` and, for the implementations with a `same_work_as` the command line
has no option for, through run_workload in-process), rendered in headless chromium.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import yaml

from rooflab.report import build_report
from rooflab.report.labels import place_labels
from rooflab.report.roofline_chart import roofline_chart
from rooflab.report.roofline_points import WORKLOADS_KEY, workload_shapes
from rooflab.report.workload_charts import (
    comparison_chart,
    comparison_table,
    far_below_note,
    param_time_chart,
    params_text,
)
from rooflab.roofline import build_analysis
from rooflab.store import query
from tests.conftest import UNJUDGED
from tests.rendered_marks import distance, intersect, legend_symbols, overprinted_texts, rendered
from tests.report_pages import (
    AVX512_CASES,
    AVX512_ROOFS,
    CHROMIUM,
    CPU_ROOFS,
    NO_CHROMIUM,
    avx512_ceilings,
    avx512_points,
    chart_svg,
    cpu_ceilings,
    cpu_points,
    empty_store,
    insert_rows,
    label_crossings,
    label_overlaps,
    layers_of,
    render_in_browser,
    rooflab_ok,
    spec_rows,
    store_of,
    svg_texts,
)
from tests.table_rows import runs_row

# -- pure: the chart functions on frames shaped like their views ---------------------------------


def _pairs() -> pd.DataFrame:
    """Rows as implementation_comparisons gives them: the fusion pair at two sizes (n=4096 listed
    after n=65536, to be sorted as numbers) and the block-diagonal pair."""
    rows = []
    for workload, baseline, params, time_s, base_s, executed, says in (
        ("fused", "unfused", '{"n": 65536}', 10e-6, 24e-6, 1.0, "higher executed FLOP/s, 2.4x"),
        ("fused", "unfused", '{"n": 4096}', 1e-6, 2e-6, 1.0, "higher executed FLOP/s, 2x"),
        ("blocks", "dense", '{"blocks": 8, "n": 1024}', 5e-6, 30e-6, 8.0, "lower executed"),
    ):
        for cache_state, factor in (("warm", 1.0), ("cold", 1.5)):
            flops = 3 * 65536
            rows.append(
                {
                    "workload": workload,
                    "baseline": baseline,
                    "params": params,
                    "dtype": "fp32",
                    "cache_state": cache_state,
                    "useful_flops": flops,
                    "time_s": time_s * factor,
                    "baseline_time_s": base_s * factor,
                    "speedup": base_s / time_s,
                    "useful_flops_per_s": flops / (time_s * factor),
                    "baseline_useful_flops_per_s": flops / (base_s * factor),
                    "executed_flops_per_s": flops / (time_s * factor),
                    "baseline_executed_flops_per_s": executed * flops / (base_s * factor),
                    "bytes": 8 * 65536,
                    "baseline_bytes": 24 * 65536,
                    "says": says + (" faster" if says.endswith("x") else ", 6x faster"),
                    "run_id": "20260101T000000Z-00000001",
                    "baseline_run_id": "20260101T000000Z-00000002",
                }
            )
    return pd.DataFrame(rows)


def test_params_read_as_key_value_text():
    assert params_text('{"n": 65536, "steps": 100000}') == "n=65536, steps=100000"
    assert params_text('{"b": 1, "a": "x"}') == "a=x, b=1"
    assert params_text(None) == "" and params_text("not json") == "not json"


def test_comparison_chart_draws_both_times_per_case_and_what_the_pair_says():
    spec = comparison_chart(_pairs()).to_dict()
    assert spec["title"]["text"].startswith("Same work, two implementations")
    panels = spec["vconcat"]
    titles = [panel["title"]["text"] for panel in panels]
    assert titles == ["blocks (filled) vs dense (hollow)", "fused (filled) vs unfused (hollow)"]
    fused = panels[1]
    bar, dots, says = fused["layer"]
    # one row per case and cache state, cases in the order of their params' values
    assert dots["encoding"]["y"]["sort"] == [
        "n=4096 · fp32 · warm",
        "n=4096 · fp32 · cold",
        "n=65536 · fp32 · warm",
        "n=65536 · fp32 · cold",
    ]
    rows = spec["datasets"][dots["data"]["name"]]
    times = {(r["name"], r["row"]): r["seconds"] for r in rows}
    assert times[("unfused", "n=65536 · fp32 · warm")] == pytest.approx(24e-6)
    assert times[("fused", "n=65536 · fp32 · cold")] == pytest.approx(15e-6)
    # baseline hollow (a white fill), the workload filled, on a log time axis with its unit
    fill = dots["encoding"]["fill"]["scale"]
    assert fill["range"][0] == "white" and fill["range"][1] != "white"
    assert fill["domain"][0].startswith("baseline") and fill["domain"][1].startswith("workload")
    assert dots["encoding"]["x"]["scale"]["type"] == "log"
    assert "'s'" in dots["encoding"]["x"]["axis"]["labelExpr"]
    assert bar["mark"]["type"] == "rule" and bar["encoding"]["x2"]["field"] == "baseline_time_s"
    said = {r["says"] for r in spec["datasets"][says["data"]["name"]]}
    assert said == {"higher executed FLOP/s, 2.4x faster", "higher executed FLOP/s, 2x faster"}
    import vl_convert as vlc

    drawn = svg_texts(vlc.vegalite_to_svg(spec))
    assert "lower executed, 6x faster" in drawn and "fused (filled) vs unfused (hollow)" in drawn


def test_comparison_table_gives_each_figure_as_workload_over_baseline_and_says():
    table = comparison_table(_pairs())
    assert list(table.columns) == [
        "workload / baseline",
        "case",
        "cache state",
        "time",
        "useful FLOP/s",
        "executed FLOP/s",
        "bytes (Q)",
        "says",
    ]
    row = table[(table.case == "n=65536 · fp32") & (table["cache state"] == "warm")].iloc[0]
    assert row["workload / baseline"] == "fused / unfused"
    assert row["time"] == "10 μs / 24 μs"
    assert row["bytes (Q)"] == "524 kB / 1.57 MB"
    assert row["says"] == "higher executed FLOP/s, 2.4x faster"
    dense = table[table["workload / baseline"] == "blocks / dense"].iloc[0]
    useful, executed = dense["useful FLOP/s"], dense["executed FLOP/s"]
    assert useful.split(" / ")[0] == executed.split(" / ")[0]  # the blocks execute what is useful
    assert dense["says"] == "lower executed, 6x faster"


def _param_rows() -> pd.DataFrame:
    """Rows as workload_param_points gives them: a workload whose cases vary in n and steps."""
    rows = []
    for n in (1024, 4096, 16384):
        for steps in (10, 100):
            for cache_state in ("warm", "cold"):
                seconds = n * steps * 1e-9
                for param, value, other in (("n", n, f"steps={steps}"), ("steps", steps, f"n={n}")):
                    rows.append(
                        {
                            "workload": "chase",
                            "param": param,
                            "value": float(value),
                            "value_text": str(value),
                            "series": f"fp64 · {other}",
                            "dtype": "fp64",
                            "cache_state": cache_state,
                            "config_id": f"chase/fp64/n{n}_steps{steps}",
                            "median_s": seconds,
                            "bound_s": seconds / 5,
                            "efficiency": 0.2,
                            "run_id": "20260101T000000Z-00000001",
                        }
                    )
    return pd.DataFrame(rows)


def test_time_vs_params_has_a_row_of_panels_per_varying_param_on_log_axes():
    spec = param_time_chart(_param_rows(), "chase").to_dict()
    assert spec["title"] == "Workload chase: median time and Roofline bound vs n, steps"
    assert spec["resolve"]["scale"]["color"] == "independent"
    panels = spec["vconcat"]
    assert len(panels) == 2
    for panel, param, series in zip(
        panels,
        ("n", "steps"),
        (
            ["fp64 · steps=10", "fp64 · steps=100"],
            ["fp64 · n=1024", "fp64 · n=4096", "fp64 · n=16384"],
        ),
        strict=True,
    ):
        assert panel["facet"]["column"]["field"] == "cache_state"
        assert panel["facet"]["column"]["sort"] == ["warm", "cold"]
        lines = panel["spec"]["layer"][0]
        encoding = lines["encoding"]
        assert encoding["x"]["title"] == param and encoding["x"]["scale"]["type"] == "log"
        assert encoding["y"]["scale"]["type"] == "log"
        assert encoding["color"]["sort"] == series  # numbers in order, not as text
        assert encoding["strokeDash"]["sort"] == ["measured median", "Roofline lower bound"]
        rows = spec["datasets"][panel["data"]["name"]]
        assert {r["param"] for r in rows} == {param}
        bound = {r["seconds"] for r in rows if r["source"] == "Roofline lower bound"}
        assert bound == {r["bound_s"] for r in rows}


def test_a_param_that_is_no_number_gets_an_axis_of_its_values():
    rows = _param_rows()
    rows = rows[rows.param == "n"].assign(value=None, value_text=lambda f: "v" + f.value_text)
    spec = param_time_chart(rows, "chase").to_dict()
    x = spec["vconcat"][0]["spec"]["layer"][0]["encoding"]["x"]
    assert x["field"] == "value_text" and x["type"] == "nominal"


def _far_points() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"config_id": "pointer_chase/fp64/n65536_steps100000", "sweep": "pointer_chase",
             "params": '{"n": 65536, "steps": 100000}', "dtype": "fp64", "cache_state": state,
             "efficiency": efficiency, "far_below_roof": efficiency < 0.01}
            for state, efficiency in (("cold", 0.0021), ("warm", 0.0009))
        ]
        + [
            {"config_id": "tiny/fp32/nn/m1_n256_k256", "sweep": "tiny", "params": None,
             "dtype": "fp32", "cache_state": "warm", "efficiency": 0.4, "far_below_roof": False}
        ]
    )  # fmt: skip


def test_a_point_far_below_its_roof_gets_one_sentence_with_its_name_and_efficiency():
    note = far_below_note(_far_points())
    assert note.count("<p class='far-below'>") == 1
    assert (
        "pointer_chase (n=65536, steps=100000, fp64) runs at 0.09 % (warm cache) and 0.21 % "
        "(cold cache) of its roof; its time is explained by neither roof" in note
    )
    assert "latency, launch overhead or serialization" in note and "tiny" not in note
    assert far_below_note(_far_points().assign(far_below_roof=False)) == ""
    assert far_below_note(_far_points().drop(columns=["far_below_roof"])) == ""


def _workload_points() -> pd.DataFrame:
    """Workload cases as latest_model_points gives them, on the CPU of the glance tests: the
    fusion pair (the same F, a third of the bytes) warm against L2 and cold against DRAM."""
    rows = []
    for sweep, intensity, factor in (("relu_unfused", 0.125, 0.3), ("relu_fused", 0.375, 0.5)):
        for cache_state, level in (("warm", "L2"), ("cold", "DRAM")):
            bandwidth = next(v for (_, n, _), v in CPU_ROOFS.items() if n == level)
            attainable = bandwidth * intensity
            rows.append(
                {
                    "config_id": f"{sweep}/fp32/n65536",
                    "sweep": sweep,
                    "params": '{"n": 65536}',
                    "dtype": "fp32",
                    "cache_state": cache_state,
                    "intensity": intensity,
                    "achieved_flops_per_s": attainable * factor,
                    "attainable_flops_per_s": attainable,
                    "efficiency": factor,
                    "limiter": "memory",
                    "level": level,
                    "compute_path": "fp32_blas",
                    "above_roof": False,
                    "disturbed": False,
                    "run_id": "20260101T000000Z-00000003",
                }
            )
    return pd.DataFrame(rows)


def _named_labels(spec: dict) -> dict:
    """A copy of a Roofline spec whose workload name labels read as roof labels do (their text
    under `ceiling`), for test_report's label geometry."""
    spec = copy.deepcopy(spec)
    for rows in spec["datasets"].values():
        for row in rows:
            if "label" in row and "dy" in row:
                row["ceiling"] = row["label"]
    return spec


def _workload_names(spec: dict) -> set[str]:
    return {r["label"] for r in spec_rows(spec, "dy") if "label" in r}


def _each_name_beside_its_own_star(scene, names) -> None:
    """Each drawn name of `names` within 8 px of one of its own stars, and nearer to it than to
    any other point's marks."""
    for name in (t for t in scene.texts if t.text in names):
        own = [s for s in scene.symbols if s.fields.get("sweep") == name.text]
        at_own = {(s.x, s.y) for s in own}
        nearest_own = min(distance(name.box, s.box) for s in own)
        assert nearest_own <= 8, name.text  # beside it
        others = [s for s in scene.symbols if (s.x, s.y) not in at_own]
        assert all(distance(name.box, s.box) > nearest_own for s in others), name.text


def test_workload_points_are_labelled_stars_with_their_own_legend_entry():
    points = pd.concat([cpu_points(above=False), _workload_points()], ignore_index=True)
    pairs = pd.DataFrame(
        [
            {"workload": "relu_fused", "baseline": "relu_unfused", "params": '{"n": 65536}',
             "dtype": "fp32", "cache_state": state, "says": "higher executed FLOP/s, 2.4x faster"}
            for state in ("warm", "cold")
        ]
    )  # fmt: skip
    spec = roofline_chart(cpu_ceilings(), points, None, None, pairs).to_dict()
    layers = layers_of(spec)
    assert layers[-1]["mark"]["type"] == "point"  # the points stay on top
    (star,) = [
        la for la in layers if la.get("encoding", {}).get("shape", {}).get("title") == WORKLOADS_KEY
    ]
    names = ["relu_fused", "relu_unfused"]  # a star each, named in the legend
    assert star["encoding"]["shape"]["field"] == "sweep"
    assert star["encoding"]["shape"]["scale"] == {"domain": names, "range": workload_shapes(names)}
    assert len(set(workload_shapes(names))) == 2
    assert star["encoding"]["color"]["field"] == "roof"  # still its roof's colour
    drawn = {r["sweep"] for r in spec["datasets"][star["data"]["name"]]}
    assert drawn == {"relu_unfused", "relu_fused"}
    gemms = [
        la
        for la in layers
        if la.get("encoding", {}).get("shape", {}).get("field") == "sweep" and la is not star
    ]
    assert {r["sweep"] for r in spec["datasets"][gemms[0]["data"]["name"]]} == {
        "weight_reuse",
        "tails",
    }
    # each workload named on the chart, where its name covers no roof label and no roof runs
    # through it
    assert _workload_names(spec) == {"relu_unfused", "relu_fused"}
    named = _named_labels(spec)
    assert label_crossings(named) == [] and label_overlaps(named) == []
    # a grey line from each baseline point to the other implementation's, per cache state
    (pair,) = [
        la for la in layers if la["mark"]["type"] == "rule" and "x2" in la.get("encoding", {})
    ]
    segments = spec["datasets"][pair["data"]["name"]]
    assert sorted((s["x"], s["x2"]) for s in segments) == [(0.125, 0.375)] * 2
    import vl_convert as vlc

    texts = svg_texts(vlc.vegalite_to_svg(spec))
    assert {WORKLOADS_KEY, "relu_unfused", "relu_fused"} <= set(texts)
    assert "tails" in texts  # the GEMMs keep their sweep legend


def test_a_roofline_without_workloads_draws_no_star_no_name_and_no_pair():
    spec = roofline_chart(cpu_ceilings(), cpu_points(), None, None, pd.DataFrame()).to_dict()
    layers = layers_of(spec)
    assert not [la for la in layers if "marks" in json.dumps(la.get("encoding", {}))]
    assert _workload_names(spec) == set()
    assert not [la for la in layers if "x2" in la.get("encoding", {})]


AVX512_WORKLOADS = {sweep for sweep, params, *_ in AVX512_CASES if params}


def test_each_workload_and_sweep_has_a_shape_of_its_own_that_the_legend_names():
    """Issue 44: without hovering, a reader tells the stars apart: each workload's stars (and
    each GEMM sweep's points) take one shape that no other takes, and the legend shows that
    shape beside the workload's name (the scene vl-convert draws the PNG from)."""
    scene = rendered(roofline_chart(avx512_ceilings(), avx512_points()).to_dict())
    legend = legend_symbols(scene)
    shapes = {}
    for sweep in AVX512_WORKLOADS | {"tiny"}:
        drawn = {s.shape for s in scene.symbols if s.fields.get("sweep") == sweep}
        assert len(drawn) == 1, sweep  # every case and cache state of it alike
        (shapes[sweep],) = drawn
        assert legend[sweep]["shape"] == shapes[sweep]  # its legend entry is its mark
    assert len(set(shapes.values())) == len(shapes)  # no two alike
    assert WORKLOADS_KEY in {title for title in scene.legends}


@pytest.mark.parametrize("draw", range(3))
def test_each_name_is_beside_its_own_star_clear_of_every_other_mark_as_drawn(draw):
    """Issue 44: a workload's name sits beside one of its own stars, within a few px of it and
    nearer to it than to any other point's marks, overprinting no other text and no mark: read
    from the scene vl-convert draws (each text as wide as Vega measures it, each symbol's box
    as Vega sizes it). The AVX-512 CPU's cases, its roofs as measured (0) and 10 % off (1, 2)."""
    factors = {name: (1 + 0.1 * (-1) ** (draw + i)) if draw else 1.0
               for i, (_, name, _, _) in enumerate(AVX512_ROOFS)}  # fmt: skip
    spec = roofline_chart(avx512_ceilings(factors), avx512_points()).to_dict()
    scene = rendered(spec)
    names = [t for t in scene.texts if t.text in AVX512_WORKLOADS]
    assert len(names) >= 4  # named where a name fits; the legend names them all
    assert overprinted_texts(scene) == []
    for name in names:
        assert not [s for s in scene.symbols if intersect(name.box, s.box)], name.text
    _each_name_beside_its_own_star(scene, AVX512_WORKLOADS)


def test_optional_labels_go_after_the_roofs_most_constrained_first_or_not_at_all():
    axes = ((0.1, 1e4), (1e9, 1e15), (640, 480))

    def label(text, y, x=1, **more):
        return {"text": text, "x": x, "y": y, "align": "left", **more}

    # the name is higher, but the roof label placed first keeps its first place
    placed = place_labels([label("name", 1.05e12, max_cost=0), label("roof", 1e12)], "text", *axes)
    by_text = {row["text"]: row for row in placed}
    assert by_text["roof"]["dy"] == -7 and by_text["roof"]["cost"] == 0
    assert by_text["name"]["dy"] != -7 and by_text["name"]["cost"] == 0
    # its own places (dys); every row says what its place costs
    (own,) = place_labels([label("x", 1e12, dys=(0, 30))], "text", *axes)
    assert own["dy"] == 0 and "dys" not in own and own["cost"] == 0
    # a name with one free place gets it, though a higher one could have taken it first
    one = label("aaaa", 1e12, dys=(0,), max_cost=0)
    two = label("bbbb", 1.01e12, dys=(0,), anchors=[(1000, 1e12, "left")], max_cost=0)
    placed = {row["text"]: row for row in place_labels([two, one], "text", *axes)}
    assert (placed["aaaa"]["x"], placed["bbbb"]["x"]) == (1, 1000)
    # a name that fits nowhere is left out
    crossed = label("crossed", 1e12, dys=(0,), max_cost=10)
    line = ((0.5, 1e12), (5, 1e12))
    assert place_labels([crossed], "text", *axes, [line]) == []


# -- a constructed store: the view columns -------------------------------------------------------

T0 = datetime(2026, 6, 1, tzinfo=UTC)
MACHINE = "constructed-workloads"


def _point(run_id, sweep, params: dict, cache_state, seconds, efficiency, dtype="fp64") -> dict:
    params_id = "_".join(f"{k}{v}" for k, v in sorted(params.items()))
    return {
        "run_id": run_id, "config_id": f"{sweep}/{dtype}/{params_id}", "cache_state": cache_state,
        "machine_id": MACHINE, "sweep": sweep, "dtype": dtype,
        "params": json.dumps(params, sort_keys=True), "level": "DRAM", "q_source": "model",
        "intensity": 0.125, "median_s": seconds, "bound_s": seconds * efficiency,
        "achieved_flops_per_s": 1e9 * efficiency, "attainable_flops_per_s": 1e9,
        "efficiency": efficiency, "limiter": "memory", "compute_path": f"{dtype}_fma",
    }  # fmt: skip


@pytest.fixture(scope="module")
def constructed_store(tmp_path_factory):
    db = empty_store(tmp_path_factory.mktemp("workload_views"))
    with duckdb.connect(str(db)) as connection:
        run_id = "20260601T000000Z-constructed"
        insert_rows(connection, "runs", [runs_row(
            run_id, "workload", T0, "chase", ended_at=T0 + timedelta(minutes=1), host="wl-host",
            machine_id=MACHINE, backend="cpu", device_name="constructed CPU",
        )])  # fmt: skip
        rows = [
            _point(run_id, "chase", {"n": n, "steps": steps}, state, n * steps * 1e-9, 0.2)
            for n in (1024, 4096)
            for steps in (10, 100)
            for state in ("warm", "cold")
        ]
        rows += [_point(run_id, "single", {"n": 64}, "warm", 1e-3, 0.005)]
        rows += [
            _point(run_id, "two_dtypes", {"n": 64}, "warm", 1e-3, 0.5, d) for d in ("fp32", "fp64")
        ]
        insert_rows(connection, "roofline_points", rows)
    return db


def test_workload_param_points_has_a_row_per_varying_param_and_none_for_one_case(
    constructed_store,
):
    rows = query(
        constructed_store,
        "SELECT workload, param, value, value_text, series, cache_state, median_s, bound_s "
        "FROM workload_param_points ORDER BY workload, param, series, value, cache_state",
    ).to_pylist()
    # a workload of one case, or whose cases differ in their dtype only, varies in no param
    assert {r["workload"] for r in rows} == {"chase"}
    assert len(rows) == 2 * 8  # n and steps, for each of 4 cases in 2 cache states
    n_rows = [r for r in rows if r["param"] == "n"]
    assert {r["series"] for r in n_rows} == {"fp64 · steps=10", "fp64 · steps=100"}
    assert {r["value"] for r in n_rows} == {1024.0, 4096.0}
    steps = [r for r in rows if r["param"] == "steps"]
    assert {r["series"] for r in steps} == {"fp64 · n=1024", "fp64 · n=4096"}
    one = next(r for r in steps if r["series"] == "fp64 · n=4096" and r["value_text"] == "100")
    assert one["median_s"] == pytest.approx(4096 * 100 * 1e-9)
    assert one["bound_s"] == pytest.approx(one["median_s"] * 0.2)


def test_far_below_roof_flags_points_under_one_percent(constructed_store):
    rows = query(
        constructed_store,
        "SELECT sweep, far_below_roof FROM latest_model_points ORDER BY sweep",
    ).to_pylist()
    flagged = {r["sweep"] for r in rows if r["far_below_roof"]}
    assert flagged == {"single"}  # efficiency 0.5 % against 20 % and 50 %


def test_the_report_of_the_constructed_store_says_the_far_below_point(constructed_store, tmp_path):
    report = build_report(constructed_store, tmp_path / "report", images=False)
    assert "workload_time_chase" in report.charts and "implementations" not in report.charts
    assert "workload_time_single" not in report.charts
    page = report.index.read_text()
    assert "single (n=64, fp64) runs at 0.5 % (warm cache) of its roof;" in page


# -- a store of real measurements ----------------------------------------------------------------

FAST = {
    "backend": "cpu",
    "timing": {"warmup_s": 0.01, "min_time_s": 0.02, "min_samples": 3},
    "disturbance": UNJUDGED,
}
TINY_SWEEP = {
    "tiny": {
        "m": [1, 16],
        "n": [256],
        "k": [256],
        "dtypes": ["fp32"],
        "layouts": ["nn"],
        "cache_states": ["warm", "cold"],
    }
}
BUILTIN = "rooflab.workloads.builtin"
RELU = ["--param", "n=65536,262144"]
BLOCKDIAG = {"n": [256], "blocks": [8], "k": [32]}
# n = 2^20 indices (8 MiB) leave the first caches behind: every hop waits for the one before
CHASE = ["--param", "n=1048576", "--param", "steps=100000", "--dtype", "fp64"]


def _in_process(results: Path, name: str, spec: dict) -> Path:
    """A workload run with a `same_work_as`, which `rooflab measure workload` has no option for:
    run_workload with the config's spec, written as the CLI writes it."""
    from rooflab.backends.selection import select_backend
    from rooflab.config import validate_config
    from rooflab.experiments.timing import TimingSettings
    from rooflab.experiments.workload_cases import run_workload
    from rooflab.records import write_run

    config = validate_config(copy.deepcopy(FAST))
    timing = TimingSettings.from_config(config["timing"], config["disturbance"])
    tables = run_workload(select_backend("cpu"), name, spec, timing)
    out = results / "workloads" / name / "local" / "runs"
    return write_run(out, tables["runs"][0]["run_id"], tables)


@pytest.fixture(scope="module")
def store(tmp_path_factory, quick_ceilings_run) -> Path:
    root = tmp_path_factory.mktemp("workloads_store")
    (root / "fast.yaml").write_text(yaml.safe_dump({**FAST, "sweeps": TINY_SWEEP}))
    results = root / "results"
    _, ceilings_run = quick_ceilings_run
    shutil.copytree(ceilings_run, results / "ceilings" / "runs" / ceilings_run.name)
    rooflab_ok(
        "measure", "gemm", "--config", "fast.yaml", "--sweep", "tiny",
        "--out", "results/sweeps/tiny/runs", cwd=root,
    )  # fmt: skip
    for name, params in (
        ("relu_axpb_unfused", RELU),
        ("blockdiag_dense", [f"--param={k}={v[0]}" for k, v in BLOCKDIAG.items()]),
        ("pointer_chase", CHASE),
    ):
        rooflab_ok(
            "measure", "workload", f"{BUILTIN}:{name}", *params, "--backend", "cpu",
            "--config", "fast.yaml", "--out", f"results/workloads/{name}/local/runs", cwd=root,
        )  # fmt: skip
    for name, baseline, params in (
        ("relu_axpb_fused", "relu_axpb_unfused", {"n": [65536, 262144]}),
        ("blockdiag_blocks", "blockdiag_dense", BLOCKDIAG),
    ):
        spec = {"entry": f"{BUILTIN}:{name}", "params": params, "dtypes": ["fp32"]}
        _in_process(results, name, spec | {"same_work_as": baseline})
    workload_runs = sorted((results / "workloads").glob("*/local/runs/*"))
    assert len(workload_runs) == 5
    analysis = build_analysis(
        sorted((results / "ceilings" / "runs").iterdir()),
        [*sorted((results / "sweeps" / "tiny" / "runs").iterdir()), *workload_runs],
    )
    return store_of(results, analysis)


@pytest.fixture(scope="module")
def built(store, tmp_path_factory):
    return build_report(store, tmp_path_factory.mktemp("workloads_report") / "report")


WORKLOADS = {"relu_axpb_unfused", "relu_axpb_fused", "blockdiag_dense", "blockdiag_blocks"}
WORKLOADS |= {"pointer_chase"}


@pytest.mark.slow  # the store behind it runs real measurements
def test_workloads_get_their_charts_after_the_roofline_and_the_gemms_keep_theirs(built):
    charts = built.charts
    assert charts[:2] == ["roofline", "implementations"]
    # one time-vs-params chart per workload of several cases, after the GEMM sweeps' charts
    times = [c for c in charts if c.startswith("workload_time_")]
    assert times == ["workload_time_relu_axpb_fused", "workload_time_relu_axpb_unfused"]
    assert charts.index(times[0]) > charts.index("reuse_efficiency_tiny")
    reuse = spec_rows(built.specs["reuse_time_tiny"])
    assert {r["series"] for r in reuse} == {"fp32 nn N=256 K=256"}
    for name in charts:
        assert (built.out_dir / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # the store behind it runs real measurements
def test_the_implementations_chart_and_table_are_the_views_pairs(built, store):
    pairs = query(store, "SELECT * FROM implementation_comparisons").to_pylist()
    assert {(p["workload"], p["baseline"]) for p in pairs} == {
        ("relu_axpb_fused", "relu_axpb_unfused"),
        ("blockdiag_blocks", "blockdiag_dense"),
    }
    assert len(pairs) == (2 + 1) * 2  # cases × cache states
    spec = built.specs["implementations"]
    titles = [panel["title"]["text"] for panel in spec["vconcat"]]
    assert titles == [
        "blockdiag_blocks (filled) vs blockdiag_dense (hollow)",
        "relu_axpb_fused (filled) vs relu_axpb_unfused (hollow)",
    ]
    dots = [la for la in layers_of(spec) if la["mark"]["type"] == "point"]
    drawn = {
        (r["name"], r["params"], r["cache_state"]): r["seconds"]
        for la in dots
        for r in spec["datasets"][la["data"]["name"]]
    }
    for p in pairs:
        key = (p["params"], p["cache_state"])
        assert drawn[(p["workload"], *key)] == pytest.approx(p["time_s"])
        assert drawn[(p["baseline"], *key)] == pytest.approx(p["baseline_time_s"])
    texts = [la for la in layers_of(spec) if la["mark"]["type"] == "text"]
    said = {r["says"] for la in texts for r in spec["datasets"][la["data"]["name"]]}
    assert said == {p["says"] for p in pairs}
    for p in pairs:
        assert re.fullmatch(r"(lower|higher) executed FLOP/s, [\d.]+x (faster|slower)", p["says"])
    page = built.index.read_text()
    section = page[page.index("id='chart-implementations'") :]
    table = section[: section.index("</table>")]
    assert "<th>workload / baseline</th>" in table and "<th>says</th>" in table
    for p in pairs:
        assert f"<td>{p['says']}</td>" in table
    assert "<td>relu_axpb_fused / relu_axpb_unfused</td>" in table


@pytest.mark.slow  # the store behind it runs real measurements
def test_each_workload_of_several_cases_has_its_time_against_its_param(built, store):
    points = query(
        store,
        "SELECT config_id, cache_state, median_s, bound_s FROM latest_model_points "
        "WHERE sweep = 'relu_axpb_fused'",
    ).to_pylist()
    spec = built.specs["workload_time_relu_axpb_fused"]
    assert spec["title"] == "Workload relu_axpb_fused: median time and Roofline bound vs n"
    rows = spec_rows(spec)
    assert {r["value"] for r in rows} == {65536, 262144}
    drawn = {(r["config_id"], r["cache_state"], r["source"]): r["seconds"] for r in rows}
    assert len(drawn) == len(points) * 2
    for p in points:
        key = (p["config_id"], p["cache_state"])
        assert drawn[(*key, "measured median")] == pytest.approx(p["median_s"])
        assert drawn[(*key, "Roofline lower bound")] == pytest.approx(p["bound_s"])
    page = built.index.read_text()
    assert "<h2>Workload relu_axpb_fused: time vs n</h2>" in page


@pytest.mark.slow  # the store behind it runs real measurements
def test_the_roofline_draws_workloads_as_labelled_stars_and_joins_each_pair(built, store):
    spec = built.specs["roofline"]
    layers = layers_of(spec)
    (star,) = [
        la for la in layers if la.get("encoding", {}).get("shape", {}).get("title") == WORKLOADS_KEY
    ]
    assert {r["sweep"] for r in spec["datasets"][star["data"]["name"]]} == WORKLOADS
    assert star["encoding"]["shape"]["scale"]["domain"] == sorted(WORKLOADS)
    # each workload its own star, named in the legend; named beside one of its stars where the
    # name fits (clear of every roof, label and other point's marks), nearer it than any other
    assert len(set(star["encoding"]["shape"]["scale"]["range"])) == len(WORKLOADS)
    assert len(_workload_names(spec)) >= 3 and _workload_names(spec) <= WORKLOADS
    named = _named_labels(spec)
    assert label_crossings(named) == [] and label_overlaps(named) == []
    scene = rendered(spec)
    assert overprinted_texts(scene) == []
    _each_name_beside_its_own_star(scene, WORKLOADS)
    # the fusion pair: a line from each unfused point to the fused one, to the right
    (pair,) = [
        la for la in layers if la["mark"]["type"] == "rule" and "x2" in la.get("encoding", {})
    ]
    segments = spec["datasets"][pair["data"]["name"]]
    fusion = [s for s in segments if s["pair"] == "relu_axpb_unfused → relu_axpb_fused"]
    assert len(fusion) == 4 and all(s["x2"] == pytest.approx(3 * s["x"]) for s in fusion)
    assert "stars: your workloads" in " ".join(spec["title"]["subtitle"])


@pytest.mark.slow  # the store behind it runs real measurements
def test_the_pointer_chase_is_said_to_be_far_below_its_roof(built, store):
    far = query(
        store,
        "SELECT sweep, config_id, cache_state, efficiency FROM latest_model_points "
        "WHERE far_below_roof",
    ).to_pylist()
    assert "pointer_chase" in {r["sweep"] for r in far}
    page = built.index.read_text()
    roofline = page[page.index("id='chart-roofline'") : page.index("id='chart-implementations'")]
    notes = re.findall(r"<p class='far-below'>(.*?)</p>", roofline)
    chase = [n for n in notes if n.startswith("pointer_chase (n=1048576, steps=100000, fp64)")]
    assert len(chase) == 1 and "its time is explained by neither roof" in chase[0]
    for r in far:
        if r["sweep"] == "pointer_chase":
            assert f"{100 * r['efficiency']:.2g} % ({r['cache_state']} cache)" in chase[0]
    assert len(notes) == len({r["config_id"] for r in far})  # one sentence per configuration


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_the_page_with_workloads_renders_in_a_real_browser(built, tmp_path):
    dom = render_in_browser(built, tmp_path)
    roofline = svg_texts(chart_svg(dom, "roofline"))
    assert WORKLOADS_KEY in roofline and set(roofline) >= WORKLOADS  # a legend entry each
    assert {"relu_axpb_fused", "relu_axpb_unfused", "pointer_chase"} <= set(roofline)
    pairs = svg_texts(chart_svg(dom, "implementations"))
    assert "relu_axpb_fused (filled) vs relu_axpb_unfused (hollow)" in pairs
    assert any(re.fullmatch(r"higher executed FLOP/s, [\d.]+x faster", t) for t in pairs)
    headings = re.findall(r"<h2>(.*?)</h2>", dom)
    assert "Same work, two implementations" in headings
    assert "Workload relu_axpb_fused: time vs n" in headings
    times = svg_texts(chart_svg(dom, "workload_time_relu_axpb_unfused"))
    assert "Workload relu_axpb_unfused: median time and Roofline bound vs n" in times


@pytest.mark.slow  # the store behind it runs real measurements
def test_the_built_in_workloads_have_their_known_causes(store):
    """Issue 43: the pointer chase (one dependent load after another) is memory_parallelism,
    the dense block-diagonal product (8 blocks computed, 1 useful) wasted_work, predicted at an
    eighth of its time; the blocked one wastes nothing. A point measured at another clock than
    its roof, or disturbed, is `conditions` instead, which its evidence says."""
    rows = query(
        store,
        "SELECT key, cause, evidence, predicted_s, median_s FROM diagnoses WHERE kind = 'workload'",
    ).to_pylist()
    by_workload: dict[str, list[dict]] = {}
    for row in rows:
        by_workload.setdefault(row["key"].split("/")[0], []).append(row)

    def has(row: dict, cause: str) -> bool:
        if row["cause"] == "conditions":  # said with the figures that decided it
            evidence = json.loads(row["evidence"])
            clocks = (
                evidence["roofline_points.clock_mhz"],
                evidence["roofline_points.roof_clock_mhz"],
            )
            return evidence["roofline_points.disturbed"] or abs(clocks[1] / clocks[0] - 1) > 0.1
        return row["cause"] == cause

    chase, dense = by_workload["pointer_chase"], by_workload["blockdiag_dense"]
    assert len(chase) == 2 and all(has(row, "memory_parallelism") for row in chase)
    assert len(dense) == 2 and all(has(row, "wasted_work") for row in dense)
    for row in dense:
        if row["cause"] == "wasted_work":
            assert json.loads(row["evidence"])["executed_over_useful"] == pytest.approx(8)
            assert row["predicted_s"] == pytest.approx(row["median_s"] / 8)
    assert not [r for r in by_workload["blockdiag_blocks"] if r["cause"] == "wasted_work"]


@pytest.mark.slow  # the store behind it runs real measurements
def test_each_same_work_as_pair_is_diagnosed_with_the_speedup_the_store_compares(store):
    pairs = query(
        store, "SELECT key, cache_state, evidence FROM diagnoses WHERE key LIKE '% vs %'"
    ).to_pylist()
    compared = query(
        store, "SELECT workload, baseline, cache_state, speedup FROM implementation_comparisons"
    ).to_pylist()
    assert len(pairs) == len(compared) > 0
    ours: dict[tuple, list[float]] = {}
    for pair in pairs:
        case, baseline = pair["key"].split(" vs ")
        key = (case.split("/")[0], baseline, pair["cache_state"])
        ours.setdefault(key, []).append(json.loads(pair["evidence"])["speedup"])
    theirs: dict[tuple, list[float]] = {}
    for c in compared:
        theirs.setdefault((c["workload"], c["baseline"], c["cache_state"]), []).append(c["speedup"])
    assert ours.keys() == theirs.keys()
    for key, speedups in ours.items():
        assert sorted(speedups) == pytest.approx(sorted(theirs[key]))
