"""Rule correctness: check every configuration of one sweep against a float64 reference."""

from rooflab.backends.selection import select_backend
from rooflab.experiments.gemm import run_gemm_sweep
from rooflab.workflow import keep_run, log_to, ready_to_keep

log = log_to(snakemake.log[0])
ready_to_keep(snakemake.output.receipt)
sweep_name, sweep = snakemake.wildcards.sweep, snakemake.params.sweep
backend = select_backend(snakemake.params.backend)
tables = run_gemm_sweep(backend, sweep_name, sweep, timing=None)
verdicts = {}
for row in tables["correctness"]:
    verdicts[row["config_id"]] = verdicts.get(row["config_id"], True) and row["passed"]
passed = sorted(c for c, ok in verdicts.items() if ok)
failed = sorted(c for c, ok in verdicts.items() if not ok)
for config_id in failed:
    log.warning("%s failed its correctness check; it will not be timed", config_id)
receipt = keep_run(tables, snakemake.output.receipt, passed=passed, failed=failed)
log.info("kept run %s: %d passed, %d failed", receipt["run_id"], len(passed), len(failed))
