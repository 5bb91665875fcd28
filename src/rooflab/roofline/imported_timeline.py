"""The critical path of an imported torch trace (derived table imported_critical_path), worked
out by the roofline step from the import run's stored operators with the one walk the command line
uses (`imports.torch_timeline.trace_timeline`): back from the event that ends last, each event
waiting on the one before it on its lane or, a GPU event launched after its stream went idle, on
the operator that launched it (its stored `launch_s`). An export of Nsight Compute has no timeline
(its kernels were replayed one by one): it has no path."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from rooflab.imports.profile import Profile
from rooflab.imports.torch_timeline import trace_timeline
from rooflab.records import read_run


def critical_path_rows(run_dirs: Iterable[Path]) -> list[dict]:
    """The imported_critical_path rows of these import runs (a torch trace's, one per event on
    its path)."""
    rows: list[dict] = []
    for run_dir in run_dirs:
        tables = read_run(run_dir)
        (run,) = tables["runs"].to_pylist()
        (profile,) = tables["imported_profiles"].to_pylist()
        operators = tables["imported_operators"].to_pylist()
        timed = [op for op in operators if op["start_s"] is not None and op["time_s"] is not None]
        if profile["tool"] != "torch" or not timed:
            continue  # an export without timestamps: no timeline
        path = trace_timeline(_profile(run_dir, profile, operators))["critical_path"]
        rows += [
            {
                "run_id": run["run_id"],
                "machine_id": run["machine_id"],
                "position": position,
                **{c: step[c] for c in ("index", "op", "lane", "start_s", "on_path_s")},
                "path_s": path["total_s"],
                "path_busy_s": path["busy_s"],
                "path_waiting_s": path["waiting_s"],
            }
            for position, step in enumerate(path["steps"])
        ]
    return rows


def _profile(run_dir: Path, stored: dict, operators: list[dict]) -> Profile:
    """The profile again, as far as the timeline needs it: its operators and its steps
    (settings' annotations, which widen the end-to-end time)."""
    return Profile(
        tool=stored["tool"],
        tool_version=stored["tool_version"],
        path=Path(run_dir) / str(stored["file"]),
        sha256=stored["sha256"],
        device=stored["device"],
        recorded_at=stored["recorded_at"],
        operators=operators,
        settings=json.loads(stored["settings"] or "{}"),
    )
