# One timeline scenario on one machine (docs/timelines.md): a decode-like step of many small
# kernels timed per mode (eager, graph, fused), with one step's per-kernel timeline. Measuring:
# takes every core (and the GPU).
rule time_timeline:
    output:
        receipt="results/timelines/{timeline}/{machine}/timing.json",
    log:
        "logs/time_timeline/{timeline}/{machine}.log",
    conda:
        "../environment.yml"
    threads: workflow.cores
    resources:
        gpu=1,
        slurm_extra=machine_slurm_extra,
    params:
        timeline=timeline_param,
        timing=as_param(config["timing"]),
        disturbance=as_param(config["disturbance"]),
        backend=config["backend"],
    script:
        "../workflow_scripts/time_timeline.py"
