"""Noise-aware comparison of two runs of one measurement (docs/compare.md): did it get slower,
faster, or stay the same beyond noise?

From the raw samples (`compare_samples`): the Hodges-Lehmann estimate of the shift between the
log times of the candidate and the baseline (the median of all pairwise differences), which is
the ratio of their medians where one is a scaled copy of the other, with its distribution-free
confidence interval (order statistics of the pairwise differences at the Mann-Whitney
quantiles), and the Mann-Whitney U test's p-value (scipy). The verdict:

- `slower`: the whole interval lies at or above 1 + min_effect;
- `faster`: the whole interval lies at or below 1 / (1 + min_effect);
- `same`: anything else: noise alone, a change smaller than the minimum effect, or one the
  samples cannot place beyond it. A run's samples vary less than runs do (a rerun lands on other
  pages, another clock), so a change must clear the minimum effect with all of its interval.
- `incomparable`: too few samples on a side to say anything.

Where a run's raw samples were pruned (`rooflab store prune`), `compare_summaries` judges from
the medians and quartiles alone: a change counts only beyond both the minimum effect and the
larger of the two runs' IQR / median (method `summary`, no interval).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_EFFECT = 0.05  # a change under 5 % is `same`, however significant
CONFIDENCE = 0.95
MIN_SAMPLES = 3  # per side, for a verdict from samples
MAX_SAMPLES = 2000  # per side: evenly thinned above it (the pairwise differences grow as n·m)
VERDICTS = ("faster", "slower", "same", "incomparable")


@dataclass(frozen=True)
class Compared:
    baseline_s: float | None  # median of the baseline
    candidate_s: float | None
    ratio: float | None  # candidate / baseline: above 1 is slower
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    verdict: str
    method: str  # samples, summary
    note: str | None = None  # why incomparable


def _thinned(values: np.ndarray) -> np.ndarray:
    if values.size <= MAX_SAMPLES:
        return values
    return np.sort(values)[np.linspace(0, values.size - 1, MAX_SAMPLES).round().astype(int)]


def _verdict(low: float, high: float, min_effect: float) -> str:
    if low >= 1 + min_effect:
        return "slower"
    if high <= 1 / (1 + min_effect):
        return "faster"
    return "same"


def compare_samples(
    baseline, candidate, min_effect: float = MIN_EFFECT, confidence: float = CONFIDENCE
) -> Compared:
    """Two runs' sample times (s, or time per unit of work: any positive measure where more is
    slower) compared as the module says."""
    from scipy import stats

    if not 0 <= min_effect < 1 or not 0 < confidence < 1:
        raise ValueError(
            f"min_effect in [0, 1) and confidence in (0, 1), got {min_effect}, {confidence}"
        )
    base = np.asarray(baseline, dtype=float)
    cand = np.asarray(candidate, dtype=float)
    base, cand = base[np.isfinite(base) & (base > 0)], cand[np.isfinite(cand) & (cand > 0)]
    medians = (
        float(np.median(base)) if base.size else None,
        float(np.median(cand)) if cand.size else None,
    )
    if base.size < MIN_SAMPLES or cand.size < MIN_SAMPLES:
        why = (
            f"{base.size} baseline and {cand.size} candidate samples (at least {MIN_SAMPLES} each)"
        )
        return Compared(*medians, None, None, None, None, "incomparable", "samples", why)
    b, c = np.log(_thinned(base)), np.log(_thinned(cand))
    differences = np.sort(np.subtract.outer(c, b).ravel())
    n, m = c.size, b.size
    z = stats.norm.ppf(0.5 + confidence / 2)
    k = math.floor(n * m / 2 - z * math.sqrt(n * m * (n + m + 1) / 12))
    k = min(max(k, 0), differences.size - 1)
    ratio = math.exp(float(np.median(differences)))
    low, high = math.exp(differences[k]), math.exp(differences[differences.size - 1 - k])
    p_value = float(stats.mannwhitneyu(c, b, alternative="two-sided").pvalue)
    verdict = _verdict(low, high, min_effect)
    return Compared(*medians, ratio, low, high, p_value, verdict, "samples")


def compare_summaries(
    baseline: tuple[float, float, float],
    candidate: tuple[float, float, float],
    min_effect: float = MIN_EFFECT,
) -> Compared:
    """Two runs judged from (p25, median, p75) alone, where the samples are gone."""
    (b25, b50, b75), (c25, c50, c75) = baseline, candidate
    if not (b50 and c50) or b50 <= 0 or c50 <= 0:
        return Compared(b50, c50, None, None, None, None, "incomparable", "summary", "no median")
    ratio = c50 / b50
    noise = max((b75 - b25) / b50, (c75 - c25) / c50, 0.0)
    threshold = 1 + max(min_effect, noise)
    verdict = "slower" if ratio >= threshold else "faster" if ratio <= 1 / threshold else "same"
    return Compared(b50, c50, ratio, None, None, None, verdict, "summary")
