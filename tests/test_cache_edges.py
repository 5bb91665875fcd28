"""The cache edges a sweep finds from its own points, and the flush sized from the last one, on
curves of the shapes real sweeps have had (rates in GB/s; the finder reads only ratios)."""

import itertools

import pytest

from rooflab.backends.base import FLUSH_BYTES_ENV, FLUSH_SAFETY, BackendError, flush_size
from rooflab.experiments.cache_edges import (
    FALL,
    MEMORY_ABOVE,
    confirming_size,
    find_edges,
    level_windows,
    memory_plateau,
)
from rooflab.vocabulary import measured_cache_bytes

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# This project's 2-core Xeon VM: L1d 48 KiB and L2 2 MiB per core, an L3 that reads 480 MiB (the
# socket's) while the VM's share ends near 64 MiB; C triad: 56 GB/s at 8-67 MB, 35 at 134 MB,
# 30 at 268 MB, 29.7 at 537 MB.
VM_CACHES = {"L1": 96 * KiB, "L2": 4 * MiB, "L3": 480 * MiB}
VM_TRIAD = {
    16 * KiB: 210.0,
    32 * KiB: 290.0,
    47 * KiB: 300.0,
    64 * KiB: 295.0,
    90 * KiB: 190.0,
    128 * KiB: 150.0,
    256 * KiB: 148.0,
    512 * KiB: 146.0,
    1 * MiB: 144.0,
    2 * MiB: 140.0,
    3 * MiB: 118.0,
    4 * MiB: 90.0,
    8 * MiB: 56.0,
    16 * MiB: 56.5,
    32 * MiB: 55.8,
    64 * MiB: 56.0,
    90 * MiB: 47.0,
    128 * MiB: 35.0,
    256 * MiB: 30.0,
    362 * MiB: 29.8,
    512 * MiB: 29.7,
}


def test_the_vm_s_edges_are_where_its_rate_falls_and_its_l3_is_far_below_the_reported():
    edges = {e.level: e for e in find_edges(VM_TRIAD, VM_CACHES)}
    assert {level: e.measured_bytes for level, e in edges.items()} == {
        "L1": 64 * KiB,
        "L2": 2 * MiB,  # 3 MiB (118) is more than FALL below the L2's plateau (146)
        "L3": 64 * MiB,
    }
    assert edges["L3"].reported_bytes == 480 * MiB
    windows, _ = level_windows(VM_TRIAD, VM_CACHES, "DRAM", 4 * GiB)
    # each cache's plateau as its points show it (16 KiB is below the L1's: a call's fixed cost;
    # 4 MiB, still falling from the L2's, is on none), the memory's established: 3 points
    # spanning an octave within FALL of their median, from 4x the L3's edge
    assert windows == {
        "L1": (32 * KiB, 64 * KiB),
        "L2": (192 * KiB, 2 * MiB),  # from 2x the L1 (96 KiB reported): no point half in L1
        "L3": (8 * MiB, 64 * MiB),
        "DRAM": (256 * MiB, 512 * MiB),
    }


def test_a_level_s_window_starts_past_the_one_before_it():
    # A quick triad sweep on this VM (GB/s by working set, 2026-12-06): no L2 fall was seen and
    # the L3's edge (3 MB) lay below 2x the 2 MiB L2 reported, so the L3's window fell back to
    # its plateau's run from 81 KiB, over the L2's, and the L3 roof was taken from a 1 MB point
    # the sweep placed on the L2.
    rates = {
        15360: 420.1, 30720: 431.5, 43008: 414.6, 61440: 333.0, 82944: 199.2, 116736: 197.4,
        135168: 194.9, 221184: 190.7, 423936: 191.5, 814080: 186.0, 1029120: 201.3,
        1563648: 192.3, 2995200: 175.3, 4279296: 170.4, 5744640: 160.2, 11019264: 148.4,
    }  # fmt: skip
    caches = {"L1": 64 * KiB, "L2": 2 * MiB, "L3": 32 * MiB}
    assert find_edges(rates, caches)[2].plateau_from == 82944
    windows, _ = level_windows(rates, caches, "DRAM", GiB)
    assert windows["L2"] == (128 * KiB, MiB) and windows["L3"] == (MiB + 1, 2995200)
    assert all(high < low for (_, high), (low, _) in itertools.pairwise(windows.values()))


def test_the_memory_plateau_is_established_only_past_the_last_fall_by_agreeing_points():
    edges = find_edges(VM_TRIAD, VM_CACHES)
    assert memory_plateau(VM_TRIAD, edges) == (256 * MiB, 512 * MiB)
    # the sweep as it climbs: on the L3's plateau nothing is established, nor while it falls
    for top in (64 * MiB, 128 * MiB, 256 * MiB):
        climbing = {s: r for s, r in VM_TRIAD.items() if s <= top}
        assert memory_plateau(climbing, find_edges(climbing, VM_CACHES)) is None
    # two agreeing points an octave apart: their midpoint is measured next, not the next octave
    two = {s: r for s, r in VM_TRIAD.items() if s != 362 * MiB}
    assert memory_plateau(two, find_edges(two, VM_CACHES)) is None
    middle = confirming_size(two, find_edges(two, VM_CACHES))
    assert 256 * MiB < middle < 512 * MiB and abs(middle - 362 * MiB) < 2 * MiB
    assert confirming_size(VM_TRIAD, edges) is None  # already established
    # a point past the edge still falling (partly cached) keeps it open
    falling = {**VM_TRIAD, 512 * MiB: 29.7 * (1 - 2 * FALL)}
    assert memory_plateau(falling, find_edges(falling, VM_CACHES)) is None


def test_points_from_2x_the_edge_establish_the_memory_plateau_its_ceiling_from_4x():
    """A campaign's read sweep on this VM (2026-12-02; L3 edge 108.5 MB; its 512 and 520 MB
    points disturbed, left out): 246, 257 MB and 1.02 GB agree, so 1.02 GB establishes the
    plateau (from 4x the edge alone it took 1.46 and 2.04 GB more); its ceiling comes from 1.02 GB,
    the only agreeing point past 4x the edge. Without a point that far, nothing is established."""
    MB = 1_000_000
    read = {
        8.6 * MB: 57.7, 16.3 * MB: 57.4, 32.4 * MB: 56.9, 64.6 * MB: 55.7, 91.3 * MB: 54.5,
        108.5 * MB: 51.8, 128.9 * MB: 48.5, 151.6 * MB: 45.8, 246.6 * MB: 30.5,
        257.0 * MB: 32.3, 1021.6 * MB: 30.2,
    }  # fmt: skip
    read = {int(size): rate for size, rate in read.items()}
    edges = find_edges(read, VM_CACHES)
    assert edges[-1].measured_bytes == int(108.5 * MB)
    assert memory_plateau(read, edges) == (int(1021.6 * MB), int(1021.6 * MB))
    # 2x-4x the edge only: agreeing over an octave, but not far enough past it
    near = {size: rate for size, rate in read.items() if size < 200 * MB}
    near.update({220 * MB: 31.0, 300 * MB: 30.9, 430 * MB: 30.4})
    assert memory_plateau(near, find_edges(near, VM_CACHES)) is None


# A small-L3 machine (the project's other 2-vCPU VM: a 32 MiB L3 that is the VM's own).
SMALL_CACHES = {"L1": 64 * KiB, "L2": 2 * MiB + 512 * KiB, "L3": 32 * MiB}
SMALL_TRIAD = {
    16 * KiB: 190.0,
    32 * KiB: 200.0,
    64 * KiB: 120.0,
    128 * KiB: 95.0,
    256 * KiB: 96.0,
    512 * KiB: 94.0,
    1 * MiB: 92.0,
    2 * MiB: 70.0,
    4 * MiB: 48.0,
    8 * MiB: 47.0,
    16 * MiB: 45.0,
    24 * MiB: 38.0,
    32 * MiB: 26.0,
    64 * MiB: 19.0,
    128 * MiB: 17.6,
    181 * MiB: 17.4,
    256 * MiB: 17.5,
}


def test_a_small_l3_machine_finds_its_edges_and_memory_no_later_than_its_reported_l3_did():
    windows, edges = level_windows(SMALL_TRIAD, SMALL_CACHES, "DRAM", 8 * 35 * MiB)
    assert [e.measured_bytes for e in edges] == [32 * KiB, 1 * MiB, 16 * MiB]
    assert windows["L3"] == (5 * MiB, 16 * MiB)  # from 2x the L2 (2.5 MiB reported)
    # the memory from 4x the L3's edge (64 MiB), established by 128, 181 and 256 MiB; the
    # reported rule started it at 4x the summed caches (about 140 MiB) and swept to 280 MiB
    assert windows["DRAM"] == (128 * MiB, 256 * MiB)


def test_noise_and_a_slow_point_on_a_plateau_move_no_edge():
    noisy = dict(VM_TRIAD)
    for index, size in enumerate(sorted(noisy)):
        noisy[size] *= 1 + (0.04 if index % 2 else -0.04) * (size < 90 * MiB)
    noisy[16 * MiB] = 41.0  # a slow spell of the shared machine: off the plateau, then back
    edges = [e.measured_bytes for e in find_edges(noisy, VM_CACHES)]
    assert edges == [64 * KiB, 2 * MiB, 64 * MiB]


def test_a_level_whose_fall_is_not_seen_keeps_its_reported_size_and_says_so():
    # a narrower path's sweep ends on the L3's plateau (ceiling_plan.narrower_sweep_end)
    narrow = {s: r for s, r in VM_TRIAD.items() if s <= 8 * MiB}
    windows, edges = level_windows(narrow, VM_CACHES, "DRAM", 4 * GiB)
    assert edges[-1].level == "L3" and edges[-1].measured_bytes is None
    assert windows["L3"] == (8 * MiB, 240 * MiB)  # [2x the L2, 0.5x the L3], as reported
    assert windows["DRAM"] == (int(MEMORY_ABOVE * sum(VM_CACHES.values())), 4 * GiB)
    assert memory_plateau(narrow, edges) is None and confirming_size(narrow, edges) is None
    # an L2 as fast as the L3 behind it: its fall lies far past its reported size, so it belongs
    # to the L3; the L2 keeps its reported 4 MiB and the L3's plateau starts past it
    flat = {s: (140.0 if 128 * KiB <= s <= 64 * MiB else r) for s, r in VM_TRIAD.items()}
    edges = {e.level: e.measured_bytes for e in find_edges(flat, VM_CACHES)}
    assert edges == {"L1": 64 * KiB, "L2": None, "L3": 64 * MiB}


# An H100's sweep (L2 50 MiB reported, read through both partitions): the rate climbs while a
# launch's fixed cost matters, holds on the L2, falls from about 40 MiB, then HBM; the points from
# which the HBM ceiling may come start at CudaBackend.memory_sweep_from (4x the reported L2).
GPU_READ = {
    1 * MiB: 2.1,
    2 * MiB: 3.6,
    4 * MiB: 5.4,
    8 * MiB: 6.8,
    16 * MiB: 7.1,
    24 * MiB: 7.0,
    32 * MiB: 6.7,
    40 * MiB: 6.5,
    48 * MiB: 4.9,
    64 * MiB: 3.6,
    128 * MiB: 3.1,
    200 * MiB: 3.0,
    283 * MiB: 3.05,
    400 * MiB: 3.02,
}


def test_a_gpu_l2_edge_and_the_hbm_plateau_past_the_one_pass_threshold(monkeypatch):
    monkeypatch.delenv(FLUSH_BYTES_ENV)
    gpu_l2 = {"L2": 50 * MiB}
    edges = find_edges(GPU_READ, gpu_l2)
    assert edges[0].measured_bytes == 40 * MiB
    one_pass = 4 * 50 * MiB
    assert memory_plateau(GPU_READ, edges, one_pass) == (200 * MiB, 400 * MiB)
    windows, _ = level_windows(GPU_READ, gpu_l2, "HBM", 400 * MiB, one_pass)
    assert windows == {"L2": (8 * MiB, 40 * MiB), "HBM": (200 * MiB, 400 * MiB)}
    # the points below the threshold count for nothing there; without it, from 4x the edge
    fewer = {s: r for s, r in GPU_READ.items() if s < 400 * MiB} | {160 * MiB: 3, 320 * MiB: 3}
    assert memory_plateau(fewer, edges, one_pass) is None
    assert memory_plateau(fewer, edges) == (160 * MiB, 320 * MiB)
    # the flush from that edge: 8x it would pass 2x the reported L2; the reported rule caps it
    assert flush_size(gpu_l2, 40 * MiB)[0] == 100 * MiB
    assert flush_size(gpu_l2, 10 * MiB)[0] == 80 * MiB


def test_the_flush_is_sized_from_the_measured_last_level_within_the_reported_rule(monkeypatch):
    monkeypatch.delenv(FLUSH_BYTES_ENV)
    size, why = flush_size(VM_CACHES)  # no ceilings run: the reported rule
    assert size == 2 * sum(VM_CACHES.values()) and why == "2x the summed reported cache capacity"
    size, why = flush_size(VM_CACHES, 64 * MiB)
    assert size == FLUSH_SAFETY * 64 * MiB and f"the {64 * MiB} B L3 edge measured" in why
    # never below 2x the private levels, nor 2x the edge, never above the reported rule
    assert flush_size(VM_CACHES, 1 * MiB)[0] == 2 * (96 * KiB + 4 * MiB)
    assert flush_size(SMALL_CACHES, 8 * MiB)[0] == 64 * MiB
    assert flush_size(SMALL_CACHES, 24 * MiB)[0] == 2 * sum(SMALL_CACHES.values())
    assert flush_size({"L2": 50 * MiB}, 80 * MiB)[0] == 160 * MiB


def test_a_flush_set_by_hand_replaces_the_rules_and_says_what_they_gave(monkeypatch):
    monkeypatch.setenv(FLUSH_BYTES_ENV, str(8 * MiB))
    size, why = flush_size(VM_CACHES, 64 * MiB)
    assert size == 8 * MiB
    assert why.startswith(f"set by ${FLUSH_BYTES_ENV}; by its rule {FLUSH_SAFETY * 64 * MiB} B")
    for bad in ("8 MiB", "-1", "0", "1e6"):
        monkeypatch.setenv(FLUSH_BYTES_ENV, bad)
        with pytest.raises(BackendError, match=rf"\${FLUSH_BYTES_ENV}='{bad}': give a whole"):
            flush_size(VM_CACHES)


def test_the_measured_capacity_is_the_largest_edge_of_a_run_s_sweeps():
    rows = [
        {"kind": "bandwidth", "name": "L3", "cache_bytes_measured": 64 * MiB},
        {"kind": "bandwidth", "name": "L3", "cache_bytes_measured": 90 * MiB},
        {"kind": "bandwidth", "name": "L2", "cache_bytes_measured": None},
        {"kind": "bandwidth", "name": "DRAM"},
        {"kind": "compute", "name": "fp64_fma"},
    ]
    assert measured_cache_bytes(rows) == {"L3": 90 * MiB}


def test_a_point_just_past_an_edge_that_still_hits_the_level_below_sets_no_ceiling():
    """This VM's triad of 2026-12-02 (the default campaign, GB/s): at 141 and 159 KiB, just past
    the L1's 90 KiB edge, the points still hit the L1 in part and read 263 and 249 on an L2
    plateau of 241-244; within FALL, they join that plateau, but the L2's ceiling is taken from
    PLATEAU_ABOVE x the L1 on (its reported or measured size, the larger)."""
    triad = {
        15 * KiB: 901.6, 33 * KiB: 925.2, 48 * KiB: 913.1, 63 * KiB: 929.7, 90 * KiB: 948.0,
        108 * KiB: 369.5, 126 * KiB: 292.8, 141 * KiB: 263.2,
        159 * KiB: 249.0, 195 * KiB: 241.1, 252 * KiB: 240.5, 504 * KiB: 240.9,
        1005 * KiB: 243.5, 2004 * KiB: 243.7, 2385 * KiB: 244.2, 2832 * KiB: 200.1,
        3363 * KiB: 168.5, 8 * MiB: 61.0, 16 * MiB: 60.5, 32 * MiB: 60.8, 64 * MiB: 60.2,
        128 * MiB: 38.0, 256 * MiB: 31.5, 512 * MiB: 31.0, 1 * GiB: 30.8,
    }  # fmt: skip
    windows, edges = level_windows(triad, VM_CACHES, "DRAM", 4 * GiB)
    assert edges[0].measured_bytes == 90 * KiB
    low, high = windows["L2"]
    assert low == 192 * KiB and high == 2385 * KiB  # from 2x the L1's 96 KiB reported
    assert max(rate for size, rate in triad.items() if low <= size <= high) == 244.2
