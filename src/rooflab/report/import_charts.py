"""Imported profiles in the report (docs/imports.md), each import's newest run: the trace's own
timeline as the Gantt chart of a measured step (report.timeline_charts.gantt_chart: a row per
lane, a bar per top-level operator or GPU event, the trace's end as the black tick), with each
lane's busy time and gaps, its critical path and its top operators by share of the end-to-end
time under it (views imported_timeline, latest_imported_operators, imported_top_operators); and
its operators on this machine's Roofline (latest_imported_points, drawn by
report.roofline_chart), with the table of the placed ones and why the others have no point."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import rooflab.report.queries as queries
from rooflab.report.axes import chart_title
from rooflab.report.names import name_part
from rooflab.report.page import Chart, table_html
from rooflab.report.roofline_chart import roofline_chart
from rooflab.report.run_charts import left_out_note
from rooflab.report.sweep_charts import SWEEPS_DRAWN
from rooflab.report.timeline_charts import gantt_chart
from rooflab.units import format_quantity
from rooflab.vocabulary import CacheState

if TYPE_CHECKING:
    import altair as alt
    import pandas as pd

TOP_LISTED = 10  # operators in the top-operators table
OPERATORS_COLOURED = 9  # names with a colour of their own in the Gantt chart; the rest "other"
OTHER = "other"
OP_COLOURS = (
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2",
    "#72b7b2", "#eeca3b", "#ff9da6", "#9d755d",
)  # fmt: skip
OTHER_COLOUR = "#bab0ac"
BARS_DRAWN = 3000  # a long trace's first events; the view has them all
PLACED_LISTED = 15  # placed operators in the table under the Roofline, the longest first
# what a bar carries: where it is, and what its tooltip says
BAR_COLUMNS = ("lane", "index", "op", "kind", "colour", "start_us", "end_us", "duration_us")
BAR_COLUMNS += ("on_critical_path", "level", "efficiency", "cause")
SHAPE_KEY = "operator (its own time in the trace; filled: bytes judged warm)"

TIMELINE_HOW = (
    "The trace's own timeline, as the profiler recorded it: a row per lane (a CPU thread, a GPU "
    "stream), each bar a top-level operator (one inside no other: its time includes what runs "
    "inside it) or a GPU event, from its start to its end, coloured by name (the longest names "
    "in total; the rest grey). The empty space between bars is time the lane waited; the black "
    "tick is the end of the trace's end-to-end time (its profiler steps, where it marks them). "
    "Under the chart: each lane's busy time and gaps, the critical path of the trace's own "
    "dependencies (each event after the one before it on its lane, a GPU event after the CPU "
    "operator that launched it where the GPU waited for the launch), and the top operators by "
    "their share of the end-to-end time."
)

ROOFLINE_HOW = (
    "The imported trace's operators on this machine's measured roofs, each at its own time in "
    "the trace: F from the profiler's count or rooflab's ledger of its shapes, Q the cold-cache "
    "model of its inputs and outputs (a model, not measured traffic), its bytes judged against "
    "the smallest cache level that holds them (an application's operands were mostly just "
    "written by the operator before). A nested operator holds the work where it is the "
    "innermost with a ledger; the operators around it are not drawn. Colour: the roof a point "
    "is judged against, with a dotted line up to it; shape: the operator's name. The table "
    "lists the longest operators placed, with their diagnosis; operators with no ledger (or F "
    "= 0) keep their time on the timeline and are counted below the table."
)


def import_charts(connection, scope, ceilings: pd.DataFrame) -> list[Chart]:
    """The charts of the machine's imports (none where it has none): a timeline per import whose
    trace has one (an Nsight Compute export has none) and a Roofline per import with a point."""
    lanes = queries.imported_timeline(connection, scope)
    events = queries.imported_operators(connection, scope)
    top = queries.imported_top_operators(connection, scope)
    points = queries.imported_points(connection, scope)
    names = sorted({*lanes.get("name", []), *points.get("name", [])})
    datasheet = queries.datasheet_roofs(connection, scope) if names else None
    charts = []
    for name in names[:SWEEPS_DRAWN]:  # a bounded page: the first by name
        mine = lanes[lanes.name == name].reset_index(drop=True)
        if not mine.empty:
            bars = events[events.name == name].reset_index(drop=True)
            charts.append(
                Chart(
                    f"import_timeline_{name_part(name)}",
                    f"Imported trace timeline: {name}",
                    TIMELINE_HOW,
                    import_gantt_chart(bars.head(BARS_DRAWN), mine, str(name)),
                    left_out_note(
                        len(bars),
                        min(len(bars), BARS_DRAWN),
                        "events",
                        queries.view_sql("latest_imported_operators", scope, name=name),
                    )
                    + lanes_html(mine)
                    + top_operators_html(top[top.name == name], scope, str(name)),
                )
            )
        placed = points[(points.name == name) & points.intensity.notna()]
        if not placed.empty and not ceilings.empty:
            charts.append(
                Chart(
                    f"import_roofline_{name_part(name)}",
                    f"Imported operators on the Roofline: {name}",
                    ROOFLINE_HOW,
                    roofline_chart(
                        ceilings,
                        roofline_frame(placed),
                        datasheet,
                        _roofline_title(scope, placed, str(name)),
                        shape_title=SHAPE_KEY,
                    ),
                    placed_html(points[points.name == name], scope, str(name)),
                )
            )
    if len(names) > SWEEPS_DRAWN and charts:
        sql = queries.view_sql("imported_timeline", scope, name="<import>")
        charts[-1].notes_html += left_out_note(len(names), SWEEPS_DRAWN, "imports", sql)
    return charts


def gantt_frames(events: pd.DataFrame, lanes: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The bars (one per event on a lane, times in μs from the trace's first event, `colour`
    its name or OTHER) and the ticks (one per lane at the trace's end, `says` its busy time and
    gaps)."""
    totals = events.groupby("op")["time_s"].sum().sort_values(ascending=False, kind="stable")
    coloured = set(totals.index[:OPERATORS_COLOURED])
    bars = events.assign(
        start_us=events.start_s * 1e6,
        end_us=events.end_s * 1e6,
        duration_us=events.time_s * 1e6,
        colour=[op if op in coloured else OTHER for op in events.op],
    )[[*BAR_COLUMNS]]
    ticks = lanes.assign(
        end_us=lanes.trace_end_s * 1e6,
        busy_us=lanes.busy_s * 1e6,
        gap_us=lanes.gap_s * 1e6,
    )
    # short, as a measured step's: the whole sentence (the view's `says`) is under the chart
    ticks = ticks.assign(
        says=[
            f"{r.events} event{'s' * (r.events != 1)}: busy {r.busy_us:,.1f} μs, "
            f"gaps {r.gap_us:,.1f} μs"
            for r in ticks.itertuples()
        ]
    )[["lane", "events", "end_us", "busy_us", "gap_us", "says"]]
    return bars.reset_index(drop=True), ticks.reset_index(drop=True)


def import_gantt_chart(events: pd.DataFrame, lanes: pd.DataFrame, name: str) -> alt.LayerChart:
    """The Gantt chart of an import's trace (its rows of latest_imported_operators and
    imported_timeline): a row per lane, CPU threads first, a bar per event coloured by name."""
    import altair as alt

    bars, ticks = gantt_frames(events, lanes)
    rows = sorted(ticks.lane, key=lambda lane: (not lane.startswith("cpu"), lane))
    by_time = bars.groupby("colour")["duration_us"].sum().sort_values(ascending=False)
    names = [n for n in by_time.index if n != OTHER] + [OTHER] * (OTHER in by_time.index)
    colours = [OP_COLOURS[i] for i in range(len(names) - (OTHER in names))]
    colours += [OTHER_COLOUR] * (OTHER in names)
    return gantt_chart(
        bars,
        ticks,
        row="lane",
        rows=rows,
        row_title="Lane",
        colour=alt.Color(
            "colour:N",
            title="operator",
            scale=alt.Scale(domain=names, range=colours),
            legend=alt.Legend(orient="bottom", columns=2, labelLimit=400),
        ),
        tick="end_us",
        x_title="Time from the trace's first event (μs)",
        bar_tooltip=[
            alt.Tooltip("lane:N"),
            alt.Tooltip("op:N", title="operator"),
            alt.Tooltip("kind:N"),
            alt.Tooltip("index:Q", title="index in the trace"),
            alt.Tooltip("start_us:Q", title="start (μs)", format=",.3~f"),
            alt.Tooltip("end_us:Q", title="end (μs)", format=",.3~f"),
            alt.Tooltip("duration_us:Q", title="duration (μs)", format=",.3~f"),
            alt.Tooltip("on_critical_path:N", title="on the critical path"),
            alt.Tooltip("level:N", title="level (placed)"),
            alt.Tooltip("efficiency:Q", format=".1%"),
            alt.Tooltip("cause:N", title="why it sits there"),
        ],
        tick_tooltip=[
            alt.Tooltip("lane:N"),
            alt.Tooltip("end_us:Q", title="trace end (μs)", format=",.3~f"),
            alt.Tooltip("busy_us:Q", title="busy (μs)", format=",.3~f"),
            alt.Tooltip("gap_us:Q", title="gaps (μs)", format=",.3~f"),
            alt.Tooltip("events:Q"),
        ],
        title=chart_title(
            f"Imported trace timeline: {name}",
            "bars: each top-level operator's (a GPU stream: each event's) time; empty "
            "space: the lane waited; black tick: the end of the trace's end-to-end time",
        ),
    )


def lanes_html(lanes: pd.DataFrame) -> str:
    """Each lane in a sentence (imported_timeline's `says`), and the critical path's."""
    items = "".join(f"<li>{html.escape(says)}</li>" for says in lanes.says)
    first = lanes.iloc[0]
    if first.path_s == first.path_s:  # not NaN: the roofline step walked it
        path = (
            f"<p>Critical path of the trace's dependencies: {_time(first.path_s)}, "
            f"{_time(first.path_busy_s)} of it in events, {_time(first.path_waiting_s)} "
            "waiting between them.</p>"
        )
    else:
        path = (
            "<p>No critical path stored for this trace (a GPU trace's launch times are needed "
            "for it; <code>rooflab import torch FILE</code> prints the timeline).</p>"
        )
    return f"<ul class='import-lanes'>{items}</ul>{path}"


def top_operators_html(top: pd.DataFrame, scope, name: str) -> str:
    """The top operators by share of the end-to-end time, as a table."""
    import pandas as pd

    if top.empty:
        return ""
    shown = top.head(TOP_LISTED)
    device = shown.device_time_s.notna().any()
    table = pd.DataFrame(
        {
            "rank": shown["rank"],
            "operator": shown.op,
            "calls": shown.calls,
            "time": [_time(t) for t in shown.time_s],
            **({"GPU time": [_time(t) for t in shown.device_time_s]} if device else {}),
            "share of end to end": [f"{100 * s:.1f} %" for s in shown.share],
        }
    )
    sql = queries.view_sql("imported_top_operators", scope, name=name)
    return (
        "<p>Top operators by share of the end-to-end time"
        + (" (of the GPU time their spans launched)" if device else "")
        + ":</p>"
        + table_html(table, "import-top-operators")
        + left_out_note(len(top), len(shown), "operators", sql)
    )


def roofline_frame(placed: pd.DataFrame) -> pd.DataFrame:
    """Placed operators in the shape of the Roofline's points: shape by operator (`sweep`),
    judged warm (their bytes in the level that holds them), their own time as the median."""
    return placed.assign(
        sweep=placed.op,
        config_id=[f"#{i} {op}" for i, op in zip(placed["index"], placed.op, strict=True)],
        cache_state=CacheState.WARM.value,
        median_s=placed.time_s,
        work_unit="FLOP",
    ).reset_index(drop=True)


def _roofline_title(scope, placed: pd.DataFrame, name: str) -> dict:
    run = placed.iloc[0]
    return {
        "text": f"Imported operators on the Roofline: {name} · {scope['host']} · "
        f"{scope['device_name']} ({scope['backend']})",
        "subtitle": [
            f"import run {run.run_id}, placed on ceilings run {run.ceilings_run_id}",
            "colour: the roof an operator is judged against (dotted up to it); shape: its name; "
            "Q: the cold-cache model of its shapes",
        ],
    }


def placed_html(points: pd.DataFrame, scope, name: str) -> str:
    """The longest placed operators with their diagnosis, and how many have no point, and why."""
    import pandas as pd

    placed = points[points.intensity.notna()].sort_values("time_s", ascending=False)
    shown = placed.head(PLACED_LISTED)
    table = pd.DataFrame(
        {
            "operator": [f"#{i} {op}" for i, op in zip(shown["index"], shown.op, strict=True)],
            "input dims": shown.input_dims,
            "dtype": shown.dtype,
            "time": [_time(t) for t in shown.time_s],
            "FLOP/byte": [f"{x:.3g}" for x in shown.intensity],
            "achieved": [format_quantity(r, "flop_rate", 3) for r in shown.achieved_flops_per_s],
            "level": shown.level,
            "limiter": shown.limiter,
            "efficiency": [f"{100 * e:.1f} %" for e in shown.efficiency],
            "cause": shown.cause,
        }
    )
    sql = queries.view_sql("latest_imported_points", scope, name=name)
    unplaced = points[points.intensity.isna()].unplaced.fillna("no point").value_counts()
    why = "; ".join(f"{html.escape(str(reason))}: {count}" for reason, count in unplaced.items())
    return (
        table_html(table, "import-placed")
        + left_out_note(len(placed), len(shown), "placed operators", sql)
        + (f"<p>Operators without a point ({int(unplaced.sum())}): {why}.</p>" if why else "")
    )


def _time(seconds: float) -> str:
    return format_quantity(seconds, "time", 3)
