"""Correct before timed: one GEMM result checked against a float64 reference (docs/measure.md).

The reference is computed from the operands exactly as stored, so rounding the inputs to their
dtype is not an error. What remains has three sources, each with its unit roundoff (`ROUNDING`):
u_out for rounding the result to the output dtype, u_in for rounding the inputs *inside* the GEMM
(tf32 only: fp32 operands, TF32 products), and u_acc for the K-term accumulation. fp64 and fp32
GEMMs have u_out = u_acc = u of the dtype (2^-53, 2^-24) and u_in = 0; the GPU's tensor-core paths
(tf32, fp16, bf16) accumulate in fp32 with u_acc = 2^-23 and tf32 rounds its inputs with
u_in = 2^-10 (each twice the round-to-nearest value: tensor cores may truncate rather than
round), and they store fp32 (u_out 2^-24), fp16 (2^-11) or bf16 (2^-8). Tolerances:

- relative Frobenius error  ||Y - Y_ref||_F / ||Y_ref||_F
  <=  2 u_out + 2 u_in + 4 sqrt(K) u_acc
  (rounding errors of K-term sums grow like sqrt(K) on random data, 4x margin; the rest for the
  output and the in-GEMM input rounding); for fp64 and fp32 this is u (2 + 4 sqrt(K));
- componentwise  max_ij |Y - Y_ref|_ij / (|X| |W|)_ij  <=  u_out + 2 u_in + (K + 1) u_acc
  (the deterministic bound gamma_K of Higham, Accuracy and Stability, §3.5, plus the roundings;
  catches one wrong element that the Frobenius norm of a large matrix would dilute); for fp64 and
  fp32 this is u (K + 2);
- every element finite: the output is filled with NaN before the run, so an element the kernel
  did not write fails, and NaN or Inf never passes.

Large outputs are checked on sampled rows and columns (always including the last, where tails
live); the counts are recorded. The reference is computed where the operands live (`xp` is numpy
or CuPy): on a GPU, the sampled rows and columns are converted to float64 and multiplied on the
device, and only the sampled results come to the host. bf16 operands are uint16 bit patterns
(rooflab.backends.bfloat16); tf32 operands are float32 (the rounding happens inside the GEMM).

FP8 (fp8_e4m3, fp8_e5m2) and int8 GEMMs run through cuBLASLt (rooflab.backends.cublaslt_args):
their operands are FP8 codes (uint8) or int8, their results bf16 or int32. They are checked the
same way, except that the sampled rows and columns go to the host, where the reference is
cublaslt_args.dequantised_reference (the codes decoded exactly, times the per-tensor scales) and
the tolerances are cublaslt_args.lt_tolerances (int8: exact). An int8 result is poisoned with
INT32_POISON, which no int8 GEMM here reaches: an element still holding it counts as not finite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rooflab.backends.bfloat16 import bf16_bits_to_float32, count_non_finite_bf16
from rooflab.backends.cublaslt_args import (
    INT32_POISON,
    LT_GEMM_TYPES,
    LT_ONLY_DTYPES,
    compare_with_reference,
    dequantised_reference,
)

# Unit roundoff of each dtype's values (tf32: of its products' inputs).
UNIT_ROUNDOFF = {
    "fp64": 2.0**-53,
    "fp32": 2.0**-24,
    "tf32": 2.0**-11,
    "fp16": 2.0**-11,
    "bf16": 2.0**-8,
}
# Tensor cores may truncate where IEEE arithmetic rounds to nearest: twice the unit roundoff.
_TENSOR_ACCUMULATE = 2 * UNIT_ROUNDOFF["fp32"]  # fp32 accumulation
_TF32_INPUTS = 2 * UNIT_ROUNDOFF["tf32"]  # fp32 operands converted to TF32 inside the GEMM


@dataclass(frozen=True)
class Rounding:
    output: float  # u_out: the result stored in the output dtype
    inputs: float  # u_in: inputs rounded inside the GEMM (0 when used as stored)
    accumulate: float  # u_acc: the K-term sums


ROUNDING = {
    "fp64": Rounding(UNIT_ROUNDOFF["fp64"], 0.0, UNIT_ROUNDOFF["fp64"]),
    "fp32": Rounding(UNIT_ROUNDOFF["fp32"], 0.0, UNIT_ROUNDOFF["fp32"]),
    "tf32": Rounding(UNIT_ROUNDOFF["fp32"], _TF32_INPUTS, _TENSOR_ACCUMULATE),
    "fp16": Rounding(UNIT_ROUNDOFF["fp16"], 0.0, _TENSOR_ACCUMULATE),
    "bf16": Rounding(UNIT_ROUNDOFF["bf16"], 0.0, _TENSOR_ACCUMULATE),
}
MAX_CHECKED_ROWS = 256
MAX_CHECKED_COLS = 256


def tolerances(dtype: str, k: int) -> dict[str, float]:
    r = ROUNDING[dtype]
    return {
        "rel_frobenius": 2 * r.output + 2 * r.inputs + 4 * math.sqrt(k) * r.accumulate,
        "max_componentwise": r.output + 2 * r.inputs + (k + 1) * r.accumulate,
    }


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


def as_float64(xp, array, dtype: str):
    """An operand or result as float64 (bf16 bit patterns decoded; others cast exactly)."""
    if dtype == "bf16":
        return bf16_bits_to_float32(xp, array).astype(xp.float64)
    return array.astype(xp.float64)


def _integer_output(dtype: str) -> bool:
    return dtype in LT_ONLY_DTYPES and LT_GEMM_TYPES[dtype].integer


def count_non_finite(xp, array, dtype: str) -> int:
    """NaN and Inf elements of a whole result, without a float64 copy of it (an int32 result:
    the elements still holding the poison, INT32_POISON)."""
    if _integer_output(dtype):
        return int(xp.count_nonzero(array == INT32_POISON))
    if dtype == "bf16" or dtype in LT_ONLY_DTYPES:  # FP8 GEMMs store bf16
        return count_non_finite_bf16(xp, array)
    return int(array.size - int(xp.count_nonzero(xp.isfinite(array))))


def _host(xp, array) -> np.ndarray:
    return xp.asnumpy(array) if hasattr(xp, "asnumpy") else np.asarray(array)


def check_gemm(
    x, w, y, layout: str, dtype: str, seed: int = 0, xp=np, scales=None
) -> tuple[list[Check], int, int]:
    """Checks of Y against X·W (W used transposed for layout nt); returns checks, rows, cols.

    x, w, y are arrays of `xp` (numpy, or CuPy for operands on a GPU) in dtype's storage;
    `scales`: (scale_x, scale_w) of an FP8 GEMM (GemmOperands.scales), else None.
    """
    m, k = x.shape
    n = y.shape[1]
    non_finite = count_non_finite(xp, y, dtype)
    what = "still hold the poison (not written)" if _integer_output(dtype) else "are NaN or Inf"
    checks = [
        Check(
            "finite",
            float(non_finite),
            0.0,
            non_finite == 0,
            f"{non_finite} of {y.size} elements {what}" if non_finite else "",
        )
    ]
    rng = np.random.default_rng(seed)
    rows, cols = _sample(m, MAX_CHECKED_ROWS, rng), _sample(n, MAX_CHECKED_COLS, rng)
    rows_at, cols_at = xp.asarray(rows), xp.asarray(cols)
    if dtype in LT_ONLY_DTYPES:
        checks += _lt_checks(xp, x, w, y, layout, dtype, rows_at, cols_at, scales)
        return checks, len(rows), len(cols)
    x64 = as_float64(xp, x[rows_at], dtype)
    w_kn = w if layout == "nn" else w.T
    w64 = as_float64(xp, w_kn[:, cols_at], dtype)
    reference = _host(xp, x64 @ w64)
    scale = _host(xp, xp.abs(x64) @ xp.abs(w64))
    got = _host(xp, as_float64(xp, y[rows_at][:, cols_at], dtype))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        difference = got - reference
        rel_frobenius = float(np.linalg.norm(difference) / np.linalg.norm(reference))
        componentwise = float(np.max(np.abs(difference) / scale))
    limits = tolerances(dtype, k)
    for metric, error in (("rel_frobenius", rel_frobenius), ("max_componentwise", componentwise)):
        passed = math.isfinite(error) and error <= limits[metric]
        checks.append(Check(metric, error, limits[metric], passed))
    return checks, len(rows), len(cols)


def _lt_checks(xp, x, w, y, layout, dtype, rows_at, cols_at, scales) -> list[Check]:
    """An FP8 or int8 result on the sampled rows and columns against the dequantised reference
    (on the host: these are uint8 codes or int8, and the reference decodes them exactly)."""
    types = LT_GEMM_TYPES[dtype]
    if types.scale_pointers and scales is None:
        raise ValueError(f"a {dtype} GEMM is checked with its per-tensor scales; none given")
    scale_x, scale_w = scales or (1.0, 1.0)
    w_cols = w[cols_at] if layout == "nt" else w[:, cols_at]  # nt: W is stored N×K
    reference, magnitude = dequantised_reference(
        _host(xp, x[rows_at]), _host(xp, w_cols), layout, dtype, scale_x=scale_x, scale_w=scale_w
    )
    got = _host(xp, y[rows_at][:, cols_at])
    got = got.astype(np.int64) if types.integer else bf16_bits_to_float32(np, got)
    k = x.shape[1]
    return [
        Check(c.metric, c.error, c.tolerance, c.passed)
        for c in compare_with_reference(got, reference, magnitude, dtype, k)
        if c.metric != "finite"  # the whole result's, above
    ]
