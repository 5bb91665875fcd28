"""How the charts mark a measurement other processes took time from (conditions.disturbance): a
ring around its point on a Roofline, its own colour in the sample distributions."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

DISTURBED_LABEL = "disturbed: other processes took time from the measurement"
DISTURBED_COLOR = "#7b3294"


def disturbed_rings(pts: pd.DataFrame, x_scale, y_scale, scale=None) -> list:
    """A ring around each disturbed point, under the points, with its own legend entry; none
    (and no legend entry) where no point is disturbed. `scale`: the stroke scale, where other
    marks of the chart share its legend (its domain holds DISTURBED_LABEL)."""
    import altair as alt

    if "disturbed" not in pts or not pts.disturbed.any():
        return []
    # the points' own data, filtered in the spec: a disturbed point's row is stored once
    return [
        alt.Chart(pts)
        .transform_filter("datum.disturbed")
        .transform_calculate(flag=json.dumps(DISTURBED_LABEL))
        .mark_point(shape="circle", size=260, filled=False, strokeWidth=2)
        .encode(
            x=alt.X("x:Q", scale=x_scale),
            y=alt.Y("y:Q", scale=y_scale),
            stroke=alt.Stroke(
                "flag:N",
                title="measurement",
                scale=scale or alt.Scale(domain=[DISTURBED_LABEL], range=[DISTURBED_COLOR]),
                legend=alt.Legend(labelLimit=400),  # the whole sentence, not "… took ti…"
            ),
            tooltip=[
                alt.Tooltip("config_id:N", title="config"),
                alt.Tooltip("cache_state:N", title="cache state"),
                alt.Tooltip("disturbance:N", title="disturbed by other processes"),
                alt.Tooltip("run_id:N", title="run"),
            ],
        )
    ]
