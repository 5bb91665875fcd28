"""Rule roofline: points of every timed sweep against the latest ceilings of its own machine
(model bytes), and hierarchical points of the counters runs (counted bytes, trusted only)."""

from pathlib import Path

from rooflab.roofline import build_points, write_points
from rooflab.workflow import kept_runs, log_to, read_receipt

log = log_to(snakemake.log[0])
gemm_runs = [Path(read_receipt(path)["run_dir"]) for path in snakemake.input.timings]
counters_runs = [Path(read_receipt(path)["run_dir"]) for path in snakemake.input.counters]
points = build_points(kept_runs(snakemake.input.ceilings), gemm_runs, counters_runs)
for note in points.notes:
    log.info("no counter point: %s", note)
write_points(points.rows, Path(snakemake.output.points))
log.info(
    "%d points from %d timing runs, %d counter points from %d counters runs; ceilings of %d "
    "machine(s)",
    len(points.model),
    len(gemm_runs),
    len(points.counted),
    len(counters_runs),
    points.n_machines,
)
