# Roofline points of every timed configuration against the ceilings of its own machine (model
# bytes), hierarchical points from trusted, correctly paired hardware counters, and per ceilings
# run what the report draws beside them: cache capacities, datasheet roofs, stage bounds; and each
# timed point that got no Roofline point, with why; and why each point (each timeline step, each
# measured stage and schedule) sits where it does; and each imported profile's operators on the
# ceilings of the machine that imported it.
rule roofline:
    input:
        ceilings=ceilings_receipts,
        timings=timing_receipts,
        counters=counters_receipts,
        workloads=workload_receipts,
        timelines=timeline_receipts,
        stage_runs=stage_receipts,
        imports=import_receipts,
        devices=DEVICES_FILE,
    output:
        points="results/roofline/roofline_points.parquet",
        caches="results/roofline/cache_capacities.parquet",
        datasheets="results/roofline/datasheet_roofs.parquet",
        stages="results/roofline/stage_bounds.parquet",
        unplaced="results/roofline/unplaced_points.parquet",
        diagnoses="results/roofline/point_diagnoses.parquet",
        inputs="results/roofline/roofline_inputs.parquet",
    log:
        "logs/roofline.log",
    conda:
        "../environment.yml"
    params:
        stages=as_param(config["stages"]),
    script:
        "../workflow_scripts/roofline.py"
