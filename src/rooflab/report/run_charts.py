"""The charts of the runs' measurements: the distribution of each point's samples, the conditions
the machine ran at over time, and each configuration's change since its previous run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rooflab.report.axes import SECONDS_AXIS, WIDTH, with_time_text
from rooflab.report.disturbed_marks import DISTURBED_COLOR

if TYPE_CHECKING:
    import pandas as pd

# the quantities of the conditions chart, one panel each in this order
CONDITION_QUANTITIES = ("clock (GHz)", "temperature (°C)", "power (W)")


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
