"""Stage overlap, measured (docs/timelines.md): the article's lesson that every stage can sit near
its roof and the step still be slow because stages that could overlap run one after another.

A measurable `stages` scenario names each stage's kernel and time: `stream` (a STREAM triad over
a working set past every cache, so its bytes cross the memory) or `fma` (FMA chains of the
scenario's compute path's dtype, in registers). Each is sized from the machine's measured
ceilings (C, B) to take its time at its bound (model.sized_stage), then rounded to whole passes
or iterations: its exact ledger (F, Q) is what is recorded and bounded. Each stage runs on a lane
of its own: on a CPU a thread pinned to its own core (one core per stage: the kernels' single-
thread, GIL-free builds), on a GPU a CUDA stream of its own (the kernels over every SM).

Measured, with the usual sampling discipline, each timed launch to synchronise on the host:
- each stage alone on its lane;
- `serial`: the stages one after another in the scenario's dependency order, each on its lane;
- `overlapped`: every stage launched at once, each on its lane (what the dependencies forbid,
  to show what they cost).
Bounds on the same C and B (model.stage_bounds): each stage's max(F/C, Q/B); the serial
schedule's critical path; the aggregate max(ΣF/C, ΣQ/B), which no schedule can beat. A stage or
schedule measured faster than its bound (its upper quartile under it) is flagged `beats_bound`:
a ledger or a ceiling is wrong, as a Roofline point above its roof.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from rooflab.backends.base import Backend
from rooflab.config import stages_from_config
from rooflab.experiments.item_plans import planned_timing_s
from rooflab.experiments.runs import MeasuringRun, measuring_run
from rooflab.experiments.timing import TimingSettings, host_wall_time, measure, sample_rows
from rooflab.model import Stage, stage_bounds
from rooflab.vocabulary import CacheState

WORKING_SET_CACHES = 4  # a GPU stream stage's working set: 4x the L2, where one pass a launch


class StageOverlapError(ValueError):
    """A scenario this machine cannot measure as asked: the message names it and why."""


@dataclass(frozen=True)
class SizedStage:
    """A stage as it runs: its exact ledger, the kernel, and one call of its work."""

    stage: Stage  # F and Q exactly as run (whole passes or iterations)
    kernel: str
    run: Callable[[], object]


def _cpu_stage(backend: Backend, stage: Stage, kernel: str, dtype: str) -> SizedStage:
    from rooflab.backends import cpu_kernels

    if kernel == "stream":
        # the cold flush's size: past every cache, measured (a ceilings run's edge) or reported
        arrays = cpu_kernels.allocate_stream("triad", backend.flush_bytes, 1)
        per_pass = arrays[0].size * cpu_kernels.STREAM_BYTES_PER_ELEMENT["triad"]
        passes = max(1, round(stage.bytes / per_pass))
        moved = passes * per_pass
        exact = Stage(stage.name, 2 * arrays[0].size * passes, moved, stage.after)
        return SizedStage(
            exact, kernel, lambda: cpu_kernels.run_stream_alone("triad", arrays, passes)
        )
    per_iter = cpu_kernels.fma_flops(dtype, 1, 1)
    iters = max(1, round(stage.flops / per_iter))
    exact = Stage(stage.name, per_iter * iters, 0, stage.after)
    return SizedStage(exact, kernel, lambda: cpu_kernels.run_fma_alone(dtype, iters))


def _cuda_stage(backend: Backend, stage: Stage, kernel: str, dtype: str) -> SizedStage:
    threads = backend.default_threads()
    if kernel == "stream":
        working_set = WORKING_SET_CACHES * max(backend.cache_bytes_by_level().values())
        load = backend.stream_workload("triad", working_set, threads)
        passes = max(1, round(stage.bytes / load.amount_per_unit))
        moved = passes * load.amount_per_unit
        exact = Stage(stage.name, moved // 12, moved, stage.after)  # 2 FLOP per 24 B
        return SizedStage(exact, kernel, lambda: load.run(passes))
    load = backend.fma_workload(dtype, threads)
    iters = max(1, round(stage.flops / load.amount_per_unit))
    written = (load.threads or threads) * (8 if dtype == "fp64" else 4)  # each thread's result
    exact = Stage(stage.name, load.amount_per_unit * iters, written, stage.after)
    return SizedStage(exact, kernel, lambda: load.run(iters))


class _CoreLanes:
    """One worker thread per stage, each pinned to a core of its own and waiting for work, so
    that starting a stage costs a wake-up, not a thread start."""

    def __init__(self, count: int):
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < count:
            raise StageOverlapError(
                f"{count} stages need {count} cores side by side, this process may use {len(cores)}"
            )
        self.cores = cores[:count]
        self._work: list[Callable | None] = [None] * count
        self._go = [threading.Event() for _ in range(count)]
        self._done = [threading.Event() for _ in range(count)]
        self._errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._serve, args=(i,), daemon=True) for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def _serve(self, lane: int) -> None:
        os.sched_setaffinity(0, {self.cores[lane]})  # this thread only (Linux)
        while True:
            self._go[lane].wait()
            self._go[lane].clear()
            work = self._work[lane]
            if work is None:
                return
            try:
                work()
            except BaseException as error:  # re-raised by the caller
                self._errors.append(error)
            self._done[lane].set()

    def start(self, lane: int, work: Callable) -> None:
        self._done[lane].clear()
        self._work[lane] = work
        self._go[lane].set()

    def wait(self, lane: int) -> None:
        self._done[lane].wait()
        if self._errors:
            raise self._errors.pop()

    def close(self) -> None:
        for lane in range(len(self._threads)):
            self._work[lane] = None
            self._go[lane].set()

    def where(self, lane: int) -> str:
        return f"cpu {self.cores[lane]}"


class _StreamLanes:
    """One CUDA stream per stage; the backend's loads launch on it (CudaBackend.on_stream)."""

    def __init__(self, backend: Backend, count: int):
        cp = backend.array_module
        self.backend = backend
        self.streams = [cp.cuda.Stream(non_blocking=True) for _ in range(count)]

    def start(self, lane: int, work: Callable) -> None:
        with self.backend.on_stream(self.streams[lane]):
            work()

    def wait(self, lane: int) -> None:
        self.streams[lane].synchronize()

    def close(self) -> None:
        pass

    def where(self, lane: int) -> str:
        return f"stream {lane + 1}"


def sized_stages(
    backend: Backend, spec: Mapping, peak: float, bandwidth: float
) -> list[SizedStage]:
    """The scenario's stages sized on these ceilings and built on this backend (not yet run)."""
    dtype = spec["compute_path"].removesuffix("_fma")
    if dtype not in backend.fma_dtypes:
        raise StageOverlapError(f"backend {backend.name} has no FMA chains of {dtype}")
    planned = stages_from_config(spec["stages"], "stages", peak, bandwidth)
    build = _cuda_stage if backend.name == "cuda" else _cpu_stage
    return [
        build(backend, stage, entry["kernel"], dtype)
        for stage, entry in zip(planned, spec["stages"], strict=True)
    ]


def scenario_ceilings(name: str, spec: Mapping, machine: Mapping) -> tuple[float, float]:
    """(C, B) of a measurable scenario from a machine's measured ceilings (roofline's
    latest_ceilings_by_machine entry: run_id, peak, bandwidth): its compute path's peak and its
    memory level's bandwidth; StageOverlapError naming what the ceilings run lacks."""
    peak = machine["peak"].get(spec["compute_path"])
    bandwidth = machine["bandwidth"].get(spec["memory_level"])
    if peak is None or bandwidth is None:
        missing = spec["compute_path"] if peak is None else spec["memory_level"]
        raise StageOverlapError(
            f"stages.{name}: the ceilings run {machine['run_id']} has no {missing} ceiling"
        )
    return peak, bandwidth


def run_stage_overlap(
    backend: Backend,
    name: str,
    spec: Mapping,
    timing: TimingSettings,
    *,
    peak_flops_per_s: float,
    bandwidth_b_per_s: float,
    ceilings_run_id: str | None,
    run_id: str | None = None,
) -> dict[str, list[dict]]:
    """Measure the measurable scenario `name` (`spec`: its config entry) on the ceilings C =
    `peak_flops_per_s` (its compute_path) and B = `bandwidth_b_per_s` (its memory_level) of
    ceilings run `ceilings_run_id`; the rows of each table (nothing written). Holds the machine
    lock throughout."""
    if not spec.get("measurable"):
        raise StageOverlapError(f"stages.{name} is not marked measurable: true")
    with measuring_run(
        backend, "stages", name,
        tables=("samples", "stage_timings", "stage_schedules"), disturbance=timing.disturbance,
        run_id=run_id,
    ) as run:  # fmt: skip
        stages = sized_stages(backend, spec, peak_flops_per_s, bandwidth_b_per_s)
        lanes = (
            _StreamLanes(backend, len(stages))
            if backend.name == "cuda"
            else _CoreLanes(len(stages))
        )
        ceilings = (peak_flops_per_s, bandwidth_b_per_s, ceilings_run_id)
        try:
            _measure(run, spec, timing, stages, lanes, ceilings)
        finally:
            lanes.close()
        return run.close(
            {"stages": dict(spec), "timing": timing.record(), "ceilings_run_id": ceilings_run_id}
        )


def _measure(run: MeasuringRun, spec, timing, stages, lanes, ceilings) -> None:
    """Time each stage alone, then each schedule, into the run's tables."""
    backend, name, progress, run_id, tables = (
        run.backend, run.name, run.progress, run.run_id, run.tables
    )  # fmt: skip
    peak, bandwidth, ceilings_run_id = ceilings
    bounds = stage_bounds([s.stage for s in stages], peak, bandwidth)
    # planned at the bounds (a call of each stage alone; serial: all of them in turn;
    # overlapped: the longer of the critical path and the aggregate bound), in one round
    one_round = replace(timing, rounds=1)
    alone_s = [r.bound.bound_s for r in bounds.stages]
    calls = [*alone_s, sum(alone_s), max(bounds.critical_path_s, bounds.aggregate_s)]
    planned = [planned_timing_s(one_round, call_s) for call_s in calls]
    progress.plan(planned)
    index = {s.stage.name: lane for lane, s in enumerate(stages)}
    order = [index[result.name] for result in _dependency_order(bounds)]

    def alone(lane: int) -> Callable[[], None]:
        def call() -> None:
            lanes.start(lane, stages[lane].run)
            lanes.wait(lane)

        return call

    def serial() -> None:
        for lane in order:
            lanes.start(lane, stages[lane].run)
            lanes.wait(lane)

    def overlapped() -> None:
        for lane in range(len(stages)):
            lanes.start(lane, stages[lane].run)
        for lane in range(len(stages)):
            lanes.wait(lane)

    timer = host_wall_time(backend)
    total_flops = sum(s.stage.flops for s in stages)
    for lane, (sized, result) in enumerate(zip(stages, bounds.stages, strict=True)):
        config_id = f"stages/{name}/{sized.stage.name}"
        progress.start(f"{sized.stage.name} alone", planned[lane])
        measured = measure(
            alone(lane), backend, timing, CacheState.WARM, progress, config_id, timer
        )
        tables["samples"] += sample_rows(
            run_id, config_id, CacheState.WARM, measured.samples, sized.stage.flops, "FLOP"
        )
        summary = measured.summary(timing.noisy_iqr_ratio)
        tables["stage_timings"].append(
            {
                "run_id": run_id,
                "config_id": config_id,
                "scenario": name,
                "stage": sized.stage.name,
                "position": lane,
                "after": ",".join(sized.stage.after) or None,
                "kernel": sized.kernel,
                "placement": lanes.where(lane),
                "flops": int(sized.stage.flops),
                "bytes": int(sized.stage.bytes),
                **summary.columns(),
                "bound_s": result.bound.bound_s,
                "limiter": _limiter(result.bound.limiter, spec),
                "beats_bound": summary.p75_s < result.bound.bound_s,
                "noisy": summary.noisy,
                **measured.verdict.columns(),
            }
        )
    for index, (schedule, call, bound_s, kind) in enumerate((
        ("serial", serial, bounds.critical_path_s, "critical_path"),
        ("overlapped", overlapped, bounds.aggregate_s, "aggregate"),
    )):  # fmt: skip
        config_id = f"stages/{name}/{schedule}"
        progress.start(schedule, planned[len(stages) + index])
        measured = measure(call, backend, timing, CacheState.WARM, progress, config_id, timer)
        tables["samples"] += sample_rows(
            run_id, config_id, CacheState.WARM, measured.samples, total_flops, "FLOP"
        )
        summary = measured.summary(timing.noisy_iqr_ratio)
        tables["stage_schedules"].append(
            {
                "run_id": run_id,
                "config_id": config_id,
                "scenario": name,
                "schedule": schedule,
                **summary.columns(),
                "bound_s": bound_s,
                "bound_kind": kind,
                "critical_path_bound_s": bounds.critical_path_s,
                "aggregate_bound_s": bounds.aggregate_s,
                "beats_bound": summary.p75_s < bound_s,
                "compute_path": spec["compute_path"],
                "peak_flops_per_s": peak,
                "memory_level": spec["memory_level"],
                "bandwidth_b_per_s": bandwidth,
                "ceilings_run_id": ceilings_run_id,
                "noisy": summary.noisy,
                **measured.verdict.columns(),
            }
        )


def _dependency_order(bounds):
    """The stages in the order the critical-path schedule starts them."""
    return sorted(bounds.stages, key=lambda result: (result.start_s, result.finish_s))


def _limiter(limiter: str, spec: Mapping) -> str:
    return "compute" if limiter == "compute" else spec["memory_level"]
