"""rooflab's CPU ceilings against likwid-bench and a compiled C reference, per vector instruction
path, measured in the same run.

    python benchmarks/cpu_ceilings_vs_c.py [--rounds 2] [--window-s 0.05] [--no-likwid]

Runs rooflab's own ceiling pipeline (triad sweep, FMA chains on every path this CPU has, the BLAS
GEMMs, as `rooflab measure ceilings` does) and, for each path rooflab builds (AVX-512, AVX2):
- the C program benchmarks/c_reference/stream_fma.c built for that width (`gcc -O3
  -march=native -fopenmp`, with `-DVEC_BYTES=64 -mprefer-vector-width=512` for AVX-512 and
  `-DVEC_BYTES=32 -mno-avx512f` for AVX2), on the same working sets with the same passes;
- likwid-bench (Debian's `likwid`) where installed: peakflops[_sp]_avx_fma /
  peakflops[_sp]_avx512_fma and stream_avx_fma / stream_avx512_fma, pinned by likwid, at the
  working set of rooflab's best plateau point of each level;
alternating rooflab and the peers `--rounds` times and keeping each side's best. Prints rooflab /
best peer per ceiling against the targets (a dtype's FMA roof against the peers' widest path; its
narrower paths against the peers of that path): FMA >= 95 %, triad >= 90 % at L1 and >= 95 % at
L2, L3 and DRAM; and that no BLAS ceiling stands above its dtype's FMA roof. Exit status 1 if one
is missed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from smoke import add_smoke, verdict

from rooflab.backends.cpu import CpuBackend
from rooflab.experiments.ceiling_plan import QUICK, CeilingSettings
from rooflab.experiments.ceiling_windows import units_for_window
from rooflab.experiments.ceilings import run_ceilings

SOURCE = Path(__file__).resolve().parent / "c_reference" / "stream_fma.c"
LEVELS = ("L1", "L2", "L3", "DRAM")
TARGETS = {"L1": 0.90, "L2": 0.95, "L3": 0.95, "DRAM": 0.95, "fma": 0.95}
C_FLAGS = {
    "avx512": ["-DVEC_BYTES=64", "-mprefer-vector-width=512"],
    "avx2": ["-DVEC_BYTES=32", "-mno-avx512f"],
}
LIKWID = {
    "avx512": {"fp64": "peakflops_avx512_fma", "fp32": "peakflops_sp_avx512_fma"},
    "avx2": {"fp64": "peakflops_avx_fma", "fp32": "peakflops_sp_avx_fma"},
}
LIKWID_TRIAD = {"avx512": "stream_avx512_fma", "avx2": "stream_avx_fma"}
LIKWID_FMA_SET = "24kB"  # in L1, as likwid's own peakflops examples


def compile_reference(folder: Path, isa: str) -> Path:
    binary = folder / f"stream_fma_{isa}"
    command = ["gcc", "-O3", "-march=native", "-fopenmp", *C_FLAGS[isa], str(SOURCE)]
    subprocess.run([*command, "-o", str(binary)], check=True)
    return binary


def run_reference(binary: Path, threads: int, *args: object) -> tuple[float, int, float]:
    """(seconds of one timed call, elements per array, FLOPs) from the C program."""
    result = subprocess.run(
        [str(binary), *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "true"},
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


def likwid(test: str, working_set: str, threads: int, smoke: bool = False) -> float:
    """likwid-bench's rate (FLOP/s for peakflops, B/s for stream) of one run (its default
    minimum of 1 s: with `-s 0.5` its iteration count came out far too small here, at a sixth to
    a half of its own rate; `smoke`: 10 iterations, its rate not judged)."""
    iterations = ["-i", "10"] if smoke else []
    result = subprocess.run(
        ["likwid-bench", "-t", test, "-W", f"N:{working_set}:{threads}", *iterations],
        capture_output=True,
        text=True,
        check=True,
    )
    unit = "MByte/s" if test.startswith("stream") else "MFlops/s"
    match = re.search(rf"^{re.escape(unit)}:\s+([\d.]+)", result.stdout, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"likwid-bench -t {test}: no {unit} in its output:\n{result.stdout}")
    return float(match.group(1)) * 1e6


def best_points(tables: dict) -> dict[str, int]:
    """Each level's working set of rooflab's best plateau point."""
    return {
        row["name"]: int(row["config_id"].rsplit("/ws", 1)[1])
        for row in tables["ceilings"]
        if row["kind"] == "bandwidth" and row["name"] in LEVELS
    }


def peers_round(backend, binaries, tables, settings, use_likwid, smoke=False):
    """The peers' figures, keyed `<source>/<isa>/<ceiling>` (ceiling: a level, fp64, fp32): the
    C triad at every point of a level's sweep, median of 3 windows (`smoke`: once, at rooflab's
    best point of the level)."""
    threads = backend.default_threads()
    theirs = {}
    sizes = best_points(tables)
    for isa, binary in binaries.items():
        for level in LEVELS:
            points = [
                p
                for p in tables["ceiling_sweep"]
                if p["level"] == level and (not smoke or p["working_set_bytes"] == sizes[level])
            ] or [p for p in tables["ceiling_sweep"] if p["level"] == level]
            theirs[f"C/{isa}/{level}"] = max(
                reference_triad(
                    binary, threads, p["working_set_bytes"], p["reps"], 1 if smoke else 3
                )
                for p in points
            )
            if use_likwid:
                size = f"{max(1, round(sizes[level] / 1000))}kB"
                theirs[f"likwid/{isa}/{level}"] = likwid(LIKWID_TRIAD[isa], size, threads, smoke)
        for dtype in settings.fma_dtypes:
            theirs[f"C/{isa}/{dtype}"] = reference_fma(
                binary, threads, dtype, settings.window_s, settings.windows
            )
            if use_likwid:
                theirs[f"likwid/{isa}/{dtype}"] = likwid(
                    LIKWID[isa][dtype], LIKWID_FMA_SET, threads, smoke
                )
    return theirs


def comparisons(isas: tuple[str, ...], dtypes: tuple[str, ...]) -> list[tuple[str, ...]]:
    """(rooflab's ceiling, the peers' isa, their ceiling, target key) rows to print: a level
    against the best peer of any width, an FMA path against the peers of its width."""
    rows = [(level, "*", level, level) for level in LEVELS]
    for dtype in dtypes:
        for index, isa in enumerate(isas):
            ours = f"{dtype}_fma" if index == 0 else f"{dtype}_fma_{isa}"
            rows.append((ours, isa, dtype, "fma"))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--window-s", type=float, default=CeilingSettings.window_s)
    parser.add_argument("--no-likwid", action="store_true", help="C reference only")
    add_smoke(parser)
    args = parser.parse_args()
    use_likwid = not args.no_likwid and shutil.which("likwid-bench") is not None
    if not args.no_likwid and not use_likwid:
        print("likwid-bench not found (apt-get install likwid): C reference only", file=sys.stderr)
    backend = CpuBackend()
    isas = tuple(isa for isa in backend.fma_isas() if isa in C_FLAGS)
    settings = CeilingSettings(kernels=("triad",), window_s=args.window_s)
    if args.smoke:  # one round of the --quick ceilings (2 points an octave, a 1024^3 BLAS GEMM)
        args.rounds, settings = 1, replace(QUICK, kernels=("triad",))
    best_ours: dict[str, float] = {}
    best_theirs: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        binaries = {isa: compile_reference(Path(folder), isa) for isa in isas}
        for index in range(args.rounds):
            tables = run_ceilings(backend, settings)
            ours: dict[str, float] = {}  # a level's best kernel (triad, triad_avx2)
            for row in tables["ceilings"]:
                ours[row["name"]] = max(ours.get(row["name"], 0.0), row["value"])
            theirs = peers_round(backend, binaries, tables, settings, use_likwid, args.smoke)
            print(
                f"round {index + 1}: "
                + ", ".join(f"{name} {value / 1e9:.1f}" for name, value in sorted(ours.items()))
                + " | "
                + ", ".join(f"{name} {value / 1e9:.1f}" for name, value in sorted(theirs.items())),
                file=sys.stderr,
            )
            for table, new in ((best_ours, ours), (best_theirs, theirs)):
                for name, value in new.items():
                    table[name] = max(table.get(name, 0.0), value)
    conditions = backend.read_conditions("after")
    ghz = conditions["cpu_ghz_measured"]  # None when every run of the clock probe was preempted
    clock = f"{ghz:.2f} GHz (measured)" if ghz is not None else "not measured (preempted)"
    print(
        f"machine: {backend.identity['cpu_model']}, {backend.default_threads()} threads, "
        f"paths {', '.join(isas)}, clock {clock}, load {conditions['load_avg_1m']:.2f}"
    )
    print(f"{'ceiling':<16} {'rooflab':>10} {'best peer':>10}  {'peer':<24} {'ratio':>6} target")
    missed = []
    for ours, isa, ceiling, target_key in comparisons(isas, settings.fma_dtypes):
        peers = {
            key: value
            for key, value in best_theirs.items()
            if key.split("/")[2] == ceiling and isa in ("*", key.split("/")[1])
        }
        peer, theirs = max(peers.items(), key=lambda item: item[1])
        ratio, target = best_ours[ours] / theirs, TARGETS[target_key]
        unit = "GB/s" if ceiling in LEVELS else "GFLOP/s"
        print(
            f"{ours:<16} {best_ours[ours] / 1e9:>10.1f} {theirs / 1e9:>10.1f}  "
            f"{peer:<24} {ratio:>6.3f} {target:.2f} {unit} {'ok' if ratio >= target else 'MISSED'}"
        )
        if ratio < target:
            missed.append(ours)
    for dtype in settings.blas_dtypes:
        blas, fma = best_ours[f"{dtype}_blas"], best_ours[f"{dtype}_fma"]
        judged = "ok" if blas <= fma else "MISSED (roof beaten)"
        print(f"{dtype}_blas {blas / 1e9:.1f} <= {dtype}_fma {fma / 1e9:.1f} GFLOP/s: {judged}")
        if blas > fma:
            missed.append(f"{dtype}_blas")
    return verdict(not missed, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
