"""The library GEMM ceilings (BLAS on a CPU; cuBLAS, cuBLASLt on a GPU): each library call a
dtype's ceiling is timed through, checked before it is timed, its samples and conditions kept."""

from __future__ import annotations

import statistics
from dataclasses import replace

from rooflab.backends.base import BackendError, LibraryVariant
from rooflab.conditions.disturbance import add_gpu_processes, wait_until_idle
from rooflab.conditions.nvml import clock_flags
from rooflab.experiments.ceiling_plan import planned_blas_s
from rooflab.experiments.correctness import check_gemm
from rooflab.experiments.runs import conditions_row, during_rows
from rooflab.experiments.timing import clean, fastest_window_median, measure, sample_rows
from rooflab.model import work_unit
from rooflab.units import format_quantity
from rooflab.vocabulary import CacheState


def ceiling_flags(tables: dict, config_ids: set[str], max_clock_change: float) -> dict:
    readings = [c for c in tables["conditions"] if c["config_id"] in config_ids]
    return clock_flags(readings, max_clock_change)


def library_ceilings(
    backend, dtype, settings, run_id, tables, progress, flop_rate: float | None = None
) -> list[dict]:
    """A dtype's library GEMM ceilings: a row per call the backend times for it
    (`library_variants`; on CUDA, bf16 through cuBLAS gemmEx and through cuBLASLt), all named
    `library_path(dtype)`, the kernel telling the calls apart. As for every name, the roof is the
    best row; where there are several, each row's method says which is the faster, by how much.
    `flop_rate`: the dtype's FMA roof, measured before it, which its plan is made from."""
    variants = backend.library_variants(dtype)
    planned = planned_blas_s(settings, backend.rest_before_peak_s, flop_rate)
    progress.add([planned] * (len(variants) - 1))
    rows = [
        _blas_ceiling(backend, dtype, variant, index, settings, run_id, tables, progress, planned)
        for index, variant in enumerate(variants)
    ]
    if len(rows) > 1:
        _compare_variants(rows, variants)
    return rows


def _compare_variants(rows: list[dict], variants: tuple[LibraryVariant, ...]) -> None:
    """Add to each row's method which of the library calls is the faster, and by how much."""
    best = max(range(len(rows)), key=lambda i: rows[i]["value"])
    kind = "op_rate" if rows[best]["unit"] == "OP/s" else "flop_rate"
    for i, row in enumerate(rows):
        others = [j for j in range(len(rows)) if j != i]
        beside = ", ".join(
            f"{variants[j].library} ({format_quantity(rows[j]['value'], kind, 4)})" for j in others
        )
        fast, slow = (i, max(others, key=lambda j: rows[j]["value"])) if i == best else (best, i)
        who = "this" if i == best else variants[best].library
        by = rows[fast]["value"] / rows[slow]["value"] - 1
        row["method"] += f"; timed beside {beside}: {who} is the faster, by {by:.1%}, so the roof"


def _check_library_gemm(backend, operands, dtype: str, config_id: str) -> None:
    """Correct before timed, as in the sweeps (experiments.correctness): a wrong result stops."""
    backend.poison(operands.y)
    backend.matmul(operands)
    backend.synchronize()
    checks, _, _ = check_gemm(
        operands.x, operands.w, operands.y, operands.layout, dtype,
        xp=backend.array_module, scales=operands.scales,
    )  # fmt: skip
    failed = [f"{c.metric} {c.error:.3g} > {c.tolerance:.3g}" for c in checks if not c.passed]
    if failed:
        raise BackendError(f"{config_id}: the library GEMM's result is wrong: {'; '.join(failed)}")


def _blas_ceiling(
    backend, dtype, variant, index, settings, run_id, tables, progress, planned: float
) -> dict:
    n = settings.blas_n
    # the first variant keeps the config id of a single library GEMM; the others add their kernel
    config_id = f"blas/{dtype}/n{n}" + (f"/{variant.kernel}" if index else "")
    unit = work_unit(dtype)  # OP for int8, else FLOP
    progress.start(f"library GEMM {dtype} n={n} ({variant.library})", planned)
    operands = backend.library_operands(n, dtype, variant)
    _check_library_gemm(backend, operands, dtype, config_id)
    wait_until_idle()  # numba's pool may still spin from the kernels before it
    before = conditions_row(backend, run_id, "before", config_id)
    timing = replace(
        settings.blas_timing,
        disturbance=settings.disturbance,
        cooldown_s=backend.rest_before_peak_s,
    )
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
        sample_rows(run_id, config_id, CacheState.WARM, measured.samples, 2 * n**3, unit)
    )
    verdict = add_gpu_processes(measured.verdict, readings)
    # The clean samples in the order they were taken: a window of consecutive clean samples.
    seconds = [s.seconds for s in clean(measured.samples)]
    window = min(settings.windows, len(seconds))
    fastest_s, windows = fastest_window_median(seconds, window)
    sustained = format_quantity(2 * n**3 / statistics.median(seconds), f"{unit.lower()}_rate", 4)
    idle = timing.cooldown_s
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
        "kernel": variant.kernel,
        "dtype": dtype,
        "value": 2 * n**3 / fastest_s,
        "unit": f"{unit}/s",
        "method": (
            f"{variant.description} of {n}x{n}x{n} (layout {variant.layout}, 2n³ {unit}), "
            f"checked, then {rested}{best} warm samples "
            f"(the median of all {len(seconds)}, under the clocks they saw: {sustained}; "
            f"{timing.rule().describe()})"
        ),
        "cache_state": CacheState.WARM,
        "threads": threads,
        "n_points": 1,
        "config_id": config_id,
        **measured.stop.columns(),
        **ceiling_flags(tables, {config_id}, settings.max_clock_change),
        **verdict.columns(),
    }
