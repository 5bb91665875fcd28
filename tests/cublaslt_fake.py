"""A fake CuPy (numpy arrays with device pointers) and a fake nvmath-python whose cublasLt records
every descriptor and runs cublasLtMatmul from what it was given: the CUDA backend's cuBLASLt
dispatch runs over them without a GPU (tests/test_cublaslt_wiring.py), and their names and
values are checked against the real nvmath-python (tests/test_cuda_api_surface.py)."""

import ctypes
import enum
import sys
import types

import numpy as np

from rooflab.backends.bfloat16 import bf16_bits_to_float32, float32_to_bf16_bits
from rooflab.backends.fp8 import fp8_bits_to_float32

# -- a fake CuPy: numpy arrays with device pointers ------------------------------------------------

MEMORY: dict[int, np.ndarray] = {}  # the fake device's memory: address -> the array there


class FakeArray(np.ndarray):
    @property
    def data(self):
        assert self.flags.c_contiguous
        MEMORY[self.ctypes.data] = self
        return types.SimpleNamespace(ptr=self.ctypes.data)

    def get(self, stream=None):
        return np.array(self)


def _wrap(value):
    if isinstance(value, np.ndarray):
        return value.view(FakeArray)
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    return value


def _numpy_attribute(name):
    target = getattr(np, name)
    if callable(target) and not isinstance(target, type):
        return lambda *args, **kwargs: _wrap(target(*args, **kwargs))
    return target


fake_cupy = types.ModuleType("fake_cupy")
fake_cupy.__getattr__ = _numpy_attribute
fake_cupy.asnumpy = lambda array, stream=None: np.array(array)


class FakeStream:
    ptr = 0x5EA

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- a fake nvmath-python ------------------------------------------------------------------------


class CudaDataType(enum.IntEnum):  # cudaDataType_t values (library_types.h)
    CUDA_R_32F = 0
    CUDA_R_8I = 3
    CUDA_R_32I = 10
    CUDA_R_16BF = 14
    CUDA_R_8F_E4M3 = 28
    CUDA_R_8F_E5M2 = 29


class ComputeType(enum.IntEnum):  # cublasComputeType_t
    COMPUTE_32F = 68
    COMPUTE_32I = 72


class MatmulDescAttribute(enum.IntEnum):  # cublasLtMatmulDescAttributes_t
    TRANSA = 3
    TRANSB = 4
    A_SCALE_POINTER = 17
    B_SCALE_POINTER = 18


class MatmulPreferenceAttribute(enum.IntEnum):
    MAX_WORKSPACE_BYTES = 1


class cuBLASLtError(Exception):
    pass


class FakeCublasLt:
    """nvmath.bindings.cublasLt's functions used by rooflab, on the fake device. `bug`: None, or
    a wrong call the fake device makes: "ignore_transa", "ignore_a_scale"."""

    MatmulDescAttribute = MatmulDescAttribute
    MatmulPreferenceAttribute = MatmulPreferenceAttribute
    cuBLASLtError = cuBLASLtError

    def __init__(self, bug: str | None = None, algorithms: int = 1):
        self.bug, self.algorithms = bug, algorithms
        self.objects: dict[int, dict] = {}
        self.calls: list[tuple] = []
        self.heuristic_calls: list[tuple] = []
        self._next = 1000

    def _new(self, kind, **fields) -> int:
        self._next += 1
        self.objects[self._next] = {"kind": kind, **fields}
        return self._next

    def create(self):
        return self._new("handle")

    def destroy(self, handle):
        self.objects.pop(handle)

    matmul_desc_destroy = matrix_layout_destroy = matmul_preference_destroy = destroy

    def get_version(self):
        return 130000

    def matmul_desc_create(self, compute, scale):
        return self._new("desc", compute=ComputeType(compute), scale=CudaDataType(scale))

    def get_matmul_desc_attribute_dtype(self, attribute):  # as nvmath's table
        transposes = (MatmulDescAttribute.TRANSA, MatmulDescAttribute.TRANSB)
        return np.int32 if attribute in transposes else np.intp

    def matmul_desc_set_attribute(self, desc, attribute, buffer, size):
        value = {4: ctypes.c_int32, 8: ctypes.c_int64}[size].from_address(buffer).value
        self.objects[desc][MatmulDescAttribute(attribute).name] = value

    def matrix_layout_create(self, kind, rows, cols, ld):
        return self._new("layout", type=CudaDataType(kind), rows=rows, cols=cols, ld=ld)

    def matmul_preference_create(self):
        return self._new("preference")

    def get_matmul_preference_attribute_dtype(self, attribute):
        return np.uint64

    def matmul_preference_set_attribute(self, preference, attribute, buffer, size):
        assert size == 8 and attribute == MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES
        self.objects[preference]["workspace"] = ctypes.c_uint64.from_address(buffer).value

    class MatmulHeuristicResult:
        def __init__(self, size=1):
            self._data = np.zeros(96 * size, dtype=np.uint8)
            self.ptr = self._data.ctypes.data

    def matmul_algo_get_heuristic(self, handle, desc, a, b, c, d, pref, count, results, found):
        self.heuristic_calls.append((handle, desc, a, b, c, d, pref, count))
        ctypes.c_int32.from_address(found).value = self.algorithms

    def _read(self, pointer, layout) -> np.ndarray:
        """The rows×cols column-major matrix at `pointer`, decoded exactly."""
        kind = layout["type"]
        stored = np.asarray(MEMORY[pointer]).ravel()
        if kind in (CudaDataType.CUDA_R_8F_E4M3, CudaDataType.CUDA_R_8F_E5M2):
            values = fp8_bits_to_float32(np, stored, kind.name[-4:].lower()).astype(np.float64)
        elif kind == CudaDataType.CUDA_R_16BF:
            values = bf16_bits_to_float32(np, stored).astype(np.float64)
        else:  # integers, exact in float64 (|sums| < 2^53), and BLAS-fast
            values = stored.astype(np.float64)
        rows, cols, ld = layout["rows"], layout["cols"], layout["ld"]
        return values[: ld * cols].reshape(cols, ld).T[:rows, :]

    def matmul(self, *args):
        _, desc, alpha, a, adesc, b, bdesc, beta, _, _, d, ddesc = args[:12]
        self.calls.append(args)
        desc = self.objects[desc]
        scalar = ctypes.c_int32 if desc["scale"] == CudaDataType.CUDA_R_32I else ctypes.c_float
        alpha, beta = scalar.from_address(alpha).value, scalar.from_address(beta).value
        op_a = self._read(a, self.objects[adesc])
        op_b = self._read(b, self.objects[bdesc])
        if desc.get("TRANSA") and self.bug != "ignore_transa":
            op_a = op_a.T
        if desc.get("TRANSB"):
            op_b = op_b.T
        scale = 1.0
        for name in ("A_SCALE_POINTER", "B_SCALE_POINTER"):
            if name in desc and not (self.bug == "ignore_a_scale" and name[0] == "A"):
                scale *= float(MEMORY[desc[name]][0])
        product = alpha * scale * (op_a @ op_b) + 0 * beta
        layout = self.objects[ddesc]
        out = MEMORY[d].reshape(-1)[: layout["ld"] * layout["cols"]]
        view = out.reshape(layout["cols"], layout["ld"]).T
        if layout["type"] == CudaDataType.CUDA_R_32I:
            view[: layout["rows"], :] = product.astype(np.int32)
        else:
            view[: layout["rows"], :] = float32_to_bf16_bits(np, product.astype(np.float32))


def install_fake_nvmath(monkeypatch, lt: FakeCublasLt) -> None:
    """sys.modules holds a fake nvmath-python whose bindings are `lt` (and ComputeType)."""
    nvmath = types.ModuleType("nvmath")
    bindings = types.ModuleType("nvmath.bindings")
    cublas = types.ModuleType("nvmath.bindings.cublas")
    cublas.ComputeType = ComputeType
    bindings.cublas, bindings.cublasLt = cublas, lt
    nvmath.bindings, nvmath.CudaDataType, nvmath.__version__ = bindings, CudaDataType, "fake"
    for name, module in (
        ("nvmath", nvmath),
        ("nvmath.bindings", bindings),
        ("nvmath.bindings.cublas", cublas),
        ("nvmath.bindings.cublasLt", lt),
    ):
        monkeypatch.setitem(sys.modules, name, module)
