"""Compiled (numba) microbenchmark kernels for the empirical CPU Roofline ceilings.

Two families, both built so that the measured rate is the hardware's, not Python's:

- STREAM-style bandwidth kernels (read, copy, triad) in fp64, STREAM's byte convention
  (write-allocate traffic not counted). The arrays are split into one contiguous chunk per thread;
  each call is ONE parallel region in which every thread makes ``reps`` passes over its own chunk.
  So a working set that fits the summed L1 (or L2, L3) stays in the cores' private caches across
  passes, and thread launch and call overhead is paid once per call, not once per pass.
- FMA peak kernels: per thread, 12 independent SIMD-wide chains ``acc = acc * x + y``, held in
  registers; 12 ymm chains cover the FMA latency (4 cycles) times the FMA pipes (2 per Zen 3 core).

benchmarks/c_reference/stream_fma.c is the C (gcc + OpenMP) version of the same kernels, with the
same chunking, pass structure and anti-collapse tricks; benchmarks/kernels_vs_c_scratch.py compares.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import numba
import numpy as np

__all__ = [
    "FMA_LANES",
    "STREAM_BYTES_PER_ELEMENT",
    "STREAM_KERNELS",
    "allocate_stream",
    "fma_flops",
    "run_fma",
    "run_stream",
    "stream_elements",
    "warm_up",
]

STREAM_KERNELS = {"read": 1, "copy": 2, "triad": 3}  # arrays per kernel
STREAM_BYTES_PER_ELEMENT = {"read": 8, "copy": 16, "triad": 24}  # STREAM convention, fp64

_CHUNK_UNIT = 64  # a thread's chunk is a multiple of 64 doubles = 512 B (whole ymm, whole lines)
_PAGE = 4096
_ARRAY_SKEW = 1024  # array k starts k KiB past a page boundary: a[i], b[i], c[i] never 4K-alias

_FMA_CHAINS = 12  # independent ymm accumulators per thread (latency 4 x 2 FMA pipes = 8 needed)
_F64_LANES = _FMA_CHAINS * 4  # doubles per ymm
_F32_LANES = _FMA_CHAINS * 8  # floats per ymm
FMA_LANES = {"fp64": _F64_LANES, "fp32": _F32_LANES}  # scalar chains per thread


def _jit(**options) -> Callable:
    """njit with an on-disk cache where numba can find a writable cache directory, else without."""

    def decorate(function):
        try:
            return numba.njit(cache=True, **options)(function)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return numba.njit(cache=False, **options)(function)

    return decorate


@contextlib.contextmanager
def _slp_vectorizer() -> Iterator[None]:
    """Compile with LLVM's SLP vectorizer, which numba disables by default (NUMBA_SLP_VECTORIZE).

    The FMA chains are a fixed-size array that LLVM fully unrolls and promotes to registers before
    the loop vectorizer runs; without SLP they stay scalar (vfmadd213sd, 1/4 of the peak). The
    setting is read when a function is compiled, so it only has to be on around the calls that
    may compile (a compiled or cached kernel is unaffected). It is process-wide while on: another
    thread compiling at that moment would get SLP too, which is harmless.
    """
    previous = numba.config.SLP_VECTORIZE
    numba.config.SLP_VECTORIZE = 1
    try:
        yield
    finally:
        numba.config.SLP_VECTORIZE = previous


def _check_threads(threads: int) -> None:
    if not 1 <= threads <= numba.config.NUMBA_NUM_THREADS:
        raise ValueError(f"threads must be in 1..{numba.config.NUMBA_NUM_THREADS}, got {threads}")


@contextlib.contextmanager
def _numba_threads(threads: int) -> Iterator[None]:
    _check_threads(threads)
    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        yield
    finally:
        numba.set_num_threads(previous)


# -- STREAM kernels ----------------------------------------------------------------------------
# Every kernel is `for t in prange(threads)` over whole chunks: with numba's static scheduling,
# thread t gets chunk t in every call, the chunk it first-touched in allocate_stream. Each thread
# loops over slices of its chunk from index 0: indexing the whole arrays over range(lo, hi)
# instead left the loops scalar here (~10x slower at L1).


@_jit(parallel=True)
def _first_touch(x, threads, base):
    m = x.size // threads
    for t in numba.prange(threads):
        lo = t * m
        for i in range(lo, lo + m):
            x[i] = base + 1e-3 * (i % 1000)


@_jit(parallel=True, fastmath=True)
def _read(a, reps, threads):
    # Two independent sums over the two halves of the chunk: fastmath lets LLVM vectorise each
    # with 4 interleaved ymm partial sums, 8 in all, enough to cover vaddpd latency (3 cycles) at
    # 2 loads per cycle; one sum (4 ymm) is latency-bound at ~2/3 of that at L1. Every pass's
    # sum reaches the checksum, so no pass can be dropped.
    m = a.size // threads
    h = (m >> 5) << 4  # a multiple of 16 that LLVM can see: no remainder code in the pass
    total = 0.0
    for t in numba.prange(threads):
        x = a[t * m : (t + 1) * m]
        checksum = 0.0
        for _ in range(reps):
            s0 = 0.0
            s1 = 0.0
            for i in range(h):
                s0 += x[i]
                s1 += x[h + i]
            for i in range(2 * h, m):  # empty for arrays from allocate_stream
                s0 += x[i]
            checksum += s0 + s1
        total += checksum
    return total


@_jit(parallel=True, fastmath=True)
def _copy(a, b, reps, threads):
    # After each pass one element it wrote (a different one each pass) joins the checksum. The
    # loop vectoriser moves 4 ymm per trip (the C does the same by hand); not turned into memcpy.
    m = a.size // threads
    total = 0.0
    for t in numba.prange(threads):
        x = a[t * m : (t + 1) * m]
        y = b[t * m : (t + 1) * m]
        checksum = 0.0
        for r in range(reps):
            for i in range(m):  # (the m16 split of _triad measured 2-5% slower here at L1)
                y[i] = x[i]
            checksum += y[r % m]
        total += checksum
    return total


@_jit(parallel=True, fastmath=True)
def _triad(a, b, c, reps, threads):
    # The scalar changes every pass and one freshly written element joins the checksum, so the
    # passes are neither identical nor dead; fastmath lets b + s*c contract into one vfmadd.
    m = a.size // threads
    # A trip count that LLVM sees is a multiple of 16 (its vector loop's step): no remainder
    # checks in the pass; measured 4-9% faster at L1 than `range(m)`.
    m16 = (m >> 4) << 4
    total = 0.0
    for t in numba.prange(threads):
        x = a[t * m : (t + 1) * m]
        y = b[t * m : (t + 1) * m]
        z = c[t * m : (t + 1) * m]
        checksum = 0.0
        for r in range(reps):
            s = 3.0 + 1e-9 * r
            for i in range(m16):
                x[i] = y[i] + s * z[i]
            for i in range(m16, m):  # empty for arrays from allocate_stream
                x[i] = y[i] + s * z[i]
            checksum += x[r % m]
        total += checksum
    return total


def stream_elements(kernel: str, working_set_bytes: int, threads: int) -> int:
    """Elements per array: the working set split over the kernel's arrays, rounded to the nearest
    multiple of threads x 64 (so every thread's chunk is whole cache lines and whole ymm), >= 1."""
    if kernel not in STREAM_KERNELS:
        raise ValueError(f"unknown STREAM kernel {kernel!r}; known: {', '.join(STREAM_KERNELS)}")
    unit = threads * _CHUNK_UNIT
    units = int(working_set_bytes / (8 * STREAM_KERNELS[kernel] * unit) + 0.5)  # as the C
    return max(1, units) * unit


def allocate_stream(kernel: str, working_set_bytes: int, threads: int) -> tuple[np.ndarray, ...]:
    """The fp64 arrays of `kernel` (a, or a b, or a b c), together about `working_set_bytes`.

    All arrays are views of one page-aligned buffer, array k starting k KiB past a page boundary
    (no 4K aliasing between a[i], b[i], c[i]). Thread t initialises chunk t of every array with
    non-zero values, so pages are first touched by the thread (core, NUMA node) that will use them.
    """
    _check_threads(threads)
    n = stream_elements(kernel, working_set_bytes, threads)
    count = STREAM_KERNELS[kernel]
    stride = (-(-n * 8 // _PAGE) * _PAGE + _ARRAY_SKEW) // 8  # elements between array starts
    buffer = np.empty(count * stride + _PAGE // 8, dtype=np.float64)  # untouched pages
    start = (-buffer.ctypes.data % _PAGE) // 8
    arrays = tuple(buffer[start + k * stride : start + k * stride + n] for k in range(count))
    with _numba_threads(threads):
        for k, array in enumerate(arrays):
            _first_touch(array, int(threads), 1.0 + k)
    return arrays


def run_stream(kernel: str, arrays: tuple[np.ndarray, ...], reps: int, threads: int) -> float:
    """One parallel region: each of `threads` threads makes `reps` passes over its chunk.

    Bytes moved = reps * elements * STREAM_BYTES_PER_ELEMENT[kernel]. Returns a checksum (keep it
    or not: it exists so that the compiler cannot drop or merge passes).
    """
    if kernel not in STREAM_KERNELS:
        raise ValueError(f"unknown STREAM kernel {kernel!r}; known: {', '.join(STREAM_KERNELS)}")
    _check_threads(threads)
    if len(arrays) != STREAM_KERNELS[kernel]:
        raise ValueError(f"{kernel} takes {STREAM_KERNELS[kernel]} arrays, got {len(arrays)}")
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    if len({a.size for a in arrays}) != 1 or arrays[0].size % threads:
        raise ValueError("arrays must be equally long, a multiple of threads: use allocate_stream")
    reps, threads = int(reps), int(threads)  # one int64 specialisation: no JIT in a timed call
    with _numba_threads(threads):
        if kernel == "read":
            return float(_read(arrays[0], reps, threads))
        if kernel == "copy":
            return float(_copy(arrays[0], arrays[1], reps, threads))
        return float(_triad(arrays[0], arrays[1], arrays[2], reps, threads))


# -- FMA kernels -------------------------------------------------------------------------------
# acc = acc * x + y with 0 < x < 1 converges to y / (1 - x) = 1: finite whatever `iters`. The
# per-thread kernel is a plain function called from the prange body, so its accumulator array is
# private to the thread; LLVM unrolls the lane loop, keeps the lanes in registers and (with SLP)
# packs them into ymm, giving 12 vfmadd...pd per iteration and no loads or stores.


@_jit(fastmath={"contract"})
def _chains_f64(iters, x, y):
    acc = np.empty(_F64_LANES, dtype=np.float64)
    for j in range(_F64_LANES):
        acc[j] = 1.0 + 1e-3 * j
    for _ in range(iters):
        for j in range(_F64_LANES):
            acc[j] = acc[j] * x + y
    return acc.sum()


@_jit(fastmath={"contract"})
def _chains_f32(iters, x, y):
    acc = np.empty(_F32_LANES, dtype=np.float32)
    for j in range(_F32_LANES):
        acc[j] = 1.0 + 1e-3 * j
    for _ in range(iters):
        for j in range(_F32_LANES):
            acc[j] = acc[j] * x + y
    return np.float64(acc.sum())


@_jit(parallel=True, fastmath={"contract"})
def _fma_f64(iters, threads, x, y):
    total = 0.0
    for _ in numba.prange(threads):
        total += _chains_f64(iters, x, y)
    return total


@_jit(parallel=True, fastmath={"contract"})
def _fma_f32(iters, threads, x, y):
    total = 0.0
    for _ in numba.prange(threads):
        total += _chains_f32(iters, x, y)
    return total


# (kernel, x, y): x and y are arguments, not constants, so the compiler cannot fold the chain.
_FMA_KERNELS = {
    "fp64": (_fma_f64, np.float64(0.999999), np.float64(1e-6)),
    "fp32": (_fma_f32, np.float32(0.9999), np.float32(1e-4)),
}


def fma_flops(dtype: str, iters: int, threads: int) -> int:
    """Exact FLOPs of run_fma(dtype, iters, threads): one FMA per chain per iteration, 2 FLOPs."""
    if dtype not in FMA_LANES:
        raise ValueError(f"unknown FMA dtype {dtype!r}; known: {', '.join(FMA_LANES)}")
    return 2 * FMA_LANES[dtype] * iters * threads


def run_fma(dtype: str, iters: int, threads: int) -> float:
    """One parallel region: each of `threads` threads runs `iters` iterations of its FMA chains.

    Returns the sum of the accumulators (finite, and it keeps the chains alive).
    """
    if dtype not in _FMA_KERNELS:
        raise ValueError(f"unknown FMA dtype {dtype!r}; known: {', '.join(_FMA_KERNELS)}")
    if iters < 0:
        raise ValueError(f"iters must be >= 0, got {iters}")
    kernel, x, y = _FMA_KERNELS[dtype]
    iters, threads = int(iters), int(threads)
    with _numba_threads(threads), _slp_vectorizer():
        return float(kernel(iters, threads, x, y))


def warm_up(threads: int | None = None) -> None:
    """Compile (or load from cache) every kernel by calling it on tiny inputs, so that no timed
    call includes JIT time (nor the start of numba's thread pool). Default: all numba threads."""
    threads = numba.config.NUMBA_NUM_THREADS if threads is None else threads
    for kernel in STREAM_KERNELS:
        run_stream(kernel, allocate_stream(kernel, 4096, threads), 2, threads)
    for dtype in FMA_LANES:
        run_fma(dtype, 2, threads)


# -- one thread, without the GIL -----------------------------------------------------------------
# Two stages side by side (experiments.stage_overlap) run in two Python threads, each on its own
# core. numba's parallel regions cannot be entered from two threads at once, so each kernel gets
# a second build from the same source: not parallel (prange runs as range, threads = 1) and
# releasing the GIL.


@functools.cache
def _alone(kernel: Callable) -> Callable:
    options = {k: v for k, v in kernel.targetoptions.items() if k not in ("parallel", "nopython")}
    return numba.njit(nogil=True, cache=False, **options)(kernel.py_func)


def run_stream_alone(kernel: str, arrays: tuple[np.ndarray, ...], reps: int) -> float:
    """run_stream on the calling thread alone, the GIL released (arrays of allocate_stream with
    threads = 1): reps * elements * STREAM_BYTES_PER_ELEMENT[kernel] bytes."""
    functions = {"read": _read, "copy": _copy, "triad": _triad}
    if kernel not in functions:
        raise ValueError(f"unknown STREAM kernel {kernel!r}; known: {', '.join(STREAM_KERNELS)}")
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    return float(_alone(functions[kernel])(*arrays, int(reps), 1))


def run_fma_alone(dtype: str, iters: int) -> float:
    """run_fma's chains on the calling thread alone, the GIL released: fma_flops(dtype, iters, 1)
    FLOPs."""
    chains = {"fp64": _chains_f64, "fp32": _chains_f32}
    if dtype not in chains:
        raise ValueError(f"unknown FMA dtype {dtype!r}; known: {', '.join(FMA_LANES)}")
    _, x, y = _FMA_KERNELS[dtype]
    with _slp_vectorizer():  # as run_fma: the chains in ymm registers, not scalar
        return float(_alone(chains[dtype])(int(iters), x, y))
