"""rooflab.counters.tool (issue 7): the runner of a measuring tool, and the output file it
reads back (never an earlier run's)."""

from __future__ import annotations

from rooflab.counters.tool import run_tool


def test_a_tools_output_file_is_read_back_and_an_earlier_runs_file_never_is(tmp_path):
    out = tmp_path / "out.txt"
    writes = ["/bin/sh", "-c", f"echo counted >{out}; echo said; echo warned >&2"]
    run = run_tool("ncu", writes, 60, out)
    assert (run.returncode, run.file_text, run.output) == (0, "counted\n", "said\n\nwarned\n")
    run = run_tool("ncu", ["/bin/sh", "-c", "exit 3"], 60, out)  # wrote nothing this time
    assert (run.returncode, run.file_text, run.output) == (3, None, "")
    assert not out.exists()
    assert run_tool("ncu", ["/bin/sh", "-c", "echo only"], 60).output == "only\n"
