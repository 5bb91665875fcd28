"""The `rooflab` examples of README.md and docs/*.md print exactly what the page shows. An example
right after `<!-- example store -->` runs in a folder whose results/rooflab.duckdb holds the
example store (tests/example_store.py: the ceilings of the recorded H200 run); a command ending in
`<<'END'` reads the lines up to `END` on its standard input."""

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.conftest import installed_script
from tests.example_store import build_example_store

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = re.compile(
    r"(<!-- example store -->\n)?```console\n\$ (rooflab .*?)\n(.*?)```", re.DOTALL
)
HEREDOC = re.compile(r"(.*) <<'(\w+)'")
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
EXAMPLES = [
    (page.relative_to(REPO).as_posix(), command, shown, bool(marker))
    for page in PAGES
    for marker, command, shown in EXAMPLE.findall(page.read_text(encoding="utf-8"))
]


def split_example(command: str, shown: str) -> tuple[list[str], str | None, str]:
    """(arguments, standard input or None, the output shown)."""
    heredoc = HEREDOC.fullmatch(command)
    if heredoc is None:
        return shlex.split(command)[1:], None, shown
    command, end = heredoc.groups()
    stdin, output = re.split(rf"^{end}\n", shown, maxsplit=1, flags=re.MULTILINE)
    return shlex.split(command)[1:], stdin, output


@pytest.fixture(scope="module")
def example_store_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("example_store")
    build_example_store(folder)
    return folder


def test_docs_have_examples():
    assert len(EXAMPLES) >= 4
    assert any(on_store for *_, on_store in EXAMPLES)
    assert any(HEREDOC.fullmatch(command) for _, command, _, _ in EXAMPLES)


@pytest.mark.parametrize(
    ("page", "command", "shown", "on_store"),
    EXAMPLES,
    ids=[f"{page}: {command}" for page, command, _, _ in EXAMPLES],
)
def test_example_output_is_real(page, command, shown, on_store, request):
    args, stdin, shown = split_example(command, shown)
    cwd = request.getfixturevalue("example_store_folder") if on_store else REPO
    result = subprocess.run(
        [installed_script("rooflab"), *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"{page}: {result.stderr}"
    assert result.stdout == shown, page


def test_the_status_lines_name_every_gpu_path_not_yet_run_on_a_gpu():
    """Issue 44: the README's status says exactly what ran where: every path docs/gpu.md lists
    as not yet run on a GPU is named there."""
    gpu = (REPO / "docs" / "gpu.md").read_text(encoding="utf-8")
    listed = gpu.split("### Not yet run on a GPU\n\n", 1)[1].split("\n\n")[1]  # the list
    paths = re.findall(r"^- \*\*(.+?)\*\*", listed, re.MULTILINE)
    status = (REPO / "README.md").read_text(encoding="utf-8").split("**Status.**", 1)[1]
    status = " ".join(status.split("\n\n", 1)[0].split())
    assert len(paths) >= 8 and [p for p in paths if p not in status] == []
