"""Imported operators (rooflab.imports: a torch.profiler trace's, an ncu export's kernels) on a
machine's roofs: the measured ceilings of a machine in the store, or a datasheet preset.

An operator with a ledger (F and the cold-cache model Q from its shapes, or counted bytes) becomes a
point: its compute roof is its dtype's path (a matmul's as a GEMM of that dtype on the backend
pairs, `vocabulary.compute_path`; any other op's the dtype's FMA chains, as a workload's), its
bytes sit in the smallest cache level that holds them (the operands an application's op reads were
mostly just written by the op before it: warm, as a timeline step), else the memory; with a
datasheet preset, the memory (a datasheet gives no cache sizes). Its limiter, efficiency and
diagnosis (`roofline.diagnosis`: cause, next step, predicted bound) follow as for every point.
An operator without a ledger, or whose roof was not measured, keeps its time and says why.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from rooflab.counters.points import bypassed_levels
from rooflab.devices import DevicePreset
from rooflab.imports import device_backend
from rooflab.imports.torch_trace import ledger_coverage
from rooflab.model import ModelError, hierarchical_bound
from rooflab.records import read_runs
from rooflab.records.derived_tables import DERIVED
from rooflab.roofline.diagnosis import diagnose
from rooflab.roofline.points import resident_level
from rooflab.vocabulary import (
    MEMORY_LEVELS,
    CacheState,
    compute_path,
    datasheet_path,
    workload_compute_path,
)

# Operators whose work is a matrix product: judged against the GEMM path of their dtype.
MATMUL_LEDGER = "matmul"
# Why an operator has no work to place: no ledger of rooflab's knows it (torch), or the export
# lacks its FLOP or byte counts (ncu; the import's note names the metrics missing)
NO_LEDGER = "no ledger"
NOT_COUNTED = "FLOPs or bytes not counted in the export"
NO_FLOPS = "F = 0 (comparisons are no FLOPs): no point on a FLOP/s roof; its bytes are its work"


def measured_roofs(machine_id: str, ceilings: dict, backend: str, host: str | None = None) -> dict:
    """The roofs of a machine's ceilings run (`ceilings`: latest_ceilings_by_machine's entry, or
    the same built from the store: run_id, peak, bandwidth, caches, memory_level)."""
    where = f"host {host}, {backend}" if host else backend
    return {
        "source": "measured",
        "machine_id": machine_id,
        "run_id": ceilings["run_id"],
        "backend": backend,
        "what": f"ceilings run {ceilings['run_id']} of machine {machine_id} ({where})",
        "peak": ceilings["peak"],
        "bandwidth": ceilings["bandwidth"],
        "caches": ceilings["caches"],
        "memory_level": ceilings["memory_level"],
    }


def preset_roofs(preset: DevicePreset) -> dict:
    """A datasheet preset's roofs (vendor figures, labelled so wherever they appear)."""
    levels = preset.bandwidth_b_per_s
    memory = next((level for level in MEMORY_LEVELS if level in levels), next(iter(levels)))
    return {
        "source": "datasheet",
        "machine_id": None,
        "run_id": None,
        "backend": "cuda" if "HBM" in levels else "cpu",
        "what": f"datasheet {preset.key} ({preset.name})",
        "peak": dict(preset.peak_flops_per_s),
        "bandwidth": dict(levels),
        "caches": {},
        "memory_level": memory,
    }


def roof_path(roofs: dict, operator: dict) -> str | None:
    """The compute roof an operator is judged against (None: its dtype pairs with none)."""
    dtype = operator.get("dtype")
    counted_path = (operator.get("counted") or {}).get("compute_path")
    if roofs["source"] == "datasheet":
        return datasheet_path(dtype) if dtype else None
    if counted_path:  # the path whose counters counted most of its FLOPs
        return counted_path
    if dtype is None:
        return None
    if operator.get("ledger") == MATMUL_LEDGER:
        return compute_path(roofs["backend"], dtype)
    return workload_compute_path(dtype)


def place(operators: list[dict], roofs: dict) -> list[dict]:
    """Each operator with its roof and diagnosis where it has a ledger (or counts) and a roof:
    `level`, `compute_path`, `intensity`, `attainable_flops_per_s`, `bound_s`, `limiter`,
    `efficiency`, `cause`, `next_step`, `predicted_s`; else those null and `unplaced` saying
    why. A counted kernel (an ncu export's) is bounded at every level with counted bytes and a
    bandwidth roof, each against its own (`levels`); its `level` is the binding one."""
    placed = []
    for operator in operators:
        point = dict(operator) | dict.fromkeys(PLACEMENT_COLUMNS)
        why = _unplaced(operator, roofs)
        if why is None:
            try:
                point |= _bounded(operator, roofs) | {"unplaced": None}
            except ModelError as error:
                why = str(error)
        if why is not None:
            placed.append(point | {"unplaced": why})
            continue
        diagnosis = diagnose(_as_point(point, roofs))
        point |= {k: diagnosis[k] for k in ("cause", "next_step", "predicted_s")}
        placed.append(point)
    return placed


def _bounded(operator: dict, roofs: dict) -> dict:
    """An operator's bound on its roofs: its model bytes at the level that holds them, or its
    counted bytes at each level (the binding one named)."""
    path = roof_path(roofs, operator)
    peak = roofs["peak"][path]
    by_level = counted_levels(operator, roofs)
    if by_level is None:
        level = resident_level(
            operator["bytes"], roofs["caches"], CacheState.WARM, roofs["memory_level"]
        )
        if level not in roofs["bandwidth"]:
            raise ModelError(f"no bandwidth roof of {level} ({roofs['what']})")
        by_level = {level: operator["bytes"]}
    bandwidth = {level: roofs["bandwidth"][level] for level in by_level}
    b = hierarchical_bound(operator["flops"], by_level, peak, bandwidth)
    binding = b.limiter if b.limiter != "compute" else min(
        b.levels, key=lambda level: b.levels[level].attainable_flops_per_s
    )  # fmt: skip
    term = b.levels[binding]
    achieved = operator["flops"] / operator["time_s"]
    return {
        "level": binding,
        "compute_path": path,
        "intensity": term.intensity,
        "achieved_flops_per_s": achieved,
        "attainable_flops_per_s": b.attainable_flops_per_s,
        "peak_flops_per_s": peak,
        "bandwidth_b_per_s": term.bandwidth_b_per_s,
        "bound_s": b.bound_s,
        "limiter": "compute" if b.limiter == "compute" else "memory",
        "efficiency": achieved / b.attainable_flops_per_s,
        "levels": {
            level: {
                "bytes": t.bytes,
                "intensity": t.intensity,
                "attainable_flops_per_s": t.attainable_flops_per_s,
            }
            for level, t in b.levels.items()
        },
    }


def counted_levels(operator: dict, roofs: dict) -> dict[str, float] | None:
    """A counted kernel's bytes per level that has a bandwidth roof (levels whose counter the
    kernel bypassed left out, as for counted points); None for a modelled operator."""
    counted = (operator.get("counted") or {}).get("bytes_by_level")
    if operator.get("q_source") != "counters" or not counted:
        return None
    found = {level: float(q) for level, q in counted.items() if q is not None}
    for level in bypassed_levels(found):
        del found[level]
    kept = {level: q for level, q in found.items() if level in roofs["bandwidth"]}
    if not kept:
        raise ModelError(
            f"no bandwidth roof of its counted levels {', '.join(found) or 'none'} "
            f"({roofs['what']})"
        )
    return kept


PLACEMENT_COLUMNS = (
    "level",
    "compute_path",
    "intensity",
    "achieved_flops_per_s",
    "attainable_flops_per_s",
    "peak_flops_per_s",
    "bandwidth_b_per_s",
    "bound_s",
    "limiter",
    "efficiency",
    "cause",
    "next_step",
    "predicted_s",
    "unplaced",
    "levels",
)


def _unplaced(operator: dict, roofs: dict) -> str | None:
    """Why an operator gets no point, or None."""
    if operator.get("flops") is None or operator.get("bytes") is None:
        return NOT_COUNTED if operator.get("q_source") == "counters" else NO_LEDGER
    if not operator.get("time_s"):
        return "no duration"
    if operator["flops"] == 0:  # a comparison (relu), counted as no FLOP: no FLOP/s to place
        return NO_FLOPS
    path = roof_path(roofs, operator)
    if path is None or path not in roofs["peak"]:
        measured = ", ".join(roofs["peak"]) or "none"
        return f"no {path or operator.get('dtype')} compute roof in {roofs['what']} ({measured})"
    return None


def _as_point(point: dict, roofs: dict) -> dict:
    """The operator in the shape `diagnose` reads (a roofline_points row's names)."""
    return point | {
        "source": ("imported", None),
        "kind": "imported",
        "config_id": f"{point['index']}:{point['op']}",
        "run_id": None,
        "machine_id": roofs["machine_id"],
        "cache_state": CacheState.WARM,
        "median_s": point["time_s"],
        "executed_flops": None,
    }


def time_without_work(operators: list[dict]) -> dict[str, dict]:
    """How much of a profile's time has no F and Q, per lane kind ("cpu", "gpu"): a torch
    trace's by `ledger_coverage` (an operator around one that holds work is covered as far as
    its children are), an export's kernels by their counts. Each: total_s, without_ledger_s,
    share_without_ledger."""
    if any(op.get("kind") == "cpu_op" for op in operators):
        return ledger_coverage(operators)
    total = sum(op["time_s"] or 0.0 for op in operators)
    bare = sum(op["time_s"] or 0.0 for op in operators if op.get("flops") is None)
    return {
        "gpu": {
            "total_s": total,
            "with_ledger_s": total - bare,
            "without_ledger_s": bare,
            "share_without_ledger": bare / total if total else None,
        }
    }


def imported_points(run_dirs: Iterable[Path], ceilings: dict[str, dict]) -> list[dict]:
    """The imported_points rows of these import runs: each run's operators on the latest
    ceilings of its own machine (`latest_ceilings_by_machine`), none borrowed; without them,
    each operator unplaced saying so."""
    rows = []
    columns = [name for name in DERIVED["imported_points"].names]
    for run, tables in read_runs(run_dirs):
        operators = [
            op | {"counted": json.loads(op["counted"]) if op["counted"] else None}
            for op in tables["imported_operators"].to_pylist()
        ]
        machine_id = run["machine_id"]
        machine = ceilings.get(machine_id)
        (profile,) = tables["imported_profiles"].to_pylist()
        why = f"no ceilings run of its machine {machine_id}"
        if device_backend(profile["device"]) != run["backend"]:
            machine = None  # a GPU's kernels never go under a CPU's roofs, nor the reverse
            why = (
                f"recorded on {profile['device']}, imported on a {run['backend']} machine: "
                "place it with `rooflab import --device PRESET`, or import it where it ran"
            )
        if machine is None:
            placed = [op | dict.fromkeys(PLACEMENT_COLUMNS) | {"unplaced": why} for op in operators]
        else:
            placed = place(operators, measured_roofs(machine_id, machine, run["backend"]))
        for point in placed:
            point |= {
                "machine_id": machine_id,
                "ceilings_run_id": machine["run_id"] if machine else None,
            }
            point["levels"] = json.dumps(point["levels"]) if point["levels"] else None
            rows.append({name: point.get(name) for name in columns})
    return rows
