# One of your own kernels on one machine (docs/workloads.md): every case checked against its own
# reference, then timed warm and cold. Measuring: takes every core (and the GPU).
rule time_workload:
    output:
        receipt="results/workloads/{workload}/{machine}/timing.json",
    log:
        "logs/time_workload/{workload}/{machine}.log",
    conda:
        "../environment.yml"
    threads: workflow.cores
    resources:
        gpu=1,
        slurm_extra=machine_slurm_extra,
    params:
        workload=workload_param,
        timing=as_param(config["timing"]),
        disturbance=as_param(config["disturbance"]),
        backend=config["backend"],
        ceilings_receipt=ceilings_receipt,
    script:
        "../workflow_scripts/time_workload.py"
