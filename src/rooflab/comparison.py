"""Noise-aware comparison of two runs of one measurement (docs/compare.md): did it get slower,
faster, or stay the same beyond noise?

From the raw samples (`compare_samples`): the Hodges-Lehmann estimate of the shift between the
log times of the candidate and the baseline (the median of all pairwise differences), which is
the ratio of their medians where one is a scaled copy of the other, with its distribution-free
confidence interval (order statistics of the pairwise differences at the Mann-Whitney
quantiles), and the Mann-Whitney U test's p-value (scipy). The verdict:

- `slower`: the whole interval lies at or above 1 + effect;
- `faster`: the whole interval lies at or below 1 / (1 + effect);
- `inconclusive`: the interval holds both 1 (no change) and the effect (1 + effect or
  1 / (1 + effect)): the samples cannot tell whether anything changed; `note` says so, with the
  interval;
- `same`: anything else: noise alone, a change smaller than the effect, or one on one side of 1
  that the samples cannot place beyond the effect (the runs differ, but within how far
  identical reruns move);
- `incomparable`: too few samples on a side to say anything.

The effect is `min_effect`, or more where runs differ more without cause: the key's own earlier
runs (`run_to_run_effect`: a 99 % prediction bound of the difference of two runs from the spread
of its earlier runs' medians, once there are three); until then, its rounds within each of the
two runs (`within_run_effect`: the same bound from how far its round medians spread inside a run,
the rounds being spread over the run as asv's processes are); and the other keys of the same two
runs (`across_keys_effect`: a 99 % bound from how widely their ratios spread, with eight keys or
more). A run's samples vary less than
runs do (a rerun lands on other pages, another clock, other neighbours on a shared host), so the
samples alone cannot say what a rerun would show.

A verdict is `provisional` while the key has fewer than MIN_HISTORY earlier runs: its run-to-run
spread is then unknown, and a slow spell of the machine that lasts a whole run (both its rounds,
every key of a kind) cannot be told from a change. As conbench flags nothing without a history,
`rooflab compare --fail-on regression` fails only on a `slower` that is not provisional.

Where a run's raw samples were pruned (`rooflab store prune`), `compare_summaries` judges from
the medians and quartiles alone: a change counts only beyond both the minimum effect and the
larger of the two runs' IQR / median (method `summary`, no interval, so never `inconclusive`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_EFFECT = 0.05  # a change under 5 % is `same`, however significant
CONFIDENCE = 0.95
MIN_SAMPLES = 3  # per side, for a verdict from samples
MIN_HISTORY = 3  # earlier runs of a key from which its run-to-run spread is estimated
RUN_CONFIDENCE = 0.99  # of the run-to-run bounds
MIN_KEYS = 8  # keys of one pair of runs from which their spread across keys is estimated
MAX_SAMPLES = 2000  # per side: evenly thinned above it (the pairwise differences grow as n·m)
# `inconclusive`: the samples' interval holds both no change and the effect; or
# (store.comparisons) a verdict of the samples that is no judgement: a side disturbed or on a
# busy machine, or slower but provisional
VERDICTS = ("slower", "faster", "same", "incomparable", "inconclusive")  # in the order counted


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
    note: str | None = None  # why incomparable or inconclusive
    effect: float | None = None  # the change a verdict needed: min_effect or the runs' spread
    provisional: bool = False  # no run-to-run spread known yet: fewer than MIN_HISTORY runs


def _thinned(values: np.ndarray) -> np.ndarray:
    if values.size <= MAX_SAMPLES:
        return values
    return np.sort(values)[np.linspace(0, values.size - 1, MAX_SAMPLES).round().astype(int)]


def _verdict(low: float, high: float, effect: float) -> tuple[str, str | None]:
    """The verdict of the interval `low`..`high` of a ratio against the effect, and why where it
    is inconclusive."""
    bound = 1 + effect
    if low >= bound:
        return "slower", None
    if high <= 1 / bound:
        return "faster", None
    if not low <= 1 <= high or (1 / bound < low and high < bound):
        return "same", None
    edges = ((1 / bound, low <= 1 / bound), (bound, high >= bound))
    reached = " and ".join(f"{edge:.4g}" for edge, hit in edges if hit)
    return "inconclusive", (
        f"interval {low:.4g}-{high:.4g} holds both no change (1) and the effect ({reached}): the "
        "samples cannot tell whether it changed"
    )


def run_to_run_effect(history, confidence: float = RUN_CONFIDENCE) -> float | None:
    """The change two runs of a key show without cause, from the medians of its earlier runs
    (at least MIN_HISTORY): the `confidence` bound of the difference of two runs' log medians,
    t(n-1) · s · √2 with s their standard deviation (a prediction bound, wide while n is small);
    None with fewer runs."""
    from scipy import stats

    logs = np.log([m for m in history if m and m > 0])
    if logs.size < MIN_HISTORY:
        return None
    spread = float(np.std(logs, ddof=1))
    return math.expm1(stats.t.ppf(0.5 + confidence / 2, logs.size - 1) * spread * math.sqrt(2))


def within_run_effect(
    baseline_rounds, candidate_rounds, confidence: float = RUN_CONFIDENCE
) -> float | None:
    """The change two runs of a key show without cause, from the medians of its rounds inside
    each run (rounds spread over a run see the machine's slow drift, which a rerun meets too):
    the `confidence` prediction bound of the difference of the two runs' mean log medians,
    t(dof) · s · √(1/R_b + 1/R_c), s pooled over both runs' rounds (dof = R_b + R_c - 2). None
    with fewer than two rounds in either run."""
    from scipy import stats

    sides = [
        np.log([m for m in side if m and m > 0]) for side in (baseline_rounds, candidate_rounds)
    ]
    if any(side.size < 2 for side in sides):
        return None
    dof = sum(side.size - 1 for side in sides)
    pooled = math.sqrt(sum(float(((side - side.mean()) ** 2).sum()) for side in sides) / dof)
    scale = math.sqrt(sum(1 / side.size for side in sides))
    return math.expm1(stats.t.ppf(0.5 + confidence / 2, dof) * pooled * scale)


def across_keys_effect(ratios, confidence: float = RUN_CONFIDENCE) -> float | None:
    """The change a key shows without cause between two runs, from how far the ratios of all
    the keys of those two runs (candidate / baseline medians, at least MIN_KEYS) spread around
    their own median: the `confidence` bound of a normal with their robust spread (1.4826 MAD
    of the log ratios). A run-wide move (the whole machine slower) leaves the spread small;
    identical reruns on a shared host spread widely. None with fewer keys."""
    from scipy import stats

    logs = np.log([r for r in ratios if r and r > 0])
    if logs.size < MIN_KEYS:
        return None
    spread = 1.4826 * float(np.median(np.abs(logs - np.median(logs))))
    return math.expm1(stats.norm.ppf(0.5 + confidence / 2) * spread)


def compare_samples(
    baseline,
    candidate,
    min_effect: float = MIN_EFFECT,
    confidence: float = CONFIDENCE,
    history=(),
    rounds=((), ()),
) -> Compared:
    """Two runs' sample times (s, or time per unit of work: any positive measure where more is
    slower) compared as the module says; `history`: the medians of the key's earlier runs, whose
    spread (run_to_run_effect) raises the minimum effect on a machine whose runs differ;
    `rounds`: the medians of each run's rounds (within_run_effect), used until the history is."""
    from scipy import stats

    # The effect is a ratio's distance from 1: a user's is a few %, but the spread of a wild
    # machine's keys (across_keys_effect) can pass 100 %, and stays valid.
    if min_effect < 0 or not 0 < confidence < 1:
        raise ValueError(
            f"min_effect >= 0 and confidence in (0, 1), got {min_effect}, {confidence}"
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
    spread = run_to_run_effect(history)
    provisional = spread is None
    if spread is None:
        spread = within_run_effect(*rounds)
    b, c = np.log(_thinned(base)), np.log(_thinned(cand))
    differences = np.sort(np.subtract.outer(c, b).ravel())
    n, m = c.size, b.size
    z = stats.norm.ppf(0.5 + confidence / 2)
    k = math.floor(n * m / 2 - z * math.sqrt(n * m * (n + m + 1) / 12))
    k = min(max(k, 0), differences.size - 1)
    ratio = math.exp(float(np.median(differences)))
    low, high = math.exp(differences[k]), math.exp(differences[differences.size - 1 - k])
    p_value = float(stats.mannwhitneyu(c, b, alternative="two-sided").pvalue)
    effect = max(min_effect, spread or 0.0)
    verdict, why = _verdict(low, high, effect)
    return Compared(
        *medians, ratio, low, high, p_value, verdict, "samples", why, effect, provisional
    )


def compare_summaries(
    baseline: tuple[float, float, float],
    candidate: tuple[float, float, float],
    min_effect: float = MIN_EFFECT,
    history=(),
) -> Compared:
    """Two runs judged from (p25, median, p75) alone, where the samples are gone."""
    (b25, b50, b75), (c25, c50, c75) = baseline, candidate
    if not (b50 and c50) or b50 <= 0 or c50 <= 0:
        return Compared(b50, c50, None, None, None, None, "incomparable", "summary", "no median")
    ratio = c50 / b50
    noise = max((b75 - b25) / b50, (c75 - c25) / c50, 0.0)
    spread = run_to_run_effect(history)
    effect = max(min_effect, noise, spread or 0.0)
    threshold = 1 + effect
    verdict = "slower" if ratio >= threshold else "faster" if ratio <= 1 / threshold else "same"
    return Compared(
        b50, c50, ratio, None, None, None, verdict, "summary", None, effect, spread is None
    )
