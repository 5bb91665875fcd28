"""The CUDA backend's pure parts, tested without a GPU: bf16 bit patterns, the cuBLAS arguments of
a row-major GEMM, device-side random inputs, correctness checks on bf16/fp16/tf32 results, the
FMA and stream accounting, and how a missing GPU is reported."""

import math
import re
import struct
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rooflab.backends.base import BackendError
from rooflab.backends.bfloat16 import (
    BF16_NAN_BITS,
    bf16_bits_to_float32,
    count_non_finite_bf16,
    float32_to_bf16_bits,
)
from rooflab.backends.cublas_args import GEMM_TYPES, OP_N, OP_T, row_major_gemm
from rooflab.backends.cuda_identity import version_text as _version_text
from rooflab.backends.cuda_kernels import (
    FMA_FP16,
    FMA_FP32,
    FMA_FP64,
    STREAM_ARRAYS,
    check_reps,
    fma_flops_per_iteration,
    fma_kernel_shape,
    kernel_source,
    pack_half2,
    stream_function,
    stream_vectors,
)
from rooflab.backends.random_operands import random_nonzero
from rooflab.backends.selection import cuda_problem, select_backend
from rooflab.experiments.correctness import check_gemm

# -- bfloat16 -------------------------------------------------------------------------------------


def _bf16_reference(value: float) -> int:
    """Round-to-nearest-even to bfloat16, by choosing between the two neighbours in float64."""
    (bits,) = struct.unpack("<I", struct.pack("<f", value))
    if math.isnan(value):
        return BF16_NAN_BITS
    low = bits >> 16
    if bits & 0xFFFF == 0:
        return low
    high = low + 1
    as_float = lambda b: struct.unpack("<f", struct.pack("<I", b << 16))[0]  # noqa: E731
    lower, upper = as_float(low), as_float(high) if (high & 0x7F80) != 0x7F80 else math.inf
    if (high & 0x7F80) == 0x7F80:  # the upper neighbour is infinity: compare against 2^128
        upper = math.copysign(2.0**128, value)
    below, above = abs(value - lower), abs(upper - value)
    if below < above:
        return low
    if above < below:
        return high
    return low if low % 2 == 0 else high


def test_bf16_rounding_matches_an_independent_reference():
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, size=20000, dtype=np.uint64).astype(np.uint32)
    specials = np.array([1.0, 1.00390625, 1.005859375, -0.0, 0.0, 3.4e38, -3.4e38, 1e-45, 65504.0])
    values = np.concatenate([bits.view(np.float32), specials.astype(np.float32)])
    values = values[np.isfinite(values)]
    got = float32_to_bf16_bits(np, values)
    want = np.array([_bf16_reference(float(v)) for v in values], dtype=np.uint16)
    assert np.array_equal(got, want)


def test_bf16_ties_go_to_even_and_nan_stays_nan():
    ties = np.array([1.00390625, 1.01171875], dtype=np.float32)  # halfway 0x3f80/81, 0x3f81/82
    assert [hex(b) for b in float32_to_bf16_bits(np, ties)] == ["0x3f80", "0x3f82"]
    nan = float32_to_bf16_bits(np, np.array([np.nan, -np.nan], dtype=np.float32))
    assert np.isnan(bf16_bits_to_float32(np, nan)).all()


@given(st.integers(0, 2**16 - 1))
def test_every_bf16_value_survives_a_round_trip(pattern):
    bits = np.array([pattern], dtype=np.uint16)
    value = bf16_bits_to_float32(np, bits)
    if np.isnan(value[0]):
        assert np.isnan(bf16_bits_to_float32(np, float32_to_bf16_bits(np, value)))[0]
    else:
        assert float32_to_bf16_bits(np, value)[0] == pattern


def test_bf16_non_finite_count():
    bits = float32_to_bf16_bits(np, np.array([1, np.inf, -np.inf, np.nan, 0, 2], np.float32))
    assert count_non_finite_bf16(np, bits) == 3
    assert count_non_finite_bf16(np, np.full(10, BF16_NAN_BITS, dtype=np.uint16)) == 10


# -- cuBLAS arguments -----------------------------------------------------------------------------


def _column_major_gemm(a_flat, b_flat, call):
    """What cublasGemmEx computes, in numpy: C = op(A)·op(B), column-major, leading dimensions."""

    def matrix(flat, ld, rows, cols):  # column-major rows x cols with leading dimension ld
        return np.lib.stride_tricks.as_strided(
            flat, shape=(rows, cols), strides=(flat.itemsize, ld * flat.itemsize)
        )

    a_rows, a_cols = (call.m, call.k) if call.transa == OP_N else (call.k, call.m)
    b_rows, b_cols = (call.k, call.n) if call.transb == OP_N else (call.n, call.k)
    a = matrix(a_flat, call.lda, a_rows, a_cols)
    b = matrix(b_flat, call.ldb, b_rows, b_cols)
    a = a if call.transa == OP_N else a.T
    b = b if call.transb == OP_N else b.T
    c = a @ b  # m x n
    out = np.zeros(call.ldc * call.n)
    out.reshape(call.n, call.ldc)[:, : call.m] = c.T  # column j at j * ldc
    return out


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize(("m", "n", "k"), [(1, 7, 5), (17, 3, 9), (4, 4, 4), (33, 65, 1)])
def test_row_major_gemm_arguments_compute_y_equals_x_w(layout, m, n, k):
    rng = np.random.default_rng(m * 100 + n * 10 + k)
    x = rng.standard_normal((m, k))
    w = rng.standard_normal((k, n) if layout == "nn" else (n, k))
    call = row_major_gemm(m, n, k, layout)
    # cuBLAS's A is W's buffer and B is X's buffer, both as stored (row-major, C order).
    y_flat = _column_major_gemm(w.ravel(), x.ravel(), call)
    y = y_flat.reshape(m, n)  # C read back row-major, leading dimension N
    expected = x @ (w if layout == "nn" else w.T)
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)


def test_row_major_gemm_refuses_nonsense():
    with pytest.raises(ValueError, match="layout"):
        row_major_gemm(2, 2, 2, "tn")
    with pytest.raises(ValueError, match="positive"):
        row_major_gemm(0, 2, 2, "nn")


def test_cublas_names_exist_in_the_installed_cupy():
    pytest.importorskip("cupy")
    from cupy.cuda import runtime

    try:
        from cupy_backends.cuda.libs import cublas
    except ImportError as error:  # libcublas not installed on this machine
        pytest.skip(f"cuBLAS library not loadable: {error}")
    assert (OP_N, OP_T) == (cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_T)
    assert set(GEMM_TYPES) == {"fp64", "fp32", "tf32", "fp16", "bf16"}
    for types in GEMM_TYPES.values():
        assert isinstance(getattr(runtime, types.data_type), int)
        assert isinstance(getattr(cublas, types.compute_type), int)
        assert np.dtype(types.scalar_dtype).kind == "f"
        assert np.dtype(types.storage).itemsize in (2, 4, 8)
    assert GEMM_TYPES["bf16"].data_type == "CUDA_R_16BF"
    assert GEMM_TYPES["tf32"].compute_type == "CUBLAS_COMPUTE_32F_FAST_TF32"
    assert GEMM_TYPES["fp32"].compute_type == "CUBLAS_COMPUTE_32F"  # never TF32 for fp32


# -- random inputs --------------------------------------------------------------------------------


def test_random_inputs_are_nonzero_signed_and_reproducible():
    a = random_nonzero(np, (300, 200), seed=5, stream=0)
    assert a.shape == (300, 200) and a.dtype == np.float64
    assert np.abs(a).min() >= 0.5 and np.abs(a).max() < 1.0
    assert 0.45 < (a < 0).mean() < 0.55
    assert np.array_equal(a, random_nonzero(np, (300, 200), seed=5, stream=0))
    other = random_nonzero(np, (300, 200), seed=5, stream=1)
    assert abs(np.corrcoef(a.ravel(), other.ravel())[0, 1]) < 0.02
    assert not np.array_equal(a, random_nonzero(np, (300, 200), seed=6, stream=0))
    hist, _ = np.histogram(np.abs(a), bins=10, range=(0.5, 1.0))
    assert hist.min() > 0.8 * hist.mean()  # uniform magnitudes


# -- correctness of low-precision results (the CUDA dtypes, emulated on the host) -----------------


def _operands(m, n, k, seed=1):
    return random_nonzero(np, (m, k), seed, 0), random_nonzero(np, (k, n), seed, 1)


def _round_tf32(values: np.ndarray) -> np.ndarray:
    bits = values.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0xFFF) + ((bits >> 13) & np.uint32(1))) & np.uint32(0xFFFFE000)
    return rounded.view(np.float32)


def test_bf16_gemm_with_fp32_accumulation_passes_and_a_dropped_term_fails():
    x, w = _operands(40, 24, 1024)
    xb, wb = float32_to_bf16_bits(np, x), float32_to_bf16_bits(np, w)
    xf, wf = bf16_bits_to_float32(np, xb), bf16_bits_to_float32(np, wb)
    y = float32_to_bf16_bits(np, xf @ wf)  # fp32 accumulate, bf16 output
    checks, _, _ = check_gemm(xb, wb, y, "nn", "bf16")
    assert all(c.passed for c in checks), checks
    dropped = float32_to_bf16_bits(np, xf[:, 1:] @ wf[1:])
    checks, _, _ = check_gemm(xb, wb, dropped, "nn", "bf16")
    assert not all(c.passed for c in checks)
    poisoned = y.copy()
    poisoned[-1, -1] = BF16_NAN_BITS
    assert not check_gemm(xb, wb, poisoned, "nn", "bf16")[0][0].passed


def test_bf16_nt_layout_is_checked_against_w_transposed():
    x, w = _operands(9, 13, 256)
    xb, wb_t = float32_to_bf16_bits(np, x), float32_to_bf16_bits(np, w.T.copy())
    xf, wf_t = bf16_bits_to_float32(np, xb), bf16_bits_to_float32(np, wb_t)
    good = float32_to_bf16_bits(np, xf @ wf_t.T)
    assert all(c.passed for c in check_gemm(xb, wb_t, good, "nt", "bf16")[0])
    wrong = float32_to_bf16_bits(np, xf @ wf_t[::-1].T)  # rows of W in the wrong order
    assert not all(c.passed for c in check_gemm(xb, wb_t, wrong, "nt", "bf16")[0])


def test_fp16_gemm_passes_its_tolerance():
    x, w = _operands(32, 32, 2048)
    x16, w16 = x.astype(np.float16), w.astype(np.float16)
    y = (x16.astype(np.float32) @ w16.astype(np.float32)).astype(np.float16)
    assert all(c.passed for c in check_gemm(x16, w16, y, "nn", "fp16")[0])


def _truncate_tf32(values: np.ndarray) -> np.ndarray:
    return (values.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.parametrize("to_tf32", [_round_tf32, _truncate_tf32], ids=["rounded", "truncated"])
def test_tf32_products_pass_tf32_and_fail_fp32(to_tf32):
    """A GEMM that silently used TF32 for an fp32 request is caught by the fp32 tolerance; TF32
    passes its own whether the hardware rounds its inputs or truncates them (biased: the worst)."""
    x, w = _operands(32, 32, 4096)
    x32, w32 = x.astype(np.float32), w.astype(np.float32)
    y = (to_tf32(x32).astype(np.float64) @ to_tf32(w32).astype(np.float64)).astype(np.float32)
    assert all(c.passed for c in check_gemm(x32, w32, y, "nn", "tf32")[0])
    by_metric = {c.metric: c for c in check_gemm(x32, w32, y, "nn", "fp32")[0]}
    assert not by_metric["rel_frobenius"].passed


# -- kernel accounting ----------------------------------------------------------------------------


def test_fma_flops_follow_the_kernel_constants():
    chains, repeat = fma_kernel_shape()
    assert (chains, repeat) == (8, 64)
    assert fma_flops_per_iteration("fp32", 1000) == 2 * 8 * 64 * 1000
    assert fma_flops_per_iteration("fp64", 1) == 1024
    assert fma_flops_per_iteration("fp16", 1) == 2048  # half2: two lanes per FMA


def test_stream_byte_counts_follow_the_kernels_arrays():
    """Bytes per pass = arrays x n x 16: each stream kernel, in both forms, takes as many double2
    arrays as STREAM_ARRAYS counts for it (read: a; copy: a -> b; triad: b, c -> a), and no
    other; the one-pass form takes no count of passes (the host launches it once per pass)."""
    source = kernel_source("stream")
    names = set()
    for kernel, arrays in STREAM_ARRAYS.items():
        for one_pass in (False, True):
            name = stream_function(kernel, one_pass)
            match = re.search(rf"__global__ void {name}\(([^)]*)\)", source)
            assert match, name
            assert match.group(1).count("double2*") == arrays, name
            assert ("int reps" in match.group(1)) != one_pass, name
            names.add(name)
    assert set(re.findall(r"__global__ void (stream_\w+)\(", source)) == names


@pytest.mark.parametrize(
    ("dtype", "start", "constants"),
    [
        (np.float64, 1.0 + 1e-3 * np.arange(8), FMA_FP64),
        (np.float32, 1.0 + 1e-3 * np.arange(8), FMA_FP32),
        (np.float16, 1.0 + 2.0**-10 * np.arange(8), FMA_FP16[:2]),
    ],
)
def test_fma_chains_stay_near_their_fixed_point_one(dtype, start, constants):
    """acc = acc * x + y converges to y / (1 - x) = 1: the FMA kernels' chains neither overflow
    nor sink into subnormals however long they run (checked here in the kernel's dtype)."""
    x, y = (dtype(c) for c in constants)
    assert float(y) / (1 - float(x)) == pytest.approx(1.0, rel=1e-3)
    acc = start.astype(dtype)
    for _ in range(20_000):
        acc = (acc * x + y).astype(dtype)
    assert np.all((acc >= 0.99) & (acc <= 1.01)), acc


def test_half2_constants_hold_the_same_fp16_value_in_both_lanes():
    assert pack_half2(np.float16(1.0)) == 0x3C00_3C00
    x, y, start = (pack_half2(v) for v in FMA_FP16)
    assert (x >> 16, y >> 16, start >> 16) == (x & 0xFFFF, y & 0xFFFF, start & 0xFFFF)
    assert np.uint16(x & 0xFFFF).view(np.float16) == np.float16(1 - 2.0**-11)


def test_reps_must_fit_the_kernels_int():
    for reps in (1, 2**31 - 1):
        check_reps(reps)
    for reps in (0, -1, 2**31):
        with pytest.raises(BackendError, match=rf"reps must be in \[1, 2\^31\), got {reps}"):
            check_reps(reps)


def test_cuda_integer_versions_read_as_major_minor():
    texts = {12040: "12.4", 12090: "12.9", 13000: "13.0", 11080: "11.8"}
    assert {version: _version_text(version) for version in texts} == texts


@pytest.mark.parametrize("kernel", list(STREAM_ARRAYS))
def test_stream_vectors_give_every_thread_the_same_share(kernel):
    threads, vector_bytes = 132 * 2048, 16 * STREAM_ARRAYS[kernel]  # a double2 in each array
    for working_set in (1 << 20, 50 << 20, 400 << 20, 1 << 30):
        n = stream_vectors(kernel, working_set, threads)
        assert n * vector_bytes <= working_set
        if working_set >= vector_bytes * threads:
            assert n % threads == 0
            assert n * vector_bytes > working_set - vector_bytes * threads
        else:
            assert n % 32 == 0
    assert stream_vectors(kernel, 16, threads) == 32  # never empty
    with pytest.raises(BackendError, match="unknown stream kernel"):
        stream_vectors("scale", 1 << 20, threads)


# -- no GPU here ----------------------------------------------------------------------------------


def _no_gpu_here():
    if cuda_problem() is None:
        pytest.skip("a CUDA device is usable here; these tests describe a machine without one")


def test_backend_cuda_without_a_gpu_is_one_clear_error():
    _no_gpu_here()
    with pytest.raises(BackendError) as raised:
        select_backend("cuda")
    message = str(raised.value)
    assert message.startswith("backend cuda asked for, but no usable CUDA device: looked for")
    assert "; found: " in message and "\n" not in message


def _a_driver_but_no_cupy(monkeypatch):
    from rooflab.backends import selection

    monkeypatch.setattr(selection, "NVIDIA_DRIVER_NODES", ("/",))  # a driver node, say
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError


def test_backend_cuda_without_cupy_says_so(monkeypatch):
    _a_driver_but_no_cupy(monkeypatch)
    with pytest.raises(BackendError, match=r"looked for CuPy \(pip install cupy-cuda13x"):
        select_backend("cuda")


def test_auto_falls_back_to_cpu_and_says_why(monkeypatch, capsys):
    _a_driver_but_no_cupy(monkeypatch)
    backend = select_backend("auto")
    assert backend.name == "cpu" and backend.backend_requested == "auto"
    assert backend.backend_note.startswith("auto: no CUDA device (looked for CuPy")
    assert backend.backend_note.endswith("fell back to cpu")
    assert "fell back to cpu" in capsys.readouterr().err
    assert select_backend("cpu").backend_note is None


def test_without_the_nvidia_drivers_nodes_cupy_is_not_imported_to_find_no_gpu():
    """No /dev/nvidiactl, /proc/driver/nvidia, /dev/dxg: no CUDA device, said without importing
    CuPy (0.7 s a job); with one of them (here "/" stands in) CuPy is asked as before."""
    code = """
import sys
from rooflab.backends import selection
selection.NVIDIA_DRIVER_NODES = ("/nonexistent/nvidiactl",)
print(selection.cuda_problem())
print("cupy" in sys.modules)
selection.NVIDIA_DRIVER_NODES = ("/",)
problem = selection.cuda_problem()
print(problem is None or "NVIDIA driver" not in problem)
"""
    if not sys.platform.startswith("linux"):
        pytest.skip("the driver's nodes are looked for on Linux only")
    lines = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert lines == [
        "looked for the NVIDIA driver (/nonexistent/nvidiactl); found: none of them",
        "False",
        "True",
    ]
