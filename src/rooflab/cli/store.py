"""`rooflab store ingest | rebuild`, `rooflab query`, `rooflab runs`, `rooflab report`."""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import math
import sys
import uuid

from rooflab.cli.machines import Machine, listed, matching
from rooflab.cli.output import print_rows
from rooflab.store import StoreError, ingest, query, query_capped, rebuild


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


def query_rows(db: str, sql: str, params: list | None = None) -> list[dict]:
    table = query(db, sql, params=params)
    return [{k: _plain(v) for k, v in row.items()} for row in table.to_pylist()]


def print_result(rows: list[dict], fmt: str) -> None:
    """A query's rows; no rows: `(no rows)` on stderr in a table, an empty result otherwise."""
    if fmt == "table" and not rows:
        print("(no rows)", file=sys.stderr)
        return
    print_rows(rows, fmt)


def _report_line(report) -> str:
    line = (
        f"{report.db_path}: added {len(report.added_run_ids)} run(s), "
        f"{len(report.present_run_ids)} already there, {len(report.bad_runs)} set aside; derived "
        f"from {len(report.roofline_run_ids)} run(s): {report.roofline_rows_inserted} Roofline "
        f"point(s) stored, {report.roofline_rows_removed} replaced"
    )
    if report.added_columns:
        line += f"; new columns {', '.join(report.added_columns)}"
    return line


def _say_set_aside(report) -> None:
    """On stderr, the temporary files removed and one line per run (or derived file) set aside;
    then, if any was set aside, a StoreError: everything good is committed by now, and the
    command exits non-zero so that the workflow's ingest fails visibly."""
    for path in report.stale_removed:
        print(f"rooflab: removed {path}, left by a rebuild that was killed", file=sys.stderr)
    lines = report.set_aside_lines()
    for line in lines:
        print(f"rooflab: {line}", file=sys.stderr)
    if lines:
        what = [f"{len(report.bad_runs)} run(s) set aside"] if report.bad_runs else []
        what += ["the derived tables not replaced"] if report.bad_derived else []
        raise StoreError(
            f"{' and '.join(what)} (named above; the files are left as they are), everything "
            "else stored: fix or remove the bad files, then run `rooflab store ingest` again"
        )


def cmd_store_ingest(args) -> None:
    report = ingest(args.db, args.results, lock_timeout_s=args.lock_timeout, strict=False)
    print(_report_line(report))
    _say_set_aside(report)


def cmd_store_rebuild(args) -> None:
    from pathlib import Path

    from rooflab.config import load_config, validate_config
    from rooflab.roofline import ROOFLINE_FOLDER, analyse_results, write_analysis

    # The derived rows of every kept run, whatever sweeps the current config names: worked out
    # again from the run folders (the stage bounds from the config's `stages`), then stored.
    config_file = args.config or (
        "config/config.yaml" if Path("config/config.yaml").is_file() else None
    )
    config = load_config(config_file) if config_file else validate_config({})
    results = Path(args.results)
    analysis = analyse_results(results, stages=config["stages"])
    write_analysis(analysis, results / ROOFLINE_FOLDER)  # (a bad folder: named by rebuild)
    report = rebuild(args.db, args.results, lock_timeout_s=args.lock_timeout, strict=False)
    print(f"rebuilt from {args.results}: " + _report_line(report))
    _say_set_aside(report)


def cmd_query(args) -> None:
    table, more = query_capped(
        args.db, args.sql, limit=args.limit or None, timeout_s=args.timeout or None
    )
    print_result([{k: _plain(v) for k, v in row.items()} for row in table.to_pylist()], args.format)
    if more:  # said on stderr: stdout stays the rows, in the format asked for
        print(
            f"rooflab: the first {args.limit} rows; the query has more (--limit N, 0 for all)",
            file=sys.stderr,
        )


def _runs_filter(args) -> tuple[str, list]:
    """The WHERE clause and parameters of `rooflab runs --kind --sweep --machine`."""
    where, params = [], []
    for column, value in (("kind", args.kind), ("sweep", args.sweep)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if args.machine is not None:
        machines = [
            Machine(r["machine_id"], r["host"])
            for r in query_rows(args.db, "SELECT DISTINCT machine_id, host FROM runs ORDER BY 1")
        ]
        found = matching(machines, args.machine)
        if not found:
            raise StoreError(
                f"no runs of a machine {args.machine!r} (a machine_id prefix or host) in "
                f"{args.db}; machines: {listed(machines)}"
            )
        ids = sorted({m.machine_id for m in found})
        where.append(f"machine_id IN ({', '.join('?' for _ in ids)})")
        params += ids
    return (" WHERE " + " AND ".join(where) if where else ""), params


def cmd_runs(args) -> None:
    where, params = _runs_filter(args)
    sql = f"SELECT * FROM run_summary{where} ORDER BY started_at DESC, run_id DESC"
    if args.last is not None:
        sql += f" LIMIT {int(args.last)}"
    rows = query_rows(args.db, f"SELECT * FROM ({sql}) ORDER BY started_at, run_id", params)
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
    print_result(rows, args.format)
    if args.format == "table":
        for run_id, warning in warnings:
            print(f"rooflab: run {run_id}: {warning}", file=sys.stderr)


def cmd_report(args) -> None:
    from rooflab.report import build_report

    report = build_report(args.db, args.out)
    print(f"rooflab: wrote {report.index} ({len(report.charts)} chart(s), PNG and SVG beside it)")


def non_negative_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise argparse.ArgumentTypeError(f"expects seconds >= 0, got {text!r}")
    return seconds


def cmd_store_prune(args) -> None:
    from rooflab.store.prune import prune_samples

    pruned = prune_samples(args.db, args.keep_runs)
    print(
        f"{args.db}: deleted {pruned.samples} sample(s) of {pruned.runs} run(s) older than the "
        f"{args.keep_runs} newest of each series; {pruned.bytes_before} B → {pruned.bytes_after} B"
    )
