"""How the `rooflab` command prints: rows as an aligned table, CSV or JSON, and its one-line
errors."""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys

from rooflab.backends.base import BackendError
from rooflab.config import ConfigError
from rooflab.model import ModelError
from rooflab.records import NotWritable
from rooflab.store import StoreError
from rooflab.units import UnitError, format_quantity

INPUT_ERRORS = (UnitError, ModelError, ConfigError, BackendError, StoreError, NotWritable)


class UsageError(Exception):
    pass


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print the whole usage first
        raise UsageError(f"{self.prog}: {message}")


COLUMN_KINDS = {
    "flops": "flop",
    "bytes": "bytes",
    "compute_s": "time",
    "memory_s": "time",
    "bound_s": "time",
    "bound_s_per_row": "time",
    "attainable_flops_per_s": "flop_rate",
    "start_s": "time",
    "finish_s": "time",
    "peak_flops_per_s": "flop_rate",
    "bandwidth_b_per_s": "byte_rate",
}


def json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no infinity; an intensity with zero bytes prints as null
    return value


def _cell(column: str, value) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and column in COLUMN_KINDS:
        return format_quantity(value, COLUMN_KINDS[column])
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def print_rows(rows: list[dict], fmt: str, out=None) -> None:
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
    cells = [[_cell(c, row[c]) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    out.write("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=False)).rstrip() + "\n")
    for r in cells:
        out.write("  ".join(v.rjust(w) for v, w in zip(r, widths, strict=False)).rstrip() + "\n")
