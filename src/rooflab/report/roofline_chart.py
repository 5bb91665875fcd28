"""The Roofline of a machine: its measured roofs (and a datasheet's, where the device has a
preset) and the newest point of each configuration and cache state."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rooflab.report.axes import ROOFLINE_SIZE, roof_geometry, with_time_text
from rooflab.report.disturbed_marks import disturbed_rings
from rooflab.report.labels import place_labels
from rooflab.units import format_quantity
from rooflab.vocabulary import datasheet_path

if TYPE_CHECKING:
    import altair as alt
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


def roofline_chart(
    ceilings: pd.DataFrame, points: pd.DataFrame, datasheet: pd.DataFrame | None = None
) -> alt.LayerChart:
    """Measured roofs solid (library paths dashed); `datasheet` roofs (rows of
    latest_datasheet_roofs) dashed and labelled so, for the dtypes of the points and every level
    the preset names."""
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
    if datasheet is not None and not datasheet.empty:
        dtypes = {datasheet_path(d) for d in points.get("dtype", [])}
        sheet_compute = datasheet[datasheet.kind == "compute"]
        drawn = {r.name: r.value for r in sheet_compute.itertuples() if r.name in dtypes}
        sheet_bandwidth = {
            r.name: r.value for r in datasheet[datasheet.kind == "bandwidth"].itertuples()
        }
        device = datasheet.device.iloc[0]
        sheet = roof_geometry(drawn, sheet_bandwidth, [], axis=(lo, hi))
        same_peak: dict[float, list[str]] = {}  # fp16 and bf16 share one datasheet figure
        for path, peak in drawn.items():
            same_peak.setdefault(peak, []).append(path)
        for peak, names in same_peak.items():
            # across the whole chart, labelled at the left, away from the measured labels
            text = (
                f"{', '.join(sorted(names))} {format_quantity(peak, 'flop_rate', 4)} "
                f"(datasheet {device})"
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
        for level, bw in sheet_bandwidth.items():
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
        alt.layer(base_lines, *text_layers, *disturbed_rings(pts, x_scale, y_scale), point_layer)
        .properties(width=ROOFLINE_SIZE[0], height=ROOFLINE_SIZE[1])
        .resolve_scale(x="shared", y="shared")
    )
