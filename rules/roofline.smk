# Roofline points of every timed configuration against the ceilings of its own machine.
rule roofline:
    input:
        ceilings="results/ceilings/receipt.json",
        timings=timing_receipts,
    output:
        points="results/roofline/roofline_points.parquet",
    log:
        "logs/roofline.log",
    conda:
        "../environment.yml"
    script:
        "../workflow_scripts/roofline.py"
