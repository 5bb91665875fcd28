"""Every timed point without a Roofline point is a row of `unplaced_points` (with its reason),
listed in the report and counted on the terminal when the campaign ends; a point above its roof
(a ledger 100x too large) is warned of in the roofline step's log and on the terminal.

A real store: run folders as the measuring jobs keep them, the roofline step (analyse_results,
write_analysis) and ingest as the workflow runs them. Machine m-alpha has ceilings without an
fp32 roof under its fp32 sweep (no_compute_ceiling); m-beta has no ceilings run at all and 15
sweeps (60 timed points: more than the report lists one by one); a third machine's sweep
(benchmarks/many_runs.py) is placed, but one of its cases failed its check after its timing and
one has a ledger 100x too large.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rooflab.report import build_report
from rooflab.report.summary import FURTHEST_SHOWN, UNPLACED_SHOWN
from rooflab.roofline import analyse_results, roof_faults
from rooflab.store import query
from rooflab.vocabulary import DIAGNOSIS_CAUSES
from rooflab.workflow import campaign_summary, write_receipt
from tests.report_pages import store_of, tables_of
from tests.store_runs import T0, ceilings_run, gemm_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from many_runs import MACHINE_ID, write_many_runs

BETA_SWEEPS = 15
# m-alpha's 2 timed shapes and m-beta's 15 sweeps of those, the failed check: in two cache states
UNPLACED = 2 * (2 + 2 * BETA_SWEEPS) + 2


def _edit(run_dir: Path, table: str, column: str, where: str, change) -> None:
    """Rewrite one column of a kept run's table where config_id is `where`."""
    path = run_dir / f"{table}.parquet"
    rows = pq.read_table(path).to_pylist()
    for row in rows:
        if row["config_id"] == where:
            row[column] = change(row[column])
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    root = tmp_path_factory.mktemp("unplaced")
    results = root / "results"
    ceilings_run(results, machine_id="m-alpha")  # fp64_fma only: no roof for fp32
    runs = [gemm_run(results, machine_id="m-alpha", started_at=T0 + timedelta(hours=1))]
    runs += [
        gemm_run(
            results, machine_id="m-beta", sweep=f"s{i:02d}", started_at=T0 + timedelta(hours=2 + i)
        )
        for i in range(BETA_SWEEPS)
    ]
    write_many_runs(results, n_runs=1, n_sweeps=1)
    (placed,) = sorted((results / "sweeps" / "sweep000" / "runs").iterdir())
    runs.append(placed)
    failing, too_large = "sweep000/fp64/nn/m1_n256_k256", "sweep000/fp64/nn/m32_n256_k256"
    _edit(placed, "correctness", "passed", failing, lambda _: False)
    for column in ("flops", "achieved_flops_per_s"):  # a ledger 100x too large, as timed
        _edit(placed, "timed_points", column, too_large, lambda value: 100 * value)

    analysis = analyse_results(results)
    db = store_of(results, analysis)
    report = build_report(db, root / "report", images=False)
    receipts = []
    for run_dir in runs:
        receipt = run_dir.parent.parent / f"{run_dir.name}.json"
        write_receipt(receipt, {"run_id": run_dir.name, "run_dir": str(run_dir), "kind": "gemm"})
        receipts.append(str(receipt))
    return {
        "results": results,
        "db": db,
        "analysis": analysis,
        "report": report,
        "receipts": receipts,
        "failing": failing,
        "too_large": too_large,
        "root": root,
    }


def _summary(campaign, receipts: list[str]) -> list[str]:
    """The lines the campaign's end prints for `receipts` (the ingest's receipt missing)."""
    missing = str(campaign["root"] / "missing-ingest.json")
    roofline = str(campaign["results"] / "roofline")
    return campaign_summary(str(campaign["report"].index), missing, receipts, roofline=roofline)


def test_every_unplaced_point_is_stored_with_its_reason(campaign):
    rows = query(
        campaign["db"],
        "SELECT u.*, r.machine_id AS run_machine FROM unplaced_points AS u JOIN runs AS r "
        "USING (run_id)",
    ).to_pylist()
    by_reason: dict[str, set] = {}
    for row in rows:
        assert row["machine_id"] == row["run_machine"] and row["why"] and row["sweep"]
        by_reason.setdefault(row["reason"], set()).add((row["machine_id"], row["config_id"]))
    assert {reason: len(keys) for reason, keys in by_reason.items()} == {
        "no_compute_ceiling": 2,
        "no_ceilings_run": 2 * BETA_SWEEPS,
        "failed_check": 1,
    }
    assert len(rows) == UNPLACED
    assert by_reason["failed_check"] == {(MACHINE_ID, campaign["failing"])}
    fp32 = [r["why"] for r in rows if r["reason"] == "no_compute_ceiling"]
    assert set(fp32) == {"no fp32_fma compute ceiling measured"}
    # the roofline step's file is what the store holds
    stored = pq.read_table(campaign["results"] / "roofline" / "unplaced_points.parquet")
    assert stored.num_rows == len(rows)
    # and every timed point is either placed or unplaced, never silently lost
    timed = query(campaign["db"], "SELECT count(*) AS n FROM gemm_points").to_pylist()[0]["n"]
    placed = query(
        campaign["db"], "SELECT count(*) AS n FROM roofline_points WHERE q_source = 'model'"
    ).to_pylist()[0]["n"]
    assert placed + len(rows) == timed


def test_the_report_lists_each_unplaced_point_with_why_and_bounds_the_list(campaign):
    page = campaign["report"].index.read_text()
    tables = tables_of(page, "unplaced")
    assert len(tables) == 3  # one per machine with unplaced points
    by_machine = {}
    for header, *rows in tables:
        assert header == ["sweep", "configuration", "cache state", "reason", "why", "run"]
        by_machine[len(rows)] = rows
    # m-beta: 60 points, the first UNPLACED_SHOWN listed, the count and the query for all
    assert set(by_machine) == {4, 2, UNPLACED_SHOWN}
    assert "<b>60</b> timed point(s)" in page and "<b>60</b> no_ceilings_run" in page
    assert f"The first {UNPLACED_SHOWN} of them" in page
    assert "SELECT * FROM latest_unplaced_points WHERE machine_id = &#x27;m-beta&#x27;" in page
    failed = [r for r in by_machine[2] if r[3] == "failed_check"]
    assert {r[1] for r in failed} == {campaign["failing"]}
    assert {r[4] for r in failed} == {"failed its check after its timing"}
    assert {r[3] for r in by_machine[4]} == {"no_compute_ceiling"}


def test_a_newer_run_that_places_a_point_takes_it_off_the_list(campaign):
    view = query(campaign["db"], "SELECT * FROM latest_unplaced_points").to_pylist()
    assert len(view) == UNPLACED  # each the newest timing of its key
    assert {r["reason"] for r in view} == {"no_compute_ceiling", "no_ceilings_run", "failed_check"}


def test_a_ledger_100x_too_large_is_warned_of_in_the_log_and_on_the_terminal(campaign):
    model = campaign["analysis"].points.model
    above = [p for p in model if p["config_id"] == campaign["too_large"]]
    assert above and all(p["efficiency"] > 1.05 and p["roof_beaten"] for p in above)
    faults = roof_faults(model)
    assert len(faults) == 1 and campaign["too_large"] in faults[0]
    assert faults[0].startswith(f"roof beaten on {MACHINE_ID}: 2 clean point(s) above fp64_fma")
    lines = _summary(campaign, campaign["receipts"])
    assert (
        f"rooflab: {UNPLACED} timed point(s) have no Roofline point (2 failed_check, "
        f"{4 * BETA_SWEEPS} no_ceilings_run, 4 no_compute_ceiling; "
        '`rooflab query "SELECT * FROM latest_unplaced_points"` says why)'
    ) in lines
    (beaten,) = [line for line in lines if "above their roof" in line]
    top = max(p["efficiency"] for p in above)
    assert beaten.startswith(f"rooflab: 2 Roofline point(s) above their roof (up to {top:.3g}x")
    assert "efficiency > 1.05" in beaten


def test_the_summary_counts_only_the_campaigns_runs(campaign):
    alpha = [r for r in campaign["receipts"] if "/gemm/decode/" in r]
    lines = _summary(campaign, alpha)
    assert [line for line in lines if "no Roofline point" in line] == [
        'rooflab: 4 timed point(s) have no Roofline point (4 no_compute_ceiling; `rooflab query "'
        'SELECT * FROM latest_unplaced_points"` says why)'
    ]
    assert not [line for line in lines if "above their roof" in line]
    # a campaign without the roofline step's tables says neither
    gone = campaign["root"] / "no-roofline"
    assert campaign_summary("x", "y", campaign["receipts"], roofline=str(gone)) == []


def test_the_report_lists_the_points_furthest_from_their_roofs_with_why(campaign):
    """Issue 43: per machine, the diagnosed points furthest from their roofs (view diagnoses);
    the ledger 100x too large is `above_roof`, and every drawn point's tooltip has its cause."""
    page = campaign["report"].index.read_text()
    tables = tables_of(page, "diagnoses")
    assert tables
    for header, *rows in tables:
        assert header == [
            "point", "kind", "cache state", "level", "efficiency", "cause", "next step", "median",
            "predicted",
        ]  # fmt: skip
        assert 1 <= len(rows) <= FURTHEST_SHOWN
        efficiency = [float(row[4]) for row in rows]
        assert efficiency == sorted(efficiency) and all(row[5] in DIAGNOSIS_CAUSES for row in rows)
    too_large = query(
        campaign["db"], f"SELECT * FROM diagnoses WHERE key = '{campaign['too_large']}'"
    ).to_pylist()
    assert {d["cause"] for d in too_large} == {"above_roof"} and len(too_large) == 2
    drawn = query(campaign["db"], "SELECT config_id, cause, next_step FROM latest_model_points")
    assert drawn.num_rows and all(r["cause"] and r["next_step"] for r in drawn.to_pylist())
    assert "why it sits there (rooflab explain)" in page  # the Roofline's tooltip
