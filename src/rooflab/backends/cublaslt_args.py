"""cuBLASLt arguments for rooflab's row-major GEMMs in FP8, INT8 and bf16, as plain data, and a
numpy model of what that cublasLtMatmul call computes (no CuPy, nvmath or GPU needed).

The mapping is cuBLAS's (rooflab.backends.cublas_args): cuBLASLt is column-major, so row-major
Y[M×N] = X[M×K]·op(W) is computed as Yᵀ = op(W)ᵀ·Xᵀ; cuBLASLt's A is W, its B is X, D (and C) is
Y, and its m, n, k are N, M, K. Layout nt (W stored N×K, Y = X·Wᵀ): A is K×N column-major with
lda = K, used transposed (op T); B is X, K×M with ldb = K, not transposed; D is N×M with ldd = N.
Layout nn (W stored K×N): A is N×K with lda = N, op N.

Rules of cublasLtMatmul (cuBLAS documentation, "cublasLtMatmul()", its FP8 and IMMA requirements
and its table of supported type combinations; https://docs.nvidia.com/cuda/cublas/#cublasltmatmul):

- FP8 (compute capability 8.9 or later): compute type CUBLAS_COMPUTE_32F, scale type CUDA_R_32F;
  A and B e4m3 x e4m3, e4m3 x e5m2 or e5m2 x e4m3, never e5m2 x e5m2; on Ada (8.9), Hopper
  (9.0) and Blackwell GeForce (12.x) only the "TN" format: A transposed, B not (both operands
  K-major). That is rooflab's layout nt; nn is refused. Dimensions and pointers 16-byte aligned.
- INT8 (IMMA, regular column-major order): compute type CUBLAS_COMPUTE_32I, scale type CUDA_R_32I
  (alpha and beta are int32), A and B CUDA_R_8I, C and D CUDA_R_32I; only "TN"; m and k (rooflab's
  N and K) and the leading dimensions multiples of 4; pointers 4-byte aligned (16 is faster).
- bf16: as cublasGemmEx (CUBLAS_COMPUTE_32F, CUDA_R_32F scale), any layout and size: timed beside
  cuBLAS, the faster of the two is the bf16 ceiling.

Scales. cuBLASLt computes D = scale_d·(alpha·scale_a·scale_b·op(A)·op(B) + beta·scale_c·C) with
per-tensor float32 scales read from device memory (CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, ...;
a pointer left unset means 1). scale_c and scale_d apply only to FP8 C and D: rooflab's FP8 GEMMs
output bf16 and have beta = 0, so D = alpha·scale_a·scale_b·(A·B) rounded once to bf16, and no D
scale is set (nvmath-python refuses one for a non-FP8 result). For per-tensor scales the pairing
A = W, B = X does not change D (the scales multiply), but the pointers are set as that pairing
says. X's stored values are x/scale_x: the dequantised X is scale_x times the decoded codes.
FAST_ACCUM stays 0 (cuBLASLt's default): partial sums are periodically promoted to fp32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rooflab.backends.base import BackendError
from rooflab.backends.bfloat16 import bf16_bits_to_float32, float32_to_bf16_bits
from rooflab.backends.cublas_args import OP_N, row_major_gemm
from rooflab.backends.fp8 import fp8_bits_to_float32
from rooflab.model import GemmLedger, gemm_ledger

__all__ = [
    "INT32_POISON",
    "LT_GEMM_TYPES",
    "LT_ONLY_DTYPES",
    "LtCheck",
    "LtGemm",
    "LtRounding",
    "LtTypes",
    "check_compute_capability",
    "check_pointer_alignment",
    "compare_with_reference",
    "dequantised_reference",
    "fp8_types",
    "lt_gemm_ledger",
    "lt_library_paths",
    "lt_matmul_model",
    "lt_tolerances",
    "row_major_lt_gemm",
]

INT32_MAX = 2**31 - 1
# What an int32 output is filled with before a GEMM: no int8 GEMM of K < 2^17 reaches it
# (no product is below -128·127), so an element still holding it was not written.
INT32_POISON = -(2**31)

# cudaDataType_t name -> how the model reads a stored element (numpy storage, decoder)
_FP8_CODES = {"CUDA_R_8F_E4M3": "e4m3", "CUDA_R_8F_E5M2": "e5m2"}
_STORAGE = {
    "CUDA_R_8F_E4M3": "uint8",
    "CUDA_R_8F_E5M2": "uint8",
    "CUDA_R_8I": "int8",
    "CUDA_R_32I": "int32",
    "CUDA_R_16BF": "uint16",  # bit patterns: rooflab.backends.bfloat16
}


@dataclass(frozen=True)
class LtTypes:
    """Types of one rooflab dtype through cublasLtMatmul; A is W, B is X, C and D are Y."""

    a_type: str  # cudaDataType_t of W
    b_type: str  # cudaDataType_t of X
    d_type: str  # cudaDataType_t of Y (C has the same type: beta = 0, C may alias D)
    compute_type: str  # cublasComputeType_t (nvmath.bindings.cublas.ComputeType member name)
    scale_type: str  # cudaDataType_t of alpha and beta
    scalar_dtype: str  # numpy dtype of the host scalars alpha and beta
    ledger_dtypes: tuple[str, str, str]  # rooflab.model dtypes of X, W, Y
    scale_pointers: tuple[tuple[str, str], ...]  # (MatmulDescAttribute name, operand x or w)
    tn_only: bool  # only layout nt (cuBLASLt's "TN": A transposed, B not)
    alignment: int  # N and K (cuBLASLt's m and k) must be multiples of this many elements
    pointer_alignment: int  # bytes
    min_compute_capability: int  # 89 for 8.9
    path: str  # the compute ceiling this GEMM is paired with
    description: str

    @property
    def x_storage(self) -> str:
        return _STORAGE[self.b_type]

    @property
    def w_storage(self) -> str:
        return _STORAGE[self.a_type]

    @property
    def y_storage(self) -> str:
        return _STORAGE[self.d_type]

    @property
    def integer(self) -> bool:
        return self.compute_type == "COMPUTE_32I"


_FP8_TYPE = {"e4m3": "CUDA_R_8F_E4M3", "e5m2": "CUDA_R_8F_E5M2"}


def fp8_types(x_format: str, w_format: str) -> LtTypes:
    """FP8 X (cuBLASLt's B) times FP8 W (its A) into bf16; e5m2 x e5m2 is refused."""
    for name, fmt in (("X", x_format), ("W", w_format)):
        if fmt not in _FP8_TYPE:
            raise BackendError(f"unknown FP8 format of {name}: {fmt!r}; known: e4m3, e5m2")
    if x_format == w_format == "e5m2":
        raise BackendError(
            "cuBLASLt has no e5m2 x e5m2 FP8 GEMM (its FP8 types are e4m3 x e4m3, e4m3 x e5m2 "
            "and e5m2 x e4m3): keep W (or X) in e4m3"
        )
    return LtTypes(
        a_type=_FP8_TYPE[w_format],
        b_type=_FP8_TYPE[x_format],
        d_type="CUDA_R_16BF",
        compute_type="COMPUTE_32F",
        scale_type="CUDA_R_32F",
        scalar_dtype="float32",
        ledger_dtypes=(f"fp8_{x_format}", f"fp8_{w_format}", "bf16"),
        scale_pointers=(("A_SCALE_POINTER", "w"), ("B_SCALE_POINTER", "x")),
        tn_only=True,
        alignment=16,
        pointer_alignment=16,
        min_compute_capability=89,
        path="fp8_tensor",
        description=f"X {x_format} x W {w_format}, per-tensor scales, fp32 accumulate, bf16 out",
    )


LT_GEMM_TYPES: dict[str, LtTypes] = {
    "fp8_e4m3": fp8_types("e4m3", "e4m3"),
    # X (activations, gradients: the wide-range operand) in e5m2, W in e4m3.
    "fp8_e5m2": fp8_types("e5m2", "e4m3"),
    "int8": LtTypes(
        a_type="CUDA_R_8I",
        b_type="CUDA_R_8I",
        d_type="CUDA_R_32I",
        compute_type="COMPUTE_32I",
        scale_type="CUDA_R_32I",
        scalar_dtype="int32",
        ledger_dtypes=("int8", "int8", "int32"),
        scale_pointers=(),
        tn_only=True,
        alignment=4,
        pointer_alignment=4,
        min_compute_capability=75,
        path="int8_tensor",
        description="int8 x int8, int32 accumulate and out (OP, not FLOP)",
    ),
    "bf16": LtTypes(
        a_type="CUDA_R_16BF",
        b_type="CUDA_R_16BF",
        d_type="CUDA_R_16BF",
        compute_type="COMPUTE_32F",
        scale_type="CUDA_R_32F",
        scalar_dtype="float32",
        ledger_dtypes=("bf16", "bf16", "bf16"),
        scale_pointers=(),
        tn_only=False,
        alignment=1,
        pointer_alignment=2,
        min_compute_capability=80,
        path="bf16_tensor",
        description="bf16 in and out, fp32 accumulate (cuBLASLt, beside cuBLAS gemmEx)",
    ),
}


# The dtypes only cuBLASLt runs: cublasGemmEx has no FP8 types, and rooflab's int8 GEMM is
# cuBLASLt's IMMA (bf16 runs through both: rooflab.backends.cublas_args).
LT_ONLY_DTYPES = ("fp8_e4m3", "fp8_e5m2", "int8")


def _types(dtype: str) -> LtTypes:
    if dtype not in LT_GEMM_TYPES:
        known = ", ".join(LT_GEMM_TYPES)
        raise BackendError(f"dtype {dtype!r} has no cuBLASLt mapping; known: {known}")
    return LT_GEMM_TYPES[dtype]


@dataclass(frozen=True)
class LtGemm:
    """The shape arguments of one cublasLtMatmul (A = W, B = X, C = D = Y; column-major)."""

    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldd: int  # C has the same layout as D

    @property
    def a_shape(self) -> tuple[int, int]:
        """(rows, cols) of A as stored: cublasLtMatrixLayoutCreate's arguments, with lda."""
        return (self.m, self.k) if self.transa == OP_N else (self.k, self.m)

    @property
    def b_shape(self) -> tuple[int, int]:
        return (self.k, self.n) if self.transb == OP_N else (self.n, self.k)

    @property
    def d_shape(self) -> tuple[int, int]:
        return self.m, self.n


def lt_library_paths(compute_capability: int) -> dict[str, str]:
    """The dtypes a device of this compute capability (90 for 9.0) runs through cuBLASLt, and the
    compute path each is paired with: FP8 from 8.9, int8 tensor cores from 7.5, bf16 from 8.0."""
    return {
        dtype: types.path
        for dtype, types in LT_GEMM_TYPES.items()
        if compute_capability >= types.min_compute_capability
    }


def _tn_required(types: LtTypes, compute_capability: int) -> bool:
    # FP8 on data-centre Blackwell (10.x, 11.x) takes every layout; Ada, Hopper and Blackwell
    # GeForce (12.x) only TN. IMMA with the regular order is TN-only everywhere.
    if not types.tn_only:
        return False
    return types.integer or not 100 <= compute_capability < 120


def row_major_lt_gemm(
    m: int, n: int, k: int, layout: str, dtype: str, compute_capability: int = 90
) -> LtGemm:
    """cuBLASLt arguments for row-major Y[M×N] = X[M×K]·W (nn) or X·Wᵀ with W stored N×K (nt).

    Refuses (BackendError, one line naming the dtype and what rule) a layout the dtype's kernels
    lack, a device too old for the dtype, and N or K off the dtype's alignment. M is free: the
    weight-reuse sweeps' M = 1, 2, 3, ... are cuBLASLt's n, which has no alignment rule."""
    if layout not in ("nn", "nt"):
        raise BackendError(f"unknown layout {layout!r}; supported: nn, nt")
    types = _types(dtype)
    check_compute_capability(dtype, compute_capability)
    if layout == "nn" and _tn_required(types, compute_capability):
        raise BackendError(
            f"{dtype} through cuBLASLt refuses layout nn: its kernels take only the TN format "
            "(A transposed, B not: both operands K-major), so W must be stored N×K (layout nt)"
        )
    for name, size, role in (
        ("N", n, "cuBLASLt's m and the leading dimension of Y"),
        ("K", k, "cuBLASLt's k and the leading dimension of X and W"),
    ):
        if size % types.alignment:
            raise BackendError(
                f"{dtype} through cuBLASLt needs {name} a multiple of {types.alignment}, got "
                f"{name}={size}: {name} is {role}, which its kernels need aligned"
            )
    call = row_major_gemm(m, n, k, layout)  # cublasGemmEx's mapping: A = W, B = X, C = D = Y
    return LtGemm(call.transa, call.transb, call.m, call.n, call.k, call.lda, call.ldb, call.ldc)


def check_compute_capability(dtype: str, compute_capability: int) -> None:
    """Refuse (one line) a device too old for the dtype's cuBLASLt kernels."""
    required = _types(dtype).min_compute_capability
    if compute_capability < required:
        major, minor = divmod(required, 10)
        raise BackendError(
            f"{dtype} through cuBLASLt needs compute capability {major}.{minor} or later; this "
            f"device has {compute_capability // 10}.{compute_capability % 10}"
        )


def check_pointer_alignment(dtype: str, name: str, pointer: int) -> None:
    """A device pointer of operand `name` on the dtype's alignment (CuPy's allocations are)."""
    alignment = _types(dtype).pointer_alignment
    if pointer % alignment:
        raise BackendError(
            f"{dtype} through cuBLASLt needs {name} {alignment}-byte aligned; its address "
            f"{pointer:#x} is not"
        )


def lt_gemm_ledger(m: int, n: int, k: int, dtype: str) -> GemmLedger:
    """The GEMM's ledger: X, W, Y in their stored dtypes, plus the per-tensor scales' bytes
    (FP8: the two float32 scales of X and W). Its work is in OP for int8 (`work_unit`)."""
    types = _types(dtype)
    x, w, y = types.ledger_dtypes
    return gemm_ledger(m, n, k, x, w, y, tensor_scales=len(types.scale_pointers))


# -- what the call computes ----------------------------------------------------------------------


def _decode(buffer: np.ndarray, data_type: str) -> np.ndarray:
    """Stored elements as exact float64 values (int64 for integers)."""
    buffer = np.asarray(buffer)
    if buffer.dtype != np.dtype(_STORAGE[data_type]):
        raise ValueError(f"{data_type} is stored as {_STORAGE[data_type]}, got {buffer.dtype}")
    if data_type in _FP8_CODES:
        return fp8_bits_to_float32(np, buffer, _FP8_CODES[data_type]).astype(np.float64)
    if data_type == "CUDA_R_16BF":
        return bf16_bits_to_float32(np, buffer).astype(np.float64)
    return buffer.astype(np.int64)


def column_major(buffer: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    """The rows×cols matrix a flat column-major buffer holds: element (i, j) at i + j·ld."""
    buffer = np.ravel(buffer)
    if ld < rows:
        raise ValueError(f"leading dimension {ld} is less than the {rows} rows")
    needed = ld * (cols - 1) + rows
    if buffer.size < needed:
        raise ValueError(f"a {rows}x{cols} matrix with ld={ld} needs {needed} elements")
    padded = np.zeros(ld * cols, dtype=buffer.dtype)
    padded[: min(buffer.size, ld * cols)] = buffer[: ld * cols]
    return padded.reshape(cols, ld).T[:rows, :]


def _to_storage(values: np.ndarray, types: LtTypes) -> np.ndarray:
    """Round the exact result to D's type as the device does: fp32 result, then bf16 (nearest,
    ties to even); int32 exactly, refusing a value int32 cannot hold (the device would wrap)."""
    if types.integer:
        largest = int(np.max(np.abs(values))) if values.size else 0
        if largest > INT32_MAX:
            raise ValueError(f"int8 GEMM result {largest} overflows int32 (limit {INT32_MAX})")
        return values.astype(np.int32)
    return float32_to_bf16_bits(np, values.astype(np.float32))


def lt_matmul_model(
    gemm: LtGemm,
    dtype: str,
    a: np.ndarray,
    b: np.ndarray,
    *,
    scale_a: float = 1.0,
    scale_b: float = 1.0,
    alpha: float = 1,
) -> np.ndarray:
    """D of cublasLtMatmul(alpha, A, B, beta = 0) as a flat column-major buffer (ldd·n elements,
    in D's storage): A and B are the stored buffers (bit patterns) read through the layouts and
    ops of `gemm`; D = alpha·scale_a·scale_b·op(A)·op(B), exact in float64 (int64 for int8), then
    rounded once to D's type. The scales apply to FP8 only (elsewhere they must stay 1)."""
    types = _types(dtype)
    if not types.scale_pointers and (scale_a, scale_b) != (1.0, 1.0):
        raise ValueError(f"{dtype} has no per-tensor scales")
    op_a = column_major(_decode(a, types.a_type), *gemm.a_shape, gemm.lda)
    op_b = column_major(_decode(b, types.b_type), *gemm.b_shape, gemm.ldb)
    op_a = op_a if gemm.transa == OP_N else op_a.T
    op_b = op_b if gemm.transb == OP_N else op_b.T
    if types.integer:
        product = int(alpha) * (op_a @ op_b)
    else:
        product = (float(alpha) * scale_a * scale_b) * (op_a @ op_b)
    d = np.zeros(gemm.ldd * gemm.n, dtype=np.dtype(types.y_storage))
    d.reshape(gemm.n, gemm.ldd).T[: gemm.m, :] = _to_storage(product, types)
    return d


def dequantised_reference(
    x: np.ndarray,
    w: np.ndarray,
    layout: str,
    dtype: str,
    *,
    scale_x: float = 1.0,
    scale_w: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """The row-major reference scale_x·scale_w·X·op(W) from the stored operands (bit patterns
    decoded exactly: float64, int64 for int8), and its magnitude scale_x·scale_w·|X|·|op(W)| that
    the componentwise error is measured against."""
    types = _types(dtype)
    x64 = _decode(x, types.b_type)
    w64 = _decode(w, types.a_type)
    w_kn = w64 if layout == "nn" else w64.T
    scale = scale_x * scale_w if types.scale_pointers else 1
    return scale * (x64 @ w_kn), scale * (np.abs(x64) @ np.abs(w_kn))


# -- tolerances ----------------------------------------------------------------------------------

U_FP32_ACCUMULATE = 2.0**-23  # fp32 accumulation, twice 2^-24: tensor cores may truncate
U_BF16_OUT = 2.0**-8
# Hopper's FP8 tensor cores keep about 14 bits in their own accumulator between promotions to
# fp32 (DeepSeek-V3 technical report, arXiv:2412.19437, §3.3.2, measured on H800); cuBLASLt
# promotes periodically (FAST_ACCUM = 0); CUTLASS and DeepSeek promote every 128 K-elements (4
# WGMMAs), which this takes as the interval. Twice the round-to-nearest unit: 2^-13.
U_FP8_CHUNK = 2.0**-13
FP8_CHUNK_K = 128


@dataclass(frozen=True)
class LtRounding:
    output: float  # u_out: the result rounded to bf16
    accumulate: float  # u_acc: fp32 sums (of chunk results for FP8)
    chunk: float  # u_chunk: the tensor core's own accumulator within a chunk (0: fp32 there)
    chunk_k: int  # K-elements per chunk (1: every product is summed in fp32)


LT_ROUNDING = {
    "fp8_e4m3": LtRounding(U_BF16_OUT, U_FP32_ACCUMULATE, U_FP8_CHUNK, FP8_CHUNK_K),
    "fp8_e5m2": LtRounding(U_BF16_OUT, U_FP32_ACCUMULATE, U_FP8_CHUNK, FP8_CHUNK_K),
    "bf16": LtRounding(U_BF16_OUT, U_FP32_ACCUMULATE, 0.0, 1),
}


def lt_tolerances(dtype: str, k: int) -> dict[str, float]:
    """Error bounds against the dequantised float64 reference, whose inputs are exact (FP8 and
    bf16 codes decode exactly), so what remains is accumulation and output rounding. With c =
    min(chunk_k, K), ceil(K/c) chunk results summed in fp32, and s = 1 more fp32 rounding where
    per-tensor scales multiply the sum (FP8; s = 0 for bf16):

    - relative Frobenius  <=  2 u_out + 4 sqrt(ceil(K/c) + s) u_acc + 4 sqrt(c) u_chunk
      (errors of random-signed sums grow like sqrt of the terms; 4x margin);
    - componentwise (against scale·|X|·|W|)  <=  u_out + (ceil(K/c) + 1 + s) u_acc + c u_chunk
      (Higham's deterministic gamma for each stage: catches one wrong element);
    - int8: exact, max |error| = 0.

    For bf16 (c = 1, no chunk term, s = 0) these are rooflab.experiments.correctness's bf16
    tolerances. For FP8 at K = 4096: 1.33% and 1.95%, the chunk term dominating (the GPU's
    measured errors decide whether it can be tightened)."""
    types = _types(dtype)
    if types.integer:
        return {"max_abs_error": 0.0}
    r = LT_ROUNDING[dtype]
    chunk = min(r.chunk_k, k)
    chunks = -(-k // chunk)
    scaled = 1 if types.scale_pointers else 0
    return {
        "rel_frobenius": 2 * r.output
        + 4 * math.sqrt(chunks + scaled) * r.accumulate
        + 4 * math.sqrt(chunk) * r.chunk,
        "max_componentwise": r.output + (chunks + 1 + scaled) * r.accumulate + chunk * r.chunk,
    }


@dataclass(frozen=True)
class LtCheck:
    metric: str
    error: float
    tolerance: float
    passed: bool


def compare_with_reference(
    got: np.ndarray, reference: np.ndarray, magnitude: np.ndarray, dtype: str, k: int
) -> list[LtCheck]:
    """Checks of a result (values, already decoded: float64, or integers for int8) against
    `dequantised_reference`: every element finite, then the dtype's tolerances."""
    got = np.asarray(got)
    non_finite = int(np.count_nonzero(~np.isfinite(got))) if got.dtype.kind == "f" else 0
    checks = [LtCheck("finite", float(non_finite), 0.0, non_finite == 0)]
    limits = lt_tolerances(dtype, k)
    if "max_abs_error" in limits:
        error = int(np.max(np.abs(got.astype(np.int64) - reference.astype(np.int64))))
        checks.append(LtCheck("max_abs_error", float(error), 0.0, error == 0))
        return checks
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        difference = got.astype(np.float64) - reference
        errors = {
            "rel_frobenius": float(np.linalg.norm(difference) / np.linalg.norm(reference)),
            "max_componentwise": float(np.max(np.abs(difference) / magnitude)),
        }
    for metric, error in errors.items():
        passed = math.isfinite(error) and error <= limits[metric]
        checks.append(LtCheck(metric, error, limits[metric], passed))
    return checks
