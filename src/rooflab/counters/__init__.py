"""Hardware counters (issue 7): Nsight Compute on GPUs, perf where a CPU allows it.

- `rooflab.counters.ncu`: the metric list, the ncu command with every experiment-changing setting
  explicit, metric availability per chip, the CSV of a profiled NVTX range, FLOPs per path;
- `rooflab.counters.points`: calibration against 2MNK, pairing a replay with the timing of the
  matching cache state, hierarchical Roofline points (fail closed), model vs counted bytes;
- `rooflab.counters.perf`: `perf stat` events, `unavailable` with the reason where not counted;
- `rooflab.counters.tool`: `Unavailable` (tool missing, not permitted, failed) and the runner.

docs/counters.md explains the formulas, the sources of the metric names, and what is owed to a
GPU run.
"""

from rooflab.counters.ncu import (
    AvailableMetrics,
    CollectionPlan,
    CountedFlops,
    CounterParseError,
    KernelMetric,
    MetricTotal,
    NcuCommand,
    NcuResult,
    NcuVersion,
    bytes_by_level,
    counter_rows,
    counters_range,
    flops_from_counters,
    missing_metrics,
    ncu_command,
    ncu_problem,
    ncu_version,
    nvtx_push_pop_filter,
    parse_ncu_csv,
    parse_query_metrics,
    plan_collection,
    query_available_metrics,
    run_ncu,
    sum_over_kernels,
    wanted_metrics,
)
from rooflab.counters.perf import (
    CpuCounters,
    PerfCommand,
    PerfStat,
    derive_cpu,
    llc_line_bytes,
    parse_perf_stat,
    perf_stat_command,
    pmu_note,
    run_perf_stat,
)
from rooflab.counters.points import (
    Calibration,
    ModelVsCounted,
    Pairing,
    PairingError,
    UntrustedCounts,
    bypassed_levels,
    calibrate,
    hierarchical_points,
    model_vs_counted,
    pair,
)
from rooflab.counters.tool import Unavailable

__all__ = [
    "AvailableMetrics",
    "Calibration",
    "CollectionPlan",
    "CountedFlops",
    "CounterParseError",
    "CpuCounters",
    "KernelMetric",
    "MetricTotal",
    "ModelVsCounted",
    "NcuCommand",
    "NcuResult",
    "NcuVersion",
    "Pairing",
    "PairingError",
    "PerfCommand",
    "PerfStat",
    "Unavailable",
    "UntrustedCounts",
    "bypassed_levels",
    "bytes_by_level",
    "calibrate",
    "counter_rows",
    "counters_range",
    "derive_cpu",
    "flops_from_counters",
    "hierarchical_points",
    "llc_line_bytes",
    "missing_metrics",
    "model_vs_counted",
    "ncu_command",
    "ncu_problem",
    "ncu_version",
    "nvtx_push_pop_filter",
    "pair",
    "parse_ncu_csv",
    "parse_perf_stat",
    "parse_query_metrics",
    "perf_stat_command",
    "plan_collection",
    "pmu_note",
    "query_available_metrics",
    "run_ncu",
    "run_perf_stat",
    "sum_over_kernels",
    "wanted_metrics",
]
