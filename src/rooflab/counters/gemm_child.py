"""The child a profiler runs: one GEMM configuration, called once inside its own NVTX range.

    python -m rooflab.counters.gemm_child --sweep main --dtype bf16 --layout nn \\
        --m 64 --n 4096 --k 4096 [--warmup 3] [--backend cuda]

Warm-up calls (library initialisation, heuristics, and the caches a warm timing sees) run
outside the range; the range `counters_range(config_id)` holds exactly one matmul and the
synchronisation after it, so a profiler filtering on it sees the GEMM's kernels and nothing else
(no flush kernel, no timing hold). Prints one JSON line naming the range.
"""

from __future__ import annotations

import argparse
import json
import sys

from rooflab.backends.base import select_backend
from rooflab.counters.ncu import counters_range
from rooflab.experiments.gemm import GemmConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rooflab.counters.gemm_child")
    parser.add_argument("--sweep", required=True)
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--layout", default="nn")
    parser.add_argument("--m", type=int, required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--k", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=3, help="calls before the profiled one")
    parser.add_argument("--backend", default="cuda", choices=("cuda", "cpu", "auto"))
    args = parser.parse_args(argv)
    config = GemmConfig(args.sweep, args.m, args.n, args.k, args.dtype, args.layout)
    backend = select_backend(args.backend)
    backend.check_dtype(config.dtype)
    operands = backend.gemm_operands(
        config.m, config.n, config.k, config.dtype, config.layout, args.seed
    )
    for _ in range(max(args.warmup, 0)):
        backend.matmul(operands)
    backend.synchronize()
    name = counters_range(config.config_id)
    with backend.nvtx_range(name):
        backend.matmul(operands)
        backend.synchronize()
    print(json.dumps({"config_id": config.config_id, "nvtx_range": name, "backend": backend.name}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
