"""Empirical ceilings: bandwidth per memory level from a working-set sweep, compute per
instruction path from independent FMA chains, and the library GEMM peak (BLAS, cuBLAS) per dtype as
separate library paths.

Each sweep point repeats its kernel many times inside one timed call (so call overhead vanishes),
takes such windows until the stopping rule is met (experiments.ceiling_windows) and keeps their
median. An adaptive sweep steps coarsely over the plateaus and refines only at the edges
(ceiling_plan.refine). Where each level's plateau ends is found from the sweep's own points
(experiments.cache_edges), and the sweep stops growing once the memory's plateau is established.
A level's ceiling is the best point median on its plateau. The memory behind the last cache is
named by the backend (DRAM on a CPU, HBM on a GPU). A backend with a link to host memory (CUDA)
also measures that link as the level `host` (experiments.host_link_ceilings).
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from typing import NamedTuple

from rooflab.backends.base import Backend, CeilingLoad
from rooflab.backends.cublaslt_args import LT_ONLY_DTYPES
from rooflab.conditions.disturbance import Verdict, add_gpu_processes, wait_until_idle
from rooflab.experiments.cache_edges import (
    AGREES_ABOVE,
    FALL,
    MEMORY_ABOVE,
    PLATEAU_BELOW,
    LevelEdge,
    confirming_size,
    level_windows,
    memory_plateau,
)
from rooflab.experiments.ceiling_plan import (
    LOCAL_ABOVE,
    LOCAL_MIN_BYTES,
    CeilingSettings,
    check_memory,
    check_supported,
    largest_working_set,
    narrower_sweep_end,
    planned_blas_s,
    planned_point_s,
    planned_sweep_point_s,
    planned_work,
    plateaus,
    refine,
    sweep_start,
)
from rooflab.experiments.ceiling_windows import Windows, time_workload, window_rule
from rooflab.experiments.compute_paths import beaten_roofs, fma_paths, stream_sweeps
from rooflab.experiments.host_link_ceilings import measure_host_link
from rooflab.experiments.library_ceilings import ceiling_flags, library_ceilings
from rooflab.experiments.runs import MeasuringRun, conditions_row, during_rows, measuring_run
from rooflab.experiments.stopping import Stop, StoppingRule
from rooflab.units import format_quantity
from rooflab.vocabulary import CacheState


class SweepPoint(NamedTuple):
    working_set: int
    rate: float
    level: str | None  # the plateau it belongs to
    point_id: str
    verdict: Verdict
    row: dict  # its ceiling_sweep row
    stop: Stop
    windows: Windows


def run_ceilings(
    backend: Backend, settings: CeilingSettings, run_id: str | None = None
) -> dict[str, list[dict]]:
    """Measure the ceilings; the rows of each table (nothing is written here). Refuses, before
    measuring, what the backend cannot measure or its memory cannot hold (ceiling_plan), and
    holds the machine lock (experiments.machine_lock) throughout: one measurement at a time."""
    for dtype in (d for d in settings.blas_dtypes if d in LT_ONLY_DTYPES):
        backend.check_dtype(dtype)  # says why (CUDA: the device, or nvmath-python missing)
    check_supported(backend, settings)
    check_memory(backend, settings)
    with measuring_run(
        backend, "ceilings", None,
        tables=("ceilings", "ceiling_sweep", "samples"), disturbance=settings.disturbance,
        run_id=run_id, around=False,  # conditions are read around each sweep and FMA round
    ) as run:  # fmt: skip
        return run.close(_run_ceilings(run, settings))


def rounds_disagree(rates: list[float], rel_width: float) -> bool:
    """Whether the best two FMA rounds of a dtype differ by more than `rel_width` (fewer than
    two rounds: nothing agrees yet)."""
    if len(rates) < 2:
        return True
    best, second = sorted(rates, reverse=True)[:2]
    return best / second - 1 > rel_width


def _run_ceilings(run: MeasuringRun, settings: CeilingSettings) -> dict:
    """Every sweep, FMA round and library GEMM into the run's tables; the settings record."""
    backend, progress, run_id, tables = run.backend, run.progress, run.run_id, run.tables
    threads = settings.threads or backend.default_threads()
    caches = backend.cache_bytes_by_level()
    high = largest_working_set(backend, settings)
    reported_windows = plateaus(caches, high, backend.memory_level)
    sizes = sweep_start(settings.min_working_set_bytes, high, settings, reported_windows)
    local = backend.local_cache
    local_levels = {local.level: local.bytes_per_unit} if local is not None else {}
    local_sizes = (
        sweep_start(
            LOCAL_MIN_BYTES,
            LOCAL_ABOVE * local.bytes_per_unit,
            settings,
            plateaus(local_levels, 0, None),
        )
        if local is not None
        else []
    )
    widest = backend.fma_isas()[0]
    narrow_sizes = [size for size in sizes if size <= narrower_sweep_end(reported_windows)]
    working_sets = [
        size
        for _, isa, _ in stream_sweeps(settings.kernels, backend.fma_isas())
        for size in (sizes if isa == widest else narrow_sizes)
    ] + list(local_sizes)
    progress.plan(
        planned_work(
            settings, working_sets, backend.rest_before_peak_s, isas=len(backend.fma_isas())
        )
    )
    point_s = planned_point_s(settings)
    rule = window_rule(settings)

    # FMA rounds are spread over the run (first, after each bandwidth sweep, last), taken while a
    # path's best two rounds disagree, and each path keeps its best: a ceiling is the best
    # sustained rate, and a slow spell of a shared machine (seen here: seconds at about half
    # speed) then costs a round, not the ceiling. One path per dtype and instruction path the
    # backend builds (CPU: AVX-512 and AVX2 where the CPU has both), the widest the dtype's roof.
    paths = fma_paths(settings.fma_dtypes, backend.fma_isas())
    # path name -> (clean, rate), iterations, threads, config_id, verdict, stop
    best: dict[str, tuple] = {}
    round_rates: dict[str, list[float]] = {path.name: [] for path in paths}
    rounds = 0

    def timed(workload: CeilingLoad, rate_hint=None, rule: StoppingRule = rule) -> Windows:
        return time_workload(
            backend, workload, settings.window_s, rule, settings.disturbance, rate_hint
        )

    def fma_round() -> None:
        nonlocal rounds
        needed = any(rounds_disagree(r, settings.rel_width) for r in round_rates.values())
        if rounds >= settings.max_rounds or not needed:
            return
        if rounds >= 2:
            progress.add([point_s] * len(paths))
        wait_until_idle()  # the BLAS pool may still spin from the library GEMM before it
        for path in paths:
            config_id = path.config_id(rounds)
            progress.start(f"fma {path.label} round {rounds}", point_s)
            before = conditions_row(backend, run_id, "before", config_id)
            workload = backend.fma_workload(path.dtype, threads, path.isa)
            hint = best[path.name][0][1] if path.name in best else None
            with backend.sampling_conditions(config_id) as during, backend.nvtx_range(config_id):
                windows = timed(workload, hint)
            readings = [before, *during_rows(run_id, during)]
            readings.append(conditions_row(backend, run_id, "after", config_id))
            tables["conditions"].extend(readings)
            tables["samples"].extend(windows.sample_rows(run_id, config_id))
            verdict = add_gpu_processes(windows.verdict, readings)
            rate = windows.median_rate()
            if not verdict.disturbed:
                round_rates[path.name].append(rate)
            # A clean round beats any disturbed one; a ceiling never comes from disturbed
            # windows while a clean round exists.
            key = (not verdict.disturbed, rate)
            if path.name not in best or key > best[path.name][0]:
                threads_run = workload.threads or threads
                best[path.name] = (
                    key,
                    windows.units,
                    threads_run,
                    config_id,
                    verdict,
                    windows.stop,
                )
            note = " (disturbed)" if verdict.disturbed else ""
            progress.update(f"{rate / 1e9:.1f} GFLOP/s{note}")
        rounds += 1

    def bandwidth_sweep(kernel, sizes, workload_for, levels, memory_level, words, isa=None):
        """Time `kernel` at each working set, ascending, until the memory plateau behind the
        `levels` (cache level -> reported bytes) is established (cache_edges.memory_plateau;
        `memory_level` None: a sweep with no memory plateau), refining an adaptive sweep at its
        edges; each level's ceiling is its best point on its plateau, found from the points
        (cache_edges.level_windows). `isa`: the vector path of its loads and stores, where the
        backend names one."""
        label, bits = backend.isa_label(isa) if isa else (None, None)
        vectors = f"{label} ({bits}-bit) loads and stores; " if label else ""
        wait_until_idle()
        config_id = f"stream/{kernel}"
        tables["conditions"].append(conditions_row(backend, run_id, "before", config_id))
        points: dict[int, SweepPoint] = {}
        start_windows = plateaus(levels, high, memory_level)
        memory_from = backend.memory_sweep_from()

        def plateaus_found():
            """The plateaus and edges of the clean points so far, whether the memory plateau
            is established, and a working set that may establish it (None: none to add)."""
            # by the working set each point really got (whole chunks per thread): the windows
            # are compared with those
            rates = {p.working_set: p.rate for p in points.values() if _settled(p)}
            windows, edges = level_windows(rates, levels, memory_level, high, memory_from)
            ended = memory_level is not None and memory_plateau(rates, edges, memory_from)
            confirm = None if ended else confirming_size(rates, edges, memory_from)
            return windows, edges, bool(ended), confirm

        ahead, extra = sorted(sizes), []  # the start, ascending; refinements and confirmations
        retakes: list[int] = []  # working sets measured again beside an unsettled point
        with backend.sampling_conditions(config_id) as during, backend.nvtx_range(config_id):
            while True:
                found_windows, _, ended, confirm = plateaus_found()
                if confirm is not None and confirm not in points and confirm not in extra:
                    extra.insert(0, confirm)
                    progress.add([planned_sweep_point_s(settings, confirm)])
                if not extra and (ended or not ahead):
                    extra = refine({size: p.rate for size, p in points.items()}, settings)
                    progress.add([planned_sweep_point_s(settings, size) for size in extra])
                    if not extra:
                        break
                size = extra.pop(0) if extra else ahead.pop(0)
                progress.start(
                    f"{kernel} {format_quantity(size, 'bytes', 3)}",
                    planned_sweep_point_s(settings, size),
                )
                workload = workload_for(size)
                below = [p for p in points.values() if p.working_set <= size]
                hint = max(below, key=lambda p: p.working_set).rate if below else None
                # on a plateau as reported or as found so far: its points are sampled in full
                on = _on_a_plateau(size, start_windows) or _on_a_plateau(size, found_windows)
                size_rule = window_rule(settings, on)
                windows = timed(workload, hint, size_rule)
                point = _sweep_point(workload, windows, kernel, config_id)
                # each point its own: a GPU's one-pass form launches a thread per vector
                point.row["threads"] = workload.threads or threads
                points[size] = point
                tables["samples"].extend(point.windows.sample_rows(run_id, point.point_id))
                note = " (disturbed)" if point.verdict.disturbed else ""
                progress.update(f"{point.rate / 1e9:.1f} GB/s{note}")
                memory_from_size = found_windows.get(memory_level, (math.inf,))[0]
                again = _retake(point, size, points, extra, retakes, memory_from_size)
                if again is not None:
                    retakes.append(again)
                    extra.insert(0, again)
                    progress.add([planned_sweep_point_s(settings, again)])
        # the start's larger working sets, left once the memory plateau was established
        progress.drop([planned_sweep_point_s(settings, size) for size in ahead])
        windows_found, edges, ended, _ = plateaus_found()
        edge_of = {edge.level: edge for edge in edges}
        tables["conditions"].extend(during_rows(run_id, during))
        tables["conditions"].append(conditions_row(backend, run_id, "after", config_id))
        flags = ceiling_flags(tables, {config_id}, settings.max_clock_change)
        # Other GPU users are read over the whole sweep: each point carries what was seen.
        readings = [c for c in tables["conditions"] if c["config_id"] == config_id]
        ordered = sorted(points.values(), key=lambda point: point.working_set)
        for point in ordered:
            level = next(
                (name for name, (lo, hi) in windows_found.items() if lo <= point.working_set <= hi),
                None,
            )
            point.row.update(run_id=run_id, level=level, window_s=settings.window_s)
            point.row.update(add_gpu_processes(point.verdict, readings).columns())
            tables["ceiling_sweep"].append(point.row)
        for level, (lo, hi) in windows_found.items():
            on_plateau = [p for p in ordered if lo <= p.working_set <= hi]
            if not on_plateau:
                continue  # the sweep did not reach this plateau; no ceiling is claimed
            edge = edge_of.get(level)
            # The best clean point; only where every point was disturbed, the best of those,
            # and the ceiling carries that point's flag.
            clean_points = [p for p in on_plateau if not p.verdict.disturbed]
            top = max(clean_points or on_plateau, key=lambda point: point.rate)
            tables["ceilings"].append(
                {
                    "run_id": run_id,
                    "kind": "bandwidth",
                    "name": level,
                    "kernel": kernel,
                    "dtype": "fp64",
                    "value": top.rate,
                    "unit": "B/s",
                    "method": (
                        f"best of {len(on_plateau)} sweep points with {words} in "
                        f"[{lo}, {hi}] B ({_plateau_words(edge, ended)}), "
                        f"each the median of its windows of >= "
                        f"{settings.window_s} s ({rule.describe()}); {vectors}STREAM byte "
                        f"convention, write-allocate traffic not counted"
                    ),
                    "cache_state": CacheState.WARM,
                    "threads": top.row["threads"],
                    "isa": isa,
                    "vector_bits": bits,
                    "working_set_min_bytes": min(p.working_set for p in on_plateau),
                    "working_set_max_bytes": max(p.working_set for p in on_plateau),
                    "n_points": len(on_plateau),
                    "cache_bytes_measured": edge.measured_bytes if edge else None,
                    "config_id": top.point_id,
                    **top.stop.columns(),
                    **flags,
                    **top.verdict.columns(),
                }
            )

    fma_round()
    for kernel, isa, name in stream_sweeps(settings.kernels, backend.fma_isas()):
        bandwidth_sweep(
            name,
            sizes if isa == widest else narrow_sizes,
            lambda size, kernel=kernel, isa=isa: backend.stream_workload(
                kernel, size, threads, isa
            ),
            caches,
            backend.memory_level,
            "working sets",
            isa,
        )
        fma_round()
    if local is not None:
        bandwidth_sweep(
            local.kernel,
            local_sizes,
            lambda size: backend.local_cache_workload(size, threads),
            local_levels,
            None,
            f"per-SM working sets (each block a region of its own; {local.capacity_note})",
        )
        fma_round()
    measure_host_link(backend, settings, run_id, tables, progress, point_s)

    for dtype in settings.blas_dtypes:
        # planned again from the dtype's FMA roof, now measured
        rates = [best[p.name][0][1] for p in paths if p.dtype == dtype and p.name in best]
        rate = max(rates, default=None)
        rest = backend.rest_before_peak_s
        progress.adjust(planned_blas_s(settings, rest), planned_blas_s(settings, rest, rate))
        tables["ceilings"].extend(
            library_ceilings(backend, dtype, settings, run_id, tables, progress, rate)
        )
    fma_round()

    for path in paths:
        (_, rate), iters, fma_threads, config_id, verdict, stop = best[path.name]
        rates = sorted(round_rates[path.name], reverse=True)
        label, bits = backend.isa_label(path.isa)
        chains = f"{label} ({bits}-bit vectors)" if label else "registers"
        tables["ceilings"].append(
            {
                "run_id": run_id,
                "kind": "compute",
                "name": path.name,
                "kernel": "fma_chains",
                "dtype": path.dtype,
                "value": rate,
                "unit": "FLOP/s",
                "method": (
                    f"independent FMA chains in {chains}, {iters} iterations "
                    f"per window; best of {rounds} rounds spread over the run (taken while the "
                    f"best two differed by more than {settings.rel_width:.1%}), each the median "
                    f"of its windows of >= {settings.window_s} s ({rule.describe()}); "
                    f"FMA = 2 FLOP"
                ),
                "cache_state": CacheState.WARM,
                "threads": fma_threads,
                "n_points": rounds,
                "config_id": config_id,
                "isa": path.isa,
                "vector_bits": bits,
                **stop.columns(),
                "n_rounds": rounds,
                "round_spread": 1 - rates[1] / rates[0] if len(rates) > 1 else None,
                **ceiling_flags(tables, {config_id}, settings.max_clock_change),
                **verdict.columns(),
            }
        )
    for fault in beaten_roofs(tables["ceilings"], backend.name):
        progress.note(fault)

    return _settings_record(settings, threads, high)


def _plateau_words(edge: LevelEdge | None, established: bool) -> str:
    """How a level's plateau was found (`edge`: a cache's; None: the memory's), for its
    ceiling's `method`."""
    if edge is None:
        past = f"past {MEMORY_ABOVE:g}x the last cache's edge"
        if not established:
            return f"{past}; no plateau established"
        return f"its plateau {past}, established by points from {AGREES_ABOVE:g}x it over an octave"
    if edge.measured_bytes is None:
        return (
            f"no fall from its plateau seen: it ends at {PLATEAU_BELOW:g}x the "
            f"{edge.reported_bytes} B reported"
        )
    return (
        f"up to its measured edge, the last working set on its plateau "
        f"({edge.reported_bytes} B reported)"
    )


def _on_a_plateau(working_set: int, level_windows: dict[str, tuple[int, int]]) -> bool:
    """Whether a working set lies on a level's plateau (a few % either side: the working set a
    workload really gets is rounded to whole chunks per thread)."""
    return any(0.97 * lo <= working_set <= 1.03 * hi for lo, hi in level_windows.values())


def _settled(point: SweepPoint) -> bool:
    """Whether a sweep point may set an edge: clean, and its median pinned within FALL (the
    plateau finder's tolerance) by its interval. A clean point whose windows spread by 29 %
    (a 32 MB copy read 45.9 GB/s between two points of 57) split the L3's plateau in a campaign,
    so no L3 edge was found and its memory sweep went on to 4 GB."""
    width = point.stop.rel_width
    return not point.verdict.disturbed and width is not None and width <= FALL


# A point that is not settled (disturbed, or its median not pinned) sets no edge, and a disturbed
# one no ceiling; past RETAKE_FROM (where points cost seconds and a missing one sends the memory
# sweep on by an octave: a disturbed 1 GB triad point took a campaign's sweep on to 4 GB) it is
# measured again once, as a point of its own 1/64 larger, at most RETAKES times a sweep (a busy
# machine is said, not measured twice over) below the memory's window; inside it, every such
# point once (a retake there costs less than the octave a missing point sends the sweep on to:
# on this VM a 512 MB point about 1 s, the 2 and 4 GB ones it led to 3 and 7 s).
RETAKE_FROM, RETAKES = 1 << 20, 2


def _retake(
    point: SweepPoint,
    size: int,
    points: dict,
    extra: list,
    retakes: list,
    memory_from: float = math.inf,
) -> int | None:
    """The working set to measure next in place of a point that is not settled, or None;
    `memory_from`: where the memory's window starts as the points so far place it."""
    again = size + size // 64
    spent = len([taken for taken in retakes if taken < memory_from])
    if (
        _settled(point)
        or size < RETAKE_FROM
        or size in retakes
        or (spent >= RETAKES and size < memory_from)
        or again in points
        or again in extra
    ):
        return None
    return again


def _sweep_point(workload: CeilingLoad, windows: Windows, kernel: str, config_id: str):
    """One sweep point from its windows: its `ceiling_sweep` row (threads are filled in by the
    caller, run and level once the sweep is done) and its samples rows."""
    # one pass touches the whole working set, unless the workload says otherwise
    working_set = workload.working_set_bytes or workload.amount_per_unit
    point_id = f"{config_id}/ws{working_set}"
    rate = windows.median_rate()
    row = {
        "config_id": point_id,
        "kernel": kernel,
        "working_set_bytes": working_set,
        "value": rate,
        "unit": "B/s",
        "reps": windows.units,
        "n_windows": len(windows.rates()),
        "iqr_ratio": windows.iqr_ratio(),
        **windows.stop.columns(),
    }
    return SweepPoint(
        working_set, rate, None, point_id, windows.verdict, row, windows.stop, windows
    )


def _settings_record(settings: CeilingSettings, threads: int, high: int) -> dict:
    record = replace(settings, threads=threads, max_working_set_bytes=high).__dict__.copy()
    record["blas_timing"] = settings.blas_timing.record()
    record["disturbance"] = asdict(settings.disturbance)
    return record
