"""A report read at a glance (issue 27): each chart says what it shows without a hover, and a
PNG of it stands alone.

Pure tests of the chart functions (rendered to SVG with vl-convert where what one sees matters),
and a small constructed store (rows inserted into an empty store: made-up values on machines named
so, never a measurement) for the view columns behind them: the nominal clock, the read kernel's
ceiling beside the best one.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import duckdb
import pandas as pd
import pytest

from rooflab.report import build_report
from rooflab.report.roofline_chart import roofline_chart
from rooflab.report.roofline_points import ABOVE_LABEL, roofline_title
from rooflab.report.run_charts import change_chart, conditions_chart
from rooflab.report.stage_charts import stage_bounds_chart
from rooflab.report.sweep_charts import (
    best_kernel_note,
    binary_ticks,
    cache_marks,
    reuse_efficiency_chart,
    reuse_time_chart,
    sweep_chart,
)
from rooflab.store import query
from tests.rendered_marks import (
    legend_symbols,
    out_of_order_roof_labels,
    overprinted_texts,
    rendered,
)
from tests.report_pages import (
    AVX512_ROOFS,
    CPU_ROOFS,
    H200_ROOFS,
    avx512_ceilings,
    avx512_points,
    axis_labels,
    ceilings_of,
    channel_of,
    cpu_ceilings,
    cpu_points,
    datasheet_of,
    empty_store,
    insert_rows,
    label_crossings,
    label_overlaps,
    layers_of,
    spec_rows,
    svg_texts,
)
from tests.table_rows import runs_row

# -- what one sees: the SVG vl-convert draws -----------------------------------------------------


def _svg(chart) -> str:
    import vl_convert as vlc

    return vlc.vegalite_to_svg(chart.to_dict() if hasattr(chart, "to_dict") else chart)


# -- the Roofline: a CPU whose L2 and L3 roofs are 17 % apart (the user's machine) ----------------


def _point_layer(spec: dict) -> dict:
    return [layer for layer in layers_of(spec) if layer["mark"]["type"] == "point"][-1]


def test_each_roof_has_its_own_legended_colour_and_each_point_its_roofs_colour():
    spec = roofline_chart(cpu_ceilings(), cpu_points()).to_dict()
    lines = layers_of(spec)[0]
    colour = lines["encoding"]["color"]
    assert colour["field"] == "ceiling" and colour["legend"]["symbolType"] == "stroke"
    domain, colours = colour["scale"]["domain"], colour["scale"]["range"]
    assert len(domain) == len(CPU_ROOFS) and len(set(colours)) == len(colours)
    by_roof = dict(zip(domain, colours, strict=True))
    l2, l3 = (next(r for r in domain if r.startswith(level + " ")) for level in ("L2", "L3"))
    assert by_roof[l2] != by_roof[l3] and l2.startswith("L2 228 GB/s")
    # a point's colour is the roof it is judged against: its level's where memory-bound, its
    # compute path's where compute-bound, with a dotted guide from it up to that roof
    point = _point_layer(spec)
    assert point["encoding"]["color"]["field"] == "roof"
    assert point["encoding"]["color"]["scale"] == colour["scale"]
    rows = spec["datasets"][point["data"]["name"]]
    for row in rows:
        judged = row["level"] if row["limiter"] == "memory" else row["compute_path"]
        assert row["roof"].startswith(judged + " ") and row["roof"] in domain
    assert {row["roof"].split()[0] for row in rows} >= {"L2", "DRAM", "fp32_blas"}
    (guide,) = [layer for layer in layers_of(spec) if layer["mark"]["type"] == "rule"]
    assert guide["encoding"]["y2"]["field"] == "attainable_flops_per_s"
    assert guide["encoding"]["color"]["field"] == "roof"
    # every roof in the legend, as drawn
    texts = svg_texts(_svg(spec))
    assert set(domain) <= set(texts)


def test_points_show_their_sweep_their_m_and_their_cache_state():
    spec = roofline_chart(cpu_ceilings(), cpu_points()).to_dict()
    encoding = _point_layer(spec)["encoding"]
    assert encoding["shape"]["field"] == "sweep"
    assert encoding["size"]["field"] == "m" and encoding["size"]["scale"]["type"] == "log"
    assert encoding["fillOpacity"]["field"] == "cache_state"
    assert encoding["fillOpacity"]["scale"]["domain"] == ["warm", "cold"]  # filled, hollow
    texts = svg_texts(_svg(spec))
    key = "sweep (filled: warm cache, hollow: cold)"  # no legend for fill opacity: the key
    assert {key, "weight_reuse", "tails", "M (rows of X)"} <= set(texts)


def test_points_above_their_roof_are_marked_and_legended():
    spec = roofline_chart(cpu_ceilings(), cpu_points(above=True)).to_dict()
    (marks,) = [
        la for la in layers_of(spec) if {"filter": "datum.above_roof"} in la.get("transform", [])
    ]
    assert marks["mark"]["shape"] == "triangle-up" and marks["mark"]["filled"] is False
    assert ABOVE_LABEL in marks["encoding"]["stroke"]["scale"]["domain"]
    assert ABOVE_LABEL in svg_texts(_svg(spec))
    # none above: no mark and no legend entry
    calm = roofline_chart(cpu_ceilings(), cpu_points(above=False)).to_dict()
    assert not [
        la for la in layers_of(calm) if {"filter": "datum.above_roof"} in la.get("transform", [])
    ]
    assert ABOVE_LABEL not in svg_texts(_svg(calm))


def test_no_roof_line_runs_through_a_label_and_no_label_covers_another():
    """The user's CPU (L2 and L3 5 px apart, slanted roofs crossing the library roofs' starts)
    and an H200 with its datasheet roofs (bf16 and fp16 2 px apart, a datasheet roof 7 % above
    the measured HBM one)."""
    cpu = roofline_chart(cpu_ceilings(), cpu_points()).to_dict()
    ceilings = ceilings_of(
        *H200_ROOFS,
        ("compute", "fp32_fma", "fma_chains", 60e12),
        ("compute", "fp64_fma", "fma_chains", 30e12),
        ("bandwidth", "L2", "read", 11e12),
        ("bandwidth", "L1", "l1_read", 30e12),
    )
    points = pd.DataFrame(
        [
            {"dtype": d, "intensity": i, "achieved_flops_per_s": 0.7 * min(723e12, 4.47e12 * i)}
            for d in ("bf16", "fp16")
            for i in (0.5, 8.0, 128.0, 2048.0)
        ]
    )
    gpu = roofline_chart(ceilings, points, datasheet_of("NVIDIA H200")).to_dict()
    for spec in (cpu, gpu):
        assert {r["ceiling"] for r in spec_rows(spec, "dy")} == _roof_labels(spec)  # every roof
        assert label_crossings(spec) == []
        assert label_overlaps(spec) == []
    # the slanted roofs' labels run along their lines
    angles = {r["ceiling"].split()[0]: r["angle"] for r in spec_rows(cpu, "dy")}
    assert angles["L2"] == angles["DRAM"] < -20 and angles["fp64_fma"] == 0


def _roof_labels(spec: dict) -> set[str]:
    return {r["ceiling"] for r in spec_rows(spec, "kind")}


# The AVX-512 CPU's roofs as measured (0), and as a rerun might measure them: each roof 20 %
# lower to 25 % higher, a factor per roof from a seeded draw (its compute roofs cross over)
ROOF_DRAWS = range(6)


def _drawn_roofs(draw: int) -> dict[str, float]:
    import random

    pick = random.Random(draw)
    return {name: pick.uniform(0.8, 1.25) for (_, name, _, _) in AVX512_ROOFS} if draw else {}


@pytest.mark.parametrize("draw", ROOF_DRAWS)
def test_roof_labels_keep_the_order_of_their_lines_and_overprint_nothing_as_drawn(draw):
    """Issue 44: six compute roofs within a factor of 5 (fp64_fma 3 % under fp32_fma_avx2,
    fp64_blas 9 % under fp64_fma_avx2), read from the scene vl-convert draws the PNG from: no
    two texts overprint (each text as wide as Vega measures it), no roof runs through a label,
    and of two level labels one above the other the higher roof's is the upper one."""
    spec = roofline_chart(avx512_ceilings(_drawn_roofs(draw)), avx512_points()).to_dict()
    scene = rendered(spec)
    roofs = _roof_labels(spec)
    assert roofs <= {text.text for text in scene.texts}  # every roof labelled
    assert overprinted_texts(scene) == []
    assert out_of_order_roof_labels(scene, roofs) == []
    assert label_crossings(spec) == []


def test_a_label_is_never_across_another_roof_from_its_line():
    """A label printed beyond another roof reads as that one's: the leader from a label's anchor
    on its line to its centre crosses no other roof. Here two roofs run 15 and 18 px over this
    one's line and another 8 px under it, and a point sits where the label would go above its
    line: the label keeps its place next to its line over the point, not beyond both roofs."""
    from rooflab.report.labels import place_labels

    axes = ((0.1, 1e4), (1e9, 1e15), (640, 480))  # 128 px a decade across, 80 px up

    def roof(px: float) -> tuple:
        y = 1e12 * 10 ** (px / 80)
        return ((0.1, y), (1e4, y))

    label = {"t": "fp64_fma", "x": 1, "y": 1e12, "align": "left"}
    point = (10 ** (25 / 128), 1e12 * 10 ** (7 / 80))  # in the label's box, above its line
    (placed,) = place_labels([label], "t", *axes, [roof(15), roof(18), roof(-8)], [point])
    assert -15 < placed["dy"] < 8  # between the roofs around its line
    (alone,) = place_labels([label], "t", *axes, [roof(15), roof(18), roof(-8)])
    assert alone["dy"] == -7 and alone["cost"] == 0


def test_legend_symbols_are_the_marks_they_name():
    """A point above its roof is ringed by a black triangle and a disturbed one by a purple
    ring: their legend entries show that triangle and that ring (hollow, same colour and
    outline), and each sweep's entry its points' shape."""
    from rooflab.report.disturbed_marks import DISTURBED_LABEL

    points = cpu_points(above=True)
    alone = legend_symbols(rendered(roofline_chart(cpu_ceilings(), points).to_dict()))
    assert (alone[ABOVE_LABEL]["shape"], alone[ABOVE_LABEL]["strokeWidth"]) == ("triangle-up", 2)
    points.loc[points.index[-1], "disturbed"] = True
    scene = rendered(roofline_chart(cpu_ceilings(), points).to_dict())
    legend = legend_symbols(scene)
    for flag, shape in ((ABOVE_LABEL, "triangle-up"), (DISTURBED_LABEL, "circle")):
        marks = [s for s in scene.symbols if s.fields.get("measurement") == flag]
        assert marks and {(m.shape, m.filled, m.stroke, m.stroke_width) for m in marks} == {
            (shape, False, marks[0].stroke, marks[0].stroke_width)
        }
        symbol = legend[flag]
        assert symbol["shape"] == shape and symbol["fill"] == "transparent"
        assert (symbol["stroke"], symbol["strokeWidth"]) == (marks[0].stroke, marks[0].stroke_width)
    for sweep in ("weight_reuse", "tails"):
        drawn = {s.shape for s in scene.symbols if s.fields.get("sweep") == sweep}
        assert drawn == {legend[sweep]["shape"]}
    assert legend["weight_reuse"]["shape"] != legend["tails"]["shape"]


def test_the_roofline_names_its_machine_date_and_runs():
    scope = {
        "host": "node-7",
        "device_name": "AMD EPYC 9654",
        "backend": "cpu",
        "ceilings_run_id": "20261130T101500Z-abcdef01",
        "last_ceilings": pd.Timestamp("2026-11-30 10:15:00", tz="UTC"),
    }
    points = cpu_points().assign(
        run_id=lambda f: ["20261130T120000Z-11111111", "20261201T080000Z-22222222"] * (len(f) // 2),
        started_at=lambda f: (
            [
                pd.Timestamp("2026-11-30 12:00", tz="UTC"),
                pd.Timestamp("2026-12-01 08:00", tz="UTC"),
            ]
            * (len(f) // 2)
        ),
    )
    title = roofline_title(scope, points)
    assert title["text"] == "Roofline: node-7 · AMD EPYC 9654 (cpu)"
    subtitle = "\n".join(title["subtitle"])
    assert "ceilings: run 20261130T101500Z-abcdef01 (2026-11-30 10:15 UTC)" in subtitle
    assert "2 runs; newest 20261201T080000Z-22222222, 2026-12-01 08:00 UTC" in subtitle
    spec = roofline_chart(cpu_ceilings(), points, None, title).to_dict()
    assert spec["title"]["text"] == title["text"]
    texts = svg_texts(_svg(spec))
    assert title["text"] in texts and title["subtitle"][0] in texts


# -- the ceiling sweep ----------------------------------------------------------------------------


def test_cache_rules_name_reported_and_measured_capacities_whatever_the_columns_dtype():
    """A level's measured edge null as NaN or pd.NA, or none null (int64): a campaign's report
    once failed on each of the last two."""
    every = pd.DataFrame({"level": ["L2", "L3"], "bytes": [4 << 20, 480 << 20]})
    every["measured_bytes"] = pd.Series([2 << 20, 108 << 20], dtype="int64")
    assert [m["label"] for m in cache_marks(every)] == [
        "L2 4 MiB reported", "L2 2 MiB measured", "L3 480 MiB reported", "L3 108 MiB measured",
    ]  # fmt: skip
    for dtype, null in (("float64", float("nan")), ("Int64", pd.NA)):
        some = every.astype({"measured_bytes": dtype})
        some.loc[0, "measured_bytes"] = null
        assert [m["label"] for m in cache_marks(some)] == [
            "L2 4 MiB", "L3 480 MiB reported", "L3 108 MiB measured",
        ]  # fmt: skip


def test_binary_ticks_are_powers_of_two_few_enough_to_read():
    assert binary_ticks(16 * 1024, 256 * 2**20) == [2**e for e in range(14, 29, 2)]
    assert binary_ticks(1000, 5000) == [1024, 2048, 4096]
    ticks = binary_ticks(1, 2**40)
    assert len(ticks) <= 9 and all(t & (t - 1) == 0 for t in ticks)


def test_ceiling_sweep_ticks_read_in_binary_units_like_its_cache_labels():
    sizes = [2**e for e in range(13, 29)]
    sweep = pd.DataFrame(
        {
            "kernel": "read",
            "working_set_bytes": sizes,
            "gb_per_s": [100.0] * len(sizes),
            "level": None,
            "iqr_ratio": 0.01,
        }
    )
    plateaus = pd.DataFrame(columns=["level", "lo", "hi", "mid"])
    caches = [{"x": 48 * 1024, "label": "L1 48 KiB"}, {"x": 2**21, "label": "L2 2 MiB"}]
    chart = sweep_chart(sweep, plateaus, caches)
    axis = next(e for e in channel_of(chart.to_dict(), "x") if "axis" in e)["axis"]
    assert all(v & (v - 1) == 0 for v in axis["values"])
    labels = axis_labels(_svg(chart), "X-axis titled 'Working set")
    assert labels and all(re.fullmatch(r"\d+ (B|KiB|MiB|GiB)", label) for label in labels)
    assert {"16 KiB", "1 MiB", "256 MiB"} <= set(labels)


def test_best_kernel_note_says_where_read_is_below_another_kernel():
    ceilings = pd.DataFrame(
        [
            {"kind": "bandwidth", "name": "L1", "kernel": "read", "value": 600e9,
             "read_value": 600e9},
            {"kind": "bandwidth", "name": "DRAM", "kernel": "triad", "value": 40.9e9,
             "read_value": 32.6e9},
            {"kind": "compute", "name": "fp64_fma", "kernel": "fma_chains", "value": 1e11,
             "read_value": None},
        ]
    )  # fmt: skip
    note = best_kernel_note(ceilings)
    assert note.count(". ") <= 1 and note.strip().endswith(".")  # one sentence
    assert "on DRAM, triad (40.9 GB/s) beats read (32.6 GB/s)" in note
    assert "L1" not in note and "the ceiling" in note.replace("each level's ceiling", "the ceiling")
    assert best_kernel_note(ceilings[ceilings.name != "DRAM"]) == ""


# -- the weight-reuse charts ---------------------------------------------------------------------


def test_weight_reuse_charts_carry_their_sweeps_name():
    long = pd.DataFrame(
        [
            {"series": "fp32", "cache_state": "warm", "m": m, "quantity": q, "source": s,
             "seconds": 1e-3 * m}
            for m in (1, 4)
            for q in ("whole GEMM", "per row (time / M)")
            for s in ("measured median", "model lower bound")
        ]
    )  # fmt: skip
    assert reuse_time_chart(long, "tails").to_dict()["title"].startswith("Sweep tails: ")
    efficiency = long.assign(efficiency=0.5, limiter="memory", level="L2")
    spec = reuse_efficiency_chart(efficiency, "tails").to_dict()
    assert spec["title"] == "Sweep tails: efficiency vs M"


# -- the change since the previous run -------------------------------------------------------------


def _changes() -> pd.DataFrame:
    ratio = pd.Series([1.0, 1.1, 0.9, 101.0, 0.05, 2.0, 1.3])
    noise = pd.Series([0.02, 0.03, 0.2, 0.05, 0.01, 0.01, 3.0])
    moved = ratio.map(lambda r: "slower" if r > 1 else "faster")
    return pd.DataFrame({"ratio": ratio, "noise_hi": noise}).assign(
        label=[f"cfg{i} · warm" for i in ratio.index],
        previous_s=1e-3,
        latest_s=1e-3 * ratio,
        rel_change=ratio - 1,
        noise_lo=-noise,
        previous_run="a",
        latest_run="b",
        disturbed="no",
        verdict=moved.where((ratio - 1).abs() > noise, "within noise"),
    )


def test_change_is_a_log_ratio_from_half_to_twice_with_outliers_at_the_edge():
    chart = change_chart(_changes())
    spec = chart.to_dict()
    layers = layers_of(spec)
    x = layers[0]["encoding"]["x"]
    assert x["scale"]["type"] == "log" and x["scale"]["domain"] == [0.5, 2.0]
    assert x["axis"]["values"] == [0.5, 0.8, 1.0, 1.25, 2.0]
    (dots,) = [la for la in layers if la["mark"]["type"] == "point"]
    assert dots["encoding"]["x"]["field"] == "shown"
    calculate = {t["as"]: t["calculate"] for t in dots["transform"] if "calculate" in t}
    assert calculate["shown"] == "clamp(datum.ratio, 0.5, 2.0)"
    shapes = dots["encoding"]["shape"]["scale"]
    assert shapes["range"] == ["circle", "triangle-right", "triangle-left"]
    tooltip = {t["field"]: t for t in dots["encoding"]["tooltip"]}
    assert tooltip["ratio"]["format"] == ".3~g"  # the true ratio, 101 and 0.05
    svg = _svg(chart)
    labels = axis_labels(svg, "X-axis titled 'Latest / previous median")
    assert labels == ["0.5×", "0.8×", "1×", "1.25×", "2×"]
    # every dot inside the plot (440 px wide, 12 px of padding at each end), the outliers at
    # the edges as triangles pointing out
    marks = svg[svg.index("layer_2_marks") :].split("</g>")[0]
    xs = [float(x) for x in re.findall(r'transform="translate\(([-\d.]+),[-\d.]+\)"', marks)]
    assert len(xs) == len(_changes()) and all(0 <= x <= 440 for x in xs)
    assert {"over 2× (drawn at the edge)", "under 0.5× (drawn at the edge)"} <= set(svg_texts(svg))


# -- the stage bounds ------------------------------------------------------------------------------


def _stages(critical_s: float, aggregate_s: float) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"stage": "A", "start_s": 0.0, "finish_s": 0.002, "bound_s": 0.002},
            {"stage": "B", "start_s": 0.002, "finish_s": critical_s, "bound_s": critical_s - 0.002},
        ]
    ).assign(
        limiter="compute",
        on_critical_path=True,
        critical_path_s=critical_s,
        aggregate_s=aggregate_s,
        compute_path="fp64_fma",
        peak_flops_per_s=1e11,
        memory_level="DRAM",
        bandwidth_b_per_s=4e10,
    )


def test_stage_bounds_that_coincide_are_one_line_said_so():
    spec = stage_bounds_chart(_stages(0.0577662, 0.0577662), "one").to_dict()
    subtitle = spec["title"]["subtitle"]
    assert "coincide at 57,766.2 μs" in subtitle and "lines" not in subtitle
    (rules,) = [la for la in layers_of(spec) if la["mark"]["type"] == "rule"]
    assert len(spec["datasets"][rules["data"]["name"]]) == 1
    apart = stage_bounds_chart(_stages(0.0577662, 0.0565943), "two").to_dict()
    assert "(dashed lines)" in apart["title"]["subtitle"]
    (rules,) = [la for la in layers_of(apart) if la["mark"]["type"] == "rule"]
    assert len(apart["datasets"][rules["data"]["name"]]) == 2


def test_stage_time_ticks_are_few_and_do_not_collide():
    chart = stage_bounds_chart(_stages(0.0577662, 0.0565943), "two")
    (bars,) = [la for la in layers_of(chart.to_dict()) if "x2" in la["encoding"]]
    assert bars["encoding"]["x"]["axis"]["tickCount"] <= 6
    svg = _svg(chart)
    labels = axis_labels(svg, "X-axis titled 'Time")
    assert 3 <= len(labels) <= 8 and all(re.fullmatch(r"[\d,]+", label) for label in labels)
    group = svg[svg.index("X-axis titled 'Time") :]
    group = re.search(r'role-axis-label"[^>]*>(.*?)</g>', group, re.S).group(1)
    xs = [float(x) for x in re.findall(r"translate\(([-\d.]+),", group)]
    widths = [len(label) * 6 for label in labels]  # 10 px labels: under 6 px a character
    assert all(
        b - a > (wa + wb) / 2 for a, b, wa, wb in zip(xs, xs[1:], widths, widths[1:], strict=False)
    )


# -- the conditions --------------------------------------------------------------------------------


def _readings(nominal: float | None) -> pd.DataFrame:
    """20 s of a GPU's clock (a 3 s dip) and power, with the nominal clock where it is known."""
    t0 = pd.Timestamp("2026-01-01 00:00:00")
    readings = pd.DataFrame(
        [
            (quantity, t0 + pd.Timedelta(seconds=i), value, limit, source if limit else None)
            for i in range(20)
            for quantity, value, limit, source in (
                ("clock (GHz)", 1.98 - 0.3 * (8 <= i < 11), nominal, "GPU max SM clock (NVML)"),
                ("power (W)", 500.0 + i, 700.0, "GPU power limit (NVML)"),
            )
        ],
        columns=["quantity", "t", "value", "nominal", "nominal_from"],
    )
    return readings.assign(
        kind="gemm reuse",
        run="r1",
        value_min=readings.value,
        value_max=readings.value,
        readings=1,
        phase="during",
        config_id="c",
    )


def test_clock_axis_starts_at_zero_and_a_rule_marks_the_nominal_clock():
    chart = conditions_chart(_readings(1.98))
    spec = chart.to_dict()
    clock, _power = spec["vconcat"]
    clock_layers = layers_of(clock)
    assert clock_layers[0]["encoding"]["y"]["scale"]["zero"] is True
    (rule,) = [
        la for la in clock_layers if la["mark"]["type"] == "rule" and "y2" not in la["encoding"]
    ]
    assert rule["encoding"]["y"]["field"] == "nominal"
    (row,) = spec["datasets"][rule["data"]["name"]]
    assert row["nominal"] == 1.98 and row["label"] == "GPU max SM clock (NVML): 1.98 GHz"
    svg = _svg(chart)
    assert "0.0" in axis_labels(svg, "Y-axis titled 'Clock (GHz)")  # the dip at its true size
    assert {"GPU max SM clock (NVML): 1.98 GHz", "GPU power limit (NVML): 700 W"} <= set(
        svg_texts(svg)
    )
    # a machine that records no nominal clock: the axis still from zero, no rule
    unknown = conditions_chart(_readings(None)).to_dict()["vconcat"][0]
    assert [la["mark"]["type"] for la in layers_of(unknown)] == ["line", "rule"]


# -- a constructed store: the view columns behind the charts -------------------------------------

T0 = datetime(2026, 6, 1, tzinfo=UTC)
XEON = "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz"
MACHINES = {  # machine_id: (host, backend, device, machine JSON), all constructed
    "constructed-gpu": ("gpu-host", "cuda", "constructed GPU", {"gpu": {"max_clock_sm_mhz": 1980,
                        "power_limit_w": 700.0}}),
    "constructed-xeon": ("xeon-host", "cpu", XEON, {"cpu_model": XEON}),
    "constructed-epyc": ("epyc-host", "cpu", "AMD EPYC", {"cpu_model": "AMD EPYC"}),
}  # fmt: skip


@pytest.fixture(scope="module")
def constructed_store(tmp_path_factory):
    db = empty_store(tmp_path_factory.mktemp("glance"))
    with duckdb.connect(str(db)) as connection:
        for i, (machine_id, (host, backend, device, machine)) in enumerate(MACHINES.items()):
            run_id = f"20260601T00000{i}Z-constructed"
            insert_rows(connection, "runs", [runs_row(
                run_id, "ceilings", T0 + timedelta(minutes=i),
                ended_at=T0 + timedelta(minutes=i + 1), host=host, machine_id=machine_id,
                backend=backend, device_name=device,
                machine=json.dumps({"machine_id": machine_id, **machine}),
            )])  # fmt: skip
            gpu = backend == "cuda"
            insert_rows(connection, "conditions", [
                {"run_id": run_id, "t": T0 + timedelta(minutes=i, seconds=s), "phase": "during",
                 "cpu_ghz_measured": None if gpu else 2.3 - 0.1 * (s == 3),
                 "sm_clock_mhz": 1980.0 - 300 * (s == 3) if gpu else None,
                 "power_w": 500.0 + s if gpu else None, "temp_c": 60.0 if gpu else None}
                for s in range(6)
            ])  # fmt: skip
            values = {("DRAM", "read"): 32.6e9, ("DRAM", "triad"): 40.9e9}
            values |= {("L1", "read"): 600e9, ("L1", "triad"): 500e9}
            insert_rows(connection, "ceilings", [
                {"run_id": run_id, "kind": "bandwidth", "name": level, "kernel": kernel,
                 "dtype": "fp64", "value": value, "unit": "B/s", "config_id": f"{kernel}/{level}"}
                for (level, kernel), value in values.items()
            ] + [{"run_id": run_id, "kind": "compute", "name": "fp64_fma",
                  "kernel": "fma_chains", "dtype": "fp64", "value": 100e9, "unit": "FLOP/s",
                  "config_id": "fma/fp64"}])  # fmt: skip
            insert_rows(connection, "ceiling_sweep", [
                {"run_id": run_id, "kernel": kernel, "working_set_bytes": 2**e,
                 "value": (600e9 if e < 16 else 40e9) * (1 if kernel == "triad" else 0.9),
                 "unit": "B/s", "config_id": f"{kernel}/ws{2**e}",
                 "level": "L1" if e < 16 else "DRAM" if e > 24 else None}
                for kernel in ("read", "triad")
                for e in range(12, 29, 2)
            ])  # fmt: skip
    return db


def test_condition_readings_carry_each_machines_nominal_clock_and_power_limit(constructed_store):
    rows = query(
        constructed_store,
        "SELECT machine_id, quantity, any_value(nominal) AS nominal, "
        "any_value(nominal_from) AS nominal_from FROM condition_readings GROUP BY ALL",
    ).to_pylist()
    nominal = {(r["machine_id"], r["quantity"]): (r["nominal"], r["nominal_from"]) for r in rows}
    assert nominal[("constructed-gpu", "clock (GHz)")] == (1.98, "GPU max SM clock (NVML)")
    assert nominal[("constructed-gpu", "power (W)")] == (700.0, "GPU power limit (NVML)")
    assert nominal[("constructed-gpu", "temperature (°C)")] == (None, None)
    assert nominal[("constructed-xeon", "clock (GHz)")] == (2.4, "CPU base clock (its model name)")
    assert nominal[("constructed-epyc", "clock (GHz)")] == (None, None)


def test_ceiling_summary_carries_the_read_kernels_ceiling_beside_the_best(constructed_store):
    rows = query(
        constructed_store,
        "SELECT name, kernel, value, read_value FROM ceiling_summary "
        "WHERE machine_id = 'constructed-xeon' ORDER BY name",
    ).to_pylist()
    assert rows == [
        {"name": "DRAM", "kernel": "triad", "value": 40.9e9, "read_value": 32.6e9},
        {"name": "L1", "kernel": "read", "value": 600e9, "read_value": 600e9},
        {"name": "fp64_fma", "kernel": "fma_chains", "value": 100e9, "read_value": None},
    ]


def test_the_report_says_which_kernel_is_best_and_marks_the_nominal_clock(
    constructed_store, tmp_path
):
    report = build_report(constructed_store, tmp_path / "report", images=False)
    page = report.index.read_text()
    sweeps = [p for p in page.split("<section class='chart'>") if "Ceiling sweep</h" in p]
    assert len(sweeps) == 3
    assert all("on DRAM, triad (40.9 GB/s) beats read (32.6 GB/s)" in p for p in sweeps)
    clock_rules = {  # the labelled rules of each machine's conditions chart
        name.split("_")[0]: sorted(r["label"] for r in spec_rows(report.specs[name], "label"))
        for name in report.charts
        if name.endswith("conditions")
    }
    assert clock_rules == {
        "gpu-host": ["GPU max SM clock (NVML): 1.98 GHz", "GPU power limit (NVML): 700 W"],
        "xeon-host": ["CPU base clock (its model name): 2.4 GHz"],
        "epyc-host": [],
    }
    epyc = [p for p in page.split("<section") if "chart-epyc-host" in p and "Conditions" in p]
    assert epyc and "This machine records no nominal clock" in epyc[0]
