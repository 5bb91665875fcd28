"""Nsight Compute (`ncu`): which metrics, the full command line, availability, and its CSV.

Everything ncu does that changes the experiment is passed explicitly and returned as settings to
record (docs/counters.md §1): `--cache-control` (all = flush every cache before each replay pass),
`--clock-control none` (always: never lock clocks on a shared machine), `--replay-mode`, the NVTX
filter, and base units. Names and flags were checked against Nsight Compute 2024.1.1 (`ncu --help`,
its NsightComputeCli and ProfilingGuide documents, `ncu --query-metrics --chips gh100 --csv`, the
`sections/*.section` files it ships) and against public scripts (docs/counters.md lists them).

Two facts of ncu 2024.1.1 that shape this package:
- it has no `--` separator (`ncu ... -- python` fails with "option is ambiguous"): the child
  command follows the last option directly, so it must not start with `-`;
- metric names differ per chip (gh100 has `sm__ops_path_tensor_src_fp16`, ga100 and ad10x have
  `..._src_fp16_dst_fp16` and `..._src_fp16_dst_fp32` instead): query first, collect what exists,
  record what is missing.

The modules (every name is importable from here, as before the split):
- `metrics`: which metrics per chip, what a chip has, bytes per level and FLOPs per path;
- `command`: the ncu command line and NVTX filter, its version and failures, running one profile,
  the `counters` rows of a result;
- `raw_csv`: parsing ncu's raw CSV (its table, thousands separators), replay passes, sums over
  kernels.
"""

from rooflab.counters.ncu.command import (
    CACHE_CONTROLS,
    CHILD_LINES,
    NCU,
    NVTX_FILTER_SYNTAX,
    REPLAY_MODES,
    NcuCommand,
    NcuResult,
    NcuVersion,
    counter_rows,
    counters_range,
    ncu_command,
    ncu_outcome,
    ncu_problem,
    ncu_version,
    nvtx_push_pop_filter,
    parse_ncu_version,
    run_ncu,
)
from rooflab.counters.ncu.metrics import (
    CLOCK_METRICS,
    DRAM_READ,
    DRAM_WRITE,
    DURATION,
    HFMA_FLOP_PER_INST,
    L1_BYTES,
    L2_BYTES,
    LEVEL_METRICS,
    SASS_PATHS,
    TENSOR_FLOP_PER_OP,
    TENSOR_PATHS,
    AvailableMetrics,
    CollectionPlan,
    CountedFlops,
    PathFlops,
    base_name,
    bytes_by_level,
    fixed_metrics,
    flops_from_counters,
    missing_metrics,
    parse_query_metrics,
    plan_collection,
    query_available_metrics,
    wanted_metrics,
)
from rooflab.counters.ncu.raw_csv import (
    REPLAY_PASSES,
    CounterParseError,
    KernelMetric,
    MetricTotal,
    RawPage,
    parse_ncu_csv,
    parse_number,
    read_raw_page,
    replay_passes,
    sum_over_kernels,
)

__all__ = [
    "CACHE_CONTROLS",
    "CHILD_LINES",
    "CLOCK_METRICS",
    "DRAM_READ",
    "DRAM_WRITE",
    "DURATION",
    "HFMA_FLOP_PER_INST",
    "L1_BYTES",
    "L2_BYTES",
    "LEVEL_METRICS",
    "NCU",
    "NVTX_FILTER_SYNTAX",
    "REPLAY_MODES",
    "REPLAY_PASSES",
    "SASS_PATHS",
    "TENSOR_FLOP_PER_OP",
    "TENSOR_PATHS",
    "AvailableMetrics",
    "CollectionPlan",
    "CountedFlops",
    "CounterParseError",
    "KernelMetric",
    "MetricTotal",
    "NcuCommand",
    "NcuResult",
    "NcuVersion",
    "PathFlops",
    "RawPage",
    "base_name",
    "bytes_by_level",
    "counter_rows",
    "counters_range",
    "fixed_metrics",
    "flops_from_counters",
    "missing_metrics",
    "ncu_command",
    "ncu_outcome",
    "ncu_problem",
    "ncu_version",
    "nvtx_push_pop_filter",
    "parse_ncu_csv",
    "parse_ncu_version",
    "parse_number",
    "parse_query_metrics",
    "plan_collection",
    "query_available_metrics",
    "read_raw_page",
    "replay_passes",
    "run_ncu",
    "sum_over_kernels",
    "wanted_metrics",
]
