"""The CPU ceiling kernels as LLVM IR with explicit vector types, one build per instruction path
(backends.cpu_paths), compiled by llvmlite into this process and called through ctypes.

Why IR and not numba or C: a compiler picks its own vector width (numba's LLVM and gcc -O3 both
chose 256-bit ymm on an AVX-512 Xeon: half its FMA peak). Here the width is the type: a path's
kernels use <lanes x double> (or float) values, so an AVX-512 build runs zmm and an AVX2 build
ymm, whatever the compiler prefers. No IR optimisation passes run (only the code generator, as
for the clock loop in conditions.add_chain): each loop body is the code written below, with
exactly `fma_chains` FMAs per iteration, which tests check in the emitted assembly.

Kernels (one thread's chunk; the caller runs a chunk per thread, ctypes releasing the GIL):
- fma_{fp64,fp32}(iters, x, y) -> double: `fma_chains` independent vector chains
  acc = fma(x, y, acc) = acc + x·y in registers (the accumulator form every ISA has: x86
  vfmadd231, Arm fmla; each chain grows by x·y a step, finite for any count one window takes);
  2 x lanes x chains FLOPs per iteration.
- read(a, n, reps), copy(a, b, n, reps), triad(a, b, c, n, reps) -> double, fp64, STREAM's byte
  convention: `reps` passes over n elements (n a multiple of `elements_per_trip`). Anti-collapse:
  every pass's sum reaches read's checksum; copy and triad add one freshly written element per
  pass, and triad's scalar changes every pass.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir

from rooflab.backends.cpu_paths import VectorPath

_I64 = ir.IntType(64)
_F64 = ir.DoubleType()
_F32 = ir.FloatType()
_PTR = ir.PointerType()
_SCALAR = {"fp64": _F64, "fp32": _F32}
_C_SCALAR = {"fp64": ctypes.c_double, "fp32": ctypes.c_float}
_LLVM_SUFFIX = {"fp64": "f64", "fp32": "f32"}
READ_ACCUMULATORS = 8  # vector partial sums in read: 2 loads a cycle x add latency 4
FMA_X = {"fp64": 0.999999, "fp32": 0.9999}  # arguments, not constants: nothing folds
FMA_Y = {"fp64": 1e-6, "fp32": 1e-4}
_TRIPLE = {"x86_64": "x86_64-unknown-linux-gnu", "aarch64": "aarch64-unknown-linux-gnu"}


def elements_per_trip(path: VectorPath, kernel: str) -> int:
    """fp64 elements one loop trip of a STREAM kernel covers (its n must be a multiple)."""
    vectors = READ_ACCUMULATORS if kernel == "read" else path.stream_unroll
    return vectors * path.lanes("fp64")


def fma_flops_per_iteration(path: VectorPath, dtype: str) -> int:
    return 2 * path.fma_chains * path.lanes(dtype)


# -- IR --------------------------------------------------------------------------------------


def _splat(builder: ir.IRBuilder, value, lanes: int):
    vector = ir.VectorType(value.type, lanes)
    one = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(_I64, 0))
    return builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(ir.IntType(32), lanes), 0))


def _hsum(builder: ir.IRBuilder, vectors: list) -> ir.Value:
    """The sum of all lanes of all vectors, as a double."""
    while len(vectors) > 1:
        pairs = zip(vectors[::2], vectors[1::2], strict=False)
        vectors = [builder.fadd(a, b) for a, b in pairs] + vectors[len(vectors) // 2 * 2 :]
    (vector,) = vectors
    total = ir.Constant(_F64, 0.0)
    for lane in range(vector.type.count):
        value = builder.extract_element(vector, ir.Constant(_I64, lane))
        total = builder.fadd(total, value if value.type == _F64 else builder.fpext(value, _F64))
    return total


def _fma_intrinsic(module: ir.Module, vector: ir.VectorType) -> ir.Function:
    name = f"llvm.fma.v{vector.count}{_LLVM_SUFFIX['fp64' if vector.element == _F64 else 'fp32']}"
    existing = module.globals.get(name)
    return existing or ir.Function(module, ir.FunctionType(vector, [vector] * 3), name)


def _fma_function(module: ir.Module, path: VectorPath, dtype: str) -> None:
    scalar, lanes = _SCALAR[dtype], path.lanes(dtype)
    vector = ir.VectorType(scalar, lanes)
    fma = _fma_intrinsic(module, vector)
    function = ir.Function(module, ir.FunctionType(_F64, [_I64, scalar, scalar]), f"fma_{dtype}")
    iters, x, y = function.args
    entry, loop, done = map(function.append_basic_block, ("entry", "loop", "done"))
    builder = ir.IRBuilder(entry)
    xs, ys = _splat(builder, x, lanes), _splat(builder, y, lanes)
    starts = [
        ir.Constant(vector, [1.0 + 1e-3 * (chain * lanes + lane) for lane in range(lanes)])
        for chain in range(path.fma_chains)
    ]
    builder.cbranch(builder.icmp_signed(">", iters, ir.Constant(_I64, 0)), loop, done)
    builder.position_at_end(loop)
    index = builder.phi(_I64)
    chains = [builder.phi(vector) for _ in starts]
    stepped = [builder.call(fma, [xs, ys, chain]) for chain in chains]
    following = builder.add(index, ir.Constant(_I64, 1))
    builder.cbranch(builder.icmp_signed("<", following, iters), loop, done)
    index.add_incoming(ir.Constant(_I64, 0), entry)
    index.add_incoming(following, loop)
    for chain, start, step in zip(chains, starts, stepped, strict=True):
        chain.add_incoming(start, entry)
        chain.add_incoming(step, loop)
    builder.position_at_end(done)
    finals = []
    for start, step in zip(starts, stepped, strict=True):
        final = builder.phi(vector)
        final.add_incoming(start, entry)
        final.add_incoming(step, loop)
        finals.append(final)
    builder.ret(_hsum(builder, finals))


def _stream_function(module: ir.Module, path: VectorPath, kernel: str) -> None:
    """read / copy / triad over one chunk of n fp64 elements, `reps` passes (n, reps >= 1)."""
    arrays = {"read": 1, "copy": 2, "triad": 3}[kernel]
    lanes = path.lanes("fp64")
    vector = ir.VectorType(_F64, lanes)
    signature = ir.FunctionType(_F64, [_PTR] * arrays + [_I64, _I64])
    function = ir.Function(module, signature, f"stream_{kernel}")
    *pointers, n, reps = function.args
    entry, rep, trip, rep_end = map(function.append_basic_block, ("entry", "rep", "trip", "end"))
    builder = ir.IRBuilder(entry)
    builder.branch(rep)

    builder.position_at_end(rep)  # one pass
    r = builder.phi(_I64)
    checksum = builder.phi(_F64)
    if kernel == "triad":
        s = builder.fadd(ir.Constant(_F64, 3.0), builder.fmul(
            ir.Constant(_F64, 1e-9), builder.sitofp(r, _F64)
        ))  # fmt: skip
        ss = _splat(builder, s, lanes)
    zero = ir.Constant(vector, [0.0] * lanes)
    builder.branch(trip)

    builder.position_at_end(trip)  # one loop trip: `vectors` vectors of each array
    i = builder.phi(_I64)
    vectors = READ_ACCUMULATORS if kernel == "read" else path.stream_unroll
    sums = [builder.phi(vector) for _ in range(vectors)] if kernel == "read" else []

    def at(pointer, u):
        offset = builder.add(i, ir.Constant(_I64, u * lanes))
        return builder.gep(pointer, [offset], inbounds=True, source_etype=_F64)

    def load(pointer, u):
        return builder.load(at(pointer, u), typ=vector, align=8)

    new_sums = []
    for u in range(vectors):
        if kernel == "read":
            new_sums.append(builder.fadd(sums[u], load(pointers[0], u)))
        elif kernel == "copy":
            builder.store(load(pointers[0], u), at(pointers[1], u), align=8)
        else:  # a = b + s * c
            fma = _fma_intrinsic(module, vector)
            value = builder.call(fma, [ss, load(pointers[2], u), load(pointers[1], u)])
            builder.store(value, at(pointers[0], u), align=8)
    following = builder.add(i, ir.Constant(_I64, vectors * lanes))
    builder.cbranch(builder.icmp_signed("<", following, n), trip, rep_end)
    i.add_incoming(ir.Constant(_I64, 0), rep)
    i.add_incoming(following, trip)
    for phi, new in zip(sums, new_sums, strict=True):
        phi.add_incoming(zero, rep)
        phi.add_incoming(new, trip)

    builder.position_at_end(rep_end)
    if kernel == "read":
        finals = []
        for new in new_sums:
            final = builder.phi(vector)
            final.add_incoming(new, trip)
            finals.append(final)
        pass_value = _hsum(builder, finals)
    else:  # one element this pass wrote, a different one each pass
        written = pointers[1] if kernel == "copy" else pointers[0]
        element = builder.gep(written, [builder.urem(r, n)], inbounds=True, source_etype=_F64)
        pass_value = builder.load(element, typ=_F64)
    updated = builder.fadd(checksum, pass_value)
    next_r = builder.add(r, ir.Constant(_I64, 1))
    r.add_incoming(ir.Constant(_I64, 0), entry)
    r.add_incoming(next_r, rep_end)
    checksum.add_incoming(ir.Constant(_F64, 0.0), entry)
    checksum.add_incoming(updated, rep_end)
    done = function.append_basic_block("done")
    builder.cbranch(builder.icmp_signed("<", next_r, reps), rep, done)
    builder.position_at_end(done)
    builder.ret(updated)


def module_for(path: VectorPath) -> ir.Module:
    module = ir.Module(name=f"rooflab_{path.isa}")
    module.triple = _TRIPLE[path.architecture]
    for dtype in _SCALAR:
        _fma_function(module, path, dtype)
    for kernel in ("read", "copy", "triad"):
        _stream_function(module, path, kernel)
    return module


# -- compiling -------------------------------------------------------------------------------


def _target_machine(path: VectorPath, host: bool):
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    if host:
        target = llvm.Target.from_default_triple()
        cpu = llvm.get_host_cpu_name()
    else:  # cross-compiled, only to read its assembly (tests of another architecture's path)
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        target = llvm.Target.from_triple(_TRIPLE[path.architecture])
        cpu = "generic"
    return target.create_target_machine(cpu=cpu, features=path.llvm_features, opt=2)


def assembly(path: VectorPath, host: bool = True) -> str:
    """The assembly the path's kernels compile to (host: for this CPU, as they run)."""
    parsed = llvm.parse_assembly(str(module_for(path)))
    parsed.verify()
    return _target_machine(path, host).emit_assembly(parsed)


@dataclass(frozen=True)
class CompiledPath:
    path: VectorPath
    engine: object  # owns the code's memory: kept as long as the functions
    fma: dict  # dtype -> ctypes function (iters, x, y) -> double
    stream: dict  # kernel -> ctypes function (*pointers, n, reps) -> double


@functools.cache
def compiled(path: VectorPath) -> CompiledPath:
    """The path's kernels, compiled for this CPU (once per process)."""
    parsed = llvm.parse_assembly(str(module_for(path)))
    parsed.verify()
    engine = llvm.create_mcjit_compiler(parsed, _target_machine(path, host=True))
    engine.finalize_object()
    fma = {
        dtype: ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_int64, c_type, c_type)(
            engine.get_function_address(f"fma_{dtype}")
        )
        for dtype, c_type in _C_SCALAR.items()
    }
    stream = {
        kernel: ctypes.CFUNCTYPE(
            ctypes.c_double, *[ctypes.c_void_p] * arrays, ctypes.c_int64, ctypes.c_int64
        )(engine.get_function_address(f"stream_{kernel}"))
        for kernel, arrays in {"read": 1, "copy": 2, "triad": 3}.items()
    }
    return CompiledPath(path, engine, fma, stream)
