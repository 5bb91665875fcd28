"""What the charts share about their axes: the plot sizes, where a Roofline's roofs run, and how
times and sizes are labelled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rooflab.units import format_quantity

if TYPE_CHECKING:
    import pandas as pd

WIDTH = 640
ROOFLINE_SIZE = (WIDTH, 480)  # width, height (px) of the Roofline charts' plot area


@dataclass(frozen=True)
class RoofGeometry:
    """Where a Roofline's roofs run, as x (intensity) ranges on a log-log chart."""

    lo: float  # the x axis
    hi: float
    bandwidth: dict[str, tuple[float, float]]  # level -> x from, x to (the roof is y = B·x)
    compute: dict[str, tuple[float, float]]  # path -> x from, x to (the roof is y = peak)


def roof_geometry(
    peaks: dict[str, float],
    bandwidths: dict[str, float],
    intensities: list[float],
    axis: tuple[float, float] | None = None,
) -> RoofGeometry:
    """The x axis (unless given) spans every point and every ridge with a 4x margin (and always
    1 FLOP/B); each bandwidth roof rises from the left edge to where it meets the highest compute
    roof; each compute roof runs flat from where it meets the fastest level to the right edge."""
    if axis is None:
        ridges = [p / b for p in peaks.values() for b in bandwidths.values()]
        xs = [*intensities, *ridges, 1.0]
        axis = min(xs) / 4, max(xs) * 4
    lo, hi = axis

    def on_axis(x: float) -> float:  # a given axis may not reach every ridge
        return min(max(x, lo), hi)

    top = max(peaks.values(), default=None)
    fastest = max(bandwidths.values(), default=None)
    return RoofGeometry(
        lo,
        hi,
        {level: (lo, on_axis(top / bw) if top else hi) for level, bw in bandwidths.items()},
        {path: (on_axis(peak / fastest) if fastest else lo, hi) for path, peak in peaks.items()},
    )


# d3's "~s" alone prints 0.01 s as "10m", which reads as minutes: time axes and tooltips carry
# the unit with its prefix ("10ms", "10 ms")
SECONDS_AXIS = {
    "format": "~s",
    "labelExpr": "datum.label && datum.label + 's'",
    "labelOverlap": "greedy",  # the unit makes labels wider: "10µs" and "20µs" no longer touch
}


def with_time_text(frame: pd.DataFrame, *fields: str) -> pd.DataFrame:
    """`<field>_text` for each time field (seconds) the frame has, printed with its unit."""
    return frame.assign(
        **{
            f"{f}_text": [format_quantity(v, "time", 3) for v in frame[f]]
            for f in fields
            if f in frame
        }
    )


def bytes_label(n: float) -> str:
    """A size in binary units: "1.5 MiB"."""
    for factor, prefix in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= factor:
            return f"{n / factor:.4g} {prefix}"
    return f"{n:.0f} B"


def utc_text(when, seconds: bool = False) -> str:
    """A run's start in UTC, "2026-06-01 00:00 UTC" (with its seconds where `seconds`)."""
    import pandas as pd

    if when is None or (not isinstance(when, str) and pd.isna(when)):
        return "date not recorded"
    stamp = pd.Timestamp(when)
    stamp = stamp.tz_convert("UTC") if stamp.tzinfo else stamp
    return f"{stamp:%Y-%m-%d %H:%M:%S} UTC" if seconds else f"{stamp:%Y-%m-%d %H:%M} UTC"


def chart_title(text: str, subtitle: str | list[str]):
    """A chart's title, left-aligned, with its subtitle (how to read the marks) in grey."""
    import altair as alt

    return alt.Title(text, subtitle=subtitle, anchor="start", subtitleColor="#444")
