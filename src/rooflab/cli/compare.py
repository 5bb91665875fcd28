"""`rooflab compare`: two runs of each point and ceiling, judged beyond noise, with what changed
between them (docs/compare.md). With --fail-on regression: exit 1 when anything got slower beyond
its known run-to-run spread, else 3 when some pair is inconclusive (an interval that holds both no
change and the effect, a side disturbed or on a busy machine, a slower verdict still
provisional), else 0; with --fail-on any-slower, exit 1 on every slower verdict of the samples,
provisional or not."""

from __future__ import annotations

import sys

from rooflab.cli.output import UsageError, print_rows
from rooflab.comparison import VERDICTS

JSON_COLUMNS = ("key", "kind", "name", "machine_id", "backend", "baseline_run_id")
JSON_COLUMNS += ("candidate_run_id", "baseline_s", "candidate_s", "ratio", "ci_low", "ci_high")
JSON_COLUMNS += ("p_value", "verdict", "provisional", "method", "conditions_changed", "note")
JSON_COLUMNS += ("samples_verdict", "accuracy_changed", "median_ratio", "effect")
INCONCLUSIVE = 3  # the exit status of --fail-on when no regression is confirmed but one could hide
FAIL_ON = ("regression", "any-slower")


def cmd_compare(args) -> int:
    from rooflab.store import StoreError, connect_read_only
    from rooflab.store.comparisons import compare_runs
    from rooflab.store.import_comparisons import compare_imports

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
        imported = compare_imports(connection, args.baseline, args.candidate, args.min_effect)
        rows += [r for r in imported if args.machine in (None, r["machine_id"])]
    finally:
        connection.close()
    if not rows:
        raise UsageError(
            "compare: nothing to compare: no point or ceiling is in both runs"
            + (f" on machine {args.machine}" if args.machine else "")
        )
    for row in rows:  # the ratio of the two medians, beside the Hodges-Lehmann `ratio`
        medians = row["baseline_s"], row["candidate_s"]
        row["median_ratio"] = medians[1] / medians[0] if all(medians) else None
    if args.format == "table":
        print_rows([_table_row(row) for row in rows], "table")
        print(
            "rooflab: before: the baseline's median, after: the candidate's; medians: their "
            "ratio; ratio: the Hodges-Lehmann ratio and its 95 % interval; * provisional, "
            "! conditions or accuracy changed (--format json says which)",
            file=sys.stderr,
        )
    else:
        print_rows([{c: row[c] for c in JSON_COLUMNS} for row in rows], args.format)
    provisional = sum(bool(r["provisional"]) for r in rows)
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    print(
        "rooflab: "
        + ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
        + f" (minimum effect {args.min_effect:.0%})",
        file=sys.stderr,
    )
    if provisional:
        print(
            f"rooflab: {provisional} of {len(rows)} verdicts provisional: their key has fewer than "
            "3 earlier runs, so its run-to-run spread is unknown and a slower one is inconclusive",
            file=sys.stderr,
        )
    for row in rows:
        if row["verdict"] == "inconclusive":
            said = f"{row['key']}: {row['samples_verdict']} by its samples, but {row['note']}"
            if row["samples_verdict"] == "inconclusive":  # the note says why, interval and all
                said = f"{row['key']}: {row['note']}"
            print(f"rooflab: inconclusive: {said}", file=sys.stderr)
        if row["accuracy_changed"] and row["verdict"] != "incomparable":
            said = f"{row['key']} ({row['verdict']}): {row['accuracy_changed']}"
            print(f"rooflab: accuracy changed: {said}", file=sys.stderr)
    slower = {"slower"} | ({"inconclusive"} if args.fail_on == "any-slower" else set())
    failing = [
        r["key"] for r in rows if r["verdict"] in slower and r["samples_verdict"] == "slower"
    ]
    if args.fail_on and failing:
        print(f"rooflab: regression: {', '.join(failing)} slower", file=sys.stderr)
        return 1
    if args.fail_on and counts["inconclusive"]:
        print(
            f"rooflab: no regression confirmed, but {counts['inconclusive']} pair(s) inconclusive "
            f"(exit {INCONCLUSIVE}): rerun them on a quiet machine, and with a longer "
            "timing.max_time_s where an interval is wide",
            file=sys.stderr,
        )
        return INCONCLUSIVE
    return 0


def _table_row(row: dict) -> dict:
    """A pair in a narrow table: the medians before and after, their ratio, the Hodges-Lehmann
    ratio with its interval, the verdict (`*` provisional, `!` conditions or accuracy changed;
    `--format json` has the details)."""
    interval = ""
    if row["ci_low"] is not None and row["ci_high"] is not None:
        interval = f"{row['ci_low']:.3g}-{row['ci_high']:.3g}"
    marks = "*" if row["provisional"] else ""
    marks += "!" if row["conditions_changed"] or row["accuracy_changed"] else ""
    return {
        "key": row["key"],
        "before_s": row["baseline_s"],
        "after_s": row["candidate_s"],
        "medians": _ratio(row["median_ratio"]),
        "ratio": _ratio(row["ratio"]),
        "interval": interval,
        "verdict": row["verdict"] + marks,
    }


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"
