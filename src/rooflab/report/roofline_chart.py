"""The Roofline of a machine: its measured roofs, each in its own colour and labelled where no
roof line runs through the label (and a datasheet's, where the device has a preset), and the
newest point of each configuration and cache state (roofline_points).

A Roofline is drawn in one unit of work: FLOP (the Roofline) or OP (the Integer Roofline of a
GPU's int8 GEMMs). Its compute roofs are the ceilings in that unit per second and its points those
whose work is in it (`work_unit`); the bandwidth roofs are common to both. An OP/s ceiling is never
drawn on a FLOP/s axis, nor a FLOP/s one on an OP/s axis."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rooflab.report.axes import ROOFLINE_SIZE, chart_title, roof_geometry, with_time_text
from rooflab.report.disturbed_marks import (
    DISTURBED_COLOR,
    DISTURBED_LABEL,
    disturbed_rings,
    flag_legend,
)
from rooflab.report.labels import BOLD_CHAR_PX, FAR_DYS, LINE_COST, SHEET_COST, place_labels
from rooflab.report.roofline_points import (
    ABOVE_COLOUR,
    ABOVE_LABEL,
    FILL_KEY,
    PAIR_LINE_COST,
    UNKNOWN_ROOF,
    above_marks,
    guides,
    judged_against,
    label_obstacles,
    pair_layer,
    pair_segments,
    point_layer,
    workload_label_layers,
    workload_labels,
)
from rooflab.units import format_quantity
from rooflab.vocabulary import datasheet_path

if TYPE_CHECKING:
    import altair as alt
    import pandas as pd

BANDWIDTH_LEVELS = ("L1", "L2", "L3", "DRAM", "HBM")  # fastest first; others (host) after
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
    "fp8_tensor",
    "int8_tensor",
)
WORK_RATE_KINDS = {"FLOP": "flop_rate", "OP": "op_rate"}  # units.format_quantity's kinds
# Each roof its own colour: the levels as in the hierarchical Roofline (main memory red), the
# compute paths from a palette that uses none of those; a point takes its roof's colour.
LEVEL_COLOURS = {"L1": "#2ca02c", "L2": "#1f77b4", "L3": "#ff7f0e", "DRAM": "#d62728"}
LEVEL_COLOURS["HBM"] = LEVEL_COLOURS["DRAM"]
LEVEL_COLOURS["host"] = "#8c6d31"  # a GPU's link to host memory (PCIe, NVLink-C2C)
PATH_COLOURS = (
    "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
    "#393b79", "#7f7f7f", "#637939", "#e7ba52", "#843c39",
)  # fmt: skip
DATASHEET_COLOUR = "#999"


def roofs_in(ceilings: pd.DataFrame, unit: str = "FLOP") -> pd.DataFrame:
    """The rows of a Roofline in `unit` (FLOP or OP) among ceiling rows (ceiling_summary,
    latest_datasheet_roofs): every bandwidth roof, and the compute roofs in `unit`/s (a compute
    row of an older rooflab, without a unit, is FLOP/s)."""
    if ceilings.empty or "kind" not in ceilings:
        return ceilings
    if "unit" in ceilings:
        units = ceilings["unit"].fillna("FLOP/s")
    else:
        units = ceilings.kind.map(lambda _: "FLOP/s")
    keep = (ceilings.kind != "compute") | (units == f"{unit}/s")
    return ceilings[keep].reset_index(drop=True)


def points_in(points: pd.DataFrame, unit: str = "FLOP") -> pd.DataFrame:
    """The points whose work is in `unit` (latest_model_points' work_unit; FLOP where a frame
    has none)."""
    if "work_unit" not in points:
        return points if unit == "FLOP" else points.iloc[0:0]
    return points[points["work_unit"].fillna("FLOP") == unit].reset_index(drop=True)


def compute_roofs_in(ceilings: pd.DataFrame, unit: str) -> list[str]:
    """The names of the compute roofs in `unit`/s among ceiling rows."""
    rows = roofs_in(ceilings, unit)
    return [] if rows.empty else list(rows.name[rows.kind == "compute"])


def _roofs(ceilings: pd.DataFrame, unit: str = "FLOP") -> tuple[dict, dict, dict]:
    """The measured roofs in drawing order: {level: B/s}, {path: `unit`/s} and each one's label
    ({name: text}), fastest level and FMA paths first."""
    bandwidth = ceilings[ceilings.kind == "bandwidth"].set_index("name")
    compute = ceilings[ceilings.kind == "compute"].set_index("name")
    levels = [lv for lv in BANDWIDTH_LEVELS if lv in bandwidth.index]
    levels += [lv for lv in bandwidth.index if lv not in levels]
    # each FMA path, then its narrower instruction paths (fp64_fma, fp64_fma_avx2), the libraries
    fma = [q for p in FMA_PATHS for q in sorted(compute.index) if q == p or q.startswith(f"{p}_")]
    paths = [p for p in fma + list(LIBRARY_PATHS) if p in compute.index]
    paths += [p for p in compute.index if p not in paths]
    bws = {lv: float(bandwidth.loc[lv, "value"]) for lv in levels}
    peaks = {p: float(compute.loc[p, "value"]) for p in paths}
    texts = {
        lv: f"{lv} {format_quantity(bw, 'byte_rate', 4)} ({bandwidth.loc[lv, 'kernel']})"
        for lv, bw in bws.items()
    }
    for path, peak in peaks.items():
        library = path in LIBRARY_PATHS or compute.loc[path, "kernel"] == "matmul"
        isa = compute.loc[path].get("isa") if "isa" in compute else None
        named = isinstance(isa, str) and not path.endswith(f"_{isa}")  # the widest: fp64_fma
        texts[path] = f"{path}{f' [{isa}]' if named else ''} " + (
            f"{format_quantity(peak, WORK_RATE_KINDS[unit], 4)}" + (" (library)" if library else "")
        )
    return bws, peaks, texts


def _colours(bws: dict, peaks: dict, texts: dict) -> tuple[list[str], list[str]]:
    """The roof colour scale: its domain (the roofs' labels) and range."""
    palette = iter(PATH_COLOURS * (1 + len(peaks) // len(PATH_COLOURS)))
    spare = iter(PATH_COLOURS[::-1] * (1 + len(bws) // len(PATH_COLOURS)))
    domain = [texts[lv] for lv in bws] + [texts[p] for p in peaks]
    colours = [LEVEL_COLOURS.get(lv) or next(spare) for lv in bws]
    colours += [next(palette) for _ in peaks]
    return domain, colours


def roofline_chart(
    ceilings: pd.DataFrame,
    points: pd.DataFrame,
    datasheet: pd.DataFrame | None = None,
    title: dict | None = None,
    pairs: pd.DataFrame | None = None,
    unit: str = "FLOP",
    shape_title: str = FILL_KEY,
) -> alt.LayerChart:
    """Measured roofs in their own colours (library paths dashed), labelled on the chart away
    from every roof line and in the legend; `datasheet` roofs (rows of latest_datasheet_roofs)
    grey, dashed and labelled so, for the dtypes of the points and every level the preset names.
    `title`: {"text", "subtitle"} (roofline_title). Your workloads' cases are stars labelled
    with their names where a label fits; `pairs` (rows of implementation_comparisons) join two
    implementations of the same work with a grey line. `unit`: the work of the chart, FLOP or
    OP (the Integer Roofline): only the compute roofs in `unit`/s and the points whose work is in
    `unit` are drawn, on axes in `unit`/byte and `unit`/s. `shape_title`: the title of the
    legend of the points' shapes (one per sweep; an import's: one per operator)."""
    import altair as alt
    import pandas as pd

    ceilings, points = roofs_in(ceilings, unit), points_in(points, unit)
    rate = WORK_RATE_KINDS[unit]
    bws, peaks, texts = _roofs(ceilings, unit)
    intensities = [x for x in points.get("intensity", []) if x > 0 and math.isfinite(x)]
    roofs = roof_geometry(peaks, bws, intensities)
    lo, hi = roofs.lo, roofs.hi

    lines, labels, sheet_lines = [], [], []
    for level, bw in bws.items():
        text = texts[level]
        for x in roofs.bandwidth[level]:
            lines.append(
                {"ceiling": text, "kind": "bandwidth", "library": False, "x": x, "y": bw * x}
            )
        labels.append(_slanted_label(text, bw, *roofs.bandwidth[level]))
    for path, peak in peaks.items():
        library = texts[path].endswith("(library)")
        start = roofs.compute[path][0]
        for x in roofs.compute[path]:
            lines.append(
                {"ceiling": texts[path], "kind": "compute", "library": library, "x": x, "y": peak}
            )
        # FMA labels at the right end, library labels where their line starts: apart from
        # each other and from the points, which gather at high intensity
        right, left = (hi, peak, "right"), (start * 1.1, peak, "left")
        along = [(start * (hi / start) ** f, peak, "left") for f in (0.2, 0.35, 0.5, 0.65)]
        # ending where its line starts or short of it, above the slanted roofs
        before = [(start / f, peak, "right") for f in (1, 1.5, 2.5)]
        first, *others = (
            [left, right, *before, *along] if library else [right, *along[::-1], left, *before]
        )
        labels.append(
            {"ceiling": texts[path], "x": first[0], "y": peak, "align": first[2], "anchors": others}
        )
    datasheet = None if datasheet is None else roofs_in(datasheet, unit)
    if datasheet is not None and not datasheet.empty:
        dtypes = {datasheet_path(d) for d in points.get("dtype", [])}
        if unit == "OP":  # beside each measured integer path its datasheet figure (int8_tensor)
            dtypes |= {path.removesuffix("_tensor") for path in peaks}
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
                f"{', '.join(sorted(names))} {format_quantity(peak, rate, 4)} (datasheet {device})"
            )
            sheet_lines += [
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
                    "anchors": [(hi, peak, "right"), (math.sqrt(lo * hi), peak, "left")],
                }
            )
        for level, bw in sheet_bandwidth.items():
            text = f"{level} {format_quantity(bw, 'byte_rate', 4)} (datasheet)"
            sheet_lines += [
                {"ceiling": text, "kind": "bandwidth", "library": True, "x": x, "y": bw * x}
                for x in sheet.bandwidth[level]
            ]
            labels.append(_slanted_label(text, bw, *sheet.bandwidth[level], yields=True))
    columns = ["ceiling", "kind", "library", "x", "y"]
    lines_df = pd.DataFrame(lines, columns=columns)
    achieved = list(points.get("achieved_flops_per_s", []))
    y_values = [r["y"] for r in lines + sheet_lines] + achieved
    y_values = [y for y in y_values if y > 0]
    y_domain = (min(y_values) / 2, max(y_values) * 2) if y_values else (1e6, 1e12)
    # a slanted roof rises one decade per decade: its labels are turned to run along it
    (width, height), decades_x = ROOFLINE_SIZE, math.log10(hi / lo)
    slope = (height / math.log10(y_domain[1] / y_domain[0])) / (width / decades_x)
    for label in labels:
        label["angle"] = -math.degrees(math.atan(slope)) if label.pop("slanted", False) else 0.0
    segments = [
        ((a["x"], a["y"]), (b["x"], b["y"]), cost)
        for rows, cost in ((lines, LINE_COST), (sheet_lines, SHEET_COST))
        for a, b in zip(rows[::2], rows[1::2], strict=True)
    ]
    pair_lines = pair_segments(points, pairs)
    segments += [((r.x, r.y), (r.x2, r.y2), PAIR_LINE_COST) for r in pair_lines.itertuples()]
    labels += workload_labels(points, (hi / lo) ** (1 / width))
    placed = place_labels(
        labels,
        "ceiling",
        (lo, hi),
        y_domain,
        ROOFLINE_SIZE,
        segments + guides(points),
        label_obstacles(points),
        BOLD_CHAR_PX,
        FAR_DYS,
    )
    labels_df = pd.DataFrame(
        [row for row in placed if not row.get("workload")],
        columns=["ceiling", "x", "y", "align", "dy", "angle"],
    )
    names_df = pd.DataFrame(
        [{**row, "label": row["ceiling"]} for row in placed if row.get("workload")],
        columns=["label", "x", "y", "align", "dy"],
    )

    pts = with_time_text(points, "median_s").assign(
        x=points.get("intensity"),
        y=points.get("achieved_flops_per_s"),
        roof=[roof or UNKNOWN_ROOF for roof in judged_against(points, texts)],
    )
    domain, colours = _colours(bws, peaks, texts)
    if UNKNOWN_ROOF in set(pts.roof):  # no roof of this machine's ceilings judges it
        domain, colours = [*domain, UNKNOWN_ROOF], [*colours, "#555"]
    roof_scale = alt.Scale(domain=domain, range=colours)
    x_scale = alt.Scale(type="log", domain=[lo, hi], nice=False)
    y_scale = alt.Scale(type="log", domain=list(y_domain), nice=False)
    x = alt.X("x:Q", scale=x_scale)
    y = alt.Y("y:Q", scale=y_scale)
    base_lines = (
        alt.Chart(lines_df)
        .mark_line(strokeWidth=1.8)
        .encode(
            x=alt.X(
                "x:Q",
                scale=x_scale,
                title=f"Arithmetic intensity ({unit}/byte)",
                axis=alt.Axis(format="~g"),
            ),
            y=alt.Y(
                "y:Q", scale=y_scale, title=f"Performance ({unit}/s)", axis=alt.Axis(format="~s")
            ),
            color=alt.Color(
                "ceiling:N",
                scale=roof_scale,
                title="roof (a point's colour: the roof it is judged against)",
                legend=alt.Legend(
                    labelLimit=400, titleLimit=400, symbolType="stroke", symbolStrokeWidth=3
                ),
            ),
            detail=alt.Detail("ceiling:N"),
            strokeDash=alt.StrokeDashValue(
                [1, 0], condition={"test": "datum.library", "value": [6, 4]}
            ),
            tooltip=[alt.Tooltip("ceiling:N", title="ceiling")],
        )
    )
    layers = [base_lines]
    if sheet_lines:
        layers.append(
            alt.Chart(pd.DataFrame(sheet_lines, columns=columns))
            .mark_line(strokeWidth=1.5, color=DATASHEET_COLOUR, strokeDash=[6, 4])
            .encode(x=x, y=y, detail=alt.Detail("ceiling:N"), tooltip=[alt.Tooltip("ceiling:N")])
        )
    if "attainable_flops_per_s" in pts:
        layers.append(  # from each point to where its roof caps it
            alt.Chart(pts)
            .transform_filter("datum.roof != null && datum.attainable_flops_per_s > 0")
            .mark_rule(strokeWidth=1, strokeDash=[2, 2], opacity=0.8)
            .encode(
                x=x,
                y=y,
                y2=alt.Y2("attainable_flops_per_s:Q"),
                color=alt.Color("roof:N", scale=roof_scale, legend=None),
                tooltip=[alt.Tooltip("roof:N", title="judged against")],
            )
        )
    # align, dy and angle are mark properties, not encodings: one text layer per placement
    for (align, dy, angle), group in labels_df.groupby(["align", "dy", "angle"]):
        sheet = ~group.ceiling.isin(domain)
        for rows, colour in ((group[~sheet], None), (group[sheet], DATASHEET_COLOUR)):
            if rows.empty:
                continue
            mark = {
                "align": align,
                "dy": int(dy),
                "dx": 4 if align == "left" else -4,
                "angle": round(angle, 2) % 360,
                "fontSize": 11,
                "fontWeight": "bold",
            }
            # a white halo first: a point's dotted guide does not run through the text
            halo = alt.Chart(rows).mark_text(stroke="white", strokeWidth=3, **mark)
            layers.append(halo.encode(x=x, y=y, text=alt.Text("ceiling:N")))
            text = alt.Chart(rows).mark_text(**mark)
            layers.append(
                text.encode(
                    x=x,
                    y=y,
                    text=alt.Text("ceiling:N"),
                    color=alt.ColorValue(colour)
                    if colour
                    else alt.Color("ceiling:N", scale=roof_scale, legend=None),
                )
            )
    flags = [DISTURBED_LABEL] * bool(pts.get("disturbed", pd.Series()).any())
    flags += [ABOVE_LABEL] * bool(pts.get("above_roof", pd.Series()).fillna(False).any())
    disturbed = [f == DISTURBED_LABEL for f in flags]
    flag_scale, flag_shapes = flag_legend(
        flags,
        [DISTURBED_COLOR if ring else ABOVE_COLOUR for ring in disturbed],
        ["circle" if ring else "triangle-up" for ring in disturbed],
    )
    if not pair_lines.empty:
        layers.append(pair_layer(pair_lines, x, y))
    layers += workload_label_layers(names_df, x, y)
    marked = disturbed_rings(pts, x_scale, y_scale, flag_scale, flag_shapes)
    if ABOVE_LABEL in flags:
        marked.append(above_marks(pts, x, y, flag_scale, flag_shapes))
    if marked:  # one legend of their shapes, apart from the sweeps' shapes
        layers.append(alt.layer(*marked).resolve_scale(shape="shared", stroke="shared"))
    layers.append(point_layer(pts, x, y, roof_scale, unit, shape_title))
    chart = alt.layer(*layers).properties(width=width, height=height)
    if title:
        chart = chart.properties(title=chart_title(title["text"], title["subtitle"]))
    return chart.resolve_scale(x="shared", y="shared", shape="independent", stroke="independent")


def _slanted_label(text: str, bw: float, start: float, end: float, yields=False) -> dict:
    """A bandwidth roof's label, turned along its line: near the left edge, or further along
    where that place is taken."""
    along = [start * (end / start) ** f for f in (0.04, 0.25, 0.5, 0.75)]
    return {
        "ceiling": text,
        "x": along[0],
        "y": bw * along[0],
        "align": "left",
        "slanted": True,
        "yields": yields,
        "anchors": [(x, bw * x, "left") for x in along[1:]],
    }
