"""Each measurement over its runs (view history) and what its newest run changed (view
comparisons): per sweep or workload, and per kind of ceiling, a line per measurement (key)
through its values in run order, each normalised to the key's first run so that many keys share
one axis, over its noise band; under the chart, the keys that got slower or faster."""

from __future__ import annotations

import html
import json
import math
from typing import TYPE_CHECKING

import rooflab.report.queries as queries
from rooflab.report.axes import WIDTH, chart_title, utc_text
from rooflab.report.disturbed_marks import DISTURBED_COLOR, DISTURBED_LABEL
from rooflab.report.page import Chart, table_html
from rooflab.units import format_quantity

if TYPE_CHECKING:
    import altair as alt
    import pandas as pd

# the unit of a history row (view history) as units.format_quantity names its kind
UNIT_KINDS = {"s": "time", "B/s": "byte_rate", "FLOP/s": "flop_rate", "OP/s": "op_rate"}
LEGEND_KEYS = 20  # more lines than this: no legend (its colours would repeat), the tooltip names
PANEL_HEIGHT = 200
MAX_X_TICKS = 12
DENSE_RUNS = 40  # more runs than this sit a few pixels apart: thinner bars, smaller rings
# Bounds that keep the chart one screenful whatever the store holds (a PNG of 100 stacked panels
# is 80,000 px tall): the point panels (sweeps, workloads) whose keys moved, then the newest, up
# to HISTORY_PANELS (every kind of ceiling too: a handful), each key's newest HISTORY_RUNS runs.
# What is left out is a table under the chart, with the query for its rows.
HISTORY_PANELS = 6
HISTORY_RUNS = 100
ROWS_LISTED = 50
SHORT_SHA = 7
MOVED = ("slower", "faster")
CEILING_PANEL = " ceilings: rate"  # a panel's title: "bandwidth ceilings: rate"

HISTORY_HOW = (
    "Every measurement with two runs or more, in run order (1: its oldest run): a point's median "
    "time, or a ceiling's rate, divided by the same key's value in its first run, so that 1 is "
    "where it started and a move reads as a factor; one panel per sweep or workload and per "
    "kind of ceiling, one line per configuration and cache state (or level and kernel), on a "
    "log axis. The vertical bar through each run is its noise band (p25 to p75 of its samples, "
    "divided likewise); a purple ring marks a run other processes took time from. A time above "
    "1 got slower; a rate above 1 got faster. The tooltip gives each run's value, date and "
    "commit (and whether the tree had uncommitted changes)."
)


def history_charts(connection, scope) -> list[Chart]:
    """The machine's history chart, with its changed keys under it and what it leaves out; none
    where no key has two runs yet."""
    rows = history_rows(queries.history(connection, scope))
    if rows.empty:
        return []
    comparisons = queries.comparisons(connection, scope)
    rows, left_out = pick_panels(rows, comparisons)
    notes = changes_html(comparisons) + left_out_html(rows, left_out, scope)
    chart = history_chart(rows, scope)
    return [Chart("history", "History of each measurement", HISTORY_HOW, chart, notes)]


def pick_panels(rows: pd.DataFrame, comparisons: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of the panels drawn (every ceiling panel; the HISTORY_PANELS point panels with
    the most keys that got slower or faster in their newest run, then those run last), in the
    order drawn (`order`); and a row per point panel left out (name, keys, runs, newest run,
    keys moved), in that order."""
    moved = comparisons[(comparisons.kind == "point") & comparisons.verdict.isin(MOVED)]
    moved = moved.groupby("name").size()
    per_panel = (
        rows[rows.kind != "ceiling"]
        .groupby("panel")
        .agg(name=("name", "first"), keys=("key", "nunique"), runs=("position", "max"),
             newest=("started_at", "max"))
    )  # fmt: skip
    per_panel["moved"] = per_panel.name.map(moved).fillna(0).astype(int)
    order = sorted(
        per_panel.index,
        key=lambda p: (-per_panel.moved[p], -per_panel.newest[p].value, p),
    )
    ceilings = sorted(rows.panel[rows.kind == "ceiling"].unique())
    rank = {panel: i for i, panel in enumerate([*order[:HISTORY_PANELS], *ceilings])}
    kept = rows[rows.panel.isin(rank)]
    return kept.assign(order=kept.panel.map(rank)), per_panel.loc[order[HISTORY_PANELS:]]


def left_out_html(rows: pd.DataFrame, left_out: pd.DataFrame, scope) -> str:
    """What the history chart does not draw: the older runs of long-lived keys, and a row per
    panel left out (the first ROWS_LISTED), with the query for their rows."""
    import pandas as pd

    said = ""
    if rows.older.any():
        said += (
            f"<p class='left-out'>Each measurement's newest {HISTORY_RUNS} runs are drawn; its "
            "older ones are in the store (all its runs: <code>"
            f"{html.escape(queries.view_sql('history', scope, key='<key>'))}</code>).</p>"
        )
    if left_out.empty:
        return said
    listed = left_out.head(ROWS_LISTED)
    table = pd.DataFrame(
        {
            "sweep or workload": listed.name.astype(str),
            "measurements": listed["keys"].to_numpy(),
            "runs": listed.runs.to_numpy(),
            "newest run (UTC)": [utc_text(t, seconds=True) for t in listed.newest],
            "slower or faster in its newest run": listed.moved.to_numpy(),
        }
    )
    more = len(left_out) - len(listed)
    sql = queries.view_sql("history", scope, name="<sweep or workload>")
    return said + (
        f"<p class='left-out'>{len(left_out)} more sweep(s) or workload(s) with history are not "
        f"drawn (the chart has the {HISTORY_PANELS} whose measurements moved most, then those "
        "run last)"
        + (f"; the first {len(listed)} are listed, {more} more not" if more else "")
        + f". One's history: <code>{html.escape(sql)}</code></p>"
        + table_html(table, "history-left-out")
    )


def history_rows(history: pd.DataFrame) -> pd.DataFrame:
    """The rows the chart draws: the keys with two runs or more, each run's value and band
    over its key's first value (`ratio`, `ratio_low`, `ratio_high`), its panel and what its
    tooltip says."""
    rows = history.sort_values(["kind", "key", "position"], kind="stable")
    by_key = rows.groupby(["kind", "key"], sort=False)
    rows = rows.assign(
        runs=by_key.position.transform("size"), first=by_key.value.transform("first")
    )
    rows = rows[(rows.runs >= 2) & (rows.value > 0) & (rows["first"] > 0)]
    if rows.empty:
        return rows
    older = rows.position <= rows.runs - HISTORY_RUNS  # ratios stay over the key's first run
    rows = rows[~older].assign(older=older.any())
    ceiling = rows.kind == "ceiling"
    panel = rows.key.str.split("/").str[0] + CEILING_PANEL
    return rows.assign(
        panel=panel.where(ceiling, rows.name.astype(str) + ": median time"),
        ratio=rows.value / rows["first"],
        ratio_low=rows.low / rows["first"],
        ratio_high=rows.high / rows["first"],
        value_text=[_quantity(v, u) for v, u in zip(rows.value, rows.unit, strict=True)],
        band_text=[
            f"{_quantity(lo, u)} to {_quantity(hi, u)}"
            for lo, hi, u in zip(rows.low, rows.high, rows.unit, strict=True)
        ],
        commit=[_commit(c, d) for c, d in zip(rows.git_commit, rows.git_dirty, strict=True)],
        started=[utc_text(t, seconds=True) for t in rows.started_at],
        disturbance=rows.disturbed.map({True: "yes", False: "no"}),
    )


def history_chart(rows: pd.DataFrame, scope: dict) -> alt.VConcatChart:
    """One panel per sweep, workload and kind of ceiling of `rows` (history_rows, pick_panels),
    stacked in their `order`."""
    import altair as alt

    columns = [
        "panel", "key", "config_id", "cache_state", "run_id", "position",
        "ratio", "ratio_low", "ratio_high", "value_text", "band_text", "commit", "started",
        "disturbed", "disturbance", "n_samples",
    ]  # fmt: skip
    # points first (what a user changes), then the ceilings (the machine under them)
    order = rows.groupby("panel").order.first().sort_values().index
    rows = rows[columns].reset_index(drop=True)
    panels = [_panel(rows[rows.panel == panel]) for panel in order]
    return (
        alt.vconcat(*panels, spacing=28)
        .resolve_scale(x="independent", y="independent", color="independent")
        .properties(
            title=chart_title(
                f"History: {scope['host']} · {scope['device_name']} ({scope['backend']})",
                [
                    "each measurement's value over its first run's, in run order (log axis); "
                    "bars: noise band p25..p75; purple ring: disturbed",
                    "a time above 1 got slower, a rate above 1 got faster",
                ],
            )
        )
    )


def _panel(rows: pd.DataFrame) -> alt.LayerChart:
    import altair as alt

    panel = rows.panel.iloc[0]
    ceiling = panel.endswith(CEILING_PANEL)
    keys = sorted(rows.key.unique())
    first, last = int(rows.position.min()), int(rows.position.max())
    steps = last - first + 1
    x_scale = alt.Scale(domain=[first - 0.5, last + 0.5], nice=False)
    x = alt.X(
        "x:Q",
        scale=x_scale,
        title="run of the measurement (1: its oldest)",
        axis=alt.Axis(values=run_ticks(last, first), format="d"),
    )
    y_scale = alt.Scale(type="log", nice=False, padding=10)  # not widened to whole decades
    y = alt.Y(
        "y:Q",
        scale=y_scale,
        title="rate / first run's (above 1: faster)"
        if ceiling
        else "time / first run's (above 1: slower)",
        axis=alt.Axis(labelExpr="format(datum.value, '~g') + '×'", tickCount=6),
    )
    colour = alt.Color(
        "key:N",
        sort=keys,
        title="ceiling (kind/name/kernel)" if ceiling else "configuration and cache state",
        scale=alt.Scale(scheme="category10" if len(keys) <= 10 else "tableau20"),
        legend=alt.Legend(labelLimit=360, symbolOpacity=1) if len(keys) <= LEGEND_KEYS else None,
    )
    tooltip = [
        alt.Tooltip("key:N", title="measurement"),
        alt.Tooltip("position:Q", title="run of the measurement"),
        alt.Tooltip("value_text:N", title="value"),
        alt.Tooltip("ratio:Q", title="over its first run (×)", format=".3~g"),
        alt.Tooltip("band_text:N", title="noise band (p25 to p75)"),
        alt.Tooltip("n_samples:Q", title="samples"),
        alt.Tooltip("started:N", title="started"),
        alt.Tooltip("commit:N", title="commit"),
        alt.Tooltip("disturbance:N", title="disturbed by other processes"),
        alt.Tooltip("run_id:N", title="run"),
    ]
    data = rows.assign(x=rows.position, y=rows.ratio)
    reference = alt.Chart(data).transform_aggregate(n="count()").transform_calculate(one="1")
    layers = [
        reference.mark_rule(color="#999", strokeDash=[4, 3]).encode(
            y=alt.Y("one:Q", scale=y_scale)
        ),
        alt.Chart(data)
        .transform_filter("datum.ratio_low > 0 && datum.ratio_high > 0")
        .mark_rule(strokeWidth=2 if steps <= DENSE_RUNS else 1, opacity=0.45)
        .encode(
            x=x, y=alt.Y("ratio_low:Q", scale=y_scale), y2=alt.Y2("ratio_high:Q"), color=colour
        ),
        alt.Chart(data)
        .mark_line(strokeWidth=1.5)
        .encode(x=x, y=y, color=colour, detail=alt.Detail("key:N")),
        *_disturbed_rings(data, x, y, small=steps > DENSE_RUNS),
        alt.Chart(data)
        .mark_point(filled=True, size=28, opacity=1)
        .encode(x=x, y=y, color=colour, tooltip=tooltip),
    ]
    return alt.layer(*layers).properties(
        width=WIDTH - 120,
        height=PANEL_HEIGHT,
        title=alt.Title(f"{panel}, over each one's first run", anchor="start", fontSize=12),
    )


def run_ticks(last: int, first: int = 1) -> list[int]:
    """Ticks on the runs axis from run `first` to `last`: every run, or the first and every
    2nd, 5th, 10th, 20th... run, at most MAX_X_TICKS or so of them."""
    every = next(
        step
        for step in (n * 10**e for e in range(10) for n in (1, 2, 5))
        if (last - first + 1) / step <= MAX_X_TICKS
    )
    return sorted({first, *range(-(-first // every) * every, last + 1, every)})


def _disturbed_rings(data: pd.DataFrame, x, y, small: bool) -> list[alt.Chart]:
    """A ring around each disturbed run (disturbed_marks' colour and legend entry), smaller on a
    long history, whose runs sit a few pixels apart."""
    import altair as alt

    if not data.disturbed.any():
        return []
    return [
        alt.Chart(data)
        .transform_filter("datum.disturbed")
        .transform_calculate(flag=json.dumps(DISTURBED_LABEL))
        .mark_point(shape="circle", size=70 if small else 220, filled=False, strokeWidth=1.5)
        .encode(
            x=x,
            y=y,
            stroke=alt.Stroke(
                "flag:N",
                title="measurement",
                scale=alt.Scale(domain=[DISTURBED_LABEL], range=[DISTURBED_COLOR]),
                legend=alt.Legend(labelLimit=400),
            ),
        )
    ]


def changes_html(comparisons: pd.DataFrame) -> str:
    """Under the history: how the newest run of each key compares with the one before
    (view comparisons), and a table of the keys that got slower or faster."""
    if comparisons.empty:
        return "<p class='comparisons'>No comparison yet: no measurement has two runs.</p>"
    counts = comparisons.verdict.value_counts()
    tally = ", ".join(
        f"{int(counts.get(verdict, 0))} {verdict}"
        for verdict in ("slower", "faster", "same", "incomparable", "inconclusive")
    )
    # the samples' own verdict: an inconclusive pair (provisional, disturbed, busy) moved too
    samples = comparisons.get("samples_verdict", comparisons.verdict)
    comparisons = comparisons.assign(moved=samples.fillna(comparisons.verdict))
    said = (
        f"<p class='comparisons'>Newest run of each measurement against the one before it "
        f"({len(comparisons)} compared): {html.escape(tally)}.</p>"
    )
    unsure = int((comparisons.moved == "inconclusive").sum())
    if unsure:
        said += (
            f"<p class='comparisons'>{unsure} inconclusive by their samples: the interval of the "
            "ratio holds both no change and the change a verdict needs, so the samples "
            "cannot tell whether the measurement changed by that much (view comparisons, column "
            "note).</p>"
        )
    moved = comparisons[comparisons.moved.isin(MOVED)]
    provisional = int(moved.provisional.fillna(False).astype(bool).sum())
    if provisional:
        said += (
            f"<p class='comparisons'>{provisional} of the changes are provisional: their "
            "measurement has fewer than 3 earlier runs, so its run-to-run spread is not known "
            "yet.</p>"
        )
    if moved.empty:
        return said + (
            "<p class='comparisons'>No measurement got slower or faster beyond its noise in "
            "its newest run.</p>"
        )
    return said + table_html(changes_table(moved), "comparisons")


def _verdict_text(moved: str, verdict: str, provisional: bool, note) -> str:
    """`slower`; `slower (provisional)`; `slower (inconclusive: candidate disturbed)`."""
    if verdict != "inconclusive":
        return f"{verdict} (provisional)" if provisional else verdict
    if provisional and "provisional" in str(note):
        return f"{moved} (provisional)"
    return f"{moved} (inconclusive: {note})"


def changes_table(moved: pd.DataFrame) -> pd.DataFrame:
    """The keys that got slower (first) or faster, the largest change first: the ratio of the
    newest run's time to the previous one's with its interval, and what else changed."""
    import pandas as pd

    size = [abs(math.log(r)) if r and r > 0 else 0.0 for r in moved.ratio]
    rows = moved.assign(_slower=moved.moved == "slower", _size=size)
    rows = rows.sort_values(["_slower", "_size", "key"], ascending=[False, False, True])
    return pd.DataFrame(
        {
            "measurement": rows.key,
            "of": rows.name,
            "verdict": [
                _verdict_text(row.moved, row.verdict, bool(row.provisional), row.note)
                for row in rows.itertuples()
            ],
            "newest / previous time": [_times(r) for r in rows.ratio],
            "95 % interval": [
                f"{_times(lo)} to {_times(hi)}"
                for lo, hi in zip(rows.ci_low, rows.ci_high, strict=True)
            ],
            "runs (previous → newest)": rows.baseline_run_id + " → " + rows.candidate_run_id,
            "conditions changed": rows.conditions_changed.fillna("none recorded"),
        }
    )


def _quantity(value, unit) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "not stored"
    kind = UNIT_KINDS.get(unit)
    return format_quantity(float(value), kind, 4) if kind else f"{value:.4g} {unit}"


def _times(ratio) -> str:
    if ratio is None or (isinstance(ratio, float) and math.isnan(ratio)):
        return "–"
    return f"{ratio:.3g}×"


def _commit(commit, dirty) -> str:
    """A run's commit as its short sha, and whether the tree had uncommitted changes."""
    if not isinstance(commit, str) or not commit:
        return "not recorded"
    import pandas as pd

    dirty = dirty is not None and not pd.isna(dirty) and bool(dirty)
    return commit[:SHORT_SHA] + (" (uncommitted changes)" if dirty else "")
