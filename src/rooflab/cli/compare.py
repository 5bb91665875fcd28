"""`rooflab compare`: two runs of each point and ceiling, judged beyond noise, with what changed
between them (docs/compare.md); exit 1 with --fail-on regression when anything got slower beyond
its known run-to-run spread (with --fail-on any-slower, provisional verdicts too)."""

from __future__ import annotations

import sys

from rooflab.cli.output import UsageError, print_rows

JSON_COLUMNS = ("key", "kind", "name", "machine_id", "backend", "baseline_run_id")
JSON_COLUMNS += ("candidate_run_id", "baseline_s", "candidate_s", "ratio", "ci_low", "ci_high")
JSON_COLUMNS += ("p_value", "verdict", "provisional", "method", "conditions_changed", "note")
TABLE_COLUMNS = ("key", "baseline_s", "candidate_s", "ratio", "ci_low", "ci_high", "verdict")
TABLE_COLUMNS += ("provisional", "conditions_changed")
FAIL_ON = ("regression", "any-slower")


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
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("slower", "faster", "same")}
    counts["incomparable"] = sum(r["verdict"] == "incomparable" for r in rows)
    slower = [r for r in rows if r["verdict"] == "slower"]
    provisional = [r["key"] for r in slower if r["provisional"]]
    print(
        "rooflab: "
        + ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
        + f" (minimum effect {args.min_effect:.0%})",
        file=sys.stderr,
    )
    if provisional:
        print(
            f"rooflab: provisional: {', '.join(provisional)} slower, but without 3 earlier runs "
            "the run-to-run spread is not known (rerun to confirm)",
            file=sys.stderr,
        )
    failing = [r["key"] for r in slower if args.fail_on == "any-slower" or not r["provisional"]]
    if args.fail_on and failing:
        print(f"rooflab: regression: {', '.join(failing)} slower", file=sys.stderr)
        return 1
    return 0
