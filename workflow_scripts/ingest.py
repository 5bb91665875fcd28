"""Rule ingest: add every kept run (and the recomputed Roofline points) to the database. A run with
a bad file is set aside and named, every good run is stored, and then the job fails."""

import sys

from rooflab.store import ingest
from rooflab.workflow import log_to, write_receipt

log = log_to(snakemake.log[0])
report = ingest(snakemake.params.db, snakemake.params.results, strict=False)
log.info("%s", report)
for line in report.set_aside_lines():
    log.error("%s", line)
if report.bad_runs or report.bad_derived:
    sys.exit(1)  # everything good is stored; the receipt waits until the bad files are fixed
write_receipt(
    snakemake.output.receipt, {"db": snakemake.params.db, "added": sorted(report.added_run_ids)}
)
