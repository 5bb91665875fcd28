"""Helpers that build a store from realistic runs: CPU GEMM and ceilings runs written by
records.write_run on made-up machines (`gemm_run`, `ceilings_run`, `two_machines`, `T0`), a
roofline_points table naming given runs (`write_roofline_points`), and the row counts and rows
read back (`file_row_counts`, `store_row_counts`, `rows`). Used by test_store, test_cli_store,
test_disk_full, test_store_hardening and test_unplaced_points; not a test module, so pytest
collects nothing here.
"""

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from rooflab.records import MEASURED_TABLES, new_run_id, to_table, write_run
from rooflab.store import query
from tests.table_rows import runs_row

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
MACHINES = {
    "m-alpha": ("alpha", "AMD EPYC 9654"),
    "m-beta": ("beta", "Intel Xeon 8480+"),
}
SHAPES = [(1, 64, 64), (32, 64, 64), (128, 64, 64)]


def _run_row(run_id, kind, sweep, started_at, machine_id, commit="abc123def4567890"):
    host, cpu = MACHINES[machine_id]
    return runs_row(
        run_id, kind, started_at, sweep, host=host, machine_id=machine_id, backend="cpu",
        device_name=cpu, library_versions=json.dumps({"numpy": "2.1.0"}), git_commit=commit,
        git_dirty=False, config_hash="0123456789abcdef", settings="{}",
    )  # fmt: skip


def _conditions(run_id, started_at, ghz_values):
    return [
        {
            "run_id": run_id,
            "t": started_at + timedelta(seconds=i),
            "phase": "before" if i % 2 == 0 else "after",
            "cpu_ghz_measured": ghz,
            "governor": "performance",
            "load_avg_1m": 0.5,
            "unavailable": "{}",
        }
        for i, ghz in enumerate(ghz_values)
    ]


def gemm_run(
    out,
    *,
    machine_id="m-alpha",
    started_at=T0,
    sweep="decode",
    median_scale=1.0,
    n_samples=5,
    failing_m=128,
    noisy_m=32,
    disturbed_m=None,
    busy_warning=None,
):
    """A CPU GEMM run: every table, two cache states, one configuration failing its check; the
    cold point of `disturbed_m` flagged disturbed, and the run's busy warning where given."""
    run_id = new_run_id(started_at)
    tables = {name: [] for name in ("conditions", "samples", "timed_points", "correctness")}
    tables["runs"] = [
        {**_run_row(run_id, "gemm", sweep, started_at, machine_id), "busy_warning": busy_warning}
    ]
    tables["conditions"] = _conditions(run_id, started_at, [3.1, 3.0, 2.9, 3.05])
    for m, n, k in SHAPES:
        config_id = f"{sweep}/fp32/nn/m{m}_n{n}_k{k}"
        config = {"run_id": run_id, "config_id": config_id, "sweep": sweep, "m": m, "n": n, "k": k}
        config |= {"dtype": "fp32", "layout": "nn"}
        passed = m != failing_m
        tables["correctness"].append(
            {
                **config,
                "metric": "max_rel_error",
                "error": 1e-7 if passed else 0.5,
                "tolerance": 1e-5,
                "passed": passed,
                "rows_checked": m,
                "cols_checked": n,
            }
        )
        if not passed:
            continue  # a wrong result is never timed
        for cache_state in ("warm", "cold"):
            median_s = median_scale * 1e-5 * m
            tables["samples"].extend(
                {
                    "run_id": run_id,
                    "config_id": config_id,
                    "cache_state": cache_state,
                    "sample_idx": i,
                    "seconds": median_s * (1 + 0.01 * i),
                    "clock_mhz": 2950.0 + i,
                }
                for i in range(n_samples)
            )
            flops = 2 * m * n * k
            tables["timed_points"].append(
                {
                    **config,
                    "kind": "gemm",
                    "x_dtype": "fp32",
                    "w_dtype": "fp32",
                    "y_dtype": "fp32",
                    "cache_state": cache_state,
                    "n_samples": n_samples,
                    "median_s": median_s,
                    "p25_s": median_s * 0.99,
                    "p75_s": median_s * 1.01,
                    "min_s": median_s * 0.98,
                    "flops": flops,
                    "bytes_model": 4 * (m * k + k * n + m * n),
                    "achieved_flops_per_s": flops / median_s,
                    "noisy": m == noisy_m,
                    "flush_method": "write 64 MiB buffer" if cache_state == "cold" else None,
                    "flush_bytes": 64 << 20 if cache_state == "cold" else 0,
                    **_disturbance(m == disturbed_m and cache_state == "cold"),
                }
            )
    return write_run(Path(out) / "gemm" / sweep / "runs", run_id, tables)


def _disturbance(disturbed: bool) -> dict:
    reason = "12 of 17 samples disturbed, 5 clean of the 10 needed" if disturbed else None
    return {"disturbed": disturbed, "disturbance": reason, "n_disturbed": 12 if disturbed else 0}


def ceilings_run(out, *, machine_id="m-alpha", started_at=T0, dram_b_per_s=50e9):
    """A CPU ceilings run: bandwidth per level from a sweep, FMA and BLAS compute ceilings."""
    run_id = new_run_id(started_at)
    sweep_points = [("L1", 16 << 10, 400e9), ("L2", 512 << 10, 200e9), ("DRAM", 1 << 30, 0)]
    ceiling = {
        "run_id": run_id,
        "dtype": "fp64",
        "cache_state": "warm",
        "threads": 8,
        "n_points": 1,
    }
    tables = {
        "runs": [_run_row(run_id, "ceilings", None, started_at, machine_id)],
        "conditions": _conditions(run_id, started_at, [3.2, 3.1]),
        "ceiling_sweep": [
            {
                "run_id": run_id,
                "kernel": "triad",
                "working_set_bytes": size,
                "threads": 8,
                "value": rate or dram_b_per_s,
                "unit": "B/s",
                "reps": 100,
                "n_windows": 5,
                "window_s": 0.05,
                "iqr_ratio": 0.01,
                "level": level,
            }
            for level, size, rate in sweep_points
        ],
        "ceilings": [
            {
                **ceiling,
                "kind": "bandwidth",
                "name": level,
                "kernel": "triad",
                "value": rate or dram_b_per_s,
                "unit": "B/s",
                "method": "best of 1 sweep point",
                "working_set_min_bytes": size,
                "working_set_max_bytes": size,
            }
            for level, size, rate in sweep_points
        ]
        + [
            {
                **ceiling,
                "kind": "compute",
                "name": "fp64_fma",
                "kernel": "fma_chains",
                "value": 1e12,
                "unit": "FLOP/s",
                "method": "independent SIMD FMA chains",
            }
        ],
        "samples": [
            {
                "run_id": run_id,
                "config_id": "blas/fp64/n1024",
                "cache_state": "warm",
                "sample_idx": i,
                "seconds": 2e-3,
                "clock_mhz": 3100.0,
            }
            for i in range(3)
        ],
    }
    return write_run(Path(out) / "ceilings" / "runs", run_id, tables)


def two_machines(results):
    """Ceilings and a GEMM sweep on each of two machines."""
    return [
        ceilings_run(results, machine_id="m-alpha"),
        gemm_run(results, machine_id="m-alpha", started_at=T0 + timedelta(hours=1)),
        ceilings_run(results, machine_id="m-beta", dram_b_per_s=80e9),
        gemm_run(results, machine_id="m-beta", started_at=T0 + timedelta(hours=2)),
    ]


def file_row_counts(run_dirs) -> dict[str, int]:
    counts = dict.fromkeys(MEASURED_TABLES, 0)
    for run_dir in run_dirs:
        for path in Path(run_dir).glob("*.parquet"):
            counts[path.stem] += pq.read_metadata(path).num_rows
    return counts


def store_row_counts(db, run_id=None) -> dict[str, int]:
    where = "" if run_id is None else f" WHERE run_id = '{run_id}'"
    with duckdb.connect(str(db), read_only=True) as connection:
        return {
            name: connection.execute(f"SELECT count(*) FROM {name}{where}").fetchone()[0]
            for name in MEASURED_TABLES
        }


def rows(db, sql) -> list[dict]:
    return query(db, sql).to_pylist()


def write_roofline_points(results, points: dict[str, int]) -> None:
    """roofline/roofline_points.parquet with `points[run_id]` rows for each run."""
    folder = results / "roofline"
    folder.mkdir(exist_ok=True)
    rows_ = [
        {
            "run_id": run_id,
            "config_id": f"decode/fp32/nn/m{i + 1}_n64_k64",
            "cache_state": "warm",
            "machine_id": "m-alpha",
            "level": "DRAM",
            "q_source": "model",
            "intensity": float(i + 1),
            "limiter": "memory",
        }
        for run_id, count in points.items()
        for i in range(count)
    ]
    pq.write_table(to_table("roofline_points", rows_), folder / "tmp.parquet")
    os.replace(folder / "tmp.parquet", folder / "roofline_points.parquet")
