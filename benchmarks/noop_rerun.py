"""How long a no-op `snakemake --cores all` takes after a finished campaign, and its peak memory
(targets: under 1 s, under 300 MB).

    python benchmarks/noop_rerun.py

Runs a tiny campaign in a temporary copy of the workflow once, then times the no-op rerun (median
of 5) next to two references measured in the same run: `snakemake --version`, the cost of starting
Python and importing Snakemake, and the no-op rerun of a one-rule workflow with `params` (what
Snakemake itself does on any no-op run: its job persistence, its params check, which imports
pandas where it is installed, and its logging of the rule graph). What rooflab adds is the rest.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from smoke import add_smoke, verdict

from rooflab.backends.base import FLUSH_BYTES_ENV
from tests.campaigns import SMALLEST, TINY
from tests.conftest import copy_workflow, installed_script

TARGET_S, TARGET_BYTES = 1.0, 300e6
ONE_RULE = """rule all:
    input:
        "out.txt",


rule make:
    output:
        "out.txt",
    params:
        value=lambda wildcards: 1,
    log:
        "make.log",
    shell:
        "echo {params.value} > {output} 2> {log}"
"""


def seconds(command: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - started


def peak_bytes(command: list[str], cwd: Path) -> float:
    """Peak resident memory of one run of `command` (GNU time's maximum resident set size)."""
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%M", *command], cwd=cwd, check=True, capture_output=True, text=True
    )
    return int(done.stderr.strip().splitlines()[-1]) * 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_smoke(parser)
    smoke = parser.parse_args().smoke
    times = 1 if smoke else 5  # medians of `times` runs
    snakemake = installed_script("snakemake")
    with tempfile.TemporaryDirectory() as folder:
        workdir = copy_workflow(Path(folder), SMALLEST if smoke else TINY)
        # the campaign a no-op reruns: its cold samples' flush is not what is timed here
        setup_env = {**os.environ, FLUSH_BYTES_ENV: str(8 << 20)}
        subprocess.run(
            [snakemake, "--cores", "all"],
            cwd=workdir,
            env=setup_env,
            check=True,
            capture_output=True,
        )
        noop = statistics.median(
            seconds([snakemake, "--cores", "all"], workdir) for _ in range(times)
        )
        startup = statistics.median(
            seconds([snakemake, "--version"], workdir) for _ in range(times)
        )
        memory = peak_bytes([snakemake, "--cores", "all"], workdir)
        one_rule = Path(folder) / "one_rule"
        one_rule.mkdir()
        (one_rule / "Snakefile").write_text(ONE_RULE)
        run = [snakemake, "--cores", "all"]
        subprocess.run(run, cwd=one_rule, check=True, capture_output=True)
        floor = statistics.median(seconds(run, one_rule) for _ in range(times))
    ok = noop < TARGET_S and memory < TARGET_BYTES
    print(f"no-op rerun        {noop:6.2f} s   (target < {TARGET_S:g} s)")
    print(f"snakemake startup  {startup:6.2f} s   (reference, same run)")
    print(f"one-rule no-op     {floor:6.2f} s   (reference, same run: Snakemake's own floor)")
    print(f"ratio              {noop / startup:6.2f} to startup, {noop / floor:.2f} to one rule")
    print(f"peak memory        {memory / 1e6:6.0f} MB  (target < {TARGET_BYTES / 1e6:.0f} MB)")
    return verdict(ok, smoke)


if __name__ == "__main__":
    sys.exit(main())
