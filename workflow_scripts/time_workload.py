"""Rule time_workload: check and time every case of one of your own kernels (rooflab.Workload)."""

from rooflab.backends.selection import select_backend
from rooflab.experiments.cache_edges import size_flush_from_ceilings
from rooflab.experiments.timing import TimingSettings
from rooflab.experiments.workload_cases import run_workload
from rooflab.workflow import fails_in_one_line, keep_run, log_to, ready_to_keep
from rooflab.workloads import WorkloadError

log = log_to(snakemake.log[0])
ready_to_keep(snakemake.output.receipt)
name, spec = snakemake.wildcards.workload, snakemake.params.workload
timing = TimingSettings.from_config(snakemake.params.timing, snakemake.params.disturbance)
backend = select_backend(snakemake.params.backend)
log.info("%s", size_flush_from_ceilings(backend, snakemake.params.ceilings_receipt))
with fails_in_one_line(log, WorkloadError):  # one line naming the workload and the case
    tables = run_workload(backend, name, spec, timing)
failed = sorted(row["config_id"] for row in tables["correctness"] if not row["passed"])
for config_id in failed:
    log.warning("%s failed its check; it was not timed", config_id)
receipt = keep_run(tables, snakemake.output.receipt, failed=failed)
log.info("kept run %s: %d points", receipt["run_id"], len(tables["timed_points"]))
