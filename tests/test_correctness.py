import math

import numpy as np
import pytest

from rooflab.backends.bfloat16 import bf16_bits_to_float32, float32_to_bf16_bits
from rooflab.experiments.correctness import UNIT_ROUNDOFF, _sample, check_gemm, tolerances


def test_tolerance_formula():
    u = 2.0**-24
    assert tolerances("fp32", 1024) == {
        "rel_frobenius": u * (2 + 4 * 32),
        "max_componentwise": u * 1026,
    }
    assert tolerances("fp64", 1)["rel_frobenius"] == pytest.approx(6 * 2.0**-53)
    for dtype in UNIT_ROUNDOFF:
        small, large = tolerances(dtype, 64), tolerances(dtype, 65536)
        assert all(large[key] > small[key] for key in small)
    assert tolerances("bf16", 4096)["rel_frobenius"] > tolerances("fp32", 4096)["rel_frobenius"]


def _operands(m, n, k, dtype, layout="nn", seed=1):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 1, (m, k)) * rng.choice([-1, 1], (m, k))
    w = rng.uniform(0.5, 1, (k, n) if layout == "nn" else (n, k))
    return x.astype(dtype), w.astype(dtype)


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize(("dtype", "np_dtype"), [("fp32", np.float32), ("fp64", np.float64)])
def test_blas_result_passes(layout, dtype, np_dtype):
    x, w = _operands(37, 29, 300, np_dtype, layout)
    y = x @ (w if layout == "nn" else w.T)
    checks, rows, cols = check_gemm(x, w, y, layout, dtype)
    assert all(c.passed for c in checks), checks
    assert (rows, cols) == (37, 29)


def test_fp32_result_fails_the_fp64_tolerance():
    x, w = _operands(16, 16, 512, np.float64)
    y = (x.astype(np.float32) @ w.astype(np.float32)).astype(np.float64)
    checks, _, _ = check_gemm(x, w, y, "nn", "fp64")
    assert not next(c for c in checks if c.metric == "rel_frobenius").passed


def test_unwritten_element_fails_even_outside_the_sampled_rows():
    x, w = _operands(600, 8, 16, np.float32)
    y = np.full((600, 8), np.nan, dtype=np.float32)
    y[:-1] = x[:-1] @ w  # the last row is never written
    y[:] = np.where(np.arange(600)[:, None] == 300, np.nan, y)  # nor row 300
    checks, rows, _ = check_gemm(x, w, y, "nn", "fp32")
    finite = checks[0]
    assert finite.metric == "finite" and not finite.passed
    assert finite.error == 16 and "16 of 4800" in finite.detail
    assert finite.tolerance == 0.0  # not one NaN or Inf element is allowed
    assert rows == 256  # sampled, and the failure still caught


def test_sampled_rows_are_distinct_sorted_and_keep_the_last():
    for seed in range(20):
        rows = _sample(600, 256, np.random.default_rng(seed))
        assert len(set(rows.tolist())) == 256 and rows[-1] == 599
        assert (np.diff(rows) > 0).all()
    assert _sample(200, 256, np.random.default_rng(0)).tolist() == list(range(200))


def test_one_wrong_element_in_a_large_output_fails_componentwise():
    x, w = _operands(256, 256, 64, np.float64)
    y = x @ w
    y[255, 255] += 0.01 * abs(y[255, 255]) + 1e-3
    checks, _, _ = check_gemm(x, w, y, "nn", "fp64")
    by_metric = {c.metric: c for c in checks}
    assert not by_metric["max_componentwise"].passed


def test_inf_never_passes():
    x, w = _operands(4, 4, 4, np.float64)
    y = x @ w
    y[0, 0] = math.inf
    checks, _, _ = check_gemm(x, w, y, "nn", "fp64")
    assert not checks[0].passed


# The tensor-core paths (tf32, fp16, bf16) run only on a GPU; their tolerances are judged here on
# GEMMs emulated on the host with the same roundings: operands as stored, products summed in
# fp32, the result rounded to the output dtype. Each must pass its own tolerance, and a result
# with coarser rounding than its dtype allows (the bug each tolerance is there to catch) must fail.


def _fp32_sum(x, w):
    return x.astype(np.float32) @ w.astype(np.float32)  # fp32 accumulation


def _round_mantissa(values, bits):
    """float32 values rounded (half up) to `bits` explicit mantissa bits: tf32 keeps 10."""
    view = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    drop = 23 - bits
    rounded = (view + np.uint32(1 << (drop - 1))) & ~np.uint32((1 << drop) - 1)
    return rounded.view(np.float32)


def _failed(checks):
    return {c.metric for c in checks if not c.passed}


@pytest.mark.parametrize("k", [64, 4096])
def test_bf16_and_fp16_results_pass_their_own_tolerance_and_coarser_ones_fail(k):
    x, w = _operands(64, 48, k, np.float32, seed=2)
    xb, wb = float32_to_bf16_bits(np, x), float32_to_bf16_bits(np, w)
    exact = _fp32_sum(bf16_bits_to_float32(np, xb), bf16_bits_to_float32(np, wb))
    checks, _, _ = check_gemm(xb, wb, float32_to_bf16_bits(np, exact), "nn", "bf16")
    assert _failed(checks) == set(), checks
    coarse = float32_to_bf16_bits(np, _round_mantissa(exact, 4))  # a 4-bit mantissa result
    assert "rel_frobenius" in _failed(check_gemm(xb, wb, coarse, "nn", "bf16")[0])

    xh, wh = x.astype(np.float16), w.astype(np.float16)
    exact = _fp32_sum(xh, wh)
    checks, _, _ = check_gemm(xh, wh, exact.astype(np.float16), "nn", "fp16")
    assert _failed(checks) == set(), checks
    as_bf16 = bf16_bits_to_float32(np, float32_to_bf16_bits(np, exact)).astype(np.float16)
    assert "rel_frobenius" in _failed(check_gemm(xh, wh, as_bf16, "nn", "fp16")[0])


@pytest.mark.parametrize("k", [64, 4096])
def test_tf32_inputs_pass_tf32_fail_fp32_and_bf16_inputs_fail_tf32(k):
    x, w = _operands(64, 48, k, np.float32, seed=2)
    tf32 = _fp32_sum(_round_mantissa(x, 10), _round_mantissa(w, 10))
    assert _failed(check_gemm(x, w, tf32, "nn", "tf32")[0]) == set()
    # an fp32 GEMM that ran on TF32 tensor cores (a math mode leaking into fp32) is caught
    assert "rel_frobenius" in _failed(check_gemm(x, w, tf32, "nn", "fp32")[0])
    bf16_inputs = _fp32_sum(_round_mantissa(x, 7), _round_mantissa(w, 7))
    assert "rel_frobenius" in _failed(check_gemm(x, w, bf16_inputs, "nn", "tf32")[0])
