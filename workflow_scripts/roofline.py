"""Rule roofline: points of every kept timing run against the latest ceilings of its own machine
(model bytes), hierarchical points of the kept counters runs (counted bytes, trusted only), and
per ceilings run its cache capacities, datasheet roofs and the config's stage bounds. Every kept
run, not only the newest: the store's derived rows are then what a rebuild gives."""

import json
from pathlib import Path

from rooflab.roofline import build_analysis, roof_faults, write_analysis
from rooflab.workflow import kept_runs, log_to

log = log_to(snakemake.log[0])
# A sweep's runs (correctness, timing, counters) share one folder beside its receipts.
sweep_runs = kept_runs(
    [*snakemake.input.timings, *snakemake.input.counters, *snakemake.input.workloads]
)
analysis = build_analysis(
    kept_runs(snakemake.input.ceilings),
    sweep_runs,
    sweep_runs,
    stages=json.loads(snakemake.params.stages),
    devices_file=snakemake.input.devices,
)
for note in analysis.points.notes:
    log.info("no counter point: %s", note)
for note in analysis.notes:
    log.info("no stage bounds: %s", note)
for fault in roof_faults(analysis.points.model):
    log.warning(fault)
write_analysis(analysis, Path(snakemake.output.points).parent)
points = analysis.points
log.info(
    "%d points and %d counter points from %d kept sweep runs; ceilings of %d machine(s); %s",
    len(points.model),
    len(points.counted),
    len(sweep_runs),
    points.n_machines,
    ", ".join(f"{len(rows)} {name}" for name, rows in analysis.tables.items()),
)
