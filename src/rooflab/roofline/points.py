"""Roofline points: each timed GEMM configuration against the ceilings of the machine it ran on.

Pairing rules: the compute roof is the instruction path of the GEMM's dtype on its backend
(`vocabulary.COMPUTE_PATH`: FMA chains on a CPU; on a GPU the tensor-core paths measured through
cuBLAS for tf32/fp16/bf16 and fp64, the FMA chains for fp32, through cuBLASLt for FP8 and int8), and
only where the roof's unit is the point's work unit per second (`work_unit`: an int8 GEMM's 2MNK are
OP, paired with the OP/s roof `int8_tensor`, never with a FLOP/s roof; the rest are FLOP against
FLOP/s roofs); the bytes are the cold-cache model Q_model (q_source "model"), so they belong to one
memory level only:
- cold: the memory (DRAM on a CPU, HBM on a GPU) — the flush evicted every cache;
- warm: the smallest cache level that holds the point's footprint (the bytes its call touches,
  `footprint_bytes`: a workload's declared footprint, else its arrays'; Q_model where unknown),
  else the memory. Its traffic Q may be larger (passes over a temporary) or smaller (a chase that
  visits a few lines of a large array) than what it touches: the footprint decides residence.
The memory's name is the bandwidth ceiling that is not a cache level of the machine.
The bandwidth of a level is the best kernel's ceiling on that level in the latest ceilings run of
the same machine. Points of a machine without ceilings are not computed (never borrowed).

`counter_points` adds hierarchical points (q_source "counters", docs/counters.md §4) from the
counters runs: one row per memory level with counted bytes, each level's intensity against that
level's own ceiling, the limiting level named. Only from a calibration that is trusted when
checked again here, a replay paired with the timing of the matching cache state on the same
machine, and ceilings of that machine; anything else gives no point and a note saying why.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from rooflab.counters.ncu import bytes_by_level
from rooflab.counters.points import (
    PairingError,
    UntrustedCounts,
    bypassed_levels,
    calibrate_ledger,
    hierarchical_points,
    model_vs_counted,
    pair,
)
from rooflab.machine import cache_bytes_by_level
from rooflab.model import ModelError, bound, work_unit
from rooflab.records import read_runs, timed_rows, to_table
from rooflab.roofline.clocks import (
    SM_CLOCK,
    clock_columns,
    clock_ranges,
    replay_clock,
    roof_clock,
    roof_clocks,
)
from rooflab.vocabulary import (
    MEMORY_LEVEL,
    MEMORY_LEVELS,
    ROOF_BEATEN_EFFICIENCY,
    CacheState,
    point_compute_path,
)

# What a point's work is: a GEMM's shape, or a workload's params, executed FLOPs and the
# workload it does the same work as (each kind has None for the other's)
WORK_COLUMNS = ("m", "n", "k", "layout", "params", "executed_flops", "same_work_as")


def latest_ceilings_by_machine(run_dirs: Iterable[Path]) -> dict[str, dict]:
    """machine_id -> {run_id, started_at, peak: {path: FLOP/s or OP/s}, peak_unit: {path: its
    unit}, bandwidth: {level: B/s}, caches}."""
    latest: dict[str, dict] = {}
    for run, tables in read_runs(run_dirs):
        known = latest.get(run["machine_id"])
        if known and known["started_at"] >= run["started_at"]:
            continue
        peak, bandwidth = ceiling_values(tables)
        caches = cache_bytes_by_level(json.loads(run["machine"])) if run["machine"] else {}
        latest[run["machine_id"]] = {
            "run_id": run["run_id"],
            "started_at": run["started_at"],
            "clocks": roof_clocks(tables),
            "peak": peak,
            "peak_unit": compute_units(tables),
            "bandwidth": bandwidth,
            "caches": caches,
            "memory_level": memory_level(bandwidth),
        }
    return latest


def memory_level(bandwidth: dict[str, float]) -> str:
    """The memory behind the caches among a run's measured levels: DRAM or HBM. Not "every level
    that is not a cache of the identity": a GPU's L1 has a ceiling but is no home for a warm
    GEMM's operands (it does not outlive a kernel)."""
    memories = sorted(name for name in bandwidth if name in MEMORY_LEVELS)
    return memories[0] if len(memories) == 1 else MEMORY_LEVEL


def ceiling_values(tables: dict) -> tuple[dict[str, float], dict[str, float]]:
    """A ceilings run's peaks (FLOP/s per compute path) and bandwidths (B/s per level, the best
    kernel's)."""
    peak, bandwidth = {}, {}
    for row in tables["ceilings"].to_pylist():
        values = peak if row["kind"] == "compute" else bandwidth
        values[row["name"]] = max(values.get(row["name"], 0.0), row["value"])
    return peak, bandwidth


def compute_units(tables: dict) -> dict[str, str]:
    """A ceilings run's unit per compute path, that of its best row (FLOP/s, or OP/s for an
    integer path; FLOP/s where a row of an older rooflab names none)."""
    best: dict[str, tuple[float, str]] = {}
    for row in tables["ceilings"].to_pylist():
        if row["kind"] == "compute" and row["value"] >= best.get(row["name"], (-1.0, ""))[0]:
            best[row["name"]] = row["value"], row.get("unit") or "FLOP/s"
    return {path: unit for path, (_, unit) in best.items()}


def point_work_unit(point: dict) -> str:
    """The unit of a timed point's `flops`: OP for a GEMM of integer X and W (int8), else FLOP
    (a workload case's, and a GEMM of a dtype the model does not know, are FLOP)."""
    if point["kind"] == "workload":
        return "FLOP"
    x = point.get("x_dtype") or point["dtype"]
    try:
        return work_unit(x, point.get("w_dtype") or x)
    except ModelError:
        return "FLOP"


def resident_level(
    bytes_needed: int, caches: dict[str, int], cache_state: str, memory_level: str = MEMORY_LEVEL
) -> str:
    if cache_state == CacheState.WARM:
        for level, capacity in sorted(caches.items(), key=lambda item: item[1]):
            if bytes_needed <= capacity:
                return level
    return memory_level


# Why a timed point gets no Roofline point: the code stored in `unplaced_points.reason`.
UNPLACED_REASONS = (
    "no_ceilings_run",  # no ceilings run of its machine
    "no_compute_ceiling",  # no compute ceiling of its dtype's path
    "level_not_measured",  # its bytes sit in a level the ceilings sweep did not reach
    "failed_check",  # its check failed after its timing
    "unit_mismatch",  # its work unit (FLOP, OP) is not its roof's
)


def unplaced(point: dict, machine_id: str, reason: str, why: str) -> dict:
    """An `unplaced_points` row: the timed point, the reason's code and a sentence."""
    assert reason in UNPLACED_REASONS, reason
    return {
        "run_id": point["run_id"],
        "machine_id": machine_id,
        "sweep": point.get("sweep"),
        "config_id": point["config_id"],
        "cache_state": point["cache_state"],
        "reason": reason,
        "why": why,
    }


def unplaced_line(row: dict) -> str:
    """An unplaced point as one line of the roofline step's log."""
    return f"{row['config_id']} {row['cache_state']} (run {row['run_id']}): {row['why']}"


def roofline_points(
    gemm_run_dirs: Iterable[Path], ceilings: dict[str, dict], dropped: list[dict] | None = None
) -> list[dict]:
    """Each timed point (a GEMM configuration, or a workload case) of these runs against the
    latest ceilings of its own machine, in its cache state; none without them. Each timed point
    that gets no Roofline point is a row of `dropped` (`unplaced`), with why."""
    points = []
    dropped = [] if dropped is None else dropped
    for run, tables in read_runs(gemm_run_dirs):
        machine_id = run["machine_id"]
        machine = ceilings.get(machine_id)
        if machine is None:
            dropped += [
                unplaced(
                    p, machine_id, "no_ceilings_run", f"no ceilings run of its machine {machine_id}"
                )
                for p in timed_rows(tables)
            ]
            continue
        # a check that failed after the timing (a workload checked again after its last round)
        # keeps the timing in the store, never on the Roofline
        failed = {
            row["config_id"]
            for row in (tables["correctness"].to_pylist() if "correctness" in tables else [])
            if not row["passed"]
        }
        clocks = clock_ranges(tables, ("config_id", "cache_state"))
        # a library GEMM's points, or a workload's (your own kernel: no shape, its params)
        for point in timed_rows(tables):
            if point["config_id"] in failed:
                why = "failed its check after its timing"
                dropped.append(unplaced(point, machine_id, "failed_check", why))
                continue
            path = point_compute_path(run.get("backend"), point)
            footprint = point.get("footprint_bytes") or point["bytes_model"]
            level = resident_level(
                footprint,
                machine["caches"],
                point["cache_state"],
                machine.get("memory_level", MEMORY_LEVEL),
            )
            if path not in machine["peak"]:
                why = f"no {path or point['dtype']} compute ceiling measured"
                dropped.append(unplaced(point, machine_id, "no_compute_ceiling", why))
                continue
            if level not in machine["bandwidth"]:
                why = (
                    f"its {footprint} B sit in {level}, which has no bandwidth "
                    "ceiling (the ceilings sweep did not reach it: ceilings.max_working_set)"
                )
                dropped.append(unplaced(point, machine_id, "level_not_measured", why))
                continue
            unit = point_work_unit(point)
            if machine.get("peak_unit", {}).get(path, "FLOP/s") != f"{unit}/s":
                # an OP count is never put under a FLOP/s roof, nor FLOP under OP/s
                why = f"work in {unit}, its roof {path} is not in {unit}/s"
                dropped.append(unplaced(point, machine_id, "unit_mismatch", why))
                continue
            b = bound(
                point["flops"],
                point["bytes_model"],
                machine["peak"][path],
                machine["bandwidth"][level],
            )
            achieved = point["achieved_flops_per_s"]
            points.append(
                {
                    "run_id": point["run_id"],
                    "config_id": point["config_id"],
                    "kind": point["kind"],
                    "cache_state": point["cache_state"],
                    "machine_id": run["machine_id"],
                    "ceilings_run_id": machine["run_id"],
                    "sweep": point["sweep"],
                    "dtype": point["dtype"],
                    **{c: point.get(c) for c in WORK_COLUMNS},
                    "level": level,
                    "q_source": "model",
                    "bytes": point["bytes_model"],
                    "footprint_bytes": footprint,
                    "flops": point["flops"],
                    "work_unit": unit,
                    "intensity": b.intensity,
                    "median_s": point["median_s"],
                    "achieved_flops_per_s": achieved,
                    "compute_path": path,
                    "peak_flops_per_s": b.peak_flops_per_s,
                    "bandwidth_b_per_s": b.bandwidth_b_per_s,
                    "attainable_flops_per_s": b.attainable_flops_per_s,
                    "bound_s": b.bound_s,
                    "limiter": b.limiter,
                    "efficiency": achieved / b.attainable_flops_per_s,
                    **timing_flags(point),
                    **clock_columns(
                        clocks.get((point["config_id"], point["cache_state"])),
                        roof_clock(machine, path if b.limiter == "compute" else level),
                    ),
                }
            )
            points[-1]["roof_beaten"] = beats_its_roof(points[-1])
    return points


def beats_its_roof(point: dict) -> bool:
    """A clean point (neither disturbed nor noisy) above its roof beyond noise: the roof it is
    judged against (its limiter's: the compute path, or the level's bandwidth) is too low."""
    clean = not point.get("disturbed") and not point.get("noisy")
    return bool(clean and point["efficiency"] > ROOF_BEATEN_EFFICIENCY)


def roof_faults(points: list[dict]) -> list[str]:
    """A line per roof that clean points beat, naming the roof's figure and the best point's."""
    by_roof: dict[tuple, list[dict]] = {}
    for point in points:
        if point.get("roof_beaten"):
            memory = point["limiter"] == "memory"
            roof = point["level"] if memory else point["compute_path"]
            by_roof.setdefault((point["machine_id"], roof, memory), []).append(point)
    lines = []
    for (machine, roof, memory), beaten in sorted(by_roof.items()):
        top = max(beaten, key=lambda p: p["efficiency"])
        unit = f"{top['work_unit']}/s"
        value = top["bandwidth_b_per_s"] if memory else top["peak_flops_per_s"]
        figure = f"{value / 1e9:.4g} {'GB/s' if memory else 'G' + unit}"
        lines.append(
            f"roof beaten on {machine}: {len(beaten)} clean point(s) above {roof} ({figure}); "
            f"best {top['config_id']} {top['cache_state']} at "
            f"{top['achieved_flops_per_s'] / 1e9:.4g} G{unit}, {top['efficiency']:.2f}x its "
            "attainable: that roof is below what this machine does"
        )
    return lines


def timing_flags(point: dict) -> dict:
    """The timing's flags a Roofline point carries, so a chart or a query can mark it: noisy,
    and disturbed with its reason (null for timings recorded before disturbance was)."""
    return {column: point.get(column) for column in ("noisy", "disturbed", "disturbance")}


def _timings_by_run(gemm_run_dirs: Iterable[Path]) -> dict[str, list[dict]]:
    """run_id -> its timed points (timed_points rows), each with the run's machine_id and its
    samples' clock range (`clock`: median, lowest, highest MHz; None unread)."""
    timings = {}
    for run, tables in read_runs(gemm_run_dirs):
        clocks = clock_ranges(tables, ("config_id", "cache_state"))
        timings[run["run_id"]] = [
            {**row, "machine_id": run["machine_id"]}
            | {"clock": clocks.get((row["config_id"], row["cache_state"]))}
            for row in timed_rows(tables)
        ]
    return timings


def counter_points(
    counters_run_dirs: Iterable[Path], gemm_run_dirs: Iterable[Path], ceilings: dict[str, dict]
) -> tuple[list[dict], list[str]]:
    """Hierarchical points of the counters runs, and a note for each replay that gave none.

    For each `counter_calibration` row: the calibration is checked again from its counted FLOPs
    (fail closed: a stored `trusted` flag alone admits nothing), the replay is paired again with
    the timings of the run it names (flushed ↔ cold, no flush ↔ warm, same machine), and the
    counted bytes per level (range sums of the same configuration and cache control) go against
    the ceilings of the counters run's own machine."""
    timings = _timings_by_run(gemm_run_dirs)
    points, notes = [], []
    for run, tables in read_runs(counters_run_dirs):
        machine = ceilings.get(run["machine_id"])
        totals: dict[tuple, dict[str, float]] = {}
        replay_modes: dict[tuple, str] = {}
        replay_clocks: dict[tuple, list[float]] = {}  # the SM clock of each replayed kernel, MHz
        for row in tables["counters"].to_pylist() if "counters" in tables else []:
            key = (row["config_id"], row["cache_control"])
            if row["scope"] == "range" and row["metric"] and row["status"] == "ok":
                totals.setdefault(key, {})[row["metric"]] = row["value"]
                replay_modes[key] = row["replay_mode"]
            if row["scope"] == "kernel" and row["metric"] == SM_CLOCK and row["value"]:
                replay_clocks.setdefault(key, []).append(row["value"] / 1e6)
        calibrations = tables.get("counter_calibration")
        for cal in calibrations.to_pylist() if calibrations is not None else []:
            key = (cal["config_id"], cal["cache_control"])
            what = f"{cal['config_id']} (--cache-control {cal['cache_control']})"
            checked = recalibrate(cal)
            if not checked.trusted:
                notes.append(f"{what}: {checked.reason}")
                continue
            if machine is None:
                notes.append(f"{what}: no ceilings of machine {run['machine_id']}; no point")
                continue
            try:
                if cal["timing_run_id"] not in timings:
                    raise PairingError(
                        f"timing run {cal['timing_run_id']} (named by the counters run) is not "
                        "among the timing runs given"
                    )
                record = {"config_id": key[0], "cache_control": key[1]}
                paired = pair(
                    {**record, "machine_id": run["machine_id"]}, timings[cal["timing_run_id"]]
                )
                if point_work_unit(paired.timing) != "FLOP":
                    raise ValueError(
                        "an integer GEMM (work in OP): the counters' calibration and the "
                        "hierarchical Roofline are in FLOP, so no point"
                    )
                levels = bytes_by_level(totals.get(key, {}))
                rows = hierarchical_points(
                    paired,
                    checked,
                    levels,
                    {**machine["bandwidth"], **machine["peak"]},
                    cal["compute_path"],
                    counters_run_id=run["run_id"],
                    replay_mode=replay_modes.get(key),
                )
            except (PairingError, UntrustedCounts, ValueError) as error:
                notes.append(f"{what}: {error}")
                continue
            counted = {lv: q for lv, q in levels.items() if q is not None}
            notes += [f"{what}: {why}" for why in bypassed_levels(counted).values()]
            points += [
                {
                    **row,
                    "work_unit": "FLOP",
                    "ceilings_run_id": machine["run_id"],
                    **timing_flags(paired.timing),
                    **_against_model(row, paired.timing.get("bytes_model")),
                    **clock_columns(
                        paired.timing.get("clock"), roof_clock(machine, row["compute_path"])
                    ),
                    "replay_clock_mhz": replay_clock(replay_clocks.get(key)),
                }
                for row in rows
            ]
    return points, notes


def recalibrate(cal: dict):
    """A stored calibration checked again from its counted FLOPs against its expected FLOPs
    (fail closed), which hierarchical_points then holds to the paired timing's ledger."""
    shape = (cal["m"], cal["n"], cal["k"]) if cal["m"] is not None else None
    return calibrate_ledger(
        cal["counted_flops"],
        cal["expected_flops"],
        cal["tolerance"],
        path=cal["compute_path"],
        shape=shape,
    )


def _against_model(row: dict, bytes_model) -> dict:
    """At a memory level: the counted bytes over the cold-cache ledger's, and which way they
    differ (counters.points.model_vs_counted)."""
    if row["level"] not in MEMORY_LEVELS or not bytes_model or row.get("bytes") is None:
        return {}
    compared = model_vs_counted(float(bytes_model), float(row["bytes"]))
    return {"counted_over_model": compared.ratio, "model_vs_counted": compared.direction}


def write_points(points: list[dict], path: Path) -> None:
    """Atomically replace the derived points file."""
    table = to_table("roofline_points", points)
    temporary = path.with_name(f".{path.name}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, temporary)
    temporary.replace(path)


@dataclass(frozen=True)
class RooflinePoints:
    """Every Roofline point of a set of runs: model-bytes points, then counted points."""

    model: list[dict]
    counted: list[dict]
    notes: list[str]  # one per counter replay that gave no point, and why
    n_machines: int  # machines with ceilings among the runs
    # a timed point with no point, and why (unplaced_points rows)
    dropped: list[dict] = field(default_factory=list)
    ceilings: dict[str, dict] = field(default_factory=dict)  # latest_ceilings_by_machine

    @property
    def rows(self) -> list[dict]:
        return self.model + self.counted


def build_points(
    ceilings_runs: Iterable[Path],
    gemm_runs: Iterable[Path],
    counters_runs: Iterable[Path] = (),
) -> RooflinePoints:
    """The one way run folders become Roofline points (the workflow's roofline step and the tests
    alike): each timed configuration against the latest ceilings of its own machine, with the
    cold-cache model's bytes; then the hierarchical points of the counters runs (trusted,
    correctly paired counts only)."""
    gemm_runs = list(gemm_runs)
    ceilings = latest_ceilings_by_machine(ceilings_runs)
    counted, notes = counter_points(counters_runs, gemm_runs, ceilings)
    dropped: list[dict] = []
    model = roofline_points(gemm_runs, ceilings, dropped)
    return RooflinePoints(model, counted, notes, len(ceilings), dropped, ceilings)
