"""The child a profiler runs: one GEMM configuration, called once inside its own NVTX range.

    python -m rooflab.experiments.profiled_gemm --sweep main --dtype bf16 --layout nn \\
        --m 64 --n 4096 --k 4096 [--warmup 3] [--backend cuda] [--perf-control CTL,ACK]

Warm-up calls (library initialisation, heuristics, and the caches a warm timing sees) run
outside the range; the range `counters_range(config_id)` holds exactly one matmul and the
synchronisation after it, so a profiler filtering on it sees the GEMM's kernels and nothing else
(no flush kernel, no timing hold). Prints one JSON line naming the range.

`--perf-control CTL,ACK` does for `perf stat` what the NVTX range does for ncu: perf starts with
its events disabled (`-D -1 --control fifo:CTL,ACK`), and the child writes `enable` to the CTL
fifo just before the measured call and `disable` just after it, waiting for perf's `ack` each
time, so the counts cover that call, not the interpreter's start-up or the input generation.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import sys
import time
from collections.abc import Iterator

from rooflab.backends.selection import select_backend
from rooflab.counters.ncu import counters_range
from rooflab.experiments.gemm import GemmConfig

PERF_ACK_TIMEOUT_S = 30.0


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
        "--seed",
        str(seed),
        "--warmup",
        str(warmup),
        "--backend",
        backend,
    ]


def _perf_command(ctl: int, ack: int, command: str) -> None:
    """Send `command` to perf's control fifo and wait for its ack (perf may prefix NUL bytes)."""
    os.write(ctl, f"{command}\n".encode())
    deadline = time.monotonic() + PERF_ACK_TIMEOUT_S
    seen = b""
    while b"ack" not in seen.replace(b"\0", b""):
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(
                f"perf did not acknowledge {command!r} within {PERF_ACK_TIMEOUT_S} s"
            )
        ready, _, _ = select.select([ack], [], [], min(left, 0.1))
        if ready:
            chunk = os.read(ack, 64)
            if not chunk:
                time.sleep(0.01)  # no writer yet: perf has not opened its end
            seen += chunk


@contextlib.contextmanager
def perf_counting(control: str | None) -> Iterator[None]:
    """perf's events enabled inside the block only (nothing when `control` is None). The fifos
    are opened without blocking, so a child whose perf is gone fails instead of hanging."""
    if control is None:
        yield
        return
    ctl_path, _, ack_path = control.partition(",")
    if not ack_path:
        raise ValueError(f"--perf-control expects CTL,ACK fifo paths, got {control!r}")
    ctl = os.open(ctl_path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO when perf is not reading it
    ack = os.open(ack_path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        _perf_command(ctl, ack, "enable")
        try:
            yield
        finally:
            _perf_command(ctl, ack, "disable")
    finally:
        os.close(ctl)
        os.close(ack)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rooflab.experiments.profiled_gemm")
    parser.add_argument("--sweep", required=True)
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--layout", default="nn")
    parser.add_argument("--m", type=int, required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--k", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=3, help="calls before the profiled one")
    parser.add_argument("--backend", default="cuda", choices=("cuda", "cpu", "auto"))
    parser.add_argument(
        "--perf-control", metavar="CTL,ACK", help="perf stat's control and ack fifos"
    )
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
    with perf_counting(args.perf_control), backend.nvtx_range(name):
        backend.matmul(operands)
        backend.synchronize()
    said = {"config_id": config.config_id, "nvtx_range": name, "backend": backend.name}
    if args.perf_control:
        said["perf_control"] = "events enabled around the measured call only"
    print(json.dumps(said))
    return 0


if __name__ == "__main__":
    sys.exit(main())
