"""Rule time_gemm: time the configurations of one sweep that passed their correctness check."""

from rooflab.backends.selection import select_backend
from rooflab.experiments.cache_edges import size_flush_from_ceilings
from rooflab.experiments.gemm import run_gemm_sweep
from rooflab.experiments.timing import TimingSettings
from rooflab.workflow import keep_run, log_to, read_receipt, ready_to_keep

log = log_to(snakemake.log[0])
ready_to_keep(snakemake.output.receipt)
sweep_name, sweep = snakemake.wildcards.sweep, snakemake.params.sweep
checked = read_receipt(snakemake.input.correctness)
timing = TimingSettings.from_config(snakemake.params.timing, snakemake.params.disturbance)
backend = select_backend(snakemake.params.backend)
log.info("%s", size_flush_from_ceilings(backend, snakemake.params.ceilings_receipt))
tables = run_gemm_sweep(
    backend, sweep_name, sweep, timing, passed_config_ids=set(checked["passed"])
)
receipt = keep_run(
    tables,
    snakemake.output.receipt,
    correctness_run_id=checked["run_id"],
    skipped_failed=checked["failed"],
)
log.info("kept run %s: %d points", receipt["run_id"], len(tables["timed_points"]))
