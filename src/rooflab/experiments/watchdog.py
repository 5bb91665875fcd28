"""A hung kernel cannot stall the host: a block run under `time_limit(seconds, what)` that outlives
its limit ends this process with status 124 (as timeout(1)), after one line naming what hung.
Under `step_limit(seconds, what)` the limit is per step instead: each `beat()` (the measuring
loops beat after every call of a kernel) starts the next step, so a kernel of any number of calls
is stopped when one call hangs, and nothing is added inside a timed region.

Python cannot interrupt a call stuck in compiled code (a numba loop, a C extension, a GPU wait),
so the process itself ends. That is also what frees everything: the machine lock is the kernel's
(flock) and goes with the process, and a run's folder is renamed into place only once the run is
complete, so nothing half-written is kept. A Snakemake job then fails with that line in its log;
`rooflab measure` exits 124 with it on stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator

EXIT_STATUS = 124
_END_PROCESS = os._exit  # bound now: a command may stand in for os._exit while a kernel runs


class _Limit:
    def __init__(self, seconds: float, what: str, per_step: bool) -> None:
        self.seconds, self.what, self.per_step = seconds, what, per_step
        self.deadline = time.monotonic() + seconds


class _Watchdog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._limits: list[_Limit] = []  # nested blocks, innermost last
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def limit(self, seconds: float, what: str, per_step: bool) -> Iterator[None]:
        entry = _Limit(seconds, what, per_step)
        with self._lock:
            self._limits.append(entry)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="rooflab-watchdog", daemon=True
                )
                self._thread.start()
        self._wake.set()
        try:
            yield
        finally:
            with self._lock:
                self._limits.remove(entry)
            self._wake.set()

    def beat(self) -> None:
        # a plain float write per step limit: no lock, no wake-up (a deadline only moves later)
        now = time.monotonic()
        for entry in self._limits:
            if entry.per_step:
                entry.deadline = now + entry.seconds

    def _watch(self) -> None:
        while True:
            with self._lock:
                first = min((entry.deadline for entry in self._limits), default=None)
            timeout = None if first is None else max(0.0, first - time.monotonic())
            if self._wake.wait(timeout):
                self._wake.clear()
                continue
            now = time.monotonic()
            with self._lock:
                expired = [entry for entry in self._limits if entry.deadline <= now]
            if expired:
                entry = expired[-1]  # the innermost: it names the case
                what = "one call" if entry.per_step else "it"
                print(
                    f"rooflab: {entry.what}: {what} still running after its limit of "
                    f"{entry.seconds:g} s; stopped (status {EXIT_STATUS}): the machine and its "
                    "lock are free again",
                    file=sys.stderr,
                    flush=True,
                )
                _END_PROCESS(EXIT_STATUS)


_WATCHDOG = _Watchdog()


def time_limit(seconds: float | None, what: str):
    """Run the block under a limit of `seconds` in all (None: none); past it, end the process."""
    if seconds is None:
        return contextlib.nullcontext()
    return _WATCHDOG.limit(seconds, what, per_step=False)


def step_limit(seconds: float | None, what: str):
    """Run the block with each step (up to the next beat()) under `seconds` (None: none)."""
    if seconds is None:
        return contextlib.nullcontext()
    return _WATCHDOG.limit(seconds, what, per_step=True)


def beat() -> None:
    """A step of the blocks under step_limit ended (a kernel call returned)."""
    _WATCHDOG.beat()
