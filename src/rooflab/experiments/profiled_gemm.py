"""The child a profiler runs: one GEMM configuration, called once inside its own NVTX range.

    python -m rooflab.experiments.profiled_gemm --sweep main --dtype bf16 --layout nn \\
        --m 64 --n 4096 --k 4096 [--warmup 3] [--backend cuda] [--perf-control CTL,ACK]

Warm-up calls (library initialisation, heuristics, and the caches a warm timing sees) run
outside the range; the range `counters_range(config_id)` holds exactly one matmul and the
synchronisation after it (`experiments.profiled`, with perf's `--perf-control`). Prints one
JSON line naming the range.
"""

from __future__ import annotations

import argparse
import json
import sys

from rooflab.backends.selection import select_backend
from rooflab.experiments.gemm_configs import GemmConfig
from rooflab.experiments.profiled import add_arguments, common_options, profiled_call


def child_command(config: GemmConfig, seed: int, backend: str, warmup: int) -> list[str]:
    """The process a profiler runs: this module, for one configuration."""
    return [
        sys.executable,
        "-m",
        "rooflab.experiments.profiled_gemm",
        "--sweep",
        config.sweep,
        "--dtype",
        config.dtype,
        "--layout",
        config.layout,
        "--m",
        str(config.m),
        "--n",
        str(config.n),
        "--k",
        str(config.k),
        *common_options(seed, warmup, backend),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rooflab.experiments.profiled_gemm")
    parser.add_argument("--sweep", required=True)
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--layout", default="nn")
    parser.add_argument("--m", type=int, required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--k", type=int, required=True)
    add_arguments(parser)
    args = parser.parse_args(argv)
    config = GemmConfig(args.sweep, args.m, args.n, args.k, args.dtype, args.layout)
    backend = select_backend(args.backend)
    backend.check_dtype(config.dtype)
    operands = backend.gemm_operands(
        config.m, config.n, config.k, config.dtype, config.layout, args.seed
    )
    said = profiled_call(
        backend,
        config.config_id,
        lambda: backend.matmul(operands),
        args.warmup,
        args.perf_control,
    )
    print(json.dumps(said))
    return 0


if __name__ == "__main__":
    sys.exit(main())
