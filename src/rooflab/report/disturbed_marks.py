"""How the charts mark a measurement other processes took time from (conditions.disturbance): a
ring around its point on a Roofline, its own colour in the sample distributions."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

DISTURBED_LABEL = "disturbed: other processes took time from the measurement"
DISTURBED_COLOR = "#7b3294"
RING_SIZE, RING_STROKE = 260, 2


def flag_legend(flags: list[str], colours: list[str], shapes: list[str]) -> tuple:
    """The stroke and shape scales of the marks that flag a point (`flags`: their legend
    entries; a ring for DISTURBED_LABEL, others' own `shapes`), which share one legend whose
    symbols are the marks: their shape, hollow, in their colour and outline."""
    import altair as alt

    return alt.Scale(domain=flags, range=colours), alt.Scale(domain=flags, range=shapes)


def disturbed_rings(pts: pd.DataFrame, x_scale, y_scale, scale=None, shapes=None) -> list:
    """A ring around each disturbed point, under the points, with its own legend entry (a ring
    too); none (and no legend entry) where no point is disturbed. `scale` and `shapes`: the
    stroke and shape scales (flag_legend), where other marks of the chart share its legend."""
    import altair as alt

    if "disturbed" not in pts or not pts.disturbed.any():
        return []
    if scale is None or shapes is None:
        scale, shapes = flag_legend([DISTURBED_LABEL], [DISTURBED_COLOR], ["circle"])
    # the points' own data, filtered in the spec: a disturbed point's row is stored once
    return [
        alt.Chart(pts)
        .transform_filter("datum.disturbed")
        .transform_calculate(flag=json.dumps(DISTURBED_LABEL))
        .mark_point(shape="circle", size=RING_SIZE, filled=False, strokeWidth=RING_STROKE)
        .encode(
            x=alt.X("x:Q", scale=x_scale),
            y=alt.Y("y:Q", scale=y_scale),
            stroke=alt.Stroke(
                "flag:N",
                title="measurement",
                scale=scale,
                # the whole sentence, not "… took ti…"; the symbol drawn as the mark is
                legend=alt.Legend(labelLimit=400, symbolStrokeWidth=RING_STROKE),
            ),
            shape=alt.Shape("flag:N", title="measurement", scale=shapes),
            tooltip=[
                alt.Tooltip("config_id:N", title="config"),
                alt.Tooltip("cache_state:N", title="cache state"),
                alt.Tooltip("disturbance:N", title="disturbed by other processes"),
                alt.Tooltip("run_id:N", title="run"),
            ],
        )
    ]
