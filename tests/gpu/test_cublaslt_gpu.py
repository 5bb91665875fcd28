"""FP8, INT8 and bf16 through cuBLASLt on a real GPU, with nvmath-python's low-level binding
(nvmath.bindings.cublasLt) and CuPy arrays of bit patterns (uint8 for FP8, int8, uint16 for bf16):
each dtype against the dequantised float64 reference and rooflab.backends.cublaslt_args'
tolerances (int8 exactly), the layouts cuBLASLt itself refuses, and one timing smoke check of FP8,
int8 and bf16 through cuBLASLt beside bf16 through cuBLAS (the faster bf16 is the ceiling).

Why the low-level binding: nvmath.linalg.advanced.Matmul takes its types from the operands'
dtypes, and CuPy has no float8 dtype (a uint8 array would be CUDA_R_8U), and Matmul has no
integer GEMM; the binding takes raw device pointers and cudaDataType_t values.

Skipped without a CUDA device (tests/gpu/conftest.py) and without an importable nvmath-python.
Run with -s to see the errors and rates it prints ("cublaslt: ..."); those are measurements of
the machine it ran on, nothing here is a recorded result.
"""

import dataclasses
import statistics

import numpy as np
import pytest

from rooflab.backends.base import BackendError
from rooflab.backends.bfloat16 import BF16_NAN_BITS, bf16_bits_to_float32, float32_to_bf16_bits
from rooflab.backends.cublaslt_args import (
    LT_GEMM_TYPES,
    OP_N,
    LtGemm,
    LtTypes,
    check_pointer_alignment,
    compare_with_reference,
    dequantised_reference,
    lt_gemm_ledger,
    lt_matmul_model,
    row_major_lt_gemm,
)
from rooflab.backends.fp8 import float_to_fp8_bits
from rooflab.backends.random_operands import random_nonzero
from rooflab.config import config_file, load_yaml
from rooflab.devices import matching_preset
from rooflab.units import parse_op_rate

WORKSPACE_BYTES = 32 << 20  # cuBLAS's recommendation for Hopper
INT32_POISON = -(2**31)  # no int8 GEMM here reaches it (|Y| <= 128·128·K = 2^26 at K = 4096)
SCALES = {"x": 3.0 / 448, "w": 0.02 / 448}  # amax / largest e4m3 code, as a quantiser sets them
SAMPLED = 256  # rows and columns of a large result compared with the host reference


@pytest.fixture(scope="module")
def lt():
    """(cublasLt, cublas, CudaDataType, handle) of nvmath-python, or a skip that says why."""
    try:
        import nvmath
        from nvmath.bindings import cublas, cublasLt
    except Exception as error:  # absent, or its CUDA bindings (cuda-bindings) missing
        pytest.skip(f"nvmath-python not importable: {type(error).__name__}: {error}")
    handle = cublasLt.create()
    yield cublasLt, cublas, nvmath.CudaDataType, handle
    cublasLt.destroy(handle)


class LtPlan:
    """One cublasLtMatmul ready to run: descriptors, the heuristic's best algorithm, workspace.
    A = W, B = X, C = D = Y (beta = 0), on `stream_ptr`."""

    def __init__(self, lt, types: LtTypes, gemm: LtGemm, x, w, y, scales, stream_ptr, workspace):
        cublasLt, cublas, data_type, handle = lt
        self._lt, self._made = cublasLt, []
        compute = int(getattr(cublas.ComputeType, types.compute_type))
        scale_type = int(getattr(data_type, types.scale_type))
        desc = self._make(cublasLt.matmul_desc_create(compute, scale_type), "matmul_desc")
        settings = [("TRANSA", gemm.transa), ("TRANSB", gemm.transb)]
        settings += [(name, scales[operand].data.ptr) for name, operand in types.scale_pointers]
        for name, value in settings:
            self._set("matmul_desc", desc, cublasLt.MatmulDescAttribute[name], value)
        a, b, d = (
            self._make(
                cublasLt.matrix_layout_create(int(getattr(data_type, kind)), *shape, ld),
                "matrix_layout",
            )
            for kind, shape, ld in (
                (types.a_type, gemm.a_shape, gemm.lda),
                (types.b_type, gemm.b_shape, gemm.ldb),
                (types.d_type, gemm.d_shape, gemm.ldd),
            )
        )
        preference = self._make(cublasLt.matmul_preference_create(), "matmul_preference")
        workspace_attribute = cublasLt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES
        self._set("matmul_preference", preference, workspace_attribute, workspace.nbytes)
        # algo is the first member of cublasLtMatmulHeuristicResult_t: its address is the
        # result's address
        self._result = cublasLt.MatmulHeuristicResult()
        found = np.zeros(1, dtype=np.int32)
        try:  # no algorithm: a zero count, or CUBLAS_STATUS_NOT_SUPPORTED raised
            cublasLt.matmul_algo_get_heuristic(
                handle, desc, a, b, d, d, preference, 1, self._result.ptr, found.ctypes.data
            )
        except cublasLt.cuBLASLtError:
            self.close()
            raise
        if found[0] == 0:
            self.close()
            raise BackendError(f"cuBLASLt found no algorithm for {types.description}, {gemm}")
        self._alpha = np.ones(1, dtype=types.scalar_dtype)
        self._beta = np.zeros(1, dtype=types.scalar_dtype)
        self._keep = (x, w, y, scales, workspace)  # alive as long as the plan
        alpha, beta = self._alpha.ctypes.data, self._beta.ctypes.data
        self._args = (handle, desc, alpha, w.data.ptr, a, x.data.ptr, b, beta, y.data.ptr, d)
        self._args += (y.data.ptr, d, self._result.ptr, workspace.data.ptr, workspace.nbytes)
        self._args += (stream_ptr,)

    def _make(self, made, kind: str):
        self._made.append((getattr(self._lt, f"{kind}_destroy"), made))
        return made

    def _set(self, kind: str, target, attribute, value) -> None:
        """cublasLt{kind}SetAttribute with a host buffer of the attribute's own type."""
        dtype = getattr(self._lt, f"get_{kind}_attribute_dtype")(attribute)
        buffer = np.array([value], dtype=dtype)
        getattr(self._lt, f"{kind}_set_attribute")(
            target, attribute, buffer.ctypes.data, buffer.itemsize
        )

    def __call__(self) -> None:
        self._lt.matmul(*self._args)

    def close(self) -> None:
        while self._made:
            destroy, made = self._made.pop()
            destroy(made)


def device_operands(dtype: str, m: int, n: int, k: int, layout: str, seed: int):
    """X, W (stored as cuBLASLt reads them), a poisoned Y and the device scales."""
    import cupy

    types = LT_GEMM_TYPES[dtype]
    w_shape = (k, n) if layout == "nn" else (n, k)
    x_real = random_nonzero(cupy, (m, k), seed, stream=0)
    w_real = random_nonzero(cupy, w_shape, seed, stream=1)
    if dtype == "int8":
        x, w = (cupy.floor(v * 128).astype(cupy.int8) for v in (x_real, w_real))
    elif dtype == "bf16":
        x, w = (float32_to_bf16_bits(cupy, v.astype(cupy.float32)) for v in (x_real, w_real))
    else:
        x_fmt, w_fmt = (d.removeprefix("fp8_") for d in types.ledger_dtypes[:2])
        x = float_to_fp8_bits(cupy, 3.0 * x_real / SCALES["x"], x_fmt, saturate=True)
        w = float_to_fp8_bits(cupy, 0.02 * w_real / SCALES["w"], w_fmt, saturate=True)
    y = cupy.full((m, n), INT32_POISON if types.integer else BF16_NAN_BITS, dtype=types.y_storage)
    scales = {name: cupy.asarray([value], dtype=cupy.float32) for name, value in SCALES.items()}
    return x, w, y, scales


def run(lt, cuda, dtype, m, n, k, layout, seed=1):
    import cupy

    gemm = row_major_lt_gemm(m, n, k, layout, dtype, cuda.compute_capability)
    with cuda._stream:  # the backend's measuring stream
        x, w, y, scales = device_operands(dtype, m, n, k, layout, seed)
        workspace = cupy.empty(WORKSPACE_BYTES, dtype=cupy.uint8)
    for name, array in (("X", x), ("W", w), ("Y", y)):
        check_pointer_alignment(dtype, name, array.data.ptr)
    plan = LtPlan(lt, LT_GEMM_TYPES[dtype], gemm, x, w, y, scales, cuda._stream.ptr, workspace)
    plan()
    cuda.synchronize()
    return plan, gemm, x, w, y


def host_result(dtype, y) -> np.ndarray:
    host = y.get()
    return host.astype(np.int64) if dtype == "int8" else bf16_bits_to_float32(np, host)


def _scales(dtype):
    return (SCALES["x"], SCALES["w"]) if LT_GEMM_TYPES[dtype].scale_pointers else (1.0, 1.0)


CASES = (
    [(dtype, "nt", 1, 64, 128) for dtype in LT_GEMM_TYPES]
    + [(dtype, "nt", 17, 48, 96) for dtype in LT_GEMM_TYPES]
    + [("bf16", "nn", 5, 40, 24), ("bf16", "nn", 127, 4097, 1000), ("bf16", "nt", 127, 4097, 1000)]
)


@pytest.mark.parametrize(("dtype", "layout", "m", "n", "k"), CASES)
def test_small_gemms_match_the_numpy_model(lt, cuda, dtype, layout, m, n, k):
    plan, gemm, x, w, y = run(lt, cuda, dtype, m, n, k, layout)
    plan.close()
    scale_x, scale_w = _scales(dtype)
    x_host, w_host = x.get(), w.get()
    reference, magnitude = dequantised_reference(
        x_host, w_host, layout, dtype, scale_x=scale_x, scale_w=scale_w
    )
    got = host_result(dtype, y)
    checks = compare_with_reference(got, reference, magnitude, dtype, k)
    print(f"cublaslt: {dtype} {layout} m{m} n{n} k{k}: {checks}")
    assert all(c.passed for c in checks), checks
    # the model of the same call, read through the same arguments
    model = lt_matmul_model(
        gemm, dtype, a=w_host.ravel(), b=x_host.ravel(), **_model_scales(dtype)
    ).reshape(m, n)
    if dtype == "int8":
        np.testing.assert_array_equal(y.get(), model)
    else:
        same = np.mean(y.get() == model)
        print(f"cublaslt: {dtype} {layout} m{m} n{n} k{k}: {same:.1%} of bf16 outputs bit-equal")


def _model_scales(dtype):
    scale_x, scale_w = _scales(dtype)
    if not LT_GEMM_TYPES[dtype].scale_pointers:
        return {}
    of = {"x": scale_x, "w": scale_w}
    pointers = dict(LT_GEMM_TYPES[dtype].scale_pointers)
    return {"scale_a": of[pointers["A_SCALE_POINTER"]], "scale_b": of[pointers["B_SCALE_POINTER"]]}


@pytest.mark.parametrize("dtype", list(LT_GEMM_TYPES))
def test_4096_cubed_is_correct_on_sampled_rows_and_columns(lt, cuda, dtype):
    import cupy

    n = 4096
    plan, _, x, w, y = run(lt, cuda, dtype, n, n, n, "nt", seed=2)
    plan.close()
    rng = np.random.default_rng(0)
    rows = np.sort(np.append(rng.choice(n - 1, SAMPLED - 1, replace=False), n - 1))
    cols = np.sort(np.append(rng.choice(n - 1, SAMPLED - 1, replace=False), n - 1))
    scale_x, scale_w = _scales(dtype)
    x_rows, w_rows = x[cupy.asarray(rows)].get(), w[cupy.asarray(cols)].get()  # W is N×K
    reference, magnitude = dequantised_reference(
        x_rows, w_rows, "nt", dtype, scale_x=scale_x, scale_w=scale_w
    )
    whole = host_result(dtype, y)
    if dtype != "int8":
        assert np.all(np.isfinite(whole)), "unwritten (NaN-poisoned) or non-finite outputs"
    else:
        assert not np.any(whole == INT32_POISON), "unwritten (poisoned) outputs"
    checks = compare_with_reference(whole[np.ix_(rows, cols)], reference, magnitude, dtype, n)
    print(f"cublaslt: {dtype} 4096^3 sampled {SAMPLED}x{SAMPLED}: {checks}")
    assert all(c.passed for c in checks), checks


@pytest.mark.parametrize(
    ("what", "types", "transa"),
    [
        ("fp8 layout nn (not TN)", LT_GEMM_TYPES["fp8_e4m3"], OP_N),
        ("int8 layout nn (not TN)", LT_GEMM_TYPES["int8"], OP_N),
        (
            "e5m2 x e5m2",
            dataclasses.replace(
                LT_GEMM_TYPES["fp8_e5m2"], a_type="CUDA_R_8F_E5M2", description="e5m2 x e5m2"
            ),
            None,
        ),
    ],
)
def test_what_the_mapping_refuses_cublaslt_refuses_too(lt, cuda, what, types, transa):
    """The mapping's refusals are cuBLASLt's own rules on this device (Hopper: FP8 and IMMA take
    only TN; no e5m2 x e5m2): asked anyway, cuBLASLt finds no algorithm or rejects the call."""
    import cupy

    if cuda.compute_capability >= 100 and "fp8 layout" in what:
        pytest.skip("data-centre Blackwell runs FP8 in every layout")
    m = n = k = 256
    gemm = row_major_lt_gemm(m, n, k, "nt", "fp8_e4m3" if "e5m2" in what else "bf16")
    if transa is not None:  # nn as the mapping would have made it, had it allowed it
        gemm = LtGemm(OP_N, OP_N, n, m, k, lda=n, ldb=k, ldd=n)
    storage = {"uint8": cupy.uint8, "int8": cupy.int8}[types.x_storage]
    with cuda._stream:
        x = cupy.ones((m, k), dtype=storage)
        w = cupy.ones((k, n), dtype=storage)
        y = cupy.zeros((m, n), dtype=types.y_storage)
        scales = {name: cupy.ones(1, dtype=cupy.float32) for name in SCALES}
        workspace = cupy.empty(WORKSPACE_BYTES, dtype=cupy.uint8)
    cublasLt = lt[0]
    with pytest.raises((BackendError, cublasLt.cuBLASLtError)) as caught:
        plan = LtPlan(lt, types, gemm, x, w, y, scales, cuda._stream.ptr, workspace)
        try:
            plan()
            cuda.synchronize()
        finally:
            plan.close()
    print(f"cublaslt: {what} refused by cuBLASLt: {caught.value}")


def _datasheet(cuda, path: str) -> float | None:
    preset = matching_preset(cuda.device_name)
    if preset is None:
        return None
    if path == "int8_tensor":
        entry = load_yaml(config_file("devices.yaml"))["devices"][preset.key]
        text = entry.get("integer_paths", {}).get("int8")
        return parse_op_rate(text) if text else None
    return preset.peak_flops_per_s.get(path.removesuffix("_tensor"))


def test_timing_smoke_fp8_int8_and_bf16_beside_cublas(lt, cuda):
    """One timing pass at 4096^3 and 8192^3 (warm, median of 30 event-timed calls): every rate
    below the datasheet (a rate above it means miscounted work), and printed for the record.
    Not the ceilings: those come from the library ceilings experiment once it is wired."""
    lines = []
    for size in (4096, 8192):
        calls = {}
        cublas_ops = cuda.gemm_operands(size, size, size, "bf16", "nt", seed=3)
        calls["bf16 cuBLAS gemmEx"] = ("bf16", lambda ops=cublas_ops: cuda.matmul(ops))
        plans = []
        for dtype in LT_GEMM_TYPES:
            plan, *_ = run(lt, cuda, dtype, size, size, size, "nt", seed=3)
            plans.append(plan)
            calls[f"{dtype} cuBLASLt"] = (dtype, plan)
        for label, (dtype, call) in calls.items():
            for _ in range(10):
                call()
            cuda.synchronize()
            seconds = statistics.median(cuda.time_call(call) for _ in range(30))
            ledger = lt_gemm_ledger(size, size, size, dtype)
            rate = ledger.flops / seconds
            path = LT_GEMM_TYPES[dtype].path
            peak = _datasheet(cuda, path)
            unit = f"T{ledger.work_unit}/s"
            share = f"{rate / peak:.0%} of datasheet" if peak else "no datasheet preset"
            lines.append(
                f"cublaslt: {size}^3 {label:22s} {seconds * 1e6:9.1f} us "
                f"{rate / 1e12:8.1f} {unit} ({share})"
            )
            if peak:
                assert rate < 1.05 * peak, lines[-1]
        for plan in plans:
            plan.close()
        del cublas_ops
    print("\n".join(lines))
