"""rooflab's GPU ceilings against the references a GPU engineer checks them with, same run.

    python benchmarks/gpu_ceilings_vs_references.py [--copy-gib 2] [--n 8192] [--samples 30]

- HBM: rooflab's copy kernel (16-byte vectors, past the L2 one launch per pass over the whole
  array: rooflab.backends.cuda_stream) against cudaMemcpyAsync
  device to device of the same bytes; both count read + write.
- fp16 tensor: rooflab's cublasGemmEx (fp32 accumulate) against cupy.matmul of float16, n³.
- bf16 tensor: rooflab's cublasGemmEx against torch.matmul of bfloat16 where PyTorch with CUDA is
  installed (else the row says so), n³.

Each side is the median of `--samples` CUDA-event-timed calls after a warm-up; the sides
alternate `--rounds` times and each keeps its best round. Target: rooflab >= 98 % of the
reference. Prints the GPU, its SM clock range over the run, and one line per comparison. Exit
status 1 if a target is missed, 2 if there is no usable GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable

from rooflab.backends.base import BackendError
from rooflab.backends.selection import select_backend

TARGET = 0.98


def median_seconds(time_call: Callable[[Callable], float], call: Callable, samples: int) -> float:
    import cupy

    # First call outside any timing: a library's first use (its handle, lazily loaded kernels)
    # may wait for the device, which inside rooflab's held stream would time the hold out.
    call()
    cupy.cuda.runtime.deviceSynchronize()
    for _ in range(3):  # warm-up: heuristics, first touch
        time_call(call)
    return statistics.median(time_call(call) for _ in range(samples))


def copy_rates(backend, gib: float, samples: int) -> tuple[float, float]:
    """(rooflab copy, cudaMemcpyAsync D2D) in B/s, read + write counted."""
    import cupy
    from cupy.cuda import runtime

    workload = backend.stream_workload("copy", int(gib * 2**30), backend.default_threads())
    moved = workload.amount_per_unit  # read + write of one pass
    source = cupy.ones(moved // 2 // 8, dtype=cupy.float64)
    target = cupy.empty_like(source)

    def memcpy() -> None:
        stream = cupy.cuda.get_current_stream().ptr  # time_call makes its stream current
        runtime.memcpyAsync(
            target.data.ptr, source.data.ptr, source.nbytes, runtime.memcpyDeviceToDevice, stream
        )

    ours = moved / median_seconds(backend.time_call, lambda: workload.run(1), samples)
    reference = 2 * source.nbytes / median_seconds(backend.time_call, memcpy, samples)
    return ours, reference


def cupy_fp16_rates(backend, n: int, samples: int) -> tuple[float, float]:
    import cupy

    operands = backend.gemm_operands(n, n, n, "fp16", "nn", seed=0)
    a, b = operands.x, operands.w  # the same inputs for both sides
    c = cupy.empty((n, n), dtype=cupy.float16)
    flops = 2 * n**3
    ours = flops / median_seconds(backend.time_call, lambda: backend.matmul(operands), samples)
    reference = flops / median_seconds(backend.time_call, lambda: cupy.matmul(a, b, out=c), samples)
    return ours, reference


def torch_bf16_rates(backend, n: int, samples: int) -> tuple[float, float] | str:
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return f"PyTorch {torch.__version__} sees no CUDA device"
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def torch_time(call: Callable) -> float:  # events on PyTorch's own stream
        start.record()
        call()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) * 1e-3

    operands = backend.gemm_operands(n, n, n, "bf16", "nn", seed=0)
    flops = 2 * n**3
    ours = flops / median_seconds(backend.time_call, lambda: backend.matmul(operands), samples)
    reference = flops / median_seconds(torch_time, lambda: torch.matmul(a, b, out=c), samples)
    return ours, reference


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/gpu_ceilings_vs_references.py")
    parser.add_argument("--copy-gib", type=float, default=2.0, help="bytes of the copy, GiB")
    parser.add_argument("--n", type=int, default=8192, help="GEMM size n (n x n x n)")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        backend = select_backend("cuda")
    except BackendError as error:
        print(f"no GPU benchmark: {error}", file=sys.stderr)
        return 2
    comparisons = {
        "HBM copy (B/s)": lambda: copy_rates(backend, args.copy_gib, args.samples),
        f"fp16 GEMM {args.n}^3 vs cupy.matmul (FLOP/s)": lambda: cupy_fp16_rates(
            backend, args.n, args.samples
        ),
        f"bf16 GEMM {args.n}^3 vs torch.matmul (FLOP/s)": lambda: torch_bf16_rates(
            backend, args.n, args.samples
        ),
    }
    best: dict[str, list[float] | str] = {}
    clocks = []
    for _ in range(args.rounds):
        for name, measure in comparisons.items():
            result = measure()
            clocks.append(backend.sample_clock_mhz())
            if isinstance(result, str):
                best[name] = result
                continue
            known = best.get(name, [0.0, 0.0])
            best[name] = [max(known[0], result[0]), max(known[1], result[1])]
    seen = [c for c in clocks if c]
    clock = f"SM clock {min(seen):.0f}-{max(seen):.0f} MHz" if seen else "SM clock not readable"
    print(f"{backend.device_name}; {clock}; best of {args.rounds} rounds")
    missed = False
    for name, value in best.items():
        if isinstance(value, str):
            print(f"{name:<44} skipped: {value}")
            continue
        ours, reference = value
        ratio = ours / reference
        missed |= ratio < TARGET
        print(
            f"{name:<44} rooflab {ours:.4g}  reference {reference:.4g}  ratio {ratio:.3f} "
            f"(target >= {TARGET})"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
