"""The report's history of each measurement (views history, comparisons) and its machines side by
side (report_scopes, ceiling_summary, latest_model_points), from stores of real runs.

Machine A (this one): the quick ceilings run (conftest) and a copy of it whose DRAM ceiling is
half as fast (its samples take twice as long); two real `rooflab measure gemm` runs and a copy of
the second in which one configuration is twice as slow, one twice as fast and one key is marked
disturbed, under a known commit. Machine B ("node-b", test_report's second node): a copy of the
ceilings run ten times slower and of the first GEMM run, one run each. A second store holds A's
first runs only: one run per key, one machine.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import shutil
from pathlib import Path

import pytest

from rooflab.records import read_run
from rooflab.report import build_report
from rooflab.report.history_charts import changes_html
from rooflab.roofline import build_analysis
from rooflab.store import query
from rooflab.units import format_quantity
from tests.conftest import UNJUDGED
from tests.report_pages import (
    NODE_B,
    copy_run,
    layers_of,
    rooflab_ok,
    scale_times,
    spec_rows,
    store_of,
    tables_of,
)

FAST_CONFIG = """\
backend: cpu
timing:
  warmup_s: 0.01
  warmup_min_calls: 1
  min_time_s: 0.02
  # enough samples that a cold tiny GEMM's 2x change clears its interval (3 left it in doubt),
  # in one round: two rounds of a cold tiny GEMM can differ enough that, with no history yet,
  # a 2x change is within what the rounds allow (comparison.within_run_effect)
  min_samples: 20
  max_samples: 40
  rounds: 1
disturbance: <unjudged>
sweeps:
  fast:
    m: [1, 8, 32]
    n: [64]
    k: [64]
    dtypes: [fp64]
    layouts: [nn]
    cache_states: [warm, cold]
""".replace("<unjudged>", json.dumps(UNJUDGED))
KNOWN_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _measure_gemm(root: Path) -> Path:
    runs = root / "results" / "sweeps" / "fast" / "runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    rooflab_ok(
        "measure", "gemm", "--config", "fast.yaml", "--sweep", "fast", "--out", runs, cwd=root
    )
    (new,) = set(runs.iterdir()) - before
    return new


def _store(results: Path) -> Path:
    """The roofline step and ingest, as the workflow runs them."""
    ceilings = sorted((results / "ceilings" / "runs").iterdir())
    sweeps = sorted((results / "sweeps" / "fast" / "runs").iterdir())
    return store_of(results, build_analysis(ceilings, sweeps))


def _undisturbed(tables):
    """Every window of a ceilings run counted: the comparison of its DRAM ceiling between two
    runs then has all of its samples, however busy this machine was when it measured them."""
    for row in tables["samples"]:
        row["disturbed"] = False
    return tables


def _started(run_dir: Path) -> dt.datetime:
    return read_run(run_dir)["runs"].to_pylist()[0]["started_at"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory, quick_ceilings_run):
    root = tmp_path_factory.mktemp("history_report")
    (root / "fast.yaml").write_text(FAST_CONFIG)
    results = root / "results"
    ceilings_dir = results / "ceilings" / "runs"
    _, ceilings_run = quick_ceilings_run
    copy_run(ceilings_run, ceilings_dir, _started(ceilings_run), edit=_undisturbed)
    first = _measure_gemm(root)

    # one run per key, one machine: a store of its own
    one = root / "one" / "results"
    shutil.copytree(results, one)
    one_db = _store(one)
    one_report = build_report(one_db, one.parent / "report", images=False)

    second = _measure_gemm(root)
    points = read_run(second)["timed_points"].to_pylist()
    configs = sorted({row["config_id"] for row in points})
    slower, same, faster = configs[0], configs[1], configs[-1]

    def changed(tables):
        scale_times(tables, 2.0, {slower})
        scale_times(tables, 0.5, {faster})
        for row in tables["timed_points"]:
            if (row["config_id"], row["cache_state"]) == (same, "warm"):
                row["disturbed"] = True

    later = _started(second) + dt.timedelta(hours=1)
    known = {"git_commit": KNOWN_COMMIT, "git_dirty": False}
    sweeps = results / "sweeps" / "fast" / "runs"
    third = copy_run(second, sweeps, later, runs=known, edit=changed)
    ceilings = read_run(ceilings_run)["ceilings"].to_pylist()
    (dram,) = [row["config_id"] for row in ceilings if row["name"] == "DRAM"]

    def slower_dram(tables):
        scale_times(_undisturbed(tables), 2.0, {dram})

    def ten_times_lower(tables):
        scale_times(tables, 10.0, {row["config_id"] for row in ceilings})

    copy_run(
        ceilings_run, ceilings_dir, later + dt.timedelta(hours=1), runs=known, edit=slower_dram
    )
    # node b: one run each, its ceilings ten times lower
    node_b = later + dt.timedelta(days=1)
    copy_run(ceilings_run, ceilings_dir, node_b, runs=NODE_B, edit=ten_times_lower)
    copy_run(first, sweeps, node_b, runs=NODE_B)
    db = _store(results)
    return {
        "db": db,
        "report": build_report(db, root / "report", images=False),
        "one_db": one_db,
        "one_report": one_report,
        "slower": [f"{slower} {state}" for state in ("warm", "cold")],
        "faster": [f"{faster} {state}" for state in ("warm", "cold")],
        "disturbed": f"{same} warm",
        "dram": dram,
        "third": third,
    }


def _machine_a(db: Path) -> str:
    (machine,) = query(db, "SELECT DISTINCT machine_id FROM runs WHERE host <> 'node-b'").column(
        "machine_id"
    )
    return machine.as_py()


def _history_spec(report) -> tuple[str, dict]:
    (name,) = [name for name in report.charts if name.endswith("history")]
    return name, report.specs[name]


def test_history_draws_every_key_with_two_runs_over_its_first_run(stores):
    name, spec = _history_spec(stores["report"])
    assert not name.startswith(NODE_B["host"])  # B has one run per key: no history
    view = query(
        stores["db"],
        "SELECT * FROM history WHERE machine_id = ? ORDER BY kind, key, position",
        params=[_machine_a(stores["db"])],
    ).to_pandas()
    view["runs"] = view.groupby(["kind", "key"]).position.transform("max")
    view = view[view.runs >= 2]
    first = view[view.position == 1].set_index(["kind", "key"]).value
    expected = {
        (r.key, r.position): (r.value / first[(r.kind, r.key)], r.low / first[(r.kind, r.key)])
        for r in view.itertuples()
    }
    drawn = spec_rows(spec, "ratio")
    assert {(r["key"], r["position"]) for r in drawn} == set(expected)
    for row in drawn:
        ratio, low = expected[(row["key"], row["position"])]
        assert row["ratio"] == pytest.approx(ratio) and row["y"] == row["ratio"]
        assert row["x"] == row["position"]
        if math.isnan(low):  # a ceiling none of whose windows were clean: no band
            assert row["ratio_low"] is None
        else:
            assert row["ratio_low"] == pytest.approx(low)
    by_key = {(r["key"], r["position"]): r for r in drawn}
    # the changes made: 2x slower, 2x faster, the DRAM ceiling half as fast
    for key in stores["slower"]:
        assert by_key[(key, 3)]["ratio"] == pytest.approx(2 * by_key[(key, 2)]["ratio"])
    for key in stores["faster"]:
        assert by_key[(key, 3)]["ratio"] == pytest.approx(0.5 * by_key[(key, 2)]["ratio"])
    (dram,) = {key for key, _ in by_key if key.startswith("bandwidth/DRAM/")}
    assert by_key[(dram, 2)]["ratio"] == pytest.approx(0.5)
    assert {r["panel"] for r in drawn} == {
        "fast: median time",
        "bandwidth ceilings: rate",
        "compute ceilings: rate",
    }
    # one panel per sweep and kind of ceiling, its y axis a log ratio that says which way is worse
    y_titles = {u["encoding"]["y"].get("title") for u in layers_of(spec) if "y" in u["encoding"]}
    assert {"time / first run's (above 1: slower)", "rate / first run's (above 1: faster)"} <= (
        y_titles
    )
    assert all(
        u["encoding"]["y"]["scale"]["type"] == "log"
        for u in layers_of(spec)
        if u["encoding"]["y"].get("field") == "y"
    )


def test_history_tooltips_give_the_commit_and_date_and_disturbed_runs_are_ringed(stores):
    _, spec = _history_spec(stores["report"])
    drawn = spec_rows(spec, "ratio")
    runs = query(stores["db"], "SELECT run_id, git_commit, git_dirty, started_at FROM runs")
    runs = {r["run_id"]: r for r in runs.to_pylist()}
    for row in drawn:
        run = runs[row["run_id"]]
        dirty = " (uncommitted changes)" if run["git_dirty"] else ""
        assert row["commit"] == run["git_commit"][:7] + dirty
        assert row["started"] == f"{run['started_at'].astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
    third = [row for row in drawn if row["run_id"] == stores["third"]]
    assert third and {row["commit"] for row in third} == {"0123456"}
    tooltips = [
        t["field"]
        for u in layers_of(spec)
        for t in u["encoding"].get("tooltip", [])
        if u["mark"].get("filled")
    ]
    assert {"commit", "started", "value_text", "band_text", "key"} <= set(tooltips)
    # the ring layer draws exactly the disturbed runs the view holds
    view = query(
        stores["db"],
        "SELECT key, position FROM history WHERE machine_id = ? AND disturbed",
        params=[_machine_a(stores["db"])],
    ).to_pylist()
    drawn_keys = {(r["key"], r["position"]) for r in drawn}
    disturbed = {(r["key"], r["position"]) for r in view} & drawn_keys
    assert (stores["disturbed"], 3) in disturbed
    assert {(r["key"], r["position"]) for r in drawn if r["disturbed"]} == disturbed
    rings = [u for u in layers_of(spec) if {"filter": "datum.disturbed"} in u.get("transform", [])]
    assert rings and all(ring["encoding"]["stroke"]["field"] == "flag" for ring in rings)


def test_the_keys_that_moved_are_listed_under_the_history(stores):
    report = stores["report"]
    name, _ = _history_spec(report)
    page = report.index.read_text()
    section = page.split(f"id='chart-{name}'", 1)[1].split("</section>", 1)[0]
    (table,) = tables_of(section, "comparisons")
    header, *rows = table
    assert header[:3] == ["measurement", "of", "verdict"]
    listed = {row[0]: row[2] for row in rows}
    view = query(
        stores["db"],
        "SELECT key, verdict, samples_verdict, ratio, provisional FROM comparisons "
        "WHERE machine_id = ?",
        params=[_machine_a(stores["db"])],
    ).to_pylist()
    # three runs: every key has two earlier runs, too few for its run-to-run spread
    assert {r["provisional"] for r in view} == {True}
    assert "of the changes are provisional" in section
    listed = {key: verdict.removesuffix(" (provisional)") for key, verdict in listed.items()}
    # a provisional slower is inconclusive; the samples' verdict is what moved
    moved = {r["key"]: r["samples_verdict"] for r in view}
    assert listed == {key: v for key, v in moved.items() if v in ("slower", "faster")}
    assert {r["verdict"] for r in view if r["samples_verdict"] == "slower"} == {"inconclusive"}
    assert all(row[2].endswith(" (provisional)") for row in rows)
    dram_key = next(key for key in listed if key.startswith("bandwidth/DRAM/"))
    assert {key: listed[key] for key in [*stores["slower"], *stores["faster"], dram_key]} == {
        **dict.fromkeys(stores["slower"], "slower"),
        **dict.fromkeys(stores["faster"], "faster"),
        dram_key: "slower",
    }
    # slower first, the ratio as the view has it
    verdicts = [row[2] for row in rows]
    assert verdicts == sorted(verdicts, key=lambda v: not v.startswith("slower"))
    ratios = {r["key"]: r["ratio"] for r in view}
    assert all(row[3] == f"{ratios[row[0]]:.3g}×" for row in rows)
    counts = {v: sum(r["verdict"] == v for r in view) for v in ("slower", "faster", "same")}
    assert f"{counts['slower']} slower, {counts['faster']} faster, {counts['same']} same" in section


def test_changes_say_when_nothing_moved_or_nothing_was_compared():
    import pandas as pd

    assert "No comparison yet" in changes_html(pd.DataFrame(columns=["key", "verdict"]))
    same = pd.DataFrame(
        {"key": ["a warm", "b cold"], "verdict": ["same", "incomparable"], "provisional": False}
    )
    said = changes_html(same)
    assert "No measurement got slower or faster" in said and "<table" not in said
    assert "0 slower, 0 faster, 1 same, 1 incomparable" in said


def test_changes_count_the_keys_whose_samples_cannot_tell():
    """Issue 44: an interval that holds both no change and the effect is inconclusive by
    the samples themselves; the report counts those and says what that means."""
    import pandas as pd

    unsure = pd.DataFrame(
        {
            "key": ["a warm", "b cold"],
            "verdict": ["inconclusive", "same"],
            "samples_verdict": ["inconclusive", "same"],
            "provisional": False,
        }
    )
    said = changes_html(unsure)
    assert "0 slower, 0 faster, 1 same, 0 incomparable, 1 inconclusive" in said
    assert "1 inconclusive by their samples: the interval of the ratio holds both" in said
    assert "No measurement got slower or faster" in said


def test_machines_side_by_side_share_their_axes_and_list_ceilings_by_machine(stores):
    report, db = stores["report"], stores["db"]
    assert report.charts[0] == "machines"
    page = report.index.read_text()
    assert page.index("id='chart-machines'") < page.index("<section class='machine'")
    spec = report.specs["machines"]
    assert spec["resolve"]["scale"] == {"x": "shared", "y": "shared", "color": "shared"}
    # in the page's order of machines: report_scopes' position
    scopes = query(
        db, "SELECT machine_id, host, device_name FROM report_scopes ORDER BY position"
    ).to_pylist()
    titles = {s["machine_id"]: f"{s['host']} (cpu, {s['device_name']})" for s in scopes}
    assert [panel["title"]["text"] for panel in spec["concat"]] == [
        titles[s["machine_id"]] for s in scopes
    ]
    units = layers_of(spec)
    domains = {axis: {str(u["encoding"][axis]["scale"]["domain"]) for u in units} for axis in "xy"}
    assert len(domains["x"]) == 1 and len(domains["y"]) == 1  # every panel on the same axes
    lines, points = spec_rows(spec, "roof"), spec_rows(spec, "config_id")
    (x_lo, x_hi), (y_lo, y_hi) = (units[0]["encoding"][a]["scale"]["domain"] for a in "xy")
    assert all(x_lo <= r["x"] <= x_hi and y_lo <= r["y"] <= y_hi for r in lines + points)
    summary = query(db, "SELECT machine_id, kind, name, kernel, value FROM ceiling_summary")
    summary = summary.to_pylist()
    for machine_id, title in titles.items():
        roofs = {r["name"]: r for r in summary if r["machine_id"] == machine_id}
        drawn = [r for r in lines if r["machine"] == title]
        # a bandwidth roof is y = B·x, a compute roof y = peak: both ends say the ceiling
        assert {r["roof"] for r in drawn} == set(roofs)
        for row in drawn:
            roof = roofs[row["roof"]]
            value = row["y"] / row["x"] if roof["kind"] == "bandwidth" else row["y"]
            assert value == pytest.approx(roof["value"])
        latest = query(
            db,
            "SELECT config_id, cache_state, achieved_flops_per_s FROM latest_model_points "
            "WHERE machine_id = ?",
            params=[machine_id],
        ).to_pylist()
        achieved = {(r["config_id"], r["cache_state"]): r["achieved_flops_per_s"] for r in latest}
        assert latest and {
            (r["config_id"], r["cache_state"]): r["y"] for r in points if r["machine"] == title
        } == pytest.approx(achieved)
    dram = {r["machine_id"]: r["value"] for r in summary if r["name"] == "DRAM"}
    b = NODE_B["machine_id"]
    (a,) = set(dram) - {b}
    assert dram[b] != pytest.approx(dram[a])  # two machines, two roofs: not one drawn twice

    (table,) = tables_of(page, "machine-ceilings")
    header, *rows = table
    order = [s["machine_id"] for s in scopes]
    assert header == ["ceiling", *(titles[m] for m in order)]
    kinds = {"bandwidth": "byte_rate", "compute": "flop_rate"}
    expected = {f"{r['kind']} {r['name']}": {} for r in summary}
    for r in summary:
        expected[f"{r['kind']} {r['name']}"][r["machine_id"]] = (
            f"{format_quantity(r['value'], kinds[r['kind']], 4)} ({r['kernel']})"
        )
    assert {row[0] for row in rows} == set(expected)
    for row in rows:
        assert row[1:] == [expected[row[0]].get(m, "–") for m in order]


def test_one_machine_and_one_run_per_key_get_neither_chart(stores):
    report, db = stores["one_report"], stores["one_db"]
    positions = query(db, "SELECT max(position) AS most FROM history").to_pylist()
    assert positions == [{"most": 1}]  # the view has its rows: there is no second run to draw
    assert "machines" not in report.charts
    assert not [name for name in report.charts if name.endswith("history")]
    assert "Machines side by side" not in report.index.read_text()
    assert "roofline" in report.charts
