"""Evicting given arrays from every cache level: each of their cache lines flushed by the
instruction made for it (x86-64 `clflushopt`, or `clflush` where the CPU lacks it; AArch64
`dc civac`), then a fence. Compiled by llvmlite into this process, called through ctypes.

A cold GEMM sample needs its operands out of the caches, nothing more: flushing their lines is
exact whatever the last level holds (a VM's share of a host's L3 is not what it reports), costs
the operands' size (0.31 ms for 8 MB here, where a pass over the buffer sized from the last
level's edge, 868 MB, took 33 ms), and leaves no dirty lines of a buffer for the timed call to
write back (which the operands' byte ledger does not count). A line is flushed from every
core's caches and the shared ones alike (the instructions act on the whole coherence domain), so
one thread does it.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Sequence
from pathlib import Path

import llvmlite.binding as llvm
from llvmlite import ir

# Lines are flushed at this stride: the line size of x86-64 and of most AArch64 cores (a
# 128-byte line is still flushed whole, twice over).
LINE_BYTES = 64

_INT64 = ir.IntType(64)
_BYTE_POINTER = ir.IntType(8).as_pointer()


def _instructions(machine: str, cpu_flags: set[str]) -> tuple[str, str] | None:
    """(flush one line at $0, the fence after them) for this machine; None where there is none."""
    if machine in ("x86_64", "AMD64"):
        return ("clflushopt ($0)" if "clflushopt" in cpu_flags else "clflush ($0)"), "mfence"
    if machine in ("aarch64", "arm64"):
        return "dc civac, $0", "dsb ish"
    return None


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((row for row in text.splitlines() if row.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def _module(flush: str, fence: str) -> ir.Module:
    """void evict_lines(i64 start, i64 end): flush every line from start to end, then fence."""
    module = ir.Module(name="rooflab_evict")
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [_INT64, _INT64]), "evict")
    start, end = function.args
    entry, check, body, done = map(function.append_basic_block, ("entry", "check", "body", "done"))
    builder = ir.IRBuilder(entry)
    builder.branch(check)
    builder.position_at_end(check)
    address = builder.phi(_INT64)
    address.add_incoming(start, entry)
    builder.cbranch(builder.icmp_unsigned(">=", address, end), done, body)
    builder.position_at_end(body)
    line = ir.InlineAsm(
        ir.FunctionType(ir.VoidType(), [_BYTE_POINTER]), flush, "r,~{memory}", side_effect=True
    )
    builder.call(line, [builder.inttoptr(address, _BYTE_POINTER)])
    following = builder.add(address, ir.Constant(_INT64, LINE_BYTES))
    builder.branch(check)
    address.add_incoming(following, body)
    builder.position_at_end(done)
    barrier = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), fence, "~{memory}", side_effect=True)
    builder.call(barrier, [])
    builder.ret_void()
    return module


class Evictor:
    """Flushes arrays' lines from every cache level (see the module); built once per backend."""

    def __init__(self, flush: str, fence: str):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm.initialize_native_asmparser()  # inline asm is parsed by the target's asm parser
        parsed = llvm.parse_assembly(str(_module(flush, fence)))
        parsed.verify()
        machine = llvm.Target.from_default_triple().create_target_machine(opt=2)
        self._engine = llvm.create_mcjit_compiler(parsed, machine)  # owns the code's memory
        self._engine.finalize_object()
        address = self._engine.get_function_address("evict")
        self._evict = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(address)
        self.instruction = flush.split()[0]

    def evict(self, arrays: Sequence) -> int:
        """Flush every line of `arrays` (numpy arrays; a view flushes the span of memory it
        reaches) from every cache level; the bytes flushed."""
        flushed = 0
        for array in arrays:
            low, high = _byte_span(array)
            self._evict(low - low % LINE_BYTES, high)
            flushed += high - low
        return flushed

    def describe(self, nbytes: int) -> str:
        return (
            f"{self.instruction} of every cache line of the call's operands ({nbytes} B), "
            "then a fence, before each sample: out of every cache level whatever its size"
        )


def _byte_span(array) -> tuple[int, int]:
    """First and one-past-last byte address `array` reaches (strides of either sign)."""
    interface = array.__array_interface__
    low = high = interface["data"][0]
    if array.size == 0:
        return low, low
    for extent, stride in zip(array.shape, array.strides, strict=True):
        reach = (extent - 1) * stride
        low, high = (low + reach, high) if stride < 0 else (low, high + reach)
    return low, high + array.itemsize


def evictor_for_this_machine() -> Evictor | None:
    """The Evictor for this CPU; None where no cache-line flush instruction is known for it."""
    instructions = _instructions(platform.machine(), _cpu_flags())
    return Evictor(*instructions) if instructions else None
