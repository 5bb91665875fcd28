"""The report (DESIGN.md §6): one self-contained offline HTML page plus a PNG and an SVG per chart.

`build_report(db_path, out_dir)` only reads the store (one read-only connection, closed at the
end). Every chart's data is aggregated in SQL: one row per configuration and cache state (the
newest run's), per sweep point, per condition reading, or per quantile; raw samples never reach
the page. The page inlines Vega, Vega-Lite and vega-embed (vl-convert's bundle), so it opens
without a network.

Every machine and backend in the store gets its own section (summary and charts): ceilings are
never drawn against another machine's points. With more than one machine, chart names (and file
names) start with a slug of host, backend and machine id.

altair and vl_convert are imported inside the functions: the CLI imports this module lazily too.
"""

from __future__ import annotations

import functools
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rooflab.devices import DevicePreset, matching_preset, path_for_dtype
from rooflab.machine import CacheInfoUnavailable, cache_bytes_by_level
from rooflab.roofline import MEMORY_LEVELS
from rooflab.store import StoreError, connect_read_only
from rooflab.units import format_quantity

if TYPE_CHECKING:
    import altair as alt
    import duckdb
    import pandas as pd

BANDWIDTH_LEVELS = ("L1", "L2", "L3", "DRAM", "HBM")  # fastest first
FMA_PATHS = ("fp64_fma", "fp32_fma", "fp16_fma")
# library GEMM ceilings: BLAS on a CPU, cuBLAS (tensor cores where the dtype has them) on a GPU
LIBRARY_PATHS = (
    "fp64_blas",
    "fp32_blas",
    "fp64_tensor",
    "fp32_cublas",
    "tf32_tensor",
    "fp16_tensor",
    "bf16_tensor",
)
WIDTH = 640
ROOFLINE_SIZE = (WIDTH, 480)  # width, height (px) of the Roofline charts' plot area
REUSE_PANEL_SIZE = (280, 220)  # one panel of the per-sweep time and efficiency charts
ABOVE_ROOF = 1.05  # efficiency beyond measurement noise: a roof that is too low
# A measurement other processes took time from (rooflab.disturbance): ringed on the Roofline,
# its own colour in the sample distributions
DISTURBED_LABEL = "disturbed: other processes took time from the measurement"
DISTURBED_COLOR = "#7b3294"
NOT_JUDGED = "not judged (a run of an older rooflab)"


@dataclass
class Chart:
    name: str  # file stem and element id
    title: str
    how_to_read: str
    chart: alt.TopLevelMixin
    notes_html: str = ""  # shown under the chart


@dataclass
class Report:
    out_dir: Path
    index: Path
    charts: list[str] = field(default_factory=list)  # chart names, page order
    files: list[Path] = field(default_factory=list)
    specs: dict[str, dict] = field(default_factory=dict)  # Vega-Lite spec per chart name


# -- reading the store ---------------------------------------------------------------------------


def _df(connection: duckdb.DuckDBPyConnection, sql: str, params=None) -> pd.DataFrame:
    import duckdb

    try:
        return connection.execute(sql, params or []).df()
    except duckdb.Error as error:
        raise StoreError(f"report query failed: {' '.join(str(error).split())[:300]}") from None


def _scopes(connection) -> list[dict]:
    """One scope per machine and backend in the store: machine_id, backend, host, device_name,
    the newest ceilings run and its machine description. Machines with ceilings come first,
    newest ceilings run first; then the rest, newest run first."""
    pairs = _df(
        connection,
        """
        SELECT machine_id, backend,
               arg_max(host, started_at) AS host,
               arg_max(device_name, started_at) AS device_name,
               arg_max(run_id, started_at) FILTER (WHERE kind = 'ceilings') AS ceilings_run_id,
               arg_max(machine, started_at) FILTER (WHERE kind = 'ceilings') AS machine,
               max(started_at) FILTER (WHERE kind = 'ceilings') AS last_ceilings,
               max(started_at) AS last_run
        FROM runs
        GROUP BY machine_id, backend
        ORDER BY last_ceilings DESC NULLS LAST, last_run DESC, machine_id, backend
        """,
    )
    scopes = [
        {key: (None if _missing(value) else value) for key, value in row.items()}
        for row in pairs.to_dict("records")
    ]
    if len(scopes) > 1:
        for scope in scopes:
            scope["prefix"] = _slug(
                f"{scope['host']}_{scope['backend']}_{str(scope['machine_id'])[:8]}"
            )
    return scopes


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text) + "__"


def _ceilings(connection, scope) -> pd.DataFrame:
    """Latest ceilings of the machine: the best kernel per bandwidth level, every compute path;
    with the spread of the windows behind each value and, for the FMA paths, of their rounds."""
    return _df(
        connection,
        """
        WITH ceiling AS (
            SELECT run_id, config_id, kind, name, kernel, dtype, value, unit,
                   working_set_min_bytes, working_set_max_bytes, n_points,
                   coalesce(disturbed, false) AS disturbed, disturbance
            FROM latest_ceilings
            WHERE machine_id = ? AND backend = ?
            QUALIFY row_number() OVER (PARTITION BY kind, name ORDER BY value DESC) = 1
        ),
        windows AS (  -- the ceilings run's samples, one row per sweep point, round or GEMM
            SELECT run_id, config_id, count(*) AS n_windows,
                   median(amount / seconds) AS median_rate,
                   (quantile_cont(amount / seconds, 0.75) - quantile_cont(amount / seconds, 0.25))
                       / median(amount / seconds) AS iqr_ratio
            FROM samples
            WHERE run_id IN (SELECT run_id FROM ceiling) AND amount IS NOT NULL
            GROUP BY run_id, config_id
        ),
        rounds AS (  -- fma/<dtype>/round<i>: the spread of the rounds' medians
            SELECT run_id, regexp_replace(config_id, '/round[0-9]+$', '') AS family,
                   min(median_rate) AS rounds_min, max(median_rate) AS rounds_max
            FROM windows WHERE regexp_matches(config_id, '/round[0-9]+$')
            GROUP BY ALL
        )
        SELECT c.kind, c.name, c.kernel, c.dtype, c.value, c.unit, c.working_set_min_bytes,
               c.working_set_max_bytes, c.n_points, w.n_windows, w.iqr_ratio, r.rounds_min,
               r.rounds_max, c.disturbed, c.disturbance
        FROM ceiling AS c
        LEFT JOIN windows AS w USING (run_id, config_id)
        LEFT JOIN rounds AS r
            ON r.run_id = c.run_id
           AND r.family = regexp_replace(c.config_id, '/round[0-9]+$', '')
        ORDER BY c.kind, c.value DESC
        """,
        [scope["machine_id"], scope["backend"]],
    )


# Configurations of the machine whose newest correctness check failed (one row per metric).
_NEWEST_FAILED = """
    WITH newest AS (
        SELECT c.run_id, c.config_id
        FROM correctness AS c JOIN runs AS r USING (run_id)
        WHERE r.machine_id = $machine AND r.backend = $backend
        QUALIFY row_number() OVER (
            PARTITION BY c.config_id ORDER BY r.started_at DESC, c.run_id DESC
        ) = 1
    )
    SELECT c.config_id, c.metric, c.error, c.tolerance, c.run_id
    FROM correctness AS c JOIN newest USING (run_id, config_id)
    WHERE NOT c.passed
"""

# The newest run's point per configuration and cache state on the machine (model bytes); a
# configuration whose newest check failed is not drawn, even if an older run timed it.
_LATEST_POINTS = f"""
    SELECT p.*, r.started_at
    FROM roofline_points AS p JOIN runs AS r USING (run_id)
    WHERE p.machine_id = $machine AND r.backend = $backend
      AND coalesce(p.q_source, 'model') = 'model'
      AND p.config_id NOT IN (SELECT config_id FROM ({_NEWEST_FAILED}))
    QUALIFY row_number() OVER (
        PARTITION BY p.config_id, p.cache_state ORDER BY r.started_at DESC, p.run_id DESC
    ) = 1
"""

# Hierarchical points (q_source = counters) of the machine: for each configuration and cache
# state, every level of the newest timing run's newest counters run.
_LATEST_COUNTER_POINTS = f"""
    SELECT p.*, r.started_at
    FROM roofline_points AS p JOIN runs AS r USING (run_id)
    WHERE p.machine_id = $machine AND r.backend = $backend AND p.q_source = 'counters'
      AND p.config_id NOT IN (SELECT config_id FROM ({_NEWEST_FAILED}))
    QUALIFY dense_rank() OVER (
        PARTITION BY p.config_id, p.cache_state
        ORDER BY r.started_at DESC, p.run_id DESC, p.counters_run_id DESC
    ) = 1
"""

# The newest counters run of each sweep on the machine: how each profile went (status rows have
# no metric) and the calibrations, one row per status or calibration verdict and reason.
_COUNTERS_STATE = """
    WITH latest AS (
        SELECT run_id, sweep FROM runs
        WHERE kind = 'counters' AND machine_id = $machine AND backend = $backend
        QUALIFY row_number() OVER (PARTITION BY sweep ORDER BY started_at DESC, run_id DESC) = 1
    )
    SELECT 'status' AS what, l.sweep, c.tool, c.status, c.reason, count(*) AS n
    FROM counters AS c JOIN latest AS l USING (run_id)
    WHERE c.metric IS NULL
    GROUP BY ALL
    UNION ALL
    SELECT 'calibration', l.sweep, 'ncu',
           CASE WHEN NOT k.trusted THEN 'untrusted'
                WHEN k.pairing IS NULL THEN 'unpaired' ELSE 'trusted' END,
           CASE WHEN NOT k.trusted THEN k.reason
                WHEN k.pairing IS NULL THEN k.pairing_error END,
           count(*)
    FROM counter_calibration AS k JOIN latest AS l USING (run_id)
    GROUP BY ALL
    ORDER BY 1, 2, 4, 5
"""


def _disturbance_sql(alias: str) -> str:
    """A GEMM point's disturbance as the charts show it: the reason, "no", or "not judged" where
    the flag is null (a run recorded before rooflab judged disturbance)."""
    return (
        f"CASE WHEN {alias}.disturbed THEN coalesce({alias}.disturbance, 'yes') "
        f"WHEN NOT {alias}.disturbed THEN 'no' ELSE '{NOT_JUDGED}' END"
    )


def _machine(scope) -> dict:
    return {"machine": scope["machine_id"], "backend": scope["backend"]}


def _points(connection, scope) -> pd.DataFrame:
    return _df(
        connection,
        f"""
        WITH latest AS ({_LATEST_POINTS})
        SELECT l.config_id, l.cache_state, l.sweep, l.m, l.n, l.k, l.dtype, l.layout, l.level,
               l.intensity, l.median_s, l.achieved_flops_per_s, l.attainable_flops_per_s,
               l.efficiency, l.limiter, l.bound_s, l.run_id, l.compute_path, l.q_source,
               coalesce(g.noisy, false) AS noisy,
               coalesce(g.disturbed, false) AS disturbed,
               g.disturbed IS NOT NULL AS judged,  -- false: a run of an older rooflab
               {_disturbance_sql("g")} AS disturbance,
               (g.p75_s - g.p25_s) / g.median_s AS iqr_ratio,
               c.clock_min_mhz, c.clock_max_mhz
        FROM latest AS l
        LEFT JOIN gemm_points AS g USING (run_id, config_id, cache_state)
        LEFT JOIN (
            SELECT run_id, config_id, cache_state, min(clock_mhz) AS clock_min_mhz,
                   max(clock_mhz) AS clock_max_mhz
            FROM samples GROUP BY run_id, config_id, cache_state
        ) AS c USING (run_id, config_id, cache_state)
        ORDER BY l.sweep, l.dtype, l.layout, l.n, l.k, l.m, l.cache_state
        """,
        _machine(scope),
    )


def _failed(connection, scope) -> pd.DataFrame:
    return _df(connection, f"{_NEWEST_FAILED} ORDER BY c.config_id, c.metric", _machine(scope))


def _counter_points(connection, scope) -> pd.DataFrame:
    return _df(
        connection,
        f"""
        WITH latest AS ({_LATEST_COUNTER_POINTS})
        SELECT l.config_id, l.cache_state, l.sweep, l.m, l.n, l.k, l.dtype, l.level, l.bytes,
               l.intensity, l.median_s, l.achieved_flops_per_s, l.attainable_flops_per_s,
               l.efficiency, l.limiter, l.limiting_level, l.compute_path, l.pairing,
               l.cache_control, l.replay_mode, l.q_source, l.calibration_ratio,
               l.counters_run_id, l.run_id, g.bytes_model,
               coalesce(g.disturbed, false) AS disturbed, {_disturbance_sql("g")} AS disturbance
        FROM latest AS l
        LEFT JOIN gemm_points AS g USING (run_id, config_id, cache_state)
        ORDER BY l.sweep, l.dtype, l.n, l.k, l.m, l.cache_state, l.level
        """,
        _machine(scope),
    )


def _counters_state(connection, scope) -> pd.DataFrame:
    return _df(connection, _COUNTERS_STATE, _machine(scope))


def counters_summary_html(state: pd.DataFrame, points: pd.DataFrame) -> str:
    """The lines of a machine's summary about its hardware counters (nothing without a counters
    run): unavailable with the reason, replays not admitted and why, and the points made."""
    if state.empty:
        return ""
    esc = html.escape
    lines = []
    status = state[state.what == "status"]
    unavailable = status[status.status == "unavailable"]
    profiled = status[status.status.isin(["ok", "partial"])]
    for reason, group in unavailable.groupby("reason", sort=True):
        sweeps = ", ".join(sorted(set(group.sweep)))
        scope = "" if profiled.empty else f" for sweep(s) {esc(sweeps)}"
        lines.append(
            f"<p class='counters'><b>Hardware counters: unavailable</b>{scope} — "
            f"{esc(str(reason))}; points use model bytes (<code>q_source = model</code>).</p>"
        )
    calibration = state[state.what == "calibration"]
    for verdict, words in (("untrusted", "failed calibration"), ("unpaired", "not paired")):
        rows = calibration[calibration.status == verdict]
        if not rows.empty:
            reasons = "; ".join(esc(str(r)) for r in rows.reason)
            lines.append(
                f"<p class='counters warning'>Hardware counters: {int(rows.n.sum())} replay(s) "
                f"{words}, no point from them: {reasons}.</p>"
            )
    if not points.empty:
        configs = points[["config_id", "cache_state"]].drop_duplicates()
        limiting = ", ".join(
            f"{esc(level)} {count}"
            for level, count in points.drop_duplicates(["config_id", "cache_state"])
            .limiting_level.value_counts()
            .items()
        )
        lines.append(
            f"<p class='counters'>Hardware counters: <b>{len(configs)}</b> configuration(s) "
            f"with hierarchical points (<code>q_source = counters</code>; limiting level: "
            f"{limiting}); every other point uses model bytes (<code>q_source = model</code>)."
            "</p>"
        )
    elif unavailable.empty and not profiled.empty:
        lines.append(
            "<p class='counters'>Hardware counters collected, but none reached a point; "
            "points use model bytes (<code>q_source = model</code>).</p>"
        )
    return "\n".join(lines)


def model_vs_counted_rows(points: pd.DataFrame) -> pd.DataFrame:
    """Per configuration and cache state: model bytes vs the counted memory-level bytes."""
    import pandas as pd

    from rooflab.counters.points import model_vs_counted

    memory = points[points.level.isin(MEMORY_LEVELS) & points.bytes_model.notna()]
    rows = []
    for r in memory.itertuples():
        compared = model_vs_counted(float(r.bytes_model), float(r.bytes))
        rows.append(
            {
                "config_id": r.config_id,
                "cache_state": r.cache_state,
                "bytes_model": compared.bytes_model,
                "bytes_counted": compared.bytes_counted,
                "ratio": compared.ratio,
                "direction": compared.direction,
            }
        )
    columns = ["config_id", "cache_state", "bytes_model", "bytes_counted", "ratio", "direction"]
    return pd.DataFrame(rows, columns=columns)


# -- charts ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoofGeometry:
    """Where a Roofline's roofs run, as x (intensity) ranges on a log-log chart."""

    lo: float  # the x axis
    hi: float
    bandwidth: dict[str, tuple[float, float]]  # level -> x from, x to (the roof is y = B·x)
    compute: dict[str, tuple[float, float]]  # path -> x from, x to (the roof is y = peak)


def roof_geometry(
    peaks: dict[str, float],
    bandwidths: dict[str, float],
    intensities: list[float],
    axis: tuple[float, float] | None = None,
) -> RoofGeometry:
    """The x axis (unless given) spans every point and every ridge with a 4x margin (and always
    1 FLOP/B); each bandwidth roof rises from the left edge to where it meets the highest compute
    roof; each compute roof runs flat from where it meets the fastest level to the right edge."""
    if axis is None:
        ridges = [p / b for p in peaks.values() for b in bandwidths.values()]
        xs = [*intensities, *ridges, 1.0]
        axis = min(xs) / 4, max(xs) * 4
    lo, hi = axis

    def on_axis(x: float) -> float:  # a given axis may not reach every ridge
        return min(max(x, lo), hi)

    top = max(peaks.values(), default=None)
    fastest = max(bandwidths.values(), default=None)
    return RoofGeometry(
        lo,
        hi,
        {level: (lo, on_axis(top / bw) if top else hi) for level, bw in bandwidths.items()},
        {path: (on_axis(peak / fastest) if fastest else lo, hi) for path, peak in peaks.items()},
    )


# d3's "~s" alone prints 0.01 s as "10m", which reads as minutes: time axes and tooltips carry
# the unit with its prefix ("10ms", "10 ms")
SECONDS_AXIS = {
    "format": "~s",
    "labelExpr": "datum.label && datum.label + 's'",
    "labelOverlap": "greedy",  # the unit makes labels wider: "10µs" and "20µs" no longer touch
}


def with_time_text(frame: pd.DataFrame, *fields: str) -> pd.DataFrame:
    """`<field>_text` for each time field (seconds) the frame has, printed with its unit."""
    return frame.assign(
        **{
            f"{f}_text": [format_quantity(v, "time", 3) for v in frame[f]]
            for f in fields
            if f in frame
        }
    )


def _bytes_label(n: float) -> str:
    for factor, prefix in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= factor:
            return f"{n / factor:.4g} {prefix}"
    return f"{n:.0f} B"


# Roof labels: 11 px text, about 6 px per character; each is tried above its line, then under
# it, then further out, and keeps the first place where it overprints no label placed before it.
LABEL_CHAR_PX, LABEL_HEIGHT_PX = 6.2, 12
LABEL_DYS = (-7, 13, -20, 26)


def place_labels(
    labels: list[dict],
    text: str,
    x_domain: tuple[float, float],
    y_domain: tuple[float, float],
    size: tuple[int, int],
) -> list[dict]:
    """Each roof label with its `dy` (px) on a log-log chart of `size` (width, height px): its box
    (from the text's length, left or right of x by `align`) is placed at the first of LABEL_DYS
    where it overlaps no label placed before it, highest roofs first, so that of two close roofs
    the lower one's label is the one that moves; where every place overlaps, the one that
    overlaps least. Labels marked `yields` (datasheet roofs) are placed after all others."""
    (x0, x1), (y0, y1), (width, height) = x_domain, y_domain, size

    def box(label: dict, dy: int) -> tuple[float, float, float, float]:
        x = (math.log(label["x"]) - math.log(x0)) / (math.log(x1) - math.log(x0)) * width
        y = (math.log(y1) - math.log(label["y"])) / (math.log(y1) - math.log(y0)) * height + dy
        length = len(str(label[text])) * LABEL_CHAR_PX
        left = x + 4 if label["align"] == "left" else x - 4 - length
        return left, left + length, y - LABEL_HEIGHT_PX / 2, y + LABEL_HEIGHT_PX / 2

    def overlap(a: tuple, b: tuple) -> float:
        return max(0.0, min(a[1], b[1]) - max(a[0], b[0])) * max(
            0.0, min(a[3], b[3]) - max(a[2], b[2])
        )

    placed, out = [], []
    for label in sorted(labels, key=lambda row: (row.get("yields", False), -row["y"])):
        costs = [
            (sum(overlap(box(label, dy), other) for other in placed), i)
            for i, dy in enumerate(LABEL_DYS)
        ]
        dy = LABEL_DYS[min(costs)[1]]
        placed.append(box(label, dy))
        out.append({**label, "dy": dy})
    return out


def roofline_chart(
    ceilings: pd.DataFrame, points: pd.DataFrame, datasheet: DevicePreset | None = None
) -> alt.LayerChart:
    """Measured roofs solid (library paths dashed); `datasheet` roofs dashed and labelled so, for
    the dtypes of the points and every level the preset names."""
    import altair as alt
    import pandas as pd

    bandwidth = ceilings[ceilings.kind == "bandwidth"].set_index("name")
    compute = ceilings[ceilings.kind == "compute"].set_index("name")
    levels = [lv for lv in BANDWIDTH_LEVELS if lv in bandwidth.index]
    levels += [lv for lv in bandwidth.index if lv not in levels]
    paths = [p for p in FMA_PATHS + LIBRARY_PATHS if p in compute.index]
    paths += [p for p in compute.index if p not in paths]
    peaks = [float(compute.loc[p, "value"]) for p in paths]
    bws = [float(bandwidth.loc[lv, "value"]) for lv in levels]

    intensities = [x for x in points.get("intensity", []) if x > 0 and math.isfinite(x)]
    roofs = roof_geometry(
        dict(zip(paths, peaks, strict=True)), dict(zip(levels, bws, strict=True)), intensities
    )
    lo, hi = roofs.lo, roofs.hi

    lines, labels = [], []
    for level, bw in zip(levels, bws, strict=True):
        kernel = bandwidth.loc[level, "kernel"]
        text = f"{level} {format_quantity(bw, 'byte_rate', 4)} ({kernel})"
        for x in roofs.bandwidth[level]:
            lines.append(
                {"ceiling": text, "kind": "bandwidth", "library": False, "x": x, "y": bw * x}
            )
        labels.append({"ceiling": text, "x": lo, "y": bw * lo, "align": "left"})
    for path, peak in zip(paths, peaks, strict=True):
        library = path in LIBRARY_PATHS or compute.loc[path, "kernel"] == "matmul"
        start = roofs.compute[path][0]
        text = f"{path} {format_quantity(peak, 'flop_rate', 4)}" + (" (library)" if library else "")
        for x in roofs.compute[path]:
            lines.append(
                {"ceiling": text, "kind": "compute", "library": library, "x": x, "y": peak}
            )
        # FMA labels at the right end, library labels where their line starts: apart from
        # each other and from the points, which gather at high intensity
        labels.append(
            {
                "ceiling": text,
                "x": hi if not library else start * 1.1,
                "y": peak,
                "align": "left" if library else "right",
            }
        )
    if datasheet is not None:
        dtypes = {path_for_dtype(d) for d in points.get("dtype", [])}
        drawn = {p: v for p, v in datasheet.peak_flops_per_s.items() if p in dtypes}
        sheet = roof_geometry(drawn, datasheet.bandwidth_b_per_s, [], axis=(lo, hi))
        same_peak: dict[float, list[str]] = {}  # fp16 and bf16 share one datasheet figure
        for path, peak in drawn.items():
            same_peak.setdefault(peak, []).append(path)
        for peak, names in same_peak.items():
            # across the whole chart, labelled at the left, away from the measured labels
            text = (
                f"{', '.join(sorted(names))} {format_quantity(peak, 'flop_rate', 4)} "
                f"(datasheet {datasheet.name})"
            )
            lines += [
                {"ceiling": text, "kind": "compute", "library": True, "x": x, "y": peak}
                for x in (lo, hi)
            ]
            labels.append(
                {
                    "ceiling": text,
                    "x": lo * 1.1,
                    "y": peak,
                    "align": "left",
                    "yields": True,
                }
            )
        for level, bw in datasheet.bandwidth_b_per_s.items():
            text = f"{level} {format_quantity(bw, 'byte_rate', 4)} (datasheet)"
            lines += [
                {"ceiling": text, "kind": "bandwidth", "library": True, "x": x, "y": bw * x}
                for x in sheet.bandwidth[level]
            ]
    lines_df = pd.DataFrame(lines, columns=["ceiling", "kind", "library", "x", "y"])
    y_values = [r["y"] for r in lines] + list(points.get("achieved_flops_per_s", []))
    y_values = [y for y in y_values if y > 0]
    y_domain = (min(y_values) / 2, max(y_values) * 2) if y_values else (1e6, 1e12)
    labels_df = pd.DataFrame(
        place_labels(labels, "ceiling", (lo, hi), y_domain, ROOFLINE_SIZE),
        columns=["ceiling", "x", "y", "align", "dy"],
    )

    x_scale = alt.Scale(type="log", domain=[lo, hi], nice=False)
    y_scale = alt.Scale(type="log", domain=list(y_domain), nice=False)
    x_axis = alt.X(
        "x:Q", scale=x_scale, title="Arithmetic intensity (FLOP/byte)", axis=alt.Axis(format="~g")
    )
    y_axis = alt.Y("y:Q", scale=y_scale, title="Performance (FLOP/s)", axis=alt.Axis(format="~s"))
    base_lines = (
        alt.Chart(lines_df)
        .mark_line(color="#555", strokeWidth=1.5)
        .encode(
            x=x_axis,
            y=y_axis,
            detail="ceiling:N",
            strokeDash=alt.condition("datum.library", alt.value([6, 4]), alt.value([1, 0])),
            tooltip=[alt.Tooltip("ceiling:N", title="ceiling")],
        )
    )
    # align and dy are mark properties, not encodings: one text layer per placement
    text_layers = []
    for (align, dy), group in labels_df.groupby(["align", "dy"]):
        text_layers.append(
            alt.Chart(group)
            .mark_text(
                fontSize=11, color="#333", align=align, dy=int(dy), dx=4 if align == "left" else -4
            )
            .encode(x=alt.X("x:Q", scale=x_scale), y=alt.Y("y:Q", scale=y_scale), text="ceiling:N")
        )
    pts = with_time_text(points, "median_s").assign(
        x=points.intensity, y=points.achieved_flops_per_s
    )
    point_tooltip = [
        alt.Tooltip("config_id:N", title="config"),
        alt.Tooltip("cache_state:N", title="cache state"),
        alt.Tooltip("m:Q", title="M"),
        alt.Tooltip("n:Q", title="N"),
        alt.Tooltip("k:Q", title="K"),
        alt.Tooltip("median_s_text:N", title="median time"),
        alt.Tooltip("iqr_ratio:Q", title="IQR / median", format=".1%"),
        alt.Tooltip("clock_min_mhz:Q", title="clock min during samples (MHz)", format=".0f"),
        alt.Tooltip("clock_max_mhz:Q", title="clock max during samples (MHz)", format=".0f"),
        alt.Tooltip("achieved_flops_per_s:Q", title="achieved (FLOP/s)", format=".3~s"),
        alt.Tooltip("attainable_flops_per_s:Q", title="attainable (FLOP/s)", format=".3~s"),
        alt.Tooltip("efficiency:Q", title="efficiency", format=".1%"),
        alt.Tooltip("limiter:N", title="limiter"),
        alt.Tooltip("level:N", title="level"),
        alt.Tooltip("intensity:Q", title="intensity (FLOP/byte)", format=".3~g"),
        alt.Tooltip("q_source:N", title="bytes from (q_source)"),
        alt.Tooltip("disturbance:N", title="disturbed by other processes"),
        alt.Tooltip("run_id:N", title="run"),
    ]
    point_layer = (
        alt.Chart(pts)
        .mark_point(size=60, filled=True, opacity=0.8)
        .encode(
            x=alt.X("x:Q", scale=x_scale),
            y=alt.Y("y:Q", scale=y_scale),
            color=alt.Color("dtype:N", title="dtype"),
            shape=alt.Shape("cache_state:N", title="cache state"),
            tooltip=point_tooltip,
        )
    )
    return (
        alt.layer(base_lines, *text_layers, *_disturbed_rings(pts, x_scale, y_scale), point_layer)
        .properties(width=ROOFLINE_SIZE[0], height=ROOFLINE_SIZE[1])
        .resolve_scale(x="shared", y="shared")
    )


def _disturbed_rings(pts: pd.DataFrame, x_scale, y_scale) -> list:
    """A ring around each disturbed point, under the points, with its own legend entry; none
    (and no legend entry) where no point is disturbed."""
    import altair as alt

    if "disturbed" not in pts or not pts.disturbed.any():
        return []
    # the points' own data, filtered in the spec: a disturbed point's row is stored once
    return [
        alt.Chart(pts)
        .transform_filter("datum.disturbed")
        .transform_calculate(flag=json.dumps(DISTURBED_LABEL))
        .mark_point(shape="circle", size=260, filled=False, strokeWidth=2)
        .encode(
            x=alt.X("x:Q", scale=x_scale),
            y=alt.Y("y:Q", scale=y_scale),
            stroke=alt.Stroke(
                "flag:N",
                title="measurement",
                scale=alt.Scale(domain=[DISTURBED_LABEL], range=[DISTURBED_COLOR]),
                legend=alt.Legend(labelLimit=400),  # the whole sentence, not "… took ti…"
            ),
            tooltip=[
                alt.Tooltip("config_id:N", title="config"),
                alt.Tooltip("cache_state:N", title="cache state"),
                alt.Tooltip("disturbance:N", title="disturbed by other processes"),
                alt.Tooltip("run_id:N", title="run"),
            ],
        )
    ]


def _cache_capacities(machine_json) -> list[dict]:
    """The data-cache capacity this process can fill per level, from runs.machine; none where
    the identity lists no caches (the ceiling sweep is then drawn without them)."""
    try:
        by_level = cache_bytes_by_level(json.loads(machine_json or "{}"))
    except (CacheInfoUnavailable, KeyError, TypeError, ValueError):
        return []
    return [
        {"x": size, "label": f"{level} {_bytes_label(size)}"}
        for level, size in by_level.items()
        if size > 0  # a level none of whose instances this process touches
    ]


def sweep_chart(sweep: pd.DataFrame, plateaus: pd.DataFrame, capacities: list[dict]):
    import altair as alt
    import pandas as pd

    x_scale = alt.Scale(type="log", nice=False)
    layers = []
    if not plateaus.empty:
        layers.append(
            alt.Chart(plateaus)
            .mark_rect(opacity=0.12, color="#4c78a8")
            .encode(
                x=alt.X("lo:Q", scale=x_scale),
                x2="hi:Q",
                tooltip=[alt.Tooltip("level:N", title="plateau")],
            )
        )
        layers.append(
            alt.Chart(plateaus)
            .mark_text(baseline="top", dy=4, fontSize=11, color="#4c78a8")
            .encode(x=alt.X("mid:Q", scale=x_scale), y=alt.value(0), text="level:N")
        )
    layers.append(
        alt.Chart(sweep)
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "working_set_bytes:Q",
                scale=x_scale,
                title="Working set (bytes)",
                axis=alt.Axis(format="~s"),
            ),
            y=alt.Y("gb_per_s:Q", title="Bandwidth (GB/s)"),
            color=alt.Color("kernel:N", title="kernel"),
            tooltip=[
                alt.Tooltip("kernel:N"),
                alt.Tooltip("working_set_bytes:Q", title="working set (B)", format=",d"),
                alt.Tooltip("gb_per_s:Q", title="bandwidth (GB/s)", format=".1f"),
                alt.Tooltip("level:N", title="plateau"),
                alt.Tooltip("iqr_ratio:Q", title="IQR / median", format=".3f"),
            ],
        )
    )
    if capacities:
        caps = pd.DataFrame(capacities)
        layers.append(
            alt.Chart(caps)
            .mark_rule(strokeDash=[4, 3], color="#888")
            .encode(x=alt.X("x:Q", scale=x_scale), tooltip=[alt.Tooltip("label:N", title="cache")])
        )
        layers.append(
            alt.Chart(caps)
            .mark_text(
                angle=270, align="right", baseline="bottom", dx=-4, dy=-2, fontSize=11, color="#666"
            )
            .encode(x=alt.X("x:Q", scale=x_scale), y=alt.value(0), text="label:N")
        )
    return alt.layer(*layers).properties(width=WIDTH, height=320)


def _m_x(data: pd.DataFrame):
    """M on a log2 axis with a tick at every measured M."""
    import altair as alt

    values = sorted(int(m) for m in data.m.unique())
    # labels that would run into each other across the panel are set at an angle
    wide = len(values) * (len(str(values[-1])) * LABEL_CHAR_PX + 6) > REUSE_PANEL_SIZE[0]
    return alt.X(
        "m:Q",
        scale=alt.Scale(type="log", base=2, nice=False),
        title="M (rows of X)",
        # every measured M labelled, the last one too (Vega drops overlapping or edge labels)
        axis=alt.Axis(
            format="~d",
            values=values,
            labelOverlap=False,
            labelFlush=False,
            labelBound=False,
            labelAngle=-45 if wide else 0,
            labelAlign="right" if wide else "center",
        ),
    )


def reuse_time_chart(data: pd.DataFrame, sweep: str):
    import altair as alt

    base = alt.Chart(with_time_text(data, "seconds")).encode(
        x=_m_x(data),
        y=alt.Y(
            "seconds:Q",
            scale=alt.Scale(type="log"),
            title="Time (s)",
            axis=alt.Axis(**SECONDS_AXIS),
        ),
        color=alt.Color("series:N", title="configuration"),
        tooltip=[
            alt.Tooltip("series:N", title="configuration"),
            alt.Tooltip("cache_state:N", title="cache state"),
            alt.Tooltip("m:Q", title="M"),
            alt.Tooltip("quantity:N", title="quantity"),
            alt.Tooltip("source:N", title="source"),
            alt.Tooltip("seconds_text:N", title="time"),
        ],
    )
    # the points are their own layer: on a line mark with points, Vega-Lite draws the dash
    # legend without glyphs
    lines = base.mark_line().encode(
        strokeDash=alt.StrokeDash(
            "source:N",
            title="source",
            sort=["measured median", "model lower bound"],
            legend=alt.Legend(symbolType="stroke", symbolStrokeColor="#444"),
        ),
        detail="source:N",
    )
    return (
        alt.layer(lines, base.mark_point(filled=True, size=30))
        .properties(width=REUSE_PANEL_SIZE[0], height=REUSE_PANEL_SIZE[1])
        .facet(
            row=alt.Row("quantity:N", title=None, sort=["whole GEMM", "per row (time / M)"]),
            column=alt.Column("cache_state:N", title="cache state"),
        )
        .resolve_scale(y="independent")
        .properties(title=f"sweep {sweep}: median time and time per row vs M")
    )


def reuse_efficiency_chart(data: pd.DataFrame, sweep: str):
    import altair as alt

    return (
        alt.Chart(data)
        .mark_line(point=True)
        .encode(
            x=_m_x(data),
            y=alt.Y(
                "efficiency:Q",
                title="Efficiency (achieved / attainable, %)",
                axis=alt.Axis(format="%"),
            ),
            color=alt.Color("series:N", title="configuration"),
            tooltip=[
                alt.Tooltip("series:N", title="configuration"),
                alt.Tooltip("cache_state:N", title="cache state"),
                alt.Tooltip("m:Q", title="M"),
                alt.Tooltip("efficiency:Q", title="efficiency", format=".1%"),
                alt.Tooltip("limiter:N", title="limiter"),
                alt.Tooltip("level:N", title="level"),
            ],
        )
        .properties(width=REUSE_PANEL_SIZE[0], height=REUSE_PANEL_SIZE[1])
        .facet(column=alt.Column("cache_state:N", title="cache state"))
        .properties(title=f"sweep {sweep}: efficiency vs M")
    )


def distribution_chart(quantiles: pd.DataFrame):
    import altair as alt

    y = alt.Y("label:N", title=None, sort=None, axis=alt.Axis(labelLimit=360))
    x_scale = alt.Scale(type="log")
    color = alt.Color(
        "spread:N",
        title="verdict",
        scale=alt.Scale(
            domain=["disturbed", "noisy", "steady"], range=[DISTURBED_COLOR, "#e45756", "#4c78a8"]
        ),
    )
    tooltip = [
        alt.Tooltip("label:N", title="configuration"),
        alt.Tooltip("n:Q", title="samples"),
        alt.Tooltip("min_s_text:N", title="min"),
        alt.Tooltip("p25_s_text:N", title="p25"),
        alt.Tooltip("median_s_text:N", title="median"),
        alt.Tooltip("p75_s_text:N", title="p75"),
        alt.Tooltip("max_s_text:N", title="max"),
        alt.Tooltip("spread:N", title="verdict"),
        alt.Tooltip("n_left_out:Q", title="disturbed samples left out"),
        alt.Tooltip("disturbance:N", title="disturbed by other processes"),
    ]
    times = with_time_text(quantiles, "min_s", "p25_s", "median_s", "p75_s", "max_s")
    base = alt.Chart(times).encode(y=y, color=color, tooltip=tooltip)
    whisker = base.mark_rule().encode(
        x=alt.X(
            "min_s:Q",
            scale=x_scale,
            title="Time per call (s)",
            axis=alt.Axis(**SECONDS_AXIS),
        ),
        x2="max_s:Q",
    )
    box = base.mark_bar(size=10).encode(x=alt.X("p25_s:Q", scale=x_scale), x2="p75_s:Q")
    median = base.mark_tick(color="black", size=12, thickness=2).encode(
        x=alt.X("median_s:Q", scale=x_scale)
    )
    return alt.layer(whisker, box, median).properties(
        width=WIDTH - 200, height=max(60, 16 * len(quantiles))
    )


def conditions_chart(conditions: pd.DataFrame):
    import altair as alt

    quantities = [q for q in CONDITION_QUANTITIES if q in set(conditions.quantity)]
    span_s = (conditions.t.max() - conditions.t.min()).total_seconds()
    time_format = "%H:%M:%S" if span_s < 86_400 else "%Y-%m-%d %H:%M"
    x = alt.X("t:T", title="Time (UTC)", axis=alt.Axis(format=time_format, labelAngle=0))
    color = alt.Color("kind:N", title="run kind")
    tooltip = [
        alt.Tooltip("t:T", title="time (UTC)", format="%Y-%m-%d %H:%M:%S"),
        alt.Tooltip("quantity:N", title="quantity"),
        alt.Tooltip("value:Q", title="median", format=".4~g"),
        alt.Tooltip("value_min:Q", title="min", format=".4~g"),
        alt.Tooltip("value_max:Q", title="max", format=".4~g"),
        alt.Tooltip("readings:Q", title="readings"),
        alt.Tooltip("phase:N", title="phase"),
        alt.Tooltip("config_id:N", title="config"),
        alt.Tooltip("run:N", title="run"),
    ]
    panels = []
    for quantity in quantities:
        data = conditions[conditions.quantity == quantity]
        y = alt.Y("value:Q", title=quantity[:1].upper() + quantity[1:], scale=alt.Scale(zero=False))
        base = alt.Chart(data).encode(x=x, color=color, tooltip=tooltip)
        line = base.mark_line(point=True).encode(y=y, detail="run:N")
        spread = base.mark_rule().encode(y=alt.Y("value_min:Q"), y2="value_max:Q")
        panels.append(alt.layer(line, spread).properties(width=WIDTH, height=200))
    return alt.vconcat(*panels).resolve_scale(color="shared")


def change_chart(change: pd.DataFrame):
    import altair as alt

    y = alt.Y("label:N", title=None, sort=None, axis=alt.Axis(labelLimit=360))
    band = (
        alt.Chart(change)
        .mark_bar(size=12, color="#ccc")
        .encode(
            y=y,
            x=alt.X(
                "noise_lo:Q",
                title="Change of the median vs the previous run (%)",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(padding=12),  # dots at the ends stay whole
            ),
            x2="noise_hi:Q",
        )
    )
    dots = (
        alt.Chart(with_time_text(change, "previous_s", "latest_s"))
        .mark_point(filled=True, size=60)
        .encode(
            y=y,
            x="rel_change:Q",
            color=alt.Color(
                "verdict:N",
                title="change",
                scale=alt.Scale(
                    domain=["slower", "faster", "within noise"],
                    range=["#e45756", "#54a24b", "#888"],
                ),
            ),
            tooltip=[
                alt.Tooltip("label:N", title="configuration"),
                alt.Tooltip("previous_s_text:N", title="previous median"),
                alt.Tooltip("latest_s_text:N", title="latest median"),
                alt.Tooltip("rel_change:Q", title="change", format="+.1%"),
                alt.Tooltip("noise_hi:Q", title="noise band (±)", format=".1%"),
                alt.Tooltip("previous_run:N", title="previous run"),
                alt.Tooltip("latest_run:N", title="latest run"),
                alt.Tooltip("disturbed:N", title="disturbed by other processes"),
            ],
        )
    )
    return alt.layer(band, dots).properties(width=WIDTH - 200, height=max(60, 16 * len(change)))


def stage_bounds_frame(scenario: dict, ceilings: pd.DataFrame) -> pd.DataFrame | None:
    """One row per stage on the critical-path schedule, from the measured ceilings; None when the
    machine lacks the scenario's compute path or memory level."""
    import pandas as pd

    from rooflab.config import stages_from_config
    from rooflab.model import stage_bounds

    values = {(r.kind, r.name): r.value for r in ceilings.itertuples()}
    peak = values.get(("compute", scenario["compute_path"]))
    bandwidth = values.get(("bandwidth", scenario["memory_level"]))
    if peak is None or bandwidth is None:
        return None
    result = stage_bounds(stages_from_config(scenario["stages"], "stages"), peak, bandwidth)
    return pd.DataFrame(
        [
            {
                "stage": s.name,
                "start_us": s.start_s * 1e6,
                "finish_us": s.finish_s * 1e6,
                "bound_us": s.bound.bound_s * 1e6,
                "limiter": s.bound.limiter,
                "on_critical_path": s.on_critical_path,
                "critical_path_us": result.critical_path_s * 1e6,
                "aggregate_us": result.aggregate_s * 1e6,
                "ceilings": f"{scenario['compute_path']} {format_quantity(peak, 'flop_rate', 4)}, "
                f"{scenario['memory_level']} {format_quantity(bandwidth, 'byte_rate', 4)}",
            }
            for s in result.stages
        ]
    )


def stage_bounds_chart(frame: pd.DataFrame, name: str):
    import altair as alt
    import pandas as pd

    order = list(frame.stage)
    bars = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("start_us:Q", title="Time (μs)"),
            x2="finish_us:Q",
            y=alt.Y("stage:N", sort=order, title="Stage"),
            color=alt.Color(
                "limiter:N",
                title="limiter",
                scale=alt.Scale(domain=["compute", "memory"], range=["#4c78a8", "#f58518"]),
            ),
            tooltip=[
                alt.Tooltip("stage:N"),
                alt.Tooltip("bound_us:Q", title="own bound (μs)", format=".4~g"),
                alt.Tooltip("limiter:N"),
                alt.Tooltip("start_us:Q", title="start (μs)", format=".4~g"),
                alt.Tooltip("ceilings:N", title="measured ceilings"),
            ],
        )
    )
    first = frame.iloc[0]
    bounds = pd.DataFrame(
        [
            {"bound": "critical path", "us": first.critical_path_us},
            {"bound": "aggregate", "us": first.aggregate_us},
        ]
    )
    rules = (
        alt.Chart(bounds)
        .mark_rule(strokeDash=[6, 3], color="black")
        .encode(x="us:Q", tooltip=[alt.Tooltip("bound:N"), alt.Tooltip("us:Q", format=",.1f")])
    )
    subtitle = (
        f"critical path {first.critical_path_us:,.1f} μs, aggregate {first.aggregate_us:,.1f} μs "
        "(dashed lines); the lower bound is the larger of the two"
    )
    return alt.layer(bars, rules).properties(
        width=WIDTH,
        height=40 + 28 * len(frame),
        title=alt.Title(f"{name} (measured ceilings: {first.ceilings})", subtitle=subtitle),
    )


# -- assembling -----------------------------------------------------------------------------------


# Condition readings of a machine, one row per quantity, run and time bucket: the whole time span
# is cut into TIME_BUCKETS buckets, so a single run keeps every reading and a long history stays a
# few thousand rows.
TIME_BUCKETS = 1500
CONDITION_QUANTITIES = ("clock (GHz)", "temperature (°C)", "power (W)")
_CONDITIONS_SQL = """
    WITH readings AS (
        SELECT c.t, c.phase, c.config_id, r.kind || coalesce(' ' || r.sweep, '') AS kind,
               r.run_id AS run,
               unnest([
                   {'quantity': 'clock (GHz)',
                    'value': coalesce(c.cpu_ghz_measured, c.sm_clock_mhz / 1000)},
                   {'quantity': 'temperature (°C)', 'value': c.temp_c},
                   {'quantity': 'power (W)', 'value': c.power_w}
               ], recursive := true)
        FROM conditions AS c JOIN runs AS r USING (run_id)
        WHERE r.machine_id = $machine AND r.backend = $backend
    ),
    span AS (
        SELECT epoch(min(t)) AS t0,
               greatest(epoch(max(t)) - epoch(min(t)), 0.001) / $buckets AS width
        FROM readings
    )
    SELECT quantity, kind, run, min(t) AS t, median(value) AS value, min(value) AS value_min,
           max(value) AS value_max, count(*) AS readings,
           CASE WHEN count(DISTINCT phase) = 1 THEN any_value(phase) ELSE 'several' END AS phase,
           CASE WHEN count(DISTINCT config_id) <= 1 THEN any_value(config_id)
                ELSE 'several' END AS config_id
    FROM readings, span
    WHERE value IS NOT NULL
    GROUP BY quantity, kind, run, floor((epoch(t) - t0) / width)
    ORDER BY quantity, t
"""


def _charts(connection, scope, stages: dict | None = None) -> tuple[list[Chart], dict]:
    import pandas as pd

    machine, backend = scope["machine_id"], scope["backend"]
    ceilings = _ceilings(connection, scope)
    points = _points(connection, scope)
    failed = _failed(connection, scope)
    counted = _counter_points(connection, scope)
    charts: list[Chart] = []
    facts = {
        "ceilings": ceilings,
        "points": points,
        "failed": failed,
        "counters_html": counters_summary_html(_counters_state(connection, scope), counted),
    }

    if not ceilings.empty or not points.empty:
        notes = ""
        if not failed.empty:
            items = "".join(
                f"<li><code>{html.escape(r.config_id)}</code>: {html.escape(r.metric)} error "
                f"{r.error:.3g} &gt; tolerance {r.tolerance:.3g} (run {html.escape(r.run_id)})</li>"
                for r in failed.itertuples()
            )
            notes = f"<p>Failed correctness, not drawn:</p><ul class='failed'>{items}</ul>"
        charts.append(
            Chart(
                "roofline",
                "Roofline",
                ROOFLINE_HOW,
                roofline_chart(ceilings, points, matching_preset(scope.get("device_name"))),
                notes,
            )
        )

    if not counted.empty:
        charts += _counter_charts(counted, ceilings)

    if scope.get("ceilings_run_id"):
        sweep = _df(
            connection,
            """
            SELECT kernel, working_set_bytes, value / 1e9 AS gb_per_s, level, iqr_ratio
            FROM ceiling_sweep WHERE run_id = ? ORDER BY kernel, working_set_bytes
        """,
            [scope["ceilings_run_id"]],
        )
        plateaus = _df(
            connection,
            """
            SELECT name AS level, min(working_set_min_bytes) AS lo,
                   max(working_set_max_bytes) AS hi,
                   sqrt(min(working_set_min_bytes) * max(working_set_max_bytes)) AS mid
            FROM ceilings
            WHERE run_id = ? AND kind = 'bandwidth' AND working_set_min_bytes IS NOT NULL
            GROUP BY name ORDER BY lo
        """,
            [scope["ceilings_run_id"]],
        )
        if not sweep.empty:
            per_sm = (
                " l1_read (the SMs' L1) is drawn against the working set of one SM: every SM "
                "reads the same buffer, and its bandwidth is that of all SMs together."
                if (sweep.kernel == "l1_read").any()
                else ""
            )
            charts.append(
                Chart(
                    "ceiling_sweep",
                    "Ceiling sweep",
                    "Bandwidth of each kernel as the working set grows (newest ceilings run): "
                    "each drop marks a cache level left behind (dashed rules: total cache "
                    "capacities), and each shaded plateau is where that level's ceiling was taken."
                    + per_sm,
                    sweep_chart(sweep, plateaus, _cache_capacities(scope.get("machine"))),
                )
            )

    if not points.empty:
        pts = points.assign(
            series=points.dtype
            + " "
            + points.layout
            + " N="
            + points.n.astype(str)
            + " K="
            + points.k.astype(str)
        )
        for sweep_name, group in pts.groupby("sweep", sort=True):
            long = pd.concat(
                [
                    group.assign(
                        quantity="whole GEMM", source="measured median", seconds=group.median_s
                    ),
                    group.assign(
                        quantity="whole GEMM", source="model lower bound", seconds=group.bound_s
                    ),
                    group.assign(
                        quantity="per row (time / M)",
                        source="measured median",
                        seconds=group.median_s / group.m,
                    ),
                    group.assign(
                        quantity="per row (time / M)",
                        source="model lower bound",
                        seconds=group.bound_s / group.m,
                    ),
                ]
            )[["series", "cache_state", "m", "quantity", "source", "seconds"]]
            safe = "".join(c if c.isalnum() else "_" for c in str(sweep_name))
            charts.append(
                Chart(
                    f"reuse_time_{safe}",
                    f"Weight reuse: time vs M (sweep {sweep_name})",
                    "Solid: the measured median; dashed: the Roofline lower bound of the same "
                    "configuration. The whole GEMM gets longer with M while the time per row falls "
                    "as the weights are reused; the gap between the lines is the time lost to the "
                    "roof.",
                    reuse_time_chart(long, str(sweep_name)),
                )
            )
            charts.append(
                Chart(
                    f"reuse_efficiency_{safe}",
                    f"Weight reuse: efficiency vs M (sweep {sweep_name})",
                    "Achieved FLOP/s over the attainable FLOP/s of the roof each point sits under "
                    "(100 % is on the roof).",
                    reuse_efficiency_chart(
                        group[["series", "cache_state", "m", "efficiency", "limiter", "level"]],
                        str(sweep_name),
                    ),
                )
            )

    # The samples the point's statistics used (rooflab.experiments.timing): the undisturbed
    # ones, or all of them where every one was disturbed.
    quantiles = _df(
        connection,
        f"""
        WITH latest AS (
            SELECT g.run_id, g.config_id, g.cache_state, g.noisy,
                   coalesce(g.disturbed, false) AS disturbed,
                   {_disturbance_sql("g")} AS disturbance
            FROM gemm_points AS g JOIN runs AS r USING (run_id)
            WHERE r.machine_id = ? AND r.backend = ?
            QUALIFY row_number() OVER (
                PARTITION BY g.config_id, g.cache_state ORDER BY r.started_at DESC, g.run_id DESC
            ) = 1
        ),
        taken AS (
            SELECT s.run_id, s.config_id, s.cache_state, s.seconds,
                   coalesce(s.disturbed, false) AS sample_disturbed,
                   count(*) FILTER (WHERE coalesce(s.disturbed, false)) OVER point
                       AS n_disturbed_samples,
                   count(*) FILTER (WHERE NOT coalesce(s.disturbed, false)) OVER point AS n_clean
            FROM samples AS s JOIN latest USING (run_id, config_id, cache_state)
            WINDOW point AS (PARTITION BY s.run_id, s.config_id, s.cache_state)
        )
        SELECT s.config_id || ' · ' || s.cache_state AS label, count(*) AS n,
               min(s.seconds) AS min_s, quantile_cont(s.seconds, 0.25) AS p25_s,
               median(s.seconds) AS median_s, quantile_cont(s.seconds, 0.75) AS p75_s,
               max(s.seconds) AS max_s,
               CASE WHEN any_value(l.disturbed) THEN 'disturbed'
                    WHEN any_value(l.noisy) THEN 'noisy' ELSE 'steady' END AS spread,
               CASE WHEN any_value(s.n_clean) = 0 THEN 0
                    ELSE any_value(s.n_disturbed_samples) END AS n_left_out,
               any_value(l.disturbance) AS disturbance
        FROM taken AS s JOIN latest AS l USING (run_id, config_id, cache_state)
        JOIN gemm_points AS g USING (run_id, config_id, cache_state)
        WHERE NOT s.sample_disturbed OR s.n_clean = 0
        GROUP BY s.config_id, s.cache_state, g.sweep, g.dtype, g.layout, g.n, g.k, g.m
        ORDER BY g.sweep, g.dtype, g.layout, g.n, g.k, g.m, s.cache_state
    """,
        [machine, backend],
    )
    if not quantiles.empty:
        charts.append(
            Chart(
                "distributions",
                "Sample distributions",
                "One box per configuration and cache state (newest run), over the samples its "
                "statistics used (samples other processes took time from are left out, unless "
                "all were): whiskers span min to max, the box p25 to p75, the black tick is the "
                "median; red boxes were flagged noisy (IQR / median above the threshold), purple "
                "ones disturbed (other processes took time from the measurement; disturbed wins "
                "over noisy).",
                distribution_chart(quantiles),
            )
        )

    conditions = _df(connection, _CONDITIONS_SQL, {**_machine(scope), "buckets": TIME_BUCKETS})
    if not conditions.empty:
        conditions["t"] = conditions["t"].dt.tz_convert("UTC").dt.tz_localize(None)
        charts.append(
            Chart(
                "conditions",
                "Conditions over time",
                "What the machine ran at before, during and after each measurement, one line "
                "per run, coloured by what it measured: the clock (the measured CPU clock, or the "
                "GPU's SM clock), and the GPU's temperature and power where NVML reads them. A dip "
                "or a spread within a run means its timings were taken at a different speed. Over "
                "long histories readings are grouped into short time buckets (median drawn, "
                "min–max as a bar).",
                conditions_chart(conditions),
            )
        )

    change = _df(
        connection,
        """
        WITH ranked AS (
            SELECT g.config_id, g.cache_state, g.run_id, g.median_s,
                   (g.p75_s - g.p25_s) / g.median_s AS iqr_ratio,
                   coalesce(g.disturbed, false) AS disturbed,
                   row_number() OVER (
                       PARTITION BY g.config_id, g.cache_state
                       ORDER BY r.started_at DESC, g.run_id DESC) AS rank
            FROM gemm_points AS g JOIN runs AS r USING (run_id)
            WHERE r.machine_id = ? AND r.backend = ?
        )
        SELECT a.config_id || ' · ' || a.cache_state AS label, b.median_s AS previous_s,
               a.median_s AS latest_s, a.median_s / b.median_s - 1 AS rel_change,
               greatest(a.iqr_ratio, b.iqr_ratio) / 2 AS noise_hi,
               -greatest(a.iqr_ratio, b.iqr_ratio) / 2 AS noise_lo,
               b.run_id AS previous_run, a.run_id AS latest_run,
               CASE WHEN a.disturbed AND b.disturbed THEN 'both runs'
                    WHEN a.disturbed THEN 'latest run' WHEN b.disturbed THEN 'previous run'
                    ELSE 'no' END AS disturbed,
               CASE WHEN abs(a.median_s / b.median_s - 1) <= greatest(a.iqr_ratio, b.iqr_ratio) / 2
                    THEN 'within noise'
                    WHEN a.median_s > b.median_s THEN 'slower' ELSE 'faster' END AS verdict
        FROM ranked AS a JOIN ranked AS b
          ON a.config_id = b.config_id AND a.cache_state = b.cache_state
         AND a.rank = 1 AND b.rank = 2
        ORDER BY a.config_id, a.cache_state
    """,
        [machine, backend],
    )
    if not change.empty:
        charts.append(
            Chart(
                "change",
                "Change since the previous run",
                "Relative change of each configuration's median between its two newest runs; the "
                "grey band is ± half the larger IQR / median of the two, so a dot outside it moved "
                "by more than the noise.",
                change_chart(change),
            )
        )
    for name, scenario in (stages or {}).items():
        frame = stage_bounds_frame(scenario, ceilings)
        if frame is not None:
            charts.append(
                Chart(
                    f"stages_{name}",
                    f"Stage bounds: {name}",
                    "Each bar is a stage at its own bound max(F/C, Q/B) on this machine's measured "
                    "ceilings, started when the stages it depends on finish; the dashed lines are "
                    "the critical-path bound and the looser aggregate bound max(ΣF/C, ΣQ/B).",
                    stage_bounds_chart(frame, name),
                )
            )
    for chart in charts:
        chart.name = scope.get("prefix", "") + chart.name
    return charts, facts


HIERARCHICAL_HOW = (
    "Hardware counters (q_source = counters): each configuration and cache state is one "
    "performance, its paired timing's median (flushed replay with the cold timing, no-flush "
    "replay with the warm one, never across), drawn at one intensity per memory level: 2MNK over "
    "the bytes counted at that level (HBM from DRAM bytes, L2 from lts bytes, L1 from l1tex "
    "bytes). Its points are joined by a line; each is read against its own level's roof (same "
    "colour), and the tightest one is the limiting level. Only counts whose FLOPs matched 2MNK "
    "within 1% are drawn. A level that counted under half the bytes of the level outside it "
    "gets no point: the kernel moved its data around that counter (cuBLAS on Hopper loads "
    "through TMA into shared memory, which l1tex bytes do not see); its count stays in the "
    "counters table."
)


def _counter_charts(counted: pd.DataFrame, ceilings: pd.DataFrame) -> list[Chart]:
    from rooflab.report_counters import (
        hierarchical_roofline_chart,
        model_vs_counted_chart,
        model_vs_counted_table,
    )

    labelled = counted.assign(config_id=counted.config_id + " · " + counted.cache_state)
    charts = [
        Chart(
            "hierarchical_roofline",
            "Hierarchical Roofline (hardware counters)",
            HIERARCHICAL_HOW,
            hierarchical_roofline_chart(labelled, ceilings),
        )
    ]
    compared = model_vs_counted_rows(counted)
    if not compared.empty:
        table = model_vs_counted_table(compared).to_html(
            index=False, classes="model-vs-counted", border=0
        )
        charts.append(
            Chart(
                "model_vs_counted",
                "Model bytes vs counted memory bytes",
                "Per configuration and cache state: the cold-cache ledger Q_model (hollow) and "
                "the bytes counted at the memory level (filled). Counted below model: operands "
                "came from a cache (warm runs, reuse); counted above: the kernel moved more than "
                "the ideal ledger (re-reads, write-allocate, workspace).",
                model_vs_counted_chart(compared),
                table,
            )
        )
    return charts


def _rate_text(value: float, unit: str) -> str:
    if unit == "B/s":
        return f"{value / 1e9:.4g} GB/s"
    if unit == "FLOP/s":
        return f"{value / 1e9:.4g} GFLOP/s"
    return f"{value:.4g} {html.escape(str(unit))}"


def _windows_text(ceiling) -> str:
    """How steady the samples behind a ceiling were; for a best-of-rounds path, how far its
    rounds spread (a low round is a slow spell of the machine, or a clock that moved)."""
    import pandas as pd

    if pd.isna(ceiling.n_windows):
        return "not stored (a run of an older rooflab)"
    text = f"{int(ceiling.n_windows)} samples, IQR {ceiling.iqr_ratio:.1%} of the median rate"
    if not pd.isna(ceiling.rounds_min):
        low, high = (_rate_text(v, ceiling.unit) for v in (ceiling.rounds_min, ceiling.rounds_max))
        text += f"; best of {int(ceiling.n_points)} rounds, whose medians spanned {low} to {high}"
    return text


def _disturbed_text(ceiling) -> str:
    if not ceiling.disturbed:
        return ""
    why = html.escape(str(ceiling.disturbance or "no reason stored"))
    return f"; <span class='warning'>disturbed: {why}</span>"


def _disturbed_points_text(points: pd.DataFrame) -> str:
    """How many points are disturbed, and how many have no verdict (runs of an older rooflab,
    whose flag is null: counted as not disturbed)."""
    disturbed, unjudged = int(points.disturbed.sum()), int((~points.judged).sum())
    notes = ["ringed on the Roofline"] if disturbed else []
    if unjudged:
        notes.append(f"{unjudged} not judged: runs of an older rooflab")
    return f"<b>{disturbed}</b> disturbed" + (f" ({'; '.join(notes)})" if notes else "")


def _summary_html(connection, scope, facts) -> str:
    ceilings, points, failed = facts["ceilings"], facts["points"], facts["failed"]
    # the runs behind the ceilings and points shown: a busy machine in an older run the page
    # no longer shows is not this page's concern
    shown = sorted({scope.get("ceilings_run_id"), *points.get("run_id", [])} - {None})
    counts = _df(
        connection,
        """
        SELECT count(*) AS runs, count(*) FILTER (WHERE kind = 'gemm') AS gemm_runs,
               min(started_at) AS first, max(started_at) AS last,
               arg_max(backend_note, started_at) AS backend_note,
               count(*) FILTER (WHERE busy) AS busy_runs,
               arg_max(run_id, started_at) FILTER (WHERE busy) AS busy_run,
               arg_max(busy_warning, started_at) FILTER (WHERE busy) AS busy_warning
        FROM (
            SELECT *, busy_warning IS NOT NULL
                      AND list_contains($shown::VARCHAR[], run_id) AS busy
            FROM runs WHERE machine_id = $machine AND backend = $backend
        )
    """,
        {**_machine(scope), "shown": shown},
    ).iloc[0]
    esc = html.escape
    backend = esc(str(scope["backend"]))
    if isinstance(counts.backend_note, str):  # `auto` chose another backend than CUDA: why
        backend += f" <span class='note'>({esc(counts.backend_note)})</span>"
    rows = [
        ("host", esc(str(scope["host"]))),
        ("machine id", f"<code>{esc(str(scope['machine_id']))}</code>"),
        ("backend", backend),
        ("device", esc(str(scope["device_name"]))),
        (
            "runs",
            f"{counts.runs} ({counts.gemm_runs} GEMM), {counts['first']:%Y-%m-%d %H:%M} "
            f"to {counts['last']:%Y-%m-%d %H:%M} UTC",
        ),
    ]
    out = ["<table class='summary'>"]
    out += [f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows]
    out.append("</table>")
    if counts.busy_runs:
        out.append(
            f"<p class='warning'>Taken on a busy machine: <b>{counts.busy_runs}</b> of the "
            f"{len(shown)} run(s) behind these ceilings and points; the newest, run "
            f"<code>{esc(str(counts.busy_run))}</code>, warned: "
            f"“{esc(str(counts.busy_warning))}”.</p>"
        )

    if ceilings.empty:
        out.append("<p>No ceilings measured on this machine yet.</p>")
    else:
        run = esc(str(scope.get("ceilings_run_id")))
        out.append(f"<h3>Latest ceilings (run <code>{run}</code>)</h3><table class='ceilings'>")
        out.append(
            "<tr><th>ceiling</th><th>value</th><th>kernel</th><th>dtype</th>"
            "<th>samples behind it</th></tr>"
        )
        for r in ceilings.itertuples():
            out.append(
                f"<tr><td>{esc(r.name)}</td><td class='num'>{_rate_text(r.value, r.unit)}</td>"
                f"<td>{esc(str(r.kernel))}</td><td>{esc(str(r.dtype))}</td>"
                f"<td>{_windows_text(r)}{_disturbed_text(r)}</td></tr>"
            )
        out.append("</table>")
        disturbed = int(ceilings.disturbed.sum())
        if disturbed:
            out.append(
                f"<p class='warning'><b>{disturbed}</b> of the {len(ceilings)} ceilings disturbed: "
                "other processes took time from their measurement (why: in the table), so their "
                "values may be low and points read against them high.</p>"
            )
        memory = ceilings[(ceilings.kind == "bandwidth") & ceilings.name.isin(MEMORY_LEVELS)]
        compute = ceilings[ceilings.kind == "compute"]
        if not memory.empty and not compute.empty:
            level, bw = memory.iloc[0]["name"], float(memory.iloc[0].value)
            ridges = ", ".join(
                f"{esc(r.name)} {r.value / bw:.3g} FLOP/byte" for r in compute.itertuples()
            )
            out.append(f"<p>Ridge points against {level} ({bw / 1e9:.4g} GB/s): {ridges}.</p>")
    if facts.get("counters_html"):
        out.append(facts["counters_html"])
    if points.empty:
        out.append("<p>No Roofline points on this machine yet.</p>")
    else:
        limiter = points.limiter.value_counts()
        out.append(
            f"<p>{len(points)} Roofline points (newest run per configuration and cache state): "
            f"<b>{limiter.get('compute', 0)}</b> compute-bound, "
            f"<b>{limiter.get('memory', 0)}</b> memory-bound; "
            f"<b>{int(points.noisy.sum())}</b> noisy; "
            f"{_disturbed_points_text(points)}; "
            f"<b>{failed.config_id.nunique()}</b> configuration(s) failed correctness.</p>"
        )
        above = int((points.efficiency > ABOVE_ROOF).sum())
        if above:
            out.append(
                f"<p class='warning'><b>{above}</b> point(s) sit above their roof (efficiency "
                f"over {ABOVE_ROOF:.0%}): the ceilings under-measure this machine, or the "
                "ceilings run and the sweep ran under different conditions (compare the clocks "
                "in the conditions chart, and the load on the machine).</p>"
            )
    return "\n".join(out)


PAGE_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { padding: 2px 10px; text-align: left; border-bottom: 1px solid #eee; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
section.chart { margin: 2.5em 0; }
p.how { color: #444; max-width: 60em; }
ul.failed, p.warning, span.warning { color: #a00; }
#report-errors:empty { display: none; }
#report-errors { color: #a00; border: 1px solid #a00; padding: 0.5em; }
"""

# Recorded into the page so that a headless browser's DOM shows any failure.
ERROR_HOOK = """
window.reportErrors = [];
function reportError(message) {
  window.reportErrors.push(String(message));
  var box = document.getElementById('report-errors');
  if (box) { box.textContent = window.reportErrors.join('\\n'); }
}
window.addEventListener('error', function (e) { reportError(e.message || e); });
window.addEventListener('unhandledrejection', function (e) { reportError(e.reason); });
"""


@dataclass
class MachineSection:
    title: str
    anchor: str
    summary: str
    charts: list[Chart]


def _chart_html(chart: Chart, heading: str) -> str:
    return (
        f"<section class='chart'><{heading}>{html.escape(chart.title)}</{heading}>"
        f"<p class='how'>{html.escape(chart.how_to_read)}</p>"
        f"<div class='vega-chart' id='chart-{chart.name}'></div>{chart.notes_html}"
        f"<p class='files'><a href='{chart.name}.png'>PNG</a> · "
        f"<a href='{chart.name}.svg'>SVG</a></p></section>"
    )


def _body_html(machines: list[MachineSection]) -> str:
    """One machine: its summary and charts. Several: a list of them, then a section each."""
    if len(machines) == 1:
        (only,) = machines
        parts = [only.summary] + [_chart_html(chart, "h2") for chart in only.charts]
        if not only.charts:
            parts.append("<p class='empty'>Nothing to chart yet.</p>")
        return "\n".join(parts)
    items = "".join(
        f"<li><a href='#{m.anchor}'>{html.escape(m.title)}</a> ({len(m.charts)} charts)</li>"
        for m in machines
    )
    parts = [
        f"<p>The store holds {len(machines)} machine/backend pairs; each has its own ceilings, "
        f"points and charts, never mixed.</p><ul class='machines'>{items}</ul>"
    ]
    for m in machines:
        charts = "".join(_chart_html(chart, "h3") for chart in m.charts) or (
            "<p class='empty'>Nothing to chart yet.</p>"
        )
        parts.append(
            f"<section class='machine' id='{m.anchor}'><h2>{html.escape(m.title)}</h2>"
            f"{m.summary}{charts}</section>"
        )
    return "\n".join(parts)


def _page(title: str, body: str, specs: dict[str, dict]) -> str:
    bundle = _vega_bundle()
    specs_json = json.dumps(specs).replace("</", "<\\/")
    embed = f"""
const specs = {specs_json};
const done = [];
for (const [name, spec] of Object.entries(specs)) {{
  done.push(window.vegaEmbed('#chart-' + name, spec, {{renderer: 'svg', actions: false}})
    .catch(reportError));
}}
Promise.all(done).then(() => document.body.setAttribute('data-rendered', 'true'));
"""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>{PAGE_STYLE}</style>
<script>{ERROR_HOOK}</script>
</head>
<body>
<h1>{html.escape(title)}</h1>
<pre id="report-errors"></pre>
{body}
<script type="module">{bundle}</script>
<script type="module">{embed}</script>
</body>
</html>
"""


@functools.cache
def _vega_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one script; built once per process (about 3 s)."""
    import vl_convert as vlc

    return vlc.javascript_bundle(vl_version=_vl_version())


def _vl_version() -> str:
    import altair as alt

    return "v" + ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])


ROOFLINE_HOW = (
    "Each point is one configuration and cache state (its newest run); slanted lines are the "
    "measured bandwidth ceilings per memory level, flat lines the measured compute ceilings "
    "(dashed: the BLAS library path), so a point's distance below the roof it sits under is the "
    "efficiency left on the table."
)

EMPTY_HTML = (
    "<p class='empty'>The store holds no runs yet: there is nothing to report. Run the workflow "
    "(or <code>rooflab measure</code> and <code>rooflab store ingest</code>) first.</p>"
)


def build_report(db_path: str | Path, out_dir: str | Path, stages: dict | None = None) -> Report:
    """Write out_dir/index.html and a PNG and an SVG per chart; read-only on the store.

    `stages`: the config's validated `stages` section; each scenario gets a stage-bounds chart."""
    import vl_convert as vlc

    out_dir = Path(out_dir)
    connection = connect_read_only(db_path)
    machines: list[MachineSection] = []
    try:
        scopes = _scopes(connection)
        for scope in scopes:
            charts, facts = _charts(connection, scope, stages)
            machines.append(
                MachineSection(
                    title=f"{scope['host']} ({scope['backend']}, {scope['device_name']})",
                    anchor="machine-" + scope.get("prefix", "").rstrip("_"),
                    summary=_summary_html(connection, scope, facts),
                    charts=charts,
                )
            )
    finally:
        connection.close()

    out_dir.mkdir(parents=True, exist_ok=True)
    report = Report(out_dir=out_dir, index=out_dir / "index.html")
    vl_version = _vl_version()
    for chart in (chart for machine in machines for chart in machine.charts):
        spec = chart.chart.to_dict()
        report.specs[chart.name] = spec
        png = out_dir / f"{chart.name}.png"
        svg = out_dir / f"{chart.name}.svg"
        png.write_bytes(vlc.vegalite_to_png(spec, vl_version=vl_version, scale=2))
        svg.write_text(vlc.vegalite_to_svg(spec, vl_version=vl_version), encoding="utf-8")
        report.charts.append(chart.name)
        report.files += [png, svg]
    if not machines:
        title, body = "rooflab report", EMPTY_HTML
    elif len(machines) == 1:
        title, body = f"rooflab report: {machines[0].title}", _body_html(machines)
    else:
        title, body = f"rooflab report: {len(machines)} machines", _body_html(machines)
    page = _page(title, body, report.specs)
    temporary = report.index.with_name(".index.html.tmp")
    temporary.write_text(page, encoding="utf-8")
    temporary.replace(report.index)
    report.files.append(report.index)
    return report
