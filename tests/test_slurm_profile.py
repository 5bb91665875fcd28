"""profiles/slurm, planned without a cluster: a dry run with the Slurm executor's profile gives each
measuring job a whole node (all the profile's cores, --exclusive, a GPU) and keeps the light rules
on the submit host. tests/slurm/run_local_slurm.sh runs it through a real Slurm."""

import re
import subprocess

import pytest
import yaml

from tests.conftest import REPO, copy_workflow, installed_script

pytest.importorskip("snakemake_executor_plugin_slurm", reason="pip install -e '.[slurm]'")

PROFILE = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
MEASURING = (
    "ceilings",
    "correctness",
    "time_gemm",
    "time_workload",
    "counters",
    "measure_stages",
    "time_timeline",
)
TINY = yaml.safe_load((REPO / "tests" / "slurm" / "tiny.yaml").read_text())  # one sweep


def dry_run_of(workdir) -> str:
    """The plan of `snakemake --workflow-profile profiles/slurm --dry-run` in `workdir`."""
    result = subprocess.run(
        [installed_script("snakemake"), "--workflow-profile", "profiles/slurm", "--dry-run"],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    return dry_run_of(copy_workflow(tmp_path_factory.mktemp("slurm"), TINY))


def planned_jobs(output: str) -> list[dict[str, str]]:
    """One dict per planned job: rule, threads and each resource as printed by the dry run."""
    jobs = []
    for block in re.split(r"\n(?=\[[^\n]*\]\n(?:local)?rule )", output):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        if rule is None:
            continue
        job = {"rule": rule[1]}
        if threads := re.search(r"^\s+threads: (\d+)", block, re.M):
            job["threads"] = threads[1]
        if resources := re.search(r"^\s+resources: (.*)$", block, re.M):
            job.update(item.split("=", 1) for item in resources[1].split(", "))
        jobs.append(job)
    return jobs


def job_counts(dry_run_output: str) -> dict[str, int]:
    table = dry_run_output.split("Job stats:")[1].split("total")[0]
    return {name: int(count) for name, count in re.findall(r"^(\w+)\s+(\d+)$", table, re.M)}


def test_profile_uses_the_slurm_executor():
    assert PROFILE["executor"] == "slurm"
    assert PROFILE["jobs"] >= 1 and PROFILE["cores"] >= 1
    assert set(PROFILE["set-resources"]) == set(MEASURING)
    assert "resources" not in PROFILE  # no global gpu limit: measuring jobs spread over nodes


def test_dry_run_plans_the_campaign(dry_run):
    assert job_counts(dry_run) == {
        "ceilings": 1,
        "correctness": 1,
        "time_gemm": 1,
        "counters": 1,
        "roofline": 1,
        "ingest": 1,
        "report": 1,
        "all": 1,
    }


def test_measuring_jobs_take_a_whole_node(dry_run):
    jobs = [job for job in planned_jobs(dry_run) if job["rule"] in MEASURING]
    assert len(jobs) == 4
    for job in jobs:
        assert job["threads"] == str(PROFILE["cores"]), job  # --cpus-per-task
        assert job["gpu"] == "1" and job["slurm_extra"] == "--exclusive", job
        assert int(job["runtime"]) >= 30 and job["mem_mb"] == "0", job  # 0: no --mem flag


def test_light_rules_run_on_the_submit_host(dry_run):
    jobs = {job["rule"]: job for job in planned_jobs(dry_run)}
    for rule in ("roofline", "ingest", "report"):
        assert "gpu" not in jobs[rule] and "slurm_extra" not in jobs[rule], jobs[rule]
    snakefile = (REPO / "Snakefile").read_text()
    declared = re.search(r"^localrules:\n((?:    \w+,\n)+)", snakefile, re.M)
    assert declared is not None, "the Snakefile declares no localrules"
    assert {"roofline", "ingest", "report"} <= set(re.findall(r"\w+", declared[1]))


def test_each_machine_gets_its_ceilings_and_sweeps_on_its_own_nodes(tmp_path):
    """Two node types: every measuring job once per machine, each selecting its nodes."""
    config = {
        **TINY,
        "machines": {
            "h100": {"slurm_extra": "--constraint=h100"},
            "h200": {"slurm_extra": "--constraint=h200"},
        },
    }
    plan = dry_run_of(copy_workflow(tmp_path, config))
    counts = job_counts(plan)
    assert (counts["ceilings"], counts["correctness"], counts["time_gemm"]) == (2, 2, 2)
    assert counts["counters"] == 2
    extras = sorted(job["slurm_extra"] for job in planned_jobs(plan) if job["rule"] in MEASURING)
    assert extras == ["--exclusive --constraint=h100"] * 4 + ["--exclusive --constraint=h200"] * 4
    assert "results/ceilings/h200/receipt.json" in plan
    assert "results/sweeps/a/h100/timing.json" in plan
