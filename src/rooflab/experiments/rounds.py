"""A sweep's or workload's points timed in rounds spread over the run, as asv spreads a
benchmark over processes: round 1 times every point, then round 2 times every point again, and
so on. A shared machine drifts over seconds (on the development VMs, memory bandwidth by 20 %
within a minute); a point's rounds meet different moments of that drift, so its statistics
cover them, and the spread of its round medians (`round_spread`) tells `rooflab compare` what a
rerun may show without cause (comparison.within_run_effect) before the key has a history.

Each round is a whole measurement (warm-up, then samples by the stopping rule), its budgets
split over the rounds (round_timing): the floor of samples, at least MIN_ROUND_SAMPLES (the
fewest with a 95 % interval of their median) or the floor itself where it is smaller; the time
floor and cap; and the width, √rounds wider. The point's row pools every round's clean samples
(its stop reason: the first round's that fell short, else converged; its width: the pooled
samples'); its samples rows carry their round.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace

from rooflab.backends.base import Backend
from rooflab.conditions.disturbance import Verdict, add_gpu_processes
from rooflab.conditions.nvml import clock_flags
from rooflab.experiments.runs import conditions_row, during_rows
from rooflab.experiments.stopping import Stop, median_interval_width
from rooflab.experiments.timing import (
    Measurement,
    TimingSettings,
    clean,
    judge_samples,
    measure,
    sample_rows,
)
from rooflab.vocabulary import StopReason

MIN_ROUND_SAMPLES = 6


def round_timing(timing: TimingSettings) -> TimingSettings:
    """The settings of one round, so that a point's rounds together cost about what one
    measurement would: min_samples split over the rounds (see the module), the time floor and cap
    split too, and a width √rounds wider (the pooled samples' interval is about √rounds
    narrower than one round's)."""
    rounds = timing.rounds
    split = math.ceil(timing.min_samples / rounds)
    return replace(
        timing,
        min_samples=max(split, min(MIN_ROUND_SAMPLES, timing.min_samples)),
        min_time_s=timing.min_time_s / rounds,
        max_time_s=timing.max_time_s / rounds,
        rel_width=timing.rel_width * math.sqrt(rounds),
        round_of=rounds,
    )


@dataclass
class TimedPoint:
    """One point (a configuration or case in a cache state) and its rounds so far."""

    config_id: str
    cache_state: str
    flops: int
    work_unit: str = "FLOP"  # of `flops`: OP for an int8 GEMM
    measurements: list[Measurement] = field(default_factory=list)
    readings: list[list[dict]] = field(default_factory=list)

    def time_round(
        self,
        backend: Backend,
        call,
        timing: TimingSettings,
        tables,
        *,
        run_id,
        progress=None,
        operands=None,
    ) -> None:
        """One more round: condition readings around a measurement, appended to `tables` with
        its samples (numbered on from the earlier rounds'); `operands`: what `call` reads and
        writes, evicted before each cold sample where the backend can (Backend.make_cold)."""
        config_id, cache_state = self.config_id, self.cache_state
        before = conditions_row(backend, run_id, "before", config_id)
        with backend.sampling_conditions(config_id) as during:
            measured = measure(
                call,
                backend,
                round_timing(timing),
                cache_state,
                progress,
                label=f"{config_id}/{cache_state}",
                operands=operands,
            )
        readings = [before, *during_rows(run_id, during)]
        readings.append(conditions_row(backend, run_id, "after", config_id))
        tables["conditions"].extend(readings)
        taken = sum(len(m.samples) for m in self.measurements)
        tables["samples"].extend(
            sample_rows(run_id, config_id, cache_state, measured.samples, self.flops,
                        self.work_unit, round_index=len(self.measurements), first_idx=taken)
        )  # fmt: skip
        self.measurements.append(measured)
        self.readings.append(readings)

    def columns(self, backend: Backend, timing: TimingSettings) -> dict:
        """The point's timing columns over all its rounds: sample summary, rounds, FLOP/s,
        flush, clock flags, disturbance verdict."""
        samples = [s for m in self.measurements for s in m.samples]
        seconds = [s.seconds for s in clean(samples)]
        reasons = [m.stop.reason for m in self.measurements if m.stop]
        short = [r for r in reasons if r != StopReason.CONVERGED]
        width = median_interval_width(seconds, timing.rule().confidence)
        stop = Stop(short[0] if short else StopReason.CONVERGED, width)
        pooled = Measurement(samples, self.verdict(backend, timing), stop)
        summary = pooled.summary(timing.noisy_iqr_ratio)
        medians = [
            statistics.median(s.seconds for s in clean(m.samples)) for m in self.measurements
        ]
        readings = [r for round_readings in self.readings for r in round_readings]
        flushes = [m.cold_flush for m in self.measurements if m.cold_flush]
        return {
            "cache_state": self.cache_state,
            **summary.columns(),
            "n_rounds": len(medians),
            "round_spread": max(medians) / min(medians) - 1 if len(medians) > 1 else None,
            "achieved_flops_per_s": self.flops / summary.median_s,
            "noisy": summary.noisy,
            "flush_method": flushes[-1][1] if flushes else None,
            "flush_bytes": flushes[-1][0] if flushes else 0,
            **clock_flags(readings, timing.max_clock_change),
            **pooled.verdict.columns(),
        }

    def verdict(self, backend: Backend, timing: TimingSettings) -> Verdict:
        """The verdict on all the rounds' samples over all their sampling phases (judged
        together: a round's phase alone is short, and what other processes used is read in
        clock ticks), with other GPU users from every round's readings."""
        verdict = judge_samples(
            [s for m in self.measurements for s in m.samples],
            [p for m in self.measurements for p in m.phases],
            backend,
            timing.min_samples,
            timing.disturbance,
        )
        return add_gpu_processes(verdict, [r for readings in self.readings for r in readings])
