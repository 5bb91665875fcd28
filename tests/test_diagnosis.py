"""A diagnosis for every Roofline point (roofline.diagnosis, docs/diagnosis.md): each cause from
a point built to have it, with its evidence and its prediction's arithmetic; then every point of a
real measured store, through the `diagnoses` view and `rooflab explain`."""

import json
from pathlib import Path

import pytest

from rooflab.model import gemm_ledger
from rooflab.records import write_run
from rooflab.roofline.diagnosis import (
    AT_ROOF,
    CLOCK_MARGIN,
    GAPS_SHARE,
    NEAR_BANDWIDTH,
    diagnose,
    pair_diagnoses,
    stage_diagnoses,
)
from rooflab.vocabulary import DIAGNOSIS_CAUSES
from tests.store_runs import T0
from tests.table_rows import runs_row, table_row

PEAK, BANDWIDTH = 100e9, 10e9  # FLOP/s and B/s: the ridge at 10 FLOP/B


def point(efficiency: float, limiter: str = "memory", m: int | None = 1, **columns) -> dict:
    """A roofline_points row of an fp32 GEMM (M x 1024 x 1024; a workload where m is None) on
    roofs of PEAK and BANDWIDTH, timed at `efficiency` of its bound."""
    ledger = gemm_ledger(m or 1, 1024, 1024, "fp32")
    flops, q = ledger.flops, ledger.bytes
    bound_s = max(flops / PEAK, q / BANDWIDTH)
    row = {
        "run_id": "r",
        "machine_id": "mach",
        "config_id": f"s/fp32/nn/m{m}_n1024_k1024" if m else "w/fp32/n1",
        "kind": "gemm" if m else "workload",
        "cache_state": "cold",
        "level": "DRAM",
        "q_source": "model",
        "m": m,
        "n": 1024 if m else None,
        "k": 1024 if m else None,
        "dtype": "fp32",
        "bytes": q,
        "flops": flops,
        "intensity": flops / q,
        "median_s": bound_s / efficiency,
        "achieved_flops_per_s": flops * efficiency / bound_s,
        "compute_path": "fp32_fma",
        "peak_flops_per_s": PEAK,
        "bandwidth_b_per_s": BANDWIDTH,
        "bound_s": bound_s,
        "limiter": limiter,
        "efficiency": efficiency,
        "disturbed": False,
        "noisy": False,
    }
    return table_row("roofline_points", **(row | columns))


def evidence(diagnosis: dict) -> dict:
    return json.loads(diagnosis["evidence"])


def test_a_clean_compute_bound_point_near_its_roof_is_at_roof_with_no_prediction():
    diagnosis = diagnose(point(AT_ROOF, "compute", m=64))
    assert diagnosis["cause"] == "at_roof" and diagnosis["predicted_s"] is None
    assert diagnosis["kind"] == "gemm" and diagnosis["key"] == "s/fp32/nn/m64_n1024_k1024"
    assert "change the algorithm" in diagnosis["next_step"]
    assert evidence(diagnosis)["roofline_points.efficiency"] == AT_ROOF


def test_a_small_m_gemm_near_the_bandwidth_roof_is_low_reuse_with_the_rows_at_the_ridge():
    # I(M) = 2M·1024² / (4·(2048·M + 1024²)) reaches 10 FLOP/B first at M = 21 (20.8 exactly)
    diagnosis = diagnose(point(0.7, "memory", m=1))
    assert diagnosis["cause"] == "low_reuse"
    assert evidence(diagnosis)["rows_at_ridge"] == 21
    assert evidence(diagnosis)["ridge"] == pytest.approx(10.0)
    flops, q = 2 * 21 * 1024 * 1024, 4 * (21 * 1024 + 1024 * 1024 + 21 * 1024)
    assert flops / q >= 10 > (2 * 20 * 1024**2) / (4 * (20 * 1024 + 1024**2 + 20 * 1024))
    # one row's share of the M = 21 call's bound
    assert diagnosis["predicted_s"] == pytest.approx(max(flops / PEAK, q / BANDWIDTH) / 21)
    assert "21 rows" in diagnosis["next_step"]


def test_a_workload_near_the_bandwidth_roof_is_predicted_at_its_compute_bound():
    workload = point(NEAR_BANDWIDTH, "memory", m=None)
    diagnosis = diagnose(workload)
    assert diagnosis["cause"] == "low_reuse" and diagnosis["kind"] == "workload"
    assert diagnosis["predicted_s"] == pytest.approx(workload["flops"] / PEAK)


def test_far_below_the_bandwidth_roof_is_memory_parallelism_predicted_at_full_bandwidth():
    chase = point(0.01, "memory", m=None)
    diagnosis = diagnose(chase)
    assert diagnosis["cause"] == "memory_parallelism"
    assert diagnosis["predicted_s"] == chase["bound_s"] == pytest.approx(chase["bytes"] / BANDWIDTH)
    assert "outstanding requests" in diagnosis["next_step"]


def test_a_compute_bound_point_with_tile_tails_says_which_dimensions():
    tails = point(0.3, "compute", m=17)
    diagnosis = diagnose(tails)
    assert diagnosis["cause"] == "compute_path" and diagnosis["predicted_s"] == tails["bound_s"]
    assert "M = 17 off multiples of 16" in diagnosis["next_step"]
    assert "N =" not in diagnosis["next_step"]  # 1024 is a whole number of tiles
    whole = diagnose(point(0.3, "compute", m=64))
    assert whole["cause"] == "compute_path" and "parallel work" in whole["next_step"]


def test_executed_work_beyond_the_useful_is_wasted_work_predicted_without_it():
    dense = point(0.9, "compute", m=None, executed_flops=8 * 2 * 1024 * 1024)  # 8x the useful
    diagnosis = diagnose(dense)
    assert diagnosis["cause"] == "wasted_work"
    assert evidence(diagnosis)["executed_over_useful"] == pytest.approx(8.0)
    assert diagnosis["predicted_s"] == pytest.approx(dense["median_s"] / 8)
    assert diagnose(point(0.9, "compute", m=None, executed_flops=3 * 2**20))["cause"] == "at_roof"


def test_a_step_whose_gaps_are_a_large_share_has_launch_gaps_predicted_at_its_busy_time():
    # an eager step: 100 us of which 30 us between kernels (a timeline step, as timeline_points
    # gives it: its own figures, named by the columns of timeline_steps)
    step = {"step_s": 100e-6, "busy_s": 70e-6, "gap_s": 30e-6}
    eager = point(0.2, "memory", m=None, median_s=100e-6, kind="timeline") | step
    diagnosis = diagnose(eager)
    assert (diagnosis["cause"], diagnosis["kind"]) == ("launch_gaps", "timeline")
    assert diagnosis["predicted_s"] == pytest.approx(70e-6)
    assert evidence(diagnosis)["gap_fraction"] == pytest.approx(0.3)
    assert evidence(diagnosis)["timeline_steps.gap_s"] == 30e-6
    few = point(0.2, "memory", m=None, median_s=100e-6) | {**step, "gap_s": GAPS_SHARE * 99e-6}
    assert diagnose(few | {"kind": "timeline"})["cause"] == "memory_parallelism"


def test_a_ledger_declared_too_large_puts_the_point_above_its_roof():
    diagnosis = diagnose(point(100.0, "memory", m=1))
    assert diagnosis["cause"] == "above_roof" and diagnosis["predicted_s"] is None
    assert diagnosis["next_step"].startswith("check the ledger")
    assert evidence(diagnosis)["roofline_points.flops"] == 2 * 1024 * 1024


def test_conditions_a_disturbed_point_or_one_at_another_clock_than_its_roof():
    disturbed = diagnose(point(0.3, "compute", m=64, disturbed=True, disturbance="busy"))
    assert disturbed["cause"] == "conditions" and "disturbed" in disturbed["next_step"]
    assert evidence(disturbed)["roofline_points.disturbance"] == "busy"
    # power-capped: 1500 MHz against a roof measured at 1980 MHz; the roof at its clock is lower
    capped = point(0.6, "compute", m=64, clock_mhz=1500.0, roof_clock_mhz=1980.0)
    diagnosis = diagnose(capped)
    assert diagnosis["cause"] == "conditions" and "clock" in diagnosis["next_step"]
    assert evidence(diagnosis)["efficiency_at_its_clock"] == pytest.approx(0.6 * 1980 / 1500)
    within = capped | {"clock_mhz": 1980.0 / (1 + CLOCK_MARGIN / 2)}  # inside the margin
    assert diagnose(within)["cause"] == "compute_path"


def test_a_counted_point_is_of_kind_counted_and_judged_by_its_limiting_level():
    counted = point(0.2, "L2", m=64, q_source="counters", level="L2", counters_run_id="c")
    diagnosis = diagnose(counted)
    assert diagnosis["kind"] == "counted" and diagnosis["counters_run_id"] == "c"
    assert diagnosis["cause"] == "memory_parallelism" and "L2 bandwidth" in diagnosis["next_step"]


def test_every_cause_is_reached_by_some_point():
    points = [
        point(100.0),
        point(0.3, "compute", m=64, disturbed=True),
        point(0.9, "compute", m=None, executed_flops=2**24),
        point(0.2, m=None, kind="timeline") | {"step_s": 1.0, "gap_s": 1.0, "busy_s": 0.0},
        point(0.9, "compute", m=64),
        point(0.3, "compute", m=17),
        point(0.7),
        point(0.01),
    ]
    assert [diagnose(p)["cause"] for p in points] == list(DIAGNOSIS_CAUSES)


def _stages_run(folder, serial_s: float, stage_a_s: float) -> Path:
    """A stages run: stage A (memory, bound 10 ms) timed at `stage_a_s`, B (compute, bound
    10 ms) at its bound; the serial schedule (critical path 20 ms) at `serial_s`, the
    overlapped one (aggregate 10 ms) at 12 ms."""
    roofs = {"compute_path": "fp64_fma", "peak_flops_per_s": PEAK, "memory_level": "DRAM"}
    roofs |= {"bandwidth_b_per_s": BANDWIDTH, "scenario": "two", "run_id": "s"}
    schedules = [
        table_row(
            "stage_schedules",
            **roofs,
            schedule=schedule,
            median_s=median,
            bound_s=bound,
            bound_kind=kind,
            critical_path_bound_s=0.02,
            aggregate_bound_s=0.01,
            disturbed=False,
        )
        for schedule, median, bound, kind in (
            ("serial", serial_s, 0.02, "critical_path"),
            ("overlapped", 0.012, 0.01, "aggregate"),
        )
    ]
    stages = [
        table_row(
            "stage_timings",
            run_id="s",
            scenario="two",
            stage=name,
            flops=flops,
            bytes=q,
            median_s=median,
            bound_s=0.01,
            limiter=limiter,
            disturbed=False,
        )
        for name, flops, q, median, limiter in (
            ("A", 1e6, 1e8, stage_a_s, "DRAM"),
            ("B", 1e9, 0, 0.01, "compute"),
        )
    ]
    run = runs_row("s", "stages", T0, machine_id="mach")
    tables = {"runs": [run], "stage_schedules": schedules, "stage_timings": stages}
    return write_run(folder, "s", tables)


def test_a_serial_schedule_near_its_critical_path_is_at_roof_with_the_overlap_predicted(tmp_path):
    rows = {d["key"]: d for d in stage_diagnoses([_stages_run(tmp_path, 0.022, 0.011)])}
    assert set(rows) == {"two/A", "two/B", "two/serial", "two/overlapped"}
    serial = rows["two/serial"]
    assert (serial["cause"], serial["kind"], serial["limiter"]) == (
        "at_roof",
        "stages",
        "critical_path",
    )
    assert serial["efficiency"] == pytest.approx(0.02 / 0.022)
    assert serial["predicted_s"] == 0.01 and "overlap its stages" in serial["next_step"]
    assert rows["two/overlapped"]["predicted_s"] is None  # already at its aggregate bound
    assert rows["two/B"]["cause"] == "at_roof"


def test_a_schedule_far_from_its_bound_waits_on_the_stage_that_overruns_most(tmp_path):
    rows = {d["key"]: d for d in stage_diagnoses([_stages_run(tmp_path, 0.1, 0.09)])}
    stage_a = rows["two/A"]  # 10 ms of bound at 90 ms: memory-bound, far below its bandwidth
    assert stage_a["cause"] == "memory_parallelism" and stage_a["predicted_s"] == 0.01
    assert evidence(stage_a)["stage_timings.median_s"] == 0.09
    serial = rows["two/serial"]
    assert serial["cause"] == "memory_parallelism" and serial["predicted_s"] == 0.02
    assert evidence(serial)["slowest_stage"] == "two/A"
    assert serial["next_step"].startswith("the schedule waits on stage two/A: too few")


def test_a_same_work_as_pair_says_whether_the_change_reached_the_gain_its_bounds_allow():
    # the baseline computes 8x the useful FLOPs (compute-bound on them); the candidate only the
    # useful ones; both on the same roofs, the candidate 4x faster where the bounds allow 8x
    useful = 2 * 1024 * 1024
    common = {"sweep": "dense", "params": '{"n": 1}', "bandwidth_b_per_s": 1e13}
    dense = point(0.9, "compute", m=None, executed_flops=8 * useful, run_id="r1") | common
    blocks = point(0.9, "compute", m=None) | common | {"sweep": "blocks", "same_work_as": "dense"}
    blocks |= {"config_id": "blocks/fp32/n1", "median_s": dense["median_s"] / 4}
    dense_bound = max(8 * useful / PEAK, dense["bytes"] / 1e13)
    blocks_bound = max(useful / PEAK, blocks["bytes"] / 1e13)
    points = [dense, blocks]
    (pair,) = pair_diagnoses(points, [diagnose(p) for p in points])
    assert pair["key"] == "blocks/fp32/n1 vs dense" and pair["kind"] == "workload"
    figures = evidence(pair)
    assert figures["speedup"] == pytest.approx(4.0)
    assert figures["bound_speedup"] == pytest.approx(dense_bound / blocks_bound)
    assert pair["predicted_s"] == pytest.approx(dense["median_s"] * blocks_bound / dense_bound)
    assert pair["next_step"].startswith(f"4x against dense where the bounds allow {8:.3g}x")
    assert "fell short of its predicted gain" in pair["next_step"]
    assert pair_diagnoses([blocks], [diagnose(blocks)]) == []  # no baseline measured: no pair
