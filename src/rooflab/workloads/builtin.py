"""The built-in workloads of the default campaign: three lessons of the Roofline article, each with
an honest ledger (F: useful FLOPs; Q: the cold-cache bytes that must cross the memory boundary).

- Fusion changes Q. relu_axpb_unfused and relu_axpb_fused do the same useful work
  y = max(a*x + b, 0) (F = 2n), the first in three array passes through a temporary (Q = 6n·s),
  the second in one (Q = 2n·s): same F, 3x less Q, the point moves right.
- Useful is not executed. blockdiag_dense and blockdiag_blocks multiply a block-diagonal n×n matrix
  by an n×k matrix: the dense GEMM executes `blocks` times the useful FLOPs (a higher executed
  FLOP/s, yet slower), the batched GEMM over the blocks only the useful ones.
- Left of the ridge is not bandwidth-bound. pointer_chase follows a random single cycle, one
  dependent load per hop: its distance below the memory roof is latency, not bandwidth.

Every factory works on the "cpu" backend (numpy + numba) and on "cuda" (CuPy, imported only there).
Allocation, inputs (ctx.rng, ctx.dtype), compilation and one warm-up call happen in the factory;
run() only launches, never synchronizes (on CUDA it launches on the current stream, which the
backend's timer makes its own), and returns its outputs (for tests; the timer ignores them). Q
counts each pass's inputs read once and outputs written once; write-allocate traffic is not
counted (STREAM's convention, as the ceilings).
"""

from __future__ import annotations

import contextlib
import functools
import numbers
from collections.abc import Callable, Iterator

import numba
import numpy as np

from rooflab.vocabulary import CACHE_STATES
from rooflab.workloads import Context, Workload, WorkloadError

__all__ = [
    "CUDA_SOURCE",
    "DEFAULT_WORKLOADS",
    "blockdiag_blocks",
    "blockdiag_dense",
    "pointer_chase",
    "relu_axpb_fused",
    "relu_axpb_unfused",
]

_MODULE = "rooflab.workloads.builtin"


def _spec(name: str, params: dict, dtype: str, same_work_as: str | None = None) -> dict:
    spec = {"entry": f"{_MODULE}:{name}", "dtypes": [dtype]}
    spec["params"] = {key: list(values) for key, values in params.items()}  # no shared lists
    spec["cache_states"] = [state.value for state in CACHE_STATES]
    return spec | ({"same_work_as": same_work_as} if same_work_as else {})


_FUSION = {"n": [1_048_576, 16_777_216]}
_BLOCKDIAG = {"n": [1024], "blocks": [8], "k": [64]}
# The default campaign's workloads, in the shape of a config's `workloads:` section. The
# pointer chase's dtype names its checksum's type; its indices are int64 whatever the dtype.
DEFAULT_WORKLOADS: dict[str, dict] = {
    "relu_axpb_unfused": _spec("relu_axpb_unfused", _FUSION, "fp32"),
    "relu_axpb_fused": _spec("relu_axpb_fused", _FUSION, "fp32", "relu_axpb_unfused"),
    "blockdiag_dense": _spec("blockdiag_dense", _BLOCKDIAG, "fp32"),
    "blockdiag_blocks": _spec("blockdiag_blocks", _BLOCKDIAG, "fp32", "blockdiag_dense"),
    "pointer_chase": _spec("pointer_chase", {"n": [4_194_304], "steps": [1_000_000]}, "fp64"),
}

_BLOCK = 256  # CUDA threads per block of the elementwise kernel
_CHUNK = 1 << 20  # elements per float64 slice of a check

# The CUDA kernels, compiled by NVRTC through cupy.RawModule (only on the cuda backend).
CUDA_SOURCE = r"""
template <typename T>
__device__ __forceinline__ void relu_axpb(const T* __restrict__ x, T* __restrict__ y, T a, T b,
                                          long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) {
        T v = a * x[i] + b;  // NVRTC contracts this into one FMA: one rounding, not two
        y[i] = v > T(0) ? v : T(0);
    }
}

extern "C" __global__ void relu_axpb_fp32(const float* x, float* y, float a, float b,
                                          long long n) { relu_axpb<float>(x, y, a, b, n); }
extern "C" __global__ void relu_axpb_fp64(const double* x, double* y, double a, double b,
                                          long long n) { relu_axpb<double>(x, y, a, b, n); }

// One thread: every load's address is the previous load's value, so nothing overlaps.
extern "C" __global__ void pointer_chase(const long long* next, long long start,
                                         long long steps, long long* out_index,
                                         double* out_sum) {
    long long i = start;
    double checksum = 0.0;
    for (long long h = 0; h < steps; ++h) {
        i = next[i];
        checksum += (double)i;
    }
    out_index[0] = i;
    out_sum[0] = checksum;
}
"""


# -- helpers -----------------------------------------------------------------------------------


def _jit(**options) -> Callable:
    """njit with an on-disk cache where numba can find a writable cache directory, else without
    (as rooflab.backends.cpu_kernels, which this layer may not import)."""

    def decorate(function):
        try:
            return numba.njit(cache=True, **options)(function)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return numba.njit(cache=False, **options)(function)

    return decorate


@contextlib.contextmanager
def _numba_threads(threads: int) -> Iterator[None]:
    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        yield
    finally:
        numba.set_num_threads(previous)


def _int_param(params: dict, key: str, name: str, default: int | None = None) -> int:
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise WorkloadError(f"{name}: param {key!r} must be a positive integer, got {value!r}")
    return int(value)


def _float_dtype(ctx: Context, name: str) -> np.dtype:
    dtype = np.dtype(ctx.dtype)
    if dtype not in (np.float32, np.float64):
        raise WorkloadError(f"{name}: dtype {dtype} is not supported (fp32 or fp64)")
    return dtype


def _backend(ctx: Context, name: str) -> bool:
    """True on cuda, False on cpu; anything else is refused."""
    if ctx.backend not in ("cpu", "cuda"):
        raise WorkloadError(f"{name}: backend {ctx.backend!r} is not supported (cpu or cuda)")
    return ctx.backend == "cuda"


def _tolerance(dtype: np.dtype, terms: int) -> float:
    """Twice the worst-case rounding error of a sum of `terms` rounded products, relative to the
    sum of the terms' magnitudes (so that cancellation cannot inflate it).

    Such a sum, in any order and with or without FMA, is within γ_terms ≈ terms·u of the exact
    value relative to Σ|term| (Higham, Accuracy and Stability of Numerical Algorithms, §3.1;
    u = eps/2); the float64 reference is within as much again when the dtype is float64 itself.
    So 2·terms·eps is a bound with a margin of 2 (fp64) to 4 (fp32): fp32 and 128 terms 3.1e-5,
    fp64 5.7e-14; an elementwise a*x + b (2 terms) 4.8e-7 in fp32, 8.9e-16 in fp64. A wrong
    element is off by O(1), far above; a TF32 GEMM (inputs rounded to 10 bits) would typically
    exceed it, as it should (it would not be the fp32 work the ledger counts).
    """
    return 2.0 * terms * float(np.finfo(dtype).eps)


def _host(ctx: Context, array) -> np.ndarray:
    return array.get() if ctx.backend == "cuda" else array


def _settle(ctx: Context) -> None:
    """On CUDA, wait for the factory's uploads and warm-up: the backend's timer launches on its
    own non-blocking stream, which does not wait for the default stream."""
    if ctx.backend == "cuda":
        import cupy

        cupy.cuda.Device().synchronize()


@functools.cache
def _cuda_function(name: str):
    import cupy

    module = cupy.RawModule(code=CUDA_SOURCE, options=("-std=c++17",))
    return module.get_function(name)


# -- 1. fusion: y = max(a*x + b, 0) ------------------------------------------------------------


def _relu_inputs(params: dict, ctx: Context, name: str):
    dtype = _float_dtype(ctx, name)
    n = _int_param(params, "n", name)
    x = ctx.rng.standard_normal(n).astype(dtype)
    a = dtype.type(ctx.rng.uniform(0.5, 2.0))
    b = dtype.type(ctx.rng.uniform(-0.5, 0.5))
    return dtype, n, x, a, b


def _relu_check(ctx: Context, x: np.ndarray, a, b, y) -> Callable[[], float]:
    """Max error of y against max(a*x + b, 0) in float64 on the host, every element, relative
    to |a*x| + |b| (see _tolerance); in chunks, so the float64 copies stay small."""

    def check() -> float:
        got = _host(ctx, y)
        a64, b64, worst = float(a), float(b), 0.0
        tiny = float(np.finfo(x.dtype).tiny)
        for lo in range(0, x.size, _CHUNK):
            x64 = x[lo : lo + _CHUNK].astype(np.float64)
            ax = a64 * x64
            reference = np.maximum(ax + b64, 0.0)
            scale = np.maximum(np.abs(ax) + abs(b64), tiny)
            error = np.abs(got[lo : lo + _CHUNK].astype(np.float64) - reference) / scale
            worst = max(worst, float(error.max()))
        return worst

    return check


def relu_axpb_unfused(params: dict, ctx: Context) -> Workload:
    """y = max(a*x + b, 0) as three array passes through a temporary t: t = a*x; t = t + b;
    y = max(t, 0), each one ufunc call with out= (numpy on the CPU, one CuPy kernel each on the
    GPU). Params: n. On the CPU numpy's ufuncs run on one thread."""
    name = "relu_axpb_unfused"
    _backend(ctx, name)
    dtype, n, x_host, a, b = _relu_inputs(params, ctx, name)
    xp = ctx.xp
    x, t, y, zero = xp.asarray(x_host), xp.empty(n, dtype), xp.empty(n, dtype), dtype.type(0)

    def run():
        xp.multiply(x, a, out=t)
        xp.add(t, b, out=t)
        return xp.maximum(t, zero, out=y)

    run()
    _settle(ctx)
    s = dtype.itemsize
    return Workload(
        run=run,
        flops=2 * n,  # a multiply and an add per element; the max is no FLOP (ncu counts none)
        # The ledger of this implementation: each pass reads its input and writes its output
        # across the memory boundary: x -> t (2n·s), t -> t (2n·s), t -> y (2n·s). A temporary
        # that fits a cache (n = 2^20 fp32: 4 MiB) may stay there between passes, so measured
        # traffic can be lower than this cold-cache model.
        bytes=6 * n * s,
        arrays=(x, t, y),
        check=_relu_check(ctx, x_host, a, b, y),
        tolerance=_tolerance(dtype, 2),
    )


@_jit(parallel=True)
def _parallel_copy(source, target, threads):
    m = source.size // threads
    for t in numba.prange(threads):
        lo = t * m
        hi = source.size if t == threads - 1 else lo + m
        for i in range(lo, hi):
            target[i] = source[i]


# No fastmath: the loop vectorises without it (no reduction), and without contraction a*x + b
# is rounded twice as in numpy's passes, so the fused and unfused results are the same bits.
@_jit(parallel=True)
def _relu_axpb(x, y, a, b, zero, threads):
    # One contiguous chunk per thread (static schedule: thread t gets chunk t, the one it first
    # touched); each thread loops over slices of its chunk from 0, which LLVM vectorises.
    m = x.size // threads
    for t in numba.prange(threads):
        lo = t * m
        hi = x.size if t == threads - 1 else lo + m
        xs = x[lo:hi]
        ys = y[lo:hi]
        for i in range(hi - lo):
            v = a * xs[i] + b
            ys[i] = v if v > zero else zero


def relu_axpb_fused(params: dict, ctx: Context) -> Workload:
    """y = max(a*x + b, 0) in one pass: a numba kernel over `threads` threads on the CPU, one
    elementwise CUDA kernel (one thread per element) on the GPU. Params: n, threads (CPU only;
    default 1: numpy runs the unfused passes it is compared with on one thread, so the two differ
    in their passes over memory only)."""
    name = "relu_axpb_fused"
    cuda = _backend(ctx, name)
    dtype, n, x_host, a, b = _relu_inputs(params, ctx, name)
    if cuda:
        x = ctx.xp.asarray(x_host)
        y = ctx.xp.empty(n, dtype=dtype)
        function = _cuda_function("relu_axpb_fp32" if dtype == np.float32 else "relu_axpb_fp64")
        grid, args = (-(-n // _BLOCK),), (x, y, a, b, np.int64(n))

        def run():
            function(grid, (_BLOCK,), args)
            return y

    else:
        threads = _int_param(params, "threads", name, 1)
        if threads > numba.config.NUMBA_NUM_THREADS:
            raise WorkloadError(
                f"{name}: threads must be at most {numba.config.NUMBA_NUM_THREADS}, got {threads}"
            )
        x, y, zero = np.empty(n, dtype=dtype), np.empty(n, dtype=dtype), dtype.type(0)
        with _numba_threads(threads):
            _parallel_copy(x_host, x, threads)  # each thread first-touches its chunk of x

        def run():
            with _numba_threads(threads):  # (a few µs: set_num_threads is cheap)
                _relu_axpb(x, y, a, b, zero, threads)
            return y

    run()  # compiles, and first-touches y on the CPU
    _settle(ctx)
    return Workload(
        run=run,
        flops=2 * n,  # a multiply and an add per element (the same work as the unfused)
        bytes=2 * n * dtype.itemsize,  # read x once, write y once
        arrays=(x, y),
        check=_relu_check(ctx, x_host, a, b, y),
        tolerance=_tolerance(dtype, 2),
    )


# -- 2. useful vs executed: a block-diagonal matrix times an n×k matrix ------------------------


def _blockdiag_inputs(params: dict, ctx: Context, name: str):
    dtype = _float_dtype(ctx, name)
    n = _int_param(params, "n", name)
    blocks = _int_param(params, "blocks", name)
    k = _int_param(params, "k", name, 64)
    if n % blocks:
        raise WorkloadError(f"{name}: n ({n}) must be a multiple of blocks ({blocks})")
    size = n // blocks
    # Both factories draw the same inputs from the same seed: the blocks, then X.
    diagonal = ctx.rng.standard_normal((blocks, size, size)).astype(dtype)
    x = ctx.rng.standard_normal((n, k)).astype(dtype)
    return dtype, n, blocks, k, size, diagonal, x


def _blockdiag_check(ctx, diagonal: np.ndarray, x: np.ndarray, y) -> Callable[[], float]:
    """Max error of Y against the blocks' products in float64 on the host, every element, relative
    to |A_b|·|X_b| (see _tolerance). The reference multiplies block by block with einsum (no
    BLAS), never the dense matrix."""
    blocks, size, _ = diagonal.shape
    d64 = diagonal.astype(np.float64)
    x64 = x.astype(np.float64).reshape(blocks, size, -1)
    reference = np.einsum("bij,bjk->bik", d64, x64).reshape(x.shape)
    scale = np.maximum(np.abs(d64) @ np.abs(x64), np.finfo(np.float64).tiny).reshape(x.shape)

    def check() -> float:
        got = _host(ctx, y).astype(np.float64).reshape(x.shape)
        return float((np.abs(got - reference) / scale).max())

    return check


def blockdiag_dense(params: dict, ctx: Context) -> Workload:
    """Y = A @ X with A the whole n×n block-diagonal matrix (zeros off the blocks), one library
    GEMM (numpy's BLAS on the CPU, cuBLAS through CuPy on the GPU). Params: n, blocks, k (64)."""
    name = "blockdiag_dense"
    _backend(ctx, name)
    dtype, n, blocks, k, size, diagonal, x_host = _blockdiag_inputs(params, ctx, name)
    dense = np.zeros((n, n), dtype=dtype)
    for block in range(blocks):
        rows = slice(block * size, (block + 1) * size)
        dense[rows, rows] = diagonal[block]
    xp = ctx.xp
    a, x, y = xp.asarray(dense), xp.asarray(x_host), xp.empty((n, k), dtype=dtype)

    def run():
        return xp.matmul(a, x, out=y)

    run()
    _settle(ctx)
    s = dtype.itemsize
    return Workload(
        run=run,
        flops=2 * (n * n // blocks) * k,  # useful: the blocks' multiply-adds only
        executed_flops=2 * n * n * k,  # the GEMM multiplies the zeros too
        bytes=(n * n + 2 * n * k) * s,  # the dense matrix (zeros included) + X + Y
        arrays=(a, x, y),
        check=_blockdiag_check(ctx, diagonal, x_host, y),
        tolerance=_tolerance(dtype, size),  # adding the zeros is exact: `size` terms per sum
    )


def blockdiag_blocks(params: dict, ctx: Context) -> Workload:
    """Y_b = A_b @ X_b for every diagonal block b: one batched GEMM on (blocks, n/blocks,
    n/blocks) against (blocks, n/blocks, k) (numpy's matmul loops BLAS over the batch on the CPU;
    cuBLAS strided-batched through CuPy on the GPU). Params: n, blocks, k (64)."""
    name = "blockdiag_blocks"
    _backend(ctx, name)
    dtype, n, blocks, k, size, diagonal_host, x_host = _blockdiag_inputs(params, ctx, name)
    xp = ctx.xp
    diagonal = xp.asarray(diagonal_host)
    x = xp.asarray(x_host).reshape(blocks, size, k)  # X's rows block by block: a view
    y = xp.empty((blocks, size, k), dtype=dtype)

    def run():
        return xp.matmul(diagonal, x, out=y)

    run()
    _settle(ctx)
    useful = 2 * (n * n // blocks) * k
    return Workload(
        run=run,
        flops=useful,
        executed_flops=useful,  # nothing but the useful work: the pair's executed ledger
        bytes=(n * n // blocks + 2 * n * k) * dtype.itemsize,  # the blocks + X + Y
        arrays=(diagonal, x, y),
        check=_blockdiag_check(ctx, diagonal_host, x_host, y),
        tolerance=_tolerance(dtype, size),
    )


# -- 3. pointer chase: latency, not bandwidth ---------------------------------------------------


@_jit()
def _chase(next_index, start, steps, out_index, out_sum):
    i = start
    checksum = 0.0
    for _ in range(steps):
        i = next_index[i]
        checksum += i
    out_index[0] = i
    out_sum[0] = checksum


def _cycle(order: np.ndarray) -> np.ndarray:
    """next[] of the single cycle order[0] -> order[1] -> ... -> order[n-1] -> order[0]."""
    next_index = np.empty_like(order)
    next_index[order] = np.roll(order, -1)
    return next_index


def pointer_chase(params: dict, ctx: Context) -> Workload:
    """Follow i = next[i] for `steps` hops around a random cyclic permutation of n indices, from
    the same start every call, adding each index to an fp64 checksum: a numba loop on one CPU
    thread, a single-thread CUDA kernel on the GPU. Params: n, steps. The dtype (fp64 or int64)
    changes nothing: the indices are int64 and the checksum fp64 (exact: it stays below 2^53)."""
    name = "pointer_chase"
    cuda = _backend(ctx, name)
    if np.dtype(ctx.dtype) not in (np.float64, np.int64):
        raise WorkloadError(f"{name}: dtype {np.dtype(ctx.dtype)} is not supported (fp64, int64)")
    n = _int_param(params, "n", name)
    steps = _int_param(params, "steps", name)
    if n < 2:
        raise WorkloadError(f"{name}: n must be at least 2, got {n}")
    if steps * (n - 1) >= 2**53:
        raise WorkloadError(f"{name}: steps × n must stay below 2^53 (an exact fp64 checksum)")
    order = ctx.rng.permutation(n).astype(np.int64)  # the cycle's visiting order
    next_host, start = _cycle(order), np.int64(order[0])
    next_index = ctx.xp.asarray(next_host)  # (on the CPU, next_host itself)
    out_index, out_sum = ctx.xp.zeros(1, dtype=np.int64), ctx.xp.zeros(1, dtype=np.float64)
    if cuda:
        function = _cuda_function("pointer_chase")

        def launch(hops: int):
            function((1,), (1,), (next_index, start, np.int64(hops), out_index, out_sum))
            return out_index, out_sum

    else:

        def launch(hops: int):
            _chase(next_index, start, np.int64(hops), out_index, out_sum)
            return out_index, out_sum

    launch(1)  # compiles; the warm-up is one hop, not a whole walk
    _settle(ctx)

    # The reference, another way: hop h lands on order[h mod n], so the final index is
    # order[steps mod n] and the checksum steps // n whole cycles (each n(n-1)/2) plus the rest.
    cycles, rest = divmod(steps, n)
    final_reference = int(order[rest])
    sum_reference = cycles * (n * (n - 1) // 2) + int(order[1 : rest + 1].sum())

    def check() -> float:
        # 1 for a wrong final index, else the checksum's relative error: exact arithmetic, so
        # any difference is a wrong walk (the tolerance is below 1/2^53, the smallest one).
        final, checksum = int(_host(ctx, out_index)[0]), float(_host(ctx, out_sum)[0])
        index_error = 0.0 if final == final_reference else 1.0
        return max(index_error, abs(checksum - sum_reference) / max(sum_reference, 1))

    return Workload(
        run=lambda: launch(steps),
        flops=steps,  # the checksum's one fp64 add per hop
        # The useful bytes: one 8-byte index per hop (past the caches a hop moves a whole line,
        # 64 B on the CPU, a 32 B sector or more on the GPU); the time is the loads' latency.
        bytes=8 * steps,
        footprint=8 * n + 16,  # the whole cycle and the results, whatever the hops: n, not Q
        arrays=(next_index, out_index, out_sum),
        check=check,
        tolerance=2.0**-54,
    )
