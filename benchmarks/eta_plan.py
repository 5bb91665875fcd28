"""Does a measuring job's ETA keep its word? Planned vs taken, per job kind, over a campaign
(targets: every job's first estimate within 2x of the time it took, its final plan within 1.5x).

    python benchmarks/eta_plan.py [--smoke | --logs LOGS]

Runs the default campaign (`--smoke`: the tests' tiny one) with `snakemake --cores all` in a
temporary copy of the workflow (or, with `--logs`, reads the logs/ folder of a campaign that
ran), then reads each measuring job's log: its first estimate (the
seconds it had run plus the seconds it said were left, on its first line that said so), and its
`done` line: the seconds it took and its final plan (what its items were planned at, each as it
began, corrections from the items before it included). Prints one row per job and, per kind, the
worst ratio of each estimate to the time taken (1.00: exact; 0.50: it promised half the time).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from smoke import add_smoke, verdict

from tests.campaigns import SMALLEST
from tests.conftest import copy_workflow, installed_script

FIRST_WITHIN, FINAL_WITHIN = 2.0, 1.5
DURATION = r"(?:\d+ h )?(?:\d+ min )?\d+(?:\.\d)? (?:s|min)"
PROGRESS = re.compile(rf"\((?P<spent>{DURATION}) in, (?P<left>{DURATION}) left\)")
DONE = re.compile(
    rf"done: \d+ of \d+ in (?P<took>{DURATION})"
    rf" \(planned (?P<planned>{DURATION})(?:; first estimate (?P<first>{DURATION}))?\)"
)


def seconds(text: str) -> float:
    """`2 min 05 s`, `1 h 07 min`, `45 s`, `2.4 s` (rooflab.progress.duration) in seconds."""
    scale = {"h": 3600, "min": 60, "s": 1}
    parts = text.split()
    return sum(float(n) * scale[u] for n, u in zip(parts[::2], parts[1::2], strict=True))


def job_figures(log: str) -> dict | None:
    """A measuring job's first estimate, final plan and time taken, from its log (None: the log
    of a step that does not measure)."""
    done = DONE.search(log)
    if done is None:
        return None
    took = seconds(done["took"])
    first = done["first"]
    if first is None:  # a rooflab that did not print it: its first line that gave an ETA
        said = PROGRESS.search(log)
        first_s = seconds(said["spent"]) + seconds(said["left"]) if said else None
    else:
        first_s = seconds(first)
    return {"took_s": took, "first_s": first_s, "final_s": seconds(done["planned"])}


def ratio(estimate: float | None, took: float) -> float | None:
    """Estimate over time taken; a job under a second is judged as taking one (its status line
    is gone before a reader could act on its ETA)."""
    if estimate is None:
        return None
    return max(estimate, 1.0) / max(took, 1.0)


def within(value: float | None, factor: float) -> bool:
    return value is not None and 1 / factor <= value <= factor


def job_rows(logs: Path) -> list[dict]:
    """Each measuring job's figures from a campaign's logs/ folder."""
    rows = []
    for log in sorted(logs.rglob("*.log")):
        figures = job_figures(log.read_text(encoding="utf-8", errors="replace"))
        if figures is not None:
            job = str(log.relative_to(logs).with_suffix(""))
            rows.append({"job": job, "kind": job.split("/")[0], **figures})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_smoke(parser)
    parser.add_argument("--logs", type=Path, help="the logs/ folder of a campaign that ran")
    args = parser.parse_args()
    smoke = args.smoke
    if args.logs is not None:
        rows = job_rows(args.logs)
    else:
        snakemake = installed_script("snakemake")
        with tempfile.TemporaryDirectory() as folder:
            workdir = copy_workflow(Path(folder), SMALLEST if smoke else None)
            subprocess.run(
                [snakemake, "--cores", "all"], cwd=workdir, check=True, capture_output=True
            )
            rows = job_rows(workdir / "logs")
    print(f"{'job':44} {'taken':>7} {'first':>7} {'final':>7}  first/taken  final/taken")
    ok = bool(rows)
    for row in rows:
        first, final = ratio(row["first_s"], row["took_s"]), ratio(row["final_s"], row["took_s"])
        row["first"], row["final"] = first, final
        first_text = f"{row['first_s']:6.1f}s" if row["first_s"] is not None else "      -"
        print(
            f"{row['job'][:44]:44} {row['took_s']:6.1f}s {first_text} {row['final_s']:6.1f}s"
            f"  {first or float('nan'):11.2f}  {final:11.2f}"
        )
        # a job of one item gave no estimate before it was done: nothing to keep
        ok &= (first is None or within(first, FIRST_WITHIN)) and within(final, FINAL_WITHIN)
    print("\nper kind, the worst ratios (estimate / taken; 1.00 exact):")
    for kind in sorted({row["kind"] for row in rows}):
        mine = [row for row in rows if row["kind"] == kind]
        worst_first = max((r["first"] for r in mine), key=lambda v: abs(_log(v)))
        worst_final = max((r["final"] for r in mine), key=lambda v: abs(_log(v)))
        first_text = "-" if worst_first is None else f"{worst_first:.2f}"
        print(f"  {kind:16} {len(mine):3} jobs  first {first_text}  final {worst_final:.2f}")
    print(f"targets: first within {FIRST_WITHIN:g}x, final within {FINAL_WITHIN:g}x of taken")
    return verdict(ok, smoke)


def _log(value: float | None) -> float:
    import math

    return math.inf if value is None or value <= 0 else math.log(value)


if __name__ == "__main__":
    raise SystemExit(main())
