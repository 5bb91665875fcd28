"""Rule roofline: points of every timed sweep against the latest ceilings of its own machine
(model bytes), and hierarchical points of the counters runs (counted bytes, trusted only)."""

from pathlib import Path

from rooflab.roofline import (
    counter_points,
    latest_ceilings_by_machine,
    roofline_points,
    write_points,
)
from rooflab.workflow import log_to, read_receipt

log = log_to(snakemake.log[0])
ceilings_runs = [
    run_dir
    for receipt in snakemake.input.ceilings
    for run_dir in sorted((Path(receipt).parent / "runs").iterdir())
    if not run_dir.name.startswith(".")
]
ceilings = latest_ceilings_by_machine(ceilings_runs)
gemm_runs = [Path(read_receipt(path)["run_dir"]) for path in snakemake.input.timings]
points = roofline_points(gemm_runs, ceilings)
counters_runs = [Path(read_receipt(path)["run_dir"]) for path in snakemake.input.counters]
hierarchical, notes = counter_points(counters_runs, gemm_runs, ceilings)
for note in notes:
    log.info("no counter point: %s", note)
write_points(points + hierarchical, Path(snakemake.output.points))
log.info(
    "%d points from %d timing runs, %d counter points from %d counters runs; ceilings of %d "
    "machine(s)",
    len(points),
    len(gemm_runs),
    len(hierarchical),
    len(counters_runs),
    len(ceilings),
)
