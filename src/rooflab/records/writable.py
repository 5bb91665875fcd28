"""Before measuring: can the run folder be written? A measurement that ends in a PermissionError
when its finished tables are written has cost its minutes for nothing.

And when a write runs out of space anyway (the disk filled while measuring; the store or the
report on a full disk): `space_for` is the one way every writer of rooflab says so, in one line
naming the file (DiskFull), with what it left half-written removed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

# A write that fails for lack of space: the disk is full, or the user's quota is.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class NotWritable(OSError):
    """A folder a run would be written to that cannot be written."""


class DiskFull(NotWritable):
    """A write that failed for lack of space; the message names the file, what was being written
    and what was kept."""


def check_writable(folder: str | os.PathLike) -> Path:
    """Create `folder` (and its parents) if needed and write a byte to a file in it and remove it;
    raise NotWritable naming the folder and why (a full disk included), before anything is
    measured."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".rooflab-writable-")
        try:
            os.write(handle, b"\0")  # a full disk refuses the first byte, not an empty file
        finally:
            os.close(handle)
            os.unlink(probe)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise NotWritable(
            f"{folder}: cannot write a run there ({reason}); nothing was measured"
        ) from None
    return folder


def out_of_space(error: BaseException) -> bool:
    """Whether `error` is a write that failed for lack of space: an OSError ENOSPC or EDQUOT, or
    an engine's error (DuckDB's, Arrow's) whose message carries the system's words for them."""
    if isinstance(error, OSError) and error.errno in NO_SPACE:
        return True
    text = str(error)
    return any(os.strerror(code) in text for code in NO_SPACE)


def disk_full(path: str | os.PathLike, writing: str, kept: str) -> DiskFull:
    """`<path>: no space left on the device (writing <writing>); <kept>`."""
    return DiskFull(f"{path}: no space left on the device (writing {writing}); {kept}")


@contextlib.contextmanager
def space_for(
    path: str | os.PathLike,
    writing: str,
    *,
    kept: str = "nothing was kept",
    partial: Iterable[str | os.PathLike] = (),
) -> Iterator[None]:
    """Run a write of `path`; where it fails for lack of space, remove `partial` (the files or
    folders it leaves half-written) and raise DiskFull naming `path`, what was being written and
    what was kept. Other errors pass through as they are."""
    try:
        yield
    except Exception as error:
        if not out_of_space(error):
            raise
        for leftover in partial:
            _remove(Path(leftover))
        raise disk_full(path, writing, kept) from None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
