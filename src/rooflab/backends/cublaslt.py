"""FP8 (e4m3, e5m2), int8 and bf16 GEMMs through cuBLASLt, for the CUDA backend.

cuBLASLt is reached through nvmath-python's low-level binding (nvmath.bindings.cublasLt), with
raw device pointers of CuPy arrays of bit patterns: FP8 as uint8 (rooflab.backends.fp8), int8 as
int8, bf16 as uint16 (rooflab.backends.bfloat16). Not through nvmath.linalg.advanced.Matmul: it
takes its types from the operands' dtypes, CuPy has no float8 dtype (a uint8 array would be read as
CUDA_R_8U), and Matmul has no integer GEMM; the binding takes cudaDataType_t values.

What the call is (types, transposes, shapes, scales, refusals, ledgers, tolerances) is
rooflab.backends.cublaslt_args', pure and tested without a GPU; this module makes the descriptors
from it and calls. nvmath and CuPy are imported inside functions (CuPy comes in as the backend's
module `cp`): importing rooflab imports neither.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from rooflab.backends.base import BackendError, GemmOperands, LibraryVariant
from rooflab.backends.bfloat16 import BF16_NAN_BITS, float32_to_bf16_bits
from rooflab.backends.cublas_args import GEMM_TYPES, library_paths
from rooflab.backends.cublaslt_args import (
    INT32_POISON,
    LT_GEMM_TYPES,
    LT_ONLY_DTYPES,
    LtGemm,
    LtTypes,
    check_compute_capability,
    check_pointer_alignment,
    lt_library_paths,
    row_major_lt_gemm,
)
from rooflab.backends.cuda_identity import package_version
from rooflab.backends.fp8 import FP8_FORMATS, float_to_fp8_bits
from rooflab.backends.random_operands import random_nonzero

__all__ = [
    "FP8_AMAX",
    "INSTALL_HINT",
    "LT_KERNEL",
    "WORKSPACE_BYTES",
    "CublasLtGemms",
    "LtArrays",
    "LtBinding",
    "LtLibrary",
    "LtPlan",
    "load_binding",
    "lt_arrays",
]

WORKSPACE_BYTES = 32 << 20  # cuBLAS's recommendation for Hopper
# Largest |value| of X and W before FP8 quantisation (|X| in [1.5, 3), |W| in [0.01, 0.02)): the
# per-tensor scale is amax / the format's largest finite value, as a quantiser sets it.
FP8_AMAX = {"x": 3.0, "w": 0.02}
LT_KERNEL = "cublaslt_matmul"  # the `ceilings` rows' kernel of a cuBLASLt GEMM
INSTALL_HINT = (
    "pip install nvmath-python (rooflab's [gpu] extra has it: pip install -e '.[gpu]', or "
    "'.[gpu-cuda13]' for CUDA 13)"
)


class LtBinding(NamedTuple):
    """nvmath-python's bindings and a cuBLASLt handle."""

    cublasLt: Any  # nvmath.bindings.cublasLt
    cublas: Any  # nvmath.bindings.cublas (its ComputeType)
    data_type: Any  # nvmath.CudaDataType
    handle: int


def load_binding() -> LtBinding:
    """nvmath-python's cuBLASLt binding and a handle; BackendError (one line, what is missing and
    how to install it) where nvmath-python or cuBLASLt cannot be loaded."""
    try:
        import nvmath
        from nvmath.bindings import cublas as nv_cublas
        from nvmath.bindings import cublasLt
    except Exception as error:  # absent, or its CUDA bindings (cuda-bindings) missing
        raise BackendError(
            f"nvmath-python is not importable ({type(error).__name__}: {error}); rooflab reaches "
            f"cuBLASLt (FP8 and int8 GEMMs) through it: {INSTALL_HINT}"
        ) from error
    try:
        handle = cublasLt.create()
    except Exception as error:  # libcublasLt not found, or no device
        version = getattr(nvmath, "__version__", "?")
        raise BackendError(
            f"cuBLASLt did not load through nvmath-python {version}: "
            f"{type(error).__name__}: {error}"
        ) from error
    return LtBinding(cublasLt, nv_cublas, nvmath.CudaDataType, handle)


class LtArrays(NamedTuple):
    x: Any  # M×K, as cuBLASLt reads it (bit patterns)
    w: Any  # K×N (nn) or N×K (nt)
    y: Any  # M×N, poisoned: bf16 NaN, or INT32_POISON for int32
    device_scales: dict[str, Any]  # "x", "w" -> a float32 device scalar (FP8 only)
    scales: tuple[float, float] | None  # (scale_x, scale_w) as the device holds them (FP8 only)


def lt_arrays(cp, dtype: str, m: int, n: int, k: int, layout: str, seed: int) -> LtArrays:
    """Seeded operands for cuBLASLt, made on the device from the shared random inputs
    (rooflab.backends.random_operands, |value| in [0.5, 1)): int8 as floor(128·value), so
    |X|, |W| in [64, 128]; bf16 rounded to nearest; FP8 quantised with per-tensor scales,
    X = 3·value and W = 0.02·value stored as value/scale (nearest, saturating)."""
    types = LT_GEMM_TYPES[dtype]
    w_shape = (k, n) if layout == "nn" else (n, k)
    reals = random_nonzero(cp, (m, k), seed, stream=0), random_nonzero(cp, w_shape, seed, stream=1)
    device_scales: dict[str, Any] = {}
    scales = None
    if types.integer:
        x, w = (cp.floor(v * 128).astype(cp.int8) for v in reals)
    elif not types.scale_pointers:
        x, w = (float32_to_bf16_bits(cp, v.astype(cp.float32)) for v in reals)
    else:
        formats = [name.removeprefix("fp8_") for name in types.ledger_dtypes[:2]]
        held = [
            float(np.float32(FP8_AMAX[operand] / FP8_FORMATS[fmt].max_finite))
            for operand, fmt in zip("xw", formats, strict=True)
        ]
        x, w = (
            float_to_fp8_bits(cp, FP8_AMAX[operand] * v / scale, fmt, saturate=True)
            for operand, v, scale, fmt in zip("xw", reals, held, formats, strict=True)
        )
        device_scales = {
            operand: cp.asarray([scale], dtype=cp.float32)
            for operand, scale in zip("xw", held, strict=True)
        }
        scales = (held[0], held[1])
    poison = INT32_POISON if types.integer else BF16_NAN_BITS
    y = cp.full((m, n), poison, dtype=types.y_storage)
    return LtArrays(x, w, y, device_scales, scales)


class LtPlan:
    """One cublasLtMatmul ready to run: descriptors, the heuristic's best algorithm, workspace.
    A = W, B = X, C = D = Y (beta = 0); `plan()` runs on `stream_ptr`, `plan.run(ptr)` on
    another stream. A call cuBLASLt refuses (no algorithm, or an error status) is a
    BackendError."""

    def __init__(
        self, binding, types: LtTypes, gemm: LtGemm, x, w, y, scales, stream_ptr, workspace
    ):
        cublasLt, nv_cublas, data_type, handle = binding
        self._lt, self._made = cublasLt, []
        self._finalizer = weakref.finalize(self, _destroy, self._made)
        self.types, self.gemm, self.stream_ptr = types, gemm, stream_ptr
        compute = int(getattr(nv_cublas.ComputeType, types.compute_type))
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
        what = f"{types.description}, {gemm}"
        try:  # no algorithm: a zero count, or CUBLAS_STATUS_NOT_SUPPORTED raised
            cublasLt.matmul_algo_get_heuristic(
                handle, desc, a, b, d, d, preference, 1, self._result.ptr, found.ctypes.data
            )
        except cublasLt.cuBLASLtError as error:
            self.close()
            raise BackendError(f"cuBLASLt refused {what}: {error}") from error
        if found[0] == 0:
            self.close()
            raise BackendError(f"cuBLASLt found no algorithm for {what}")
        self._alpha = np.ones(1, dtype=types.scalar_dtype)
        self._beta = np.zeros(1, dtype=types.scalar_dtype)
        self._keep = (x, w, y, scales, workspace)  # alive as long as the plan
        alpha, beta = self._alpha.ctypes.data, self._beta.ctypes.data
        self._args = (handle, desc, alpha, w.data.ptr, a, x.data.ptr, b, beta, y.data.ptr, d)
        self._args += (y.data.ptr, d, self._result.ptr, workspace.data.ptr, workspace.nbytes)

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

    def run(self, stream_ptr: int | None = None) -> None:
        """Enqueue the GEMM on `stream_ptr` (default: the plan's stream)."""
        self._lt.matmul(*self._args, self.stream_ptr if stream_ptr is None else stream_ptr)

    def __call__(self) -> None:
        self.run()

    def close(self) -> None:
        """Destroy the descriptors (also done when the plan is collected)."""
        self._finalizer()


def _destroy(made: list) -> None:
    while made:
        destroy, handle = made.pop()
        destroy(handle)


class LtLibrary:
    """cuBLASLt for one device: the binding (or why there is none), the dtypes it adds to the
    backend's cuBLAS ones, its operands and one workspace shared by its plans (they run one at a
    time, on the measuring stream).

    The binding is loaded on first need (importing nvmath-python takes about a second): a job
    that runs no cuBLASLt GEMM and asks nothing of cuBLASLt's dtypes never loads it."""

    def __init__(
        self, cp, compute_capability: int, loader: Callable[[], LtBinding] = load_binding
    ) -> None:
        self._cp, self.compute_capability = cp, compute_capability
        self._loader = loader
        self._workspace = None
        self._binding: LtBinding | None = None
        self.error: str | None = None  # why the binding did not load, once tried

    @property
    def loaded(self) -> bool:
        return self._binding is not None

    @property
    def binding(self) -> LtBinding | None:
        """nvmath-python's cuBLASLt binding, loaded on the first call; None where it cannot be
        (`error` says why)."""
        if self._binding is None and self.error is None:
            try:
                self._binding = self._loader()
            except BackendError as error:
                self.error = str(error)
            else:
                weakref.finalize(self, self._binding.cublasLt.destroy, self._binding.handle)
        return self._binding

    def runs(self, dtype: str) -> bool:
        """Whether this device runs `dtype` through cuBLASLt here."""
        return (
            dtype in LT_GEMM_TYPES
            and self.compute_capability >= LT_GEMM_TYPES[dtype].min_compute_capability
            and self.binding is not None
        )

    def library_paths(self) -> dict[str, str]:
        """The dtypes only cuBLASLt runs (FP8, int8) that this device runs here, with the compute
        path each one's ceiling is named by (fp8_tensor, int8_tensor)."""
        paths = lt_library_paths(self.compute_capability)
        return {d: p for d, p in paths.items() if d in LT_ONLY_DTYPES and self.runs(d)}

    def refusal(self, dtype: str) -> str | None:
        """Why a cuBLASLt-only dtype cannot run here (the device, or nvmath-python missing);
        None where it can, or where the dtype is not cuBLASLt's alone."""
        if dtype not in LT_ONLY_DTYPES:
            return None
        try:
            check_compute_capability(dtype, self.compute_capability)
        except BackendError as error:
            return str(error)
        if self.binding is None:
            return f"{dtype} runs only through cuBLASLt, which is unavailable: {self.error}"
        return None

    def description(self, dtype: str) -> str:
        return f"cuBLASLt cublasLtMatmul, {LT_GEMM_TYPES[dtype].description}"

    def variants(self, dtype: str, cublas: str | None) -> tuple[LibraryVariant, ...]:
        """The library GEMMs of a dtype's ceiling: cuBLAS gemmEx where it runs the dtype
        (`cublas`: its description, else None), and cuBLASLt where that runs it (bf16: both;
        FP8 and int8 in layout nt, cuBLASLt's TN)."""
        variants = []
        if cublas is not None:
            if dtype in LT_GEMM_TYPES and self.binding is None:
                cublas += "; cuBLASLt not timed beside it (nvmath-python unavailable)"
            variants.append(LibraryVariant("matmul", "cuBLAS gemmEx", cublas))
        if self.runs(dtype):
            layout = "nt" if LT_GEMM_TYPES[dtype].tn_only else "nn"
            variants.append(LibraryVariant(LT_KERNEL, "cuBLASLt", self.description(dtype), layout))
        return tuple(variants)

    def workspace(self):
        if self._workspace is None:
            self._workspace = self._cp.empty(WORKSPACE_BYTES, dtype=self._cp.uint8)
        return self._workspace

    def operands(self, stream, m, n, k, dtype: str, layout: str, seed: int) -> GemmOperands:
        """Seeded operands (`lt_arrays`) and their plan on `stream` (a CuPy stream); refuses, one
        line each, what cublaslt_args refuses (layout nn for FP8 and int8, N or K off the
        alignment, an old device) and a dtype this library cannot run."""
        refusal = self.refusal(dtype)
        if refusal or self.binding is None:
            raise BackendError(refusal or f"cuBLASLt is unavailable: {self.error}")
        gemm = row_major_lt_gemm(m, n, k, layout, dtype, self.compute_capability)
        with stream:
            arrays = lt_arrays(self._cp, dtype, m, n, k, layout, seed)
            workspace = self.workspace()
        for name, array in zip("XWY", arrays[:3], strict=True):
            check_pointer_alignment(dtype, name, array.data.ptr)
        types = LT_GEMM_TYPES[dtype]
        plan = LtPlan(
            self.binding, types, gemm, arrays.x, arrays.w, arrays.y, arrays.device_scales,
            stream.ptr, workspace,
        )  # fmt: skip
        return GemmOperands(
            arrays.x, arrays.w, arrays.y, layout, dtype=dtype, plan=plan, scales=arrays.scales
        )

    def versions(self) -> dict:
        """library_versions: nvmath-python's and cuBLASLt's (None where this run did not load
        it)."""
        return {
            "nvmath-python": package_version("nvmath-python"),
            "cublaslt": self._binding.cublasLt.get_version() if self.loaded else None,
        }

    def metadata(self) -> dict:
        """The `runs.blas` entry of cuBLASLt: its call and types, why it is unavailable, or that
        this run did not use it (then it was not loaded)."""
        if self.error is not None:
            return {"unavailable": self.error}
        if not self.loaded:
            return {"not_loaded": "this run asked nothing of cuBLASLt"}
        dtypes = [d for d in LT_GEMM_TYPES if self.runs(d)]
        return {
            "call": "cublasLtMatmul through nvmath.bindings.cublasLt, the heuristic's first "
            f"algorithm, {WORKSPACE_BYTES >> 20} MiB workspace",
            "types": {d: LT_GEMM_TYPES[d].description for d in dtypes},
        }


class CublasLtGemms:
    """The CUDA backend's cuBLASLt side (a mixin, as cuda_stream.StreamLoads): the dtypes it adds,
    why one is refused, and the library ceilings' variants. Uses the backend's `_cp`, `_stream`,
    `compute_capability` and `library_description`."""

    def _load_cublaslt(self, loader: Callable[[], LtBinding] = load_binding) -> None:
        """cuBLASLt, loaded through `loader` on first need (LtLibrary), beside cuBLAS."""
        self._lt = LtLibrary(self._cp, self.compute_capability, loader)
        self._cublas_paths = library_paths(self.compute_capability)

    @property
    def gemm_dtypes(self) -> tuple[str, ...]:
        """cuBLAS's dtypes, then those only cuBLASLt runs, where this device and install run
        them (asking loads cuBLASLt)."""
        return (*self._cublas_paths, *self._lt.library_paths())

    def library_path(self, dtype: str) -> str:
        if dtype in self._cublas_paths:  # bf16 too: the same path through either library
            return self._cublas_paths[dtype]
        return self._lt.library_paths()[dtype]

    def check_dtype(self, dtype: str) -> None:
        if dtype in self._cublas_paths:
            return  # cuBLAS's: nothing of cuBLASLt is asked (nor loaded)
        if refusal := self._lt.refusal(dtype):  # FP8 or int8 that this device or install lacks
            raise BackendError(f"backend {self.name} does not support dtype {dtype!r}: {refusal}")
        super().check_dtype(dtype)

    def library_variants(self, dtype: str) -> tuple[LibraryVariant, ...]:
        """bf16: cuBLAS gemmEx and cuBLASLt, both timed (the faster is the ceiling); FP8, int8:
        cuBLASLt; the rest: cuBLAS gemmEx."""
        cublas = self.library_description(dtype) if dtype in GEMM_TYPES else None
        return self._lt.variants(dtype, cublas)

    def library_operands(self, n: int, dtype: str, variant: LibraryVariant) -> GemmOperands:
        if variant.kernel == LT_KERNEL:
            return self._lt.operands(self._stream, n, n, n, dtype, variant.layout, seed=0)
        return super().library_operands(n, dtype, variant)
