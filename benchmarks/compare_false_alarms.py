"""How often does `rooflab compare` cry wolf, and does it see a run slowed on purpose?

    python benchmarks/compare_false_alarms.py [--runs 8] [--min-effect 0.05]

Runs the same GEMM sweep (the default campaign's fp32 and fp64 weight reuse, M = 1 to 1024 at
N = K = 1024, warm and cold, with the default campaign's timing) `--runs` times in a row on a
quiet machine, each run ingested into a fresh store, and compares every run with the one before
it at the default settings (`rooflab.store.comparisons.compare_runs`): every `slower` or
`faster` of the samples (`samples_verdict`, also where the verdict is inconclusive) among these
identical reruns is a false alarm. The pairs whose candidate has three earlier runs
(`rooflab.comparison.MIN_HISTORY`: the key's run-to-run spread is known and raises the effect a
verdict needs) are counted apart from the first pairs, whose verdicts are provisional (a
`slower` there is inconclusive: `rooflab compare --fail-on regression` does not fail on it). A
`same` or `inconclusive` of the samples is no alarm; an inconclusive one (an interval that
holds both no change and the effect) makes `--fail-on regression` exit 3, and each pair
of runs says what it would exit with. Then one more run with as many busy-loop processes as the
machine has CPUs spinning through it (a neighbour taking the machine), compared with the last
quiet run: each point it made slower by more than the minimum effect should read `slower` or be
flagged `disturbed` (conditions_changed says so).

Prints the verdicts per pair, the false-alarm rates, the inconclusive verdicts of the samples
and what the loaded run got. Run it with nothing else running: the quiet runs must be quiet.
Exit status 1 when a quiet pair with a known spread read `slower` (what --fail-on regression
would fail on).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import yaml
from smoke import add_smoke, verdict

from rooflab.backends.cpu import CpuBackend
from rooflab.comparison import MIN_HISTORY
from rooflab.config import validate_config
from rooflab.experiments.gemm import run_gemm_sweep
from rooflab.experiments.timing import TimingSettings
from rooflab.records import write_run
from rooflab.store import connect_read_only, ingest
from rooflab.store.comparisons import compare_runs

REPO = Path(__file__).resolve().parents[1]
SWEEP = {
    "m": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
    "n": [1024],
    "k": [1024],
    "dtypes": ["fp32", "fp64"],
    "layouts": ["nn"],
    "cache_states": ["warm", "cold"],
    "seed": 0,
}
# The default campaign's timing (config/config.yaml, defaults filled in).
_CONFIG = validate_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
TIMING = TimingSettings.from_config(_CONFIG["timing"], _CONFIG["disturbance"])


@contextlib.contextmanager
def busy_loops(count: int):
    processes = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.5)
        yield
    finally:
        for process in processes:
            process.kill()
            process.wait()


def one_run(backend: CpuBackend, results: Path, db: Path, sweep: dict, timing) -> str:
    tables = run_gemm_sweep(backend, "weight_reuse", sweep, timing)
    run_id = tables["runs"][0]["run_id"]
    write_run(results / "runs", run_id, tables)
    ingest(db, results)
    return run_id


def verdicts(db: Path, baseline: str, candidate: str, min_effect: float) -> list[dict]:
    with connect_read_only(db) as connection:
        return compare_runs(connection, baseline, candidate, min_effect=min_effect)


def fail_on_regression(rows: list[dict]) -> int:
    """What `rooflab compare --fail-on regression` exits with on these pairs (cli/compare.py):
    1 on a confirmed `slower`, else 3 on an inconclusive one, else 0."""
    if any(r["verdict"] == "slower" for r in rows):
        return 1
    return 3 if any(r["verdict"] == "inconclusive" for r in rows) else 0


def _line(row: dict) -> str:
    nan = float("nan")
    return (
        f"{row['key']:<44} ratio {row['ratio'] or nan:.3f} [{row['ci_low'] or nan:.3f}, "
        f"{row['ci_high'] or nan:.3f}] needs {row['effect'] or nan:.0%} {row['verdict']:<7} "
        f"{row['conditions_changed'] or ''}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="identical quiet runs (default 8)")
    parser.add_argument("--min-effect", type=float, default=0.05)
    add_smoke(parser)
    args = parser.parse_args()
    sweep, timing = SWEEP, TIMING
    if args.smoke:  # two quiet runs and the loaded one, of two small points, short floors
        args.runs, sweep = 2, {**SWEEP, "m": [1, 16], "n": [64], "k": [64]}
        quick = {"warmup_s": 0.01, "min_time_s": 0.02, "min_samples": 3, "max_time_s": 0.1}
        quiet = replace(TIMING.disturbance, quiet_wait_s=1.0)  # the loaded run's wait for quiet
        timing = replace(TIMING, **quick, disturbance=quiet)
    backend = CpuBackend()
    with tempfile.TemporaryDirectory(prefix="rooflab-compare-") as folder:
        results, db = Path(folder) / "results", Path(folder) / "store.duckdb"
        runs = []
        started = time.perf_counter()
        for index in range(args.runs):
            runs.append(one_run(backend, results, db, sweep, timing))
            print(f"quiet run {index + 1}/{args.runs}: {runs[-1]}", flush=True)
        quiet_s = time.perf_counter() - started
        # pairs whose candidate has MIN_HISTORY earlier runs (the run-to-run spread known), and
        # the first pairs, judged on the minimum effect alone
        tally: collections.Counter = collections.Counter()
        first: collections.Counter = collections.Counter()
        alarms_here: list[dict] = []
        unsure_here: list[dict] = []
        exits = {"history": collections.Counter(), "first": collections.Counter()}
        print(
            "\npair                                              slower faster same incomparable "
            "inconclusive exit"
        )
        for baseline, candidate in itertools.pairwise(runs):
            rows = verdicts(db, baseline, candidate, args.min_effect)
            counts = collections.Counter(r["samples_verdict"] for r in rows)
            earlier = runs.index(candidate)  # runs of each key before the candidate
            assert all(r["provisional"] == (earlier < MIN_HISTORY) for r in rows), "provisional"
            (tally if earlier >= MIN_HISTORY else first).update(counts)
            alarms_here.extend(r for r in rows if r["samples_verdict"] in ("slower", "faster"))
            unsure_here.extend(r for r in rows if r["samples_verdict"] == "inconclusive")
            status = fail_on_regression(rows)
            exits["history" if earlier >= MIN_HISTORY else "first"][status] += 1
            print(
                f"{baseline} → {candidate[-8:]}  {counts['slower']:6} {counts['faster']:6} "
                f"{counts['same']:4} {counts['incomparable']:12} {counts['inconclusive']:12} "
                f"{status:4}"
            )
        for label, counts in (
            (f"with >= {MIN_HISTORY} earlier runs", tally),
            (f"with fewer than {MIN_HISTORY} earlier runs (provisional)", first),
        ):
            pairs = sum(counts.values())
            alarms = counts["slower"] + counts["faster"]
            print(
                f"quiet pairs {label}: {pairs} comparisons; slower {counts['slower']}, faster "
                f"{counts['faster']}: false-alarm rate {alarms / max(pairs, 1):.2%}; same "
                f"{counts['same']}, inconclusive by the samples {counts['inconclusive']} "
                f"({counts['inconclusive'] / max(pairs, 1):.2%})"
            )
        for label, statuses in exits.items():
            print(
                f"--fail-on regression on the pairs of runs ({label}): "
                + (", ".join(f"exit {code} {n}x" for code, n in sorted(statuses.items())) or "none")
            )
        print(
            f"({args.runs} quiet runs of {len(rows)} points in {quiet_s:.0f} s, minimum effect "
            f"{args.min_effect:.0%})"
        )
        for row in alarms_here:
            print(f"  alarm: {_line(row)}")
        for row in unsure_here:
            print(f"  inconclusive: {_line(row)} {row['note']}")
        cpus = len(os.sched_getaffinity(0))
        with busy_loops(cpus):
            loaded = one_run(backend, results, db, sweep, timing)
        rows = verdicts(db, runs[-1], loaded, args.min_effect)
        disturbed = [r for r in rows if "disturbed" in (r["conditions_changed"] or "")]
        slower = [r for r in rows if r["samples_verdict"] == "slower"]
        moved = [r for r in rows if r["ratio"] and r["ratio"] >= 1 + args.min_effect]
        caught = [r for r in moved if r in slower or r in disturbed]
        print(
            f"\nrun under {cpus} busy loop(s): {len(rows)} points; {len(slower)} slower, "
            f"{len(disturbed)} with 'disturbed' among what changed; of the {len(moved)} it made "
            f">= {1 + args.min_effect:.2f}x slower, {len(caught)} flagged"
        )
        for row in rows:
            print(f"  {_line(row)}")
    return verdict(not tally["slower"], args.smoke)  # a false slower, the key's spread known


if __name__ == "__main__":
    sys.exit(main())
