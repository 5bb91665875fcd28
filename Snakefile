# rooflab campaign: load and validate the config, include the stage rules, define the default target.
import os

from rooflab.config import campaign_config, validate_config
from rooflab.experiments.preflight import check_campaign
from rooflab.workflow import (
    progress_on_terminal,
    say_campaign_done,
    say_campaign_failed,
)

DEFAULT_CONFIG = "config/config.yaml"


configfile: DEFAULT_CONFIG


# A campaign file given with --configfile brings its own sweeps, stages and machines: they replace
# the default file's instead of merging with them (the other sections still merge).
campaign_config(config, workflow.configfiles, DEFAULT_CONFIG)
validate_config(config, " + ".join(map(str, workflow.configfiles)) or "config")
# What this host cannot hold is refused now, before any job measures (docs/workflow.md).
check_campaign(config, " + ".join(map(str, workflow.configfiles)) or "config")
# Measuring jobs show what they measure, n of N and an ETA on the terminal, when Snakemake's output
# is one and not --quiet (their logs get it either way); docs/workflow.md.
progress_on_terminal(workflow.output_settings.quiet)


include: "rules/common.smk"
include: "rules/ceilings.smk"
include: "rules/gemm.smk"
include: "rules/workloads.smk"
include: "rules/counters.smk"
include: "rules/stages.smk"
include: "rules/timelines.smk"
include: "rules/imports.smk"
include: "rules/roofline.smk"
include: "rules/store.smk"


# Light rules run where Snakemake runs, never on a cluster node: ingest, the only writer of the
# database, stays on one host (docs/cluster.md).
localrules:
    import_profile,
    roofline,
    ingest,
    report,
    all,


rule all:
    default_target: True
    input:
        "results/store/ingest.json",
        "results/report/index.html",


# What the terminal shows when the campaign ends: where the report and the store are, what fell
# back, points the Roofline lacks or that beat their roof, one query to try; on failure, which
# log to read.
onsuccess:
    say_campaign_done(
        rules.report.output.index,
        rules.ingest.output.receipt,
        measured_receipts(),
        workflow.output_settings.quiet,
        roofline=os.path.dirname(rules.roofline.output.unplaced),
    )


onerror:
    say_campaign_failed(log)
