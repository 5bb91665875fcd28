"""Does the disturbed flag catch what a shared machine does to a measurement, and only that?

    python benchmarks/disturbance_under_load.py [--rounds 2]

Times one GEMM sweep (fp32, the issue's m 16/64/127/256 and a few more, n 1000, k 999, warm and
cold) and the CPU ceiling windows (FMA fp64, triad at an L2-sized and a DRAM-sized working set),
first on a quiet machine (the reference, run twice: the second run counts how often the flag fires
with nothing to see), then under each deliberate load, `--rounds` times:

- busy:      one process spinning in a busy loop (the issue's "another program used one core");
- memcpy:    one process copying 256 MiB arrays in a loop (caches and memory bandwidth);
- on-off:    one process spinning 30 ms, then sleeping 70 ms (a transient, retakes should cope).

For every measurement it prints how many were over 2x their quiet median (or under half the quiet
rate, for ceilings), how many of those were flagged `disturbed`, and how many were flagged in all.
Goal: every measurement over 2x is flagged; on the quiet machine few are. Run it with nothing else
running: the quiet reference must be quiet. Exit status 1 when a 2x measurement went unflagged.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import time
from dataclasses import replace

from smoke import add_smoke, verdict

from rooflab.backends.cpu import CpuBackend
from rooflab.conditions.disturbance import DisturbanceSettings, other_cpus_now
from rooflab.experiments.ceiling_windows import time_workload
from rooflab.experiments.gemm import run_gemm_sweep
from rooflab.experiments.stopping import StoppingRule
from rooflab.experiments.timing import TimingSettings

SWEEP = {
    "m": [1, 16, 64, 127, 256, 512],
    "n": [1000],
    "k": [999],
    "dtypes": ["fp32"],
    "layouts": ["nn"],
    "cache_states": ["warm", "cold"],
    "seed": 0,
}
TIMING = TimingSettings(warmup_s=0.1, min_time_s=0.3, min_samples=10)
LOADS = {
    "busy": "while True: pass",
    "memcpy": (
        "import numpy as np\n"
        "a = np.ones(2**25); b = np.empty_like(a)\n"
        "while True: np.copyto(b, a); np.copyto(a, b)"
    ),
    "on-off": (
        "import time\n"
        "while True:\n"
        "    end = time.perf_counter() + 0.03\n"
        "    while time.perf_counter() < end: pass\n"
        "    time.sleep(0.07)"
    ),
}


@contextlib.contextmanager
def load(name: str | None):
    if name is None:
        yield
        return
    process = subprocess.Popen([sys.executable, "-c", LOADS[name]])
    try:
        time.sleep(0.5)  # running (and, for memcpy, its arrays touched) before we measure
        yield
    finally:
        process.kill()
        process.wait()


def measure_all(
    backend: CpuBackend, settings: TimingSettings, sweep: dict, dram_bytes: int
) -> dict[str, tuple[float, bool]]:
    """measurement -> (time in s, or 1/rate for ceilings, so bigger is slower; disturbed); the
    memory's triad over `dram_bytes`."""
    results = {}
    tables = run_gemm_sweep(backend, "load", sweep, settings)
    for point in tables["timed_points"]:
        key = f"gemm m{point['m']} {point['cache_state']}"
        results[key] = (point["median_s"], point["disturbed"])
    threads = backend.default_threads()
    caches = backend.cache_bytes_by_level()
    workloads = {
        "fma fp64": backend.fma_workload("fp64", threads),
        "triad L2": backend.stream_workload("triad", caches.get("L2", 1 << 20) // 2, threads),
        "triad DRAM": backend.stream_workload("triad", dram_bytes, threads),
    }
    for name, workload in workloads.items():
        windows = time_workload(
            backend, workload, 0.05, StoppingRule(min_samples=5), settings.disturbance
        )
        results[name] = (1 / windows.median_rate(), windows.verdict.disturbed)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    add_smoke(parser)
    args = parser.parse_args()
    backend = CpuBackend()
    sweep, timing = SWEEP, TIMING
    dram_bytes = 8 * sum(backend.cache_bytes_by_level().values())
    loads = list(LOADS)
    if args.smoke:  # one round of one load, two small points, short floors, triad on 64 MiB
        args.rounds, loads = 1, loads[:1]
        sweep = {**SWEEP, "m": [1, 16], "n": [64], "k": [64]}
        timing = replace(TIMING, warmup_s=0.01, min_time_s=0.02, min_samples=3, max_time_s=0.1)
        dram_bytes = 64 << 20
    other = other_cpus_now(1.0)
    print(f"before: other processes used {other:.2f} CPUs (the quiet reference needs ~0)")
    # No waiting for quiet under a deliberate load: the load is the point.
    loaded = replace(timing, disturbance=DisturbanceSettings(quiet_wait_s=0))
    reference = measure_all(backend, timing, sweep, dram_bytes)
    quiet_again = measure_all(backend, timing, sweep, dram_bytes)
    rows = [("quiet", 1, quiet_again)]
    for round_ in range(args.rounds):
        for name in loads:
            with load(name):
                rows.append((name, round_ + 1, measure_all(backend, loaded, sweep, dram_bytes)))

    print(f"\nquiet reference: {sum(d for _, d in reference.values())} of {len(reference)} flagged")
    header = f"{'condition':<8} {'round':>5} {'n':>3} {'>2x':>4} {'>2x flagged':>11} {'flagged':>7}"
    print(header + "  slowest (time / quiet time)")
    missed = 0
    for condition, round_, results in rows:
        ratios = {key: value / reference[key][0] for key, (value, _) in results.items()}
        over = [key for key, ratio in ratios.items() if ratio > 2]
        over_flagged = [key for key in over if results[key][1]]
        flagged = sum(disturbed for _, disturbed in results.values())
        missed += len(over) - len(over_flagged)
        slowest = max(ratios, key=ratios.get)
        print(
            f"{condition:<8} {round_:>5} {len(results):>3} {len(over):>4} "
            f"{len(over_flagged):>11} {flagged:>7}  {slowest} {ratios[slowest]:.2f}x"
        )
        for key in sorted(set(over) - set(over_flagged)):
            print(f"         unflagged over 2x: {key} {ratios[key]:.2f}x")
    spread = [v / reference[k][0] for k, (v, _) in quiet_again.items()]
    print(
        f"\nquiet rerun / reference: median {statistics.median(spread):.3f}x, "
        f"max {max(spread):.2f}x"
    )
    print("every measurement over 2x flagged" if not missed else f"{missed} over 2x NOT flagged")
    return verdict(not missed, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
