# One measurable stages scenario on one machine (docs/timelines.md): its stages sized from the
# machine's measured ceilings, each timed alone, then serial and overlapped. Measuring: takes
# every core (and the GPU).
rule measure_stages:
    input:
        ceilings="results/ceilings/{machine}/receipt.json",
    output:
        receipt="results/stages/{scenario}/{machine}/timing.json",
    log:
        "logs/measure_stages/{scenario}/{machine}.log",
    conda:
        "../environment.yml"
    threads: workflow.cores
    resources:
        gpu=1,
        slurm_extra=machine_slurm_extra,
    params:
        scenario=scenario_param,
        timing=as_param(config["timing"]),
        disturbance=as_param(config["disturbance"]),
        backend=config["backend"],
    script:
        "../workflow_scripts/measure_stages.py"
