"""rooflab.experiments.profiled_gemm (issue 7): the child a profiler runs, one GEMM config inside
its counters range."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# -- the child a profiler runs ---------------------------------------------------------------------


CHILD_CPU = [sys.executable, "-m", "rooflab.experiments.profiled_gemm", "--backend", "cpu"]


def test_profiled_gemm_runs_one_config_inside_its_counters_range():
    from rooflab.backends.base import Backend

    if not hasattr(Backend, "nvtx_range"):
        pytest.skip("rooflab.backends.base.Backend.nvtx_range is not in this checkout yet")
    done = subprocess.run(
        [*CHILD_CPU, "--sweep", "t", "--dtype", "fp32", "--m", "8", "--n", "16", "--k", "32"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {
        "config_id": "t/fp32/nn/m8_n16_k32",
        "nvtx_range": "t:fp32:nn:m8_n16_k32:counters",
        "backend": "cpu",
    }
