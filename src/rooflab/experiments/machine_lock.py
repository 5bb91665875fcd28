"""One measurement at a time per machine, whoever started it.

Every measuring process (ceilings, a sweep's check and timing, a counters run; the Snakemake
jobs and `rooflab measure` alike) holds an exclusive lock on one file of the host while it
measures: `/tmp/rooflab-locks/machine.lock` (node-local on a cluster, shared by every user of
the host whatever their TMPDIR says: a per-user TMPDIR would give each user a lock of their
own), or in $ROOFLAB_LOCK_DIR where a site sets one for all its users. The host's lock covers
its GPUs too: a GPU measurement also runs host threads that a CPU measurement would disturb, and
the reverse.

The lock is the kernel's (flock): it goes with the process, so a measurement killed with SIGKILL
frees it at once, and an orphaned job (its Snakemake parent killed) keeps it until it ends, so a
rerun waits for it rather than measuring beside it. A waiting process says what it waits for
(the holder's pid, what it measures, since when), and waits at most $ROOFLAB_LOCK_WAIT_S seconds
(default LOCK_WAIT_S), then stops naming the holder. Children of the holder (a profiler's child)
measure under the parent's lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from rooflab.backends.base import BackendError
from rooflab.experiments.watchdog import job_limit
from rooflab.progress import Progress

LOCK_DIR_ENV = "ROOFLAB_LOCK_DIR"
HELD_ENV = "ROOFLAB_MEASURING_LOCK_PID"  # set for the holder's children: they are under its lock
LOCK_NAME = "machine.lock"
HOST_LOCK_DIR = Path("/tmp/rooflab-locks")  # not tempfile.gettempdir(): TMPDIR is per user
LOCK_WAIT_ENV = "ROOFLAB_LOCK_WAIT_S"
LOCK_WAIT_S = 3600.0  # an hour behind another measurement, then say who holds the machine


class MachineBusy(BackendError):
    """Another process kept the machine past the time this one would wait (one line on the
    command line, like every refusal of a backend)."""


def lock_path() -> Path:
    return Path(os.environ.get(LOCK_DIR_ENV) or HOST_LOCK_DIR) / LOCK_NAME


def lock_wait_s() -> float:
    """How long a measurement waits for the machine ($ROOFLAB_LOCK_WAIT_S, else LOCK_WAIT_S)."""
    text = os.environ.get(LOCK_WAIT_ENV)
    try:
        value = float(text) if text else LOCK_WAIT_S
    except ValueError:
        raise ValueError(f"{LOCK_WAIT_ENV}={text!r}: not a number of seconds") from None
    if not value >= 0:
        raise ValueError(f"{LOCK_WAIT_ENV}={text!r}: must be >= 0 seconds")
    return value


def _open_lock(path: Path) -> int:
    created = not path.parent.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    if created:
        with contextlib.suppress(OSError):  # every user of the host shares the folder
            path.parent.chmod(0o1777)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)
    return fd


def holder(path: Path | None = None) -> dict | None:
    """Who holds the lock, as the holder wrote it (pid, what, since, user), if anyone says."""
    try:
        text = (path or lock_path()).read_text(encoding="utf-8")
        return json.loads(text) if text.strip() else None
    except (OSError, ValueError):
        return None


def _describe(found: dict | None) -> str:
    if not found:
        return "another process"
    return (
        f"pid {found.get('pid')} ({found.get('what')}, since {found.get('since')}, "
        f"user {found.get('user')})"
    )


def _held_by_an_ancestor() -> bool:
    pid = os.environ.get(HELD_ENV)
    return bool(pid) and str((holder() or {}).get("pid")) == pid and _alive(int(pid))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_held_here = 0  # nesting depth of this process's own hold


@contextlib.contextmanager
def measuring(what: str, *, timeout_s: float | None = None, poll_s: float = 0.5) -> Iterator[float]:
    """Hold the machine while measuring `what`; yields the seconds waited for it. Waits while
    another process measures, saying so on stderr, at most `timeout_s` (default lock_wait_s()),
    then MachineBusy naming the holder."""
    global _held_here
    if _held_here or _held_by_an_ancestor():
        _held_here += 1
        try:
            yield 0.0
        finally:
            _held_here -= 1
        return
    path = lock_path()
    timeout_s = lock_wait_s() if timeout_s is None else timeout_s
    fd = _open_lock(path)
    started = time.monotonic()
    try:
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                found = holder(path)
                # a holder writes who it is just after it takes the lock: wait a poll for it
                if not said and (found or waited >= poll_s):
                    print(
                        f"rooflab: {what}: waiting for the machine: {_describe(found)} "
                        f"is measuring on it (one measurement at a time; lock {path})",
                        file=sys.stderr,
                        flush=True,
                    )
                    said = True
                if waited >= timeout_s:
                    raise MachineBusy(
                        f"{what}: the machine was still busy after {waited:.0f} s: "
                        f"{_describe(holder(path))} is measuring on it (lock {path})"
                    ) from None
                time.sleep(poll_s)
        waited = time.monotonic() - started
        if said:
            print(f"rooflab: {what}: the machine is free after {waited:.1f} s", file=sys.stderr)
        record = {
            "pid": os.getpid(),
            "what": what,
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
            "user": os.environ.get("USER") or str(os.getuid()),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        previous = os.environ.get(HELD_ENV)
        os.environ[HELD_ENV] = str(os.getpid())
        _held_here = 1
        try:
            yield waited
        finally:
            _held_here = 0
            if previous is None:
                os.environ.pop(HELD_ENV, None)
            else:
                os.environ[HELD_ENV] = previous
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the descriptor releases the flock


@contextlib.contextmanager
def measuring_job(what: str, label: str) -> Iterator[Progress]:
    """A measuring job: the machine held (`measuring`), its Progress (`label`), and a time limit
    from its plan once it has one (watchdog.job_limit); yields the Progress."""
    with measuring(what), job_limit(what) as plan, Progress(label, on_plan=plan) as progress:
        yield progress
