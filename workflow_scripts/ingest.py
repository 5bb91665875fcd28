"""Rule ingest: add every kept run (and the recomputed Roofline points) to the database."""

from rooflab.store import ingest
from rooflab.workflow import log_to, write_receipt

log = log_to(snakemake.log[0])
report = ingest(snakemake.params.db, snakemake.params.results)
log.info("%s", report)
write_receipt(
    snakemake.output.receipt, {"db": snakemake.params.db, "added": sorted(report.added_run_ids)}
)
