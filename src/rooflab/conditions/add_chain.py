"""The dependent-add loop the CPU clock is measured with (conditions.cpu): blocks of
ADDS_PER_BLOCK inline-asm adds, one per cycle. Imported on first use, since it needs numba; numba
caches it on disk, as it does the kernels (compiling it took each measuring job about 0.4 s)."""

from __future__ import annotations

import platform

import llvmlite.binding as llvm
import numba
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from rooflab.conditions.add_asm import _add_block_asm

_ASM_TEXT = _add_block_asm(platform.machine())  # ClockUnavailable on an unknown architecture

# numba does not set up LLVM's asm parser, without which inline asm cannot be emitted.
llvm.initialize_native_asmparser()


@intrinsic
def add_block(typingctx, accumulator, step):
    signature = types.int64(types.int64, types.int64)

    def codegen(context, builder, signature, args):
        int64 = ir.IntType(64)
        asm = ir.InlineAsm(
            ir.FunctionType(int64, [int64, int64]),
            _ASM_TEXT,
            "=r,r,0",  # $0: the accumulator (out, tied to the second input); $1: step
            side_effect=True,  # keeps LLVM from hoisting or merging the block
        )
        accumulator_value, step_value = args
        return builder.call(asm, [step_value, accumulator_value])

    return signature, codegen


def _add_chain(blocks, step):
    accumulator = 0
    for _ in range(blocks):
        accumulator = add_block(accumulator, step)
    return accumulator


try:
    run_add_chain = numba.njit(cache=True)(_add_chain)
except RuntimeError:  # "cannot cache function ...: no locator available"
    run_add_chain = numba.njit(cache=False)(_add_chain)
