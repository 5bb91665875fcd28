"""Where each cache level's plateau ends, found from a bandwidth sweep's own points (as ERT's
plateau finder does), and the memory plateau behind the last cache, established from them.

The capacities the OS or the device reports only name the levels and give their order: a level's
measured edge is the last working set whose rate is still on its plateau (within FALL of the
plateau's best) with every larger working set below it, i.e. where the rate leaves the plateau for
good. A VM's streaming rate often falls far below the L3 it reports (seen: 480 MiB reported, the
fall at 64-129 MB), so a sweep's end and its ceilings' windows come from the measured edge, and
the cold-cache flush from a multiple of it (the cache retains more than the fall suggests:
backends.base.FLUSH_SAFETY); a level whose fall is not seen keeps its reported size, says so.

Pure functions of the points (working set -> rate, the clean points only), so that the rules are
tested on curves of known shape; `size_flush_from_ceilings` reads a kept ceilings run back.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import NamedTuple

from rooflab.vocabulary import measured_cache_bytes

# A point within FALL of the median of the run of points before it is on their plateau (a sweep's
# noise on a shared machine stays within it; the falls between levels are 20-60 %). A plateau
# spans at least an octave; one whose rate every larger working set stays FALL below has a fall.
FALL = 0.1
# Where a level's fall is not seen, its plateau is [PLATEAU_ABOVE x the level before it,
# PLATEAU_BELOW x its reported capacity], as the reported capacities alone would place it.
PLATEAU_ABOVE, PLATEAU_BELOW = 2.0, 0.5
# A level's edge lies past the reported capacity of the level before it and at most
# EDGE_BEYOND_REPORTED x its own: a level holds little more than it reports.
EDGE_BEYOND_REPORTED = 1.5
# The memory's plateau is established by MEMORY_POINTS points from AGREES_ABOVE x the last
# cache's edge, spanning at least an octave, that agree within FALL of their median; its
# ceiling comes from those at MEMORY_ABOVE x the edge or more (just past the edge a triad still
# reads above the memory's rate, the cache holding part of it), at least one. (Established from
# 4x alone, a point left out there by a disturbed spell sent the sweep on by an octave, seconds
# at gigabytes; the points at 2-4x agree within FALL on every sweep seen on this VM.)
AGREES_ABOVE, MEMORY_ABOVE, MEMORY_POINTS = 2.0, 4.0, 3


class LevelEdge(NamedTuple):
    level: str
    reported_bytes: int
    measured_bytes: int | None  # its plateau's last working set; None: no fall from it seen
    plateau_from: int | None = None  # its plateau's first working set, where its fall is seen


def plateau_runs(rates: dict[int, float]) -> list[list[int]]:
    """The sweep's points (working set -> rate) in runs, ascending: a point joins the run before
    it while within FALL of that run's median rate."""
    runs: list[list[int]] = []
    for size in sorted(rates):
        if runs and abs(rates[size] / statistics.median(rates[s] for s in runs[-1]) - 1) <= FALL:
            runs[-1].append(size)
        else:
            runs.append([size])
    return runs


def find_edges(rates: dict[int, float], reported: dict[str, int]) -> list[LevelEdge]:
    """Each cache level's edge, in order of size, from the sweep's points (working set -> rate):
    the last working set of a plateau (plateau_runs, spanning an octave) that every larger
    working set stays FALL below. The reported capacities name the falls: from the largest level
    down, each takes the last fall past the reported capacity of the level before it, at most
    EDGE_BEYOND_REPORTED x its own and below the plateau of the level above it (so a smaller
    step inside a plateau is passed over); a level with no such fall keeps its reported size."""
    sizes = sorted(rates)
    falls = []  # (first, last working set) of each plateau the rate leaves for good
    for run in plateau_runs(rates):
        level = statistics.median(rates[s] for s in run)
        after = [rates[s] for s in sizes if s > run[-1]]
        if _spans_an_octave(run[0], run[-1]) and after and max(after) < (1 - FALL) * level:
            falls.append((run[0], run[-1]))
    ordered = sorted(reported.items(), key=lambda item: item[1])
    edges: dict[str, LevelEdge] = {}
    above = math.inf  # where the plateau of the level above starts
    for index in reversed(range(len(ordered))):
        level, capacity = ordered[index]
        floor = ordered[index - 1][1] if index else 0
        found = [
            (first, last)
            for first, last in falls
            if floor < last <= EDGE_BEYOND_REPORTED * capacity and last < above
        ]
        first, last = found[-1] if found else (None, None)
        edges[level] = LevelEdge(level, capacity, last, first)
        above = first if first is not None else above
    return [edges[level] for level, _ in ordered]


def _past_the_caches(
    rates: dict[int, float], edges: list[LevelEdge], memory_from: int, above: float = AGREES_ABOVE
):
    """The working sets at or past `above` x the last cache's measured edge and `memory_from`,
    ascending; None where that edge is not seen."""
    if not edges or edges[-1].measured_bytes is None:
        return None
    start = max(above * edges[-1].measured_bytes, memory_from)
    return [s for s in sorted(rates) if s >= start]


def memory_plateau(
    rates: dict[int, float], edges: list[LevelEdge], memory_from: int = 0
) -> tuple[int, int] | None:
    """The memory's plateau (the first and last working set its ceiling comes from) once it is
    established: the last MEMORY_POINTS or more points at or past AGREES_ABOVE x the last
    cache's measured edge (and `memory_from`: Backend.memory_sweep_from), spanning at least an
    octave, each within FALL of their median, of which those at or past MEMORY_ABOVE x the edge
    (one at least) are its plateau. None while it is not (the last cache's fall not yet seen,
    too few points past it, the rate still falling, or no agreeing point far enough past it)."""
    past = _past_the_caches(rates, edges, memory_from) or []
    for start in range(len(past) - MEMORY_POINTS, -1, -1):  # the shortest run that suffices
        run = past[start:]
        if _spans_an_octave(run[0], run[-1]):
            median = statistics.median(rates[s] for s in run)
            if not all(abs(rates[s] / median - 1) <= FALL for s in run):
                return None
            far = _past_the_caches({s: rates[s] for s in run}, edges, memory_from, MEMORY_ABOVE)
            return (far[0], run[-1]) if far else None
    return None


def _spans_an_octave(low: int, high: int) -> bool:
    # less a retake's 1/64 (ceilings._retake) and working sets rounded to 1 KiB
    return high >= OCTAVE * low


OCTAVE = 1.95


def confirming_size(
    rates: dict[int, float], edges: list[LevelEdge], memory_from: int = 0
) -> int | None:
    """A working set that may establish the memory plateau sooner than the next octave would:
    the geometric midpoint of the last two points past the caches (as memory_plateau counts
    them), where they span an octave and agree (rounded to 1 KiB; None where there is no such
    point to add)."""
    past = _past_the_caches(rates, edges, memory_from) or []
    if len(past) < MEMORY_POINTS - 1 or not _spans_an_octave(*past[-2:]):
        return None
    low, high = past[-2:]
    if abs(rates[high] / rates[low] - 1) > FALL:
        return None
    middle = round((low * high) ** 0.5 / 1024) * 1024
    return middle if low < middle < high else None


def level_windows(
    rates: dict[int, float],
    reported: dict[str, int],
    memory_level: str | None,
    high: int,
    memory_from: int = 0,
) -> tuple[dict[str, tuple[int, int]], list[LevelEdge]]:
    """Each level's plateau (the working sets its ceiling is taken from) and the edges behind
    them: a cache's plateau as its points show it, up to its edge, or, where no fall is seen,
    [PLATEAU_ABOVE x the level before it, PLATEAU_BELOW x its reported capacity]; the memory's,
    where `memory_level` names one, its established plateau, else from MEMORY_ABOVE x the last
    edge (measured, else the summed reported capacities) and `memory_from` to `high`; each
    window starts past the one before it."""
    edges = find_edges(rates, reported)
    windows, previous = {}, 0
    for edge in edges:
        if edge.measured_bytes is not None:
            # not before PLATEAU_ABOVE x the level below (its reported or measured size, the
            # larger: an edge found a point early): just past it a point still hits that level
            # in part, and reads within FALL of this plateau but above it (an L2 triad at 1.5x
            # the L1's edge read 263 GB/s on a 241 GB/s plateau)
            low = max(edge.plateau_from, int(PLATEAU_ABOVE * previous))
            low = low if low < edge.measured_bytes else edge.plateau_from
            windows[edge.level] = (low, edge.measured_bytes)
        else:
            low = int(PLATEAU_ABOVE * previous)
            windows[edge.level] = (low, max(low, int(PLATEAU_BELOW * edge.reported_bytes)))
        previous = max(edge.reported_bytes, edge.measured_bytes or 0)
    if memory_level is not None:
        last = edges[-1].measured_bytes if edges else None
        fallback = (int(max(MEMORY_ABOVE * (last or sum(reported.values())), memory_from)), high)
        windows[memory_level] = memory_plateau(rates, edges, memory_from) or fallback
    return _disjoint(windows), edges


def _disjoint(windows: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """The windows (in order of size), each starting past the end of the one before it: a
    working set is on one level's plateau at most, so that a ceiling is never taken from a
    point the sweep places on another level (seen: an L3 edge found below 2x the reported L2
    fell back to the start of its plateau's run, inside the L2's window)."""
    disjoint, end = {}, -1
    for level, (low, high) in windows.items():
        disjoint[level] = (max(low, end + 1), high)
        end = max(end, high)
    return disjoint


def size_flush_from_ceilings(backend, receipt_path: str | Path) -> str:
    """Size `backend`'s cold-cache flush from its last cache level's edge as measured by the
    ceilings run a receipt names (the largest any of its sweeps saw; Backend.size_flush), where
    that run exists, was taken on this machine and saw the edge; else the flush keeps the
    reported rule. A line saying which, for the job's log."""
    from rooflab.records import read_run

    caches = backend.cache_bytes_by_level()
    if not caches:
        return "cold flush: no cache levels to size it from"
    last = max(caches, key=caches.get)
    try:
        receipt = json.loads(Path(receipt_path).read_text())
        same_machine = receipt["machine_id"] == backend.run_metadata()["machine_id"]
        ceilings = (
            read_run(Path(receipt["run_dir"]))["ceilings"].to_pylist() if same_machine else []
        )
    except (OSError, ValueError, KeyError):
        ceilings = []
    measured = measured_cache_bytes(ceilings).get(last)
    if measured:
        backend.size_flush(measured, f"ceilings run {receipt['run_id']}")
    return f"cold flush: {backend.flush_method}"
