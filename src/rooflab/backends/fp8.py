"""float8 (e4m3fn and e5m2) as raw 8-bit patterns, for arrays of numpy or CuPy alike (`xp`).

Neither numpy nor CuPy has a float8 dtype, so rooflab keeps FP8 operands as uint8 bit patterns,
as it keeps bf16 as uint16 (rooflab.backends.bfloat16); cuBLASLt reads them as CUDA_R_8F_E4M3 or
CUDA_R_8F_E5M2. The two formats of the OCP 8-bit floating point specification (v1.0, 2023), which
NVIDIA's `__nv_fp8_e4m3`/`__nv_fp8_e5m2` and torch's `float8_e4m3fn`/`float8_e5m2` implement:

| format | sign, exponent, mantissa bits | bias | largest finite | smallest subnormal | inf | NaN |
|---|---|---|---|---|---|---|
| e4m3fn | 1, 4, 3 | 7 | 448 (0x7e) | 2^-9 | none | 0x7f, 0xff |
| e5m2 | 1, 5, 2 | 15 | 57344 (0x7b) | 2^-16 | 0x7c, 0xfc | exponent 31, mantissa != 0 |

e4m3fn ("finite") gives up infinities and all but one NaN for one more binade: its exponent 15 is
a normal exponent except for the mantissa 111. Decoding is exact (every FP8 value is a float32
value): a 256-entry table. Encoding rounds to nearest, ties to even; a value beyond the largest
finite one (after rounding) becomes NaN (e4m3fn, which has no inf) or inf (e5m2), as torch's
casts do, or, with `saturate=True`, the largest finite value of its sign, as CUDA's
`__NV_SATFINITE` conversions (and cuBLASLt's FP8 outputs) do; NaN stays NaN either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "FP8_FORMATS",
    "Fp8Format",
    "count_non_finite_fp8",
    "float_to_fp8_bits",
    "fp8_bits_to_float32",
    "fp8_format",
]


@dataclass(frozen=True)
class Fp8Format:
    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max_finite: float
    has_inf: bool
    nan_bits: int  # the NaN an encoded NaN (or a non-saturated e4m3fn overflow) becomes
    cuda_data_type: str  # cudaDataType_t name

    @property
    def min_exponent(self) -> int:
        """The exponent of the smallest normal value (and the scale of the subnormals)."""
        return 1 - self.bias

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (self.min_exponent - self.mantissa_bits)

    @property
    def max_bits(self) -> int:
        """The bit pattern of the largest finite positive value."""
        return 0x7E if not self.has_inf else 0x7B

    @property
    def inf_bits(self) -> int | None:
        return 0x7C if self.has_inf else None


FP8_FORMATS = {
    "e4m3": Fp8Format("e4m3fn", 4, 3, 7, 448.0, False, 0x7F, "CUDA_R_8F_E4M3"),
    "e5m2": Fp8Format("e5m2", 5, 2, 15, 57344.0, True, 0x7E, "CUDA_R_8F_E5M2"),
}


def fp8_format(name: str) -> Fp8Format:
    """A format by name: e4m3 (also e4m3fn, fp8_e4m3) or e5m2 (also fp8_e5m2)."""
    key = name.removeprefix("fp8_").removesuffix("fn")
    if key not in FP8_FORMATS:
        raise ValueError(f"unknown FP8 format {name!r}; known: e4m3 (e4m3fn), e5m2")
    return FP8_FORMATS[key]


def _decode_table(fmt: Fp8Format) -> np.ndarray:
    """float32 value of each of the 256 codes, computed from the fields."""
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent = (codes >> fmt.mantissa_bits) & ((1 << fmt.exponent_bits) - 1)
    mantissa = codes & ((1 << fmt.mantissa_bits) - 1)
    fraction = mantissa / (1 << fmt.mantissa_bits)
    magnitude = np.where(
        exponent == 0,
        fraction * 2.0**fmt.min_exponent,  # subnormal (and zero)
        (1.0 + fraction) * 2.0 ** (exponent - fmt.bias),
    )
    values = sign * magnitude
    top = (1 << fmt.exponent_bits) - 1
    if fmt.has_inf:  # IEEE-like: the top exponent holds inf (mantissa 0) and NaN
        values = np.where((exponent == top) & (mantissa == 0), sign * np.inf, values)
        values = np.where((exponent == top) & (mantissa != 0), np.nan, values)
    else:  # e4m3fn: only S.1111.111 is NaN
        all_ones = (1 << fmt.mantissa_bits) - 1
        values = np.where((exponent == top) & (mantissa == all_ones), np.nan, values)
    return values.astype(np.float32)


_TABLES = {key: _decode_table(fmt) for key, fmt in FP8_FORMATS.items()}


def fp8_bits_to_float32(xp, bits, fmt: str | Fp8Format):
    """Exact: every FP8 value is a float32 value (a table lookup, on the device for CuPy)."""
    fmt = fp8_format(fmt) if isinstance(fmt, str) else fmt
    table = xp.asarray(_TABLES[fmt.name.removesuffix("fn")])
    return table[xp.asarray(bits, dtype=xp.uint8).astype(xp.intp)]


def float_to_fp8_bits(xp, values, fmt: str | Fp8Format, *, saturate: bool = False):
    """Round float32 or float64 values to FP8 bit patterns (uint8): to nearest, ties to even.

    Beyond the largest finite value after rounding: NaN (e4m3fn) or inf (e5m2) of the value's sign,
    or with `saturate` the largest finite value of that sign (inf too saturates). NaN in, NaN out
    (the format's positive quiet NaN). -0.0 keeps its sign (0x80).
    """
    fmt = fp8_format(fmt) if isinstance(fmt, str) else fmt
    values = xp.asarray(values, dtype=xp.float64)  # float32 and float64 inputs are exact
    magnitude = xp.abs(values)
    # The binade of each value, held at the smallest normal one so subnormals share its quantum.
    _, exponent = xp.frexp(magnitude)  # magnitude = f·2^exponent with f in [0.5, 1)
    exponent = xp.maximum(exponent.astype(xp.int64) - 1, fmt.min_exponent)
    quantum = xp.ldexp(xp.ones_like(magnitude), (exponent - fmt.mantissa_bits).astype(xp.int32))
    with np.errstate(invalid="ignore", over="ignore"):
        rounded = xp.rint(magnitude / quantum) * quantum  # rint: nearest, ties to even; exact
    overflow = ~(rounded <= fmt.max_finite)  # NaN compares false: handled below
    rounded = xp.where(overflow, fmt.max_finite, rounded)
    # Fields of the rounded magnitude (a carry out of the mantissa moved it up a binade).
    _, exponent = xp.frexp(rounded)
    exponent = exponent.astype(xp.int64) - 1
    normal = rounded >= 2.0**fmt.min_exponent
    scale = xp.where(normal, exponent, fmt.min_exponent) - fmt.mantissa_bits
    significand = xp.ldexp(rounded, (-scale).astype(xp.int32)).astype(xp.int64)
    mantissa = xp.where(normal, significand - (1 << fmt.mantissa_bits), significand)
    exponent_field = xp.where(normal, exponent + fmt.bias, 0)
    sign = xp.signbit(values).astype(xp.int64) << 7
    bits = sign | (exponent_field << fmt.mantissa_bits) | mantissa
    if not saturate:
        beyond = fmt.inf_bits if fmt.has_inf else fmt.nan_bits
        bits = xp.where(overflow, sign | beyond, bits)
    bits = xp.where(xp.isnan(values), fmt.nan_bits, bits)
    return bits.astype(xp.uint8)


def count_non_finite_fp8(xp, bits, fmt: str | Fp8Format) -> int:
    """Elements that are NaN or infinite."""
    return int(xp.count_nonzero(~xp.isfinite(fp8_bits_to_float32(xp, bits, fmt))))
