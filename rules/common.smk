# Inputs and params built per job from the config. Params are JSON text with sorted keys: equal
# settings give equal params, so Snakemake reruns a job only when its own settings change.
import json
from pathlib import Path


wildcard_constraints:
    sweep="[A-Za-z0-9_-]+",


def as_param(value):
    return json.dumps(value, sort_keys=True)


def sweep_param(wildcards):
    return as_param(config["sweeps"][wildcards.sweep])


def timing_receipts(wildcards=None):
    return expand("results/sweeps/{sweep}/timing.json", sweep=sorted(config["sweeps"]))


def correctness_receipts(wildcards=None):
    return expand(
        "results/sweeps/{sweep}/correctness.json", sweep=sorted(config["sweeps"])
    )


def results_folder(receipt):
    """results/ from any receipt path results/<stage>/<receipt>.json."""
    return str(Path(receipt).parents[1])
