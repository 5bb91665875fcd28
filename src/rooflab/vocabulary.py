"""The words every layer shares, defined once: the cache states a measurement is taken in and how
a counter replay's cache control pairs with them, the compute path a GEMM is judged against, and
the names of the memory behind the caches, and the cache capacities a ceilings run measured. Cache
states are strings underneath (a StrEnum), so they are stored, printed and compared as the words
themselves."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class CacheState(StrEnum):
    WARM = "warm"  # the same inputs re-run: steady-state reuse of whatever the caches hold
    COLD = "cold"  # the caches evicted before each sample (outside the timed region)


CACHE_STATES = tuple(CacheState)


class StopReason(StrEnum):
    """Why a measurement stopped sampling (experiments.stopping)."""

    CONVERGED = "converged"  # the median's interval reached the rule's width
    TIME_CAP = "time_cap"  # the cap came first: a noisy machine, flagged by its width
    SAMPLE_CAP = "sample_cap"
    RETAKES = "retakes"  # disturbed samples used up their re-takes


# Nsight Compute's --cache-control of a replay -> the cache state of the timing it pairs with, and
# the words stored with a point: a flushed replay counts cold traffic, a no-flush replay warm.
NCU_PAIRINGS = {
    "all": (CacheState.COLD, "flushed replay ↔ cold timing"),
    "none": (CacheState.WARM, "no-flush replay ↔ warm timing"),
}

# backend -> dtype of a GEMM -> name of the compute ceiling it is measured against. On a GPU,
# cuBLAS runs fp64 GEMMs on the FP64 tensor cores (sm_80 on), which are faster than FP64 FMA.
COMPUTE_PATH = {
    "cpu": {"fp64": "fp64_fma", "fp32": "fp32_fma"},
    "cuda": {
        "fp64": "fp64_tensor",
        "fp32": "fp32_fma",
        "tf32": "tf32_tensor",
        "fp16": "fp16_tensor",
        "bf16": "bf16_tensor",
        # through cuBLASLt (backends.cublaslt_args): FP8 in FLOP/s, e4m3 and e5m2 alike; int8 x
        # int8 -> int32 on the integer tensor cores, in OP/s
        "fp8_e4m3": "fp8_tensor",
        "fp8_e5m2": "fp8_tensor",
        "int8": "int8_tensor",
    },
}
# The compute paths whose work is integer operations: their ceilings are in OP/s, and only a
# GEMM whose work is in OP (model.work_unit) is placed against them; every other path is in
# FLOP/s. An integer ceiling is never a FLOP/s ceiling.
INTEGER_PATHS = frozenset({"int8_tensor"})
MEMORY_LEVEL = "DRAM"  # the memory's name when the ceilings do not say otherwise
MEMORY_LEVELS = ("DRAM", "HBM")  # the memory behind the caches: CPU, GPU
HOST_LEVEL = "host"  # a GPU's link to host memory: a level with a ceiling, never a point's


# A clean point whose achieved rate exceeds its attainable one by more than this factor (beyond
# measurement noise) beats its roof: a fault of the roof, which is below what the machine does.
ROOF_BEATEN_EFFICIENCY = 1.05
# Why a point sits where it does (roofline.diagnosis applies them in this order; docs/diagnosis.md).
DIAGNOSIS_CAUSES = (
    "above_roof",
    "conditions",
    "wasted_work",
    "launch_gaps",
    "at_roof",
    "compute_path",
    "low_reuse",
    "memory_parallelism",
)


def compute_path(backend: str | None, dtype: str) -> str | None:
    """The compute ceiling a GEMM of `dtype` on `backend` is paired with (None: no pairing)."""
    return COMPUTE_PATH.get(backend or "cpu", {}).get(dtype)


def workload_compute_path(dtype: str) -> str | None:
    """The compute ceiling a workload case is judged against, on either backend: its dtype's FMA
    chains. A user's kernel is no tensor-core GEMM, and its ledger's FLOPs are what the FP
    counters count (add, mul, fma); None for a dtype without an FMA ceiling (no point)."""
    return f"{dtype}_fma" if dtype in ("fp64", "fp32", "fp16") else None


def point_compute_path(backend: str | None, point) -> str | None:
    """The compute roof of a timed point (a timed_points row): a GEMM's dtype's path on its
    backend, a workload case's its dtype's FMA chains."""
    if point["kind"] == "workload":
        return workload_compute_path(point["dtype"])
    return compute_path(backend, point["dtype"])


def fma_path_name(dtype: str, isa: str | None, widest: bool) -> str:
    """The FMA ceiling of a dtype on an instruction path: `fp64_fma` for the dtype's widest path
    (its default roof, the one its GEMMs and workloads are judged against), `fp64_fma_avx2` for a
    narrower one (the roof of code built for that path)."""
    return f"{dtype}_fma" if widest or isa is None else f"{dtype}_fma_{isa}"


def path_unit(path: str) -> str:
    """The unit of a compute path's ceiling: OP/s for an integer path, else FLOP/s."""
    return "OP/s" if path in INTEGER_PATHS else "FLOP/s"


def datasheet_path(dtype: str) -> str:
    """The datasheet path (config/devices.yaml) a GEMM of one dtype runs on: the dtype's name,
    with the fp8 variants sharing one "fp8" path (`paths`, FLOP/s); int8's is the integer path
    "int8" (`integer_paths`, OP/s: devices.DevicePreset.peak_ops_per_s)."""
    return "fp8" if dtype.startswith("fp8") else dtype


# Points one sweep (or one workload's cases) may have: 100,000 already take hours to time, and
# a cross product of long lists (1000 m x 1000 n x 10 k) would build millions before any job.
MAX_POINTS_PER_SWEEP = 100_000


def too_many_points(lengths: dict[str, int]) -> str | None:
    """Why a sweep whose lists have these lengths (key -> values) is refused, or None."""
    total = 1
    for length in lengths.values():
        total *= length
    if total <= MAX_POINTS_PER_SWEEP:
        return None
    product = " x ".join(f"{length} {key}" for key, length in lengths.items())
    return (
        f"{total:,} points ({product}), over the {MAX_POINTS_PER_SWEEP:,} a sweep may have; "
        "split it or thin its lists"
    )


def measured_cache_bytes(ceilings: Iterable[dict]) -> dict[str, int]:
    """Each cache level's measured capacity in a ceilings run (its `ceilings` rows): the largest
    edge any of its sweeps saw (cache_bytes_measured); a level no sweep saw fall is absent."""
    measured: dict[str, int] = {}
    for row in ceilings:
        if row["kind"] == "bandwidth" and row.get("cache_bytes_measured"):
            level = row["name"]
            measured[level] = max(measured.get(level, 0), row["cache_bytes_measured"])
    return measured
