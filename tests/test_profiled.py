"""rooflab.experiments.profiled (issue 7, issue 42): the one child a profiler runs, one timed case
(here a GEMM configuration) inside its counters range; a case it cannot build is one line."""

from __future__ import annotations

import json
import subprocess

from rooflab.experiments.gemm import GemmCase
from rooflab.experiments.gemm_configs import GemmConfig
from rooflab.experiments.profiled import case_from_spec, child_command


def _run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)


def test_the_child_runs_one_gemm_configuration_inside_its_counters_range():
    case = GemmCase(GemmConfig("t", 8, 16, 32, "fp32", "nn"), 0)
    done = _run(child_command(case, "cpu", 1))
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {
        "config_id": "t/fp32/nn/m8_n16_k32",
        "nvtx_range": "t:fp32:nn:m8_n16_k32:counters",
        "backend": "cpu",
    }


def test_a_case_goes_to_the_child_and_back_unchanged():
    case = GemmCase(GemmConfig("t", 8, 16, 32, "fp64", "nt"), 7)
    assert case_from_spec(json.loads(json.dumps(case.child_spec()))) == case


def test_a_case_the_child_cannot_build_is_one_line_and_status_2():
    command = child_command(GemmCase(GemmConfig("t", 8, 16, 32, "fp8", "nn"), 0), "cpu", 1)
    done = _run(command)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("rooflab: ") and "fp8" in line
    spec = json.loads(command[command.index("--case") + 1])
    del spec["m"]
    done = _run([*command[:3], "--case", json.dumps(spec), "--backend", "cpu"])
    assert (done.returncode, done.stderr.strip()) == (
        2,
        "rooflab: --case has no 'm' (experiments.profiled.child_command)",
    )
