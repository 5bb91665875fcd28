# rooflab campaign: load and validate the config, include the stage rules, define the default target.
from rooflab.config import campaign_config, validate_config
from rooflab.experiments.preflight import check_campaign

DEFAULT_CONFIG = "config/config.yaml"


configfile: DEFAULT_CONFIG


# A campaign file given with --configfile brings its own sweeps, stages and machines: they replace
# the default file's instead of merging with them (the other sections still merge).
campaign_config(config, workflow.configfiles, DEFAULT_CONFIG)
validate_config(config, " + ".join(map(str, workflow.configfiles)) or "config")
# What this host cannot hold is refused now, before any job measures (docs/workflow.md).
check_campaign(config, " + ".join(map(str, workflow.configfiles)) or "config")


include: "rules/common.smk"
include: "rules/ceilings.smk"
include: "rules/gemm.smk"
include: "rules/counters.smk"
include: "rules/roofline.smk"
include: "rules/store.smk"


# Light rules run where Snakemake runs, never on a cluster node: ingest, the only writer of the
# database, stays on one host (docs/cluster.md).
localrules:
    roofline,
    ingest,
    report,
    all,


rule all:
    default_target: True
    input:
        "results/store/ingest.json",
        "results/report/index.html",
