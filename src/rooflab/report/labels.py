"""Placing the labels of a Roofline chart so that they overprint neither each other nor a roof
line: each label is a box of text (turned along a slanted roof where it has an `angle`), and each
of its places is scored by what it covers, on the chart's pixels. The labels of horizontal roofs
keep the order of their lines: of two one above the other, the higher roof's is the upper one."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

# Roof labels: 11 px text, about 6.2 px per character (6.6 in bold, as the Roofline's are); each
# is tried above its line, then under it, then further out; the labels take the places that cost
# least together (_search), each as near its line as the others allow.
LABEL_CHAR_PX, BOLD_CHAR_PX, LABEL_HEIGHT_PX = 6.2, 6.6, 12
LABEL_DYS = (-7, 13, -20, 26)
# for a chart crowded with roofs (a CPU's six compute paths within a factor of 5): further out
FAR_DYS = (*LABEL_DYS, -33, 39, -46, 52, -59, 65, -72, 78, -85, 91)
LINE_CLEARANCE_PX = 0.5  # a roof passing this close to a label's box runs through it
# What a place costs, worst first: a higher roof's label under a lower one's (one above the
# other) reads as the wrong roof's; a roof through a label; two labels overprinting (unreadable,
# worse than covering any point or guide); a datasheet roof through it; a point's guide line
# through it; off the plot (per px²: the legend and axes are there); over a point (per px²).
ORDER_COST = 1e7
LINE_COST = 1e6
LABEL_OVERLAP_COST = 1e5  # and OVERLAP_COST per px² of the other label covered
SHEET_COST = 1e4
CROWDED_COST = 1e4  # a point's name too close to another point's mark, or over its own
GUIDE_COST = 1e3
OFF_CHART_COST = 100
OVERLAP_COST = 100
POINT_PX = 18  # the box a point covers where it says no other (the largest GEMM point)

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
    of it (`align` left), ending 4 px left of it (right) or centred on it (center), centred `dy`
    px below it, the whole turned by `angle` degrees about the anchor (clockwise, as Vega turns
    text: its dx and dy apply after the turn); `grow` px added on every side."""
    u0, u1 = {
        "left": (4.0, 4.0 + length),
        "right": (-4.0 - length, -4.0),
        "center": (-length / 2, length / 2),
    }[align]
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


class Place(NamedTuple):
    """One place of a label: what it costs alone (lines, points, off the chart), its box (px),
    where it is ({x, y, align, dy}), its rank in the order tried, and, for a level label, its
    box's x range and centre (px) and its roof's value."""

    cost: float
    box: Polygon
    where: dict
    rank: int
    level: tuple[float, float, float, float] | None


class _Plot:
    """What stays where it is while the labels move: the roof lines and guides as segments, and
    the points' marks, on the chart's pixels; each place's cost alone."""

    def __init__(self, x_domain, y_domain, size, lines, points):
        import numpy as np

        self.to_px = _to_px(x_domain, y_domain, size)
        width, height = size
        self.chart = [(0.0, 0.0), (float(width), 0.0), (float(width), float(height)),
                      (0.0, float(height))]  # fmt: skip
        self.segments = [
            (self.to_px(*line[0]), self.to_px(*line[1]), line[2] if len(line) > 2 else LINE_COST)
            for line in lines
        ]
        ends = np.array([(*a, *b) for a, b, _ in self.segments], dtype=float).reshape(-1, 4)
        reach = LINE_CLEARANCE_PX
        self.segment_x = (
            np.minimum(ends[:, 0], ends[:, 2]) - reach,
            np.maximum(ends[:, 0], ends[:, 2]) + reach,
        )
        self.segment_y = (
            np.minimum(ends[:, 1], ends[:, 3]) - reach,
            np.maximum(ends[:, 1], ends[:, 3]) + reach,
        )
        self.marks = [
            (*self.to_px(x, y), float(weight), float(side) / 2, key)
            for x, y, weight, side, key in ((*point, 1.0, POINT_PX, None)[:5] for point in points)
            if 0 < x < math.inf and 0 < y < math.inf
        ]
        self.mark_x = np.array([m[0] for m in self.marks], dtype=float)
        self.mark_y = np.array([m[1] for m in self.marks], dtype=float)
        self.mark_half = np.array([m[3] for m in self.marks], dtype=float)
        self.mark_keys = np.array([m[4] for m in self.marks], dtype=object)
        roofs = [(a, b, cost) for a, b, cost in self.segments if cost >= SHEET_COST]
        self.roof_a = np.array([a for a, _, _ in roofs], dtype=float).reshape(-1, 2)
        self.roof_b = np.array([b for _, b, _ in roofs], dtype=float).reshape(-1, 2)
        self.roof_cost = np.array([cost for _, _, cost in roofs], dtype=float)

    def places(self, label: dict, text: str, char_px: float, dys: tuple[int, ...]) -> list[Place]:
        """Each place of the label, in the order tried (next to its line, the first two `dys`,
        at each anchor before further out at any; an anchor with its own dy once, with the
        first), with what it costs alone."""
        length = len(str(label[text])) * char_px
        angle = float(label.get("angle", 0.0) or 0.0)
        anchors: Sequence = [(label["x"], label["y"], label["align"]), *label.get("anchors", ())]
        places = label.get("dys", dys)
        tiers = [places[i : i + 2] for i in range(0, len(places), 2)]
        tried = [
            ((x, y, align), dy)
            for n, tier in enumerate(tiers)
            for x, y, align, *own_dy in anchors
            for dy in (own_dy if own_dy else tier)
            if not (own_dy and n)
        ]
        level = angle == 0.0 and "max_cost" not in label
        found = []
        for rank, ((x, y, align), dy) in enumerate(tried):
            anchor = self.to_px(x, y)
            box = text_box(anchor, length, align, dy, angle)
            wide = text_box(anchor, length, align, dy, angle, LINE_CLEARANCE_PX)
            cost = self._line_cost(wide) + self._point_cost(box, label)
            if "max_cost" not in label:  # a roof's label
                cost += self._between_cost(anchor, box)
            cost += OFF_CHART_COST * (_area(box) - overlap(box, self.chart))
            xs = [px for px, _ in box]
            span = (min(xs), max(xs), sum(py for _, py in box) / 4, label["y"]) if level else None
            found.append(Place(cost, box, {"x": x, "y": y, "align": align, "dy": dy}, rank, span))
        return found

    def _between_cost(self, anchor: tuple[float, float], box: Polygon) -> float:
        """What the roofs between a label and its line cost (each its own cost, as if it ran
        through the label): those that the leader from its anchor, on its line, to its centre
        crosses. A label beyond another roof reads as that roof's."""
        import numpy as np

        if not len(self.roof_cost):
            return 0.0
        start = np.array(anchor, dtype=float)
        leader = (
            np.array([sum(x for x, _ in box) / len(box), sum(y for _, y in box) / len(box)]) - start
        )

        def cross(u, v):
            return u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]

        along = self.roof_b - self.roof_a
        denominator = cross(leader[None, :], along)
        offset = self.roof_a - start
        with np.errstate(divide="ignore", invalid="ignore"):
            t = cross(offset, along) / denominator
            u = cross(offset, leader[None, :]) / denominator
        met = (np.abs(denominator) > 1e-9) & (t > 1e-3) & (t <= 1) & (u >= 0) & (u <= 1)
        return float(self.roof_cost[met].sum())

    def _line_cost(self, wide: Polygon) -> float:
        import numpy as np

        xs, ys = [x for x, _ in wide], [y for _, y in wide]
        (x0, x1), (y0, y1) = self.segment_x, self.segment_y
        hit = (x1 >= min(xs)) & (x0 <= max(xs)) & (y1 >= min(ys)) & (y0 <= max(ys))
        return sum(
            self.segments[i][2]
            for i in np.nonzero(hit)[0]
            if crosses(wide, (self.segments[i][0], self.segments[i][1]))
        )

    def _point_cost(self, box: Polygon, label: dict) -> float:
        """The marks a place covers (per px², at each point's weight), or, for a label kept
        `clearance` px from every point but its `own`, CROWDED_COST per mark too close."""
        import numpy as np

        xs, ys = [x for x, _ in box], [y for _, y in box]
        clearance = float(label.get("clearance", 0.0))
        own = (self.mark_keys == label["own"]) if clearance else None
        grow = np.where(own, 0.0, clearance) if clearance else 0.0
        half = self.mark_half + grow
        hit = (self.mark_x + half > min(xs)) & (self.mark_x - half < max(xs))
        hit &= (self.mark_y + half > min(ys)) & (self.mark_y - half < max(ys))
        cost = 0.0
        for i in np.nonzero(hit)[0]:
            x, y, weight, side, _ = self.marks[i]
            side += 0.0 if not clearance or own[i] else clearance
            square = [(x - side, y - side), (x + side, y - side), (x + side, y + side),
                      (x - side, y + side)]  # fmt: skip
            covered = overlap(box, square)
            if clearance:
                cost += CROWDED_COST if covered > 0 else 0.0
            else:
                cost += weight * covered
        return cost


# A label far from its line reads as another roof's: per px² of its dy, a measured roof's
# label costs FAR_COST (91 px away: about a point covered), a datasheet roof's less (it yields).
FAR_COST, SHEET_FAR_COST = 0.2, 0.04
BEAM = 100  # partial placements kept while the labels are placed one by one
KEPT_PLACES = 80  # per label, its cheapest places alone (the first tried where they tie)


LEFT_OUT_COST = 5 * GUIDE_COST  # an optional label left out: worse than any place in max_cost
_NOWHERE = [(-1e9, -1e9), (-1e9 + 1, -1e9), (-1e9 + 1, -1e9 + 1), (-1e9, -1e9 + 1)]
LEFT_OUT = Place(LEFT_OUT_COST, _NOWHERE, {"dy": 0}, 1 << 30, None)


class _Places:
    """A label's kept places as arrays: what each costs alone, its box's corners and bounds,
    how far it is from its line (dy²) and, for a level label, its x range, centre and roof."""

    def __init__(self, places: list[Place], label: dict):
        import numpy as np

        self.places = places
        self.cost = np.array([p.cost for p in places])
        self.corners = np.array([p.box for p in places], dtype=float)  # (K, 4, 2)
        self.x0, self.x1 = self.corners[:, :, 0].min(1), self.corners[:, :, 0].max(1)
        self.y0, self.y1 = self.corners[:, :, 1].min(1), self.corners[:, :, 1].max(1)
        # a point's name is beside its point wherever it goes
        far = 0.0 if "max_cost" in label else 1.0
        self.near = np.array([far * float(p.where["dy"]) ** 2 for p in places])
        self.rank = np.array([p.rank for p in places])
        self.level = places[0].level is not None
        self.upright = float(label.get("angle", 0.0) or 0.0) % 180 == 0
        self.roof = float(label["y"])
        self.yields = bool(label.get("yields", False))


def _together(a: _Places, b: _Places):
    """What each place of `a` costs with each place of `b` (a matrix): LABEL_OVERLAP_COST plus
    OVERLAP_COST per px² where their boxes overprint (the area of their bounds' overlap: exact
    for upright boxes), ORDER_COST where both are level labels, one above the other, their roofs
    the other way round."""
    import numpy as np

    wide = np.minimum(a.x1[:, None], b.x1[None, :]) - np.maximum(a.x0[:, None], b.x0[None, :])
    tall = np.minimum(a.y1[:, None], b.y1[None, :]) - np.maximum(a.y0[:, None], b.y0[None, :])
    meet = (wide > 1e-6) & (tall > 1e-6)
    if not (a.upright and b.upright):
        meet &= ~_separated(a.corners, b.corners)
    area = np.where(meet, np.clip(wide, 0, None) * np.clip(tall, 0, None), 0.0)
    cost = np.where(meet, LABEL_OVERLAP_COST + OVERLAP_COST * area, 0.0)
    if a.level and b.level and a.roof != b.roof:
        centre_a = (a.y0 + a.y1) / 2
        centre_b = (b.y0 + b.y1) / 2
        lower = (centre_a[:, None] > centre_b[None, :]) == (a.roof > b.roof)
        cost += np.where((wide > 0) & lower, ORDER_COST, 0.0)
    return cost


def _separated(a, b):
    """Whether each box of `a` ((K, 4, 2) corners) and each of `b` have a separating axis among
    their edges' normals (the separating axis theorem; a box is convex)."""
    import numpy as np

    def normals(boxes, edge: int):
        along = boxes[:, edge + 1] - boxes[:, edge]
        normal = np.stack([-along[:, 1], along[:, 0]], axis=1)
        return normal / np.maximum(np.linalg.norm(normal, axis=1, keepdims=True), 1e-12)

    apart = np.zeros((len(a), len(b)), dtype=bool)
    for edge in (0, 1):  # a box's two edge directions
        normal = normals(a, edge)  # of a's box k, against every box of b
        own, other = np.einsum("kcd,kd->kc", a, normal), np.einsum("jcd,kd->kjc", b, normal)
        low, high = own.min(1)[:, None], own.max(1)[:, None]
        apart |= (high <= other.min(2) + 1e-6) | (other.max(2) <= low + 1e-6)
        normal = normals(b, edge)  # of b's box j, against every box of a
        own, other = np.einsum("jcd,jd->jc", b, normal), np.einsum("kcd,jd->kjc", a, normal)
        low, high = own.min(1)[None, :], own.max(1)[None, :]
        apart |= (high <= other.min(2) + 1e-6) | (other.max(2) <= low + 1e-6)
    return apart


def _search(labels: list[dict], options: list[list[Place]]) -> list[Place]:
    """A place per label with the least cost together, each label's distance from its line
    counted (FAR_COST): the labels taken in turn (highest roof first), keeping the BEAM
    cheapest partial placements; where several cost the same, the labels taken first keep the
    places tried first."""
    import numpy as np

    kept = [
        _Places(sorted(places, key=lambda p: (p.cost, p.rank))[:KEPT_PLACES], label)
        for places, label in zip(options, labels, strict=True)
    ]
    cost = np.zeros(1)
    picks = np.zeros((1, 0), dtype=int)
    for i, places in enumerate(kept):
        far = (SHEET_FAR_COST if places.yields else FAR_COST) * places.near
        grown = cost[:, None] + (places.cost + far)[None, :]
        for k in range(i):
            grown += _together(places, kept[k])[:, picks[:, k]].T
        parent, choice = np.indices(grown.shape)
        order = np.lexsort(
            (places.rank[choice].ravel(), parent.ravel(), np.round(grown, 6).ravel())
        )[:BEAM]
        cost = grown.ravel()[order]
        picks = np.column_stack([picks[parent.ravel()[order]], choice.ravel()[order]])
    return [kept[i].places[j] for i, j in enumerate(picks[0])]


def place_labels(
    labels: list[dict],
    text: str,
    x_domain: tuple[float, float],
    y_domain: tuple[float, float],
    size: tuple[int, int],
    lines: Iterable[tuple] = (),
    points: Iterable[tuple] = (),
    char_px: float = LABEL_CHAR_PX,
    dys: tuple[int, ...] = LABEL_DYS,
) -> list[dict]:
    """Each label with its place on a log-log chart of `size` (width, height px): its `x`, `y`
    and `align` (left: the text starts right of x; right: it ends left of it; center), or one of
    its `anchors` ((x, y, align), tried in turn after them; (x, y, align, dy): that place only),
    and its `dy` (px, across the text, one of `dys`). A place costs nothing where the label's
    box (`char_px` per character, turned by its `angle`, degrees, if it has one) touches none of
    the `lines` (segments ((x, y), (x, y)) in data units, each with its cost: LINE_COST unless a
    third item gives another), covers no other label nor a point of `points`, stays on the chart
    and, for a level label (no angle), keeps the order of the roofs: of two level labels one
    above the other (sharing some x), the higher roof's (its `y`) is the upper one. `points`:
    (x, y), or (x, y, weight, px, key): what covering it costs per px² (1 unless given), the side
    of its marks' box (POINT_PX unless given) and whose point it is. The labels get the places
    that cost least together (`_search`); where several do, each label in turn its first free
    place (highest roofs first, so that of two close roofs the lower one's label is the one that
    moves; labels marked `yields`, datasheet roofs, after the others). Each row returned carries
    its `cost` alone (0 where it covers and crosses nothing). A label may bring its own `dys`;
    one with a `max_cost` (a point's name) is optional: taken after all others, the most
    constrained first, and left out where no place costs at most that or where no such place is
    free (LEFT_OUT_COST); with a `clearance` (px) it is kept that far from the mark of every
    point but its `own` (the key of its points), whose mark it need only not cover."""
    plot = _Plot(x_domain, y_domain, size, lines, points)
    required = sorted((la for la in labels if "max_cost" not in la), key=_placing_order)
    options = [plot.places(label, text, char_px, dys) for label in required]
    # Optional labels (a point's name) after all others, the one with the fewest places within
    # its max_cost first, each with one more place: left out (LEFT_OUT_COST; it takes no place
    # from the others).
    names = [la for la in labels if "max_cost" in la]
    free = [
        [p for p in plot.places(label, text, char_px, dys) if p.cost <= label["max_cost"] + 1e-6]
        for label in names
    ]
    for i in sorted(range(len(names)), key=lambda i: (len(free[i]), _placing_order(names[i]))):
        required.append(names[i])
        options.append([*free[i][: KEPT_PLACES - 1], LEFT_OUT])
    chosen = _search(required, options) if required else []
    return [
        {**{k: v for k, v in label.items() if k not in ("anchors", "dys")}, **place.where}
        | {"cost": place.cost}
        for label, place in zip(required, chosen, strict=True)
        if place is not LEFT_OUT
    ]


def _placing_order(label: dict) -> tuple[bool, float]:
    """Measured roofs first, then yielding (datasheet) ones; highest first."""
    return bool(label.get("yields", False)), -label["y"]
