"""Nsight Compute (`ncu`): which metrics, the full command line, availability, and its CSV.

Everything ncu does that changes the experiment is passed explicitly and returned as settings to
record (DESIGN.md §4): `--cache-control` (all = flush every cache before each replay pass),
`--clock-control none` (always: never lock clocks on a shared machine), `--replay-mode`, the NVTX
filter, and base units. Names and flags were checked against Nsight Compute 2024.1.1 (`ncu --help`,
its NsightComputeCli and ProfilingGuide documents, `ncu --query-metrics --chips gh100 --csv`, the
`sections/*.section` files it ships) and against public scripts (docs/counters.md lists them).

Two facts of ncu 2024.1.1 that shape this module:
- it has no `--` separator (`ncu ... -- python` fails with "option is ambiguous"): the child
  command follows the last option directly, so it must not start with `-`;
- metric names differ per chip (gh100 has `sm__ops_path_tensor_src_fp16`, ga100 and ad10x have
  `..._src_fp16_dst_fp16` and `..._src_fp16_dst_fp32` instead): query first, collect what exists,
  record what is missing.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rooflab.backends.base import nvtx_name
from rooflab.counters.tool import ToolRun, Unavailable, run_tool

NCU = "ncu"


class CounterParseError(ValueError):
    """Tool output that does not have the shape this parser was written against."""


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


# -- the command line ------------------------------------------------------------------------------

CACHE_CONTROLS = ("all", "none")
REPLAY_MODES = ("kernel", "application")  # per-kernel rows; range replay would merge kernels
NVTX_FILTER_SYNTAX = "@,[]/*+\\$"  # quantifiers of ncu's NVTX filter, and its escapes


def counters_range(config_id: str) -> str:
    """The NVTX push/pop range a counters child puts around its one measured GEMM call, named
    like the backend's other ranges (`nvtx_name`): `<config_id>:counters` with ':' for '/'."""
    return nvtx_name(f"{config_id}/counters")


def nvtx_push_pop_filter(range_name: str, domain: str | None = None) -> str:
    """`--nvtx-include` configuration for kernels inside one push/pop range, at any depth.

    ncu's NVTX filter syntax (NsightComputeCli, "NVTX Filtering"): a trailing `/` marks a push/pop
    range; `/` between names means nesting, `@` a domain, `[` `]` bottom/top of the stack, `*` `+`
    ranges in between, `,` start/end ranges. rooflab's range names hold none of these
    (`nvtx_name`), so the filter is the plain documented form `<range>/`; a name that would need
    ncu's escapes is refused rather than escaped."""
    if not range_name:
        raise ValueError("NVTX range name is empty")
    for name in (range_name, domain or ""):
        if any(c in NVTX_FILTER_SYNTAX for c in name):
            raise ValueError(
                f"NVTX name {name!r} holds one of {NVTX_FILTER_SYNTAX!r}, which ncu's "
                "--nvtx-include reads as filter syntax (name ranges with rooflab's nvtx_name)"
            )
    config = f"{domain}@{range_name}/" if domain else f"{range_name}/"
    if config.startswith("regex:"):
        raise ValueError(f"NVTX filter {config!r}: ncu reads a leading 'regex:' as a mode")
    return config


@dataclass(frozen=True)
class NcuCommand:
    argv: tuple[str, ...]
    settings: dict  # what changes the experiment, to record beside every counter
    log_file: str | None = None


def ncu_command(
    child_argv: Sequence[str],
    *,
    nvtx_range: str,
    metrics: Sequence[str],
    cache_control: str,
    replay_mode: str = "kernel",
    ncu: str = NCU,
    log_file: str | Path | None = None,
    nvtx_domain: str | None = None,
) -> NcuCommand:
    """The full ncu argv for one child process, every experiment-changing setting explicit.

    `cache_control`: "all" flushes every GPU cache before each replay pass (pairs with cold
    timings); "none" leaves them (pairs with warm timings; with `replay_mode="application"` the
    kernel sees the caches the application left, with "kernel" later passes see the earlier
    pass's). Clocks are never locked (`--clock-control none`). `log_file` keeps ncu's CSV apart
    from the child's own output."""
    if cache_control not in CACHE_CONTROLS:
        raise ValueError(f"cache_control must be one of {CACHE_CONTROLS}, got {cache_control!r}")
    if replay_mode not in REPLAY_MODES:
        raise ValueError(f"replay_mode must be one of {REPLAY_MODES}, got {replay_mode!r}")
    metrics = list(metrics)
    if not metrics:
        raise ValueError("no metrics to collect")
    for metric in metrics:
        if "__" not in metric or "," in metric or metric.strip() != metric:
            raise ValueError(f"not an ncu metric name: {metric!r}")
    child = [str(a) for a in child_argv]
    if not child or child[0].startswith("-"):
        raise ValueError(
            "the child command must be a program (ncu has no '--' separator), got "
            f"{child[:1] or 'nothing'}"
        )
    nvtx_include = nvtx_push_pop_filter(nvtx_range, nvtx_domain)
    argv = [
        ncu,
        "--cache-control",
        cache_control,
        "--clock-control",
        "none",
        "--replay-mode",
        replay_mode,
        "--target-processes",
        "all",
        "--nvtx",
        "--nvtx-include",
        nvtx_include,
        "--metrics",
        ",".join(metrics),
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
    ]
    if log_file is not None:
        argv += ["--log-file", str(log_file)]
    settings = {
        "tool": "ncu",
        "cache_control": cache_control,
        "clock_control": "none",
        "replay_mode": replay_mode,
        "target_processes": "all",
        "nvtx_range": nvtx_range,
        "nvtx_domain": nvtx_domain,
        "nvtx_include": nvtx_include,
        "metrics": metrics,
        "page": "raw",
        "print_units": "base",
    }
    return NcuCommand(tuple(argv + child), settings, str(log_file) if log_file else None)


# -- version, metric availability, failures --------------------------------------------------------


@dataclass(frozen=True)
class NcuVersion:
    version: str  # e.g. "2024.1.1.0"
    text: str  # ncu --version, whole


def parse_ncu_version(text: str) -> str | None:
    match = re.search(r"^Version\s+(\S+)", text, flags=re.MULTILINE)
    return match.group(1) if match else None


def ncu_version(ncu: str = NCU, timeout_s: float = 60) -> NcuVersion | Unavailable:
    run = run_tool("ncu", [ncu, "--version"], timeout_s)
    if isinstance(run, Unavailable):
        return run
    problem = ncu_problem(run)
    if problem is not None:
        return problem
    version = parse_ncu_version(run.stdout)
    if version is None:
        return Unavailable("ncu", f"no 'Version' line in `{ncu} --version`: {run.output.strip()}")
    return NcuVersion(version, run.stdout.strip())


def _tool_lines(text: str, *prefixes: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(prefixes) and line not in lines:
            lines.append(line)
    return lines


CHILD_LINES = 5  # of the profiled program's stderr, kept in a failure's reason


def ncu_problem(run: ToolRun, extra_text: str = "") -> Unavailable | None:
    """Why an ncu run gave no usable result, in ncu's own words; None when it exited cleanly.
    Counters not permitted (ERR_NVGPUCTRPERM, e.g. a container without profiling rights) is
    named as such."""
    text = "\n".join(t for t in (run.output, extra_text) if t)
    if "ERR_NVGPUCTRPERM" in text:
        lines = [line.strip() for line in text.splitlines() if "ERR_NVGPUCTRPERM" in line]
        return Unavailable("ncu", "counters not permitted (ERR_NVGPUCTRPERM): " + " | ".join(lines))
    messages = _tool_lines(text, "==ERROR==", "==WARNING==")
    if run.returncode != 0 or any(m.startswith("==ERROR==") for m in messages):
        said = " | ".join(messages) if messages else (text.strip().splitlines() or [""])[-1]
        # the profiled program's own last words (ncu passes its stderr through): a traceback
        child = [line.strip() for line in run.stderr.splitlines() if line.strip()]
        child = [line for line in child if not line.startswith("==")][-CHILD_LINES:]
        also = f" | the program's stderr ends: {' / '.join(child)}" if child else ""
        return Unavailable("ncu", f"exit status {run.returncode}: {said}{also}")
    return None


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


# -- the CSV of one profiled range -----------------------------------------------------------------


@dataclass(frozen=True)
class KernelMetric:
    """One metric of one profiled kernel launch, as ncu printed it."""

    kernel_id: int
    kernel_name: str
    metric: str
    value: float | None  # None where ncu printed no number ("n/a", empty)
    unit: str
    raw: str


_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


def _number(raw: str) -> float | None:
    text = raw.strip()
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_ncu_csv(text: str, metrics: Collection[str] | None = None) -> list[KernelMetric]:
    """Rows of `ncu --csv --page raw --print-units base`: a header ("ID", "Process ID", ...,
    "Kernel Name", ..., then one column per metric), a row of units, one row per kernel launch.
    Lines ncu adds (`==PROF==`, `==WARNING==`, ...) are skipped; anything else that does not fit
    the header is an error. No header: no kernel was profiled (an empty list). `metrics`: keep
    only these columns (ncu 2025's raw page adds every device attribute and profiler metric to
    the ones asked for)."""
    lines = text.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if line.startswith('"ID",') and "Kernel Name" in line),
        None,
    )
    if start is None:
        return []
    body = [line for line in lines[start:] if line.strip() and not line.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(body))))
    header = rows[0]
    if "Kernel Name" not in header:
        raise CounterParseError("header without a 'Kernel Name' column")
    name_col = header.index("Kernel Name")
    metric_cols = [
        i for i, name in enumerate(header) if "__" in name and (metrics is None or name in metrics)
    ]
    units = [""] * len(header)
    records = rows[1:]
    if records and records[0][:1] == [""]:
        units, records = records[0], records[1:]
    out = []
    for row in records:
        if len(row) != len(header) or not row[0].strip().isdigit():
            raise CounterParseError(f"row does not fit the header: {','.join(row)[:120]}")
        kernel_id, kernel_name = int(row[0]), row[name_col]
        for i in metric_cols:
            value = _number(row[i])
            out.append(KernelMetric(kernel_id, kernel_name, header[i], value, units[i], row[i]))
    return out


@dataclass(frozen=True)
class MetricTotal:
    """A metric over every kernel of the range: the sum for counters (`.sum`), min and max for
    the rest (rates and clocks do not add up)."""

    metric: str
    unit: str
    kernels: int
    total: float | None  # None: not a counter, or some kernel had no value
    minimum: float | None
    maximum: float | None
    summable: bool
    kernels_without_value: int


def sum_over_kernels(rows: Iterable[KernelMetric]) -> dict[str, MetricTotal]:
    """Each metric summed over every kernel launched in the range (cuBLAS may launch more than
    one); the per-kernel rows stay with the caller."""
    by_metric: dict[str, list[KernelMetric]] = {}
    for row in rows:
        by_metric.setdefault(row.metric, []).append(row)
    totals = {}
    for metric, group in by_metric.items():
        units = {r.unit for r in group}
        if len(units) > 1:
            raise CounterParseError(f"{metric}: kernels report different units {sorted(units)}")
        values = [r.value for r in group if r.value is not None]
        summable = metric.endswith(".sum")
        complete = len(values) == len(group)
        totals[metric] = MetricTotal(
            metric=metric,
            unit=group[0].unit,
            kernels=len(group),
            total=sum(values) if summable and complete else None,
            minimum=min(values) if values else None,
            maximum=max(values) if values else None,
            summable=summable,
            kernels_without_value=len(group) - len(values),
        )
    return totals


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


# -- running one profile ---------------------------------------------------------------------------


_PASSES = re.compile(r'^==PROF== Profiling ".*" - .* - (\d+) pass(?:es)?\s*$')
# Replay passes per kernel as a raw-page column (ncu 2025 prints it unasked, and prints no
# progress lines when the CSV goes to a log file).
REPLAY_PASSES = "profiler__replayer_passes"


def replay_passes(text: str, rows: Iterable[KernelMetric] = ()) -> list[int]:
    """Replay passes per profiled kernel: the `profiler__replayer_passes` column of the CSV rows
    where ncu printed it, else ncu's progress lines (`==PROF== Profiling "name" - 0:
    0%....50%....100% - 46 passes`). With more than one pass, kernel replay restores the memory
    the kernel writes before each later pass, so `--cache-control none` is the cache state the
    previous pass left, not the application's (docs/counters.md)."""
    by_kernel = {r.kernel_id: r.value for r in rows if r.metric == REPLAY_PASSES}
    if by_kernel and None not in by_kernel.values():
        return [int(by_kernel[kernel]) for kernel in sorted(by_kernel)]
    return [int(m.group(1)) for m in map(_PASSES.match, text.splitlines()) if m]


@dataclass(frozen=True)
class NcuResult:
    rows: list[KernelMetric]
    totals: dict[str, MetricTotal]
    command: NcuCommand
    run: ToolRun
    passes: tuple[int, ...] = ()  # replay passes per profiled kernel, as ncu printed them


def run_ncu(command: NcuCommand, timeout_s: float) -> NcuResult | Unavailable:
    """Run one profile (`ncu_outcome` says what came of it); ncu missing: `Unavailable`."""
    run = run_tool("ncu", command.argv, timeout_s, command.log_file)
    return run if isinstance(run, Unavailable) else ncu_outcome(command, run)


def ncu_outcome(command: NcuCommand, run: ToolRun) -> NcuResult | Unavailable:
    """What one finished profile gave: its CSV (from the log file when the command has one, else
    stdout) parsed and summed, or `Unavailable` when ncu was not permitted or failed, printed a
    CSV this parser does not understand, or profiled no kernel in the range."""
    text = (run.file_text or "") if command.log_file else run.stdout
    problem = ncu_problem(run, text if command.log_file else "")
    if problem is not None:
        return problem
    try:
        rows = parse_ncu_csv(text, {*command.settings["metrics"], REPLAY_PASSES})
        totals = sum_over_kernels(rows)
    except CounterParseError as error:
        return Unavailable("ncu", f"ncu's CSV not understood: {error}")
    if not rows:
        said = " | ".join(_tool_lines(run.output + "\n" + text, "==PROF==", "==WARNING=="))
        return Unavailable(
            "ncu",
            f"no kernel profiled inside NVTX range '{command.settings['nvtx_range']}' "
            f"(filter '{command.settings['nvtx_include']}')" + (f": {said}" if said else ""),
        )
    passes = tuple(replay_passes(run.output + "\n" + text, rows))
    return NcuResult(rows, totals, command, run, passes)


def counter_rows(
    result: NcuResult | Unavailable,
    *,
    run_id: str,
    config_id: str,
    settings: Mapping,
    tool_version: str | None,
    chip: str | None,
    missing: Sequence[str] = (),
) -> list[dict]:
    """Rows for a `counters` table (fields proposed in docs/counters.md): one per metric per
    kernel (scope "kernel"), one per metric for the whole range (scope "range": the sum of a
    counter, else null), one per metric the chip lacks (status "missing"), one per requested
    metric the CSV has no column for (status "not in output"), or a single "unavailable" row with
    the reason when there was no result."""
    common = {
        "run_id": run_id,
        "config_id": config_id,
        "tool": "ncu",
        "tool_version": tool_version,
        "chip": chip,
        "cache_control": settings.get("cache_control"),
        "clock_control": settings.get("clock_control"),
        "replay_mode": settings.get("replay_mode"),
        "nvtx_include": settings.get("nvtx_include"),
    }
    empty = {"kernel_id": None, "kernel": None, "value": None, "unit": None}
    if isinstance(result, Unavailable):
        return [
            {
                **common,
                **empty,
                "scope": "range",
                "metric": None,
                "status": "unavailable",
                "reason": result.reason,
            }
        ]
    rows = [
        {
            **common,
            "kernel_id": r.kernel_id,
            "kernel": r.kernel_name,
            "scope": "kernel",
            "metric": r.metric,
            "value": r.value,
            "unit": r.unit,
            "status": "ok" if r.value is not None else "no value",
            "reason": None,
        }
        for r in result.rows
    ]
    for metric, total in result.totals.items():
        rows.append(
            {
                **common,
                **empty,
                "scope": "range",
                "metric": metric,
                "value": total.total,
                "unit": total.unit,
                "status": "ok" if total.total is not None else "no value",
                "reason": None if total.summable else "not a counter: min and max per kernel only",
            }
        )
    why = f"not available on chip {chip} (ncu {tool_version} --query-metrics)"
    rows += [
        {**common, **empty, "scope": "range", "metric": m, "status": "missing", "reason": why}
        for m in missing
    ]
    absent = [m for m in settings.get("metrics", ()) if m not in result.totals]
    why = "requested, but ncu printed no column for it (ncu drops some metrics silently)"
    rows += [
        {**common, **empty, "scope": "range", "metric": m, "status": "not in output", "reason": why}
        for m in absent
    ]
    return rows
