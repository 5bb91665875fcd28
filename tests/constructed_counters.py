"""CONSTRUCTED test data (not a measurement): the runs a GPU campaign with working hardware
counters would keep, written as rooflab's own records so that the pairing, calibration,
hierarchical points and the report's counters charts can be tested without a GPU.

Every number here is made up to exercise the rules (round ceilings, times chosen so the points
fall below their roofs); the machine, host and device names say "constructed" so that nothing
built from them can be mistaken for a measurement. Real counter values are owed to a GPU run
(docs/counters.md §6).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rooflab.counters.ncu import DRAM_READ, DRAM_WRITE, L1_BYTES, L2_BYTES
from rooflab.model import gemm_ledger
from rooflab.records import write_run
from rooflab.roofline.clocks import SM_CLOCK
from rooflab.vocabulary import NCU_PAIRINGS
from tests.table_rows import runs_row as table_runs_row

MACHINE_ID = "constructed-gpu-0"
HOST = "constructed-host"
DEVICE = "constructed GPU (test data, not a measurement)"
T0 = datetime(2026, 6, 1, tzinfo=UTC)
CEILINGS = {"HBM": 4.0e12, "L2": 1.0e13, "L1": 3.0e13, "bf16_tensor": 7.0e14}
BF16_OPS = "sm__ops_path_tensor_src_bf16_dst_fp32.sum"
SWEEP = "reuse"
N = K = 4096
MS = (64, 4096)
# median time per (m, cache state), and counted bytes per (m, cache control): HBM, L2, L1
TIMES = {(64, "cold"): 30e-6, (64, "warm"): 20e-6, (4096, "cold"): 300e-6, (4096, "warm"): 290e-6}
BYTES = {
    (64, "all"): (36e6, 120e6, 400e6),
    (64, "none"): (6e6, 118e6, 400e6),
    (4096, "all"): (110e6, 2.0e9, 9.0e9),
    (4096, "none"): (80e6, 2.0e9, 9.0e9),
}


def config_id(m: int) -> str:
    return f"{SWEEP}/bf16/nn/m{m}_n{N}_k{K}"


def runs_row(run_id: str, kind: str, started: datetime, sweep: str | None = None) -> dict:
    machine = {
        "machine_id": MACHINE_ID,
        "caches": [
            {
                "level": 2,
                "type": "Unified",
                "size_bytes": 50 << 20,
                "shared_cpu_count": 0,
                "instances": 1,
                "usable_instances": 1,
            }
        ],
        "constructed": "test data, not a measurement",
    }
    # schema 1: runs of a rooflab before disturbance was judged (the report says "not judged")
    return table_runs_row(
        run_id, kind, started, sweep, schema_version=1, ended_at=started + timedelta(seconds=5),
        host=HOST,
        machine_id=MACHINE_ID, backend="cuda", device_name=DEVICE, machine=json.dumps(machine),
        settings=json.dumps({"constructed": True}),
    )  # fmt: skip


def write_campaign(
    results: Path,
    *,
    counted_factor: float = 1.002,
    machine_id: str = MACHINE_ID,
    l1_factor: float = 1.0,
    clocks_mhz: tuple[float, float] | None = None,
) -> dict[str, Path]:
    """Ceilings, a timing run and a counters run under `results` (run folders, as the workflow
    keeps them). `counted_factor`: counted tensor FLOPs over 2MNK (1.002: trusted; 0.5: not).
    `machine_id`: the machine the counters run says it ran on. `l1_factor` scales the counted L1
    bytes. `clocks_mhz`: (the timing samples' SM clock, the replayed kernels' SM clock), each
    point given one sample and each replay one kernel at them; None: no clock anywhere."""
    ceilings_id, gemm_id, counters_id = (
        "20260601T000000Z-c0000000",
        "20260601T010000Z-g0000000",
        "20260601T020000Z-k0000000",
    )
    ceilings = [
        {"run_id": ceilings_id, "kind": "bandwidth", "name": level, "kernel": kernel}
        | {"value": CEILINGS[level], "unit": "B/s"}
        for level, kernel in (("HBM", "triad"), ("L2", "triad"), ("L1", "l1_read"))
    ]
    ceilings.append(
        {"run_id": ceilings_id, "kind": "compute", "name": "bf16_tensor", "kernel": "matmul"}
        | {"dtype": "bf16", "value": CEILINGS["bf16_tensor"], "unit": "FLOP/s"}
    )
    out = {
        "ceilings": write_run(
            results / "ceilings" / "runs",
            ceilings_id,
            {"runs": [runs_row(ceilings_id, "ceilings", T0)], "ceilings": ceilings},
        )
    }
    points = []
    for m in MS:
        ledger = gemm_ledger(m, N, K, "bf16")
        for state in ("warm", "cold"):
            median = TIMES[(m, state)]
            points.append(
                {
                    "run_id": gemm_id,
                    "kind": "gemm",
                    "config_id": config_id(m),
                    "sweep": SWEEP,
                    "m": m,
                    "n": N,
                    "k": K,
                    "dtype": "bf16",
                    "layout": "nn",
                    "cache_state": state,
                    "n_samples": 20,
                    "median_s": median,
                    "p25_s": median * 0.99,
                    "p75_s": median * 1.01,
                    "flops": ledger.flops,
                    "bytes_model": ledger.bytes,
                    "achieved_flops_per_s": ledger.flops / median,
                    "noisy": False,
                }
            )
    gemm_run = {"runs": [runs_row(gemm_id, "gemm", T0 + timedelta(hours=1), SWEEP)]}
    if clocks_mhz:
        gemm_run["samples"] = [
            {"run_id": gemm_id, "config_id": p["config_id"], "cache_state": p["cache_state"]}
            | {"sample_idx": 0, "seconds": p["median_s"], "clock_mhz": clocks_mhz[0]}
            for p in points
        ]
    out["gemm"] = write_run(
        results / "sweeps" / SWEEP / "runs", gemm_id, gemm_run | {"timed_points": points}
    )
    counters, calibration = [], []
    settings = {"tool": "ncu", "tool_version": "constructed", "chip": "constructed"}
    for m in MS:
        expected = 2 * m * N * K
        for control, state in (("all", "cold"), ("none", "warm")):
            hbm, l2, l1 = BYTES[(m, control)]
            values = {
                DRAM_READ: hbm * 0.8,
                DRAM_WRITE: hbm * 0.2,
                L2_BYTES: l2,
                L1_BYTES: l1 * l1_factor,
            }
            values[BF16_OPS] = expected * counted_factor
            common = {"run_id": counters_id, "config_id": config_id(m), **settings}
            common |= {"cache_control": control, "clock_control": "none", "replay_mode": "kernel"}
            for metric, value in values.items():
                counters.append(
                    {**common, "scope": "range", "metric": metric, "value": value}
                    | {"unit": "byte", "status": "ok"}
                )
            counters.append({**common, "scope": "range", "metric": None, "status": "ok"})
            if clocks_mhz:
                counters.append(
                    {**common, "scope": "kernel", "metric": SM_CLOCK, "status": "ok"}
                    | {"value": clocks_mhz[1] * 1e6, "unit": "cycle/second", "kernel_id": 0}
                )
            calibration.append(
                {
                    "run_id": counters_id,
                    "config_id": config_id(m),
                    "cache_control": control,
                    "compute_path": "bf16_tensor",
                    "m": m,
                    "n": N,
                    "k": K,
                    "counted_flops": expected * counted_factor,
                    "expected_flops": expected,
                    "ratio": counted_factor,
                    "tolerance": 0.01,
                    "trusted": abs(counted_factor - 1) <= 0.01,
                    "reason": "constructed",
                    "pairing": NCU_PAIRINGS[control][1],
                    "timing_run_id": gemm_id,
                    "timing_cache_state": state,
                    "timing_median_s": TIMES[(m, state)],
                }
            )
    run = runs_row(counters_id, "counters", T0 + timedelta(hours=2), SWEEP)
    run["machine_id"] = machine_id
    out["counters"] = write_run(
        results / "sweeps" / SWEEP / "runs",
        counters_id,
        {"runs": [run], "counters": counters, "counter_calibration": calibration},
    )
    return out
