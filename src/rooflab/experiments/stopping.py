"""When to stop sampling: once the confidence interval of the median is narrow enough, the way
nvbench stops on noise, with floors (samples, time) that always hold and a time cap after them.

A quiet machine converges in the floors and finishes early; a noisy one samples on to the cap and
says so (`stop_reason` time_cap, with the width it reached). The interval is distribution-free
(order statistics of the samples, binomial coverage), so a skewed or two-humped distribution of
timings (cold caches, a GPU's clock steps) is no harder on it than a normal one.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from rooflab.vocabulary import StopReason


@dataclass(frozen=True)
class StoppingRule:
    rel_width: float = 0.03  # stop when the median's interval spans at most this fraction of it
    confidence: float = 0.95
    min_samples: int = 10  # floors: both hold before the width is looked at
    min_time_s: float = 0.0
    max_time_s: float = 2.0  # the cap, once the floors are in
    max_samples: int = 10000
    rounds: int = 1  # one round of this many (rel_width is then the config's x sqrt(rounds))

    def describe(self) -> str:
        return (
            f"sampled until the {self.confidence:.0%} interval of the median was within "
            f"{self.rel_width:.1%} of it (at least {self.min_samples} samples and "
            f"{self.min_time_s:g} s, at most {self.max_time_s:g} s after those)"
        )


@dataclass(frozen=True)
class Stop:
    """Why sampling stopped, and the relative width of the median's interval then (None: too few
    samples for an interval at the rule's confidence)."""

    reason: StopReason
    rel_width: float | None

    def columns(self) -> dict:
        """The columns every timed row carries (records.tables' _STOPPED)."""
        return {"ci_rel_width": self.rel_width, "stop_reason": str(self.reason)}

    def note(self, rule: StoppingRule) -> str | None:
        """A line for the log where sampling stopped short of the width (None where it did not)."""
        if self.reason == StopReason.CONVERGED:
            return None
        width = "no interval" if self.rel_width is None else f"{self.rel_width:.1%} wide"
        asked = f"{rule.rel_width:.1%}"
        if rule.rounds > 1:  # the config's rel_width, widened for one round of several
            config = rule.rel_width / math.sqrt(rule.rounds)
            asked += f" per round: timing.rel_width {config:.1%} x sqrt({rule.rounds} rounds)"
        return f"stopped on {self.reason} with the median's interval {width} (asked {asked})"


@functools.lru_cache(maxsize=4096)
def median_ranks(n: int, confidence: float) -> tuple[int, int] | None:
    """0-based ranks (lo, hi) of the sorted samples whose span covers the median with at least
    `confidence`: P(lo < B <= hi) for B ~ Binomial(n, 1/2). None when n is too small for any.

    The binomial tail is summed here rather than taken from scipy.stats, whose import costs
    each measuring job about half a second."""
    tail = (1.0 - confidence) / 2
    cdf, k = 0.0, -1
    log_half_n = n * math.log(0.5)
    while k + 1 < n:
        i = k + 1
        pmf = math.exp(
            math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half_n
        )
        if cdf + pmf > tail:
            break
        cdf, k = cdf + pmf, i  # the largest k with P(B <= k) <= tail
    if k < 0:
        return None
    return k, n - 1 - k


def median_interval_width(values, confidence: float) -> float | None:
    """(hi - lo) / median of the distribution-free interval of the median of `values`."""
    ranks = median_ranks(len(values), confidence)
    if ranks is None:
        return None
    ordered = np.sort(np.asarray(values, dtype=float))
    median = float(np.median(ordered))
    if median <= 0:
        return math.inf
    return float(ordered[ranks[1]] - ordered[ranks[0]]) / median


class Stopper:
    """Asked before each sample whether to stop. The interval is recomputed as the clean samples
    grow by a tenth (at least one), so checking costs little beside samples of microseconds."""

    def __init__(self, rule: StoppingRule, max_disturbed: int):
        self.rule = rule
        self.max_disturbed = max_disturbed
        self._next_check = rule.min_samples
        self._width: float | None = None

    def check(self, clean_values: list[float], n_disturbed: int, elapsed_s: float) -> Stop | None:
        rule, n = self.rule, len(clean_values)
        floors = n >= rule.min_samples and elapsed_s >= rule.min_time_s
        if n >= self._next_check and n >= rule.min_samples:
            self._width = median_interval_width(clean_values, rule.confidence)
            self._next_check = max(n + 1, math.ceil(n * 1.1))
        if n + n_disturbed >= rule.max_samples:
            return Stop(StopReason.SAMPLE_CAP, self._width)
        if n_disturbed >= self.max_disturbed and elapsed_s >= rule.min_time_s:
            return Stop(StopReason.RETAKES, self._width)
        if not floors:
            return None
        if self._width is not None and self._width <= rule.rel_width:
            return Stop(StopReason.CONVERGED, self._width)
        if elapsed_s >= rule.max_time_s:
            return Stop(StopReason.TIME_CAP, self._width)
        return None

    def final(self, clean_values: list[float], reason: StopReason) -> Stop:
        """The stop with the width of all the clean samples taken."""
        return Stop(reason, median_interval_width(clean_values, self.rule.confidence))
