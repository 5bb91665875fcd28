"""The ncu command line (every experiment-changing setting explicit, the NVTX filter), ncu's
version, its failures in its own words, running one profile and the `counters` rows of its
result."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rooflab.backends.base import nvtx_name
from rooflab.counters.ncu.raw_csv import (
    REPLAY_PASSES,
    CounterParseError,
    KernelMetric,
    MetricTotal,
    parse_ncu_csv,
    replay_passes,
    sum_over_kernels,
)
from rooflab.counters.tool import ToolRun, Unavailable, run_tool

NCU = "ncu"


# -- the command line ------------------------------------------------------------------------------

CACHE_CONTROLS = ("all", "none")
REPLAY_MODES = ("kernel", "application")  # per-kernel rows; range replay would merge kernels
NVTX_FILTER_SYNTAX = "@,[]/*+\\$"  # quantifiers of ncu's NVTX filter, and its escapes


def counters_range(config_id: str) -> str:
    """The NVTX push/pop range a counters child puts around its one measured GEMM call, named
    like the backend's other ranges (`nvtx_name`): `<config_id>:counters` with ':' for '/'."""
    return nvtx_name(f"{config_id}/counters")


def nvtx_push_pop_filter(range_name: str, domain: str | None = None) -> str:
    """`--nvtx-include` configuration for kernels inside one push/pop range, at any depth.

    ncu's NVTX filter syntax (NsightComputeCli, "NVTX Filtering"): a trailing `/` marks a push/pop
    range; `/` between names means nesting, `@` a domain, `[` `]` bottom/top of the stack, `*` `+`
    ranges in between, `,` start/end ranges. rooflab's range names hold none of these
    (`nvtx_name`), so the filter is the plain documented form `<range>/`; a name that would need
    ncu's escapes is refused rather than escaped."""
    if not range_name:
        raise ValueError("NVTX range name is empty")
    for name in (range_name, domain or ""):
        if any(c in NVTX_FILTER_SYNTAX for c in name):
            raise ValueError(
                f"NVTX name {name!r} holds one of {NVTX_FILTER_SYNTAX!r}, which ncu's "
                "--nvtx-include reads as filter syntax (name ranges with rooflab's nvtx_name)"
            )
    config = f"{domain}@{range_name}/" if domain else f"{range_name}/"
    if config.startswith("regex:"):
        raise ValueError(f"NVTX filter {config!r}: ncu reads a leading 'regex:' as a mode")
    return config


@dataclass(frozen=True)
class NcuCommand:
    argv: tuple[str, ...]
    settings: dict  # what changes the experiment, to record beside every counter
    log_file: str | None = None


def ncu_command(
    child_argv: Sequence[str],
    *,
    nvtx_range: str,
    metrics: Sequence[str],
    cache_control: str,
    replay_mode: str = "kernel",
    ncu: str = NCU,
    log_file: str | Path | None = None,
    nvtx_domain: str | None = None,
) -> NcuCommand:
    """The full ncu argv for one child process, every experiment-changing setting explicit.

    `cache_control`: "all" flushes every GPU cache before each replay pass (pairs with cold
    timings); "none" leaves them (pairs with warm timings; with `replay_mode="application"` the
    kernel sees the caches the application left, with "kernel" later passes see the earlier
    pass's). Clocks are never locked (`--clock-control none`). `log_file` keeps ncu's CSV apart
    from the child's own output."""
    if cache_control not in CACHE_CONTROLS:
        raise ValueError(f"cache_control must be one of {CACHE_CONTROLS}, got {cache_control!r}")
    if replay_mode not in REPLAY_MODES:
        raise ValueError(f"replay_mode must be one of {REPLAY_MODES}, got {replay_mode!r}")
    metrics = list(metrics)
    if not metrics:
        raise ValueError("no metrics to collect")
    for metric in metrics:
        if "__" not in metric or "," in metric or metric.strip() != metric:
            raise ValueError(f"not an ncu metric name: {metric!r}")
    child = [str(a) for a in child_argv]
    if not child or child[0].startswith("-"):
        raise ValueError(
            "the child command must be a program (ncu has no '--' separator), got "
            f"{child[:1] or 'nothing'}"
        )
    nvtx_include = nvtx_push_pop_filter(nvtx_range, nvtx_domain)
    argv = [
        ncu,
        "--cache-control",
        cache_control,
        "--clock-control",
        "none",
        "--replay-mode",
        replay_mode,
        "--target-processes",
        "all",
        "--nvtx",
        "--nvtx-include",
        nvtx_include,
        "--metrics",
        ",".join(metrics),
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
    ]
    if log_file is not None:
        argv += ["--log-file", str(log_file)]
    settings = {
        "tool": "ncu",
        "cache_control": cache_control,
        "clock_control": "none",
        "replay_mode": replay_mode,
        "target_processes": "all",
        "nvtx_range": nvtx_range,
        "nvtx_domain": nvtx_domain,
        "nvtx_include": nvtx_include,
        "metrics": metrics,
        "page": "raw",
        "print_units": "base",
    }
    return NcuCommand(tuple(argv + child), settings, str(log_file) if log_file else None)


# -- version, failures -----------------------------------------------------------------------------


@dataclass(frozen=True)
class NcuVersion:
    version: str  # e.g. "2024.1.1.0"
    text: str  # ncu --version, whole


def parse_ncu_version(text: str) -> str | None:
    match = re.search(r"^Version\s+(\S+)", text, flags=re.MULTILINE)
    return match.group(1) if match else None


def ncu_version(ncu: str = NCU, timeout_s: float = 60) -> NcuVersion | Unavailable:
    run = run_tool("ncu", [ncu, "--version"], timeout_s)
    if isinstance(run, Unavailable):
        return run
    problem = ncu_problem(run)
    if problem is not None:
        return problem
    version = parse_ncu_version(run.stdout)
    if version is None:
        return Unavailable("ncu", f"no 'Version' line in `{ncu} --version`: {run.output.strip()}")
    return NcuVersion(version, run.stdout.strip())


def _tool_lines(text: str, *prefixes: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(prefixes) and line not in lines:
            lines.append(line)
    return lines


CHILD_LINES = 5  # of the profiled program's stderr, kept in a failure's reason


def ncu_problem(run: ToolRun, extra_text: str = "") -> Unavailable | None:
    """Why an ncu run gave no usable result, in ncu's own words; None when it exited cleanly.
    Counters not permitted (ERR_NVGPUCTRPERM, e.g. a container without profiling rights) is
    named as such."""
    text = "\n".join(t for t in (run.output, extra_text) if t)
    if "ERR_NVGPUCTRPERM" in text:
        lines = [line.strip() for line in text.splitlines() if "ERR_NVGPUCTRPERM" in line]
        return Unavailable("ncu", "counters not permitted (ERR_NVGPUCTRPERM): " + " | ".join(lines))
    messages = _tool_lines(text, "==ERROR==", "==WARNING==")
    if run.returncode != 0 or any(m.startswith("==ERROR==") for m in messages):
        said = " | ".join(messages) if messages else (text.strip().splitlines() or [""])[-1]
        # the profiled program's own last words (ncu passes its stderr through): a traceback
        child = [line.strip() for line in run.stderr.splitlines() if line.strip()]
        child = [line for line in child if not line.startswith("==")][-CHILD_LINES:]
        also = f" | the program's stderr ends: {' / '.join(child)}" if child else ""
        return Unavailable("ncu", f"exit status {run.returncode}: {said}{also}")
    return None


# -- running one profile ---------------------------------------------------------------------------


@dataclass(frozen=True)
class NcuResult:
    rows: list[KernelMetric]
    totals: dict[str, MetricTotal]
    command: NcuCommand
    run: ToolRun
    passes: tuple[int, ...] = ()  # replay passes per profiled kernel, as ncu printed them


def run_ncu(command: NcuCommand, timeout_s: float) -> NcuResult | Unavailable:
    """Run one profile (`ncu_outcome` says what came of it); ncu missing: `Unavailable`."""
    run = run_tool("ncu", command.argv, timeout_s, command.log_file)
    return run if isinstance(run, Unavailable) else ncu_outcome(command, run)


def ncu_outcome(command: NcuCommand, run: ToolRun) -> NcuResult | Unavailable:
    """What one finished profile gave: its CSV (from the log file when the command has one, else
    stdout) parsed and summed, or `Unavailable` when ncu was not permitted or failed, printed a
    CSV this parser does not understand, or profiled no kernel in the range."""
    text = (run.file_text or "") if command.log_file else run.stdout
    problem = ncu_problem(run, text if command.log_file else "")
    if problem is not None:
        return problem
    try:
        rows = parse_ncu_csv(text, {*command.settings["metrics"], REPLAY_PASSES})
        totals = sum_over_kernels(rows)
    except CounterParseError as error:
        return Unavailable("ncu", f"ncu's CSV not understood: {error}")
    if not rows:
        said = " | ".join(_tool_lines(run.output + "\n" + text, "==PROF==", "==WARNING=="))
        return Unavailable(
            "ncu",
            f"no kernel profiled inside NVTX range '{command.settings['nvtx_range']}' "
            f"(filter '{command.settings['nvtx_include']}')" + (f": {said}" if said else ""),
        )
    passes = tuple(replay_passes(run.output + "\n" + text, rows))
    return NcuResult(rows, totals, command, run, passes)


def counter_rows(
    result: NcuResult | Unavailable,
    *,
    run_id: str,
    config_id: str,
    settings: Mapping,
    tool_version: str | None,
    chip: str | None,
    missing: Sequence[str] = (),
) -> list[dict]:
    """Rows for a `counters` table (fields proposed in docs/counters.md): one per metric per
    kernel (scope "kernel"), one per metric for the whole range (scope "range": the sum of a
    counter, else null), one per metric the chip lacks (status "missing"), one per requested
    metric the CSV has no column for (status "not in output"), or a single "unavailable" row with
    the reason when there was no result."""
    common = {
        "run_id": run_id,
        "config_id": config_id,
        "tool": "ncu",
        "tool_version": tool_version,
        "chip": chip,
        "cache_control": settings.get("cache_control"),
        "clock_control": settings.get("clock_control"),
        "replay_mode": settings.get("replay_mode"),
        "nvtx_include": settings.get("nvtx_include"),
    }
    empty = {"kernel_id": None, "kernel": None, "value": None, "unit": None}
    if isinstance(result, Unavailable):
        return [
            {
                **common,
                **empty,
                "scope": "range",
                "metric": None,
                "status": "unavailable",
                "reason": result.reason,
            }
        ]
    rows = [
        {
            **common,
            "kernel_id": r.kernel_id,
            "kernel": r.kernel_name,
            "scope": "kernel",
            "metric": r.metric,
            "value": r.value,
            "unit": r.unit,
            "status": "ok" if r.value is not None else "no value",
            "reason": None,
        }
        for r in result.rows
    ]
    for metric, total in result.totals.items():
        rows.append(
            {
                **common,
                **empty,
                "scope": "range",
                "metric": metric,
                "value": total.total,
                "unit": total.unit,
                "status": "ok" if total.total is not None else "no value",
                "reason": None if total.summable else "not a counter: min and max per kernel only",
            }
        )
    why = f"not available on chip {chip} (ncu {tool_version} --query-metrics)"
    rows += [
        {**common, **empty, "scope": "range", "metric": m, "status": "missing", "reason": why}
        for m in missing
    ]
    absent = [m for m in settings.get("metrics", ()) if m not in result.totals]
    why = "requested, but ncu printed no column for it (ncu drops some metrics silently)"
    rows += [
        {**common, **empty, "scope": "range", "metric": m, "status": "not in output", "reason": why}
        for m in absent
    ]
    return rows
