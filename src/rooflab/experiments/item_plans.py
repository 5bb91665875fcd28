"""How long timing one case in one cache state will take, from what is known when it is planned
(the ETA of a sweep or a workload: rooflab.progress).

An item's time is its warm-up (the budget, or its floor of calls where calls are long), and its
samples: the sampling floor in time, or the floor of samples where each sample (the call, the
clock and disturbance readings around it, a cold sample's eviction) takes longer. So the plan
needs the case's call time: measured once the case has been timed in one state; before that, its
work (F) at the rate of the timed case of the nearest arithmetic intensity (cases of similar
intensity run near one roof), else its bound at prior rates, else the last timed case's call. A cold
sample's eviction is planned per byte of the case's operands, at the rate learnt from the cold
samples so far. An item that begins a case's round also builds the case (its quickest build so
far, else the other cases'), and a case that checks itself after each timing plans that check
as last timed. The ETA then corrects what is left of the plan by the measured/planned ratio of
the items done (progress.Eta).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from rooflab.experiments.rounds import round_timing
from rooflab.experiments.timing import TimingSettings
from rooflab.vocabulary import CacheState

# Before any case is timed: a call of a case of unknown work, and a rate for a known one (a few
# cores' GEMM on a CPU; the ETA's measured ratio corrects a GPU's within a few items).
PRIOR_CALL_S = 1e-3
PRIOR_FLOP_PER_S = 5e10
PRIOR_BYTES_PER_S = 1e10
SAMPLE_OVERHEAD_S = 5e-4  # a sample's clock probe and disturbance readings (CPU, /proc)
PRIOR_EVICT_S_PER_BYTE = 1e-9  # a cold sample's eviction of its operands, line by line


def planned_timing_s(timing: TimingSettings, call_s: float = 0.0, evict_s: float = 0.0) -> float:
    """Planned seconds of timing one case in one cache state, in one of its rounds: warm-up (at
    least its floor of calls), idle, and sampling (the time floor, or the sample floor where
    samples of `call_s` plus their readings and `evict_s` of eviction take longer)."""
    one = round_timing(timing)
    warmup = max(one.warmup_s + call_s, one.warmup_min_calls * call_s)
    sampling = max(one.min_time_s, one.min_samples * (call_s + SAMPLE_OVERHEAD_S + evict_s))
    return warmup + one.cooldown_s + sampling


@dataclass
class CallTimes:
    """What is known of each case's call: its work (F and model Q, where known before it is
    built), its operands' bytes once built, its median call once timed (in the order timed)."""

    work: dict[str, tuple[float, float | None]] = field(default_factory=dict)  # F, Q
    operand_bytes: dict[str, float] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)  # config_id -> median call s
    evict_rates: list[float] = field(default_factory=list)  # s per byte, per cold item
    # a case's build (its inputs made, and in round 1 its check and any compile) and its check
    # again after a timing: each round builds the case anew; a workload checks after each state
    builds: dict[str, list[float]] = field(default_factory=dict)
    rechecks: dict[str, float] = field(default_factory=dict)

    def built(self, config_id: str, flops, model_bytes, arrays: tuple = ()) -> None:
        """A case's work (where it has any), and its operands once built."""
        if flops:
            self.work[config_id] = (float(flops), float(model_bytes) if model_bytes else None)
        if arrays:
            self.operand_bytes[config_id] = float(sum(getattr(a, "nbytes", 0) for a in arrays))

    def timed(
        self, config_id: str, cache_state: str, call_s: float, item_s: float, samples: int,
        timing: TimingSettings,
    ) -> None:  # fmt: skip
        """A case timed in one state: its median call `call_s`, the item's `item_s` seconds and
        `samples` count; a cold one's time past its warm plan is its eviction."""
        self.measured.setdefault(config_id, call_s)
        operand_bytes = self.operand_bytes.get(config_id, 0.0)
        if cache_state == CacheState.COLD and operand_bytes > 0 and samples > 0:
            over = item_s - planned_timing_s(timing, call_s)
            self.evict_rates.append(max(over, 0.0) / samples / operand_bytes)

    def build_timed(self, config_id: str, seconds: float) -> None:
        self.builds.setdefault(config_id, []).append(seconds)

    def recheck_timed(self, config_id: str, seconds: float) -> None:
        self.rechecks[config_id] = seconds

    def build_s(self, config_id: str) -> float:
        """A case's build (its inputs made: time per byte of its operands) at the quickest rate
        per byte of the builds so far, at most its own quickest; before it is built, the
        quickest build of another case; nothing known: 0. A first build may have compiled the
        kernel (a one-off), and only the quickest is kept from it."""
        quickest = {c: min(times) for c, times in self.builds.items()}
        sizes = self.operand_bytes
        rates = [seconds / sizes[c] for c, seconds in quickest.items() if sizes.get(c)]
        if config_id in quickest:
            own = quickest[config_id]
            size = sizes.get(config_id)
            return min(own, min(rates) * size) if rates and size else own
        return min(quickest.values()) if quickest else 0.0

    def recheck_s(self, config_id: str) -> float:
        if config_id in self.rechecks:
            return self.rechecks[config_id]
        return statistics.median(self.rechecks.values()) if self.rechecks else 0.0

    def call_s(self, config_id: str) -> float:
        if config_id in self.measured:
            return self.measured[config_id]
        if config_id in self.work:
            flops, model_bytes = self.work[config_id]
            rate = self._rate_near(flops / model_bytes if model_bytes else None)
            if rate is not None:
                return flops / rate
            return max(flops / PRIOR_FLOP_PER_S, (model_bytes or 0.0) / PRIOR_BYTES_PER_S)
        if self.measured:  # no work known: the call of the case timed last
            return self.measured[next(reversed(self.measured))]
        return PRIOR_CALL_S

    def evict_s(self, config_id: str) -> float:
        per_byte = statistics.median(self.evict_rates) if self.evict_rates else None
        return (per_byte or PRIOR_EVICT_S_PER_BYTE) * self.operand_bytes.get(config_id, 0.0)

    def planned_s(
        self, config_id: str, cache_state: str, timing: TimingSettings, *, built: bool = False,
        recheck: bool = False,
    ) -> float:  # fmt: skip
        """An item's plan: its timing, and the case's build where the item begins with it
        (`built`), and its check after the timing where the case checks again (`recheck`)."""
        evict = self.evict_s(config_id) if cache_state == CacheState.COLD else 0.0
        planned = planned_timing_s(timing, self.call_s(config_id), evict)
        planned += self.build_s(config_id) if built else 0.0
        return planned + (self.recheck_s(config_id) if recheck else 0.0)

    def _rate_near(self, intensity: float | None) -> float | None:
        """FLOP/s of the timed case of the nearest intensity (without one, of the case timed
        last); None before a case of known work is timed."""
        timed = [c for c in self.measured if c in self.work]
        if not timed:
            return None
        near = timed[-1]
        known = [c for c in timed if self.work[c][1]]
        if intensity is not None and known:

            def distance(c: str) -> float:
                flops, model_bytes = self.work[c]
                return abs(math.log(flops / model_bytes / intensity))

            near = min(known, key=distance)
        return self.work[near][0] / self.measured[near]
