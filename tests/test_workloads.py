"""Your own kernel (rooflab.Workload), measured: the docs page's example run for real through
`rooflab measure workload`, a failing check recorded and not timed, and every kind of bad input
one short error naming the case, with a non-zero exit and no run written."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from rooflab import Workload
from rooflab.records import read_run
from rooflab.workloads import WorkloadError, cases, check_error, checked, load_entry
from tests.conftest import REPO, UNJUDGED, installed_script

# Short timings: what is checked here is the path, not the figures.
FAST = {
    "backend": "cpu",
    "timing": {"warmup_s": 0.01, "min_time_s": 0.02, "min_samples": 3},
    "disturbance": UNJUDGED,
}


def _docs_example() -> str:
    page = (REPO / "docs" / "workloads.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    return code


def _kernels(tmp_path: Path, module: str) -> Path:
    """`module` written as mykernels.py beside a config of short timings: that config's path."""
    (tmp_path / "mykernels.py").write_text(module)
    config = tmp_path / "fast.yaml"
    config.write_text(yaml.safe_dump(FAST))
    return config


def _measure(tmp_path: Path, module: str, entry: str, *args: str) -> subprocess.CompletedProcess:
    config = _kernels(tmp_path, module)
    return subprocess.run(
        [installed_script("rooflab"), "measure", "workload", entry, "--config", config, *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_module_is_found_in_the_current_directory_or_the_workloads_path(tmp_path):
    """Issue 44: `rooflab measure workload mykernels:axpb` from the module's folder, with no
    PYTHONPATH; from elsewhere through the config's workloads_path; else one line saying where
    rooflab looked and what to do."""
    config = _kernels(tmp_path, _docs_example())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def measure(cwd: Path, config: Path) -> subprocess.CompletedProcess:
        command = [installed_script("rooflab"), "measure", "workload", "mykernels:axpb"]
        command += ["--param", "n=4096", "--cache-state", "warm", "--config", str(config)]
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)

    assert measure(tmp_path, config).returncode == 0  # from the module's own folder
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    refused = measure(elsewhere, config)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert (
        f"cannot import 'mykernels' (ModuleNotFoundError: No module named 'mykernels'); rooflab "
        f"looks in the current directory ({elsewhere}), the config's workloads_path (none) and "
        "PYTHONPATH: put mykernels in one of them, or name its folder in workloads_path"
    ) in refused.stderr
    with_path = elsewhere / "with_path.yaml"
    with_path.write_text(yaml.safe_dump({**FAST, "workloads_path": [".."]}))
    assert measure(elsewhere, with_path).returncode == 0, "the config's workloads_path"


def test_the_docs_example_is_checked_and_timed_warm_and_cold(tmp_path):
    result = _measure(
        tmp_path,
        _docs_example(),
        "mykernels:axpb",
        *("--param", "n=4096,65536", "--dtype", "fp32", "--format", "json", "--out", "runs"),
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [(r["config_id"], r["cache_state"]) for r in rows] == [
        (f"axpb/fp32/n{n}", state) for n in (4096, 65536) for state in ("warm", "cold")
    ]
    for row in rows:
        n = json.loads(row["params"])["n"]
        assert (row["flops"], row["bytes"]) == (2 * n, 8 * n)
        assert row["intensity"] == pytest.approx(0.25) and row["median_s"] > 0
        assert row["n_samples"] >= 3
    (run,) = (tmp_path / "runs").iterdir()
    for point in pq.read_table(run / "timed_points.parquet").to_pylist():
        n = json.loads(point["params"])["n"]
        cold = point["cache_state"] == "cold"
        # cold: the declared arrays x and y evicted by themselves, not a buffer flushed
        assert point["flush_bytes"] == (2 * 4 * n if cold else 0)
        assert (
            "of every cache line of the call's operands" in (point["flush_method"] or "")
        ) == cold
        assert point["footprint_bytes"] == 2 * 4 * n  # no footprint declared: its arrays' bytes

    checks = pq.read_table(run / "correctness.parquet").to_pylist()
    # each of the 2 cases checked before its timing and again after its last round
    assert len(checks) == 4 and all(c["passed"] and c["error"] < 1e-6 for c in checks)
    (runs_row,) = pq.read_table(run / "runs.parquet").to_pylist()
    assert (runs_row["kind"], runs_row["sweep"]) == ("workload", "axpb")


WRONG = """
from rooflab import Workload

def wrong(params, ctx):
    x = ctx.xp.ones(params["n"], dtype=ctx.dtype)
    y = ctx.xp.empty_like(x)
    return Workload(run=lambda: ctx.xp.multiply(x, 3, out=y), flops=params["n"], bytes=8,
                    check=lambda: float(abs(y - 2).max() / 2), tolerance=1e-6)
"""


def test_a_case_whose_check_fails_is_recorded_and_not_timed(tmp_path):
    result = _measure(tmp_path, WRONG, "mykernels:wrong", "--param", "n=64", "--out", "runs")
    assert result.returncode == 0, result.stderr
    assert "wrong/fp32/n64 failed its check (error 0.5 > tolerance 1e-06)" in result.stderr
    (run,) = (tmp_path / "runs").iterdir()
    assert pq.read_table(run / "timed_points.parquet").num_rows == 0  # never timed
    assert pq.read_table(run / "correctness.parquet").to_pylist()[0]["passed"] is False


BAD = {
    "not importable": ("", "nosuchmodule:f", "cannot import 'nosuchmodule'"),
    "no function": ("x = 1\n", "mykernels:f", "'mykernels' has no function 'f'"),
    "raises": (
        "def f(params, ctx):\n    raise RuntimeError('out of ideas')\n",
        "mykernels:f",
        "f/fp32/n8: the factory raised RuntimeError: out of ideas",
    ),
    "wrong type": (
        "def f(params, ctx):\n    return 42\n",
        "mykernels:f",
        "f/fp32/n8: the factory returned int, not a rooflab.Workload",
    ),
    "flops": (
        "from rooflab import Workload\n"
        "def f(params, ctx):\n    return Workload(run=lambda: None, flops=1.5, bytes=8)\n",
        "mykernels:f",
        "f/fp32/n8: flops must be a positive integer, got 1.5",
    ),
    "bytes": (
        "from rooflab import Workload\n"
        "def f(params, ctx):\n    return Workload(run=lambda: None, flops=8, bytes=0)\n",
        "mykernels:f",
        "f/fp32/n8: bytes must be a positive integer, got 0",
    ),
    "nan check": (
        "from rooflab import Workload\n"
        "def f(params, ctx):\n"
        "    return Workload(run=lambda: None, flops=8, bytes=8, check=lambda: float('nan'),\n"
        "                    tolerance=1e-6)\n",
        "mykernels:f",
        "f/fp32/n8: check() returned nan, not a finite error >= 0",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_short_error_naming_the_case_and_writes_nothing(case, tmp_path):
    module, entry, says = BAD[case]
    result = _measure(tmp_path, module, entry, "--param", "n=8", "--out", "runs")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if not line.startswith("[")]
    assert len(lines) <= 3 and "Traceback" not in result.stderr, result.stderr
    assert any(says in line for line in lines), result.stderr
    assert not any((tmp_path / "runs").glob("*/runs.parquet"))


def test_checked_refuses_what_is_not_a_measurable_workload():
    def run():
        return None

    assert checked(Workload(run, 8, 8), "w").flops == 8
    for bad, says in (
        (Workload(run, True, 8), "flops must be a positive integer"),
        (Workload(run, 8, -1), "bytes must be a positive integer"),
        (Workload(run, 8, 8, executed_flops=0), "executed_flops must be a positive integer"),
        (Workload(run, 8, 8, footprint=2.5), "footprint must be a positive integer"),
        (Workload(run, 8, 8, check=lambda: 0.0), "a check needs a tolerance > 0"),
        (Workload("run", 8, 8), "Workload.run is not callable"),
        (Workload(run, 8, 8, arrays=[[1.0]]), r"Workload.arrays\[0\] is a list, not a numpy"),
        (Workload(run, 8, 8, arrays=b"x"), "Workload.arrays is a bytes, not a tuple of arrays"),
    ):
        with pytest.raises(WorkloadError, match=says):
            checked(bad, "w")
    raising = Workload(run, 8, 8, check=lambda: 1 / 0, tolerance=1e-3)
    with pytest.raises(WorkloadError, match=r"check\(\) raised ZeroDivisionError"):
        check_error(raising, "w")
    with pytest.raises(WorkloadError, match=r"not 'package\.module:function'"):
        load_entry("nocolon", "w")


def test_every_combination_of_the_params_is_a_case_per_dtype():
    found = cases("w", {"n": [1, 2], "k": [8]}, ["fp32", "fp64"])
    assert [c.config_id for c in found] == [
        "w/fp32/k8_n1",
        "w/fp32/k8_n2",
        "w/fp64/k8_n1",
        "w/fp64/k8_n2",
    ]


def test_the_public_name_is_rooflab_workload():
    code = "from rooflab import Workload; print(Workload.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "rooflab.workloads"
    assert textwrap.dedent(_docs_example()).count("\n") <= 25  # the page's example stays short


@pytest.mark.slow
def test_in_a_campaign_a_bad_workload_fails_alone_with_keep_going(tmp_path):
    """Two workloads, one whose entry cannot be imported: with --keep-going the good one is timed
    and kept; the bad one's job fails with one line in its log naming it, and keeps nothing."""
    from tests.conftest import copy_workflow

    config = {
        **FAST,
        "sweeps": {},
        "workloads": {
            "good": {
                "entry": "rooflab.workloads.builtin:relu_axpb_unfused",
                "params": {"n": [4096]},
            },
            "bad": {"entry": "no_such_module:factory"},
        },
    }
    workdir = copy_workflow(tmp_path, config)
    receipts = [f"results/workloads/{name}/local/timing.json" for name in ("good", "bad")]
    done = subprocess.run(
        [installed_script("snakemake"), "--cores", "2", "--keep-going", *receipts],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode != 0
    assert (workdir / receipts[0]).is_file()  # the good workload ran to the end
    assert not (workdir / receipts[1]).exists()
    runs = workdir / "results/workloads/bad/local/runs"  # made writable before measuring
    assert not runs.exists() or list(runs.iterdir()) == []  # nothing half-written
    said = (workdir / "logs/time_workload/bad/local.log").read_text().strip().splitlines()
    said = [line for line in said if " ERROR " in line]  # beside INFO lines (the flush's size)
    assert (
        len(said) == 1
        and (
            "bad: cannot import 'no_such_module' "
            "(ModuleNotFoundError: No module named 'no_such_module'); rooflab looks in the current "
            f"directory ({workdir})"
        )
        in said[0]
    )
    output = done.stdout + done.stderr
    assert "Error in rule time_workload" in output and "Traceback" not in output


HANGS = """
import time
from rooflab import Workload
def spin(params, ctx):
    calls = []
    def run():
        calls.append(1)
        if len(calls) > 5:  # goes on for ever from its 6th call, inside the timing
            while True:
                time.sleep(0.01)
    return Workload(run=run, flops=8, bytes=8)
"""


def test_a_hung_kernel_is_stopped_naming_its_case_and_frees_the_machine(tmp_path, monkeypatch):
    """A kernel whose run() never returns: the job ends within its one-call limit with one line
    naming the case, status 124, nothing written, and the machine lock free for the next one."""
    from rooflab.experiments.machine_lock import LOCK_DIR_ENV, measuring

    (tmp_path / "mykernels.py").write_text(HANGS)
    config = tmp_path / "hang.yaml"
    config.write_text(yaml.safe_dump({**FAST, "timing": {**FAST["timing"], "max_call_s": 1}}))
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "locks"))  # the job's lock, and this test's
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [installed_script("rooflab"), "measure", "workload", "mykernels:spin", "--config",
         config, "--param", "n=8", "--out", "runs"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 124, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("rooflab: workload spin case spin/fp32/n8 warm: ")
    assert "one call still running after its limit of 1 s" in last
    assert not any((tmp_path / "runs").glob("*/runs.parquet"))
    with measuring("next", timeout_s=1) as waited:  # free at once
        assert waited < 1


DRIFTS = """
import numpy as np
from rooflab import Workload
def drift(params, ctx):
    x, y = np.ones(256), np.zeros(256)
    calls = [0]
    def run():
        calls[0] += 1
        y[:] = 2 * x if calls[0] < 5 else 3 * x  # wrong from its 5th call on
    return Workload(run=run, flops=256, bytes=4096, check=lambda: float(abs(y - 2).max()),
                    tolerance=1e-12)
"""


def test_a_kernel_that_goes_wrong_while_timed_is_stored_failed_and_left_off_the_roofline(
    tmp_path, quick_ceilings_run
):
    from rooflab.roofline import build_analysis

    result = _measure(tmp_path, DRIFTS, "mykernels:drift", "--param", "n=8", "--out", "runs")
    assert result.returncode == 0, result.stderr
    (run,) = (tmp_path / "runs").iterdir()
    tables = read_run(run)
    checks = tables["correctness"].to_pylist()
    assert [c["passed"] for c in checks] == [True, False]  # before the timing, and after it
    # caught by the check after its first (warm) round, not only at the end: cold is not timed
    assert checks[1]["detail"].endswith("again after its warm timing round 1")
    points = tables["timed_points"].to_pylist()
    assert [p["cache_state"] for p in points] == ["warm"]  # its timing is kept ...
    _, ceilings = quick_ceilings_run
    analysis = build_analysis([ceilings], [run])
    assert analysis.points.rows == []  # ... but never placed on the Roofline


@pytest.mark.parametrize(
    ("values", "says"),
    [([256, "256"], "values 256 and '256' name the same case (n256)"),
     ([False, True, False], "values False and False name the same case (nFalse)")],
)  # fmt: skip
def test_param_values_that_name_one_case_are_refused(values, says):
    with pytest.raises(WorkloadError, match=re.escape(says)):
        cases("w", {"n": values}, ["fp32"])


def test_a_cross_product_of_too_many_cases_is_refused_before_it_is_built():
    with pytest.raises(WorkloadError, match=re.escape("w: 160,000 points (400 params.a x 400 ")):
        cases("w", {"a": list(range(400)), "b": list(range(400))}, ["fp32"])


def test_colliding_params_on_the_command_line_are_one_error_and_nothing_measured(tmp_path):
    result = _measure(
        tmp_path, _docs_example(), "mykernels:axpb", "--param", "n=4096,no,false", "--out", "runs"
    )
    assert result.returncode == 2, result.stderr
    assert "params.n: values False and False name the same case (nFalse)" in result.stderr
    assert not any((tmp_path / "runs").glob("*/runs.parquet"))


PRINTS = """
import os
from rooflab import Workload
def chatty(params, ctx):
    print("hello from the factory")
    def run():
        print("hello from run")
        os.write(1, b"and from C's stdout\\n")
    return Workload(run=run, flops=8, bytes=8)
"""


def test_a_kernel_that_prints_cannot_corrupt_the_json_on_stdout(tmp_path):
    result = _measure(tmp_path, PRINTS, "mykernels:chatty", "--param", "n=8", "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)  # nothing but the rows
    assert {row["config_id"] for row in rows} == {"chatty/fp32/n8"}
    assert "hello from run" in result.stderr and "and from C's stdout" in result.stderr


@pytest.mark.parametrize("call", ["os._exit(0)", "sys.exit(0)"])
def test_a_kernel_that_exits_cannot_make_the_command_succeed(call, tmp_path):
    module = (
        "import os, sys\nfrom rooflab import Workload\n"
        f"def quits(params, ctx):\n    return Workload(run=lambda: {call}, flops=8, bytes=8)\n"
    )
    result = _measure(tmp_path, module, "mykernels:quits", "--param", "n=8", "--out", "runs")
    assert result.returncode == 2, result.stderr
    assert f"workload quits: the kernel called {call}; nothing kept" in result.stderr
    assert not any((tmp_path / "runs").glob("*/runs.parquet"))


SETS_THREADS = """
import numpy as np
from threadpoolctl import threadpool_limits
from rooflab import Workload
def one_thread(params, ctx):
    if params["single"]:
        threadpool_limits(limits=1, user_api="blas")  # set for the process, never restored
    a = np.ones((64, 64))
    return Workload(run=lambda: a @ a, flops=2 * 64**3, bytes=3 * 8 * 64**2)
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")
def test_a_factory_that_sets_blas_threads_changes_only_its_own_case(tmp_path):
    result = _measure(
        tmp_path, SETS_THREADS, "mykernels:one_thread", "--param", "single=true,false",
        "--out", "runs",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run,) = (tmp_path / "runs").iterdir()
    threads = {
        (p["params"], p["cache_state"]): p["threads"]
        for p in read_run(run)["timed_points"].to_pylist()
    }
    usable = len(os.sched_getaffinity(0))
    # the case that set 1 thread ran (and is stored) with 1; the case after it with them all
    assert threads == {
        ('{"single": true}', "warm"): 1, ('{"single": true}', "cold"): 1,
        ('{"single": false}', "warm"): usable, ('{"single": false}', "cold"): usable,
    }  # fmt: skip
