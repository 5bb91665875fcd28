# Hardware counters of one sweep or one workload on one machine (issue 7, docs/counters.md): ncu
# on a GPU, perf on a CPU, for a bounded list of the configurations (a sweep's GEMMs, a
# workload's cases) its timing run timed; `unavailable` with the reason where the tool or its
# counters cannot be used (the job still succeeds). Measuring: takes every core (and the GPU),
# like the other measuring rules.
rule counters:
    input:
        timing="results/{kind}/{name}/{machine}/timing.json",
    output:
        receipt="results/{kind}/{name}/{machine}/counters.json",
    log:
        "logs/counters/{kind}/{name}/{machine}.log",
    conda:
        "../environment.yml"
    threads: workflow.cores
    resources:
        gpu=1,
        slurm_extra=machine_slurm_extra,
    params:
        target=counted_param,
        counters=as_param(config["counters"]),
        backend=config["backend"],
    script:
        "../workflow_scripts/counters.py"
