"""The dependent-add loop the CPU clock is measured with (conditions.cpu): blocks of
ADDS_PER_BLOCK inline-asm adds, one per cycle, compiled by LLVM (llvmlite, numba's own backend)
into this process and called through ctypes.

llvmlite alone, not numba: loading numba and its CPU target cost every measuring job about 0.9 s
(0.45 s of it even with numba's on-disk cache), while building this loop takes about 50 ms, and
jobs that time only BLAS (GEMM sweeps, correctness, counters) never load numba at all."""

from __future__ import annotations

import ctypes
import platform

import llvmlite.binding as llvm
from llvmlite import ir

from rooflab.conditions.add_asm import _add_block_asm

_INT64 = ir.IntType(64)


def _module(asm_text: str) -> ir.Module:
    """i64 run_add_chain(i64 blocks, i64 step): `blocks` times the asm block on an accumulator
    that starts at 0; returns the accumulator (blocks × ADDS_PER_BLOCK × step)."""
    module = ir.Module(name="rooflab_add_chain")
    function = ir.Function(module, ir.FunctionType(_INT64, [_INT64, _INT64]), "run_add_chain")
    blocks, step = function.args
    entry, check, body, done = map(function.append_basic_block, ("entry", "check", "body", "done"))
    builder = ir.IRBuilder(entry)
    builder.branch(check)
    builder.position_at_end(check)
    index, accumulator = builder.phi(_INT64), builder.phi(_INT64)
    zero = ir.Constant(_INT64, 0)
    index.add_incoming(zero, entry)
    accumulator.add_incoming(zero, entry)
    builder.cbranch(builder.icmp_signed(">=", index, blocks), done, body)
    builder.position_at_end(body)
    asm = ir.InlineAsm(
        ir.FunctionType(_INT64, [_INT64, _INT64]),
        asm_text,
        "=r,r,0",  # $0: the accumulator (out, tied to the second input); $1: step
        side_effect=True,  # keeps LLVM from hoisting or merging the block
    )
    added = builder.call(asm, [step, accumulator])
    following = builder.add(index, ir.Constant(_INT64, 1))
    builder.branch(check)
    index.add_incoming(following, body)
    accumulator.add_incoming(added, body)
    builder.position_at_end(done)
    builder.ret(accumulator)
    return module


def _compile(asm_text: str):
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()  # inline asm is parsed by the target's asm parser
    parsed = llvm.parse_assembly(str(_module(asm_text)))
    parsed.verify()
    machine = llvm.Target.from_default_triple().create_target_machine(opt=2)
    engine = llvm.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    address = engine.get_function_address("run_add_chain")
    call = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(address)
    return engine, call


# The engine owns the code's memory: it lives as long as the module.
_ENGINE, run_add_chain = _compile(_add_block_asm(platform.machine()))  # ClockUnavailable: arch
