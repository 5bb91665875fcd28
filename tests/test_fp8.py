"""float8 e4m3fn and e5m2 bit patterns (rooflab.backends.fp8): all 256 codes of each format, the
rounding of values between them, overflow with and without saturation, and ml_dtypes' casts where
ml_dtypes happens to be installed."""

import numpy as np
import pytest

from rooflab.backends.fp8 import (
    FP8_FORMATS,
    count_non_finite_fp8,
    float_to_fp8_bits,
    fp8_bits_to_float32,
    fp8_format,
)

CODES = np.arange(256, dtype=np.uint8)
FORMATS = ("e4m3", "e5m2")


def decoded(fmt: str) -> np.ndarray:
    return fp8_bits_to_float32(np, CODES, fmt).astype(np.float64)


def nearest_even_reference(values: np.ndarray, fmt: str) -> np.ndarray:
    """Brute force, independent of the encoder: the finite code nearest each value, ties to the
    code with an even last bit; a value past the largest finite one by half its spacing or more
    (a tie there goes up when the largest code is odd, as e5m2's 0x7b is) overflows to NaN
    (e4m3fn) or inf (e5m2)."""
    table = decoded(fmt)
    finite = np.flatnonzero(np.isfinite(table))
    out = np.empty(values.shape, dtype=np.int64)
    top = FP8_FORMATS[fmt].max_bits
    largest = table[top]
    boundary = largest + (largest - table[top - 1]) / 2
    overflow_code = 0x7C if fmt == "e5m2" else 0x7F
    for i, value in enumerate(values):
        sign = 0x80 if np.signbit(value) else 0
        if abs(value) > boundary or (abs(value) == boundary and top % 2):
            out[i] = overflow_code | sign
            continue
        distance = np.abs(table[finite] - value)
        best = finite[distance == distance.min()]
        same_sign = best[(best & 0x80) == sign]
        best = same_sign if same_sign.size else best
        even = best[best % 2 == 0]
        out[i] = int((even if even.size else best)[0])
    return out


@pytest.mark.parametrize(
    ("fmt", "nan_codes", "inf_codes", "largest"),
    [("e4m3", 2, 0, 448.0), ("e5m2", 6, 2, 57344.0)],
)
def test_all_codes_decode_to_the_formats_values(fmt, nan_codes, inf_codes, largest):
    values = decoded(fmt)
    assert np.count_nonzero(np.isnan(values)) == nan_codes
    assert np.count_nonzero(np.isinf(values)) == inf_codes
    assert np.max(values[np.isfinite(values)]) == largest
    assert np.min(values[np.isfinite(values)]) == -largest
    positive = values[:0x80][np.isfinite(values[:0x80])]
    assert np.all(np.diff(positive) > 0)  # codes 0x00.. are ordered by value
    # the negative half mirrors the positive half, bit 7 being the sign
    np.testing.assert_array_equal(values[0x80:], -values[:0x80])
    assert count_non_finite_fp8(np, CODES, fmt) == nan_codes + inf_codes


@pytest.mark.parametrize(
    ("fmt", "code", "value"),
    [
        ("e4m3", 0x00, 0.0),
        ("e4m3", 0x01, 2.0**-9),  # smallest subnormal
        ("e4m3", 0x07, 7 * 2.0**-9),  # largest subnormal
        ("e4m3", 0x08, 2.0**-6),  # smallest normal
        ("e4m3", 0x38, 1.0),
        ("e4m3", 0x40, 2.0),
        ("e4m3", 0x7E, 448.0),
        ("e4m3", 0x78, 256.0),  # exponent 15 is a normal exponent in e4m3fn
        ("e4m3", 0xB8, -1.0),
        ("e5m2", 0x01, 2.0**-16),
        ("e5m2", 0x04, 2.0**-14),
        ("e5m2", 0x3C, 1.0),
        ("e5m2", 0x7B, 57344.0),
        ("e5m2", 0x7C, np.inf),
        ("e5m2", 0xFC, -np.inf),
    ],
)
def test_spot_values(fmt, code, value):
    assert fp8_bits_to_float32(np, np.uint8(code), fmt) == value
    assert float_to_fp8_bits(np, np.array([value]), fmt)[0] == code


@pytest.mark.parametrize(("fmt", "nan"), [("e4m3", (0x7F, 0xFF)), ("e5m2", (0x7D, 0x7E, 0x7F))])
def test_nan_codes(fmt, nan):
    assert np.all(np.isnan(fp8_bits_to_float32(np, np.array(nan, dtype=np.uint8), fmt)))


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_code_round_trips(fmt, saturate):
    values = decoded(fmt)
    back = float_to_fp8_bits(np, values, fmt, saturate=saturate)
    number = ~np.isnan(values)
    infinite = np.isinf(values)
    np.testing.assert_array_equal(back[~infinite & number], CODES[~infinite & number])
    # e5m2's infinities stay infinite, or saturate to the largest finite value of their sign
    top = FP8_FORMATS[fmt].max_bits
    expected = [top, top | 0x80] if saturate else [0x7C, 0xFC]
    assert back[infinite].tolist() == (expected if fmt == "e5m2" else [])
    # a NaN comes back as the format's one positive NaN, which decodes to NaN
    assert set(back[~number].tolist()) == {FP8_FORMATS[fmt].nan_bits}
    assert np.all(np.isnan(fp8_bits_to_float32(np, back[~number], fmt)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_midpoints_round_to_the_even_code_and_neighbours_to_the_nearer(fmt):
    values = decoded(fmt)[:0x80]
    finite = values[np.isfinite(values)]
    low, high = finite[:-1], finite[1:]
    middle = (low + high) / 2
    codes = float_to_fp8_bits(np, middle, fmt).astype(np.int64)
    lower_code = np.arange(low.size)
    expected = np.where(lower_code % 2 == 0, lower_code, lower_code + 1)
    np.testing.assert_array_equal(codes, expected)
    just_below = float_to_fp8_bits(np, np.nextafter(middle, -np.inf), fmt)
    just_above = float_to_fp8_bits(np, np.nextafter(middle, np.inf), fmt)
    np.testing.assert_array_equal(just_below, lower_code)
    np.testing.assert_array_equal(just_above, lower_code + 1)
    # and the negative side mirrors it
    np.testing.assert_array_equal(float_to_fp8_bits(np, -middle, fmt), expected + 0x80)


@pytest.mark.parametrize("fmt", FORMATS)
def test_random_values_match_a_brute_force_nearest_even_search(fmt):
    rng = np.random.default_rng(7)
    f = FP8_FORMATS[fmt]
    exponents = rng.uniform(np.log2(f.min_subnormal) - 2, np.log2(f.max_finite), 3000)
    beyond = rng.uniform(f.max_finite, 4 * f.max_finite, 200)  # around the overflow boundary
    values = np.concatenate([2.0**exponents, beyond]) * rng.choice([-1.0, 1.0], 3200)
    boundary = f.max_finite + 2.0 ** (np.floor(np.log2(f.max_finite)) - f.mantissa_bits - 1)
    values = np.append(values, [boundary, -boundary, np.nextafter(boundary, 0)])
    values = values.astype(np.float32).astype(np.float64)  # as float32 inputs arrive
    expected = nearest_even_reference(values, fmt)
    got = float_to_fp8_bits(np, values.astype(np.float32), fmt).astype(np.int64)
    np.testing.assert_array_equal(got, expected)
    overflowed = fp8_bits_to_float32(np, got.astype(np.uint8), fmt)
    assert np.count_nonzero(~np.isfinite(overflowed)) > 100  # overflow was exercised


@pytest.mark.parametrize(
    ("fmt", "value", "plain", "saturated"),
    [
        # e4m3fn: 448 is the largest; 464 ties between 448 (0x7e, even) and 480 (not a value)
        ("e4m3", 464.0, 0x7E, 0x7E),
        ("e4m3", 465.0, 0x7F, 0x7E),  # beyond: NaN (no inf in e4m3fn), or 448 saturated
        ("e4m3", -1e6, 0xFF, 0xFE),
        ("e4m3", np.inf, 0x7F, 0x7E),
        ("e4m3", -np.inf, 0xFF, 0xFE),
        # e5m2: 61440 ties between 57344 (0x7b, odd) and 65536 (0x7c, inf): to inf
        ("e5m2", 61440.0, 0x7C, 0x7B),
        ("e5m2", 61439.0, 0x7B, 0x7B),
        ("e5m2", -1e9, 0xFC, 0xFB),
        ("e5m2", np.inf, 0x7C, 0x7B),
        ("e4m3", np.nan, 0x7F, 0x7F),
        ("e5m2", np.nan, 0x7E, 0x7E),
        ("e4m3", -0.0, 0x80, 0x80),
        ("e4m3", -(2.0**-11), 0x80, 0x80),  # underflows to a negative zero
        ("e4m3", 2.0**-10, 0x00, 0x00),  # half the smallest subnormal: ties to even (zero)
        ("e5m2", 3 * 2.0**-18, 0x01, 0x01),  # 0.75 of the smallest subnormal
    ],
)
def test_overflow_nan_and_zero(fmt, value, plain, saturated):
    assert float_to_fp8_bits(np, np.array([value]), fmt)[0] == plain
    assert float_to_fp8_bits(np, np.array([value]), fmt, saturate=True)[0] == saturated


def test_format_names():
    assert fp8_format("fp8_e4m3") is fp8_format("e4m3fn") is FP8_FORMATS["e4m3"]
    assert fp8_format("fp8_e5m2").cuda_data_type == "CUDA_R_8F_E5M2"
    assert FP8_FORMATS["e4m3"].cuda_data_type == "CUDA_R_8F_E4M3"
    with pytest.raises(ValueError, match="unknown FP8 format 'e3m4'"):
        fp8_format("e3m4")


def test_outputs_are_uint8_and_inputs_may_be_float32():
    bits = float_to_fp8_bits(np, np.float32([1.0, -2.0, 0.1]), "e4m3")
    assert bits.dtype == np.uint8
    assert fp8_bits_to_float32(np, bits, "e4m3").dtype == np.float32
    np.testing.assert_array_equal(fp8_bits_to_float32(np, bits, "e4m3"), [1.0, -2.0, 0.1015625])


@pytest.mark.parametrize(("fmt", "name"), [("e4m3", "float8_e4m3fn"), ("e5m2", "float8_e5m2")])
def test_agrees_with_ml_dtypes_where_installed(fmt, name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    theirs = CODES.view(getattr(ml_dtypes, name)).astype(np.float32)
    np.testing.assert_array_equal(fp8_bits_to_float32(np, CODES, fmt), theirs)
    rng = np.random.default_rng(3)
    values = (rng.standard_normal(20000) * 2.0 ** rng.integers(-18, 18, 20000)).astype(np.float32)
    expected = values.astype(getattr(ml_dtypes, name)).view(np.uint8)
    got = float_to_fp8_bits(np, values, fmt)
    nan = np.isnan(fp8_bits_to_float32(np, expected, fmt))
    np.testing.assert_array_equal(got[~nan], expected[~nan])
    assert np.all(np.isnan(fp8_bits_to_float32(np, got[nan], fmt)))
