"""Disturbance detection against real competition: a busy process pinned to the measuring
thread's CPU makes that thread wait on the run queue, and rooflab must see it."""

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
import yaml

from rooflab.backends.cpu import CpuBackend
from rooflab.conditions.cpu import ClockUnavailable, measure_cpu_clock_hz
from rooflab.conditions.disturbance import (
    CLOCK_TICKS_PER_S,
    DisturbanceProbe,
    DisturbanceSettings,
    PhaseDisturbance,
    add_gpu_processes,
    judge,
    other_cpus_now,
    probe,
    wait_for_quiet,
)
from rooflab.experiments.timing import TimingSettings, measure
from tests.conftest import run_rooflab

linux_schedstat = pytest.mark.skipif(
    DisturbanceProbe().unavailable is not None
    or not hasattr(os, "sched_setaffinity")
    or len(os.sched_getaffinity(0)) < 1,
    reason="needs /proc/<tid>/schedstat and CPU affinity (Linux)",
)


@contextlib.contextmanager
def busy_process(cpu: int | None):
    """Another process spinning, pinned to `cpu` (None: anywhere)."""
    code = "while True: pass"
    process = subprocess.Popen([sys.executable, "-c", code])
    try:
        if cpu is not None:
            os.sched_setaffinity(process.pid, {cpu})
        time.sleep(0.2)  # it is running before we measure
        yield process
    finally:
        process.kill()
        process.wait()


@contextlib.contextmanager
def pinned(cpu: int):
    """This thread on one CPU (and back to the CPUs it had)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def one_sample(work_s: float) -> tuple[float, object]:
    the_probe = probe()
    before = the_probe.snapshot()
    started = time.perf_counter()
    spin(work_s)
    seconds = time.perf_counter() - started
    return seconds, the_probe.sample(before, the_probe.snapshot(), seconds, DisturbanceSettings())


@linux_schedstat
def test_a_thread_sharing_its_cpu_is_seen_waiting_and_flagged():
    cpu = min(os.sched_getaffinity(0))
    with pinned(cpu):
        quiet = [one_sample(0.03)[1] for _ in range(3)]
        with busy_process(cpu):
            # 100 ms of this thread's work on a CPU shared with a spinning process: the scheduler
            # splits the CPU, so the thread waits for a good part of the wall time.
            seconds, loaded = one_sample(0.1)
    assert loaded.disturbed
    assert loaded.wait_s > 0.2 * seconds
    # the wall time is the CPU it got plus the time it waited for one
    assert loaded.cpu_s < 0.8 * seconds
    assert loaded.cpu_s + loaded.wait_s == pytest.approx(seconds, rel=0.2)
    # Without the competitor, at least one of three samples is clean (a shared CI machine may
    # preempt one now and then, never all three by this much).
    assert any(not q.disturbed for q in quiet), quiet


@linux_schedstat
def test_other_processes_cpu_is_measured_over_a_phase():
    with busy_process(None):
        other = other_cpus_now(0.5)
    assert other is not None and other > 0.6  # one spinning process is about one CPU


def test_judge_flags_a_measurement_that_lacked_clean_samples():
    settings = DisturbanceSettings()
    sample = lambda disturbed, wait: SimpleNamespace(  # noqa: E731
        disturbed=disturbed, wait_s=wait, seconds=0.001
    )
    phase = [PhaseDisturbance(seconds=1.0, other_cpus=0.0, steal_fraction=0.0)]
    clean = [sample(False, 0.0)] * 10
    assert not judge(clean + [sample(True, 0.03)] * 5, phase, settings, min_clean=10).disturbed
    verdict = judge(clean[:3] + [sample(True, 0.03)] * 20, phase, settings, min_clean=10)
    assert verdict.disturbed and verdict.n_disturbed == 20
    assert "20 of 23 samples disturbed, 3 clean of the 10 needed" in verdict.disturbance
    assert "up to 30 ms (3000% of a 1 ms sample)" in verdict.disturbance
    busy = [PhaseDisturbance(seconds=1.0, other_cpus=0.9, steal_fraction=0.0)]
    verdict = judge(clean, busy, settings, min_clean=10)
    assert verdict.disturbance == "other processes used 0.90 CPUs while it sampled (limit 0.25)"
    # a GPU's timing: other processes' host CPU does not count, other GPU users do
    verdict = judge(clean, busy, settings, min_clean=10, judge_host=False)
    assert not verdict.disturbed and verdict.other_cpus == pytest.approx(0.9)
    verdict = add_gpu_processes(
        judge(clean, phase, settings, min_clean=10), [{"gpu_other_processes": 2}, {}]
    )
    assert verdict.disturbance == "2 other process(es) used the GPU while it sampled"
    stolen = [PhaseDisturbance(seconds=1.0, other_cpus=0.0, steal_fraction=0.1)]
    assert "stole 10.0%" in judge(clean, stolen, settings, min_clean=10).disturbance
    assert not judge(clean, stolen, settings, min_clean=10, judge_host=False).disturbed
    columns = verdict.columns()
    assert columns["disturbed"] and columns["gpu_other_processes"] == 2


@linux_schedstat
def test_a_steadily_slowed_gemm_is_flagged_not_published(monkeypatch):
    """The issue's `m64 warm`: every sample steadily slow with a small spread. Each sample
    waits for its CPU, so each is disturbed; retakes end at their bound and the point is
    flagged, though its spread would pass the noise rule."""
    backend = CpuBackend()
    cpu = min(os.sched_getaffinity(0))
    # min_time_s tiny: the sample count comes from the clean-sample rule and its re-takes
    settings = TimingSettings(warmup_s=0.01, min_time_s=0.001, min_samples=5)
    with pinned(cpu), busy_process(cpu):
        measured = measure(lambda: spin(0.004), backend, settings, "warm")
    verdict = measured.verdict
    assert verdict.disturbed, verdict
    disturbed = [s for s in measured.samples if s.disturbed]
    assert len(disturbed) >= settings.disturbance.retake_factor * settings.min_samples
    assert len(measured.samples) - len(disturbed) < settings.min_samples
    assert "disturbed" in verdict.disturbance and "waited for a CPU" in verdict.disturbance


@linux_schedstat
def test_disturbed_samples_are_left_out_and_retaken():
    """A competitor that leaves after a while: the samples it disturbed are kept as rows but
    the statistics come from the clean ones, and the point is not flagged."""
    backend = CpuBackend()
    cpu = min(os.sched_getaffinity(0))
    settings = TimingSettings(warmup_s=0.01, min_time_s=0.3, min_samples=10)
    settings = replace(settings, disturbance=DisturbanceSettings(retake_factor=100))
    code = "import time\nend = time.time() + 0.15\nwhile time.time() < end: pass"
    competitor = subprocess.Popen([sys.executable, "-c", code])
    os.sched_setaffinity(competitor.pid, {cpu})
    with pinned(cpu):
        measured = measure(lambda: spin(0.002), backend, settings, "warm")
    competitor.wait()
    clean = [s for s in measured.samples if not s.disturbed]
    assert len(clean) >= settings.min_samples
    assert any(s.disturbed for s in measured.samples)  # the competitor was seen
    summary = measured.summary(settings.noisy_iqr_ratio)
    assert summary.n_samples == len(clean)
    assert summary.median_s < 0.004  # the slowed samples do not reach the median


@linux_schedstat
def test_the_clock_probe_never_reads_a_preempted_run():
    """A competitor on the same CPU: every reading is a plausible clock or none at all."""
    cpu = min(os.sched_getaffinity(0))
    with pinned(cpu):
        quiet_hz = max(measure_cpu_clock_hz(min_time_s=5e-5) for _ in range(20))
        readings = []
        with busy_process(cpu):
            for _ in range(200):
                with contextlib.suppress(ClockUnavailable):
                    readings.append(measure_cpu_clock_hz(min_time_s=5e-5))
        # Runs of 10 ms each, longer than a scheduler slice: every one shares the CPU, and a
        # probe that kept the fastest of them would read about half the clock.
        with busy_process(cpu):
            for _ in range(5):
                with contextlib.suppress(ClockUnavailable):
                    readings.append(measure_cpu_clock_hz(min_time_s=0.05))
    assert readings, "no reading at all in 200 probes"
    assert min(readings) > 0.8 * quiet_hz, (min(readings), quiet_hz)


@linux_schedstat
def test_wait_for_quiet_waits_then_goes_on_with_a_warning(capsys):
    settings = DisturbanceSettings(quiet_wait_s=0.6)
    cpus = len(os.sched_getaffinity(0))
    with busy_process(None):
        check = wait_for_quiet(settings, cpus_needed=cpus, label="test")
    assert check.warning is not None and check.waited_s >= 0.6
    assert "busy machine: other processes used" in check.warning
    assert "waiting up to 0.6 s for quiet" in capsys.readouterr().err
    assert check.columns()["busy_warning"] == check.warning
    # one GPU user, no CPU load: still waited for
    check = wait_for_quiet(
        replace(settings, quiet_max_other_cpus=cpus),
        cpus_needed=cpus,
        label="test",
        gpu_other_processes=lambda: 1,
    )
    assert "1 other process(es) used the GPU" in check.warning


def test_the_quiet_check_looks_at_the_machine_for_its_configured_window(monkeypatch):
    """`quiet_window_s` is how long each look lasts (the tests' short one included)."""
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    settings = DisturbanceSettings(quiet_wait_s=0, quiet_max_other_cpus=1e6, quiet_window_s=0.07)
    check = wait_for_quiet(settings, cpus_needed=1, label="test")
    assert slept == [0.07] and check.warning is None


def test_measure_gemm_json_carries_the_verdict(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "timing": {"warmup_s": 0.01, "min_time_s": 0.02, "min_samples": 3},
                "disturbance": {"quiet_wait_s": 1},
                "sweeps": {"s": {"m": [1, 8], "n": [64], "k": [64], "dtypes": ["fp32"]}},
            }
        )
    )
    options = ["--sweep", "s", "--backend", "cpu", "--out", tmp_path / "runs", "--format", "json"]
    result = run_rooflab("measure", "gemm", "--config", config, *options)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 4
    for row in rows:
        assert isinstance(row["disturbed"], bool) and isinstance(row["n_disturbed"], int)
        assert (row["disturbance"] is None) == (not row["disturbed"])
        if row["disturbed"]:  # named on stderr too, with its reason
            assert f"disturbed: {row['config_id']} {row['cache_state']}: " in result.stderr


def test_what_other_processes_used_is_judged_beyond_the_clock_tick_resolution():
    """/proc/stat counts in clock ticks: a phase of 50 ms on this machine's CPUs cannot tell a
    few tenths of a CPU from nothing, so it is not flagged for them; a long phase is."""
    settings = DisturbanceSettings(max_other_cpus=0.25)
    resolution = probe().cpus / (CLOCK_TICKS_PER_S * 0.05)
    short = PhaseDisturbance(0.05, other_cpus=0.25 + resolution * 0.9, steal_fraction=0.0)
    long = PhaseDisturbance(5.0, other_cpus=0.3, steal_fraction=0.0)
    assert not judge([], [short], settings, min_clean=0).disturbed
    assert judge([], [long], settings, min_clean=0).disturbed
    busy = PhaseDisturbance(0.05, other_cpus=0.25 + resolution * 1.1, steal_fraction=0.0)
    verdict = judge([], [busy], settings, min_clean=0)
    assert verdict.disturbed and verdict.other_cpus == pytest.approx(busy.other_cpus)
