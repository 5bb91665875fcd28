"""The Roofline ledgers and bounds (docs/model.md). Pure arithmetic: no I/O, no numpy.

F is floating-point operations (an FMA counts 2), Q bytes across one named memory boundary, C the
peak of one instruction path, B the bandwidth of one memory level. Every function takes and returns
base units: FLOP, B, s, FLOP/s, B/s. A GEMM whose X and W are both integers (int8 x int8 -> int32)
does integer operations: its work is counted the same way (2MNK) but in OP, and its ceiling is in
OP/s (`GemmLedger.work_unit`, `work_unit`); the arithmetic below is the same, only the unit's name
differs, and an OP count is never put beside a FLOP/s roof.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "ELEMENT_BITS",
    "INTEGER_DTYPES",
    "SCALE_BYTES",
    "Bound",
    "Comparison",
    "GemmLedger",
    "HierarchicalBound",
    "Implementation",
    "LevelTerm",
    "ModelError",
    "Stage",
    "StageBounds",
    "StageResult",
    "WeightScales",
    "bound",
    "compare_implementations",
    "element_bits",
    "gemm_ledger",
    "hierarchical_bound",
    "stage_bounds",
    "tensor_bytes",
    "topological_order",
    "work_unit",
]


class ModelError(ValueError):
    """Inputs the model cannot account for (unknown dtype, cycle, missing bandwidth, ...)."""


# Storage bits per element. tf32 is stored as fp32; int4 is packed two per byte; int32 is the
# output of an int8 x int8 GEMM (its accumulator, stored).
ELEMENT_BITS = {
    "fp64": 64,
    "fp32": 32,
    "tf32": 32,
    "bf16": 16,
    "fp16": 16,
    "fp8_e4m3": 8,
    "fp8_e5m2": 8,
    "int8": 8,
    "int4": 4,
    "int32": 32,
}
INTEGER_DTYPES = frozenset({"int8", "int4", "int32"})
# A per-tensor scale (cuBLASLt's A/B/D_SCALE_POINTER for FP8) is one float32 in device memory.
SCALE_BYTES = 4


def element_bits(dtype: str) -> int:
    try:
        return ELEMENT_BITS[dtype]
    except KeyError:
        raise ModelError(f"unknown dtype {dtype!r}; known: {', '.join(ELEMENT_BITS)}") from None


def work_unit(x_dtype: str, w_dtype: str | None = None) -> str:
    """The unit of a GEMM's work: OP when X and W are both integers (the products are integer
    multiply-adds, counted on an integer tensor-core path), else FLOP. A GEMM with integer
    weights and floating-point activations (W4A16) multiplies floats: FLOP."""
    w_dtype = w_dtype or x_dtype
    for dtype in (x_dtype, w_dtype):
        element_bits(dtype)  # an unknown dtype is refused here too
    return "OP" if {x_dtype, w_dtype} <= INTEGER_DTYPES else "FLOP"


def tensor_bytes(dtype: str, count: int) -> int:
    """Bytes to store `count` elements; sub-byte types round up to whole bytes."""
    return -(-count * element_bits(dtype) // 8)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelError(f"{name} must be a positive integer, got {value!r}")
    return value


def _non_negative(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ModelError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _positive(name: str, value: float) -> float:
    if _non_negative(name, value) == 0:
        raise ModelError(f"{name} must be > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class WeightScales:
    """Per-group scales of W: one scale per `group_size` elements along K, per output column."""

    group_size: int
    dtype: str = "fp16"


@dataclass(frozen=True)
class GemmLedger:
    """Y[M×N] = X[M×K]·W[K×N]: useful work (2MNK, in `work_unit`: FLOP, or OP for an integer
    GEMM; the field keeps the name `flops`) and cold-cache model bytes (not measured traffic)."""

    m: int
    n: int
    k: int
    x_dtype: str
    w_dtype: str
    y_dtype: str
    flops: int
    bytes_x: int
    bytes_w: int
    bytes_y_write: int
    bytes_y_read: int
    bytes_bias: int
    bytes_scales: int

    @property
    def bytes(self) -> int:
        return (
            self.bytes_x
            + self.bytes_w
            + self.bytes_y_write
            + self.bytes_y_read
            + self.bytes_bias
            + self.bytes_scales
        )

    @property
    def intensity(self) -> float:
        """FLOP/B, or OP/B for an integer GEMM (`work_unit`)."""
        return self.flops / self.bytes

    @property
    def work_unit(self) -> str:
        return work_unit(self.x_dtype, self.w_dtype)


def gemm_flops(m: int, n: int, k: int) -> int:
    """A GEMM's work: a multiply and an add per (m, n, k), 2MNK (FLOP; OP for integers)."""
    return 2 * m * n * k


def gemm_ledger(
    m: int,
    n: int,
    k: int,
    x_dtype: str,
    w_dtype: str | None = None,
    y_dtype: str | None = None,
    *,
    beta: float = 0,
    bias: bool = False,
    bias_dtype: str | None = None,
    weight_scales: WeightScales | None = None,
    tensor_scales: int = 0,
) -> GemmLedger:
    """F = 2MNK; Q_model = s_x·MK + s_w·KN + s_y·MN, plus s_y·MN when β ≠ 0 (the old Y is read),
    N bias elements, ceil(K/group)·N weight scales, and `tensor_scales` per-tensor float32 scales
    (FP8 through cuBLASLt: 2, the scales of X and W; 3 with an FP8 output's scale). Each input is
    read once, Y written once. F is in OP, not FLOP, when X and W are integers (`work_unit`)."""
    m, n, k = (_positive_int(name, v) for name, v in (("m", m), ("n", n), ("k", k)))
    w_dtype = w_dtype or x_dtype
    y_dtype = y_dtype or x_dtype
    if not isinstance(beta, (int, float)) or not math.isfinite(beta):
        raise ModelError(f"beta must be a finite number, got {beta!r}")
    scales = 0
    if weight_scales is not None:
        group = _positive_int("weight_scales.group_size", weight_scales.group_size)
        scales = tensor_bytes(weight_scales.dtype, -(-k // group) * n)
    if isinstance(tensor_scales, bool) or not isinstance(tensor_scales, int) or tensor_scales < 0:
        raise ModelError(f"tensor_scales must be an integer >= 0, got {tensor_scales!r}")
    scales += SCALE_BYTES * tensor_scales
    return GemmLedger(
        m=m,
        n=n,
        k=k,
        x_dtype=x_dtype,
        w_dtype=w_dtype,
        y_dtype=y_dtype,
        flops=gemm_flops(m, n, k),
        bytes_x=tensor_bytes(x_dtype, m * k),
        bytes_w=tensor_bytes(w_dtype, k * n),
        bytes_y_write=tensor_bytes(y_dtype, m * n),
        bytes_y_read=tensor_bytes(y_dtype, m * n) if beta != 0 else 0,
        bytes_bias=tensor_bytes(bias_dtype or y_dtype, n) if bias else 0,
        bytes_scales=scales,
    )


@dataclass(frozen=True)
class Bound:
    """t ≥ max(F/C, Q/B) and P ≤ min(C, B·I) for one path C and one level B."""

    flops: float
    bytes: float
    peak_flops_per_s: float
    bandwidth_b_per_s: float
    compute_s: float
    memory_s: float
    bound_s: float
    limiter: str  # "compute" | "memory"
    attainable_flops_per_s: float
    intensity: float  # FLOP/B; inf when no bytes move
    ridge: float  # FLOP/B where B·I = C


def bound(flops: float, bytes: float, peak: float, bandwidth: float) -> Bound:
    flops, bytes = _non_negative("flops", flops), _non_negative("bytes", bytes)
    peak, bandwidth = _positive("peak", peak), _positive("bandwidth", bandwidth)
    compute_s, memory_s = flops / peak, bytes / bandwidth
    bound_s = max(compute_s, memory_s)
    intensity = flops / bytes if bytes else math.inf
    return Bound(
        flops=flops,
        bytes=bytes,
        peak_flops_per_s=peak,
        bandwidth_b_per_s=bandwidth,
        compute_s=compute_s,
        memory_s=memory_s,
        bound_s=bound_s,
        # A tie counts as compute: at the ridge more reuse gains nothing.
        limiter="compute" if compute_s >= memory_s else "memory",
        attainable_flops_per_s=min(peak, bandwidth * intensity),
        intensity=intensity,
        ridge=peak / bandwidth,
    )


@dataclass(frozen=True)
class LevelTerm:
    level: str
    bytes: float
    bandwidth_b_per_s: float
    intensity: float
    memory_s: float
    attainable_flops_per_s: float


@dataclass(frozen=True)
class HierarchicalBound:
    """P ≤ min(C, B_level·I_level, ...), each term from its own level's bytes and bandwidth."""

    flops: float
    peak_flops_per_s: float
    compute_s: float
    levels: dict[str, LevelTerm]
    bound_s: float
    limiter: str  # "compute" or the binding level's name
    attainable_flops_per_s: float


def hierarchical_bound(
    flops: float,
    bytes_by_level: Mapping[str, float],
    peak: float,
    bandwidth_by_level: Mapping[str, float],
) -> HierarchicalBound:
    missing_bandwidth = sorted(set(bytes_by_level) - set(bandwidth_by_level))
    missing_bytes = sorted(set(bandwidth_by_level) - set(bytes_by_level))
    if missing_bandwidth:
        raise ModelError(f"level(s) {', '.join(missing_bandwidth)} have bytes but no bandwidth")
    if missing_bytes:
        raise ModelError(f"level(s) {', '.join(missing_bytes)} have a bandwidth but no bytes")
    if not bytes_by_level:
        raise ModelError("at least one memory level is needed")
    flops, peak = _non_negative("flops", flops), _positive("peak", peak)
    levels = {}
    for level, q in bytes_by_level.items():
        one = bound(flops, q, peak, bandwidth_by_level[level])
        levels[level] = LevelTerm(
            level,
            one.bytes,
            one.bandwidth_b_per_s,
            one.intensity,
            one.memory_s,
            one.bandwidth_b_per_s * one.intensity,
        )
    compute_s = flops / peak
    slowest = max(levels.values(), key=lambda term: term.memory_s)
    bound_s = max(compute_s, slowest.memory_s)
    return HierarchicalBound(
        flops=flops,
        peak_flops_per_s=peak,
        compute_s=compute_s,
        levels=levels,
        bound_s=bound_s,
        limiter="compute" if compute_s >= slowest.memory_s else slowest.level,
        attainable_flops_per_s=min([peak] + [t.attainable_flops_per_s for t in levels.values()]),
    )


@dataclass(frozen=True)
class Stage:
    name: str
    flops: float
    bytes: float
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class StageResult:
    name: str
    after: tuple[str, ...]
    bound: Bound
    start_s: float  # earliest start on the critical-path schedule
    finish_s: float
    on_critical_path: bool


@dataclass(frozen=True)
class StageBounds:
    """Lower bound for stages with dependencies: max(critical path, aggregate ledger)."""

    stages: list[StageResult]
    critical_path_s: float
    aggregate_s: float
    bound_s: float
    critical_path: list[str] = field(default_factory=list)


# What a measured stage runs, by the FLOP per byte it does across the memory level: a STREAM
# triad (a[i] = b[i] + s·c[i]: one multiply-add, 2 FLOP, per 24 B of fp64) and FMA chains held in
# registers (no bytes). A measurable scenario's stages are sized from these (sized_stage).
STAGE_KERNEL_INTENSITY = {"stream": 2 / 24, "fma": math.inf}


def sized_stage(
    name: str, kernel: str, time_s: float, peak: float, bandwidth: float, after=()
) -> Stage:
    """A stage of `kernel` sized to take `time_s` at its own bound max(F/C, Q/B) on these
    ceilings: a stream stage moves Q = time·B (and does its triad's FLOPs), an fma stage does
    F = time·C."""
    if kernel not in STAGE_KERNEL_INTENSITY:
        known = ", ".join(STAGE_KERNEL_INTENSITY)
        raise ModelError(f"stage {name!r}: unknown kernel {kernel!r}; known: {known}")
    _positive("time_s", time_s)
    if kernel == "stream":
        moved = time_s * _positive("bandwidth", bandwidth)
        return Stage(name, moved * STAGE_KERNEL_INTENSITY["stream"], moved, tuple(after))
    return Stage(name, time_s * _positive("peak", peak), 0.0, tuple(after))


_NONE_LEFT = object()  # a visited stage's dependencies are all done


CHAIN_SHOWN = 4  # stages shown at each end of a long chain in a message


def _chain_text(names: list[str]) -> str:
    """`a -> b -> c`, with the middle of a long chain counted rather than printed (a cycle of
    100,000 stages is one readable line, not a megabyte)."""
    if len(names) > 2 * CHAIN_SHOWN + 1:
        left = len(names) - 2 * CHAIN_SHOWN
        names = [*names[:CHAIN_SHOWN], f"({left} more)", *names[-CHAIN_SHOWN:]]
    return " -> ".join(names)


def topological_order(stages: list[Stage]) -> list[Stage]:
    """Each stage after its `after` stages: depth-first in list order, dependencies in their order;
    a duplicate name, an unknown `after` name or a cycle is refused. Iterative (no recursion limit)
    and linear in stages plus dependencies."""
    by_name: dict[str, Stage] = {}
    for stage in stages:
        if stage.name in by_name:
            raise ModelError(f"stage {stage.name!r} is defined twice")
        by_name[stage.name] = stage
    for stage in stages:
        for dep in stage.after:
            if dep not in by_name:
                raise ModelError(f"stage {stage.name!r} runs after unknown stage {dep!r}")
    order: list[Stage] = []
    done: set[str] = set()
    for root in stages:
        if root.name in done:
            continue
        # The stages being visited, outermost first, with each one's dependencies still to visit.
        path, on_path = [root.name], {root.name: 0}
        pending = [iter(root.after)]
        while pending:
            dep = next((d for d in pending[-1] if d not in done), _NONE_LEFT)
            if dep is _NONE_LEFT:
                pending.pop()
                name = path.pop()
                del on_path[name]
                done.add(name)
                order.append(by_name[name])
            elif dep in on_path:
                cycle = [*path[on_path[dep] :], dep]
                raise ModelError(f"stages form a cycle: {_chain_text(cycle)}")
            else:
                on_path[dep] = len(path)
                path.append(dep)
                pending.append(iter(by_name[dep].after))
    return order


def stage_bounds(stages: Iterable[Stage], peak: float, bandwidth: float) -> StageBounds:
    """Each stage costs its own max(F/C, Q/B); a stage starts when all its `after` stages finish.
    (a) critical path = latest finish; (b) aggregate = max(ΣF/C, ΣQ/B); both are valid lower
    bounds, so the bound is their maximum. Summing the ledgers alone (b) hides serial waits.
    Linear in stages plus dependencies."""
    stages = list(stages)
    if not stages:
        raise ModelError("no stages given")
    order = topological_order(stages)
    bounds = {s.name: bound(s.flops, s.bytes, peak, bandwidth) for s in order}
    finish: dict[str, float] = {}
    start: dict[str, float] = {}
    for s in order:
        start[s.name] = max((finish[d] for d in s.after), default=0.0)
        finish[s.name] = start[s.name] + bounds[s.name].bound_s
    # Walk back from the last finisher through the predecessor that finished last.
    by_name = {s.name: s for s in stages}
    last = max(order, key=lambda s: finish[s.name]).name
    path = [last]
    while by_name[path[-1]].after:
        path.append(max(by_name[path[-1]].after, key=lambda d: finish[d]))
    path.reverse()
    on_path = set(path)
    critical_path_s = finish[last]
    aggregate = bound(sum(s.flops for s in stages), sum(s.bytes for s in stages), peak, bandwidth)
    results = [
        StageResult(
            s.name, tuple(s.after), bounds[s.name], start[s.name], finish[s.name], s.name in on_path
        )
        for s in stages
    ]
    return StageBounds(
        results, critical_path_s, aggregate.bound_s, max(critical_path_s, aggregate.bound_s), path
    )


@dataclass(frozen=True)
class Implementation:
    name: str
    useful_flops: float  # what the problem needs
    executed_flops: float  # what the hardware did (padding, recomputation included)
    seconds: float


@dataclass(frozen=True)
class Comparison:
    baseline: Implementation
    candidate: Implementation
    speedup: float  # baseline time / candidate time, for the same useful work
    useful_flops_per_s: tuple[float, float]
    executed_flops_per_s: tuple[float, float]

    @property
    def statement(self) -> str:
        a, b = self.executed_flops_per_s
        rate = "fell" if b < a else "rose" if b > a else "held"
        return (
            f"{self.candidate.name} is {self.speedup:.3g}x the speed of {self.baseline.name} "
            f"on the same useful work; executed FLOP/s {rate} from {a:.4g} to {b:.4g}"
        )


def compare_implementations(a: Implementation, b: Implementation) -> Comparison:
    """Compare times for the same useful work; executed FLOP/s is reported, never the verdict."""
    for impl in (a, b):
        _positive(f"{impl.name}.seconds", impl.seconds)
        _positive(f"{impl.name}.useful_flops", impl.useful_flops)
        _non_negative(f"{impl.name}.executed_flops", impl.executed_flops)
    if not math.isclose(a.useful_flops, b.useful_flops, rel_tol=1e-9):
        raise ModelError(
            f"{a.name} and {b.name} do different useful work ({a.useful_flops:g} vs "
            f"{b.useful_flops:g} FLOP); compare implementations of the same problem"
        )
    return Comparison(
        baseline=a,
        candidate=b,
        speedup=a.seconds / b.seconds,
        useful_flops_per_s=(a.useful_flops / a.seconds, b.useful_flops / b.seconds),
        executed_flops_per_s=(a.executed_flops / a.seconds, b.executed_flops / b.seconds),
    )
