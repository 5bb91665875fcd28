"""Rows built from the table declarations (records.tables.TABLES), for tests and benchmarks that
write runs without measuring: every declared column present (None where not given), a column the
table does not declare refused, and a `runs` row at the current SCHEMA_VERSION. Not a test
module, so pytest collects nothing here."""

import json
from datetime import datetime, timedelta

from rooflab.records import SCHEMA_VERSION, TABLES


def table_row(table: str, **columns) -> dict:
    """A row of `table` with `columns` and None in every other declared column."""
    declared = TABLES[table].names
    unknown = sorted(set(columns) - set(declared))
    if unknown:
        raise KeyError(f"table {table} declares no column {', '.join(unknown)}")
    return {name: columns.get(name) for name in declared}


def runs_row(
    run_id: str, kind: str, started_at: datetime, sweep: str | None = None, **columns
) -> dict:
    """A `runs` row of the current schema version, ended 3 minutes after it started unless
    `columns` says otherwise."""
    return table_row(
        "runs",
        **{
            "run_id": run_id,
            "schema_version": SCHEMA_VERSION,
            "kind": kind,
            "sweep": sweep,
            "started_at": started_at,
            "ended_at": started_at + timedelta(minutes=3),
            **columns,
        },
    )


def clock_or_reason(conditions_row: dict) -> bool:
    """A stored conditions row holds a plausible measured CPU clock, or none and the reason: the
    probe gives no reading, never a wrong one, when every run of it was preempted (a busy CI VM)."""
    ghz = conditions_row["cpu_ghz_measured"]
    reasons = json.loads(conditions_row["unavailable"] or "{}")
    return (ghz is not None and 0.1 < ghz < 10) or bool(reasons.get("cpu_ghz_measured"))
