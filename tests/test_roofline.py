import json
from datetime import UTC, datetime

import pytest

from rooflab.model import gemm_ledger
from rooflab.records import write_run
from rooflab.roofline import latest_ceilings_by_machine, resident_level, roofline_points

CACHES = {"L1": 64 * 1024, "L2": 1 << 20, "L3": 32 << 20}


def _cache(level, kind, size, instances, usable, shared=None):
    return {"level": level, "type": kind, "size_bytes": size, "shared_cpu_count": shared,
            "instances": instances, "usable_instances": usable}  # fmt: skip


MACHINE = {
    "caches": [
        _cache(1, "Data", 32768, 2, 2, shared=1),
        _cache(2, "Unified", 524288, 2, 2, shared=1),
        _cache(3, "Unified", 33554432, 1, 1, shared=2),
    ]
}
JAN, FEB, MAR = (datetime(2026, month, 1, tzinfo=UTC) for month in (1, 2, 3))


def test_resident_level():
    assert resident_level(10_000, CACHES, "warm") == "L1"
    assert resident_level(500_000, CACHES, "warm") == "L2"
    assert resident_level(10_000, CACHES, "cold") == "DRAM"
    assert resident_level(1 << 30, CACHES, "warm") == "DRAM"


def _run(tmp_path, run_id, machine_id, kind, started, **tables):
    run = {"run_id": run_id, "kind": kind, "machine_id": machine_id, "started_at": started}
    return write_run(tmp_path, run_id, {"runs": [run | {"machine": json.dumps(MACHINE)}], **tables})


def _ceilings(run_id, scale):
    rows = [
        ("compute", "fp64_fma", 100e9),
        ("bandwidth", "DRAM", 20e9),
        ("bandwidth", "L1", 300e9),
        ("bandwidth", "L2", 150e9),
        ("bandwidth", "L3", 120e9),
    ]
    return [
        {"run_id": run_id, "kind": kind, "name": name, "kernel": "triad", "value": v * scale}
        for kind, name, v in rows
    ]


def _gemm_point(run_id, dtype, n, cache_state, median_s):
    """A timed M = 1, K = N GEMM point of sweep s, its F and Q from the model's ledger."""
    ledger = gemm_ledger(1, n, n, dtype)
    return (
        {"run_id": run_id, "kind": "gemm", "sweep": "s", "config_id": f"s/{dtype}/nn/m1_n{n}_k{n}"}
        | {"m": 1, "n": n, "k": n, "dtype": dtype, "layout": "nn", "cache_state": cache_state}
        | {"median_s": median_s, "flops": ledger.flops, "bytes_model": ledger.bytes}
        | {"achieved_flops_per_s": ledger.flops / median_s}
    )


def test_points_pair_each_gemm_with_its_own_machine(tmp_path):
    old = _run(tmp_path, "c-old", "A", "ceilings", JAN, ceilings=_ceilings("c-old", 0.5))
    new = _run(tmp_path, "c-new", "A", "ceilings", FEB, ceilings=_ceilings("c-new", 1.0))
    ceilings = latest_ceilings_by_machine([new, old])
    assert ceilings["A"]["run_id"] == "c-new"
    assert ceilings["A"]["caches"] == CACHES
    ledger = gemm_ledger(1, 1024, 1024, "fp64")
    warm_and_cold = [_gemm_point("g-a", "fp64", 1024, state, 1e-3) for state in ("warm", "cold")]
    gemm_a = _run(tmp_path, "g-a", "A", "gemm", MAR, timed_points=warm_and_cold)
    cold_b = [_gemm_point("g-b", "fp64", 1024, "cold", 1e-3)]
    gemm_b = _run(tmp_path, "g-b", "B", "gemm", MAR, timed_points=cold_b)
    points = roofline_points([gemm_a, gemm_b], ceilings)
    assert {p["run_id"] for p in points} == {"g-a"}  # machine B has no ceilings: no points
    by_state = {p["cache_state"]: p for p in points}
    cold, warm = by_state["cold"], by_state["warm"]
    assert (cold["level"], warm["level"]) == ("DRAM", "L3")  # 8.4 MB of operands
    assert cold["bandwidth_b_per_s"] == 20e9 and warm["bandwidth_b_per_s"] == 120e9
    assert cold["attainable_flops_per_s"] == pytest.approx(20e9 * ledger.intensity)
    assert cold["limiter"] == "memory" and cold["q_source"] == "model"
    assert cold["efficiency"] == pytest.approx(ledger.flops / 1e-3 / (20e9 * ledger.intensity))
    assert cold["ceilings_run_id"] == "c-new" and cold["compute_path"] == "fp64_fma"


def test_a_warm_point_sits_in_the_level_that_holds_its_footprint_not_its_traffic(tmp_path):
    ceilings_run = _run(tmp_path, "c", "A", "ceilings", JAN, ceilings=_ceilings("c", 1))
    ceilings = latest_ceilings_by_machine([ceilings_run])
    workload = {"run_id": "w", "kind": "workload", "dtype": "fp64", "median_s": 1e-3}
    cases = {
        # a chase: 800 kB of traffic (would fit L2) over a 32 MiB + 16 B cycle (outgrows L3)
        "chase": {"flops": 100_000, "bytes_model": 800_000, "footprint_bytes": (32 << 20) + 16},
        # passes over a temporary: 48 MiB of traffic (past L3) over 600 kB of arrays (in L2)
        "passes": {"flops": 100_000, "bytes_model": 48 << 20, "footprint_bytes": 600_000},
        # a run recorded before footprints: its traffic decides, as it did
        "older": {"flops": 100_000, "bytes_model": 800_000, "footprint_bytes": None},
    }
    timed = [
        {**workload, **work, "config_id": name, "cache_state": state,
         "achieved_flops_per_s": work["flops"] / 1e-3}
        for name, work in cases.items() for state in ("warm", "cold")
    ]  # fmt: skip
    run = _run(tmp_path, "w", "A", "workload", datetime(2026, 2, 1), timed_points=timed)
    points = roofline_points([run], ceilings)
    levels = {(p["config_id"], p["cache_state"]): p["level"] for p in points}
    assert levels == {
        ("chase", "warm"): "DRAM", ("chase", "cold"): "DRAM",
        ("passes", "warm"): "L2", ("passes", "cold"): "DRAM",
        ("older", "warm"): "L2", ("older", "cold"): "DRAM",
    }  # fmt: skip
    chase = next(p for p in points if p["config_id"] == "chase")
    # the traffic stays the point's bytes (its intensity); the footprint only placed it
    assert (chase["bytes"], chase["footprint_bytes"]) == (800_000, (32 << 20) + 16)
    assert chase["intensity"] == pytest.approx(100_000 / 800_000)


def test_a_point_without_its_compute_path_or_level_ceiling_is_left_out(tmp_path):
    # Ceilings that lack the fp32 path and the DRAM level: an fp32 point and a cold fp64 point
    # have no roof to stand under, so they are left out (not drawn against some other roof).
    rows = [r for r in _ceilings("c", 1.0) if r["name"] != "DRAM"]
    ceilings_run = _run(tmp_path, "c", "A", "ceilings", JAN, ceilings=rows)
    ceilings = latest_ceilings_by_machine([ceilings_run])
    gemm_points = [
        _gemm_point("g", dtype, 256, state, 1e-5)
        for dtype in ("fp64", "fp32")
        for state in ("warm", "cold")
    ]
    gemm = _run(tmp_path, "g", "A", "gemm", FEB, timed_points=gemm_points)
    points = roofline_points([gemm], ceilings)
    assert [(p["config_id"], p["cache_state"], p["level"]) for p in points] == [
        ("s/fp64/nn/m1_n256_k256", "warm", "L2")  # 528 KB of operands, in the 1 MiB of L2
    ]


def test_cache_capacities_count_the_data_cache_instances_this_process_touches():
    from rooflab.roofline.analysis import cache_capacity_rows

    caches = [
        _cache(1, "Data", 32 * 1024, 8, 2),
        _cache(1, "Instruction", 32 * 1024, 8, 2),  # holds no data
        _cache(2, "Unified", 2**20, 8, 2),
        _cache(3, "Unified", 32 * 2**20, 8, 0),  # none of its instances is this process's
    ]
    run = {"run_id": "r", "machine_id": "m", "machine": json.dumps({"caches": caches})}
    assert [(r["level"], r["bytes"]) for r in cache_capacity_rows(run)] == [
        ("L1", 64 * 1024),
        ("L2", 2 * 2**20),
    ]
    unread = {"caches": [], "unavailable": {"caches": "no /sys/devices/system/cpu"}}
    assert cache_capacity_rows({**run, "machine": json.dumps(unread)}) == []
    assert cache_capacity_rows({**run, "machine": None}) == []


TWO_STAGES = {
    "compute_path": "fp64_fma",
    "memory_level": "DRAM",
    "stages": [
        {"name": "A", "flops": "0.12 GFLOP", "bytes": "200 MB"},
        {"name": "B", "flops": "12 GFLOP", "bytes": "2 MB", "after": ["A"]},
    ],
}


def test_stage_bounds_are_worked_out_on_the_runs_own_ceilings_or_say_what_is_missing():
    from rooflab.model import Stage, stage_bounds
    from rooflab.roofline.analysis import stage_bound_rows

    run = {"run_id": "c", "machine_id": "A"}
    peak, bandwidth = {"fp64_fma": 100e9}, {"DRAM": 20e9}
    rows, notes = stage_bound_rows(run, peak, bandwidth, {"two": TWO_STAGES})
    expected = stage_bounds([Stage("A", 0.12e9, 200e6), Stage("B", 12e9, 2e6, ("A",))], 100e9, 20e9)
    assert notes == []
    assert [(r["stage"], r["position"], r["start_s"], r["bound_s"]) for r in rows] == [
        (s.name, i, s.start_s, s.bound.bound_s) for i, s in enumerate(expected.stages)
    ]
    assert {(r["critical_path_s"], r["aggregate_s"]) for r in rows} == {
        (expected.critical_path_s, expected.aggregate_s)
    }
    rows, notes = stage_bound_rows(
        run, peak, bandwidth, {"gpu": {**TWO_STAGES, "memory_level": "HBM"}}
    )
    assert rows == [] and notes == ["stages gpu: ceilings run c has no HBM ceiling"]


def test_the_store_replaces_the_derived_rows_of_exactly_the_runs_the_step_read(tmp_path):
    """A scenario taken out of the config leaves the store at the next ingest, for the runs the
    roofline step read; the derived rows of a run it did not read stay."""
    from rooflab.roofline import build_analysis, write_analysis
    from rooflab.store import ingest, query

    results = tmp_path / "results"
    old = _run(results / "ceilings", "c-old", "B", "ceilings", JAN, ceilings=_ceilings("c-old", 1))
    new = _run(results / "ceilings", "c-new", "A", "ceilings", FEB, ceilings=_ceilings("c-new", 1))
    db = tmp_path / "rooflab.duckdb"

    def rows(sql: str) -> list[tuple]:
        return [tuple(r.values()) for r in query(db, sql).to_pylist()]

    analysis = build_analysis([old, new], [], stages={"two": TWO_STAGES})
    write_analysis(analysis, results / "roofline")
    ingest(db, results)
    stages = "SELECT run_id, count(*) FROM stage_bounds GROUP BY ALL ORDER BY ALL"
    assert rows(stages) == [("c-new", 2), ("c-old", 2)]
    assert rows(
        "SELECT level, bytes FROM latest_cache_capacities WHERE machine_id = 'A' ORDER BY bytes"
    ) == list(CACHES.items())

    write_analysis(build_analysis([new], [], stages={}), results / "roofline")
    report = ingest(db, results)
    assert report.roofline_run_ids == ["c-new"]
    assert rows(stages) == [("c-old", 2)]
    assert rows("SELECT run_id, kind FROM roofline_inputs ORDER BY ALL") == [
        ("c-new", "ceilings"),
        ("c-old", "ceilings"),
    ]
