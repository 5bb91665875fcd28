"""Stage overlap, measured (issue 29, part 1): a measurable `stages` scenario sized from the
machine's ceilings, each stage timed alone on its own core, then serial and overlapped, beside
the critical-path and aggregate bounds; a schedule faster than its bound is flagged. Real runs on
this machine's CPU with short timings: the paths and the bookkeeping are checked here, not the
figures (those are benchmarks' business)."""

from __future__ import annotations

import json
import math
import os
import re

import duckdb
import pytest

from rooflab.backends.cpu_kernels import stream_elements
from rooflab.backends.selection import select_backend
from rooflab.config import ConfigError, validate_config
from rooflab.experiments.stage_overlap import StageOverlapError, run_stage_overlap
from rooflab.experiments.timing import TimingSettings
from rooflab.model import ModelError, sized_stage, stage_bounds
from rooflab.records import to_table, write_run
from tests.conftest import UNJUDGED, run_rooflab

SCENARIO = {
    "measurable": True,
    "compute_path": "fp64_fma",
    "memory_level": "DRAM",
    "stages": [
        {"name": "A", "kernel": "stream", "time_s": 0.004},
        {"name": "B", "kernel": "fma", "time_s": 0.004, "after": ["A"]},
    ],
}
FAST = {
    "timing": {"warmup_s": 0.01, "min_time_s": 0.02, "min_samples": 3},
    "disturbance": UNJUDGED,
}
C, B = 50e9, 20e9  # FLOP/s and B/s the stages are sized from (round, for the checks)


def _measure(peak_flops_per_s: float, bandwidth_b_per_s: float, ceilings_run_id=None) -> dict:
    """SCENARIO measured on this machine's CPU, its stages sized from these ceilings."""
    config = validate_config({**FAST, "stages": {"two": SCENARIO}})
    return run_stage_overlap(
        select_backend("cpu"),
        "two",
        config["stages"]["two"],
        TimingSettings.from_config(config["timing"], config["disturbance"]),
        peak_flops_per_s=peak_flops_per_s,
        bandwidth_b_per_s=bandwidth_b_per_s,
        ceilings_run_id=ceilings_run_id,
    )


@pytest.fixture(scope="module")
def measured():
    return _measure(C, B, ceilings_run_id="ceilings-of-this-test")


def test_a_stage_is_sized_to_take_its_time_at_its_bound():
    stream = sized_stage("A", "stream", 0.01, C, B)
    assert (stream.bytes, stream.flops) == (0.01 * B, 0.01 * B / 12)  # a triad: 2 FLOP per 24 B
    fma = sized_stage("B", "fma", 0.01, C, B, after=["A"])
    assert (fma.flops, fma.bytes, fma.after) == (0.01 * C, 0.0, ("A",))
    bounds = stage_bounds([stream, fma], C, B)
    assert bounds.critical_path_s == pytest.approx(0.02)
    assert bounds.aggregate_s == pytest.approx(max((stream.flops + fma.flops) / C, 0.01))
    with pytest.raises(ModelError, match="unknown kernel 'gemm'"):
        sized_stage("A", "gemm", 0.01, C, B)


@pytest.mark.parametrize(
    ("scenario", "says"),
    [
        (
            {**SCENARIO, "stages": [{"name": "A", "flops": 1, "bytes": 1}]},
            "a measurable scenario's stage gives kernel and time_s, got bytes, flops",
        ),
        (
            {"stages": [{"name": "A", "kernel": "fma", "time_s": 1}]},
            "(measurable: false) scenario's stage gives bytes and flops, got kernel, time_s",
        ),
        (
            {**SCENARIO, "compute_path": "bf16_tensor"},
            "a measurable scenario runs FMA chains",
        ),
    ],
)
def test_a_scenario_that_mixes_the_two_kinds_is_one_clear_error(scenario, says):
    with pytest.raises(ConfigError, match=r"stages\.s") as error:
        validate_config({"stages": {"s": scenario}})
    assert says in str(error.value)


def test_each_stage_alone_and_both_schedules_are_measured_with_their_bounds(measured):
    for table, rows in measured.items():
        to_table(table, rows)
    (run,) = measured["runs"]
    assert (run["kind"], run["sweep"]) == ("stages", "two")
    assert json.loads(run["settings"])["ceilings_run_id"] == "ceilings-of-this-test"
    a, b = measured["stage_timings"]
    assert (a["kernel"], b["kernel"]) == ("stream", "fma")
    assert a["placement"] != b["placement"] and a["placement"].startswith("cpu ")
    # exact ledgers, rounded to whole passes (at least one, over the cold flush's size: past
    # every cache) and iterations from the sized ones
    one_pass = 24 * stream_elements("triad", select_backend("cpu").flush_bytes, 1)
    assert a["flops"] * 12 == a["bytes"] and a["bytes"] % one_pass == 0
    assert abs(a["bytes"] - 0.004 * B) <= one_pass
    assert b["bytes"] == 0 and b["flops"] == pytest.approx(0.004 * C, rel=0.01)
    assert a["bound_s"] == pytest.approx(a["bytes"] / B) and a["limiter"] == "DRAM"
    assert b["bound_s"] == pytest.approx(b["flops"] / C) and b["limiter"] == "compute"
    serial, overlapped = measured["stage_schedules"]
    assert (serial["schedule"], overlapped["schedule"]) == ("serial", "overlapped")
    assert serial["bound_kind"] == "critical_path" and overlapped["bound_kind"] == "aggregate"
    assert serial["bound_s"] == pytest.approx(a["bound_s"] + b["bound_s"])  # B after A
    aggregate = max((a["flops"] + b["flops"]) / C, (a["bytes"] + b["bytes"]) / B)
    assert overlapped["bound_s"] == pytest.approx(aggregate)
    for row in (a, b, serial, overlapped):
        # a busy machine leaves fewer clean samples: the row then says it was disturbed
        assert row["n_samples"] >= (1 if row["disturbed"] else 3) and row["median_s"] > 0
        assert row["beats_bound"] is (row["p75_s"] < row["bound_s"])
    samples = {row["config_id"] for row in measured["samples"]}
    assert samples == {f"stages/two/{what}" for what in ("A", "B", "serial", "overlapped")}


def test_ceilings_far_too_low_make_every_measurement_beat_its_bound_and_say_so():
    """Sized on ceilings 1000x below this machine's, each stage does a thousandth of the work
    its bound allows for: every row is flagged, as a Roofline point above its roof would be."""
    tables = _measure(C / 1000, B / 1000)
    rows = [*tables["stage_timings"], *tables["stage_schedules"]]
    assert all(row["beats_bound"] for row in rows)


def test_more_stages_than_cores_is_refused(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    with pytest.raises(StageOverlapError, match="2 stages need 2 cores side by side"):
        _measure(C, B)


def test_the_store_says_it_as_the_article_does(measured, tmp_path):
    from rooflab.store import ingest

    results = tmp_path / "results"
    write_run(results / "stages" / "runs", measured["runs"][0]["run_id"], measured)
    db = tmp_path / "store.duckdb"
    ingest(db, results)
    with duckdb.connect(str(db), read_only=True) as con:
        (row,) = con.execute(
            "SELECT scenario, serial_s, overlapped_s, critical_path_bound_s, aggregate_bound_s, "
            "overlap_speedup, says FROM stage_overlap"
        ).fetchall()
        stages = con.execute("SELECT stage FROM latest_stage_timings ORDER BY position").fetchall()
    serial, overlapped = measured["stage_schedules"]
    assert row[:5] == (
        "two",
        serial["median_s"],
        overlapped["median_s"],
        serial["bound_s"],
        overlapped["bound_s"],
    )
    assert row[5] == pytest.approx(serial["median_s"] / overlapped["median_s"])
    assert row[6].startswith(f"serial {serial['median_s'] * 1e3:.3g} ms against its critical-path")
    assert stages == [("A",), ("B",)]


def test_cli_measure_stages_prints_the_contract(quick_ceilings_run, tmp_path):
    _, ceilings_dir = quick_ceilings_run
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({**FAST, "backend": "cpu", "stages": {"two": SCENARIO}}))
    result = run_rooflab(
        "measure", "stages", "--config", config, "--ceilings", ceilings_dir,
        "--format", "json", "--out", tmp_path / "runs",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (scenario,) = json.loads(result.stdout)
    assert scenario["scenario"] == "two"
    for key in ("serial_s", "overlapped_s", "critical_path_bound_s", "aggregate_bound_s"):
        assert scenario[key] > 0 and math.isfinite(scenario[key])
    assert scenario["peak_flops_per_s"] > 0 and scenario["bandwidth_b_per_s"] > 0
    assert [s["name"] for s in scenario["stages"]] == ["A", "B"]
    for stage in scenario["stages"]:
        assert {"name", "flops", "bytes", "measured_s", "bound_s"} <= set(stage)
    assert len(list((tmp_path / "runs").iterdir())) == 1  # the stages run; ceilings were given
    refused = run_rooflab(
        "measure", "stages", "--config", config, "--scenario", "nope", "--ceilings", ceilings_dir,
        refused=True,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "no measurable scenario nope in the config; measurable: two" in refused.stderr


def test_ceilings_without_the_scenarios_roofs_are_one_clear_error():
    from rooflab.experiments.stage_overlap import scenario_ceilings

    machine = {"run_id": "c1", "peak": {"fp64_fma": C}, "bandwidth": {"DRAM": B}}
    assert scenario_ceilings("two", SCENARIO, machine) == (C, B)
    with pytest.raises(StageOverlapError, match=r"stages\.two: the ceilings run c1 has no DRAM"):
        scenario_ceilings("two", SCENARIO, {**machine, "bandwidth": {"L2": B}})


def test_each_stage_and_schedule_is_diagnosed_against_its_own_bound(measured, tmp_path):
    """Issue 43: a real stages run's diagnoses (roofline.diagnosis.stage_diagnoses): one per
    stage and per schedule, each efficiency its bound over its measured time."""
    from rooflab.roofline.diagnosis import stage_diagnoses
    from rooflab.vocabulary import DIAGNOSIS_CAUSES

    run = write_run(tmp_path, measured["runs"][0]["run_id"], measured)
    rows = {d["key"]: d for d in stage_diagnoses([run])}
    assert set(rows) == {"two/A", "two/B", "two/serial", "two/overlapped"}
    timed = [*measured["stage_timings"], *measured["stage_schedules"]]
    for row in timed:
        name = row.get("stage") or row["schedule"]
        diagnosis = rows[f"two/{name}"]
        assert diagnosis["efficiency"] == pytest.approx(row["bound_s"] / row["median_s"])
        assert diagnosis["cause"] in DIAGNOSIS_CAUSES and diagnosis["kind"] == "stages"
        if diagnosis["efficiency"] > 1.05:
            assert diagnosis["cause"] == "above_roof"


def test_the_page_says_where_a_stage_ran_another_size_than_its_scenario(
    quick_ceilings_run, tmp_path
):
    """Issue 44: a stream stage runs whole passes over its working set, so a stage sized under
    one pass runs one: the stage-bounds chart (the scenario's sizes) and the measured one then
    differ, and the page says so beside both, with both sizes and why. Real runs: this machine's
    quick ceilings, `rooflab measure stages` sized on them, the roofline step, the store, the
    page. A stage sized at whole passes runs its own size: no such sentence."""
    import html
    import shutil

    from rooflab.experiments.stage_overlap import scenario_ceilings
    from rooflab.report import build_report
    from rooflab.roofline import build_analysis, latest_ceilings_by_machine
    from rooflab.store import query
    from rooflab.units import format_quantity
    from tests.report_pages import store_of

    _, ceilings_dir = quick_ceilings_run
    results = tmp_path / "results"
    ceilings = shutil.copytree(ceilings_dir, results / "ceilings" / "runs" / ceilings_dir.name)
    (machine,) = latest_ceilings_by_machine([ceilings]).values()
    _, bandwidth = scenario_ceilings("rounded", SCENARIO, machine)
    one_pass = 24 * stream_elements("triad", select_backend("cpu").flush_bytes, 1)

    def a_at(passes: float) -> dict:  # stage A sized to move `passes` passes' bytes
        a, b = SCENARIO["stages"]
        return {**SCENARIO, "stages": [{**a, "time_s": passes * one_pass / bandwidth}, b]}

    config = {**FAST, "backend": "cpu", "stages": {"rounded": a_at(0.3), "whole": a_at(4)}}
    (tmp_path / "c.yaml").write_text(json.dumps(config))
    result = run_rooflab(
        "measure", "stages", "--config", tmp_path / "c.yaml", "--ceilings", ceilings,
        "--out", results / "stages" / "runs",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    analysis = build_analysis(
        [ceilings],
        [],
        stage_runs=sorted((results / "stages" / "runs").iterdir()),
        stages=validate_config(config)["stages"],
    )
    db = store_of(results, analysis)
    rows = {
        (r["scenario"], r["stage"]): r
        for r in query(db, "SELECT * FROM latest_stage_timings").to_pylist()
    }
    rounded = rows[("rounded", "A")]
    assert rounded["bytes"] == one_pass and rounded["resized"]  # one whole pass, not 0.3
    assert rounded["nominal_bytes"] == pytest.approx(0.3 * one_pass)
    assert rounded["ceilings_run_id"] == rounded["bounds_run_id"] == ceilings.name
    assert rows[("whole", "A")]["bytes"] == 4 * one_pass
    assert not any(r["resized"] for r in rows.values() if r is not rounded)

    page = html.unescape(build_report(db, tmp_path / "report", images=False).index.read_text())
    said = re.findall(r"<p class='resized'>(.*?)</p>", page)
    assert len(said) == 2  # beside the measured chart and the bounds chart of `rounded` only
    for sentence in said:
        assert sentence.startswith(
            f"Stage A moved {format_quantity(one_pass, 'bytes', 3)} as measured, 3.3x the "
            f"scenario's {format_quantity(0.3 * one_pass, 'bytes', 3)}: a stream stage makes "
            "whole passes (at least one) over its working set (the cold flush's size, past "
            "every cache), so its size was rounded up to them."
        )
        assert "“Stage bounds: rounded” draws" in sentence or "This chart draws" in sentence
        assert "whole" not in sentence.replace("whole passes", "")
