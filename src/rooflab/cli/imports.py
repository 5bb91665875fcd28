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
from rooflab.imports import read_profile
from rooflab.machine import cache_bytes_by_level, cpu_identity
from rooflab.roofline.imported import measured_roofs, place, preset_roofs, time_without_work
from rooflab.roofline.points import memory_level
from rooflab.store import StoreError, query

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
    "cause", "next_step", "predicted_s", "unplaced",
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
        "caches": cache_bytes_by_level(json.loads(newest[0]["machine"] or "{}")),
        "memory_level": memory_level(bandwidth),
    }
    return measured_roofs(machine_id, ceilings, backend, newest[0]["host"])


def cmd_import(args) -> None:
    profile = read_profile(args.tool, Path(args.file))
    backend = "cpu" if (profile.device or "cpu") == "cpu" else "cuda"
    roofs = roofs_of(args, backend)
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
            f"rooflab: {lane} time without a ledger or counts: {time['without_ledger_s']:.3g} "
            f"of {time['total_s']:.3g} s" + (f" ({share:.1%})" if share is not None else ""),
            file=sys.stderr,
        )
    for note in profile.notes:
        print(f"rooflab: {note}", file=sys.stderr)
