"""Why each Roofline point sits where it does, and what to try next (docs/diagnosis.md).

Each point (a GEMM configuration, a workload case or a counted point, in its cache state and at its
level; a timeline step; a measured stage; and, apart, a stages schedule and a same_work_as pair)
gets one cause, the first of these rules that holds, with the figures that decided it (named
by their column), a next step in one sentence and, where the ledgers allow, the bound after that
step (`predicted_s`, seconds, from rooflab.model):

1. `above_roof`: efficiency above ROOF_BEATEN_EFFICIENCY (the summary's "roof beaten" margin):
   the ledger, the roof or the conditions are wrong, checked in that order.
2. `conditions`: the point is disturbed (conditions.disturbance), or its samples' median clock is
   off its roof's by more than CLOCK_MARGIN, or (a counted point) the SM clock of its ncu replay
   is off its timing's by more than that: its distance from the roof is not the kernel's alone.
   The efficiency against its roof scaled to its own clock is given (compute roofs scale with it).
3. `wasted_work`: the implementation executes more than WASTED_WORK x the useful FLOPs (its ledger's
   `executed_flops`); predicted: its time were the executed work the useful work.
   `launch_gaps` (a timeline step): its gaps (step minus busy time) are more than GAPS_SHARE of
   the step; predicted: the step at its busy time (fused, or a CUDA Graph).
4. compute-bound by its ledger: `at_roof` at AT_ROOF of its roof or more (nothing left on this path:
   change F or Q, or look a level up); else `compute_path` (the path is not used in full: tile
   tails, too little parallelism, a narrower path); predicted: its bound on its path.
5. memory-bound by its ledger: `low_reuse` at NEAR_BANDWIDTH of its bandwidth roof or more (raise
   the intensity; a GEMM's prediction: the bound per row at the M where it would cross the ridge,
   times its rows; a workload's: its compute bound, F/C); else `memory_parallelism` (too few
   outstanding requests, dependent or scattered accesses; predicted: its bound at full bandwidth).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

from rooflab.model import ModelError, bound, gemm_ledger
from rooflab.records import read_runs
from rooflab.roofline.points import MEMORY_LEVEL, resident_level
from rooflab.vocabulary import DIAGNOSIS_CAUSES, ROOF_BEATEN_EFFICIENCY, CacheState

# The thresholds (docs/diagnosis.md), the same for every point.
AT_ROOF = 0.8  # of its roof: a clean compute-bound point at or above it is at its roof
NEAR_BANDWIDTH = 0.5  # of its bandwidth roof: a memory-bound point at or above it lacks reuse
WASTED_WORK = 1.5  # executed over useful FLOPs above it: wasted work
GAPS_SHARE = 0.2  # of a timeline step: gaps (step minus busy) above it are launch gaps
CLOCK_MARGIN = 0.10  # a point's clock off its roof's (or its replay's) by more: conditions
MAX_ROWS = 1 << 24  # a GEMM's M at which a memory-bound point would cross the ridge, up to this
# A GEMM shape off multiples of this leaves partial tiles (a tensor core's bf16 tile edge; a
# multiple of an AVX-512 register's fp32 lanes).
TILE = 16
# the timeline_modes view's columns a timeline step's figures are named by (docs/timelines.md)
TIMELINE_MODES_COLUMNS = ("bound_s", "noisy", "disturbed", "disturbance", "flops", "bytes")
TIMELINE_MODES_COLUMNS += ("compute_path", "peak_flops_per_s", "memory_level", "bandwidth_b_per_s")


def _figures(point: dict, *columns: str) -> dict:
    """Figures of the point named by the store's column each is (`roofline_points.efficiency`;
    a timeline step's `timeline_modes.bound_s`), or by name alone where worked out here."""
    table, stored = point.get("source", ("roofline_points", None))
    return {(f"{table}.{c}" if stored is None or c in stored else c): point.get(c) for c in columns}


def _clock_ratio(point: dict) -> float | None:
    """The roof's median clock over the point's, where both were read."""
    clock, roof = point.get("clock_mhz"), point.get("roof_clock_mhz")
    return roof / clock if clock and roof else None


def _conditions(point: dict) -> list[str]:
    """What makes the point's distance from its roof not the kernel's alone."""
    found = ["disturbed"] if point.get("disturbed") else []
    ratio = _clock_ratio(point)
    if ratio is not None and abs(ratio - 1) > CLOCK_MARGIN:
        found.append("clock")
    replay, clock = point.get("replay_clock_mhz"), point.get("clock_mhz")
    if replay and clock and abs(replay / clock - 1) > CLOCK_MARGIN:
        found.append("replay clock")  # its counts were taken at another clock than its time
    return found


def _rows_at_ridge(point: dict) -> int | None:
    """The smallest M at which this GEMM's ledger (its N, K, dtype) reaches the ridge, where its
    ledger is the point's own bytes; None where none up to MAX_ROWS does."""
    m, n, k, dtype = (point.get(c) for c in ("m", "n", "k", "dtype"))
    try:
        if gemm_ledger(m, n, k, dtype).bytes != point["bytes"]:
            return None
        ridge = point["peak_flops_per_s"] / point["bandwidth_b_per_s"]
        rows = m
        while gemm_ledger(rows, n, k, dtype).intensity < ridge:
            rows *= 2
            if rows > MAX_ROWS:
                return None
    except (ModelError, TypeError, KeyError):
        return None
    low = max(m, rows // 2)
    while low < rows:  # the smallest M in (rows/2, rows] at the ridge
        middle = (low + rows) // 2
        if gemm_ledger(middle, n, k, dtype).intensity >= ridge:
            rows = middle
        else:
            low = middle + 1
    return rows


def _low_reuse(point: dict) -> tuple[str, float | None, dict]:
    peak, bandwidth = point["peak_flops_per_s"], point["bandwidth_b_per_s"]
    evidence = {"ridge": peak / bandwidth}
    rows = _rows_at_ridge(point) if point.get("m") else None
    if rows is not None:
        ledger = gemm_ledger(rows, point["n"], point["k"], point["dtype"])
        at_ridge = bound(ledger.flops, ledger.bytes, peak, bandwidth)
        evidence["rows_at_ridge"] = rows
        step = (
            f"raise reuse: batch {rows} rows per call (M = {rows} reaches the ridge); this "
            f"point's {point['m']} row(s) would then take their share of that call's bound"
        )
        return step, at_ridge.bound_s * point["m"] / rows, evidence
    step = (
        "raise the intensity (batch, tile, fuse with its neighbours) until the bytes per FLOP "
        "reach the ridge; the bound there is its compute bound, F/C"
    )
    return step, point["flops"] / peak, evidence


def _compute_path(point: dict) -> tuple[str, dict]:
    tails = [d for d in ("m", "n", "k") if point.get(d) and point[d] % TILE]
    if tails:
        shape = ", ".join(f"{d.upper()} = {point[d]}" for d in tails)
        return (
            f"{shape} off multiples of {TILE}: pad or choose a shape without tile tails, so the "
            f"{point['compute_path']} path runs full tiles",
            {"tile": TILE},
        )
    return (
        f"the {point['compute_path']} path is not used in full: give it more parallel work "
        "(more tiles than cores or SMs), a wider or tensor path, or fewer dependent operations",
        {},
    )


def diagnose(point: dict) -> dict:
    """A roofline_points row's diagnosis: a point_diagnoses row."""
    efficiency, limiter = point["efficiency"], point["limiter"]
    evidence = _figures(point, "efficiency", "limiter", "intensity", "bound_s", "median_s", "noisy")
    predicted = None
    conditions = _conditions(point)
    executed, useful = point.get("executed_flops"), point.get("flops")
    if efficiency > ROOF_BEATEN_EFFICIENCY:
        cause = "above_roof"
        evidence |= _figures(point, "flops", "bytes", "attainable_flops_per_s")
        evidence |= _figures(point, "peak_flops_per_s", "bandwidth_b_per_s")
        step = (
            "check the ledger (F and Q of this kernel), then the roof (is a faster path or level "
            "missing from the ceilings?), then the conditions: "
            + (", ".join(conditions) or "none flagged")
        )
    elif conditions:
        cause = "conditions"
        ratio = _clock_ratio(point)
        evidence |= _figures(point, "disturbed", "disturbance", "clock_mhz", "roof_clock_mhz")
        if point.get("replay_clock_mhz"):
            evidence |= _figures(point, "replay_clock_mhz")
        if ratio is not None and limiter == "compute":
            evidence["efficiency_at_its_clock"] = efficiency * ratio
        step = f"re-measure on a quiet machine at its roof's clock ({', '.join(conditions)})"
    elif executed and useful and executed > WASTED_WORK * useful:
        cause = "wasted_work"
        evidence |= _figures(point, "flops", "executed_flops")
        evidence["executed_over_useful"] = executed / useful
        step = "skip the work that is thrown away (zeros, padding, recomputation)"
        predicted = point["median_s"] * useful / executed
    elif (point.get("gap_s") or 0) > GAPS_SHARE * point["median_s"]:
        cause = "launch_gaps"
        evidence = {f"timeline_steps.{c}": point[c] for c in ("step_s", "busy_s", "gap_s")}
        evidence |= {"efficiency": efficiency, "gap_fraction": point["gap_s"] / point["median_s"]}
        step = "fuse the step's kernels, or replay it as a CUDA Graph: its gaps are launch time"
        predicted = point["busy_s"]
    elif limiter == "compute":
        evidence |= _figures(point, "compute_path", "peak_flops_per_s")
        if efficiency >= AT_ROOF:
            cause = "at_roof"
            step = (
                "nothing left on this path: change the algorithm (its F or Q), or look a level "
                "up (end to end, the timeline)"
            )
        else:
            cause = "compute_path"
            step, more = _compute_path(point)
            evidence |= more
            predicted = point["bound_s"]
    else:
        evidence |= _figures(point, "level", "bandwidth_b_per_s")
        if efficiency >= NEAR_BANDWIDTH:
            cause = "low_reuse"
            step, predicted, more = _low_reuse(point)
            evidence |= more
        else:
            cause = "memory_parallelism"
            step = (
                "too few outstanding requests, or dependent or scattered accesses: more "
                f"independent streams, prefetch, a contiguous layout, until {point['level']} "
                "bandwidth is reached"
            )
            predicted = point["bound_s"]
    counted = point.get("q_source") == "counters"
    kind = "counted" if counted else point["kind"]
    return _row(point | {"kind": kind, "key": point["config_id"]}, cause, evidence, step, predicted)


def _row(point: dict, cause: str, evidence: dict, step: str, predicted: float | None) -> dict:
    """A point_diagnoses row of `point` (its run_id, machine_id, key, kind, cache_state, level,
    limiter, efficiency, median_s and counters_run_id)."""
    assert cause in DIAGNOSIS_CAUSES, cause
    names = ("run_id", "machine_id", "key", "kind", "cache_state", "level", "limiter")
    return {name: point.get(name) for name in (*names, "efficiency", "median_s")} | {
        "cause": cause,
        "evidence": json.dumps({k: _plain(v) for k, v in evidence.items()}),
        "next_step": step,
        "predicted_s": predicted,
        "counters_run_id": point.get("counters_run_id"),
    }


def _plain(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


def timeline_points(run_dirs: Iterable[Path], ceilings: dict[str, dict]) -> list[dict]:
    """Each measured timeline step (a mode of a scenario) as a point to diagnose: its F and Q
    against its machine's latest ceilings (the FMA path of its dtype; the smallest cache level
    that holds its bytes, else the memory, as the timeline_modes view bounds it), its time the
    step's; none where its machine has no such ceilings."""
    points = []
    for run, tables in read_runs(run_dirs):
        machine = ceilings.get(run["machine_id"])
        for row in tables["timeline_steps"].to_pylist() if machine else []:
            path = f"{row['dtype']}_fma"
            memory = machine.get("memory_level", MEMORY_LEVEL)
            level = resident_level(row["bytes"], machine["caches"], CacheState.WARM, memory)
            if (
                path not in machine["peak"]
                or level not in machine["bandwidth"]
                or not row["step_s"]
            ):
                continue
            b = bound(
                row["flops"], row["bytes"], machine["peak"][path], machine["bandwidth"][level]
            )
            points.append(
                row
                | {
                    "machine_id": run["machine_id"],
                    "kind": "timeline",
                    "source": ("timeline_modes", TIMELINE_MODES_COLUMNS),
                    "cache_state": CacheState.WARM,
                    "level": level,
                    "limiter": b.limiter,
                    "efficiency": b.bound_s / row["step_s"],
                    "median_s": row["step_s"],
                    "bound_s": b.bound_s,
                    "intensity": b.intensity,
                    "compute_path": path,
                    "peak_flops_per_s": b.peak_flops_per_s,
                    "bandwidth_b_per_s": b.bandwidth_b_per_s,
                }
            )
    return points


# the stage_timings columns a stage's figures are named by (its limiter there names the level)
STAGE_TIMINGS_COLUMNS = ("flops", "bytes", "median_s", "bound_s", "disturbed", "noisy")


def stage_diagnoses(run_dirs: Iterable[Path]) -> list[dict]:
    """Each measured stage of a stages scenario (timed alone, against its own bound), then each
    schedule (serial, overlapped) against its bound: `at_roof` with the overlap's aggregate bound
    predicted where a serial schedule is near its critical path; below it, the cause of the
    stage that overruns its bound most (the schedule waits on it)."""
    rows = []
    for run, tables in read_runs(run_dirs):
        schedules = tables["stage_schedules"].to_pylist() if "stage_schedules" in tables else []
        if not schedules:
            continue
        roofs = schedules[0]
        stages = []
        for stage in tables["stage_timings"].to_pylist():
            if not stage["median_s"] or not stage["bound_s"]:
                continue
            limiter = "compute" if stage["limiter"] == "compute" else "memory"
            point = stage | {
                "config_id": f"{stage['scenario']}/{stage['stage']}",
                "machine_id": run["machine_id"],
                "kind": "stages",
                "cache_state": None,
                "level": roofs["memory_level"],
                "limiter": limiter,
                "efficiency": stage["bound_s"] / stage["median_s"],
                "intensity": stage["flops"] / stage["bytes"] if stage["bytes"] else math.inf,
                "compute_path": roofs["compute_path"],
                "peak_flops_per_s": roofs["peak_flops_per_s"],
                "bandwidth_b_per_s": roofs["bandwidth_b_per_s"],
                "source": ("stage_timings", STAGE_TIMINGS_COLUMNS),
            }
            stages.append((stage["median_s"] - stage["bound_s"], diagnose(point)))
        rows += [diagnosis for _, diagnosis in stages]
        slowest = max(stages, key=lambda item: item[0])[1] if stages else None
        rows += [_schedule(row, run["machine_id"], slowest) for row in schedules]
    return rows


def _schedule(row: dict, machine_id: str, slowest: dict | None) -> dict:
    efficiency = row["bound_s"] / row["median_s"]
    names = ("median_s", "bound_s", "bound_kind", "critical_path_bound_s", "aggregate_bound_s")
    evidence = {f"stage_schedules.{c}": row[c] for c in (*names, "disturbed")}
    overlap = row["schedule"] == "serial" and row["aggregate_bound_s"] < row["bound_s"]
    predicted = None
    if efficiency > ROOF_BEATEN_EFFICIENCY:
        cause = "above_roof"
        step = "check the stages' ledgers (F and Q), then the roofs, then the conditions"
    elif row["disturbed"]:
        cause = "conditions"
        step = "re-measure on a quiet machine (disturbed)"
    elif efficiency >= AT_ROOF:
        cause = "at_roof"
        step = "nothing left in this schedule: change the stages' F or Q" + (
            ", or overlap its stages (streams, threads): their aggregate bound" if overlap else ""
        )
        predicted = row["aggregate_bound_s"] if overlap else None
    else:
        cause = slowest["cause"] if slowest else "compute_path"
        evidence["slowest_stage"] = slowest["key"] if slowest else None
        step = (
            f"the schedule waits on stage {slowest['key']}: {slowest['next_step']}"
            if slowest
            else "its stages are far from their bounds"
        )
        predicted = row["bound_s"]
    schedule = {"key": f"{row['scenario']}/{row['schedule']}", "kind": "stages"}
    schedule |= {"level": row["memory_level"], "limiter": row["bound_kind"]}
    schedule |= {"machine_id": machine_id, "efficiency": efficiency}
    return _row(row | schedule, cause, evidence, step, predicted)


def _executed_bound(point: dict) -> float:
    """The point's bound on the work it executes (its ledger's executed FLOPs where declared)."""
    flops = point.get("executed_flops") or point["flops"]
    return bound(
        flops, point["bytes"], point["peak_flops_per_s"], point["bandwidth_b_per_s"]
    ).bound_s


def pair_diagnoses(points: list[dict], diagnoses: list[dict]) -> list[dict]:
    """Each workload case against the case of the workload it does the same work as
    (`same_work_as`; the newest of the same machine, params, dtype and cache state, as the
    implementation_comparisons view pairs them): did the change reach the gain its bounds allow?
    The bounds are on the work each executes (a baseline that computes zeros is bounded on them).
    Its cause and next step are the case's own; predicted: the baseline's time over the bounds'
    speedup. Key `<case> vs <baseline workload>`."""

    def of(point: dict, workload: str | None) -> tuple:
        return (
            point["machine_id"],
            workload,
            point["params"],
            point["dtype"],
            point["cache_state"],
        )

    newest: dict[tuple, dict] = {}
    for point in (p for p in points if p.get("kind") == "workload"):
        key = of(point, point["sweep"])
        if point["run_id"] > newest.get(key, {}).get("run_id", ""):
            newest[key] = point
    mine = {(d["run_id"], d["key"], d["cache_state"], d["level"]): d for d in diagnoses}
    rows = []
    for point in points:
        baseline = point.get("same_work_as") and newest.get(of(point, point["same_work_as"]))
        if not baseline or point.get("q_source") == "counters":
            continue
        own = mine[(point["run_id"], point["config_id"], point["cache_state"], point["level"])]
        speedup = baseline["median_s"] / point["median_s"]
        bounds = _executed_bound(baseline), _executed_bound(point)
        allowed = bounds[0] / bounds[1]
        evidence = {"speedup": speedup, "bound_speedup": allowed}
        evidence |= {"baseline_executed_bound_s": bounds[0], "executed_bound_s": bounds[1]}
        evidence |= _figures(point, "bytes", "flops", "executed_flops", "bound_s", "median_s")
        evidence |= {f"baseline_{c}": baseline.get(c) for c in ("bytes", "executed_flops")}
        evidence |= {f"baseline_{c}": baseline[c] for c in ("bound_s", "median_s", "run_id")}
        reached = "reached" if speedup >= AT_ROOF * allowed else "fell short of"
        step = (
            f"{speedup:.3g}x against {point['same_work_as']} where the bounds allow "
            f"{allowed:.3g}x: the change {reached} its predicted gain; {own['next_step']}"
        )
        rows.append(
            own
            | {
                "key": f"{point['config_id']} vs {point['same_work_as']}",
                "evidence": json.dumps({k: _plain(v) for k, v in evidence.items()}),
                "next_step": step,
                "predicted_s": baseline["median_s"] / allowed,
            }
        )
    return rows
