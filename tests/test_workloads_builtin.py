"""The built-in workloads on the CPU with small params: each runs and passes its own check, its
ledger is the one documented, the pairs compute the same result, the check can fail, and the
default campaign's entries import. Nothing is timed here."""

import shutil
import subprocess

import numpy as np
import pytest
import yaml

from rooflab.vocabulary import CACHE_STATES
from rooflab.workloads import Context, WorkloadError, check_error, checked, load_entry
from rooflab.workloads.builtin import (
    CUDA_SOURCE,
    DEFAULT_WORKLOADS,
    _cycle,
    blockdiag_blocks,
    blockdiag_dense,
    pointer_chase,
    relu_axpb_fused,
    relu_axpb_unfused,
)

FLOATS = ["float32", "float64"]


def context(dtype: str = "float32", seed: int = 0, backend: str = "cpu") -> Context:
    return Context(xp=np, dtype=np.dtype(dtype), rng=np.random.default_rng(seed), backend=backend)


def passes(workload, name: str = "case") -> float:
    """run() then check(): the error, asserted within tolerance."""
    checked(workload, name)
    workload.run()
    error = check_error(workload, name)
    assert 0 <= error <= workload.tolerance, (error, workload.tolerance)
    return error


# -- fusion ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", [1, 1000, 4099])
def test_relu_unfused_runs_and_checks(dtype, n):
    passes(relu_axpb_unfused({"n": n}, context(dtype)))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("n", "threads"), [(1, 1), (1000, 1), (4099, 2), (5, 2)])
def test_relu_fused_runs_and_checks(dtype, n, threads):
    passes(relu_axpb_fused({"n": n, "threads": threads}, context(dtype)))


@pytest.mark.parametrize(("dtype", "itemsize"), [("float32", 4), ("float64", 8)])
def test_relu_ledgers(dtype, itemsize):
    unfused = relu_axpb_unfused({"n": 1000}, context(dtype))
    fused = relu_axpb_fused({"n": 1000}, context(dtype))
    assert unfused.flops == fused.flops == 2000  # a multiply and an add per element (max: none)
    assert unfused.bytes == 6 * 1000 * itemsize  # three passes, each read + write
    assert fused.bytes == 2 * 1000 * itemsize  # read x, write y
    assert unfused.executed_flops is None and fused.executed_flops is None


@pytest.mark.parametrize("dtype", FLOATS)
def test_fused_and_unfused_give_the_same_y(dtype):
    # the same seed draws the same x, a and b; no contraction: the same roundings, the same bits
    y_unfused = relu_axpb_unfused({"n": 10_007}, context(dtype, seed=3)).run()
    y_fused = relu_axpb_fused({"n": 10_007, "threads": 2}, context(dtype, seed=3)).run()
    np.testing.assert_array_equal(y_fused, y_unfused)
    assert 0 < np.count_nonzero(y_fused) < y_fused.size  # both branches of the max are taken


@pytest.mark.parametrize("factory", [relu_axpb_unfused, relu_axpb_fused])
@pytest.mark.parametrize("dtype", FLOATS)
def test_a_corrupted_relu_output_fails_its_check(factory, dtype):
    workload = factory({"n": 1000}, context(dtype))
    y = workload.run()
    y[500] += np.finfo(np.dtype(dtype)).eps * 64 * max(1.0, abs(float(y[500])))
    assert check_error(workload, "case") > workload.tolerance
    workload.run()
    assert check_error(workload, "case") <= workload.tolerance  # run() rewrites all of y


def test_relu_refuses_what_it_cannot_measure():
    with pytest.raises(WorkloadError, match="dtype int64"):
        relu_axpb_unfused({"n": 10}, context("int64"))
    with pytest.raises(WorkloadError, match="'n' must be a positive integer"):
        relu_axpb_fused({"n": 0}, context())
    with pytest.raises(WorkloadError, match="'n' must be a positive integer"):
        relu_axpb_fused({}, context())
    with pytest.raises(WorkloadError, match="backend 'tpu'"):
        relu_axpb_fused({"n": 10}, context(backend="tpu"))
    with pytest.raises(WorkloadError, match="threads must be at most"):
        relu_axpb_fused({"n": 10, "threads": 10**6}, context())


# -- useful vs executed ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("factory", [blockdiag_dense, blockdiag_blocks])
def test_blockdiag_runs_and_checks(factory, dtype):
    passes(factory({"n": 96, "blocks": 3, "k": 5}, context(dtype)))


@pytest.mark.parametrize(("dtype", "itemsize"), [("float32", 4), ("float64", 8)])
def test_blockdiag_ledgers(dtype, itemsize):
    params = {"n": 64, "blocks": 4, "k": 8}
    dense = blockdiag_dense(params, context(dtype))
    blocks = blockdiag_blocks(params, context(dtype))
    useful = 2 * (64 * 64 // 4) * 8  # 16384: the blocks' multiply-adds
    assert dense.flops == blocks.flops == blocks.executed_flops == useful
    assert dense.executed_flops == 2 * 64 * 64 * 8 == 4 * useful  # `blocks` times the useful
    assert dense.bytes == (64 * 64 + 2 * 64 * 8) * itemsize  # dense A + X + Y
    assert blocks.bytes == (64 * 64 // 4 + 2 * 64 * 8) * itemsize  # blocks + X + Y


def test_blockdiag_k_defaults_to_64():
    workload = blockdiag_blocks({"n": 32, "blocks": 2}, context())
    assert workload.flops == 2 * (32 * 32 // 2) * 64
    assert workload.run().shape == (2, 16, 64)


@pytest.mark.parametrize("dtype", FLOATS)
def test_dense_and_block_results_are_equal(dtype):
    params = {"n": 128, "blocks": 8, "k": 16}
    dense = blockdiag_dense(params, context(dtype, seed=5))
    blocks = blockdiag_blocks(params, context(dtype, seed=5))
    y_dense, y_blocks = dense.run(), blocks.run().reshape(128, 16)
    # different BLAS calls sum in different orders: equal to within the rounding bound
    np.testing.assert_allclose(y_dense, y_blocks, rtol=0, atol=dense.tolerance * 16 * 4)
    assert np.abs(y_dense).max() > 1  # not trivially zero


@pytest.mark.parametrize("factory", [blockdiag_dense, blockdiag_blocks])
def test_a_corrupted_blockdiag_output_fails_its_check(factory):
    workload = factory({"n": 64, "blocks": 4, "k": 8}, context())
    y = workload.run()
    y.reshape(64, 8)[63, 7] *= 1.001  # the last element of the last block
    assert check_error(workload, "case") > workload.tolerance


def test_blockdiag_refuses_blocks_that_do_not_divide_n():
    with pytest.raises(WorkloadError, match=r"n \(100\) must be a multiple of blocks \(3\)"):
        blockdiag_dense({"n": 100, "blocks": 3}, context())


# -- pointer chase -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 1000])
def test_the_cycle_is_a_single_cycle_over_all_n(n):
    order = np.random.default_rng(n).permutation(n)
    next_index = _cycle(order)
    i, seen = int(order[0]), []
    for _ in range(n):
        i = int(next_index[i])
        seen.append(i)
    assert i == order[0]  # back at the start after exactly n hops
    assert sorted(seen) == list(range(n))  # and every index visited once on the way


@pytest.mark.parametrize("dtype", ["float64", "int64"])
@pytest.mark.parametrize(("n", "steps"), [(2, 1), (1000, 1), (1000, 999), (1000, 5000), (7, 3)])
def test_pointer_chase_runs_and_checks(dtype, n, steps):
    assert passes(pointer_chase({"n": n, "steps": steps}, context(dtype))) == 0.0


def test_pointer_chase_walks_the_whole_cycle():
    # n hops return to the start, having added every index once: n(n-1)/2
    workload = pointer_chase({"n": 1000, "steps": 1000}, context("float64"))
    final, checksum = workload.run()
    again, _ = pointer_chase({"n": 1000, "steps": 2000}, context("float64")).run()
    assert int(final[0]) == int(again[0])
    assert float(checksum[0]) == 1000 * 999 / 2
    passes(workload)


def test_pointer_chase_ledger():
    workload = pointer_chase({"n": 1000, "steps": 5000}, context("float64"))
    assert workload.flops == 5000  # one checksum add per hop
    assert workload.bytes == 5000 * 8  # one useful 8-byte index per hop
    assert workload.executed_flops is None
    # it touches the whole cycle (n indices) and its two results, whatever its traffic
    assert workload.footprint == 1000 * 8 + 16
    small = pointer_chase({"n": 1000, "steps": 5}, context("float64"))
    assert small.footprint == workload.footprint and small.bytes == 40


def test_a_corrupted_pointer_chase_fails_its_check():
    workload = pointer_chase({"n": 1000, "steps": 5000}, context("float64"))
    final, checksum = workload.run()
    checksum[0] += 1  # the smallest wrong checksum
    assert check_error(workload, "case") > workload.tolerance
    workload.run()
    final[0] = (final[0] + 1) % 1000
    assert check_error(workload, "case") == 1.0


def test_pointer_chase_refuses_what_it_cannot_measure():
    with pytest.raises(WorkloadError, match="dtype float32"):
        pointer_chase({"n": 10, "steps": 10}, context("float32"))
    with pytest.raises(WorkloadError, match="at least 2"):
        pointer_chase({"n": 1, "steps": 10}, context("float64"))
    with pytest.raises(WorkloadError, match="2\\^53"):
        pointer_chase({"n": 2**20, "steps": 2**34}, context("float64"))


# -- the default campaign ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DEFAULT_WORKLOADS))
def test_default_workloads_import_and_pair(name):
    spec = DEFAULT_WORKLOADS[name]
    assert callable(load_entry(spec["entry"], name))
    assert set(spec["cache_states"]) <= {state.value for state in CACHE_STATES}
    partner = spec.get("same_work_as")
    if partner is not None:
        assert partner in DEFAULT_WORKLOADS and partner != name
        assert DEFAULT_WORKLOADS[partner]["params"] == spec["params"]  # the same work
        assert DEFAULT_WORKLOADS[partner]["dtypes"] == spec["dtypes"]


def test_default_workloads_are_plain_config():
    text = yaml.safe_dump(DEFAULT_WORKLOADS)
    assert yaml.safe_load(text) == DEFAULT_WORKLOADS
    assert "&" not in text  # no list shared between entries, so no YAML anchors
    assert {spec.get("same_work_as") for spec in DEFAULT_WORKLOADS.values()} - {None} == {
        "relu_axpb_unfused",
        "blockdiag_dense",
    }


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_cuda_source_compiles(tmp_path):
    # the kernels the cuda backend would compile with NVRTC, checked as C++ for sm_90
    source = tmp_path / "builtin.cu"
    source.write_text(CUDA_SOURCE)
    command = ["nvcc", "-std=c++17", "-arch=sm_90", "-cubin", "-Werror", "all-warnings"]
    result = subprocess.run(
        [*command, "-o", str(tmp_path / "builtin.cubin"), str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
