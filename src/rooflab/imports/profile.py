"""What an imported profile is (rooflab.imports): its provenance and its operators."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["OPERATOR_COLUMNS", "Profile", "ProfileError", "file_sha256"]


class ProfileError(ValueError):
    """A profile that cannot be imported: one line naming the file and the problem."""


# One row per operator (torch: a CPU op, or a GPU kernel with its launching op) or kernel (ncu).
# Keys every row has (None where the profile does not say):
OPERATOR_COLUMNS = (
    "index",  # its order in the profile (0, 1, ...): the key that pairs two profiles' operators
    "op",  # its name as the profile writes it: `aten::addmm`, a kernel's demangled name
    "kind",  # "cpu_op", "kernel" (torch: a GPU kernel; ncu: every row)
    "parent",  # the index of a kernel's launching op, or of a cpu_op's enclosing one (torch)
    "input_dims",  # list of lists: each input's shape, as recorded (torch record_shapes)
    "dtype",  # rooflab's dtype name (fp32, fp64, bf16, fp16, int64, ...) of its main input
    "start_s",  # its start, seconds from the profile's first event
    "time_s",  # its own duration (s), as the profile measured it
    "thread",  # its CPU thread (torch cpu_op) or CUDA stream (kernel), as a string
    "flops",  # F: from the profiler where it counted them, else rooflab's ledger; None: no ledger
    "flops_source",  # "profiler", "ledger", "counters" (ncu) or None
    "bytes",  # Q: the cold-cache model of its inputs and outputs (torch), or counted DRAM/HBM (ncu)
    "q_source",  # "model" (torch: shapes x dtype sizes) or "counters" (ncu)
    "ledger",  # which ledger gave flops and bytes: "matmul", "elementwise", ... (None: none)
    "nested",  # inside another operator of the profile: its time is in its parent's
    "counted",  # ncu: {"bytes_by_level": {level: B}, "flops_by_path": {...}, ...}; torch: None
)


@dataclass
class Profile:
    """A profile as read: its provenance and its operators (OPERATOR_COLUMNS)."""

    tool: str  # "torch" or "ncu"
    tool_version: str | None  # as the profile says (torch's trace has none: None)
    path: Path
    sha256: str
    device: str | None  # what it ran on, as the profile names it ("cpu", "NVIDIA H200")
    recorded_at: str | None  # ISO 8601 UTC, where the profile says when it was recorded
    operators: list[dict] = field(default_factory=list)
    settings: dict = field(default_factory=dict)  # ncu: replay mode, cache and clock control
    notes: list[str] = field(default_factory=list)  # lines for the user (metrics missing, ...)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
