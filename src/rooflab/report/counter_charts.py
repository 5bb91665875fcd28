"""Charts of counter-derived points (issue 7).

- `hierarchical_roofline_chart`: NERSC-style hierarchical Roofline. Each configuration is one
  performance (its paired timing) at one intensity per memory level; its points (colour = level)
  sit on a horizontal line joining them, and each level's bandwidth roof is drawn in that level's
  colour, so a point reads against its own level's roof only. Compute roofs are grey.
- `model_vs_counted_chart` / `model_vs_counted_table`: the cold-cache ledger Q_model beside the
  counted HBM bytes per configuration, with the ratio and the direction.

Inputs are the rows of the store's views: latest_counted_points, ceiling_summary (`kind`
"bandwidth" | "compute", `name` a level or path, `value` in B/s or FLOP/s) and
model_vs_counted_bytes. Altair is imported inside the functions, as
everywhere in rooflab.report.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rooflab.report.axes import ROOFLINE_SIZE, WIDTH, roof_geometry, with_time_text
from rooflab.report.disturbed_marks import disturbed_rings
from rooflab.report.labels import place_labels
from rooflab.units import format_quantity

if TYPE_CHECKING:
    import altair as alt
    import pandas as pd

LEVEL_ORDER = ("HBM", "DRAM", "L2", "L1")  # slowest first
LEVEL_COLOURS = {"HBM": "#d62728", "DRAM": "#d62728", "L2": "#1f77b4", "L1": "#2ca02c"}
OTHER_COLOURS = ("#9467bd", "#8c564b", "#e377c2", "#17becf")


def _levels(names) -> list[str]:
    names = list(dict.fromkeys(names))
    return [lv for lv in LEVEL_ORDER if lv in names] + sorted(
        n for n in names if n not in LEVEL_ORDER
    )


def _colours(levels: list[str]) -> list[str]:
    others = iter(OTHER_COLOURS * 4)
    return [LEVEL_COLOURS.get(level) or next(others) for level in levels]


def hierarchical_roofline_chart(points: pd.DataFrame, ceilings: pd.DataFrame) -> alt.LayerChart:
    """Log-log; one point per level per configuration, joined by a line per configuration;
    colour = level, shape = configuration; every roof labelled with its value and unit."""
    import altair as alt
    import pandas as pd

    pts = points[points.intensity.map(lambda x: x is not None and 0 < x < math.inf)].copy()
    pts = pts[pts.achieved_flops_per_s > 0]
    # no counter here counts the host link's bytes: its roof would have no point to read against
    bandwidth = ceilings[(ceilings.kind == "bandwidth") & (ceilings.name != "host")]
    compute = ceilings[ceilings.kind == "compute"]
    if "compute_path" in pts and len(pts):
        compute = compute[compute.name.isin(set(pts.compute_path))]
    levels = _levels(list(pts.level) + list(bandwidth.name))
    bandwidth = bandwidth[bandwidth.name.isin(levels)]
    peaks = {str(n): float(v) for n, v in zip(compute.name, compute.value, strict=True)}
    bws = {str(n): float(v) for n, v in zip(bandwidth.name, bandwidth.value, strict=True)}
    roofs = roof_geometry(peaks, bws, list(pts.intensity))
    lo, hi = roofs.lo, roofs.hi

    lines, labels = [], []
    for level, bw in bws.items():
        text = f"{level} {format_quantity(bw, 'byte_rate', 4)}"
        for x in roofs.bandwidth[level]:
            lines.append({"roof": text, "level": level, "kind": "bandwidth", "x": x, "y": bw * x})
        labels.append({"roof": text, "level": level, "x": lo, "y": bw * lo, "align": "left"})
    for path, peak in peaks.items():
        text = f"{path} {format_quantity(peak, 'flop_rate', 4)}"
        for x in roofs.compute[path]:
            lines.append({"roof": text, "level": None, "kind": "compute", "x": x, "y": peak})
        labels.append({"roof": text, "level": None, "x": hi, "y": peak, "align": "right"})
    lines_df = pd.DataFrame(lines, columns=["roof", "level", "kind", "x", "y"])
    ys = [r["y"] for r in lines] + list(pts.achieved_flops_per_s)
    ys = [y for y in ys if y > 0]
    y_domain = (min(ys) / 2, max(ys) * 2) if ys else (1e9, 1e15)
    labels_df = pd.DataFrame(
        place_labels(labels, "roof", (lo, hi), y_domain, ROOFLINE_SIZE),
        columns=["roof", "level", "x", "y", "align", "dy"],
    )
    x_scale = alt.Scale(type="log", domain=[lo, hi], nice=False)
    y_scale = alt.Scale(type="log", domain=list(y_domain), nice=False)
    colour = alt.Scale(domain=levels, range=_colours(levels))
    x = alt.X(
        "x:Q", scale=x_scale, title="Arithmetic intensity (FLOP/byte)", axis=alt.Axis(format="~g")
    )
    y = alt.Y("y:Q", scale=y_scale, title="Performance (FLOP/s)", axis=alt.Axis(format="~s"))
    roof_tooltip = [
        alt.Tooltip("roof:N", title="ceiling (measured)"),
        alt.Tooltip("kind:N", title="kind"),
    ]

    bandwidth_roofs = (
        alt.Chart(lines_df[lines_df.kind == "bandwidth"])
        .mark_line(strokeWidth=1.5)
        .encode(
            x=x,
            y=y,
            detail=alt.Detail("roof:N"),
            color=alt.Color("level:N", scale=colour, title="memory level"),
            tooltip=roof_tooltip,
        )
    )
    compute_roofs = (
        alt.Chart(lines_df[lines_df.kind == "compute"])
        .mark_line(color="#555", strokeWidth=1.5)
        .encode(x=x, y=y, detail=alt.Detail("roof:N"), tooltip=roof_tooltip)
    )
    text_layers = [
        alt.Chart(group)
        .mark_text(
            fontSize=11, color="#333", align=align, dy=int(dy), dx=4 if align == "left" else -4
        )
        .encode(
            x=alt.X("x:Q", scale=x_scale),
            y=alt.Y("y:Q", scale=y_scale),
            text=alt.Text("roof:N"),
            tooltip=roof_tooltip,
        )
        for (align, dy), group in labels_df.groupby(["align", "dy"])
    ]

    pts = pts.assign(x=pts.intensity, y=pts.achieved_flops_per_s)
    pts = with_time_text(pts, "median_s")
    joins = (
        alt.Chart(pts)
        .mark_line(color="#888", strokeWidth=1)
        .encode(
            x=alt.X("x:Q", scale=x_scale),
            y=alt.Y("y:Q", scale=y_scale),
            detail=alt.Detail("config_id:N"),
            order=alt.Order("x:Q"),
            tooltip=[
                alt.Tooltip("config_id:N", title="config"),
                alt.Tooltip("limiter:N", title="limiter"),
                alt.Tooltip("limiting_level:N", title="tightest memory level"),
            ],
        )
    )
    point_tooltip = [
        alt.Tooltip("config_id:N", title="config"),
        alt.Tooltip("level:N", title="level"),
        alt.Tooltip("bytes:Q", title="counted bytes (B)", format=".4~s"),
        alt.Tooltip("intensity:Q", title="intensity (FLOP/byte)", format=".4~g"),
        alt.Tooltip("achieved_flops_per_s:Q", title="achieved (FLOP/s)", format=".4~s"),
        alt.Tooltip("attainable_flops_per_s:Q", title="this level's bound (FLOP/s)", format=".4~s"),
        alt.Tooltip("limiter:N", title="limiter"),
        alt.Tooltip("limiting_level:N", title="tightest memory level"),
        alt.Tooltip("efficiency:Q", title="efficiency", format=".1%"),
        alt.Tooltip("median_s_text:N", title="median time"),
        alt.Tooltip("pairing:N", title="pairing"),
        alt.Tooltip("q_source:N", title="bytes from"),
        alt.Tooltip("disturbance:N", title="disturbed by other processes"),
    ]
    point_tooltip = [t for t in point_tooltip if t.shorthand.split(":")[0] in pts.columns]
    point_layer = (
        alt.Chart(pts)
        .mark_point(size=70, filled=True, opacity=0.9)
        .encode(
            x=alt.X("x:Q", scale=x_scale),
            y=alt.Y("y:Q", scale=y_scale),
            color=alt.Color("level:N", scale=colour, title="memory level"),
            shape=alt.Shape(
                "config_id:N", title="configuration", legend=alt.Legend(labelLimit=400)
            ),
            tooltip=point_tooltip,
        )
    )
    return (
        alt.layer(
            bandwidth_roofs,
            compute_roofs,
            *text_layers,
            joins,
            *disturbed_rings(pts, x_scale, y_scale),  # the timing behind the point was disturbed
            point_layer,
        )
        .properties(width=ROOFLINE_SIZE[0], height=ROOFLINE_SIZE[1])
        .resolve_scale(x="shared", y="shared")
    )


def model_vs_counted_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: model bytes, counted HBM bytes, counted/model, direction."""
    import pandas as pd

    return pd.DataFrame(
        {
            "configuration": rows.config_id,
            "cache state": rows.cache_state if "cache_state" in rows else "",
            "model bytes (B)": rows.bytes_model.map(lambda b: format_quantity(b, "bytes", 4)),
            "counted HBM bytes (B)": rows.bytes_counted.map(
                lambda b: format_quantity(b, "bytes", 4)
            ),
            "counted / model": rows.ratio.map(lambda r: f"{r:.3g}"),
            "direction": rows.direction,
        }
    ).reset_index(drop=True)


def model_vs_counted_chart(rows: pd.DataFrame) -> alt.LayerChart:
    """Per configuration, the model bytes (hollow) and the counted HBM bytes (filled) on one log
    axis, joined by a rule; the tooltip carries the ratio and the direction."""
    import altair as alt
    import pandas as pd

    rows = rows.assign(
        label=rows.config_id + (" " + rows.cache_state if "cache_state" in rows else "")
    )
    long = pd.concat(
        [
            rows.assign(source="model (cold-cache ledger)", bytes=rows.bytes_model),
            rows.assign(source="counted HBM (ncu)", bytes=rows.bytes_counted),
        ],
        ignore_index=True,
    )
    long = long[long.bytes > 0]
    values = list(long.bytes) or [1.0]
    x_scale = alt.Scale(type="log", domain=[min(values) / 2, max(values) * 8], nice=False)
    rows = rows.assign(
        note=[
            f"counted/model {r:.3g}: {d}" for r, d in zip(rows.ratio, rows.direction, strict=True)
        ],
        note_x=[
            max(a, b) * 1.15 for a, b in zip(rows.bytes_model, rows.bytes_counted, strict=True)
        ],
    )
    tooltip = [
        alt.Tooltip("config_id:N", title="config"),
        alt.Tooltip("bytes_model:Q", title="model bytes (B)", format=".4~s"),
        alt.Tooltip("bytes_counted:Q", title="counted HBM bytes (B)", format=".4~s"),
        alt.Tooltip("ratio:Q", title="counted / model", format=".3~g"),
        alt.Tooltip("direction:N", title="direction"),
    ]
    y = alt.Y("label:N", title="Configuration", sort=None, axis=alt.Axis(labelLimit=400))
    rule = (
        alt.Chart(rows[(rows.bytes_model > 0) & (rows.bytes_counted > 0)])
        .mark_rule(color="#999")
        .encode(
            x=alt.X("bytes_model:Q", scale=x_scale, title="Bytes (B)", axis=alt.Axis(format="~s")),
            x2=alt.X2("bytes_counted:Q"),
            y=y,
            tooltip=tooltip,
        )
    )
    dots = (
        alt.Chart(long)
        .mark_point(size=80)
        .encode(
            x=alt.X("bytes:Q", scale=x_scale, title="Bytes (B)", axis=alt.Axis(format="~s")),
            y=y,
            color=alt.Color("source:N", title="bytes"),
            fill=alt.condition(
                "datum.source == 'counted HBM (ncu)'", alt.Color("source:N"), alt.value("white")
            ),
            tooltip=[alt.Tooltip("source:N", title="bytes"), *tooltip],
        )
    )
    notes = (
        alt.Chart(rows[rows.note_x > 0])
        .mark_text(align="left", fontSize=11, color="#333")
        .encode(x=alt.X("note_x:Q", scale=x_scale), y=y, text=alt.Text("note:N"), tooltip=tooltip)
    )
    return alt.layer(rule, dots, notes).properties(width=WIDTH)
