"""Helpers for the report tests: building a store the way the workflow does (`rooflab_ok`,
`store_of`),
reading Vega-Lite specs (`layers_of`, `channel_of`, `spec_rows`, roof-label crossings and overlaps,
datasheet rows), rendering the page in headless chromium and reading its SVG (`render_in_browser`,
`chart_svg`, `svg_texts`, `axis_labels`), copying real runs under new run ids (`copy_run`,
`scale_times`, `NODE_B`), roofs as ceiling_summary gives them (`ceilings_of`), a constructed CPU's
roofs and points (`CPU_ROOFS`, `cpu_ceilings`, `cpu_points`), an empty store and rows inserted into
it (`empty_store`, `insert_rows`) and the page's tables of one class (`tables_of`). Used by
test_report, test_report_glance, test_report_hostile, test_report_workloads, test_report_history,
test_report_scale and test_unplaced_points; not a test module, so pytest collects nothing here.
"""

from __future__ import annotations

import functools
import math
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd

from rooflab.records import new_run_id, read_run, write_run
from rooflab.roofline import write_analysis
from rooflab.store import ingest
from tests.conftest import run_rooflab

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)


NO_CHROMIUM = "chromium is not installed (apt-get install chromium)"


def rooflab_ok(*args: str, cwd: Path) -> None:
    result = run_rooflab(*args, cwd=cwd)
    assert result.returncode == 0, result.stderr


def store_of(results: Path, analysis) -> Path:
    """The roofline step's tables written beside the runs, and all of it ingested (as the
    workflow's roofline and ingest steps do): the store."""
    write_analysis(analysis, results / "roofline")
    db = results / "rooflab.duckdb"
    ingest(db, results)
    return db


# -- chart specs -----------------------------------------------------------------------------------


def layers_of(spec: dict) -> list[dict]:
    """Every unit spec (with a mark) inside layers and facets."""
    if "mark" in spec:
        return [spec]
    out = []
    for key in ("layer", "spec", "hconcat", "vconcat", "concat"):
        child = spec.get(key)
        for item in child if isinstance(child, list) else [child] if child else []:
            out += layers_of(item)
    return out


def channel_of(spec: dict, name: str) -> list[dict]:
    """The encodings of channel `name` ("x", "color") in every layer that has one."""
    return [la["encoding"][name] for la in layers_of(spec) if name in la.get("encoding", {})]


def spec_rows(spec: dict, field: str | None = None) -> list[dict]:
    """Every row of a spec's datasets, or those that have `field`."""
    datasets = spec.get("datasets", {}).values()
    return [row for rows in datasets for row in rows if field is None or field in row]


def _label_boxes(spec: dict, char_px: float = 6.2) -> list[tuple[str, object]]:
    """Each label of a Roofline spec (a roof's, or a point's name): (text, `inside(points)`, the
    chart's pixel mapping, points inside its box) for its text box on the chart's pixels:
    `char_px` per character, 11 px high, placed by its text mark's align, dx, dy and angle (Vega
    turns the text about its anchor, then offsets it by dx and dy)."""
    layers = layers_of(spec)
    (x0, x1), (y0, y1) = (
        next(la["encoding"][c]["scale"]["domain"] for la in layers if "scale" in la["encoding"][c])
        for c in ("x", "y")
    )
    width, height = spec["width"], spec["height"]

    def to_px(x, y):
        return (
            math.log(x / x0) / math.log(x1 / x0) * width,
            math.log(y1 / y) / math.log(y1 / y0) * height,
        )

    boxes = []
    for layer in layers:
        mark = layer["mark"]
        if mark["type"] != "text" or "stroke" in mark:  # the white halo repeats the text
            continue
        for row in spec["datasets"][layer["data"]["name"]]:
            ax, ay = to_px(row["x"], row["y"])
            theta = math.radians(mark.get("angle", 0))
            text = row.get("ceiling") or row["label"]  # a roof's label, or a point's name
            length = len(text) * char_px
            dx, dy = mark.get("dx", 0), mark.get("dy", 0)
            u_lo, u_hi = {
                "left": (dx, dx + length),
                "center": (dx - length / 2, dx + length / 2),
            }.get(mark.get("align"), (dx - length, dx))

            def inside(points, ax=ax, ay=ay, theta=theta, u=(u_lo, u_hi), dy=dy):
                """Whether any of `points` (an array of pixel (x, y) rows) is in the box."""
                px, py = points[:, 0] - ax, points[:, 1] - ay
                along = px * math.cos(theta) + py * math.sin(theta)
                across = -px * math.sin(theta) + py * math.cos(theta)
                return bool(
                    np.any((u[0] <= along) & (along <= u[1]) & (np.abs(across - dy) <= 5.5))
                )

            u, v = np.meshgrid(
                np.arange(int(u_lo), int(u_hi) + 1, 2), np.arange(int(dy - 5), int(dy + 6), 2)
            )
            samples = np.column_stack(
                (
                    (ax + u * math.cos(theta) - v * math.sin(theta)).ravel(),
                    (ay + u * math.sin(theta) + v * math.cos(theta)).ravel(),
                )
            )
            boxes.append((text, inside, to_px, samples))
    return boxes


def label_crossings(spec: dict) -> list[tuple[str, str]]:
    """(label, roof) for every roof line, measured or datasheet, that runs through a roof
    label's text: each roof's segment sampled every fraction of a pixel."""
    roofs: dict[str, list] = {}
    for rows in spec["datasets"].values():
        for row in rows:
            if "kind" in row and "ceiling" in row:
                roofs.setdefault(row["ceiling"], []).append((row["x"], row["y"]))
    crossings = []
    for label, inside, to_px, _ in _label_boxes(spec):
        for roof, ends in roofs.items():
            (ax, ay), (bx, by) = (to_px(*end) for end in ends)
            steps = 4 * int(abs(bx - ax) + abs(by - ay)) + 2
            along = np.linspace(0.0, 1.0, steps + 1)
            if inside(np.column_stack((ax + (bx - ax) * along, ay + (by - ay) * along))):
                crossings.append((label, roof))
    return crossings


def label_overlaps(spec: dict) -> list[tuple[str, str]]:
    """Pairs of roof labels whose text boxes overprint: a point of one box inside the other."""
    boxes = _label_boxes(spec)
    return [
        (a, b)
        for i, (a, _, _, samples) in enumerate(boxes)
        for b, inside, _, _ in boxes[i + 1 :]
        if inside(samples)
    ]


def datasheet_of(device_name: str):
    """The rows latest_datasheet_roofs gives a machine whose device is `device_name`."""
    from rooflab.devices import matching_preset
    from rooflab.roofline.analysis import datasheet_rows

    run = {"run_id": "r", "machine_id": "m"}
    return pd.DataFrame(datasheet_rows(run, matching_preset(device_name)))


# -- the page in a browser -------------------------------------------------------------------------


def render_in_browser(report, tmp_path) -> str:
    """Load the page in headless chromium (no network); every chart must render, no errors.
    Returns the rendered DOM."""
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--no-first-run", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
        "--virtual-time-budget=20000", "--window-size=1200,6000",
    ]  # fmt: skip
    url = report.index.resolve().as_uri()
    shot = report.out_dir / "screenshot.png"
    # one start of chromium for both: the page's DOM once drawn, and a screenshot of it
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", f"--screenshot={shot}", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    console_errors = [
        line for line in dom.stderr.splitlines()
        if "CONSOLE" in line and re.search(r"error|uncaught", line, re.I)
    ]  # fmt: skip
    assert console_errors == []
    assert 'data-rendered="true"' in html, "vegaEmbed did not finish"
    assert re.search(r'<pre id="report-errors">\s*</pre>', html), "the page recorded errors"
    for name in report.charts:
        svg = chart_svg(html, name)
        assert svg.count("<path") + svg.count("<text") > 10, name
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return html


def chart_svg(dom: str, name: str) -> str:
    """The SVG vega-embed drew for chart `name` in the rendered page."""
    chart = re.search(rf"<div class=\"vega-chart[^\"]*\" id=\"chart-{name}\"", dom)
    svg = chart and re.search(r"<svg.*?</svg>", dom[chart.start() :], re.S)
    assert svg, f"no SVG drawn for chart {name}"
    return svg.group(0)


def svg_texts(svg: str) -> list[str]:
    """Every text drawn, each line of a text of several lines (tspans) on its own."""
    import html

    texts = []
    for text in re.findall(r"<text[^>]*>(.*?)</text>", svg, re.S):
        lines = re.findall(r"<tspan[^>]*>([^<]*)</tspan>", text) or [text]
        texts += [html.unescape(line) for line in lines]
    return texts


def axis_labels(svg: str, axis: str) -> list[str]:
    """The tick labels of the axis whose aria-label starts with `axis` ("X-axis titled 'Time")."""
    group = svg[svg.index(f'aria-label="{axis}') :]
    return svg_texts(re.search(r'role-axis-label"[^>]*>(.*?)</g>', group, re.S).group(1))


# -- copies of real runs ---------------------------------------------------------------------------


NODE_B = {"host": "node-b", "machine_id": "b" * 16}


@functools.cache
def _rows(run_dir: Path) -> dict[str, list[dict]]:
    """A run's tables as rows, read once (the history copies one run hundreds of times)."""
    return {name: table.to_pylist() for name, table in read_run(run_dir).items()}


def copy_run(run_dir: Path, out_dir: Path, started_at, *, runs=None, edit=None) -> str:
    # every column a scalar (records.TABLES): a copy of each row is a copy of the run
    tables = {name: [dict(row) for row in rows] for name, rows in _rows(run_dir).items()}
    run_id = new_run_id(started_at)
    for rows in tables.values():
        for row in rows:
            row["run_id"] = run_id
    (run,) = tables["runs"]
    shift = started_at - run["started_at"]
    for row in tables.get("conditions", []):
        row["t"] += shift
    run.update(started_at=started_at, ended_at=run["ended_at"] + shift, **(runs or {}))
    if edit:
        edit(tables)
    write_run(out_dir, run_id, tables)
    return run_id


def scale_times(tables, factor: float, config_ids=None) -> None:
    """Every time of these configurations (of all, where None) `factor` times as long in a run's
    tables: its timed points' quantiles and its samples; a ceiling's rate divided by it."""
    for row in tables.get("timed_points", []) + tables.get("samples", []):
        if config_ids is None or row["config_id"] in config_ids:
            for key in ("median_s", "p25_s", "p75_s", "min_s", "seconds"):
                if row.get(key) is not None:
                    row[key] *= factor
    for row in tables.get("ceilings", []):
        if config_ids is None or row["config_id"] in config_ids:
            row["value"] /= factor


# -- the Roofline: a CPU whose L2 and L3 roofs are 17 % apart (the user's machine) -----------------

CPU_ROOFS = {
    ("bandwidth", "L1", "read"): 620e9,
    ("bandwidth", "L2", "read"): 228e9,
    ("bandwidth", "L3", "triad"): 195e9,
    ("bandwidth", "DRAM", "triad"): 40.9e9,
    ("compute", "fp64_fma", "fma_chains"): 105e9,
    ("compute", "fp32_fma", "fma_chains"): 210e9,
    ("compute", "fp64_blas", "matmul"): 88e9,
    ("compute", "fp32_blas", "matmul"): 170e9,
}


# An H200's measured tensor and HBM roofs (2026-11-30, docs/measurements/): bf16 and fp16 7 %
# apart, fp64 and fp32 9 %, so their labels crowd
H200_ROOFS = (
    ("compute", "bf16_tensor", "matmul", 723e12),
    ("compute", "fp16_tensor", "matmul", 677e12),
    ("compute", "fp64_tensor", "matmul", 56.9e12),
    ("compute", "fp32_cublas", "matmul", 51.3e12),
    ("bandwidth", "HBM", "read", 4.47e12),
)


def ceilings_of(*roofs: tuple) -> pd.DataFrame:
    """Roofs given as (kind, name, kernel, value), as ceiling_summary gives them."""
    return pd.DataFrame(roofs, columns=["kind", "name", "kernel", "value"])


def cpu_ceilings() -> pd.DataFrame:
    return ceilings_of(*((*roof, value) for roof, value in CPU_ROOFS.items()))


def cpu_points(above: bool = True) -> pd.DataFrame:
    """Points as latest_model_points gives them: two sweeps, warm ones against L2, cold ones
    against DRAM, compute-bound ones against their BLAS path; with `above`, the cold M = 1 points
    beat their roof by 20 %."""
    peaks = {"fp32": CPU_ROOFS[("compute", "fp32_blas", "matmul")]}
    peaks["fp64"] = CPU_ROOFS[("compute", "fp64_blas", "matmul")]
    rows = []
    for sweep, ms in (("weight_reuse", (1, 16, 256)), ("tails", (3, 100))):
        for dtype, size in (("fp32", 4), ("fp64", 8)):
            for cache_state, level in (("warm", "L2"), ("cold", "DRAM")):
                for m in ms:
                    intensity = 2 * m * 1024 / (size * (1024 + 2 * m))
                    bandwidth = next(v for (_, n, _), v in CPU_ROOFS.items() if n == level)
                    attainable = min(peaks[dtype], bandwidth * intensity)
                    factor = 1.2 if above and m == 1 and cache_state == "cold" else 0.6
                    rows.append(
                        {
                            "config_id": f"{sweep}/{dtype}/m{m}",
                            "sweep": sweep,
                            "dtype": dtype,
                            "cache_state": cache_state,
                            "m": m,
                            "n": 1024,
                            "k": 1024,
                            "intensity": intensity,
                            "achieved_flops_per_s": attainable * factor,
                            "attainable_flops_per_s": attainable,
                            "efficiency": factor,
                            "limiter": "memory"
                            if bandwidth * intensity < peaks[dtype]
                            else "compute",
                            "level": level,
                            "compute_path": f"{dtype}_blas",
                            "above_roof": factor > 1,
                            "disturbed": False,
                            "run_id": "20260101T000000Z-00000000",
                        }
                    )
    return pd.DataFrame(rows)


# -- a constructed store and the page's tables -----------------------------------------------------


def empty_store(folder: Path) -> Path:
    """A store of every table and view and no row (`folder`/results/rooflab.duckdb)."""
    results = folder / "results"
    results.mkdir()
    db = results / "rooflab.duckdb"
    ingest(db, results)
    return db


def insert_rows(connection, table: str, rows: list[dict]) -> None:
    for row in rows:
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        connection.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", list(row.values()))


class _Tables(HTMLParser):
    """The page's tables of one class: [header, *rows] each, as cell texts."""

    def __init__(self, css_class: str):
        super().__init__()
        self.css_class, self.tables, self.depth, self.cell = css_class, [], 0, None

    def handle_starttag(self, tag, attrs):
        if tag == "table" and self.css_class in (dict(attrs).get("class") or "").split():
            self.tables.append([])
            self.depth = 1
        elif self.depth and tag == "tr":
            self.tables[-1].append([])
        elif self.depth and tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if self.depth and tag in ("td", "th"):
            self.tables[-1][-1].append(self.cell.strip())
            self.cell = None
        elif self.depth and tag == "table":
            self.depth = 0

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def tables_of(page: str, css_class: str) -> list[list[list[str]]]:
    parser = _Tables(css_class)
    parser.feed(page)
    return parser.tables


# -- the Roofline of an AVX-512 CPU with two paths per dtype, GEMMs and workloads ----------------

# The ceilings of the VM behind issue 44's Roofline (a quick ceilings run, 2026-12-04): six
# compute roofs within a factor of 5, two of them 3 % apart, and the cases it drew there (the
# built-in workloads and a tiny GEMM sweep), made up after that run's figures: never measured.
AVX512_ROOFS = {
    ("bandwidth", "L1", "triad", "avx512"): 1.349e12,
    ("bandwidth", "L2", "triad_avx2", "avx2"): 447.5e9,
    ("bandwidth", "L3", "triad", "avx512"): 223.4e9,
    ("bandwidth", "DRAM", "triad", "avx512"): 60.72e9,
    ("compute", "fp32_fma", "fma_chains", "avx512"): 521.9e9,
    ("compute", "fp32_fma_avx2", "fma_chains", "avx2"): 262.5e9,
    ("compute", "fp64_fma", "fma_chains", "avx512"): 254.7e9,
    ("compute", "fp32_blas", "matmul", None): 236.9e9,
    ("compute", "fp64_fma_avx2", "fma_chains", "avx2"): 128.2e9,
    ("compute", "fp64_blas", "matmul", None): 116.5e9,
}
# (sweep, params, dtype, intensity, {cache state: (level, achieved FLOP/s)})
AVX512_CASES = (
    ("blockdiag_blocks", '{"n": 256}', "fp32", 5.333, {"cold": ("DRAM", 51.2e9),
                                                       "warm": ("L1", 80.8e9)}),
    ("blockdiag_dense", '{"n": 256}', "fp32", 1.6, {"cold": ("DRAM", 16.2e9),
                                                   "warm": ("L2", 25.3e9)}),
    ("pointer_chase", '{"n": 1048576}', "fp64", 0.125, {"cold": ("DRAM", 11.8e6),
                                                       "warm": ("L2", 71.4e6)}),
    ("relu_axpb_fused", '{"n": 65536}', "fp32", 0.25, {"cold": ("DRAM", 7.35e9),
                                                      "warm": ("L2", 14.4e9)}),
    ("relu_axpb_fused", '{"n": 262144}', "fp32", 0.25, {"cold": ("DRAM", 9.54e9),
                                                       "warm": ("L2", 19.4e9)}),
    ("relu_axpb_unfused", '{"n": 65536}', "fp32", 0.0833, {"cold": ("DRAM", 3.48e9),
                                                          "warm": ("L2", 4.59e9)}),
    ("relu_axpb_unfused", '{"n": 262144}', "fp32", 0.0833, {"cold": ("DRAM", 3.30e9),
                                                           "warm": ("L3", 4.20e9)}),
    ("tiny", None, "fp32", 0.496, {"cold": ("DRAM", 14.2e9), "warm": ("L2", 36.7e9)}),
    ("tiny", None, "fp32", 7.111, {"cold": ("DRAM", 101e9), "warm": ("L2", 138e9)}),
)  # fmt: skip


def avx512_ceilings(factors: dict[str, float] | None = None) -> pd.DataFrame:
    """AVX512_ROOFS as ceiling_summary gives them, each roof times its `factors` entry."""
    factors = factors or {}
    return pd.DataFrame(
        [
            {"kind": kind, "name": name, "kernel": kernel, "isa": isa,
             "value": value * factors.get(name, 1.0)}
            for (kind, name, kernel, isa), value in AVX512_ROOFS.items()
        ]
    )  # fmt: skip


def avx512_points() -> pd.DataFrame:
    """AVX512_CASES as latest_model_points gives them (a GEMM's M from its intensity)."""
    peak = AVX512_ROOFS[("compute", "fp32_fma", "fma_chains", "avx512")]
    bandwidth = {name: value for (_, name, _, _), value in AVX512_ROOFS.items()}
    rows = []
    for sweep, params, dtype, intensity, states in AVX512_CASES:
        m = None if params else (1 if intensity < 1 else 16)
        for cache_state, (level, achieved) in states.items():
            attainable = min(peak, bandwidth[level] * intensity)
            rows.append(
                {"config_id": f"{sweep}/{dtype}/{params or m}", "sweep": sweep, "dtype": dtype,
                 "params": params, "m": m, "cache_state": cache_state, "intensity": intensity,
                 "achieved_flops_per_s": achieved, "attainable_flops_per_s": attainable,
                 "efficiency": achieved / attainable, "level": level,
                 "limiter": "memory" if attainable < peak else "compute",
                 "compute_path": f"{dtype}_fma", "above_roof": False, "disturbed": False,
                 "run_id": "20261204T183406Z-constructed"}
            )  # fmt: skip
    return pd.DataFrame(rows)
