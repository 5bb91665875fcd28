"""The Snakemake workflow, run for real on a tiny campaign in a temporary copy of the repository."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
import yaml

from rooflab.backends.base import FLUSH_BYTES_ENV
from tests.campaigns import TINY
from tests.conftest import REPO, copy_workflow, installed_script, run_rooflab

# A real campaign (about 40 s on two cores) and a killed one: run by .ci/run (pytest -m slow).
pytestmark = pytest.mark.slow


def snakemake(workdir: Path, *args: str, **popen) -> subprocess.CompletedProcess:
    return subprocess.run(
        [installed_script("snakemake"), "--cores", "2", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
        **popen,
    )


def job_counts(dry_run_output: str) -> dict[str, int]:
    table = dry_run_output.split("Job stats:")[1].split("total")[0]
    return {name: int(count) for name, count in re.findall(r"^(\w+)\s+(\d+)$", table, re.M)}


def sql(workdir: Path, text: str) -> list[tuple]:
    with duckdb.connect(str(workdir / "store" / "rooflab.duckdb"), read_only=True) as con:
        return con.execute(text).fetchall()


@pytest.fixture(scope="module")
def campaign_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    workdir = copy_workflow(tmp_path_factory.mktemp("campaign"), TINY)
    # the flush as the campaign sizes it, which a test here judges (not the suite's 8 MiB)
    env = {name: value for name, value in os.environ.items() if name != FLUSH_BYTES_ENV}
    result = snakemake(workdir, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return workdir, result


@pytest.fixture(scope="module")
def campaign(campaign_run) -> Path:
    return campaign_run[0]


def test_the_campaign_ends_saying_where_the_report_and_the_store_are(campaign_run):
    """What the terminal shows (docs/workflow.md): the summary at the end, no `Shell command:
    None`; the jobs' progress is in their logs (on a terminal it is on the terminal too:
    tests/test_progress.py, with a pseudo-terminal)."""
    workdir, result = campaign_run
    said = result.stdout + result.stderr
    assert "rooflab: the report is results/report/index.html" in result.stdout
    assert "rooflab: the store is store/rooflab.duckdb (13 new run(s)" in result.stdout
    assert 'rooflab query --db store/rooflab.duckdb "SELECT * FROM latest_ceilings"' in said
    assert "Shell command" not in said
    assert "\x1b[K" not in said  # not a terminal: no status line anywhere
    ceilings = (workdir / "logs" / "ceilings" / "local.log").read_text()
    first = r"^\[ceilings\] 1/\d+ fma fp64 round 0 \(0\.0 s in, .+ left\)$"  # the plan's ETA
    assert re.search(first, ceilings, re.M)
    assert "[ceilings] done: " in ceilings
    timing = (workdir / "logs" / "time_gemm" / "a" / "local.log").read_text()
    # 2 configurations x 2 cache states, each in 2 rounds (timing.rounds)
    assert "[gemm a] 1/8 fp64/nn/m1_n16_k16 warm round 1 (0.0 s in, " in timing
    assert "[gemm a] done: 8 of 8 in " in timing


def test_campaign_fills_the_store(campaign):
    kinds = dict(sql(campaign, "SELECT kind, count(*) FROM runs GROUP BY kind"))
    assert kinds == {
        "ceilings": 1,
        "correctness": 2,
        "gemm": 2,
        "counters": 4,
        "workload": 2,
        "stages": 1,
        "timeline": 1,
    }
    assert not (campaign / "results" / "rooflab.duckdb").exists()  # config store.db, not here
    assert sql(campaign, "SELECT count(*) FROM gemm_points")[0][0] == 2 * 2 + 1
    assert sql(campaign, "SELECT count(*) FROM samples")[0][0] >= 5 * 3
    levels = {row[0] for row in sql(campaign, "SELECT DISTINCT level FROM roofline_points")}
    assert "DRAM" in levels  # cold points pair with the DRAM ceiling
    report = campaign / "results" / "report"
    assert "<script src=" not in (report / "index.html").read_text()
    assert (report / "roofline.png").stat().st_size > 0 and (report / "roofline.svg").exists()
    for log in ("ceilings/local", "correctness/a/local", "time_gemm/b/local", "roofline", "ingest"):
        assert (campaign / "logs" / f"{log}.log").stat().st_size > 0
    for counted in ("sweeps/a", "workloads/fused"):
        assert (campaign / "logs" / "counters" / counted / "local.log").stat().st_size > 0


def test_cold_samples_evict_their_operands_and_the_flush_is_sized_from_the_ceilings(campaign):
    """Cold GEMM points evict their operands X, W and Y (CpuBackend.make_cold), as do workloads
    that declare their arrays; the buffer flush the rest use is sized by each timing job from
    the last cache level's edge the campaign's ceilings run measured (backends.base.flush_size),
    or the job says it used the reported rule."""
    (ceilings_run,), *_ = sql(campaign, "SELECT run_id FROM runs WHERE kind = 'ceilings'")
    ((edge,),) = sql(
        campaign, "SELECT measured_bytes FROM cache_capacities ORDER BY bytes DESC LIMIT 1"
    )
    cold = sql(
        campaign,
        "SELECT flush_method, flush_bytes, "
        "(m * k + k * n + m * n) * CASE dtype WHEN 'fp64' THEN 8 ELSE 4 END "
        "FROM gemm_points WHERE cache_state = 'cold'",
    )
    assert cold
    for method, flush_bytes, operands in cold:
        assert flush_bytes == operands
        assert method.endswith(f"of every cache line of the call's operands ({operands} B), "
                               "then a fence, before each sample: out of every cache level "
                               "whatever its size")  # fmt: skip
    workloads = sql(campaign, "SELECT flush_method FROM workload_points WHERE cache_state = 'cold'")
    assert workloads and all("of the call's operands" in method for (method,) in workloads)
    sized = f"ceilings run {ceilings_run}" if edge is not None else "2x the summed reported"
    for log in (campaign / "logs" / "time_gemm").rglob("*.log"):
        (line,) = [line for line in log.read_text().splitlines() if "cold flush:" in line]
        assert sized in line and (edge is None or f"{edge} B" in line)


def test_every_timed_point_is_placed_or_stored_as_unplaced(campaign):
    """The roofline rule's unplaced_points reach the store through ingest, and with the model
    points they account for every timed point."""
    unplaced = pq.read_metadata(campaign / "results/roofline/unplaced_points.parquet").num_rows
    assert sql(campaign, "SELECT count(*) FROM unplaced_points") == [(unplaced,)]
    timed = sql(
        campaign,
        "SELECT (SELECT count(*) FROM gemm_points) + (SELECT count(*) FROM workload_points)",
    )[0][0]
    placed = sql(campaign, "SELECT count(*) FROM roofline_points WHERE q_source = 'model'")[0][0]
    assert timed > 0 and placed + unplaced == timed


def test_every_point_and_timeline_step_is_diagnosed(campaign):
    """Issue 43: the roofline rule's point_diagnoses reach the store: one diagnosis per newest
    Roofline point, per same_work_as pair, per timeline step with a bound and per measured stage
    and schedule; the report lists the furthest."""
    points = sql(campaign, "SELECT count(*) FROM latest_roofline_points")[0][0]
    pairs = sql(campaign, "SELECT count(*) FROM implementation_comparisons")[0][0]
    steps = sql(campaign, "SELECT count(*) FROM timeline_modes WHERE bound_s IS NOT NULL")[0][0]
    stages = sql(campaign, "SELECT count(*) FROM latest_stage_timings")[0][0]
    kinds = dict(sql(campaign, "SELECT kind, count(*) FROM diagnoses GROUP BY kind"))
    assert points > 0 and pairs > 0 and steps == 2 and kinds.pop("timeline") == steps
    assert kinds.pop("stages") == stages + 2  # each stage, and the serial and overlapped schedules
    assert sum(kinds.values()) == points + pairs
    page = (campaign / "results" / "report" / "index.html").read_text()
    assert "Furthest from their roofs" in page


def test_workloads_reach_the_roofline_and_their_comparison(campaign):
    points = sql(
        campaign,
        "SELECT sweep, cache_state, params, level FROM latest_model_points "
        "WHERE m IS NULL ORDER BY sweep, cache_state",
    )
    assert [(sweep, state) for sweep, state, *_ in points] == [
        ("fused", "cold"),
        ("fused", "warm"),
        ("unfused", "cold"),
        ("unfused", "warm"),
    ]
    assert {params for _, _, params, _ in points} == {'{"n": 65536}'}
    compared = sql(
        campaign,
        "SELECT workload, baseline, cache_state, useful_flops, speedup, bytes, baseline_bytes, "
        "says FROM implementation_comparisons ORDER BY cache_state",
    )
    assert [row[:4] for row in compared] == [
        ("fused", "unfused", "cold", 2 * 65536),
        ("fused", "unfused", "warm", 2 * 65536),
    ]
    for *_, speedup, q, baseline_q, says in compared:
        assert (q, baseline_q) == (2 * 4 * 65536, 6 * 4 * 65536)  # fusion: a third of Q
        assert speedup > 0 and ("faster" in says or "slower" in says)
    assert (campaign / "results" / "report" / "roofline.png").is_file()


def test_stages_are_measured_on_the_campaigns_ceilings_and_reach_the_report(campaign):
    (row,) = sql(
        campaign,
        "SELECT o.scenario, o.ceilings_run_id = c.run_id, o.serial_s > 0, o.overlapped_s > 0, "
        "o.says FROM stage_overlap AS o, (SELECT run_id FROM runs WHERE kind = 'ceilings') AS c",
    )
    assert row[:4] == ("overlap", True, True, True)
    assert row[4].startswith("serial ") and "aggregate bound" in row[4]
    assert (campaign / "results" / "report" / "stage_overlap_overlap.png").is_file()


def test_the_timeline_is_measured_per_mode_and_drawn(campaign):
    modes = sql(campaign, "SELECT mode, kernels FROM timeline_modes ORDER BY mode")
    assert modes == [("eager", 16), ("fused", 1)]
    assert (campaign / "results" / "report" / "timeline_step.png").is_file()
    assert (campaign / "logs" / "time_timeline" / "step" / "local.log").stat().st_size > 0


def test_counters_job_records_its_status_and_the_points_keep_model_bytes(campaign):
    """perf around the child of each sweep and each workload on this CPU. On these development
    machines (no virtual PMU) perf counts no hardware event: every counters job succeeds,
    records `unavailable` with perf's reason, and every Roofline point keeps model bytes."""
    for folder in ("sweeps/a", "sweeps/b", "workloads/fused", "workloads/unfused"):
        receipt = json.loads((campaign / f"results/{folder}/local/counters.json").read_text())
        timing = json.loads((campaign / f"results/{folder}/local/timing.json").read_text())
        assert receipt["sweep"] == folder.split("/")[1]
        assert receipt["kind"] == "counters" and receipt["timing_run_id"] == timing["run_id"]
        assert receipt["status"] in ("unavailable", "ok", "partial", "none")
        summary = sql(
            campaign,
            "SELECT status, unavailable_reason, tool FROM counters_summary "
            f"WHERE run_id = '{receipt['run_id']}'",
        )
        assert summary == [(receipt["status"], receipt["reason"], "perf")]
        if receipt["status"] == "unavailable":
            assert receipt["reason"].startswith("perf: ")
            assert receipt["trusted_calibrations"] == 0
    assert sql(campaign, "SELECT DISTINCT q_source FROM roofline_points") == [("model",)]
    assert sql(campaign, "SELECT count(*) FROM counter_calibration")[0][0] == 0
    page = (campaign / "results" / "report" / "index.html").read_text()
    unavailable = sql(
        campaign, "SELECT count(*) FROM counters_summary WHERE status = 'unavailable'"
    )
    if unavailable[0][0]:
        assert "<b>Hardware counters: unavailable</b> — perf: " in page
        assert "points use model bytes (<code>q_source = model</code>)" in page


def test_counters_can_be_left_out(tmp_path):
    workdir = copy_workflow(tmp_path, {**TINY, "counters": {"enabled": False}})
    dry = snakemake(workdir, "-n")
    assert dry.returncode == 0, dry.stderr
    counts = job_counts(dry.stdout)
    assert "counters" not in counts and counts["time_gemm"] == 2


def test_second_run_does_nothing(campaign):
    result = snakemake(campaign, "-n")
    assert result.returncode == 0 and "Nothing to be done" in result.stdout + result.stderr


def _reversed_keys(value):
    if isinstance(value, dict):
        return {key: _reversed_keys(value[key]) for key in reversed(list(value))}
    return value


def test_editing_one_sweep_reruns_only_that_sweep(campaign):
    config = yaml.safe_load((campaign / "config" / "config.yaml").read_text())
    # the same settings in another order are the same params: nothing reruns
    reordered = yaml.safe_dump(_reversed_keys(config), sort_keys=False)
    (campaign / "config" / "config.yaml").write_text(reordered)
    same = snakemake(campaign, "-n")
    assert "Nothing to be done" in same.stdout + same.stderr, same.stdout
    config["sweeps"]["a"]["m"] = [1, 2, 4]
    (campaign / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    dry = snakemake(campaign, "-n")
    assert dry.returncode == 0, dry.stderr
    assert job_counts(dry.stdout) == {
        "correctness": 1,
        "time_gemm": 1,
        "counters": 1,
        "roofline": 1,
        "ingest": 1,
        "report": 1,
        "all": 1,
    }
    assert "sweep=a" in dry.stdout and "sweep=b" not in dry.stdout
    result = snakemake(campaign)
    assert result.returncode == 0, result.stdout + result.stderr
    # The earlier run of sweep a is kept; the latest view shows the new M list.
    assert sql(campaign, "SELECT count(*) FROM runs WHERE kind = 'gemm' AND sweep = 'a'")[0][0] == 2
    counters = "SELECT sweep, count(*) FROM runs WHERE kind = 'counters' GROUP BY 1 ORDER BY 1"
    assert sql(campaign, counters) == [("a", 2), ("b", 1), ("fused", 1), ("unfused", 1)]
    latest = sql(
        campaign,
        "SELECT DISTINCT m FROM latest_gemm_points WHERE sweep = 'a' "
        "AND run_id = (SELECT max(run_id) FROM runs WHERE sweep = 'a' AND kind = 'gemm')",
    )
    assert sorted(m for (m,) in latest) == [1, 2, 4]
    # The derived rows cover every kept run, the older run of sweep a too, so a rebuild from the
    # files gives back every point the store had.
    per_run = "SELECT run_id, count(*) FROM roofline_points GROUP BY 1 ORDER BY 1"
    before = sql(campaign, per_run)
    timed = "SELECT run_id FROM runs WHERE kind IN ('gemm', 'workload') ORDER BY 1"
    # 5 runs: sweep a twice, b, and the two workloads
    assert [run for run, _ in before] == [run for (run,) in sql(campaign, timed)]
    rebuilt = run_rooflab("store", "rebuild", "--db", "store/rooflab.duckdb", cwd=campaign)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert sql(campaign, per_run) == before


def test_a_sweep_the_machine_cannot_hold_is_refused_before_anything_is_measured(tmp_path):
    huge = {
        **TINY,
        "sweeps": {
            **TINY["sweeps"],
            "huge": {"m": [400000], "n": [400000], "k": [8], "dtypes": ["fp32"]},
        },
    }
    workdir = copy_workflow(tmp_path, huge)
    for args in (["-n"], []):  # a dry run says so too
        result = snakemake(workdir, *args)
        assert result.returncode != 0
        said = result.stdout + result.stderr
        assert (
            "config/config.yaml: sweeps.huge: huge/fp32/nn/m400000_n400000_k8: m=400000 n=400000 "
            "k=8 fp32 needs 640.03 GB but only" in said
        )
    assert not (workdir / "results").exists()  # nothing was measured


def test_killed_measuring_job_leaves_no_rows(tmp_path):
    slow = {
        **TINY,
        "timing": {**TINY["timing"], "min_time_s": 30.0},
        "sweeps": {"a": TINY["sweeps"]["a"]},
    }
    workdir = copy_workflow(tmp_path, slow)
    process = subprocess.Popen(
        [installed_script("snakemake"), "--cores", "2", "results/sweeps/a/local/timing.json"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    log = workdir / "logs" / "time_gemm" / "a" / "local.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and "[gemm a]" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert process.poll() is None, "the workflow ended before the measurement could be killed"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    kept = [d for d in (workdir / "results" / "sweeps" / "a" / "local" / "runs").iterdir()]
    assert [d for d in kept if (d / "timed_points.parquet").exists()] == []  # timing wrote nothing
    result = run_rooflab(
        "store",
        "ingest",
        "--db",
        str(workdir / "store" / "rooflab.duckdb"),
        "--results",
        str(workdir / "results"),
    )
    assert result.returncode == 0, result.stderr
    assert sql(workdir, "SELECT kind FROM runs") == [("correctness",)]
    assert sql(workdir, "SELECT count(*) FROM samples")[0][0] == 0


README_QUERIES = [
    query
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for query in re.findall(r"```sql\n(.*?)```", page.read_text(), re.DOTALL)
]


@pytest.mark.parametrize("text", README_QUERIES, ids=[q.splitlines()[0] for q in README_QUERIES])
def test_readme_queries_run_on_a_real_campaign(campaign, text):
    sql(campaign, text)  # a renamed column or view fails here
