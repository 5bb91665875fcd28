"""ncu's raw CSV (`ncu --csv --page raw --print-units base`): one row per metric per kernel,
numbers with thousands separators, replay passes per kernel, each metric summed over the kernels
of a profiled range."""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass


class CounterParseError(ValueError):
    """Tool output that does not have the shape this parser was written against."""


# -- the CSV of one profiled range -----------------------------------------------------------------


@dataclass(frozen=True)
class KernelMetric:
    """One metric of one profiled kernel launch, as ncu printed it."""

    kernel_id: int
    kernel_name: str
    metric: str
    value: float | None  # None where ncu printed no number ("n/a", empty)
    unit: str
    raw: str


_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


def parse_number(raw: str) -> float | None:
    """A value as ncu prints it (`1,037,411,296`, `0.59`); None for `n/a`, empty or not finite."""
    text = raw.strip()
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class RawPage:
    """ncu's raw page as printed: the header, the units row (None where there is none), one
    record per kernel launch (each as long as the header, its ID a number), and the lines ncu
    added (`==PROF==`, `==WARNING==`, `==ERROR==`), in order."""

    header: list[str]
    units: list[str] | None
    records: list[list[str]]
    tool_lines: list[str]


def read_raw_page(text: str) -> RawPage | None:
    """The table of `ncu --csv --page raw`: None where there is no header ("ID", ...,
    "Kernel Name", ...), i.e. no kernel was profiled; a record that does not fit the header is a
    `CounterParseError`."""
    lines = text.splitlines()
    tool_lines = [line for line in lines if line.startswith("==")]
    start = next(
        (i for i, line in enumerate(lines) if line.startswith('"ID",') and "Kernel Name" in line),
        None,
    )
    if start is None:
        return None
    body = [line for line in lines[start:] if line.strip() and not line.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(body))))
    header = rows[0]
    if "Kernel Name" not in header:
        raise CounterParseError("header without a 'Kernel Name' column")
    units, records = None, rows[1:]
    if records and records[0][:1] == [""]:
        units, records = records[0], records[1:]
    for row in records:
        if len(row) != len(header) or not row[0].strip().isdigit():
            raise CounterParseError(f"row does not fit the header: {','.join(row)[:120]}")
    return RawPage(header, units, records, tool_lines)


def parse_ncu_csv(text: str, metrics: Collection[str] | None = None) -> list[KernelMetric]:
    """Rows of `ncu --csv --page raw --print-units base`: a header ("ID", "Process ID", ...,
    "Kernel Name", ..., then one column per metric), a row of units, one row per kernel launch.
    Lines ncu adds (`==PROF==`, `==WARNING==`, ...) are skipped; anything else that does not fit
    the header is an error. No header: no kernel was profiled (an empty list). `metrics`: keep
    only these columns (ncu 2025's raw page adds every device attribute and profiler metric to
    the ones asked for)."""
    page = read_raw_page(text)
    if page is None:
        return []
    header = page.header
    name_col = header.index("Kernel Name")
    metric_cols = [
        i for i, name in enumerate(header) if "__" in name and (metrics is None or name in metrics)
    ]
    units = page.units or [""] * len(header)
    out = []
    for row in page.records:
        kernel_id, kernel_name = int(row[0]), row[name_col]
        for i in metric_cols:
            value = parse_number(row[i])
            out.append(KernelMetric(kernel_id, kernel_name, header[i], value, units[i], row[i]))
    return out


@dataclass(frozen=True)
class MetricTotal:
    """A metric over every kernel of the range: the sum for counters (`.sum`), min and max for
    the rest (rates and clocks do not add up)."""

    metric: str
    unit: str
    kernels: int
    total: float | None  # None: not a counter, or some kernel had no value
    minimum: float | None
    maximum: float | None
    summable: bool
    kernels_without_value: int


def sum_over_kernels(rows: Iterable[KernelMetric]) -> dict[str, MetricTotal]:
    """Each metric summed over every kernel launched in the range (cuBLAS may launch more than
    one); the per-kernel rows stay with the caller."""
    by_metric: dict[str, list[KernelMetric]] = {}
    for row in rows:
        by_metric.setdefault(row.metric, []).append(row)
    totals = {}
    for metric, group in by_metric.items():
        units = {r.unit for r in group}
        if len(units) > 1:
            raise CounterParseError(f"{metric}: kernels report different units {sorted(units)}")
        values = [r.value for r in group if r.value is not None]
        summable = metric.endswith(".sum")
        complete = len(values) == len(group)
        totals[metric] = MetricTotal(
            metric=metric,
            unit=group[0].unit,
            kernels=len(group),
            total=sum(values) if summable and complete else None,
            minimum=min(values) if values else None,
            maximum=max(values) if values else None,
            summable=summable,
            kernels_without_value=len(group) - len(values),
        )
    return totals


# -- replay passes ---------------------------------------------------------------------------------


_PASSES = re.compile(r'^==PROF== Profiling ".*" - .* - (\d+) pass(?:es)?\s*$')
# Replay passes per kernel as a raw-page column (ncu 2025 prints it unasked, and prints no
# progress lines when the CSV goes to a log file).
REPLAY_PASSES = "profiler__replayer_passes"


def replay_passes(text: str, rows: Iterable[KernelMetric] = ()) -> list[int]:
    """Replay passes per profiled kernel: the `profiler__replayer_passes` column of the CSV rows
    where ncu printed it, else ncu's progress lines (`==PROF== Profiling "name" - 0:
    0%....50%....100% - 46 passes`). With more than one pass, kernel replay restores the memory
    the kernel writes before each later pass, so `--cache-control none` is the cache state the
    previous pass left, not the application's (docs/counters.md)."""
    by_kernel = {r.kernel_id: r.value for r in rows if r.metric == REPLAY_PASSES}
    if by_kernel and None not in by_kernel.values():
        return [int(by_kernel[kernel]) for kernel in sorted(by_kernel)]
    return [int(m.group(1)) for m in map(_PASSES.match, text.splitlines()) if m]
