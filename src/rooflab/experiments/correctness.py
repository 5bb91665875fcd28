"""Correct before timed: one GEMM result checked against a float64 reference (DESIGN.md §4).

Tolerances, with u the unit roundoff of the dtype the products are computed in
(fp64 2^-53, fp32 2^-24, tf32 and fp16 2^-11, bf16 2^-8):

- relative Frobenius error  ||Y - Y_ref||_F / ||Y_ref||_F  <=  u * (2 + 4 * sqrt(K))
  (rounding errors of K-term sums grow like sqrt(K) on random data; 4x margin; 2u for rounding
  the inputs' products and the stored output);
- componentwise  max_ij |Y - Y_ref|_ij / (|X| |W|)_ij  <=  u * (K + 2)
  (the deterministic bound gamma_K of Higham, Accuracy and Stability, §3.5, plus output rounding;
  catches one wrong element that the Frobenius norm of a large matrix would dilute);
- every element finite: the output is filled with NaN before the run, so an element the kernel
  did not write fails, and NaN or Inf never passes.

Large outputs are checked on sampled rows and columns (always including the last, where tails
live); the counts are recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

UNIT_ROUNDOFF = {
    "fp64": 2.0**-53,
    "fp32": 2.0**-24,
    "tf32": 2.0**-11,
    "fp16": 2.0**-11,
    "bf16": 2.0**-8,
}
MAX_CHECKED_ROWS = 256
MAX_CHECKED_COLS = 256


def tolerances(dtype: str, k: int) -> dict[str, float]:
    u = UNIT_ROUNDOFF[dtype]
    return {"rel_frobenius": u * (2 + 4 * math.sqrt(k)), "max_componentwise": u * (k + 2)}


@dataclass(frozen=True)
class Check:
    metric: str
    error: float
    tolerance: float
    passed: bool
    detail: str = ""


def _sample(count: int, limit: int, rng: np.random.Generator) -> np.ndarray:
    if count <= limit:
        return np.arange(count)
    chosen = rng.choice(count - 1, size=limit - 1, replace=False)
    return np.sort(np.append(chosen, count - 1))


def check_gemm(
    x: np.ndarray, w: np.ndarray, y: np.ndarray, layout: str, dtype: str, seed: int = 0
) -> tuple[list[Check], int, int]:
    """Checks of Y against X·W (W used transposed for layout nt); returns checks, rows, cols."""
    m, k = x.shape
    n = y.shape[1]
    non_finite = int(y.size - np.count_nonzero(np.isfinite(y)))
    checks = [
        Check(
            "finite",
            float(non_finite),
            0.0,
            non_finite == 0,
            f"{non_finite} of {y.size} elements are NaN or Inf" if non_finite else "",
        )
    ]
    rng = np.random.default_rng(seed)
    rows, cols = _sample(m, MAX_CHECKED_ROWS, rng), _sample(n, MAX_CHECKED_COLS, rng)
    x64 = x[rows].astype(np.float64)
    w_kn = w if layout == "nn" else w.T
    w64 = w_kn[:, cols].astype(np.float64)
    reference = x64 @ w64
    scale = np.abs(x64) @ np.abs(w64)
    got = y[np.ix_(rows, cols)].astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        difference = got - reference
        rel_frobenius = float(np.linalg.norm(difference) / np.linalg.norm(reference))
        componentwise = float(np.max(np.abs(difference) / scale))
    limits = tolerances(dtype, k)
    for metric, error in (("rel_frobenius", rel_frobenius), ("max_componentwise", componentwise)):
        passed = math.isfinite(error) and error <= limits[metric]
        checks.append(Check(metric, error, limits[metric], passed))
    return checks, len(rows), len(cols)
