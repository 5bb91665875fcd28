"""A store of many runs over many sweeps, cheaply: synthetic run folders as a CPU campaign keeps
them (one ceilings run; per sweep, `runs_per_sweep` GEMM runs of 3 shapes x 2 cache states with
their samples, checks and conditions), then the roofline step and ingest as the workflow runs
them. For benchmarks/report_many_runs.py and tests/test_report_scale.py.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from rooflab.records import write_run
from rooflab.roofline import analyse_results, write_analysis
from rooflab.store import ingest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.table_rows import runs_row

MACHINE_ID = "many-runs-machine"
SHAPES = (1, 8, 32)  # M; N = K = 256, fp64
CACHE_STATES = ("warm", "cold")
SAMPLES_PER_POINT = 12
STARTED = datetime(2026, 1, 1, 9, tzinfo=UTC)


def _run_row(run_id: str, kind: str, sweep: str | None, started: datetime) -> dict:
    return runs_row(
        run_id, kind, started, sweep, ended_at=started + timedelta(seconds=30), host="bench",
        machine_id=MACHINE_ID, backend="cpu", device_name="benchmark CPU", git_commit="0" * 40,
        git_dirty=False,
    )  # fmt: skip


def _ceilings_run(results: Path) -> None:
    run_id = "20260101T080000Z-ceilings"
    values = [("bandwidth", "DRAM", "triad", 20e9, "B/s"), ("compute", "fp64_fma", "fma", 50e9)]
    ceilings = [
        {
            "run_id": run_id,
            "kind": kind,
            "name": name,
            "kernel": kernel,
            "dtype": "fp64",
            "value": value,
            "unit": "B/s" if kind == "bandwidth" else "FLOP/s",
            "config_id": f"{kernel}/fp64",
        }
        for kind, name, kernel, value, *_ in values
    ]
    tables = {"runs": [_run_row(run_id, "ceilings", None, STARTED)], "ceilings": ceilings}
    write_run(results / "ceilings" / "runs", run_id, tables)


def _gemm_run(results: Path, sweep: str, index: int, started: datetime, rng) -> None:
    run_id = f"{started:%Y%m%dT%H%M%S}Z-{sweep}-{index:04d}"
    tables: dict[str, list[dict]] = {"runs": [_run_row(run_id, "gemm", sweep, started)]}
    tables |= {name: [] for name in ("timed_points", "samples", "correctness", "conditions")}
    for m in SHAPES:
        config_id = f"{sweep}/fp64/nn/m{m}_n256_k256"
        flops, q = 2 * m * 256 * 256, 8 * (m * 256 + 256 * 256 + m * 256)
        tables["correctness"].append(
            {"run_id": run_id, "config_id": config_id, "m": m, "n": 256, "k": 256,
             "metric": "max_rel_error", "error": 1e-15, "tolerance": 1e-12, "passed": True}
        )  # fmt: skip
        for phase in ("before", "after"):
            tables["conditions"].append(
                {"run_id": run_id, "t": started, "phase": phase, "config_id": config_id,
                 "cpu_ghz_measured": 3.0 + rng.normal(0, 0.01)}
            )  # fmt: skip
        for cache_state in CACHE_STATES:
            base = q / 10e9 * (1.0 if cache_state == "warm" else 1.5)
            seconds = base * rng.lognormal(0.0, 0.03, SAMPLES_PER_POINT)
            p25, median, p75 = np.quantile(seconds, [0.25, 0.5, 0.75])
            tables["timed_points"].append(
                {"run_id": run_id, "config_id": config_id, "kind": "gemm", "sweep": sweep, "m": m,
                 "n": 256, "k": 256, "dtype": "fp64", "layout": "nn", "cache_state": cache_state,
                 "n_samples": SAMPLES_PER_POINT, "median_s": median, "p25_s": p25,
                 "p75_s": p75, "flops": flops, "bytes_model": q,
                 "achieved_flops_per_s": flops / median, "noisy": False, "disturbed": False}
            )  # fmt: skip
            tables["samples"] += [
                {"run_id": run_id, "config_id": config_id, "cache_state": cache_state,
                 "sample_idx": i, "seconds": float(s), "clock_mhz": 3000.0,
                 "amount": float(flops), "amount_unit": "FLOP", "disturbed": False}
                for i, s in enumerate(seconds)
            ]  # fmt: skip
    write_run(results / "sweeps" / sweep / "runs", run_id, tables)


def write_many_runs(results: Path, n_runs: int, n_sweeps: int, seed: int = 0) -> None:
    """One ceilings run and `n_runs` GEMM runs spread evenly over `n_sweeps` sweeps, an hour
    apart, in turn across the sweeps (each sweep rerun n_runs / n_sweeps times)."""
    rng = np.random.default_rng(seed)
    _ceilings_run(results)
    for index in range(n_runs):
        sweep = f"sweep{index % n_sweeps:03d}"
        _gemm_run(results, sweep, index, STARTED + timedelta(hours=index + 1), rng)


def store_runs(results: Path) -> Path:
    """The roofline step and ingest over the runs under `results`, as the workflow runs them;
    the store's path."""
    write_analysis(analyse_results(results), results / "roofline")
    db = results / "rooflab.duckdb"
    ingest(db, results)
    return db


def build_many_runs_store(folder: Path, n_runs: int, n_sweeps: int) -> Path:
    """`folder`/results with the runs, the roofline step's tables and the store; its path."""
    results = folder / "results"
    write_many_runs(results, n_runs, n_sweeps)
    return store_runs(results)


# What the report promises whatever the store holds (docs/report.md): every PNG at most this many
# pixels on a side and this many bytes.
MAX_PNG_SIDE_PX = 4096
MAX_PNG_BYTES = 4_000_000


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's width and height in pixels, from its IHDR chunk."""
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR", path
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")
