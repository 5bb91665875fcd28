"""The sampling loop: warm up by time, then take samples until the stopping rule is met.

Read against docs/measure.md: warm-up ends before the first sample; sampling stops by the stopping
rule (experiments.stopping: the median's interval narrow enough, floors, a cap); for `cold`, the
cache flush runs before each sample and outside the timed region; the clock and what the rest of the
machine took from the sample (conditions.disturbance) are read after each sample, also outside it;
every raw sample is kept; a disturbed one is left out of the statistics and re-taken, a bounded
number of times; the clean ones are summarised by median and IQR, never by the fastest alone.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

from rooflab.backends.base import Backend
from rooflab.conditions.disturbance import (
    DisturbanceSettings,
    PhaseDisturbance,
    Verdict,
    judge,
    probe,
)
from rooflab.config import defaults
from rooflab.experiments.stopping import Stop, Stopper, StoppingRule
from rooflab.experiments.watchdog import beat
from rooflab.progress import Progress
from rooflab.vocabulary import CACHE_STATES, CacheState

_DEFAULT = defaults("timing")  # config/schema.yaml: each setting's meaning and default


@dataclass(frozen=True)
class TimingSettings:
    warmup_s: float = _DEFAULT["warmup_s"]
    warmup_min_calls: int = _DEFAULT["warmup_min_calls"]
    min_time_s: float = _DEFAULT["min_time_s"]  # the sampling phase's floor, flushes included
    min_samples: int = _DEFAULT["min_samples"]
    max_samples: int = _DEFAULT["max_samples"]
    rel_width: float = _DEFAULT["rel_width"]  # the stopping rule's width of the median's interval
    max_time_s: float = _DEFAULT["max_time_s"]  # its cap on the sampling phase
    rounds: int = _DEFAULT["rounds"]  # a sweep's or workload's rounds (experiments.rounds)
    noisy_iqr_ratio: float = _DEFAULT["noisy_iqr_ratio"]
    max_clock_change: float = _DEFAULT["max_clock_change"]  # a clock range flagged past this
    # Idle between warm-up and sampling (not a config key): a GPU under its power limit lowers
    # its clock within a fraction of a second of sustained GEMMs and raises it again at rest, so
    # a peak measured right after a long warm-up is the capped rate, below what short runs reach.
    cooldown_s: float = 0.0
    # A user kernel's one call (factory, check, run) past this is a hang (experiments.watchdog).
    max_call_s: float = _DEFAULT["max_call_s"]
    disturbance: DisturbanceSettings = field(default_factory=DisturbanceSettings)
    round_of: int = 1  # not a config key: these are one round's settings of that many

    @classmethod
    def from_config(cls, timing: dict, disturbance: dict | None = None) -> TimingSettings:
        return cls(**timing, disturbance=DisturbanceSettings.from_config(disturbance or {}))

    def record(self) -> dict:
        """The settings as the run's `settings` record holds them."""
        return asdict(self)

    def rule(self) -> StoppingRule:
        return StoppingRule(
            rel_width=self.rel_width,
            min_samples=self.min_samples,
            min_time_s=self.min_time_s,
            max_time_s=self.max_time_s,
            max_samples=self.max_samples,
            rounds=self.round_of,
        )


@dataclass(frozen=True)
class Sample:
    seconds: float
    clock_mhz: float | None
    # What the rest of the machine took from it (rooflab.conditions.disturbance); None where unread.
    wait_s: float | None = None
    cpu_s: float | None = None
    involuntary_switches: int | None = None
    disturbed: bool = False


def host_wall_time(backend: Backend) -> Callable[[Callable[[], object]], float]:
    """A timer of the host-observed wall time of a call, launch to synchronise: what a step of
    many small launches costs, gaps included (the backend's own timer may hide the launches
    behind a held stream, as a kernel's time should)."""

    def timed(call: Callable[[], object]) -> float:
        started = time.perf_counter()
        call()
        backend.synchronize()
        return time.perf_counter() - started

    return timed


def take_sample(
    backend: Backend,
    call: Callable[[], object],
    disturbance: DisturbanceSettings,
    timer: Callable[[Callable[[], object]], float] | None = None,
) -> Sample:
    """Time one call (with `timer`, else the backend's timer); read the run-queue wait and CPU
    time of this process around it and the clock after it, all outside the timed interval."""
    the_probe = probe()
    before = the_probe.snapshot()
    seconds = (timer or backend.time_call)(call)
    after = the_probe.snapshot()
    clock_mhz = backend.sample_clock_mhz()
    judge_wait = timer is not None or backend.host_delays_enter_timing()
    taken = the_probe.sample(before, after, seconds, disturbance, judge_wait=judge_wait)
    return Sample(
        seconds, clock_mhz, taken.wait_s, taken.cpu_s, taken.involuntary_switches, taken.disturbed
    )


def clean(samples: list[Sample]) -> list[Sample]:
    """The samples the statistics use: the undisturbed ones, or all where none is."""
    undisturbed = [s for s in samples if not s.disturbed]
    return undisturbed or samples


def sample_rows(
    run_id: str,
    config_id: str,
    cache_state: str,
    samples: list[Sample],
    amount: float,
    unit: str,
    *,
    round_index: int | None = None,
    first_idx: int = 0,
) -> list[dict]:
    """`samples` table rows; `amount` is the work of each timed interval in `unit` (FLOP or B);
    a round after the first (experiments.rounds) numbers its samples on from `first_idx`."""
    return [
        {
            "run_id": run_id,
            "config_id": config_id,
            "cache_state": cache_state,
            "sample_idx": first_idx + i,
            "round": round_index,
            "seconds": s.seconds,
            "clock_mhz": s.clock_mhz,
            "amount": amount,
            "amount_unit": unit,
            "wait_s": s.wait_s,
            "cpu_s": s.cpu_s,
            "involuntary_switches": s.involuntary_switches,
            "disturbed": s.disturbed,
        }
        for i, s in enumerate(samples)
    ]


@dataclass(frozen=True)
class Summary:
    n_samples: int
    median_s: float
    p25_s: float
    p75_s: float
    min_s: float
    iqr_ratio: float
    noisy: bool
    stop: Stop | None = None  # how the sampling stopped (None: summarised without the rule)

    def columns(self) -> dict:
        """The sampled columns every timed row carries (records.tables' _SAMPLED)."""
        stopped = self.stop.columns() if self.stop else {"ci_rel_width": None, "stop_reason": None}
        sampled = ("n_samples", "median_s", "p25_s", "p75_s", "min_s")
        return {name: getattr(self, name) for name in sampled} | stopped


def summarize(seconds: list[float], noisy_iqr_ratio: float) -> Summary:
    if not seconds:
        raise ValueError("no samples to summarise")
    if len(seconds) == 1:
        p25 = median = p75 = seconds[0]
    else:
        p25, median, p75 = statistics.quantiles(seconds, n=4, method="inclusive")
    iqr_ratio = (p75 - p25) / median if median > 0 else float("inf")
    return Summary(
        len(seconds), median, p25, p75, min(seconds), iqr_ratio, iqr_ratio > noisy_iqr_ratio
    )


def fastest_window_median(seconds: list[float], window: int) -> tuple[float, int]:
    """The smallest median of `window` consecutive samples (non-overlapping; a short tail is
    left out), and how many windows there were. A peak read this way is what the hardware
    reached for a stretch at the clocks it had then: the median of a long run of a power-hungry
    kernel is the rate after the power limit pulled the clock down, and shorter runs (a sweep's
    GEMMs) would sit above it. A single slow or fast sample cannot set it."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if len(seconds) < window:
        raise ValueError(f"{len(seconds)} samples, fewer than one window of {window}")
    count = len(seconds) // window
    medians = [statistics.median(seconds[i * window : (i + 1) * window]) for i in range(count)]
    return min(medians), count


@dataclass(frozen=True)
class Measurement:
    """Every sample taken (disturbed ones included, flagged) and the verdict on them."""

    samples: list[Sample]
    verdict: Verdict
    stop: Stop | None = None
    phases: list[PhaseDisturbance] = field(default_factory=list)  # what other processes used
    cold_flush: tuple[int, str] | None = None  # cold: bytes flushed or evicted, and how

    def summary(self, noisy_iqr_ratio: float) -> Summary:
        summary = summarize([s.seconds for s in clean(self.samples)], noisy_iqr_ratio)
        return replace(summary, stop=self.stop)


def measure(
    call: Callable[[], object],
    backend: Backend,
    settings: TimingSettings,
    cache_state: str,
    progress: Progress | None = None,
    label: str | None = None,
    timer: Callable[[Callable[[], object]], float] | None = None,
    operands: Sequence | None = None,
) -> Measurement:
    """Warm up, then take samples; `label` names the sampling phase for profilers (NVTX);
    `timer` times each sample (default: the backend's; `host_wall_time` for launch gaps);
    `operands`: the arrays `call` reads and writes, which a cold sample evicts where the
    backend can (Backend.make_cold)."""
    if cache_state not in CACHE_STATES:
        known = ", ".join(CACHE_STATES)
        raise ValueError(f"cache_state must be one of {known}, got {cache_state!r}")

    # Warm-up: library initialisation, first touch, thread pools, kernel loading, GEMM heuristics;
    # by time, with a floor on calls. Each call is waited for, so the time is the device's work,
    # not how fast the host can queue it (a deep queue of large GEMMs would take seconds to drain).
    started, calls = time.perf_counter(), 0
    while calls < settings.warmup_min_calls or time.perf_counter() - started < settings.warmup_s:
        call()
        backend.synchronize()
        beat()  # a call returned: a hung one is stopped by the watchdog's step limit
        calls += 1

    if settings.cooldown_s > 0:
        time.sleep(settings.cooldown_s)

    cold_flush = None

    def before_each() -> None:
        nonlocal cold_flush
        if cache_state == CacheState.COLD:
            cold_flush = backend.make_cold(operands)  # outside the timed region
            backend.synchronize()

    def after_each(samples: list[Sample]) -> None:
        beat()
        if progress:
            progress.update(f"{len(samples)} sample{'' if len(samples) == 1 else 's'}")

    rule = settings.rule()
    with backend.nvtx_range(label or f"rooflab/{cache_state}"):
        samples, stop, phase = sample_by_rule(
            backend, call, rule, settings.disturbance, timer, before_each, after_each
        )
    if progress and (note := stop.note(rule)):
        progress.note(note)
    verdict = judge_samples(samples, phase, backend, settings.min_samples, settings.disturbance)
    return Measurement(samples, verdict, stop, phase, cold_flush)


def sample_by_rule(
    backend: Backend,
    call: Callable[[], object],
    rule: StoppingRule,
    disturbance: DisturbanceSettings,
    timer: Callable[[Callable[[], object]], float] | None = None,
    before_each: Callable[[], None] | None = None,
    after_each: Callable[[list[Sample]], None] | None = None,
) -> tuple[list[Sample], Stop, list[PhaseDisturbance]]:
    """The one sampling loop of every timed quantity (a point's samples, a ceiling's windows):
    samples of `call` until `rule` stops (experiments.stopping), each with the clock and what
    the rest of the machine took from it; disturbed ones do not count towards the rule and are
    re-taken, up to retake_factor x the rule's floor of them. `before_each` runs outside the
    timed region (a cold flush), `after_each` after each sample, with those taken so far.
    Returns every sample, why sampling stopped, and the sampling phase's disturbance."""
    stopper = Stopper(rule, math.ceil(disturbance.retake_factor * rule.min_samples))
    samples: list[Sample] = []
    clean_seconds: list[float] = []
    with probe().measuring_phase() as phase:
        started = time.perf_counter()
        while (
            stop := stopper.check(
                clean_seconds, len(samples) - len(clean_seconds), time.perf_counter() - started
            )
        ) is None:
            if before_each:
                before_each()
            samples.append(take_sample(backend, call, disturbance, timer))
            if not samples[-1].disturbed:
                clean_seconds.append(samples[-1].seconds)
            if after_each:
                after_each(samples)
    return samples, stopper.final(clean_seconds or [s.seconds for s in samples], stop.reason), phase


def judge_samples(
    samples: list[Sample],
    phases: list[PhaseDisturbance],
    backend: Backend,
    min_clean: int,
    disturbance: DisturbanceSettings,
    what: str = "samples",
) -> Verdict:
    return judge(
        samples,
        phases,
        disturbance,
        min_clean=min_clean,
        what=what,
        judge_host=backend.host_contention_matters,
    )
