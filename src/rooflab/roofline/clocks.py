"""The clocks a Roofline point ran at (docs/diagnosis.md): its samples', its roof's samples' and,
for a counted point, its ncu replay's; read from the run folders, judged in roofline.diagnosis."""

from __future__ import annotations

import statistics

from rooflab.counters.ncu import CLOCK_METRICS

SM_CLOCK = CLOCK_METRICS[0]  # ncu's SM clock during each replayed kernel (cycle/second)


def clock_ranges(tables: dict, keys: tuple[str, ...]) -> dict[tuple, tuple[float, ...]]:
    """The clock of each measurement's samples (median, lowest, highest; MHz), by `keys`."""
    if "samples" not in tables:
        return {}
    clocks: dict[tuple, list[float]] = {}
    for row in tables["samples"].select([*keys, "clock_mhz"]).to_pylist():
        if row["clock_mhz"] is not None:
            clocks.setdefault(tuple(row[k] for k in keys), []).append(row["clock_mhz"])
    return {key: (statistics.median(v), min(v), max(v)) for key, v in clocks.items()}


def roof_clocks(tables: dict) -> dict[str, tuple[float, ...]]:
    """The clock range of each roof's samples: those of its best row, as ceiling_values picks."""
    by_config = clock_ranges(tables, ("config_id",))
    best: dict[str, tuple[float, tuple]] = {}
    for row in tables["ceilings"].to_pylist():
        clock = by_config.get((row.get("config_id"),))
        if clock and row["value"] >= best.get(row["name"], (-1.0, ()))[0]:
            best[row["name"]] = row["value"], clock
    return {name: clock for name, (_, clock) in best.items()}


def roof_clock(machine: dict | None, roof: str) -> tuple[float, ...] | None:
    """The clock range of a roof (a compute path or a level) of latest_ceilings_by_machine's
    `machine`; None where unread."""
    return ((machine or {}).get("clocks") or {}).get(roof)


def clock_columns(point_clock: tuple | None, roof_clock: tuple | None) -> dict:
    names = ("clock_mhz", "clock_min_mhz", "clock_max_mhz")
    return {
        **dict(zip(names, point_clock or (None,) * 3, strict=True)),
        **{f"roof_{n}": v for n, v in zip(names, roof_clock or (None,) * 3, strict=True)},
    }


def replay_clock(kernels_mhz: list[float] | None) -> float | None:
    """The mean SM clock of a replay's kernels (MHz); None where ncu gave none."""
    return statistics.fmean(kernels_mhz) if kernels_mhz else None
