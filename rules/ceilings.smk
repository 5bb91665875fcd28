# Empirical ceilings of one machine. Measuring: takes every core (and the GPU) so that no other
# measurement runs beside it.
rule ceilings:
    output:
        receipt="results/ceilings/{machine}/receipt.json",
    log:
        "logs/ceilings/{machine}.log",
    conda:
        "../environment.yml"
    threads: workflow.cores
    resources:
        gpu=1,
        slurm_extra=machine_slurm_extra,
    params:
        settings=as_param(config["ceilings"]),
        max_clock_change=config["timing"]["max_clock_change"],
        disturbance=as_param(config["disturbance"]),
        backend=config["backend"],
    script:
        "../workflow_scripts/ceilings.py"
