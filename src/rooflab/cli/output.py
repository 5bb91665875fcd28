"""How the `rooflab` command prints: rows as an aligned table, CSV or JSON, and its one-line
errors."""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import sys
from collections.abc import Iterator

from rooflab.backends.base import BackendError
from rooflab.config import ConfigError
from rooflab.imports import ProfileError
from rooflab.model import ModelError
from rooflab.records import NotWritable
from rooflab.store import StoreError
from rooflab.units import UNITS, UnitError, format_quantity
from rooflab.workloads import WorkloadError

INPUT_ERRORS = (
    UnitError,
    ModelError,
    ConfigError,
    BackendError,
    StoreError,
    NotWritable,
    WorkloadError,
    ProfileError,
)


class UsageError(Exception):
    pass


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print the whole usage first
        # main prints "rooflab: error: "; the subcommand, if any, follows it once
        command = self.prog.removeprefix("rooflab").strip()
        raise UsageError(f"{command}: {message}" if command else message)


# A column's unit, from its name (the store's convention: units in the names, docs/store.md):
# (rule, name part, unit, kind). Rule "suffix": the name is the part or ends with _part; "prefix":
# it is the part or starts with part_; "name": exactly. Kind: the units.format_quantity kind whose
# decimal prefixes a table scales the column by; None: printed in the unit as it is.
UNIT_RULES = (
    ("suffix", "flops_per_s", "FLOP/s", "flop_rate"),
    ("suffix", "b_per_s", "B/s", "byte_rate"),
    ("suffix", "per_s", None, None),  # gb_per_s, gflop_per_s: scaled by the query that made them
    ("prefix", "flops", "FLOP", "flop"),  # flops, flops_counted
    ("suffix", "flops", "FLOP", "flop"),  # counted_flops, expected_flops
    ("prefix", "bytes", "B", "bytes"),  # bytes, bytes_model, bytes_counted
    ("suffix", "bytes", "B", "bytes"),  # working_set_bytes, flush_bytes
    ("suffix", "mhz", "MHz", None),
    ("suffix", "ghz", "GHz", None),
    ("suffix", "s", "s", "time"),
    ("suffix", "c", "°C", None),
    ("suffix", "w", "W", None),
    ("name", "bound_s_per_row", "s", "time"),
    ("name", "seconds", "s", "time"),  # samples: one sample's time
    ("name", "cpu_ghz_measured", "GHz", None),
    ("name", "intensity", "FLOP/B", None),
    ("name", "ridge", "FLOP/B", None),
)


def column_unit(column: str) -> tuple[str | None, str | None]:
    """(unit, scaling kind) of a column from its name; (None, None) when the name gives none."""
    for rule, part, unit, kind in UNIT_RULES:
        if (
            column == part
            or (rule == "suffix" and column.endswith(f"_{part}"))
            or (rule == "prefix" and column.startswith(f"{part}_"))
        ):
            return unit, kind
    return None, None


def json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no infinity; an intensity with zero bytes prints as null
    return value


def _numeric(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _plain_cell(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _column_cells(column: str, values: list) -> tuple[str, list[str]]:
    """The header and cells of one table column. A numeric column with a unit in its name gets
    the unit in its header, and one decimal prefix for all its cells (the largest value's), so
    every value of a column reads in the same unit: `median_s (μs)`, `flops (GFLOP)`."""
    unit, kind = column_unit(column)
    if unit is None or not all(v is None or _numeric(v) for v in values):
        return column, [_plain_cell(v) for v in values]
    if kind is None:  # no prefix: the unit in the header, unless the name already spells it
        said = column.lower().endswith(f"_{unit.lower()}")
        return (column if said else f"{column} ({unit})"), [_plain_cell(v) for v in values]
    finite = [abs(v) for v in values if _numeric(v) and math.isfinite(v) and v != 0]
    prefixed = format_quantity(max(finite), kind).split(" ", 1)[1] if finite else unit
    scale = UNITS[prefixed][1] if prefixed in UNITS else 1.0
    cells = []
    for v in values:
        if not _numeric(v):
            cells.append(_plain_cell(v))
        elif isinstance(v, int) and scale == 1.0:
            cells.append(str(v))
        else:
            scaled = v / scale
            cells.append(f"{scaled:.0f}" if abs(scaled) >= 1e5 else f"{scaled:.5g}")
    return f"{column} ({prefixed})", cells


def print_rows(rows: list[dict], fmt: str, out=None, header=None) -> None:
    """Rows as JSON or CSV (numbers in base units: s, B, FLOP, FLOP/s, B/s) or as an aligned
    table (units in the header, _column_cells; `header`, where given, rewrites each)."""
    out = out or sys.stdout
    if fmt == "json":
        json.dump([{k: json_safe(v) for k, v in row.items()} for row in rows], out, indent=2)
        out.write("\n")
        return
    columns = list(rows[0]) if rows else []
    if fmt == "csv":
        writer = csv.DictWriter(out, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return
    formatted = [_column_cells(c, [row[c] for row in rows]) for c in columns]
    formatted = [(header(h) if header else h, cells) for h, cells in formatted]
    headers = [h for h, _ in formatted]
    widths = [max([len(h)] + [len(cell) for cell in cells]) for h, cells in formatted]
    out.write("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)).rstrip() + "\n")
    for i in range(len(rows)):
        line = "  ".join(cells[i].rjust(w) for (_, cells), w in zip(formatted, widths, strict=True))
        out.write(line.rstrip() + "\n")


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """While a user's kernel runs, whatever it prints (Python's print and C's printf alike: file
    descriptor 1) goes to stderr, so the command's own output on stdout (its JSON, CSV) stays
    whole."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
