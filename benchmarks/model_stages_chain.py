"""How `rooflab model stages` scales: a chain of 100,000 stages against one of 10,000.

    python benchmarks/model_stages_chain.py [--rounds 3] [--command]

Times, best of `--rounds`, `rooflab.model.stage_bounds` (topological order, start and finish
times, critical path, aggregate) on a chain where each stage runs after the one before it, listed
first-first and last-first, and prints 100,000 / 10,000. Linear work gives about 10x; a quadratic
step (a membership test in a list) gives about 100x. A reference measured in the same run, one
dict of the stages by name and one pass over their dependencies, shows what linear costs here.
`--command` also times the whole `rooflab model stages FILE --format json` on the same chains
written as YAML (reading the YAML and checking it against the schema dominate; about a minute).
Exit status 1 if a ratio is over 30.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from rooflab.model import Stage, stage_bounds

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from smoke import add_smoke, best_of, verdict

from tests.conftest import installed_script

SIZES = (10_000, 100_000)
LIMIT = 30.0
PEAK, BANDWIDTH = 120e12, 2e12


def chain(n: int) -> list[Stage]:
    return [Stage(f"s{i}", 1e6, 2e6, (f"s{i - 1}",) if i else ()) for i in range(n)]


def reference(stages: list[Stage]) -> int:
    by_name = {s.name: s for s in stages}
    return sum(len(by_name[d].after) for s in stages for d in s.after)


def command_seconds(n: int, folder: Path, rounds: int) -> float:
    path = folder / f"chain{n}.yaml"
    lines = [
        f"  - {{name: s{i}, flops: 1 MFLOP, bytes: 2 MB, after: [s{i - 1}]}}" for i in range(1, n)
    ]
    path.write_text("stages:\n  - {name: s0, flops: 1 MFLOP, bytes: 2 MB}\n" + "\n".join(lines))
    run = [installed_script("rooflab"), "model", "stages", str(path), "--peak", "120 TFLOP/s"]
    run += ["--bandwidth", "2 TB/s", "--format", "json"]
    return best_of(rounds, lambda: subprocess.run(run, check=True, capture_output=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--command", action="store_true", help="also time the whole command")
    add_smoke(parser)
    args = parser.parse_args()
    sizes = SIZES
    if args.smoke:  # chains of 100 and 1,000 stages, the command too
        sizes, args.rounds, args.command = (100, 1000), 1, True
    rows = {}
    stages = {n: chain(n) for n in sizes}
    rows["stage_bounds, first-first"] = [
        best_of(args.rounds, lambda s=stages[n]: stage_bounds(s, PEAK, BANDWIDTH)) for n in sizes
    ]
    rows["stage_bounds, last-first"] = [
        best_of(args.rounds, lambda s=stages[n][::-1]: stage_bounds(s, PEAK, BANDWIDTH))
        for n in sizes
    ]
    rows["reference (dict + one pass)"] = [
        best_of(args.rounds, lambda s=stages[n]: reference(s)) for n in sizes
    ]
    if args.command:
        with tempfile.TemporaryDirectory() as folder:
            rows["rooflab model stages"] = [command_seconds(n, Path(folder), 1) for n in sizes]
    small_n, large_n = (f"{n:,}" for n in sizes)
    print(f"{'':30} {small_n:>9} {large_n:>9}  ratio (linear ~10x, quadratic ~100x)")
    worst = 0.0
    for name, (small, large) in rows.items():
        ratio = large / small
        if not name.startswith("reference"):
            worst = max(worst, ratio)
        print(f"{name:30} {small:8.3f}s {large:8.3f}s  {ratio:5.1f}x")
    print(f"worst ratio {worst:.1f}x (limit {LIMIT:.0f}x: {'ok' if worst <= LIMIT else 'MISSED'})")
    return verdict(worst <= LIMIT, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
