"""bfloat16 as raw 16-bit patterns, for arrays of numpy or CuPy alike (`xp` is the module).

Neither numpy nor every CuPy install has a bfloat16 dtype, so rooflab keeps bf16 operands as uint16
bit patterns: the upper half of an IEEE float32 (1 sign, 8 exponent, 7 mantissa bits). cuBLAS
reads them as CUDA_R_16BF. Conversions are element-wise integer arithmetic, so the same code runs
on the host (tests) and on the device (the CUDA backend).
"""

from __future__ import annotations

__all__ = [
    "BF16_NAN_BITS",
    "bf16_bits_to_float32",
    "count_non_finite_bf16",
    "float32_to_bf16_bits",
]

BF16_NAN_BITS = 0x7FC0  # a quiet NaN: what a poisoned output is filled with
_EXPONENT_MASK = 0x7F80


def float32_to_bf16_bits(xp, values):
    """Round float32 values to bfloat16 (to nearest, ties to even); NaN stays a quiet NaN."""
    values = xp.ascontiguousarray(values, dtype=xp.float32)
    bits = values.view(xp.uint32)
    # Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to even; a carry out of the
    # mantissa correctly bumps the exponent (and the largest finite values round to infinity).
    rounded = (bits + (xp.uint32(0x7FFF) + ((bits >> 16) & xp.uint32(1)))) >> 16
    rounded = rounded.astype(xp.uint16)
    return xp.where(xp.isnan(values), xp.uint16(BF16_NAN_BITS), rounded)


def bf16_bits_to_float32(xp, bits):
    """Exact: every bfloat16 value is a float32 value."""
    return (xp.asarray(bits, dtype=xp.uint16).astype(xp.uint32) << 16).view(xp.float32)


def count_non_finite_bf16(xp, bits) -> int:
    """Elements that are NaN or infinite: exponent bits all ones."""
    return int(xp.count_nonzero((bits & xp.uint16(_EXPONENT_MASK)) == xp.uint16(_EXPONENT_MASK)))
