# The only writer of the database. The database itself is not a declared output: Snakemake would
# delete it before each ingest, and with it every earlier run.
rule ingest:
    input:
        ceilings=ceilings_receipts,
        correctness=correctness_receipts,
        timings=timing_receipts,
        counters=counters_receipts,
        workloads=workload_receipts,
        stages=stage_receipts,
        timelines=timeline_receipts,
        roofline=rules.roofline.output.inputs,
    output:
        receipt="results/store/ingest.json",
    log:
        "logs/ingest.log",
    conda:
        "../environment.yml"
    params:
        db=config["store"]["db"],
        results=lambda wildcards, input: results_folder(input.roofline),
    script:
        "../workflow_scripts/ingest.py"


# The report reads the store only (docs/report.md): index.html, with a PNG and an SVG per chart.
rule report:
    input:
        ingest="results/store/ingest.json",
    output:
        index="results/report/index.html",
    log:
        "logs/report.log",
    conda:
        "../environment.yml"
    params:
        db=config["store"]["db"],
    script:
        "../workflow_scripts/report.py"
