"""The stage-bounds chart of a config's `stages` scenario: each stage at its own bound on the
machine's measured ceilings, on the critical-path schedule (rows of view latest_stage_bounds)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rooflab.report.axes import WIDTH
from rooflab.units import format_quantity

if TYPE_CHECKING:
    import pandas as pd


def stage_bounds_chart(stages: pd.DataFrame, name: str):
    """`stages`: one scenario's rows of latest_stage_bounds, in schedule order (seconds, drawn in
    μs)."""
    import altair as alt
    import pandas as pd

    frame = stages.assign(
        start_us=stages.start_s * 1e6,
        finish_us=stages.finish_s * 1e6,
        bound_us=stages.bound_s * 1e6,
        critical_path_us=stages.critical_path_s * 1e6,
        aggregate_us=stages.aggregate_s * 1e6,
        ceilings=[
            f"{r.compute_path} {format_quantity(r.peak_flops_per_s, 'flop_rate', 4)}, "
            f"{r.memory_level} {format_quantity(r.bandwidth_b_per_s, 'byte_rate', 4)}"
            for r in stages.itertuples()
        ],
    )[
        [
            "stage",
            "start_us",
            "finish_us",
            "bound_us",
            "limiter",
            "on_critical_path",
            "critical_path_us",
            "aggregate_us",
            "ceilings",
        ]
    ]

    order = list(frame.stage)
    bars = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X(
                "start_us:Q",
                title="Time (μs)",
                # few ticks, printed short: "57,766.2" labels no longer run into each other
                axis=alt.Axis(tickCount=6, format=",.4~r", labelOverlap="greedy"),
            ),
            x2=alt.X2("finish_us:Q"),
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
    critical, aggregate = first.critical_path_us, first.aggregate_us
    if _coincide(critical, aggregate):
        bounds = [{"bound": "critical path = aggregate", "us": critical}]
        subtitle = (
            f"critical path and aggregate bounds coincide at {critical:,.1f} μs (the dashed "
            "line): the stages' dependencies cost nothing over the aggregate bound"
        )
    else:
        bounds = [
            {"bound": "critical path", "us": critical},
            {"bound": "aggregate", "us": aggregate},
        ]
        subtitle = (
            f"critical path {critical:,.1f} μs, aggregate {aggregate:,.1f} μs (dashed lines); "
            "the lower bound is the larger of the two"
        )
    rules = (
        alt.Chart(pd.DataFrame(bounds))
        .mark_rule(strokeDash=[6, 3], color="black")
        .encode(
            x=alt.X("us:Q"), tooltip=[alt.Tooltip("bound:N"), alt.Tooltip("us:Q", format=",.1f")]
        )
    )
    return alt.layer(bars, rules).properties(
        width=WIDTH,
        height=40 + 28 * len(frame),
        title=alt.Title(f"{name} (measured ceilings: {first.ceilings})", subtitle=subtitle),
    )


def _coincide(a: float, b: float) -> bool:
    """Two bounds the chart cannot tell apart: equal to the 0.1 μs it prints, or to 1e-9."""
    return f"{a:,.1f}" == f"{b:,.1f}" or abs(a - b) <= 1e-9 * max(abs(a), abs(b))
