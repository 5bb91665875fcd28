"""What the CUDA backend's kernels are, without a GPU: the sources shipped in src/rooflab/kernels,
their launch shapes (threads per block, FMAs per iteration, vectors per working set) and the
constants their data starts from. Pure: importable and tested without CuPy or a device."""

from __future__ import annotations

import re
from importlib import resources

import numpy as np

from rooflab.backends.base import BackendError

BLOCK = 256  # threads per block of every rooflab kernel
STREAM_ARRAYS = {"read": 1, "copy": 2, "triad": 3}
VECTOR_BYTES = 16  # one double2 per access
STREAM_INIT = 1.0  # positive data: the read kernel's sum can never equal its sentinel
READ_SENTINEL = -1.0

# (x, y) of acc = acc * x + y per dtype: the chain converges to y / (1 - x) = 1.
FMA_FP64 = (np.float64(0.999999), np.float64(1e-6))
FMA_FP32 = (np.float32(0.9999), np.float32(1e-4))
FMA_FP16 = (np.float16(1 - 2.0**-11), np.float16(2.0**-11), np.float16(1.0))


def kernel_source(name: str) -> str:
    """The text of src/rooflab/kernels/<name>.cu (shipped inside the wheel)."""
    return resources.files("rooflab").joinpath("kernels", f"{name}.cu").read_text()


def fma_kernel_shape() -> tuple[int, int]:
    """(chains, repeat) of kernels/fma.cu: FMAs per thread per iteration = chains x repeat."""
    source = kernel_source("fma")
    values = {}
    for name in ("ROOFLAB_CHAINS", "ROOFLAB_REPEAT"):
        match = re.search(rf"^#define {name} (\d+)$", source, flags=re.MULTILINE)
        if match is None:
            raise BackendError(f"kernels/fma.cu does not define {name}")
        values[name] = int(match.group(1))
    return values["ROOFLAB_CHAINS"], values["ROOFLAB_REPEAT"]


def fma_flops_per_iteration(dtype: str, threads: int) -> int:
    """FLOP of one iteration of fma_<dtype> over `threads` threads (an FMA is 2 FLOP)."""
    chains, repeat = fma_kernel_shape()
    lanes = {"fp64": 1, "fp32": 1, "fp16": 2}[dtype]  # fp16 runs half2: two lanes per FMA
    return 2 * chains * repeat * lanes * threads


def stream_vectors(kernel: str, working_set_bytes: int, threads: int) -> int:
    """16-byte vectors per array for a working set: a multiple of the launched threads (every
    thread the same share) when the set is that large, else of a warp (32); at least 32."""
    if kernel not in STREAM_ARRAYS:
        raise BackendError(f"unknown stream kernel {kernel!r}; known: {', '.join(STREAM_ARRAYS)}")
    vectors = working_set_bytes // (VECTOR_BYTES * STREAM_ARRAYS[kernel])
    unit = threads if vectors >= threads else 32
    return max(32, vectors // unit * unit)


def l1_vectors(working_set_bytes: int) -> int:
    """16-byte vectors of the L1 read's per-SM set: a multiple of the block (every thread the
    same share), at least one block's worth."""
    return max(BLOCK, working_set_bytes // VECTOR_BYTES // BLOCK * BLOCK)


def check_reps(reps: int) -> None:
    """Passes of one bandwidth-kernel call: the kernels count them in an int."""
    if not 1 <= reps < 2**31:
        raise BackendError(f"reps must be in [1, 2^31), got {reps}")


def pack_half2(value: np.float16) -> np.uint32:
    """Two copies of one fp16 value in a 32-bit word, as fma.rn.f16x2 reads them."""
    bits = int(np.float16(value).view(np.uint16))
    return np.uint32(bits | bits << 16)
