"""The backend interface: what a measurement needs from a device, and nothing more.

A backend allocates, runs and times work on one device (the CPU through numpy/numba, a GPU through
CuPy), evicts its caches, and reads the conditions it runs under. Experiments are written against
this interface only, so the CPU and GPU paths take the same measurements the same way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class BackendError(RuntimeError):
    """A backend that cannot do what was asked (unavailable, unsupported dtype, no memory)."""


@dataclass
class GemmOperands:
    """Y[M×N] = X[M×K]·W; W is K×N for layout nn and stored N×K (used transposed) for nt."""

    x: Any
    w: Any
    y: Any
    layout: str


@dataclass(frozen=True)
class Workload:
    """A repeatable piece of work: `run(count)` does `count` units inside one timed call."""

    run: Callable[[int], object]
    amount_per_unit: int  # bytes (bandwidth) or FLOP (compute) per unit
    unit: str  # "B" or "FLOP"


class Backend(ABC):
    name: str
    gemm_dtypes: tuple[str, ...]
    stream_kernels: tuple[str, ...]
    fma_dtypes: tuple[str, ...]

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
        """Evict the caches by writing a buffer >= 2x their capacity; not timed."""

    flush_bytes: int
    flush_method: str

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
    def stream_workload(self, kernel: str, working_set_bytes: int, threads: int) -> Workload: ...

    @abstractmethod
    def fma_workload(self, dtype: str, threads: int) -> Workload: ...

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


def cuda_available() -> bool:
    try:
        import cupy
    except ImportError:
        return False
    try:
        return bool(cupy.cuda.is_available())
    except Exception:  # a broken driver install counts as no device
        return False


def select_backend(name: str) -> Backend:
    """`auto` is CUDA when a CUDA device is visible, else the CPU."""
    if name not in ("auto", "cpu", "cuda"):
        raise BackendError(f"unknown backend {name!r}; choose auto, cpu or cuda")
    if name == "cuda" or (name == "auto" and cuda_available()):
        if not cuda_available():
            raise BackendError(
                "backend cuda asked for, but no CUDA device is visible "
                "(cupy missing or cupy.cuda.is_available() is false)"
            )
        raise BackendError("the CUDA backend is not built yet (issue 6); use backend cpu")
    from rooflab.backends.cpu import CpuBackend

    return CpuBackend()
