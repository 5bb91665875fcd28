"""Rule measure_stages: one measurable stages scenario, serial and overlapped, on the ceilings of
this machine's ceilings run."""

from rooflab.backends.selection import select_backend
from rooflab.experiments.cache_edges import size_flush_from_ceilings
from rooflab.experiments.stage_overlap import (
    StageOverlapError,
    run_stage_overlap,
    scenario_ceilings,
)
from rooflab.experiments.timing import TimingSettings
from rooflab.roofline import latest_ceilings_by_machine
from rooflab.workflow import fails_in_one_line, keep_run, log_to, read_receipt, ready_to_keep

log = log_to(snakemake.log[0])
ready_to_keep(snakemake.output.receipt)
name, spec = snakemake.wildcards.scenario, snakemake.params.scenario
timing = TimingSettings.from_config(snakemake.params.timing, snakemake.params.disturbance)
ceilings_run = read_receipt(snakemake.input.ceilings)["run_dir"]
(machine,) = latest_ceilings_by_machine([ceilings_run]).values()
backend = select_backend(snakemake.params.backend)
# a stream stage's working set is the cold flush's: past the caches the ceilings run measured
log.info("%s", size_flush_from_ceilings(backend, snakemake.input.ceilings))
with fails_in_one_line(log, StageOverlapError):
    peak, bandwidth = scenario_ceilings(name, spec, machine)
    tables = run_stage_overlap(
        backend,
        name,
        spec,
        timing,
        peak_flops_per_s=peak,
        bandwidth_b_per_s=bandwidth,
        ceilings_run_id=machine["run_id"],
    )
for row in [*tables["stage_timings"], *tables["stage_schedules"]]:
    if row["beats_bound"]:
        log.warning(
            "ABOVE ITS BOUND: %s %s measured %.4g s, under its bound %.4g s",
            name,
            row.get("stage") or row["schedule"],
            row["median_s"],
            row["bound_s"],
        )
receipt = keep_run(tables, snakemake.output.receipt)
log.info("kept run %s: stages %s serial and overlapped", receipt["run_id"], name)
