import itertools
import json
import statistics
from dataclasses import replace

import pytest

from rooflab.backends.base import FLUSH_BYTES_ENV, CeilingLoad, LocalCache, flush_size
from rooflab.backends.cpu import CpuBackend
from rooflab.conditions.disturbance import DisturbanceSettings
from rooflab.config import ConfigError, validate_config
from rooflab.experiments.cache_edges import FALL
from rooflab.experiments.ceiling_plan import (
    QUICK,
    CeilingSettings,
    plateaus,
    settings_from_config,
    working_set_sizes,
)
from rooflab.experiments.ceiling_windows import time_workload
from rooflab.experiments.ceilings import run_ceilings
from rooflab.experiments.stopping import StoppingRule
from rooflab.records import read_run, to_table
from rooflab.vocabulary import measured_cache_bytes
from tests.conftest import UNJUDGED, clean_round, used_windows
from tests.table_rows import clock_or_reason

KiB, MiB = 1024, 1024 * 1024
# QUICK's sweep as the sweep tests set it, no quiet waited for (conftest.UNJUDGED)
QUICK_UNJUDGED = replace(QUICK, disturbance=DisturbanceSettings.from_config(UNJUDGED))
# A quick run of one triad sweep and one FMA dtype: what the retake tests drive (and, reading
# instead, the local-cache test)
TRIAD_ONLY = replace(
    QUICK_UNJUDGED, kernels=("triad",), window_s=0.002, fma_dtypes=("fp64",), blas_dtypes=()
)


def test_working_set_grid_is_finer_than_2x_and_spans_the_range():
    sizes = working_set_sizes(16 * KiB, 256 * MiB, 4)
    assert sizes[0] == 16 * KiB and sizes[-1] == 256 * MiB
    assert all(b / a <= 2**0.25 * 1.05 for a, b in itertools.pairwise(sizes))
    assert len(sizes) == 14 * 4 + 1


def test_plateaus_sit_inside_each_level_and_outside_the_one_before():
    windows = plateaus({"L1": 64 * KiB, "L2": MiB, "L3": 32 * MiB}, high=512 * MiB)
    assert windows == {
        "L1": (0, 32 * KiB),
        "L2": (128 * KiB, 512 * KiB),
        "L3": (2 * MiB, 16 * MiB),
        "DRAM": (4 * (64 * KiB + MiB + 32 * MiB), 512 * MiB),
    }


def test_settings_from_config_parses_sizes_with_units():
    config = validate_config(
        {"ceilings": {"min_working_set": "32 KiB", "max_working_set": "1 GiB"}}
    )
    settings = settings_from_config(config["ceilings"])
    assert settings.min_working_set_bytes == 32 * KiB
    assert settings.max_working_set_bytes == 2**30
    default = settings_from_config(validate_config({})["ceilings"])
    assert default.max_working_set_bytes is None and default.kernels == ("read", "copy", "triad")
    # `rooflab measure ceilings` without a config and the workflow with an empty one measure alike
    assert default == CeilingSettings()
    with pytest.raises(ConfigError, match=r"ceilings\.max_working_set: '1 GB/s'"):
        settings_from_config({**config["ceilings"], "max_working_set": "1 GB/s"})


@pytest.fixture(scope="module")
def quick_ceilings(quick_ceilings_run):
    rows, run_dir = quick_ceilings_run
    return rows, read_run(run_dir)


def test_quick_ceilings_name_every_level_and_path(quick_ceilings):
    rows, _ = quick_ceilings
    by_name = {row["name"]: row for row in rows}
    # one FMA roof per dtype and vector path of this CPU: the widest is the dtype's fp64_fma
    isas = CpuBackend().fma_isas()
    narrower = {f"{dtype}_fma_{isa}" for dtype in ("fp64", "fp32") for isa in isas[1:]}
    paths = {f"{dtype}_{path}" for dtype in ("fp64", "fp32") for path in ("fma", "blas")}
    assert set(by_name) == {"L1", "L2", "L3", "DRAM", *paths, *narrower}
    for row in rows:
        assert row["unit"] == ("B/s" if row["kind"] == "bandwidth" else "FLOP/s")
        assert row["value"] > 0 and row["method"]
        assert isinstance(row["roof_beaten"], bool) == (row["kind"] == "compute")
    for name in ("fp64_fma", "fp32_fma"):  # a dtype's roof is its widest path
        assert by_name[name]["isa"] == isas[0] and by_name[name]["vector_bits"] >= 128
    for row in rows:  # a level's best kernel: triad at the widest path, or triad_avx2, ...
        if row["kind"] == "bandwidth":
            assert row["kernel"] == ("triad" if row["isa"] == isas[0] else f"triad_{row['isa']}")
            assert row["vector_bits"] >= 128
    for name in narrower:
        isa = name.rsplit("_", 1)[1]
        assert by_name[name]["isa"] == isa
        assert isa in by_name[name]["method"].lower().replace("-", "")
    # Physical sanity that a broken kernel or byte count would violate (a margin of over 5x on
    # these machines; the fp32/fp64 FMA ratio has its own test below, as one run cannot judge it).
    assert by_name["L1"]["value"] > by_name["DRAM"]["value"]


def test_fp32_fma_chains_give_twice_the_fp64_flop_rate():
    # fp32 SIMD lanes are half as wide, so the same FMA chains do twice the FLOPs per second; a
    # wrong lane or FLOP count, or a chain that stops vectorising, moves the ratio off 2. One
    # ceilings run cannot judge it: a slow spell of a shared machine (seen here: seconds at about
    # 0.6x) can cover every round of one dtype. A pair of windows timed back to back sees the same
    # spell on both sides, so the median ratio of a few pairs is what is judged.
    backend = CpuBackend()
    threads = backend.default_threads()
    sides = []  # (workload, units per window), each window sized once
    for dtype in ("fp32", "fp64"):
        workload = backend.fma_workload(dtype, threads)
        sides.append(
            (workload, time_workload(backend, workload, 0.02, StoppingRule(min_samples=3)).units)
        )

    def rate(workload, units) -> float:
        return units * workload.amount_per_unit / backend.time_call(lambda: workload.run(units))

    ratios = [rate(*sides[0]) / rate(*sides[1]) for _ in range(11)]
    assert 1.6 < statistics.median(ratios) < 2.4, [round(r, 2) for r in ratios]


def test_quick_ceilings_keep_every_sweep_point_and_condition(quick_ceilings):
    rows, tables = quick_ceilings
    sweep = tables["ceiling_sweep"].to_pylist()
    assert len(sweep) >= 20
    assert {p["level"] for p in sweep} >= {"L1", "L2", "L3", "DRAM"}
    bandwidth = {(r["name"], r["kernel"]): r["value"] for r in rows if r["kind"] == "bandwidth"}
    for (level, kernel), value in bandwidth.items():
        on_plateau = [p for p in sweep if p["level"] == level and p["kernel"] == kernel]
        clean_points = [p for p in on_plateau if not p["disturbed"]]
        assert value == max(p["value"] for p in clean_points or on_plateau)
    conditions = tables["conditions"].to_pylist()
    assert all(clock_or_reason(c) for c in conditions), conditions
    assert all("throttle_reasons" in json.loads(c["unavailable"]) for c in conditions)
    (run,) = tables["runs"].to_pylist()
    assert run["kind"] == "ceilings" and json.loads(run["blas"])


def test_quick_ceilings_keep_every_window_as_a_sample_behind_each_value(quick_ceilings):
    _, tables = quick_ceilings
    samples: dict[str, list[dict]] = {}
    for sample in tables["samples"].to_pylist():
        samples.setdefault(sample["config_id"], []).append(sample)

    def used(config_id: str) -> list[dict]:
        return used_windows(samples[config_id])

    def rates(config_id: str) -> list[float]:
        return [s["amount"] / s["seconds"] for s in used(config_id)]

    # every sweep point: its n_windows clean windows (disturbed ones kept beside them, counted
    # in n_disturbed), whose median rate is the point's value
    for point in tables["ceiling_sweep"].to_pylist():
        windows = samples[point["config_id"]]
        assert sorted(s["sample_idx"] for s in windows) == list(range(len(windows)))
        assert sum(s["disturbed"] for s in windows) == point["n_disturbed"]
        assert len(windows) - point["n_disturbed"] == point["n_windows"] or point["disturbed"]
        assert {s["amount_unit"] for s in windows} == {"B"}
        assert all(s["clock_mhz"] is None or s["clock_mhz"] > 100 for s in windows)
        assert point["value"] == pytest.approx(statistics.median(rates(point["config_id"])))
        used_rates = rates(point["config_id"])
        if len(used_rates) > 1:
            p25, median, p75 = statistics.quantiles(used_rates, n=4, method="inclusive")
            assert point["iqr_ratio"] == pytest.approx((p75 - p25) / median)
        else:  # one clean window left after the re-takes: no spread, and the point is flagged
            assert point["iqr_ratio"] == 0 and point["disturbed"]
    by_name = {row["name"]: row for row in tables["ceilings"].to_pylist()}
    for dtype in ("fp64", "fp32"):
        # every FMA round is kept, and the ceiling is the best round's median: the samples show
        # how far the other rounds fell (a slow spell of a shared machine)
        fma = by_name[f"{dtype}_fma"]
        round_ids = [c for c in samples if c.startswith(f"fma/{dtype}/round")]
        assert len(round_ids) == fma["n_points"]
        medians = {c: statistics.median(rates(c)) for c in round_ids}
        # the best clean round (a clean round beats a faster disturbed one)
        key = {c: (clean_round(samples[c], QUICK.windows), m) for c, m in medians.items()}
        assert fma["config_id"] == max(key, key=key.get)
        assert fma["disturbed"] == (not key[fma["config_id"]][0])
        assert fma["value"] == pytest.approx(medians[fma["config_id"]])
        assert {s["amount_unit"] for c in round_ids for s in samples[c]} == {"FLOP"}
        # the library GEMM: the fastest median of QUICK.windows consecutive samples (in the
        # order taken), each doing 2n^3 FLOP; the method also names the median of them all
        blas = by_name[f"{dtype}_blas"]
        ordered = sorted(used(blas["config_id"]), key=lambda s: s["sample_idx"])
        seconds = [s["seconds"] for s in ordered]
        (amount,) = {s["amount"] for s in ordered}
        assert amount == 2 * QUICK.blas_n**3
        w = min(QUICK.windows, len(seconds))  # fewer clean samples than one window
        fastest = min(
            statistics.median(seconds[i : i + w]) for i in range(0, len(seconds) - w + 1, w)
        )
        assert blas["value"] == pytest.approx(amount / fastest)
        windowed = seconds[: len(seconds) // w * w]  # a short tail is in no window
        assert blas["value"] >= amount / statistics.median(windowed)
        best = (
            f"best of {len(seconds) // w} medians of {w} consecutive"
            if len(seconds) >= 2 * w
            else f"median of the first {w}"
        )
        assert f"{best} warm samples (the median of all" in blas["method"]
        assert f"the median of all {len(seconds)}" in blas["method"]
        assert "idle" not in blas["method"]  # QUICK samples at once
    for level in ("L1", "L2", "L3", "DRAM"):
        point = by_name[level]["config_id"]
        assert by_name[level]["value"] == pytest.approx(statistics.median(rates(point)))


class PerCoreL1Backend(CpuBackend):
    """The CPU backend with a local-cache sweep, as the CUDA backend has for its SMs' L1: each
    thread reads its own `working_set_bytes` (a real measurement), so the experiment's handling
    of per-unit working sets runs here without a GPU."""

    def __init__(self) -> None:
        super().__init__()
        l1d = next(
            c["size_bytes"]
            for c in self.identity["caches"]
            if c["level"] == 1 and c["type"] in ("Data", "Unified")
        )
        self.local_cache = LocalCache("L1", l1d, "read_local", "the L1d of one core")

    def local_cache_workload(self, working_set_bytes: int, threads: int) -> CeilingLoad:
        shared = self.stream_workload("read", working_set_bytes * threads, threads)
        return replace(shared, working_set_bytes=shared.amount_per_unit // threads)


def test_a_local_cache_is_swept_per_unit_and_its_plateau_is_inside_one_unit():
    backend = PerCoreL1Backend()
    l1d = backend.local_cache.bytes_per_unit
    sizes = {"min_working_set_bytes": 64 * KiB, "max_working_set_bytes": 2 * MiB}
    tables = run_ceilings(backend, replace(TRIAD_ONLY, kernels=("read",), **sizes))
    for name, rows in tables.items():
        to_table(name, rows)  # every row fits its schema
    local = [r for r in tables["ceiling_sweep"] if r["kernel"] == "read_local"]
    sizes = [r["working_set_bytes"] for r in local]
    assert sizes == sorted(sizes) and sizes[0] == 4 * KiB and sizes[-1] >= 3 * l1d
    assert sizes[-1] <= 4 * l1d  # per core, not per core x threads
    (ceiling,) = [r for r in tables["ceilings"] if r["kernel"] == "read_local"]
    # its plateau: up to its measured edge (within EDGE_BEYOND_REPORTED x one core's L1d), or,
    # where no fall shows, up to half of it
    edge = ceiling["cache_bytes_measured"]
    assert edge is None or edge <= 1.5 * l1d
    end = edge or l1d // 2
    for row in local:
        if row["working_set_bytes"] > end:
            assert row["level"] is None
    assert ceiling["name"] == "L1" and ceiling["working_set_max_bytes"] <= end
    on_plateau = [r for r in local if r["level"] == "L1"]
    clean_points = [r for r in on_plateau if not r["disturbed"]]
    assert ceiling["value"] == max(r["value"] for r in clean_points or on_plateau)
    assert ceiling["disturbed"] == (not clean_points)
    assert "per-SM working sets" in ceiling["method"] and "the L1d of one core" in ceiling["method"]
    # the shared sweep and its levels are untouched, and its explicit cap holds
    shared = [r["working_set_bytes"] for r in tables["ceiling_sweep"] if r["kernel"] == "read"]
    assert max(shared) <= 2 * MiB
    bandwidth_kernels = {r["kernel"] for r in tables["ceilings"] if r["kind"] == "bandwidth"}
    assert bandwidth_kernels == {"read", "read_local"}
    assert {c["config_id"] for c in tables["conditions"]} >= {"stream/read", "stream/read_local"}


def test_backends_without_a_local_cache_get_no_local_sweep(quick_ceilings):
    _, tables = quick_ceilings
    narrower = {f"triad_{isa}" for isa in CpuBackend().fma_isas()[1:]}  # triad_avx2 on AVX-512
    assert set(tables["ceiling_sweep"].column("kernel").to_pylist()) == {"triad", *narrower}


def test_quick_ceilings_find_each_cache_edge_and_stop_once_the_memory_plateau_holds(
    quick_ceilings,
):
    _, tables = quick_ceilings
    rows = tables["ceilings"].to_pylist()
    caches = CpuBackend().cache_bytes_by_level()
    sweep = [p for p in tables["ceiling_sweep"].to_pylist() if p["kernel"] == "triad"]
    # the points that may set an edge: clean, their median pinned within FALL (ceilings._settled)
    clean = {
        p["working_set_bytes"]: p["value"]
        for p in sweep
        if not p["disturbed"] and p["ci_rel_width"] is not None and p["ci_rel_width"] <= FALL
    }
    triad = {r["name"]: r for r in rows if r["kind"] == "bandwidth" and r["kernel"] == "triad"}
    for level in caches:  # a measured edge: its plateau's last point, every larger one below it
        edge = triad[level]["cache_bytes_measured"]
        if edge is not None:
            assert triad[level]["working_set_max_bytes"] == edge and edge in clean
            assert all(v < (1 - FALL) * triad[level]["value"] for s, v in clean.items() if s > edge)
    assert measured_cache_bytes(rows).keys() <= caches.keys()
    # The sweep stops past the last cache only on an established memory plateau (3 or more
    # points from 2x the last edge, spanning an octave, each within FALL of their median), its
    # ceiling from those at 4x the edge or more; else at its cap.
    memory = triad["DRAM"]
    largest = max(p["working_set_bytes"] for p in sweep)
    if "no plateau established" in memory["method"]:
        assert largest >= 0.97 * 8 * sum(caches.values())
    else:
        last_edge = triad[list(caches)[-1]]["cache_bytes_measured"]
        past = sorted(s for s in clean if s >= 2 * last_edge)
        run = next(past[i:] for i in range(len(past) - 3, -1, -1) if past[-1] >= 1.95 * past[i])
        agreeing = [clean[s] for s in run]
        assert len(run) >= 3 and largest == run[-1] == memory["working_set_max_bytes"]
        assert max(agreeing) <= (1 + FALL) * statistics.median(agreeing)
        assert min(agreeing) >= (1 - FALL) * statistics.median(agreeing)
        assert memory["working_set_min_bytes"] in run
        assert memory["working_set_min_bytes"] >= 4 * last_edge


@pytest.mark.slow  # rounds of real reads through a gigabyte flush
def test_a_cold_read_after_the_flush_sized_from_the_measured_edge_reads_at_dram_speed(
    quick_ceilings, monkeypatch
):
    """The flush sized from the measured last-level edge still evicts it: right after it, a read
    of a working set that fits in that level (half its edge) is no faster than a read of memory,
    while warm the same read is clearly faster. Reads alternate in one process, and each figure
    is a median of rounds, so a slow spell of a shared machine moves all three alike."""
    monkeypatch.delenv(FLUSH_BYTES_ENV)  # the flush this test judges is the rule's
    rows = quick_ceilings[1]["ceilings"].to_pylist()
    backend = CpuBackend()
    caches = backend.cache_bytes_by_level()
    last = max(caches, key=caches.get)
    edge = measured_cache_bytes(rows).get(last)
    if edge is None:
        pytest.skip(f"this machine's sweep showed no fall from its {last}")
    backend.size_flush(edge, "the quick ceilings run")
    # at most 2x the reported caches, or 2x the edge where the sweep found it past them (a VM's
    # last level can stream at cache speed past its reported size)
    limit = max(2 * sum(caches.values()), 2 * edge)
    assert backend.flush_bytes == flush_size(caches, edge)[0] <= limit
    assert f"{edge} B {last} edge" in backend.flush_method
    threads = backend.default_threads()
    inside = backend.stream_workload("read", edge // 2, threads)
    memory = backend.stream_workload("read", 2 * backend.flush_bytes, threads)

    def rate(workload) -> float:
        return workload.amount_per_unit / backend.time_call(lambda: workload.run(1))

    cold, warm, far = [], [], []
    for _ in range(9):
        far.append(rate(memory))
        backend.flush_cache()
        cold.append(rate(inside))
        inside.run(1)
        warm.append(rate(inside))
    cold, warm, far = (statistics.median(r) for r in (cold, warm, far))
    figures = f"cold {cold / 1e9:.1f}, warm {warm / 1e9:.1f}, memory {far / 1e9:.1f} GB/s"
    assert warm > 1.2 * far, figures  # the level is faster than memory: the check can fail
    assert cold < (1 + FALL) * far, figures


def test_a_disturbed_point_past_a_mebibyte_is_measured_again_as_a_point_of_its_own(monkeypatch):
    """A disturbed sweep point sets no edge: one of at least RETAKE_FROM is measured again at
    once, 1/64 larger, and both are kept (the first flagged); a retake is not retaken, and a
    sweep retakes at most RETAKES points. Which points are disturbed is set here: the first five
    measured of at least RETAKE_FROM, every other point clean."""
    from rooflab.experiments import ceilings

    order, made, asked = [], [], []  # measured; made disturbed here; points retaken

    def sweep_point(workload, windows, kernel, config_id):
        point = measured(workload, windows, kernel, config_id)
        order.append(point.working_set)
        disturbed = point.working_set >= ceilings.RETAKE_FROM and len(made) < 5
        if disturbed:
            made.append(point.working_set)
        reasons = ["made disturbed by the test"] if disturbed else []
        # every other point settled (its median pinned), so only the made ones are retaken
        stop = point.stop if disturbed else replace(point.stop, rel_width=0.01)
        return point._replace(verdict=replace(point.verdict, reasons=reasons), stop=stop)

    def retake(point, size, *args):
        again = decide(point, size, *args)
        if again is not None:
            asked.append(size)
        return again

    measured, decide = ceilings._sweep_point, ceilings._retake
    monkeypatch.setattr(ceilings, "_sweep_point", sweep_point)
    monkeypatch.setattr(ceilings, "_retake", retake)
    settings = replace(TRIAD_ONLY, max_working_set_bytes=32 * MiB)
    tables = run_ceilings(CpuBackend(), settings)
    sweep = {r["working_set_bytes"]: r for r in tables["ceiling_sweep"] if r["kernel"] == "triad"}
    assert all(sweep[size]["disturbed"] for size in made)  # kept, flagged
    # a point, its retake (not retaken), a second point and its retake, then a third point: the
    # sweep's RETAKES (2) are spent (retakes asked by the working set requested, measured in
    # whole chunks per thread)
    first, first_again, second, second_again, _ = made
    assert ceilings.RETAKES == 2 and asked == pytest.approx([first, second], rel=1e-3)
    for size, again in ((first, first_again), (second, second_again)):
        assert order[order.index(size) + 1] == again  # at once
        assert again / size == pytest.approx(65 / 64, rel=5e-3)  # 1/64 larger


def test_a_clean_point_whose_median_is_not_pinned_sets_no_edge_and_is_measured_again(
    monkeypatch,
):
    """A clean point whose interval is wider than FALL cannot say which plateau it is on (a
    32 MB copy at 45.9 GB/s, interval 29 % wide, between points of 57 split a campaign's L3
    plateau): it sets no edge and, past RETAKE_FROM, is measured again at once, 1/64 larger.
    The first point of at least RETAKE_FROM is made so here: half its rate, interval 30 %."""
    from rooflab.experiments import ceilings

    order, made = [], []

    def sweep_point(workload, windows, kernel, config_id):
        point = measured(workload, windows, kernel, config_id)
        order.append(point.working_set)
        verdict = replace(point.verdict, reasons=[])  # every point clean
        if point.working_set >= ceilings.RETAKE_FROM and not made:
            made.append(point.working_set)
            unpinned = replace(point.stop, rel_width=0.3)
            return point._replace(rate=point.rate / 2, verdict=verdict, stop=unpinned)
        return point._replace(verdict=verdict, stop=replace(point.stop, rel_width=0.01))

    measured = ceilings._sweep_point
    monkeypatch.setattr(ceilings, "_sweep_point", sweep_point)
    settings = replace(TRIAD_ONLY, max_working_set_bytes=16 * MiB)
    run_ceilings(CpuBackend(), settings)
    again = order[order.index(made[0]) + 1]
    assert again / made[0] == pytest.approx(65 / 64, rel=5e-3)
    assert order.count(again) == 1  # measured once, settled, not retaken


def test_inside_the_memory_window_every_unsettled_point_is_retaken_once_past_the_budget():
    """Below the memory's window a sweep retakes at most RETAKES points; inside it every point
    that is not settled is retaken once (cheaper than the octave a missing point costs), and a
    retake is not retaken."""
    from rooflab.conditions.disturbance import Verdict
    from rooflab.experiments import ceilings
    from rooflab.experiments.stopping import Stop
    from rooflab.vocabulary import StopReason

    def point(size, disturbed=True):
        verdict = Verdict(reasons=["made disturbed by the test"] if disturbed else [])
        stop = Stop(StopReason.CONVERGED, 0.01)
        return ceilings.SweepPoint(size, 1e10, None, f"ws{size}", verdict, {}, stop, None)

    memory_from = 256 * MiB
    retakes = [8 * MiB + 128 * KiB, 16 * MiB + 256 * KiB]  # RETAKES spent below the window

    def retake(size, disturbed=True):
        return ceilings._retake(point(size, disturbed), size, {}, [], retakes, memory_from)

    assert ceilings.RETAKES == 2
    assert retake(32 * MiB) is None  # below the window: the budget is spent
    assert retake(512 * MiB) == 512 * MiB + 8 * MiB
    assert retake(512 * MiB, disturbed=False) is None  # settled
    retakes.extend([512 * MiB + 8 * MiB, 1024 * MiB + 16 * MiB, 2048 * MiB + 32 * MiB])
    assert retake(4096 * MiB) == 4096 * MiB + 64 * MiB  # however many were taken inside it
    assert retake(1024 * MiB + 16 * MiB) is None  # a retake is not retaken
