"""F and the cold-cache Q of one torch operator from what `record_shapes` kept: its inputs' shapes
(`Input Dims`), their types (`Input type`) and its scalar arguments (`Concrete Inputs`).

One table, LEDGERS, names each operator that has a ledger and its function. The matmul family is a
GEMM of rooflab.model (F = 2MNK per matrix product, `gemm_ledger`; the bias of addmm/linear and a
read C of addmm/baddbmm are bytes, no FLOPs, as torch's own `with_flops` formula counts them);
elementwise arithmetic counts FLOPs per output element (add, sub, mul, div: 1; addcmul, addcdiv:
2; an add or sub with alpha ≠ 1: 2); relu, clamp_min and threshold_backward are comparisons, which
are no FLOPs (as the built-in relu workload and Nsight Compute's FLOP counters say): F = 0, their
Q is all they do. Reductions (sum, mean) count one add per input element. Elementwise ops and
reductions on integers or bool have no ledger (no FLOPs to count). Q always counts each
tensor input read once and the output written once (a broadcast input at its own size; a 0-dim
tensor, a wrapped Python number, as its one element; a Scalar argument as none).

Copies, views, allocations, conversions, losses and everything not in LEDGERS have no ledger: their
time is kept and counted as time without one. A type the table of torch's type names does not know
raises UnknownDtype where a ledger needs it; a known type without a FLOP ledger in rooflab (int64,
bool, complex) leaves the op without a ledger.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

from rooflab.model import ELEMENT_BITS, gemm_ledger, tensor_bytes

__all__ = [
    "LEDGERS",
    "NON_TENSOR_TYPES",
    "TORCH_DTYPES",
    "OpLedger",
    "UnknownDtype",
    "op_ledger",
    "rooflab_dtype",
]

# torch's `Input type` of a tensor (caffe2 TypeMeta names, as torch 2.13 writes them) -> rooflab's
# dtype name: model.ELEMENT_BITS's where rooflab has roofs for it, else a storage-only name
TORCH_DTYPES = {
    "double": "fp64",
    "float": "fp32",
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "c10::Float8_e4m3fn": "fp8_e4m3",
    "c10::Float8_e5m2": "fp8_e5m2",
    "signed char": "int8",
    "int": "int32",
    "long int": "int64",
    "short int": "int16",
    "unsigned char": "uint8",
    "short unsigned int": "uint16",
    "unsigned int": "uint32",
    "long unsigned int": "uint64",
    "bool": "bool",
    "c10::Float8_e4m3fnuz": "fp8_e4m3fnuz",
    "c10::Float8_e5m2fnuz": "fp8_e5m2fnuz",
    "c10::complex<c10::Half>": "complex32",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    # the same types as a clang-built torch names them (seen in real traces: "long")
    "long": "int64",
    "short": "int16",
    "unsigned short": "uint16",
    "unsigned long": "uint64",
}
# Storage bits of the dtypes rooflab keeps no roof for (bool is stored in a byte)
STORAGE_BITS = {
    "int64": 64,
    "int16": 16,
    "uint8": 8,
    "uint16": 16,
    "uint32": 32,
    "uint64": 64,
    "bool": 8,
    "fp8_e4m3fnuz": 8,
    "fp8_e5m2fnuz": 8,
    "complex32": 32,
    "complex64": 64,
    "complex128": 128,
}
# `Input type` of an argument that is no tensor ("": an absent optional)
NON_TENSOR_TYPES = frozenset(
    {"", "Scalar", "ScalarList", "TensorList", "GenericList", "String", "Device", "Layout", "None"}
)
# The dtypes whose work rooflab counts (its GEMM ledger's, the floating point ones and int8 GEMMs)
WORK_DTYPES = frozenset(ELEMENT_BITS)
FLOAT_ORDER = ("fp8_e4m3", "fp8_e5m2", "bf16", "fp16", "fp32", "fp64")


class UnknownDtype(ValueError):
    """A tensor type name the table of torch's types does not know, where a ledger needs it."""


@dataclass(frozen=True)
class OpLedger:
    kind: str  # "matmul", "elementwise" or "reduction"
    flops: int  # useful FLOPs (OP for an int8 GEMM)
    bytes: int  # cold-cache model: each input read once, the output written once
    dtype: str  # rooflab's dtype of the work (the output's)


@dataclass(frozen=True)
class Tensor:
    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def bytes(self) -> int:
        return dtype_bytes(self.dtype, self.numel)


def rooflab_dtype(torch_type: str) -> str | None:
    """rooflab's name of a torch tensor type; None for an argument that is no tensor. A name
    neither table knows raises UnknownDtype."""
    if torch_type in NON_TENSOR_TYPES:
        return None
    try:
        return TORCH_DTYPES[torch_type]
    except KeyError:
        raise UnknownDtype(
            f"unknown tensor type {torch_type!r}: rooflab cannot size its elements (it knows "
            f"{len(TORCH_DTYPES)} of torch's types, rooflab.imports.op_ledgers.TORCH_DTYPES)"
        ) from None


def dtype_bytes(dtype: str, count: int) -> int:
    if dtype in STORAGE_BITS:
        return -(-count * STORAGE_BITS[dtype] // 8)
    return tensor_bytes(dtype, count)


def tensors(dims: list, types: list) -> list[Tensor | None]:
    """Each input as a Tensor, or None where it is no tensor (a Scalar, a list, an absent one)."""
    found: list[Tensor | None] = []
    for shape, torch_type in zip(dims, types, strict=False):
        dtype = rooflab_dtype(torch_type)
        if dtype is None or not all(isinstance(n, int) for n in shape):
            found.append(None)
        else:
            found.append(Tensor(tuple(shape), dtype))
    return found


def _scalar(concrete: list, position: int, default: float) -> float:
    """A scalar argument as recorded (`Concrete Inputs`), or the default when it is not there."""
    try:
        return float(concrete[position])
    except (IndexError, TypeError, ValueError):
        return default


def _result_dtype(inputs: list[Tensor]) -> str:
    """torch's promotion, for the float types: a tensor with dimensions outranks a 0-dim one
    (a wrapped Python number does not promote), then the widest float wins."""
    ranked = [t for t in inputs if t.shape] or inputs
    floats = [t.dtype for t in ranked if t.dtype in FLOAT_ORDER]
    return max(floats, key=FLOAT_ORDER.index) if floats else ranked[0].dtype


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    padded = [(1,) * (rank - len(s)) + s for s in shapes]
    return tuple(max(sizes) for sizes in zip(*padded, strict=True))


# ---- the matmul family -------------------------------------------------------------------------


def _gemm(m: int, n: int, k: int, x: Tensor, w: Tensor, **extra) -> OpLedger | None:
    if x.dtype not in WORK_DTYPES or w.dtype not in WORK_DTYPES or 0 in (m, n, k):
        return None
    ledger = gemm_ledger(m, n, k, x.dtype, w.dtype, x.dtype, **extra)
    return OpLedger("matmul", ledger.flops, ledger.bytes, x.dtype)


def _batched(batch: int, m: int, n: int, k: int, inputs: list[Tensor]) -> OpLedger | None:
    """`batch` products of m x k by k x n: F from the GEMM ledger per product, Q each input read
    once at its recorded size (a broadcast operand once) and the output written once."""
    x, w = inputs[-2], inputs[-1]
    one = _gemm(m, n, k, x, w)
    if one is None or batch == 0:
        return None
    q = sum(t.bytes for t in inputs) + dtype_bytes(x.dtype, batch * m * n)
    return OpLedger("matmul", batch * one.flops, q, x.dtype)


def mm(t: list, concrete: list) -> OpLedger | None:
    a, b = t[0], t[1]
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    return _gemm(a.shape[0], b.shape[1], a.shape[1], a, b)


def addmm(t: list, concrete: list) -> OpLedger | None:
    """beta·C + mat1·mat2: C is a bias (N elements, broadcast) or an M x N matrix read once."""
    c, a, b = t[0], t[1], t[2]
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
        return None
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    beta = _scalar(concrete, 3, 1.0)
    if c is None or beta == 0:
        return _gemm(m, n, k, a, b)
    if c.numel == m * n and m > 1:
        return _gemm(m, n, k, a, b, beta=beta)
    return _gemm(m, n, k, a, b, bias=True, bias_dtype=c.dtype)


def bmm(t: list, concrete: list) -> OpLedger | None:
    a, b = t[0], t[1]
    if a is None or b is None or len(a.shape) != 3 or len(b.shape) != 3:
        return None
    return _batched(a.shape[0], a.shape[1], b.shape[2], a.shape[2], [a, b])


def baddbmm(t: list, concrete: list) -> OpLedger | None:
    c, a, b = t[0], t[1], t[2]
    if a is None or b is None or len(a.shape) != 3 or len(b.shape) != 3:
        return None
    read = [a, b] if c is None or _scalar(concrete, 3, 1.0) == 0 else [c, a, b]
    return _batched(a.shape[0], a.shape[1], b.shape[2], a.shape[2], read)


def matmul(t: list, concrete: list) -> OpLedger | None:
    """torch.matmul's cases: vectors are a matrix of one row (first) or one column (second);
    leading dimensions broadcast into a batch of products."""
    a, b = t[0], t[1]
    if a is None or b is None or not a.shape or not b.shape:
        return None
    a_shape = (1, *a.shape) if len(a.shape) == 1 else a.shape
    b_shape = (*b.shape, 1) if len(b.shape) == 1 else b.shape
    batch = math.prod(_broadcast([a_shape[:-2], b_shape[:-2]]) or (1,))
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    return _batched(batch, m, n, k, [a, b])


def linear(t: list, concrete: list) -> OpLedger | None:
    """input[..., K] · weight[N, K]ᵀ + bias[N]: one GEMM of M = the input's leading elements."""
    x, w = t[0], t[1]
    if x is None or w is None or not x.shape or len(w.shape) != 2:
        return None
    bias = len(t) > 2 and t[2] is not None
    m = math.prod(x.shape[:-1])
    extra = {"bias": True, "bias_dtype": t[2].dtype} if bias else {}
    return _gemm(m, w.shape[0], x.shape[-1], x, w, **extra)


# ---- elementwise and reductions ----------------------------------------------------------------


def elementwise(flops_per_element: int, alpha_at: int | None = None) -> Callable:
    """An elementwise op: its output is its tensor inputs broadcast; `alpha_at`: the position of
    an alpha argument whose value ≠ 1 adds a multiply per element."""

    def ledger(t: list, concrete: list) -> OpLedger | None:
        inputs = [x for x in t if x is not None]
        if not inputs:
            return None
        dtype = _result_dtype(inputs)
        if dtype not in FLOAT_ORDER:
            return None  # integer or bool arithmetic: no FLOPs to count
        numel = math.prod(_broadcast([x.shape for x in inputs]))
        per = flops_per_element
        if alpha_at is not None and _scalar(concrete, alpha_at, 1.0) != 1.0:
            per += 1
        q = sum(x.bytes for x in inputs) + dtype_bytes(dtype, numel)
        return OpLedger("elementwise", per * numel, q, dtype)

    return ledger


def reduction(t: list, concrete: list) -> OpLedger | None:
    """sum / mean over `dim` (all when absent or empty), keepdim or not: an add per input
    element; Q the input read once and the reduced output written once."""
    x = t[0] if t else None
    if x is None or x.dtype not in FLOAT_ORDER:
        return None
    kept = list(x.shape)
    try:
        dims = json.loads(concrete[1]) if len(concrete) > 1 and concrete[1] else []
    except ValueError:
        dims = []
    dims = dims if isinstance(dims, list) else [dims]
    for d in dims or range(len(kept)):
        if isinstance(d, int) and -len(kept) <= d < len(kept):
            kept[d] = 1
    out = math.prod(kept)
    return OpLedger("reduction", x.numel, x.bytes + dtype_bytes(x.dtype, out), x.dtype)


_ADD_LIKE = elementwise(1, alpha_at=2)
_ONE = elementwise(1)
_TWO = elementwise(2)
_COMPARISON = elementwise(0)

# operator name as torch.profiler writes it -> ledger(tensors, concrete inputs)
LEDGERS: dict[str, Callable[[list, list], OpLedger | None]] = {
    "aten::mm": mm,
    "aten::addmm": addmm,
    "aten::bmm": bmm,
    "aten::baddbmm": baddbmm,
    "aten::matmul": matmul,
    "aten::linear": linear,
    "aten::add": _ADD_LIKE,
    "aten::add_": _ADD_LIKE,
    "aten::sub": _ADD_LIKE,
    "aten::sub_": _ADD_LIKE,
    "aten::rsub": _ADD_LIKE,
    "aten::mul": _ONE,
    "aten::mul_": _ONE,
    "aten::div": _ONE,
    "aten::div_": _ONE,
    "aten::addcmul": _TWO,
    "aten::addcmul_": _TWO,
    "aten::addcdiv": _TWO,
    "aten::addcdiv_": _TWO,
    "aten::relu": _COMPARISON,
    "aten::relu_": _COMPARISON,
    "aten::clamp_min": _COMPARISON,
    "aten::clamp_min_": _COMPARISON,
    "aten::threshold_backward": _COMPARISON,
    "aten::sum": reduction,
    "aten::mean": reduction,
}


def op_ledger(op: str, dims: list, types: list, concrete: list) -> OpLedger | None:
    """The ledger of one recorded operator call, or None (no ledger for it). Raises UnknownDtype
    for a tensor type name torch wrote that rooflab does not know, where the ledger needs it."""
    function = LEDGERS.get(op)
    if function is None:
        return None
    return function(tensors(dims, types), list(concrete or []))
