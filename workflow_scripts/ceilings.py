"""Rule ceilings: measure this machine's bandwidth and compute ceilings; keep the run."""

from dataclasses import replace

from rooflab.backends.selection import select_backend
from rooflab.experiments.ceiling_plan import settings_from_config
from rooflab.experiments.ceilings import run_ceilings
from rooflab.workflow import keep_run, log_to, ready_to_keep

log = log_to(snakemake.log[0])
ready_to_keep(snakemake.output.receipt)
settings = replace(
    settings_from_config(
        snakemake.params.settings,
        disturbance=snakemake.params.disturbance,
    ),
    max_clock_change=float(snakemake.params.max_clock_change),
)
backend = select_backend(snakemake.params.backend)
log.info(
    "ceilings on %s (%s) with %s", backend.name, backend.run_metadata()["device_name"], settings
)
receipt = keep_run(run_ceilings(backend, settings), snakemake.output.receipt)
log.info("kept run %s in %s", receipt["run_id"], receipt["run_dir"])
