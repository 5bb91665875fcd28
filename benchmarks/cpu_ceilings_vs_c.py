"""rooflab's CPU ceilings against a compiled C reference measured in the same run.

    python benchmarks/cpu_ceilings_vs_c.py [--rounds 2] [--window-s 0.05]

Runs rooflab's own ceiling pipeline (triad sweep + FMA chains, as `rooflab measure ceilings` does)
and the C program in benchmarks/c_reference/stream_fma.c (gcc -O3 -march=native -fopenmp) on the
same working sets with the same passes per window, derives each level's ceiling the same way
(best plateau point, each point the median of its windows), alternates the two `--rounds` times
and keeps each side's best, then prints rooflab / C per level and path against the targets:
FMA >= 95 % (fp64, fp32), triad >= 90 % at L1, L2, L3 and DRAM. Exit status 1 if one is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rooflab.backends.cpu import CpuBackend
from rooflab.experiments.ceiling_plan import CeilingSettings
from rooflab.experiments.ceiling_windows import units_for_window
from rooflab.experiments.ceilings import run_ceilings

SOURCE = Path(__file__).resolve().parent / "c_reference" / "stream_fma.c"
TARGETS = {"L1": 0.90, "L2": 0.90, "L3": 0.90, "DRAM": 0.90, "fp64_fma": 0.95, "fp32_fma": 0.95}


def compile_reference(folder: Path) -> Path:
    binary = folder / "stream_fma"
    subprocess.run(
        ["gcc", "-O3", "-march=native", "-fopenmp", str(SOURCE), "-o", str(binary)], check=True
    )
    return binary


def run_reference(binary: Path, threads: int, *args: object) -> tuple[float, int, float]:
    """(seconds of one timed call, elements per array, FLOPs) from the C program."""
    result = subprocess.run(
        [str(binary), *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": str(threads)},
    )
    words = result.stderr.split()  # elements N flops F checksum X
    return float(result.stdout), int(words[1]), float(words[3])


def reference_triad(binary, threads, working_set, reps, windows) -> float:
    rates = []
    for _ in range(windows):
        seconds, elements, _ = run_reference(binary, threads, "triad", working_set, reps)
        rates.append(reps * elements * 24 / seconds)
    return statistics.median(rates)


def reference_fma(binary, threads, dtype, window_s, windows) -> float:
    command = f"fma{dtype[2:]}"
    iters = units_for_window(lambda n: run_reference(binary, threads, command, n)[0], window_s)
    rates = []
    for _ in range(windows):
        seconds, _, flops = run_reference(binary, threads, command, iters)
        rates.append(flops / seconds)
    return statistics.median(rates)


def one_round(backend, binary, settings) -> tuple[dict, dict]:
    tables = run_ceilings(backend, settings)
    ours = {row["name"]: row["value"] for row in tables["ceilings"]}
    threads = tables["ceilings"][0]["threads"]
    theirs = {}
    for level in ("L1", "L2", "L3", "DRAM"):
        points = [p for p in tables["ceiling_sweep"] if p["level"] == level]
        theirs[level] = max(
            reference_triad(binary, threads, p["working_set_bytes"], p["reps"], settings.windows)
            for p in points
        )
    for dtype in settings.fma_dtypes:
        theirs[f"{dtype}_fma"] = reference_fma(
            binary, threads, dtype, settings.window_s, settings.windows
        )
    return ours, theirs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--window-s", type=float, default=CeilingSettings.window_s)
    args = parser.parse_args()
    backend = CpuBackend()
    settings = CeilingSettings(kernels=("triad",), blas_dtypes=(), window_s=args.window_s)
    best_ours: dict[str, float] = {}
    best_theirs: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        binary = compile_reference(Path(folder))
        for index in range(args.rounds):
            ours, theirs = one_round(backend, binary, settings)
            print(
                f"round {index + 1}: "
                + ", ".join(
                    f"{name} {ours[name] / 1e9:.1f}/{theirs[name] / 1e9:.1f}" for name in TARGETS
                ),
                file=sys.stderr,
            )
            for name in TARGETS:
                best_ours[name] = max(best_ours.get(name, 0), ours[name])
                best_theirs[name] = max(best_theirs.get(name, 0), theirs[name])
    conditions = backend.read_conditions("after")
    print(
        f"machine: {backend.identity['cpu_model']}, {backend.default_threads()} threads, "
        f"clock {conditions['cpu_ghz_measured']:.2f} GHz (measured), "
        f"load {conditions['load_avg_1m']:.2f}"
    )
    print(f"{'ceiling':<10} {'rooflab':>17} {'C reference':>17} {'ratio':>7} {'target':>7}")
    missed = []
    for name, target in TARGETS.items():
        unit = "GB/s" if name in ("L1", "L2", "L3", "DRAM") else "GFLOP/s"
        ratio = best_ours[name] / best_theirs[name]
        verdict = "ok" if ratio >= target else "MISSED"
        if ratio < target:
            missed.append(name)
        print(
            f"{name:<10} {best_ours[name] / 1e9:>9.1f} {unit:<7} "
            f"{best_theirs[name] / 1e9:>9.1f} {unit:<7} {ratio:>7.3f} {target:>7.2f} {verdict}"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
