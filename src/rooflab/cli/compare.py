"""`rooflab compare`: two runs of each point and ceiling, judged beyond noise, with what changed
between them (docs/compare.md); exit 1 with --fail-on regression when anything got slower."""

from __future__ import annotations

import sys

from rooflab.cli.output import UsageError, print_rows

JSON_COLUMNS = ("key", "kind", "name", "machine_id", "backend", "baseline_run_id")
JSON_COLUMNS += ("candidate_run_id", "baseline_s", "candidate_s", "ratio", "ci_low", "ci_high")
JSON_COLUMNS += ("p_value", "verdict", "method", "conditions_changed", "note")
TABLE_COLUMNS = ("key", "baseline_s", "candidate_s", "ratio", "ci_low", "ci_high", "verdict")
TABLE_COLUMNS += ("conditions_changed",)


def cmd_compare(args) -> int:
    from rooflab.store import StoreError, connect_read_only
    from rooflab.store.comparisons import compare_runs

    if not 0 <= args.min_effect < 1:
        raise UsageError(f"compare: --min-effect must be in [0, 1), got {args.min_effect}")
    try:
        connection = connect_read_only(args.db)
    except StoreError as error:
        raise UsageError(str(error)) from None
    try:
        known = {row[0] for row in connection.execute("SELECT run_id FROM runs").fetchall()}
        for option, value, word in (
            ("--baseline", args.baseline, "previous"),
            ("--candidate", args.candidate, "latest"),
        ):
            if value != word and value not in known:
                raise UsageError(f"compare: {option} {value}: no such run in {args.db}")
        rows = compare_runs(
            connection,
            args.baseline,
            args.candidate,
            machine=args.machine,
            min_effect=args.min_effect,
        )
    finally:
        connection.close()
    if not rows:
        raise UsageError(
            "compare: nothing to compare: no point or ceiling is in both runs"
            + (f" on machine {args.machine}" if args.machine else "")
        )
    columns = JSON_COLUMNS if args.format == "json" else TABLE_COLUMNS
    print_rows([{c: row[c] for c in columns} for row in rows], args.format)
    counts = {verdict: sum(r["verdict"] == verdict for r in rows) for verdict in ("slower",)}
    counts |= {v: sum(r["verdict"] == v for r in rows) for v in ("faster", "same", "incomparable")}
    print(
        "rooflab: "
        + ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
        + f" (minimum effect {args.min_effect:.0%})",
        file=sys.stderr,
    )
    if args.fail_on == "regression" and counts["slower"]:
        slower = [r["key"] for r in rows if r["verdict"] == "slower"]
        print(f"rooflab: regression: {', '.join(slower)} slower", file=sys.stderr)
        return 1
    return 0
