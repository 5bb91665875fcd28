"""FP8, INT8 and bf16 through cuBLASLt on a real GPU, with nvmath-python's low-level binding
(nvmath.bindings.cublasLt) and CuPy arrays of bit patterns (uint8 for FP8, int8, uint16 for bf16):
each dtype against the dequantised float64 reference and rooflab.backends.cublaslt_args'
tolerances (int8 exactly), the layouts cuBLASLt itself refuses, and one timing smoke check of FP8,
int8 and bf16 through cuBLASLt beside bf16 through cuBLAS (the faster bf16 is the ceiling).

The runner (LtPlan) and the operands (lt_arrays) are rooflab.backends.cublaslt's, which the CUDA
backend uses for its FP8 and int8 GEMMs; the last tests run those through the backend itself
(gemm_operands, matmul, a weight-reuse sweep through experiments.gemm).

Skipped without a CUDA device (tests/gpu/conftest.py) and without an importable nvmath-python.
Run with -s to see the errors and rates it prints ("cublaslt: ..."); those are measurements of
the machine it ran on, nothing here is a recorded result.
"""

import dataclasses
import statistics

import numpy as np
import pytest

from rooflab.backends.base import BackendError
from rooflab.backends.bfloat16 import bf16_bits_to_float32
from rooflab.backends.cublas_args import OP_N
from rooflab.backends.cublaslt import WORKSPACE_BYTES, LtPlan, load_binding, lt_arrays
from rooflab.backends.cublaslt_args import (
    INT32_POISON,
    LT_GEMM_TYPES,
    LtGemm,
    check_pointer_alignment,
    compare_with_reference,
    dequantised_reference,
    lt_gemm_ledger,
    lt_matmul_model,
    row_major_lt_gemm,
)
from rooflab.config import config_file, load_yaml
from rooflab.devices import matching_preset
from rooflab.experiments.correctness import check_gemm
from rooflab.experiments.gemm import run_gemm_sweep
from rooflab.experiments.timing import TimingSettings
from rooflab.records import to_table
from rooflab.units import parse_op_rate

SAMPLED = 256  # rows and columns of a large result compared with the host reference


@pytest.fixture(scope="module")
def lt():
    """nvmath-python's cuBLASLt binding and a handle (rooflab.backends.cublaslt.LtBinding), or a
    skip that says why."""
    try:
        binding = load_binding()
    except BackendError as error:  # absent, or its CUDA bindings (cuda-bindings) missing
        pytest.skip(str(error))
    yield binding
    binding.cublasLt.destroy(binding.handle)


def run(lt, cuda, dtype, m, n, k, layout, seed=1):
    """One GEMM through LtPlan on the backend's stream: (plan, gemm, x, w, y, scales)."""
    import cupy

    gemm = row_major_lt_gemm(m, n, k, layout, dtype, cuda.compute_capability)
    with cuda._stream:  # the backend's measuring stream
        arrays = lt_arrays(cupy, dtype, m, n, k, layout, seed)
        workspace = cupy.empty(WORKSPACE_BYTES, dtype=cupy.uint8)
    x, w, y = arrays.x, arrays.w, arrays.y
    for name, array in (("X", x), ("W", w), ("Y", y)):
        check_pointer_alignment(dtype, name, array.data.ptr)
    types = LT_GEMM_TYPES[dtype]
    plan = LtPlan(lt, types, gemm, x, w, y, arrays.device_scales, cuda._stream.ptr, workspace)
    plan()
    cuda.synchronize()
    return plan, gemm, x, w, y, arrays.scales or (1.0, 1.0)


def host_result(dtype, y) -> np.ndarray:
    host = y.get()
    return host.astype(np.int64) if dtype == "int8" else bf16_bits_to_float32(np, host)


CASES = (
    [(dtype, "nt", 1, 64, 128) for dtype in LT_GEMM_TYPES]
    + [(dtype, "nt", 17, 48, 96) for dtype in LT_GEMM_TYPES]
    + [("bf16", "nn", 5, 40, 24), ("bf16", "nn", 127, 4097, 1000), ("bf16", "nt", 127, 4097, 1000)]
)


@pytest.mark.parametrize(("dtype", "layout", "m", "n", "k"), CASES)
def test_small_gemms_match_the_numpy_model(lt, cuda, dtype, layout, m, n, k):
    plan, gemm, x, w, y, (scale_x, scale_w) = run(lt, cuda, dtype, m, n, k, layout)
    plan.close()
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
        gemm, dtype, a=w_host.ravel(), b=x_host.ravel(), **_model_scales(dtype, scale_x, scale_w)
    ).reshape(m, n)
    if dtype == "int8":
        np.testing.assert_array_equal(y.get(), model)
    else:
        same = np.mean(y.get() == model)
        print(f"cublaslt: {dtype} {layout} m{m} n{n} k{k}: {same:.1%} of bf16 outputs bit-equal")


def _model_scales(dtype, scale_x, scale_w):
    if not LT_GEMM_TYPES[dtype].scale_pointers:
        return {}
    of = {"x": scale_x, "w": scale_w}
    pointers = dict(LT_GEMM_TYPES[dtype].scale_pointers)
    return {"scale_a": of[pointers["A_SCALE_POINTER"]], "scale_b": of[pointers["B_SCALE_POINTER"]]}


@pytest.mark.parametrize("dtype", list(LT_GEMM_TYPES))
def test_4096_cubed_is_correct_on_sampled_rows_and_columns(lt, cuda, dtype):
    import cupy

    n = 4096
    plan, _, x, w, y, (scale_x, scale_w) = run(lt, cuda, dtype, n, n, n, "nt", seed=2)
    plan.close()
    rng = np.random.default_rng(0)
    rows = np.sort(np.append(rng.choice(n - 1, SAMPLED - 1, replace=False), n - 1))
    cols = np.sort(np.append(rng.choice(n - 1, SAMPLED - 1, replace=False), n - 1))
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
        scales = {name: cupy.ones(1, dtype=cupy.float32) for name in ("x", "w")}
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


# -- through the CUDA backend (rooflab.backends.cublaslt wired into CudaBackend) -------------------


def test_the_backend_runs_fp8_and_int8_through_cublaslt(lt, cuda):
    """gemm_operands / poison / matmul / check_gemm of the backend at 4096^3, layout nt, as a
    sweep point runs them; nn is refused with cublaslt_args' one line."""
    assert {"fp8_e4m3", "fp8_e5m2", "int8"} <= set(cuda.gemm_dtypes), cuda.gemm_dtypes
    assert cuda.library_path("fp8_e4m3") == "fp8_tensor"
    assert cuda.library_path("int8") == "int8_tensor"
    for dtype in ("fp8_e4m3", "int8"):
        operands = cuda.gemm_operands(4096, 4096, 4096, dtype, "nt", seed=2)
        assert operands.dtype == dtype
        assert (operands.scales is not None) == dtype.startswith("fp8")
        cuda.poison(operands.y)
        cuda.matmul(operands)
        cuda.synchronize()
        checks, rows, cols = check_gemm(
            operands.x, operands.w, operands.y, "nt", dtype, xp=cuda.array_module,
            scales=operands.scales,
        )  # fmt: skip
        print(f"cublaslt: backend {dtype} 4096^3: {checks}")
        assert all(c.passed for c in checks) and (rows, cols) == (SAMPLED, SAMPLED), checks
        metrics = {c.metric for c in checks}
        assert metrics == ({"finite", "max_abs_error"} if dtype == "int8" else
                           {"finite", "rel_frobenius", "max_componentwise"})  # fmt: skip
        seconds = statistics.median(
            cuda.time_call(lambda o=operands: cuda.matmul(o)) for _ in range(10)
        )
        print(f"cublaslt: backend {dtype} 4096^3: {2 * 4096**3 / seconds / 1e12:.1f} T/s (smoke)")
        with pytest.raises(BackendError, match="refuses layout nn"):
            cuda.gemm_operands(64, 64, 64, dtype, "nn", seed=0)


def test_a_tiny_weight_reuse_sweep_of_fp8_and_int8(lt, cuda):
    sweep = {
        "m": [1, 3, 64],
        "n": [4096],
        "k": [4096],
        "dtypes": ["fp8_e4m3", "int8"],
        "layouts": ["nt"],
        "cache_states": ["warm", "cold"],
        "seed": 0,
    }
    timing = TimingSettings(warmup_s=0.02, min_time_s=0.05, min_samples=5)
    tables = run_gemm_sweep(cuda, "lt_small", sweep, timing)
    for name, rows in tables.items():
        to_table(name, rows)
    assert tables["correctness"] and all(r["passed"] for r in tables["correctness"])
    points = tables["timed_points"]
    assert len(points) == 3 * 2 * 2
    for point in points:
        ledger = lt_gemm_ledger(point["m"], point["n"], point["k"], point["dtype"])
        assert point["bytes_model"] == ledger.bytes and point["flops"] == ledger.flops
        assert point["y_dtype"] == ("int32" if point["dtype"] == "int8" else "bf16")
        assert point["median_s"] > 0 and point["n_samples"] >= 5
    units = {s["amount_unit"] for s in tables["samples"] if "/int8/" in s["config_id"]}
    assert units == {"OP"}


def test_library_ceilings_of_bf16_fp8_and_int8(lt, cuda):
    """bf16: two rows (cuBLAS gemmEx, cuBLASLt), each saying which is the faster; fp8 FLOP/s and
    int8 OP/s rows through cuBLASLt; every rate under its datasheet figure."""
    from dataclasses import replace

    from rooflab.experiments.ceiling_plan import QUICK
    from rooflab.experiments.library_ceilings import library_ceilings as _library_ceilings
    from rooflab.progress import Progress

    settings = replace(QUICK, blas_n=4096)
    tables = {"conditions": [], "samples": []}
    rows = []
    with Progress("lt ceilings", terminal=False) as progress:
        progress.plan([1.0] * 3)
        for dtype in ("bf16", "fp8_e4m3", "int8"):
            rows += _library_ceilings(cuda, dtype, settings, "r", tables, progress)
    by = {(r["name"], r["kernel"]): r for r in rows}
    assert set(by) == {
        ("bf16_tensor", "matmul"),
        ("bf16_tensor", "cublaslt_matmul"),
        ("fp8_tensor", "cublaslt_matmul"),
        ("int8_tensor", "cublaslt_matmul"),
    }
    assert by[("int8_tensor", "cublaslt_matmul")]["unit"] == "OP/s"
    assert by[("fp8_tensor", "cublaslt_matmul")]["unit"] == "FLOP/s"
    bf16 = [by[("bf16_tensor", k)] for k in ("matmul", "cublaslt_matmul")]
    assert all("is the faster" in r["method"] for r in bf16)
    for row in rows:
        print(f"cublaslt: ceiling {row['name']} {row['kernel']}: {row['value'] / 1e12:.1f} T"
              f"{row['unit']} ({row['method']})")  # fmt: skip
        peak = _datasheet(cuda, row["name"])
        if peak:
            assert row["value"] < 1.05 * peak, row
