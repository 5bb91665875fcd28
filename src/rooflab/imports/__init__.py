"""Profiles a user already has, read as they are (docs/imports.md): a `torch.profiler` Chrome
trace (`torch_trace`, with the operator ledgers in `op_ledgers`) and a raw-page CSV export of an
Nsight Compute report (`ncu_export`). Each becomes a `Profile`: where it came from and one row per
operator or kernel (OPERATOR_COLUMNS). Nothing here measures or places: `roofline.imported` puts
the rows on a machine's measured roofs. A file that cannot be read as its tool wrote it is one
`ProfileError` naming the file and the problem (what to do where there is something to do)."""

from __future__ import annotations

from pathlib import Path

from rooflab.imports.profile import OPERATOR_COLUMNS, Profile, ProfileError, file_sha256

__all__ = [
    "OPERATOR_COLUMNS",
    "TOOLS",
    "Profile",
    "ProfileError",
    "device_backend",
    "file_sha256",
    "read_profile",
]

TOOLS = ("torch", "ncu")


def read_profile(tool: str, path: Path) -> Profile:
    """The profile `tool` wrote at `path` (one ProfileError where it cannot be read as such)."""
    path = Path(path)
    if not path.is_file():
        raise ProfileError(f"{path}: no such file")
    if tool == "torch":
        from rooflab.imports.torch_trace import read_torch_trace as read
    elif tool == "ncu":
        from rooflab.imports.ncu_export import read_ncu_export as read
    else:
        raise ProfileError(f"{path}: no importer for tool {tool!r}; tools: {', '.join(TOOLS)}")
    return read(path)


def device_backend(device: str | None) -> str:
    """The backend whose roofs a profile recorded on `device` belongs on: "cpu" for a CPU
    trace's, else "cuda"."""
    return "cpu" if (device or "cpu") == "cpu" else "cuda"
