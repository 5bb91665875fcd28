"""The one measured call of a counters child (`profiled_gemm`, `profiled_workload`): warm-up calls
outside any range, then exactly one call and the synchronisation after it inside the NVTX range
`counters_range(config_id)`, so a profiler filtering on it sees that work's kernels and nothing
else (no flush kernel, no timing hold).

`--perf-control CTL,ACK` does for `perf stat` what the NVTX range does for ncu: perf starts with
its events disabled (`-D -1 --control fifo:CTL,ACK`), and the child writes `enable` to the CTL
fifo just before the measured call and `disable` just after it, waiting for perf's `ack` each
time, so the counts cover that call, not the interpreter's start-up or the input generation."""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable, Iterator

from rooflab.backends.base import Backend
from rooflab.counters.ncu import counters_range

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


def common_options(seed: int, warmup: int, backend: str) -> list[str]:
    """The options every counters child is given beside its own (`add_arguments` reads them)."""
    return ["--seed", str(seed), "--warmup", str(warmup), "--backend", backend]


def add_arguments(parser) -> None:
    """The options every counters child takes beside its own."""
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=3, help="calls before the profiled one")
    parser.add_argument("--backend", default="cuda", choices=("cuda", "cpu", "auto"))
    parser.add_argument(
        "--perf-control", metavar="CTL,ACK", help="perf stat's control and ack fifos"
    )


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
