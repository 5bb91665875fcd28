"""Placing the roof labels of a Roofline chart so that they do not overprint each other."""

from __future__ import annotations

import math

# Roof labels: 11 px text, about 6 px per character; each is tried above its line, then under
# it, then further out, and keeps the first place where it overprints no label placed before it.
LABEL_CHAR_PX, LABEL_HEIGHT_PX = 6.2, 12
LABEL_DYS = (-7, 13, -20, 26)


def place_labels(
    labels: list[dict],
    text: str,
    x_domain: tuple[float, float],
    y_domain: tuple[float, float],
    size: tuple[int, int],
) -> list[dict]:
    """Each roof label with its `dy` (px) on a log-log chart of `size` (width, height px): its box
    (from the text's length, left or right of x by `align`) is placed at the first of LABEL_DYS
    where it overlaps no label placed before it, highest roofs first, so that of two close roofs
    the lower one's label is the one that moves; where every place overlaps, the one that
    overlaps least. Labels marked `yields` (datasheet roofs) are placed after all others."""
    (x0, x1), (y0, y1), (width, height) = x_domain, y_domain, size

    def box(label: dict, dy: int) -> tuple[float, float, float, float]:
        x = (math.log(label["x"]) - math.log(x0)) / (math.log(x1) - math.log(x0)) * width
        y = (math.log(y1) - math.log(label["y"])) / (math.log(y1) - math.log(y0)) * height + dy
        length = len(str(label[text])) * LABEL_CHAR_PX
        left = x + 4 if label["align"] == "left" else x - 4 - length
        return left, left + length, y - LABEL_HEIGHT_PX / 2, y + LABEL_HEIGHT_PX / 2

    def overlap(a: tuple, b: tuple) -> float:
        return max(0.0, min(a[1], b[1]) - max(a[0], b[0])) * max(
            0.0, min(a[3], b[3]) - max(a[2], b[2])
        )

    placed, out = [], []
    for label in sorted(labels, key=lambda row: (row.get("yields", False), -row["y"])):
        costs = [
            (sum(overlap(box(label, dy), other) for other in placed), i)
            for i, dy in enumerate(LABEL_DYS)
        ]
        dy = LABEL_DYS[min(costs)[1]]
        placed.append(box(label, dy))
        out.append({**label, "dy": dy})
    return out
