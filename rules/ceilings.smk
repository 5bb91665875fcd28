# Empirical ceilings of one machine. Measuring: takes every core (and the GPU) so that no other
# measurement runs beside it. First of the measuring jobs: the timing jobs size their cold flush
# from the last cache level it measures (rooflab.experiments.cache_edges).
rule ceilings:
    output:
        receipt="results/ceilings/{machine}/receipt.json",
    log:
        "logs/ceilings/{machine}.log",
    priority: 10
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
