"""Your workloads (rooflab.Workload) in the report: two implementations of the same work side by
side (view implementation_comparisons), each workload's time against the param its cases vary in
(workload_param_points), and the sentence the Roofline's notes give a point far below its roof
(latest_model_points.far_below_roof)."""

from __future__ import annotations

import html
import json
import re
from typing import TYPE_CHECKING

from rooflab.report.axes import SECONDS_AXIS, chart_title, with_time_text
from rooflab.units import format_quantity
from rooflab.vocabulary import CACHE_STATES

if TYPE_CHECKING:
    import altair as alt
    import pandas as pd

BASELINE = "baseline (same_work_as): hollow"
WORKLOAD = "workload: filled"
ROLE_COLOURS = ("#555", "#1f77b4")  # baseline, workload
COMPARISON_WIDTH = 420  # the time axis; what each pair says is written right of it
COMPARISON_ROW_PX = 26
CASE_LABELS_PX = 220
PARAM_PANEL_SIZE = (280, 220)
SOURCES = ("measured median", "Roofline lower bound")

IMPLEMENTATIONS_HOW = (
    "Two implementations of the same work (a workload and the one its same_work_as names), per "
    "case and cache state (newest run of each): the median time of the baseline (hollow) and of "
    "the workload (filled) on one log time axis, a grey bar between them, and what the pair "
    "says as the article puts it: fewer or more executed FLOP/s, and how much faster. The "
    "table gives each figure as workload / baseline: the time, the useful FLOP/s (the work "
    "both do, over the time), the executed FLOP/s (what the implementation really executes: "
    "padding, a dense product over zeros) and the modelled bytes Q."
)

PARAMS_HOW = (
    "Solid: the measured median of each case; dashed: its Roofline lower bound (the time the "
    "roof it is judged against allows), against the param its cases vary in, one row of panels "
    "per such param (a colour per dtype and value of the others). The gap between the lines is "
    "the time lost to the roof."
)

WORKLOADS_HOW = (
    " Stars are your workloads' cases (one size; filled warm, hollow cold), a star of its own "
    "for each workload, named in the legend and beside one of its stars where the name fits; a "
    "grey line joins two implementations of the same work (same_work_as), from the baseline's "
    "point to the other's."
)

FAR_BELOW = (
    "its time is explained by neither roof, bandwidth nor compute: latency, launch overhead or "
    "serialization hold it (as in a pointer chase, where each load waits for the one before)."
)


def params_text(params: object) -> str:
    """A case's params (the JSON text of a workload point) as `n=65536, steps=100000`."""
    try:
        values = json.loads(params) if isinstance(params, str) else None
    except ValueError:
        values = None
    if not isinstance(values, dict):
        return "" if params is None else str(params)
    return ", ".join(f"{key}={value}" for key, value in sorted(values.items()))


def _params_order(params: object) -> tuple:
    """Cases in the order of their params' values, numbers as numbers."""
    try:
        values = json.loads(params) if isinstance(params, str) else {}
    except ValueError:
        values = {}
    if not isinstance(values, dict):
        return ()
    return tuple(
        (key, 0, value, "") if isinstance(value, int | float) else (key, 1, 0, str(value))
        for key, value in sorted(values.items())
    )


def _cases(pairs: pd.DataFrame) -> pd.DataFrame:
    """The pairs in reading order (pair, case, cache state), each with its case's text, its row
    label and its pair's title."""
    rows = pairs.assign(
        case=[f"{params_text(p)} · {d}" for p, d in zip(pairs.params, pairs.dtype, strict=True)],
        pair=pairs.workload + " (filled) vs " + pairs.baseline + " (hollow)",
        _order=[_params_order(p) for p in pairs.params],
        _state=[
            CACHE_STATES.index(s) if s in CACHE_STATES else len(CACHE_STATES)
            for s in pairs.cache_state
        ],
    )
    rows = rows.sort_values(["workload", "baseline", "dtype", "_order", "_state"], kind="stable")
    rows = rows.drop(columns=["_order", "_state"]).reset_index(drop=True)
    return rows.assign(row=rows.case + " · " + rows.cache_state)


def comparison_chart(pairs: pd.DataFrame) -> alt.VConcatChart:
    """A dot plot per pair: one row per case and cache state, the baseline's median time
    hollow, the workload's filled, a bar between them and what the pair says at its right."""
    import altair as alt
    import pandas as pd

    rows = _cases(pairs)
    long = pd.concat(
        [
            rows.assign(role=BASELINE, seconds=rows.baseline_time_s, name=rows.baseline),
            rows.assign(role=WORKLOAD, seconds=rows.time_s, name=rows.workload),
        ]
    )
    long = with_time_text(long, "seconds")
    times = [t for t in long.seconds if t > 0]
    domain = [min(times) / 1.6, max(times) * 1.6] if times else [1e-6, 1.0]
    scale = alt.Scale(type="log", domain=domain, nice=False)
    x = alt.X("seconds:Q", scale=scale, title="Median time (s)", axis=alt.Axis(**SECONDS_AXIS))
    roles = [BASELINE, WORKLOAD]
    colour = alt.Color(
        "role:N",
        title="implementation",
        scale=alt.Scale(domain=roles, range=list(ROLE_COLOURS)),
        legend=alt.Legend(orient="bottom", labelLimit=400),
    )
    fill = alt.Fill(
        "role:N",
        title="implementation",
        scale=alt.Scale(domain=roles, range=["white", ROLE_COLOURS[1]]),
        legend=alt.Legend(orient="bottom", labelLimit=400),
    )
    panels = []
    for pair, group in rows.groupby("pair", sort=False):
        # one width for every panel's case labels: the time axes line up
        axis = alt.Axis(labelLimit=320, minExtent=CASE_LABELS_PX)
        y = alt.Y("row:N", sort=list(group.row), title=None, axis=axis)
        bar = (
            alt.Chart(group)
            .mark_rule(color="#ccc", strokeWidth=3)
            .encode(x=alt.X("time_s:Q", scale=scale), x2=alt.X2("baseline_time_s:Q"), y=y)
        )
        dots = (
            alt.Chart(long[long.pair == pair])
            .mark_point(size=130, strokeWidth=2, opacity=1)
            .encode(
                x=x,
                y=y,
                color=colour,
                fill=fill,
                tooltip=[
                    alt.Tooltip("name:N", title="implementation"),
                    alt.Tooltip("case:N", title="case"),
                    alt.Tooltip("cache_state:N", title="cache state"),
                    alt.Tooltip("seconds_text:N", title="median time"),
                    alt.Tooltip("says:N", title="says"),
                    alt.Tooltip("run_id:N", title="run"),
                ],
            )
        )
        says = (
            alt.Chart(group)
            .mark_text(align="left", baseline="middle", fontSize=11, color="#222")
            .encode(x=alt.XValue(COMPARISON_WIDTH + 12), y=y, text=alt.Text("says:N"))
        )
        panels.append(
            alt.layer(bar, dots, says).properties(
                width=COMPARISON_WIDTH,
                height=COMPARISON_ROW_PX * len(group),
                title=alt.Title(str(pair), anchor="start", fontSize=12),
            )
        )
    return (
        alt.vconcat(*panels, spacing=24)
        .resolve_scale(x="shared")
        .properties(
            title=chart_title(
                "Same work, two implementations: median time per case and cache state",
                "filled: the workload; hollow: its baseline (same_work_as); right: "
                "what the pair says",
            )
        )
    )


def comparison_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """The pairs as the article reads them: each figure as workload / baseline, and what the
    pair says ("lower executed FLOP/s, 6x faster")."""
    import pandas as pd

    rows = _cases(pairs)

    def both(kind: str, mine: str, theirs: str) -> list[str]:
        return [
            f"{format_quantity(a, kind, 3)} / {format_quantity(b, kind, 3)}"
            for a, b in zip(rows[mine], rows[theirs], strict=True)
        ]

    return pd.DataFrame(
        {
            "workload / baseline": rows.workload + " / " + rows.baseline,
            "case": rows.case,
            "cache state": rows.cache_state,
            "time": both("time", "time_s", "baseline_time_s"),
            "useful FLOP/s": both("flop_rate", "useful_flops_per_s", "baseline_useful_flops_per_s"),
            "executed FLOP/s": both(
                "flop_rate", "executed_flops_per_s", "baseline_executed_flops_per_s"
            ),
            "bytes (Q)": both("bytes", "bytes", "baseline_bytes"),
            "says": rows.says,
        }
    )


def param_time_chart(rows: pd.DataFrame, workload: str) -> alt.VConcatChart:
    """A workload's median time and Roofline bound against each param its cases vary in
    (rows of workload_param_points): log axes, a row of panels per param, a column per cache
    state."""
    import altair as alt
    import pandas as pd

    params = sorted(rows.param.unique())
    panels = []
    for param in params:
        group = rows[rows.param == param]
        long = pd.concat(
            [
                group.assign(source=SOURCES[0], seconds=group.median_s),
                group.assign(source=SOURCES[1], seconds=group.bound_s),
            ]
        )
        long = with_time_text(long, "seconds")
        numeric = group.value.notna().all() and (group.value > 0).all()
        if numeric:
            x = alt.X(
                "value:Q",
                title=str(param),
                scale=alt.Scale(type="log", nice=False, padding=12),
                axis=alt.Axis(
                    values=sorted(float(v) for v in group.value.unique()),
                    format="~d",
                    labelOverlap="greedy",
                ),
            )
        else:
            order = list(dict.fromkeys(group.sort_values("value_text").value_text))
            x = alt.X("value_text:N", title=str(param), sort=order)
        base = alt.Chart(long).encode(
            x=x,
            y=alt.Y(
                "seconds:Q",
                scale=alt.Scale(type="log"),
                title="Time (s)",
                axis=alt.Axis(**SECONDS_AXIS),
            ),
            color=alt.Color(
                "series:N",
                title="case (dtype · other params)",
                sort=sorted(group.series.unique(), key=_natural),
                legend=alt.Legend(labelLimit=300),
            ),
            tooltip=[
                alt.Tooltip("config_id:N", title="case"),
                alt.Tooltip("cache_state:N", title="cache state"),
                alt.Tooltip("value_text:N", title=str(param)),
                alt.Tooltip("source:N", title="source"),
                alt.Tooltip("seconds_text:N", title="time"),
                alt.Tooltip("efficiency:Q", title="efficiency", format=".1%"),
            ],
        )
        lines = base.mark_line().encode(
            strokeDash=alt.StrokeDash(
                "source:N",
                title="source",
                sort=list(SOURCES),
                legend=alt.Legend(symbolType="stroke", symbolStrokeColor="#444"),
            ),
            detail=alt.Detail("source:N"),
        )
        panels.append(
            alt.layer(lines, base.mark_point(filled=True, size=30))
            .properties(width=PARAM_PANEL_SIZE[0], height=PARAM_PANEL_SIZE[1])
            .facet(
                column=alt.Column(
                    "cache_state:N",
                    title="cache state",
                    sort=[s for s in CACHE_STATES if s in set(group.cache_state)],
                )
            )
        )
    return (
        alt.vconcat(*panels)
        .resolve_scale(color="independent")  # each param's panels: the others' values
        .properties(
            title=f"Workload {workload}: median time and Roofline bound vs {', '.join(params)}"
        )
    )


def _natural(text: str) -> tuple:
    """`n=4096` before `n=16384`: the numbers in a text compared as numbers."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in re.split(r"(\d+)", str(text))
    )


def far_below_note(points: pd.DataFrame) -> str:
    """One sentence per configuration with a point far below its roof (far_below_roof of
    latest_model_points): its name, its efficiency per cache state, and why."""
    if "far_below_roof" not in points or points.empty:
        return ""
    far = points[points.far_below_roof.fillna(False).astype(bool)]
    sentences = []
    for config_id, group in far.groupby("config_id", sort=True):
        first = group.iloc[0].to_dict()
        case = params_text(first.get("params")) if isinstance(first.get("params"), str) else ""
        name = f"{first['sweep']} ({case}, {first['dtype']})" if case else str(config_id)
        states = sorted(
            group.itertuples(),
            key=lambda r: (
                CACHE_STATES.index(r.cache_state)
                if r.cache_state in CACHE_STATES
                else len(CACHE_STATES)
            ),
        )
        at = " and ".join(f"{_percent(r.efficiency)} ({r.cache_state} cache)" for r in states)
        sentences.append(f"{name} runs at {at} of its roof; {FAR_BELOW}")
    return "".join(f"<p class='far-below'>{html.escape(s)}</p>" for s in sentences)


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.2g} %"
