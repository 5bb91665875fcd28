import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rooflab.backends.base import FLUSH_BYTES_ENV
from rooflab.experiments.machine_lock import LOCK_DIR_ENV
from rooflab.progress import ENV as PROGRESS_ENV

# The test suite's cold samples flush 8 MiB, not the gigabyte this host's caches call for (a
# tiny sweep spent 4 of its 5 s flushing): no test judges a cold figure by the flush it got, and
# those that test the flush's size clear this (`delenv(FLUSH_BYTES_ENV)`).
TEST_FLUSH_BYTES = 8 << 20


# What other processes and the hypervisor did, left unjudged: no quiet waited for (and a short
# look for it), no run marked busy, no sample disturbed, so that what a test checks of a
# measurement does not depend on what else ran on the machine; the tests of that judgement
# (test_disturbance.py) set their own.
UNJUDGED = {
    "quiet_wait_s": 0,
    "quiet_max_other_cpus": 1e6,
    "max_other_cpus": 1e6,
    "max_wait_fraction": 1.0,
    "max_steal_fraction": 1.0,
    "quiet_window_s": 0.02,  # the check's reading is unjudged too: a coarse one will do
}


@pytest.fixture(scope="session", autouse=True)
def private_host(tmp_path_factory):
    """The whole session measures under its own lock directory (it neither waits for a campaign
    on this host nor makes one wait) with the test flush, and shows no progress on the terminal
    (a test of the Snakefile's switch that sets it would otherwise leave it on for every later
    `rooflab measure`, whose status line then lands in pytest's output), and a cache folder of
    its own; subprocesses inherit all four."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(LOCK_DIR_ENV, str(tmp_path_factory.mktemp("locks")))
        patch.setenv(FLUSH_BYTES_ENV, str(TEST_FLUSH_BYTES))
        patch.setenv(PROGRESS_ENV, "off")
        # the user's cache folder (the report's Vega bundle): tests write nothing outside
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield


def installed_script(name: str) -> str:
    """A console script of this environment (beside sys.executable), even when PATH lacks it."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed in this environment")
    return found


# Commands that only read, compute and print (or write the store or the report), and the
# measurements of rooflab's own kernels, run in this process: that saves a Python start and
# rooflab's imports (about 0.5 s) per call. A user's workload (its kernel may hang, write to file
# descriptor 1 or exit) and any command given an `env` get a process of their own, unless the
# test expects the command refused before it measures (`refused=True`). A hang of rooflab's own
# kernels would end pytest itself, with the watchdog's line naming what hung.
IN_PROCESS = {"query", "runs", "schema", "model", "compare", "store", "report", "explain"}
IN_PROCESS_MEASURE = {"gemm", "ceilings", "counters", "timeline", "stages"}


def run_rooflab(
    *args: object, cwd: Path | None = None, env: dict | None = None, refused: bool = False
) -> subprocess.CompletedProcess:
    """The `rooflab` command as users and scripts call it (output captured): the installed
    console script, or, for the commands above, its `main` in this process with the same
    arguments, working folder, output and exit status."""
    words = [str(arg) for arg in args]
    if env is None and words and (refused or _in_process_command(words)):
        return _in_process(words, cwd)
    return subprocess.run(
        [installed_script("rooflab"), *words],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _in_process_command(words: list[str]) -> bool:
    if words[0] == "measure":
        return len(words) > 1 and words[1] in IN_PROCESS_MEASURE
    return words[0] in IN_PROCESS


def _in_process(words: list[str], cwd: Path | None) -> subprocess.CompletedProcess:
    from rooflab.cli import main

    stdout, stderr, here = io.StringIO(), io.StringIO(), Path.cwd()
    try:
        os.chdir(cwd or here)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                status = main(words)
            except SystemExit as end:  # argparse's usage errors
                status = end.code if isinstance(end.code, int) else 1
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(words, status, stdout.getvalue(), stderr.getvalue())


REPO = Path(__file__).resolve().parents[1]
WORKFLOW_FILES = ("Snakefile", "rules", "workflow_scripts", "config", "profiles", "environment.yml")


def copy_workflow(target: Path, config: dict | None = None) -> Path:
    """The workflow's files in `target`, with `config` as config/config.yaml when given."""
    for name in WORKFLOW_FILES:
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, target / name)
    if config is not None:
        (target / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    return target


@pytest.fixture(scope="session")
def quick_ceilings_run(tmp_path_factory) -> tuple[list[dict], Path]:
    """One `rooflab measure ceilings --quick` on the CPU (about 10 s), shared by the test modules
    that read it: (the rows it printed as JSON, its run folder). Copy the folder to change it."""
    out = tmp_path_factory.mktemp("quick_ceilings")
    # What other processes and the hypervisor did is left unjudged here, so that which windows,
    # points and rounds a value came from follows from the stored samples alone (used_windows,
    # clean_round), and no quiet is waited for (in the suite, up to 30 s of other tests'
    # leftovers); that judgement and the wait are tested in test_disturbance.py.
    config = out.parent / "quick_ceilings.yaml"
    config.write_text(yaml.safe_dump({"disturbance": UNJUDGED}))
    result = run_rooflab(
        "measure",
        "ceilings",
        "--backend",
        "cpu",
        "--quick",
        "--config",
        config,
        "--out",
        out,
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    (run_dir,) = out.iterdir()
    return json.loads(result.stdout), run_dir


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory) -> Path:
    """A store this rooflab made from no runs (every table and view), for tests to copy: making
    one takes 0.1 s (its views), and the store tests make about fifty."""
    folder = tmp_path_factory.mktemp("empty_store")
    from rooflab.store import ingest

    ingest(folder / "rooflab.duckdb", folder)
    return folder / "rooflab.duckdb"


def used_windows(windows: list[dict]) -> list[dict]:
    """The samples (windows) a value comes from: the undisturbed ones, or all where none is."""
    return [w for w in windows if not w["disturbed"]] or windows


def clean_round(windows: list[dict], needed: int) -> bool:
    """Whether a measurement whose host is not judged came out undisturbed: no disturbed window,
    or its `needed` clean ones collected despite them."""
    clean = sum(not w["disturbed"] for w in windows)
    return clean == len(windows) or clean >= needed
