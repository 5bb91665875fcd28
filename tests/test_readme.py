"""The README's `rooflab` examples print exactly what the README shows."""

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import run_rooflab

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = re.compile(r"```console\n\$ (rooflab .*?)\n(.*?)```", re.DOTALL)
EXAMPLES = EXAMPLE.findall((REPO / "README.md").read_text(encoding="utf-8"))


def test_readme_has_examples():
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize(("command", "shown"), EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_readme_example_output_is_real(command, shown):
    args = shlex.split(command)[1:]
    result = run_rooflab(*args, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout == shown
