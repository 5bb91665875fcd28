"""The GPU side of benchmarks/gpu_ceilings_vs_references.py: rooflab's calls and their peers
(cudaMemcpyAsync and cupy.matmul through CuPy, PyTorch's copy_, _scaled_mm, _int_mm, matmul,
F.linear and pinned copies), as the Comparisons of gpu_references_rows, and how a side is timed.

Inputs are shared: PyTorch gets rooflab's own operands (CuPy arrays) through DLPack, without a
copy, and each GEMM's two outputs are compared once before anything is timed (integers exactly,
floats to 2 % of the largest |value|), so both sides compute the same product. CuPy and PyTorch
are imported inside functions: importing this module needs neither.
"""

from __future__ import annotations

import functools
import statistics
import sys
from collections.abc import Callable
from typing import Any

from gpu_references_rows import TARGET, Comparison, Prepared, Side, Unavailable, reason

from rooflab.backends.cublaslt import LT_KERNEL
from rooflab.backends.cuda_identity import package_version

WARM_UPS = 3
LINEAR_SHAPE = (16, 4096, 4096)  # M, N, K of the weight-reuse GEMM: Y = X·Wᵀ, W stored N×K
LINEAR_BATCH = 64  # calls per timed sample of that GEMM (one call takes ~10 µs)
CLOSE = 2e-2  # float outputs agree to this fraction of rooflab's largest |value|
TIMING = (
    "each side: the median of --samples calls timed by CUDA events, after one untimed call and "
    f"{WARM_UPS} warm-ups; rooflab's calls and the CuPy references on rooflab's measuring "
    "stream, held while the call is enqueued (device time only); PyTorch's on its current "
    "stream with its own events, one untimed call queued just before the start event so the "
    "timed call is already queued when the device reaches it (device time, not PyTorch's "
    "launch overhead); the sides alternate in each round and each keeps its best round"
)


def torch_status() -> tuple[Any, str]:
    """(torch, what it is) where PyTorch sees a CUDA device, else (None, why not)."""
    try:
        import torch
    except ImportError as error:
        return None, f"PyTorch is not installed ({error})"
    except Exception as error:  # a broken install: say so, run the rest
        return None, f"PyTorch did not import: {reason(error)}"
    if not torch.cuda.is_available():
        return None, f"PyTorch {torch.__version__} sees no CUDA device"
    return torch, f"PyTorch {torch.__version__} (CUDA {torch.version.cuda})"


def versions(torch, torch_text: str) -> dict:
    """The JSON document's versions: PyTorch's (or why it is absent), CuPy's (as loaded by the
    backend), nvmath-python's."""
    return {
        "torch": {"version": getattr(torch, "__version__", None), "status": torch_text},
        "cupy": getattr(sys.modules.get("cupy"), "__version__", None),
        "nvmath_python": package_version("nvmath-python"),
    }


def settle() -> None:
    """Wait for all of the device's work (every stream)."""
    from cupy.cuda import runtime

    runtime.deviceSynchronize()


def median_seconds(time_call: Callable[[Callable], float], call: Callable, samples: int) -> float:
    # First call outside any timing: a library's first use (its handle, lazily loaded kernels)
    # may wait for the device, which inside rooflab's held stream would time the hold out.
    call()
    settle()
    for _ in range(WARM_UPS):  # heuristics, first touch
        time_call(call)
    return statistics.median(time_call(call) for _ in range(samples))


def rate(side: Side, samples: int) -> float:
    """Units per second of `side`: its amount over the median seconds of a call."""
    return side.amount / median_seconds(side.time_call, side.call, samples)


def torch_timer(torch) -> Callable[[Callable[[], object]], float]:
    """Seconds of one call on PyTorch's current stream, by its events. The call is queued once
    untimed just before the start event: the device is busy with it while the host records the
    event and enqueues the timed call, so the interval holds the device's work, not the host's
    time to launch it (as rooflab's held stream does). Needs a call longer than its launch."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def time_call(call: Callable[[], object]) -> float:
        call()
        start.record()
        call()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) * 1e-3

    return time_call


def as_torch(torch, array):
    """A PyTorch view of a CuPy array, no copy (DLPack, else __cuda_array_interface__); bf16 bit
    patterns (uint16) come as bfloat16, through int16."""
    bf16 = array.dtype.name == "uint16"
    if bf16:
        array = array.view("int16")
    try:
        tensor = torch.from_dlpack(array)
    except Exception as error:
        try:
            tensor = torch.as_tensor(array, device="cuda")
        except Exception:
            raise Unavailable(f"PyTorch cannot take CuPy's array: {reason(error)}") from error
    return tensor.view(torch.bfloat16) if bf16 else tensor


def check_same(ours, theirs, what: str, exact: bool = False) -> None:
    """rooflab's output and the peer's (finished: settle() first) agree, or Unavailable."""
    if exact:
        if not bool((ours == theirs).all()):
            raise Unavailable(f"{what} and rooflab give different int32 outputs: not timed")
        return
    worst, largest = float(abs(ours - theirs).max()), float(abs(ours).max())
    if not worst <= CLOSE * largest:  # NaN fails too
        raise Unavailable(
            f"{what} and rooflab disagree on the same inputs (max |difference| {worst:.3g}, "
            f"largest |rooflab| {largest:.3g}): not timed"
        )


def graphed(torch, step: Callable[[], object], count: int) -> tuple[Callable[[], object], str]:
    """`count` calls of `step` as one CUDA graph replay (its launch costs one call's), else
    `count` eager calls; with what it is."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up before capture, on the capturing stream
            for _ in range(WARM_UPS):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            for _ in range(count):
                step()
        return graph.replay, f"CUDA graph of {count} calls"
    except Exception as error:
        torch.cuda.synchronize()

        def eager() -> None:
            for _ in range(count):
                step()

        why = reason(error)
        return eager, f"{count} eager calls (no graph: {why}; PyTorch's launches may be timed)"


def comparisons(backend, torch, settings: dict) -> list[Comparison]:
    """The rows of one run, in order. `settings`: n, copy_gib, host_mib. `torch`: the module,
    None where it is unusable (its comparisons are then skipped unprepared)."""
    n, gib, mib = settings["n"], settings["copy_gib"], settings["host_mib"]
    flops = 2 * n**3

    @functools.cache
    def timer():
        return torch_timer(torch)

    @functools.cache
    def copy_load():
        return backend.stream_workload("copy", int(gib * 2**30), backend.default_threads())

    def our_copy() -> Side:
        load = copy_load()
        return Side("copy kernel", backend.time_call, lambda: load.run(1), load.amount_per_unit)

    def copy_vs_memcpy() -> Prepared:
        ours = our_copy()  # rooflab's side first: where it cannot run, the row says so

        import cupy
        from cupy.cuda import runtime

        source = cupy.ones(int(ours.amount) // 2 // 8, dtype=cupy.float64)
        target = cupy.empty_like(source)

        def memcpy() -> None:
            stream = cupy.cuda.get_current_stream().ptr  # time_call makes its stream current
            runtime.memcpyAsync(
                target.data.ptr, source.data.ptr, source.nbytes, runtime.memcpyDeviceToDevice,
                stream,
            )  # fmt: skip

        reference = Side("cudaMemcpyAsync", backend.time_call, memcpy, 2 * source.nbytes)
        return Prepared((ours,), reference)

    def copy_vs_torch() -> Prepared:
        ours = our_copy()
        source = torch.ones(int(ours.amount) // 2 // 8, dtype=torch.float64, device="cuda")
        target = torch.empty_like(source)
        amount = 2 * source.numel() * source.element_size()
        return Prepared((ours,), Side("copy_", timer(), lambda: target.copy_(source), amount))

    def fp16_vs_cupy() -> Prepared:
        operands = backend.gemm_operands(n, n, n, "fp16", "nn", seed=0)

        import cupy

        out = cupy.empty((n, n), dtype=cupy.float16)
        matmul = functools.partial(cupy.matmul, operands.x, operands.w, out=out)
        backend.matmul(operands)
        matmul()
        settle()
        check_same(operands.y.astype(cupy.float32), out.astype(cupy.float32), "cupy.matmul")
        ours = Side("cuBLAS gemmEx", backend.time_call, lambda: backend.matmul(operands), flops)
        return Prepared((ours,), Side("cupy.matmul", backend.time_call, matmul, flops))

    def ours_then(operands, label: str, amount: float) -> Side:
        """rooflab's GEMM run once (its output for check_same), as a Side."""
        backend.matmul(operands)
        settle()
        return Side(label, backend.time_call, lambda: backend.matmul(operands), amount)

    def fp8_vs_scaled_mm() -> Prepared:
        operands = backend.gemm_operands(n, n, n, "fp8_e4m3", "nt", seed=0)
        for name in ("_scaled_mm", "float8_e4m3fn"):
            if not hasattr(torch, name):
                raise Unavailable(f"PyTorch {torch.__version__} has no torch.{name}")
        ours = ours_then(operands, "cuBLASLt", flops)
        a = as_torch(torch, operands.x).view(torch.float8_e4m3fn)  # M×K, row-major
        b = as_torch(torch, operands.w).view(torch.float8_e4m3fn).t()  # K×N, column-major
        scale_a, scale_b = (
            torch.tensor(scale, dtype=torch.float32, device="cuda") for scale in operands.scales
        )

        def scaled_mm():
            # scale_a, scale_b by keyword: keyword-only in PyTorch's first _scaled_mm, which also
            # returned (out, amax); a tensor since.
            out = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
            return out[0] if isinstance(out, tuple) else out

        theirs = scaled_mm()
        settle()
        check_same(as_torch(torch, operands.y).float(), theirs.float(), "torch._scaled_mm")
        return Prepared((ours,), Side("_scaled_mm", timer(), scaled_mm, flops))

    def int8_vs_int_mm() -> Prepared:
        operands = backend.gemm_operands(n, n, n, "int8", "nt", seed=0)
        if not hasattr(torch, "_int_mm"):
            raise Unavailable(f"PyTorch {torch.__version__} has no torch._int_mm")
        ours = ours_then(operands, "cuBLASLt", flops)
        a, w = as_torch(torch, operands.x), as_torch(torch, operands.w)  # M×K, N×K
        b, label = w.t(), "_int_mm, b column-major"  # cuBLASLt's TN, as rooflab's
        try:
            theirs = torch._int_mm(a, b)
            settle()
        except RuntimeError as error:  # that layout refused: b row-major (K×N) instead
            b = w.t().contiguous()
            label = f"_int_mm, b row-major (column-major refused: {reason(error)})"
            theirs = torch._int_mm(a, b)
            settle()
        check_same(as_torch(torch, operands.y), theirs, "torch._int_mm", exact=True)
        return Prepared((ours,), Side(label, timer(), lambda: torch._int_mm(a, b), flops))

    def bf16_vs_matmul(operands, label: str) -> Prepared:
        ours = ours_then(operands, label, flops)
        x, w = as_torch(torch, operands.x), as_torch(torch, operands.w)
        w = w.t() if operands.layout == "nt" else w  # K×N either way
        out = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
        matmul = functools.partial(torch.matmul, x, w, out=out)
        matmul()
        settle()
        check_same(as_torch(torch, operands.y).float(), out.float(), "torch.matmul")
        return Prepared((ours,), Side("matmul", timer(), matmul, flops))

    def bf16_cublas() -> Prepared:
        return bf16_vs_matmul(backend.gemm_operands(n, n, n, "bf16", "nn", seed=0), "cuBLAS")

    def bf16_cublaslt() -> Prepared:
        variants = backend.library_variants("bf16")
        lt = [variant for variant in variants if variant.kernel == LT_KERNEL]
        if not lt:
            said = "; ".join(variant.description for variant in variants)
            raise Unavailable(f"rooflab times bf16 without cuBLASLt here ({said})")
        return bf16_vs_matmul(backend.library_operands(n, "bf16", lt[0]), "cuBLASLt")

    def linear_vs_torch() -> Prepared:
        m, n_out, k = LINEAR_SHAPE
        operands = backend.gemm_operands(m, n_out, k, "bf16", "nt", seed=0)
        amount = 2 * m * n_out * k * LINEAR_BATCH
        backend.matmul(operands)
        settle()
        x, w = as_torch(torch, operands.x), as_torch(torch, operands.w)  # 16×K, N×K

        def step():
            return torch.nn.functional.linear(x, w)

        theirs = step()
        settle()
        check_same(as_torch(torch, operands.y).float(), theirs.float(), "F.linear")

        def ours_batch() -> None:
            for _ in range(LINEAR_BATCH):
                backend.matmul(operands)

        batch, how = graphed(torch, step, LINEAR_BATCH)
        ours = Side(f"cuBLAS, {LINEAR_BATCH} calls", backend.time_call, ours_batch, amount)
        return Prepared((ours,), Side(f"F.linear, {how}", timer(), batch, amount))

    @functools.cache
    def host_loads():
        return backend.host_link_loads(mib * 2**20)

    @functools.cache
    def torch_host_buffers(nbytes: int):
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        host.fill_(1)  # its pages exist before anything is timed
        return host, torch.ones(nbytes, dtype=torch.uint8, device="cuda")

    def host_link(direction: str) -> Callable[[], Prepared]:
        def prepare() -> Prepared:
            ours = tuple(
                Side(
                    link.case.kernel,
                    link.timer or backend.time_call,
                    functools.partial(link.load.run, 1),
                    link.load.amount_per_unit,
                )
                for link in host_loads()
                if link.case.direction == direction and link.case.sets_ceiling
            )
            nbytes = int(ours[0].amount)
            host, device = torch_host_buffers(nbytes)
            target, source = (device, host) if direction == "h2d" else (host, device)
            copy = functools.partial(target.copy_, source, non_blocking=True)
            return Prepared(ours, Side("copy_", timer(), copy, nbytes))

        return prepare

    gemm_note = "same operands on both sides (through DLPack), outputs compared before timing"
    host_note = (
        "rooflab: the faster of its pinned methods (SM copy, cudaMemcpyAsync), as its ceiling "
        "takes it; reference: cudaMemcpyAsync through PyTorch (non_blocking)"
    )
    return [
        Comparison(
            f"HBM copy {gib:g} GiB", "B/s", "cudaMemcpyAsync D2D", TARGET, copy_vs_memcpy,
            note="read + write counted",
        ),
        Comparison(
            f"HBM copy {gib:g} GiB", "B/s", "torch dst.copy_(src)", TARGET, copy_vs_torch,
            needs_torch=True, note="read + write counted",
        ),
        Comparison(f"fp16 GEMM {n}^3", "FLOP/s", "cupy.matmul", TARGET, fp16_vs_cupy),
        Comparison(
            f"FP8 e4m3 GEMM {n}^3 (nt)", "FLOP/s", "torch._scaled_mm", TARGET, fp8_vs_scaled_mm,
            needs_torch=True,
            note="float32 per-tensor scales, bf16 out, no fast accumulation on either side; "
            "a M×K row-major, b K×N column-major; " + gemm_note,
        ),
        Comparison(
            f"int8 GEMM {n}^3 (nt)", "OP/s", "torch._int_mm", TARGET, int8_vs_int_mm,
            needs_torch=True, note="int32 out; " + gemm_note,
        ),
        Comparison(
            f"bf16 GEMM {n}^3 cuBLAS", "FLOP/s", "torch.matmul", TARGET, bf16_cublas,
            needs_torch=True, note=gemm_note,
        ),
        Comparison(
            f"bf16 GEMM {n}^3 cuBLASLt", "FLOP/s", "torch.matmul", TARGET, bf16_cublaslt,
            needs_torch=True, note=gemm_note,
        ),
        Comparison(
            "bf16 GEMM 16x4096x4096 (nt)", "FLOP/s", "torch F.linear", None, linear_vs_torch,
            needs_torch=True,
            note=f"weight reuse (M = 16), informational: {LINEAR_BATCH} calls per timed sample "
            "on both sides, W (32 MiB) re-read each call and may be served from the L2; "
            + gemm_note,
        ),
        Comparison(
            f"host link H2D {mib:g} MiB", "B/s", "torch copy_ from pinned", TARGET,
            host_link("h2d"), needs_torch=True, note=host_note,
        ),
        Comparison(
            f"host link D2H {mib:g} MiB", "B/s", "torch copy_ to pinned", TARGET,
            host_link("d2h"), needs_torch=True, note=host_note,
        ),
    ]  # fmt: skip
