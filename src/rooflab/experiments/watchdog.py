"""A hung kernel cannot stall the host: a block run under `step_limit(seconds, what)` that outlives
its limit ends this process with status 124 (as timeout(1)), after one line naming what hung. The
limit is per step: each `beat()` (the measuring loops beat after every call of a kernel) starts
the next step, so a kernel of any number of calls is stopped when one call hangs, and nothing is
added inside a timed region.

Every measuring job runs under `job_limit(what)` too, set from its plan once it has one:
$ROOFLAB_JOB_LIMIT_S seconds where a site sets it (0: none), else JOB_LIMIT_FACTOR times its
planned seconds plus JOB_LIMIT_FLOOR_S. It is a backstop for what no call's limit covers (a
profiler that never exits, a wait on a device), far above a plan's usual error.

Python cannot interrupt a call stuck in compiled code (a numba loop, a C extension, a GPU wait),
so the process itself ends. That is also what frees everything: the machine lock is the kernel's
(flock) and goes with the process, and a run's folder is renamed into place only once the run is
complete, so nothing half-written is kept. A Snakemake job then fails with that line in its log;
`rooflab measure` exits 124 with it on stderr.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

EXIT_STATUS = 124
_END_PROCESS = os._exit  # bound now: a command may stand in for os._exit while a kernel runs
JOB_LIMIT_ENV = "ROOFLAB_JOB_LIMIT_S"
JOB_LIMIT_FACTOR = 10  # times the job's planned seconds ...
JOB_LIMIT_FLOOR_S = 3600.0  # ... plus an hour
JOB_LIMIT_PER_ITEM_S = 600.0  # a plan in work units (a profiler run each): per item


class _Limit:
    def __init__(self, seconds: float, what: str, per_step: bool, how: str = "") -> None:
        self.seconds, self.what, self.per_step, self.how = seconds, what, per_step, how
        self.started = time.monotonic()
        self.deadline = self.started + seconds


class _Watchdog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._limits: list[_Limit] = []  # nested blocks, innermost last
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def limit(self, seconds: float, what: str, per_step: bool) -> Iterator[_Limit]:
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
            yield entry
        finally:
            with self._lock:
                self._limits.remove(entry)
            self._wake.set()

    def move(self, entry: _Limit, seconds: float, how: str) -> None:
        """Set a limit of `seconds` from the block's start (a job's, once it has a plan)."""
        entry.seconds, entry.how = seconds, how
        entry.deadline = entry.started + seconds
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
            timeout = None if first in (None, math.inf) else max(0.0, first - time.monotonic())
            if self._wake.wait(timeout):
                self._wake.clear()
                continue
            now = time.monotonic()
            with self._lock:
                expired = [entry for entry in self._limits if entry.deadline <= now]
            if expired:
                entry = expired[-1]  # the innermost: it names the case
                what = "one call still running" if entry.per_step else "still running"
                print(
                    f"rooflab: {entry.what}: {what} after its limit of {entry.seconds:g} s"
                    f"{entry.how}; stopped (status {EXIT_STATUS}): the machine and its lock are "
                    "free again",
                    file=sys.stderr,
                    flush=True,
                )
                _END_PROCESS(EXIT_STATUS)


_WATCHDOG = _Watchdog()


def step_limit(seconds: float | None, what: str):
    """Run the block with each step (up to the next beat()) under `seconds` (None: none)."""
    if seconds is None:
        return contextlib.nullcontext()
    return _WATCHDOG.limit(seconds, what, per_step=True)


def beat() -> None:
    """A step of the blocks under step_limit ended (a kernel call returned)."""
    _WATCHDOG.beat()


def job_limit_s(planned_s: float | None, items: int) -> tuple[float | None, str]:
    """A measuring job's limit in seconds (None: none) and how it was set: $ROOFLAB_JOB_LIMIT_S
    where set, else from its plan (`planned_s`; None for a plan in work units, of `items`)."""
    text = os.environ.get(JOB_LIMIT_ENV)
    if text:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{JOB_LIMIT_ENV}={text!r}: not a number of seconds") from None
        if not value >= 0:
            raise ValueError(f"{JOB_LIMIT_ENV}={text!r}: must be >= 0 seconds (0: no limit)")
        return (value or None), f" (${JOB_LIMIT_ENV})"
    floor = f"{JOB_LIMIT_FLOOR_S:g} s"
    if planned_s is None:
        seconds = JOB_LIMIT_PER_ITEM_S * items + JOB_LIMIT_FLOOR_S
        return seconds, f" ({JOB_LIMIT_PER_ITEM_S:g} s for each of its {items} items + {floor})"
    seconds = JOB_LIMIT_FACTOR * planned_s + JOB_LIMIT_FLOOR_S
    return seconds, f" ({JOB_LIMIT_FACTOR}x its plan of {planned_s:.3g} s + {floor})"


@contextlib.contextmanager
def job_limit(what: str) -> Iterator[Callable[[float | None, int], None]]:
    """Run a measuring job under a limit set from its plan: the block gets `plan(planned_s,
    items)` to call each time its plan changes (Progress calls it); no limit before that."""
    with _WATCHDOG.limit(math.inf, what, per_step=False) as entry:

        def plan(planned_s: float | None, items: int) -> None:
            seconds, how = job_limit_s(planned_s, items)
            _WATCHDOG.move(entry, math.inf if seconds is None else seconds, how)

        yield plan
