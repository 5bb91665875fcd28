"""Rule report: the HTML report of the store, with a PNG and an SVG per chart beside it."""

from pathlib import Path

from rooflab.report import build_report
from rooflab.workflow import log_to

log = log_to(snakemake.log[0])
report = build_report(snakemake.params.db, Path(snakemake.output.index).parent)
log.info("wrote %s: %d chart(s): %s", report.index, len(report.charts), ", ".join(report.charts))
