"""CPU counters through `perf stat`: collected where the PMU allows it, `unavailable` where not.

`perf stat -x,` prints one line per event: value, unit, event, counter run time, percent of the
run the counter was running, then an optional derived metric and its unit. An event the kernel
cannot count prints `<not supported>` (no such hardware event here, e.g. a VM without a virtual
PMU) and one that was scheduled but never counted `<not counted>`. Nothing is invented: what
perf did not count is recorded as unavailable with perf's own words, and derived figures are
only those that follow from counted events (an LLC-miss byte figure is labelled an estimate).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rooflab.counters.tool import Unavailable, run_tool

PERF = "perf"
NOT_COUNTED = {"<not supported>": "not supported", "<not counted>": "not counted"}
# What perf prints each time a controlling process enables or disables its events (perf 6.1).
CONTROL_ECHO = ("Events enabled", "Events disabled")


@dataclass(frozen=True)
class PerfCommand:
    argv: tuple[str, ...]
    settings: dict
    output_path: str | None = None


def perf_stat_command(
    events: Sequence[str],
    child_argv: Sequence[str],
    *,
    perf: str = PERF,
    output_path: str | Path | None = None,
    control: tuple[str | Path, str | Path] | None = None,
) -> PerfCommand:
    """`perf stat -x, -e <events> [-o <file>] [-D -1 --control fifo:CTL,ACK] -- <child>`;
    `output_path` keeps perf's lines apart from the child's own stderr. With `control` (two
    fifos), perf starts with its events disabled and counts only while the child has them enabled
    (`python -m rooflab.experiments.profiled --perf-control CTL,ACK` enables them around the
    measured call)."""
    events = [str(e) for e in events]
    if not events or any(not e.strip() for e in events):
        raise ValueError(f"no perf events given: {events!r}")
    child = [str(a) for a in child_argv]
    if not child:
        raise ValueError("no command to measure")
    argv = [perf, "stat", "-x,", "-e", ",".join(events)]
    if output_path is not None:
        argv += ["-o", str(output_path)]
    settings = {"tool": "perf", "events": events, "separator": ","}
    if control is not None:
        ctl, ack = (str(path) for path in control)
        argv += ["-D", "-1", "--control", f"fifo:{ctl},{ack}"]
        settings["control"] = "events disabled at start, enabled by the child around its call"
    return PerfCommand(tuple([*argv, "--", *child]), settings, output_path and str(output_path))


@dataclass(frozen=True)
class PerfCount:
    event: str
    value: float | None  # None unless counted
    unit: str
    status: str  # "counted" | "not supported" | "not counted"
    percent_running: float | None  # below 100: multiplexed, perf scaled the count
    line: str


@dataclass(frozen=True)
class PerfStat:
    counts: dict[str, PerfCount] = field(default_factory=dict)
    other_lines: list[str] = field(default_factory=list)  # perf's errors, the child's stderr
    returncode: int | None = None


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_perf_stat(text: str, returncode: int | None = None) -> PerfStat:
    """The event lines of `perf stat -x,` output (stderr, or the `-o` file); comment lines
    (`# started on ...`), blank lines and perf's "Events enabled"/"Events disabled" (with
    `--control`) are skipped, anything else is kept as an other line."""
    counts: dict[str, PerfCount] = {}
    other: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#") or line.strip() in CONTROL_ECHO:
            continue
        fields = next(csv.reader([line]))
        value_text = fields[0].strip() if fields else ""
        status = NOT_COUNTED.get(value_text)
        value = None if status else _float(value_text)
        if len(fields) < 5 or not fields[2].strip() or (status is None and value is None):
            other.append(line.rstrip())
            continue
        event = fields[2].strip()
        counts[event] = PerfCount(
            event=event,
            value=value,
            unit=fields[1].strip(),
            status=status or "counted",
            percent_running=_float(fields[4]),
            line=line.rstrip(),
        )
    return PerfStat(counts, other, returncode)


def run_perf_stat(command: PerfCommand, timeout_s: float) -> PerfStat | Unavailable:
    """Run perf; perf missing or not runnable is `Unavailable`, everything else a `PerfStat`
    (events perf could not count are in it, with their status)."""
    run = run_tool("perf", command.argv, timeout_s, command.output_path)
    if isinstance(run, Unavailable):
        return run
    text = run.stderr if run.file_text is None else run.file_text + "\n" + run.stderr
    return parse_perf_stat(text, run.returncode)


def pmu_note(
    devices_dir: str | Path = "/sys/bus/event_source/devices", cpuinfo: str | Path = "/proc/cpuinfo"
) -> str | None:
    """Why hardware events may be missing, from what the kernel shows (None where a CPU PMU is
    exposed): the event sources it lists, and the `hypervisor` CPU flag."""
    try:
        devices = sorted(os.listdir(devices_dir))
    except OSError:
        return None
    if any(d == "cpu" or d.startswith(("cpu_", "armv")) for d in devices):
        return None
    try:
        flags = next(
            (line for line in Path(cpuinfo).read_text().splitlines() if line.startswith("flags")),
            "",
        )
    except OSError:
        flags = ""
    vm = "; CPU flag 'hypervisor' set: a virtual machine" if " hypervisor" in flags else ""
    return f"no CPU PMU exposed to this kernel (event sources: {', '.join(devices)}){vm}"


def llc_line_bytes(cache_dir: str | Path = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """Cache-line size of the last-level data or unified cache, as the kernel reports it."""
    best: tuple[int, int] | None = None
    for index in sorted(Path(cache_dir).glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            line = int((index / "coherency_line_size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and (best is None or level > best[0]):
            best = (level, line)
    return best[1] if best else None


@dataclass(frozen=True)
class CpuCounters:
    status: str  # "ok" | "partial" | "unavailable"
    reason: str | None  # why events are missing (perf's words, and the PMU note)
    measured: dict[str, float]  # event -> count, counted events only
    unavailable: dict[str, str]  # event -> why not
    derived: list[dict]  # name, value, unit, kind ("ratio" | "estimate"), basis


def derive_cpu(
    stat: PerfStat,
    events: Sequence[str],
    *,
    line_bytes: int | None = None,
    note: str | None = None,
) -> CpuCounters:
    """What the counted events honestly give: IPC (instructions/cycles), the LLC load-miss ratio,
    and an LLC-miss byte estimate (LLC-load-misses x line size; loads only, so write-backs and
    prefetches are missing from it). Events not counted are listed with perf's status; when none
    was counted the result is `unavailable`, with the reason."""
    measured: dict[str, float] = {}
    unavailable: dict[str, str] = {}
    for event in events:
        count = stat.counts.get(event)
        if count is None:
            unavailable[event] = "not in perf's output"
        elif count.status != "counted" or count.value is None:
            unavailable[event] = f"<{count.status}>"
        else:
            measured[event] = count.value
    derived = []

    def add(name: str, value: float, unit: str, kind: str, basis: str) -> None:
        derived.append({"name": name, "value": value, "unit": unit, "kind": kind, "basis": basis})

    for name, over, under in (
        ("ipc", "instructions", "cycles"),
        ("llc_load_miss_ratio", "LLC-load-misses", "LLC-loads"),
    ):
        if measured.get(under) and over in measured:
            add(name, measured[over] / measured[under], "1", "ratio", f"{over}/{under}")
    if "LLC-load-misses" in measured and line_bytes:
        add(
            "llc_miss_bytes_estimate",
            measured["LLC-load-misses"] * line_bytes,
            "B",
            "estimate",
            f"LLC-load-misses x {line_bytes} B line; loads only (no write-backs, no prefetches)",
        )
    reason = None
    if unavailable:
        by_status: dict[str, list[str]] = {}
        for event, why in unavailable.items():
            by_status.setdefault(why, []).append(event)
        reason = "perf: " + "; ".join(f"{', '.join(e)} {why}" for why, e in by_status.items())
        said = [line for line in stat.other_lines if line.strip()]
        if said and not measured:
            reason += " | perf said: " + " | ".join(said[:6])
        if note:
            reason += f" ({note})"
    status = "ok" if not unavailable else ("partial" if measured else "unavailable")
    return CpuCounters(status, reason, measured, unavailable, derived)
