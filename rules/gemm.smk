# One sweep: correctness first, then timing of the configurations that passed. Measuring rules
# take every core (and the GPU), so two measurements never overlap.
rule correctness:
    output:
        receipt="results/sweeps/{sweep}/correctness.json",
    log:
        "logs/correctness/{sweep}.log",
    conda:
        "../environment.yml"
    threads: workflow.cores
    resources:
        gpu=1,
    params:
        sweep=sweep_param,
        backend=config["backend"],
    script:
        "../workflow_scripts/correctness.py"


rule time_gemm:
    input:
        correctness="results/sweeps/{sweep}/correctness.json",
    output:
        receipt="results/sweeps/{sweep}/timing.json",
    log:
        "logs/time_gemm/{sweep}.log",
    conda:
        "../environment.yml"
    threads: workflow.cores
    resources:
        gpu=1,
    params:
        sweep=sweep_param,
        timing=as_param(config["timing"]),
        backend=config["backend"],
    script:
        "../workflow_scripts/time_gemm.py"
