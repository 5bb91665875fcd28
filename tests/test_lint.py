"""The repository's own quality gates, run with the tests so CI enforces them."""

import subprocess
from pathlib import Path

import pytest

from tests.conftest import installed_script

REPO = Path(__file__).resolve().parents[1]

GATES = {
    "ruff check": ["ruff", "check", "."],
    "ruff format": ["ruff", "format", "--check", "."],
    "snakefmt": [
        "snakefmt",
        "--check",
        "Snakefile",
        *(["rules"] if (REPO / "rules").is_dir() else []),
    ],
    "snakemake lint": ["snakemake", "--lint", "--cores", "1"],
}


@pytest.mark.parametrize("gate", sorted(GATES))
def test_gate_is_clean(gate):
    tool, *args = GATES[gate]
    result = subprocess.run(
        [installed_script(tool), *args], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
