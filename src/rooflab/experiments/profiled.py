"""The child a profiler runs: one timed case (a sweep's GEMM configuration, a workload's case),
built as its timing run built it (same shape or params, dtype and seed, so the same inputs), then
warm-up calls outside any range, and exactly one call and the synchronisation after it inside the
NVTX range `counters_range(config_id)`, so a profiler filtering on it sees that work's kernels and
nothing else (no flush kernel, no timing hold).

    python -m rooflab.experiments.profiled --case '{"kind": "gemm", "sweep": "main", "m": 64,
        "n": 4096, "k": 4096, "dtype": "bf16", "layout": "nn", "seed": 0}' \
        [--warmup 3] [--backend cuda] [--perf-control CTL,ACK]
    python -m rooflab.experiments.profiled --case '{"kind": "workload", "workload": "fused",
        "entry": "rooflab.workloads.builtin:relu_axpb_fused", "dtype": "fp32",
        "params": {"n": 1048576}, "seed": 0}'

Prints one JSON line naming the range. A case that cannot be built is one line on stderr and exit
status 2.

`--perf-control CTL,ACK` does for `perf stat` what the NVTX range does for ncu: perf starts with
its events disabled (`-D -1 --control fifo:CTL,ACK`), and the child writes `enable` to the CTL
fifo just before the measured call and `disable` just after it, waiting for perf's `ack` each
time, so the counts cover that call, not the interpreter's start-up or the input generation."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import sys
import time
from collections.abc import Callable, Iterator

from rooflab.backends.base import Backend, BackendError
from rooflab.backends.selection import select_backend
from rooflab.counters.ncu import counters_range
from rooflab.experiments.gemm import GemmCase
from rooflab.experiments.gemm_configs import GemmConfig
from rooflab.experiments.workload_cases import WorkloadCase
from rooflab.workloads import Case, WorkloadError

PERF_ACK_TIMEOUT_S = 30.0


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


def child_command(case: GemmCase | WorkloadCase, backend: str, warmup: int) -> list[str]:
    """The process a profiler runs: this module, for one case."""
    spec = json.dumps(case.child_spec(), sort_keys=True)
    module = "rooflab.experiments.profiled"
    return [
        sys.executable,
        "-m",
        module,
        "--case",
        spec,
        "--warmup",
        str(warmup),
        "--backend",
        backend,
    ]


def case_from_spec(spec: dict) -> GemmCase | WorkloadCase:
    """The case a child_spec() names."""
    if spec["kind"] == "gemm":
        shape = [spec[key] for key in ("m", "n", "k", "dtype", "layout")]
        return GemmCase(GemmConfig(spec["sweep"], *shape), spec["seed"])
    case = Case(spec["workload"], spec["dtype"], spec["params"])
    return WorkloadCase(case, {k: spec[k] for k in ("entry", "seed", "path") if k in spec})


def profiled_call(
    backend: Backend, config_id: str, call: Callable[[], object], warmup: int, perf_control
) -> dict:
    """`warmup` calls, then one inside the counters range (and perf's enabled events); what the
    child prints: the range's name."""
    for _ in range(max(warmup, 0)):
        call()
    backend.synchronize()
    name = counters_range(config_id)
    with perf_counting(perf_control), backend.nvtx_range(name):
        call()
        backend.synchronize()
    said = {"config_id": config_id, "nvtx_range": name, "backend": backend.name}
    if perf_control:
        said["perf_control"] = "events enabled around the measured call only"
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rooflab.experiments.profiled")
    parser.add_argument("--case", required=True, help="the case, a JSON object (child_command)")
    parser.add_argument("--warmup", type=int, default=3, help="calls before the profiled one")
    parser.add_argument("--backend", default="cuda", choices=("cuda", "cpu", "auto"))
    parser.add_argument(
        "--perf-control", metavar="CTL,ACK", help="perf stat's control and ack fifos"
    )
    args = parser.parse_args(argv)
    backend = select_backend(args.backend)
    try:
        case = case_from_spec(json.loads(args.case))
        built = case.build(backend)
    except KeyError as error:
        print(
            f"rooflab: --case has no {error} (experiments.profiled.child_command)", file=sys.stderr
        )
        return 2
    except (WorkloadError, BackendError, ValueError) as error:  # a JSON error is a ValueError
        print(f"rooflab: {error}", file=sys.stderr)
        return 2
    said = profiled_call(backend, case.config_id, built.call, args.warmup, args.perf_control)
    print(json.dumps(said))
    return 0


if __name__ == "__main__":
    sys.exit(main())
