"""A user's workload (rooflab.Workload), measured: every case (one combination of its params, in one
dtype) built by its factory, checked against the factory's own reference, then timed per cache
state with the same discipline as a GEMM point (warm-up by time, samples, the flush for cold,
conditions around each, disturbance judged). A case whose check fails is recorded and not timed.
Bad input (an entry that does not import, a factory that raises or returns something else, a
ledger that is not a positive integer, a check that returns NaN) is one WorkloadError naming the
workload and the case; nothing of the run is returned."""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from rooflab.backends.base import Backend
from rooflab.experiments.runs import measuring_run
from rooflab.experiments.timed_cases import Built, time_cases
from rooflab.experiments.timing import TimingSettings
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
    load_entry(spec["entry"], name, spec.get("path", ()))  # refused before waiting for the machine
    every_case = cases(name, spec.get("params") or {}, list(spec["dtypes"]))
    cache_states = list(spec.get("cache_states") or [CacheState.WARM, CacheState.COLD])
    with measuring_run(
        backend, "workload", name,
        tables=("correctness", "samples", "timed_points"), disturbance=timing.disturbance,
        run_id=run_id,
    ) as run:  # fmt: skip
        timed = [WorkloadCase(case, spec) for case in every_case]
        time_cases(run, timed, cache_states, timing)
        return run.close({"workload": dict(spec), "timing": timing.record()})


@dataclass(frozen=True)
class WorkloadCase:
    """A workload's case as a timed case: built by its factory from the case's seed, checked
    against its own reference before timing and again after each timing round."""

    case: Case
    # its workload's config section (entry, seed, same_work_as) and `path`, the config's
    # workloads_path
    spec: Mapping
    kind = "workload"
    recheck = True

    @property
    def config_id(self) -> str:
        return self.case.config_id

    @property
    def label(self) -> str:
        return self.case.config_id

    @property
    def what(self) -> str:
        return f"workload {self.case.workload} case {self.case.config_id}"

    def work_hint(self) -> None:
        return None  # its ledger is the factory's: known once it is built

    def child_spec(self) -> dict:
        """What a profiler's child needs to build the case again (experiments.profiled)."""
        case, seed = self.case, self.spec.get("seed", 0)
        return {"kind": self.kind, "workload": case.workload, "entry": self.spec["entry"],
                "dtype": case.dtype, "params": case.params, "seed": seed,
                "path": [os.path.abspath(p) for p in self.spec.get("path", ())]}  # fmt: skip

    def build(self, backend: Backend) -> Built:
        case, spec = self.case, self.spec
        factory = load_entry(spec["entry"], case.workload, spec.get("path", ()))
        workload = build_case(factory, case, backend, spec.get("seed", 0))

        def check(when: str) -> list[dict]:
            if workload.check is None:
                return []
            workload.run()
            backend.synchronize()
            error = check_error(workload, case.config_id)
            return [
                {
                    "config_id": case.config_id,
                    "sweep": case.workload,
                    "dtype": case.dtype,
                    "metric": "max_relative_error",
                    "error": error,
                    "tolerance": float(workload.tolerance),
                    "passed": error <= workload.tolerance,
                    "detail": when,
                }
            ]

        executed = workload.executed_flops
        columns = {
            "sweep": case.workload, "entry": spec["entry"],
            "params": json.dumps(case.params, sort_keys=True), "dtype": case.dtype,
            "same_work_as": spec.get("same_work_as"), "flops": int(workload.flops),
            "bytes_model": int(workload.bytes),
            "executed_flops": None if executed is None else int(executed),
        }  # fmt: skip
        return Built(workload.run, check, columns, workload.arrays, footprint=workload.footprint)
