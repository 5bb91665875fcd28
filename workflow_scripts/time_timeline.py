"""Rule time_timeline: one timeline scenario, a decode-like step timed per mode."""

from rooflab.backends.selection import select_backend
from rooflab.experiments.timeline import TimelineError, run_timeline
from rooflab.experiments.timing import TimingSettings
from rooflab.workflow import fails_in_one_line, keep_run, log_to, ready_to_keep

log = log_to(snakemake.log[0])
ready_to_keep(snakemake.output.receipt)
name, spec = snakemake.wildcards.timeline, snakemake.params.timeline
timing = TimingSettings.from_config(snakemake.params.timing, snakemake.params.disturbance)
with fails_in_one_line(log, TimelineError):  # one line naming the scenario (and the mode)
    tables = run_timeline(select_backend(snakemake.params.backend), name, spec, timing)
for row in tables["timeline_steps"]:
    log.info(
        "%s: %.4g s per step, %s s busy in %d kernels", row["mode"], row["step_s"],
        f"{row['busy_s']:.4g}" if row["busy_s"] is not None else "no", row["kernels"],
    )  # fmt: skip
receipt = keep_run(tables, snakemake.output.receipt)
log.info("kept run %s: timeline %s", receipt["run_id"], name)
