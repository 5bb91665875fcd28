"""`rooflab explain`: why each point sits where it does and what to try next, from the store's
diagnoses (roofline.diagnosis; docs/diagnosis.md)."""

from __future__ import annotations

import json

from rooflab.cli.store import print_result, query_rows
from rooflab.store import StoreError

COLUMNS = (
    "key, kind, cache_state, level, limiter, efficiency, cause, evidence, next_step, "
    "predicted_s, median_s, run_id"
)


def cmd_explain(args) -> None:
    """The newest diagnosis of each point (the `diagnoses` view), or every one of a run."""
    where, params = [], []
    for column, value in (("run_id", args.run), ("key", args.key), ("cause", args.cause)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    source = "point_diagnoses" if args.run else "diagnoses"
    clause = " WHERE " + " AND ".join(where) if where else ""
    sql = f"SELECT {COLUMNS} FROM {source}{clause} ORDER BY efficiency, key, cache_state, level"
    rows = query_rows(args.db, sql, params)
    if args.run and not rows:
        known = query_rows(args.db, "SELECT count(*) AS n FROM runs WHERE run_id = ?", [args.run])
        if not known[0]["n"]:
            raise StoreError(f"run {args.run} is not in {args.db} (`rooflab runs` lists them)")
    if args.format == "json":
        rows = [row | {"evidence": json.loads(row["evidence"])} for row in rows]
    elif args.format == "table":  # the evidence is in --format json or csv: too wide here
        rows = [{k: v for k, v in row.items() if k not in ("evidence", "run_id")} for row in rows]
    print_result(rows, args.format)
