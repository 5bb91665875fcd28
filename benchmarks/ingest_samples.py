"""Ingest of a GEMM run with 1,000,000 samples, against references measured in the same run.

    python benchmarks/ingest_samples.py [--samples 1000000] [--rounds 3]

Writes one realistic CPU GEMM run (runs, conditions, correctness, timed_points and a samples table
of `--samples` rows over 200 configurations × 2 cache states) to a temporary folder, then times,
best of `--rounds`, each on a fresh database file:
  - `rooflab.store.ingest` (read and check every file with pyarrow, one transaction, commit);
  - pyarrow reading the same files (the part of ingest that checks them);
  - DuckDB loading the same files itself (`CREATE TABLE AS SELECT * FROM read_parquet`), the
    floor for getting these rows into a DuckDB file;
and prints ingest / reference for both, and a no-op second ingest. Target: ingest under 5 s.
Exit status 1 if it is missed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from smoke import add_smoke, best_of, verdict

from rooflab.records import TABLES, new_run_id, write_run
from rooflab.store import ingest
from tests.table_rows import runs_row

TARGET_S = 5.0
N_CONFIGS = 200
CACHE_STATES = ("warm", "cold")


def write_gemm_run(results: Path, n_samples: int) -> Path:
    """One run folder as a CPU GEMM sweep writes it; samples built column-wise (fast setup)."""
    started = datetime(2025, 3, 1, 9, tzinfo=UTC)
    run_id = new_run_id(started)
    config_ids = [f"decode/bf16/nn/m{m}_n4096_k4096" for m in range(1, N_CONFIGS + 1)]
    run = runs_row(
        run_id,
        "gemm",
        started,
        "decode",
        ended_at=started + timedelta(hours=1),
        host="bench",
        machine_id="bench-machine",
        backend="cpu",
        device_name="benchmark CPU",
        git_commit="0" * 40,
        git_dirty=False,
    )
    tables: dict[str, list[dict]] = {"runs": [run]}  # and the samples, replaced below
    tables |= {name: [] for name in ("conditions", "correctness", "timed_points", "samples")}
    # the columns each table's rows share; `point` and `shape` those of one configuration
    checked = {"metric": "max_rel_error", "error": 1e-3, "tolerance": 1e-2, "passed": True}
    measured = {"t": started, "cpu_ghz_measured": 3.0}
    timed = {"kind": "gemm", "sweep": "decode", "dtype": "bf16", "layout": "nn", "noisy": False}
    timed |= {"median_s": 1e-4, "n_samples": n_samples // (N_CONFIGS * len(CACHE_STATES))}
    for m, config_id in enumerate(config_ids, start=1):
        point = {"run_id": run_id, "config_id": config_id}
        shape = {"m": m, "n": 4096, "k": 4096}
        tables["correctness"].append({**point, **shape, **checked})
        for cache_state in CACHE_STATES:
            tables["conditions"] += [{**point, **measured, "phase": p} for p in ("before", "after")]
            tables["timed_points"].append({**point, **shape, **timed, "cache_state": cache_state})
    run_dir = write_run(results / "gemm" / "decode" / "runs", run_id, tables)

    rng = np.random.default_rng(0)
    groups = N_CONFIGS * len(CACHE_STATES)
    group = np.arange(n_samples) % groups
    labels = pa.array(config_ids)
    columns = {
        "run_id": pa.repeat(run_id, n_samples),
        "config_id": labels.take(pa.array(group // len(CACHE_STATES))),
        "cache_state": pa.array(CACHE_STATES).take(pa.array(group % len(CACHE_STATES))),
        "sample_idx": np.arange(n_samples, dtype=np.int64) // groups,
        "seconds": rng.lognormal(np.log(1e-4), 0.05, n_samples),
        "clock_mhz": rng.normal(3000.0, 20.0, n_samples),
        "amount": 2.0 * (group // len(CACHE_STATES) + 1) * 4096 * 4096,  # 2MNK, m = index + 1
        "amount_unit": pa.repeat("FLOP", n_samples),
        # what a real run records beside each sample: mostly no wait, a few disturbed
        "wait_s": rng.exponential(1e-7, n_samples),
        "cpu_s": rng.lognormal(np.log(1e-4), 0.05, n_samples),
        "involuntary_switches": rng.poisson(0.01, n_samples).astype(np.int64),
        "disturbed": rng.random(n_samples) < 0.01,
    }
    # a column the samples table gained since (`round`: one round here) is null, as in an older run
    schema = TABLES["samples"]
    samples = pa.table(
        {f.name: columns.get(f.name, pa.nulls(n_samples, f.type)) for f in schema}, schema=schema
    )
    pq.write_table(samples, run_dir / "samples.parquet")  # as write_run writes it
    return run_dir


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.samples, args.rounds = 10_000, 1

    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "results"
        run_dir = write_gemm_run(results, args.samples)
        files = sorted(run_dir.glob("*.parquet"))
        size_mib = sum(p.stat().st_size for p in files) / 2**20
        databases = iter(range(10**6))

        def fresh_db() -> Path:
            return Path(folder) / f"store-{next(databases)}.duckdb"

        def run_ingest() -> None:
            report = ingest(fresh_db(), results)
            assert report.rows_added["samples"] == args.samples

        def read_with_pyarrow() -> None:
            for path in files:
                pq.read_table(path)

        def load_with_duckdb() -> None:
            with duckdb.connect(str(fresh_db())) as connection:
                for path in files:
                    connection.execute(
                        f"CREATE TABLE {path.stem} AS SELECT * FROM read_parquet('{path}')"
                    )

        ingest_s = best_of(args.rounds, run_ingest)
        pyarrow_s = best_of(args.rounds, read_with_pyarrow)
        duckdb_s = best_of(args.rounds, load_with_duckdb)
        db = fresh_db()
        ingest(db, results)
        noop_s = best_of(args.rounds, lambda: ingest(db, results))

    print(f"run: {args.samples:,} samples, {len(files)} Parquet files, {size_mib:.1f} MiB")
    print(f"{'ingest':34}{ingest_s:7.3f} s  ({args.samples / ingest_s:,.0f} rows/s)")
    for name, seconds in (
        ("pyarrow read of the files", pyarrow_s),
        ("DuckDB read_parquet into a file", duckdb_s),
    ):
        print(f"{name:34}{seconds:7.3f} s  ingest / this = {ingest_s / seconds:.2f}")
    print(f"{'no-op ingest (run already in)':34}{noop_s:7.3f} s")
    met = ingest_s < TARGET_S
    print(f"target: ingest under {TARGET_S:g} s")
    return verdict(met, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
