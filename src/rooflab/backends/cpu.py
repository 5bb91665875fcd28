"""The CPU backend: numpy (BLAS) for GEMM, LLVM-built vector kernels per instruction path for
ceilings (backends.cpu_kernels), host clock for timing.

CPU work is synchronous, so a host clock around the call is the whole interval. Conditions come
from rooflab.conditions.cpu (the effective clock is measured, not read from /proc/cpuinfo).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import numpy as np

from rooflab import machine
from rooflab.backends.base import Backend, BackendError, CeilingLoad, GemmOperands, flush_size
from rooflab.backends.random_operands import random_nonzero
from rooflab.conditions import cpu as cpu_conditions

NUMPY_DTYPES = {"fp64": np.float64, "fp32": np.float32}
FLUSH_SETTLE_S = 0.5e-3


class CpuBackend(Backend):
    name = "cpu"
    gemm_dtypes = tuple(NUMPY_DTYPES)
    # cpu_kernels.STREAM_KERNELS, named here: llvmlite loads only in a job that runs a kernel
    stream_kernels = ("read", "copy", "triad")
    fma_dtypes = ("fp64", "fp32")

    def __init__(self) -> None:
        self.identity = machine.cpu_identity()
        self._caches = machine.cache_bytes_by_level(self.identity)
        # Evict every level: a non-inclusive L3 (AMD) holds lines besides the L2s, so the buffer
        # is 2x the sum of all levels, which is >= 2x the last-level cache; smaller where a
        # ceilings run measured a smaller last level (size_flush).
        self.flush_bytes, self._flush_why = flush_size(self._caches)
        # Allocated at the first flush: a backend built to check sizes (the Snakefile's
        # pre-flight, a dry run) allocates nothing; memory_available_bytes counts it either way.
        self._flush: tuple[list[np.ndarray], ThreadPoolExecutor] | None = None
        # Compiled at the first cold sample that names its operands (make_cold); False: none
        # for this CPU, the buffer flush serves.
        self._evictor = None
        # The clock's add loop is compiled at the first conditions reading (each job's "before"
        # reading, ahead of any sample), not here: a backend built to check sizes runs none.

    # -- identity and conditions --
    def run_metadata(self) -> dict:
        versions = {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "numba": importlib.metadata.version("numba"),
            "llvmlite": importlib.metadata.version("llvmlite"),
        }
        return {
            "host": self.identity["hostname"],
            "machine_id": self.identity["machine_id"],
            "backend": self.name,
            "device_name": self.identity["cpu_model"],
            "device_uuid": None,
            "driver_version": None,
            "runtime_version": None,
            "library_versions": versions,
            "machine": self.identity,
            "blas": cpu_conditions.blas_info(),
        }

    def read_conditions(self, phase: str, config_id: str | None = None) -> dict:
        reading = cpu_conditions.read_cpu_conditions()
        governor = reading.get("governor")
        return {
            "t": datetime.fromisoformat(reading["t"]),
            "phase": phase,
            "config_id": config_id,
            "cpu_ghz_measured": reading.get("cpu_ghz_measured"),
            "governor": ",".join(governor) if isinstance(governor, list) else governor,
            "load_avg_1m": reading.get("load_avg_1m"),
            "unavailable": {
                **reading.get("unavailable", {}),
                **{
                    key: "not a GPU"
                    for key in (
                        "sm_clock_mhz",
                        "mem_clock_mhz",
                        "temp_c",
                        "power_w",
                        "throttle_reasons",
                        "gpu_other_processes",
                    )
                },
            },
        }

    def sample_clock_mhz(self) -> float | None:
        # Every probe preempted: no reading, rather than a wrong one.
        try:
            return cpu_conditions.measure_cpu_clock_hz(min_time_s=5e-5) / 1e6
        except cpu_conditions.ClockUnavailable:
            return None

    # -- memory and caches --
    def _free_bytes(self) -> int:
        try:
            with open("/proc/meminfo", encoding="ascii") as meminfo:
                for line in meminfo:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")

    def memory_available_bytes(self) -> int:
        # the flush buffer, allocated or still to be, is not available to a measurement
        return self._free_bytes() - (self.flush_bytes if self._flush is None else 0)

    def cache_bytes_by_level(self) -> dict[str, int]:
        return dict(self._caches)

    @property
    def flush_method(self) -> str:
        return (
            f"read-modify-write by every core of a {self.flush_bytes} B buffer "
            f"({self._flush_why}) before each sample"
        )

    def _resize_flush(self, why: str) -> None:
        self._flush_why = why
        if self._flush is not None:  # allocated anew, at its new size, at the next flush
            self._flush[1].shutdown()
            self._flush = None

    def flush_cache(self) -> None:
        if self._flush is None:
            # One chunk per core, written by plain threads: an OpenMP flush would leave its
            # workers spinning for milliseconds after it, competing with BLAS in the cold sample
            # (measured here: a 2 ms GEMM read 6 ms). numpy releases the GIL: chunks at once.
            threads = self.default_threads()
            chunks = np.array_split(np.zeros(self.flush_bytes // 8), threads)
            self._flush = chunks, ThreadPoolExecutor(threads, thread_name_prefix="rooflab-flush")
            self._write_flush_buffer()  # first touch: the page faults, not in the flush itself
        self._write_flush_buffer()
        # The workers still need the GIL to park after their chunk; without this pause they ran
        # beside the next sample's BLAS threads, whose run-queue wait then flagged it disturbed.
        time.sleep(FLUSH_SETTLE_S)

    def make_cold(self, operands: Sequence | None = None) -> tuple[int, str]:
        if operands and self._evictor is None:
            from rooflab.backends.cpu_evict import evictor_for_this_machine  # llvmlite: lazily

            self._evictor = evictor_for_this_machine() or False
        # numpy's arrays only: their memory is what they say it is (a workload's own objects
        # are untrusted; anything else gets the buffer flush)
        if (
            not operands
            or not self._evictor
            or not all(isinstance(a, np.ndarray) for a in operands)
        ):
            return super().make_cold()
        flushed = self._evictor.evict(operands)
        return flushed, self._evictor.describe(flushed)

    def _write_flush_buffer(self) -> None:
        # Read and write every line, so each core's caches fill with dirty lines of the buffer.
        chunks, pool = self._flush
        list(pool.map(lambda chunk: np.add(chunk, 1.0, out=chunk), chunks))

    # -- running and timing --
    def synchronize(self) -> None:
        pass  # CPU calls return when their work is done

    def time_call(self, call: Callable[[], object]) -> float:
        start = time.perf_counter_ns()
        call()
        return (time.perf_counter_ns() - start) * 1e-9

    def gemm_operands(self, m, n, k, dtype, layout, seed) -> GemmOperands:
        self.check_dtype(dtype)
        if layout not in ("nn", "nt"):
            raise BackendError(f"unknown layout {layout!r}; supported: nn, nt")
        as_dtype = NUMPY_DTYPES[dtype]
        x = random_nonzero(np, (m, k), seed, stream=0).astype(as_dtype)
        w_shape = (k, n) if layout == "nn" else (n, k)
        w = random_nonzero(np, w_shape, seed, stream=1).astype(as_dtype)
        return GemmOperands(x=x, w=w, y=np.empty((m, n), dtype=as_dtype), layout=layout)

    def matmul(self, operands: GemmOperands) -> None:
        w = operands.w if operands.layout == "nn" else operands.w.T
        np.matmul(operands.x, w, out=operands.y)

    def poison(self, array) -> None:
        array.fill(np.nan)

    def to_host(self, array):
        return array

    def stream_workload(
        self, kernel: str, working_set_bytes: int, threads: int, isa: str | None = None
    ) -> CeilingLoad:
        from rooflab.backends import cpu_kernels

        arrays = cpu_kernels.allocate_stream(kernel, working_set_bytes, threads)
        elements = sum(a.size for a in arrays) // cpu_kernels.STREAM_KERNELS[kernel]
        return CeilingLoad(
            run=cpu_kernels.stream_runner(kernel, arrays, threads, isa),
            amount_per_unit=elements * cpu_kernels.STREAM_BYTES_PER_ELEMENT[kernel],
            unit="B",
        )

    def fma_workload(self, dtype: str, threads: int, isa: str | None = None) -> CeilingLoad:
        from rooflab.backends import cpu_kernels

        return CeilingLoad(
            run=cpu_kernels.fma_runner(dtype, threads, isa),
            amount_per_unit=cpu_kernels.fma_flops(dtype, 1, threads, isa),
            unit="FLOP",
        )

    def fma_isas(self) -> tuple[str | None, ...]:
        from rooflab.backends import cpu_kernels

        paths = cpu_kernels.host_paths()
        if not paths:  # e.g. ppc64le, riscv64: said, rather than a roof below the machine's
            unbuilt = "; ".join(cpu_kernels.unbuilt_paths())
            raise BackendError(f"no CPU ceilings can be measured here: {unbuilt}")
        return tuple(path.isa for path in paths)

    def isa_label(self, isa: str | None) -> tuple[str | None, int | None]:
        from rooflab.backends import cpu_kernels

        paths = cpu_kernels.host_paths()
        path = next((p for p in paths if p.isa == isa), paths[0] if isa is None else None)
        return (path.label, path.vector_bits) if path else (None, None)

    @contextlib.contextmanager
    def limited_library_threads(self) -> Iterator[int | None]:
        """BLAS with exactly default_threads() threads (threadpoolctl), whatever the
        environment set; the ceiling kernels' team is sized per call (cpu_kernels._team)."""
        from threadpoolctl import threadpool_limits

        threads = self.default_threads()
        with threadpool_limits(limits=threads, user_api="blas"):
            yield threads

    def library_threads(self) -> int | None:
        blas = cpu_conditions.blas_info().get("blas_libraries") or [{}]
        return blas[0].get("num_threads")

    def default_threads(self) -> int:
        # numba's thread count is the usable CPUs unless NUMBA_NUM_THREADS caps it (read here so
        # that a job timing BLAS alone never loads numba)
        usable = self.identity["usable_cpus"]
        return min(usable, int(os.environ.get("NUMBA_NUM_THREADS") or usable))
