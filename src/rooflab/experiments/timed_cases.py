"""One driver for every timed point: a sweep's GEMM configurations (experiments.gemm) and a
workload's cases (experiments.workload_cases) are cases of one contract, `TimedCase`. Each case is
built, checked against its reference, then timed per cache state in rounds (experiments.rounds),
into the run's `correctness`, `samples` and `timed_points` tables. A case whose check fails is
recorded and never timed (again); each step of a case (its build, its check, one call) is under
`timing.max_call_s` (experiments.watchdog), so a hang stops the job naming the case."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from rooflab.backends.base import Backend
from rooflab.experiments.item_plans import CallTimes
from rooflab.experiments.rounds import TimedPoint
from rooflab.experiments.runs import MeasuringRun
from rooflab.experiments.timing import TimingSettings
from rooflab.experiments.watchdog import beat, step_limit

BEFORE_TIMING = "the workload's own check() against its reference"
# A kernel may go wrong only after many calls (state that drifts, a buffer it overruns): a case
# whose check fails after a timing round keeps its timing in the store but is never placed on
# the Roofline. Passed checks between rounds are not stored, only the last one.
AFTER_TIMING = BEFORE_TIMING + ", again after each timing round"


@dataclass
class Built:
    """A case made ready to time (its inputs made from its seed)."""

    call: Callable[[], object]  # one call of the timed work
    check: Callable[[str], list[dict]]  # runs it once; its correctness rows (`when`: the detail)
    columns: dict  # its timed_points columns beyond the timing: identity and ledger (flops, ...)
    arrays: tuple = ()  # what `call` reads and writes, evicted before each cold sample
    work_unit: str = "FLOP"  # the unit of its `flops` (OP for an int8 GEMM)
    footprint: int | None = None  # the bytes `call` touches, where declared

    def footprint_bytes(self) -> int:
        """The bytes `call` touches, which decide the cache level that holds it warm: as
        declared, else its arrays' bytes, else its model Q (nothing else is known)."""
        if self.footprint is not None:
            return self.footprint
        if self.arrays:
            return sum(int(array.nbytes) for array in self.arrays)
        return int(self.columns["bytes_model"])


class TimedCase(Protocol):
    kind: str  # timed_points.kind: "gemm" or "workload"
    config_id: str
    label: str  # its name on a progress line
    what: str  # its name in a watchdog's line
    recheck: bool  # checked again after each timing round

    def build(self, backend: Backend) -> Built: ...

    def work_hint(self) -> tuple[float, float] | None:
        """Its F and model Q where known before it is built (a GEMM's shape), for the plan."""
        ...


@dataclass
class _Cases:
    run: MeasuringRun
    cache_states: list[str]
    timing: TimingSettings | None  # None: check only
    points: dict[tuple[str, str], TimedPoint] = field(default_factory=dict)
    rows: dict[str, dict] = field(default_factory=dict)  # config_id -> its columns and threads
    calls: CallTimes = field(default_factory=CallTimes)
    to_come: list[tuple[str, str]] = field(default_factory=list)  # (config_id, state), in order
    rechecking: set[str] = field(default_factory=set)  # cases checked after each timing
    unsized: set[str] = field(default_factory=set)  # cases whose work is unknown until built

    def plan(self, cases: list[TimedCase]) -> None:
        """Every timing of the run, in the order it comes, planned from the cases' work."""
        rounds = self.timing.rounds
        for case in cases:
            if (hint := case.work_hint()) is not None:
                flops, model_bytes = hint
                self.calls.built(case.config_id, flops, model_bytes)
        self.rechecking = {c.config_id for c in cases if c.recheck}
        self.unsized = {c.config_id for c in cases if c.config_id not in self.calls.work}
        self.to_come = [(c.config_id, s) for _ in range(rounds) for c in cases
                        for s in self.cache_states]  # fmt: skip
        # cases whose work is unknown until built (a user's kernels): no ETA before one is timed
        planned = [self.item_s(c, s) for c, s in self.to_come]
        self.run.progress.plan(planned, guessed=not self.calls.work)

    def item_s(self, config_id: str, cache_state: str) -> float:
        """An item's plan: its timing, the case's build where it begins the case's round (the
        first cache state), its check after it where the case checks again."""
        return self.calls.planned_s(
            config_id, cache_state, self.timing, built=cache_state == self.cache_states[0],
            recheck=config_id in self.rechecking,
        )  # fmt: skip

    def planned_to_come(self) -> float:
        """The timings still to come, planned again from what the run has learnt."""
        return sum(self.item_s(c, s) for c, s in self.to_come)

    def begin(self, case: TimedCase, cache_state: str, round_index: int) -> None:
        """The item of `case` in `cache_state` begins (the first state's with the build)."""
        rounds = f" round {round_index + 1}" if self.timing.rounds > 1 else ""
        self.to_come.remove((case.config_id, cache_state))
        self.run.progress.start(
            f"{case.label} {cache_state}{rounds}",
            self.item_s(case.config_id, cache_state),
            self.planned_to_come(),
        )

    def drop(self, config_id: str) -> None:
        """A case that failed its check: its timings still to come are not run."""
        if self.timing is None:
            return
        dropped = [item for item in self.to_come if item[0] == config_id]
        self.to_come = [item for item in self.to_come if item[0] != config_id]
        self.run.progress.drop([self.item_s(c, s) for c, s in dropped])

    def checked(self, case: TimedCase, built: Built, when: str, only_failed=False) -> bool:
        """Run the case once against its reference; its rows stored (with `only_failed`, only
        where the check failed)."""
        with self.run.backend.nvtx_range(f"{case.config_id}/correctness"):
            rows = built.check(when)
        passed = all(row["passed"] for row in rows)
        if not (only_failed and passed):
            self.run.tables["correctness"].extend({"run_id": self.run.run_id, **r} for r in rows)
        return passed

    def one_round(self, case: TimedCase, round_index: int, check: bool) -> bool:
        """Build the case, check it (round 1, where `check`), time it once more in each cache
        state (checked again after each, where it asks). False once a check failed."""
        backend, timing, progress = self.run.backend, self.timing, self.run.progress
        states = self.cache_states
        max_call_s = timing.max_call_s if timing is not None else None
        if timing is None:
            progress.start(case.label)
        else:  # the build is the first item's: its time is planned there
            self.begin(case, states[0], round_index)
        build_started = time.perf_counter()
        with step_limit(max_call_s, case.what):
            built = case.build(backend)
            beat()
            if round_index == 0 and check and not self.checked(case, built, BEFORE_TIMING):
                self.drop(case.config_id)
                return False  # a wrong result is recorded, never timed
        if timing is None:
            return True
        self.calls.build_timed(case.config_id, time.perf_counter() - build_started)
        columns = built.columns
        self.calls.built(case.config_id, columns["flops"], columns.get("bytes_model"), built.arrays)
        if case.config_id in self.unsized:
            self.unsized.discard(case.config_id)
            if not self.unsized:
                progress.sized_all()  # every case's work known: the plan is no guess any more
        # the threads as the case left them: what the timing ran with
        self.rows[case.config_id] = built.columns | {
            "footprint_bytes": built.footprint_bytes(),
            "threads": backend.library_threads(),
        }
        for index, cache_state in enumerate(states):
            point = self.points.setdefault(
                (case.config_id, cache_state),
                TimedPoint(case.config_id, cache_state, built.columns["flops"], built.work_unit),
            )
            rounds = f" round {round_index + 1}" if timing.rounds > 1 else ""
            if index > 0:
                self.begin(case, cache_state, round_index)
            started = time.perf_counter()
            with step_limit(max_call_s, f"{case.what} {cache_state}"):
                point.time_round(
                    backend, built.call, timing, self.run.tables, run_id=self.run.run_id,
                    progress=progress, operands=built.arrays,
                )  # fmt: skip
            measured = point.measurements[-1]
            self.calls.timed(
                case.config_id, cache_state, measured.summary(timing.noisy_iqr_ratio).median_s,
                time.perf_counter() - started, len(measured.samples), timing,
            )  # fmt: skip
            if not case.recheck:
                continue
            # checked again after every timing round: a kernel that goes wrong after some calls
            # is caught near where it did, and its later rounds are not timed
            last = round_index == timing.rounds - 1 and index == len(states) - 1
            when = AFTER_TIMING if last else (
                f"{BEFORE_TIMING}, again after its {cache_state} timing{rounds}"
            )  # fmt: skip
            checked_at = time.perf_counter()
            with step_limit(max_call_s, case.what):
                if not self.checked(case, built, when, only_failed=not last):
                    self.drop(case.config_id)
                    return False
            self.calls.recheck_timed(case.config_id, time.perf_counter() - checked_at)
        return True


def time_cases(
    run: MeasuringRun,
    cases: list[TimedCase],
    cache_states: list[str],
    timing: TimingSettings | None,
    *,
    check: bool = True,
) -> None:
    """Check (where `check`) and time every case in rounds into the run's tables: round 1 checks
    each case, then times the ones that passed; later rounds build those again from the same
    seed and time them again (experiments.rounds). `timing` None: check only."""
    state = _Cases(run, list(cache_states), timing)
    rounds = timing.rounds if timing is not None else 1
    if timing is not None:
        state.plan(cases)
    else:  # a check's cost is not planned: the ETA follows the checks done
        run.progress.plan([1.0] * len(cases), seconds_per_unit=None)
    failed: set[str] = set()  # failed a check: not built, checked nor timed again
    with run.backend.limited_library_threads():
        for round_index in range(rounds):
            for case in cases:
                if case.config_id in failed:
                    continue
                # a case may set the BLAS or OpenMP threads: that holds for itself only
                with run.backend.library_threads_kept():
                    if not state.one_round(case, round_index, check):
                        failed.add(case.config_id)
    if timing is None:
        return
    for case in cases:
        for cache_state in cache_states:
            point = state.points.get((case.config_id, cache_state))
            if point is not None:
                run.tables["timed_points"].append(
                    {
                        "run_id": run.run_id,
                        "config_id": case.config_id,
                        "kind": case.kind,
                        **state.rows[case.config_id],
                        **point.columns(run.backend, timing),
                    }
                )
