"""What the Snakemake scripts share: logging to the rule's log, receipts, kept run folders.

A measuring job keeps its Parquet under `<stage>/runs/<run_id>/` (not a declared output, so
Snakemake never deletes it) and declares a small JSON receipt naming that run. A rerun writes a new
run folder and a new receipt; earlier runs stay on disk and in the store.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from rooflab.records import check_writable, find_run_folders, write_run


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
    return logging.getLogger("rooflab")


def write_receipt(path: str | os.PathLike, receipt: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(receipt, indent=2, sort_keys=True) + "\n")
    temporary.replace(path)


def read_receipt(path: str | os.PathLike) -> dict:
    return json.loads(Path(path).read_text())


def ready_to_keep(receipt_path: str | os.PathLike) -> Path:
    """The folder a job keeps its run in, beside its receipt, checked writable before the job
    measures: a finished measurement is never lost to a folder it cannot be written to."""
    return check_writable(Path(receipt_path).parent / "runs")


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
    write_receipt(receipt_path, receipt)
    return receipt


def kept_runs(receipts: Iterable[str | os.PathLike]) -> list[Path]:
    """Every run kept beside these receipts (`runs/<run_id>/`, oldest first, each once: receipts
    of one folder share its runs); a hidden folder (a write that did not finish) is not a run."""
    folders = dict.fromkeys(Path(receipt).parent / "runs" for receipt in receipts)
    return [run.path for folder in folders for run in find_run_folders(folder)]
