"""Rule roofline: points of every kept timing run against the latest ceilings of its own machine
(model bytes), hierarchical points of the kept counters runs (counted bytes, trusted only), and
per ceilings run its cache capacities, datasheet roofs and the config's stage bounds. Every kept
run under results/, not only the newest nor only the current config's sweeps: the store's derived
rows are then what a rebuild gives (the rule's inputs only order it after the measuring jobs)."""

from pathlib import Path

from rooflab.roofline import analyse_results, roof_faults, unplaced_line, write_analysis
from rooflab.workflow import log_to

log = log_to(snakemake.log[0])
folder = Path(snakemake.output.points).parent
analysis = analyse_results(
    folder.parent,  # results/
    stages=snakemake.params.stages,
    devices_file=snakemake.input.devices,
)
for note in analysis.points.notes:
    log.info("no counter point: %s", note)
for note in analysis.notes:
    log.info("note: %s", note)
for fault in roof_faults(analysis.points.model):
    log.warning(fault)
if analysis.points.dropped:
    log.warning("%d timed point(s) have no Roofline point:", len(analysis.points.dropped))
    for row in analysis.points.dropped:
        log.warning("  %s", unplaced_line(row))
write_analysis(analysis, folder)
points, inputs = analysis.points, analysis.tables["roofline_inputs"]
log.info(
    "%d points and %d counter points from %d kept runs; ceilings of %d machine(s); %s",
    len(points.model),
    len(points.counted),
    len(inputs),
    points.n_machines,
    ", ".join(f"{len(rows)} {name}" for name, rows in analysis.tables.items()),
)
