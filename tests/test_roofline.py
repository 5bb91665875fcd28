import json
from datetime import UTC, datetime

import pytest

from rooflab.model import gemm_ledger
from rooflab.records import write_run
from rooflab.roofline import latest_ceilings_by_machine, resident_level, roofline_points

CACHES = {"L1": 64 * 1024, "L2": 1 << 20, "L3": 32 << 20}
MACHINE = {
    "caches": [
        {
            "level": 1,
            "type": "Data",
            "size_bytes": 32768,
            "shared_cpu_count": 1,
            "instances": 2,
            "usable_instances": 2,
        },
        {
            "level": 2,
            "type": "Unified",
            "size_bytes": 524288,
            "shared_cpu_count": 1,
            "instances": 2,
            "usable_instances": 2,
        },
        {
            "level": 3,
            "type": "Unified",
            "size_bytes": 33554432,
            "shared_cpu_count": 2,
            "instances": 1,
            "usable_instances": 1,
        },
    ]
}


def test_resident_level():
    assert resident_level(10_000, CACHES, "warm") == "L1"
    assert resident_level(500_000, CACHES, "warm") == "L2"
    assert resident_level(10_000, CACHES, "cold") == "DRAM"
    assert resident_level(1 << 30, CACHES, "warm") == "DRAM"


def _run(tmp_path, run_id, machine_id, kind, started, **tables):
    runs = [
        {
            "run_id": run_id,
            "kind": kind,
            "machine_id": machine_id,
            "started_at": started,
            "machine": json.dumps(MACHINE),
        }
    ]
    return write_run(tmp_path, run_id, {"runs": runs, **tables})


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


def test_points_pair_each_gemm_with_its_own_machine(tmp_path):
    old = _run(
        tmp_path,
        "c-old",
        "A",
        "ceilings",
        datetime(2026, 1, 1, tzinfo=UTC),
        ceilings=_ceilings("c-old", 0.5),
    )
    new = _run(
        tmp_path,
        "c-new",
        "A",
        "ceilings",
        datetime(2026, 2, 1, tzinfo=UTC),
        ceilings=_ceilings("c-new", 1.0),
    )
    ceilings = latest_ceilings_by_machine([new, old])
    assert ceilings["A"]["run_id"] == "c-new"
    assert ceilings["A"]["caches"] == CACHES
    ledger = gemm_ledger(1, 1024, 1024, "fp64")
    point = {
        "config_id": "s/fp64/nn/m1_n1024_k1024",
        "sweep": "s",
        "m": 1,
        "n": 1024,
        "k": 1024,
        "dtype": "fp64",
        "layout": "nn",
        "median_s": 1e-3,
        "flops": ledger.flops,
        "bytes_model": ledger.bytes,
    }
    gemm_a = _run(
        tmp_path,
        "g-a",
        "A",
        "gemm",
        datetime(2026, 3, 1, tzinfo=UTC),
        gemm_points=[
            {**point, "run_id": "g-a", "cache_state": state} for state in ("warm", "cold")
        ],
    )
    gemm_b = _run(
        tmp_path,
        "g-b",
        "B",
        "gemm",
        datetime(2026, 3, 1, tzinfo=UTC),
        gemm_points=[{**point, "run_id": "g-b", "cache_state": "cold"}],
    )
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


def test_a_point_without_its_compute_path_or_level_ceiling_is_left_out(tmp_path):
    # Ceilings that lack the fp32 path and the DRAM level: an fp32 point and a cold fp64 point
    # have no roof to stand under, so they are left out (not drawn against some other roof).
    rows = [r for r in _ceilings("c", 1.0) if r["name"] != "DRAM"]
    ceilings_run = _run(
        tmp_path, "c", "A", "ceilings", datetime(2026, 1, 1, tzinfo=UTC), ceilings=rows
    )
    ceilings = latest_ceilings_by_machine([ceilings_run])
    gemm_points = []
    for dtype in ("fp64", "fp32"):
        ledger = gemm_ledger(1, 256, 256, dtype)
        for state in ("warm", "cold"):
            gemm_points.append(
                {
                    "run_id": "g",
                    "config_id": f"s/{dtype}/nn/m1_n256_k256",
                    "cache_state": state,
                    "m": 1,
                    "n": 256,
                    "k": 256,
                    "dtype": dtype,
                    "median_s": 1e-5,
                    "flops": ledger.flops,
                    "bytes_model": ledger.bytes,
                }
            )
    gemm = _run(
        tmp_path, "g", "A", "gemm", datetime(2026, 2, 1, tzinfo=UTC), gemm_points=gemm_points
    )
    points = roofline_points([gemm], ceilings)
    assert [(p["config_id"], p["cache_state"], p["level"]) for p in points] == [
        ("s/fp64/nn/m1_n256_k256", "warm", "L2")  # 528 KB of operands, in the 1 MiB of L2
    ]
