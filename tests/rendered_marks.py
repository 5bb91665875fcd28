"""What a chart draws, as Vega lays it out: the scene graph vl-convert renders its PNG and SVG
from (`rendered`), each text's box on the plot's pixels (its width measured by Vega with the font
it renders, turned and offset as Vega draws it) and each symbol's box, and the legend's entries
(`legend_symbols`). Used by the report tests that check what a reader of the PNG sees: labels
clear of each other and of the points, legend symbols that are the marks. Not a test module, so
pytest collects nothing here.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

Polygon = list[tuple[float, float]]


@dataclass(frozen=True)
class Text:
    """A text mark as drawn: its text, its box (px, the plot's frame) and what it labels: the
    data `y` of its row (a roof's value), from the item's description."""

    text: str
    box: Polygon
    angle: float
    bold: bool
    y: float | None


@dataclass(frozen=True)
class Symbol:
    """A point mark as drawn: centre (px), its box (the side: sqrt(size) plus its stroke, as
    Vega sizes every symbol), shape, fill and the fields of its tooltip (`description`)."""

    x: float
    y: float
    box: Polygon
    shape: str
    filled: bool
    stroke: str | None
    stroke_width: float
    fields: dict[str, str]


@dataclass(frozen=True)
class Scene:
    texts: list[Text]
    symbols: list[Symbol]
    legends: dict[str, list[tuple[str, dict]]]  # title -> [(label, its symbol item)]


@functools.cache
def text_size(text: str, font_size: float, bold: bool) -> tuple[float, float]:
    """(width, height) px of `text` as Vega measures it in vl-convert (the font it renders with):
    a chart of that text alone, padded to fit it, is as wide as the text (to the pixel)."""
    import vl_convert as vlc

    enter = {"x": 0, "y": 0, "text": text, "fontSize": font_size, "font": "sans-serif"}
    enter |= {"fontWeight": "bold" if bold else "normal", "align": "left", "baseline": "middle"}
    spec = {
        "$schema": "https://vega.github.io/schema/vega/v5.json",
        "width": 0,
        "height": 0,
        "padding": 0,
        "autosize": {"type": "pad"},
        "marks": [
            {"type": "text", "encode": {"enter": {k: {"value": v} for k, v in enter.items()}}}
        ],
    }
    scene = vlc.vega_to_scenegraph(spec)
    return float(scene["width"]), float(font_size)


def _text_box(item: dict) -> Polygon:
    """A text item's box as Vega bounds it (vega-scenegraph's text bound): `dx`, `dy` and the
    baseline's offset applied after the turn by `angle` about (x, y)."""
    size = float(item.get("fontSize", 11))
    width, height = text_size(item["text"], size, item.get("fontWeight") == "bold")
    dx, dy = float(item.get("dx", 0)), float(item.get("dy", 0))
    offset = {"top": 0.79, "middle": 0.30, "bottom": -0.21}.get(item.get("baseline"), 0.0)
    top = dy + offset * height - round(0.8 * height)
    left = dx - {"center": width / 2, "right": width}.get(item.get("align"), 0.0)
    turn = math.radians(item.get("angle", 0))
    c, s = math.cos(turn), math.sin(turn)
    x, y = item["x"], item["y"]
    return [
        (x + u * c - v * s, y + u * s + v * c)
        for u, v in ((left, top), (left + width, top), (left + width, top + height),
                     (left, top + height))
    ]  # fmt: skip


def _fields(description: str) -> dict[str, str]:
    return dict(part.split(": ", 1) for part in (description or "").split("; ") if ": " in part)


def _y(fields: dict[str, str]) -> float | None:
    try:
        return float(fields["y"])
    except (KeyError, ValueError):
        return None


def rendered(spec: dict) -> Scene:
    """The plot's texts (halos, which repeat a text in white, left out) and symbols, and its
    legends, from the scene graph of a single-view chart (a layer)."""
    import vl_convert as vlc

    root = vlc.vegalite_to_scenegraph(spec)["scenegraph"]
    texts, symbols, legends = [], [], {}

    def visit(node: dict) -> None:
        role = node.get("role")
        if role == "legend":
            legends.update(_legend(node))
            return
        if node.get("marktype") == "text" and role == "mark":
            for item in node.get("items", []):
                if item.get("stroke") == "white" or not item.get("text"):
                    continue
                fields = _fields(item.get("description", ""))
                texts.append(
                    Text(
                        item["text"], _text_box(item), float(item.get("angle", 0)),
                        item.get("fontWeight") == "bold", _y(fields),
                    )
                )  # fmt: skip
        elif node.get("marktype") == "symbol" and role == "mark":
            for item in node.get("items", []):
                half = (math.sqrt(item.get("size", 64)) + item.get("strokeWidth", 1)) / 2
                x, y = item["x"], item["y"]
                symbols.append(
                    Symbol(
                        x, y,
                        [(x - half, y - half), (x + half, y - half), (x + half, y + half),
                         (x - half, y + half)],
                        item.get("shape", "circle"), _filled(item), item.get("stroke"),
                        float(item.get("strokeWidth", 1)), _fields(item.get("description", "")),
                    )
                )  # fmt: skip
        for child in node.get("items", []) or []:
            if isinstance(child, dict):
                visit(child)

    visit(root)
    return Scene(texts, symbols, legends)


def _filled(item: dict) -> bool:
    fill = item.get("fill")
    return bool(fill) and fill not in ("transparent", "none") and item.get("fillOpacity", 1) > 0


def _legend(node: dict) -> dict[str, list[tuple[str, dict]]]:
    """A legend's title and its entries: (label, its symbol's item)."""
    title, symbols, labels = None, [], []

    def visit(item: dict) -> None:
        nonlocal title
        role = item.get("role")
        if role == "legend-title":
            title = next((i["text"] for i in item.get("items", [])), title)
        elif role == "legend-symbol":
            symbols.extend(item.get("items", []))
        elif role == "legend-label":
            labels.extend(i["text"] for i in item.get("items", []))
        for child in item.get("items", []) or []:
            if isinstance(child, dict):
                visit(child)

    visit(node)
    return {title: list(zip(labels, symbols, strict=True))} if title else {}


def legend_symbols(scene: Scene) -> dict[str, dict]:
    """Each legend entry's label and its symbol's item, across every legend."""
    return {label: item for entries in scene.legends.values() for label, item in entries}


# -- geometry ------------------------------------------------------------------------------------


def _edges(polygon: Polygon):
    return zip(polygon, polygon[1:] + polygon[:1], strict=True)


def intersect(a: Polygon, b: Polygon, tolerance: float = 0.5) -> bool:
    """Whether two convex polygons share more than a `tolerance` px sliver: no separating axis
    among their edges' normals with a gap of more than -tolerance."""
    for polygon in (a, b):
        for (x0, y0), (x1, y1) in _edges(polygon):
            nx, ny = y0 - y1, x1 - x0
            norm = math.hypot(nx, ny)
            if norm == 0:
                continue
            pa = [(x * nx + y * ny) / norm for x, y in a]
            pb = [(x * nx + y * ny) / norm for x, y in b]
            if max(pa) <= min(pb) + tolerance or max(pb) <= min(pa) + tolerance:
                return False
    return True


def distance(a: Polygon, b: Polygon) -> float:
    """The gap (px) between two axis-aligned boxes' bounds; 0 where they meet."""
    ax0, ax1 = min(x for x, _ in a), max(x for x, _ in a)
    ay0, ay1 = min(y for _, y in a), max(y for _, y in a)
    bx0, bx1 = min(x for x, _ in b), max(x for x, _ in b)
    by0, by1 = min(y for _, y in b), max(y for _, y in b)
    return math.hypot(max(bx0 - ax1, ax0 - bx1, 0.0), max(by0 - ay1, ay0 - by1, 0.0))


def x_range(box: Polygon) -> tuple[float, float]:
    return min(x for x, _ in box), max(x for x, _ in box)


def centre_y(box: Polygon) -> float:
    return sum(y for _, y in box) / len(box)


def overprinted_texts(scene: Scene) -> list[tuple[str, str]]:
    """Pairs of texts on the plot whose boxes overprint."""
    texts = scene.texts
    return [
        (a.text, b.text)
        for i, a in enumerate(texts)
        for b in texts[i + 1 :]
        if intersect(a.box, b.box)
    ]


def out_of_order_roof_labels(scene: Scene, roof_texts: set[str]) -> list[tuple[str, str]]:
    """(higher roof's label, lower roof's label) for each two horizontal roof labels one above
    the other (their boxes share some x) where the higher roof's label is printed lower."""
    flat = [t for t in scene.texts if t.text in roof_texts and t.angle % 360 == 0 and t.y]
    wrong = []
    for a in flat:
        for b in flat:
            (a0, a1), (b0, b1) = x_range(a.box), x_range(b.box)
            stacked = min(a1, b1) - max(a0, b0) > 0
            if stacked and a.y > b.y and centre_y(a.box) > centre_y(b.box):
                wrong.append((a.text, b.text))
    return wrong
