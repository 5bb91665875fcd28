"""Which ncu metrics, per chip: the fixed list (bytes per memory level, SASS FLOP counts,
duration, clocks) and the tensor alternatives, what a chip has (`--query-metrics`), and the bytes
and FLOPs per path computed from the summed metrics."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rooflab.counters.ncu.command import NCU, ncu_problem
from rooflab.counters.ncu.raw_csv import CounterParseError, MetricTotal
from rooflab.counters.tool import Unavailable, run_tool

# -- the metric list -------------------------------------------------------------------------------

DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
L2_BYTES = "lts__t_bytes.sum"  # bytes requested from L2 (all sources)
L1_BYTES = "l1tex__t_bytes.sum"  # bytes requested from L1/TEX
# Memory level -> the metrics whose sum is that level's traffic. "HBM" is the CUDA backend's name
# for its memory (backends/cuda.py memory_level), so points pair with its bandwidth ceiling.
LEVEL_METRICS: dict[str, tuple[str, ...]] = {
    "HBM": (DRAM_READ, DRAM_WRITE),
    "L2": (L2_BYTES,),
    "L1": (L1_BYTES,),
}
DURATION = "gpu__time_duration.sum"  # replayed, serialised: recorded, never a point's time
CLOCK_METRICS = (
    "sm__cycles_elapsed.avg.per_second",  # SM clock during the kernel (cycle/second)
    "dram__cycles_elapsed.avg.per_second",  # memory clock
    "lts__cycles_elapsed.avg.per_second",  # L2 clock
)


def _sass(op: str) -> str:
    return f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum"


# CUDA-core paths (named like the FMA ceilings of the CUDA backend): FLOPs = add + mul + 2·fma,
# counted in thread instructions whose predicate was true. The half weights are those of the
# Hierarchical Half Roofline section of ncu 2024.1.1 (hadd + hmul + hfma x 2). HFMA2/HADD2/HMUL2
# pack two lanes, and later ncu versions weight all three x 2 (hfma x 4): `hfma_flop_per_inst`
# scales the three together (hadd and hmul at half the hfma weight), so the fp16 count is open by
# up to 2x until it is calibrated on kernels/fma.cu's half2 chain (docs/counters.md).
SASS_PATHS: dict[str, tuple[tuple[str, float], ...]] = {
    "fp64_fma": ((_sass("dadd"), 1), (_sass("dmul"), 1), (_sass("dfma"), 2)),
    "fp32_fma": ((_sass("fadd"), 1), (_sass("fmul"), 1), (_sass("ffma"), 2)),
    "fp16_fma": ((_sass("hadd"), 1), (_sass("hmul"), 1), (_sass("hfma"), 2)),
}

# Tensor paths (named like the CUDA backend's library ceilings): alternatives in order of
# preference, each a tuple of metrics summed. ncu calls the unit "math ops executed in Tensor
# path"; public scripts take one op as one FLOP. Calibration against 2MNK decides trust.
TENSOR_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    "fp64_tensor": (("sm__ops_path_tensor_src_fp64.sum",),),
    "tf32_tensor": (("sm__ops_path_tensor_src_tf32_dst_fp32.sum",),),
    "fp16_tensor": (
        ("sm__ops_path_tensor_src_fp16.sum",),  # gh100: both accumulator types together
        ("sm__ops_path_tensor_src_fp16_dst_fp16.sum", "sm__ops_path_tensor_src_fp16_dst_fp32.sum"),
    ),
    "bf16_tensor": (("sm__ops_path_tensor_src_bf16_dst_fp32.sum",),),
    "fp8_tensor": (("sm__ops_path_tensor_src_fp8.sum",),),
}
TENSOR_FLOP_PER_OP = 1.0
HFMA_FLOP_PER_INST = 2.0


def fixed_metrics() -> tuple[str, ...]:
    """Every metric wanted on every chip: bytes per level, SASS FLOP counts, duration, clocks."""
    sass = tuple(metric for terms in SASS_PATHS.values() for metric, _ in terms)
    levels = tuple(metric for metrics in LEVEL_METRICS.values() for metric in metrics)
    return (*levels, *sass, DURATION, *CLOCK_METRICS)


def wanted_metrics() -> tuple[str, ...]:
    """The fixed list plus every tensor alternative (before knowing the chip)."""
    tensor = tuple(m for alternatives in TENSOR_PATHS.values() for alt in alternatives for m in alt)
    return fixed_metrics() + tensor


def base_name(metric: str) -> str:
    """`dram__bytes_read.sum` -> `dram__bytes_read` (what `--query-metrics` lists)."""
    return metric.split(".", 1)[0]


def missing_metrics(wanted: Iterable[str], available: Iterable[str]) -> list[str]:
    """The wanted metrics (with their suffixes) whose base name the chip does not have."""
    names = set(available)
    return [metric for metric in wanted if base_name(metric) not in names]


@dataclass(frozen=True)
class CollectionPlan:
    metrics: tuple[str, ...]  # what goes to --metrics
    missing: tuple[str, ...]  # wanted, not on this chip (recorded)
    tensor_metrics: dict[str, tuple[str, ...]]  # path -> the alternative collected
    checked: bool  # False: no metric list could be queried; ncu itself will refuse unknown names


def plan_collection(available: AvailableMetrics | None) -> CollectionPlan:
    """Metrics to collect on a chip: the fixed list less what is missing, and per tensor path the
    first alternative whose metrics all exist. Without a query, the first alternatives."""
    fixed = fixed_metrics()
    if available is None:
        tensor = {path: alternatives[0] for path, alternatives in TENSOR_PATHS.items()}
        metrics = fixed + tuple(m for alt in tensor.values() for m in alt)
        return CollectionPlan(metrics, (), tensor, checked=False)
    missing = missing_metrics(fixed, available.names)
    tensor = {}
    for path, alternatives in TENSOR_PATHS.items():
        usable = [alt for alt in alternatives if not missing_metrics(alt, available.names)]
        if usable:
            tensor[path] = usable[0]
        else:
            missing += [m for alt in alternatives for m in alt]
    metrics = tuple(m for m in fixed if m not in missing)
    metrics += tuple(m for alt in tensor.values() for m in alt)
    return CollectionPlan(metrics, tuple(missing), tensor, checked=True)


# -- metric availability per chip -----------------------------------------------------------------


@dataclass(frozen=True)
class AvailableMetrics:
    chip: str
    names: frozenset[str]  # base names, as --query-metrics lists them
    text: str = field(default="", repr=False, compare=False)  # ncu's answer, whole


def parse_query_metrics(text: str, chip: str | None = None) -> AvailableMetrics:
    """`ncu --query-metrics [--chips C] --csv`: a header ("Metric name", "Metric type", "Metric
    unit", "Metric description", one column per chip) and one row per base metric, "1" in a
    chip's column where that chip has it."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("==")]
    rows = list(csv.reader(lines))
    if not rows or rows[0][:1] != ["Metric name"] or len(rows[0]) < 5:
        raise CounterParseError("no 'Metric name' header with a chip column")
    chips = rows[0][4:]
    if chip is None:
        if len(chips) != 1:
            raise CounterParseError(f"several chips listed ({', '.join(chips)}); name one")
        chip = chips[0]
    if chip not in chips:
        raise CounterParseError(f"chip {chip!r} not in the list ({', '.join(chips)})")
    column = 4 + chips.index(chip)
    names = frozenset(row[0] for row in rows[1:] if len(row) > column and row[column] == "1")
    if not names:
        raise CounterParseError(f"no metric is marked available for chip {chip!r}")
    return AvailableMetrics(chip, names, text)


def query_available_metrics(
    chip: str | None = None, *, ncu: str = NCU, timeout_s: float = 300
) -> AvailableMetrics | Unavailable:
    """Metrics a chip has: `ncu --query-metrics --chips <chip> --csv` (without `chip`: the devices
    of this machine, and the chip is read from the answer's header)."""
    argv = [ncu, "--query-metrics", "--csv"] + (["--chips", chip] if chip else [])
    run = run_tool("ncu", argv, timeout_s)
    if isinstance(run, Unavailable):
        return run
    problem = ncu_problem(run)
    if problem is not None:
        return problem
    try:
        return parse_query_metrics(run.stdout, chip)
    except CounterParseError as error:
        return Unavailable("ncu", f"`{' '.join(argv[1:])}` gave no metric list ({error})")


# -- bytes and FLOPs from the totals --------------------------------------------------------------


def _total(totals: Mapping[str, MetricTotal | float | None], metric: str) -> float | None:
    value = totals.get(metric)
    if isinstance(value, MetricTotal):
        return value.total
    return None if value is None else float(value)


def bytes_by_level(totals: Mapping[str, MetricTotal | float | None]) -> dict[str, float | None]:
    """Counted bytes per memory level: HBM = DRAM read + write, L2 = lts__t_bytes, L1 =
    l1tex__t_bytes; None where a metric is missing."""
    out = {}
    for level, metrics in LEVEL_METRICS.items():
        values = [_total(totals, m) for m in metrics]
        out[level] = None if any(v is None for v in values) else float(sum(values))
    return out


@dataclass(frozen=True)
class PathFlops:
    path: str
    flops: float | None  # None: a metric is missing; never a guess
    formula: str
    metrics: tuple[str, ...]
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class CountedFlops:
    paths: dict[str, PathFlops] = field(default_factory=dict)
    hfma_flop_per_inst: float = HFMA_FLOP_PER_INST
    tensor_flop_per_op: float = TENSOR_FLOP_PER_OP

    def flops(self, path: str) -> float | None:
        found = self.paths.get(path)
        return found.flops if found else None


def flops_from_counters(
    totals: Mapping[str, MetricTotal | float | None],
    *,
    tensor_metrics: Mapping[str, Sequence[str]] | None = None,
    hfma_flop_per_inst: float = HFMA_FLOP_PER_INST,
    tensor_flop_per_op: float = TENSOR_FLOP_PER_OP,
) -> CountedFlops:
    """Counted FLOPs per path from metric totals (MetricTotal or plain numbers).

    CUDA cores, per precision: add + mul + 2·fma thread instructions (fp16: hfma x
    `hfma_flop_per_inst`, hadd and hmul x half of it). Tensor cores, per dtype: the
    `sm__ops_path_tensor_src_*` ops x `tensor_flop_per_op`, from the alternative in
    `tensor_metrics` (the collection plan's) or else the first alternative present. These are
    counts, not trusted FLOPs: `calibrate` decides."""
    paths = {}
    for path, terms in SASS_PATHS.items():
        scale = hfma_flop_per_inst / HFMA_FLOP_PER_INST if path == "fp16_fma" else 1.0
        weights = {m: w * scale for m, w in terms}
        values = {m: _total(totals, m) for m in weights}
        missing = tuple(m for m, v in values.items() if v is None)
        flops = None if missing else sum(weights[m] * values[m] for m in weights)
        formula = " + ".join(
            f"{weights[m]:g}·{m.removeprefix('sm__sass_thread_inst_executed_op_').split('_')[0]}"
            for m in weights
        )
        paths[path] = PathFlops(path, flops, formula, tuple(weights), missing)
    for path, alternatives in TENSOR_PATHS.items():
        chosen = tuple((tensor_metrics or {}).get(path, ()))
        if not chosen:
            present = [a for a in alternatives if all(_total(totals, m) is not None for m in a)]
            chosen = present[0] if present else alternatives[0]
        values = {m: _total(totals, m) for m in chosen}
        missing = tuple(m for m, v in values.items() if v is None)
        flops = None if missing else tensor_flop_per_op * sum(values.values())
        formula = f"{tensor_flop_per_op:g}·(" + " + ".join(chosen) + ")"
        paths[path] = PathFlops(path, flops, formula, chosen, missing)
    return CountedFlops(paths, hfma_flop_per_inst, tensor_flop_per_op)
