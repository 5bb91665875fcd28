"""The inline-asm block of the dependent-add loop the CPU clock is measured with, per
architecture (pure text; conditions.add_chain compiles it)."""

from __future__ import annotations


class ClockUnavailable(RuntimeError):
    """The effective CPU clock cannot be measured here (architecture or toolchain missing)."""


# Dependent adds per inline-asm block; the loop counter runs beside the chain, off its critical
# path, so one block costs ADDS_PER_BLOCK cycles.
ADDS_PER_BLOCK = 128

# x86_64 adds a register, not `add $1, reg`: recent Intel cores (Golden Cove on) are reported to
# fold small immediates at rename and would run an immediate chain faster than one add per cycle.
# aarch64 adds an immediate: the register form is ADD (shifted register), which some cores (and
# LLVM's Apple model) give 2 cycles, while the immediate form is 1 cycle on all known cores.
_ADD_LINE_BY_ARCHITECTURE = {
    "x86_64": "add $1, $0",  # AT&T: $0 += $1
    "amd64": "add $1, $0",
    "aarch64": "add $0, $0, #1",  # step is 1 by construction; $1 stays unused
    "arm64": "add $0, $0, #1",
}


def _add_block_asm(machine: str) -> str:
    line = _ADD_LINE_BY_ARCHITECTURE.get(machine.lower())
    if line is None:
        supported = ", ".join(sorted(_ADD_LINE_BY_ARCHITECTURE))
        raise ClockUnavailable(
            f"no dependent-add loop for architecture {machine!r} (supported: {supported})"
        )
    return "\n\t".join([line] * ADDS_PER_BLOCK)
