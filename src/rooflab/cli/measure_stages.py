"""`rooflab measure stages`: the measurable `stages` scenarios run serial and overlapped, beside
their critical-path and aggregate bounds, without Snakemake (docs/timelines.md)."""

from __future__ import annotations

import sys
from dataclasses import replace
from tempfile import TemporaryDirectory

from rooflab.cli.output import UsageError, print_rows


def default_config(args) -> dict:
    """--config, else the default campaign of the backend (config/config.yaml, config/gpu.yaml):
    the measurable stages scenario and the timeline rooflab ships."""
    from rooflab.config import config_file, load_config

    if args.config:
        return load_config(args.config)
    return load_config(config_file("gpu.yaml" if args.backend == "cuda" else "config.yaml"))


def _ceilings(args, backend, config) -> tuple[dict, str | None]:
    """The machine's measured ceilings: from --ceilings (a ceilings run of this machine), else a
    quick ceilings run measured now (kept in --out beside the stages' runs)."""
    from rooflab.conditions.disturbance import DisturbanceSettings
    from rooflab.experiments import ceiling_plan, ceilings
    from rooflab.records import write_run
    from rooflab.roofline import latest_ceilings_by_machine

    machine_id = backend.run_metadata()["machine_id"]
    if args.ceilings:
        try:
            found = latest_ceilings_by_machine([args.ceilings])
        except (OSError, KeyError, ValueError) as error:
            raise UsageError(f"--ceilings {args.ceilings}: not a ceilings run ({error})") from None
        if machine_id not in found:
            raise UsageError(
                f"--ceilings {args.ceilings}: ceilings of machine {', '.join(found)}, not of "
                f"this one ({machine_id})"
            )
        return found[machine_id], None
    print("rooflab: no --ceilings given: measuring quick ceilings first", file=sys.stderr)
    settings = replace(
        ceiling_plan.QUICK,
        fma_dtypes=tuple(
            {s["compute_path"].removesuffix("_fma") for s in config["stages"].values()}
        ),
        disturbance=DisturbanceSettings.from_config(config["disturbance"]),
    )
    tables = ceilings.run_ceilings(backend, settings)
    with TemporaryDirectory() as scratch:
        run_dir = write_run(args.out or scratch, tables["runs"][0]["run_id"], tables)
        if args.out:
            print(f"rooflab: wrote {run_dir}", file=sys.stderr)
        return latest_ceilings_by_machine([run_dir])[machine_id], str(run_dir)


def cmd_measure_stages(args) -> None:
    from rooflab.backends.selection import select_backend
    from rooflab.experiments.stage_overlap import (
        StageOverlapError,
        run_stage_overlap,
        scenario_ceilings,
    )
    from rooflab.experiments.timing import TimingSettings
    from rooflab.records import check_writable, write_run

    config = default_config(args)
    measurable = {n: s for n, s in config["stages"].items() if s.get("measurable")}
    names = args.scenario or sorted(measurable)
    unknown = [n for n in names if n not in measurable]
    if unknown or not names:
        known = ", ".join(sorted(measurable)) or "none"
        raise UsageError(
            f"measure stages: no measurable scenario {', '.join(unknown) or ''} in the config; "
            f"measurable: {known}"
        )
    if args.out:
        check_writable(args.out)  # before measuring: a finished run must not be lost
    backend = select_backend(args.backend or config["backend"])
    machine, _ = _ceilings(args, backend, config)
    timing = TimingSettings.from_config(config["timing"], config["disturbance"])
    rows = []
    for name in names:
        spec = measurable[name]
        try:
            peak, bandwidth = scenario_ceilings(name, spec, machine)
        except StageOverlapError as error:
            raise UsageError(str(error)) from None
        tables = run_stage_overlap(
            backend,
            name,
            spec,
            timing,
            peak_flops_per_s=peak,
            bandwidth_b_per_s=bandwidth,
            ceilings_run_id=machine["run_id"],
        )
        if args.out:
            run_dir = write_run(args.out, tables["runs"][0]["run_id"], tables)
            print(f"rooflab: wrote {run_dir}", file=sys.stderr)
        rows.append(scenario_result(tables))
        for row in [*tables["stage_timings"], *tables["stage_schedules"]]:
            if row["beats_bound"]:
                what = row.get("stage") or row["schedule"]
                print(
                    f"rooflab: ABOVE ITS BOUND: {name} {what} measured {row['median_s']:.4g} s, "
                    f"under its bound {row['bound_s']:.4g} s: a ledger or a ceiling is wrong",
                    file=sys.stderr,
                )
    if args.format == "json":
        print_rows(rows, "json")
    else:
        flat = [{k: v for k, v in row.items() if k != "stages"} for row in rows]
        print_rows(flat, args.format)


def scenario_result(tables: dict) -> dict:
    """One scenario's measurement as `rooflab measure stages --format json` prints it."""
    by_schedule = {row["schedule"]: row for row in tables["stage_schedules"]}
    serial, overlapped = by_schedule["serial"], by_schedule["overlapped"]
    return {
        "scenario": serial["scenario"],
        "serial_s": serial["median_s"],
        "overlapped_s": overlapped["median_s"],
        "critical_path_bound_s": serial["critical_path_bound_s"],
        "aggregate_bound_s": serial["aggregate_bound_s"],
        "overlap_speedup": serial["median_s"] / overlapped["median_s"],
        "peak_flops_per_s": serial["peak_flops_per_s"],
        "bandwidth_b_per_s": serial["bandwidth_b_per_s"],
        "compute_path": serial["compute_path"],
        "memory_level": serial["memory_level"],
        "ceilings_run_id": serial["ceilings_run_id"],
        "beats_bound": any(r["beats_bound"] for r in tables["stage_schedules"]),
        "disturbed": any(r["disturbed"] for r in tables["stage_schedules"]),
        "stages": [
            {
                "name": row["stage"],
                "kernel": row["kernel"],
                "placement": row["placement"],
                "flops": row["flops"],
                "bytes": row["bytes"],
                "measured_s": row["median_s"],
                "bound_s": row["bound_s"],
                "limiter": row["limiter"],
                "beats_bound": row["beats_bound"],
            }
            for row in tables["stage_timings"]
        ],
    }
