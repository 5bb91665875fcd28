# rooflab campaign: load and validate the config, include the stage rules, define the default target.
from rooflab.config import validate_config


configfile: "config/config.yaml"


validate_config(config, " + ".join(map(str, workflow.configfiles)) or "config")


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
