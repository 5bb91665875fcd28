"""Rule roofline: points of every timed sweep against the latest ceilings of its own machine
(model bytes), hierarchical points of the counters runs (counted bytes, trusted only), and per
ceilings run its cache capacities, datasheet roofs and the config's stage bounds."""

import json
from pathlib import Path

from rooflab.roofline import build_analysis, write_analysis
from rooflab.workflow import kept_runs, log_to, read_receipt

log = log_to(snakemake.log[0])
gemm_runs = [Path(read_receipt(path)["run_dir"]) for path in snakemake.input.timings]
counters_runs = [Path(read_receipt(path)["run_dir"]) for path in snakemake.input.counters]
analysis = build_analysis(
    kept_runs(snakemake.input.ceilings),
    gemm_runs,
    counters_runs,
    stages=json.loads(snakemake.params.stages),
    devices_file=snakemake.input.devices,
)
for note in analysis.points.notes:
    log.info("no counter point: %s", note)
for note in analysis.notes:
    log.info("no stage bounds: %s", note)
write_analysis(analysis, Path(snakemake.output.points).parent)
points = analysis.points
log.info(
    "%d points from %d timing runs, %d counter points from %d counters runs; ceilings of %d "
    "machine(s); %s",
    len(points.model),
    len(gemm_runs),
    len(points.counted),
    len(counters_runs),
    points.n_machines,
    ", ".join(f"{len(rows)} {name}" for name, rows in analysis.tables.items()),
)
