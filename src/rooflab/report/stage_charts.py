"""The stage-bounds chart of a config's `stages` scenario: each stage at its own bound on the
machine's measured ceilings, on the critical-path schedule."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rooflab.report.axes import WIDTH
from rooflab.units import format_quantity

if TYPE_CHECKING:
    import pandas as pd


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
