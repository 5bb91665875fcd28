"""`rooflab import torch|ncu FILE`: a profile a user already has (a torch.profiler trace, an
Nsight Compute raw-page CSV export) read and placed on a machine's roofs (docs/imports.md):
this host's newest measured ceilings in the store by default, another machine's (`--machine`),
or a datasheet preset (`--device`). It prints the points; nothing is stored."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rooflab.cli.machines import Machine, listed, matching
from rooflab.cli.output import print_rows
from rooflab.devices import device_preset
from rooflab.imports import device_backend, read_profile
from rooflab.imports.torch_timeline import trace_timeline
from rooflab.machine import CacheInfoUnavailable, cache_bytes_by_level, cpu_identity
from rooflab.roofline.imported import measured_roofs, place, preset_roofs, time_without_work
from rooflab.roofline.points import memory_level
from rooflab.store import StoreError, query
from rooflab.units import format_quantity

# The newest ceilings run per machine and backend, best kernel per roof, with its machine identity
_CEILINGS_SQL = """
    SELECT c.machine_id, c.backend, c.host, c.run_id, c.started_at, c.kind, c.name,
           max(c.value) AS value, any_value(r.machine) AS machine
    FROM latest_ceilings AS c JOIN runs AS r USING (run_id)
    GROUP BY c.machine_id, c.backend, c.host, c.run_id, c.started_at, c.kind, c.name
    ORDER BY c.started_at DESC, c.run_id DESC, c.kind, c.name
"""

# What a table shows of each point (top-level operators and those that carry work); --format json
# and csv give every operator and every column
TABLE_COLUMNS = (
    "index", "op", "dtype", "time_s", "flops", "bytes", "intensity", "level", "limiter",
    "efficiency", "cause",
)  # fmt: skip
JSON_COLUMNS = (
    "index", "op", "kind", "parent", "input_dims", "dtype", "start_s", "time_s", "thread",
    "flops", "flops_source", "bytes", "q_source", "intensity", "level", "compute_path",
    "achieved_flops_per_s", "attainable_flops_per_s", "bound_s", "limiter", "efficiency",
    "cause", "next_step", "predicted_s", "unplaced", "levels",
)  # fmt: skip


def add_import_options(parser) -> None:
    roofs = parser.add_mutually_exclusive_group()
    roofs.add_argument("--device", metavar="PRESET", help="a datasheet preset's roofs")
    roofs.add_argument(
        "--machine",
        help="the measured ceilings of this machine in the store (a machine_id prefix or host; "
        "default: this host's)",
    )
    parser.add_argument("--devices", help="preset file (default: config/devices.yaml)")


def roofs_of(args, backend: str) -> dict:
    """The roofs the points go on: --device's datasheet, else the newest measured ceilings of
    --machine (default: this host) on `backend` in the store --db."""
    if args.device:
        return preset_roofs(device_preset(args.device, args.devices))
    rows = [r for r in query(args.db, _CEILINGS_SQL).to_pylist() if r["backend"] == backend]
    if not rows:
        raise StoreError(
            f"no {backend} ceilings in {args.db}: measure them (the workflow, or `rooflab "
            "measure ceilings` then `rooflab store ingest`), or give --device PRESET"
        )
    machines = [Machine(r["machine_id"], r["host"]) for r in rows]
    if args.machine:
        found = {m.machine_id for m in matching(machines, args.machine)}
        if len(found) != 1:
            how = "is ambiguous: it matches" if found else "matches none of the machines with"
            raise StoreError(
                f"machine {args.machine!r} {how} {backend} ceilings in {args.db}: "
                f"{listed(machines)}"
            )
        (machine_id,) = found
    else:
        machine_id = cpu_identity()["machine_id"]
        if machine_id not in {m.machine_id for m in machines}:
            raise StoreError(
                f"no {backend} ceilings of this host (machine {machine_id}) in {args.db}; "
                f"name one with --machine ({listed(machines)}) or give --device PRESET"
            )
    mine = [r for r in rows if r["machine_id"] == machine_id]
    newest = [r for r in mine if r["run_id"] == mine[0]["run_id"]]
    bandwidth = {r["name"]: r["value"] for r in newest if r["kind"] == "bandwidth"}
    ceilings = {
        "run_id": newest[0]["run_id"],
        "peak": {r["name"]: r["value"] for r in newest if r["kind"] == "compute"},
        "bandwidth": bandwidth,
        "caches": _caches(newest[0]["machine"]),
        "memory_level": memory_level(bandwidth),
    }
    return measured_roofs(machine_id, ceilings, backend, newest[0]["host"])


def _caches(identity: str | None) -> dict[str, int]:
    """The data caches of a machine's identity (none known: its model bytes sit in memory)."""
    try:
        return cache_bytes_by_level(json.loads(identity or "{}"))
    except CacheInfoUnavailable:
        return {}


def cmd_import(args) -> None:
    profile = read_profile(args.tool, Path(args.file))
    roofs = roofs_of(args, device_backend(profile.device))
    points = place(profile.operators, roofs)
    if args.format == "table":  # the operators that carry work or time of their own
        shown = [p for p in points if not p.get("nested") or p.get("flops") is not None]
        print_rows([{c: p.get(c) for c in TABLE_COLUMNS} for p in shown], "table")
    else:
        print_rows([{c: p.get(c) for c in JSON_COLUMNS} for p in points], args.format)
    placed = sum(p["efficiency"] is not None for p in points)
    print(
        f"rooflab: {args.file}: {placed} of {len(points)} operators placed on {roofs['what']}",
        file=sys.stderr,
    )
    for lane, time in time_without_work(profile.operators).items():
        share = time["share_without_ledger"]
        print(
            f"rooflab: {lane} time without a ledger or counts: "
            f"{duration_text(time['without_ledger_s'])} of {duration_text(time['total_s'])}"
            + (f" ({share:.1%})" if share is not None else ""),
            file=sys.stderr,
        )
    if profile.tool == "torch":
        for line in timeline_lines(trace_timeline(profile, top=5)):
            print(f"rooflab: {line}", file=sys.stderr)
    for note in profile.notes:
        print(f"rooflab: {note}", file=sys.stderr)


def timeline_lines(timeline: dict) -> list[str]:
    """A trace's timeline in a few lines: end to end, each lane's busy time and gaps, the top
    operators by share of end-to-end time."""
    lines = [f"end to end {duration_text(timeline['end_to_end_s'])}"]
    for lane in timeline["lanes"]:
        lines.append(
            f"{lane['lane']}: {duration_text(lane['busy_s'])} busy, "
            f"{duration_text(lane['gaps_s'])} in {len(lane['gaps'])} gaps between its events"
        )
    delays = sorted(launch["delay_s"] for launch in timeline["launches"])
    if delays:  # a GPU trace: from each kernel's launch call to its start
        lines.append(
            f"launch to kernel: median {duration_text(delays[len(delays) // 2])}, at most "
            f"{duration_text(delays[-1])} over {len(delays)} GPU events"
        )
    top = ", ".join(
        f"{row['op']} {row['share']:.1%} ({row['calls']} calls)"
        for row in timeline["top_operators"]
    )
    return [*lines, f"top operators by share of end to end: {top}"]


def duration_text(seconds: float) -> str:
    return format_quantity(seconds, "time", 3)
