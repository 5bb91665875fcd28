"""Runs compared beyond noise (issue 30): the statistics on their own, then real runs of a kernel
whose cost we set (a sleep of 2 ms three times, then 3 ms; and a young store of the first and the
last of them) through the store's views, `rooflab compare` with --fail-on, and `rooflab store
prune`."""

from __future__ import annotations

import json
import os
import re
import shutil
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pytest

from rooflab.comparison import (
    across_keys_effect,
    compare_samples,
    compare_summaries,
    within_run_effect,
)
from rooflab.store.comparisons import _changed, compare_runs, refresh_comparisons
from tests.conftest import UNJUDGED, run_rooflab

FAST = {
    "backend": "cpu",
    "timing": {"warmup_s": 0.01, "min_time_s": 0.05, "min_samples": 15},
    "disturbance": UNJUDGED,
}
KERNEL = textwrap.dedent(
    """
    import os
    import time

    from rooflab import Workload

    def nap(params, ctx):
        seconds = float(os.environ["NAP_S"])  # what this run's kernel costs
        flops = int(os.environ.get("NAP_FLOPS", "1"))  # its ledger, as this run's kernel says
        return Workload(run=lambda: time.sleep(seconds), flops=flops, bytes=1)
    """
)


@pytest.mark.parametrize(
    ("factor", "verdict"),
    [
        pytest.param(1.0, "same", id="narrow-around-1"),
        pytest.param(1.2, "slower", id="wholly-above-the-effect"),
        pytest.param(1 / 1.2, "faster", id="wholly-below-the-effect"),
        pytest.param(1.02, "same", id="significant-under-the-effect"),
        # on one side of 1, straddling the effect: not placed beyond it, and not inconclusive
        pytest.param(1.05, "same", id="straddling-the-effect-above"),
        pytest.param(1 / 1.05, "same", id="straddling-the-effect-below"),
    ],
)
def test_the_verdict_needs_the_whole_interval_beyond_the_minimum_effect(factor, verdict):
    rng = np.random.default_rng(7)  # lognormal noise of 3 %, as a quiet machine's samples
    base = rng.lognormal(np.log(1e-3), 0.03, 400)
    cand = rng.lognormal(np.log(1e-3 * factor), 0.03, 400)
    compared = compare_samples(base, cand)
    assert compared.verdict == verdict and compared.method == "samples"
    assert compared.note is None  # only an interval holding no change and the effect has one
    assert compared.ci_low <= compared.ratio <= compared.ci_high
    assert compared.ratio == pytest.approx(factor, rel=0.02)
    if factor == 1.02:  # significant, yet under the 5 % minimum effect
        assert compared.p_value < 0.05
    if factor in (1.05, 1 / 1.05):  # the case: the interval excludes 1 and holds the effect
        assert not compared.ci_low <= 1 <= compared.ci_high
        edges = (1 + compared.effect, 1 / (1 + compared.effect))
        assert any(compared.ci_low < edge < compared.ci_high for edge in edges)


def _two_modes(rng, fast: int, slow: int) -> np.ndarray:
    """A cold point's calls in two modes, 0.3 and 0.6 ms: `fast` and `slow` of them."""
    return np.concatenate(
        [rng.lognormal(np.log(0.3e-3), 0.03, fast), rng.lognormal(np.log(0.6e-3), 0.03, slow)]
    )


def test_an_interval_holding_both_no_change_and_the_effect_is_inconclusive():
    """Issue 44: a cold point read `same` at a ratio of 1.59, interval 0.99-2.04. Here 15 calls a
    side, the candidate's more often in the slow mode: the interval holds both 1 and 1.59, so
    the samples cannot tell whether it changed."""
    rng = np.random.default_rng(0)
    wide = compare_samples(_two_modes(rng, 9, 6), _two_modes(rng, 6, 9))
    assert wide.ci_low < 1 < 1.59 < wide.ci_high and wide.effect == 0.05
    assert wide.verdict == "inconclusive"
    assert wide.note == (
        f"interval {wide.ci_low:.4g}-{wide.ci_high:.4g} holds both no change (1) and the effect "
        "(1.05): the samples cannot tell whether it changed"
    )


def test_too_few_samples_or_only_summaries():
    assert compare_samples([1.0, 1.1], [1.0, 1.1, 1.2]).verdict == "incomparable"
    assert compare_summaries((0.9, 1.0, 1.1), (1.3, 1.4, 1.5)).verdict == "slower"
    # beyond 5 % but inside the 20 % IQR of the noisier run: same
    assert compare_summaries((0.9, 1.0, 1.1), (1.0, 1.1, 1.3)).verdict == "same"
    assert compare_summaries((0.9, 1.0, 1.1), (0.5, 0.6, 0.7)).method == "summary"


def test_what_changed_between_two_runs_is_named():
    run = {"host": "a", "driver_version": "550", "git_commit": "1234567890ab", "git_dirty": False}
    run["library_versions"] = json.dumps({"numpy": "2.0", "python": "3.12"})
    other = {**run, "driver_version": "560", "git_dirty": True}
    other["library_versions"] = json.dumps({"numpy": "2.1", "python": "3.13"})
    rows = ({"disturbed": False}, {"disturbed": True})
    said = _changed(run, other, *rows, clocks=([2400, 2450], [1900, 1950]))
    assert said == [
        "driver 550 → 560",
        "numpy 2.0 → 2.1",
        "commit 123456789 → 123456789+dirty",
        "clock 2400–2450 → 1900–1950 MHz",
        "disturbed False → True",
    ]
    assert _changed(run, run, rows[0], rows[0], clocks=([2400], [2410])) == []


def _measured_store(folder, naps, flops=None):
    """The nap kernel run once per entry of `naps` (its seconds; `flops` its ledger, 1 by
    default), ingested after each."""
    (folder / "naps.py").write_text(KERNEL)
    config = folder / "fast.yaml"
    config.write_text(json.dumps(FAST))
    db = folder / "store.duckdb"
    runs = []  # in the order measured: two runs within one second sort by their random suffix
    for nap, ledger in zip(naps, flops or ["1"] * len(naps), strict=True):
        env = {**os.environ, "PYTHONPATH": str(folder), "NAP_S": nap, "NAP_FLOPS": ledger}
        measured = run_rooflab(
            "measure", "workload", "naps:nap", "--config", config, "--cache-state", "warm",
            "--out", folder / "runs", env=env,
        )  # fmt: skip
        assert measured.returncode == 0, measured.stderr
        (wrote,) = re.findall(r"^rooflab: wrote (.+)$", measured.stderr, re.M)
        runs.append(Path(wrote).name)
        ingested = run_rooflab("store", "ingest", "--db", db, "--results", folder / "runs")
        assert ingested.returncode == 0, ingested.stderr
    return {"db": db, "runs": runs}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Four runs: 2 ms three times (the key's run-to-run spread is known), then 3 ms."""
    return _measured_store(tmp_path_factory.mktemp("compare"), ("0.002",) * 3 + ("0.003",))


@pytest.fixture(scope="module")
def young(store, tmp_path_factory):
    """Two runs, 2 ms then 3 ms (the store's first and last, in a store of their own): no
    run-to-run spread known yet."""
    folder = tmp_path_factory.mktemp("young")
    for run in (store["runs"][0], store["runs"][-1]):
        shutil.copytree(store["db"].parent / "runs" / run, folder / "runs" / run)
    db = folder / "store.duckdb"
    ingested = run_rooflab("store", "ingest", "--db", db, "--results", folder / "runs")
    assert ingested.returncode == 0, ingested.stderr
    return {"db": db}


def _compare(store, *args):
    result = run_rooflab("compare", "--db", store["db"], "--format", "json", *args)
    return result, json.loads(result.stdout) if result.stdout.strip() else []


def test_the_newest_run_against_the_one_before_is_slower_and_fails_the_ci(store):
    result, (pair,) = _compare(store, "--fail-on", "regression")
    assert result.returncode == 1
    assert "regression: nap/fp32/default warm slower" in result.stderr
    assert pair["key"] == "nap/fp32/default warm" and pair["verdict"] == "slower"
    assert pair["provisional"] is False  # three earlier runs: the run-to-run spread is known
    assert (pair["baseline_run_id"], pair["candidate_run_id"]) == tuple(store["runs"][2:])
    assert pair["ratio"] == pytest.approx(1.5, rel=0.15) and pair["ci_low"] > 1.05
    assert pair["baseline_s"] == pytest.approx(0.002, rel=0.3)
    for key in ("candidate_s", "ci_high", "conditions_changed", "method"):
        assert key in pair


def test_without_a_history_a_slower_run_is_inconclusive_exit_3_and_fails_any_slower(young):
    result, (pair,) = _compare(young, "--fail-on", "regression")
    assert (pair["verdict"], pair["samples_verdict"], pair["provisional"]) == (
        "inconclusive",
        "slower",
        True,
    )
    assert result.returncode == 3  # neither "no regression" (0) nor "regression confirmed" (1)
    assert (
        "inconclusive: nap/fp32/default warm: slower by its samples, but provisional: fewer "
        "than 3 earlier runs give no run-to-run spread"
    ) in result.stderr
    assert "0 slower" in result.stderr and "1 inconclusive" in result.stderr
    assert "regression:" not in result.stderr and "(exit 3)" in result.stderr
    strict, _ = _compare(young, "--fail-on", "any-slower")
    assert strict.returncode == 1
    assert "regression: nap/fp32/default warm slower" in strict.stderr
    assert _compare(young)[0].returncode == 0  # without --fail-on, only the verdicts are said
    with duckdb.connect(str(young["db"]), read_only=True) as con:
        (says,) = con.execute("SELECT says FROM comparisons").fetchone()
    # the verdict, then what changed between the runs where anything did (here: the CPU clock)
    verdict = says.split("; changed:")[0]
    assert verdict.startswith("inconclusive (slower by its samples: provisional: fewer than 3")
    assert ") (1." in verdict


def test_identical_runs_are_the_same_and_pass(store):
    first, second, *_ = store["runs"]
    result, (pair,) = _compare(
        store, "--baseline", first, "--candidate", second, "--fail-on", "any-slower"
    )
    assert result.returncode == 0 and pair["verdict"] == "same"


def test_the_views_keep_the_history_and_the_newest_comparison(store):
    with duckdb.connect(str(store["db"]), read_only=True) as con:
        history = con.execute(
            "SELECT position, run_id, value FROM history WHERE key = 'nap/fp32/default warm' "
            "ORDER BY position"
        ).fetchall()
        (says,) = con.execute("SELECT says FROM comparisons").fetchone()
    assert [(p, r) for p, r, _ in history] == list(enumerate(store["runs"], start=1))
    assert says.startswith("slower (1.") and "provisional" not in says


def test_prune_keeps_summaries_and_compare_falls_back_to_them(store, tmp_path):
    db = tmp_path / "pruned.duckdb"
    db.write_bytes(store["db"].read_bytes())
    pruned = run_rooflab("store", "prune", "--db", db, "--keep-runs", "2")
    assert pruned.returncode == 0, pruned.stderr
    assert "deleted" in pruned.stdout and "of 2 run(s)" in pruned.stdout
    with duckdb.connect(str(db), read_only=True) as con:
        kept = con.execute("SELECT DISTINCT run_id FROM samples").fetchall()
        # the two measured last (run ids of one second sort by their random suffix)
        assert sorted(r for (r,) in kept) == sorted(store["runs"][2:])
        assert con.execute("SELECT count(*) FROM history").fetchone() == (4,)
        assert con.execute("SELECT verdict FROM comparisons").fetchone() == ("slower",)
    _, (pair,) = _compare({"db": db}, "--baseline", store["runs"][0])
    assert (pair["method"], pair["verdict"], pair["ci_low"]) == ("summary", "slower", None)
    refused = run_rooflab("store", "prune", "--db", db, "--keep-runs", "1")
    assert refused.returncode == 2 and "--keep-runs must be an integer >= 2" in refused.stderr


def test_a_run_that_is_not_in_the_store_is_one_clear_error(store):
    result, _ = _compare(store, "--baseline", "20990101T000000Z-nothere")
    assert result.returncode == 2
    assert "--baseline 20990101T000000Z-nothere: no such run in" in result.stderr


def test_a_key_whose_runs_differ_needs_more_than_the_minimum_effect():
    rng = np.random.default_rng(11)
    base = rng.lognormal(np.log(1e-3), 0.01, 300)
    cand = rng.lognormal(np.log(1.1e-3), 0.01, 300)  # 10 % slower, tight samples
    assert compare_samples(base, cand).verdict == "slower"
    steady = [1e-3, 1.01e-3, 0.99e-3, 1e-3]  # earlier runs within 1 %: 10 % is beyond
    assert compare_samples(base, cand, history=steady).verdict == "slower"
    swinging = [1e-3, 1.2e-3, 0.85e-3, 1.1e-3]  # earlier runs 15 % apart: 10 % is not
    judged = compare_samples(base, cand, history=swinging)
    assert judged.verdict == "same" and judged.effect > 0.5
    young = compare_samples(base, cand, history=swinging[:2])  # too few runs: provisional
    assert (young.effect, young.provisional) == (0.05, True)
    assert not compare_samples(base, cand, history=steady).provisional
    assert compare_summaries((0.9, 1.0, 1.1), (1.3, 1.4, 1.5)).provisional
    assert not compare_summaries((0.9, 1.0, 1.1), (1.3, 1.4, 1.5), history=steady).provisional


def test_keys_of_two_runs_that_spread_widely_raise_the_effect():
    rng = np.random.default_rng(3)
    wide = np.exp(rng.normal(0, 0.08, 40))  # identical reruns on a busy host: ±8 % per key
    effect = across_keys_effect(wide)
    assert 0.15 < effect < 0.35
    uniform = np.exp(rng.normal(np.log(1.2), 0.005, 40))  # the whole run 20 % slower
    assert across_keys_effect(uniform) < 0.02  # a run-wide move keeps its keys together
    assert across_keys_effect(wide[:7]) is None  # too few keys to say


def test_an_effect_past_100_percent_is_a_valid_one():
    # A wild machine's keys can spread past 2x between identical runs (across_keys_effect); the
    # comparison then asks for more than that, instead of failing the whole ingest.
    rng = np.random.default_rng(3)
    base = rng.uniform(1.0, 1.1, 50)
    twice = 2.0 * base
    assert compare_samples(base, twice, min_effect=1.36).verdict == "same"
    assert compare_samples(base, 3 * twice, min_effect=1.36).verdict == "slower"
    with pytest.raises(ValueError, match="min_effect"):
        compare_samples(base, twice, min_effect=-0.1)


def test_the_rounds_of_each_run_set_the_effect_until_the_history_does():
    rng = np.random.default_rng(5)
    base = rng.lognormal(np.log(1e-3), 0.01, 200)
    cand = rng.lognormal(np.log(1.1e-3), 0.01, 200)  # 10 % slower, tight samples
    steady = ([1.00e-3, 1.004e-3], [1.10e-3, 1.098e-3])  # each run's rounds within 0.4 %
    drifting = ([1.0e-3, 1.08e-3], [1.05e-3, 1.14e-3])  # rounds 8 % apart inside each run
    assert within_run_effect(*steady) < 0.05
    assert compare_samples(base, cand, rounds=steady).verdict == "slower"
    judged = compare_samples(base, cand, rounds=drifting)
    assert judged.verdict == "same" and judged.effect == pytest.approx(within_run_effect(*drifting))
    # t(2 dof) x the pooled spread of the log round medians x sqrt(1/2 + 1/2)
    logs = [np.log(side) for side in drifting]
    pooled = np.sqrt(sum(((x - x.mean()) ** 2).sum() for x in logs) / 2)
    assert within_run_effect(*drifting) == pytest.approx(np.expm1(9.9248 * pooled), rel=1e-3)
    assert within_run_effect([1e-3], [1e-3, 1.1e-3]) is None  # one round: nothing to say
    # once the key has a history, its run-to-run spread decides, not the rounds
    history = [1.0e-3, 1.002e-3, 0.999e-3, 1.001e-3]
    assert compare_samples(base, cand, history=history, rounds=drifting).verdict == "slower"


def test_the_store_judges_a_key_by_its_round_medians(store):
    """The nap kernel's runs, two rounds each: the effect of the second run against the first is
    what their round medians in `samples` give (one earlier run: no history yet)."""
    first, second, *_ = store["runs"]
    with duckdb.connect(str(store["db"]), read_only=True) as con:
        medians = dict(
            con.execute(
                "SELECT run_id, list(m ORDER BY round) FROM (SELECT run_id, round, "
                "median(seconds) AS m FROM samples WHERE NOT disturbed GROUP BY ALL) GROUP BY ALL"
            ).fetchall()
        )
        (pair,) = compare_runs(con, first, second)
    assert len(medians[first]) == len(medians[second]) == 2
    expected = max(0.05, within_run_effect(medians[first], medians[second]))
    assert pair["effect"] == pytest.approx(expected, rel=1e-6) and pair["provisional"]


def test_two_kernels_under_one_name_are_incomparable_and_the_change_is_named(tmp_path):
    """The same workload name and case, but the second run's kernel declares 1000x the work: not a
    3943x regression blamed on disturbance, but incomparable, naming the ledger that changed."""
    store = _measured_store(tmp_path, ("0.002", "0.002"), flops=("1", "1000"))
    result, (pair,) = _compare(store, "--fail-on", "regression")
    assert result.returncode == 0, result.stderr
    assert pair["verdict"] == "incomparable" and pair["ratio"] is None
    assert (
        "work entry naps:nap, dtype fp32, 1 FLOP, 1 B → entry naps:nap, dtype fp32, 1000 FLOP"
        in (pair["conditions_changed"])
    )


def test_a_disturbed_side_or_a_busy_machine_is_inconclusive_and_a_changed_accuracy_is_said(
    store, tmp_path
):
    """The store's two first runs (2 ms both: `same`), with the candidate marked disturbed, then
    the baseline's machine busy, then the candidate's check 500x less accurate."""
    db = tmp_path / "copy.duckdb"
    shutil.copy(store["db"], db)
    first, second, *_ = store["runs"]
    with duckdb.connect(str(db)) as con:
        (pair,) = compare_runs(con, first, second)
        assert (pair["verdict"], pair["accuracy_changed"]) == ("same", None)
        con.execute("UPDATE timed_points SET disturbed = true WHERE run_id = ?", [second])
        (pair,) = compare_runs(con, first, second)
        assert (pair["verdict"], pair["samples_verdict"]) == ("inconclusive", "same")
        assert pair["note"] == "candidate disturbed"
        con.execute("UPDATE timed_points SET disturbed = false WHERE run_id = ?", [second])
        con.execute("UPDATE runs SET busy_warning = 'busy' WHERE run_id = ?", [first])
        (pair,) = compare_runs(con, first, second)
        assert pair["note"] == "machine busy before the baseline"
        con.execute("UPDATE runs SET busy_warning = NULL WHERE run_id = ?", [first])
        for run_id, error in ((first, 1e-7), (second, 5e-5)):
            con.execute(
                "INSERT INTO correctness BY NAME SELECT ? AS run_id, 'nap/fp32/default' AS "
                "config_id, 'max_relative_error' AS metric, ? AS error, 1e-4 AS tolerance, "
                "true AS passed",
                [run_id, error],
            )
        (pair,) = compare_runs(con, first, second)
    assert pair["verdict"] == "same"  # as fast, but no longer as accurate: said beside it
    assert pair["accuracy_changed"] == "max_relative_error 1e-07 → 5e-05 (tolerance 0.0001)"
    result = run_rooflab(
        "compare", "--db", db, "--baseline", first, "--candidate", second, "--fail-on", "regression"
    )
    assert result.returncode == 0
    assert "accuracy changed: nap/fp32/default warm (same): max_relative_error" in result.stderr


def test_a_wide_interval_is_inconclusive_exits_3_and_says_why(store, tmp_path):
    """Issue 44: the store's last pair (2 ms then 3 ms, the key's spread known: `slower`) with the
    candidate's calls spread over 1, 2 and 6 ms: its interval holds both no change and the
    effect. The samples cannot tell, so `samples_verdict` is inconclusive too; --fail-on exits 3
    (not 1: nothing is confirmed slower; not 0), and the note, stderr and `says` say why."""
    db = tmp_path / "wide.duckdb"
    shutil.copy(store["db"], db)
    with duckdb.connect(str(db)) as con:
        con.execute(
            "UPDATE samples SET seconds = CASE sample_idx % 5 WHEN 0 THEN 0.001 WHEN 1 THEN 0.001 "
            "WHEN 2 THEN 0.002 ELSE 0.006 END WHERE run_id = ?",
            [store["runs"][-1]],
        )
        refresh_comparisons(con)
        (says,) = con.execute("SELECT says FROM comparisons").fetchone()
    result, (pair,) = _compare({"db": db}, "--fail-on", "regression")
    assert result.returncode == 3, result.stderr
    assert (pair["verdict"], pair["samples_verdict"], pair["provisional"]) == (
        "inconclusive",
        "inconclusive",
        False,
    )
    assert pair["ci_low"] < 1 < 1 + pair["effect"] <= pair["ci_high"]
    assert pair["note"].endswith("the samples cannot tell whether it changed")
    assert f"inconclusive: nap/fp32/default warm: {pair['note']}\n" in result.stderr
    assert "0 slower" in result.stderr and "1 inconclusive" in result.stderr
    assert "regression:" not in result.stderr and "(exit 3)" in result.stderr
    assert says.startswith(f"inconclusive ({pair['note']})")
    assert _compare({"db": db}, "--fail-on", "any-slower")[0].returncode == 3
    assert _compare({"db": db})[0].returncode == 0


def test_the_table_fits_100_columns_and_gives_both_ratios(store, young):
    """Issue 44: the table is at most 100 characters wide (details in --format json), with the
    ratio of the medians beside the Hodges-Lehmann ratio; the summary says what provisional is."""
    table = run_rooflab("compare", "--db", store["db"])
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "key", "before_s", "(ms)", "after_s", "(ms)", "medians", "ratio", "interval", "verdict",
    ]  # fmt: skip
    assert max(len(line) for line in lines) <= 100, table.stdout
    _, (pair,) = _compare(store)
    assert pair["median_ratio"] == pytest.approx(pair["candidate_s"] / pair["baseline_s"])
    cells = lines[1].split()
    assert cells[4] == f"{pair['median_ratio']:.3g}" and cells[5] == f"{pair['ratio']:.3g}"
    changed = "!" if pair["conditions_changed"] or pair["accuracy_changed"] else ""
    assert cells[-1] == pair["verdict"] + ("*" if pair["provisional"] else "") + changed
    said = run_rooflab("compare", "--db", young["db"]).stderr
    assert "1 of 1 verdicts provisional: their key has fewer than 3 earlier runs" in said
