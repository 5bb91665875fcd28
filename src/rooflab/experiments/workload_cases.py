"""A user's workload (rooflab.Workload), measured: every case (one combination of its params, in one
dtype) built by its factory, checked against the factory's own reference, then timed per cache
state with the same discipline as a GEMM point (warm-up by time, samples, the flush for cold,
conditions around each, disturbance judged). A case whose check fails is recorded and not timed.
Bad input (an entry that does not import, a factory that raises or returns something else, a
ledger that is not a positive integer, a check that returns NaN) is one WorkloadError naming the
workload and the case; nothing of the run is returned."""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping

import numpy as np

from rooflab.backends.base import Backend
from rooflab.experiments.rounds import TimedPoint
from rooflab.experiments.runs import MeasuringRun, measuring_run
from rooflab.experiments.timing import TimingSettings
from rooflab.experiments.watchdog import beat, step_limit
from rooflab.vocabulary import CacheState
from rooflab.workloads import (
    Case,
    Context,
    Workload,
    WorkloadError,
    cases,
    check_error,
    checked,
    load_entry,
)

# The dtype names a workload case may have, as numpy dtypes (ctx.dtype).
NUMPY_DTYPES = {
    "fp64": "float64",
    "fp32": "float32",
    "fp16": "float16",
    "int64": "int64",
    "int32": "int32",
}


def case_seed(case: Case, seed: int = 0) -> int:
    """A seed per case, stable across runs and machines."""
    return zlib.crc32(f"{seed}/{case.config_id}".encode())


def build_case(factory, case: Case, backend: Backend, seed: int = 0) -> Workload:
    """The factory's Workload for one case, checked; one WorkloadError naming the case."""
    if case.dtype not in NUMPY_DTYPES:
        known = ", ".join(NUMPY_DTYPES)
        raise WorkloadError(f"{case.config_id}: unknown dtype {case.dtype!r}; known: {known}")
    context = Context(
        xp=backend.array_module,
        dtype=np.dtype(NUMPY_DTYPES[case.dtype]),
        rng=np.random.default_rng(case_seed(case, seed)),
        backend=backend.name,
    )
    try:
        built = factory(dict(case.params), context)
    except WorkloadError:
        raise
    except Exception as error:
        raise WorkloadError(
            f"{case.config_id}: the factory raised {type(error).__name__}: {error}"
        ) from None
    return checked(built, case.config_id)


def run_workload(
    backend: Backend,
    name: str,
    spec: Mapping,
    timing: TimingSettings,
    *,
    run_id: str | None = None,
) -> dict[str, list[dict]]:
    """Check and time every case of workload `name` (`spec`: the config's workloads.<name>: entry,
    params, dtypes, cache_states, same_work_as, seed); the rows of each table (nothing written).
    Holds the machine lock throughout: one measurement at a time."""
    factory = load_entry(spec["entry"], name)
    every_case = cases(name, spec.get("params") or {}, list(spec["dtypes"]))
    with measuring_run(
        backend, "workload", name,
        tables=("correctness", "samples", "workload_points"), disturbance=timing.disturbance,
        run_id=run_id,
    ) as run:  # fmt: skip
        _cases(run, spec, factory, every_case, timing)
        return run.close({"workload": dict(spec), "timing": timing.record()})


def _cases(run: MeasuringRun, spec, factory, every_case, timing) -> None:
    """Check and time every case, in rounds, into the run's tables."""
    backend, name, progress, run_id, tables = (
        run.backend, run.name, run.progress, run.run_id, run.tables
    )  # fmt: skip
    cache_states = list(spec.get("cache_states") or [CacheState.WARM, CacheState.COLD])
    planned = timing.warmup_s + timing.cooldown_s + timing.min_time_s
    progress.plan([planned] * len(every_case) * len(cache_states) * timing.rounds)
    points: dict[tuple[str, str], TimedPoint] = {}
    # config_id -> (bytes, executed FLOPs), and the library's threads while it was timed
    ledgers: dict[str, tuple[tuple[int, int | None], int | None]] = {}
    failed: set[str] = set()  # failed a check: not built, checked nor timed again
    # Round 1 checks each case, then times the ones that passed; later rounds build those again
    # from the same seed and time them again (experiments.rounds).
    with backend.limited_library_threads():
        for round_index in range(timing.rounds):
            for case in every_case:
                if case.config_id in failed:
                    continue
                # a factory may set the BLAS or OpenMP threads: that holds for its own case only
                with backend.library_threads_kept():
                    if not _time_case(
                        backend, name, spec, factory, case, cache_states, round_index,
                        timing, tables, points, ledgers, run_id, progress,
                    ):  # fmt: skip
                        failed.add(case.config_id)
    for case in every_case:
        for cache_state in cache_states:
            if (case.config_id, cache_state) in points:
                point = points[(case.config_id, cache_state)]
                ledger, threads = ledgers[case.config_id]
                row = _row(case, spec, point, ledger, backend, timing)
                row |= {"run_id": run_id, "threads": threads}
                tables["workload_points"].append(row)


def _time_case(
    backend,
    name,
    spec,
    factory,
    case,
    cache_states,
    round_index,
    timing,
    tables,
    points,
    ledgers,
    run_id,
    progress,
) -> bool:
    """Build one case, check it (round 1), time it in each cache state and check it again after
    each; its ledger and library threads go to `ledgers`. False once a check failed (its row
    is stored)."""
    what = f"workload {name} case {case.config_id}"
    planned = timing.warmup_s + timing.cooldown_s + timing.min_time_s
    rounds_left = timing.rounds - round_index
    with step_limit(timing.max_call_s, what):
        workload = build_case(factory, case, backend, spec.get("seed", 0))
        beat()
        if not (round_index or _check(backend, case, workload, run_id, tables)):
            progress.drop([planned] * len(cache_states) * rounds_left)
            return False  # a wrong result is recorded, never timed
    executed = workload.executed_flops
    ledger = (int(workload.bytes), None if executed is None else int(executed))
    # the threads as the factory left them: what the timing ran with
    ledgers[case.config_id] = ledger, backend.library_threads()
    for index, cache_state in enumerate(cache_states):
        point = points.setdefault(
            (case.config_id, cache_state),
            TimedPoint(case.config_id, cache_state, workload.flops),
        )
        rounds = f" round {round_index + 1}" if timing.rounds > 1 else ""
        progress.start(f"{case.config_id} {cache_state}{rounds}", planned)
        with step_limit(timing.max_call_s, f"{what} {cache_state}"):
            point.time_round(
                backend, workload.run, timing, tables, run_id=run_id, progress=progress,
                operands=workload.arrays,
            )  # fmt: skip
        # checked again after every timing round: a kernel that goes wrong after some calls
        # is caught near where it did, and its later rounds are not timed
        last = round_index == timing.rounds - 1 and index == len(cache_states) - 1
        when = (
            AFTER_TIMING
            if last
            else f"{BEFORE_TIMING}, again after its {cache_state} timing{rounds}"
        )
        with step_limit(timing.max_call_s, what):
            if not _check(backend, case, workload, run_id, tables, when, only_failed=not last):
                left = (len(cache_states) - index - 1) + len(cache_states) * (rounds_left - 1)
                progress.drop([planned] * left)
                return False
    return True


BEFORE_TIMING = "the workload's own check() against its reference"
# A kernel may go wrong only after many calls (state that drifts, a buffer it overruns): a case
# whose check fails after a timing round keeps its timing in the store but is never placed on
# the Roofline. Passed checks between rounds are not stored, only the last one.
AFTER_TIMING = BEFORE_TIMING + ", again after each timing round"


def _check(
    backend: Backend,
    case: Case,
    workload: Workload,
    run_id: str,
    tables,
    when: str = BEFORE_TIMING,
    only_failed: bool = False,
) -> bool:
    """Run the case once and compare with its reference; its correctness row is stored (with
    `only_failed`, only where the check failed)."""
    if workload.check is None:
        return True
    with backend.nvtx_range(f"{case.config_id}/correctness"):
        workload.run()
        backend.synchronize()
    error = check_error(workload, case.config_id)
    passed = error <= workload.tolerance
    if only_failed and passed:
        return True
    tables["correctness"].append(
        {
            "run_id": run_id,
            "config_id": case.config_id,
            "sweep": case.workload,
            "dtype": case.dtype,
            "metric": "max_relative_error",
            "error": error,
            "tolerance": float(workload.tolerance),
            "passed": passed,
            "detail": when,
        }
    )
    return passed


def _row(case, spec, point: TimedPoint, ledger: tuple, backend, timing) -> dict:
    """A case's workload_points row: its ledger (useful FLOPs, bytes, executed FLOPs) and its
    timing columns over every round."""
    bytes_model, executed_flops = ledger
    return {
        "config_id": case.config_id,
        "sweep": case.workload,
        "entry": spec["entry"],
        "params": json.dumps(case.params, sort_keys=True),
        "dtype": case.dtype,
        "same_work_as": spec.get("same_work_as"),
        "flops": int(point.flops),
        "bytes_model": bytes_model,
        "executed_flops": executed_flops,
        **point.columns(backend, timing),
    }
