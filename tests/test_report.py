"""The report (docs/report.md), built from a small store of real measurements on this machine.

The store is made once per module the way the workflow makes it: `rooflab measure ceilings
--quick` (the run conftest's quick_ceilings_run shares with test_ceilings), `rooflab measure gemm`
of a tiny sweep, the Roofline points of that run, and `rooflab store ingest`. The browser test
loads the page in headless Debian chromium with networking disabled and reads back the rendered
DOM.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import json
import math
import re
import shutil
import statistics
from pathlib import Path

import pandas as pd
import pytest

from rooflab.cli import main
from rooflab.experiments.ceiling_plan import QUICK
from rooflab.records import read_run, write_run
from rooflab.report import build_report
from rooflab.report.roofline_chart import roofline_chart
from rooflab.roofline import build_analysis
from rooflab.store import ingest, query
from rooflab.units import format_quantity
from tests import constructed_counters as constructed
from tests.conftest import clean_round, used_windows
from tests.report_pages import (
    CHROMIUM,
    H200_ROOFS,
    NO_CHROMIUM,
    NODE_B,
    axis_labels,
    ceilings_of,
    channel_of,
    chart_svg,
    copy_run,
    datasheet_of,
    label_crossings,
    label_overlaps,
    layers_of,
    render_in_browser,
    rooflab_ok,
    scale_times,
    spec_rows,
    store_of,
    svg_texts,
)

TINY_CONFIG = """\
backend: auto
disturbance: {quiet_wait_s: 0}
timing:
  warmup_s: 0.01
  warmup_min_calls: 1
  min_time_s: 0.02
  min_samples: 5
  max_samples: 50
sweeps:
  tiny:
    m: [1, 16, 128]
    n: [256]
    k: [256]
    dtypes: [fp32, fp64]
    layouts: [nn]
    cache_states: [warm, cold]
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory, quick_ceilings_run) -> Path:
    root = tmp_path_factory.mktemp("report_store")
    (root / "tiny.yaml").write_text(TINY_CONFIG)
    results = root / "results"
    _, ceilings_run = quick_ceilings_run
    shutil.copytree(ceilings_run, results / "ceilings" / "runs" / ceilings_run.name)
    sweep = ("--config", "tiny.yaml", "--sweep", "tiny")
    rooflab_ok("measure", "gemm", *sweep, "--out", "results/sweeps/tiny/runs", cwd=root)
    (timing_run,) = sorted((results / "sweeps" / "tiny" / "runs").iterdir())
    counters_out = ("--out", "results/counters/tiny/runs")
    rooflab_ok("measure", "counters", *sweep, "--timing", str(timing_run), *counters_out, cwd=root)
    analysis = build_analysis(
        sorted((results / "ceilings" / "runs").iterdir()), [timing_run], stages=ARTICLE_STAGES
    )
    assert analysis.points.model, "the tiny sweep gave no Roofline points"
    return store_of(results, analysis)


ARTICLE_STAGES = {
    "two": {
        "compute_path": "fp64_fma",
        "memory_level": "DRAM",
        "stages": [
            {"name": "A", "flops": "0.12 GFLOP", "bytes": "200 MB"},
            {"name": "B", "flops": "12 GFLOP", "bytes": "2 MB", "after": ["A"]},
        ],
    }
}


@pytest.fixture(scope="module")
def built(store, tmp_path_factory):
    return build_report(store, tmp_path_factory.mktemp("report") / "report")


EXPECTED_CHARTS = [
    "roofline",
    "ceiling_sweep",
    "reuse_time_tiny",
    "reuse_efficiency_tiny",
    "distributions",
    "conditions",
    "stages_two",
]


def test_every_chart_is_built_with_png_and_svg(built):
    assert built.charts == EXPECTED_CHARTS
    for name in built.charts:
        png = built.out_dir / f"{name}.png"
        svg = built.out_dir / f"{name}.svg"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        assert svg.read_text().lstrip().startswith("<svg") and "<text" in svg.read_text()


def test_roofline_is_log_log_with_ceiling_lines_points_and_tooltips(built):
    spec = built.specs["roofline"]
    layers = layers_of(spec)
    marks = [layer["mark"]["type"] for layer in layers]
    assert marks[0] == "line" and marks[-1] == "point" and "text" in marks
    for channel in ("x", "y"):
        scales = [enc["scale"] for enc in channel_of(spec, channel) if "scale" in enc]
        assert scales and all(s["type"] == "log" for s in scales), channel
    point = layers[-1]["encoding"]
    # colour: the roof a point is judged against; shape: its sweep; size: M; fill: cache state
    assert point["color"]["field"] == "roof" and point["shape"]["field"] == "sweep"
    assert point["size"]["field"] == "m" and point["fillOpacity"]["field"] == "cache_state"
    tooltip_fields = {t["field"] for t in point["tooltip"]}
    assert {
        "config_id",
        "m",
        "n",
        "k",
        "median_s_text",
        "achieved_flops_per_s",
        "attainable_flops_per_s",
        "efficiency",
        "limiter",
        "level",
        "run_id",
        "iqr_ratio",
        "clock_min_mhz",
        "clock_max_mhz",
        "roof",
        "sweep",
        "dtype",
        "compute_path",
    } <= tooltip_fields
    rows = spec_rows(spec, "clock_min_mhz")
    assert rows and all(row["clock_min_mhz"] > 100 for row in rows)  # measured, per point
    # every ceiling is labelled with its value and unit; library ceilings are dashed
    labels = {row["ceiling"] for row in spec_rows(spec, "align")}
    assert any(label.startswith("DRAM") and "GB/s" in label for label in labels)
    assert any(label.startswith("fp64_fma") and "GFLOP/s" in label for label in labels)
    assert any("fp32_blas" in label and "library" in label for label in labels)
    assert "strokeDash" in layers[0]["encoding"]


@pytest.mark.slow  # the store behind it runs a real measurement
def test_the_roofline_of_a_store_names_its_machine_and_no_roof_runs_through_a_label(built, store):
    spec = built.specs["roofline"]
    (run,) = query(
        store, "SELECT run_id, host, device_name FROM runs WHERE kind = 'ceilings'"
    ).to_pylist()
    assert spec["title"]["text"] == f"Roofline: {run['host']} · {run['device_name']} (cpu)"
    assert spec["title"]["subtitle"][0].startswith(f"ceilings: run {run['run_id']} (")
    (gemm,) = query(store, "SELECT run_id FROM runs WHERE kind = 'gemm'").to_pylist()
    assert f"newest {gemm['run_id']}, " in spec["title"]["subtitle"][1]
    assert label_crossings(spec) == []
    # each point in the colour of the roof it is judged against, as the view says
    for row in spec_rows(spec, "achieved_flops_per_s"):
        judged = row["level"] if row["limiter"] == "memory" else row["compute_path"]
        assert row["roof"].startswith(f"{judged} ")
        assert row["above_roof"] == (row["achieved_flops_per_s"] > row["attainable_flops_per_s"])


@pytest.mark.slow  # the store behind it runs a real measurement
def test_each_sweeps_charts_are_headed_by_its_name(built):
    page = built.index.read_text()
    assert "<h2>Sweep tiny: time vs M</h2>" in page
    assert "<h2>Sweep tiny: efficiency vs M</h2>" in page and "Weight reuse" not in page
    assert built.specs["reuse_time_tiny"]["title"].startswith("Sweep tiny: ")


def test_every_quantitative_axis_title_has_a_unit_and_every_chart_has_tooltips(built):
    for name, spec in built.specs.items():
        titled = 0
        for channel in ("x", "y"):
            for enc in channel_of(spec, channel):
                if enc.get("type") in ("quantitative", "temporal") and "title" in enc:
                    titled += 1
                    assert re.search(r"\(.+\)", enc["title"]), f"{name}: {enc['title']!r}"
        assert titled >= 1, name  # a nominal axis (configuration names) needs no unit
        assert any("tooltip" in layer.get("encoding", {}) for layer in layers_of(spec)), name


def test_time_axes_and_tooltips_carry_the_unit_with_its_prefix(built):
    """d3's "~s" alone labels 0.01 s "10m" under "Time (s)", which reads as ten minutes."""
    for name in ("reuse_time_tiny", "distributions"):
        svg = (built.out_dir / f"{name}.svg").read_text()
        texts = re.findall(r"<text[^>]*>([^<]+)</text>", svg)
        ticks = [t for t in texts if re.fullmatch(r"[\d.]+\D{0,2}", t) and not t.isdigit()]
        assert ticks and all(re.fullmatch(r"[\d.]+[nµm]?s", t) for t in ticks), (name, ticks)
    shown = 0
    for name, spec in built.specs.items():
        tips = [
            t for layer in layers_of(spec) for t in layer.get("encoding", {}).get("tooltip", [])
        ]
        fields = {t["field"] for t in tips}
        times = {f for f in fields if f == "seconds" or re.search(r"(?<!per)_s$", f)}
        assert not times, (name, times)
        rows = spec_rows(spec)
        for field in (f for f in fields if f.endswith("_text")):
            values = [row[field] for row in rows if field in row]
            assert values and all(re.fullmatch(r"[\d.]+ (ns|μs|ms|s)", v) for v in values), field
            shown += 1
    assert shown == 7  # the Roofline points, weight reuse and five quantiles


def test_sweep_weight_reuse_and_distribution_encodings(built):
    sweep = built.specs["ceiling_sweep"]
    assert {e["scale"]["type"] for e in channel_of(sweep, "x") if "scale" in e} == {"log"}
    assert "rect" in [layer["mark"]["type"] for layer in layers_of(sweep)]  # plateaus shaded
    assert "rule" in [layer["mark"]["type"] for layer in layers_of(sweep)]  # cache capacities
    reuse = built.specs["reuse_time_tiny"]
    assert reuse["facet"]["row"]["field"] == "quantity"
    line, points = layers_of(reuse)
    assert line["mark"]["type"] == "line" and points["mark"]["type"] == "point"
    assert line["encoding"]["y"]["scale"]["type"] == "log"
    assert line["encoding"]["strokeDash"]["field"] == "source"
    reuse_rows = spec_rows(reuse)
    sources = {row["source"] for row in reuse_rows}
    assert sources == {"measured median", "model lower bound"}
    # each row's time is the whole GEMM's over M: the weights' cost spread over the rows
    whole = {
        (r["series"], r["cache_state"], r["m"], r["source"]): r["seconds"]
        for r in reuse_rows
        if r["quantity"] == "whole GEMM"
    }
    per_row = [r for r in reuse_rows if r["quantity"] == "per row (time / M)"]
    assert len(per_row) == len(whole) == 24  # 2 dtypes x 3 M x 2 cache states x 2 sources
    for r in per_row:
        key = (r["series"], r["cache_state"], r["m"], r["source"])
        assert r["seconds"] == pytest.approx(whole[key] / r["m"])
    dist = built.specs["distributions"]
    fields = {enc["field"] for enc in channel_of(dist, "x")} | {
        layer["encoding"]["x2"]["field"] for layer in layers_of(dist) if "x2" in layer["encoding"]
    }
    assert fields == {"min_s", "max_s", "p25_s", "p75_s", "median_s"}
    # quantiles, not samples: one row per configuration and cache state
    (rows,) = dist["datasets"].values()
    assert len(rows) == 12


def test_m_axis_labels_every_m_and_tilts_them_when_they_would_collide():
    from rooflab.report.sweep_charts import _m_x

    # the GPU weight-reuse sweep: 14 values of M up to 8192 in a 280 px panel
    many = _m_x(pd.DataFrame({"m": [2**i for i in range(14)]})).to_dict()["axis"]
    assert many["values"] == [2**i for i in range(14)]
    assert (many["labelAngle"], many["labelAlign"]) == (-45, "right")
    few = _m_x(pd.DataFrame({"m": [1, 16, 128, 16]})).to_dict()["axis"]
    assert few["values"] == [1, 16, 128]
    assert (few["labelAngle"], few["labelAlign"]) == (0, "center")


def test_page_is_one_offline_file_with_a_summary(built):
    page = built.index.read_text()
    # the sweep asked for `auto` on a machine without a usable GPU: the page says what happened
    assert re.search(
        r"<th>backend</th><td>cpu <span class='note'>\(auto: .*fell back to cpu\)", page
    )
    assert not re.search(r"<script[^>]+src=", page)
    assert "http://" not in page.split("<script", 1)[0]  # nothing fetched from the head
    assert page.count("class='vega-chart'") == len(built.charts)
    assert "GB/s" in page and "GFLOP/s" in page and "Ridge points against DRAM" in page
    assert re.search(r"\d+</b> compute-bound, <b>\d+</b> memory-bound", page)
    assert "vegaEmbed" in page and len(page) > 500_000  # the libraries are inline


def test_summary_shows_the_spread_of_the_samples_and_rounds_behind_each_ceiling(built, store):
    samples = query(
        store,
        "SELECT s.config_id, s.amount / s.seconds AS rate, s.disturbed FROM samples s "
        "JOIN runs r USING (run_id) WHERE r.kind = 'ceilings'",
    ).to_pylist()
    windows: dict[str, list[dict]] = {}
    for sample in samples:
        windows.setdefault(sample["config_id"], []).append(sample)
    page = built.index.read_text()
    for dtype in ("fp64", "fp32"):
        # the dtype's widest path (fma/fp64/round1), not its narrower ones (fma/fp64/avx2/round1)
        rounds = {c: w for c, w in windows.items() if re.match(rf"fma/{dtype}/round\d+$", c)}
        # each round's median over the windows it used; the ceiling is the best clean round
        median = {
            c: statistics.median(s["rate"] for s in used_windows(w)) for c, w in rounds.items()
        }
        best = max(rounds, key=lambda c: (clean_round(rounds[c], QUICK.windows), median[c]))
        medians = list(median.values())
        (fma,) = query(
            store, f"SELECT value, n_points FROM latest_ceilings WHERE name = '{dtype}_fma'"
        ).to_pylist()
        assert fma["value"] == pytest.approx(median[best]) and fma["n_points"] == len(medians)
        row = re.search(rf"<tr><td>{dtype}_fma</td>.*?</tr>", page).group(0)
        low, high = (f"{v / 1e9:.4g} GFLOP/s" for v in (min(medians), max(medians)))
        assert f"best of {len(medians)} rounds, whose medians spanned {low} to {high}" in row
    dram = re.search(r"<tr><td>DRAM</td>.*?</tr>", page).group(0)
    assert re.search(r"<td>\d+ samples, IQR \d+\.\d% of the median rate</td></tr>$", dram)
    assert "rounds" not in dram


def test_summary_prints_each_ceiling_and_the_ridge_points_from_the_store(built, store):
    page = built.index.read_text()
    ceilings = query(  # a level's best kernel (triad, or triad_avx2 on an AVX-512 CPU)
        store, "SELECT kind, name, max(value) AS value FROM latest_ceilings GROUP BY ALL"
    ).to_pylist()
    assert ceilings
    for c in ceilings:
        unit = "GB/s" if c["kind"] == "bandwidth" else "GFLOP/s"
        cell = f"<tr><td>{c['name']}</td><td class='num'>{c['value'] / 1e9:.4g} {unit}</td>"
        assert cell in page, cell
    (dram,) = [c["value"] for c in ceilings if c["name"] == "DRAM"]
    ridges = re.search(r"<p>Ridge points against DRAM \(([\d.]+) GB/s\): (.*?)\.</p>", page)
    assert ridges and ridges.group(1) == f"{dram / 1e9:.4g}"
    expected = [
        f"{c['name']} {c['value'] / dram:.3g} FLOP/byte" for c in ceilings if c["kind"] == "compute"
    ]
    assert sorted(ridges.group(2).split(", ")) == sorted(expected)


def test_ceiling_sweep_marks_each_cache_level_this_process_can_fill(built, store):
    from rooflab.machine import cache_bytes_by_level

    (machine,) = query(
        store, "SELECT arg_max(machine, started_at) AS m FROM runs WHERE kind = 'ceilings'"
    ).column("m")
    by_level = cache_bytes_by_level(json.loads(machine.as_py()))
    spec = built.specs["ceiling_sweep"]
    rules = [r for r in spec_rows(spec) if set(r) == {"x", "label"}]
    measured = {r["label"].split()[0]: r["x"] for r in rules if r["label"].endswith(" measured")}
    reported = {r["label"].split()[0]: r["x"] for r in rules if "measured" not in r["label"]}
    assert rules and reported == by_level
    # beside each, where the sweep saw the level's fall, its measured edge
    edges = query(
        store,
        "SELECT level, measured_bytes FROM latest_cache_capacities WHERE measured_bytes NOT NULL",
    ).to_pylist()
    assert measured == {e["level"]: e["measured_bytes"] for e in edges}


def test_summary_says_when_hardware_counters_are_unavailable_and_why(built, store):
    """The store's counters run is real (`rooflab measure counters`: perf on this CPU). Where perf
    counted nothing (these development machines: no PMU), the summary says so with perf's reason
    and that the points use model bytes; the model points say q_source = model."""
    (summary,) = query(store, "SELECT status, unavailable_reason FROM counters_summary").to_pylist()
    page = built.index.read_text()
    if summary["status"] != "unavailable":
        pytest.skip(f"this machine's perf counted events (status {summary['status']})")
    reason = summary["unavailable_reason"]
    assert reason.startswith("perf: cycles, instructions, LLC-load-misses, LLC-loads")
    assert (
        f"<p class='counters'><b>Hardware counters: unavailable</b> — {html.escape(reason)}; "
        "points use model bytes (<code>q_source = model</code>).</p>"
    ) in page
    assert "hierarchical_roofline" not in built.charts
    rows = spec_rows(built.specs["roofline"], "achieved_flops_per_s")
    assert {row["q_source"] for row in rows} == {"model"}


def test_the_vega_bundle_is_built_once_and_kept_whole_in_the_users_cache(tmp_path, monkeypatch):
    """vl-convert's bundle of Vega, Vega-Lite and vega-embed (about 2 s to build) is kept in the
    user's cache folder, named by the versions it was built for, and read by the next report
    process; where that folder cannot be written, the report still gets it, and nothing is left."""
    import vl_convert as vlc

    from rooflab.report.page import _vega_bundle, vl_version

    build = _vega_bundle.__wrapped__  # not this process's copy (functools.cache)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    bundle = build()
    (kept,) = (tmp_path / "cache" / "rooflab").iterdir()  # no partial file beside it
    assert kept.name == f"vega-bundle-{vlc.__version__}-{vl_version()}.js"
    assert kept.read_text(encoding="utf-8") == bundle and len(bundle) > 100_000
    kept.write_text("// the kept bundle", encoding="utf-8")
    assert build() == "// the kept bundle"  # read back, not built again
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))  # no folder can be made there
    assert build() == bundle
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "cache"]


def test_report_only_reads_the_store(store, built, tmp_path):
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    again = build_report(store, tmp_path / "again", images=False)
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before
    # without images: the same charts, specs and page, and no PNG or SVG drawn
    assert again.charts == built.charts and again.specs == built.specs
    assert again.index.read_text() == built.index.read_text()
    assert again.files == [again.index] and sorted(p.name for p in again.out_dir.iterdir()) == [
        "index.html"
    ]


def test_empty_store_gives_a_page_saying_so(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    ingest(results / "rooflab.duckdb", results)
    report = build_report(results / "rooflab.duckdb", tmp_path / "report", images=False)
    assert report.charts == []
    assert "nothing to report" in report.index.read_text()


def test_a_store_of_ceilings_only_gets_its_roofs_and_sweep(quick_ceilings_run, tmp_path):
    """The first thing a user measures: the Roofline is drawn with its roofs and no point."""
    _, ceilings_run = quick_ceilings_run
    results = tmp_path / "results"
    shutil.copytree(ceilings_run, results / "ceilings" / "runs" / ceilings_run.name)
    ingest(results / "rooflab.duckdb", results)
    report = build_report(results / "rooflab.duckdb", tmp_path / "report", images=False)
    assert report.charts[:2] == ["roofline", "ceiling_sweep"]
    assert not [name for name in report.charts if name.startswith("reuse_")]
    spec = report.specs["roofline"]
    assert {row["kind"] for row in spec_rows(spec, "kind")} == {"bandwidth", "compute"}
    assert not spec_rows(spec, "achieved_flops_per_s")
    assert "No Roofline points on this machine yet." in report.index.read_text()


def test_a_beaten_roof_and_each_instruction_path_are_shown(quick_ceilings_run, tmp_path):
    """A ceilings run whose fp64 FMA roof a BLAS GEMM beats (the measured run with its fp64_fma
    lowered below fp64_blas, then judged by the ceilings step's own check): the summary says so
    with both figures, every compute row names its instruction path, and the Roofline's legend
    names the widest path of each dtype."""
    from rooflab.experiments.compute_paths import beaten_roofs

    _, ceilings_run = quick_ceilings_run
    tables = {name: table.to_pylist() for name, table in read_run(ceilings_run).items()}
    rows = tables["ceilings"]
    by_name = {row["name"]: row for row in rows}
    blas = by_name["fp64_blas"]["value"]
    by_name["fp64_fma"]["value"] = blas / 1.3
    # and fp32's roof above its BLAS, whatever a busy machine measured: only fp64's is beaten
    fp32 = by_name["fp32_fma"]
    fp32["value"] = max(fp32["value"], 1.3 * by_name["fp32_blas"]["value"])
    for row in rows:
        row.pop("roof_beaten"), row.pop("roof_beaten_evidence")
    (line,) = beaten_roofs(rows, "cpu")
    results = tmp_path / "results"
    write_run(results / "ceilings" / "runs", tables["runs"][0]["run_id"], tables)
    ingest(results / "rooflab.duckdb", results)
    report = build_report(results / "rooflab.duckdb", tmp_path / "report", images=False)
    page = report.index.read_text()
    figures = f"{blas / 1e9:.4g} GFLOP/s > fp64_fma {blas / 1.3e9:.4g} GFLOP/s"
    assert figures in line
    figures = figures.replace(">", "&gt;")
    assert "The <b>fp64_fma</b> roof is beaten: fp64_blas (matmul) " + figures in page
    isa = by_name["fp64_fma"]["isa"]
    fma_row = re.search(r"<tr><td>fp64_fma</td>.*?</tr>", page).group(0)
    assert f"<td>{isa}, {by_name['fp64_fma']['vector_bits']}-bit</td>" in fma_row
    assert "roof beaten: fp64_blas" in fma_row
    assert "roof beaten" not in re.search(r"<tr><td>fp32_fma</td>.*?</tr>", page).group(0)
    legend = {row["ceiling"] for row in spec_rows(report.specs["roofline"], "ceiling")}
    assert any(text.startswith(f"fp64_fma [{isa}] ") for text in legend), legend
    for name in (n for n in by_name if n.startswith("fp64_fma_")):  # narrower paths
        assert any(text.startswith(f"{name} ") for text in legend), legend


def test_cli_report_and_a_missing_store(store, tmp_path, capsys):
    assert main(["report", "--db", str(store), "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "index.html").is_file()
    assert main(["report", "--db", str(tmp_path / "none.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no store at" in err


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_the_charts_read_at_a_glance_in_a_real_browser(built, store, tmp_path):
    """Every chart renders without an error (render_in_browser), and issue 27 as drawn: the
    Roofline names its machine and runs and legends its roofs; the ceiling sweep's sizes are
    binary; the clock axis starts at zero; each sweep's charts are headed by its name; the stage
    bounds say whether their dashed lines are two."""
    dom = render_in_browser(built, tmp_path)
    (run,) = query(store, "SELECT host, device_name FROM runs WHERE kind = 'ceilings'").to_pylist()
    roofline = svg_texts(chart_svg(dom, "roofline"))
    assert f"Roofline: {run['host']} · {run['device_name']} (cpu)" in roofline
    ceilings_run = next(t for t in roofline if t.startswith("ceilings: run "))
    assert re.fullmatch(r"ceilings: run \S+ \(\d{4}-\d\d-\d\d \d\d:\d\d UTC\)", ceilings_run)
    assert "roof (a point's colour: the roof it is judged against)" in roofline
    roofs = [t for t in roofline if re.match(r"(L\d|DRAM) [\d.]+ [GT]B/s \(", t)]
    assert {t.split()[0] for t in roofs} >= {"L1", "L2", "DRAM"}  # on the chart and the legend
    sizes = axis_labels(chart_svg(dom, "ceiling_sweep"), "X-axis titled 'Working set")
    assert sizes and all(re.fullmatch(r"\d+ (B|KiB|MiB|GiB)", s) for s in sizes), sizes
    clock = axis_labels(chart_svg(dom, "conditions"), "Y-axis titled 'Clock (GHz)")
    assert clock[0] in ("0", "0.0")
    headings = re.findall(r"<h2>(.*?)</h2>", dom)
    assert "Sweep tiny: time vs M" in headings and "Sweep tiny: efficiency vs M" in headings
    assert not [h for h in headings if h.startswith("Weight reuse")]
    stages = " ".join(svg_texts(chart_svg(dom, "stages_two")))
    assert ("(dashed lines)" in stages) != ("coincide" in stages)


def test_stage_bounds_chart_uses_the_measured_ceilings(built, store):
    from rooflab.model import Stage, stage_bounds

    spec = built.specs["stages_two"]
    (bars,) = [layer for layer in layers_of(spec) if "x2" in layer["encoding"]]
    assert bars["encoding"]["x"]["title"] == "Time (μs)"
    rows = query(
        store,
        "SELECT name, max(value) AS value FROM latest_ceilings "
        "WHERE name IN ('fp64_fma', 'DRAM') GROUP BY name",
    ).to_pylist()
    ceilings = {row["name"]: row["value"] for row in rows}
    expected = stage_bounds(
        [Stage("A", 0.12e9, 200e6), Stage("B", 12e9, 2e6, ("A",))],
        ceilings["fp64_fma"],
        ceilings["DRAM"],
    )
    title = spec["title"]
    assert f"critical path {expected.critical_path_s * 1e6:,.1f} μs" in title["subtitle"]
    assert f"aggregate {expected.aggregate_s * 1e6:,.1f} μs" in title["subtitle"]
    bars_rows = spec["datasets"][bars["data"]["name"]]
    assert [(r["stage"], r["start_us"], r["finish_us"], r["bound_us"]) for r in bars_rows] == [
        (s.name, pytest.approx(s.start_s * 1e6), pytest.approx(s.finish_s * 1e6),
         pytest.approx(s.bound.bound_s * 1e6))
        for s in expected.stages
    ]  # fmt: skip
    # the chart draws exactly the rows a user's query of the view returns
    stored = query(store, "SELECT * FROM latest_stage_bounds ORDER BY position").to_pylist()
    assert [
        (r["scenario"], r["stage"], r["start_s"] * 1e6, r["bound_s"] * 1e6) for r in stored
    ] == [("two", r["stage"], r["start_us"], r["bound_us"]) for r in bars_rows]


def test_roofs_meet_at_their_ridges_and_every_point_is_inside_the_axes():
    bandwidths = {"L1": 300e9, "L2": 170e9, "DRAM": 25e9}
    peaks = {"fp32_fma": 180e9, "fp64_fma": 90e9, "fp32_blas": 140e9}
    ceilings = ceilings_of(
        *(("bandwidth", n, "read", v) for n, v in bandwidths.items()),
        *(("compute", n, "matmul" if "blas" in n else "fma_chains", v) for n, v in peaks.items()),
    )
    points = pd.DataFrame(
        [("fp32", "cold", 0.5, 9e9), ("fp64", "warm", 60.0, 80e9)],
        columns=["dtype", "cache_state", "intensity", "achieved_flops_per_s"],
    )
    spec = roofline_chart(ceilings, points).to_dict()
    layers = spec["layer"]
    point_layer = layers[-1]
    x_domain = point_layer["encoding"]["x"]["scale"]["domain"]
    y_domain = point_layer["encoding"]["y"]["scale"]["domain"]
    lines = spec["datasets"][layers[0]["data"]["name"]]
    top, fastest = max(peaks.values()), max(bandwidths.values())
    for level, bw in bandwidths.items():  # from the left edge up to the highest compute roof
        roof = [r for r in lines if r["ceiling"].startswith(f"{level} ")]
        assert sorted(r["x"] for r in roof) == [pytest.approx(x_domain[0]), pytest.approx(top / bw)]
        assert all(r["y"] == pytest.approx(bw * r["x"]) for r in roof)
    for path, peak in peaks.items():  # flat, from where it meets the fastest level to the edge
        roof = [r for r in lines if r["ceiling"].startswith(f"{path} ")]
        ends = sorted(r["x"] for r in roof)
        assert ends == [pytest.approx(peak / fastest), pytest.approx(x_domain[1])]
        assert {r["y"] for r in roof} == {peak}
        assert {r["library"] for r in roof} == {"blas" in path}
    drawn = lines + spec["datasets"][point_layer["data"]["name"]]
    assert all(x_domain[0] <= r["x"] <= x_domain[1] * (1 + 1e-12) for r in drawn)
    assert all(y_domain[0] < r["y"] < y_domain[1] for r in drawn)
    # a 4x margin past the lowest ridge (fp64_fma on L1) and past the point at intensity 60
    assert x_domain == [pytest.approx(90e9 / 300e9 / 4), pytest.approx(60.0 * 4)]


def test_datasheet_roofs_are_dashed_and_labelled_when_the_device_matches():
    from rooflab.devices import matching_preset

    assert matching_preset("AMD EPYC") is None
    preset = datasheet_of("NVIDIA H200")
    assert set(preset.preset) == {"h200-sxm"}
    ceilings = ceilings_of(
        ("compute", "bf16_tensor", "matmul", 700e12), ("bandwidth", "HBM", "triad", 4.0e12)
    )
    points = pd.DataFrame([{"dtype": "bf16", "intensity": 100.0, "achieved_flops_per_s": 300e12}])
    spec = roofline_chart(ceilings, points, preset).to_dict()
    datasets = spec_rows(spec)
    datasheet = {row["ceiling"] for row in datasets if "datasheet" in str(row.get("ceiling"))}
    assert datasheet == {
        "bf16 989.4 TFLOP/s (datasheet NVIDIA H200 SXM 141GB)",
        "HBM 4.8 TB/s (datasheet)",
    }
    assert all(
        row["library"]
        for row in datasets
        if "datasheet" in str(row.get("ceiling")) and "library" in row
    )
    # on the measured chart's axes: the datasheet HBM roof rises from the left edge to the
    # datasheet bf16 roof, which runs across the whole chart
    hbm = [r for r in datasets if r.get("ceiling") == "HBM 4.8 TB/s (datasheet)" and "kind" in r]
    # the datasheet's bandwidth roof is labelled too, along its line
    (label,) = [r for r in datasets if r.get("ceiling") == "HBM 4.8 TB/s (datasheet)" and "dy" in r]
    assert label["angle"] < 0
    bf16 = [r for r in datasets if str(r.get("ceiling")).startswith("bf16 989.4") and "kind" in r]
    measured = [r["x"] for r in datasets if "kind" in r and "datasheet" not in r["ceiling"]]
    lo, hi = min(measured), max(measured)
    assert [r["x"] for r in hbm] == [lo, pytest.approx(989.4e12 / 4.8e12, rel=1e-3)]
    assert all(r["y"] == pytest.approx(4.8e12 * r["x"]) for r in hbm)
    assert [r["x"] for r in bf16] == [lo, hi]


def test_close_roofs_get_their_labels_apart_and_equal_datasheet_roofs_share_one():
    ceilings = ceilings_of(*H200_ROOFS)
    points = pd.DataFrame(
        [{"dtype": d, "intensity": 100.0, "achieved_flops_per_s": 300e12} for d in ("bf16", "fp16")]
    )
    spec = roofline_chart(ceilings, points, datasheet_of("NVIDIA H200")).to_dict()
    labels = {row["ceiling"]: row["dy"] for row in spec_rows(spec, "dy")}
    # 2 px apart, and a slanted roof through the space by each one's start: no roof runs
    # through a label, and no label covers another
    assert label_crossings(spec) == []
    assert label_overlaps(spec) == []
    assert {
        "bf16_tensor 723 TFLOP/s (library)",
        "fp16_tensor 677 TFLOP/s (library)",
        "fp64_tensor 56.9 TFLOP/s (library)",
        "fp32_cublas 51.3 TFLOP/s (library)",
    } <= set(labels)
    # fp16 and bf16 share the datasheet's 989.4 TFLOP/s: one roof, one label naming both
    sheet = [c for c in labels if "datasheet NVIDIA" in c]
    assert sheet == ["bf16, fp16 989.4 TFLOP/s (datasheet NVIDIA H200 SXM 141GB)"]
    assert labels[sheet[0]] == -7


def test_labels_that_would_overprint_move_the_lower_one_and_datasheet_labels_yield():
    from rooflab.report.labels import place_labels

    axes = ((0.1, 1e4), (1e9, 1e15), (640, 480))  # 5 decades over 640 px, 6 over 480 px

    def dys(*labels):
        return {row["text"]: row["dy"] for row in place_labels(list(labels), "text", *axes)}

    def label(text, x, y, align="left", **more):
        return {"text": text, "x": x, "y": y, "align": align, **more}

    # 1.1x apart (3 px) at the same x: the lower label goes under its line
    assert dys(label("low", 1, 1.0e12), label("high", 1, 1.1e12)) == {"high": -7, "low": 13}
    # far apart along x (the first ends near x = 6): no overlap, both above their lines
    assert dys(label("a", 1, 1.1e12), label("b", 1000, 1.0e12)) == {"a": -7, "b": -7}
    # right-aligned at the right edge: its box runs leftwards, onto a label ending there
    left = label("x" * 40, 100, 1.1e12)  # 248 px: to about x = 7e3
    assert dys(left, label("r", 1e4, 1.0e12, "right"))["r"] == 13
    # a datasheet label yields even to a lower measured one, and stays above it, as its roof
    assert dys(label("sheet", 1, 1.1e12, yields=True), label("measured", 1, 1.0e12)) == {
        "measured": -7,
        "sheet": -20,
    }
    # six labels within 2 px, four places: they overlap, but stacked in the order of their roofs
    crowd = dys(*(label(f"l{i}", 1, 1e12 * 1.01**i) for i in range(6)))
    assert set(crowd.values()) <= {-7, 13, -20, 26}
    centres = [crowd[f"l{i}"] - 80 * math.log10(1.01**i) for i in range(6)]  # px down
    assert centres == sorted(centres, reverse=True)  # l5, the highest roof, the upper one


def test_a_given_axis_keeps_every_roof_on_it():
    from rooflab.report.axes import roof_geometry

    # ridges at 0.5 and 250 FLOP/B, outside an axis of [1, 100]
    roofs = roof_geometry({"a": 1e12, "b": 5e14}, {"HBM": 2e12}, [], axis=(1.0, 100.0))
    assert (roofs.lo, roofs.hi) == (1.0, 100.0)
    assert roofs.bandwidth == {"HBM": (1.0, 100.0)}
    assert roofs.compute == {"a": (1.0, 100.0), "b": (100.0, 100.0)}


# -- a store with hundreds of runs and a second machine ------------------------------------------
#
# Built from the real runs of `store`: each copy is the same measurement under a new run id and a
# later start time, so the store holds a history (for the browser test, as long as a months-long
# campaign's; the fast tests need only a few runs: the long one costs 17 s to build). The
# newest copy is made 2x slower for one configuration and 2x faster for another (change chart),
# and its check of a third configuration is marked failed (that configuration must vanish from the
# Roofline and be listed under it). A second "node" is the same runs under another host and
# machine id with its ceilings lowered 10,000x, so any mixing of the two machines shows.

HISTORY_RUNS, LONG_HISTORY_RUNS = 12, 200


@pytest.fixture(scope="module")
def history(store, tmp_path_factory):
    return _history(store, tmp_path_factory, HISTORY_RUNS)


@pytest.fixture(scope="module")
def long_history(store, tmp_path_factory):
    return _history(store, tmp_path_factory, LONG_HISTORY_RUNS)


def _history(store, tmp_path_factory, runs: int) -> dict:
    source = store.parent
    (ceilings_run,) = sorted((source / "ceilings" / "runs").iterdir())
    (gemm_run,) = sorted((source / "sweeps" / "tiny" / "runs").iterdir())
    configs = sorted({row["config_id"] for row in read_run(gemm_run)["timed_points"].to_pylist()})
    slower, faster, failing = configs[0], configs[-1], configs[len(configs) // 2]
    results = tmp_path_factory.mktemp("history") / "results"
    ceilings, sweeps = results / "ceilings" / "runs", results / "sweeps" / "tiny" / "runs"

    def newest(tables):  # the last copy: one configuration slower, one faster, one failed
        scale_times(tables, 2.0, {slower})
        scale_times(tables, 0.5, {faster})
        for row in tables["correctness"]:
            if row["config_id"] == failing:
                row["passed"] = False

    def lower_ceilings(tables):
        for row in tables["ceilings"]:
            row["value"] /= 10_000

    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    copy_run(ceilings_run, ceilings, start)
    for i in range(runs):
        edit = newest if i == runs - 1 else None
        copy_run(gemm_run, sweeps, start + dt.timedelta(hours=i + 1), edit=edit)
    node_b = start + dt.timedelta(days=30)
    copy_run(ceilings_run, ceilings, node_b, runs=NODE_B, edit=lower_ceilings)
    copy_run(gemm_run, sweeps, node_b, runs=NODE_B)

    db = store_of(results, build_analysis(sorted(ceilings.iterdir()), sorted(sweeps.iterdir())))
    report = build_report(db, results.parent / "report", images=False)
    return {"db": db, "report": report, "slower": slower, "faster": faster, "failing": failing}


def _machine_charts(report, host: str) -> list[str]:
    return [name for name in report.charts if name.startswith(f"{host}_")]


def test_two_machines_get_their_own_sections_and_are_never_mixed(history, store):
    report = history["report"]
    own_host = query(store, "SELECT DISTINCT host FROM runs").column("host")[0].as_py()
    a, b = _machine_charts(report, own_host), _machine_charts(report, "node-b")
    # and one chart across them: the machines side by side (docs/compare.md)
    assert a and b and len(a) + len(b) + 1 == len(report.charts)
    assert report.charts[0] == "machines"
    assert [name.split("__", 1)[1] for name in b] == [
        name.split("__", 1)[1] for name in a if not name.endswith(("__change", "__history"))
    ]
    page = report.index.read_text()
    assert "holds 2 machine/backend pairs" in page and "node-b (cpu," in page

    def roofline(names):
        (name,) = [n for n in names if n.endswith("__roofline")]
        rows = spec_rows(report.specs[name])
        # both ends of the DRAM roof: y = B·x, so y / x is B (to rounding)
        dram = [
            row["y"] / row["x"]
            for row in rows
            if row.get("kind") == "bandwidth" and row["ceiling"].startswith("DRAM")
        ]
        assert len(dram) == 2 and dram[0] == pytest.approx(dram[1])
        points = {row["run_id"] for row in rows if "achieved_flops_per_s" in row}
        return dram[0], points

    dram_a, points_a = roofline(a)
    dram_b, points_b = roofline(b)
    stored = query(
        history["db"],
        "SELECT host, max(value) AS v FROM latest_ceilings WHERE name = 'DRAM' GROUP BY host",
    ).to_pylist()
    stored = {row["host"]: row["v"] for row in stored}
    assert dram_a == pytest.approx(stored[own_host]) and dram_b == pytest.approx(stored["node-b"])
    assert dram_b == pytest.approx(dram_a / 10_000)  # node b's ceilings were lowered
    assert points_a and points_b and points_a.isdisjoint(points_b)
    # roofs 10,000x too low put node b's points above them, and its summary says so
    node_b_section = page.split("id='machine-node-b", 1)[1].split("<section class='machine'")[0]
    assert re.search(r"<b>\d+</b> point\(s\) sit above their roof", node_b_section)
    summary = query(
        history["db"],
        "SELECT host, count(*) AS runs FROM run_summary GROUP BY host ORDER BY host",
    ).to_pylist()
    assert {row["host"]: row["runs"] for row in summary} == {
        own_host: HISTORY_RUNS + 1,
        "node-b": 2,
    }


def test_change_chart_marks_moves_beyond_the_noise_band(history, store):
    report = history["report"]
    own_host = query(store, "SELECT DISTINCT host FROM runs").column("host")[0].as_py()
    (name,) = [n for n in _machine_charts(report, own_host) if n.endswith("__change")]
    rows = spec_rows(report.specs[name])
    verdict = {}
    for row in rows:
        config_id, _cache_state = row["label"].split(" · ")
        verdict.setdefault(config_id, set()).add(row["verdict"])
        assert abs(row["noise_hi"]) == pytest.approx(abs(row["noise_lo"]))
        assert row["ratio"] == pytest.approx(row["latest_s"] / row["previous_s"])
    timed = [row for row in rows if "latest_s_text" in row]
    assert timed and all(
        row[f"{when}_s_text"] == format_quantity(row[f"{when}_s"], "time", 3)
        for row in timed
        for when in ("previous", "latest")
    )
    assert verdict.pop(history["slower"]) == {"slower"}
    assert verdict.pop(history["faster"]) == {"faster"}
    # every other configuration is the same measurement twice: no change at all
    assert set().union(*verdict.values()) == {"within noise"}


def test_failed_configuration_is_listed_under_the_roofline_and_not_drawn(history, store):
    report = history["report"]
    own_host = query(store, "SELECT DISTINCT host FROM runs").column("host")[0].as_py()
    (name,) = [n for n in _machine_charts(report, own_host) if n.endswith("__roofline")]
    rows = spec_rows(report.specs[name])
    drawn = {row["config_id"] for row in rows if "config_id" in row}
    assert history["failing"] not in drawn and history["slower"] in drawn
    page = report.index.read_text()
    section = page.split(f"id='chart-{name}'", 1)[1].split("</section>", 1)[0]
    assert "Failed correctness, not drawn" in section and history["failing"] in section


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_report_of_hundreds_of_runs_and_two_machines_renders_in_a_browser(long_history, tmp_path):
    assert long_history["report"].index.stat().st_size < 10_000_000
    dom = render_in_browser(long_history["report"], tmp_path)
    # the change since the previous run on its log-ratio axis, 2x slower and faster at its edges
    (name,) = [n for n in long_history["report"].charts if n.endswith("__change")]
    ticks = axis_labels(chart_svg(dom, name), "X-axis titled 'Latest / previous median")
    assert ticks == ["0.5×", "0.8×", "1×", "1.25×", "2×"]


# -- hardware counters from CONSTRUCTED records (tests/constructed_counters.py) -------------------
#
# No GPU here, so the counters charts are built from constructed counters records: our own data
# structures with made-up values on a machine named "constructed", never a measurement. They run
# through the same roofline step (counter_points), ingest and report as real ones would.


@pytest.fixture(scope="module")
def constructed_report(tmp_path_factory):
    results = tmp_path_factory.mktemp("constructed") / "results"
    runs = constructed.write_campaign(results)
    analysis = build_analysis([runs["ceilings"]], [runs["gemm"]], [runs["counters"]])
    assert analysis.points.counted and analysis.points.notes == []
    db = store_of(results, analysis)
    report = build_report(db, results.parent / "report", images=False)
    return {"db": db, "report": report, "points": analysis.points.counted}


def test_constructed_counters_give_the_hierarchical_chart_and_the_bytes_table(constructed_report):
    report = constructed_report["report"]
    assert report.charts[:3] == ["roofline", "hierarchical_roofline", "model_vs_counted"]
    spec = report.specs["hierarchical_roofline"]
    for channel in ("x", "y"):
        scales = [enc["scale"] for enc in channel_of(spec, channel) if "scale" in enc]
        assert scales and all(s["type"] == "log" for s in scales), channel
    drawn = spec_rows(spec, "achieved_flops_per_s")
    # one point per level per configuration and cache state, each at its own level's intensity
    assert len(drawn) == len(constructed_report["points"]) == 2 * 2 * 3
    assert {row["level"] for row in drawn} == {"HBM", "L2", "L1"}
    assert {row["q_source"] for row in drawn} == {"counters"}
    assert {row["config_id"] for row in drawn} == {
        f"{constructed.config_id(m)} · {state}"
        for m in constructed.MS
        for state in ("warm", "cold")
    }
    roofs = {row["roof"] for row in spec_rows(spec, "roof")}
    assert {"HBM 4 TB/s", "L2 10 TB/s", "L1 30 TB/s", "bf16_tensor 700 TFLOP/s"} <= roofs
    # every level's point is bounded by its own roof, L1 (the CUDA backend's l1_read) included
    for point in constructed_report["points"]:
        assert point["bandwidth_b_per_s"] == constructed.CEILINGS[point["level"]]
    point_layer = layers_of(spec)[-1]
    assert point_layer["encoding"]["color"]["field"] == "level"
    assert {t["field"] for t in point_layer["encoding"]["tooltip"]} >= {"pairing", "q_source"}
    page = report.index.read_text()
    assert "<b>4</b> configuration(s) with hierarchical points" in page
    table = page.split("id='chart-model_vs_counted'", 1)[1].split("</section>", 1)[0]
    assert "<table" in table and "model over-counts" in table and "counted / model" in table
    # the model Roofline keeps its model points only
    model_rows = spec_rows(report.specs["roofline"], "achieved_flops_per_s")
    assert {r["q_source"] for r in model_rows} == {"model"}
    assert "constructed" in page  # the machine says what it is


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_constructed_counters_report_renders_in_a_real_browser(constructed_report, tmp_path):
    render_in_browser(constructed_report["report"], tmp_path)


# -- disturbance (issue 24) from CONSTRUCTED records ---------------------------------------------
#
# The constructed campaign is written as rooflab 1 wrote runs (schema_version 1, no disturbance
# columns: null in the store). The disturbed store edits it into a schema-2 campaign where one
# GEMM point and one ceiling were disturbed and the timing run warned of a busy machine.

DISTURBED_REASON = "other processes used 1.50 CPUs while it sampled (limit 0.5)"
CEILING_REASON = "4 of 9 windows disturbed, <b>5</b> clean of the 8 needed"
HOSTILE_WARNING = "busy machine: <script>alert('busy')</script> & 2.1 CPUs used"


def _edit_run(run_dir: Path, edit) -> None:
    """Rewrite a run folder's tables after `edit(tables)` (rows as dicts)."""
    tables = {name: table.to_pylist() for name, table in read_run(run_dir).items()}
    edit(tables)
    shutil.rmtree(run_dir)
    write_run(run_dir.parent, run_dir.name, tables)


def _judged(rows: list[dict], disturbed=lambda row: False, reason=None) -> None:
    for row in rows:
        flagged = disturbed(row)
        row.update(disturbed=flagged, disturbance=reason if flagged else None)
        row["n_disturbed"] = 1 if flagged else 0


@pytest.fixture(scope="module")
def disturbed_report(tmp_path_factory):
    results = tmp_path_factory.mktemp("disturbed") / "results"
    runs = constructed.write_campaign(results)
    target = (constructed.config_id(64), "cold")

    def ceilings(tables):
        tables["runs"][0]["schema_version"] = 2
        _judged(tables["ceilings"], lambda row: row["name"] == "L2", CEILING_REASON)

    def gemm(tables):
        (run,) = tables["runs"]
        run.update(schema_version=2, busy_warning=HOSTILE_WARNING, busy_other_cpus=2.1)
        _judged(
            tables["timed_points"],
            lambda row: (row["config_id"], row["cache_state"]) == target,
            DISTURBED_REASON,
        )
        # six samples per point: five the statistics used, one disturbed and left out (10x
        # slower); the disturbed point's samples are all disturbed, so all of them were used
        tables["samples"] = [
            {"run_id": point["run_id"], "config_id": point["config_id"]}
            | {"cache_state": point["cache_state"], "sample_idx": i}
            | {"seconds": point["median_s"] * factor, "disturbed": disturbed}
            for point in tables["timed_points"]
            for i, (factor, disturbed) in enumerate(
                [(f, point["disturbed"]) for f in (0.98, 0.99, 1.0, 1.01, 1.02)] + [(10.0, True)]
            )
        ]

    _edit_run(runs["ceilings"], ceilings)
    _edit_run(runs["gemm"], gemm)
    db = store_of(results, build_analysis([runs["ceilings"]], [runs["gemm"]]))
    report = build_report(db, results.parent / "report")
    return {"db": db, "report": report, "target": " · ".join(target)}


def test_roofline_rings_the_disturbed_point_and_its_tooltip_says_why(disturbed_report):
    from rooflab.report.disturbed_marks import DISTURBED_LABEL

    report = disturbed_report["report"]
    spec = report.specs["roofline"]
    rows = spec_rows(spec, "achieved_flops_per_s")
    assert len(rows) == 4  # stored once, though two layers draw the disturbed one
    flagged = [(r["config_id"], r["cache_state"]) for r in rows if r["disturbed"]]
    assert flagged == [(constructed.config_id(64), "cold")]
    why = {(r["config_id"], r["cache_state"]): r["disturbance"] for r in rows}
    assert why.pop(flagged[0]) == DISTURBED_REASON and set(why.values()) == {"no"}
    layers = layers_of(spec)
    assert "disturbance" in {t["field"] for t in layers[-1]["encoding"]["tooltip"]}
    (ring,) = [layer for layer in layers if "stroke" in layer.get("encoding", {})]
    assert ring["mark"]["filled"] is False and {"filter": "datum.disturbed"} in ring["transform"]
    assert ring["encoding"]["stroke"]["scale"]["domain"] == [DISTURBED_LABEL]
    assert "disturbance" in {t["field"] for t in ring["encoding"]["tooltip"]}
    assert f">{DISTURBED_LABEL}</text>" in (report.out_dir / "roofline.svg").read_text()


def test_summary_counts_disturbed_points_and_ceilings_and_quotes_the_busy_warning(
    disturbed_report,
):
    page = disturbed_report["report"].index.read_text()
    assert "<b>1</b> disturbed (ringed on the Roofline); " in page
    assert "<b>1</b> of the 4 ceilings disturbed" in page
    l2 = re.search(r"<tr><td>L2</td>.*?</tr>", page).group(0)
    assert f"disturbed: {html.escape(CEILING_REASON)}</span>" in l2 and "<b>5</b>" not in l2
    assert "disturbed" not in re.search(r"<tr><td>HBM</td>.*?</tr>", page).group(0)
    busy = re.search(r"<p class='warning'>Taken on a busy machine: .*?</p>", page).group(0)
    assert "<b>1</b> of the 2 run(s)" in busy and f"“{html.escape(HOSTILE_WARNING)}”" in busy
    assert "<script>alert" not in page


def test_distributions_leave_disturbed_samples_out_and_colour_disturbed_points(disturbed_report):
    spec = disturbed_report["report"].specs["distributions"]
    (rows,) = spec["datasets"].values()
    by_label = {row["label"]: row for row in rows}
    target = by_label.pop(disturbed_report["target"])
    # every sample of the disturbed point was disturbed: all six were used, none left out
    assert (target["spread"], target["n"], target["n_left_out"]) == ("disturbed", 6, 0)
    assert target["disturbance"] == DISTURBED_REASON
    for row in by_label.values():  # the 10x slower disturbed sample is not in the box
        assert (row["spread"], row["n"], row["n_left_out"]) == ("steady", 5, 1)
        assert row["max_s"] == pytest.approx(row["median_s"] * 1.02)
    (color,) = {json.dumps(c, sort_keys=True) for c in channel_of(spec, "color")}
    assert json.loads(color)["scale"]["domain"] == ["disturbed", "noisy", "steady"]


def test_a_store_of_runs_before_disturbance_counts_none_and_says_not_judged(constructed_report):
    from rooflab.store.report_views import NOT_JUDGED

    report = constructed_report["report"]
    versions = query(constructed_report["db"], "SELECT DISTINCT schema_version FROM runs")
    assert versions.column(0).to_pylist() == [1]
    rows = spec_rows(report.specs["roofline"], "achieved_flops_per_s")
    assert rows and not any(r["disturbed"] for r in rows)
    assert {r["disturbance"] for r in rows} == {NOT_JUDGED}
    assert not [
        layer for layer in layers_of(report.specs["roofline"]) if "stroke" in layer["encoding"]
    ]
    page = report.index.read_text()
    assert "<b>0</b> disturbed (4 not judged: runs of an older rooflab); " in page
    assert "ceilings disturbed" not in page and "busy machine" not in page
