"""The points of a Roofline (view latest_model_points): each in the colour of the roof it is
judged against with a dotted guide up to it, shaped by its sweep (a GEMM sweep's shape, or a star
of its own for each of your workloads), sized by its M, filled for a warm cache and hollow for a
cold one; a triangle around each point above its roof; each workload's name beside one of its
stars; and the chart's title, which names the machine and the runs so that a PNG stands alone."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from rooflab.report.axes import utc_text
from rooflab.report.disturbed_marks import RING_SIZE, RING_STROKE
from rooflab.report.labels import GUIDE_COST, LABEL_HEIGHT_PX
from rooflab.vocabulary import CacheState

if TYPE_CHECKING:
    import altair as alt
    import pandas as pd

ABOVE_LABEL = "above its roof (achieved > attainable)"
ABOVE_COLOUR = "#000"
UNKNOWN_ROOF = "no roof measured for it"
FILLED_STATES = (CacheState.WARM.value, CacheState.COLD.value)  # filled, hollow
FILL_KEY = "sweep (filled: warm cache, hollow: cold)"
SWEEP_SHAPES = ("circle", "square", "diamond", "triangle-down", "cross", "triangle-left")
GEMM_SIZES, GEMM_STROKE = (30, 320), 1.6  # a GEMM's point: its area (px²) from M, its outline
ABOVE_SIZE, ABOVE_STROKE = 420, 2  # the triangle around a point above its roof


def _star(points: int, inner: float) -> str:
    """An SVG path of a star of `points` points in [-1, 1] (a point up), its inner corners at
    `inner` of its radius: a symbol's shape in Vega."""
    corners = [
        (radius * math.sin(math.pi * i / points), -radius * math.cos(math.pi * i / points))
        for i in range(2 * points)
        for radius in ((1.0 if i % 2 == 0 else inner),)
    ]
    return "M" + "L".join(f"{x:.3g},{y:.3g}" for x, y in corners) + "Z"


# Your workloads' cases: each workload its own star (a shape no sweep takes; 5, 4, 6, 3, 8 and 7
# points, then again), one size, in a legend of their own that names them
WORKLOAD_SHAPES = tuple(
    _star(points, inner) for points, inner in ((5, 0.4), (4, 0.4), (6, 0.5), (3, 0.35),
                                               (8, 0.5), (7, 0.45))
)  # fmt: skip
WORKLOADS_KEY = "your kernels (filled: warm, hollow: cold)"
WORKLOAD_SIZE, WORKLOAD_STROKE = 260, 1.6
# A workload's name is drawn beside one of its stars, NAME_GAP_PX from its marks, where it
# covers no roof label, crosses no roof and comes no nearer than NAME_CLEARANCE_PX to another
# point's marks (so that the star nearest a name is its own); where no place is clear of them it
# may cross one point's dotted guide (GUIDE_COST; left of the ridge a pointer chase's guide runs
# from far below to its roof) or the grey lines that join a pair: its white halo keeps it
# legible. A name that fits nowhere is left out: its stars' shape in the legend names them.
NAME_GAP_PX, NAME_CLEARANCE_PX = 3, 7
NAME_DYS = (0, -6, 6, -12, 12)  # beside a star: level with it, then a little above or under
WORKLOAD_LABEL_MAX_COST = 2 * GUIDE_COST
PAIR_LINE_COST = 150
# a roof's label over a point costs this per px²: a star (its name is beside it) or a GEMM's
# point (drawn over the label, it hides letters)
WORKLOAD_POINT_WEIGHT, GEMM_POINT_WEIGHT = 20, 4
PAIR_COLOUR = "#777"


def judged_against(points: pd.DataFrame, texts: dict) -> list[str | None]:
    """The label of the roof each point is judged against: its level's bandwidth roof where it
    is memory-bound, its compute path's roof where compute-bound (view latest_model_points)."""
    rows = points.to_dict("records")
    return [
        texts.get(row.get("level") if row.get("limiter") == "memory" else row.get("compute_path"))
        for row in rows
    ]


def roofline_title(scope: dict, points: pd.DataFrame, name: str = "Roofline") -> dict:
    """What a PNG of the chart needs to stand alone: the machine, and the runs with their dates
    (`name`: the chart's, "Roofline" or "Integer Roofline (OP/s)")."""
    lines = []
    if scope.get("ceilings_run_id"):
        lines.append(
            f"ceilings: run {scope['ceilings_run_id']} ({utc_text(scope.get('last_ceilings'))})"
        )
    if len(points) and "run_id" in points:
        newest = points.sort_values(
            ["started_at", "run_id"] if "started_at" in points else "run_id"
        )
        run = newest.iloc[-1]
        runs = points.run_id.nunique()
        lines.append(
            f"points: the newest run of each configuration ({runs} run{'s' * (runs > 1)}; "
            f"newest {run.run_id}, {utc_text(run.get('started_at'))})"
        )
        lines.append(
            "colour: the roof a point is judged against (dotted up to it); shape: sweep; "
            "size: M; filled: warm cache, hollow: cold"
        )
        if "params" in points and points.params.notna().any():
            lines.append(
                "stars: your workloads, a star each (legend), named beside one of its stars; a "
                "grey line joins two implementations of the same work"
            )
    return {
        "text": f"{name}: {scope['host']} · {scope['device_name']} ({scope['backend']})",
        "subtitle": lines,
    }


def guides(points: pd.DataFrame) -> list:
    """The dotted line from each point to its roof, as a segment in data units."""
    if "attainable_flops_per_s" not in points:
        return []
    return [
        ((r.intensity, r.achieved_flops_per_s), (r.intensity, r.attainable_flops_per_s), GUIDE_COST)
        for r in points.itertuples()
        if r.intensity > 0 and r.achieved_flops_per_s > 0 and r.attainable_flops_per_s > 0
    ]


def above_marks(pts: pd.DataFrame, x, y, flag_scale, flag_shapes) -> alt.Chart:
    """A triangle around each point above its roof, with its legend entry (a triangle too: the
    legend of `flag_shapes`, disturbed_marks.flag_legend)."""
    import altair as alt

    return (
        alt.Chart(pts)
        .transform_filter("datum.above_roof")
        .transform_calculate(flag=json.dumps(ABOVE_LABEL))
        .mark_point(shape="triangle-up", size=ABOVE_SIZE, filled=False, strokeWidth=ABOVE_STROKE)
        .encode(
            x=x,
            y=y,
            stroke=alt.Stroke(
                "flag:N",
                title="measurement",
                scale=flag_scale,
                legend=alt.Legend(labelLimit=400, symbolStrokeWidth=ABOVE_STROKE),
            ),
            shape=alt.Shape("flag:N", title="measurement", scale=flag_shapes),
            tooltip=[
                alt.Tooltip("config_id:N", title="config"),
                alt.Tooltip("cache_state:N", title="cache state"),
                alt.Tooltip("efficiency:Q", title="efficiency", format=".1%"),
                alt.Tooltip("roof:N", title="judged against"),
            ],
        )
    )


def point_layer(
    pts: pd.DataFrame, x, y, roof_scale, unit: str = "FLOP", shape_title: str = FILL_KEY
) -> alt.Chart:
    """The points: colour the roof each is judged against, shape its sweep (its legend titled
    `shape_title`), size its M, filled for a warm cache and hollow for a cold one; rates in
    `unit`/s (FLOP, or OP)."""
    import altair as alt

    tooltip = [
        alt.Tooltip("config_id:N", title="config"),
        alt.Tooltip("sweep:N", title="sweep"),
        alt.Tooltip("dtype:N", title="dtype"),
        alt.Tooltip("cache_state:N", title="cache state"),
        alt.Tooltip("m:Q", title="M"),
        alt.Tooltip("n:Q", title="N"),
        alt.Tooltip("k:Q", title="K"),
        alt.Tooltip("median_s_text:N", title="median time"),
        alt.Tooltip("iqr_ratio:Q", title="IQR / median", format=".1%"),
        alt.Tooltip("clock_min_mhz:Q", title="clock min during samples (MHz)", format=".0f"),
        alt.Tooltip("clock_max_mhz:Q", title="clock max during samples (MHz)", format=".0f"),
        alt.Tooltip("achieved_flops_per_s:Q", title=f"achieved ({unit}/s)", format=".3~s"),
        alt.Tooltip("attainable_flops_per_s:Q", title=f"attainable ({unit}/s)", format=".3~s"),
        alt.Tooltip("efficiency:Q", title="efficiency", format=".1%"),
        alt.Tooltip("roof:N", title="judged against"),
        alt.Tooltip("limiter:N", title="limiter"),
        alt.Tooltip("level:N", title="level"),
        alt.Tooltip("compute_path:N", title="compute path"),
        alt.Tooltip("intensity:Q", title=f"intensity ({unit}/byte)", format=".3~g"),
        alt.Tooltip("q_source:N", title="bytes from (q_source)"),
        alt.Tooltip("disturbance:N", title="disturbed by other processes"),
        alt.Tooltip("cause:N", title="why it sits there (rooflab explain)"),
        alt.Tooltip("next_step:N", title="what to try next"),
        alt.Tooltip("run_id:N", title="run"),
    ]
    import pandas as pd

    # A workload's case (your own kernel) has no M: drawn at one size, its params in the tooltip.
    case = pts["params"].notna() if "params" in pts else pd.Series(False, index=pts.index)
    workloads, pts = pts[case], pts[~case]
    ms = sorted({int(m) for m in pts.get("m", []) if m > 0})
    size = (
        alt.Size(
            "m:Q",
            title="M (rows of X)",
            scale=alt.Scale(type="log", range=list(GEMM_SIZES)),
            legend=alt.Legend(values=ms if len(ms) <= 5 else ms[:: math.ceil(len(ms) / 5)]),
        )
        if len(ms) > 1
        else alt.value(90)
    )

    def chart(data: pd.DataFrame, size, tooltip) -> alt.Chart:
        return _points(data, x, y, roof_scale, size, tooltip, shape_title=shape_title)

    gemms = chart(pts, size, tooltip)
    if workloads.empty:
        return gemms
    params = [*tooltip[:4], alt.Tooltip("params:N", title="params"), *tooltip[7:]]
    names = sorted(set(workloads.sweep))
    shape = alt.Shape(
        "sweep:N",
        title=WORKLOADS_KEY,
        scale=alt.Scale(domain=names, range=workload_shapes(names)),
        legend=alt.Legend(
            titleLimit=400, labelLimit=400, symbolStrokeColor="#333", symbolSize=WORKLOAD_SIZE
        ),
    )
    stars = _points(workloads, x, y, roof_scale, alt.SizeValue(WORKLOAD_SIZE), params, shape)
    # the stars' legend is their own: a workload's name is no sweep of the GEMMs' legend
    return alt.layer(gemms, stars).resolve_scale(shape="independent")


def workload_shapes(names: list[str]) -> list[str]:
    """Each workload's star, in the order of `names`: WORKLOAD_SHAPES in turn."""
    return [WORKLOAD_SHAPES[i % len(WORKLOAD_SHAPES)] for i in range(len(names))]


def marks_px(points: pd.DataFrame) -> list[float]:
    """The side (px) of the box each point's marks cover: its symbol (a GEMM's at the largest
    M), the ring of a disturbed point, the triangle of one above its roof, with their outlines."""
    import pandas as pd

    def flag(column: str) -> list[bool]:
        return list(points.get(column, pd.Series(False, index=points.index)).fillna(False))

    cases = points["params"].notna() if "params" in points else [False] * len(points)
    return [
        max(
            math.sqrt(WORKLOAD_SIZE) + WORKLOAD_STROKE
            if case
            else math.sqrt(GEMM_SIZES[1]) + GEMM_STROKE,
            math.sqrt(RING_SIZE) + RING_STROKE if disturbed else 0.0,
            math.sqrt(ABOVE_SIZE) + ABOVE_STROKE if above else 0.0,
        )
        for case, disturbed, above in zip(cases, flag("disturbed"), flag("above_roof"), strict=True)
    ]


def label_obstacles(points: pd.DataFrame) -> list[tuple]:
    """Each point as what a label should not cover (labels.place_labels' points): (x, y, cost
    per px², the side of its marks' box, whose point: a workload's name, None for a GEMM), a
    star costlier than a GEMM's point (its name is on it)."""
    cases = points["params"].notna() if "params" in points else [False] * len(points)
    sweeps = points.get("sweep", [None] * len(points))
    obstacles = []
    for x, y, case, side, sweep in zip(
        points.get("intensity", []),
        points.get("achieved_flops_per_s", []),
        cases,
        marks_px(points),
        sweeps,
        strict=True,
    ):
        weight, key = (WORKLOAD_POINT_WEIGHT, str(sweep)) if case else (GEMM_POINT_WEIGHT, None)
        obstacles.append((x, y, weight, side, key))
    return obstacles


def workload_labels(points: pd.DataFrame, px: float) -> list[dict]:
    """A label per workload (its name), optional (labels.place_labels: placed after the roof
    labels, left out where it fits nowhere): beside one of its points, the highest first: right
    of it, left of it (level with it, then a little above or under), over it or under it, always
    NAME_GAP_PX from its marks and at least NAME_CLEARANCE_PX from any other point's; `px`: the
    factor in intensity of one pixel."""
    if "params" not in points:
        return []
    labels = []
    cases = points[points.params.notna()]
    cases = cases.assign(marks_px=marks_px(cases)).sort_values(
        "achieved_flops_per_s", ascending=False
    )
    for name, group in cases.groupby("sweep", sort=True):
        places = []
        for r in group.itertuples():
            if not (r.intensity > 0 and r.achieved_flops_per_s > 0):
                continue
            half, y = r.marks_px / 2, r.achieved_flops_per_s
            # the text starts 4 px past its anchor (labels.text_box), NAME_GAP_PX past the marks
            aside = px ** (half + NAME_GAP_PX - 4)
            rise = math.ceil(half + NAME_GAP_PX + LABEL_HEIGHT_PX / 2)
            places += [
                place
                for dy in NAME_DYS
                for place in (
                    (r.intensity * aside, y, "left", dy),
                    (r.intensity / aside, y, "right", dy),
                )
            ]
            places += [(r.intensity, y, "center", -rise), (r.intensity, y, "center", rise)]
        if places:
            (x, y, align, _), *anchors = places
            labels.append(
                {"ceiling": str(name), "x": x, "y": y, "align": align, "anchors": anchors}
                | {"max_cost": WORKLOAD_LABEL_MAX_COST, "dys": (0,), "workload": True}
                | {"own": str(name), "clearance": NAME_CLEARANCE_PX}
            )
    return labels


def pair_segments(points: pd.DataFrame, pairs: pd.DataFrame | None) -> pd.DataFrame:
    """Per pair of implementations of the same work (rows of implementation_comparisons), case
    and cache state: the line from the baseline's point to the workload's, where both are drawn."""
    import pandas as pd

    columns = ["x", "y", "x2", "y2", "pair", "says", "cache_state"]
    if pairs is None or pairs.empty or "params" not in points:
        return pd.DataFrame(columns=columns)
    keys = ["params", "dtype", "cache_state"]
    drawn = points[points.params.notna()][["sweep", *keys, "intensity", "achieved_flops_per_s"]]
    ends = pairs.merge(drawn.rename(columns={"sweep": "workload"}), on=["workload", *keys]).merge(
        drawn.rename(columns={"sweep": "baseline"}), on=["baseline", *keys], suffixes=("", "_b")
    )
    return pd.DataFrame(
        {
            "x": ends.intensity_b,
            "y": ends.achieved_flops_per_s_b,
            "x2": ends.intensity,
            "y2": ends.achieved_flops_per_s,
            "pair": ends.baseline + " → " + ends.workload,
            "says": ends.says,
            "cache_state": ends.cache_state,
        },
        columns=columns,
    )


def pair_layer(segments: pd.DataFrame, x, y) -> alt.Chart:
    """Grey lines from a baseline's point to its other implementation's (same work)."""
    import altair as alt

    return (
        alt.Chart(segments)
        .mark_rule(strokeWidth=1.5, color=PAIR_COLOUR, opacity=0.7)
        .encode(
            x=x,
            y=y,
            x2=alt.X2("x2:Q"),
            y2=alt.Y2("y2:Q"),
            tooltip=[
                alt.Tooltip("pair:N", title="same work"),
                alt.Tooltip("cache_state:N", title="cache state"),
                alt.Tooltip("says:N", title="says"),
            ],
        )
    )


def workload_label_layers(rows: pd.DataFrame, x, y) -> list[alt.Chart]:
    """The workloads' names as placed (labels.place_labels): a white halo, then the text."""
    import altair as alt

    layers = []
    for (align, dy), group in rows.groupby(["align", "dy"]):
        mark = {"align": align, "dy": int(dy), "dx": {"left": 4, "right": -4}.get(align, 0)}
        mark |= {"fontSize": 11, "color": "#222"}
        for halo in (True, False):
            extra = {"stroke": "white", "strokeWidth": 3} if halo else {}
            layers.append(
                alt.Chart(group)
                .mark_text(**mark, **extra)
                .encode(x=x, y=y, text=alt.Text("label:N"))
            )
    return layers


def _points(
    pts: pd.DataFrame, x, y, roof_scale, size, tooltip, shape=None, shape_title: str = FILL_KEY
) -> alt.Chart:
    import altair as alt

    return (
        alt.Chart(pts)
        .mark_point(strokeWidth=1.6, opacity=0.95)
        .encode(
            x=x,
            y=y,
            color=alt.Color("roof:N", scale=roof_scale, legend=None),
            fill=alt.Fill("roof:N", scale=roof_scale, legend=None),
            # Vega-Lite draws no legend for fill opacity: the sweep's legend says it
            fillOpacity=alt.FillOpacity(
                "cache_state:N",
                scale=alt.Scale(domain=list(FILLED_STATES), range=[0.85, 0.0]),
                legend=None,
            ),
            shape=shape
            if shape is not None
            else alt.Shape(
                "sweep:N",
                title=shape_title,
                scale=alt.Scale(range=list(SWEEP_SHAPES)),
                legend=alt.Legend(titleLimit=400),
            ),
            size=size,
            tooltip=tooltip,
        )
    )
