"""Progress of a measuring job: what it measures, n of N, and how long it has left.

Two places, one text:

- the job's log (stderr, which `rooflab.workflow.log_to` points at the rule's log; the terminal
  under `rooflab measure`): a line every few seconds;
- the terminal the campaign runs in, when it runs in one: a single status line rewritten in place
  on `/dev/tty` (carriage return, clear to the end of the line, a few times a second), and a last
  line when the job is done. A Snakemake job's stderr is its log, so the terminal is the only way
  to the user; the Snakefile says whether to use it (`ENV`): not in CI, not with Snakemake's
  output redirected, not with `--quiet`.

The ETA comes from the planned work, not from the first items: each item is planned in seconds
from the job's settings and what the job has learnt (a ceilings point: its windows and working
set; a timing: its warm-up and sampling floors at its call's time, experiments.item_plans), the
plan of what is left is made again as items finish (`replan`), and the ratio of measured to
planned time of the finished items corrects the rest, trusted more as more of the plan is done.
A sweep whose first points are its fastest (small working sets, small M), or whose first item
compiles its kernels, therefore promises neither minutes it will not need nor seconds it cannot
keep. The job's last line says what it took, what its items were planned at as each began (the
final plan) and what it said at its start (the first estimate): benchmarks/eta_plan.py holds
them to their targets.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TextIO

# Set by the Snakefile for its jobs: "tty" when Snakemake's output is a terminal and not --quiet.
ENV = "ROOFLAB_PROGRESS"
CLEAR_TO_END = "\x1b[K"


def duration(seconds: float) -> str:
    """`2.4 s`, `45 s`, `2 min 05 s`, `1 h 07 min`: a tenth of a second below ten seconds (a
    short job's plan and its time are told apart), whole units above."""
    if seconds < 9.95:
        return f"{max(0.0, seconds):.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Eta:
    """Seconds left of a plan. `planned_total` is in planned seconds (`seconds_per_unit` 1.0), or
    in work units of unknown cost (`seconds_per_unit` None: no ETA until two items are done, at
    the rate of those after the first: a job's first item carries its one-off costs, a library
    loaded, a thread pool started, a kernel compiled, and extrapolated they promise many times
    the job's time). The
    seconds per planned unit start at the prior and move to the measured ratio of the finished
    items as their share of the plan grows (an even mix at `TRUST` of the plan). An item of a
    plan in seconds that overran it more than `ONE_OFF` times (a first call that compiles its
    kernels) counts as `ONE_OFF` times its plan there, while such items are few (`ONE_OFFS`, or
    a quarter of the items done): a one-off cost is not extrapolated, but a plan that is short
    throughout is corrected."""

    TRUST = 0.1
    ONE_OFF = 4.0
    ONE_OFFS = 3

    def __init__(self, planned_total: float, seconds_per_unit: float | None = 1.0):
        self.total = planned_total
        self.prior = seconds_per_unit
        self.planned_done = 0.0
        self.actual_done = 0.0
        self.items_done = self.overruns = 0  # overruns: items over ONE_OFF x their plan
        self.first: tuple[float, float] | None = None  # the first item's (planned, actual)

    def finished(self, planned: float, actual: float) -> None:
        overran = actual > self.ONE_OFF * planned
        few = self.overruns < max(self.ONE_OFFS, self.items_done / 4)
        one_off = overran and few and self.prior is not None
        if self.items_done == 0:
            self.first = (planned, actual)
        self.items_done += 1
        self.overruns += overran
        self.planned_done += planned
        self.actual_done += self.ONE_OFF * planned if one_off else actual

    def seconds_per_unit(self) -> float | None:
        if self.prior is None:  # unknown cost: the items after the first
            if self.items_done < 2 or self.planned_done <= self.first[0]:
                return None
            return (self.actual_done - self.first[1]) / (self.planned_done - self.first[0])
        measured = self.actual_done / self.planned_done if self.planned_done > 0 else None
        if measured is None:
            return self.prior
        done = self.planned_done / self.total if self.total > 0 else 1.0
        weight = done / (done + self.TRUST)
        return (1 - weight) * self.prior + weight * measured

    def left(self, planned_current: float = 0.0, in_current: float = 0.0) -> float | None:
        """Seconds left, the current item (planned, and how long it has run so far) included."""
        rate = self.seconds_per_unit()
        if rate is None:
            return None
        after = max(self.total - self.planned_done - planned_current, 0.0)
        return rate * after + max(rate * planned_current - in_current, 0.0)


class TerminalLine:
    """One status line rewritten in place on a terminal, at most once per `every_s`, the first
    not before `delay_s` (the last line of a job is always written). A terminal that goes away (a
    closed window) ends it quietly: the measurement goes on."""

    def __init__(
        self,
        stream: TextIO,
        every_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        owned: bool = False,
        delay_s: float = 0.0,
    ):
        self.stream, self.every_s, self.clock, self.owned = stream, every_s, clock, owned
        self.last = clock() + delay_s - every_s if delay_s > 0 else -math.inf
        self.shown = self.gone = False

    # Snakemake prints `Select jobs to execute...` a moment after it starts a job: a status line
    # shown before that would get it appended. The job's first line waits for it.
    FIRST_AFTER_S = 2.0

    @classmethod
    def open(cls, every_s: float = 0.25) -> TerminalLine | None:
        """The controlling terminal, where the campaign asked for progress (`ENV`) and one can be
        opened; None otherwise (CI, output redirected, --quiet, a cluster node, no terminal)."""
        if os.environ.get(ENV) != "tty":
            return None
        try:
            stream = open("/dev/tty", "w", encoding="utf-8", errors="replace")  # noqa: SIM115
        except OSError:
            return None
        if not stream.isatty():
            stream.close()
            return None
        return cls(stream, every_s, owned=True, delay_s=cls.FIRST_AFTER_S)

    def show(self, text: str) -> bool:
        """Rewrite the line, unless it was written less than `every_s` ago; True if written."""
        now = self.clock()
        if now - self.last < self.every_s:
            return False
        self.last = now
        self.shown = self._write(f"\r{self._fit(text)}{CLEAR_TO_END}")
        return True

    def end(self, text: str | None = None) -> None:
        """Leave `text` as a finished line, or, with none, clear the line."""
        if text is not None:
            self._write(f"\r{self._fit(text)}{CLEAR_TO_END}\n")
        elif self.shown:
            self._write(f"\r{CLEAR_TO_END}")
        self.shown = False
        if self.owned:
            self.owned = False
            with contextlib.suppress(OSError):  # what was left to flush has nowhere to go
                self.stream.close()

    def _fit(self, text: str) -> str:
        """Cut to the terminal's width: a line that wraps cannot be rewritten in place."""
        try:
            width = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError):
            return text
        if width <= 1 or len(text) < width:  # a width of 0: a terminal that does not say
            return text
        return text[: width - 2] + "…"

    def _write(self, text: str) -> bool:
        if self.gone or self.stream.closed:
            return False
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.gone = True
            return False
        return True


class Progress:
    """A job's progress: `plan` the items (planned seconds each), `start` each item with its name,
    `update` it with a detail (samples so far), `close` when done (or use it as a context manager,
    which clears the terminal line when the job fails)."""

    def __init__(
        self,
        label: str,
        every_s: float = 3.0,
        stream: TextIO | None = None,
        terminal: TerminalLine | bool | None = True,
        clock: Callable[[], float] = time.monotonic,
        on_plan: Callable[[float | None, int], None] | None = None,
    ):
        self.label, self.every_s, self.clock = label, every_s, clock
        self.on_plan = on_plan  # told (planned seconds or None for work units, items) on a change
        self.stream = stream  # None: sys.stderr when written (the job's log once log_to ran)
        self.terminal = TerminalLine.open() if terminal is True else terminal or None
        self.items, self.index, self.name, self.detail = 0, 0, "", ""
        self.eta = Eta(0.0, None)
        self.planned_current = 0.0
        self.promised = 0.0  # seconds: each item's plan as it began, the ETA's rate applied
        self.first_estimate: float | None = None
        self.guessed = self.unestimated = False
        self.sized = True  # a guessed plan's items all sized (their work known): see `sized_all`
        self.started = self.item_started = clock()
        self.last_log = -math.inf
        self.closed = False

    def plan(
        self, planned: Sequence[float], seconds_per_unit: float | None = 1.0, guessed=False
    ) -> None:
        """The items to come, each in planned seconds (`seconds_per_unit` 1.0) or in work units
        of a cost not known beforehand (None: the ETA waits for the first finished item).
        `guessed`: seconds from priors alone (a user's kernels, whose work is known only once
        built), planned again as items finish (`start`'s `planned_after`), shown once an item
        is done and every item is sized (`sized_all`): a case 16 times larger than the first
        is not planned at the first one's time."""
        self.items = len(planned)
        self.eta = Eta(float(sum(planned)), seconds_per_unit)
        self.guessed, self.sized = guessed, not guessed
        self.started = self.item_started = self.clock()
        self.last_log = -math.inf  # the first item's line, with the plan's ETA, is logged
        self._planned()

    def sized_all(self) -> None:
        """Every item of a guessed plan now has its work known (each case built once)."""
        self.sized = True

    def _estimated(self) -> bool:
        return not self.guessed or (self.sized and self.eta.items_done > 0)

    def adjust(self, planned_before: float, planned_now: float) -> None:
        """An item still to come planned again (from a roof measured since)."""
        self.eta.total += planned_now - planned_before
        self._planned()

    def drop(self, planned: Sequence[float]) -> None:
        """Items of the plan that will not run after all (a configuration that failed its check
        is not timed)."""
        self.items -= len(planned)
        self.eta.total -= float(sum(planned))

    def add(self, planned: Sequence[float]) -> None:
        """Items decided while the job runs (an adaptive sweep's refinements, another round)."""
        self.items += len(planned)
        self.eta.total += float(sum(planned))
        self._planned()

    def _planned(self) -> None:
        if self.on_plan is not None:
            seconds = self.eta.total * self.eta.prior if self.eta.prior else None
            self.on_plan(seconds, self.items)

    def start(self, name: str, planned: float = 1.0, planned_after: float | None = None) -> None:
        """The next item begins (the one before it is done); `planned_after`: the items after it
        planned again from what the job has learnt (a case's call timed, its operands' size)."""
        now = self.clock()
        self._finish(now)
        self.index += 1
        self.name, self.detail, self.planned_current, self.item_started = name, "", planned, now
        if planned_after is not None:
            self.eta.total = self.eta.planned_done + planned + planned_after
            self._planned()
        rate = self.eta.seconds_per_unit()
        # an item begun without an estimate (nothing done yet of a plan of unknown cost, or of a
        # guessed one, or some of its items not sized yet) counts at the time it takes, when done
        self.unestimated = rate is None or not self._estimated()
        self.promised += 0.0 if self.unestimated else rate * planned
        if self.first_estimate is None and (left := self.left(now)) is not None:
            self.first_estimate = now - self.started + left  # what its first ETA promised
        self._report(now)

    def update(self, detail: str) -> None:
        self.detail = detail
        self._report(self.clock())

    def note(self, text: str) -> None:
        """A line the log always keeps about the current item (a measurement that stopped short
        of its stopping rule's width says so here)."""
        self._log(f"[{self.label}] {self.name}: {text}" if self.name else f"[{self.label}] {text}")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        now = self.clock()
        self._finish(now)
        took = duration(now - self.started)
        against = ""
        if self.index and self.eta.total > 0:
            first = self.first_estimate
            said = f"; first estimate {duration(first)}" if first is not None else ""
            against = f" (planned {duration(self.promised)}{said})"
        self._log(f"[{self.label}] done: {self.index} of {self.items} in {took}{against}")
        if self.terminal:
            self.terminal.end(f"{self.label}: done, {self.index} of {self.items} in {took}")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            self.close()
        elif self.terminal:  # the job failed: its log and Snakemake say so; clear the line
            self.closed = True
            self.terminal.end()

    def left(self, now: float | None = None) -> float | None:
        if not self._estimated():
            return None
        now = self.clock() if now is None else now
        if self.index == 0:
            return self.eta.left()
        return self.eta.left(self.planned_current, now - self.item_started)

    def line(self, now: float | None = None) -> str:
        """`gemm weight_reuse: 7/88 fp32/nn/m64_n1024_k1024 cold round 1: 3 samples, 12 s left`"""
        left = self.left(now)
        soon = left is None or left < 0.5
        return f"{self.label}: {self._what()}" + ("" if soon else f", {duration(left)} left")

    def _what(self) -> str:
        detail = f": {self.detail}" if self.detail and self.name else self.detail
        if not self.index:
            return detail or "starting"
        return f"{self.index}/{max(self.items, self.index)} {self.name}{detail}"

    def _finish(self, now: float) -> None:
        if self.index:
            if self.unestimated:
                self.promised += now - self.item_started
            self.eta.finished(self.planned_current, now - self.item_started)
            self.planned_current = 0.0
            self.item_started = now

    def _report(self, now: float) -> None:
        if self.terminal:
            self.terminal.show(self.line(now))
        if now - self.last_log >= self.every_s:
            self.last_log = now
            left = self.left(now)
            eta = f", {duration(left)} left" if left is not None else ""
            self._log(f"[{self.label}] {self._what()} ({duration(now - self.started)} in{eta})")

    def _log(self, text: str) -> None:
        print(text, file=self.stream or sys.stderr, flush=True)
