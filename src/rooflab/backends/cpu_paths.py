"""The vector instruction paths of a CPU: which the machine has, and what a kernel built for each
may use (pure: no compiling, no measuring).

A compute roof belongs to one instruction path (docs/measure.md, "Ceilings (CPU)"): code built for
AVX2 runs under the AVX2 roof even on a CPU with AVX-512, whose roof may be twice as high (Intel
cores with two 512-bit FMA ports) or the same (AMD Zen 4 splits 512-bit ops). So every path the CPU
has gets its own FMA ceiling, the widest first; a dtype's default roof is its widest path's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VectorPath:
    isa: str  # short name, stored with each ceiling: "avx512", "avx2", "neon"
    label: str  # for people: "AVX-512"
    architecture: str  # "x86_64" or "aarch64"
    vector_bits: int
    requires: frozenset[str]  # LLVM host-CPU features the path needs (all of them)
    llvm_features: str  # what a kernel built for this path may use (and may not: "-avx512f")
    registers: int  # architectural vector registers
    # Independent vector accumulators per thread: at least FMA latency x FMA pipes of the cores
    # the path is found on (4 cycles x 2 pipes on Intel and Zen; 4 x 4 on wide Arm cores), within
    # the registers (two more hold the chain's x and y).
    fma_chains: int
    stream_unroll: int  # vectors per array per trip of the copy and triad loops

    def lanes(self, dtype: str) -> int:
        return self.vector_bits // {"fp64": 64, "fp32": 32}[dtype]


PATHS = (
    VectorPath(
        "avx512", "AVX-512", "x86_64", 512, frozenset({"avx512f", "fma"}),
        "+avx512f,+avx512vl,+avx2,+fma,+avx", registers=32, fma_chains=16, stream_unroll=4,
    ),
    VectorPath(
        "avx2", "AVX2/FMA3", "x86_64", 256, frozenset({"avx2", "fma"}),
        # what a build for AVX2 may use: no EVEX encodings, no ymm16-31
        "+avx2,+fma,+avx,-avx512f", registers=16, fma_chains=12, stream_unroll=4,
    ),
    VectorPath(
        "neon", "NEON", "aarch64", 128, frozenset({"neon"}),
        "+neon", registers=32, fma_chains=24, stream_unroll=8,
    ),
)  # fmt: skip
PATHS_BY_ISA = {path.isa: path for path in PATHS}

# Paths a CPU may have that rooflab does not build, and why (said, never silently dropped).
UNBUILT = {
    "sve": (
        "aarch64",
        "SVE: rooflab emits fixed-width vectors, and SVE's width is the machine's (scalable); "
        "its FMA roof is not measured (the NEON path is)",
    ),
}

_ARCHITECTURE = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def architecture_of(machine: str) -> str | None:
    """platform.machine()'s name -> the architecture of PATHS (None: no path built for it)."""
    return _ARCHITECTURE.get(machine.lower())


def vector_paths(machine: str, features: set[str]) -> tuple[tuple[VectorPath, ...], list[str]]:
    """The paths this CPU has, widest first, and a sentence for each it has that is not built (or
    for an architecture without any). `features`: LLVM's host-CPU features that are on."""
    architecture = architecture_of(machine)
    if architecture is None:
        return (), [f"no vector instruction path is built for architecture {machine!r}"]
    have = tuple(
        path for path in PATHS if path.architecture == architecture and path.requires <= features
    )
    unbuilt = [
        reason
        for feature, (arch, reason) in UNBUILT.items()
        if arch == architecture and feature in features
    ]
    if not have:
        needs = " or ".join(
            "+".join(sorted(p.requires)) for p in PATHS if p.architecture == architecture
        )
        unbuilt.append(f"this {architecture} CPU has no FMA vector path rooflab builds ({needs})")
    return have, unbuilt
