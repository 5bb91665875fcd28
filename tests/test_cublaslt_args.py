"""FP8, INT8 and bf16 through cuBLASLt without a GPU (rooflab.backends.cublaslt_args): the
argument mapping checked against a numpy model of cublasLtMatmul, the refusals, the ledgers with
their scales' bytes and integer OP, the datasheet roofs, and the tolerances, each shown to fail a
wrong result."""

import math

import numpy as np
import pytest

from rooflab.backends.base import BackendError
from rooflab.backends.bfloat16 import bf16_bits_to_float32, float32_to_bf16_bits
from rooflab.backends.cublas_args import OP_N, OP_T
from rooflab.backends.cublaslt_args import (
    FP8_CHUNK_K,
    LT_GEMM_TYPES,
    LtGemm,
    check_pointer_alignment,
    column_major,
    compare_with_reference,
    dequantised_reference,
    fp8_types,
    lt_gemm_ledger,
    lt_library_paths,
    lt_matmul_model,
    lt_tolerances,
    row_major_lt_gemm,
)
from rooflab.backends.fp8 import float_to_fp8_bits, fp8_bits_to_float32
from rooflab.devices import load_device_presets
from rooflab.model import SCALE_BYTES, ModelError, gemm_ledger, work_unit
from rooflab.units import UnitError, format_quantity, parse_flop_rate, parse_op, parse_op_rate

CUDA_DATA_TYPES = {"CUDA_R_8F_E4M3", "CUDA_R_8F_E5M2", "CUDA_R_8I", "CUDA_R_32I", "CUDA_R_16BF"}
ALLOWED = [(dtype, "nt") for dtype in LT_GEMM_TYPES] + [("bf16", "nn")]


# -- operands as the device would hold them -------------------------------------------------------


def _values(rng, shape):
    """Random non-zero values, magnitudes in [0.5, 1) with random signs (as rooflab's operands)."""
    return rng.uniform(0.5, 1.0, shape) * rng.choice([-1.0, 1.0], shape)


def operands(dtype, m, n, k, layout, seed=0):
    """Row-major X[M×K] and W (K×N for nn, N×K for nt) as stored bit patterns, and the scales."""
    rng = np.random.default_rng(seed)
    w_shape = (k, n) if layout == "nn" else (n, k)
    if dtype == "int8":
        x = rng.integers(-128, 128, (m, k)).astype(np.int8)
        return x, rng.integers(-128, 128, w_shape).astype(np.int8), 1.0, 1.0
    if dtype == "bf16":
        x = float32_to_bf16_bits(np, _values(rng, (m, k)))
        return x, float32_to_bf16_bits(np, _values(rng, w_shape)), 1.0, 1.0
    x_fmt, w_fmt = (name.removeprefix("fp8_") for name in LT_GEMM_TYPES[dtype].ledger_dtypes[:2])
    # quantised as a real FP8 GEMM's operands are: values / scale, scale = amax / largest code
    x_real, w_real = 3.0 * _values(rng, (m, k)), 0.02 * _values(rng, w_shape)
    scale_x, scale_w = 3.0 / 448, 0.02 / 448
    x = float_to_fp8_bits(np, x_real / scale_x, x_fmt, saturate=True)
    return x, float_to_fp8_bits(np, w_real / scale_w, w_fmt, saturate=True), scale_x, scale_w


def decode(bits, dtype, operand):
    """Stored bits as float64, decoded here without the module under test's own helpers."""
    if dtype == "int8":
        return bits.astype(np.float64)
    if dtype == "bf16":
        return bf16_bits_to_float32(np, bits).astype(np.float64)
    x_dtype, w_dtype, _ = LT_GEMM_TYPES[dtype].ledger_dtypes
    fmt = (x_dtype if operand == "x" else w_dtype).removeprefix("fp8_")
    return fp8_bits_to_float32(np, bits, fmt).astype(np.float64)


def run_model(dtype, layout, x, w, scale_x, scale_w, gemm=None):
    """Run the model on the operands' memory (row-major buffers) through the mapping; return Y
    read back as the row-major M×N matrix in the output's storage."""
    m, k = x.shape
    n = w.shape[1] if layout == "nn" else w.shape[0]
    gemm = gemm or row_major_lt_gemm(m, n, k, layout, dtype)
    types = LT_GEMM_TYPES[dtype]
    scales = dict(types.scale_pointers)  # attribute -> operand
    scale_of = {"x": scale_x, "w": scale_w}
    d = lt_matmul_model(
        gemm,
        dtype,
        a=w.ravel(),  # cuBLASLt's A is W's memory, B is X's
        b=x.ravel(),
        scale_a=scale_of[scales["A_SCALE_POINTER"]] if scales else 1.0,
        scale_b=scale_of[scales["B_SCALE_POINTER"]] if scales else 1.0,
    )
    return d.reshape(m, n)  # D is N×M column-major with ldd = N: row-major M×N


def direct(dtype, layout, x, w, scale_x, scale_w):
    """Row-major X·op(W) of the decoded values, times the scales, rounded to Y's type."""
    x64, w64 = decode(x, dtype, "x"), decode(w, dtype, "w")
    exact = scale_x * scale_w * (x64 @ (w64 if layout == "nn" else w64.T))
    if dtype == "int8":
        return exact.astype(np.int64).astype(np.int32)
    return float32_to_bf16_bits(np, exact.astype(np.float32))


# -- the mapping against the model ---------------------------------------------------------------


@pytest.mark.parametrize(("m", "n", "k"), [(1, 16, 32), (3, 32, 16), (17, 48, 64), (64, 16, 128)])
@pytest.mark.parametrize(("dtype", "layout"), ALLOWED)
def test_the_mapping_reproduces_the_row_major_product(dtype, layout, m, n, k):
    x, w, scale_x, scale_w = operands(dtype, m, n, k, layout, seed=m + n + k)
    got = run_model(dtype, layout, x, w, scale_x, scale_w)
    expected = direct(dtype, layout, x, w, scale_x, scale_w)
    # decoded FP8, bf16 and int8 products sum exactly in float64 at these sizes, and both sides
    # round once: the bit patterns agree exactly
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == np.dtype(LT_GEMM_TYPES[dtype].y_storage)


@pytest.mark.parametrize(("dtype", "layout"), ALLOWED)
def test_a_wrong_mapping_is_caught_by_the_same_comparison(dtype, layout):
    # N = K, so a flipped transpose or a swapped operand still has valid shapes: only the values
    # tell, and the comparison above must see them
    m, n, k = 16, 32, 32
    x, w, scale_x, scale_w = operands(dtype, m, n, k, layout, seed=5)
    expected = direct(dtype, layout, x, w, scale_x, scale_w)
    right = row_major_lt_gemm(m, n, k, layout, dtype)
    flipped = LtGemm(OP_N if right.transa == OP_T else OP_T, *_fields(right)[1:])
    assert not np.array_equal(run_model(dtype, layout, x, w, scale_x, scale_w, flipped), expected)
    swapped_ld = LtGemm(*_fields(right)[:5], lda=right.lda, ldb=right.ldb + 16, ldd=right.ldd)
    with pytest.raises(ValueError, match="needs"):  # X's buffer is too short for that ld
        run_model(dtype, layout, x, w, scale_x, scale_w, swapped_ld)


def _fields(gemm: LtGemm):
    return (gemm.transa, gemm.transb, gemm.m, gemm.n, gemm.k, gemm.lda, gemm.ldb, gemm.ldd)


def test_nt_is_cublaslts_tn_format_with_both_operands_k_major():
    gemm = row_major_lt_gemm(5, 4096, 4096, "nt", "fp8_e4m3")
    assert (gemm.transa, gemm.transb) == (OP_T, OP_N)  # "TN": A transposed, B not
    assert (gemm.m, gemm.n, gemm.k) == (4096, 5, 4096)  # cuBLASLt's m, n, k are N, M, K
    assert (gemm.lda, gemm.ldb, gemm.ldd) == (4096, 4096, 4096)
    assert gemm.a_shape == (4096, 4096) and gemm.b_shape == (4096, 5) and gemm.d_shape == (4096, 5)
    nn = row_major_lt_gemm(5, 8, 3, "nn", "bf16")
    assert (nn.transa, nn.lda, nn.a_shape) == (OP_N, 8, (8, 3))


def test_types_per_dtype():
    for types in LT_GEMM_TYPES.values():
        assert {types.a_type, types.b_type, types.d_type} <= CUDA_DATA_TYPES
        assert types.compute_type in ("COMPUTE_32F", "COMPUTE_32I")
    e4m3, e5m2, int8 = (LT_GEMM_TYPES[d] for d in ("fp8_e4m3", "fp8_e5m2", "int8"))
    assert (e4m3.a_type, e4m3.b_type, e4m3.d_type) == ("CUDA_R_8F_E4M3",) * 2 + ("CUDA_R_16BF",)
    # fp8_e5m2: X (cuBLASLt's B) is the e5m2 operand, W (its A) stays e4m3
    assert (e5m2.b_type, e5m2.a_type) == ("CUDA_R_8F_E5M2", "CUDA_R_8F_E4M3")
    assert e5m2.ledger_dtypes == ("fp8_e5m2", "fp8_e4m3", "bf16")
    assert int8.compute_type == "COMPUTE_32I" and int8.scale_type == int8.d_type == "CUDA_R_32I"
    assert int8.scalar_dtype == int8.y_storage == "int32"
    for fp8 in (e4m3, e5m2):
        assert (fp8.compute_type, fp8.scale_type) == ("COMPUTE_32F", "CUDA_R_32F")
        assert dict(fp8.scale_pointers) == {"A_SCALE_POINTER": "w", "B_SCALE_POINTER": "x"}
        assert "D_SCALE_POINTER" not in dict(fp8.scale_pointers)  # bf16 out: no D scale
    assert fp8_types("e4m3", "e5m2").a_type == "CUDA_R_8F_E5M2"  # W e5m2 is allowed too


def test_names_resolve_against_nvmath_where_installed():
    try:
        import nvmath
        from nvmath.bindings import cublas, cublasLt
    except Exception as error:  # not installed, or no CUDA bindings to import it with
        pytest.skip(f"nvmath-python not importable: {error}")
    for types in LT_GEMM_TYPES.values():
        for name in (types.a_type, types.b_type, types.d_type, types.scale_type):
            assert isinstance(int(getattr(nvmath.CudaDataType, name)), int)
        assert int(getattr(cublas.ComputeType, types.compute_type)) in (68, 72)
        for attribute, _ in types.scale_pointers:
            assert getattr(cublasLt.MatmulDescAttribute, attribute)


# -- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2", "int8"])
def test_nn_is_refused_for_fp8_and_int8_with_the_rule(dtype):
    with pytest.raises(BackendError) as caught:
        row_major_lt_gemm(16, 64, 64, "nn", dtype)
    message = str(caught.value)
    assert dtype in message and "layout nn" in message and "TN format" in message
    assert "layout nt" in message and "\n" not in message


def test_e5m2_times_e5m2_is_refused():
    with pytest.raises(BackendError, match="no e5m2 x e5m2 FP8 GEMM"):
        fp8_types("e5m2", "e5m2")


@pytest.mark.parametrize(
    ("dtype", "n", "k", "says"),
    [
        ("fp8_e4m3", 4097, 4096, "needs N a multiple of 16, got N=4097"),
        ("fp8_e5m2", 4096, 4100, "needs K a multiple of 16, got K=4100"),
        ("int8", 4098, 4096, "needs N a multiple of 4, got N=4098"),
        ("int8", 4096, 4099, "needs K a multiple of 4, got K=4099"),
    ],
)
def test_alignment_refusals_name_the_dimension(dtype, n, k, says):
    with pytest.raises(BackendError, match=says):
        row_major_lt_gemm(1, n, k, "nt", dtype)


@pytest.mark.parametrize("m", [1, 2, 3, 17, 127])
def test_m_is_free_for_the_weight_reuse_sweeps(m):
    for dtype in LT_GEMM_TYPES:
        assert row_major_lt_gemm(m, 4096, 4096, "nt", dtype).n == m
    assert row_major_lt_gemm(m, 4097, 4099, "nn", "bf16").m == 4097  # bf16: any size


def test_devices_and_compute_capabilities():
    assert set(lt_library_paths(90)) == {"fp8_e4m3", "fp8_e5m2", "int8", "bf16"}
    assert lt_library_paths(90)["int8"] == "int8_tensor"
    assert set(lt_library_paths(80)) == {"int8", "bf16"}  # A100: no FP8
    assert set(lt_library_paths(75)) == {"int8"}
    with pytest.raises(
        BackendError, match=r"fp8_e4m3 through cuBLASLt needs compute capability 8\.9"
    ):
        row_major_lt_gemm(1, 16, 16, "nt", "fp8_e4m3", compute_capability=80)
    # data-centre Blackwell takes FP8 in every layout; IMMA stays TN-only
    assert row_major_lt_gemm(1, 16, 16, "nn", "fp8_e4m3", compute_capability=100).transa == OP_N
    with pytest.raises(BackendError, match="refuses layout nn"):
        row_major_lt_gemm(1, 16, 16, "nn", "int8", compute_capability=100)
    with pytest.raises(BackendError, match="refuses layout nn"):
        row_major_lt_gemm(1, 16, 16, "nn", "fp8_e4m3", compute_capability=120)
    with pytest.raises(BackendError, match="no cuBLASLt mapping; known: fp8_e4m3"):
        row_major_lt_gemm(1, 16, 16, "nt", "fp16")
    with pytest.raises(BackendError, match="unknown layout 'tn'"):
        row_major_lt_gemm(1, 16, 16, "tn", "bf16")


def test_pointer_alignment():
    check_pointer_alignment("fp8_e4m3", "X", 0x7F0000000200)
    check_pointer_alignment("int8", "W", 0x7F0000000204)
    with pytest.raises(BackendError, match="fp8_e4m3 through cuBLASLt needs W 16-byte aligned"):
        check_pointer_alignment("fp8_e4m3", "W", 0x7F0000000208)


def test_column_major_reads_and_refuses_short_buffers():
    buffer = np.arange(12)
    np.testing.assert_array_equal(column_major(buffer, 2, 3, 4), [[0, 4, 8], [1, 5, 9]])
    with pytest.raises(ValueError, match="leading dimension 1 is less than the 2 rows"):
        column_major(buffer, 2, 3, 1)
    with pytest.raises(ValueError, match="needs 14 elements"):
        column_major(buffer, 2, 3, 6)


def test_int32_overflow_is_refused_by_the_model():
    k = 131072  # (-128)·(-128)·2^17 = 2^31, one past int32
    gemm = row_major_lt_gemm(1, 4, k, "nt", "int8")
    x = np.full(k, -128, dtype=np.int8)
    w = np.full(4 * k, -128, dtype=np.int8)
    with pytest.raises(ValueError, match="overflows int32"):
        lt_matmul_model(gemm, "int8", a=w, b=x)
    x[-1] = 0  # one product fewer: 2^31 - 2^14 fits
    assert lt_matmul_model(gemm, "int8", a=w, b=x).tolist() == [2**31 - 2**14] * 4


# -- ledgers: scales' bytes, int32 output, OP ----------------------------------------------------


def test_fp8_ledger_counts_the_scales():
    ledger = lt_gemm_ledger(16, 4096, 4096, "fp8_e4m3")
    assert ledger.flops == 2 * 16 * 4096 * 4096 and ledger.work_unit == "FLOP"
    assert (ledger.bytes_x, ledger.bytes_w) == (16 * 4096, 4096 * 4096)  # one byte each
    assert ledger.bytes_y_write == 16 * 4096 * 2  # bf16 out
    assert ledger.bytes_scales == 2 * 4 == 2 * SCALE_BYTES  # float32 scales of X and W
    assert ledger.bytes == 65536 + 16777216 + 131072 + 8 == 16973832
    e5m2 = lt_gemm_ledger(1, 4096, 4096, "fp8_e5m2")
    assert (e5m2.x_dtype, e5m2.w_dtype) == ("fp8_e5m2", "fp8_e4m3")
    assert e5m2.bytes == 4096 + 16777216 + 8192 + 8


def test_int8_ledger_is_in_op_with_an_int32_output():
    ledger = lt_gemm_ledger(16, 4096, 4096, "int8")
    assert ledger.work_unit == "OP"  # integer multiply-adds: never drawn against a FLOP/s roof
    assert ledger.flops == 536870912  # 2MNK, in OP
    assert ledger.bytes_y_write == 16 * 4096 * 4 and ledger.bytes_scales == 0
    assert ledger.bytes == 65536 + 16777216 + 262144
    assert ledger.intensity == pytest.approx(536870912 / 17104896)  # OP/B


def test_bf16_ledger_is_cublas_one():
    assert lt_gemm_ledger(8, 64, 32, "bf16") == gemm_ledger(8, 64, 32, "bf16")


def test_work_units_and_tensor_scales():
    assert work_unit("int8") == work_unit("int8", "int4") == "OP"  # W4A8: integer products
    assert work_unit("fp16", "int4") == work_unit("fp8_e4m3") == "FLOP"  # W4A16: float products
    with pytest.raises(ModelError, match="unknown dtype 'int7'"):
        work_unit("int8", "int7")
    assert gemm_ledger(1, 2, 3, "fp8_e4m3", "fp8_e4m3", "fp8_e4m3", tensor_scales=3).bytes == (
        3 + 6 + 2 + 12
    )
    for bad in (-1, 1.5, True):
        with pytest.raises(ModelError, match="tensor_scales must be an integer >= 0"):
            gemm_ledger(1, 2, 3, "fp8_e4m3", tensor_scales=bad)


def test_op_units_are_not_flop_units():
    assert parse_op_rate("1978.9 TOP/s") == 1978.9e12 and parse_op("2 GOP") == 2e9
    assert format_quantity(624e12, "op_rate") == "624 TOP/s"
    for text, parse, says in [
        ("1979 TOPS", parse_op_rate, "write OP/s for a rate"),
        ("1979 TOP/s", parse_flop_rate, "not in FLOP/s"),
        ("1979 TFLOP/s", parse_op_rate, "not in OP/s"),
    ]:
        with pytest.raises(UnitError, match=says):
            parse(text)


def test_datasheet_roofs_for_fp8_and_int8():
    presets = load_device_presets()
    for key in ("h100-sxm", "h200-sxm"):
        assert presets[key].peak_flops_per_s["fp8"] == 1978.9e12  # dense: 3958 sparse / 2
    # integer roofs are in TOP/s under their own key, out of the FLOP/s paths
    from rooflab.config import config_file, load_yaml

    devices = load_yaml(config_file("devices.yaml"))["devices"]
    for key, dense in (("h100-sxm", 1978.9e12), ("h200-sxm", 1978.9e12), ("a100-sxm-80gb", 624e12)):
        assert parse_op_rate(devices[key]["integer_paths"]["int8"]) == dense
        assert "int8" not in presets[key].peak_flops_per_s


# -- tolerances: a correct result passes, wrong ones fail -----------------------------------------


def _fp8_case(m=32, n=64, k=4096, dtype="fp8_e4m3"):
    x, w, scale_x, scale_w = operands(dtype, m, n, k, "nt", seed=11)
    y = run_model(dtype, "nt", x, w, scale_x, scale_w)
    reference, magnitude = dequantised_reference(
        x, w, "nt", dtype, scale_x=scale_x, scale_w=scale_w
    )
    got = bf16_bits_to_float32(np, y).astype(np.float64)
    return x, w, scale_x, scale_w, got, reference, magnitude


def _passed(checks):
    return {c.metric: c.passed for c in checks}


def _round_to_bits(values, bits):
    """Round to `bits` significant bits (nearest), as a narrow accumulator keeps."""
    mantissa, exponent = np.frexp(values)
    return np.ldexp(np.round(mantissa * 2.0**bits) / 2.0**bits, exponent)


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_model_output_and_a_hopper_like_accumulator_pass(dtype):
    x, w, scale_x, scale_w, got, reference, magnitude = _fp8_case(dtype=dtype)
    k = x.shape[1]
    assert all(_passed(compare_with_reference(got, reference, magnitude, dtype, k)).values())
    # a device that keeps 14 bits per 128-element chunk and sums the chunks in fp32
    x64, w64 = decode(x, dtype, "x"), decode(w, dtype, "w")
    total = np.zeros((x.shape[0], w.shape[0]), dtype=np.float32)
    for start in range(0, k, FP8_CHUNK_K):
        chunk = x64[:, start : start + FP8_CHUNK_K] @ w64[:, start : start + FP8_CHUNK_K].T
        total += _round_to_bits(chunk, 14).astype(np.float32)
    coarse = float32_to_bf16_bits(np, (total * np.float32(scale_x * scale_w)).astype(np.float32))
    coarse = bf16_bits_to_float32(np, coarse).astype(np.float64)
    checks = compare_with_reference(coarse, reference, magnitude, dtype, k)
    assert all(_passed(checks).values()), checks


@pytest.mark.parametrize(
    ("wrong", "fails"),
    [
        ("one element 5% of its scale off", "max_componentwise"),
        ("everything 3% high", "rel_frobenius"),
        ("a scale applied twice", "rel_frobenius"),
        ("Y transposed in memory", "rel_frobenius"),
        ("an element left NaN", "finite"),
    ],
)
def test_wrong_fp8_results_fail(wrong, fails):
    x, _, scale_x, _, got, reference, magnitude = _fp8_case()
    bad = got.copy()
    if wrong == "one element 5% of its scale off":
        bad[3, 7] += 0.05 * magnitude[3, 7]
    elif wrong == "everything 3% high":
        bad *= 1.03
    elif wrong == "a scale applied twice":
        bad *= scale_x
    elif wrong == "Y transposed in memory":
        bad = bad.T.reshape(bad.shape)
    else:
        bad[0, 0] = np.nan
    checks = _passed(compare_with_reference(bad, reference, magnitude, "fp8_e4m3", x.shape[1]))
    assert checks[fails] is False  # unaltered, it passes (test_fp8_model_output_and_...[e4m3])


def test_int8_must_be_exact():
    x, w, _, _ = operands("int8", 8, 16, 64, "nt", seed=3)
    y = run_model("int8", "nt", x, w, 1.0, 1.0)
    reference, magnitude = dequantised_reference(x, w, "nt", "int8")
    assert all(_passed(compare_with_reference(y, reference, magnitude, "int8", 64)).values())
    off = y.copy()
    off[2, 5] += 1
    checks = compare_with_reference(off, reference, magnitude, "int8", 64)
    assert _passed(checks)["max_abs_error"] is False and checks[-1].error == 1


def test_bf16_tolerances_are_the_cublas_ones_and_fp8_adds_the_chunk_term():
    from rooflab.experiments.correctness import tolerances

    for k in (1, 300, 4096, 8192):
        assert lt_tolerances("bf16", k) == pytest.approx(tolerances("bf16", k), rel=1e-15)
    fp8 = lt_tolerances("fp8_e4m3", 4096)
    assert fp8["rel_frobenius"] == pytest.approx(
        2 * 2**-8 + 4 * math.sqrt(33) * 2**-23 + 4 * math.sqrt(128) * 2**-13
    )
    assert fp8["max_componentwise"] == pytest.approx(2**-8 + 34 * 2**-23 + 128 * 2**-13)
    assert lt_tolerances("int8", 4096) == {"max_abs_error": 0.0}
    small = lt_tolerances("fp8_e4m3", 32)  # one chunk of 32
    assert small["max_componentwise"] == pytest.approx(2**-8 + 3 * 2**-23 + 32 * 2**-13)
