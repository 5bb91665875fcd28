"""The counters step of a sweep (issue 7): the tools for real where this machine has them (perf
here counts no hardware event; the unpacked Nsight Compute CLI cannot reach a driver), the
selection and status rules, and the hierarchical points from CONSTRUCTED counters records
(tests/constructed_counters.py: our own data, never a measurement)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rooflab.backends.selection import select_backend
from rooflab.cli import main
from rooflab.config import validate_config
from rooflab.counters.perf import parse_perf_stat, perf_stat_command, pmu_note, run_perf_stat
from rooflab.experiments.counter_targets import select_cases
from rooflab.experiments.counters import (
    CounterSettings,
    counters_status,
    run_counters,
    status_row,
)
from rooflab.experiments.gemm import GemmCase, GemmConfig, run_gemm_sweep
from rooflab.experiments.profiled import child_command
from rooflab.experiments.timing import TimingSettings
from rooflab.records import TABLES, read_run, to_table, write_run
from rooflab.roofline import counter_points, latest_ceilings_by_machine, roofline_points
from rooflab.roofline.diagnosis import diagnose
from tests import constructed_counters as constructed
from tests.counters_fixtures import NCU_FIXTURES, replaying_ncu

NCU = Path("/tmp/aptnf/x/usr/lib/nsight-compute/ncu")  # Debian's nsight-compute, unpacked
SWEEP = {"m": [1, 3, 5], "n": [16], "k": [16], "dtypes": ["fp64"], "cache_states": ["warm", "cold"]}


# -- a real timing run on this machine's CPU ------------------------------------------------------


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    config = validate_config(
        {
            "backend": "cpu",
            "timing": {"warmup_s": 0.01, "min_time_s": 0.02, "min_samples": 3},
            "sweeps": {"s": SWEEP},
        }
    )
    backend = select_backend("cpu")
    tables = run_gemm_sweep(
        backend, "s", config["sweeps"]["s"], TimingSettings.from_config(config["timing"])
    )
    results = tmp_path_factory.mktemp("counters_step")
    run_dir = write_run(results / "runs", tables["runs"][0]["run_id"], tables)
    return {"backend": backend, "config": config, "run_dir": run_dir, "results": results}


def _count(timed, settings: CounterSettings, tool=None):
    tables = run_counters(
        timed["backend"], "s", timed["config"]["sweeps"]["s"], settings, timed["run_dir"], tool=tool
    )
    for name, rows in tables.items():
        to_table(name, rows)  # raises on a column the table lacks or a wrong type
    return tables


def _still_model_points(timed, counters_tables) -> None:
    """The pipeline carries on: model points as before, none from these counts."""
    run_id = counters_tables["runs"][0]["run_id"]
    kept = write_run(timed["results"] / "counters", run_id, counters_tables)
    ceilings = {
        timed["backend"].run_metadata()["machine_id"]: {
            "run_id": "ceilings-of-this-test",
            "peak": {"fp64_fma": 1e11},
            "bandwidth": {"DRAM": 1e10},
            "caches": {},
            "memory_level": "DRAM",
        }
    }
    model = roofline_points([timed["run_dir"]], ceilings)
    assert model and {p["q_source"] for p in model} == {"model"}
    points, notes = counter_points([kept], [timed["run_dir"]], ceilings)
    assert points == [] and notes == []  # no calibration rows: nothing to admit or explain


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed here")
def test_cpu_step_with_perf_for_real(timed):
    """perf stat around the child of each selected configuration. On these development machines
    (KVM guests without a virtual PMU) every hardware event is <not supported>: the step records
    `unavailable` with perf's reason and stops; where a PMU is exposed, events are counted."""
    tables = _count(timed, CounterSettings())
    (run,) = tables["runs"]
    assert run["kind"] == "counters" and run["sweep"] == "s" and run["backend"] == "cpu"
    assert tables["counter_calibration"] == []  # no FLOP counters on a CPU: nothing calibrated
    status, reason = counters_status(tables["counters"])
    rows = tables["counters"]
    assert {r["tool"] for r in rows} == {"perf"} and all(r["tool_version"] for r in rows)
    events = [r for r in rows if r["metric"] in CounterSettings().perf_events]
    if all(r["status"] != "ok" for r in events):
        assert status == "unavailable"
        assert reason.startswith(
            "perf: cycles, instructions, LLC-load-misses, LLC-loads, cache-misses <not supported>"
        )
        note = pmu_note()
        if note is not None:
            assert reason.endswith(f"({note})")
        # the first configuration tried, then stopped: the next would meet the same PMU
        assert {r["config_id"] for r in rows} == {"s/fp64/nn/m1_n16_k16"}
        assert all(r["value"] is None for r in events)  # nothing invented
        (unavailable,) = [r for r in rows if r["metric"] is None]
        assert unavailable["status"] == "unavailable" and unavailable["reason"] == reason
    else:
        assert status in ("ok", "partial")
        assert any(r["value"] and r["value"] > 0 for r in events)
    _still_model_points(timed, tables)


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed here")
def test_perf_runs_every_child_where_an_event_counts(timed):
    """The probe of `true` only stops the step where nothing counts: task-clock (a software event,
    counted on a VM too) gets a child per selected configuration, each with its count."""
    tables = _count(timed, CounterSettings(perf_events=("task-clock",)))
    counted = [r for r in tables["counters"] if r["metric"] == "task-clock"]
    assert len({r["config_id"] for r in counted}) >= 2
    assert all(r["status"] == "ok" and r["value"] > 0 for r in counted)


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed here")
def test_perf_scopes_its_counts_to_the_measured_call(tmp_path):
    """--control: events enabled only around the child's call. task-clock (a software event, which
    this VM counts) of the measured call is far below the whole child's."""
    child = child_command(GemmCase(GemmConfig("t", 8, 16, 32, "fp32", "nn"), 0), "cpu", 1)
    whole = run_perf_stat(perf_stat_command(["task-clock"], child), 120)
    ctl, ack = tmp_path / "ctl", tmp_path / "ack"
    os.mkfifo(ctl)
    os.mkfifo(ack)
    scoped = run_perf_stat(
        perf_stat_command(
            ["task-clock"], [*child, "--perf-control", f"{ctl},{ack}"], control=(ctl, ack)
        ),
        120,
    )
    whole_ms = whole.counts["task-clock"].value
    scoped_ms = scoped.counts["task-clock"].value
    assert whole.returncode == scoped.returncode == 0
    # the whole child is Python starting up (over 100 ms of CPU); the call, microseconds
    assert whole_ms > 100 and 0 < scoped_ms < whole_ms / 20, (whole_ms, scoped_ms)
    assert scoped.other_lines == []  # perf's "Events enabled/disabled" are not kept as errors
    assert parse_perf_stat("Events enabled\nEvents disabled\n").other_lines == []


@pytest.mark.skipif(not NCU.exists(), reason=f"no unpacked Nsight Compute CLI at {NCU}")
def test_ncu_step_with_the_real_ncu_and_no_driver(timed):
    """The CUDA step's ncu path, run here with the real ncu 2024.1.1 (tool forced, since this
    machine has no GPU): the metric list cannot be queried and the profile cannot reach a
    driver. The step records `unavailable` in ncu's own words, stops, and the pipeline carries on
    with model bytes."""
    tables = _count(timed, CounterSettings(ncu=str(NCU)), tool="ncu")
    rows = tables["counters"]
    assert {r["tool"] for r in rows} == {"ncu"}
    (unchecked,) = [r for r in rows if r["status"] == "unchecked"]
    assert unchecked["reason"].startswith(
        "metric list not queried (exit status 1: ==ERROR== Driver could not be loaded.)"
    )
    (unavailable,) = [r for r in rows if r["status"] == "unavailable"]
    recorded = (NCU_FIXTURES / "no_driver" / "profile.stderr.txt").read_text().strip()
    reason = unavailable["reason"]
    assert reason.startswith("exit status 1: ")
    assert recorded in reason  # ncu's own line, as recorded in tests/fixtures/ncu/no_driver
    assert "==WARNING== No kernels were profiled." in reason
    assert unavailable["tool_version"] == "2024.1.1.0"
    assert (unavailable["cache_control"], unavailable["clock_control"]) == ("all", "none")
    assert unavailable["replay_mode"] == "kernel"
    assert unavailable["nvtx_include"] == "s:fp64:nn:m1_n16_k16:counters/"
    assert "dram__bytes_read.sum" in unavailable["metrics_requested"]
    assert counters_status(rows) == ("unavailable", reason)
    assert tables["counter_calibration"] == []
    _still_model_points(timed, tables)


def test_missing_tools_are_one_unavailable_row(timed, tmp_path):
    for tool, settings in (
        ("ncu", CounterSettings(ncu=str(tmp_path / "no-ncu"))),
        ("perf", CounterSettings(perf=str(tmp_path / "no-perf"))),
    ):
        tables = _count(timed, settings, tool=tool)
        (row,) = tables["counters"]
        missing = tmp_path / f"no-{tool}"
        assert row["status"] == "unavailable" and row["config_id"] is None
        assert row["reason"] == f"{missing}: not found (no such program on PATH or at that path)"
        assert counters_status(tables["counters"]) == ("unavailable", row["reason"])


def test_ncu_success_path_on_replayed_output(timed, tmp_path):
    tables = _count(timed, CounterSettings(ncu=str(replaying_ncu(tmp_path))), tool="ncu")
    rows = tables["counters"]
    selected = ["s/fp64/nn/m1_n16_k16", "s/fp64/nn/m3_n16_k16", "s/fp64/nn/m5_n16_k16"]
    ok = [r for r in rows if r["metric"] is None and r["status"] == "ok"]
    assert sorted((r["config_id"], r["cache_control"]) for r in ok) == sorted(
        (c, cc) for c in selected for cc in ("all", "none")
    )
    # the replayed log has no ==PROF== progress lines (those ncu prints while profiling)
    assert {r["reason"] for r in ok} == {
        "1 kernel(s) profiled in the range; replay passes per kernel: not printed"
    }
    assert {r["chip"] for r in rows if r["metric"]} == {"gh100"}
    summed = [r for r in rows if r["scope"] == "range" and r["metric"] == "dram__bytes_read.sum"]
    assert {r["value"] for r in summed} == {4196352}
    assert {r["kernel"] for r in rows if r["scope"] == "kernel"} == {
        "void Sobel<double>(uchar4 *, uchar4 *, int, int)"
    }
    calibrations = tables["counter_calibration"]
    assert len(calibrations) == 6
    for cal in calibrations:
        # the sample kernel has no FP64 SASS counts in its report: missing, never a guess
        assert cal["compute_path"] == "fp64_fma" and cal["trusted"] is False
        assert cal["reason"] == "fp64_fma: counter missing; counts untrusted"
        state = "cold" if cal["cache_control"] == "all" else "warm"
        assert cal["timing_cache_state"] == state and cal["pairing_error"] is None
        assert cal["pairing"].endswith(f"{state} timing")
        assert cal["timing_run_id"] == timed["run_dir"].name
    assert counters_status(rows) == ("ok", None)
    kept = write_run(tmp_path / "runs", tables["runs"][0]["run_id"], tables)
    machine = timed["backend"].run_metadata()["machine_id"]
    ceilings = {machine: {"run_id": "c", "peak": {"fp64_fma": 1e11}, "bandwidth": {"HBM": 1e12}}}
    points, notes = counter_points([kept], [timed["run_dir"]], ceilings)
    assert points == [] and len(notes) == 6
    assert all(note.endswith("fp64_fma: counter missing; counts untrusted") for note in notes)


def test_a_filter_that_matches_nothing_stops_the_step_at_once(timed, tmp_path):
    """ncu that exits cleanly having profiled nothing (its recorded words, no CSV): the child
    ran its range, so the NVTX filter matched nothing; the same filter would miss every other
    configuration, so the step stops after the first profile instead of spending them all."""
    no_kernel = (NCU_FIXTURES / "no_driver" / "profile.log.txt").read_text().splitlines()[-1]
    assert no_kernel == "==WARNING== No kernels were profiled."
    (tmp_path / "empty.csv").write_text(no_kernel + "\n")
    script = replaying_ncu(tmp_path, profile=tmp_path / "empty.csv")
    tables = _count(timed, CounterSettings(ncu=str(script)), tool="ncu")
    status = [r for r in tables["counters"] if r["metric"] is None]
    (only,) = [r for r in status if r["config_id"]]  # one profile tried, of six
    assert only["status"] == "unavailable"
    assert only["reason"] == (
        "no kernel profiled inside NVTX range 's:fp64:nn:m1_n16_k16:counters' "
        "(filter 's:fp64:nn:m1_n16_k16:counters/'): ==WARNING== No kernels were profiled."
    )
    assert tables["counter_calibration"] == []
    assert counters_status(tables["counters"])[0] == "unavailable"


def test_a_sweep_without_cold_timings_profiles_no_flushed_replay(timed, tmp_path):
    warm_only = read_run(timed["run_dir"])
    rows = [r for r in warm_only["timed_points"].to_pylist() if r["cache_state"] == "warm"]
    tables = {name: t.to_pylist() for name, t in warm_only.items()} | {"timed_points": rows}
    run_dir = write_run(tmp_path / "warm", tables["runs"][0]["run_id"], tables)
    settings = CounterSettings(ncu=str(replaying_ncu(tmp_path)), configs=("s/fp64/nn/m3_n16_k16",))
    counted = run_counters(
        timed["backend"], "s", timed["config"]["sweeps"]["s"], settings, run_dir, tool="ncu"
    )
    skipped = [r for r in counted["counters"] if r["status"] == "skipped"]
    assert [(r["config_id"], r["cache_control"]) for r in skipped] == [
        ("s/fp64/nn/m3_n16_k16", "all")
    ]
    assert "pairs only with a cold timing; not profiled" in skipped[0]["reason"]
    assert [c["cache_control"] for c in counted["counter_calibration"]] == ["none"]


# -- selection and status (constructed inputs) -----------------------------------------------------

BIG = {"m": [1, 2, 4, 8, 16, 32, 64], "n": [32], "k": [32], "dtypes": ["fp32", "fp64"]}
BIG |= {"layouts": ["nn"], "seed": 0}


def _ids(sweep, timed_ids, **settings):
    selection = select_cases("sweep", "w", sweep, timed_ids, CounterSettings(**settings))
    return [c.config_id for c in selection.configs], selection.skipped


def test_selection_is_spread_over_the_timed_configurations():
    every = {f"w/{d}/nn/m{m}_n32_k32" for d in ("fp32", "fp64") for m in BIG["m"]}
    chosen, skipped = _ids(BIG, every, max_configs=4)
    # indices 0, 4, 9, 13 of the 14 in sweep order (dtype, layout, N, K, then M)
    assert chosen == [
        "w/fp32/nn/m1_n32_k32",
        "w/fp32/nn/m16_n32_k32",
        "w/fp64/nn/m4_n32_k32",
        "w/fp64/nn/m64_n32_k32",
    ]
    assert skipped == []
    assert _ids(BIG, every, max_configs=1)[0] == ["w/fp64/nn/m64_n32_k32"]
    assert len(_ids(BIG, every, max_configs=64)[0]) == 14
    # configurations that failed their check were not timed: never counted
    timed_ids = every - {"w/fp64/nn/m64_n32_k32"}
    assert _ids(BIG, timed_ids, max_configs=2)[0] == [
        "w/fp32/nn/m1_n32_k32",
        "w/fp64/nn/m32_n32_k32",
    ]
    assert _ids(BIG, set(), max_configs=4) == ([], [])


def test_selection_by_config_id():
    every = {f"w/fp32/nn/m{m}_n32_k32" for m in BIG["m"]}
    listed = (
        "w/fp32/nn/m8_n32_k32",
        "w/fp64/nn/m8_n32_k32",
        "w/bf16/nn/m1_n1_k1",
        "x/a/nn/m1_n1_k1",
    )
    chosen, skipped = _ids(BIG, every, configs=listed, max_configs=1)
    assert chosen == ["w/fp32/nn/m8_n32_k32"]
    assert skipped == [
        ("w/fp64/nn/m8_n32_k32", "not timed (failed its correctness check?)"),
        ("w/bf16/nn/m1_n1_k1", "not a configuration of sweep w"),
    ]


def test_counters_status_from_status_rows():
    def rows(*statuses):
        return [status_row("r", "c", s, f"why {s}") for s in statuses]

    assert counters_status([]) == ("none", None)
    assert counters_status(rows("ok", "ok")) == ("ok", None)
    assert counters_status(rows("unavailable")) == ("unavailable", "why unavailable")
    assert counters_status(rows("ok", "unavailable")) == ("partial", "why unavailable")
    assert counters_status(rows("partial")) == ("partial", "why partial")
    assert counters_status(rows("skipped", "unchecked")) == ("none", None)


def test_settings_come_from_the_config_with_its_defaults():
    section = validate_config({"counters": {"max_configs": 2}})["counters"]
    settings = CounterSettings.from_config(section)
    assert settings.max_configs == 2 and settings.cache_controls == ("all", "none")
    assert (settings.replay_mode, settings.ncu, settings.enabled) == ("kernel", "ncu", True)
    with pytest.raises(ValueError):
        CounterSettings(cache_controls=("flush",))


# -- hierarchical points from constructed counters records ----------------------------------------


def _constructed(tmp_path, **kwargs):
    runs = constructed.write_campaign(tmp_path / "results", **kwargs)
    ceilings = latest_ceilings_by_machine([runs["ceilings"]])
    return counter_points([runs["counters"]], [runs["gemm"]], ceilings)


def test_trusted_paired_counts_give_one_point_per_level(tmp_path):
    points, notes = _constructed(tmp_path)
    assert notes == []
    assert {(p["config_id"], p["cache_state"]) for p in points} == {
        (constructed.config_id(m), state) for m in constructed.MS for state in ("warm", "cold")
    }
    to_table("roofline_points", points)  # every column is in the table
    for p in points:
        assert p["q_source"] == "counters" and p["ceilings_run_id"].startswith("20260601T0000")
        assert p["pairing"] == (
            "flushed replay ↔ cold timing"
            if p["cache_state"] == "cold"
            else "no-flush replay ↔ warm timing"
        )
        assert p["cache_control"] == ("all" if p["cache_state"] == "cold" else "none")
        assert p["median_s"] == constructed.TIMES[(p["m"], p["cache_state"])]
        assert p["flops"] == 2 * p["m"] * constructed.N * constructed.K
        assert p["calibration_ratio"] == pytest.approx(1.002)
        assert p["replay_mode"] == "kernel" and p["counters_run_id"].endswith("k0000000")
    cold64 = {p["level"]: p for p in points if p["m"] == 64 and p["cache_state"] == "cold"}
    assert list(cold64) == ["HBM", "L2", "L1"]
    assert cold64["HBM"]["bytes"] == 36_000_000 and cold64["L2"]["bytes"] == 120_000_000
    assert cold64["HBM"]["bandwidth_b_per_s"] == 4e12 and cold64["L1"]["bandwidth_b_per_s"] == 3e13
    # B x I: L1 3e13 x 5.37 < L2 1e13 x 17.9 < HBM 4e12 x 59.7
    assert {p["limiting_level"] for p in cold64.values()} == {"L1"}


def test_an_l1_that_counted_less_than_the_l2_gets_no_point_and_a_note(tmp_path):
    # as cuBLAS on an H200 (TMA loads): L1 bytes a small fraction of L2's
    points, notes = _constructed(tmp_path, l1_factor=1e-5)
    assert points and {p["level"] for p in points} == {"HBM", "L2"}
    assert len(notes) == 4 and all(note.endswith("; no L1 point") for note in notes)
    assert any(constructed.config_id(64) in note and "at L2" in note for note in notes)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"counted_factor": 0.5}, "counted/2MNK = 0.5 (off by 50.00%"),
        ({"counted_factor": 1.02}, "more than 1%"),
        ({"machine_id": "another-node"}, "no ceilings of machine another-node"),
    ],
)
def test_untrusted_or_unpaired_counts_give_no_point(tmp_path, kwargs, says):
    points, notes = _constructed(tmp_path, **kwargs)
    assert points == [] and len(notes) == 4 and all(says in note for note in notes)


def test_a_stored_trusted_flag_alone_admits_nothing(tmp_path):
    runs = constructed.write_campaign(tmp_path / "results", counted_factor=1.5)
    tables = {name: t.to_pylist() for name, t in read_run(runs["counters"]).items()}
    for row in tables["counter_calibration"]:
        row["trusted"] = True  # as if written by a buggy step
    forged = write_run(tmp_path / "forged", tables["runs"][0]["run_id"], tables)
    ceilings = latest_ceilings_by_machine([runs["ceilings"]])
    points, notes = counter_points([forged], [runs["gemm"]], ceilings)
    assert points == [] and all("untrusted" in note for note in notes)


def test_replays_pair_only_with_the_timing_run_they_name_on_their_machine(tmp_path):
    runs = constructed.write_campaign(tmp_path / "results")
    ceilings = latest_ceilings_by_machine([runs["ceilings"]])
    points, notes = counter_points([runs["counters"]], [], ceilings)
    assert points == [] and all("is not among the timing runs given" in n for n in notes)
    gemm = {name: t.to_pylist() for name, t in read_run(runs["gemm"]).items()}
    gemm["timed_points"] = [r for r in gemm["timed_points"] if r["cache_state"] == "warm"]
    warm_only = write_run(tmp_path / "warm", gemm["runs"][0]["run_id"], gemm)
    points, notes = counter_points([runs["counters"]], [warm_only], ceilings)
    assert {p["cache_state"] for p in points} == {"warm"}  # flushed replays: never paired warm
    assert len(notes) == 2 and all("pairs only with a cold timing" in n for n in notes)


@pytest.mark.parametrize(("replay_mhz", "judged"), [(1980.0, "conditions"), (1510.0, None)])
def test_a_counted_point_carries_its_replay_clock_and_is_judged_by_it(tmp_path, replay_mhz, judged):
    """Issue 43: a counted point carries its timing's clock, its roof's (none here) and the SM
    clock ncu saw in its replay; a replay at a clock 10 % off its timing's is `conditions`."""
    points, _ = _constructed(tmp_path, clocks_mhz=(1500.0, replay_mhz))
    assert points and {(p["clock_mhz"], p["replay_clock_mhz"]) for p in points} == {
        (1500.0, replay_mhz)
    }
    diagnoses = [diagnose(p) for p in points]
    if judged:
        assert {d["cause"] for d in diagnoses} == {"conditions"}
        assert all("replay clock" in d["next_step"] for d in diagnoses)
    else:
        assert "conditions" not in {d["cause"] for d in diagnoses}


def test_new_tables_and_columns():
    assert {"counters", "counter_calibration"} <= set(TABLES)
    for name in ("counters", "counter_calibration"):
        assert TABLES[name].names[0] == "run_id"
    extra = {
        "limiting_level",
        "hierarchical_attainable_flops_per_s",
        "hierarchical_bound_s",
        "pairing",
        "cache_control",
        "replay_mode",
        "counters_run_id",
        "flops_counted",
        "calibration_ratio",
    }
    assert extra <= set(TABLES["roofline_points"].names)


# -- rooflab measure counters ----------------------------------------------------------------------


def test_cli_measure_counters(timed, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(
        "backend: cpu\nsweeps:\n  s: {m: [1, 3, 5], n: [16], k: [16], dtypes: [fp64]}\n"
        f"counters: {{perf: {tmp_path / 'no-perf'}}}\n"
    )
    base = ["measure", "counters", "--config", str(config), "--sweep", "s"]
    assert main([*base, "--timing", str(timed["run_dir"]), "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "rooflab: counters unavailable: " in err and "no-perf: not found" in err
    (kept,) = (tmp_path / "o").iterdir()
    assert read_run(kept)["counters"].num_rows == 1
    assert main([*base, "--timing", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert "not a run folder" in capsys.readouterr().err
    other = ["measure", "counters", "--config", str(config), "--sweep", "x"]
    assert main([*other, "--timing", str(timed["run_dir"]), "--out", str(tmp_path / "o")]) == 2
    assert "no sweep 'x'" in capsys.readouterr().err
    # the timing of another sweep is never paired with this sweep's counters
    config.write_text(
        config.read_text().replace(
            "sweeps:\n", "sweeps:\n  t: {m: [2], n: [8], k: [8], dtypes: [fp64]}\n"
        )
    )
    other = ["measure", "counters", "--config", str(config), "--sweep", "t"]
    assert main([*other, "--timing", str(timed["run_dir"]), "--out", str(tmp_path / "o")]) == 2
    assert "a gemm run of 's', not a gemm run of sweep 't'" in capsys.readouterr().err
    assert len(list((tmp_path / "o").iterdir())) == 1  # nothing written by the refusals
