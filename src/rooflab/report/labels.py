"""Placing the roof labels of a Roofline chart so that they overprint neither each other nor a
roof line: each label is a box of text (turned along a slanted roof where it has an `angle`), and
each of its places is scored by what it covers, on the chart's pixels."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

# Roof labels: 11 px text, about 6.2 px per character (6.6 in bold, as the Roofline's are); each
# is tried above its line, then under it, then further out, and keeps the first place where it
# overprints nothing placed before it.
LABEL_CHAR_PX, BOLD_CHAR_PX, LABEL_HEIGHT_PX = 6.2, 6.6, 12
LABEL_DYS = (-7, 13, -20, 26)
FAR_DYS = (*LABEL_DYS, -33, 39)  # for a chart crowded with roofs: two more places further out
LINE_CLEARANCE_PX = 0.5  # a roof passing this close to a label's box runs through it
LINE_COST = 1e6  # a roof through a label is worse than any overlap of two labels
POINT_PX = 18  # the box a point covers (the largest)
SHEET_COST = 1e4  # a datasheet roof through a label: better than a measured one, or off the chart
GUIDE_COST = 1e3  # a point's guide line through a label: worse than overlap, not as bad as a roof
OFF_CHART_COST = 100  # per px² off the plot: the legend and axes are there
OVERLAP_COST = 100  # per px² of another label covered; a point covered costs 1 per px²

Polygon = list[tuple[float, float]]


def _to_px(x_domain, y_domain, size):
    (x0, x1), (y0, y1), (width, height) = x_domain, y_domain, size

    def to_px(x: float, y: float) -> tuple[float, float]:
        return (
            (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0)) * width,
            (math.log(y1) - math.log(y)) / (math.log(y1) - math.log(y0)) * height,
        )

    return to_px


def text_box(
    anchor: tuple[float, float], length: float, align: str, dy: float, angle: float, grow=0.0
) -> Polygon:
    """The corners (px) of a text label at `anchor` (px): `length` px of text starting 4 px right
    of it (`align` left) or ending 4 px left of it (right), centred `dy` px below it, the whole
    turned by `angle` degrees about the anchor (clockwise, as Vega turns text: its dx and dy apply
    after the turn); `grow` px added on every side."""
    u0, u1 = (4.0, 4.0 + length) if align == "left" else (-4.0 - length, -4.0)
    v0, v1 = dy - LABEL_HEIGHT_PX / 2, dy + LABEL_HEIGHT_PX / 2
    c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    ax, ay = anchor
    return [
        (ax + u * c - v * s, ay + u * s + v * c)
        for u, v in ((u0 - grow, v0 - grow), (u1 + grow, v0 - grow), (u1 + grow, v1 + grow),
                     (u0 - grow, v1 + grow))
    ]  # fmt: skip


def _area(polygon: Polygon) -> float:
    return (
        abs(
            sum(
                x0 * y1 - x1 * y0
                for (x0, y0), (x1, y1) in zip(polygon, polygon[1:] + polygon[:1], strict=True)
            )
        )
        / 2
    )


def _clip(subject: Polygon, clip: Polygon) -> Polygon:
    """Sutherland–Hodgman: the part of convex `subject` inside convex `clip` (either winding)."""
    sign = 1.0 if _signed(clip) > 0 else -1.0
    out = subject
    for (ax, ay), (bx, by) in zip(clip, clip[1:] + clip[:1], strict=True):
        if not out:
            break

        def side(p, ax=ax, ay=ay, bx=bx, by=by):
            return sign * ((bx - ax) * (p[1] - ay) - (by - ay) * (p[0] - ax))

        points, out = out, []
        for p, q in zip(points, points[1:] + points[:1], strict=True):
            sp, sq = side(p), side(q)
            if sp >= 0:
                out.append(p)
            if (sp >= 0) != (sq >= 0):
                t = sp / (sp - sq)
                out.append((p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])))
    return out


def _signed(polygon: Polygon) -> float:
    return sum(
        x0 * y1 - x1 * y0
        for (x0, y0), (x1, y1) in zip(polygon, polygon[1:] + polygon[:1], strict=True)
    )


def overlap(a: Polygon, b: Polygon) -> float:
    """The area (px²) two convex polygons share."""
    # Most pairs a label placement asks about lie apart: their bounding boxes say so cheaply.
    if (
        max(x for x, _ in a) <= min(x for x, _ in b)
        or max(x for x, _ in b) <= min(x for x, _ in a)
        or max(y for _, y in a) <= min(y for _, y in b)
        or max(y for _, y in b) <= min(y for _, y in a)
    ):
        return 0.0
    part = _clip(a, b)
    return _area(part) if len(part) >= 3 else 0.0


def crosses(polygon: Polygon, segment: tuple[tuple[float, float], tuple[float, float]]) -> bool:
    """Whether a line segment (px) touches a convex polygon: no separating axis among the
    polygon's edge normals and the segment's normal."""
    (sx0, sy0), (sx1, sy1) = segment
    edges = list(zip(polygon, polygon[1:] + polygon[:1], strict=True))
    axes = [(ay - by, bx - ax) for (ax, ay), (bx, by) in edges] + [(sy0 - sy1, sx1 - sx0)]
    for nx, ny in axes:
        if nx == 0 and ny == 0:
            continue
        shape = [x * nx + y * ny for x, y in polygon]
        line = (sx0 * nx + sy0 * ny, sx1 * nx + sy1 * ny)
        if max(line) < min(shape) or min(line) > max(shape):
            return False
    return True


def place_labels(
    labels: list[dict],
    text: str,
    x_domain: tuple[float, float],
    y_domain: tuple[float, float],
    size: tuple[int, int],
    lines: Iterable[tuple] = (),
    points: Iterable[tuple[float, ...]] = (),
    char_px: float = LABEL_CHAR_PX,
    dys: tuple[int, ...] = LABEL_DYS,
) -> list[dict]:
    """Each roof label with its place on a log-log chart of `size` (width, height px): its `x`,
    `y` and `align` (left: the text starts right of x), or one of its `anchors` ((x, y, align),
    tried in turn after them), and its `dy` (px, across the text, one of `dys`). It takes the
    first place (next to its line, the first two `dys`, at each anchor before further out at any)
    where its box (`char_px` per character, turned by its `angle`, degrees, if it has one)
    touches none of the `lines` (segments ((x, y), (x, y)) in data units, each with its cost:
    LINE_COST unless a third item gives another), covers no label placed before it nor a point
    of `points` ((x, y), or (x, y, weight): its cost per px² covered, 1 unless given), and stays
    on the chart. Labels are placed highest roofs first, so that of two close roofs the lower
    one's label is the one that moves; labels marked `yields` (datasheet roofs) after the
    others. Where every place is taken, the one that costs least: that crosses the fewest and
    cheapest lines, then covers least; each row returned carries its `cost` (0 where it covers
    and crosses nothing). A label may bring its own `dys`; one with a `max_cost` (a point's
    name) is optional: placed after all others, the most constrained first, and left out where
    no place costs at most that."""
    to_px = _to_px(x_domain, y_domain, size)
    width, height = size
    chart = [(0.0, 0.0), (float(width), 0.0), (float(width), float(height)), (0.0, float(height))]
    segments = [
        (to_px(*line[0]), to_px(*line[1]), line[2] if len(line) > 2 else LINE_COST)
        for line in lines
    ]
    half = POINT_PX / 2
    obstacles = [
        (
            [
                (px - half, py - half),
                (px + half, py - half),
                (px + half, py + half),
                (px - half, py + half),
            ],
            weight,
        )
        for (px, py), weight in (
            (to_px(x, y), weight)
            for x, y, weight in ((*point, 1.0)[:3] for point in points)
            if 0 < x < math.inf and 0 < y < math.inf
        )
    ]

    def scored(label: dict, placed: list[Polygon], every=False) -> list[tuple]:
        """Each place of the label, in the order tried, with its cost, its box and where it is;
        up to the first that costs nothing, or `every` one."""
        length = len(str(label[text])) * char_px
        angle = float(label.get("angle", 0.0) or 0.0)
        anchors: Sequence = [(label["x"], label["y"], label["align"]), *label.get("anchors", ())]
        places = label.get("dys", dys)
        # next to the line (the first two places) at each anchor before further out at any
        candidates = [
            (anchor, dy)
            for tier in (places[:2], places[2:4], places[4:])
            for anchor in anchors
            for dy in tier
        ]
        found = []
        for (x, y, align), dy in candidates:
            anchor = to_px(x, y)
            box = text_box(anchor, length, align, dy, angle)
            wide = text_box(anchor, length, align, dy, angle, LINE_CLEARANCE_PX)
            cost = OVERLAP_COST * sum(overlap(box, other) for other in placed)
            cost += sum(weight * overlap(box, other) for other, weight in obstacles)
            cost += OFF_CHART_COST * (_area(box) - overlap(box, chart))
            cost += sum(c for a, b, c in segments if crosses(wide, (a, b)))
            found.append((cost, box, {"x": x, "y": y, "align": align, "dy": dy}))
            if cost <= 1e-6 and not every:
                break
        return found

    def row(label: dict, best: tuple) -> dict:
        kept = {k: v for k, v in label.items() if k not in ("anchors", "dys")}
        return {**kept, **best[2], "cost": best[0]}

    placed: list[Polygon] = []
    out = []
    for label in sorted((la for la in labels if "max_cost" not in la), key=_placing_order):
        best = _cheapest(scored(label, placed))
        placed.append(best[1])
        out.append(row(label, best))
    # Optional labels (a point's name), after all others: the one with the fewest places within
    # its max_cost goes first, so that a name with one free place keeps it; one with none left
    # is left out (and takes no place from the others).
    pending = sorted((la for la in labels if "max_cost" in la), key=_placing_order)
    while pending:
        options = [scored(label, placed, every=True) for label in pending]
        free = [
            sum(c <= la["max_cost"] + 1e-6 for c, _, _ in o)
            for la, o in zip(pending, options, strict=True)
        ]
        i = min(range(len(pending)), key=lambda j: (free[j] == 0, free[j], j))
        label, best = pending.pop(i), _cheapest(options[i])
        if best[0] <= label["max_cost"] + 1e-6:
            placed.append(best[1])
            out.append(row(label, best))
    return out


def _cheapest(found: list[tuple]) -> tuple:
    """The first place that no later one beats by more than a rounding error."""
    best = found[0]
    for place in found[1:]:
        if place[0] < best[0] - 1e-6:
            best = place
    return best


def _placing_order(label: dict) -> tuple[bool, float]:
    """Measured roofs first, then yielding (datasheet) ones; highest first."""
    return bool(label.get("yields", False)), -label["y"]
