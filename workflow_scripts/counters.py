"""Rule counters: hardware counters of one sweep's timed configurations or one workload's timed
cases (ncu on a GPU, perf on a CPU), calibrated and paired with its timing run; `unavailable`
with the reason otherwise."""

from rooflab.backends.selection import select_backend
from rooflab.experiments.counters import (
    CounterSettings,
    counters_status,
    run_counters,
    run_workload_counters,
)
from rooflab.workflow import keep_run, log_to, read_receipt, ready_to_keep

log = log_to(snakemake.log[0])
ready_to_keep(snakemake.output.receipt)
name, target = snakemake.wildcards.name, snakemake.params.target
settings = CounterSettings.from_config(snakemake.params.counters)
timing = read_receipt(snakemake.input.timing)
backend = select_backend(snakemake.params.backend)
count = run_counters if snakemake.wildcards.kind == "sweeps" else run_workload_counters
tables = count(backend, name, target, settings, timing["run_dir"])
status, reason = counters_status(tables["counters"])
trusted = sum(bool(row["trusted"]) for row in tables["counter_calibration"])
receipt = keep_run(
    tables,
    snakemake.output.receipt,
    timing_run_id=timing["run_id"],
    status=status,
    reason=reason,
    trusted_calibrations=trusted,
)
log.info("kept run %s: counters %s%s", receipt["run_id"], status, f" ({reason})" if reason else "")
