"""Every CuPy and NVML call of the GPU code names a function the installed packages have, with
as many arguments as that function takes: a misspelt name or a dropped argument fails here, not
first on a GPU. Read from the sources (ast), checked against the installed cupy (the signatures
Cython writes into each function's docstring) and pynvml (inspect).
"""

import ast
import inspect
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "rooflab"
CUDA = SRC / "backends" / "cuda.py"
NVML = SRC / "conditions" / "nvml.py"
# The files that call CuPy's low-level modules by these names, and how many such calls each has
# at least (the reading found them).
CUPY_CALLERS = {
    CUDA: 8,
    SRC / "backends" / "cuda_host_link.py": 3,
    SRC.parents[1] / "benchmarks" / "gpu_references_peers.py": 2,
}

# How src/rooflab/backends/cuda.py names CuPy's low-level modules.
CUPY_MODULES = {
    "runtime": "cupy_backends.cuda.api.runtime",
    "_runtime": "cupy_backends.cuda.api.runtime",
    "driver": "cupy_backends.cuda.api.driver",
    "_driver": "cupy_backends.cuda.api.driver",
    "cublas": "cupy_backends.cuda.libs.cublas",
    "_cublas": "cupy_backends.cuda.libs.cublas",
    "nvtx": "cupy.cuda.nvtx",
}


def _module_of(node: ast.expr) -> str | None:
    """'runtime' for `runtime.x` and for `self._runtime.x`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.attr if node.value.id == "self" else None
    return None


def _uses(path: Path, modules) -> list[tuple[str, str, ast.AST]]:
    """(module, attribute, node) of every `module.attribute` in the file, calls included."""
    return [
        (_module_of(node.value), node.attr, node)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and _module_of(node.value) in modules
    ]


def _calls(path: Path, modules) -> list[tuple[str, str, ast.Call]]:
    return [
        (_module_of(node.func.value), node.func.attr, node)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and _module_of(node.func.value) in modules
    ]


def _cython_arity(function) -> tuple[int, int]:
    """(required, total) parameters from the signature line Cython puts in the docstring."""
    first = (function.__doc__ or "").strip().splitlines()[0]
    match = re.match(rf"{function.__name__}\((.*)\)", first)
    assert match, f"{function.__name__}: no signature in its docstring: {first!r}"
    parameters = [p.strip() for p in match.group(1).split(",") if p.strip()]
    parameters = [p for p in parameters if p not in ("self", "*")]
    return sum("=" not in p for p in parameters), len(parameters)


def _from_import(path: str):
    """`from package import name`, as cuda.py imports them: CuPy's packages load the CUDA
    library (from its wheel) on that attribute access, where `import package.name` does not."""
    package, _, name = path.rpartition(".")
    return getattr(__import__(package, fromlist=[name]), name)


@pytest.fixture(scope="module")
def cupy_modules():
    pytest.importorskip("cupy")
    try:
        return {name: _from_import(path) for name, path in CUPY_MODULES.items()}
    except ImportError as error:  # a CUDA library (cuBLAS) not installed here
        pytest.skip(f"a CuPy CUDA module is not loadable here: {error}")


@pytest.mark.parametrize("path", CUPY_CALLERS, ids=lambda p: p.name)
def test_every_cupy_name_used_exists(cupy_modules, path):
    uses = _uses(path, CUPY_MODULES)
    assert len(uses) > CUPY_CALLERS[path]
    missing = [
        f"{module}.{name} (line {node.lineno})"
        for module, name, node in uses
        if not hasattr(cupy_modules[module], name)
    ]
    assert missing == []


@pytest.mark.parametrize("path", CUPY_CALLERS, ids=lambda p: p.name)
def test_every_cupy_call_has_its_arguments(cupy_modules, path):
    checked = 0
    for module, name, call in _calls(path, CUPY_MODULES):
        function = getattr(cupy_modules[module], name)
        if any(isinstance(a, ast.Starred) for a in call.args) or call.keywords:
            continue  # gemmEx: its argument tuple is checked below
        if not callable(function) or not (function.__doc__ or "").startswith(name):
            continue  # a Python function (nvtx), not a Cython one with a signature line
        required, total = _cython_arity(function)
        given = len(call.args)
        assert required <= given <= total, f"{module}.{name} (line {call.lineno}): {given} args"
        checked += 1
    assert checked >= CUPY_CALLERS[path]


def test_gemm_ex_gets_every_argument_it_takes(cupy_modules):
    tree = ast.parse(CUDA.read_text())
    (arguments,) = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "arguments" for t in node.targets)
    ]
    assert isinstance(arguments, ast.Tuple)
    required, total = _cython_arity(cupy_modules["cublas"].gemmEx)
    assert len(arguments.elts) == required == total == 19


def test_device_attributes_read_by_the_cuda_backend_exist(cupy_modules):
    tree = ast.parse(CUDA.read_text())
    keys = {
        node.slice.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "attributes"
        and isinstance(node.slice, ast.Constant)
    }
    assert "MaxSharedMemoryPerMultiprocessor" in keys and len(keys) >= 4
    runtime = cupy_modules["runtime"]
    # cupy.cuda.Device.attributes names each value after runtime.cudaDevAttr<key>
    assert [key for key in sorted(keys) if not hasattr(runtime, f"cudaDevAttr{key}")] == []


def test_cupy_objects_the_cuda_backend_sets_or_reads_exist():
    cupy = pytest.importorskip("cupy")
    for owner, name in (
        (cupy.RawKernel, "preferred_shared_memory_carveout"),
        (cupy.RawKernel, "kernel"),
        (cupy.cuda.Device, "attributes"),
        (cupy.cuda.Device, "pci_bus_id"),
        (cupy.cuda.Device, "compute_capability"),
        (cupy.cuda, "get_elapsed_time"),
        (cupy.cuda, "get_local_runtime_version"),
    ):
        assert hasattr(owner, name), f"{owner.__name__}.{name}"
    assert "Can be set" in cupy.RawKernel.preferred_shared_memory_carveout.__doc__


def test_every_nvml_call_matches_pynvml():
    pynvml = pytest.importorskip("pynvml")
    calls = _calls(NVML, {"nvml"})
    names = {name for _, name, _ in _uses(NVML, {"nvml"})}
    assert len(names) > 20
    assert sorted(name for name in names if not hasattr(pynvml, name)) == []
    for _, name, call in calls:
        parameters = inspect.signature(getattr(pynvml, name)).parameters.values()
        required = sum(p.default is inspect.Parameter.empty for p in parameters)
        assert required <= len(call.args) <= len(parameters), f"nvml.{name} (line {call.lineno})"


def test_the_nvmath_names_rooflab_uses_exist_as_its_fake_has_them():
    """rooflab.backends.cublaslt calls nvmath.bindings.cublasLt by the names (and enum values,
    attribute buffer types) of tests/test_cublaslt_wiring.py's fake, and takes its types from
    cublaslt_args: all of them must exist in the installed nvmath-python."""
    try:
        import nvmath
        from nvmath.bindings import cublas as nv_cublas
        from nvmath.bindings import cublasLt
    except Exception as error:  # absent, or its CUDA bindings missing
        pytest.skip(f"nvmath-python not importable: {type(error).__name__}: {error}")
    import numpy as np

    from rooflab.backends.cublaslt_args import LT_GEMM_TYPES
    from tests import cublaslt_fake as fake

    used = [name for name in vars(fake.FakeCublasLt) if not name.startswith("_")]
    assert len(used) > 15
    assert [name for name in used if not hasattr(cublasLt, name)] == []
    for mine, real in (
        (fake.CudaDataType, nvmath.CudaDataType),
        (fake.ComputeType, nv_cublas.ComputeType),
        (fake.MatmulDescAttribute, cublasLt.MatmulDescAttribute),
        (fake.MatmulPreferenceAttribute, cublasLt.MatmulPreferenceAttribute),
    ):
        assert {m.name: int(m) for m in mine} == {m.name: int(getattr(real, m.name)) for m in mine}
    for types in LT_GEMM_TYPES.values():
        for name in (types.a_type, types.b_type, types.d_type, types.scale_type):
            assert hasattr(nvmath.CudaDataType, name), name
        assert hasattr(nv_cublas.ComputeType, types.compute_type), types.compute_type
    attribute = cublasLt.MatmulDescAttribute
    lt_fake = fake.FakeCublasLt()
    for name in ("TRANSA", "TRANSB", "A_SCALE_POINTER", "B_SCALE_POINTER"):
        real_dtype = np.dtype(cublasLt.get_matmul_desc_attribute_dtype(attribute[name]))
        assert real_dtype == np.dtype(lt_fake.get_matmul_desc_attribute_dtype(attribute[name]))
    workspace = cublasLt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES
    assert np.dtype(cublasLt.get_matmul_preference_attribute_dtype(workspace)) == np.uint64
    # as many arguments as the fake takes (its matmul takes the 16 that the wiring tests unpack)
    for name in used:
        function = getattr(fake.FakeCublasLt, name)
        if not inspect.isfunction(function):
            continue  # enums, the error class, MatmulHeuristicResult
        real = len(inspect.signature(getattr(cublasLt, name)).parameters)
        mine = inspect.signature(function).parameters
        has_star = any(p.kind == p.VAR_POSITIONAL for p in mine.values())
        assert real == (16 if has_star else len(mine) - 1), name  # less self
