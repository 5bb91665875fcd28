"""rooflab.counters.points (issue 7): calibration against 2MNK, pairing a replay with the timing
of its cache state, hierarchical Roofline points (fail closed) and model vs counted bytes,
with constructed inputs (our own structures)."""

from __future__ import annotations

import math

import pytest

from rooflab.counters import (
    Calibration,
    Pairing,
    PairingError,
    UntrustedCounts,
    bypassed_levels,
    calibrate,
    hierarchical_points,
    model_vs_counted,
    pair,
)
from tests.counters_fixtures import CONFIG

# -- calibration ---------------------------------------------------------------------------------

M, N, K = 64, 4096, 4096
F = 2 * M * N * K


@pytest.mark.parametrize(
    ("counted", "trusted", "words"),
    [
        (F, True, "counted/2MNK = 1, within 1%"),
        (F * 1.005, True, "within 1%"),
        (F * 0.995, True, "within 1%"),
        (F * 1.0099, True, "within 1%"),
        (F * 1.0101, False, "more than 1%"),
        (F * 1.02, False, "counted/2MNK = 1.02 (off by 2.00%, more than 1%)"),
        (F * 0.98, False, "counted/2MNK = 0.98 (off by 2.00%, more than 1%)"),
        (F / 2, False, "counted/2MNK = 0.5 (off by 50.00%"),
        (0, False, f"counter reads zero for 2MNK = {F} FLOP"),
        (None, False, "counter missing"),
        (math.nan, False, "not a count"),
        (-1.0, False, "not a count"),
    ],
)
def test_calibrate(counted, trusted, words):
    result = calibrate(counted, M, N, K, path="bf16_tensor")
    assert result.trusted is trusted
    assert result.expected_flops == F
    assert result.reason.startswith("bf16_tensor: ")
    assert words in result.reason
    if not trusted:
        assert "untrusted" in result.reason
    if counted is not None and math.isfinite(counted) and counted >= 0:
        assert result.ratio == counted / F  # stored: how far the counter was off
    else:
        assert result.ratio is None


def test_calibrate_refuses_nonsense_shapes_and_tolerances():
    with pytest.raises(ValueError):
        calibrate(F, 0, N, K)
    for tolerance in (1.5, 1.0, -0.01):
        with pytest.raises(ValueError, match="tolerance must be in"):
            calibrate(F, M, N, K, tolerance=tolerance)
    assert calibrate(F, M, N, K, tolerance=0.0).trusted  # an exact count passes a zero tolerance
    assert calibrate(2 * N * K, 1, N, K).trusted  # M = 1, the weight-reuse sweep's first point
    assert not calibrate(F + 2, M, N, K, tolerance=0.0).trusted


# -- pairing ---------------------------------------------------------------------------------------


def timing(cache_state, median_s, run_id="20260101T000000Z-aaaa", config_id=CONFIG, **extra):
    return {
        "run_id": run_id,
        "config_id": config_id,
        "cache_state": cache_state,
        "median_s": median_s,
        "sweep": "main",
        "kind": "gemm",
        "m": M,
        "n": N,
        "k": K,
        "dtype": "bf16",
        "layout": "nn",
        "flops": 2 * M * N * K,
        "achieved_flops_per_s": 2 * M * N * K / median_s if median_s else None,
        **extra,
    }


TIMINGS = [timing("warm", 20e-6), timing("cold", 35e-6), timing("cold", 1.0, config_id="other")]


def test_flushed_replay_pairs_with_cold_and_no_flush_with_warm():
    cold = pair({"config_id": CONFIG, "cache_control": "all"}, TIMINGS)
    assert (cold.cache_state, cold.timing["median_s"]) == ("cold", 35e-6)
    assert cold.label == "flushed replay ↔ cold timing"
    warm = pair({"config_id": CONFIG, "cache_control": "none"}, TIMINGS)
    assert (warm.cache_state, warm.timing["median_s"]) == ("warm", 20e-6)
    assert warm.label == "no-flush replay ↔ warm timing"


def test_never_paired_across_cache_states():
    only_warm = [timing("warm", 20e-6)]
    with pytest.raises(PairingError, match=r"pairs only with a cold timing.*never paired across"):
        pair({"config_id": CONFIG, "cache_control": "all"}, only_warm)
    only_cold = [timing("cold", 35e-6)]
    with pytest.raises(PairingError, match="pairs only with a warm timing"):
        pair({"config_id": CONFIG, "cache_control": "none"}, only_cold)
    with pytest.raises(PairingError, match="no pairing rule"):
        pair({"config_id": CONFIG, "cache_control": "some"}, TIMINGS)


def test_pairing_takes_the_newest_run_of_the_same_machine():
    timings = [
        timing("cold", 30e-6, run_id="20260102T000000Z-bbbb", machine_id="a"),
        timing("cold", 40e-6, run_id="20260101T000000Z-aaaa", machine_id="a"),
        timing("cold", 10e-6, run_id="20260103T000000Z-cccc", machine_id="b"),
    ]
    chosen = pair({"config_id": CONFIG, "cache_control": "all", "machine_id": "a"}, timings)
    assert chosen.timing["median_s"] == 30e-6
    with pytest.raises(PairingError, match="on machine c"):
        pair({"config_id": CONFIG, "cache_control": "all", "machine_id": "c"}, timings)
    with pytest.raises(PairingError, match="no usable median_s"):
        pair({"config_id": CONFIG, "cache_control": "all"}, [timing("cold", 0.0)])


# -- hierarchical points (fail closed) -------------------------------------------------------------

CEILINGS = {"HBM": 4e12, "L2": 1.2e13, "bf16_tensor": 7e14}


def trusted() -> Calibration:
    return calibrate(F * 1.002, M, N, K, path="bf16_tensor")


def cold_pairing() -> Pairing:
    return pair({"config_id": CONFIG, "cache_control": "all"}, TIMINGS)


def cold_points(levels: dict, **kwargs) -> list[dict]:
    """The trusted bf16_tensor points of the cold pairing at counted bytes `levels`."""
    return hierarchical_points(cold_pairing(), trusted(), levels, CEILINGS, "bf16_tensor", **kwargs)


@pytest.mark.parametrize("counted", [0, None, F * 1.02, F / 2])
def test_untrusted_counts_never_reach_a_point(counted):
    untrusted = calibrate(counted, M, N, K, path="bf16_tensor")
    levels = {"HBM": 3.4e7, "L2": 1e8}
    with pytest.raises(UntrustedCounts, match="no Roofline point"):
        hierarchical_points(cold_pairing(), untrusted, levels, CEILINGS, "bf16_tensor")


def test_a_calibration_admits_only_its_own_path_and_shape():
    levels = {"HBM": 3.4e7}
    with pytest.raises(UntrustedCounts, match="cannot admit a point on path fp16_tensor"):
        hierarchical_points(
            cold_pairing(), trusted(), levels, CEILINGS | {"fp16_tensor": 1}, "fp16_tensor"
        )
    other_shape = calibrate(2 * 128 * N * K, 128, N, K, path="bf16_tensor")
    with pytest.raises(ValueError, match="calibration is for"):
        hierarchical_points(cold_pairing(), other_shape, levels, CEILINGS, "bf16_tensor")


def test_hierarchical_points_name_the_limiting_level():
    # F = 2^31 FLOP. HBM: I = F/3.4e7 = 63.2, B·I = 2.5e14; L2: I = F/2e8 = 10.7, B·I = 1.3e14
    levels = {"HBM": 3.4e7, "L2": 2e8, "L1": 5e8}
    rows = cold_points(levels, counters_run_id="c1")
    assert [r["level"] for r in rows] == ["HBM", "L2", "L1"]
    by_level = {r["level"]: r for r in rows}
    for level, q in levels.items():
        assert by_level[level]["intensity"] == pytest.approx(F / q)
        assert by_level[level]["bytes"] == q
    assert by_level["HBM"]["attainable_flops_per_s"] == pytest.approx(4e12 * F / 3.4e7)
    assert by_level["L2"]["attainable_flops_per_s"] == pytest.approx(1.2e13 * F / 2e8)
    # each level's bound: its bytes at its bandwidth, or the compute time where that is longer
    assert by_level["HBM"]["bound_s"] == pytest.approx(3.4e7 / 4e12)
    assert by_level["L2"]["bound_s"] == pytest.approx(2e8 / 1.2e13)
    assert {r["limiting_level"] for r in rows} == {"L2"}
    assert {r["limiter"] for r in rows} == {"L2"}
    hier = 1.2e13 * F / 2e8
    for row in rows:
        assert row["hierarchical_attainable_flops_per_s"] == pytest.approx(hier)
    # L1 has no measured ceiling here: its intensity is kept, no bound is made up
    assert by_level["L1"]["bandwidth_b_per_s"] is None
    assert by_level["L1"]["attainable_flops_per_s"] is None
    for row in rows:
        assert row["q_source"] == "counters"
        assert row["flops"] == F  # useful work; the counted FLOPs only admitted the point
        assert row["flops_counted"] == pytest.approx(F * 1.002)
        assert row["median_s"] == 35e-6  # the cold timing's median, never a counter duration
        assert row["achieved_flops_per_s"] == pytest.approx(F / 35e-6)
        assert row["efficiency"] == pytest.approx(F / 35e-6 / hier)
        assert row["pairing"] == "flushed replay ↔ cold timing"
        assert row["cache_state"] == "cold" and row["cache_control"] == "all"
        assert row["counters_run_id"] == "c1"


def test_compute_limits_when_every_level_allows_more():
    # HBM: I = 2147, B·I = 8.6e15; L2: I = 1074, B·I = 1.3e16; both above C = 7e14
    levels = {"HBM": 1e6, "L2": 2e6}
    rows = cold_points(levels)
    assert {r["limiter"] for r in rows} == {"compute"}
    assert {r["limiting_level"] for r in rows} == {"HBM"}  # still the tighter of the two levels
    assert {r["hierarchical_attainable_flops_per_s"] for r in rows} == {7e14}
    assert all(r["attainable_flops_per_s"] == 7e14 for r in rows)
    assert all(r["bound_s"] == pytest.approx(F / 7e14) for r in rows)


def test_hierarchical_points_need_a_ceiling():
    with pytest.raises(ValueError, match="no bandwidth ceiling"):
        cold_points({"L1": 1e8})
    with pytest.raises(ValueError, match="no compute ceiling"):
        hierarchical_points(cold_pairing(), trusted(), {"HBM": 1e8}, {"HBM": 1e12}, "bf16_tensor")


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_hierarchical_points_refuse_counted_bytes_that_are_not_a_count(bad):
    with pytest.raises(ValueError, match="counted bytes must be finite and >= 0"):
        cold_points({"HBM": 3.4e7, "L2": bad})


def test_zero_counted_bytes_at_a_level_give_no_memory_bound_there():
    # zero is a count (warm operands that never left the L2), not a missing counter
    rows = cold_points({"HBM": 0.0, "L2": 2e8})
    hbm = next(r for r in rows if r["level"] == "HBM")
    assert hbm["intensity"] == math.inf and hbm["attainable_flops_per_s"] == 7e14
    assert {r["limiting_level"] for r in rows} == {"L2"}


def test_a_level_counting_fewer_bytes_than_the_one_outside_it_gets_no_point():
    # as recorded on an H200 (tests/fixtures/ncu/gemm/bf16_m4096_n4096_k4096_cache-all): cuBLAS
    # loads through TMA, so l1tex__t_bytes saw 12,160 B against 1.0 GB at L2
    levels = {"HBM": 1.767e8, "L2": 1.017e9, "L1": 12_160.0}
    assert set(bypassed_levels(levels)) == {"L1"}
    assert "12160 B counted, under 0.5 x the 1.017e+09 B at L2" in bypassed_levels(levels)["L1"]
    rows = cold_points(levels)
    assert [r["level"] for r in rows] == ["HBM", "L2"]
    # L1 at zero: no point either; L2 below HBM: the same rule one level out
    assert set(bypassed_levels({"HBM": 3.4e7, "L2": 6.4e7, "L1": 0.0})) == {"L1"}
    assert set(bypassed_levels({"HBM": 3.4e7, "L2": 0.0})) == {"L2"}
    # equal counts, more inside, or a little less (the H200's SIMT SGEMM, fp32 2048^3: 0.99 x
    # its L2 bytes at L1): every level kept
    assert bypassed_levels({"HBM": 3.4e7, "L2": 3.4e7, "L1": 5e8}) == {}
    assert bypassed_levels({"HBM": 3.614e7, "L2": 4.23e8, "L1": 4.194e8}) == {}
    assert set(bypassed_levels({"HBM": 3.614e7, "L2": 4.23e8, "L1": 2.1e8})) == {"L1"}


# -- model vs counted bytes ------------------------------------------------------------------------


def test_model_vs_counted_direction():
    over = model_vs_counted(34_078_720, 12_000_000)
    assert over.direction == "model over-counts"
    assert over.ratio == pytest.approx(12_000_000 / 34_078_720)
    assert "by 2.84x" in over.statement
    under = model_vs_counted(34_078_720, 40_000_000)
    assert under.direction == "model under-counts" and under.ratio > 1
    assert "under-counts by 1.17x" in under.statement
    assert model_vs_counted(1e6, 1.005e6).direction == "agrees"
    assert model_vs_counted(1e6, 0).direction == "model over-counts"
    with pytest.raises(ValueError):
        model_vs_counted(0, 1e6)
    with pytest.raises(ValueError):
        model_vs_counted(1e6, math.nan)
