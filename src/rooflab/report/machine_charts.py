"""The machines of the store side by side, at the top of a page of more than one (view
report_scopes): each machine's Roofline (its ceiling_summary roofs, its latest_model_points) on
the same x and y axes, so that a roof or a point higher or further right is higher or further
right on the page, and its ceilings in one table, a column per machine. The panels are in FLOP/s:
an integer path's OP/s ceiling (int8_tensor) and the integer GEMMs' points are left off them (each
machine's Integer Roofline has them); the table gives every ceiling in its own unit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rooflab.report.axes import chart_title, roof_geometry
from rooflab.report.page import Chart, table_html
from rooflab.report.roofline_chart import (
    BANDWIDTH_LEVELS,
    FMA_PATHS,
    LEVEL_COLOURS,
    LIBRARY_PATHS,
    PATH_COLOURS,
    points_in,
    roofs_in,
)
from rooflab.units import format_quantity
from rooflab.vocabulary import CacheState

if TYPE_CHECKING:
    import altair as alt
    import pandas as pd

CHART_NAME = "machines"  # no machine's prefix: the one chart of the page above the machines
PANEL_SIZE = (400, 320)
COLUMNS = 2  # panels per row: two fit the page beside the legend
MISSING = "–"
RATE_KINDS = {"B/s": "byte_rate", "FLOP/s": "flop_rate", "OP/s": "op_rate"}  # by unit

MACHINES_HOW = (
    "Each machine's Roofline beside the others', on the same axes: its measured roofs (the "
    "best kernel per memory level, each compute path; dashed: a library path), each roof in the "
    "same colour on every machine, and its newest point per configuration and cache state "
    "(filled: warm cache, hollow: cold). A roof higher on one panel than on another is that much "
    "faster there. The table gives the ceilings machine by machine, each in its unit (an "
    "integer path's in OP/s, left off the panels, whose axes are in FLOP/s)."
)


@dataclass
class MachineRoofs:
    """What one machine's panel draws: its section's title, its ceiling_summary rows (roofs)
    and its latest_model_points rows."""

    title: str
    machine_id: str
    ceilings: pd.DataFrame
    points: pd.DataFrame


def _distinct_titles(machines: list[MachineRoofs]) -> list[MachineRoofs]:
    """Two nodes of one type share host, backend and device: their machine ids tell them apart
    (a panel and a table column per title)."""
    titles = [m.title for m in machines]
    return [
        MachineRoofs(f"{m.title} · {m.machine_id}", m.machine_id, m.ceilings, m.points)
        if titles.count(m.title) > 1
        else m
        for m in machines
    ]


def machines_chart(machines: list[MachineRoofs]) -> Chart | None:
    """The chart above the machines' sections, with the ceilings table under it; None for a
    store of one machine (its own section has its Roofline)."""
    if len(machines) < 2 or all(m.ceilings.empty for m in machines):
        return None
    machines = _distinct_titles(machines)
    table = table_html(ceilings_table(machines), "machine-ceilings")
    return Chart(
        CHART_NAME, "Machines side by side", MACHINES_HOW, machines_roofline(machines), table
    )


def _ordered(names, preferred: tuple[str, ...]) -> list[str]:
    """`names` in the preferred order (fastest level, FMA paths first), the rest sorted after."""
    names = set(names)
    return [n for n in preferred if n in names] + sorted(names - set(preferred))


def roof_names(machines: list[MachineRoofs]) -> tuple[list[str], list[str]]:
    """Every bandwidth level and compute path of any machine, in drawing order."""
    rows = [m.ceilings for m in machines if not m.ceilings.empty]  # every unit: the table's
    levels = {n for c in rows for n in c.name[c.kind == "bandwidth"]}
    paths = {n for c in rows for n in c.name[c.kind == "compute"]}
    return _ordered(levels, BANDWIDTH_LEVELS), _ordered(paths, FMA_PATHS + LIBRARY_PATHS)


def _roofs(ceilings: pd.DataFrame) -> tuple[dict, dict, set]:
    """{level: B/s}, {path: FLOP/s} and the library paths (dashed) of one machine (its FLOP/s
    compute roofs only)."""
    ceilings = roofs_in(ceilings, "FLOP")
    bandwidth = ceilings[ceilings.kind == "bandwidth"]
    compute = ceilings[ceilings.kind == "compute"]
    library = {
        r.name for r in compute.itertuples() if r.name in LIBRARY_PATHS or r.kernel == "matmul"
    }
    return (
        dict(zip(bandwidth.name, bandwidth.value.astype(float), strict=True)),
        dict(zip(compute.name, compute.value.astype(float), strict=True)),
        library,
    )


def _intensities(points: pd.DataFrame) -> list[float]:
    return [float(x) for x in points_in(points, "FLOP").get("intensity", []) if x > 0]


def machines_roofline(machines: list[MachineRoofs]) -> alt.ConcatChart:
    """A Roofline panel per machine on one shared log-log pair of axes: every roof runs across
    the shared x axis (roof_geometry on the common axis), and a roof has one colour on all."""
    import altair as alt
    import pandas as pd

    # the shared x axis spans every machine's ridges and points, as each one's own would
    own = [
        roof_geometry(*_roofs(m.ceilings)[:2], _intensities(m.points))
        for m in machines
        if not m.ceilings.empty
    ]
    axis = (min(g.lo for g in own), max(g.hi for g in own))
    lines, points = [], []
    for machine in machines:
        bws, peaks, library = _roofs(machine.ceilings)
        roofs = roof_geometry(peaks, bws, [], axis=axis)
        for level, bw in bws.items():
            lines += [
                {"machine": machine.title, "roof": level, "library": False, "x": x, "y": bw * x}
                | {"value": format_quantity(bw, "byte_rate", 4)}
                for x in roofs.bandwidth[level]
            ]
        for path, peak in peaks.items():
            lines += [
                {"machine": machine.title, "roof": path, "library": path in library}
                | {"x": x, "y": peak, "value": format_quantity(peak, "flop_rate", 4)}
                for x in roofs.compute[path]
            ]
        drawn = points_in(machine.points, "FLOP")
        if not drawn.empty:
            points.append(
                drawn.assign(
                    machine=machine.title,
                    x=drawn.intensity,
                    y=drawn.achieved_flops_per_s,
                    median=[format_quantity(t, "time", 3) for t in drawn.median_s],
                )[["machine", "config_id", "cache_state", "x", "y", "median", "efficiency"]]
            )
    lines_df = pd.DataFrame(lines)
    points_df = pd.concat(points, ignore_index=True) if points else pd.DataFrame()
    ys = [y for y in [*lines_df.y, *points_df.get("y", [])] if y > 0]
    x_scale = alt.Scale(type="log", domain=list(axis), nice=False)
    y_scale = alt.Scale(type="log", domain=[min(ys) / 2, max(ys) * 2], nice=False)
    levels, paths = roof_names(machines)
    palette = iter(PATH_COLOURS * (1 + len(paths) // len(PATH_COLOURS)))
    spare = iter(PATH_COLOURS[::-1] * (1 + len(levels) // len(PATH_COLOURS)))
    colours = [LEVEL_COLOURS.get(lv) or next(spare) for lv in levels]
    colours += [next(palette) for _ in paths]
    roof_colour = alt.Color(
        "roof:N",
        title="roof (same colour on every machine)",
        scale=alt.Scale(domain=levels + paths, range=colours),
        legend=alt.Legend(symbolType="stroke", symbolStrokeWidth=3, titleLimit=400),
    )
    x = alt.X(
        "x:Q", scale=x_scale, title="Arithmetic intensity (FLOP/byte)", axis=alt.Axis(format="~g")
    )
    y = alt.Y("y:Q", scale=y_scale, title="Performance (FLOP/s)", axis=alt.Axis(format="~s"))
    panels = []
    for machine in machines:
        roof_rows = lines_df[lines_df.machine == machine.title]
        layers = [
            alt.Chart(roof_rows)
            .mark_line(strokeWidth=1.8)
            .encode(
                x=x,
                y=y,
                color=roof_colour,
                detail=alt.Detail("roof:N"),
                strokeDash=alt.condition("datum.library", alt.value([6, 4]), alt.value([1, 0])),
                tooltip=[
                    alt.Tooltip("machine:N", title="machine"),
                    alt.Tooltip("roof:N", title="roof"),
                    alt.Tooltip("value:N", title="ceiling"),
                ],
            )
        ]
        if not points_df.empty and (points_df.machine == machine.title).any():
            layers.append(_point_layer(points_df[points_df.machine == machine.title], x, y))
        panels.append(
            alt.layer(*layers).properties(
                width=PANEL_SIZE[0],
                height=PANEL_SIZE[1],
                title=alt.Title(machine.title, anchor="start", fontSize=12),
            )
        )
    return (
        alt.concat(*panels, columns=COLUMNS)
        .resolve_scale(x="shared", y="shared", color="shared")
        .properties(
            title=chart_title(
                f"Roofline of {len(machines)} machines side by side (shared axes)",
                "each machine's newest ceilings and newest point per configuration; "
                "filled: warm cache, hollow: cold",
            )
        )
    )


def _point_layer(rows: pd.DataFrame, x, y) -> alt.Chart:
    import altair as alt

    warm = f"datum.cache_state == '{CacheState.WARM.value}'"
    return (
        alt.Chart(rows)
        .mark_point(size=45, strokeWidth=1.5, color="#333", opacity=1)
        .encode(
            x=x,
            y=y,
            fill=alt.condition(warm, alt.value("#333"), alt.value("white")),
            tooltip=[
                alt.Tooltip("machine:N", title="machine"),
                alt.Tooltip("config_id:N", title="config"),
                alt.Tooltip("cache_state:N", title="cache state"),
                alt.Tooltip("median:N", title="median time"),
                alt.Tooltip("y:Q", title="achieved (FLOP/s)", format=".3~s"),
                alt.Tooltip("x:Q", title="intensity (FLOP/byte)", format=".3~g"),
                alt.Tooltip("efficiency:Q", title="efficiency", format=".1%"),
            ],
        )
    )


def ceilings_table(machines: list[MachineRoofs]) -> pd.DataFrame:
    """A row per ceiling (kind and level or path), a column per machine: its value with its
    unit and the kernel it came from, or a dash where the machine has no such ceiling."""
    import pandas as pd

    levels, paths = roof_names(machines)
    rows = [("bandwidth", name) for name in levels] + [("compute", name) for name in paths]
    table = {"ceiling": [f"{kind} {name}" for kind, name in rows]}
    for machine in machines:
        found = {(r.kind, r.name): r for r in machine.ceilings.itertuples()}
        table[machine.title] = [
            f"{_value_text(found[row], row[0])} ({found[row].kernel})" if row in found else MISSING
            for row in rows
        ]
    return pd.DataFrame(table)


def _value_text(ceiling, kind: str) -> str:
    """A ceiling's value in its unit (a row without one, of an older rooflab: B/s for bandwidth,
    FLOP/s for compute)."""
    import pandas as pd

    unit = getattr(ceiling, "unit", None)
    if unit is None or pd.isna(unit):
        unit = "B/s" if kind == "bandwidth" else "FLOP/s"
    value = float(ceiling.value)
    if unit not in RATE_KINDS:
        return f"{value:.4g} {unit}"
    return format_quantity(value, RATE_KINDS[unit], 4)
