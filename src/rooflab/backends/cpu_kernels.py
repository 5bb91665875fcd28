"""The CPU ceiling kernels, run on all cores: bandwidth (read, copy, triad) and FMA chains, at the
width of a named vector instruction path (backends.cpu_paths; kernels in backends.cpu_ir).

- STREAM-style bandwidth kernels in fp64, STREAM's byte convention (write-allocate traffic not
  counted), at the widest path's width. The arrays are split into one contiguous chunk per
  thread; each call makes every thread run `reps` passes over its own chunk, so a working set that
  fits the summed L1 (or L2, L3) stays in the cores' private caches across passes, and the cost
  of starting the threads is paid once per call, not once per pass.
- FMA peak kernels, one per path and dtype: per thread, `fma_chains` independent vector chains
  `acc = fma(acc, x, y)` held in registers.

The threads are a team of Python threads, thread t pinned to the t-th usable CPU and always given
chunk t (the chunk it first-touched), each calling a compiled kernel through ctypes, which
releases the GIL. Waiting workers block (no spinning beside the next measurement).

benchmarks/c_reference/stream_fma.c is the C (gcc + OpenMP) version of the same kernels, with the
same chunking, pass structure and anti-collapse tricks; benchmarks/cpu_ceilings_vs_c.py compares
them, and likwid-bench, in one run.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import queue
import threading
from collections.abc import Callable

import numpy as np

from rooflab.backends import cpu_ir
from rooflab.backends.cpu_paths import VectorPath, vector_paths

__all__ = [
    "STREAM_BYTES_PER_ELEMENT",
    "STREAM_KERNELS",
    "allocate_stream",
    "fma_flops",
    "fma_runner",
    "host_paths",
    "run_fma",
    "run_fma_alone",
    "run_stream",
    "run_stream_alone",
    "stream_elements",
    "stream_runner",
    "warm_up",
]

STREAM_KERNELS = {"read": 1, "copy": 2, "triad": 3}  # arrays per kernel
STREAM_BYTES_PER_ELEMENT = {"read": 8, "copy": 16, "triad": 24}  # STREAM convention, fp64
FMA_DTYPES = ("fp64", "fp32")

_CHUNK_UNIT = 64  # a thread's chunk is a multiple of 64 doubles = 512 B: whole trips of any path
_PAGE = 4096
# Array k starts 3k KiB past a page boundary (a, b, c at page offsets 0, 3 and 2 KiB): a[i], b[i]
# and c[i] never 4K-alias. A 1 KiB step (offsets 0, 1, 2 KiB) ran the AVX2 triad 5 % slower at
# L2 on an AVX-512 Xeon (261 against 276 GB/s, likwid-bench 276), and no faster at L1 or L3.
_ARRAY_SKEW = 3072
_TOUCH_BLOCK = 1 << 20  # elements initialised at a time (no temporary as large as the array)


# -- paths -------------------------------------------------------------------------------------


@functools.cache
def _host_paths() -> tuple[tuple[VectorPath, ...], tuple[str, ...]]:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    features = {name for name, on in llvm.get_host_cpu_features().items() if on}
    paths, unbuilt = vector_paths(platform.machine(), features)
    return paths, tuple(unbuilt)


def host_paths() -> tuple[VectorPath, ...]:
    """The vector paths this CPU has and rooflab builds, widest first (its default first)."""
    return _host_paths()[0]


def unbuilt_paths() -> tuple[str, ...]:
    """A sentence for each path this CPU has that rooflab does not build (or none at all)."""
    return _host_paths()[1]


def _path(isa: str | None) -> VectorPath:
    paths = host_paths()
    if not paths:
        raise RuntimeError("; ".join(unbuilt_paths()))
    if isa is None:
        return paths[0]
    for path in paths:
        if path.isa == isa:
            return path
    have = ", ".join(path.isa for path in paths)
    raise ValueError(f"this CPU has no {isa!r} vector path; it has: {have}")


# -- the thread team ---------------------------------------------------------------------------


def _usable_cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _check_threads(threads: int) -> None:
    usable = len(_usable_cpus())
    if not 1 <= threads <= usable:
        raise ValueError(f"threads must be in 1..{usable} (the usable CPUs), got {threads}")


class _Team:
    """`threads` worker threads, worker t pinned to the t-th usable CPU; `run(task)` calls
    task(t) on every worker at once and returns the results in worker order."""

    def __init__(self, threads: int) -> None:
        cpus = _usable_cpus()
        self._inboxes = [queue.SimpleQueue() for _ in range(threads)]
        self._results: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()  # one task at a time: results are not tagged by caller
        for t, inbox in enumerate(self._inboxes):
            threading.Thread(
                target=self._work, args=(t, cpus[t % len(cpus)], inbox),
                name=f"rooflab-kernel-{t}", daemon=True,
            ).start()  # fmt: skip

    def _work(self, t: int, cpu: int, inbox: queue.SimpleQueue) -> None:
        if hasattr(os, "sched_setaffinity"):
            with contextlib.suppress(OSError):  # a cpuset that forbids it: run unpinned
                os.sched_setaffinity(0, {cpu})  # 0: this thread
        while True:
            task = inbox.get()
            try:
                self._results.put((t, task(t), None))
            except BaseException as error:
                self._results.put((t, None, error))

    def run(self, task: Callable[[int], object]) -> list:
        with self._lock:
            for inbox in self._inboxes:
                inbox.put(task)
            results = sorted(self._results.get() for _ in self._inboxes)
        for _, _, error in results:
            if error is not None:
                raise error
        return [value for _, value, _ in results]


@functools.cache
def _team(threads: int) -> _Team:
    return _Team(threads)


# -- STREAM kernels ----------------------------------------------------------------------------


def stream_elements(kernel: str, working_set_bytes: int, threads: int) -> int:
    """Elements per array: the working set split over the kernel's arrays, rounded to the nearest
    multiple of threads x 64 (so every thread's chunk is whole cache lines and whole loop trips
    of every path), >= 1 unit."""
    if kernel not in STREAM_KERNELS:
        raise ValueError(f"unknown STREAM kernel {kernel!r}; known: {', '.join(STREAM_KERNELS)}")
    unit = threads * _CHUNK_UNIT
    units = int(working_set_bytes / (8 * STREAM_KERNELS[kernel] * unit) + 0.5)  # as the C
    return max(1, units) * unit


def allocate_stream(kernel: str, working_set_bytes: int, threads: int) -> tuple[np.ndarray, ...]:
    """The fp64 arrays of `kernel` (a, or a b, or a b c), together about `working_set_bytes`.

    All arrays are views of one page-aligned buffer, array k starting 3k KiB past a page
    boundary (no 4K aliasing between a[i], b[i], c[i]; see _ARRAY_SKEW). Worker t initialises
    chunk t of every array with non-zero values, so pages are first touched by the core (NUMA
    node) that will use them.
    """
    _check_threads(threads)
    n = stream_elements(kernel, working_set_bytes, threads)
    count = STREAM_KERNELS[kernel]
    stride = (-(-n * 8 // _PAGE) * _PAGE + _ARRAY_SKEW) // 8  # elements between array starts
    buffer = np.empty(count * stride + _PAGE // 8, dtype=np.float64)  # untouched pages
    start = (-buffer.ctypes.data % _PAGE) // 8
    arrays = tuple(buffer[start + k * stride : start + k * stride + n] for k in range(count))
    m = n // threads

    def first_touch(t: int) -> None:
        for k, array in enumerate(arrays):
            for lo in range(t * m, (t + 1) * m, _TOUCH_BLOCK):
                hi = min(lo + _TOUCH_BLOCK, (t + 1) * m)
                array[lo:hi] = 1.0 + k + 1e-3 * (np.arange(lo, hi) % 1000)

    _team(threads).run(first_touch)
    return arrays


def _chunks(kernel: str, arrays: tuple[np.ndarray, ...], threads: int, path: VectorPath):
    """(pointers of chunk t, elements per chunk), checked: the kernels know no remainder."""
    if kernel not in STREAM_KERNELS:
        raise ValueError(f"unknown STREAM kernel {kernel!r}; known: {', '.join(STREAM_KERNELS)}")
    if len(arrays) != STREAM_KERNELS[kernel]:
        raise ValueError(f"{kernel} takes {STREAM_KERNELS[kernel]} arrays, got {len(arrays)}")
    trip = cpu_ir.elements_per_trip(path, kernel)
    sizes = {a.size for a in arrays}
    contiguous = all(a.dtype == np.float64 and a.flags.c_contiguous for a in arrays)
    if len(sizes) != 1 or not contiguous or arrays[0].size % (threads * trip):
        raise ValueError(
            f"arrays must be contiguous fp64, equally long, a multiple of threads x {trip} "
            "elements: use allocate_stream"
        )
    m = arrays[0].size // threads
    return [[a.ctypes.data + 8 * t * m for a in arrays] for t in range(threads)], m


def stream_runner(
    kernel: str, arrays: tuple[np.ndarray, ...], threads: int, isa: str | None = None
) -> Callable[[int], float]:
    """`run(reps)`: one call in which each of `threads` threads makes `reps` passes over its
    chunk, at the width of path `isa` (default: the widest). Checked and bound here, once, so
    that a timed call does nothing but run the kernel.

    Bytes moved = reps * elements * STREAM_BYTES_PER_ELEMENT[kernel]. Returns a checksum (keep it
    or not: it exists so that no pass is dead code).
    """
    _check_threads(threads)
    path = _path(isa)
    chunks, m = _chunks(kernel, arrays, threads, path)
    function, team = cpu_ir.compiled(path).stream[kernel], _team(threads)

    def run(reps: int, arrays=arrays) -> float:  # the arrays live as long as their pointers
        if reps < 1:
            raise ValueError(f"reps must be >= 1, got {reps}")
        reps = int(reps)
        return float(sum(team.run(lambda t: function(*chunks[t], m, reps))))

    return run


def run_stream(
    kernel: str, arrays: tuple[np.ndarray, ...], reps: int, threads: int, isa: str | None = None
) -> float:
    """One call of stream_runner(kernel, arrays, threads, isa)."""
    return stream_runner(kernel, arrays, threads, isa)(reps)


# -- FMA kernels -------------------------------------------------------------------------------


def fma_flops(dtype: str, iters: int, threads: int, isa: str | None = None) -> int:
    """Exact FLOPs of run_fma(dtype, iters, threads, isa): 2 per FMA lane, all chains."""
    if dtype not in FMA_DTYPES:
        raise ValueError(f"unknown FMA dtype {dtype!r}; known: {', '.join(FMA_DTYPES)}")
    return cpu_ir.fma_flops_per_iteration(_path(isa), dtype) * iters * threads


def fma_runner(dtype: str, threads: int, isa: str | None = None) -> Callable[[int], float]:
    """`run(iters)`: one call in which each of `threads` threads runs `iters` iterations of its
    FMA chains on path `isa` (default: the widest), checked and bound once. Returns the sum of
    the accumulators (finite)."""
    if dtype not in FMA_DTYPES:
        raise ValueError(f"unknown FMA dtype {dtype!r}; known: {', '.join(FMA_DTYPES)}")
    _check_threads(threads)
    function, team = cpu_ir.compiled(_path(isa)).fma[dtype], _team(threads)
    x, y = cpu_ir.FMA_X[dtype], cpu_ir.FMA_Y[dtype]

    def run(iters: int) -> float:
        if iters < 0:
            raise ValueError(f"iters must be >= 0, got {iters}")
        iters = int(iters)
        return float(sum(team.run(lambda t: function(iters, x, y))))

    return run


def run_fma(dtype: str, iters: int, threads: int, isa: str | None = None) -> float:
    """One call of fma_runner(dtype, threads, isa)."""
    return fma_runner(dtype, threads, isa)(iters)


def warm_up(threads: int | None = None) -> None:
    """Compile every path's kernels and start the team, so that no timed call includes either."""
    threads = len(_usable_cpus()) if threads is None else threads
    for path in host_paths():
        cpu_ir.compiled(path)
        for kernel in STREAM_KERNELS:
            arrays = allocate_stream(kernel, 4096 * STREAM_KERNELS[kernel] * threads, threads)
            run_stream(kernel, arrays, 2, threads, path.isa)
        for dtype in FMA_DTYPES:
            run_fma(dtype, 2, threads, path.isa)


# -- one thread ----------------------------------------------------------------------------------
# Two stages side by side (experiments.stage_overlap) run in two Python threads, each on its own
# core: there the calling thread runs the kernel itself (ctypes releases the GIL).


def run_stream_alone(kernel: str, arrays: tuple[np.ndarray, ...], reps: int) -> float:
    """run_stream on the calling thread alone (arrays of allocate_stream with threads = 1):
    reps * elements * STREAM_BYTES_PER_ELEMENT[kernel] bytes."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    path = _path(None)
    (pointers,), m = _chunks(kernel, arrays, 1, path)
    return float(cpu_ir.compiled(path).stream[kernel](*pointers, m, int(reps)))


def run_fma_alone(dtype: str, iters: int) -> float:
    """run_fma's chains on the calling thread alone: fma_flops(dtype, iters, 1) FLOPs."""
    if dtype not in FMA_DTYPES:
        raise ValueError(f"unknown FMA dtype {dtype!r}; known: {', '.join(FMA_DTYPES)}")
    function = cpu_ir.compiled(_path(None)).fma[dtype]
    return float(function(int(iters), cpu_ir.FMA_X[dtype], cpu_ir.FMA_Y[dtype]))
