"""The timeline chart of a decode-like step (experiments.timeline): one instrumented step per mode
as a Gantt chart, each kernel a bar from its start to its end, the launch gaps the empty space
between them, and each mode's measured step time (the median, launch to synchronise) as a tick
at the end of its row. Frames shaped like the `timeline_kernels` and `timeline_steps` rows.
`gantt_chart` draws it, and an imported trace's timeline alike (report.import_charts)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rooflab.report.axes import WIDTH, chart_title

if TYPE_CHECKING:
    import altair as alt
    import pandas as pd

MODE_ORDER = ("eager", "graph", "fused")
# the kernels in the order they run in a layer, then the fused ones
KERNEL_ORDER = ("gemv", "bias_add", "relu", "residual_add", "bias_relu_residual", "step")
KERNEL_COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2", "#72b7b2")
ROW_PX = 44
STEP_TICK = "#222"

HOW = (
    "One instrumented step per mode: each bar a kernel (on a CPU a call) from its start to its "
    "end, coloured by kernel; the empty space between bars is time the device (CPU: the work) "
    "waited for the next launch. The black tick is the mode's measured step time (median of "
    "the samples, launch to synchronise), so the space left of it that no bar covers is the gap. "
    "How each mode's busy time was measured is in its tooltip."
)


def _ordered(values, known: tuple[str, ...]) -> list[str]:
    present = list(dict.fromkeys(str(v) for v in values))
    return [v for v in known if v in present] + sorted(v for v in present if v not in known)


def gantt_frames(kernels: pd.DataFrame, steps: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The bars (one per kernel, times in μs) and the step ticks (one per mode, with the text
    beside each), both with the modes in MODE_ORDER."""
    bars = kernels.assign(
        start_us=kernels.start_s * 1e6,
        end_us=kernels.end_s * 1e6,
        duration_us=kernels.duration_s * 1e6,
    )[["mode", "position", "layer", "kernel", "start_us", "end_us", "duration_us"]]
    bars = bars.sort_values(["mode", "position"], kind="stable").reset_index(drop=True)
    ticks = steps.assign(
        step_us=steps.step_s * 1e6,
        busy_us=steps.busy_s * 1e6,
        gap_us=steps.gap_s * 1e6,
    )
    ticks = ticks.assign(says=[_says(r) for r in ticks.itertuples()])[
        ["mode", "kernels", "step_us", "busy_us", "gap_us", "busy_method", "says"]
    ]
    return bars, ticks.reset_index(drop=True)


def _says(step) -> str:
    """`step 33.9 μs: 64 kernels, busy 2.1, gap 31.8` (no busy where none was measured)."""
    kernels = f"{step.kernels} kernel{'' if step.kernels == 1 else 's'}"
    said = f"step {step.step_us:,.1f} μs: {kernels}"
    if step.busy_us is None or math.isnan(step.busy_us):
        return said
    return f"{said}, busy {step.busy_us:,.1f}, gap {step.gap_us:,.1f}"


def timeline_chart(kernels: pd.DataFrame, steps: pd.DataFrame, scenario: str) -> alt.LayerChart:
    """A Gantt chart of one step per mode of timeline scenario `scenario` (its rows of
    timeline_kernels and timeline_steps): a row per mode, bars from start to end coloured by
    kernel, a tick at each mode's measured step time with the step, busy and gap times beside."""
    import altair as alt

    bars, ticks = gantt_frames(kernels, steps)
    modes = _ordered([*ticks["mode"], *bars["mode"]], MODE_ORDER)
    kernel_names = _ordered(bars["kernel"], KERNEL_ORDER)
    colours = [
        KERNEL_COLOURS[KERNEL_ORDER.index(k)] if k in KERNEL_ORDER else "#999" for k in kernel_names
    ]
    return gantt_chart(
        bars,
        ticks,
        row="mode",
        rows=modes,
        row_title="Mode",
        colour=alt.Color(
            "kernel:N",
            title="kernel",
            scale=alt.Scale(domain=kernel_names, range=colours),
            legend=alt.Legend(orient="bottom"),
        ),
        tick="step_us",
        x_title="Time in the step (μs)",
        bar_tooltip=[
            alt.Tooltip("mode:N"),
            alt.Tooltip("layer:Q"),
            alt.Tooltip("kernel:N"),
            alt.Tooltip("start_us:Q", title="start (μs)", format=",.3~f"),
            alt.Tooltip("end_us:Q", title="end (μs)", format=",.3~f"),
            alt.Tooltip("duration_us:Q", title="duration (μs)", format=",.3~f"),
        ],
        tick_tooltip=[
            alt.Tooltip("mode:N"),
            alt.Tooltip("step_us:Q", title="step, median (μs)", format=",.3~f"),
            alt.Tooltip("busy_us:Q", title="busy (μs)", format=",.3~f"),
            alt.Tooltip("gap_us:Q", title="gap (μs)", format=",.3~f"),
            alt.Tooltip("kernels:Q", title="kernels per step"),
            alt.Tooltip("busy_method:N", title="busy measured by"),
        ],
        title=chart_title(
            f"Timeline of one step: {scenario}",
            "bars: each kernel's own time; empty space: launch gaps; black tick: the "
            "measured step time",
        ),
    )


def gantt_chart(
    bars: pd.DataFrame,
    ticks: pd.DataFrame,
    *,
    row: str,
    rows: list[str],
    row_title: str,
    colour: alt.Color,
    tick: str,
    x_title: str,
    bar_tooltip: list,
    tick_tooltip: list,
    title: alt.Title,
) -> alt.LayerChart:
    """The Gantt chart of a measured step and of an imported trace alike: a row per lane (field
    `row`, its values `rows` in order), a bar per event from `start_us` to `end_us` coloured by
    `colour`; a black tick per row at its `tick` field (μs: a measured step's time, a trace's
    end) with its `says` written left of it, above the row."""
    import altair as alt

    y = alt.Y(f"{row}:N", sort=rows, scale=alt.Scale(domain=rows), title=row_title)
    span = max([*ticks[tick], *bars.end_us, 1e-3])
    x_scale = alt.Scale(domain=[0, span * 1.05], nice=False)
    x_axis = alt.Axis(tickCount=8, format=",.4~r", labelOverlap="greedy")

    event_bars = (
        alt.Chart(bars)
        .mark_bar(height={"band": 0.6})
        .encode(
            x=alt.X("start_us:Q", scale=x_scale, axis=x_axis, title=x_title),
            x2=alt.X2("end_us:Q"),
            y=y,
            color=colour,
            tooltip=bar_tooltip,
        )
    )
    row_ticks = (
        alt.Chart(ticks)
        .mark_tick(color=STEP_TICK, thickness=2, size=ROW_PX * 0.8)
        .encode(x=alt.X(f"{tick}:Q", scale=x_scale), y=y, tooltip=tick_tooltip)
    )
    row_text = (
        alt.Chart(ticks)
        .mark_text(
            align="right", baseline="bottom", dx=-4, dy=-ROW_PX * 0.3, fontSize=11, color="#222"
        )
        .encode(x=alt.X(f"{tick}:Q", scale=x_scale), y=y, text=alt.Text("says:N"))
    )
    return alt.layer(event_bars, row_ticks, row_text).properties(
        width=WIDTH, height=ROW_PX * len(rows), title=title
    )
