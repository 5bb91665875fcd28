"""What the counters step counts (docs/counters.md §1): a bounded choice of the cases a timing run
timed (a sweep's GEMM configurations, a workload's cases), each with the child a profiler runs and
the FLOPs its calibration expects.

The choice: the config ids of `counters.configs` that name this sweep or workload, or else at most
`counters.max_configs` of the timed ones, evenly spaced in the timing's order, so the first and
the last are always among them. Only timed cases are counted (a replay needs a timing to pair
with); a listed one that was not timed is skipped, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rooflab.counters.points import ledger_flops
from rooflab.experiments.gemm import GemmCase
from rooflab.experiments.gemm_configs import sweep_configs
from rooflab.experiments.profiled import child_command
from rooflab.experiments.workload_cases import WorkloadCase
from rooflab.vocabulary import point_compute_path
from rooflab.workloads import cases


@dataclass(frozen=True)
class Selection:
    configs: list[GemmCase | WorkloadCase]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (config_id, why)


def timed_cases_of(kind: str, name: str, spec: Mapping) -> list[GemmCase | WorkloadCase]:
    """Every case of a sweep (`kind` "sweep") or a workload, in the order its run times them:
    a sweep's dtype, layout, N, K, then M ascending; a workload's dtype, then its params."""
    if kind == "sweep":
        return [GemmCase(c, spec["seed"]) for c in sweep_configs(name, dict(spec))]
    every = cases(name, spec.get("params") or {}, list(spec["dtypes"]))
    return [WorkloadCase(case, spec) for case in every]


def select_cases(kind: str, name: str, spec: Mapping, timed_ids: set[str], settings) -> Selection:
    """The cases to count, in their timing order; the smallest and largest M of a sweep are
    always among them (one case: the last). `settings`: the CounterSettings (configs,
    max_configs)."""
    ordered = timed_cases_of(kind, name, spec)
    if settings.configs:
        listed = [c for c in settings.configs if c.split("/", 1)[0] == name]
        known = {c.config_id: c for c in ordered}
        chosen, skipped = [], []
        for config_id in listed:
            if config_id not in known:
                skipped.append((config_id, f"not a configuration of {kind} {name}"))
            elif config_id not in timed_ids:
                skipped.append((config_id, "not timed (failed its correctness check?)"))
            else:
                chosen.append(known[config_id])
        return Selection(chosen, skipped)
    timed = [c for c in ordered if c.config_id in timed_ids]
    count = min(settings.max_configs, len(timed))
    if count <= 1:
        return Selection(timed[-1:] if count else [])
    picks = sorted({round(i * (len(timed) - 1) / (count - 1)) for i in range(count)})
    return Selection([timed[i] for i in picks])


@dataclass(frozen=True)
class CountTarget:
    """One case to count: the child a profiler runs, and what its FLOP count must be."""

    config_id: str
    short_id: str  # the progress line's name
    child: tuple[str, ...]  # without perf's --perf-control
    compute_path: str | None  # the path whose FLOP counters are calibrated
    expected_flops: int
    ledger: str  # the expected FLOPs' name in a calibration's reason
    shape: tuple[int, int, int] | None = None  # a GEMM's (m, n, k)


def count_target(case: GemmCase | WorkloadCase, timing: Mapping, backend: str, warmup: int):
    """A timed case (`timing`: its timed_points row), calibrated against the FLOPs its ledger
    says it executes on its compute path: a GEMM's 2MNK on its dtype's path; a workload's
    executed FLOPs (its useful FLOPs where it declares no other) on its dtype's FMA path."""
    gemm = case.kind == "gemm"
    ledger = (
        "2MNK" if gemm else "executed FLOPs" if timing.get("executed_flops") else "useful FLOPs"
    )
    return CountTarget(
        case.config_id,
        case.label if gemm else case.config_id.split("/", 1)[1],
        tuple(child_command(case, backend, warmup)),
        point_compute_path(backend, timing),
        ledger_flops(timing)[1],
        ledger,
        (case.config.m, case.config.n, case.config.k) if gemm else None,
    )
