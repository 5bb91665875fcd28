"""The child a profiler runs for a workload: one case, its run() called once inside its own NVTX
range (the counters step, docs/workloads.md).

    python -m rooflab.experiments.profiled_workload --workload fused \\
        --entry rooflab.workloads.builtin:relu_axpb_fused --dtype fp32 --params '{"n": 1048576}' \\
        [--seed 0] [--warmup 3] [--backend cuda] [--perf-control CTL,ACK]

The case is built by its factory exactly as the timing run built it (same params, dtype and seed,
so the same inputs); warm-up calls run outside the range, then one run() and the synchronisation
after it inside `counters_range(config_id)` (`experiments.profiled`). Prints one JSON line
naming the range. A workload that cannot be built is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from rooflab.backends.selection import select_backend
from rooflab.experiments.profiled import add_arguments, common_options, profiled_call
from rooflab.experiments.workload_cases import build_case
from rooflab.workloads import Case, WorkloadError, load_entry


def child_command(case: Case, entry: str, seed: int, backend: str, warmup: int) -> list[str]:
    """The process a profiler runs: this module, for one case of a workload."""
    return [
        sys.executable,
        "-m",
        "rooflab.experiments.profiled_workload",
        "--workload",
        case.workload,
        "--entry",
        entry,
        "--dtype",
        case.dtype,
        "--params",
        json.dumps(case.params, sort_keys=True),
        *common_options(seed, warmup, backend),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rooflab.experiments.profiled_workload")
    parser.add_argument("--workload", required=True)
    parser.add_argument("--entry", required=True, help="package.module:function")
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--params", default="{}", help="the case's params, a JSON object")
    add_arguments(parser)
    args = parser.parse_args(argv)
    backend = select_backend(args.backend)
    try:
        case = Case(args.workload, args.dtype, json.loads(args.params))
        workload = build_case(load_entry(args.entry, args.workload), case, backend, args.seed)
    except (WorkloadError, json.JSONDecodeError) as error:
        print(f"rooflab: {error}", file=sys.stderr)
        return 2
    said = profiled_call(backend, case.config_id, workload.run, args.warmup, args.perf_control)
    print(json.dumps(said))
    return 0


if __name__ == "__main__":
    sys.exit(main())
