# Roofline points of every timed configuration against the ceilings of its own machine (model
# bytes), and hierarchical points from trusted, correctly paired hardware counters.
rule roofline:
    input:
        ceilings=ceilings_receipts,
        timings=timing_receipts,
        counters=counters_receipts,
    output:
        points="results/roofline/roofline_points.parquet",
    log:
        "logs/roofline.log",
    conda:
        "../environment.yml"
    script:
        "../workflow_scripts/roofline.py"
