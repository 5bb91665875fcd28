"""What the Roofline step works out beside the points, per ceilings run, so that the store holds it
and a reader (the report, a user's SQL) reads it from views instead of redoing it:

- `cache_capacities`: the data-cache bytes per level this process could fill (from the run's
  machine identity) and as its sweeps measured them (their edges), which the ceiling sweep chart
  marks;
- `datasheet_roofs`: the datasheet figures of the device preset matching the run's device name
  (config/devices.yaml), drawn dashed beside the measured roofs;
- `stage_bounds`: each `stages` scenario of the campaign config on the run's measured ceilings:
  every stage's own bound, its place on the critical-path schedule, and the two lower bounds.
- `unplaced_points`: each timed point that got no Roofline point, and why (roofline.points).
- `imported_points` and `imported_critical_path`: an imported profile's operators on its
  machine's roofs (roofline.imported), a torch trace's critical path (roofline.imported_timeline).

`roofline_inputs` lists every run the step read: the store replaces the derived rows of exactly
those runs, so a scenario taken out of the config disappears from the store too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from rooflab.config import stages_from_config
from rooflab.devices import DevicePreset, matching_preset
from rooflab.machine import CacheInfoUnavailable, cache_bytes_by_level
from rooflab.model import stage_bounds
from rooflab.records import DERIVED_TABLES, find_run_folders, read_run, space_for, to_table
from rooflab.roofline.diagnosis import (
    diagnose,
    pair_diagnoses,
    stage_diagnoses,
    timeline_points,
)
from rooflab.roofline.imported import imported_points
from rooflab.roofline.imported_timeline import critical_path_rows
from rooflab.roofline.points import RooflinePoints, build_points, ceiling_values
from rooflab.vocabulary import measured_cache_bytes

ROOFLINE_FOLDER = Path("roofline")


@dataclass(frozen=True)
class Analysis:
    """The Roofline step's result: the points, and per ceilings run what the report draws beside
    them; `tables` are the rows of each derived table."""

    points: RooflinePoints
    tables: dict[str, list[dict]]
    notes: list[str]  # what could not be worked out, and why


def cache_capacity_rows(run: dict, ceilings: Iterable[dict] = ()) -> list[dict]:
    """The data-cache capacity per level of a ceilings run's machine, as its identity reports it
    and as the run's sweeps measured it (`ceilings`: its rows; the largest edge any sweep saw,
    null where none did); none where its identity lists no caches (a machine whose OS does not
    say)."""
    try:
        by_level = cache_bytes_by_level(json.loads(run.get("machine") or "{}"))
    except (CacheInfoUnavailable, KeyError, TypeError, ValueError):
        return []
    measured = measured_cache_bytes(ceilings)
    return [
        {
            "run_id": run["run_id"],
            "machine_id": run["machine_id"],
            "level": level,
            "bytes": size,
            "measured_bytes": measured.get(level),
        }
        for level, size in by_level.items()
        if size > 0  # a level none of whose instances this process touches
    ]


def datasheet_rows(run: dict, preset: DevicePreset | None) -> list[dict]:
    """The preset's peaks (FLOP/s per path; OP/s per integer path, e.g. int8) and bandwidths
    (B/s per level), each row with its unit."""
    if preset is None:
        return []
    common = {
        "run_id": run["run_id"],
        "machine_id": run["machine_id"],
        "preset": preset.key,
        "device": preset.name,
        "source": preset.source,
    }
    figures = (
        ("compute", "FLOP/s", preset.peak_flops_per_s),
        ("compute", "OP/s", preset.peak_ops_per_s),
        ("bandwidth", "B/s", preset.bandwidth_b_per_s),
    )
    return [
        {**common, "kind": kind, "name": name, "value": value, "unit": unit}
        for kind, unit, values in figures
        for name, value in values.items()
    ]


def stage_bound_rows(
    run: dict, peak: dict[str, float], bandwidth: dict[str, float], scenarios: dict
) -> tuple[list[dict], list[str]]:
    """Each scenario's stages on the run's measured ceilings (compute_path, memory_level); a note
    for a scenario whose ceiling the run lacks."""
    rows, notes = [], []
    for scenario, spec in sorted(scenarios.items()):
        c, b = peak.get(spec["compute_path"]), bandwidth.get(spec["memory_level"])
        if c is None or b is None:
            notes.append(
                f"stages {scenario}: ceilings run {run['run_id']} has no "
                f"{spec['compute_path'] if c is None else spec['memory_level']} ceiling"
            )
            continue
        # a measurable scenario's stages sized on these ceilings, as its measurement sizes them
        result = stage_bounds(stages_from_config(spec["stages"], f"stages.{scenario}", c, b), c, b)
        rows += [
            {
                "run_id": run["run_id"],
                "machine_id": run["machine_id"],
                "scenario": scenario,
                "stage": stage.name,
                "position": position,
                "flops": stage.bound.flops,
                "bytes": stage.bound.bytes,
                "start_s": stage.start_s,
                "finish_s": stage.finish_s,
                "bound_s": stage.bound.bound_s,
                "limiter": stage.bound.limiter,
                "on_critical_path": stage.on_critical_path,
                "critical_path_s": result.critical_path_s,
                "aggregate_s": result.aggregate_s,
                "compute_path": spec["compute_path"],
                "peak_flops_per_s": c,
                "memory_level": spec["memory_level"],
                "bandwidth_b_per_s": b,
            }
            for position, stage in enumerate(result.stages)
        ]
    return rows, notes


def build_analysis(
    ceilings_runs: Iterable[Path],
    gemm_runs: Iterable[Path],
    counters_runs: Iterable[Path] = (),
    timeline_runs: Iterable[Path] = (),
    stage_runs: Iterable[Path] = (),
    import_runs: Iterable[Path] = (),
    *,
    stages: dict | None = None,
    devices_file: str | Path | None = None,
) -> Analysis:
    """The one way run folders become what the store derives from them (the workflow's roofline
    step and the tests alike): the Roofline points (`build_points`), and per ceilings run its
    cache capacities, the matching datasheet's roofs and the `stages` scenarios' bounds."""
    ceilings_runs, gemm_runs, counters_runs, timeline_runs, stage_runs, import_runs = (
        list(ceilings_runs),
        list(gemm_runs),
        list(counters_runs),
        list(timeline_runs),
        list(stage_runs),
        list(import_runs),
    )
    points = build_points(ceilings_runs, gemm_runs, counters_runs)
    tables: dict[str, list[dict]] = {name: [] for name in DERIVED_TABLES}
    tables["roofline_points"] = points.rows
    tables["unplaced_points"] = points.dropped
    steps = timeline_points(timeline_runs, points.ceilings)
    tables["point_diagnoses"] = [diagnose(point) for point in [*points.rows, *steps]]
    tables["point_diagnoses"] += pair_diagnoses(points.model, tables["point_diagnoses"])
    tables["point_diagnoses"] += stage_diagnoses(stage_runs)
    tables["imported_points"] = imported_points(import_runs, points.ceilings)
    tables["imported_critical_path"] = critical_path_rows(import_runs)
    notes: list[str] = []
    analysed = [*ceilings_runs, *gemm_runs, *counters_runs, *timeline_runs, *stage_runs]
    analysed += import_runs
    for run_dir in dict.fromkeys(analysed):
        run_tables = read_run(run_dir)
        (run,) = run_tables["runs"].to_pylist()
        tables["roofline_inputs"].append(
            {"run_id": run["run_id"], "machine_id": run["machine_id"], "kind": run["kind"]}
        )
        if run_dir in ceilings_runs:
            peak, bandwidth = ceiling_values(run_tables)
            ceiling_rows = run_tables["ceilings"].to_pylist() if "ceilings" in run_tables else []
            tables["cache_capacities"] += cache_capacity_rows(run, ceiling_rows)
            preset = matching_preset(run.get("device_name"), devices_file)
            tables["datasheet_roofs"] += datasheet_rows(run, preset)
            rows, missing = stage_bound_rows(run, peak, bandwidth, stages or {})
            tables["stage_bounds"] += rows
            notes += missing
    return Analysis(points, tables, notes)


# A run's kind -> the argument of build_analysis its folder goes to (others derive nothing).
_ANALYSED_KINDS = {"ceilings": 0, "gemm": 1, "workload": 1, "counters": 2, "timeline": 3}
_ANALYSED_KINDS |= {"stages": 4, "import": 5}


def kept_run_folders(results_dir: str | Path) -> tuple[list[list[Path]], list[str]]:
    """Every kept run folder under `results_dir` that derives rows ([ceilings, timings,
    counters, timelines, stages, imports], oldest first), whatever campaign config made it; a
    note for each folder that cannot be read (the store sets those aside and names them too)."""
    found: list[list[Path]] = [[] for _ in range(6)]
    notes = []
    for folder in find_run_folders(results_dir):
        try:
            tables = read_run(folder.path)
            (run,) = tables["runs"].to_pylist()
        except Exception as error:
            notes.append(f"{folder.path}: not read ({type(error).__name__}: {error})")
            continue
        if run.get("kind") in _ANALYSED_KINDS:
            found[_ANALYSED_KINDS[run["kind"]]].append(folder.path)
    return found, notes


def analyse_results(
    results_dir: str | Path, *, stages: dict | None = None, devices_file: str | Path | None = None
) -> Analysis:
    """build_analysis over every kept run under `results_dir` (kept_run_folders): what the
    roofline step and `rooflab store rebuild` derive, so that the store holds the derived rows of
    every kept run, not only of the sweeps in the current config."""
    folders, unread = kept_run_folders(results_dir)
    analysis = build_analysis(*folders, stages=stages, devices_file=devices_file)
    return Analysis(analysis.points, analysis.tables, analysis.notes + unread)


def write_analysis(analysis: Analysis, folder: Path) -> list[Path]:
    """Write each derived table to `folder/<table>.parquet`, each file replaced atomically, the
    list of inputs last (the store reads the others by it); the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in DERIVED_TABLES:
        path = folder / f"{name}.parquet"
        temporary = path.with_name(f".{path.name}.tmp")
        kept = "the file is as it was"  # a full disk: one line, no temporary left
        with space_for(path, "a derived table", kept=kept, partial=[temporary]):
            pq.write_table(to_table(name, analysis.tables[name]), temporary)
        temporary.replace(path)
        written.append(path)
    return written
