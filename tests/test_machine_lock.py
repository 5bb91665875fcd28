"""One measurement at a time per machine (experiments.machine_lock), between real processes: a
second measuring process waits and says for whom, a SIGKILLed holder frees the machine at once,
an orphan keeps it until it ends, and a holder's children measure under its lock."""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rooflab.experiments.machine_lock import (
    HELD_ENV,
    LOCK_DIR_ENV,
    MachineBusy,
    holder,
    lock_path,
    measuring,
)

HOLD = textwrap.dedent(
    """
    import sys, time
    from rooflab.experiments.machine_lock import measuring
    with measuring(sys.argv[1]):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
    """
)


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(HELD_ENV, raising=False)
    return tmp_path


@contextlib.contextmanager
def holding(what: str, seconds: float) -> Iterator[subprocess.Popen]:
    """Another process measuring `what` for `seconds` (killed on leaving the block)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, what, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline().strip() == "held"
        yield process
    finally:
        process.kill()
        process.wait()


def test_a_second_measurement_waits_and_says_for_whom(lock_dir, capsys):
    with holding("ceilings", 1.5) as other:
        started = time.monotonic()
        with measuring("gemm sweep tails", poll_s=0.05) as waited:
            assert holder()["pid"] == os.getpid() and holder()["what"] == "gemm sweep tails"
    assert waited >= 0.5 and time.monotonic() - started >= 0.5
    said = capsys.readouterr().err
    assert f"gemm sweep tails: waiting for the machine: pid {other.pid} (ceilings, since" in said
    assert "the machine is free after" in said


def test_a_busy_machine_past_the_timeout_is_one_clear_error(lock_dir):
    with holding("ceilings", 5) as other:
        busy = rf"still busy after .*pid {other.pid} \(ceilings"
        with (
            pytest.raises(MachineBusy, match=busy),
            measuring("gemm sweep tails", timeout_s=0.2, poll_s=0.05),
        ):
            pass


def test_a_killed_holder_frees_the_machine_at_once(lock_dir):
    with holding("ceilings", 60) as other:
        os.kill(other.pid, signal.SIGKILL)
        other.wait()
    with measuring("gemm sweep tails", timeout_s=1.0) as waited:
        assert waited < 1.0


def test_nested_measurements_and_a_holders_children_do_not_wait_for_themselves(lock_dir):
    with measuring("ceilings", timeout_s=1.0):
        with measuring("library GEMM", timeout_s=1.0) as waited:
            assert waited == 0.0
        child = subprocess.run(
            [sys.executable, "-c", HOLD, "profiled child", "0"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert child.returncode == 0 and child.stdout.strip() == "held"
    assert holder() is None  # released: nothing names a holder
    assert lock_path().parent == lock_dir


@pytest.mark.slow
def test_two_measuring_commands_started_together_measure_one_after_the_other(lock_dir, tmp_path):
    """The tester's case: two campaigns (or a rerun beside an orphaned job) at the same time. The
    second waits, says for whom, and the two runs' measuring intervals do not overlap."""
    import pyarrow.parquet as pq
    import yaml

    from tests.conftest import UNJUDGED, installed_script

    env = {**os.environ, LOCK_DIR_ENV: str(lock_dir)}
    config = tmp_path / "lock.yaml"  # a sweep of about a second: long enough to be waited for
    config.write_text(yaml.safe_dump({
        "backend": "cpu",
        "timing": {"warmup_s": 0.01, "min_time_s": 0.25, "min_samples": 3},
        "disturbance": UNJUDGED,
        "sweeps": {"lock": {"m": [1, 2, 4, 8], "n": [64], "k": [64], "dtypes": ["fp64"],
                            "cache_states": ["warm"]}},
    }))  # fmt: skip
    command = [
        installed_script("rooflab"),
        "measure",
        "gemm",
        "--config",
        config,
        "--sweep",
        "lock",
    ]
    first, second = (
        subprocess.Popen(
            [*command, "--out", tmp_path / name],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("first", "second")
    )
    errors = [process.communicate(timeout=300)[1] for process in (first, second)]
    assert first.returncode == second.returncode == 0, errors
    assert sum("waiting for the machine: pid" in text for text in errors) == 1, errors
    earlier, later = sorted(
        (pq.read_table(path).to_pylist()[0] for path in tmp_path.glob("*/*/runs.parquet")),
        key=lambda row: row["started_at"],
    )
    # the later run started measuring after the earlier one ended
    assert earlier["ended_at"] <= later["started_at"]


def test_the_lock_is_host_wide_whatever_tmpdir_says(monkeypatch):
    """Two users with different TMPDIRs share one lock (a per-TMPDIR lock let them measure at
    once); only an explicit ROOFLAB_LOCK_DIR moves it."""
    monkeypatch.delenv(LOCK_DIR_ENV, raising=False)
    paths = set()
    for tmpdir in ("/tmp/alice", "/tmp/bob"):
        monkeypatch.setenv("TMPDIR", tmpdir)
        tempfile.tempdir = None  # tempfile caches the first TMPDIR it saw
        paths.add(lock_path())
    tempfile.tempdir = None
    assert paths == {Path("/tmp/rooflab-locks/machine.lock")}


def test_waiting_for_the_machine_has_a_limit_and_the_command_says_who_holds_it(lock_dir):
    with holding("ceilings", 30) as other:
        env = {**os.environ, "ROOFLAB_LOCK_WAIT_S": "0.5"}
        env.pop(HELD_ENV, None)
        result = subprocess.run(
            [sys.executable, "-m", "rooflab", "measure", "ceilings", "--backend", "cpu",
             "--quick", "--out", str(lock_dir / "out")],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("rooflab: error: ceilings: the machine was still busy after")
    assert f"pid {other.pid} (ceilings, since" in last
    assert not (lock_dir / "out").exists() or not any((lock_dir / "out").iterdir())


PLANNED_JOB = textwrap.dedent(
    """
    import sys, time
    import rooflab.experiments.watchdog as watchdog
    from rooflab.experiments.machine_lock import measuring_job
    watchdog.JOB_LIMIT_FLOOR_S = 1.0  # an hour in a campaign; a second here
    with measuring_job("job x", "x") as progress:
        progress.plan([0.1])  # planned 0.1 s: its limit is 10 x 0.1 + 1 = 2 s from its start
        print("planned", flush=True)
        time.sleep(60)  # outlives it: a wait no call's limit covers
    """
)


def test_a_measuring_job_is_stopped_at_the_limit_its_plan_sets(lock_dir):
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", PLANNED_JOB], capture_output=True, text=True, timeout=60
    )
    took = time.monotonic() - started
    assert result.returncode == 124, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "rooflab: job x: still running after its limit of 2 s (10x its plan of 0.1 s + 1 s); "
        "stopped (status 124): the machine and its lock are free again"
    )
    assert took < 30  # not the 60 s the job would have slept
    with measuring("next", timeout_s=1) as waited:  # the lock went with the process
        assert waited < 1


SLOW_CALLS = """
import time
from rooflab import Workload
def slow(params, ctx):
    return Workload(run=lambda: time.sleep(0.2), flops=8, bytes=8)  # each call well in its limit
"""


@pytest.mark.slow  # a real workload job stopped at its limit
def test_rooflab_job_limit_s_stops_a_workload_job_naming_it(lock_dir, tmp_path):
    (tmp_path / "mykernels.py").write_text(SLOW_CALLS)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "ROOFLAB_JOB_LIMIT_S": "3"}
    result = subprocess.run(
        [sys.executable, "-m", "rooflab", "measure", "workload", "mykernels:slow",
         "--param", "n=" + ",".join(map(str, range(40))), "--out", "runs"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 124, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "rooflab: workload slow: still running after its limit of 3 s ($ROOFLAB_JOB_LIMIT_S); "
        "stopped (status 124): the machine and its lock are free again"
    )
    assert not any((tmp_path / "runs").glob("*/runs.parquet"))
