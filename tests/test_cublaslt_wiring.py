"""FP8, int8 and bf16 through cuBLASLt in the CUDA backend, without a GPU: the backend's own
dispatch (rooflab.backends.cuda, rooflab.backends.cublaslt) runs over a fake CuPy (numpy arrays
with device pointers) and a fake nvmath-python whose cublasLt records every descriptor and runs
cublasLtMatmul from what it was given (its own column-major reading, not cublaslt_args' model).
Checked: the descriptors are exactly cublaslt_args' (types, transposes, layouts, scale pointers,
alpha and beta), results pass the correctness check and a wrong call fails it, a missing
nvmath-python is one clear error with FP8 and int8 absent, int8 ceilings are in OP/s, bf16 records
a cuBLAS and a cuBLASLt row and says which is the faster, and sweep points carry the cuBLASLt
ledger."""

import subprocess
import sys
import time
import types
from dataclasses import replace

import numpy as np
import pytest

from rooflab.backends.base import BackendError, GemmOperands, LibraryVariant
from rooflab.backends.bfloat16 import BF16_NAN_BITS, bf16_bits_to_float32, float32_to_bf16_bits
from rooflab.backends.cpu import CpuBackend
from rooflab.backends.cublaslt import (
    LT_KERNEL,
    WORKSPACE_BYTES,
    CublasLtGemms,
    LtPlan,
    load_binding,
)
from rooflab.backends.cublaslt_args import INT32_POISON, LT_GEMM_TYPES, row_major_lt_gemm
from rooflab.backends.cuda import CudaBackend
from rooflab.backends.fp8 import fp8_bits_to_float32
from rooflab.conditions.disturbance import DisturbanceSettings
from rooflab.experiments.ceiling_plan import QUICK
from rooflab.experiments.ceilings import run_ceilings
from rooflab.experiments.correctness import check_gemm
from rooflab.experiments.gemm import run_gemm_sweep
from rooflab.experiments.gemm_configs import GemmConfig, check_fits
from rooflab.experiments.library_ceilings import _compare_variants
from rooflab.experiments.library_ceilings import library_ceilings as _library_ceilings
from rooflab.experiments.timing import TimingSettings
from rooflab.progress import Progress
from tests.conftest import UNJUDGED
from tests.cublaslt_fake import (
    MEMORY,
    ComputeType,
    CudaDataType,
    FakeCublasLt,
    FakeStream,
    fake_cupy,
    install_fake_nvmath,
)

CUBLAS_DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16")  # cublas_args.library_paths(90)

# -- the fake CuPy and nvmath-python: tests/cublaslt_fake.py ------------------------------------


@pytest.fixture(autouse=True)
def _fresh_memory():
    MEMORY.clear()
    yield
    MEMORY.clear()


@pytest.fixture
def lt(monkeypatch) -> FakeCublasLt:
    fake = FakeCublasLt()
    install_fake_nvmath(monkeypatch, fake)
    return fake


def fake_cuda(compute_capability: int = 90) -> CudaBackend:
    """A CudaBackend with only what its GEMM dispatch uses: CuPy (fake), the measuring stream,
    the compute capability, then its own _load_cublaslt (through whatever nvmath is importable)."""
    backend = CudaBackend.__new__(CudaBackend)
    backend._cp = backend.array_module = fake_cupy
    backend._stream = FakeStream()
    backend.compute_capability = compute_capability
    backend.memory_available_bytes = lambda: 1 << 40  # CUDA's reads cudaMemGetInfo
    backend._load_cublaslt()
    return backend


def _descriptors(lt: FakeCublasLt, call: tuple) -> dict:
    _, desc, _, a, adesc, b, bdesc, _, c, cdesc, d, ddesc, _, _, size, stream = call
    return {
        "desc": lt.objects[desc],
        "a": lt.objects[adesc],
        "b": lt.objects[bdesc],
        "c": lt.objects[cdesc],
        "d": lt.objects[ddesc],
        "pointers": (a, b, c, d),
        "same_cd": cdesc == ddesc,
        "workspace": size,
        "stream": stream,
    }


# -- the dtypes and their refusals -----------------------------------------------------------------


def test_fp8_and_int8_join_the_gemm_dtypes_where_the_device_runs_them(lt):
    hopper = fake_cuda(90)
    assert hopper.gemm_dtypes == (*CUBLAS_DTYPES, "fp8_e4m3", "fp8_e5m2", "int8")
    assert [hopper.library_path(d) for d in ("fp8_e4m3", "fp8_e5m2", "int8", "bf16")] == [
        "fp8_tensor",
        "fp8_tensor",
        "int8_tensor",
        "bf16_tensor",
    ]
    assert "cuBLASLt" in hopper.library_description("int8")
    assert "int8 x int8" in hopper.library_description("int8")
    ampere = fake_cuda(80)  # int8 tensor cores, no FP8
    assert ampere.gemm_dtypes == (*CUBLAS_DTYPES, "int8")
    with pytest.raises(BackendError, match=r"fp8_e4m3.*needs compute capability 8\.9"):
        ampere.check_dtype("fp8_e4m3")
    ampere.check_dtype("int8")


def test_cublaslt_is_loaded_only_when_asked_for(lt):
    """Importing nvmath-python takes about a second: a job of cuBLAS dtypes never pays it."""
    loads = []
    backend = fake_cuda(90)
    backend._load_cublaslt(lambda: loads.append(1) or load_binding())
    for dtype in CUBLAS_DTYPES:
        backend.check_dtype(dtype)
        assert backend.library_path(dtype).endswith(("_tensor", "_cublas"))
    for dtype in ("fp64", "fp32", "tf32", "fp16"):  # bf16's ceiling asks for cuBLASLt beside
        assert [v.kernel for v in backend.library_variants(dtype)] == ["matmul"]
    assert loads == [] and not backend._lt.loaded
    assert backend._lt.metadata() == {"not_loaded": "this run asked nothing of cuBLASLt"}
    assert backend._lt.versions()["cublaslt"] is None
    backend.check_dtype("int8")
    assert "int8" in backend.gemm_dtypes
    assert loads == [1] and backend._lt.loaded  # once, then kept
    assert backend._lt.versions()["cublaslt"] == lt.get_version()


def test_without_nvmath_fp8_and_int8_are_absent_and_refused_with_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvmath", None)  # `import nvmath` raises ImportError
    with pytest.raises(BackendError, match="nvmath-python is not importable") as caught:
        load_binding()
    assert "pip install nvmath-python" in str(caught.value)
    backend = fake_cuda(90)
    assert backend.gemm_dtypes == CUBLAS_DTYPES
    for dtype in ("fp8_e4m3", "fp8_e5m2", "int8"):
        with pytest.raises(BackendError) as refused:
            backend.check_dtype(dtype)
        message = str(refused.value)
        assert "\n" not in message and dtype in message
        assert "nvmath-python is not importable" in message and "pip install" in message
        with pytest.raises(BackendError, match="nvmath-python is not importable"):
            backend.gemm_operands(16, 16, 16, dtype, "nt", seed=0)
    # a sweep and a ceilings run refuse before measuring, with the same reason
    with pytest.raises(BackendError, match="nvmath-python is not importable"):
        check_fits(backend, [GemmConfig("s", 1, 64, 64, "int8", "nt")])
    with pytest.raises(BackendError, match="nvmath-python is not importable"):
        run_ceilings(backend, replace(QUICK, blas_dtypes=("bf16", "int8")))
    # bf16 stays on cuBLAS alone, and its ceiling says cuBLASLt was not timed
    (variant,) = backend.library_variants("bf16")
    assert variant.kernel == "matmul" and "cuBLASLt not timed" in variant.description
    assert backend._lt.metadata()["unavailable"].startswith("nvmath-python is not importable")
    assert backend._lt.versions()["cublaslt"] is None


def test_a_cublaslt_that_does_not_load_is_named(monkeypatch):
    broken = FakeCublasLt()
    broken.create = lambda: (_ for _ in ()).throw(RuntimeError("libcublasLt.so.12: not found"))
    install_fake_nvmath(monkeypatch, broken)
    backend = fake_cuda(90)
    assert "int8" not in backend.gemm_dtypes
    with pytest.raises(BackendError, match=r"cuBLASLt did not load.*libcublasLt\.so\.12"):
        backend.check_dtype("int8")


def test_layout_nn_and_misaligned_sizes_are_refused_with_cublaslt_args_line(lt):
    backend = fake_cuda(90)
    for dtype in ("fp8_e4m3", "int8"):
        with pytest.raises(BackendError, match=f"^{dtype} through cuBLASLt refuses layout nn"):
            backend.gemm_operands(16, 16, 16, dtype, "nn", seed=0)
    with pytest.raises(BackendError, match="multiple of 16, got K=24"):
        backend.gemm_operands(1, 32, 24, "fp8_e4m3", "nt", seed=0)
    assert lt.calls == [] and lt.heuristic_calls == []


# -- the call, exactly as cublaslt_args says ---------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "a_type", "b_type", "d_type", "compute"),
    [
        ("fp8_e4m3", "CUDA_R_8F_E4M3", "CUDA_R_8F_E4M3", "CUDA_R_16BF", "COMPUTE_32F"),
        ("fp8_e5m2", "CUDA_R_8F_E4M3", "CUDA_R_8F_E5M2", "CUDA_R_16BF", "COMPUTE_32F"),
        ("int8", "CUDA_R_8I", "CUDA_R_8I", "CUDA_R_32I", "COMPUTE_32I"),
    ],
)
def test_the_plan_sets_what_cublaslt_args_says(lt, dtype, a_type, b_type, d_type, compute):
    backend = fake_cuda(90)
    m, n, k = 3, 32, 48
    operands = backend.gemm_operands(m, n, k, dtype, "nt", seed=1)
    assert isinstance(operands, GemmOperands) and isinstance(operands.plan, LtPlan)
    assert operands.dtype == dtype and operands.layout == "nt"
    assert (operands.x.shape, operands.w.shape, operands.y.shape) == ((m, k), (n, k), (m, n))
    types_ = LT_GEMM_TYPES[dtype]
    assert (operands.x.dtype, operands.w.dtype, operands.y.dtype) == (
        np.dtype(types_.x_storage),
        np.dtype(types_.w_storage),
        np.dtype(types_.y_storage),
    )
    backend.matmul(operands)
    (call,) = lt.calls
    found = _descriptors(lt, call)
    desc = found["desc"]
    assert desc["compute"] == ComputeType[compute]
    assert desc["scale"] == (
        CudaDataType.CUDA_R_32I if dtype == "int8" else CudaDataType.CUDA_R_32F
    )
    # layout nt: cuBLASLt's A = W (N×K row-major = K×N column-major, ld K) transposed, B = X not
    assert (desc["TRANSA"], desc["TRANSB"]) == (1, 0)
    layouts = {x: tuple(found[x][f] for f in ("type", "rows", "cols", "ld")) for x in "abd"}
    assert layouts == {
        "a": (CudaDataType[a_type], k, n, k),
        "b": (CudaDataType[b_type], k, m, k),
        "d": (CudaDataType[d_type], n, m, n),
    }
    assert found["same_cd"]
    ptr = lambda array: array.__array_interface__["data"][0]  # noqa: E731
    assert found["pointers"] == (ptr(operands.w), ptr(operands.x), ptr(operands.y), ptr(operands.y))
    assert found["stream"] == FakeStream.ptr and found["workspace"] == WORKSPACE_BYTES
    (heuristic,) = lt.heuristic_calls
    assert heuristic[2:6] == (call[4], call[6], call[11], call[11])  # A, B, C = D layouts
    if dtype == "int8":
        assert "A_SCALE_POINTER" not in desc and "B_SCALE_POINTER" not in desc
        assert operands.scales is None
    else:  # A's scale is W's, B's is X's: float32 device scalars holding operands.scales
        scale_x, scale_w = operands.scales
        assert float(MEMORY[desc["A_SCALE_POINTER"]][0]) == scale_w
        assert float(MEMORY[desc["B_SCALE_POINTER"]][0]) == scale_x
        assert scale_x == float(np.float32(scale_x)) and scale_w != scale_x


def test_bf16_through_cublaslt_is_the_ceilings_second_variant(lt):
    backend = fake_cuda(90)
    cublas, cublaslt = backend.library_variants("bf16")
    assert (cublas.kernel, cublas.layout) == ("matmul", "nn")
    assert (cublaslt.kernel, cublaslt.layout, cublaslt.library) == (LT_KERNEL, "nn", "cuBLASLt")
    (fp8,) = backend.library_variants("fp8_e4m3")
    assert (fp8.kernel, fp8.layout) == (LT_KERNEL, "nt")  # TN only
    (fp64,) = backend.library_variants("fp64")
    assert fp64.kernel == "matmul"
    operands = backend.library_operands(32, "bf16", cublaslt)
    assert isinstance(operands.plan, LtPlan) and operands.y.dtype == np.uint16
    backend.poison(operands.y)
    backend.matmul(operands)
    desc = _descriptors(lt, lt.calls[-1])
    assert (desc["desc"]["TRANSA"], desc["desc"]["TRANSB"]) == (0, 0)  # nn
    assert {desc[x]["type"] for x in "abd"} == {CudaDataType.CUDA_R_16BF}
    assert (desc["a"]["rows"], desc["a"]["cols"], desc["a"]["ld"]) == (32, 32, 32)
    checks, _, _ = check_gemm(operands.x, operands.w, operands.y, "nn", "bf16", xp=fake_cupy)
    assert all(c.passed for c in checks), checks


def test_matmul_runs_on_the_backends_measuring_stream_of_the_moment(lt):
    backend = fake_cuda(90)
    operands = backend.gemm_operands(1, 16, 16, "fp8_e4m3", "nt", seed=0)
    backend.matmul(operands)
    backend._stream = types.SimpleNamespace(ptr=0xBEE)  # as CudaBackend.on_stream swaps it
    backend.matmul(operands)
    assert [call[-1] for call in lt.calls] == [FakeStream.ptr, 0xBEE]


def test_a_plan_without_an_algorithm_is_refused_and_destroys_its_descriptors(monkeypatch):
    lt = FakeCublasLt(algorithms=0)
    install_fake_nvmath(monkeypatch, lt)
    backend = fake_cuda(90)
    with pytest.raises(BackendError, match="cuBLASLt found no algorithm for"):
        backend.gemm_operands(1, 16, 16, "fp8_e4m3", "nt", seed=0)
    assert [o["kind"] for o in lt.objects.values()] == ["handle"]


def test_a_plan_destroys_its_descriptors_when_closed(lt):
    backend = fake_cuda(90)
    operands = backend.gemm_operands(1, 16, 16, "int8", "nt", seed=0)
    assert len(lt.objects) == 1 + 1 + 3 + 1  # handle, matmul desc, 3 layouts, preference
    operands.plan.close()
    operands.plan.close()
    assert [o["kind"] for o in lt.objects.values()] == ["handle"]


# -- results: poison, to_host, correctness -------------------------------------------------------


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2", "int8"])
def test_results_pass_the_check_and_a_wrong_call_fails_it(monkeypatch, dtype):
    for bug, passes in ((None, True), ("ignore_transa", False), ("ignore_a_scale", False)):
        if bug == "ignore_a_scale" and dtype == "int8":
            continue  # no scales
        lt = FakeCublasLt(bug)
        install_fake_nvmath(monkeypatch, lt)
        backend = fake_cuda(90)
        operands = backend.gemm_operands(5, 32, 32, dtype, "nt", seed=4)
        backend.poison(operands.y)
        poison = INT32_POISON if dtype == "int8" else BF16_NAN_BITS
        assert np.all(np.asarray(operands.y) == poison)
        backend.matmul(operands)
        checks, rows, cols = check_gemm(
            operands.x, operands.w, operands.y, "nt", dtype, xp=fake_cupy,
            scales=operands.scales,
        )  # fmt: skip
        assert (rows, cols) == (5, 32)
        assert all(c.passed for c in checks) == passes, (bug, checks)
        metrics = [c.metric for c in checks]
        expected = ["finite", "max_abs_error"] if dtype == "int8" else None
        assert metrics == (expected or ["finite", "rel_frobenius", "max_componentwise"])
        host = backend.to_host(operands.y)
        assert host.dtype == (np.int32 if dtype == "int8" else np.float32)


def test_an_unwritten_int8_output_fails_as_not_finite(lt):
    backend = fake_cuda(90)
    operands = backend.gemm_operands(3, 16, 16, "int8", "nt", seed=0)
    backend.poison(operands.y)  # never run
    checks, _, _ = check_gemm(operands.x, operands.w, operands.y, "nt", "int8", xp=fake_cupy)
    finite = checks[0]
    assert finite.metric == "finite" and not finite.passed and finite.error == 3 * 16
    assert "still hold the poison" in finite.detail


def test_an_fp8_check_without_its_scales_is_refused(lt):
    backend = fake_cuda(90)
    operands = backend.gemm_operands(1, 16, 16, "fp8_e4m3", "nt", seed=0)
    with pytest.raises(ValueError, match="per-tensor scales"):
        check_gemm(operands.x, operands.w, operands.y, "nt", "fp8_e4m3", xp=fake_cupy)


# -- ceilings and sweeps on a CPU with the CUDA backend's cuBLASLt dispatch ----------------------


class LtOnCpu(CublasLtGemms, CpuBackend):
    """The CPU backend (timing, conditions, memory) with the CUDA backend's GEMM dispatch over
    the fake cuBLASLt; its "cuBLAS gemmEx" bf16 is numpy, held `cublas_s` longer per call."""

    gemm_operands_cuda = CudaBackend.gemm_operands
    matmul = CudaBackend.matmul
    poison = CudaBackend.poison
    to_host = CudaBackend.to_host
    library_path = CudaBackend.library_path
    library_description = CudaBackend.library_description

    def __init__(self, cublas_s: float = 0.0) -> None:
        super().__init__()
        self._cp = self.array_module = fake_cupy
        self._stream = FakeStream()
        self.compute_capability = 90
        self._load_cublaslt()
        self._cublas = types.SimpleNamespace(gemmEx=self._gemm_ex)
        self.cublas_s = cublas_s

    def gemm_operands(self, m, n, k, dtype, layout, seed):
        if dtype != "bf16":
            return self.gemm_operands_cuda(m, n, k, dtype, layout, seed)
        x, w = (float32_to_bf16_bits(np, np.ones(s, np.float32)) for s in ((m, k), (k, n)))
        operands = GemmOperands(x, w, np.empty((m, n), np.uint16), layout, dtype=dtype)
        operands.plan = ((operands,), None, None)  # CudaBackend.matmul: gemmEx(*plan[0])
        return operands

    def _gemm_ex(self, operands) -> None:
        time.sleep(self.cublas_s)
        product = bf16_bits_to_float32(np, operands.x) @ bf16_bits_to_float32(np, operands.w)
        operands.y[...] = float32_to_bf16_bits(np, product)


QUIET = DisturbanceSettings(**UNJUDGED)
TINY = TimingSettings(
    warmup_s=0, warmup_min_calls=1, min_time_s=0, min_samples=3, max_samples=3, rounds=1,
    disturbance=QUIET,
)  # fmt: skip


def _ceilings(backend, dtypes, n=64):
    settings = replace(QUICK, blas_n=n, blas_timing=TINY, disturbance=QUIET)
    tables: dict[str, list] = {"conditions": [], "samples": []}
    rows = []
    with Progress("test", terminal=False) as progress:
        progress.plan([1.0] * len(dtypes))
        for dtype in dtypes:
            rows += _library_ceilings(backend, dtype, settings, "run", tables, progress)
    return rows, tables


def test_library_ceilings_int8_in_op_per_s_and_bf16_twice_with_the_faster_named(lt):
    backend = LtOnCpu(cublas_s=0.05)  # cuBLASLt (a numpy product on 64³) is the faster here
    rows, tables = _ceilings(backend, ("bf16", "fp8_e4m3", "int8"))
    assert [(r["name"], r["kernel"], r["unit"], r["config_id"], r["dtype"]) for r in rows] == [
        ("bf16_tensor", "matmul", "FLOP/s", "blas/bf16/n64", "bf16"),
        ("bf16_tensor", "cublaslt_matmul", "FLOP/s", "blas/bf16/n64/cublaslt_matmul", "bf16"),
        ("fp8_tensor", "cublaslt_matmul", "FLOP/s", "blas/fp8_e4m3/n64", "fp8_e4m3"),
        ("int8_tensor", "cublaslt_matmul", "OP/s", "blas/int8/n64", "int8"),
    ]
    units = {s["config_id"]: s["amount_unit"] for s in tables["samples"]}
    assert units["blas/int8/n64"] == "OP" and units["blas/fp8_e4m3/n64"] == "FLOP"
    cublas, cublaslt = rows[:2]
    assert cublaslt["value"] > cublas["value"]
    by_pct = f"{cublaslt['value'] / cublas['value'] - 1:.1%}"
    assert f"this is the faster, by {by_pct}" in cublaslt["method"]
    assert f"cuBLASLt is the faster, by {by_pct}" in cublas["method"]
    assert "cuBLAS gemmEx" in cublaslt["method"] and "(layout nt, 2n³ OP)" in rows[3]["method"]
    assert rows[2]["method"].startswith("cuBLASLt cublasLtMatmul, X e4m3 x W e4m3")


def test_a_wrong_library_gemm_stops_the_ceilings_before_timing(monkeypatch):
    lt = FakeCublasLt("ignore_transa")
    install_fake_nvmath(monkeypatch, lt)
    with pytest.raises(BackendError, match="blas/int8/n64: the library GEMM's result is wrong"):
        _ceilings(LtOnCpu(), ("int8",))
    assert len(lt.calls) == 1  # the check's call; nothing timed


def test_compare_variants_says_which_is_the_faster_and_by_how_much():
    variants = (
        LibraryVariant("matmul", "cuBLAS gemmEx", "d"),
        LibraryVariant(LT_KERNEL, "cuBLASLt", "d"),
    )
    rows = [
        {"name": "bf16_tensor", "value": 824e12, "unit": "FLOP/s", "method": "a"},
        {"name": "bf16_tensor", "value": 800e12, "unit": "FLOP/s", "method": "b"},
    ]
    _compare_variants(rows, variants)
    assert rows[0]["method"] == (
        "a; timed beside cuBLASLt (800 TFLOP/s): this is the faster, by 3.0%, so the roof"
    )
    assert rows[1]["method"] == (
        "b; timed beside cuBLAS gemmEx (824 TFLOP/s): cuBLAS gemmEx is the faster, by 3.0%, "
        "so the roof"
    )


def test_a_weight_reuse_sweep_of_fp8_and_int8_records_the_cublaslt_ledger(lt):
    sweep = {
        "m": [1, 3],
        "n": [32],
        "k": [64],
        "dtypes": ["fp8_e4m3", "fp8_e5m2", "int8"],
        "layouts": ["nt"],
        "cache_states": ["warm"],
        "seed": 2,
    }
    tables = run_gemm_sweep(LtOnCpu(), "reuse", sweep, TINY)
    assert tables["correctness"] and all(r["passed"] for r in tables["correctness"])
    points = {(p["dtype"], p["m"]): p for p in tables["timed_points"]}
    assert len(points) == 6
    for (dtype, m), point in points.items():
        n, k = 32, 64
        y_bytes, scales = (4, 0) if dtype == "int8" else (2, 8)
        assert point["flops"] == 2 * m * n * k
        assert point["bytes_model"] == m * k + k * n + y_bytes * m * n + scales
        assert (point["x_dtype"], point["w_dtype"], point["y_dtype"]) == {
            "fp8_e4m3": ("fp8_e4m3", "fp8_e4m3", "bf16"),
            "fp8_e5m2": ("fp8_e5m2", "fp8_e4m3", "bf16"),
            "int8": ("int8", "int8", "int32"),
        }[dtype]
    units = {(s["config_id"].split("/")[1], s["amount_unit"]) for s in tables["samples"]}
    assert units == {("fp8_e4m3", "FLOP"), ("fp8_e5m2", "FLOP"), ("int8", "OP")}


def test_importing_rooflab_imports_neither_cupy_nor_nvmath():
    code = (
        "import sys, rooflab, rooflab.backends.cuda, rooflab.backends.cublaslt, "
        "rooflab.experiments.ceilings, rooflab.experiments.gemm; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('cupy', 'nvmath')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_lt_arrays_quantise_fp8_with_the_scales_they_report(lt):
    backend = fake_cuda(90)
    operands = backend.gemm_operands(4, 16, 32, "fp8_e5m2", "nt", seed=0)
    scale_x, scale_w = operands.scales
    assert scale_x == float(np.float32(3.0 / 57344)) and scale_w == float(np.float32(0.02 / 448))
    x = fp8_bits_to_float32(np, np.asarray(operands.x), "e5m2") * scale_x
    w = fp8_bits_to_float32(np, np.asarray(operands.w), "e4m3") * scale_w
    assert 1.4 < np.max(np.abs(x)) <= 3.0 and np.min(np.abs(x)) >= 1.4
    assert np.min(np.abs(w)) > 0.009 and np.max(np.abs(w)) <= 0.02
    int8 = backend.gemm_operands(4, 16, 32, "int8", "nt", seed=0)
    assert 64 <= np.min(np.abs(np.asarray(int8.x, np.int64))) <= np.max(np.abs(int8.x)) <= 128
    assert row_major_lt_gemm(4, 16, 32, "nt", "int8") == int8.plan.gemm
