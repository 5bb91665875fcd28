"""The counters charts' Vega-Lite specs, built from our own structures (hierarchical_points rows,
model_vs_counted results), checked for what a reader relies on, and rendered once by Vega."""

from __future__ import annotations

import pandas as pd
import pytest

from rooflab.counters import calibrate, hierarchical_points, model_vs_counted, pair
from rooflab.report.counter_charts import (
    hierarchical_roofline_chart,
    model_vs_counted_chart,
    model_vs_counted_table,
)
from rooflab.report.summary import counters_summary_html

CEILINGS = {"HBM": 4.0e12, "L2": 1.2e13, "bf16_tensor": 7.0e14}
CONFIGS = [  # m, cold median (s), counted HBM, L2, L1 bytes
    (64, 30e-6, 3.4e7, 2.0e8, 6.0e8),
    (4096, 250e-6, 2.0e8, 3.0e9, 1.2e10),
]


def config_id(m: int) -> str:
    return f"main/bf16/nn/m{m}_n4096_k4096"


def points() -> pd.DataFrame:
    rows = []
    for m, median, hbm, l2, l1 in CONFIGS:
        n = k = 4096
        timing = {"run_id": "r1", "config_id": config_id(m), "cache_state": "cold"}
        timing |= {"median_s": median, "m": m, "n": n, "k": k, "dtype": "bf16", "layout": "nn"}
        timing |= {"kind": "gemm", "flops": 2 * m * n * k}
        timing |= {"achieved_flops_per_s": 2 * m * n * k / median}
        pairing = pair({"config_id": config_id(m), "cache_control": "all"}, [timing])
        calibration = calibrate(2 * m * n * k, m, n, k, path="bf16_tensor")
        levels = {"HBM": hbm, "L2": l2, "L1": l1}
        rows += hierarchical_points(pairing, calibration, levels, CEILINGS, "bf16_tensor")
    return pd.DataFrame(rows)


def ceilings() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"kind": "bandwidth", "name": "HBM", "value": 4.0e12},
            {"kind": "bandwidth", "name": "L2", "value": 1.2e13},
            {"kind": "compute", "name": "bf16_tensor", "value": 7.0e14},
            {"kind": "compute", "name": "fp64_tensor", "value": 6.0e13},  # no point: not drawn
        ]
    )


def data_of(spec: dict, layer: dict) -> list[dict]:
    return spec["datasets"][layer["data"]["name"]]


def mark(layer: dict) -> str:
    return layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"]


def marked(spec: dict, kind: str) -> list[dict]:
    """The layers whose mark is `kind` ("point", "line", "text"), in drawing order."""
    return [la for la in spec["layer"] if mark(la) == kind]


def test_hierarchical_chart_moves_the_label_of_a_close_lower_roof_under_its_line():
    close = pd.concat(
        [ceilings(), pd.DataFrame([{"kind": "bandwidth", "name": "L1", "value": 1.3e13}])]
    )
    spec = hierarchical_roofline_chart(points(), close).to_dict()
    dy = {row["roof"]: la["mark"]["dy"] for la in marked(spec, "text") for row in data_of(spec, la)}
    # L1 13 TB/s and L2 12 TB/s: 1.08x apart, labelled at the same edge
    assert dy["L1 13 TB/s"] == -7 and dy["L2 12 TB/s"] == 13
    assert dy["HBM 4 TB/s"] == -7 and dy["bf16_tensor 700 TFLOP/s"] == -7


def test_hierarchical_chart_one_point_per_level_per_configuration_joined_per_configuration():
    spec = hierarchical_roofline_chart(points(), ceilings()).to_dict()
    (point_layer,) = marked(spec, "point")
    rows = data_of(spec, point_layer)
    assert sorted((r["config_id"], r["level"]) for r in rows) == sorted(
        (config_id(m), level) for m, *_ in CONFIGS for level in ("HBM", "L2", "L1")
    )
    enc = point_layer["encoding"]
    assert enc["color"]["field"] == "level"
    assert enc["color"]["scale"]["domain"] == ["HBM", "L2", "L1"]
    assert enc["shape"]["field"] == "config_id"
    # every point of one configuration has the same performance: its paired timing
    for m, median, *_ in CONFIGS:
        ys = [r["y"] for r in rows if r["config_id"] == config_id(m)]
        assert ys == [pytest.approx(2 * m * 4096 * 4096 / median)] * 3
    # the paired timing in the tooltip carries its unit: "30 μs", never "30µ" under "(s)"
    assert {"field": "median_s_text", "type": "nominal", "title": "median time"} in enc["tooltip"]
    assert {r["median_s_text"] for r in rows} == {"30 μs", "250 μs"}
    (join,) = [
        la
        for la in marked(spec, "line")
        if la["encoding"].get("detail", {}).get("field") == "config_id"
    ]
    assert join["encoding"]["order"]["field"] == "x"
    assert data_of(spec, join) == rows


def test_hierarchical_chart_axes_roofs_and_tooltips():
    spec = hierarchical_roofline_chart(points(), ceilings()).to_dict()
    x_titles, y_titles = set(), set()
    for layer in spec["layer"]:
        enc = layer["encoding"]
        assert "tooltip" in enc, f"{mark(layer)} layer without tooltip"
        assert enc["x"]["scale"]["type"] == "log" and enc["y"]["scale"]["type"] == "log"
        x_titles.add(enc["x"].get("title"))
        y_titles.add(enc["y"].get("title"))
    assert "Arithmetic intensity (FLOP/byte)" in x_titles
    assert "Performance (FLOP/s)" in y_titles
    labels = [r["roof"] for la in marked(spec, "text") for r in data_of(spec, la)]
    assert sorted(labels) == ["HBM 4 TB/s", "L2 12 TB/s", "bf16_tensor 700 TFLOP/s"]
    # each bandwidth roof is coloured as its level's points, so a point reads against its own roof
    (roofs,) = [la for la in marked(spec, "line") if "color" in la["encoding"]]
    assert roofs["encoding"]["color"]["field"] == "level"
    assert {r["level"] for r in data_of(spec, roofs)} == {"HBM", "L2"}
    for row in data_of(spec, roofs):  # y = B·x on the roof
        assert row["y"] == pytest.approx(CEILINGS[row["level"]] * row["x"])


def test_hierarchical_chart_roofs_meet_at_their_ridges_and_everything_is_inside_the_axes():
    spec = hierarchical_roofline_chart(points(), ceilings()).to_dict()
    (point_layer,) = marked(spec, "point")
    x_domain = point_layer["encoding"]["x"]["scale"]["domain"]
    y_domain = point_layer["encoding"]["y"]["scale"]["domain"]
    (roof_layer,) = [la for la in marked(spec, "line") if "color" in la["encoding"]]
    (compute_layer,) = [
        la
        for la in marked(spec, "line")
        if la["encoding"].get("detail", {}).get("field") == "roof" and "color" not in la["encoding"]
    ]
    peak, fastest = CEILINGS["bf16_tensor"], max(CEILINGS["HBM"], CEILINGS["L2"])
    for level in ("HBM", "L2"):  # from the left edge up to the compute roof
        xs = sorted(r["x"] for r in data_of(spec, roof_layer) if r["level"] == level)
        assert xs == [pytest.approx(x_domain[0]), pytest.approx(peak / CEILINGS[level])]
    compute_xs = sorted(r["x"] for r in data_of(spec, compute_layer))
    assert compute_xs == [pytest.approx(peak / fastest), pytest.approx(x_domain[1])]
    assert {r["y"] for r in data_of(spec, compute_layer)} == {peak}
    # every point, ridge and roof end is drawn inside the axes
    drawn = data_of(spec, point_layer) + data_of(spec, roof_layer) + data_of(spec, compute_layer)
    assert all(x_domain[0] <= r["x"] <= x_domain[1] * (1 + 1e-12) for r in drawn)
    assert all(y_domain[0] < r["y"] < y_domain[1] for r in drawn)
    # labels: bandwidth roofs at their left end, the compute roof at its right end
    texts = {r["roof"]: r for la in marked(spec, "text") for r in data_of(spec, la)}
    assert texts["HBM 4 TB/s"]["x"] == pytest.approx(x_domain[0])
    assert texts["L2 12 TB/s"]["y"] == pytest.approx(CEILINGS["L2"] * x_domain[0])
    compute_label = texts["bf16_tensor 700 TFLOP/s"]
    assert (compute_label["x"], compute_label["y"]) == (pytest.approx(x_domain[1]), peak)

    # a ridge right of every point still lies inside the axes (the axes reach 4x past it)
    faster = ceilings().replace({"value": {7.0e14: 7.0e15}})
    spec = hierarchical_roofline_chart(points(), faster).to_dict()
    (point_layer,) = marked(spec, "point")
    assert max(r["x"] for r in data_of(spec, point_layer)) < 7.0e15 / CEILINGS["HBM"]
    assert point_layer["encoding"]["x"]["scale"]["domain"][1] == pytest.approx(
        4 * 7.0e15 / CEILINGS["HBM"]
    )


def test_hierarchical_chart_leaves_out_points_it_cannot_place():
    frame = points()
    frame.loc[0, "intensity"] = float("inf")  # a level with zero counted bytes
    frame.loc[1, "intensity"] = 0.0
    frame.loc[2, "achieved_flops_per_s"] = 0.0
    spec = hierarchical_roofline_chart(frame, ceilings()).to_dict()
    (point_layer,) = marked(spec, "point")
    assert len(data_of(spec, point_layer)) == len(frame) - 3


def model_rows() -> pd.DataFrame:
    rows = []
    for m, _, hbm, *_ in CONFIGS:
        model_bytes = 2 * (m * 4096 + 4096 * 4096 + m * 4096)
        result = model_vs_counted(model_bytes, hbm)
        rows.append({"config_id": config_id(m), "cache_state": "cold", **result.__dict__})
    return pd.DataFrame(rows)


def test_model_vs_counted_chart_and_table():
    frame = model_rows()
    spec = model_vs_counted_chart(frame).to_dict()
    for layer in spec["layer"]:
        assert "tooltip" in layer["encoding"]
    (dots,) = marked(spec, "point")
    assert dots["encoding"]["x"]["title"] == "Bytes (B)"
    assert dots["encoding"]["x"]["scale"]["type"] == "log"
    sources = sorted({(r["config_id"], r["source"]) for r in data_of(spec, dots)})
    assert sources == sorted(
        (config_id(m), s)
        for m, *_ in CONFIGS
        for s in ("model (cold-cache ledger)", "counted HBM (ncu)")
    )
    (notes,) = marked(spec, "text")
    texts = [r["note"] for r in data_of(spec, notes)]
    assert texts == [f"counted/model {r.ratio:.3g}: {r.direction}" for r in frame.itertuples()]
    assert texts[0].endswith("model over-counts") and texts[1].endswith("model under-counts")
    table = model_vs_counted_table(frame)
    assert list(table.columns) == [
        "configuration",
        "cache state",
        "model bytes (B)",
        "counted HBM bytes (B)",
        "counted / model",
        "direction",
    ]
    assert list(table.direction) == ["model over-counts", "model under-counts"]
    assert table["counted HBM bytes (B)"][0] == "34 MB"


def test_charts_render_in_vega():
    vl_convert = pytest.importorskip("vl_convert")
    svg = vl_convert.vegalite_to_svg(hierarchical_roofline_chart(points(), ceilings()).to_json())
    for label in ("HBM 4 TB/s", "L2 12 TB/s", "bf16_tensor 700 TFLOP/s", "FLOP/byte"):
        assert label in svg
    svg = vl_convert.vegalite_to_svg(model_vs_counted_chart(model_rows()).to_json())
    assert "model over-counts" in svg and "Bytes (B)" in svg


def counters_state(*rows: tuple) -> pd.DataFrame:
    """Rows as the report's counters-state query gives them: what, sweep, status, reason, n."""
    frame = pd.DataFrame(rows, columns=["what", "sweep", "status", "reason", "n"])
    return frame.assign(tool="ncu")


def test_counters_summary_names_replays_that_give_no_point_and_why():
    state = counters_state(
        ("status", "main", "ok", None, 4),
        ("calibration", "main", "trusted", None, 1),
        ("calibration", "main", "unpaired", "no cold timing of m64 in run r1", 1),
        ("calibration", "main", "untrusted", "bf16_tensor counted 0.5x 2MNK", 2),
    )
    lines = counters_summary_html(state, pd.DataFrame()).split("\n")
    assert lines == [
        "<p class='counters warning'>Hardware counters: 2 replay(s) failed calibration, no point "
        "from them: bf16_tensor counted 0.5x 2MNK.</p>",
        "<p class='counters warning'>Hardware counters: 1 replay(s) not paired, no point from "
        "them: no cold timing of m64 in run r1.</p>",
        "<p class='counters'>Hardware counters collected, but none reached a point; points use "
        "model bytes (<code>q_source = model</code>).</p>",
    ]
    # with points, the summary counts their configurations and limiting levels instead
    with_points = counters_summary_html(state, points())
    assert "collected, but none" not in with_points
    assert "<b>2</b> configuration(s) with hierarchical points" in with_points


def test_counters_summary_scopes_an_unavailable_tool_to_its_sweeps():
    alone = counters_summary_html(
        counters_state(("status", "main", "unavailable", "ERR_NVGPUCTRPERM", 1)), pd.DataFrame()
    )
    assert alone == (
        "<p class='counters'><b>Hardware counters: unavailable</b> — ERR_NVGPUCTRPERM; points "
        "use model bytes (<code>q_source = model</code>).</p>"
    )
    mixed = counters_summary_html(
        counters_state(
            ("status", "main", "ok", None, 3),
            ("status", "tails", "unavailable", "ncu not found", 1),
        ),
        pd.DataFrame(),
    )
    assert "<b>Hardware counters: unavailable</b> for sweep(s) tails — ncu not found;" in mixed
    assert "collected, but none" not in mixed  # the unavailable line already says model bytes
    assert counters_summary_html(counters_state(), pd.DataFrame()) == ""


def test_hierarchical_chart_rings_the_points_of_a_disturbed_timing():
    frame = points()
    why = "other processes used 0.90 CPUs while it sampled (limit 0.25)"
    disturbed = frame.config_id == config_id(CONFIGS[0][0])
    frame = frame.assign(disturbed=disturbed, disturbance=disturbed.map({True: why, False: "no"}))
    spec = hierarchical_roofline_chart(frame, ceilings()).to_dict()
    ring, dots = marked(spec, "point")  # the ring under the points
    assert ring["mark"]["filled"] is False and ring["transform"][0] == {"filter": "datum.disturbed"}
    ringed = [r for r in data_of(spec, ring) if r["disturbed"]]
    assert sorted(r["level"] for r in ringed) == ["HBM", "L1", "L2"]
    assert {r["disturbance"] for r in ringed} == {why}
    titles = [t["title"] for t in dots["encoding"]["tooltip"]]
    assert "disturbed by other processes" in titles
    # a chart without disturbance columns (an older store) has no ring
    plain = hierarchical_roofline_chart(points(), ceilings()).to_dict()
    assert len(marked(plain, "point")) == 1
