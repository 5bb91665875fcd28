"""Running a measuring tool (ncu, perf) as a child process, and saying why it could not run.

A tool that is missing, not permitted, or fails is a result, not a crash: the caller gets an
`Unavailable` with the exact reason (the tool's own error lines where it printed any) and the
pipeline carries on with model bytes (`q_source = model`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Unavailable:
    """A tool or counter that could not be read here, and why (recorded as `unavailable`)."""

    tool: str
    reason: str
    status: str = "unavailable"

    def __str__(self) -> str:
        return f"{self.tool} unavailable: {self.reason}"


@dataclass(frozen=True)
class ToolRun:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    file_text: str | None = None  # what the tool wrote to its output file; None: no such file

    @property
    def output(self) -> str:
        return self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr


def run_tool(
    tool: str, argv: Sequence[str], timeout_s: float, output_file: str | Path | None = None
) -> ToolRun | Unavailable:
    """Run `argv`; a missing or non-executable program or a timeout becomes `Unavailable`.
    `output_file`: where the tool writes its result (ncu --log-file, perf -o); removed first, so
    an earlier run's file is never read, and read back into `file_text`."""
    argv = tuple(str(a) for a in argv)
    if output_file is not None:
        Path(output_file).unlink(missing_ok=True)
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, errors="replace", timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        return Unavailable(tool, f"{argv[0]}: not found (no such program on PATH or at that path)")
    except PermissionError as error:
        return Unavailable(tool, f"{argv[0]}: not permitted to run it ({error.strerror})")
    except OSError as error:
        return Unavailable(tool, f"{argv[0]}: could not be started ({error})")
    except subprocess.TimeoutExpired:
        return Unavailable(tool, f"{' '.join(argv[:3])} ...: no answer within {timeout_s:g} s")
    written = Path(output_file) if output_file is not None else None
    text = written.read_text(errors="replace") if written and written.exists() else None
    return ToolRun(argv, done.returncode, done.stdout, done.stderr, text)
