"""The clock and machine conditions a measurement was taken under (docs/measure.md).

Read only: rooflab never changes clocks, governors or power limits. It measures the machine as
found and records what it found. The effective CPU clock comes from a calibrated dependent-add
loop, because /proc/cpuinfo's "cpu MHz" is often just the TSC rate (under KVM, for one) and
cpufreq is often absent.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from rooflab.conditions.add_asm import ADDS_PER_BLOCK, ClockUnavailable
from rooflab.machine import PROC_ROOT, SYS_CPU_ROOT, cpu_dirs, cpuinfo_values

__all__ = [
    "ADDS_PER_BLOCK",
    "ClockUnavailable",
    "blas_info",
    "measure_cpu_clock_hz",
    "read_cpu_conditions",
    "time_add_blocks_s",
    "warm_up",
]

# The first measurement uses this guess to size its repetitions; later ones the last reading.
_clock_estimate_hz = 3.0e9
_PLAUSIBLE_HZ = (0.2e9, 10e9)
_MIN_BLOCKS = 16  # 2048 adds: the call's own ~150 ns stays small beside them
_DROP_RETRY, _DROP_RETRIES, _DROP_RETRY_PAUSE_S = 0.15, 2, 0.002

_THREADING_ENV_PREFIXES = ("OPENBLAS_", "OMP_", "MKL_", "BLIS_", "NUMBA_")


@functools.cache
def _compiled_add_chain() -> Callable[[int, int], int]:
    """run(blocks, step) -> the sum of blocks × ADDS_PER_BLOCK dependent adds of step.

    Built on first use (conditions.add_chain, by LLVM: about 50 ms), so that importing rooflab
    does not pay for it.
    """
    try:
        from rooflab.conditions.add_chain import run_add_chain
    except ImportError as error:
        raise ClockUnavailable(f"llvmlite is needed for the add loop: {error}") from error
    except ClockUnavailable:
        raise
    except Exception as error:  # an LLVM failure must not take the measurement down with it
        raise ClockUnavailable(f"compiling the add loop failed: {error}") from error
    run_add_chain(1, 1)  # once now, never first inside a timed region
    return run_add_chain


def warm_up() -> None:
    """Compile the add loop and calibrate its length, so the first real reading is cheap."""
    measure_cpu_clock_hz()


def _thread_switches() -> int | None:
    """How many times the calling thread has been put on a CPU (/proc/thread-self/schedstat,
    third field); it changes when the thread was preempted or migrated. None where unreadable."""
    fd = getattr(_thread_local, "schedstat_fd", None)
    try:
        if fd is None:
            fd = _thread_local.schedstat_fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        return int(os.pread(fd, 128, 0).split()[2])
    except (OSError, IndexError, ValueError):
        return None


_thread_local = threading.local()


def time_add_blocks_s(blocks: int, repeats: int = 3) -> float:
    """Fastest wall time, over the undisturbed ones of `repeats` runs, of
    blocks × ADDS_PER_BLOCK dependent adds; ClockUnavailable when every run was preempted."""
    if blocks < 1 or repeats < 1:
        raise ValueError(f"need blocks >= 1 and repeats >= 1, got {blocks} and {repeats}")
    run_add_chain = _compiled_add_chain()
    step = 1  # a runtime value, so x86_64's adds stay register-register (aarch64 adds #1 itself)
    expected = blocks * ADDS_PER_BLOCK * step
    best_ns = math.inf
    for _ in range(repeats):
        switches = _thread_switches()
        start_ns = time.perf_counter_ns()
        total = run_add_chain(blocks, step)
        elapsed_ns = time.perf_counter_ns() - start_ns
        if total != expected:
            raise ClockUnavailable(
                f"add loop summed to {total}, expected {expected}: it did not run as written"
            )
        if switches is not None and _thread_switches() != switches:
            continue  # the thread left its CPU mid-chain: this run timed someone else too
        best_ns = min(best_ns, elapsed_ns)
    if best_ns == math.inf:
        raise ClockUnavailable(f"all {repeats} runs of the add loop were preempted")
    return max(best_ns - _call_overhead_ns(), 1) / 1e9  # a coarse timer can read 0 ns


@functools.cache
def _call_overhead_ns() -> int:
    """The fastest time of an empty call of the add loop: what the timer and the call into
    compiled code add to every run, taken off so short probes read the clock, not the call."""
    run_add_chain = _compiled_add_chain()
    best = math.inf
    for _ in range(200):
        start_ns = time.perf_counter_ns()
        run_add_chain(0, 1)
        best = min(best, time.perf_counter_ns() - start_ns)
    return int(best)


def measure_cpu_clock_hz(min_time_s: float = 0.002, repeats: int = 5) -> float:
    """The effective clock of the calling core, in Hz, from a dependent-add chain.

    Each add waits one cycle for the previous one on every x86_64 and aarch64 core, so cycles =
    adds. The chain runs `repeats` times of about min_time_s / repeats each; a run during which
    the thread left its CPU (preempted, migrated) is dropped, and the fastest of the rest wins:
    interrupts and a hypervisor only ever make a run slower. When every run was preempted there
    is no reading (ClockUnavailable), never a wrong one.

    A hypervisor that stops the virtual CPU for a few ms slows every run of a probe without a
    context switch the thread could see: a reading more than DROP_RETRY below the last one is
    taken again, up to twice, a few ms apart, and the highest is kept. A clock that really fell
    reads low every time and is reported as such.
    """
    global _clock_estimate_hz
    repetition_s = min_time_s / repeats
    blocks = max(_MIN_BLOCKS, math.ceil(repetition_s * _clock_estimate_hz / ADDS_PER_BLOCK))
    previous_hz = _clock_estimate_hz
    clock_hz = blocks * ADDS_PER_BLOCK / time_add_blocks_s(blocks, repeats)
    for _ in range(_DROP_RETRIES):
        if clock_hz >= (1 - _DROP_RETRY) * previous_hz:
            break
        time.sleep(_DROP_RETRY_PAUSE_S)
        with contextlib.suppress(ClockUnavailable):
            clock_hz = max(clock_hz, blocks * ADDS_PER_BLOCK / time_add_blocks_s(blocks, repeats))
    # Only a plausible reading sizes the next probe: a reading that fed back a wrong estimate
    # shrank later probes until the call itself dominated them (134 MHz on a 3.7 GHz CPU).
    if _PLAUSIBLE_HZ[0] <= clock_hz <= _PLAUSIBLE_HZ[1]:
        _clock_estimate_hz = clock_hz
    return clock_hz


def read_cpu_conditions(
    sys_cpu_root: Path = SYS_CPU_ROOT, cpuinfo_path: Path = PROC_ROOT / "cpuinfo"
) -> dict:
    """One reading of the CPU's conditions; `unavailable` says why any field is None."""
    unavailable: dict[str, str] = {}
    conditions: dict = {"t": datetime.now(UTC).isoformat(timespec="microseconds")}

    try:
        conditions["cpu_ghz_measured"] = measure_cpu_clock_hz() / 1e9
    except ClockUnavailable as error:
        conditions["cpu_ghz_measured"] = None
        unavailable["cpu_ghz_measured"] = str(error)

    governors, cur_mhz = _read_cpufreq(sys_cpu_root, unavailable)
    conditions["governor"] = governors
    conditions["cpufreq_cur_mhz"] = cur_mhz

    try:
        mhz_values = [float(value) for value in cpuinfo_values("cpu MHz", cpuinfo_path)]
        if not mhz_values:
            unavailable["cpuinfo_mhz"] = f"{cpuinfo_path} has no 'cpu MHz' lines"
        conditions["cpuinfo_mhz"] = mhz_values or None
    except (OSError, ValueError) as error:
        conditions["cpuinfo_mhz"] = None
        unavailable["cpuinfo_mhz"] = f"cannot read 'cpu MHz' from {cpuinfo_path}: {error}"

    try:
        load_1m, load_5m, load_15m = os.getloadavg()
    except OSError as error:
        load_1m = load_5m = load_15m = None
        for name in ("load_avg_1m", "load_avg_5m", "load_avg_15m"):
            unavailable[name] = f"os.getloadavg() failed: {error}"
    conditions.update(load_avg_1m=load_1m, load_avg_5m=load_5m, load_avg_15m=load_15m)

    conditions["unavailable"] = unavailable
    return conditions


def _read_cpufreq(
    sys_cpu_root: Path, unavailable: dict[str, str]
) -> tuple[list[str] | None, list[float] | None]:
    """Distinct scaling governors and per-cpu current MHz, for the cpus that expose cpufreq."""
    with_cpufreq = [cpu_dir / "cpufreq" for _, cpu_dir in cpu_dirs(sys_cpu_root)]
    with_cpufreq = [path for path in with_cpufreq if path.is_dir()]
    if not with_cpufreq:
        reason = f"no {sys_cpu_root}/cpu0/cpufreq (virtual machine or no cpufreq driver?)"
        unavailable["governor"] = unavailable["cpufreq_cur_mhz"] = reason
        return None, None

    governors: set[str] = set()
    cur_mhz: list[float] = []
    for cpufreq_dir in with_cpufreq:
        try:
            governors.add((cpufreq_dir / "scaling_governor").read_text().strip())
        except OSError as error:
            unavailable["governor"] = f"cannot read {cpufreq_dir}/scaling_governor: {error}"
        try:
            cur_mhz.append(int((cpufreq_dir / "scaling_cur_freq").read_text()) / 1000)
        except (OSError, ValueError) as error:
            unavailable["cpufreq_cur_mhz"] = f"cannot read {cpufreq_dir}/scaling_cur_freq: {error}"
    # A partial reading would pass for the whole machine, so report none if any cpu failed.
    return (
        sorted(governors) if "governor" not in unavailable else None,
        cur_mhz if "cpufreq_cur_mhz" not in unavailable else None,
    )


def blas_info() -> dict:
    """The BLAS (and OpenMP) libraries loaded in this process, and threading variables set."""
    import numpy  # noqa: F401  # loads numpy's BLAS, which threadpoolctl can only see once loaded
    from threadpoolctl import threadpool_info

    libraries = threadpool_info()
    fields = (
        "internal_api",
        "version",
        "architecture",
        "threading_layer",
        "num_threads",
        "prefix",
        "filepath",
    )
    blas = [{f: lib.get(f) for f in fields} for lib in libraries if lib.get("user_api") == "blas"]
    openmp = [
        {f: lib.get(f) for f in fields} for lib in libraries if lib.get("user_api") == "openmp"
    ]
    unavailable = {}
    if not blas:
        unavailable["blas_libraries"] = "threadpoolctl found no BLAS library loaded in this process"
    return {
        "blas_libraries": blas,
        "openmp_libraries": openmp,
        "env": {
            k: v for k, v in sorted(os.environ.items()) if k.startswith(_THREADING_ENV_PREFIXES)
        },
        "unavailable": unavailable,
    }
