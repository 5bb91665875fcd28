"""The store the docs' `<!-- example store -->` examples run on (tests/test_readme.py): one ceilings
run of an NVIDIA H200 whose values are those of run 3 in docs/measurements/2026-11-30-h200.md
(the run id, machine id and host are made up; every figure is that run's); beside it, the files
docs/imports.md imports (recorded H200 ncu exports, tests/fixtures/ncu/README.md)."""

import shutil
from datetime import UTC, datetime
from pathlib import Path

from rooflab.records import write_run
from rooflab.store import ingest
from tests.table_rows import runs_row

RUN_ID = "20261130T233412Z-5d0c9e27"
MACHINE_ID = "7c1e2f9a40b3d568"
HOST = "h200-vm"
STARTED_AT = datetime(2026, 11, 30, 23, 34, 12, tzinfo=UTC)

# the profiles docs/imports.md imports, copied beside the store under these names
PROFILES = {
    "bf16_gemm.raw.csv": "ncu/gemm/bf16_m4096_n4096_k4096_cache-all.raw.csv",
    "bf16_gemm_m64.raw.csv": "ncu/gemm/bf16_m64_n4096_k4096_cache-all.raw.csv",
}
FIXTURES = Path(__file__).parent / "fixtures"

# (kind, name, kernel, dtype, value in B/s or FLOP/s)
CEILINGS = [
    ("bandwidth", "HBM", "read", "fp32", 4.578e12),
    ("bandwidth", "HBM", "triad", "fp32", 4.208e12),
    ("bandwidth", "HBM", "copy", "fp32", 4.072e12),
    ("bandwidth", "L2", "triad", "fp32", 11.03e12),
    ("bandwidth", "L2", "read", "fp32", 8.986e12),
    ("bandwidth", "L2", "copy", "fp32", 8.030e12),
    ("bandwidth", "L1", "l1_read", "fp32", 31.71e12),
    ("compute", "fp64_fma", "fma_chains", "fp64", 33.39e12),
    ("compute", "fp32_fma", "fma_chains", "fp32", 65.80e12),
    ("compute", "fp16_fma", "fma_chains", "fp16", 130.9e12),
    ("compute", "bf16_tensor", "matmul", "bf16", 823.7e12),
    ("compute", "fp16_tensor", "matmul", "fp16", 780.8e12),
    ("compute", "tf32_tensor", "matmul", "tf32", 421.2e12),
    ("compute", "fp64_tensor", "matmul", "fp64", 58.9e12),
    ("compute", "fp32_cublas", "matmul", "fp32", 51.3e12),
]


def build_example_store(folder: Path) -> Path:
    """`folder`/results/rooflab.duckdb holding the example run (its run folder beside it)."""
    results = folder / "results"
    run = runs_row(
        RUN_ID, "ceilings", STARTED_AT, ended_at=STARTED_AT, host=HOST, machine_id=MACHINE_ID,
        backend="cuda", device_name="NVIDIA H200",
    )  # fmt: skip
    ceilings = [
        {
            "run_id": RUN_ID,
            "kind": kind,
            "name": name,
            "kernel": kernel,
            "dtype": dtype,
            "value": value,
            "unit": "B/s" if kind == "bandwidth" else "FLOP/s",
        }
        for kind, name, kernel, dtype, value in CEILINGS
    ]
    write_run(results / "ceilings" / "runs", RUN_ID, {"runs": [run], "ceilings": ceilings})
    ingest(results / "rooflab.duckdb", results)
    for name, fixture in PROFILES.items():
        shutil.copy(FIXTURES / fixture, folder / name)
    return results / "rooflab.duckdb"
