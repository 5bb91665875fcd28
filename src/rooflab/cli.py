"""The `rooflab` command. Usage and input errors print one line and exit with status 2."""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import decimal
import json
import math
import sys
import uuid
from collections.abc import Sequence
from dataclasses import replace

from rooflab import __version__
from rooflab.backends.base import BackendError
from rooflab.config import ConfigError, load_config, load_scenario, validate_config
from rooflab.devices import device_preset, path_for_dtype
from rooflab.model import ELEMENT_BITS, ModelError, bound, gemm_ledger, stage_bounds
from rooflab.store import DEFAULT_DB, DEFAULT_RESULTS, StoreError, ingest, query, rebuild
from rooflab.units import UnitError, format_quantity, parse_byte_rate, parse_flop_rate

INPUT_ERRORS = (UnitError, ModelError, ConfigError, BackendError, StoreError)


class UsageError(Exception):
    pass


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print the whole usage first
        raise UsageError(f"{self.prog}: {message}")


# -- output -------------------------------------------------------------------------------------

# column -> quantity kind for the table's readable units (JSON and CSV stay in base units)
COLUMN_KINDS = {
    "flops": "flop",
    "bytes": "bytes",
    "compute_s": "time",
    "memory_s": "time",
    "bound_s": "time",
    "bound_s_per_row": "time",
    "attainable_flops_per_s": "flop_rate",
    "start_s": "time",
    "finish_s": "time",
    "peak_flops_per_s": "flop_rate",
    "bandwidth_b_per_s": "byte_rate",
}


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no infinity; an intensity with zero bytes prints as null
    return value


def _cell(column: str, value) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and column in COLUMN_KINDS:
        return format_quantity(value, COLUMN_KINDS[column])
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def print_rows(rows: list[dict], fmt: str, out=None) -> None:
    out = out or sys.stdout
    if fmt == "json":
        json.dump([{k: _json_safe(v) for k, v in row.items()} for row in rows], out, indent=2)
        out.write("\n")
        return
    columns = list(rows[0]) if rows else []
    if fmt == "csv":
        writer = csv.DictWriter(out, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return
    cells = [[_cell(c, row[c]) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    out.write("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=False)).rstrip() + "\n")
    for r in cells:
        out.write("  ".join(v.rjust(w) for v, w in zip(r, widths, strict=False)).rstrip() + "\n")


# -- rooflab model --------------------------------------------------------------------------------


def _int_list(option: str):
    def parse(text: str) -> list[int]:
        try:
            values = [int(part) for part in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{option} expects comma-separated positive integers, got {text!r}"
            ) from None
        if any(v <= 0 for v in values):
            raise argparse.ArgumentTypeError(f"{option} values must be positive, got {text!r}")
        return values

    return parse


def _add_device_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--peak", help='compute ceiling, e.g. "120 TFLOP/s"')
    parser.add_argument("--bandwidth", help='memory bandwidth, e.g. "2 TB/s" or "900 GiB/s"')
    parser.add_argument("--device", help="datasheet preset from config/devices.yaml, e.g. h200-sxm")
    parser.add_argument("--path", help="instruction path of the preset (default: from the dtype)")
    parser.add_argument("--level", default="HBM", help="memory level of the preset (default HBM)")
    parser.add_argument("--devices", help="preset file (default: config/devices.yaml)")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table")


def _ceilings(args, default_path: str | None) -> tuple[float, float]:
    """(peak FLOP/s, bandwidth B/s) from --peak/--bandwidth or a datasheet preset."""
    if args.device:
        if args.peak or args.bandwidth:
            raise UsageError("give either --device or --peak and --bandwidth, not both")
        preset = device_preset(args.device, args.devices)
        path = args.path or default_path
        if path is None:
            raise UsageError(
                f"--path is needed with --device here; paths of {args.device}: "
                f"{', '.join(preset.peak_flops_per_s)}"
            )
        if path not in preset.peak_flops_per_s:
            raise UsageError(
                f"device {args.device} has no path {path!r}; "
                f"paths: {', '.join(preset.peak_flops_per_s)}"
            )
        if args.level not in preset.bandwidth_b_per_s:
            raise UsageError(
                f"device {args.device} has no level {args.level!r}; "
                f"levels: {', '.join(preset.bandwidth_b_per_s)}"
            )
        return preset.peak_flops_per_s[path], preset.bandwidth_b_per_s[args.level]
    if not (args.peak and args.bandwidth):
        raise UsageError("give --peak and --bandwidth (or --device NAME)")
    return (
        _parse_option("--peak", parse_flop_rate, args.peak),
        _parse_option("--bandwidth", parse_byte_rate, args.bandwidth),
    )


def _parse_option(option: str, parse, text: str) -> float:
    try:
        return parse(text)
    except UnitError as error:
        raise UsageError(f"{option}: {error}") from None


GEMM_TABLE_COLUMNS = (
    "m",
    "n",
    "k",
    "flops",
    "bytes",
    "intensity",
    "compute_s",
    "memory_s",
    "bound_s",
    "limiter",
    "attainable_flops_per_s",
    "bound_s_per_row",
)


def cmd_model_gemm(args) -> None:
    x = args.x_dtype or args.dtype
    w = args.w_dtype or args.dtype
    y = args.y_dtype or args.dtype
    if not (x and w and y):
        raise UsageError("give --dtype, or all of --x-dtype, --w-dtype and --y-dtype")
    peak, bandwidth = _ceilings(args, path_for_dtype(x) if x == w else None)
    rows = []
    for n in args.n:
        for k in args.k:
            for m in args.m:
                ledger = gemm_ledger(m, n, k, x, w, y, beta=args.beta, bias=args.bias)
                b = bound(ledger.flops, ledger.bytes, peak, bandwidth)
                rows.append(
                    {
                        "m": m,
                        "n": n,
                        "k": k,
                        "x_dtype": x,
                        "w_dtype": w,
                        "y_dtype": y,
                        "flops": ledger.flops,
                        "bytes": ledger.bytes,
                        "intensity": b.intensity,
                        "compute_s": b.compute_s,
                        "memory_s": b.memory_s,
                        "bound_s": b.bound_s,
                        "limiter": b.limiter,
                        "attainable_flops_per_s": b.attainable_flops_per_s,
                        "bound_s_per_row": b.bound_s / m,
                        "peak_flops_per_s": peak,
                        "bandwidth_b_per_s": bandwidth,
                        "ridge": b.ridge,
                    }
                )
    if args.format == "table":
        print(
            f"X {x}, W {w}, Y {y}; peak {format_quantity(peak, 'flop_rate')}, bandwidth "
            f"{format_quantity(bandwidth, 'byte_rate')}, ridge {peak / bandwidth:.6g} FLOP/B; "
            "bytes: cold-cache model, not measured traffic"
        )
        rows = [{c: row[c] for c in GEMM_TABLE_COLUMNS} for row in rows]
    print_rows(rows, args.format)


def cmd_model_stages(args) -> None:
    stages = load_scenario(args.file)
    peak, bandwidth = _ceilings(args, default_path=None)
    result = stage_bounds(stages, peak, bandwidth)
    per_stage = [
        {
            "name": s.name,
            "after": list(s.after),
            "flops": s.bound.flops,
            "bytes": s.bound.bytes,
            "intensity": s.bound.intensity,
            "compute_s": s.bound.compute_s,
            "memory_s": s.bound.memory_s,
            "bound_s": s.bound.bound_s,
            "limiter": s.bound.limiter,
            "start_s": s.start_s,
            "finish_s": s.finish_s,
            "on_critical_path": s.on_critical_path,
        }
        for s in result.stages
    ]
    summary = {
        "critical_path_s": result.critical_path_s,
        "aggregate_s": result.aggregate_s,
        "bound_s": result.bound_s,
        "critical_path": result.critical_path,
        "peak_flops_per_s": peak,
        "bandwidth_b_per_s": bandwidth,
    }
    if args.format == "json":
        safe = [{k: _json_safe(v) for k, v in row.items()} for row in per_stage]
        json.dump({**summary, "stages": safe}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    print_rows(per_stage, args.format)
    if args.format == "table":
        print(
            f"critical path  {format_quantity(result.critical_path_s, 'time')}  "
            f"({' -> '.join(result.critical_path)})"
        )
        print(
            f"aggregate      {format_quantity(result.aggregate_s, 'time')}  "
            "(max of summed FLOP / peak and summed bytes / bandwidth)"
        )
        print(f"lower bound    {format_quantity(result.bound_s, 'time')}")


# -- rooflab measure ------------------------------------------------------------------------------


def _backend_and_config(args):
    from rooflab.backends.selection import select_backend

    config = load_config(args.config) if args.config else validate_config({})
    return select_backend(args.backend or config["backend"]), config


def cmd_measure_ceilings(args) -> None:
    from rooflab.conditions.disturbance import DisturbanceSettings
    from rooflab.experiments import ceilings
    from rooflab.records import write_run

    backend, config = _backend_and_config(args)
    settings = ceilings.QUICK if args.quick else ceilings.settings_from_config(config["ceilings"])
    settings = replace(
        settings,
        max_clock_change=config["timing"]["max_clock_change"],
        disturbance=DisturbanceSettings.from_config(config["disturbance"]),
    )
    tables = ceilings.run_ceilings(backend, settings)
    run_dir = write_run(args.out, tables["runs"][0]["run_id"], tables)
    print(f"rooflab: wrote {run_dir}", file=sys.stderr)
    columns = ("kind", "name", "kernel", "dtype", "value", "unit", "threads", "method")
    columns += ("disturbed", "disturbance", "n_disturbed")
    rows = [{c: row.get(c) for c in columns} for row in tables["ceilings"]]
    if args.format == "table":
        for row in rows:
            kind = "byte_rate" if row["unit"] == "B/s" else "flop_rate"
            row["value"] = format_quantity(row["value"], kind)
            del row["unit"], row["method"], row["disturbance"]
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
    rows = [
        {
            "config_id": p["config_id"],
            "cache_state": p["cache_state"],
            "n_samples": p["n_samples"],
            "median_s": p["median_s"],
            "p25_s": p["p25_s"],
            "p75_s": p["p75_s"],
            "achieved_flops_per_s": p["achieved_flops_per_s"],
            "noisy": p["noisy"],
            "disturbed": p["disturbed"],
            "disturbance": p["disturbance"],
            "n_disturbed": p["n_disturbed"],
        }
        for p in tables["gemm_points"]
    ]
    if args.format == "table":
        for row in rows:
            del row["disturbance"]  # one line each on stderr below
    print_rows(rows, args.format)
    _print_disturbance(tables, "gemm_points")
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
    from rooflab.experiments.counters import CounterSettings, counters_status, run_counters
    from rooflab.records import read_run, write_run

    backend, config = _backend_and_config(args)
    if args.sweep not in config["sweeps"]:
        known = ", ".join(config["sweeps"]) or "none"
        raise UsageError(f"no sweep {args.sweep!r} in {args.config}; sweeps: {known}")
    try:
        (timing_run,) = read_run(args.timing)["runs"].to_pylist()
    except (OSError, KeyError, ValueError) as error:
        raise UsageError(f"--timing {args.timing}: not a run folder ({error})") from None
    if timing_run["kind"] != "gemm" or timing_run["sweep"] != args.sweep:
        raise UsageError(
            f"--timing {args.timing}: a {timing_run['kind']} run of sweep "
            f"{timing_run['sweep']!r}, not a gemm run of sweep {args.sweep!r}"
        )
    settings = CounterSettings.from_config(config["counters"])
    tables = run_counters(backend, args.sweep, config["sweeps"][args.sweep], settings, args.timing)
    run_dir = write_run(args.out, tables["runs"][0]["run_id"], tables)
    print(f"rooflab: wrote {run_dir}", file=sys.stderr)
    status, reason = counters_status(tables["counters"])
    print(f"rooflab: counters {status}" + (f": {reason}" if reason else ""), file=sys.stderr)
    columns = ("config_id", "cache_control", "compute_path", "ratio", "trusted", "pairing")
    rows = [{c: row.get(c) for c in columns} for row in tables["counter_calibration"]]
    if rows:
        print_rows(rows, args.format)


# -- rooflab store, query, runs -------------------------------------------------------------------


def _plain(value):
    """A value of any SQL result as JSON and CSV can write it."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _query_rows(db: str, sql: str) -> list[dict]:
    table = query(db, sql)
    return [{k: _plain(v) for k, v in row.items()} for row in table.to_pylist()]


def _print_result(rows: list[dict], fmt: str) -> None:
    if fmt == "table":
        if not rows:
            print("(no rows)", file=sys.stderr)
            return
        rows = [{k: "NULL" if v is None else v for k, v in row.items()} for row in rows]
    print_rows(rows, fmt)


def _report_line(report) -> str:
    line = (
        f"{report.db_path}: added {len(report.added_run_ids)} run(s), "
        f"{len(report.present_run_ids)} already there; roofline_points: "
        f"{report.roofline_rows_inserted} row(s) of {len(report.roofline_run_ids)} run(s) stored, "
        f"{report.roofline_rows_removed} replaced"
    )
    if report.added_columns:
        line += f"; new columns {', '.join(report.added_columns)}"
    return line


def cmd_store_ingest(args) -> None:
    print(_report_line(ingest(args.db, args.results, lock_timeout_s=args.lock_timeout)))


def cmd_store_rebuild(args) -> None:
    report = rebuild(args.db, args.results, lock_timeout_s=args.lock_timeout)
    print(f"rebuilt from {args.results}: " + _report_line(report))


def cmd_query(args) -> None:
    _print_result(_query_rows(args.db, args.sql), args.format)


def cmd_runs(args) -> None:
    rows = _query_rows(args.db, "SELECT * FROM run_summary ORDER BY started_at, run_id")
    warnings = [(row["run_id"], row["busy_warning"]) for row in rows if row["busy_warning"]]
    if args.format == "table":
        for row in rows:
            row["git_commit"] = (row["git_commit"] or "")[:10]  # enough to find it
            row["started_at"] = (row["started_at"] or "")[:19]
            # "2/24": measurements flagged disturbed of those judged; blank before schema 2
            judged = row.pop("n_judged")
            row["n_disturbed"] = "" if judged is None else f"{row['n_disturbed']}/{judged}"
            row["busy_warning"] = "busy" if row["busy_warning"] else ""
            del row["ended_at"], row["backend_note"]  # a sentence: in --format json
    _print_result(rows, args.format)
    if args.format == "table":
        for run_id, warning in warnings:
            print(f"rooflab: run {run_id}: {warning}", file=sys.stderr)


def cmd_report(args) -> None:
    from rooflab.report import build_report

    stages = load_config(args.config)["stages"] if args.config else None
    report = build_report(args.db, args.out, stages=stages)
    print(f"rooflab: wrote {report.index} ({len(report.charts)} chart(s), PNG and SVG beside it)")


def _non_negative_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise argparse.ArgumentTypeError(f"expects seconds >= 0, got {text!r}")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="rooflab", description=__doc__)
    parser.add_argument("--version", action="version", version=f"rooflab {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    model = commands.add_parser("model", help="analytic ledgers and bounds (no hardware needed)")
    model_commands = model.add_subparsers(dest="model_command", required=True, metavar="WHAT")

    gemm = model_commands.add_parser("gemm", help="GEMM ledger and Roofline bound per M")
    gemm.add_argument("--m", type=_int_list("--m"), required=True, help="rows of X, e.g. 1,32,128")
    gemm.add_argument("--n", type=_int_list("--n"), required=True, help="columns of W and Y")
    gemm.add_argument("--k", type=_int_list("--k"), required=True, help="reduction dimension")
    dtypes = sorted(ELEMENT_BITS)
    gemm.add_argument("--dtype", choices=dtypes, help="dtype of X, W and Y")
    gemm.add_argument("--x-dtype", choices=dtypes)
    gemm.add_argument("--w-dtype", choices=dtypes)
    gemm.add_argument("--y-dtype", choices=dtypes)
    gemm.add_argument("--beta", type=float, default=0.0, help="β ≠ 0 reads the old Y")
    gemm.add_argument("--bias", action="store_true", help="add a bias vector of N elements")
    _add_device_options(gemm)
    gemm.set_defaults(handler=cmd_model_gemm)

    stages = model_commands.add_parser("stages", help="critical-path vs aggregate bound")
    stages.add_argument("file", help="YAML with stages: [{name, flops, bytes, after}]")
    _add_device_options(stages)
    stages.set_defaults(handler=cmd_model_stages)

    measure = commands.add_parser("measure", help="measure this machine (no Snakemake needed)")
    measure_commands = measure.add_subparsers(dest="measure_command", required=True, metavar="WHAT")
    ceilings = measure_commands.add_parser("ceilings", help="bandwidth and compute ceilings")
    ceilings.add_argument("--quick", action="store_true", help="a coarse sweep (under a minute)")
    gemm_measure = measure_commands.add_parser("gemm", help="one GEMM sweep of a config file")
    gemm_measure.add_argument("--sweep", required=True, help="sweep name in the config")
    counters = measure_commands.add_parser(
        "counters", help="hardware counters of a timed sweep (ncu on a GPU, perf on a CPU)"
    )
    counters.add_argument("--sweep", required=True, help="sweep name in the config")
    counters.add_argument(
        "--timing", required=True, help="the sweep's timing run folder (rooflab measure gemm)"
    )
    for command, config_required in ((ceilings, False), (gemm_measure, True), (counters, True)):
        command.add_argument(
            "--config",
            required=config_required,
            help="campaign config (default settings when omitted)",
        )
        command.add_argument(
            "--backend", choices=("auto", "cpu", "cuda"), help="overrides the config's backend"
        )
        command.add_argument("--out", required=True, help="folder for the run's Parquet files")
        command.add_argument("--format", choices=("table", "csv", "json"), default="table")
    ceilings.set_defaults(handler=cmd_measure_ceilings)
    gemm_measure.set_defaults(handler=cmd_measure_gemm)
    counters.set_defaults(handler=cmd_measure_counters)

    db_help = f"the store (default {DEFAULT_DB})"
    store = commands.add_parser("store", help="the DuckDB result store: ingest, rebuild")
    store_commands = store.add_subparsers(dest="store_command", required=True, metavar="WHAT")
    ingest = store_commands.add_parser("ingest", help="add the runs the store lacks")
    rebuild = store_commands.add_parser("rebuild", help="recreate the store from the Parquet files")
    for command in (ingest, rebuild):
        command.add_argument("--db", default=str(DEFAULT_DB), help=db_help)
        command.add_argument(
            "--results", default=str(DEFAULT_RESULTS), help="folder of the runs' Parquet files"
        )
        command.add_argument(
            "--lock-timeout",
            type=_non_negative_seconds,
            default=10.0,
            help="seconds to wait for another process that holds the store (default 10)",
        )
    ingest.set_defaults(handler=cmd_store_ingest)
    rebuild.set_defaults(handler=cmd_store_rebuild)

    query = commands.add_parser("query", help="run SQL on the store (read-only)")
    query.add_argument("sql", help='e.g. "SELECT * FROM latest_ceilings"')
    runs = commands.add_parser("runs", help="the runs in the store, oldest first")
    for command in (query, runs):
        command.add_argument("--db", default=str(DEFAULT_DB), help=db_help)
        command.add_argument("--format", choices=("table", "csv", "json"), default="table")
    query.set_defaults(handler=cmd_query)
    runs.set_defaults(handler=cmd_runs)

    report = commands.add_parser("report", help="the HTML report, with a PNG and SVG per chart")
    report.add_argument("--db", default=str(DEFAULT_DB), help=db_help)
    report.add_argument("--out", default="results/report", help="folder (default results/report)")
    report.add_argument("--config", help="campaign config whose `stages` scenarios to chart")
    report.set_defaults(handler=cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        args.handler(args)
    except UsageError as error:
        print(f"rooflab: error: {error}", file=sys.stderr)
        return 2
    except INPUT_ERRORS as error:
        print(f"rooflab: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
