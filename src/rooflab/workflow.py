"""What the Snakemake scripts share: logging to the rule's log, receipts, kept run folders; and
what the Snakefile asks of rooflab: whether jobs show progress on the terminal, and what a
campaign says when it ends (where the report and the store are, what fell back).

A measuring job keeps its Parquet under `<stage>/runs/<run_id>/` (not a declared output, so
Snakemake never deletes it) and declares a small JSON receipt naming that run. A rerun writes a new
run folder and a new receipt; earlier runs stay on disk and in the store.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from rooflab import progress
from rooflab.records import (
    DiskFull,
    NotWritable,
    RecordError,
    check_writable,
    read_table_file,
    space_for,
    write_run,
)
from rooflab.vocabulary import ROOF_BEATEN_EFFICIENCY


def log_to(log_path: str | os.PathLike) -> logging.Logger:
    """Send this job's stderr (progress lines included) and logging to its Snakemake log."""
    stream = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives with the job
    sys.stderr = stream
    logging.basicConfig(
        stream=stream,
        level=logging.INFO,
        force=True,
        format="%(asctime)s %(levelname)s %(message)s",
    )
    log = logging.getLogger("rooflab")
    sys.excepthook = _one_line_if_not_written(log, sys.excepthook)
    return log


def _one_line_if_not_written(log: logging.Logger, otherwise):
    """A job that cannot write what it made (records.NotWritable: a full disk, a folder it may
    not write; the message names the file) fails with that one line in its log and exit status 1,
    not a traceback; other errors keep their traceback."""

    def hook(kind, error, traceback) -> None:
        if issubclass(kind, NotWritable):
            log.error("%s", error)
        else:
            otherwise(kind, error, traceback)

    return hook


def write_json_atomic(path: str | os.PathLike, data: dict, sort_keys: bool = False) -> Path:
    """`data` as JSON at `path`, through a temporary file in the same folder renamed over it: a
    reader sees the old file or the whole new one, and a failed write leaves no file behind."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with (
            space_for(target, "the JSON file", kept="the file is as it was"),
            os.fdopen(handle, "w", encoding="utf-8") as stream,  # closed (flushed) inside
        ):
            json.dump(data, stream, indent=2, sort_keys=sort_keys, allow_nan=False)
            stream.write("\n")
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def write_receipt(path: str | os.PathLike, receipt: dict) -> None:
    write_json_atomic(path, receipt, sort_keys=True)


def read_receipt(path: str | os.PathLike) -> dict:
    return json.loads(Path(path).read_text())


def ready_to_keep(receipt_path: str | os.PathLike) -> Path:
    """The folder a job keeps its run in, beside its receipt, checked writable before the job
    measures: a finished measurement is never lost to a folder it cannot be written to."""
    return check_writable(Path(receipt_path).parent / "runs")


@contextlib.contextmanager
def fails_in_one_line(log, *errors: type[Exception]) -> Iterator[None]:
    """A job whose input cannot be measured (`errors`: the engine's error for bad input) fails
    with the error's one line in its log, no traceback, exit status 1 and nothing kept."""
    try:
        yield
    except errors as error:
        log.error("%s", error)
        sys.exit(1)


def keep_run(tables: dict[str, list[dict]], receipt_path: str | os.PathLike, **extra) -> dict:
    """Write the run beside its receipt (`runs/<run_id>/`) and then the receipt naming it."""
    receipt_path = Path(receipt_path)
    (run,) = tables["runs"]
    run_dir = write_run(receipt_path.parent / "runs", run["run_id"], tables)
    receipt = {
        "run_id": run["run_id"],
        "run_dir": str(run_dir),
        "kind": run["kind"],
        "sweep": run["sweep"],
        "machine_id": run["machine_id"],
        **extra,
    }
    try:
        write_receipt(receipt_path, receipt)
    except DiskFull:  # the job fails whole: no run folder without the receipt that names it
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return receipt


# -- the Snakefile's side: progress on the terminal, and what a campaign says when it ends -------


def _quietness(quiet: Iterable | None) -> set[str]:
    """Snakemake's --quiet as lower-case names (`progress`, `rules`, `all`, ...)."""
    return {str(getattr(item, "name", item)).lower() for item in quiet or ()}


def progress_on_terminal(quiet: Iterable | None, streams: Iterable = (sys.stdout, sys.stderr)):
    """Whether measuring jobs show their status line on the terminal, told to them through the
    environment they inherit (`rooflab.progress.ENV`): only where Snakemake's own output is a
    terminal (not CI, not redirected to a file or a pipe) and not `--quiet`."""
    interactive = all(stream is not None and stream.isatty() for stream in streams)
    on = interactive and not _quietness(quiet) & {"progress", "all"}
    os.environ[progress.ENV] = "tty" if on else "off"
    return on


def _runs_row(receipt: dict) -> dict | None:
    try:
        table = read_table_file(Path(receipt["run_dir"]) / "runs.parquet")
    except (KeyError, OSError, RecordError):
        return None
    rows = table.to_pylist()
    return rows[0] if rows else None


def _roofline_rows(path: Path, run_ids: set) -> list[dict]:
    """The rows of one of the roofline step's tables that belong to these runs (none where the
    step has not run)."""
    if not path.is_file():
        return []
    return [row for row in read_table_file(path).to_pylist() if row["run_id"] in run_ids]


def roofline_lines(folder: str | os.PathLike, run_ids: set, query: str) -> list[str]:
    """What the roofline step found wrong in these runs' points: timed points it could not
    place (unplaced_points), and points above their roof (a ledger that counts too much work,
    or a roof measured too low)."""
    folder, lines = Path(folder), []
    unplaced = _roofline_rows(folder / "unplaced_points.parquet", run_ids)
    if unplaced:
        reasons: dict[str, int] = {}
        for row in unplaced:
            reasons[row["reason"]] = reasons.get(row["reason"], 0) + 1
        counts = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
        lines.append(
            f"rooflab: {len(unplaced)} timed point(s) have no Roofline point ({counts}; "
            f'`{query} "SELECT * FROM latest_unplaced_points"` says why)'
        )
    points = _roofline_rows(folder / "roofline_points.parquet", run_ids)
    above = [
        p
        for p in points
        if p.get("q_source", "model") == "model"
        and (p.get("efficiency") or 0) > ROOF_BEATEN_EFFICIENCY
    ]
    if above:
        top = max(p["efficiency"] for p in above)
        lines.append(
            f"rooflab: {len(above)} Roofline point(s) above their roof (up to {top:.3g}x its "
            "attainable): a ledger that counts too much work, or a roof measured too low "
            f'(logs/roofline.log; `{query} "SELECT * FROM latest_roofline_points WHERE '
            f'efficiency > {ROOF_BEATEN_EFFICIENCY}"`)'
        )
    return lines


def campaign_summary(
    report: str, ingest_receipt: str, receipts: Iterable[str], roofline: str | None = None
) -> list[str]:
    """What a finished campaign says, in a few lines: where the report and the store are, what
    fell back or is missing (the backend's note, a busy machine, counters unavailable, wrong
    results, timed points with no Roofline point or above their roof: from the roofline step's
    tables in the folder `roofline`), and one query to try. From the receipts and the runs they
    name."""
    lines = [f"rooflab: the report is {report}" if Path(report).exists() else None]
    db = None
    if Path(ingest_receipt).exists():
        ingested = read_receipt(ingest_receipt)
        db, added = ingested["db"], len(ingested.get("added", []))
        lines.append(f"rooflab: the store is {db} ({added} new run(s); `rooflab runs` lists all)")
    kept = [read_receipt(path) for path in receipts if Path(path).exists()]
    runs = [row for row in map(_runs_row, kept) if row is not None]
    notes: dict[str, list[dict]] = {}
    for row in runs:
        if row.get("backend_note"):
            notes.setdefault(row["backend_note"], []).append(row)
    for note, rows in notes.items():  # `auto: no CUDA device (why); fell back to cpu`
        backend = rows[0].get("backend") or "?"
        lines.append(f"rooflab: {len(rows)} of {len(runs)} runs measured on {backend}: {note}")
    busy = sum(bool(row.get("busy_warning")) for row in runs)
    if busy:
        lines.append(
            f"rooflab: {busy} run(s) measured on a busy machine (runs.busy_warning says why)"
        )
    unavailable: dict[str, list[str]] = {}
    for receipt in kept:
        if receipt["kind"] == "counters" and receipt.get("status") in ("unavailable", "partial"):
            # said whole: a reason cut short (`no CPU PMU ex…`) tells the user nothing
            reason = " ".join((receipt.get("reason") or "?").split())
            why = f"{receipt['status']}: {reason}"
            unavailable.setdefault(why, []).append(receipt["sweep"])
    for why, sweeps in unavailable.items():
        lines.append(f"rooflab: counters of {', '.join(sorted(set(sweeps)))} {why}")
    failed = [c for r in kept if r["kind"] == "correctness" for c in r.get("failed", [])]
    if failed:
        lines.append(f"rooflab: {len(failed)} configuration(s) failed correctness, not timed")
    where = "" if db in (None, "results/rooflab.duckdb") else f" --db {db}"
    if roofline is not None:
        lines += roofline_lines(roofline, {r.get("run_id") for r in kept}, f"rooflab query{where}")
    if db is not None:
        lines.append(f'rooflab: try `rooflab query{where} "SELECT * FROM latest_ceilings"`')
    return [line for line in lines if line]


def say_campaign_done(
    report, ingest_receipt, receipts, quiet: Iterable | None = None, roofline: str | None = None
) -> None:
    """Print the summary (the Snakefile's `onsuccess`), unless `--quiet all`."""
    if "all" in _quietness(quiet):
        return
    try:
        lines = campaign_summary(report, ingest_receipt, receipts, roofline)
    except (OSError, ValueError, KeyError, RecordError) as error:  # never fail a campaign
        lines = [f"rooflab: no summary ({error}); the report is {report}"]
    print("\n".join(lines), flush=True)


def _log_lines(snakemake_logs: Iterable[str]) -> Iterator[str]:
    for path in snakemake_logs:
        try:
            yield from Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue


def failed_logs(snakemake_logs: Iterable[str]) -> list[tuple[str, str]]:
    """(rule, its log) of each job Snakemake's own log says failed (`Error in rule ...`)."""
    found, rule = [], None
    for line in _log_lines(snakemake_logs):
        if line.startswith("Error in rule "):
            rule = line.removeprefix("Error in rule ").rstrip(":")
        elif rule and line.startswith("    log: "):
            logs = line.removeprefix("    log: ").split(" (check log file")[0]
            found.extend((rule, log) for log in logs.split(", "))
            rule = None
    return list(dict.fromkeys(found))


# What Snakemake logs when it is asked to stop (SIGTERM; Ctrl-C): a stop, not a failure
STOP_REQUESTED = (
    "Will exit after finishing currently running jobs",
    "Terminating processes on user request",
)


def say_campaign_failed(snakemake_logs: Iterable[str]) -> None:
    """The Snakefile's `onerror`: which log to read (or that it was stopped on request, nothing
    failed), and that a rerun keeps what finished."""
    snakemake_logs = list(snakemake_logs or [])
    failed = failed_logs(snakemake_logs)
    if failed:
        read = "; ".join(f"{rule}: {log}" for rule, log in failed)
        print(f"rooflab: the campaign stopped; read the log of what failed ({read})", flush=True)
    elif any(line.startswith(STOP_REQUESTED) for line in _log_lines(snakemake_logs)):
        print(
            "rooflab: the campaign was stopped on request (SIGTERM or Ctrl-C) after its running "
            "jobs finished; nothing failed",
            flush=True,
        )
        print("rooflab: rerun the same command to go on: finished jobs are not rerun", flush=True)
        return
    else:
        print(
            "rooflab: the campaign stopped; Snakemake's log says what failed: "
            + (", ".join(snakemake_logs) or "above"),
            flush=True,
        )
    print("rooflab: fix it and rerun the same command: finished jobs are not rerun", flush=True)
