"""The timed windows of one ceiling workload (a sweep point, an FMA round): each window a call
long enough that a fixed cost per call vanishes, sampled by the stopping rule, every window kept."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from rooflab.backends.base import Backend, CeilingLoad
from rooflab.conditions.disturbance import DisturbanceSettings, Verdict
from rooflab.experiments.ceiling_plan import CeilingSettings
from rooflab.experiments.stopping import Stop, StoppingRule
from rooflab.experiments.timing import (
    Sample,
    clean,
    judge_samples,
    sample_by_rule,
    sample_rows,
    summarize,
)
from rooflab.vocabulary import CacheState


def units_for_window(seconds_for: Callable[[int], float], window_s: float, start: int = 1) -> int:
    """Grow the work per call until one call lasts a whole window: then a fixed cost per call
    (thread wake-up, Python) is a small part of it, whatever the machine's overheads are.
    `start`: the work a neighbouring point's rate predicts (one call, where the guess holds)."""
    units, seconds = start, seconds_for(start)
    while seconds < window_s:
        units *= 8 if seconds < window_s / 8 else 2
        seconds = seconds_for(units)
    return units


@dataclass(frozen=True)
class Windows:
    """The timed windows of one workload: every one is kept (as `samples` rows)."""

    units: int  # work units per window (FMA iterations, passes over the working set)
    amount: float  # work per window, in `unit`: units x the workload's amount per unit
    unit: str  # FLOP or B
    samples: list[Sample]  # every window taken; disturbed ones flagged
    verdict: Verdict
    stop: Stop

    def rates(self) -> list[float]:
        """Rates of the undisturbed windows (of all, where every one was disturbed)."""
        return [self.amount / s.seconds for s in clean(self.samples)]

    def median_rate(self) -> float:
        return statistics.median(self.rates())

    def iqr_ratio(self) -> float:
        return summarize(self.rates(), noisy_iqr_ratio=math.inf).iqr_ratio

    def sample_rows(self, run_id: str, config_id: str) -> list[dict]:
        return sample_rows(run_id, config_id, CacheState.WARM, self.samples, self.amount, self.unit)


# A sweep point off every plateau sets no ceiling: it draws the curve between levels, and its
# windows stop at a looser width and half the cap (at least 10 %).
OFF_PLATEAU_WIDTH = 0.1


def window_rule(settings: CeilingSettings, sets_a_ceiling: bool = True) -> StoppingRule:
    """The stopping rule of one sweep point's or FMA round's windows (a point that sets no
    ceiling: OFF_PLATEAU_WIDTH)."""
    if sets_a_ceiling:
        return StoppingRule(
            rel_width=settings.rel_width,
            min_samples=settings.windows,
            max_time_s=settings.max_point_s,
        )
    return StoppingRule(
        rel_width=max(OFF_PLATEAU_WIDTH, settings.rel_width),
        min_samples=settings.windows,
        max_time_s=settings.max_point_s / 2,
    )


def time_workload(
    backend: Backend,
    workload: CeilingLoad,
    window_s: float,
    rule: StoppingRule,
    disturbance: DisturbanceSettings | None = None,
    rate_hint: float | None = None,
) -> Windows:
    """Size one window (a call of at least `window_s`; from `rate_hint`, a neighbour's rate in
    the workload's unit per second, where there is one), then time windows until `rule` stops,
    reading the clock and the disturbance around each, outside the timed call; a disturbed window
    is left out and re-taken, up to retake_factor x the rule's floor of them."""
    disturbance = disturbance or DisturbanceSettings()

    def seconds_for(units: int) -> float:
        return backend.time_call(lambda: workload.run(units))

    workload.run(1)  # warm-up: compilation, first touch, thread start-up
    start = 1
    if rate_hint:
        start = max(1, int(window_s * rate_hint / workload.amount_per_unit))
    units = units_for_window(seconds_for, window_s, start)
    samples, stop, phase = sample_by_rule(backend, lambda: workload.run(units), rule, disturbance)
    verdict = judge_samples(samples, phase, backend, rule.min_samples, disturbance, what="windows")
    return Windows(units, units * workload.amount_per_unit, workload.unit, samples, verdict, stop)
