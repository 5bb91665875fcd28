"""GEMM sweeps: every configuration checked for correctness, then timed per cache state."""

from __future__ import annotations

from rooflab.backends.base import Backend
from rooflab.experiments.correctness import check_gemm
from rooflab.experiments.gemm_configs import (
    GemmConfig,
    check_fits,
    config_ledger,
    sweep_configs,
)
from rooflab.experiments.rounds import TimedPoint
from rooflab.experiments.runs import MeasuringRun, measuring_run
from rooflab.experiments.timing import TimingSettings


def run_gemm_sweep(
    backend: Backend,
    name: str,
    sweep: dict,
    timing: TimingSettings | None,
    *,
    passed_config_ids: set[str] | None = None,
    run_id: str | None = None,
) -> dict[str, list[dict]]:
    """Check and time one sweep; return the rows of each table (nothing is written here).

    - `timing` None: check correctness only (a run of kind "correctness");
    - `passed_config_ids` given: the check was done by an earlier run; time only those;
    - otherwise: check every configuration, then time those that passed (kind "gemm").

    Holds the machine lock (experiments.machine_lock) throughout: one measurement at a time."""
    kind = "correctness" if timing is None else "gemm"
    configs = sweep_configs(name, sweep)
    if passed_config_ids is not None:
        configs = [c for c in configs if c.config_id in passed_config_ids]
    # Refused before waiting for the machine, not after another measurement's minutes.
    check_fits(backend, configs)
    timed = ("samples", "gemm_points") if timing is not None else ()
    with measuring_run(
        backend, kind, name, what=f"gemm sweep {name}",
        tables=("correctness", *timed), disturbance=timing and timing.disturbance, run_id=run_id,
    ) as run:  # fmt: skip
        _sweep(run, configs, sweep, timing, checked=passed_config_ids is None)
        return run.close({"sweep": sweep, "timing": timing.record() if timing else None})


def planned_timing_s(timing: TimingSettings) -> float:
    """Planned seconds of timing one configuration in one cache state: its warm-up, idle and
    sampling budgets (a GEMM slower than the budget over the sample floor takes longer; the
    ETA's measured rate corrects for that as the sweep goes)."""
    return timing.warmup_s + timing.cooldown_s + timing.min_time_s


def _sweep(run: MeasuringRun, configs, sweep: dict, timing: TimingSettings | None, checked: bool):
    """Check each configuration (where `checked`), then time those that passed, into the run's
    tables."""
    backend, progress, run_id, tables = run.backend, run.progress, run.run_id, run.tables
    if timing is not None:
        progress.plan([t for _ in configs for t in _planned(timing, sweep)])
    else:  # a check's cost is not planned: the ETA follows the checks done
        progress.plan([1.0] * len(configs), seconds_per_unit=None)
    points: dict[tuple[str, str], TimedPoint] = {}  # every timed point, in sweep order
    # The GEMM library's pool at an explicit size for the whole sweep (recorded per point). Round
    # 1 checks each configuration, then times the ones that passed; later rounds time those
    # again, on operands made anew from the same seed (experiments.rounds).
    with backend.limited_library_threads() as threads:
        for round_index in range(timing.rounds if timing is not None else 1):
            for config in configs:
                if round_index and (config.config_id, sweep["cache_states"][0]) not in points:
                    continue  # failed its check
                if timing is None:
                    progress.start(config.short_id)
                operands = backend.gemm_operands(
                    config.m, config.n, config.k, config.dtype, config.layout, sweep["seed"]
                )
                if (
                    round_index == 0
                    and checked
                    and not _check_config(backend, config, operands, run_id, sweep["seed"], tables)
                ):
                    if timing is not None:  # its timings leave the plan
                        progress.drop(_planned(timing, sweep))
                    continue  # a wrong result is recorded, never timed
                if timing is not None:
                    _time_config(backend, config, operands, sweep, timing, run_id, tables,
                                 progress, points)  # fmt: skip
                del operands
    if timing is not None:
        for (config_id, _), point in points.items():
            config = next(c for c in configs if c.config_id == config_id)
            tables["gemm_points"].append(
                _point_row(backend, config, point, timing, run_id, threads)
            )


def _check_config(backend, config, operands, run_id, seed, tables) -> bool:
    backend.poison(operands.y)
    with backend.nvtx_range(f"{config.config_id}/correctness"):
        backend.matmul(operands)
        backend.synchronize()
    # Where the operands live (numpy, or CuPy on the device): only sampled results come back.
    checks, rows, cols = check_gemm(
        operands.x,
        operands.w,
        operands.y,
        config.layout,
        config.dtype,
        seed=seed,
        xp=backend.array_module,
        scales=operands.scales,
    )
    for check in checks:
        tables["correctness"].append(
            {
                **_identity(config, run_id),
                "layout": config.layout,
                "metric": check.metric,
                "error": check.error,
                "tolerance": check.tolerance,
                "passed": check.passed,
                "rows_checked": rows,
                "cols_checked": cols,
                "detail": check.detail,
            }
        )
    return all(check.passed for check in checks)


def _planned(timing: TimingSettings, sweep: dict) -> list[float]:
    """The planned seconds of one configuration's timings: every cache state in every round."""
    return [planned_timing_s(timing)] * len(sweep["cache_states"]) * timing.rounds


def _time_config(backend, config, operands, sweep, timing, run_id, tables, progress, points):
    """One round of a configuration: each cache state timed once more (points: the sweep's
    TimedPoint per configuration and cache state)."""
    ledger = config_ledger(config)
    for cache_state in sweep["cache_states"]:
        point = points.setdefault(
            (config.config_id, cache_state), TimedPoint(config.config_id, cache_state, ledger.flops)
        )
        rounds = f" round {len(point.measurements) + 1}" if timing.rounds > 1 else ""
        progress.start(f"{config.short_id} {cache_state}{rounds}", planned_timing_s(timing))
        taken = len(tables["samples"])
        point.time_round(
            backend, lambda: backend.matmul(operands), timing, tables, run_id=run_id,
            progress=progress, operands=(operands.x, operands.w, operands.y),
        )  # fmt: skip
        for sample in tables["samples"][taken:]:  # rounds names the amount FLOP; int8's is OP
            sample["amount_unit"] = ledger.work_unit


def _identity(config: GemmConfig, run_id: str) -> dict:
    """The columns that name a configuration in its run (correctness and gemm_points rows)."""
    return {
        "run_id": run_id,
        "config_id": config.config_id,
        "sweep": config.sweep,
        "m": config.m,
        "n": config.n,
        "k": config.k,
        "dtype": config.dtype,
    }


def _point_row(backend, config, point: TimedPoint, timing, run_id, threads) -> dict:
    ledger = config_ledger(config)
    return {
        **_identity(config, run_id),
        "x_dtype": ledger.x_dtype,
        "w_dtype": ledger.w_dtype,
        "y_dtype": ledger.y_dtype,
        "layout": config.layout,
        "flops": ledger.flops,  # OP for int8 (ledger.work_unit)
        "bytes_model": ledger.bytes,
        "threads": threads,
        **point.columns(backend, timing),
    }
