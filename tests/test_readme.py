"""The `rooflab` examples of README.md and docs/*.md print exactly what the page shows."""

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import run_rooflab

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = re.compile(r"```console\n\$ (rooflab .*?)\n(.*?)```", re.DOTALL)
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
EXAMPLES = [
    (page.relative_to(REPO).as_posix(), command, shown)
    for page in PAGES
    for command, shown in EXAMPLE.findall(page.read_text(encoding="utf-8"))
]


def test_docs_have_examples():
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize(
    ("page", "command", "shown"),
    EXAMPLES,
    ids=[f"{page}: {command}" for page, command, _ in EXAMPLES],
)
def test_example_output_is_real(page, command, shown):
    args = shlex.split(command)[1:]
    result = run_rooflab(*args, cwd=REPO)
    assert result.returncode == 0, f"{page}: {result.stderr}"
    assert result.stdout == shown, page
