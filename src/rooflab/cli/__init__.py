"""The `rooflab` command. Usage and input errors print one line and exit with status 2; a reader
that closes the output early (`| head`) ends it quietly with status 141, as SIGPIPE would."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from rooflab import __version__
from rooflab.cli.compare import FAIL_ON, cmd_compare
from rooflab.cli.explain import cmd_explain
from rooflab.cli.imports import add_import_options, cmd_import
from rooflab.cli.measure import cmd_measure_ceilings, cmd_measure_counters, cmd_measure_gemm
from rooflab.cli.measure_stages import cmd_measure_stages
from rooflab.cli.measure_timeline import cmd_measure_timeline
from rooflab.cli.measure_workload import cmd_measure_workload
from rooflab.cli.model import cmd_model_gemm, cmd_model_stages, int_list
from rooflab.cli.output import INPUT_ERRORS, OneLineParser, UsageError
from rooflab.cli.roofs import add_roof_options
from rooflab.cli.sql import cmd_schema, cmd_sql
from rooflab.cli.store import (
    cmd_query,
    cmd_report,
    cmd_runs,
    cmd_store_ingest,
    cmd_store_prune,
    cmd_store_rebuild,
    non_negative_seconds,
)
from rooflab.model import ELEMENT_BITS
from rooflab.store import DEFAULT_DB, DEFAULT_RESULTS
from rooflab.vocabulary import CACHE_STATES, DIAGNOSIS_CAUSES

__all__ = ["build_parser", "main"]

FORMATS = ("table", "csv", "json")
RUN_KINDS = (
    "ceilings",
    "correctness",
    "gemm",
    "workload",
    "counters",
    "stages",
    "timeline",
    "import",
)  # runs.kind: what a job measured (import: a profile another tool recorded)
FORMAT_HELP = (
    "table (the default: aligned, units in the header), or csv or json (numbers in base units: "
    "s, B, FLOP, FLOP/s, B/s)"
)


def add_format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="table", help=FORMAT_HELP)


def _int_at_least(lowest: int, expects: str):
    """An argparse type: an integer of at least `lowest`, else one line saying what it expects."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = lowest - 1
        if value < lowest:
            raise argparse.ArgumentTypeError(f"expects {expects}, got {text!r}")
        return value

    return parse


positive_int = _int_at_least(1, "a positive integer")
non_negative_int = _int_at_least(0, "an integer >= 0")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="rooflab", description=__doc__)
    parser.add_argument("--version", action="version", version=f"rooflab {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    model = commands.add_parser("model", help="analytic ledgers and bounds (no hardware needed)")
    model_commands = model.add_subparsers(dest="model_command", required=True, metavar="WHAT")

    gemm = model_commands.add_parser("gemm", help="GEMM ledger and Roofline bound per M")
    gemm.add_argument("--m", type=int_list("--m"), required=True, help="rows of X, e.g. 1,32,128")
    gemm.add_argument("--n", type=int_list("--n"), required=True, help="columns of W and Y")
    gemm.add_argument("--k", type=int_list("--k"), required=True, help="reduction dimension")
    dtypes = sorted(ELEMENT_BITS)
    gemm.add_argument("--dtype", choices=dtypes, help="dtype of X, W and Y")
    gemm.add_argument("--x-dtype", choices=dtypes)
    gemm.add_argument("--w-dtype", choices=dtypes)
    gemm.add_argument("--y-dtype", choices=dtypes)
    gemm.add_argument("--beta", type=float, default=0.0, help="β ≠ 0 reads the old Y")
    gemm.add_argument("--bias", action="store_true", help="add a bias vector of N elements")
    add_roof_options(gemm)
    add_format(gemm)
    gemm.set_defaults(handler=cmd_model_gemm)

    stages = model_commands.add_parser("stages", help="critical-path vs aggregate bound")
    stages.add_argument("file", help="YAML with stages: [{name, flops, bytes, after}]")
    add_roof_options(stages)
    add_format(stages)
    stages.set_defaults(handler=cmd_model_stages)

    measure = commands.add_parser("measure", help="measure this machine (no Snakemake needed)")
    measure_commands = measure.add_subparsers(dest="measure_command", required=True, metavar="WHAT")
    ceilings = measure_commands.add_parser("ceilings", help="bandwidth and compute ceilings")
    ceilings.add_argument("--quick", action="store_true", help="a coarse sweep (under a minute)")
    gemm_measure = measure_commands.add_parser("gemm", help="one GEMM sweep of a config file")
    gemm_measure.add_argument("--sweep", required=True, help="sweep name in the config")
    counters = measure_commands.add_parser(
        "counters",
        help="hardware counters of a timed sweep or workload (ncu on a GPU, perf on a CPU)",
    )
    counted = counters.add_mutually_exclusive_group(required=True)
    counted.add_argument("--sweep", help="sweep name in the config")
    counted.add_argument("--workload", help="workload name in the config")
    counters.add_argument(
        "--timing",
        required=True,
        help="its timing run folder (rooflab measure gemm, or measure workload --out)",
    )
    stages = measure_commands.add_parser(
        "stages",
        help="measurable stage scenarios, serial and overlapped, beside their bounds",
    )
    stages.add_argument(
        "--ceilings", help="a ceilings run folder of this machine (default: measure quick ones)"
    )
    timeline = measure_commands.add_parser(
        "timeline",
        help="a decode-like step per mode (eager, graph, fused): launch gaps against busy time",
    )
    for command, what, handler in (
        (stages, "a measurable stages scenario", cmd_measure_stages),
        (timeline, "a timeline scenario", cmd_measure_timeline),
    ):
        command.add_argument(
            "--scenario", action="append", help=f"{what} of the config (default: all)"
        )
        command.add_argument(
            "--config",
            help="campaign config (default: config/config.yaml, or config/gpu.yaml with cuda)",
        )
        command.add_argument(
            "--backend", choices=("auto", "cpu", "cuda"), help="overrides the config's backend"
        )
        command.add_argument(
            "--out", help="folder for the runs' Parquet files (default: none kept)"
        )
        add_format(command)
        command.set_defaults(handler=handler)
    workload = measure_commands.add_parser(
        "workload", help="your own kernel: a rooflab.Workload factory (docs/workloads.md)"
    )
    workload.add_argument("entry", help="the factory, package.module:function")
    workload.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUES",
        help="a parameter and its values, comma-separated (n=1048576,16777216); repeatable",
    )
    workload.add_argument(
        "--dtype", action="append", help="the case's dtype (fp32, fp64, ...); repeatable"
    )
    workload.add_argument(
        "--cache-state",
        action="append",
        choices=CACHE_STATES,
        help="repeatable (default: warm and cold)",
    )
    workload.add_argument("--name", help="the workload's name (default: the function's)")
    workload.add_argument("--config", help="campaign config for timing settings (defaults)")
    workload.add_argument(
        "--backend", choices=("auto", "cpu", "cuda"), help="overrides the config's backend"
    )
    workload.add_argument("--out", help="folder for the run's Parquet files (default: none kept)")
    add_format(workload)
    workload.set_defaults(handler=cmd_measure_workload)
    ceilings.add_argument("--config", help="campaign config (default settings when omitted)")
    for command in (gemm_measure, counters):
        command.add_argument(
            "--config", required=True, help="campaign config that names the sweep (required)"
        )
    for command in (ceilings, gemm_measure, counters):
        command.add_argument(
            "--backend", choices=("auto", "cpu", "cuda"), help="overrides the config's backend"
        )
        command.add_argument("--out", required=True, help="folder for the run's Parquet files")
        add_format(command)
    ceilings.set_defaults(handler=cmd_measure_ceilings)
    gemm_measure.set_defaults(handler=cmd_measure_gemm)
    counters.set_defaults(handler=cmd_measure_counters)

    db_help = f"the store (default {DEFAULT_DB})"
    compare = commands.add_parser(
        "compare", help="two runs of every point and ceiling, judged beyond noise"
    )
    compare.add_argument("--db", default=str(DEFAULT_DB), help=db_help)
    compare.add_argument(
        "--baseline",
        default="previous",
        help="previous (each key's run before its newest) or a run id",
    )
    compare.add_argument(
        "--candidate", default="latest", help="latest (each key's newest run) or a run id"
    )
    compare.add_argument("--machine", help="only this machine_id")
    compare.add_argument(
        "--min-effect",
        type=float,
        default=0.05,
        help="a change smaller than this fraction reads `same` (default 0.05)",
    )
    compare.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        help="exit 1 when a pair is slower: regression, only where the key's run-to-run spread "
        "is known (3 earlier runs); any-slower, provisional verdicts too",
    )
    add_format(compare)
    compare.set_defaults(handler=cmd_compare)
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
            type=non_negative_seconds,
            default=10.0,
            help="seconds to wait for another process that holds the store (default 10)",
        )
    rebuild.add_argument(
        "--config",
        help="campaign config whose `stages` scenarios the stage bounds are worked out for "
        "(default: config/config.yaml where it exists)",
    )
    ingest.set_defaults(handler=cmd_store_ingest)
    rebuild.set_defaults(handler=cmd_store_rebuild)
    prune = store_commands.add_parser(
        "prune", help="drop the raw samples of old runs; every run's summaries stay"
    )
    prune.add_argument("--db", default=str(DEFAULT_DB), help=db_help)
    prune.add_argument(
        "--keep-runs",
        type=int,
        required=True,
        help="samples kept for the N newest runs of each series (>= 2)",
    )
    prune.set_defaults(handler=cmd_store_prune)

    query = commands.add_parser("query", help="run SQL on the store (read-only)")
    query.add_argument("sql", help='e.g. "SELECT * FROM latest_ceilings"')
    query.add_argument(
        "--limit",
        type=non_negative_int,
        default=10_000,
        help="print at most N rows, saying so when there are more (default 10000; 0: all)",
    )
    query.add_argument(
        "--timeout", type=non_negative_seconds, default=60.0,
        help="stop a query that runs longer (default 60 s; 0: no limit)",
    )  # fmt: skip
    sql = commands.add_parser(
        "sql", help="SQL on the store, statements ending in ';' from a terminal or a pipe"
    )
    runs = commands.add_parser("runs", help="the runs in the store, oldest first")
    runs.add_argument("--kind", choices=RUN_KINDS, help="only runs of this kind")
    runs.add_argument("--sweep", help="only runs of this sweep")
    runs.add_argument("--machine", help="only runs of this machine: a machine_id prefix or host")
    runs.add_argument(
        "--last", type=positive_int, metavar="N", help="only the newest N (of those selected)"
    )
    schema = commands.add_parser(
        "schema", help="the store's tables and views; with NAME, its columns, types and units"
    )
    schema.add_argument("name", nargs="?", metavar="NAME", help="a table or view")
    for command in (query, sql, runs, schema):
        command.add_argument("--db", default=str(DEFAULT_DB), help=db_help)
        add_format(command)
    query.set_defaults(handler=cmd_query)
    explain = commands.add_parser(
        "explain", help="why each point sits where it does, and what to try next"
    )
    explain.add_argument(
        "--run", metavar="RUN_ID", help="every point of this run (else the newest)"
    )
    explain.add_argument("--key", help="only this point (its config_id)")
    explain.add_argument("--cause", choices=DIAGNOSIS_CAUSES, help="only points of this cause")
    explain.add_argument("--db", default=str(DEFAULT_DB), help=db_help)
    add_format(explain)
    explain.set_defaults(handler=cmd_explain)
    sql.set_defaults(handler=cmd_sql)
    runs.set_defaults(handler=cmd_runs)
    schema.set_defaults(handler=cmd_schema)

    imported = commands.add_parser(
        "import", help="a profile you have (torch.profiler trace, ncu CSV) on measured roofs"
    )
    imported.add_argument("tool", choices=("torch", "ncu"), help="the tool that wrote FILE")
    imported.add_argument("file", help="torch: a Chrome trace (.json, .json.gz); ncu: raw CSV")
    add_import_options(imported)
    imported.add_argument("--db", default=str(DEFAULT_DB), help=db_help)
    add_format(imported)
    imported.set_defaults(handler=cmd_import)

    report = commands.add_parser("report", help="the HTML report, with a PNG and SVG per chart")
    report.add_argument("--db", default=str(DEFAULT_DB), help=db_help)
    report.add_argument("--out", default="results/report", help="folder (default results/report)")
    report.set_defaults(handler=cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        status = args.handler(args)
        sys.stdout.flush()  # a reader that went away is found here, not at exit
    except (UsageError, *INPUT_ERRORS) as error:
        print(f"rooflab: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader closed the pipe (`rooflab query ... | head`): stop quietly, with the status
        # of a process ended by SIGPIPE as the shell reports it (128 + 13), and point stdout at
        # /dev/null so that Python's flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 128 + 2
    return status or 0  # a handler may return a status of its own (compare --fail-on)


if __name__ == "__main__":
    sys.exit(main())
