"""Hardware counters of your own kernels (issue 28): each selected case's run() once inside its
NVTX range in a child (`experiments.profiled`), perf or ncu around it, the counted FLOPs calibrated
against the FLOPs the case's ledger says it executes, fail closed as for GEMMs.

The timing run is real (this machine's CPU); perf runs for real where installed; ncu is the
stand-in that replays recorded output (tests/counters_fixtures.py). The trusted path's counts are
CONSTRUCTED (labelled so), because only a GPU counts FLOPs: real ones are owed to the device
check (tests/gpu/test_workloads_gpu.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from rooflab.backends.selection import select_backend
from rooflab.config import ConfigError, validate_config
from rooflab.counters.ncu import DRAM_READ, DRAM_WRITE, L2_BYTES
from rooflab.counters.points import calibrate_ledger, hierarchical_points, ledger_flops, pair
from rooflab.experiments.counter_targets import count_target, select_cases
from rooflab.experiments.counters import CounterSettings, counters_status, run_workload_counters
from rooflab.experiments.profiled import child_command
from rooflab.experiments.timing import TimingSettings
from rooflab.experiments.workload_cases import WorkloadCase, run_workload
from rooflab.records import read_run, to_table, write_run
from rooflab.roofline import counter_points
from rooflab.workloads import Case
from tests.conftest import UNJUDGED
from tests.counters_fixtures import replaying_ncu

ENTRY = "rooflab.workloads.builtin:blockdiag_dense"
SPEC = {
    "entry": ENTRY,
    "params": {"n": [32, 64, 128], "blocks": [2], "k": [8]},
    "dtypes": ["fp32"],
    "cache_states": ["warm", "cold"],
    "seed": 0,
}
NAME = "dense"


def _config_id(n: int) -> str:
    """The config_id of SPEC's case of this N."""
    return f"dense/fp32/blocks2_k8_n{n}"


def _child(case: WorkloadCase) -> subprocess.CompletedProcess:
    """The profiled child of `case` on the CPU, run to its end."""
    return subprocess.run(
        child_command(case, "cpu", 1), capture_output=True, text=True, timeout=120
    )


def _ceilings(machine: str, **bandwidth: float) -> dict:
    """Ceilings run c of `machine`: an fp32 FMA roof of 1 TFLOP/s and these bandwidths."""
    return {machine: {"run_id": "c", "peak": {"fp32_fma": 1e12}, "bandwidth": bandwidth}}


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    config = validate_config(
        {
            "backend": "cpu",
            "timing": {"warmup_s": 0.01, "min_time_s": 0.02, "min_samples": 3},
            "disturbance": UNJUDGED,
        }
    )
    timing = TimingSettings.from_config(config["timing"], config["disturbance"])
    backend = select_backend("cpu")
    tables = run_workload(backend, NAME, SPEC, timing)
    results = tmp_path_factory.mktemp("workload_counters")
    run_dir = write_run(results / "runs", tables["runs"][0]["run_id"], tables)
    points = {(p["config_id"], p["cache_state"]): p for p in tables["timed_points"]}
    return {"backend": backend, "run_dir": run_dir, "results": results, "points": points}


def test_the_child_runs_one_case_inside_its_counters_range():
    case = Case(NAME, "fp32", {"blocks": 2, "k": 8, "n": 32})
    done = _child(WorkloadCase(case, SPEC))
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {
        "config_id": _config_id(32),
        "nvtx_range": "dense:fp32:blocks2_k8_n32:counters",
        "backend": "cpu",
    }


def test_a_child_whose_workload_cannot_be_built_says_so_in_one_line():
    case = Case(NAME, "fp32", {"n": 32})
    done = _child(WorkloadCase(case, {**SPEC, "entry": "no_such_module:f"}))
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        "rooflab: dense: cannot import 'no_such_module' "
        "(ModuleNotFoundError: No module named 'no_such_module'); rooflab looks in the current "
    )


def test_cases_are_chosen_like_a_sweeps_configurations():
    every = {_config_id(n) for n in (32, 64, 128)}
    chosen = select_cases("workload", NAME, SPEC, every, CounterSettings(max_configs=2))
    assert [c.config_id for c in chosen.configs] == [_config_id(32), _config_id(128)]
    timed_only = every - {_config_id(128)}
    one = select_cases("workload", NAME, SPEC, timed_only, CounterSettings(max_configs=1))
    assert [c.config_id for c in one.configs] == [_config_id(64)]  # timed only
    listed = (_config_id(64), _config_id(99), "other/fp32/n1")
    chosen = select_cases("workload", NAME, SPEC, every, CounterSettings(configs=listed))
    assert [c.config_id for c in chosen.configs] == [_config_id(64)]
    assert chosen.skipped == [(_config_id(99), "not a configuration of workload dense")]


def test_a_case_is_calibrated_against_what_its_ledger_says_it_executes():
    case = Case(NAME, "fp32", {"blocks": 2, "k": 8, "n": 64})
    row = {"kind": "workload", "dtype": "fp32"}
    dense = row | {"flops": 2 * 64 * 32 * 8, "executed_flops": 2 * 64 * 64 * 8}
    target = count_target(WorkloadCase(case, SPEC), dense, "cuda", 3)
    assert (target.compute_path, target.expected_flops) == ("fp32_fma", 2 * 64 * 64 * 8)
    assert target.ledger == "executed FLOPs" and target.shape is None
    said = json.loads(target.child[target.child.index("--case") + 1])
    assert (said["entry"], said["params"], said["kind"]) == (ENTRY, case.params, "workload")
    useful = row | {"flops": 100, "executed_flops": None}
    useful_only = count_target(WorkloadCase(case, SPEC), useful, "cuda", 3)
    assert (useful_only.expected_flops, useful_only.ledger) == (100, "useful FLOPs")
    # a fp64 workload is judged against the FMA chains on a GPU too, never the DMMA tensor path
    fp64_row = {"kind": "workload", "dtype": "fp64", "flops": 1}
    fp64 = count_target(WorkloadCase(Case(NAME, "fp64", {}), SPEC), fp64_row, "cuda", 3)
    assert fp64.compute_path == "fp64_fma"


def test_counters_configs_may_name_workload_cases():
    section = {"configs": ["relu_axpb_fused/fp32/n1048576", "main/bf16/nn/m64_n4096_k4096"]}
    assert validate_config({"counters": section})["counters"]["configs"] == section["configs"]
    with pytest.raises(ConfigError, match=r"counters\.configs"):
        validate_config({"counters": {"configs": ["relu_axpb_fused/n1048576"]}})


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed here")
def test_perf_around_a_workload_case_for_real(timed):
    """As for a sweep: perf around the child; where the VM exposes no PMU, `unavailable` in
    perf's words after the first case, nothing invented, nothing calibrated."""
    tables = run_workload_counters(
        timed["backend"], NAME, SPEC, CounterSettings(max_configs=2), timed["run_dir"]
    )
    for table, rows in tables.items():
        to_table(table, rows)
    (run,) = tables["runs"]
    assert (run["kind"], run["sweep"], run["backend"]) == ("counters", NAME, "cpu")
    settings = json.loads(run["settings"])
    assert settings["workload"]["entry"] == ENTRY
    assert settings["selected"] == [_config_id(32), _config_id(128)]
    assert tables["counter_calibration"] == []  # no FLOP counter on a CPU
    rows = tables["counters"]
    assert {r["config_id"] for r in rows} <= set(settings["selected"])
    status, reason = counters_status(rows)
    if status == "unavailable":
        assert reason.startswith("perf: ") and all(r.get("value") is None for r in rows)
    else:
        assert any(r["value"] for r in rows if r["metric"] == "instructions")


def test_ncu_replay_of_a_workload_is_paired_and_refused_without_its_flop_counts(timed, tmp_path):
    """The recorded sample report has no FP32 SASS counts: the calibration says the counter is
    missing (never a guess), the replays still pair with the case's timings, and no point."""
    settings = CounterSettings(ncu=str(replaying_ncu(tmp_path)), max_configs=1)
    tables = run_workload_counters(
        timed["backend"], NAME, SPEC, settings, timed["run_dir"], tool="ncu"
    )
    calibrations = tables["counter_calibration"]
    assert [(c["config_id"], c["cache_control"]) for c in calibrations] == [
        (_config_id(128), "all"),
        (_config_id(128), "none"),
    ]
    for cal in calibrations:
        assert (cal["m"], cal["n"], cal["k"]) == (None, None, None)
        assert cal["compute_path"] == "fp32_fma" and cal["expected_flops"] == 2 * 128 * 128 * 8
        assert cal["reason"] == "fp32_fma: counter missing; counts untrusted"
        assert cal["pairing_error"] is None and cal["timing_run_id"] == timed["run_dir"].name
    status_rows = [r for r in tables["counters"] if r["metric"] is None]
    assert {r["nvtx_include"] for r in status_rows} == {"dense:fp32:blocks2_k8_n128:counters/"}
    kept = write_run(tmp_path / "runs", tables["runs"][0]["run_id"], tables)
    machine = timed["backend"].run_metadata()["machine_id"]
    ceilings = {machine: {"run_id": "c", "peak": {"fp32_fma": 1e11}, "bandwidth": {"DRAM": 1e10}}}
    points, notes = counter_points([kept], [timed["run_dir"]], ceilings)
    assert points == [] and len(notes) == 2
    assert all(note.endswith("fp32_fma: counter missing; counts untrusted") for note in notes)


def _constructed_counts(timed, tmp_path, counted_factor: float):
    """A counters run with CONSTRUCTED counts (test data, not a measurement) for the real timing
    of the largest case: FLOPs `counted_factor` x its executed FLOPs, round bytes per level."""
    config_id = _config_id(128)
    executed = timed["points"][(config_id, "cold")]["executed_flops"]
    run_id = "20990101T000000Z-constructed"
    counters, calibrations = [], []
    for control in ("all", "none"):
        common = {"run_id": run_id, "config_id": config_id, "tool": "ncu", "scope": "range"}
        common |= {"cache_control": control, "replay_mode": "kernel", "status": "ok"}
        for metric, value in ((DRAM_READ, 6e4), (DRAM_WRITE, 3e4), (L2_BYTES, 3e5)):
            counters.append({**common, "metric": metric, "value": value, "unit": "byte"})
        seen = calibrate_ledger(
            executed * counted_factor, executed, 0.01, path="fp32_fma", ledger="executed FLOPs"
        )
        calibrations.append(
            {"run_id": run_id, "config_id": config_id, "cache_control": control}
            | {"compute_path": "fp32_fma", "counted_flops": seen.counted_flops}
            | {"expected_flops": seen.expected_flops, "ratio": seen.ratio, "tolerance": 0.01}
            | {"trusted": seen.trusted, "reason": seen.reason}
            | {"timing_run_id": timed["run_dir"].name}
        )
    (timing_run,) = read_run(timed["run_dir"])["runs"].to_pylist()
    run = {**timing_run, "run_id": run_id, "kind": "counters", "settings": '{"constructed": 1}'}
    tables = {"runs": [run], "counters": counters, "counter_calibration": calibrations}
    return write_run(tmp_path / "constructed", run_id, tables), timing_run["machine_id"]


def test_trusted_counts_of_a_case_give_points_at_its_useful_flops(timed, tmp_path):
    kept, machine = _constructed_counts(timed, tmp_path, 1.002)
    ceilings = _ceilings(machine, HBM=1e10, L2=1e11)
    points, notes = counter_points([kept], [timed["run_dir"]], ceilings)
    assert notes == []
    assert sorted((p["cache_state"], p["level"]) for p in points) == [
        (state, level) for state in ("cold", "warm") for level in ("HBM", "L2")
    ]
    useful = 2 * (128 * 128 // 2) * 8
    for p in points:
        timing = timed["points"][(p["config_id"], p["cache_state"])]
        assert p["flops"] == useful == timing["flops"]  # F: the useful work, as on every point
        assert p["executed_flops"] == 2 * useful and p["params"] == timing["params"]
        assert p["median_s"] == timing["median_s"] and p["sweep"] == NAME
        assert p["m"] is None and p["calibration_ratio"] == pytest.approx(1.002)
        assert p["intensity"] == pytest.approx(useful / (9e4 if p["level"] == "HBM" else 3e5))
    to_table("roofline_points", [p | {"ceilings_run_id": "c"} for p in points])


def test_counts_off_the_executed_ledger_give_no_point(timed, tmp_path):
    """Counted = the useful FLOPs of the dense product (half what it executes): untrusted."""
    kept, machine = _constructed_counts(timed, tmp_path, 0.5)
    points, notes = counter_points([kept], [timed["run_dir"]], _ceilings(machine, HBM=1e10))
    assert points == [] and len(notes) == 2
    assert all("counted/ledger = 0.5 (off by 50.00%" in note for note in notes)


def test_a_calibration_admits_only_the_ledger_of_its_own_timing(timed):
    timing = timed["points"][(_config_id(64), "cold")]
    assert ledger_flops(timing) == (timing["flops"], timing["executed_flops"])
    paired = pair({"config_id": timing["config_id"], "cache_control": "all"}, [timing])
    useful = timing["flops"]  # the ledger calibrated against: useful, not executed
    other = calibrate_ledger(useful, useful, path="fp32_fma")
    with pytest.raises(ValueError, match="the timing's ledger says"):
        hierarchical_points(
            paired, other, {"DRAM": 1e4}, {"DRAM": 1e10, "fp32_fma": 1e12}, "fp32_fma"
        )


def test_the_workload_child_is_a_module_of_this_python():
    command = child_command(WorkloadCase(Case("w", "fp32", {"n": 1}), {"entry": "m:f"}), "cpu", 0)
    assert command[:3] == [sys.executable, "-m", "rooflab.experiments.profiled"]


def test_cli_measure_counters_of_a_workload(timed, tmp_path, capsys):
    from rooflab.cli import main

    config = tmp_path / "c.yaml"
    spec = json.dumps({k: v for k, v in SPEC.items() if k != "seed"})
    config.write_text(
        "backend: cpu\nsweeps:\n  s: {m: [1], n: [8], k: [8], dtypes: [fp64]}\n"
        f"workloads:\n  {NAME}: {spec}\ncounters: {{perf: {tmp_path / 'no-perf'}}}\n"
    )
    base = ["measure", "counters", "--config", str(config), "--out", str(tmp_path / "o")]
    timing = ["--timing", str(timed["run_dir"])]
    assert main([*base, "--workload", NAME, *timing]) == 0
    assert "rooflab: counters unavailable: " in capsys.readouterr().err
    (kept,) = (tmp_path / "o").iterdir()
    (run,) = read_run(kept)["runs"].to_pylist()
    assert (run["kind"], run["sweep"]) == ("counters", NAME)
    # a workload's timing is never paired with a sweep's counters, nor an unknown name counted
    assert main([*base, "--sweep", "s", *timing]) == 2
    assert "a workload run of 'dense', not a gemm run of sweep 's'" in capsys.readouterr().err
    assert main([*base, "--workload", "nope", *timing]) == 2
    assert "no workload 'nope'" in capsys.readouterr().err
    assert len(list((tmp_path / "o").iterdir())) == 1  # nothing written by the refusals


def test_counted_points_of_a_case_reach_the_store_with_their_model_bytes(timed, tmp_path):
    """Through the roofline step, ingest and the report's view as a campaign would take them:
    `latest_counted_points` carries the case's own ledger bytes beside the counted ones."""
    import duckdb

    from rooflab.roofline import build_analysis, write_analysis
    from rooflab.store import ingest

    results = tmp_path / "results"
    timing_dir = results / "workloads" / "runs" / timed["run_dir"].name
    shutil.copytree(timed["run_dir"], timing_dir)
    kept, machine = _constructed_counts(timed, results / "workloads", 1.002)
    (timing_run,) = read_run(timing_dir)["runs"].to_pylist()
    ceilings_id = "20990101T000000Z-ceilings"
    rows = [
        {"run_id": ceilings_id, "kind": kind, "name": name, "kernel": "constructed", "value": v}
        | {"unit": unit}
        for kind, name, v, unit in (
            ("bandwidth", "HBM", 1e10, "B/s"),
            ("bandwidth", "L2", 1e11, "B/s"),
            ("compute", "fp32_fma", 1e12, "FLOP/s"),
        )
    ]
    run = {**timing_run, "run_id": ceilings_id, "kind": "ceilings", "sweep": None}
    ceilings = write_run(
        results / "ceilings" / "runs", ceilings_id, {"runs": [run], "ceilings": rows}
    )
    analysis = build_analysis([ceilings], [timing_dir], [kept])
    assert analysis.points.notes == [] and len(analysis.points.counted) == 4
    write_analysis(analysis, results / "roofline")
    db = tmp_path / "store.duckdb"
    ingest(db, results)
    with duckdb.connect(str(db), read_only=True) as con:
        seen = con.execute(
            "SELECT config_id, cache_state, level, bytes, bytes_model, disturbed "
            "FROM latest_counted_points ORDER BY cache_state, level"
        ).fetchall()
    model = timed["points"][(_config_id(128), "cold")]["bytes_model"]
    assert [row[1:] for row in seen] == [
        ("cold", "HBM", 90000, model, False),
        ("cold", "L2", 300000, model, False),
        ("warm", "HBM", 90000, model, False),
        ("warm", "L2", 300000, model, False),
    ]
    assert {row[0] for row in seen} == {_config_id(128)} and machine
