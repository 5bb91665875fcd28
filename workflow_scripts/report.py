"""Rule report (placeholder until the report issue): the run summary as a text table."""

from rooflab.cli import print_rows
from rooflab.store import query
from rooflab.workflow import log_to

log = log_to(snakemake.log[0])
rows = query(snakemake.params.db, "SELECT * FROM run_summary ORDER BY started_at").to_pylist()
with open(snakemake.output.summary, "w", encoding="utf-8") as out:
    print_rows(rows, "table", out)
log.info("%d runs summarised", len(rows))
