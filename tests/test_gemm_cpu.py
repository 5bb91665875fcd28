"""The CPU engine on small real runs, with deliberately broken backends where a test needs one."""

import math
import signal
import statistics
import subprocess
import time
from dataclasses import replace

import numpy as np
import pytest
import yaml

from rooflab.backends.base import BackendError
from rooflab.backends.cpu import CpuBackend
from rooflab.conditions.disturbance import DisturbanceSettings
from rooflab.config import validate_config
from rooflab.experiments import timing
from rooflab.experiments.gemm import run_gemm_sweep
from rooflab.experiments.gemm_configs import (
    MEMORY_HEADROOM,
    GemmTooLarge,
    check_fits,
    sweep_configs,
)
from rooflab.experiments.timing import (
    TimingSettings,
    fastest_window_median,
    measure,
    summarize,
)
from rooflab.model import gemm_ledger
from rooflab.records import SCHEMA_VERSION, read_run
from tests.conftest import installed_script, run_rooflab
from tests.table_rows import clock_or_reason

FAST = TimingSettings(
    warmup_s=0.01, warmup_min_calls=2, min_time_s=0.02, min_samples=3, max_samples=50,
    disturbance=DisturbanceSettings(quiet_window_s=0.02),  # a coarse quiet check will do here
)  # fmt: skip


@pytest.fixture(scope="module")
def backend():
    return CpuBackend()


def test_operands_are_the_shared_seeded_inputs_shaped_by_layout(backend):
    from rooflab.backends.random_operands import random_nonzero

    nn = backend.gemm_operands(5, 7, 3, "fp32", "nn", seed=2)
    nt = backend.gemm_operands(5, 7, 3, "fp32", "nt", seed=2)
    assert nn.x.dtype == nn.w.dtype == nn.y.dtype == np.float32
    assert (nn.x.shape, nn.w.shape, nt.w.shape, nn.y.shape) == ((5, 3), (3, 7), (7, 3), (5, 7))
    # The same seed gives the GPU backend the same matrices (it builds them with CuPy).
    assert np.array_equal(nn.x, random_nonzero(np, (5, 3), 2, stream=0).astype(np.float32))
    assert np.array_equal(nt.w, random_nonzero(np, (7, 3), 2, stream=1).astype(np.float32))
    # Elements are drawn by flat index, so x and w sharing a stream would share their first 9.
    assert np.all(np.abs(nn.x) >= 0.5) and not np.array_equal(nn.x.ravel()[:9], nn.w.ravel()[:9])
    assert not np.array_equal(nn.x, backend.gemm_operands(5, 7, 3, "fp32", "nn", seed=3).x)


def _sweep(**overrides):
    sweep = {
        "m": [1, 7],
        "n": [33],
        "k": [65],
        "dtypes": ["fp32", "fp64"],
        "layouts": ["nn", "nt"],
        "cache_states": ["warm", "cold"],
        "seed": 3,
    }
    sweep.update(overrides)
    return validate_config({"sweeps": {"s": sweep}})["sweeps"]["s"]


def test_small_sweep_records_every_table(backend):
    tables = run_gemm_sweep(backend, "s", _sweep(), FAST)
    points = tables["timed_points"]
    assert len(points) == 2 * 2 * 2 * 2
    for point in points:
        ledger = gemm_ledger(point["m"], point["n"], point["k"], point["dtype"])
        assert point["flops"] == ledger.flops == 2 * point["m"] * point["n"] * point["k"]
        assert point["bytes_model"] == ledger.bytes
        assert point["p25_s"] <= point["median_s"] <= point["p75_s"]
        assert point["n_samples"] >= FAST.min_samples
        # cold: the operands X, W and Y evicted by themselves (CpuBackend.make_cold)
        cold = point["cache_state"] == "cold"
        itemsize = {"fp32": 4, "fp64": 8}[point["dtype"]]
        operands = itemsize * (point["m"] * point["k"] + point["k"] * point["n"])
        operands += itemsize * point["m"] * point["n"]
        assert point["flush_bytes"] == (operands if cold else 0)
        assert (point["flush_method"] or "").endswith(
            f"operands ({operands} B), then a fence, before each sample: out of every cache "
            "level whatever its size"
        ) == cold
        assert point["achieved_flops_per_s"] == point["flops"] / point["median_s"]
        samples = [
            s
            for s in tables["samples"]
            if (s["config_id"], s["cache_state"]) == (point["config_id"], point["cache_state"])
        ]
        # Every sample is kept; the disturbed ones are left out of the statistics.
        disturbed = [s for s in samples if s["disturbed"]]
        assert len(disturbed) == point["n_disturbed"]
        assert len(samples) - len(disturbed) == point["n_samples"] or point["disturbed"]
        assert all(s["wait_s"] >= 0 and s["cpu_s"] >= 0 for s in samples)
        assert all(s["clock_mhz"] is None or s["clock_mhz"] > 100 for s in samples)
        assert {(s["amount"], s["amount_unit"]) for s in samples} == {(ledger.flops, "FLOP")}
        assert sorted(s["sample_idx"] for s in samples) == list(range(len(samples)))
    assert all(row["passed"] for row in tables["correctness"])
    metrics = {row["metric"] for row in tables["correctness"]}
    assert metrics == {"finite", "rel_frobenius", "max_componentwise"}
    (run,) = tables["runs"]
    assert run["schema_version"] == SCHEMA_VERSION and run["kind"] == "gemm" and run["sweep"] == "s"
    assert run["machine_id"] and run["host"] and run["backend"] == "cpu"
    phases = [(c["phase"], c["config_id"]) for c in tables["conditions"]]
    assert phases[0] == ("before", None) and phases[-1] == ("after", None)
    assert all(clock_or_reason(c) for c in tables["conditions"]), tables["conditions"]


def test_a_sweep_checked_earlier_times_only_the_configurations_that_passed(backend):
    # The workflow's gemm job after its correctness job: no check again, only what passed timed.
    passed = {"s/fp64/nt/m7_n33_k65", "s/fp32/nn/m1_n33_k65"}
    tables = run_gemm_sweep(backend, "s", _sweep(), FAST, passed_config_ids=passed)
    assert tables["correctness"] == []
    timed = {(p["config_id"], p["cache_state"]) for p in tables["timed_points"]}
    assert timed == {(c, state) for c in passed for state in ("warm", "cold")}
    assert {s["config_id"] for s in tables["samples"]} == passed


class UnwrittenLastRow(CpuBackend):
    """A matmul that forgets the last row of Y: the NaN poison must catch it."""

    def matmul(self, operands):
        w = operands.w if operands.layout == "nn" else operands.w.T
        operands.y[:-1] = operands.x[:-1] @ w


class DroppedTerm(CpuBackend):
    """A matmul that silently drops the last term of every dot product."""

    def matmul(self, operands):
        w = operands.w if operands.layout == "nn" else operands.w.T
        np.matmul(operands.x[:, :-1], w[:-1], out=operands.y)


@pytest.mark.parametrize(
    ("broken", "metric"), [(UnwrittenLastRow, "finite"), (DroppedTerm, "rel_frobenius")]
)
def test_broken_matmul_is_recorded_and_not_timed(broken, metric):
    tables = run_gemm_sweep(broken(), "s", _sweep(m=[5], dtypes=["fp64"], layouts=["nn"]), FAST)
    failed = {row["metric"] for row in tables["correctness"] if not row["passed"]}
    assert metric in failed
    assert tables["timed_points"] == [] and tables["samples"] == []


class EventLog(CpuBackend):
    """Records the order of flushes and timed regions, and makes the flush slow."""

    def __init__(self):
        self.events = []
        super().__init__()
        self.events.clear()

    def flush_cache(self):
        self.events.append("flush")
        super().flush_cache()
        time.sleep(0.02)

    def time_call(self, call):
        self.events.append("start")
        seconds = super().time_call(call)
        self.events.append("stop")
        return seconds


def test_cold_flush_runs_before_each_sample_outside_the_timed_region():
    backend = EventLog()
    settings = TimingSettings(
        warmup_s=0, warmup_min_calls=1, min_time_s=0, min_samples=5, max_samples=5
    )
    samples = measure(lambda: None, backend, settings, "cold").samples
    assert len(samples) == 5
    assert backend.events == ["flush", "start", "stop"] * 5
    assert all(s.seconds < 0.02 for s in samples)  # the 20 ms flush is not in any sample
    backend.events.clear()
    measure(lambda: None, backend, settings, "warm")
    assert "flush" not in backend.events


def test_unsupported_dtype_is_refused_before_measuring(backend):
    with pytest.raises(BackendError, match="does not support dtype 'bf16'; supported: fp64, fp32"):
        run_gemm_sweep(backend, "s", _sweep(dtypes=["fp32", "bf16"]), FAST)


def test_oversize_shape_is_refused_with_its_bytes(backend):
    with pytest.raises(GemmTooLarge, match=r"m=1048576 n=1048576 k=8 fp64 needs 8\.796\d* TB"):
        run_gemm_sweep(backend, "s", _sweep(m=[1, 2**20], n=[2**20], k=[8], dtypes=["fp64"]), FAST)


class MemoryOf(CpuBackend):
    """The CPU backend with a stated amount of free memory."""

    def __init__(self, available: int):
        super().__init__()
        self.available = available

    def memory_available_bytes(self) -> int:
        return self.available


def test_a_shape_fits_when_its_bytes_are_within_the_headroom():
    # fp32 300x64 @ 64x500: operands 4 (300*64 + 64*500 + 300*500); the check's float64 copies of
    # 256 sampled rows and columns: 8 (256*64 + 64*256 + 3*256*256)
    needed = 4 * (300 * 64 + 64 * 500 + 300 * 500) + 8 * (256 * 64 + 64 * 256 + 3 * 256 * 256)
    sweep = _sweep(m=[300], n=[500], k=[64], dtypes=["fp32"], layouts=["nn"])
    check_fits(MemoryOf(math.ceil(needed / MEMORY_HEADROOM)), sweep_configs("s", sweep))
    short = MemoryOf(math.ceil(needed / MEMORY_HEADROOM) - 2)
    with pytest.raises(
        GemmTooLarge, match=r"fp32 needs 2\.6398 MB but only 2\.6398 MB is available to it \(cpu\)"
    ):
        check_fits(short, sweep_configs("s", sweep))


def _measure_gemm(tmp_path, sweep, out, **timing) -> list[str]:
    """`rooflab measure gemm`'s arguments for `sweep` of a config written under tmp_path (sweeps
    tiny and huge, quick timing but for `timing`), its run written under `out`."""
    config = {
        "backend": "cpu",
        "timing": {"warmup_s": 0.01, "min_time_s": 0.02, "min_samples": 3, **timing},
        "sweeps": {
            "tiny": {"m": [1, 3], "n": [16], "k": [16], "dtypes": ["fp64"]},
            "huge": {"m": [2**20], "n": [2**20], "k": [2**20], "dtypes": ["fp32"]},
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return ["measure", "gemm", "--config", str(path), "--sweep", sweep, "--out", str(out)]


def test_cli_measure_gemm_writes_one_run(tmp_path):
    out = tmp_path / "out"
    result = run_rooflab(*_measure_gemm(tmp_path, "tiny", out), "--format", "json")
    assert result.returncode == 0, result.stderr
    (run_dir,) = out.iterdir()
    tables = read_run(run_dir)
    assert set(tables) == {"runs", "conditions", "samples", "timed_points", "correctness"}
    assert tables["timed_points"].num_rows == 4
    assert set(tables["runs"].column("run_id").to_pylist()) == {run_dir.name}


@pytest.mark.parametrize(("sweep", "says"), [("nope", "no sweep 'nope'"), ("huge", "needs")])
def test_cli_refusals_write_nothing(tmp_path, sweep, says):
    out = tmp_path / "out"
    result = run_rooflab(*_measure_gemm(tmp_path, sweep, out))
    assert result.returncode == 2
    assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists() or not any(out.rglob("*"))


@pytest.mark.slow
def test_killed_measurement_leaves_no_parquet(tmp_path):
    out = tmp_path / "out"
    process = subprocess.Popen(
        [installed_script("rooflab"), *_measure_gemm(tmp_path, "tiny", out, min_time_s=5.0)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    line = ""
    while "[gemm tiny]" not in line and time.monotonic() < deadline:
        line = process.stderr.readline()  # progress lines appear once measuring is under way
    assert process.poll() is None, "the measurement ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert list(out.rglob("*.parquet")) == []


def test_timing_defaults_are_the_config_schema_defaults():
    # rooflab measure without a config and the workflow with an empty one time alike
    assert TimingSettings.from_config(validate_config({})["timing"]) == TimingSettings()


def test_summary_is_median_and_iqr_of_every_sample():
    summary = summarize([4.0, 1.0, 3.0, 2.0, 5.0], noisy_iqr_ratio=0.6)
    assert (summary.n_samples, summary.median_s, summary.min_s) == (5, 3.0, 1.0)
    assert (summary.p25_s, summary.p75_s) == (2.0, 4.0)
    assert summary.iqr_ratio == pytest.approx(2 / 3) and summary.noisy  # 0.67 > 0.6
    assert not summarize([4.0, 1.0, 3.0, 2.0, 5.0], noisy_iqr_ratio=0.7).noisy
    one = summarize([2.5], noisy_iqr_ratio=0.1)
    assert (one.median_s, one.p25_s, one.p75_s) == (2.5, 2.5, 2.5)
    assert one.iqr_ratio == 0.0 and one.noisy is False
    with pytest.raises(ValueError, match="no samples"):
        summarize([], 0.1)


def test_fastest_window_median_takes_consecutive_windows_and_ignores_single_samples():
    # a power-capped run: fast at first, then slower; one stray fast sample late on
    seconds = [1.0, 1.1, 1.0, 1.5, 1.6, 1.5, 1.6, 0.2, 1.6, 1.7]
    assert fastest_window_median(seconds, 3) == (1.0, 3)  # the tail sample (1.7) is left out
    assert fastest_window_median(seconds, 5) == (1.1, 2)  # medians 1.1 and 1.6
    assert fastest_window_median(seconds[3:], 3) == (1.5, 2)  # the 0.2 sits in a window of 1.6s
    assert fastest_window_median([2.0], 1) == (2.0, 1)
    with pytest.raises(ValueError, match="fewer than one window"):
        fastest_window_median([1.0, 2.0], 3)
    with pytest.raises(ValueError, match="window must be >= 1"):
        fastest_window_median([1.0], 0)


def test_warm_up_lasts_its_time_and_its_call_floor():
    backend, calls = CpuBackend(), []
    settings = TimingSettings(
        warmup_s=0.05, warmup_min_calls=3, min_time_s=0, min_samples=3, max_samples=3
    )
    measure(lambda: calls.append(time.perf_counter()), backend, settings, "warm")
    warm_up = calls[:-3]  # the last three calls are the samples
    # time-bound: calls for 50 ms (each takes microseconds, so far more than the floor of 3)
    assert len(warm_up) > 3 and warm_up[-1] - warm_up[0] >= 0.045
    calls.clear()
    # no disturbed sample re-taken (a busy machine would add calls): the calls are the floors'
    few = TimingSettings(
        warmup_s=1e-9, warmup_min_calls=4, min_time_s=0, min_samples=3, max_time_s=0,
        disturbance=DisturbanceSettings(retake_factor=1),
    )  # fmt: skip
    measure(lambda: calls.append(1), backend, few, "warm")
    assert len(calls) == 4 + 3  # call-bound: the floor of 4, then the 3 samples


def test_a_cooldown_idles_between_the_warm_up_and_the_first_sample(monkeypatch):
    events = []
    backend = CpuBackend()  # its first flush pauses too: made before time.sleep is replaced
    monkeypatch.setattr(timing.time, "sleep", lambda s: events.append(("idle", s)))
    rested = TimingSettings(
        warmup_s=0, warmup_min_calls=2, min_time_s=0, min_samples=2, max_samples=2, cooldown_s=0.2
    )
    measure(lambda: events.append("call"), backend, rested, "warm")
    assert events == ["call", "call", ("idle", 0.2), "call", "call"]
    events.clear()
    measure(lambda: events.append("call"), backend, replace(rested, cooldown_s=0), "warm")
    assert events == ["call"] * 4


def test_a_sweep_is_timed_in_rounds_spread_over_the_run(backend):
    """Round 1 times every point, then round 2 and 3 again; each point pools its rounds, and
    its samples say which round took them."""
    rounds = replace(FAST, rounds=3, min_samples=6)
    tables = run_gemm_sweep(backend, "s", _sweep(m=[3, 9], dtypes=["fp64"], layouts=["nn"]), rounds)
    samples = tables["samples"]
    times = {}
    for row in samples:
        key = (row["config_id"], row["cache_state"])
        times.setdefault(key, {}).setdefault(row["round"], []).append(row)
    assert len(tables["timed_points"]) == len(times) == 4
    for point in tables["timed_points"]:
        by_round = times[(point["config_id"], point["cache_state"])]
        assert sorted(by_round) == [0, 1, 2] and point["n_rounds"] == 3
        every = [r for rows in by_round.values() for r in rows]
        assert sorted(r["sample_idx"] for r in every) == list(range(len(every)))
        clean_rows = [r for r in every if not r["disturbed"]]
        assert point["n_samples"] == len(clean_rows)
        assert all(len(rows) >= 6 for rows in by_round.values())  # a round's floor: 6
        medians = [statistics.median(r["seconds"] for r in rows if not r["disturbed"])
                   for rows in by_round.values()]  # fmt: skip
        assert point["round_spread"] == pytest.approx(max(medians) / min(medians) - 1)
        assert point["median_s"] == pytest.approx(
            statistics.median(r["seconds"] for r in clean_rows)
        )
    # the rounds follow one another over the whole sweep, not point by point
    order = [(r["config_id"], r["round"]) for r in samples]
    firsts = {key: order.index(key) for key in dict.fromkeys(order)}
    assert max(v for (_, n), v in firsts.items() if n == 0) < min(
        v for (_, n), v in firsts.items() if n == 1
    )


def test_a_round_splits_the_sample_floor_but_keeps_an_interval():
    from rooflab.experiments.rounds import round_timing

    assert round_timing(TimingSettings(min_samples=10, rounds=2)).min_samples == 6
    assert round_timing(TimingSettings(min_samples=30, rounds=2)).min_samples == 15
    assert round_timing(TimingSettings(min_samples=3, rounds=2)).min_samples == 3
    assert round_timing(TimingSettings(min_samples=10, rounds=1)).min_samples == 10
    # the time floor and cap split over the rounds, the width wider by sqrt(rounds)
    four = round_timing(TimingSettings(min_time_s=0.2, max_time_s=1.0, rel_width=0.03, rounds=4))
    assert (four.min_time_s, four.max_time_s) == (0.05, 0.25)
    assert four.rel_width == pytest.approx(0.06)
