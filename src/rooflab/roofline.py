"""Roofline points: each timed GEMM configuration against the ceilings of the machine it ran on.

Pairing rules (DESIGN.md §3): the compute roof is the instruction path of the GEMM's dtype
(`COMPUTE_PATH`); the bytes are the cold-cache model Q_model (q_source "model"), so they belong to
one memory level only:
- cold: DRAM/HBM — the flush evicted every cache, operands come from memory;
- warm: the smallest cache level that holds all operands (Q_model bytes), else DRAM/HBM.
The bandwidth of a level is the best kernel's ceiling on that level in the latest ceilings run of
the same machine. Points of a machine without ceilings are not computed (never borrowed).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pyarrow.parquet as pq

from rooflab.machine import cache_bytes_by_level
from rooflab.model import bound
from rooflab.records import read_run, to_table

# dtype of a GEMM -> name of the compute ceiling it is measured against
COMPUTE_PATH = {"fp64": "fp64_fma", "fp32": "fp32_fma"}
MEMORY_LEVEL = "DRAM"


def latest_ceilings_by_machine(run_dirs: Iterable[Path]) -> dict[str, dict]:
    """machine_id -> {run_id, started_at, peak: {path: FLOP/s}, bandwidth: {level: B/s}, caches}."""
    latest: dict[str, dict] = {}
    for run_dir in run_dirs:
        tables = read_run(run_dir)
        (run,) = tables["runs"].to_pylist()
        known = latest.get(run["machine_id"])
        if known and known["started_at"] >= run["started_at"]:
            continue
        peak, bandwidth = {}, {}
        for row in tables["ceilings"].to_pylist():
            if row["kind"] == "compute":
                peak[row["name"]] = row["value"]
            else:
                bandwidth[row["name"]] = max(bandwidth.get(row["name"], 0.0), row["value"])
        latest[run["machine_id"]] = {
            "run_id": run["run_id"],
            "started_at": run["started_at"],
            "peak": peak,
            "bandwidth": bandwidth,
            "caches": cache_bytes_by_level(json.loads(run["machine"])) if run["machine"] else {},
        }
    return latest


def resident_level(bytes_needed: int, caches: dict[str, int], cache_state: str) -> str:
    if cache_state == "warm":
        for level, capacity in sorted(caches.items(), key=lambda item: item[1]):
            if bytes_needed <= capacity:
                return level
    return MEMORY_LEVEL


def roofline_points(gemm_run_dirs: Iterable[Path], ceilings: dict[str, dict]) -> list[dict]:
    points = []
    for run_dir in gemm_run_dirs:
        tables = read_run(run_dir)
        (run,) = tables["runs"].to_pylist()
        machine = ceilings.get(run["machine_id"])
        if machine is None or "gemm_points" not in tables:
            continue
        for point in tables["gemm_points"].to_pylist():
            path = COMPUTE_PATH.get(point["dtype"])
            level = resident_level(point["bytes_model"], machine["caches"], point["cache_state"])
            if path not in machine["peak"] or level not in machine["bandwidth"]:
                continue
            b = bound(
                point["flops"],
                point["bytes_model"],
                machine["peak"][path],
                machine["bandwidth"][level],
            )
            achieved = point["flops"] / point["median_s"]
            points.append(
                {
                    "run_id": point["run_id"],
                    "config_id": point["config_id"],
                    "cache_state": point["cache_state"],
                    "machine_id": run["machine_id"],
                    "ceilings_run_id": machine["run_id"],
                    "sweep": point["sweep"],
                    "m": point["m"],
                    "n": point["n"],
                    "k": point["k"],
                    "dtype": point["dtype"],
                    "layout": point["layout"],
                    "level": level,
                    "q_source": "model",
                    "bytes": point["bytes_model"],
                    "flops": point["flops"],
                    "intensity": b.intensity,
                    "median_s": point["median_s"],
                    "achieved_flops_per_s": achieved,
                    "compute_path": path,
                    "peak_flops_per_s": b.peak_flops_per_s,
                    "bandwidth_b_per_s": b.bandwidth_b_per_s,
                    "attainable_flops_per_s": b.attainable_flops_per_s,
                    "bound_s": b.bound_s,
                    "limiter": b.limiter,
                    "efficiency": achieved / b.attainable_flops_per_s,
                }
            )
    return points


def write_points(points: list[dict], path: Path) -> None:
    """Atomically replace the derived points file."""
    table = to_table("roofline_points", points)
    temporary = path.with_name(f".{path.name}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, temporary)
    temporary.replace(path)
