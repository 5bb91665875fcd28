"""Which form of the CUDA bandwidth kernels runs at which working set, how the L1 read shares a
per-SM set out among its blocks, the bytes each counts, and the loads the CUDA backend builds
from them, launched against the kernels' signatures in stream.cu: without CuPy or a GPU."""

import contextlib
import ctypes
import re

import numpy as np
import pytest

from rooflab.backends.base import BackendError
from rooflab.backends.cuda import HELD_LAUNCHES, CudaBackend
from rooflab.backends.cuda_kernels import (
    BLOCK,
    MAX_GRID_BLOCKS,
    ONE_PASS_ABOVE_L2,
    STREAM_ARRAYS,
    STREAM_FUNCTIONS,
    kernel_source,
    l1_plan,
    one_pass_blocks,
    one_pass_per_launch,
    one_pass_vectors,
    stream_forms_note,
    stream_pass_bytes,
    stream_vectors,
)
from rooflab.experiments.cache_edges import MEMORY_ABOVE, level_windows
from rooflab.experiments.ceiling_plan import plateaus, working_set_sizes

KiB, MiB = 1 << 10, 1 << 20
H200_L2 = 60 * MiB  # cudaDevAttrL2CacheSize on the H200 of docs/measurements
H200_SMS = 132
RESIDENT = H200_SMS * 2048  # threads the SMs hold at once (sm_90)

# -- which form --------------------------------------------------------------------------------


def test_one_pass_from_four_times_the_l2_when_every_resident_thread_is_asked_for():
    threshold = ONE_PASS_ABOVE_L2 * H200_L2
    assert one_pass_per_launch(threshold, H200_L2, RESIDENT, RESIDENT)
    assert one_pass_per_launch(2 << 30, H200_L2, RESIDENT, RESIDENT)
    assert not one_pass_per_launch(threshold - 1, H200_L2, RESIDENT, RESIDENT)
    assert not one_pass_per_launch(H200_L2 // 2, H200_L2, RESIDENT, RESIDENT)
    # fewer threads asked for: the resident grid, which runs only those
    assert not one_pass_per_launch(2 << 30, H200_L2, RESIDENT // 2, RESIDENT)


def test_every_point_of_the_memory_plateau_runs_one_pass_and_no_point_of_the_l2s():
    """The threshold is where the sweep's memory plateau begins: every point that can set the
    HBM ceiling runs the one-pass form, every point that can set the L2 ceiling the resident
    grid."""
    assert ONE_PASS_ABOVE_L2 == MEMORY_ABOVE
    sizes = working_set_sizes(1 * MiB, 8 * H200_L2, 8)
    # as the reported L2 places them, and as a sweep finds them, whatever L2 edge it shows
    # (CudaBackend.memory_sweep_from: the HBM plateau never starts below the threshold)
    found, edges = [], (20 * MiB, 40 * MiB, H200_L2)
    for edge in edges:
        rates = {size: 7.0 if size <= edge else 3.0 for size in sizes}
        windows, _ = level_windows(
            rates, {"L2": H200_L2}, "HBM", 8 * H200_L2, ONE_PASS_ABOVE_L2 * H200_L2
        )
        found.append(windows)
    for windows in [plateaus({"L2": H200_L2}, 8 * H200_L2, "HBM"), *found]:
        for size in sizes:
            one_pass = one_pass_per_launch(size, H200_L2, RESIDENT, RESIDENT)
            lo, hi = windows["HBM"]
            if lo <= size <= hi:
                assert one_pass, size
            if windows["L2"][0] <= size <= windows["L2"][1]:
                assert not one_pass, size
    # each edge found: the last point at or below the fall
    assert all(
        edge / 2 ** (1 / 8) <= w["L2"][1] <= edge for edge, w in zip(edges, found, strict=True)
    )


def test_the_forms_are_named_in_the_kernel_file_and_in_runs_machine():
    assert STREAM_FUNCTIONS == (
        "stream_read",
        "stream_copy",
        "stream_triad",
        "stream_read_one_pass",
        "stream_copy_one_pass",
        "stream_triad_one_pass",
        "l1_read",
    )
    note = stream_forms_note(H200_L2)
    assert f">= {4 * H200_L2} B (4x the L2)" in note
    assert "stream_<kernel>_one_pass" in note and "resident grid" in note


# -- the one-pass launch ------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", list(STREAM_ARRAYS))
def test_one_pass_vectors_are_whole_warps_within_the_set(kernel):
    per_vector = 16 * STREAM_ARRAYS[kernel]
    for working_set in (4 * H200_L2, 4 * H200_L2 + 100_000, 6 << 30, 6 * 10**9):
        n = one_pass_vectors(kernel, working_set)
        assert n % 32 == 0
        assert working_set - 32 * per_vector < n * per_vector <= working_set
    assert one_pass_vectors(kernel, 16) == 32  # never empty


def test_one_pass_grid_covers_every_vector_once_with_a_part_full_last_block():
    assert one_pass_blocks(BLOCK) == 1
    assert one_pass_blocks(BLOCK + 32) == 2  # the last block's threads past n do nothing
    n = one_pass_vectors("copy", 2 * (2 << 30))  # 2 GiB per array
    assert n == 2**27 and one_pass_blocks(n) == 2**27 // BLOCK
    n = one_pass_vectors("triad", 4 * H200_L2 + 3 * 16 * 32 * 5)  # not whole blocks
    assert n % BLOCK != 0 and (one_pass_blocks(n) - 1) * BLOCK < n < one_pass_blocks(n) * BLOCK


def test_one_pass_grid_stays_within_what_a_launch_takes():
    assert one_pass_blocks(MAX_GRID_BLOCKS * BLOCK) == 2**31 - 1
    with pytest.raises(BackendError, match="more than a grid holds"):
        one_pass_blocks(MAX_GRID_BLOCKS * BLOCK + 1)


# -- the ledger -----------------------------------------------------------------------------------


def test_stream_bytes_per_pass_follow_stream_and_do_not_depend_on_the_form():
    assert [stream_pass_bytes(k, 1000) for k in ("read", "copy", "triad")] == [
        16_000,
        32_000,
        48_000,
    ]
    for kernel in STREAM_ARRAYS:
        working_set = 6 * H200_L2
        resident = stream_pass_bytes(kernel, stream_vectors(kernel, working_set, RESIDENT))
        one_pass = stream_pass_bytes(kernel, one_pass_vectors(kernel, working_set))
        # both near the working set asked for, the one-pass form nearer (whole warps)
        assert working_set - 16 * STREAM_ARRAYS[kernel] * RESIDENT < resident <= one_pass
        assert one_pass <= working_set


# -- the L1 read ----------------------------------------------------------------------------------


def test_l1_plan_shares_the_per_sm_set_among_the_blocks_one_sm_holds():
    grid = H200_SMS * 8  # 8 resident blocks of 256 threads per SM
    plan = l1_plan(64 * KiB, grid, H200_SMS)
    assert plan.blocks_per_sm == 8
    assert plan.region_vectors == 64 * KiB // 16 // 8 == 512
    assert plan.working_set_bytes == 64 * KiB  # what one SM's L1 holds: its 8 regions
    assert plan.bytes_per_pass == grid * 512 * 16  # every block reads its own region once


def test_l1_plan_with_fewer_blocks_than_the_sms_hold():
    plan = l1_plan(64 * KiB, 200, H200_SMS)  # some SMs get 2 blocks, the rest 1
    assert plan.blocks_per_sm == 2
    assert plan.working_set_bytes == 64 * KiB and plan.bytes_per_pass == 200 * 2048 * 16
    assert l1_plan(64 * KiB, 100, H200_SMS).blocks_per_sm == 1


def test_l1_regions_are_whole_warps_within_the_set_and_at_least_one():
    grid = H200_SMS * 8
    for working_set in (4 * KiB, 4 * KiB + 16, 100_000, 233_472, 4 * 233_472):
        plan = l1_plan(working_set, grid, H200_SMS)
        assert plan.region_vectors % 32 == 0
        assert working_set - 8 * 32 * 16 < plan.working_set_bytes <= working_set
    assert l1_plan(16, grid, H200_SMS).region_vectors == 32


def test_l1_sweep_sizes_stay_distinct_from_the_plateau_to_four_times_the_l1():
    """The per-SM sets the sweep asks for (4 per octave) from 32 KiB, where the plateau lies, to
    4x the L1 give as many distinct working sets: regions of whole warps step an SM's set by
    4 KiB (8 blocks x 512 B); regions of whole blocks would step it by 32 KiB."""
    grid = H200_SMS * 8
    sizes = working_set_sizes(32 * KiB, 4 * 228 * KiB, 4)
    got = [l1_plan(size, grid, H200_SMS).working_set_bytes for size in sizes]
    assert len(set(got)) == len(sizes) and got == sorted(got)


# -- the loads, launched on a stand-in for CuPy ---------------------------------------------------

# What each parameter type of kernels/stream.cu is given from Python (as CuPy passes it).
ARGUMENT_TYPES = {
    "const double2*": np.ndarray,
    "double2*": np.ndarray,
    "double*": np.ndarray,
    "unsigned long long": np.uint64,
    "int": np.int32,
    "double": np.float64,
}


def _signatures() -> dict[str, list[str]]:
    """Parameter types of every kernel of stream.cu, from its source."""
    found = re.findall(r'extern "C" __global__ void (\w+)\(([^)]*)\)', kernel_source("stream"))
    return {name: [" ".join(p.split()[:-1]) for p in params.split(",")] for name, params in found}


class _Kernel:
    """A kernel of stream.cu that checks its arguments against the source and records the
    launch, with the stream's hold flag as it was."""

    def __init__(self, name: str, parameters: list[str], backend):
        self.name, self.parameters, self.backend = name, parameters, backend

    def __call__(self, grid, block, args):
        assert block == (BLOCK,)
        assert len(args) == len(self.parameters), self.name
        for value, parameter in zip(args, self.parameters, strict=True):
            assert type(value) is ARGUMENT_TYPES[parameter], (self.name, parameter, value)
        self.backend.launches.append((self.name, grid[0], args, self.backend._release.value))


def _backend(sm_count: int = 4, blocks_per_sm: int = 8, l2_bytes: int = 1 * MiB):
    """A CudaBackend over numpy: its stream loads and launch_passes as they are, the kernels
    replaced by _Kernel."""
    backend = CudaBackend.__new__(CudaBackend)
    backend._cp = np
    backend._stream = contextlib.nullcontext()
    backend._release = ctypes.c_int32(1)
    backend.sm_count, backend.l2_bytes = sm_count, l2_bytes
    backend.max_threads_per_sm = blocks_per_sm * BLOCK
    backend.launches = []
    backend._kernels = {
        name: _Kernel(name, parameters, backend) for name, parameters in _signatures().items()
    }
    backend._grid = lambda kernel, threads: min(sm_count * blocks_per_sm, -(-threads // BLOCK))
    return backend


def test_every_stream_kernel_is_known_to_the_backend():
    assert set(_signatures()) == set(STREAM_FUNCTIONS)


@pytest.mark.parametrize("kernel", list(STREAM_ARRAYS))
def test_a_set_in_the_l2_runs_every_pass_in_one_launch(kernel):
    backend = _backend()
    load = backend.stream_workload(kernel, 256 * KiB, backend.default_threads())
    backend.launches.clear()
    load.run(7)
    ((name, grid, args, _),) = backend.launches
    n = int(args[STREAM_ARRAYS[kernel]])
    assert name == f"stream_{kernel}" and grid == 32 and load.threads == 32 * BLOCK
    assert int(args[STREAM_ARRAYS[kernel] + 1]) == 7  # reps
    assert all(a.size == 2 * n for a in args[: STREAM_ARRAYS[kernel]])
    assert load.amount_per_unit == stream_pass_bytes(kernel, n)


@pytest.mark.parametrize("kernel", list(STREAM_ARRAYS))
def test_a_set_past_the_l2_launches_a_grid_over_the_array_once_per_pass(kernel):
    backend = _backend()
    load = backend.stream_workload(kernel, 4 * MiB + 3 * 16 * 32, backend.default_threads())
    backend.launches.clear()
    load.run(3)
    assert [name for name, *_ in backend.launches] == [f"stream_{kernel}_one_pass"] * 3
    _, grid, args, _ = backend.launches[0]
    n = int(args[STREAM_ARRAYS[kernel]])
    assert (grid - 1) * BLOCK < n <= grid * BLOCK and load.threads == grid * BLOCK
    assert all(a.size == 2 * n for a in args[: STREAM_ARRAYS[kernel]])
    assert load.amount_per_unit == stream_pass_bytes(kernel, n)
    if kernel == "triad":  # s changes from pass to pass, as in the resident form
        assert len({float(args[-1]) for *_, args, _ in backend.launches}) == 3


def test_fewer_threads_than_the_sms_hold_keep_the_resident_grid_past_the_l2():
    backend = _backend()
    load = backend.stream_workload("copy", 16 * MiB, 2 * BLOCK)
    backend.launches.clear()
    load.run(2)
    ((name, grid, _, _),) = backend.launches
    assert name == "stream_copy" and grid == 2


def test_a_held_stream_is_let_go_after_held_launches():
    backend = _backend()
    load = backend.stream_workload("read", 4 * MiB, backend.default_threads())
    backend.launches.clear()
    backend._release.value = 0  # as time_call holds the stream
    load.run(HELD_LAUNCHES + 10)
    held = [release for *_, release in backend.launches]
    assert held == [0] * HELD_LAUNCHES + [1] * 10


def test_the_l1_read_gives_each_block_a_region_of_the_per_sm_set():
    backend = _backend(sm_count=4, blocks_per_sm=8)
    load = backend.local_cache_workload(64 * KiB, backend.default_threads())
    backend.launches.clear()
    load.run(5)
    ((name, grid, args, _),) = backend.launches
    array, n, reps = args[0], int(args[1]), int(args[2])
    assert name == "l1_read" and grid == 32 and reps == 5
    assert n == 64 * KiB // 16 // 8
    assert array.size == 2 * n * grid  # a region per block, none shared
    assert load.working_set_bytes == 64 * KiB and load.amount_per_unit == grid * n * 16


def test_the_warm_up_launches_every_kernel_of_stream_cu():
    """Each kernel loaded before any sample: one loaded lazily inside a held stream would time
    the hold out."""
    backend = _backend()
    backend.warm_stream_kernels()
    assert {name for name, *_ in backend.launches} == set(STREAM_FUNCTIONS)
