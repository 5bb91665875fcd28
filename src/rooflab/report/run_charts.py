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
# Rows (a box, a dot: 16 px each) the distributions and change charts draw at most, the most
# telling first; the page says how many are left out and the query for all of them.
CHART_ROWS = 100


def telling_distributions(quantiles: pd.DataFrame) -> pd.DataFrame:
    """The CHART_ROWS boxes of sample_quantiles worth a look, in the view's order: disturbed,
    then noisy, then the widest spread (IQR over the median)."""
    rank = quantiles.spread.map({"disturbed": 0, "noisy": 1}).fillna(2)
    spread = (quantiles.p75_s - quantiles.p25_s) / quantiles.median_s
    chosen = quantiles.assign(_rank=rank, _spread=-spread).sort_values(["_rank", "_spread"])
    return quantiles.loc[sorted(chosen.index[:CHART_ROWS])]


def telling_changes(change: pd.DataFrame) -> pd.DataFrame:
    """The CHART_ROWS rows of median_changes worth a look, in the view's order: slower or
    faster beyond the noise first, then the largest change."""
    import numpy as np

    moved = change.verdict.isin(["slower", "faster"])
    size = np.abs(np.log(change.ratio.where(change.ratio > 0)))
    chosen = change.assign(_moved=~moved, _size=-size.fillna(0)).sort_values(["_moved", "_size"])
    return change.loc[sorted(chosen.index[:CHART_ROWS])]


def left_out_note(total: int, drawn: int, what: str, sql: str) -> str:
    """One line under a chart that draws `drawn` of `total` rows: what it leaves out and the
    query that gives them all."""
    import html

    if drawn >= total:
        return ""
    return (
        f"<p class='left-out'>Drawn: {drawn} of the {total} {html.escape(what)}. All of them: "
        f"<code>{html.escape(sql)}</code></p>"
    )


def distribution_chart(quantiles: pd.DataFrame):
    import altair as alt

    # labelLimit 0: no limit, so Vega measures no label for truncation (a label per point:
    # half the time of drawing this chart with 400 of them); the labels are config ids
    y = alt.Y("label:N", title=None, sort=None, axis=alt.Axis(labelLimit=0))
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
        x2=alt.X2("max_s:Q"),
    )
    box = base.mark_bar(size=10).encode(x=alt.X("p25_s:Q", scale=x_scale), x2=alt.X2("p75_s:Q"))
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
        # the clock from zero, so that a dip reads at its true size against the nominal clock
        scale = alt.Scale(zero=quantity == CONDITION_QUANTITIES[0])
        title = quantity[:1].upper() + quantity[1:]
        y = alt.Y("value:Q", title=title, scale=scale)
        base = alt.Chart(data).encode(x=x, color=color, tooltip=tooltip)
        line = base.mark_line(point=True).encode(y=y, detail=alt.Detail("run:N"))
        spread = base.mark_rule().encode(
            y=alt.Y("value_min:Q", scale=scale), y2=alt.Y2("value_max:Q")
        )
        layers = [line, spread, *_nominal_marks(data, scale)]
        panels.append(alt.layer(*layers).properties(width=WIDTH, height=200))
    return alt.vconcat(*panels).resolve_scale(color="shared")


def _nominal_marks(data: pd.DataFrame, scale) -> list:
    """A dashed rule at the machine's nominal value of the quantity (view condition_readings,
    `nominal`), labelled with it and where it comes from; none where the machine records none."""
    import altair as alt

    if "nominal" not in data:
        return []
    nominal = data[data.nominal.notna()][["quantity", "nominal", "nominal_from"]].drop_duplicates()
    if nominal.empty:
        return []
    unit = nominal.quantity.str.extract(r"\((.*)\)$")[0].fillna("")
    nominal = nominal.assign(
        label=[
            f"{source}: {value:.4g} {u}"
            for value, u, source in zip(nominal.nominal, unit, nominal.nominal_from, strict=True)
        ]
    )
    tooltip = [alt.Tooltip("label:N", title="nominal")]
    y = alt.Y("nominal:Q", scale=scale)
    rule = (
        alt.Chart(nominal).mark_rule(color="#444", strokeDash=[6, 3]).encode(y=y, tooltip=tooltip)
    )
    text = (
        alt.Chart(nominal)
        .mark_text(align="right", baseline="bottom", dy=-3, fontSize=11, color="#444")
        .encode(y=y, x=alt.XValue(WIDTH - 4), text=alt.Text("label:N"), tooltip=tooltip)
    )
    return [rule, text]


# The change chart's axis: latest / previous median on a log scale, the same distance for twice as
# slow as for twice as fast; a ratio beyond it is drawn at its edge as a triangle.
RATIO_DOMAIN = (0.5, 2.0)
RATIO_TICKS = (0.5, 0.8, 1.0, 1.25, 2.0)
WITHIN, SLOWER_BEYOND, FASTER_BEYOND = (
    "within the axis",
    f"over {RATIO_DOMAIN[1]:g}× (drawn at the edge)",
    f"under {RATIO_DOMAIN[0]:g}× (drawn at the edge)",
)


def change_chart(change: pd.DataFrame):
    """Each configuration's latest / previous median (view median_changes, `ratio`) on a log
    axis from 0.5× to 2×, over its noise band; a ratio beyond the axis is clipped to its edge and
    drawn as a triangle pointing out, its true value in the tooltip."""
    import json

    import altair as alt

    lo, hi = RATIO_DOMAIN
    # labelLimit 0: no limit, so Vega measures no label for truncation (a label per point:
    # half the time of drawing this chart with 400 of them); the labels are config ids
    y = alt.Y("label:N", title=None, sort=None, axis=alt.Axis(labelLimit=0))
    x_scale = alt.Scale(type="log", domain=list(RATIO_DOMAIN), nice=False, padding=12)
    clamp = f"clamp(%s, {lo}, {hi})"
    band = (
        alt.Chart(change)
        .transform_calculate(
            band_lo=clamp % "1 + datum.noise_lo", band_hi=clamp % "1 + datum.noise_hi"
        )
        .mark_bar(size=12, color="#ccc")
        .encode(
            y=y,
            x=alt.X(
                "band_lo:Q",
                title="Latest / previous median (ratio, log scale)",
                scale=x_scale,
                axis=alt.Axis(
                    values=list(RATIO_TICKS), labelExpr="format(datum.value, '~g') + '×'"
                ),
            ),
            x2=alt.X2("band_hi:Q"),
        )
    )
    rule = (
        alt.Chart(change)
        .transform_aggregate(n="count()")
        .transform_calculate(one="1")
        .mark_rule(color="#888")
        .encode(x=alt.X("one:Q", scale=x_scale))
    )
    beyond = (
        f"datum.ratio > {hi} ? {json.dumps(SLOWER_BEYOND)} : "
        f"datum.ratio < {lo} ? {json.dumps(FASTER_BEYOND)} : {json.dumps(WITHIN)}"
    )
    dots = (
        alt.Chart(with_time_text(change, "previous_s", "latest_s"))
        .transform_calculate(shown=clamp % "datum.ratio", beyond=beyond)
        .mark_point(filled=True, size=70, opacity=0.9)
        .encode(
            y=y,
            x=alt.X("shown:Q", scale=x_scale),
            color=alt.Color(
                "verdict:N",
                title="change",
                scale=alt.Scale(
                    domain=["slower", "faster", "within noise"],
                    range=["#e45756", "#54a24b", "#888"],
                ),
            ),
            shape=alt.Shape(
                "beyond:N",
                title="ratio",
                scale=alt.Scale(
                    domain=[WITHIN, SLOWER_BEYOND, FASTER_BEYOND],
                    range=["circle", "triangle-right", "triangle-left"],
                ),
                legend=alt.Legend(labelLimit=300),
            ),
            tooltip=[
                alt.Tooltip("label:N", title="configuration"),
                alt.Tooltip("previous_s_text:N", title="previous median"),
                alt.Tooltip("latest_s_text:N", title="latest median"),
                alt.Tooltip("ratio:Q", title="latest / previous (×)", format=".3~g"),
                alt.Tooltip("rel_change:Q", title="change", format="+.1%"),
                alt.Tooltip("noise_hi:Q", title="noise band (±)", format=".1%"),
                alt.Tooltip("previous_run:N", title="previous run"),
                alt.Tooltip("latest_run:N", title="latest run"),
                alt.Tooltip("disturbed:N", title="disturbed by other processes"),
            ],
        )
    )
    return alt.layer(band, rule, dots).properties(
        width=WIDTH - 200, height=max(60, 16 * len(change))
    )
