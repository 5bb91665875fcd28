import math

import numpy as np
import pytest

from rooflab.experiments.correctness import UNIT_ROUNDOFF, check_gemm, tolerances


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
    assert rows == 256  # sampled, and the failure still caught


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
