"""`rooflab measure ceilings | gemm | counters`: the measuring engine without Snakemake."""

from __future__ import annotations

import sys
from dataclasses import replace

from rooflab.cli.output import UsageError, print_rows
from rooflab.config import load_config, validate_config
from rooflab.units import format_quantity


def _backend_and_config(args):
    from rooflab.backends.selection import select_backend
    from rooflab.records import check_writable

    config = load_config(args.config) if args.config else validate_config({})
    check_writable(args.out)  # before measuring: a finished run must not be lost to a write
    return select_backend(args.backend or config["backend"]), config


def cmd_measure_ceilings(args) -> None:
    from rooflab.conditions.disturbance import DisturbanceSettings
    from rooflab.experiments import ceiling_plan, ceilings
    from rooflab.records import write_run

    backend, config = _backend_and_config(args)
    settings = (
        ceiling_plan.QUICK if args.quick else ceiling_plan.settings_from_config(config["ceilings"])
    )
    settings = replace(
        settings,
        max_clock_change=config["timing"]["max_clock_change"],
        disturbance=DisturbanceSettings.from_config(config["disturbance"]),
    )
    tables = ceilings.run_ceilings(backend, settings)
    run_dir = write_run(args.out, tables["runs"][0]["run_id"], tables)
    print(f"rooflab: wrote {run_dir}", file=sys.stderr)
    columns = ("kind", "name", "kernel", "dtype", "isa", "vector_bits", "value", "unit", "threads")
    columns += ("method",)
    columns += ("disturbed", "disturbance", "n_disturbed", "roof_beaten", "roof_beaten_evidence")
    rows = [{c: row.get(c) for c in columns} for row in tables["ceilings"]]
    if args.format == "table":
        for row in rows:
            kind = "byte_rate" if row["unit"] == "B/s" else "flop_rate"
            row["value"] = format_quantity(row["value"], kind)
            del row["unit"], row["method"], row["disturbance"], row["roof_beaten_evidence"]
            del row["vector_bits"]
    print_rows(rows, args.format)
    _print_disturbance(tables, "ceilings")


def cmd_measure_gemm(args) -> None:
    from rooflab.experiments.gemm import run_gemm_sweep
    from rooflab.experiments.timing import TimingSettings
    from rooflab.records import write_run

    backend, config = _backend_and_config(args)
    if args.sweep not in config["sweeps"]:
        known = ", ".join(config["sweeps"]) or "none"
        raise UsageError(f"no sweep {args.sweep!r} in {args.config}; sweeps: {known}")
    tables = run_gemm_sweep(
        backend,
        args.sweep,
        config["sweeps"][args.sweep],
        TimingSettings.from_config(config["timing"], config["disturbance"]),
    )
    run_dir = write_run(args.out, tables["runs"][0]["run_id"], tables)
    print(f"rooflab: wrote {run_dir}", file=sys.stderr)
    failed = sorted({r["config_id"] for r in tables["correctness"] if not r["passed"]})
    columns = ("config_id", "cache_state", "n_samples", "median_s", "p25_s", "p75_s")
    columns += ("achieved_flops_per_s", "noisy", "disturbed", "disturbance", "n_disturbed")
    rows = [{c: p[c] for c in columns} for p in tables["timed_points"]]
    if args.format == "table":
        for row in rows:
            del row["disturbance"]  # one line each on stderr below
    print_rows(rows, args.format)
    _print_disturbance(tables, "timed_points")
    for config_id in failed:
        print(
            f"rooflab: {config_id} failed its correctness check and was not timed", file=sys.stderr
        )


def _print_disturbance(tables: dict, table: str) -> None:
    """On stderr: the run's busy-machine warning, and each disturbed measurement with why."""
    warning = tables["runs"][0].get("busy_warning")
    if warning:
        print(f"rooflab: {warning}", file=sys.stderr)
    rows = tables[table]
    disturbed = [row for row in rows if row.get("disturbed")]
    for row in disturbed:
        what = row.get("name") or row["config_id"]
        state = f" {row['cache_state']}" if row.get("cache_state") else ""
        print(f"rooflab: disturbed: {what}{state}: {row['disturbance']}", file=sys.stderr)
    if disturbed:
        print(
            f"rooflab: {len(disturbed)} of {len(rows)} flagged disturbed; measure again on a "
            "quiet machine",
            file=sys.stderr,
        )


def cmd_measure_counters(args) -> None:
    from rooflab.experiments.counters import (
        CounterSettings,
        counters_status,
        run_counters,
        run_workload_counters,
    )
    from rooflab.records import read_run, write_run

    backend, config = _backend_and_config(args)
    what, name = ("sweep", args.sweep) if args.sweep else ("workload", args.workload)
    section, run_kind = {"sweep": ("sweeps", "gemm"), "workload": ("workloads", "workload")}[what]
    if name not in config[section]:
        known = ", ".join(config[section]) or "none"
        raise UsageError(f"no {what} {name!r} in {args.config}; {section}: {known}")
    try:
        (timing_run,) = read_run(args.timing)["runs"].to_pylist()
    except (OSError, KeyError, ValueError) as error:
        raise UsageError(f"--timing {args.timing}: not a run folder ({error})") from None
    if timing_run["kind"] != run_kind or timing_run["sweep"] != name:
        raise UsageError(
            f"--timing {args.timing}: a {timing_run['kind']} run of {timing_run['sweep']!r}, "
            f"not a {run_kind} run of {what} {name!r}"
        )
    settings = CounterSettings.from_config(config["counters"])
    count = run_counters if what == "sweep" else run_workload_counters
    tables = count(backend, name, config[section][name], settings, args.timing)
    run_dir = write_run(args.out, tables["runs"][0]["run_id"], tables)
    print(f"rooflab: wrote {run_dir}", file=sys.stderr)
    status, reason = counters_status(tables["counters"])
    print(f"rooflab: counters {status}" + (f": {reason}" if reason else ""), file=sys.stderr)
    columns = ("config_id", "cache_control", "compute_path", "ratio", "trusted", "pairing")
    rows = [{c: row.get(c) for c in columns} for row in tables["counter_calibration"]]
    if rows:
        print_rows(rows, args.format)
