"""What the counters step counts (docs/counters.md §1): a bounded choice of the configurations a
timing run timed, a sweep's GEMMs or a workload's cases, each with the child a profiler runs and
the FLOPs its calibration expects.

The choice: the config ids of `counters.configs` that name this sweep or workload, or else at most
`counters.max_configs` of the timed ones, evenly spaced in the config's order, so the first and
the last are always among them. Only timed configurations are counted (a replay needs a timing to
pair with); a listed one that was not timed is skipped, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from rooflab.experiments import profiled_gemm, profiled_workload
from rooflab.experiments.gemm_configs import GemmConfig, config_ledger, sweep_configs
from rooflab.vocabulary import compute_path, workload_compute_path
from rooflab.workloads import Case, cases

T = TypeVar("T", GemmConfig, Case)


@dataclass(frozen=True)
class Selection(Generic[T]):
    configs: list[T]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (config_id, why)


def _choose(
    name: str, kind: str, ordered: Sequence[T], timed_ids: set[str], listed_ids, max_configs: int
) -> Selection[T]:
    if listed_ids:
        listed = [c for c in listed_ids if c.split("/", 1)[0] == name]
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
    count = min(max_configs, len(timed))
    if count == 0:
        return Selection([])
    if count == 1:
        return Selection([timed[-1]])
    picks = sorted({round(i * (len(timed) - 1) / (count - 1)) for i in range(count)})
    return Selection([timed[i] for i in picks])


def select_configs(
    sweep_name: str, sweep: Mapping, timed_config_ids: set[str], settings
) -> Selection[GemmConfig]:
    """A sweep's configurations to count, in the sweep's order (dtype, layout, N, K, then M
    ascending): the smallest and largest M are always among them (one configuration: the
    last, the largest M). `settings`: the CounterSettings (configs, max_configs)."""
    ordered = sweep_configs(sweep_name, dict(sweep))
    return _choose(
        sweep_name, "sweep", ordered, timed_config_ids, settings.configs, settings.max_configs
    )


def select_cases(name: str, spec: Mapping, timed_config_ids: set[str], settings) -> Selection[Case]:
    """A workload's cases to count, in the order its cases are timed (dtype, then the params'
    combinations)."""
    ordered = cases(name, spec.get("params") or {}, list(spec["dtypes"]))
    return _choose(
        name, "workload", ordered, timed_config_ids, settings.configs, settings.max_configs
    )


@dataclass(frozen=True)
class CountTarget:
    """One configuration to count: the child a profiler runs, and what its FLOP count must be."""

    config_id: str
    short_id: str  # the progress line's name
    child: tuple[str, ...]  # without perf's --perf-control
    compute_path: str | None  # the path whose FLOP counters are calibrated
    expected_flops: int
    ledger: str  # the expected FLOPs' name in a calibration's reason
    shape: tuple[int, int, int] | None = None  # a GEMM's (m, n, k)


def gemm_target(config: GemmConfig, seed: int, backend: str, warmup: int) -> CountTarget:
    """A sweep's GEMM: calibrated against 2MNK on its dtype's compute path."""
    return CountTarget(
        config.config_id,
        config.short_id,
        tuple(profiled_gemm.child_command(config, seed, backend, warmup)),
        compute_path(backend, config.dtype),
        config_ledger(config).flops,  # 2MNK (the OP of an int8 GEMM)
        "2MNK",
        (config.m, config.n, config.k),
    )


def case_target(case: Case, timing: Mapping, spec: Mapping, backend: str, warmup: int):
    """A workload's case (`timing`: one of its workload_points rows): calibrated against the
    FLOPs its ledger says it executes (its useful FLOPs where it declares no other) on the FMA
    path of its dtype."""
    executed = timing.get("executed_flops")
    child = profiled_workload.child_command(
        case, spec["entry"], spec.get("seed", 0), backend, warmup
    )
    return CountTarget(
        case.config_id,
        case.config_id.split("/", 1)[1],
        tuple(child),
        workload_compute_path(case.dtype),
        int(executed or timing["flops"]),
        "executed FLOPs" if executed else "useful FLOPs",
    )
