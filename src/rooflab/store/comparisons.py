"""Runs compared key by key (docs/compare.md): each point (a GEMM configuration or a workload case
in a cache state) and each ceiling (kind, name, kernel) of one machine and backend, in a baseline
run and a candidate run, judged from their raw samples by rooflab.comparison, with what changed
between the two runs beside the verdict.

`compare_runs` pairs and judges (rooflab compare); `refresh_comparisons` stores the newest run of
every key against the one before it in table `run_comparisons` (view `comparisons`), after each
ingest, while both runs' samples are still there.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable

import numpy as np

from rooflab.comparison import (
    MIN_EFFECT,
    Compared,
    across_keys_effect,
    compare_samples,
    compare_summaries,
)
from rooflab.store.connection import VERSION_TABLE

# Tables the store keeps itself (not from a run folder): no run may hold one of these names.
STORE_TABLES = ("run_comparisons", VERSION_TABLE)
SIDES = ("baseline", "candidate")
CLOCK_CHANGE = 0.05  # a clock range that moved more than this fraction is a changed condition

COLUMNS = (
    ("machine_id", "VARCHAR"),
    ("backend", "VARCHAR"),
    ("kind", "VARCHAR"),
    ("key", "VARCHAR"),
    ("name", "VARCHAR"),
    ("baseline_run_id", "VARCHAR"),
    ("candidate_run_id", "VARCHAR"),
    ("baseline_commit", "VARCHAR"),
    ("candidate_commit", "VARCHAR"),
    ("baseline_s", "DOUBLE"),
    ("candidate_s", "DOUBLE"),
    ("ratio", "DOUBLE"),
    ("ci_low", "DOUBLE"),
    ("ci_high", "DOUBLE"),
    ("p_value", "DOUBLE"),
    ("verdict", "VARCHAR"),
    ("method", "VARCHAR"),
    ("min_effect", "DOUBLE"),
    ("effect", "DOUBLE"),
    ("provisional", "BOOLEAN"),
    ("conditions_changed", "VARCHAR"),
    ("note", "VARCHAR"),
    # the samples' own verdict where `verdict` is `inconclusive` (else the same); `inconclusive`
    # itself where their interval holds both no change and the effect
    ("samples_verdict", "VARCHAR"),
    # a correctness error that moved beyond its tolerance's noise, metric by metric
    ("accuracy_changed", "VARCHAR"),
)
# A correctness error moved beyond noise when it changed by more than this fraction of its
# tolerance (the seeded inputs give the same error run after run for the same implementation).
ACCURACY_NOISE = 0.1


def ensure_comparisons_table(connection, present: set[str]) -> bool:
    """Create run_comparisons or add the columns of COLUMNS it lacks (a store of an older
    rooflab); `present`: the columns it has. Whether anything was added."""
    if {name for name, _ in COLUMNS} <= present:
        return False
    columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
    connection.execute(f"CREATE TABLE IF NOT EXISTS run_comparisons ({columns})")
    for name, kind in COLUMNS:
        connection.execute(f"ALTER TABLE run_comparisons ADD COLUMN IF NOT EXISTS {name} {kind}")
    return True


def _runs(connection, run_ids: Iterable[str]) -> dict[str, dict]:
    ids = sorted(set(run_ids))
    if not ids:
        return {}
    rows = connection.execute(
        "SELECT run_id, host, device_name, driver_version, runtime_version, library_versions, "
        "git_commit, git_dirty, busy_warning FROM runs WHERE run_id IN "
        f"({', '.join('?' * len(ids))})",
        ids,
    ).fetchall()
    names = ("host", "device_name", "driver_version", "runtime_version", "library_versions")
    names += ("git_commit", "git_dirty", "busy_warning")
    return {row[0]: dict(zip(names, row[1:], strict=True)) for row in rows}


def _samples(connection, pairs: list[dict]) -> dict[tuple, tuple[list, list, list, list]]:
    """(run_id, config_id, cache_state) -> (seconds per unit of work, clock MHz, amount of work,
    the median per unit of work of each round) of the clean samples of every run and key in
    `pairs` (samples with no round: one round)."""
    rows = _of_pairs(
        connection,
        pairs,
        "SELECT s.run_id, s.config_id, s.cache_state, s.seconds / coalesce(s.amount, 1), "
        "s.clock_mhz, coalesce(s.amount, 1), coalesce(s.round, 0) FROM samples AS s "
        "JOIN _wanted AS w USING (run_id, config_id) "
        "WHERE NOT coalesce(s.disturbed, false) AND s.seconds > 0 ORDER BY s.sample_idx",
    )
    found: dict[tuple, tuple[list, list, list, list]] = {}
    by_round: dict[tuple, dict[int, list[float]]] = {}
    for run_id, config_id, cache_state, per_unit, clock, amount, round_ in rows:
        key = (run_id, config_id, cache_state)
        times, clocks, amounts, _ = found.setdefault(key, ([], [], [], []))
        times.append(per_unit)
        amounts.append(amount)
        if clock is not None:
            clocks.append(clock)
        by_round.setdefault(key, {}).setdefault(round_, []).append(per_unit)
    for key, rounds in by_round.items():
        found[key][3].extend(float(np.median(times)) for _, times in sorted(rounds.items()))
    return found


def _accuracy(connection, pairs: list[dict]) -> dict[tuple, dict[str, tuple]]:
    """(run_id, config_id) -> {metric: (largest error, its tolerance, all passed)} of every run
    and key in `pairs`: the checks in the timing run itself."""
    rows = _of_pairs(
        connection,
        pairs,
        "SELECT c.run_id, c.config_id, c.metric, max(c.error), max(c.tolerance), "
        "bool_and(c.passed) FROM correctness AS c JOIN _wanted AS w USING (run_id, config_id) "
        "GROUP BY ALL",
    )
    found: dict[tuple, dict[str, tuple]] = {}
    for run_id, config_id, metric, error, tolerance, passed in rows:
        found.setdefault((run_id, config_id), {})[metric] = (error, tolerance, passed)
    return found


def _accuracy_changed(base: dict[str, tuple], cand: dict[str, tuple]) -> str | None:
    """Each metric whose error moved beyond ACCURACY_NOISE of its tolerance, or whose check
    passed on one side only: `metric error → error (tolerance t)`."""
    said = []
    for metric in sorted(set(base) & set(cand)):
        (b_error, tolerance, b_passed), (c_error, _, c_passed) = base[metric], cand[metric]
        if b_error is None or c_error is None:
            continue
        if b_passed != c_passed or abs(c_error - b_error) > ACCURACY_NOISE * (tolerance or 0):
            passed = "" if b_passed == c_passed else f", passed {b_passed} → {c_passed}"
            said.append(
                f"{metric} {b_error:.3g} → {c_error:.3g} (tolerance {tolerance:.3g}{passed})"
            )
    return "; ".join(said) or None


def _cannot_judge(compared: Compared, base_row: dict, cand_row: dict, runs: tuple) -> list[str]:
    """Why a verdict from these two runs is not a judgement: a side disturbed or taken on a busy
    machine, or a slower verdict without the key's run-to-run spread."""
    if compared.verdict == "incomparable":
        return []
    why = []
    for side, row, run in zip(SIDES, (base_row, cand_row), runs, strict=True):
        why += [f"{side} disturbed"] if row["disturbed"] else []
        why += [f"machine busy before the {side}"] if run.get("busy_warning") else []
    if compared.verdict == "slower" and compared.provisional:
        why.append("provisional: fewer than 3 earlier runs give no run-to-run spread")
    return why


def _of_pairs(connection, pairs: list[dict], sql: str) -> list[tuple]:
    """The rows of `sql`, which joins `_wanted` (run_id, config_id): both runs of every pair."""
    wanted = {(p[side], p["config_id"]) for p in pairs for side in SIDES}
    if not wanted:
        return []
    connection.register("_wanted", _frame(wanted))
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.unregister("_wanted")


def _frame(wanted):
    import pandas as pd

    return pd.DataFrame(sorted(wanted), columns=["run_id", "config_id"])


def _pairs(connection, baseline: str, candidate: str, machine: str | None) -> list[dict]:
    """Per machine, backend and key: the baseline and candidate run ("previous" and "latest": the
    key's two newest runs; else the run ids, keys present in both)."""
    history = (
        "SELECT machine_id, backend, kind, key, name, config_id, cache_state, run_id, position, "
        "value, low, high, disturbed, work, max(position) OVER (PARTITION BY machine_id, "
        "backend, kind, key) AS newest FROM history" + (" WHERE machine_id = ?" if machine else "")
    )
    rows = connection.execute(history, [machine] if machine else []).fetchall()
    names = ("machine_id", "backend", "kind", "key", "name", "config_id", "cache_state")
    names += ("run_id", "position", "value", "low", "high", "disturbed", "work", "newest")
    by_key: dict[tuple, dict] = {}
    every: dict[tuple, list[dict]] = {}
    for row in map(lambda r: dict(zip(names, r, strict=True)), rows):
        key = (row["machine_id"], row["backend"], row["kind"], row["key"])
        every.setdefault(key, []).append(row)
        side = None
        if (baseline == "previous" and row["position"] == row["newest"] - 1) or baseline == row[
            "run_id"
        ]:
            side = "baseline"
        if (candidate == "latest" and row["position"] == row["newest"]) or candidate == row[
            "run_id"
        ]:
            by_key.setdefault(key, {})["candidate"] = row
        if side:
            by_key.setdefault(key, {})[side] = row
    pairs = []
    for (machine_id, backend, kind, key), sides in sorted(by_key.items()):
        if "baseline" in sides and "candidate" in sides:
            base, cand = sides["baseline"], sides["candidate"]
            if base["run_id"] == cand["run_id"]:
                continue
            pairs.append(
                {
                    "machine_id": machine_id,
                    "backend": backend,
                    "kind": kind,
                    "key": key,
                    "name": cand["name"],
                    "config_id": cand["config_id"],
                    "baseline": base["run_id"],
                    "candidate": cand["run_id"],
                    "rows": (base, cand),
                    # the medians of the key's runs before the candidate: its run-to-run spread
                    "history": [
                        r["value"] if kind == "point" else 1 / r["value"]
                        for r in every[(machine_id, backend, kind, key)]
                        if r["position"] < cand["position"] and r["value"]
                    ],
                }
            )
    return pairs


def _changed(base: dict, cand: dict, base_row: dict, cand_row: dict, clocks) -> list[str]:
    """What differs between the two runs that could explain a change."""
    said = []
    for field, label in (
        ("host", "host"),
        ("device_name", "device"),
        ("driver_version", "driver"),
        ("runtime_version", "CUDA runtime"),
    ):
        if base.get(field) != cand.get(field):
            said.append(f"{label} {base.get(field)} → {cand.get(field)}")
    versions = [json.loads(run.get("library_versions") or "{}") for run in (base, cand)]
    for name in sorted(set(versions[0]) | set(versions[1])):
        if versions[0].get(name) != versions[1].get(name) and name != "python":
            said.append(f"{name} {versions[0].get(name)} → {versions[1].get(name)}")
    commits = [f"{(r.get('git_commit') or '?')[:9]}{'+dirty' if r.get('git_dirty') else ''}"
               for r in (base, cand)]  # fmt: skip
    if commits[0] != commits[1]:
        said.append(f"commit {commits[0]} → {commits[1]}")
    ranges = [(min(c), max(c)) if c else None for c in clocks]
    if all(ranges):
        (b_lo, b_hi), (c_lo, c_hi) = ranges
        if abs(c_lo - b_lo) > CLOCK_CHANGE * b_lo or abs(c_hi - b_hi) > CLOCK_CHANGE * b_hi:
            said.append(f"clock {b_lo:.0f}–{b_hi:.0f} → {c_lo:.0f}–{c_hi:.0f} MHz")
    if bool(base_row["disturbed"]) != bool(cand_row["disturbed"]):
        said.append(f"disturbed {bool(base_row['disturbed'])} → {bool(cand_row['disturbed'])}")
    if (base.get("busy_warning") is None) != (cand.get("busy_warning") is None):
        said.append(
            "machine busy before the " + ("candidate" if cand.get("busy_warning") else "baseline")
        )
    return said


def compare_runs(
    connection,
    baseline: str = "previous",
    candidate: str = "latest",
    *,
    machine: str | None = None,
    min_effect: float = MIN_EFFECT,
) -> list[dict]:
    """Every key in both runs, judged: one dict per pair with the run_comparisons columns."""
    pairs = _pairs(connection, baseline, candidate, machine)
    samples = _samples(connection, pairs)
    runs = _runs(connection, [p[s] for p in pairs for s in ("baseline", "candidate")])
    accuracy = _accuracy(connection, pairs)
    spread = _across_keys(pairs)
    out = []
    for pair in pairs:
        base_row, cand_row = pair["rows"]
        sides = [
            samples.get((row["run_id"], row["config_id"], row["cache_state"]))
            or samples.get((row["run_id"], row["config_id"], None))
            for row in (base_row, cand_row)
        ]
        group = spread.get(_group(pair)) or 0.0
        effect = max(min_effect, group)
        compared = _judge(pair["kind"], base_row, cand_row, sides, effect, pair["history"])
        clocks = [side[1] if side else [] for side in sides]
        changed = _changed(
            runs[pair["baseline"]], runs[pair["candidate"]], base_row, cand_row, clocks
        )
        if base_row["work"] != cand_row["work"]:  # not the same experiment: no ratio is a verdict
            what = f"work {base_row['work']} → {cand_row['work']}"
            changed.insert(0, what)
            compared = dataclasses.replace(
                compared, ratio=None, ci_low=None, ci_high=None, p_value=None,
                verdict="incomparable", note=f"different work ({what})", provisional=False,
            )  # fmt: skip
        samples_verdict = compared.verdict
        sides_runs = (runs[pair["baseline"]], runs[pair["candidate"]])
        if why := _cannot_judge(compared, base_row, cand_row, sides_runs):
            note = "; ".join(filter(None, [compared.note, *why]))  # the samples' own reason first
            compared = dataclasses.replace(compared, verdict="inconclusive", note=note)
        checks = [accuracy.get((pair[side], pair["config_id"]), {}) for side in SIDES]
        out.append(
            {
                "machine_id": pair["machine_id"],
                "backend": pair["backend"],
                "kind": pair["kind"],
                "key": pair["key"],
                "name": pair["name"],
                "baseline_run_id": pair["baseline"],
                "candidate_run_id": pair["candidate"],
                "baseline_commit": runs[pair["baseline"]].get("git_commit"),
                "candidate_commit": runs[pair["candidate"]].get("git_commit"),
                **dataclasses.asdict(compared),  # medians, ratio, interval, verdict, note, ...
                "min_effect": min_effect,
                "conditions_changed": "; ".join(changed) or None,
                "samples_verdict": samples_verdict,
                "accuracy_changed": _accuracy_changed(*checks),
            }
        )
    return out


def _group(pair: dict) -> tuple:
    return (pair["machine_id"], pair["backend"], pair["kind"], pair["baseline"], pair["candidate"])


def _across_keys(pairs: list[dict]) -> dict[tuple, float | None]:
    """Per machine, backend, kind and pair of runs: across_keys_effect of its keys' ratios."""
    ratios: dict[tuple, list[float]] = {}
    for pair in pairs:
        base, cand = pair["rows"]
        if base["value"] and cand["value"]:
            ratio = cand["value"] / base["value"]  # a point's time, a ceiling's rate
            ratios.setdefault(_group(pair), []).append(
                ratio if pair["kind"] == "point" else 1 / ratio
            )
    return {group: across_keys_effect(values) for group, values in ratios.items()}


def _judge(
    kind: str, base_row: dict, cand_row: dict, sides, min_effect: float, history
) -> Compared:
    """From the samples where both runs still have them, else from the summaries; `history`:
    the key's earlier runs' medians (s, or s per unit of work for a ceiling)."""
    if all(sides):
        # time per unit of work (a ceiling's windows differ in length), reported as the time of
        # the baseline's median amount (a point's: its call) at each run's rate
        amount = float(np.median(sides[0][2]))
        base, cand = (np.asarray(side[0]) * amount for side in sides)
        rounds = (sides[0][3], sides[1][3])
        return compare_samples(base, cand, min_effect, history=history, rounds=rounds)
    if kind == "point":
        summaries = [(r["low"], r["value"], r["high"]) for r in (base_row, cand_row)]
    else:  # a rate: the time per unit is its inverse, quartiles swapped
        summaries = [
            (1 / r["high"], 1 / r["value"], 1 / r["low"]) if r["low"] and r["high"] else
            (1 / r["value"], 1 / r["value"], 1 / r["value"])
            for r in (base_row, cand_row)
        ]  # fmt: skip
    return compare_summaries(*summaries, min_effect=min_effect, history=history)


def refresh_comparisons(connection, min_effect: float = MIN_EFFECT) -> int:
    """Replace run_comparisons with every key's newest run against the one before it; the
    number of rows. The caller holds the transaction, on a store its writer made up to date."""
    import pandas as pd

    rows = compare_runs(connection, min_effect=min_effect)
    connection.execute("DELETE FROM run_comparisons")
    if rows:
        frame = pd.DataFrame(rows, columns=[name for name, _ in COLUMNS])
        connection.register("_compared", frame)
        try:
            connection.execute("INSERT INTO run_comparisons BY NAME SELECT * FROM _compared")
        finally:
            connection.unregister("_compared")
    return len(rows)
