"""The stopping rule (experiments.stopping) and the adaptive ceiling sweep's plan
(experiments.ceiling_plan.sweep_start, refine): pure, so judged exactly."""

import random
import time
from dataclasses import replace

import pytest
from scipy.stats import binom

from rooflab.backends.cpu import CpuBackend
from rooflab.conditions.disturbance import DisturbanceSettings
from rooflab.experiments.ceiling_plan import (
    COARSE_PER_OCTAVE,
    EDGE_CHANGE,
    CeilingSettings,
    plateaus,
    refine,
    sweep_start,
    working_set_sizes,
)
from rooflab.experiments.ceilings import rounds_disagree
from rooflab.experiments.stopping import (
    Stop,
    Stopper,
    StoppingRule,
    median_interval_width,
    median_ranks,
)
from rooflab.experiments.timing import TimingSettings, measure
from rooflab.vocabulary import CacheState, StopReason
from tests.conftest import UNJUDGED

KiB, MiB = 1024, 1024 * 1024


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_the_median_ranks_are_scipys_binomial_ones(confidence):
    for n in [*range(1, 200), 1000, 4999]:
        alpha = (1 - confidence) / 2
        k = int(binom.ppf(alpha, n, 0.5))
        if binom.cdf(k, n, 0.5) > alpha:
            k -= 1
        expected = None if k < 0 else (k, n - 1 - k)
        assert median_ranks(n, confidence) == expected, n


def test_six_samples_are_the_fewest_with_a_95_percent_interval():
    assert median_ranks(5, 0.95) is None
    assert median_ranks(6, 0.95) == (0, 5)  # coverage 1 - 2/64 = 96.9 %
    assert median_interval_width([1.0] * 5, 0.95) is None
    assert median_interval_width([1.0, 1.0, 1.0, 1.0, 1.0, 1.1], 0.95) == pytest.approx(0.1)


def _run(stopper: Stopper, values, seconds_each: float = 0.01):
    """Feed `values` one at a time (each `seconds_each` long) until the stopper stops."""
    taken = []
    for value in values:
        stop = stopper.check(taken, 0, seconds_each * len(taken))
        if stop is not None:
            return stop, taken
        taken.append(value)
    raise AssertionError("never stopped")


@pytest.mark.parametrize(
    ("min_time_s", "samples"),
    [(0.0, 10), (0.5, 50)],  # the time floor holds even when the width is reached
    ids=["at_the_sample_floor", "at_the_time_floor"],
)
def test_a_quiet_measurement_stops_at_its_floors(min_time_s, samples):
    rule = StoppingRule(rel_width=0.02, min_samples=10, min_time_s=min_time_s, max_time_s=100)
    stop, taken = _run(Stopper(rule, max_disturbed=20), [1.0] * 1000, seconds_each=0.01)
    assert stop.reason == StopReason.CONVERGED and len(taken) == samples


def test_a_noisy_measurement_samples_on_and_stops_at_its_cap_saying_so():
    rng = random.Random(1)
    noisy = [rng.uniform(1.0, 2.0) for _ in range(10000)]
    rule = StoppingRule(rel_width=0.01, min_samples=10, max_time_s=1.0)
    stop, taken = _run(Stopper(rule, max_disturbed=20), noisy, seconds_each=0.01)
    assert stop.reason == StopReason.TIME_CAP and len(taken) == 100
    assert stop.rel_width > 0.01
    assert "time_cap" in stop.note(rule) and "1.0%" in stop.note(rule)


def test_a_noisier_measurement_takes_more_samples_to_the_same_width():
    rng = random.Random(2)
    rule = StoppingRule(rel_width=0.05, min_samples=10, max_time_s=1e9)
    counts = []
    for spread in (0.02, 0.2):
        values = [rng.uniform(1.0, 1.0 + spread) for _ in range(100000)]
        stop, taken = _run(Stopper(rule, max_disturbed=20), values)
        assert stop.reason == StopReason.CONVERGED and stop.rel_width <= 0.05
        counts.append(len(taken))
    assert counts[0] == 10 and counts[1] > 30


def test_the_sample_cap_and_the_retakes_stop_it_too():
    rule = StoppingRule(rel_width=1e-9, min_samples=3, max_time_s=1e9, max_samples=40)
    stop, taken = _run(Stopper(rule, max_disturbed=100), [1.0, 2.0] * 100)
    assert stop.reason == StopReason.SAMPLE_CAP and len(taken) == 40
    stopper = Stopper(StoppingRule(min_samples=10), max_disturbed=20)
    assert stopper.check([1.0] * 3, 20, 1.0).reason == StopReason.RETAKES


def test_measure_stores_how_it_stopped():
    backend = CpuBackend()
    unjudged = DisturbanceSettings(**UNJUDGED)  # what else runs flags no sample here
    loose = TimingSettings(
        warmup_s=0.001, min_time_s=1e-9, min_samples=8, rel_width=1e6, disturbance=unjudged
    )
    measured = measure(lambda: sum(range(200)), backend, loose, CacheState.WARM)
    assert sum(not s.disturbed for s in measured.samples) == 8
    columns = measured.summary(0.1).columns()
    assert columns["stop_reason"] == "converged" and columns["ci_rel_width"] <= 1e6

    def jittery():
        time.sleep(random.choice([0.0001, 0.002]))

    strict = replace(loose, min_time_s=0.001, rel_width=1e-6, max_time_s=0.2)
    started = time.perf_counter()
    measured = measure(jittery, backend, strict, CacheState.WARM)
    assert time.perf_counter() - started >= 0.2
    columns = measured.summary(0.1).columns()
    assert columns["stop_reason"] == "time_cap" and columns["ci_rel_width"] > 1e-6


def test_a_full_sweep_starts_from_every_step_an_adaptive_one_from_octaves_and_plateau_ends():
    caches = {"L1": 64 * KiB, "L2": 2 * MiB, "L3": 32 * MiB}
    high = 8 * (sum(caches.values()))
    windows = plateaus(caches, high)
    full = sweep_start(16 * KiB, high, CeilingSettings(adaptive=False), windows)
    assert full == working_set_sizes(16 * KiB, high, 4)
    start = sweep_start(16 * KiB, high, CeilingSettings(), windows)
    # every octave, but the sweep's end: the memory plateau's end, 2 % inside it, stands for it
    assert set(working_set_sizes(16 * KiB, high, COARSE_PER_OCTAVE)) - set(start) == {high}
    assert max(start) == round(high * 0.98 / 1024) * 1024
    for lo, hi in windows.values():  # each plateau's ends (2 % inside), where they lie in it
        for end in (lo * 1.02, hi * 0.98):
            if 16 * KiB <= end <= high:
                assert round(end / 1024) * 1024 in start
    assert len(start) < len(full) / 2


def test_refine_halves_the_step_only_where_the_rate_changes_down_to_the_finest():
    settings = CeilingSettings(points_per_octave=4)

    def rate(size: int) -> float:  # two plateaus with an edge at 1 MiB
        return 100.0 if size <= MiB else 50.0

    measured = {s: rate(s) for s in (64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB)}
    rounds = 0
    while added := refine(measured, settings):
        rounds += 1
        measured.update({s: rate(s) for s in added})
    sizes = sorted(measured)
    # flat stretches keep their two-octave steps; the edge is bracketed at the finest step
    assert {64 * KiB, 256 * KiB, 4 * MiB, 16 * MiB} <= set(sizes)
    assert not any(64 * KiB < s < 256 * KiB or 4 * MiB < s < 16 * MiB for s in sizes)
    above = min(s for s in sizes if s > MiB)
    assert above / MiB <= 2 ** (1 / 4) * 1.02
    assert rounds == 3  # 2 octaves -> 1 -> 1/2 -> 1/4
    assert refine(measured, CeilingSettings(adaptive=False)) == []


def test_a_change_below_the_edge_threshold_is_not_refined():
    settings = CeilingSettings()
    flat = {MiB: 100.0, 4 * MiB: 100.0 * (1 + EDGE_CHANGE / 2)}
    assert refine(flat, settings) == []


def test_fma_rounds_repeat_only_while_the_best_two_disagree():
    assert rounds_disagree([], 0.03) and rounds_disagree([100.0], 0.03)
    assert not rounds_disagree([100.0, 98.0], 0.03)
    assert rounds_disagree([100.0, 90.0], 0.03)
    assert not rounds_disagree([60.0, 100.0, 98.5], 0.03)  # a slow round does not count


def test_a_sweep_point_that_sets_no_ceiling_stops_at_a_looser_width():
    from rooflab.experiments.ceiling_windows import OFF_PLATEAU_WIDTH, window_rule

    settings = CeilingSettings(rel_width=0.03, windows=6, max_point_s=0.2)
    on, off = window_rule(settings), window_rule(settings, sets_a_ceiling=False)
    assert (on.rel_width, on.min_samples, on.max_time_s) == (0.03, 6, 0.2)
    assert (off.rel_width, off.min_samples, off.max_time_s) == (OFF_PLATEAU_WIDTH, 6, 0.1)


def test_a_rounds_note_says_why_its_width_is_wider_than_the_configs():
    """Issue 44: a round asks √rounds the config's rel_width (its pooled rounds then meet it); the
    log's `asked 4.2%` says so instead of contradicting `rel_width: 0.03`."""
    from rooflab.experiments.rounds import round_timing

    rule = round_timing(TimingSettings(rel_width=0.03, rounds=2)).rule()
    stop = Stop(StopReason.TIME_CAP, 0.077)
    assert stop.note(rule) == (
        "stopped on time_cap with the median's interval 7.7% wide (asked 4.2% per round: "
        "timing.rel_width 3.0% x sqrt(2 rounds))"
    )
    one = TimingSettings(rel_width=0.03, rounds=1).rule()
    assert stop.note(one).endswith("(asked 3.0%)")
