"""rooflab's GPU ceilings against the references a GPU engineer checks them with, same process.

    python benchmarks/gpu_ceilings_vs_references.py [--copy-gib 2] [--n 8192] [--host-mib 512]
        [--samples 30] [--rounds 3] [--json PATH]

One row per comparison, rooflab's rate over its reference's (ratio = rooflab / reference):

- HBM copy: rooflab's copy kernel (16-byte vectors, past the L2 one launch per pass over the whole
  array: rooflab.backends.cuda_stream) against cudaMemcpyAsync device to device of the same bytes,
  and against PyTorch's `dst.copy_(src)` of the same bytes; read + write counted (B/s).
- fp16 n³: rooflab's cublasGemmEx (fp32 accumulate) against cupy.matmul (FLOP/s).
- FP8 e4m3 n³: rooflab's cuBLASLt GEMM (layout nt, float32 per-tensor scales, bf16 out) against
  `torch._scaled_mm` of the same operands: a M×K row-major, b K×N column-major (FLOP/s).
- int8 n³: rooflab's cuBLASLt GEMM (nt, int32 out) against `torch._int_mm` (OP/s).
- bf16 n³: rooflab's cublasGemmEx, and its cuBLASLt GEMM (its own row), against torch.matmul.
- bf16 M = 16, N = K = 4096 (weight reuse, layout nt): rooflab's cublasGemmEx against
  `torch.nn.functional.linear`; a call takes ~10 µs, so a timed sample is a batch of calls
  (PyTorch's as one CUDA graph replay); informational, no target.
- host link H2D and D2H, `--host-mib` of pinned memory: rooflab's host-link ceiling (the faster of
  its pinned SM copy and cudaMemcpyAsync, as its ceiling takes it) against PyTorch's `copy_`
  between a pinned host tensor and a device tensor, non_blocking (cudaMemcpyAsync).

The GEMMs share their inputs (PyTorch gets rooflab's operands through DLPack) and both outputs are
compared once before anything is timed. Each side is the median of `--samples` CUDA-event-timed
calls after a warm-up (rooflab's and CuPy's on rooflab's held stream, PyTorch's on its own stream
with its own events, one untimed call queued ahead); the sides alternate `--rounds` times and each
keeps its best round. Target: rooflab >= 98 % of the reference, except the M = 16 row. A peer that
is unavailable (no PyTorch, no CUDA in PyTorch, no torch._scaled_mm, rooflab's cuBLASLt without
nvmath-python) gives a row "skipped: <why>". Prints the GPU, its SM clock range over the run and
one line per row; `--json PATH` also writes them (and the versions) as one JSON object, atomically.
Exit status 1 if a target is missed, 2 if there is no usable GPU. The rows and the JSON are
gpu_references_rows (pure), the calls gpu_references_peers.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_references_peers import TIMING, comparisons, rate, torch_status, versions
from gpu_references_rows import (
    any_missed,
    clock_range,
    clock_text,
    document,
    format_row,
    run_comparisons,
)
from smoke import add_smoke, verdict

from rooflab.backends.base import BackendError
from rooflab.backends.selection import select_backend
from rooflab.workflow import write_json_atomic


def positive(kind):
    def parse(text: str):
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/gpu_ceilings_vs_references.py")
    parser.add_argument("--copy-gib", type=positive(float), default=2.0, help="HBM copy, GiB")
    parser.add_argument("--n", type=positive(int), default=8192, help="GEMM size n (n x n x n)")
    parser.add_argument("--host-mib", type=positive(int), default=512, help="host link, MiB")
    parser.add_argument("--samples", type=positive(int), default=30)
    parser.add_argument("--rounds", type=positive(int), default=3)
    parser.add_argument("--json", type=Path, default=None, help="write the rows there too")
    add_smoke(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.copy_gib, args.n, args.host_mib, args.samples, args.rounds = 0.0625, 512, 16, 3, 1
    try:
        backend = select_backend("cuda")
    except BackendError as error:
        print("no GPU benchmark: " + " ".join(str(error).split()), file=sys.stderr)
        return 0 if args.smoke else 2  # a smoke run without a GPU: nothing to run, said
    torch, torch_text = torch_status()
    settings = {"n": args.n, "copy_gib": args.copy_gib, "host_mib": args.host_mib}
    clocks: list[float | None] = []
    rows = run_comparisons(
        comparisons(backend, torch, settings),
        args.rounds,
        lambda side: rate(side, args.samples),
        torch_missing=None if torch is not None else torch_text,
        after_each=lambda: clocks.append(backend.sample_clock_mhz()),
    )
    clock = clock_range(clocks)
    print(
        f"{backend.device_name}; {clock_text(clock)}; best of {args.rounds} rounds of "
        f"{args.samples} samples per side; {torch_text}"
    )
    for row in rows:
        print(format_row(row))
    if args.json is not None:
        data = document(
            device=backend.device_name,
            date_utc=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            clock=clock,
            versions=versions(torch, torch_text),
            rounds=args.rounds,
            samples=args.samples,
            settings=settings,
            timing=TIMING,
            rows=rows,
        )
        print(f"wrote {write_json_atomic(args.json, data)}")
    return verdict(not any_missed(rows), args.smoke)


if __name__ == "__main__":
    sys.exit(main())
