"""From counted FLOPs and bytes to Roofline points, under the rules that keep them honest.

- **Calibrate before trusting** (`calibrate`, `calibrate_ledger`): a path's counted FLOPs must
  match 2MNK of the GEMM, or the executed FLOPs of a workload's ledger, within 1%; a counter that
  reads zero, is missing, or misses the mark makes that path's counts untrusted, and
  `hierarchical_points` refuses untrusted counts (fail closed).
- **Comparable conditions** (`pair`): bytes from a replay with `--cache-control all` (caches
  flushed before each pass) pair only with the `cold` timing of the same configuration, `none`
  only with `warm`; never across. The point's time is the paired timing's median, never ncu's
  `gpu__time_duration` (replayed and serialised).
- **Hierarchical points** (`hierarchical_points`): one row per memory level, each level's
  intensity against its own bandwidth ceiling; P ≤ min(C, B_HBM·I_HBM, B_L2·I_L2, ...).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rooflab.model import gemm_flops, hierarchical_bound
from rooflab.vocabulary import NCU_PAIRINGS

LEVEL_ORDER = ("HBM", "DRAM", "L2", "L1")  # slowest first, as the hierarchical chart reads
# An inner level that counted under this fraction of the outer level's bytes was bypassed. Not
# 1: the counts of neighbouring levels differ by a little for other reasons (an H200's SIMT
# SGEMM counted 0.99 x its L2 bytes at L1, traffic from other L2 clients); a bypass is orders
# of magnitude (TMA: 1e-5).
BYPASS_FRACTION = 0.5


class UntrustedCounts(ValueError):
    """Counts that failed calibration were offered to a Roofline point."""


class PairingError(ValueError):
    """No timing of the matching cache state for a counter replay."""


@dataclass(frozen=True)
class Calibration:
    path: str | None
    m: int | None  # the GEMM's shape; None for a workload case (its ledger has no shape)
    n: int | None
    k: int | None
    counted_flops: float | None
    expected_flops: int  # what the counters must find: 2MNK, or a workload's executed FLOPs
    ratio: float | None  # counted / expected
    tolerance: float
    trusted: bool
    reason: str


def _positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def calibrate(
    counted_flops: float | None,
    m: int,
    n: int,
    k: int,
    tolerance: float = 0.01,
    *,
    path: str | None = None,
) -> Calibration:
    """Trust a GEMM's counted FLOPs on a path only when they are within `tolerance` of 2MNK."""
    for name, value in (("m", m), ("n", n), ("k", k)):
        _positive(name, value)
    flops = gemm_flops(m, n, k)
    return calibrate_ledger(counted_flops, flops, tolerance, path=path, shape=(m, n, k))


def calibrate_ledger(
    counted_flops: float | None,
    expected_flops: int,
    tolerance: float = 0.01,
    *,
    path: str | None = None,
    ledger: str | None = None,
    shape: tuple[int, int, int] | None = None,
) -> Calibration:
    """Trust counted FLOPs only when they are within `tolerance` of the FLOPs a ledger says the
    implementation executes (`ledger` names it in the reason: "2MNK" for a GEMM; a workload's
    executed FLOPs, or its useful FLOPs where it declares no other; by default "2MNK" where a
    GEMM's `shape` is given)."""
    ledger = ledger or ("2MNK" if shape else "ledger")
    _positive("expected_flops", expected_flops)
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    expected = expected_flops
    m, n, k = shape or (None, None, None)
    where = f"{path}: " if path else ""

    def result(trusted: bool, ratio: float | None, reason: str) -> Calibration:
        return Calibration(
            path, m, n, k, counted_flops, expected, ratio, tolerance, trusted, where + reason
        )

    if counted_flops is None:
        return result(False, None, "counter missing; counts untrusted")
    if not math.isfinite(counted_flops) or counted_flops < 0:
        return result(False, None, f"counter reads {counted_flops!r}, not a count; untrusted")
    if counted_flops == 0:
        return result(False, 0.0, f"counter reads zero for {ledger} = {expected} FLOP; untrusted")
    ratio = counted_flops / expected
    if abs(counted_flops - expected) > tolerance * expected:
        return result(
            False,
            ratio,
            f"counted/{ledger} = {ratio:.4g} (off by {abs(ratio - 1):.2%}, more than "
            f"{tolerance:.0%}); counts untrusted",
        )
    return result(True, ratio, f"counted/{ledger} = {ratio:.6g}, within {tolerance:.0%}")


# cache_control of the replay -> (cache state of the timing it pairs with, the record's words)
PAIRINGS = NCU_PAIRINGS


@dataclass(frozen=True)
class Pairing:
    label: str  # stored with the point: which replay was paired with which timing
    cache_control: str
    cache_state: str
    timing: dict  # the timed_points row whose median is the point's time


def pair(counter_record: Mapping, timings: Iterable[Mapping]) -> Pairing:
    """The timing a counter replay pairs with: same configuration, the matching cache state, and
    the same machine where the record names one (the timings must then name theirs). Among several
    runs the newest (run ids sort by start time)."""
    cache_control = counter_record["cache_control"]
    if cache_control not in PAIRINGS:
        raise PairingError(f"cache_control {cache_control!r}: no pairing rule (all or none)")
    state, label = PAIRINGS[cache_control]
    config_id = counter_record["config_id"]
    machine = counter_record.get("machine_id")
    same_config = [t for t in timings if t["config_id"] == config_id]
    if machine is not None:
        same_config = [t for t in same_config if t.get("machine_id") == machine]
    matching = [t for t in same_config if t["cache_state"] == state]
    if not matching:
        others = sorted({t["cache_state"] for t in same_config})
        seen = f"; only {', '.join(others)} timing(s), never paired across" if others else ""
        on = f" on machine {machine}" if machine is not None else ""
        raise PairingError(
            f"{config_id}: a replay with --cache-control {cache_control} pairs only with a "
            f"{state} timing, and there is none{on}{seen}"
        )
    timing = max(matching, key=lambda t: str(t.get("run_id", "")))
    median = timing.get("median_s")
    if not isinstance(median, (int, float)) or not math.isfinite(median) or median <= 0:
        raise PairingError(f"{config_id} {state}: timing has no usable median_s ({median!r})")
    return Pairing(label, cache_control, state, dict(timing))


def _level_order(levels: Iterable[str]) -> list[str]:
    levels = list(levels)
    known = [lv for lv in LEVEL_ORDER if lv in levels]
    return known + sorted(lv for lv in levels if lv not in known)


def bypassed_levels(counted: Mapping[str, float]) -> dict[str, str]:
    """Levels whose counted bytes cannot be the traffic the SMs drew through them, each with the
    reason: fewer than BYPASS_FRACTION of the bytes at the level outside it. A byte from HBM
    crosses the L2 and then the L1 on its way in, unless the kernel moves it around that level's
    counter: Hopper's TMA (cp.async.bulk) copies global memory into shared memory without
    passing l1tex__t_bytes, so cuBLAS's bf16 GEMM on an H200 counted 12 kB at L1 against 1 GB at
    L2. Such a level gets no point (its intensity would be a fiction); its count stays in the
    counters table."""
    order = [lv for lv in _level_order(counted) if lv in LEVEL_ORDER]
    out = {}
    for outer, inner in itertools.pairwise(order):
        if counted[inner] < BYPASS_FRACTION * counted[outer]:
            out[inner] = (
                f"{inner}: {counted[inner]:.6g} B counted, under {BYPASS_FRACTION:g} x the "
                f"{counted[outer]:.6g} B at {outer}: the kernel moved its data around this "
                f"level's counter (e.g. TMA into shared memory); no {inner} point"
            )
    return out


def ledger_flops(timing: Mapping) -> tuple[int, int]:
    """A timing's (useful, executed) FLOPs from its ledger: `flops`, and `executed_flops` where
    the case declared them (else the useful ones; a GEMM executes its 2MNK)."""
    flops = int(timing["flops"])
    return flops, int(timing.get("executed_flops") or flops)


def hierarchical_points(
    pairing: Pairing,
    calibration: Calibration,
    bytes_by_level: Mapping[str, float | None],
    ceilings: Mapping[str, float],
    compute_path: str,
    *,
    counters_run_id: str | None = None,
    replay_mode: str | None = None,
) -> list[dict]:
    """One row per memory level with counted bytes (q_source "counters").

    F is the useful work (2MNK for a GEMM, a workload's `flops`), as in every rooflab point,
    admitted only by a trusted calibration of `compute_path` against the executed FLOPs;
    untrusted counts raise `UntrustedCounts`. t is the paired timing's median. Per level:
    I = F/Q_level and attainable = min(C, B_level·I_level) against that level's own ceiling
    (`ceilings[level]` in B/s; `ceilings[compute_path]` in FLOP/s).
    `limiting_level` is the level whose term B·I is smallest; `limiter` is that level, or
    "compute" where C is lower still. A level without a measured ceiling keeps its intensity
    and gets no bound; a level in `bypassed_levels` gets no row."""
    if not calibration.trusted:
        raise UntrustedCounts(f"{calibration.reason}: no Roofline point from these counts")
    if calibration.path is not None and calibration.path != compute_path:
        raise UntrustedCounts(
            f"calibration of {calibration.path} cannot admit a point on path {compute_path}"
        )
    timing = pairing.timing
    flops, executed = ledger_flops(timing)
    if executed != calibration.expected_flops:
        raise ValueError(
            f"calibration is for {calibration.expected_flops} executed FLOP, the timing's "
            f"ledger says {executed}"
        )
    if compute_path not in ceilings:
        raise ValueError(f"no compute ceiling for path {compute_path}")
    counted = {lv: float(q) for lv, q in bytes_by_level.items() if q is not None}
    if any(q < 0 or not math.isfinite(q) for q in counted.values()):
        raise ValueError(f"counted bytes must be finite and >= 0: {counted}")
    for level in bypassed_levels(counted):
        del counted[level]
    bounded = {lv: q for lv, q in counted.items() if lv in ceilings}
    if not bounded:
        raise ValueError(f"no bandwidth ceiling for any counted level ({', '.join(counted)})")
    peak = float(ceilings[compute_path])
    whole = hierarchical_bound(flops, bounded, peak, {lv: ceilings[lv] for lv in bounded})
    limiting = min(whole.levels.values(), key=lambda term: term.attainable_flops_per_s).level
    median_s, achieved = float(timing["median_s"]), float(timing["achieved_flops_per_s"])
    rows = []
    for level in _level_order(counted):
        q = counted[level]
        term = whole.levels.get(level)
        rows.append(
            {
                "run_id": timing.get("run_id"),
                "config_id": timing["config_id"],
                "kind": timing.get("kind"),
                "cache_state": pairing.cache_state,
                "machine_id": timing.get("machine_id"),
                "sweep": timing.get("sweep"),
                "m": timing.get("m"),
                "n": timing.get("n"),
                "k": timing.get("k"),
                "dtype": timing.get("dtype"),
                "layout": timing.get("layout"),
                "params": timing.get("params"),
                "executed_flops": timing.get("executed_flops"),
                "level": level,
                "q_source": "counters",
                "bytes": round(q),
                "flops": flops,
                "intensity": flops / q if q else math.inf,
                "median_s": median_s,
                "achieved_flops_per_s": achieved,
                "compute_path": compute_path,
                "peak_flops_per_s": peak,
                "bandwidth_b_per_s": term.bandwidth_b_per_s if term else None,
                "attainable_flops_per_s": min(peak, term.attainable_flops_per_s) if term else None,
                "bound_s": max(flops / peak, term.memory_s) if term else None,
                "limiter": whole.limiter,
                "limiting_level": limiting,
                "hierarchical_attainable_flops_per_s": whole.attainable_flops_per_s,
                "hierarchical_bound_s": whole.bound_s,
                "efficiency": achieved / whole.attainable_flops_per_s,
                "pairing": pairing.label,
                "cache_control": pairing.cache_control,
                "replay_mode": replay_mode,
                "counters_run_id": counters_run_id,
                "flops_counted": calibration.counted_flops,
                "calibration_ratio": calibration.ratio,
            }
        )
    return rows


@dataclass(frozen=True)
class ModelVsCounted:
    bytes_model: float
    bytes_counted: float
    ratio: float  # counted / model
    direction: str  # "model over-counts" | "model under-counts" | "agrees"
    statement: str


def model_vs_counted(
    bytes_model: float, dram_bytes: float, tolerance: float = 0.01
) -> ModelVsCounted:
    """How far the cold-cache ledger Q_model is from the counted HBM traffic, and which way.
    Over-counting is expected when operands stay in L2 (warm, repeated runs); under-counting
    when the kernel moves more than the ideal (re-reads, write-allocate, workspace)."""
    for name, value in (("bytes_model", bytes_model), ("dram_bytes", dram_bytes)):
        if value is None or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if bytes_model == 0:
        raise ValueError("bytes_model is zero: nothing to compare")
    ratio = dram_bytes / bytes_model
    if abs(dram_bytes - bytes_model) <= tolerance * bytes_model:
        direction = "agrees"
        how = f"within {tolerance:.0%}"
    elif bytes_model > dram_bytes:
        direction = "model over-counts"
        how = f"by {bytes_model / dram_bytes:.3g}x" if dram_bytes else "(no HBM traffic counted)"
    else:
        direction = "model under-counts"
        how = f"by {dram_bytes / bytes_model:.3g}x"
    statement = (
        f"model {bytes_model:.6g} B vs counted HBM {dram_bytes:.6g} B: {direction} {how} "
        f"(counted/model = {ratio:.4g})"
    )
    return ModelVsCounted(float(bytes_model), float(dram_bytes), ratio, direction, statement)
