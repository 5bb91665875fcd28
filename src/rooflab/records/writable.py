"""Before measuring: can the run folder be written? A measurement that ends in a PermissionError
when its finished tables are written has cost its minutes for nothing."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class NotWritable(OSError):
    """A folder a run would be written to that cannot be written."""


def check_writable(folder: str | os.PathLike) -> Path:
    """Create `folder` (and its parents) if needed and write and remove a file in it; raise
    NotWritable naming the folder and why, before anything is measured."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".rooflab-writable-"):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise NotWritable(
            f"{folder}: cannot write a run there ({reason}); nothing was measured"
        ) from None
    return folder
