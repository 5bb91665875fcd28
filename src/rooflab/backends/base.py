"""The backend interface: what a measurement needs from a device, and nothing more.

A backend allocates, runs and times work on one device (the CPU through numpy/numba, a GPU through
CuPy), evicts its caches, and reads the conditions it runs under. Experiments are written against
this interface only, so the CPU and GPU paths take the same measurements the same way.
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def nvtx_name(label: str) -> str:
    """The NVTX range name of a label such as `<config_id>/warm`: each '/' written as ':'.

    In ncu's `--nvtx-include` syntax '/' between names means nested push/pop ranges, so a name
    holding a config id's '/' could be selected only with escapes. The range of
    `main/bf16/nn/m1_n4096_k4096/warm` is selected by
    `ncu --nvtx --nvtx-include 'main:bf16:nn:m1_n4096_k4096:warm/'`."""
    return label.replace("/", ":")


class BackendError(RuntimeError):
    """A backend that cannot do what was asked (unavailable, unsupported dtype, no memory)."""


# The cold-cache flush passes over FLUSH_SAFETY x the last cache level's measured edge (where a
# ceilings run of the machine saw it; cache_edges), else 2x the summed reported capacities. The
# edge is where a streaming sweep's rate falls, not what the cache retains: on a 2-vCPU VM whose
# sweep fell at 91 MB (480 MiB L3 reported), a read of 45 MB right after a 365 MB (4x) flush
# still ran at 31 GB/s median (24-40) against memory's 29; after 730 MB (8x), 28.9 (25-34).
FLUSH_SAFETY = 8


# A flush size set by hand for this host: a whole number of bytes. It replaces the rules below
# everywhere (every cold sample's flush_method says so), for a machine whose caches neither the
# reports nor a ceilings run size well, and for the test suite, whose cold samples need no
# gigabyte flush. Smaller than the last cache level, a cold sample is partly cached.
FLUSH_BYTES_ENV = "ROOFLAB_FLUSH_BYTES"


def flush_size(reported: dict[str, int], measured_last: int | None = None) -> tuple[int, str]:
    """Bytes of the cold-cache flush and why that many. From the reported capacities: 2x their
    sum (a non-inclusive L3 holds lines besides the L2s), at least 2x the last level. From the
    last level's measured edge: FLUSH_SAFETY x it, no more than the reported rule, and never less
    than 2x it nor 2x the summed levels below the last (a core's own caches, which no neighbour
    shares): a VM's streaming rate often falls far below the L3 it reports. $ROOFLAB_FLUSH_BYTES,
    where set, replaces both (BackendError where it is not a whole number of bytes > 0)."""
    rule = 2 * sum(reported.values())
    if measured_last is None or not reported:
        size, why = rule, "2x the summed reported cache capacity"
    else:
        last = max(reported, key=reported.get)
        private = 2 * sum(size for level, size in reported.items() if level != last)
        size = max(min(FLUSH_SAFETY * measured_last, rule), 2 * measured_last, private)
        why = (
            f"{FLUSH_SAFETY}x the {measured_last} B {last} edge measured by the ceilings sweep "
            f"(reported {reported[last]} B), within [2x that edge and 2x the levels below it, "
            "2x the summed reported capacity]"
        )
    by_hand = os.environ.get(FLUSH_BYTES_ENV, "").strip()
    if not by_hand:
        return size, why
    if not by_hand.isdigit() or int(by_hand) < 1:
        raise BackendError(f"${FLUSH_BYTES_ENV}={by_hand!r}: give a whole number of bytes > 0")
    return int(by_hand), f"set by ${FLUSH_BYTES_ENV}; by its rule {size} B: {why}"


@dataclass
class GemmOperands:
    """Y[M×N] = X[M×K]·W; W is K×N for layout nn and stored N×K (used transposed) for nt."""

    x: Any
    w: Any
    y: Any
    layout: str
    dtype: str | None = None
    plan: Any = None  # what the backend prepared for its matmul call (e.g. cuBLAS arguments)
    # (scale_x, scale_w): the per-tensor scales the GEMM multiplies by (FP8 through cuBLASLt:
    # Y = scale_x·scale_w·X·W of the stored codes); None where there are none
    scales: tuple[float, float] | None = None


@dataclass(frozen=True)
class LibraryVariant:
    """One library GEMM call timed for a dtype's library ceiling (Backend.library_variants)."""

    kernel: str  # the `ceilings` row's kernel ("matmul": the backend's own library call)
    library: str  # short name, for comparing variants ("cuBLAS gemmEx", "cuBLASLt")
    description: str  # what runs: the start of the row's `method`
    layout: str = "nn"


@dataclass(frozen=True)
class CeilingLoad:
    """A ceiling kernel's repeatable load: `run(count)` does `count` units inside one timed call
    (the public `rooflab.Workload` is a user's kernel; this is the ceilings' own)."""

    run: Callable[[int], object]
    amount_per_unit: int  # bytes (bandwidth) or FLOP (compute) per unit
    unit: str  # "B" or "FLOP"
    threads: int | None = None  # threads it really runs, where it differs from those asked for
    # Bytes the data occupies, where that is not the amount per unit (each SM's set of the L1 read)
    working_set_bytes: int | None = None


@dataclass(frozen=True)
class LocalCache:
    """A cache of each SM (or core) that the shared working-set sweep cannot reach (a GPU's L1:
    the sweep's loads bypass it), swept on its own by `local_cache_workload`."""

    level: str  # e.g. "L1"
    bytes_per_unit: int  # the data capacity of one SM's (core's) cache, a lower bound
    kernel: str  # the kernel's name in the sweep and ceilings tables
    capacity_note: str  # where bytes_per_unit comes from


class Backend(ABC):
    name: str
    gemm_dtypes: tuple[str, ...]
    stream_kernels: tuple[str, ...]
    fma_dtypes: tuple[str, ...]
    array_module: Any = np  # numpy or cupy: where operands live and checks are computed
    memory_level: str = "DRAM"  # the name of the memory behind the last cache level
    local_cache: LocalCache | None = None
    # How it was chosen (backends.selection.select_backend sets these; into the `runs` row).
    backend_requested: str | None = None
    backend_note: str | None = None
    # Whether other processes' CPU use slows what this backend measures (a CPU's caches and memory
    # are shared; a GPU's timing is the device's, whatever the host's other cores do).
    host_contention_matters: bool = True
    # Idle before a library GEMM's peak is sampled: a GPU under its power limit lowers its clock
    # within a fraction of a second of sustained GEMMs and raises it again at rest. A CPU
    # without such a limit needs none.
    rest_before_peak_s: float = 0.0
    # A link to host memory of its own to measure (a GPU's PCIe or NVLink-C2C): host_link_loads
    # then gives its copies, measured as the memory level `host`. A CPU has none.
    has_host_link: bool = False

    # -- identity and conditions --
    @abstractmethod
    def run_metadata(self) -> dict:
        """Columns of the `runs` row: host, machine_id, device, versions, machine, blas."""

    @abstractmethod
    def read_conditions(self, phase: str, config_id: str | None = None) -> dict:
        """One row of the `conditions` table, read now (unreadable fields named, not null)."""

    @abstractmethod
    def sample_clock_mhz(self) -> float | None:
        """A cheap clock reading taken right after a timed sample (outside the timed region)."""

    # -- memory and caches --
    @abstractmethod
    def memory_available_bytes(self) -> int: ...

    @abstractmethod
    def cache_bytes_by_level(self) -> dict[str, int]:
        """Data-cache capacity per level, totalled over what this backend's threads use."""

    @abstractmethod
    def flush_cache(self) -> None:
        """Evict the caches by passing over a buffer of flush_bytes; not timed."""

    flush_bytes: int
    flush_method: str  # how, over how many bytes, and why that many (flush_size's reason)

    def make_cold(self, operands: Sequence | None = None) -> tuple[int, str]:
        """Make the next call's data cold, outside any timed region; the bytes it touched and
        how (the cold row's flush_bytes and flush_method). `operands`: the arrays the call
        reads and writes, evicted by themselves where the backend can (CpuBackend); else, and
        without them, the caches flushed by their buffer (flush_cache)."""
        self.flush_cache()
        return self.flush_bytes, self.flush_method

    def size_flush(self, measured_last_bytes: int, source: str) -> None:
        """Size the flush from the last cache level's measured edge (flush_size); `source` says
        where it was measured (a ceilings run of this machine)."""
        self.flush_bytes, why = flush_size(self.cache_bytes_by_level(), measured_last_bytes)
        self._resize_flush(f"{why}; {source}")

    def _resize_flush(self, why: str) -> None:
        """Take flush_bytes and its reason into the flush (a backend whose buffer is already
        allocated allocates it anew)."""
        raise BackendError(f"backend {self.name} cannot resize its cache flush")

    def memory_sweep_from(self) -> int:
        """The smallest working set whose sweep point may set the memory's ceiling, besides
        being past the last cache's measured edge (cache_edges.memory_plateau); 0: no other
        bound."""
        return 0

    # -- running and timing --
    @abstractmethod
    def synchronize(self) -> None: ...

    @abstractmethod
    def time_call(self, call: Callable[[], object]) -> float:
        """Seconds of one call, measured so asynchronous work is fully inside the interval."""

    @abstractmethod
    def gemm_operands(
        self, m: int, n: int, k: int, dtype: str, layout: str, seed: int
    ) -> GemmOperands:
        """Seeded random non-zero inputs and an output buffer, on the device."""

    @abstractmethod
    def matmul(self, operands: GemmOperands) -> None:
        """Y = X·W (or X·Wᵀ for nt), written into operands.y."""

    @abstractmethod
    def poison(self, array: Any) -> None:
        """Fill with NaN, so elements a kernel fails to write cannot pass a check."""

    @abstractmethod
    def to_host(self, array: Any): ...

    @abstractmethod
    def stream_workload(
        self, kernel: str, working_set_bytes: int, threads: int, isa: str | None = None
    ) -> CeilingLoad:
        """A STREAM kernel over `working_set_bytes`, its loads and stores at the width of path
        `isa` (one of fma_isas(); None: the widest)."""

    @abstractmethod
    def fma_workload(self, dtype: str, threads: int, isa: str | None = None) -> CeilingLoad:
        """FMA chains of `dtype` on instruction path `isa` (one of fma_isas(); None: the
        widest)."""

    def fma_isas(self) -> tuple[str | None, ...]:
        """The instruction paths the FMA chains are built for, widest first: one compute ceiling
        each, the first the dtype's default roof (CPU: "avx512", "avx2"). (None,): one path
        that needs no name (a GPU's FMA kernel)."""
        return (None,)

    def isa_label(self, isa: str | None) -> tuple[str | None, int | None]:
        """(a name for people, vector bits) of an instruction path; (None, None) unnamed."""
        return None, None

    def local_cache_workload(self, working_set_bytes: int, threads: int) -> CeilingLoad:
        """Each SM's L1 holds `working_set_bytes` (a region per resident block) and reads it over
        and over; amount: all SMs' reads."""
        raise BackendError(f"backend {self.name} has no separate local-cache sweep")

    def host_link_loads(self, buffer_bytes: int) -> list:
        """The host link's copies of `buffer_bytes` each way, checked and ready to time
        (rooflab.backends.cuda_host_link.HostLinkLoad); none where there is no host link."""
        return []

    def gpu_other_processes(self) -> int:
        """Processes other than this one using the device; 0 where there is no device to share."""
        return 0

    def host_delays_enter_timing(self) -> bool:
        """Whether a measuring thread kept off its CPU lengthens the timed interval (host clock:
        always; CUDA events behind a held stream: no, the device starts only once all is queued)."""
        return True

    @contextlib.contextmanager
    def limited_library_threads(self) -> Iterator[int | None]:
        """Run the block with the GEMM library's thread pool set to an explicit size, and yield
        that size (None where the library has no host pool)."""
        yield None

    @contextlib.contextmanager
    def library_threads_kept(self) -> Iterator[None]:
        """Run the block, then set every host thread pool threadpoolctl sees (BLAS, OpenMP)
        back to its size before it: what a user's factory changes holds for its own case."""
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=None):  # no change now; the sizes seen are restored
            yield

    @contextlib.contextmanager
    def sampling_conditions(self, config_id: str | None = None) -> Iterator[list[dict]]:
        """Condition readings taken in the background while the block runs (phase "during"),
        in the list it yields once the block ends; none where the backend has no sampler."""
        yield []

    @contextlib.contextmanager
    def nvtx_range(self, label: str) -> Iterator[None]:
        """A range named `nvtx_name(label)` around a measured region for profilers (NVTX on
        CUDA); else nothing."""
        yield

    def library_path(self, dtype: str) -> str:
        """Name of the library GEMM ceiling of a dtype (CPU: fp64_blas)."""
        return f"{dtype}_blas"

    def library_description(self, dtype: str) -> str:
        return "library GEMM (numpy matmul / BLAS)"

    def library_variants(self, dtype: str) -> tuple[LibraryVariant, ...]:
        """The library GEMM calls timed for the dtype's library ceiling, each a `ceilings` row
        named `library_path(dtype)`; the roof is the fastest, as for every name. One by default
        (CUDA: bf16 through cuBLAS gemmEx and through cuBLASLt)."""
        return (LibraryVariant("matmul", "library", self.library_description(dtype)),)

    def library_operands(self, n: int, dtype: str, variant: LibraryVariant) -> GemmOperands:
        """Operands of the n x n x n GEMM that `variant` times."""
        return self.gemm_operands(n, n, n, dtype, variant.layout, seed=0)

    def library_threads(self) -> int | None:
        """Threads of the GEMM library (BLAS) where it has a pool; None where it has none."""
        return None

    def default_threads(self) -> int:
        """Threads a ceiling kernel uses by default (all usable cores on a CPU)."""
        return 1

    def check_dtype(self, dtype: str) -> None:
        if dtype not in self.gemm_dtypes:
            raise BackendError(
                f"backend {self.name} does not support dtype {dtype!r}; "
                f"supported: {', '.join(self.gemm_dtypes)}"
            )
