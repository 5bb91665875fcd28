"""CONSTRUCTED test data (not a measurement): the runs a GPU campaign with cuBLASLt's FP8 and int8
GEMMs would keep, written as rooflab's own records, so that the roofline step, the store's views
and the report can be tested on integer (OP/s) and FP8 roofs and points without a GPU.

Every number is made up (round ceilings, times chosen so the points fall below their roofs); the
host and machine say "constructed", the device name is an H200's only so that the datasheet preset
(config/devices.yaml h200-sxm, with its int8 integer path) matches it. Nothing here was measured.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rooflab.model import gemm_ledger
from rooflab.records import write_run
from tests.constructed_counters import runs_row

MACHINE_ID = "constructed-int8-gpu"
HOST = "constructed-int8-host"
DEVICE = "NVIDIA H200"  # matches the h200-sxm preset; the values below are constructed
T0 = datetime(2026, 7, 1, tzinfo=UTC)
N = K = 4096
MS = (1, 4096)
# (kind, name, kernel, dtype, value, unit): bf16 twice (cuBLAS and cuBLASLt: the roof is the best)
CEILINGS = [
    ("bandwidth", "HBM", "read", "fp32", 4.0e12, "B/s"),
    ("bandwidth", "L2", "read", "fp32", 10.0e12, "B/s"),
    ("compute", "fp32_fma", "fma_chains", "fp32", 60e12, "FLOP/s"),
    ("compute", "bf16_tensor", "cublas_gemmex", "bf16", 700e12, "FLOP/s"),
    ("compute", "bf16_tensor", "cublaslt_matmul", "bf16", 760e12, "FLOP/s"),
    ("compute", "fp8_tensor", "cublaslt_matmul", "fp8_e4m3", 1.3e15, "FLOP/s"),
    ("compute", "int8_tensor", "cublaslt_matmul", "int8", 1.4e15, "OP/s"),
]
# dtype -> (X, W, Y dtypes, per-tensor scales, median time (s) per M)
GEMMS = {
    "bf16": (("bf16", "bf16", "bf16"), 0, {1: 12e-6, 4096: 220e-6}),
    "fp8_e4m3": (("fp8_e4m3", "fp8_e4m3", "bf16"), 2, {1: 6e-6, 4096: 130e-6}),
    "int8": (("int8", "int8", "int32"), 0, {1: 6e-6, 4096: 120e-6}),
}


def config_id(dtype: str, m: int) -> str:
    return f"reuse_{dtype}/{dtype}/nt/m{m}_n{N}_k{K}"


def _run(run_id: str, kind: str, started: datetime, sweep: str | None = None) -> dict:
    """constructed_counters' runs row, on this module's machine (an H200's name and L2)."""
    row = runs_row(run_id, kind, started, sweep)
    gpu = {"name": DEVICE, "l2_bytes": 50 << 20}
    machine = json.loads(row["machine"]) | {"machine_id": MACHINE_ID, "gpu": gpu}
    row |= {"schema_version": 3, "host": HOST, "machine_id": MACHINE_ID, "device_name": DEVICE}
    return row | {"machine": json.dumps(machine)}


def ceiling_rows(run_id: str, changes: dict | None = None) -> list[dict]:
    """The ceilings rows; `changes`: {(name, kernel): {column: value}} edits (a wrong unit)."""
    rows = []
    for kind, name, kernel, dtype, value, unit in CEILINGS:
        row = {"run_id": run_id, "kind": kind, "name": name, "kernel": kernel, "dtype": dtype}
        row |= {"value": value, "unit": unit, "config_id": f"{kind}/{name}/{kernel}"}
        rows.append(row | (changes or {}).get((name, kernel), {}))
    return rows


def gemm_points(run_id: str, dtype: str) -> list[dict]:
    (x, w, y), scales, times = GEMMS[dtype]
    rows = []
    for m in MS:
        ledger = gemm_ledger(m, N, K, x, w, y, tensor_scales=scales)
        median = times[m]
        row = {"run_id": run_id, "kind": "gemm", "config_id": config_id(dtype, m)}
        row |= {"sweep": f"reuse_{dtype}", "m": m, "n": N, "k": K, "dtype": dtype}
        row |= {"x_dtype": x, "w_dtype": w, "y_dtype": y, "layout": "nt", "cache_state": "cold"}
        row |= {"n_samples": 20, "median_s": median, "p25_s": median * 0.99, "p75_s": median * 1.01}
        # 2MNK: OP for int8 (its work unit), FLOP for the rest
        row |= {"flops": ledger.flops, "bytes_model": ledger.bytes}
        row |= {"achieved_flops_per_s": ledger.flops / median, "noisy": False, "disturbed": False}
        rows.append(row)
    return rows


def write_campaign(results: Path, changes: dict | None = None) -> dict[str, list[Path]]:
    """A ceilings run and one sweep run per dtype under `results`, as the workflow keeps them."""
    ceilings_id = "20260701T000000Z-c1000000"
    tables = {"runs": [_run(ceilings_id, "ceilings", T0)]}
    tables["ceilings"] = ceiling_rows(ceilings_id, changes)
    out = {"ceilings": [write_run(results / "ceilings" / "runs", ceilings_id, tables)], "gemm": []}
    for i, dtype in enumerate(GEMMS):
        run_id = f"20260701T0{i + 1}0000Z-g{i}000000"
        sweep = f"reuse_{dtype}"
        tables = {
            "runs": [_run(run_id, "gemm", T0 + timedelta(hours=i + 1), sweep)],
            "timed_points": gemm_points(run_id, dtype),
        }
        out["gemm"].append(write_run(results / "sweeps" / sweep / "runs", run_id, tables))
    return out
