"""rooflab.counters.perf (issue 7): `perf stat`'s command and output, recorded on a development
machine (tests/fixtures/perf), and the CPU counters derived from it, `unavailable` with the
reason where not counted."""

from __future__ import annotations

import shutil
import sys

import pytest

from rooflab.counters import (
    Unavailable,
    derive_cpu,
    llc_line_bytes,
    parse_perf_stat,
    perf_stat_command,
    pmu_note,
    run_perf_stat,
)
from rooflab.experiments.counters import CounterSettings
from tests.counters_fixtures import PERF_FIXTURES, read

DEFAULT_EVENTS = CounterSettings().perf_events  # the schema's default

# -- perf (recorded on this development machine) ---------------------------------------------------


def test_perf_stat_command():
    cmd = perf_stat_command(DEFAULT_EVENTS, ["python", "-c", "pass"], output_path="/tmp/p.txt")
    events = "cycles,instructions,LLC-load-misses,LLC-loads,cache-misses"
    assert cmd.argv == tuple(f"perf stat -x, -e {events} -o /tmp/p.txt -- python -c pass".split())
    with pytest.raises(ValueError):
        perf_stat_command([], ["true"])


@pytest.mark.parametrize("name", ["matmul_default.stderr.txt", "matmul_ofile.perf.txt"])
def test_perf_not_supported_everywhere_is_unavailable_with_the_reason(name):
    stat = parse_perf_stat(read(PERF_FIXTURES / name))
    assert list(stat.counts) == list(DEFAULT_EVENTS)
    assert {c.status for c in stat.counts.values()} == {"not supported"}
    assert all(c.value is None for c in stat.counts.values())
    assert stat.other_lines == []
    result = derive_cpu(
        stat, DEFAULT_EVENTS, line_bytes=64, note="no CPU PMU exposed to this kernel"
    )
    assert result.status == "unavailable"
    assert result.measured == {} and result.derived == []
    assert result.reason == (
        "perf: cycles, instructions, LLC-load-misses, LLC-loads, cache-misses <not supported>"
        " (no CPU PMU exposed to this kernel)"
    )


def test_perf_counted_software_event_beside_unsupported_ones():
    stat = parse_perf_stat(read(PERF_FIXTURES / "matmul_task_clock.stderr.txt"))
    clock = stat.counts["task-clock"]
    assert (clock.status, clock.value, clock.unit, clock.percent_running) == (
        "counted",
        339.61,
        "msec",
        100.0,
    )
    result = derive_cpu(stat, ("task-clock", *DEFAULT_EVENTS), line_bytes=64)
    assert result.status == "partial"
    assert result.measured == {"task-clock": 339.61}
    assert result.derived == []  # nothing follows from task-clock alone
    assert "cycles, instructions, LLC-load-misses, LLC-loads, cache-misses <not supported>" in (
        result.reason
    )


def test_perf_not_counted_and_syntax_errors():
    group = parse_perf_stat(read(PERF_FIXTURES / "group_not_counted.stderr.txt"))
    assert group.counts["task-clock"].status == "not counted"
    assert group.counts["cycles"].status == "not supported"
    result = derive_cpu(group, ("task-clock", "cycles"))
    assert result.status == "unavailable"
    assert result.reason == "perf: task-clock <not counted>; cycles <not supported>"
    error = parse_perf_stat(read(PERF_FIXTURES / "fp_event_syntax_error.stderr.txt"), 129)
    assert error.counts == {} and error.returncode == 129
    result = derive_cpu(error, ("fp_arith_inst_retired.scalar_double",))
    assert result.status == "unavailable"
    assert result.reason.startswith(
        "perf: fp_arith_inst_retired.scalar_double not in perf's output | perf said: "
        "event syntax error: 'fp_arith_inst_retired.scalar_double'"
    )


def test_derive_cpu_from_counted_events():
    """The arithmetic of derive_cpu on our own PerfStat (a machine with a PMU is owed)."""
    lines = [
        "2000000,,cycles,1000,100.00,,",
        "3000000,,instructions,1000,100.00,1.50,insn per cycle",
        "1000,,LLC-load-misses,1000,100.00,,",
        "4000,,LLC-loads,1000,100.00,,",
    ]
    result = derive_cpu(parse_perf_stat("\n".join(lines)), DEFAULT_EVENTS[:4], line_bytes=64)
    assert result.status == "ok" and result.reason is None
    derived = {d["name"]: d for d in result.derived}
    assert derived["ipc"]["value"] == 1.5
    assert derived["llc_load_miss_ratio"]["value"] == 0.25
    estimate = derived["llc_miss_bytes_estimate"]
    assert (estimate["value"], estimate["unit"], estimate["kind"]) == (64000, "B", "estimate")
    assert "loads only" in estimate["basis"]
    no_line = derive_cpu(parse_perf_stat("\n".join(lines)), DEFAULT_EVENTS[:4], line_bytes=None)
    assert "llc_miss_bytes_estimate" not in {d["name"] for d in no_line.derived}


def test_derive_cpu_from_a_partial_pmu_derives_only_what_its_counts_allow():
    """A PMU that counts cycles and LLC loads but not instructions or LLC misses (the status
    lines in perf's own format, as in tests/fixtures/perf): no ratio is made from half of it."""
    lines = [
        "2000000,,cycles,1000,100.00,,",
        "<not supported>,,instructions,0,100.00,,",
        "<not supported>,,LLC-load-misses,0,100.00,,",
        "4000,,LLC-loads,1000,100.00,,",
    ]
    result = derive_cpu(parse_perf_stat("\n".join(lines)), DEFAULT_EVENTS[:4], line_bytes=64)
    assert result.status == "partial" and result.derived == []
    assert result.measured == {"cycles": 2e6, "LLC-loads": 4000}
    assert result.reason == "perf: instructions, LLC-load-misses <not supported>"


def test_pmu_note_and_line_size_from_sysfs_shaped_folders(tmp_path):
    devices = tmp_path / "devices"
    for name in ("breakpoint", "software", "tracepoint"):
        (devices / name).mkdir(parents=True)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 hypervisor avx2\n")
    note = pmu_note(devices, cpuinfo)
    assert note == (
        "no CPU PMU exposed to this kernel (event sources: breakpoint, software, tracepoint); "
        "CPU flag 'hypervisor' set: a virtual machine"
    )
    (devices / "cpu").mkdir()
    assert pmu_note(devices, cpuinfo) is None
    cache = tmp_path / "cache"
    for index, (level, kind, line) in enumerate(
        [(1, "Data", 64), (1, "Instruction", 64), (3, "Unified", 128)]
    ):
        folder = cache / f"index{index}"
        folder.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("coherency_line_size", line)):
            (folder / name).write_text(f"{value}\n")
    assert llc_line_bytes(cache) == 128
    assert llc_line_bytes(tmp_path / "none") is None


def test_perf_missing_is_unavailable(tmp_path):
    missing = str(tmp_path / "no-perf")
    result = run_perf_stat(perf_stat_command(["cycles"], ["true"], perf=missing), timeout_s=30)
    assert result == Unavailable(
        "perf", f"{missing}: not found (no such program on PATH or at that path)"
    )


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed here")
def test_perf_collection_for_real(tmp_path):
    """perf stat on this machine: on a VM without a PMU (these development machines) every event
    is unavailable with the reason; where the PMU is exposed, cycles count and IPC follows."""
    command = perf_stat_command(
        DEFAULT_EVENTS,
        [sys.executable, "-c", "import numpy as np; a = np.ones((256, 256)); a @ a"],
        output_path=tmp_path / "perf.txt",
    )
    stat = run_perf_stat(command, timeout_s=120)
    assert not isinstance(stat, Unavailable), stat
    assert set(stat.counts) == set(DEFAULT_EVENTS)
    note = pmu_note()
    result = derive_cpu(stat, DEFAULT_EVENTS, line_bytes=llc_line_bytes(), note=note)
    if all(c.status != "counted" for c in stat.counts.values()):
        assert result.status == "unavailable"
        assert result.reason.startswith("perf: cycles, instructions, LLC-load-misses")
        assert "<not supported>" in result.reason or "<not counted>" in result.reason
        if note is not None:
            assert result.reason.endswith(f"({note})")
    else:
        assert stat.counts["cycles"].value > 0
        assert "ipc" in {d["name"] for d in result.derived}
