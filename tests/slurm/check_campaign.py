"""Checks for tests/slurm/run_local_slurm.sh after its campaign: every measuring job went through
Slurm (kept Slurm job log, COMPLETED in Slurm's job completion log, on the node), the light rules
did not, measurements on the node never overlapped, and the store holds one run per Slurm job,
measured inside that job's time on that node. Prints the jobs beside their runs; exit 1 on a miss.
"""

import argparse
import itertools
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb

# Rule of the workflow -> kind of run it stores.
MEASURING = {
    "ceilings": "ceilings",
    "correctness": "correctness",
    "time_gemm": "gemm",
    "time_workload": "workload",
    "counters": "counters",
    "measure_stages": "stages",
    "time_timeline": "timeline",
}
SWEEPS = ("a",)  # tests/slurm/tiny.yaml


def slurm_jobs_from_logs(campaign: Path) -> dict[str, tuple[str, str | None]]:
    """Slurm job id -> (rule, sweep), from the plugin's kept logs rule_<rule>/<wildcards>/<id>.log,
    where the plugin joins the wildcard values with "_": <sweep>_<machine>, <kind>_<sweep>_<machine>
    (counters), or <machine>."""
    jobs = {}
    for log in (campaign / ".snakemake" / "slurm_logs").rglob("*.log"):
        parts = log.relative_to(campaign / ".snakemake" / "slurm_logs").parts
        rule = parts[0].removeprefix("rule_")
        wildcards = parts[1] if len(parts) == 3 else ""
        sweep = wildcards.rsplit("_", 1)[0].removeprefix("sweeps_")  # counters: <kind>_<name>
        jobs[log.stem] = (rule, sweep if rule != "ceilings" else None)
    return jobs


def completed_jobs(jobcomp: Path) -> dict[str, dict[str, str]]:
    """Slurm job id -> its fields in jobcomp/filetxt's log (one `Key=value ...` line per job)."""
    jobs = {}
    for line in jobcomp.read_text().splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        jobs[fields["JobId"]] = fields
    return jobs


def slurm_time(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)  # the script runs Slurm with TZ=UTC


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--campaign", type=Path, required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--jobcomp", type=Path, required=True)
    args = parser.parse_args()
    problems = []

    run_name = re.search(r"SLURM run ID: (\S+)", (args.campaign / "snakemake.log").read_text())[1]
    logged = slurm_jobs_from_logs(args.campaign)
    completed = {
        job_id: fields
        for job_id, fields in completed_jobs(args.jobcomp).items()
        if fields["Name"] == run_name
    }
    per_sweep = ("correctness", "time_gemm", "counters")
    expected = {("ceilings", None)} | {(r, s) for r in per_sweep for s in SWEEPS}
    if set(logged.values()) != expected or len(logged) != len(expected):
        problems.append(f"Slurm jobs by rule: {sorted(logged.values(), key=str)}, not {expected}")
    if set(completed) != set(logged):
        problems.append(f"jobs in jobcomp {sorted(completed)} != jobs with a log {sorted(logged)}")
    for job_id, fields in completed.items():
        if fields["JobState"] != "COMPLETED" or fields["NodeList"] != args.node:
            problems.append(f"job {job_id}: {fields['JobState']} on {fields['NodeList']}")
    # --exclusive: one measurement at a time on the node.
    spans = sorted(
        (slurm_time(f["StartTime"]), slurm_time(f["EndTime"])) for f in completed.values()
    )
    if any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans)):
        problems.append(f"measuring jobs overlapped on {args.node}: {spans}")

    with duckdb.connect(str(args.campaign / "results" / "rooflab.duckdb"), read_only=True) as con:
        runs = con.execute(
            "SELECT run_id, kind, sweep, host, machine_id, started_at, ended_at FROM runs "
            "ORDER BY started_at"
        ).fetchall()
    header = f"{'slurm job':>9}  {'rule':<12}{'sweep':<6}{'state':<10}{'node':<8}"
    print(header + "run_id / host / machine_id")
    second = timedelta(seconds=1)  # jobcomp times are whole seconds
    for job_id, (rule, sweep) in sorted(logged.items(), key=lambda item: int(item[0])):
        fields = completed.get(job_id, {})
        start = slurm_time(fields.get("StartTime", "1970-01-01T00:00:00"))
        end = slurm_time(fields.get("EndTime", "1970-01-01T00:00:00"))
        inside = [
            run
            for run in runs
            if run[1] == MEASURING.get(rule)
            and run[2] == sweep
            and start - second <= run[5] <= run[6] <= end + second
        ]
        if len(inside) != 1:
            problems.append(f"job {job_id} ({rule} {sweep}): {len(inside)} runs inside its time")
        for run_id, _, _, host, machine_id, *_ in inside:
            if host != args.node:
                problems.append(f"run {run_id} records host {host}, not the node {args.node}")
            print(
                f"{job_id:>9}  {rule:<12}{sweep or '-':<6}{fields.get('JobState', '?'):<10}"
                f"{fields.get('NodeList', '?'):<8}{run_id} / {host} / {machine_id}"
            )
    if len(runs) != len(expected):
        problems.append(f"{len(runs)} runs in the store, expected {len(expected)}")

    for problem in problems:
        print("PROBLEM:", problem, file=sys.stderr)
    if not problems:
        print(f"{len(logged)} measuring jobs ran through Slurm on {args.node}, one run each")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
