"""Empirical ceilings: bandwidth per memory level from a working-set sweep, compute per
instruction path from independent FMA chains, and the library GEMM peak (BLAS, cuBLAS) per dtype as
separate library paths.

Each sweep point repeats its kernel many times inside one timed call (so call overhead vanishes),
takes several such windows and keeps their median. A level's ceiling is the best point median on
its plateau: working sets well inside that level and well outside the one before it. The memory
behind the last cache is named by the backend (DRAM on a CPU, HBM on a GPU).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import NamedTuple

from rooflab.backends.base import Backend, CeilingLoad
from rooflab.conditions.disturbance import (
    DisturbanceSettings,
    Verdict,
    add_gpu_processes,
    probe,
    wait_until_idle,
)
from rooflab.conditions.nvml import clock_flags
from rooflab.experiments.ceiling_plan import (
    LOCAL_ABOVE,
    LOCAL_MIN_BYTES,
    PLATEAU_BELOW,
    CeilingSettings,
    check_memory,
    check_supported,
    largest_working_set,
    plateaus,
    working_set_sizes,
)
from rooflab.experiments.machine_lock import measuring
from rooflab.experiments.runs import conditions_row, during_rows, quiet_check, run_row
from rooflab.experiments.timing import (
    Sample,
    clean,
    fastest_window_median,
    judge_samples,
    measure,
    sample_rows,
    summarize,
    take_sample,
)
from rooflab.progress import Progress
from rooflab.records import new_run_id, utc_now
from rooflab.units import format_quantity
from rooflab.vocabulary import CacheState


def _flags(tables: dict, config_ids: set[str], max_clock_change: float) -> dict:
    readings = [c for c in tables["conditions"] if c["config_id"] in config_ids]
    return clock_flags(readings, max_clock_change)


def units_for_window(seconds_for: Callable[[int], float], window_s: float) -> int:
    """Grow the work per call until one call lasts a whole window: then a fixed cost per call
    (thread wake-up, Python) is a small part of it, whatever the machine's overheads are."""
    units, seconds = 1, seconds_for(1)
    while seconds < window_s:
        units *= 8 if seconds < window_s / 8 else 2
        seconds = seconds_for(units)
    return units


class SweepPoint(NamedTuple):
    working_set: int
    rate: float
    level: str | None  # the plateau it belongs to
    point_id: str
    verdict: Verdict
    row: dict  # its ceiling_sweep row


@dataclass(frozen=True)
class Windows:
    """The timed windows of one workload: every one is kept (as `samples` rows)."""

    units: int  # work units per window (FMA iterations, passes over the working set)
    amount: float  # work per window, in `unit`: units x the workload's amount per unit
    unit: str  # FLOP or B
    samples: list[Sample]  # every window taken; disturbed ones flagged
    verdict: Verdict

    def rates(self) -> list[float]:
        """Rates of the undisturbed windows (of all, where every one was disturbed)."""
        return [self.amount / s.seconds for s in clean(self.samples)]

    def median_rate(self) -> float:
        return statistics.median(self.rates())

    def iqr_ratio(self) -> float:
        return summarize(self.rates(), noisy_iqr_ratio=math.inf).iqr_ratio

    def sample_rows(self, run_id: str, config_id: str) -> list[dict]:
        return sample_rows(run_id, config_id, CacheState.WARM, self.samples, self.amount, self.unit)


def time_workload(
    backend: Backend,
    workload: CeilingLoad,
    window_s: float,
    windows: int,
    disturbance: DisturbanceSettings | None = None,
) -> Windows:
    """Size one window (a call of at least `window_s`), then time `windows` undisturbed ones,
    reading the clock and the disturbance around each, outside the timed call; a disturbed window
    is re-taken, up to retake_factor x `windows` of them."""
    disturbance = disturbance or DisturbanceSettings()

    def seconds_for(units: int) -> float:
        return backend.time_call(lambda: workload.run(units))

    workload.run(1)  # warm-up: compilation, first touch, thread start-up
    units = units_for_window(seconds_for, window_s)
    max_disturbed = math.ceil(disturbance.retake_factor * windows)
    samples: list[Sample] = []
    n_clean = 0
    with probe().measuring_phase() as phase:
        while n_clean < windows and len(samples) - n_clean < max_disturbed:
            samples.append(take_sample(backend, lambda: workload.run(units), disturbance))
            n_clean += not samples[-1].disturbed
    verdict = judge_samples(samples, phase, backend, windows, disturbance, what="windows")
    return Windows(units, units * workload.amount_per_unit, workload.unit, samples, verdict)


def run_ceilings(
    backend: Backend, settings: CeilingSettings, run_id: str | None = None
) -> dict[str, list[dict]]:
    """Measure the ceilings; the rows of each table (nothing is written here). Refuses, before
    measuring, what the backend cannot measure or its memory cannot hold (ceiling_plan), and
    holds the machine lock (experiments.machine_lock) throughout: one measurement at a time."""
    check_supported(backend, settings)
    check_memory(backend, settings)
    with measuring("ceilings"), Progress("ceilings") as progress:
        return _run_ceilings(backend, settings, progress, run_id)


def planned_point_s(settings: CeilingSettings) -> float:
    """Planned seconds of one sweep point or FMA round: its windows, each at least `window_s`
    (1.5 x on average: a window is sized by doubling the work until it lasts `window_s`), plus
    sizing it (about two windows) and the warm-up call."""
    return settings.window_s * (1.5 * settings.windows + 2.5)


def planned_blas_s(settings: CeilingSettings) -> float:
    """Planned seconds of one library GEMM ceiling: its warm-up, idle and sampling budgets."""
    timing = settings.blas_timing
    return timing.warmup_s + timing.cooldown_s + timing.min_time_s


def planned_work(settings: CeilingSettings, points: int, local: bool) -> list[float]:
    """Planned seconds of each item of a run, in order: FMA rounds (first, after each bandwidth
    sweep, last), `points` sweep points, the library GEMMs. The ETA starts from it (progress)."""
    rounds = len(settings.kernels) + 2 + local
    fma_and_points = rounds * len(settings.fma_dtypes) + points
    blas = len(settings.blas_dtypes)
    return [planned_point_s(settings)] * fma_and_points + [planned_blas_s(settings)] * blas


def _run_ceilings(
    backend: Backend, settings: CeilingSettings, progress: Progress, run_id: str | None = None
) -> dict[str, list[dict]]:
    run_id = run_id or new_run_id()
    progress.update("checking that the machine is quiet")
    quiet = quiet_check(backend, settings.disturbance, "ceilings")
    started = utc_now()
    threads = settings.threads or backend.default_threads()
    caches = backend.cache_bytes_by_level()
    high = largest_working_set(backend, settings)
    sizes = working_set_sizes(settings.min_working_set_bytes, high, settings.points_per_octave)
    level_windows = plateaus(caches, high, backend.memory_level)
    tables: dict[str, list[dict]] = {
        "conditions": [],
        "ceilings": [],
        "ceiling_sweep": [],
        "samples": [],
    }
    local = backend.local_cache
    local_sizes = (
        working_set_sizes(
            LOCAL_MIN_BYTES, LOCAL_ABOVE * local.bytes_per_unit, settings.points_per_octave
        )
        if local is not None
        else []
    )
    points = len(settings.kernels) * len(sizes) + len(local_sizes)
    progress.plan(planned_work(settings, points, local is not None))
    point_s = planned_point_s(settings)

    # FMA rounds are spread over the whole run (first, after each bandwidth kernel, last) and each
    # dtype keeps its best round: a ceiling is the best sustained rate, and a slow spell of a
    # shared machine (seen here: seconds at about half speed) then costs a round, not the ceiling.
    # (clean, rate), iterations, threads, config_id, verdict
    best: dict[str, tuple[tuple[bool, float], int, int, str, Verdict]] = {}
    rounds = 0

    def timed(workload: CeilingLoad) -> Windows:
        return time_workload(
            backend, workload, settings.window_s, settings.windows, settings.disturbance
        )

    def fma_round() -> None:
        nonlocal rounds
        wait_until_idle()  # the BLAS pool may still spin from the library GEMM before it
        for dtype in settings.fma_dtypes:
            config_id = f"fma/{dtype}/round{rounds}"
            progress.start(f"fma {dtype} round {rounds}", point_s)
            before = conditions_row(backend, run_id, "before", config_id)
            workload = backend.fma_workload(dtype, threads)
            with backend.sampling_conditions(config_id) as during, backend.nvtx_range(config_id):
                windows = timed(workload)
            readings = [before, *during_rows(run_id, during)]
            readings.append(conditions_row(backend, run_id, "after", config_id))
            tables["conditions"].extend(readings)
            tables["samples"].extend(windows.sample_rows(run_id, config_id))
            verdict = add_gpu_processes(windows.verdict, readings)
            rate = windows.median_rate()
            # A clean round beats any disturbed one; a ceiling never comes from disturbed
            # windows while a clean round exists.
            key = (not verdict.disturbed, rate)
            if dtype not in best or key > best[dtype][0]:
                best[dtype] = (key, windows.units, workload.threads or threads, config_id, verdict)
            note = " (disturbed)" if verdict.disturbed else ""
            progress.update(f"{rate / 1e9:.1f} GFLOP/s{note}")
        rounds += 1

    def bandwidth_sweep(kernel, sizes, workload_for, level_windows, words) -> None:
        """Time `kernel` at each working set; each level's ceiling is its best plateau point."""
        wait_until_idle()
        config_id = f"stream/{kernel}"
        tables["conditions"].append(conditions_row(backend, run_id, "before", config_id))
        points = []
        kernel_threads = threads
        with backend.sampling_conditions(config_id) as during, backend.nvtx_range(config_id):
            for size in sizes:
                progress.start(f"{kernel} {format_quantity(size, 'bytes', 3)}", point_s)
                workload = workload_for(size)
                kernel_threads = workload.threads or threads
                windows = timed(workload)
                rate = windows.median_rate()
                # one pass touches the whole working set, unless the workload says otherwise
                working_set = workload.working_set_bytes or workload.amount_per_unit
                level = next(
                    (name for name, (lo, hi) in level_windows.items() if lo <= working_set <= hi),
                    None,
                )
                point_id = f"{config_id}/ws{working_set}"
                tables["samples"].extend(windows.sample_rows(run_id, point_id))
                row = {
                    "run_id": run_id,
                    "config_id": point_id,
                    "kernel": kernel,
                    "working_set_bytes": working_set,
                    "threads": kernel_threads,
                    "value": rate,
                    "unit": "B/s",
                    "reps": windows.units,
                    "n_windows": settings.windows,
                    "window_s": settings.window_s,
                    "iqr_ratio": windows.iqr_ratio(),
                    "level": level,
                }
                tables["ceiling_sweep"].append(row)
                points.append(SweepPoint(working_set, rate, level, point_id, windows.verdict, row))
                note = " (disturbed)" if windows.verdict.disturbed else ""
                progress.update(f"{rate / 1e9:.1f} GB/s{note}")
        tables["conditions"].extend(during_rows(run_id, during))
        tables["conditions"].append(conditions_row(backend, run_id, "after", config_id))
        flags = _flags(tables, {config_id}, settings.max_clock_change)
        # Other GPU users are read over the whole sweep: each point carries what was seen.
        readings = [c for c in tables["conditions"] if c["config_id"] == config_id]
        for point in points:
            point.row.update(add_gpu_processes(point.verdict, readings).columns())
        for level, (lo, hi) in level_windows.items():
            on_plateau = [p for p in points if p.level == level]
            if not on_plateau:
                continue  # the sweep did not reach this plateau; no ceiling is claimed
            # The best clean point; only where every point was disturbed, the best of those,
            # and the ceiling carries that point's flag.
            clean_points = [p for p in on_plateau if not p.verdict.disturbed]
            best = max(clean_points or on_plateau, key=lambda point: point.rate)
            value, best_point, verdict = best.rate, best.point_id, best.verdict
            tables["ceilings"].append(
                {
                    "run_id": run_id,
                    "kind": "bandwidth",
                    "name": level,
                    "kernel": kernel,
                    "dtype": "fp64",
                    "value": value,
                    "unit": "B/s",
                    "method": (
                        f"best of {len(on_plateau)} sweep points with {words} in "
                        f"[{lo}, {hi}] B, each the median of {settings.windows} windows of "
                        f">= {settings.window_s} s; STREAM byte convention, write-allocate "
                        f"traffic not counted"
                    ),
                    "cache_state": CacheState.WARM,
                    "threads": kernel_threads,
                    "working_set_min_bytes": min(p.working_set for p in on_plateau),
                    "working_set_max_bytes": max(p.working_set for p in on_plateau),
                    "n_points": len(on_plateau),
                    "config_id": best_point,
                    **flags,
                    **verdict.columns(),
                }
            )

    fma_round()
    for kernel in settings.kernels:
        bandwidth_sweep(
            kernel,
            sizes,
            lambda size, kernel=kernel: backend.stream_workload(kernel, size, threads),
            level_windows,
            "working sets",
        )
        fma_round()
    if local is not None:
        bandwidth_sweep(
            local.kernel,
            local_sizes,
            lambda size: backend.local_cache_workload(size, threads),
            {local.level: (0, int(PLATEAU_BELOW * local.bytes_per_unit))},
            f"per-SM working sets (every SM reads the same buffer; {local.capacity_note})",
        )
        fma_round()

    for dtype in settings.blas_dtypes:
        tables["ceilings"].append(_blas_ceiling(backend, dtype, settings, run_id, tables, progress))
    fma_round()

    for dtype, ((_, rate), iters, fma_threads, config_id, verdict) in best.items():
        tables["ceilings"].append(
            {
                "run_id": run_id,
                "kind": "compute",
                "name": f"{dtype}_fma",
                "kernel": "fma_chains",
                "dtype": dtype,
                "value": rate,
                "unit": "FLOP/s",
                "method": (
                    f"independent FMA chains in registers (SIMD on a CPU), {iters} iterations "
                    f"per window; best of {rounds} rounds spread over the run, each the median "
                    f"of {settings.windows} windows of >= {settings.window_s} s; FMA = 2 FLOP"
                ),
                "cache_state": CacheState.WARM,
                "threads": fma_threads,
                "n_points": rounds,
                "config_id": config_id,
                **_flags(tables, {config_id}, settings.max_clock_change),
                **verdict.columns(),
            }
        )

    tables["runs"] = [
        run_row(
            backend,
            run_id=run_id,
            kind="ceilings",
            sweep=None,
            started_at=started,
            ended_at=utc_now(),
            settings=_settings_record(settings, threads, high),
            quiet=quiet,
        )
    ]
    return tables


def _blas_ceiling(backend, dtype, settings, run_id, tables, progress) -> dict:
    n = settings.blas_n
    config_id = f"blas/{dtype}/n{n}"
    progress.start(f"library GEMM {dtype} n={n}", planned_blas_s(settings))
    operands = backend.gemm_operands(n, n, n, dtype, "nn", seed=0)
    wait_until_idle()  # numba's pool may still spin from the kernels before it
    before = conditions_row(backend, run_id, "before", config_id)
    timing = replace(settings.blas_timing, disturbance=settings.disturbance)
    with backend.sampling_conditions(config_id) as during, backend.limited_library_threads():
        measured = measure(
            lambda: backend.matmul(operands),
            backend,
            timing,
            CacheState.WARM,
            progress,
            label=config_id,
        )
        threads = backend.library_threads()
    readings = [before, *during_rows(run_id, during)]
    readings.append(conditions_row(backend, run_id, "after", config_id))
    tables["conditions"].extend(readings)
    tables["samples"].extend(
        sample_rows(run_id, config_id, CacheState.WARM, measured.samples, 2 * n**3, "FLOP")
    )
    verdict = add_gpu_processes(measured.verdict, readings)
    # The clean samples in the order they were taken: a window of consecutive clean samples.
    seconds = [s.seconds for s in clean(measured.samples)]
    window = min(settings.windows, len(seconds))
    fastest_s, windows = fastest_window_median(seconds, window)
    sustained = format_quantity(2 * n**3 / statistics.median(seconds), "flop_rate", 4)
    idle = settings.blas_timing.cooldown_s
    rested = f"sampled after {idle:g} s idle, " if idle else ""
    best = (
        f"best of {windows} medians of {window} consecutive"
        if windows > 1
        else f"median of the first {window}"
    )
    return {
        "run_id": run_id,
        "kind": "compute",
        "name": backend.library_path(dtype),
        "kernel": "matmul",
        "dtype": dtype,
        "value": 2 * n**3 / fastest_s,
        "unit": "FLOP/s",
        "method": (
            f"{backend.library_description(dtype)} of {n}x{n}x{n}, {rested}{best} warm samples "
            f"(the median of all {len(seconds)}, under the clocks they saw: {sustained})"
        ),
        "cache_state": CacheState.WARM,
        "threads": threads,
        "n_points": 1,
        "config_id": config_id,
        **_flags(tables, {config_id}, settings.max_clock_change),
        **verdict.columns(),
    }


def _settings_record(settings: CeilingSettings, threads: int, high: int) -> dict:
    record = replace(settings, threads=threads, max_working_set_bytes=high).__dict__.copy()
    record["blas_timing"] = settings.blas_timing.record()
    record["disturbance"] = asdict(settings.disturbance)
    return record
