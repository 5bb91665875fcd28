# Inputs and params built per job from the config. Params are plain dicts with their keys sorted
# at every depth: Snakemake compares a job's params by their repr, so equal settings give equal
# params whatever order a config file lists them in, and a job reruns only when its own change.
from pathlib import Path


wildcard_constraints:
    sweep="[A-Za-z0-9_-]+",
    workload="[A-Za-z0-9_-]+",
    name="[A-Za-z0-9_-]+",
    scenario="[A-Za-z0-9_-]+",
    timeline="[A-Za-z0-9_-]+",
    kind="sweeps|workloads",
    machine="[A-Za-z0-9_-]+",


MACHINES = sorted(config["machines"])
# The datasheet presets the roofline step matches device names against.
DEVICES_FILE = str(Path(workflow.basedir) / "config" / "devices.yaml")


def as_param(value):
    if isinstance(value, dict):
        return {key: as_param(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [as_param(item) for item in value]
    return value


def sweep_param(wildcards):
    return as_param(config["sweeps"][wildcards.sweep])


def workload_param(wildcards):
    return as_param(with_path(config["workloads"][wildcards.workload]))


def with_path(workload):
    """A workload's section and, where the config names one, its workloads_path."""
    path = config["workloads_path"]
    return {**workload, "path": path} if path else workload


def counted_param(wildcards):
    """The config section of what a counters job counts: a sweep, or a workload."""
    section = config[wildcards.kind][wildcards.name]
    return as_param(with_path(section) if wildcards.kind == "workloads" else section)


def scenario_param(wildcards):
    return as_param(config["stages"][wildcards.scenario])


def stage_receipts(wildcards=None):
    """One measure_stages job per measurable stages scenario and machine."""
    measurable = sorted(n for n, s in config["stages"].items() if s.get("measurable"))
    return expand(
        "results/stages/{scenario}/{machine}/timing.json",
        scenario=measurable,
        machine=MACHINES,
    )


def timeline_param(wildcards):
    return as_param(config["timelines"][wildcards.timeline])


def timeline_receipts(wildcards=None):
    return expand(
        "results/timelines/{timeline}/{machine}/timing.json",
        timeline=sorted(config["timelines"]),
        machine=MACHINES,
    )


def workload_receipts(wildcards=None):
    return expand(
        "results/workloads/{workload}/{machine}/timing.json",
        workload=sorted(config["workloads"]),
        machine=MACHINES,
    )


def import_receipts(wildcards=None):
    return expand("results/imports/{name}/receipt.json", name=sorted(config["imports"]))


def import_file(wildcards):
    return config["imports"][wildcards.name]["file"]


def import_tool(wildcards):
    return config["imports"][wildcards.name]["tool"]


def ceilings_receipts(wildcards=None):
    return expand("results/ceilings/{machine}/receipt.json", machine=MACHINES)


def ceilings_receipt(wildcards):
    """The machine's ceilings receipt, which a timing job sizes its cold flush from when it is
    there (a param, not an input: a rerun of the ceilings reruns no timing job)."""
    return f"results/ceilings/{wildcards.machine}/receipt.json"


def timing_receipts(wildcards=None):
    return expand(
        "results/sweeps/{sweep}/{machine}/timing.json",
        sweep=sorted(config["sweeps"]),
        machine=MACHINES,
    )


def correctness_receipts(wildcards=None):
    return expand(
        "results/sweeps/{sweep}/{machine}/correctness.json",
        sweep=sorted(config["sweeps"]),
        machine=MACHINES,
    )


def counters_receipts(wildcards=None):
    """One counters job per sweep or workload and machine; none when `counters.enabled` is
    false."""
    if not config["counters"]["enabled"]:
        return []
    return [
        *expand(
            "results/sweeps/{name}/{machine}/counters.json",
            name=sorted(config["sweeps"]),
            machine=MACHINES,
        ),
        *expand(
            "results/workloads/{name}/{machine}/counters.json",
            name=sorted(config["workloads"]),
            machine=MACHINES,
        ),
    ]


def measured_receipts():
    """The receipts of every measuring job of the campaign (its end-of-campaign summary)."""
    return [
        *ceilings_receipts(),
        *correctness_receipts(),
        *timing_receipts(),
        *counters_receipts(),
        *workload_receipts(),
        *stage_receipts(),
        *timeline_receipts(),
    ]


def machine_slurm_extra(wildcards):
    """sbatch options of a measuring job (used only by the Slurm executor): the node to itself,
    so no other job shares its caches, memory bandwidth, clocks or power; then the options that
    select the machine."""
    selected = config["machines"][wildcards.machine].get("slurm_extra", "")
    return f"--exclusive {selected}".strip()


def results_folder(roofline_file):
    """results/ from the path of a file of results/roofline/."""
    return str(Path(roofline_file).parents[1])
