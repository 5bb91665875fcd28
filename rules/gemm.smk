# One sweep on one machine: correctness first, then timing of the configurations that passed.
# Measuring rules take every core (and the GPU), so two measurements never overlap.
rule correctness:
    output:
        receipt="results/sweeps/{sweep}/{machine}/correctness.json",
    log:
        "logs/correctness/{sweep}/{machine}.log",
    conda:
        "../environment.yml"
    threads: workflow.cores
    resources:
        gpu=1,
        slurm_extra=machine_slurm_extra,
    params:
        sweep=sweep_param,
        backend=config["backend"],
    script:
        "../workflow_scripts/correctness.py"


rule time_gemm:
    input:
        correctness="results/sweeps/{sweep}/{machine}/correctness.json",
    output:
        receipt="results/sweeps/{sweep}/{machine}/timing.json",
    log:
        "logs/time_gemm/{sweep}/{machine}.log",
    conda:
        "../environment.yml"
    threads: workflow.cores
    resources:
        gpu=1,
        slurm_extra=machine_slurm_extra,
    params:
        sweep=sweep_param,
        timing=as_param(config["timing"]),
        disturbance=as_param(config["disturbance"]),
        backend=config["backend"],
        ceilings_receipt=ceilings_receipt,
    script:
        "../workflow_scripts/time_gemm.py"
