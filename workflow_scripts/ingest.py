"""Rule ingest: add every kept run (and the recomputed Roofline points) to the database. A run with
a bad file is set aside and named, every good run is stored, and then the job fails. A store that
cannot be read back whole after it (a damaged block), or held by another process, fails the job in
one line naming the file; a full disk too (rooflab.workflow.log_to)."""

import sys

from rooflab.store import StoreError, ingest
from rooflab.workflow import fails_in_one_line, log_to, write_receipt

log = log_to(snakemake.log[0])
with fails_in_one_line(log, StoreError):
    report = ingest(snakemake.params.db, snakemake.params.results, strict=False)
log.info("%s", report)
for line in report.set_aside_lines():
    log.error("%s", line)
if report.bad_runs or report.bad_derived:
    sys.exit(1)  # everything good is stored; the receipt waits until the bad files are fixed
write_receipt(
    snakemake.output.receipt, {"db": snakemake.params.db, "added": sorted(report.added_run_ids)}
)
