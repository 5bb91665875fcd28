"""What a campaign says when it ends (rooflab.workflow, the Snakefile's onsuccess and onerror):
from real receipts and the run folders they name, as the measuring jobs keep them."""

import signal
import subprocess
import time
from datetime import UTC, datetime

import pytest

from rooflab.records import new_run_id
from rooflab.workflow import (
    campaign_summary,
    failed_logs,
    keep_run,
    say_campaign_done,
    say_campaign_failed,
    write_receipt,
)
from tests.conftest import installed_script
from tests.table_rows import runs_row

NOTE = "auto: no CUDA device (cupy is not installed); fell back to cpu"


def _keep(receipt: str, kind: str, sweep: str | None, busy: str | None = None, **extra) -> str:
    """A run of `kind` kept beside `receipt` the way the workflow scripts keep theirs."""
    run_id = new_run_id()
    row = runs_row(
        run_id, kind, datetime(2026, 12, 1, 9, tzinfo=UTC), sweep, machine_id="m-local",
        backend="cpu", backend_requested="auto", backend_note=NOTE, busy_warning=busy,
    )  # fmt: skip
    keep_run({"runs": [row]}, receipt, **extra)
    return run_id


# what perf's counters step said on this project's VM (rooflab.counters.perf.pmu_note), 137 chars
PMU = (
    "perf counted no event: no CPU PMU exposed to this kernel (event sources: breakpoint, msr, "
    "software, tracepoint, uprobe); CPU flag 'hypervisor' set: a virtual machine"
)


@pytest.fixture
def campaign(tmp_path, monkeypatch):
    """The results of a campaign on a machine without CUDA: ceilings, one sweep whose counters
    perf could not count, one configuration that failed its check; the store and the report."""
    monkeypatch.chdir(tmp_path)
    receipts = [
        "results/ceilings/local/receipt.json",
        "results/sweeps/a/local/correctness.json",
        "results/sweeps/a/local/timing.json",
        "results/sweeps/a/local/counters.json",
    ]
    added = [
        _keep(receipts[0], "ceilings", None, busy="other processes used 1.2 CPUs"),
        _keep(receipts[1], "correctness", "a", passed=["a/x"], failed=["a/fp16/nn/m1_n8_k8"]),
        _keep(receipts[2], "gemm", "a"),
        _keep(receipts[3], "counters", "a", status="unavailable", reason=PMU),
    ]
    write_receipt("results/store/ingest.json", {"db": "store/rooflab.duckdb", "added": added})
    (tmp_path / "results" / "report").mkdir(parents=True)
    (tmp_path / "results" / "report" / "index.html").write_text("<html></html>")
    return receipts


def test_the_summary_says_where_things_are_what_fell_back_and_a_query_to_try(campaign):
    lines = campaign_summary(
        "results/report/index.html", "results/store/ingest.json", [*campaign, "results/gone.json"]
    )
    assert lines == [
        "rooflab: the report is results/report/index.html",
        "rooflab: the store is store/rooflab.duckdb (4 new run(s); `rooflab runs` lists all)",
        f"rooflab: 4 of 4 runs measured on cpu: {NOTE}",
        "rooflab: 1 run(s) measured on a busy machine (runs.busy_warning says why)",
        f"rooflab: counters of a unavailable: {PMU}",  # whole, not cut at 100 characters
        "rooflab: 1 configuration(s) failed correctness, not timed",
        'rooflab: try `rooflab query --db store/rooflab.duckdb "SELECT * FROM latest_ceilings"`',
    ]


def test_the_summary_is_printed_unless_snakemake_is_quiet_about_everything(campaign, capsys):
    args = ("results/report/index.html", "results/store/ingest.json", campaign)
    say_campaign_done(*args)
    printed = capsys.readouterr().out
    assert printed.startswith("rooflab: the report is results/report/index.html\n")
    assert "latest_ceilings" in printed
    say_campaign_done(*args, quiet={"progress", "rules"})  # plain --quiet: still said
    assert capsys.readouterr().out == printed
    say_campaign_done(*args, quiet={"all"})
    assert capsys.readouterr().out == ""


def test_a_partial_campaign_says_what_it_has(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a target short of the report: no store, no report yet
    assert campaign_summary("results/report/index.html", "results/store/ingest.json", []) == []


SNAKEMAKE_LOG = """\
[Tue Dec  1 09:00:00 2026]
rule time_gemm:
    input: results/sweeps/a/local/correctness.json
Error in rule time_gemm:
    message: None
    jobid: 4
    input: results/sweeps/a/local/correctness.json
    output: results/sweeps/a/local/timing.json
    log: logs/time_gemm/a/local.log (check log file(s) for error details)
Error in rule ingest:
    jobid: 2
    log: logs/ingest.log (check log file(s) for error details)
"""


def test_a_failed_campaign_names_the_logs_to_read(tmp_path, capsys):
    log = tmp_path / "2026-12-01T090000.snakemake.log"
    log.write_text(SNAKEMAKE_LOG)
    assert failed_logs([str(log)]) == [
        ("time_gemm", "logs/time_gemm/a/local.log"),
        ("ingest", "logs/ingest.log"),
    ]
    say_campaign_failed([str(log)])
    assert capsys.readouterr().out.splitlines() == [
        "rooflab: the campaign stopped; read the log of what failed "
        "(time_gemm: logs/time_gemm/a/local.log; ingest: logs/ingest.log)",
        "rooflab: fix it and rerun the same command: finished jobs are not rerun",
    ]
    say_campaign_failed([str(tmp_path / "missing.log")])
    assert "Snakemake's log says what failed" in capsys.readouterr().out


STOPPABLE = """
from rooflab.workflow import say_campaign_failed

rule all:
    input: "done.txt"

rule slow:
    output: "done.txt"
    shell: "touch started.txt; sleep 4; touch {output}"

onerror:
    say_campaign_failed(log)
"""


@pytest.mark.slow  # a real Snakemake campaign, stopped by SIGTERM
def test_a_campaign_stopped_by_sigterm_says_nothing_failed(tmp_path):
    """Real Snakemake, sent SIGTERM while a job runs: it lets the job finish, then stops; the
    campaign's closing words say it was stopped, not that something failed."""
    (tmp_path / "Snakefile").write_text(STOPPABLE)
    snakemake = subprocess.Popen(
        [installed_script("snakemake"), "--cores", "1"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (tmp_path / "started.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    snakemake.send_signal(signal.SIGTERM)
    out, _ = snakemake.communicate(timeout=120)
    assert (
        "rooflab: the campaign was stopped on request (SIGTERM or Ctrl-C) after its running "
        "jobs finished; nothing failed"
    ) in out, out
    assert "says what failed" not in out
