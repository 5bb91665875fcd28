"""The charts of the sweeps: bandwidth against the working set (the newest ceilings run), and the
weight-reuse charts of a GEMM sweep (time and efficiency against M)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rooflab.report.axes import SECONDS_AXIS, WIDTH, bytes_label, with_time_text
from rooflab.report.labels import LABEL_CHAR_PX
from rooflab.report.names import name_part
from rooflab.units import format_quantity

if TYPE_CHECKING:
    import pandas as pd

REUSE_PANEL_SIZE = (280, 220)  # one panel of the per-sweep time and efficiency charts


def cache_marks(capacities: pd.DataFrame) -> list[dict]:
    """The dashed cache rules of the ceiling sweep: per level of latest_cache_capacities, one at
    its reported capacity and, where its sweeps measured an edge, one there."""
    import pandas as pd

    marks = []
    for r in capacities.itertuples():
        measured = getattr(r, "measured_bytes", None)
        # null as None, NaN (a float column) or pd.NA (a nullable integer one)
        seen = measured is not None and not pd.isna(measured)
        marks.append(
            {"x": r.bytes, "label": f"{r.level} {bytes_label(r.bytes)}{' reported' * seen}"}
        )
        if seen:
            marks.append(
                {"x": int(measured), "label": f"{r.level} {bytes_label(int(measured))} measured"}
            )
    return marks


# A size in binary units, as bytes_label writes it: "256 KiB", "2 MiB"
BINARY_LABEL_EXPR = (
    "datum.value >= 1073741824 ? format(datum.value / 1073741824, '~g') + ' GiB' : "
    "datum.value >= 1048576 ? format(datum.value / 1048576, '~g') + ' MiB' : "
    "datum.value >= 1024 ? format(datum.value / 1024, '~g') + ' KiB' : "
    "format(datum.value, '~g') + ' B'"
)


def binary_ticks(lo: float, hi: float, most: int = 9) -> list[int]:
    """Powers of two from `lo` to `hi` (bytes), every 2**step-th where step is the smallest that
    keeps `most` ticks or fewer, the exponents multiples of the step (1 KiB, 8 KiB, 64 KiB, ...)."""
    first, last = math.ceil(math.log2(max(lo, 1))), math.floor(math.log2(max(hi, 1)))
    for step in range(1, 11):
        exponents = [e for e in range(first, last + 1) if e % step == 0]
        if len(exponents) <= most:
            return [2**e for e in exponents]
    return [2**e for e in range(first, last + 1, 10)]


def best_kernel_note(ceilings: pd.DataFrame) -> str:
    """One sentence where a level's `read` ceiling sits below another kernel's (rows of view
    ceiling_summary: the best kernel per level, with the read kernel's value beside it): which
    kernel is best on which level, and that the level's ceiling is that kernel's."""
    if "read_value" not in ceilings:
        return ""
    below = ceilings[
        (ceilings.kind == "bandwidth")
        & ceilings.read_value.notna()
        & (ceilings.kernel != "read")
        & (ceilings.read_value < ceilings.value)
    ]
    if below.empty:
        return ""
    levels = "; ".join(
        f"on {r.name}, {r.kernel} ({format_quantity(r.value, 'byte_rate', 3)}) beats read "
        f"({format_quantity(r.read_value, 'byte_rate', 3)})"
        for r in below.itertuples()
    )
    return (
        f" The read kernel is not the fastest everywhere: {levels}; each level's ceiling, and "
        "its roof on the Roofline, is its best kernel's."
    )


def sweep_chart(sweep: pd.DataFrame, plateaus: pd.DataFrame, capacities: list[dict]):
    import altair as alt
    import pandas as pd

    x_scale = alt.Scale(type="log", nice=False)
    sizes = list(sweep.working_set_bytes) + [c["x"] for c in capacities]
    ticks = binary_ticks(min(sizes), max(sizes)) if sizes else []
    layers = []
    if not plateaus.empty:
        layers.append(
            alt.Chart(plateaus)
            .mark_rect(opacity=0.12, color="#4c78a8")
            .encode(
                x=alt.X("lo:Q", scale=x_scale),
                x2=alt.X2("hi:Q"),
                tooltip=[alt.Tooltip("level:N", title="plateau")],
            )
        )
        layers.append(
            alt.Chart(plateaus)
            .mark_text(baseline="top", dy=4, fontSize=11, color="#4c78a8")
            .encode(x=alt.X("mid:Q", scale=x_scale), y=alt.YValue(0), text=alt.Text("level:N"))
        )
    sweep = sweep.assign(working_set_binary=[bytes_label(b) for b in sweep.working_set_bytes])
    layers.append(
        alt.Chart(sweep)
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "working_set_bytes:Q",
                scale=x_scale,
                title="Working set (bytes, binary units)",
                axis=alt.Axis(values=ticks, labelExpr=BINARY_LABEL_EXPR, labelOverlap=True),
            ),
            y=alt.Y("gb_per_s:Q", title="Bandwidth (GB/s)"),
            color=alt.Color("kernel:N", title="kernel"),
            tooltip=[
                alt.Tooltip("kernel:N"),
                alt.Tooltip("working_set_binary:N", title="working set"),
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
            .encode(x=alt.X("x:Q", scale=x_scale), y=alt.YValue(0), text=alt.Text("label:N"))
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
        detail=alt.Detail("source:N"),
    )
    return (
        alt.layer(lines, base.mark_point(filled=True, size=30))
        .properties(width=REUSE_PANEL_SIZE[0], height=REUSE_PANEL_SIZE[1])
        .facet(
            row=alt.Row("quantity:N", title=None, sort=["whole GEMM", "per row (time / M)"]),
            column=alt.Column("cache_state:N", title="cache state"),
        )
        .resolve_scale(y="independent")
        .properties(title=f"Sweep {sweep}: median time and time per row vs M")
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
        .properties(title=f"Sweep {sweep}: efficiency vs M")
    )


# Sweeps drawn one by one (a time and an efficiency chart each): the newest this many; the rest
# are a row each of a table under the last one (a report of 100 sweeps stays a few charts).
SWEEPS_DRAWN = 6
ROWS_LISTED = 50  # rows of a table of what is not drawn; the query gives them all

REUSE_TIME_HOW = (
    "Solid: the measured median; dashed: the Roofline lower bound of the same configuration. The "
    "whole GEMM gets longer with M while the time per row falls as the weights are reused; the "
    "gap between the lines is the time lost to the roof."
)


def newest_first(frame: pd.DataFrame, by: str, limit: int) -> tuple[list, list]:
    """The values of column `by`, those of the newest runs first (`started_at`, then name):
    the first `limit` (drawn, in name order) and the rest (newest first)."""
    newest = frame.groupby(by, sort=True).started_at.max()
    ordered = sorted(newest.index, key=lambda name: (-newest[name].value, str(name)))
    return sorted(ordered[:limit], key=str), ordered[limit:]


def reuse_charts(points: pd.DataFrame, scope: dict) -> list:
    """Time and efficiency vs M of each GEMM sweep of the newest SWEEPS_DRAWN (latest_model_points
    rows with a shape); a table of the other sweeps under the last chart, with the query for
    their rows."""
    import pandas as pd

    from rooflab.report.page import Chart

    if points.empty:
        return []
    pts = points.assign(
        series=points.dtype
        + " "
        + points.layout
        + " N="
        + points.n.astype(str)
        + " K="
        + points.k.astype(str)
    )
    drawn, left_out = newest_first(pts, "sweep", SWEEPS_DRAWN)
    charts = []
    for sweep_name in drawn:
        group = pts[pts.sweep == sweep_name]
        per_row = group.assign(median_s=group.median_s / group.m, bound_s=group.bound_s / group.m)
        long = pd.concat(
            [
                frame.assign(quantity=quantity, source=source, seconds=frame[column])
                for quantity, frame in (("whole GEMM", group), ("per row (time / M)", per_row))
                for source, column in (
                    ("measured median", "median_s"),
                    ("model lower bound", "bound_s"),
                )
            ]
        )[["series", "cache_state", "m", "quantity", "source", "seconds"]]
        part = name_part(sweep_name)
        charts.append(
            Chart(
                f"reuse_time_{part}",
                f"Sweep {sweep_name}: time vs M",
                REUSE_TIME_HOW,
                reuse_time_chart(long, str(sweep_name)),
            )
        )
        rate = _rate(group)
        charts.append(
            Chart(
                f"reuse_efficiency_{part}",
                f"Sweep {sweep_name}: efficiency vs M",
                f"Achieved {rate} over the attainable {rate} of the roof each point sits under "
                "(100 % is on the roof).",
                reuse_efficiency_chart(
                    group[["series", "cache_state", "m", "efficiency", "limiter", "level"]],
                    str(sweep_name),
                ),
            )
        )
    if left_out:
        charts[-1].notes_html = sweeps_left_out_html(pts, left_out, scope)
    return charts


def sweeps_left_out_html(points: pd.DataFrame, left_out: list, scope: dict) -> str:
    """The sweeps not drawn one by one: a row each (the newest ROWS_LISTED), with their points'
    efficiency, and the query for any one's rows."""
    import html

    import pandas as pd

    from rooflab.report.page import table_html
    from rooflab.report.queries import view_sql

    listed = left_out[:ROWS_LISTED]
    rows = (
        points[points.sweep.isin(listed)]
        .groupby("sweep")
        .agg(
            points=("config_id", "size"),
            newest=("started_at", "max"),
            lowest=("efficiency", "min"),
            median=("efficiency", "median"),
            highest=("efficiency", "max"),
        )
    )
    rows = rows.loc[listed]
    table = pd.DataFrame(
        {
            "sweep": rows.index.astype(str),
            "points": rows.points.to_numpy(),
            "newest run (UTC)": [f"{t:%Y-%m-%d %H:%M}" for t in rows.newest],
            "efficiency: lowest": [f"{e:.1%}" for e in rows.lowest],
            "median": [f"{e:.1%}" for e in rows["median"]],
            "highest": [f"{e:.1%}" for e in rows.highest],
        }
    )
    more = len(left_out) - len(listed)
    sql = view_sql("latest_model_points", scope, sweep="<sweep>")
    return (
        f"<p class='left-out'>{len(left_out)} more sweep(s) are not drawn one by one (the "
        f"{SWEEPS_DRAWN} with the newest runs are, above)"
        + (f"; the {len(listed)} newest are listed, {more} older ones not" if more else "")
        + f". A sweep's points: <code>{html.escape(sql)}</code></p>"
        + table_html(table, "sweeps-left-out")
    )


def _rate(points: pd.DataFrame) -> str:
    """The unit of a sweep's rates: OP/s where every point is an integer GEMM's, FLOP/s where
    none is (a sweep of both: each point against its own roof, in its own unit)."""
    units = set(points.work_unit.fillna("FLOP")) if "work_unit" in points else {"FLOP"}
    return f"{units.pop()}/s" if len(units) == 1 else "FLOP/s (OP/s for integer GEMMs)"
