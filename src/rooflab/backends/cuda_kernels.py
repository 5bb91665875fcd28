"""What the CUDA backend's kernels are, without a GPU: the sources shipped in src/rooflab/kernels,
their launch shapes (threads per block, FMAs per iteration, vectors per working set, which form of
a bandwidth kernel runs), their byte ledgers and the constants their data starts from. Pure:
importable and tested without CuPy or a device."""

from __future__ import annotations

import re
from dataclasses import dataclass
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


def stream_pass_bytes(kernel: str, vectors: int) -> int:
    """Bytes of one pass of a stream kernel over `vectors` per array, by STREAM's convention
    (read 16, copy 32, triad 48 B per vector): both kernel forms count the same."""
    return vectors * VECTOR_BYTES * STREAM_ARRAYS[kernel]


# Working sets of at least this many times the L2 run one pass per launch. That is where the
# memory plateau begins at the earliest (CudaBackend.memory_sweep_from: MEMORY_ABOVE x the L2),
# so every point that can set the HBM ceiling runs this form, which moves HBM as fast as
# cudaMemcpy; the resident grid's passes do not. Below it, where the L2 holds most of the set, a
# launch per pass would cost a few us against passes of a few us, so those keep in-kernel passes.
# A pass here is also long next to the host's few us to launch one (an H200's 4 x 60 MiB read at
# 4.8 TB/s: 52 us), so the host stays ahead of the device once a held stream is let go
# (CudaBackend.launch_passes).
ONE_PASS_ABOVE_L2 = 4


def one_pass_per_launch(
    working_set_bytes: int, l2_bytes: int, threads: int, resident_threads: int
) -> bool:
    """Whether read, copy and triad run one pass per launch (stream_<kernel>_one_pass, a grid
    over the whole array) rather than in-kernel passes over a resident grid: for working sets of
    ONE_PASS_ABOVE_L2 x the L2 and more, when the threads asked for are every thread the SMs hold
    (fewer asked for: the resident grid, which honours them)."""
    return working_set_bytes >= ONE_PASS_ABOVE_L2 * l2_bytes and threads >= resident_threads


MAX_GRID_BLOCKS = 2**31 - 1  # gridDim.x


def one_pass_vectors(kernel: str, working_set_bytes: int) -> int:
    """16-byte vectors per array of a one-pass launch: whole warps (the grid's last block may be
    part full), at least one."""
    return stream_vectors(kernel, working_set_bytes, 32)


def one_pass_blocks(vectors: int) -> int:
    """Blocks of a one-pass launch: one thread per vector, ceil(vectors / BLOCK)."""
    blocks = -(-vectors // BLOCK)
    if blocks > MAX_GRID_BLOCKS:
        raise BackendError(
            f"{vectors} vectors need {blocks} blocks of {BLOCK}, more than a grid holds "
            f"({MAX_GRID_BLOCKS})"
        )
    return blocks


def stream_function(kernel: str, one_pass: bool) -> str:
    """The name in kernels/stream.cu of `kernel` (read, copy, triad) in one of its two forms."""
    return f"stream_{kernel}_one_pass" if one_pass else f"stream_{kernel}"


STREAM_FUNCTIONS = (
    *(stream_function(kernel, one_pass) for one_pass in (False, True) for kernel in STREAM_ARRAYS),
    "l1_read",
)


def stream_forms_note(l2_bytes: int) -> str:
    """Which form of read, copy and triad ran at which working set, for runs.machine."""
    return (
        f"working sets >= {ONE_PASS_ABOVE_L2 * l2_bytes} B ({ONE_PASS_ABOVE_L2}x the L2), when "
        "every resident thread is asked for: stream_<kernel>_one_pass, one 16-byte vector per "
        "thread and a grid over the whole array, launched once per pass; smaller sets: "
        "stream_<kernel>, grid-stride loops over a resident grid, every pass in one launch"
    )


@dataclass(frozen=True)
class L1Plan:
    """How the L1 read covers a per-SM working set: each block reads a region of its own, and
    an SM's L1 must hold the regions of every block resident on it."""

    blocks_per_sm: int  # the most blocks of the grid (one wave) that one SM holds
    region_vectors: int  # 16-byte vectors of each block's region
    working_set_bytes: int  # what one SM's L1 must hold: its blocks' regions
    bytes_per_pass: int  # what the SMs' L1 serve in one pass: every block reads its region


def l1_plan(working_set_bytes: int, grid: int, sm_count: int) -> L1Plan:
    """The per-SM set shared out among the blocks one SM holds, each region whole warps (at
    least one). Warps, not blocks: a block is 4 KiB of vectors, and whole blocks would step the
    per-SM set by blocks per SM x 4 KiB (32 KiB on sm_90), too coarse around the L1's capacity."""
    blocks_per_sm = -(-grid // sm_count)
    vectors = max(32, working_set_bytes // VECTOR_BYTES // blocks_per_sm // 32 * 32)
    return L1Plan(
        blocks_per_sm=blocks_per_sm,
        region_vectors=vectors,
        working_set_bytes=blocks_per_sm * vectors * VECTOR_BYTES,
        bytes_per_pass=grid * vectors * VECTOR_BYTES,
    )


def check_reps(reps: int) -> None:
    """Passes of one bandwidth-kernel call: the kernels count them in an int."""
    if not 1 <= reps < 2**31:
        raise BackendError(f"reps must be in [1, 2^31), got {reps}")


def pack_half2(value: np.float16) -> np.uint32:
    """Two copies of one fp16 value in a 32-bit word, as fma.rn.f16x2 reads them."""
    bits = int(np.float16(value).view(np.uint16))
    return np.uint32(bits | bits << 16)
