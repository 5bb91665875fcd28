"""Rule import_profile: a profile another tool recorded, kept as a run of kind import."""

from pathlib import Path

from rooflab.backends.selection import select_backend
from rooflab.experiments.imported_runs import import_tables
from rooflab.imports import ProfileError, device_backend, read_profile
from rooflab.workflow import fails_in_one_line, keep_run, log_to, ready_to_keep

log = log_to(snakemake.log[0])
ready_to_keep(snakemake.output.receipt)
name, tool = snakemake.wildcards.name, snakemake.params.tool
with fails_in_one_line(log, ProfileError):  # one line naming the file and the problem
    profile = read_profile(tool, Path(snakemake.input.profile))
for note in profile.notes:
    log.info("%s", note)
# a GPU's profile is placed on this machine's GPU ceilings where it has a GPU (else the roofline
# step says it has none to place it on)
backend = select_backend("cpu" if device_backend(profile.device) == "cpu" else "auto")
receipt = keep_run(import_tables(profile, name, backend), snakemake.output.receipt)
log.info(
    "kept run %s: %d operators of %s (%s, sha256 %s)",
    receipt["run_id"], len(profile.operators), profile.path.name, tool, profile.sha256[:12],
)  # fmt: skip
