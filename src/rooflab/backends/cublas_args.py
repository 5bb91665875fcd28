"""cuBLAS arguments for rooflab's row-major GEMMs, as plain data (no CuPy needed to compute them).

cuBLAS is column-major. A row-major M×N matrix is, read column-major, its N×M transpose. So the
row-major product Y = X·op(W) is computed as the column-major product Yᵀ = op(W)ᵀ·Xᵀ: cuBLAS's
"A" is W, its "B" is X, and its m, n, k are N, M, K.

- nn: W is row-major K×N, which column-major is Wᵀ (N×K, leading dimension N): A = W untransposed.
- nt: W is stored row-major N×K (Y = X·Wᵀ), which column-major is K×N with leading dimension K;
  cuBLAS transposes it (op T) to get the N×K matrix it needs.
- X (row-major M×K) is column-major K×M with leading dimension K; Y has leading dimension N.

Types per rooflab dtype: the storage type of X, W, Y, the compute type, and the dtype of the host
scalars alpha and beta (which follows the compute type). Names are resolved against
cupy.cuda.runtime (CUDA_R_*) and cupy_backends.cuda.libs.cublas (CUBLAS_COMPUTE_*) when used.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GEMM_TYPES", "CublasGemm", "GemmTypes", "row_major_gemm"]

OP_N, OP_T = 0, 1  # CUBLAS_OP_N, CUBLAS_OP_T (cublas_api.h)


@dataclass(frozen=True)
class GemmTypes:
    data_type: str  # cupy.cuda.runtime attribute: the type of X, W and Y
    compute_type: str  # cupy_backends.cuda.libs.cublas attribute
    scalar_dtype: str  # numpy dtype of alpha and beta
    storage: str  # numpy/cupy dtype the operands are stored in
    description: str


GEMM_TYPES: dict[str, GemmTypes] = {
    "fp64": GemmTypes(
        "CUDA_R_64F", "CUBLAS_COMPUTE_64F", "float64", "float64", "fp64 in, fp64 compute"
    ),
    # Default math mode on rooflab's own handle, so no TF32 sneaks into fp32.
    "fp32": GemmTypes(
        "CUDA_R_32F", "CUBLAS_COMPUTE_32F", "float32", "float32", "fp32 in, fp32 compute"
    ),
    "tf32": GemmTypes(
        "CUDA_R_32F",
        "CUBLAS_COMPUTE_32F_FAST_TF32",
        "float32",
        "float32",
        "fp32 in and out, TF32 tensor-core products, fp32 accumulate",
    ),
    "fp16": GemmTypes(
        "CUDA_R_16F",
        "CUBLAS_COMPUTE_32F",
        "float32",
        "float16",
        "fp16 in and out, fp32 accumulate (tensor cores)",
    ),
    "bf16": GemmTypes(
        "CUDA_R_16BF",
        "CUBLAS_COMPUTE_32F",
        "float32",
        "uint16",  # bit patterns: rooflab.backends.bfloat16
        "bf16 in and out, fp32 accumulate (tensor cores)",
    ),
}


@dataclass(frozen=True)
class CublasGemm:
    """The shape arguments of cublasGemmEx for one row-major GEMM (A = W, B = X, C = Y)."""

    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int


def row_major_gemm(m: int, n: int, k: int, layout: str) -> CublasGemm:
    """cuBLAS arguments for row-major Y[M×N] = X[M×K]·W (nn) or X·Wᵀ with W stored N×K (nt)."""
    if min(m, n, k) < 1:
        raise ValueError(f"GEMM sizes must be positive, got m={m} n={n} k={k}")
    if layout == "nn":
        return CublasGemm(OP_N, OP_N, n, m, k, lda=n, ldb=k, ldc=n)
    if layout == "nt":
        return CublasGemm(OP_T, OP_N, n, m, k, lda=k, ldb=k, ldc=n)
    raise ValueError(f"unknown layout {layout!r}; supported: nn, nt")


def library_paths(compute_capability: int) -> dict[str, str]:
    """The GEMM dtypes a device of this compute capability (90 for 9.0) runs through cuBLAS, and
    the compute path each one's ceiling is named by: sm_80 and later have bf16 and TF32 GEMM and
    FP64 tensor cores."""
    if compute_capability >= 80:
        return {
            "fp64": "fp64_tensor",
            "fp32": "fp32_cublas",
            "tf32": "tf32_tensor",
            "fp16": "fp16_tensor",
            "bf16": "bf16_tensor",
        }
    return {"fp64": "fp64_cublas", "fp32": "fp32_cublas", "fp16": "fp16_tensor"}
