"""What rooflab refuses before it measures or allocates anything (issue 26): a ceilings sweep or
library GEMM the memory cannot hold, and a run folder that cannot be written. Each is one line
naming the config key or the folder, a non-zero exit, and no run written."""

import os
from pathlib import Path

import pytest
import yaml

from rooflab.backends.cpu import CpuBackend
from rooflab.experiments.ceiling_plan import QUICK, CeilingsTooLarge
from rooflab.experiments.ceilings import run_ceilings
from rooflab.records import NotWritable, check_writable
from tests.conftest import run_rooflab


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"max_working_set_bytes": 2**50}, "ceilings.max_working_set: the sweep's largest"),
        ({"blas_n": 1_000_000}, "ceilings.blas_n: 1000000 needs"),
    ],
)
def test_ceilings_larger_than_memory_are_refused_before_allocating(change, key):
    from dataclasses import replace

    with pytest.raises(CeilingsTooLarge, match=key):
        run_ceilings(CpuBackend(), replace(QUICK, **change))


def _one_line_refusal(result, expected: str) -> None:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_the_command_line_refuses_a_petabyte_sweep_in_one_line(tmp_path):
    config = tmp_path / "huge.yaml"
    config.write_text(yaml.safe_dump({"ceilings": {"max_working_set": "1 PiB"}}))
    result = run_rooflab(
        "measure", "ceilings", "--backend", "cpu", "--config", config, "--out", tmp_path / "runs"
    )
    _one_line_refusal(result, "ceilings.max_working_set")
    assert not any((tmp_path / "runs").glob("*/runs.parquet"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_folder_that_cannot_be_written_is_refused_before_measuring(tmp_path):
    protected = tmp_path / "protected"
    protected.mkdir()
    protected.chmod(0o500)
    try:
        with pytest.raises(NotWritable, match="protected/runs: cannot write a run there"):
            check_writable(protected / "runs")
        result = run_rooflab(
            "measure", "ceilings", "--backend", "cpu", "--quick", "--out", protected / "runs"
        )
        _one_line_refusal(result, "cannot write a run there")
    finally:
        protected.chmod(0o700)


def test_check_writable_creates_the_folder_and_leaves_nothing_in_it(tmp_path):
    folder = check_writable(tmp_path / "a" / "runs")
    assert folder.is_dir() and list(Path(folder).iterdir()) == []


def test_a_run_folder_under_a_file_is_refused_before_measuring(tmp_path):
    """As root, permission bits do not stop a write; a folder that cannot exist does."""
    (tmp_path / "results").write_text("not a folder")
    with pytest.raises(NotWritable, match="results/runs: cannot write a run there"):
        check_writable(tmp_path / "results" / "runs")
    out = tmp_path / "results" / "runs"
    result = run_rooflab("measure", "ceilings", "--backend", "cpu", "--out", out, refused=True)
    _one_line_refusal(result, "cannot write a run there")


PREFLIGHT = """
import sys
from rooflab.backends.cpu import CpuBackend
from rooflab.config import load_config
from rooflab.experiments.preflight import check_campaign

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
before = status("VmRSS:")
check_campaign(load_config(sys.argv[1]), "config")  # builds a CpuBackend, checks every size
print(status("VmHWM:") - before, CpuBackend().flush_bytes)
"""


def test_the_campaigns_preflight_reads_sizes_and_allocates_no_flush_buffer(monkeypatch):
    """The Snakefile's check (every `snakemake` call, a no-op too) allocates nothing: its peak
    memory grows by far less than the cold-cache flush buffer (1 GB on a 480 MiB-L3 VM)."""
    import subprocess
    import sys

    from rooflab.backends.base import FLUSH_BYTES_ENV
    from tests.conftest import REPO

    monkeypatch.delenv(FLUSH_BYTES_ENV)  # the rule's flush: large enough to tell from imports
    result = subprocess.run(
        [sys.executable, "-c", PREFLIGHT, str(REPO / "config" / "config.yaml")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    grown, flush_bytes = map(int, result.stdout.split())
    if flush_bytes < 128 << 20:
        pytest.skip(f"a flush buffer of {flush_bytes} B is too small to tell from imports")
    assert grown < flush_bytes / 4, (grown, flush_bytes)
