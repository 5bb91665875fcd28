import platform
from datetime import datetime
from pathlib import Path

import pytest

from rooflab.conditions.add_asm import _add_block_asm
from rooflab.conditions.cpu import (
    ADDS_PER_BLOCK,
    ClockUnavailable,
    blas_info,
    measure_cpu_clock_hz,
    read_cpu_conditions,
    time_add_blocks_s,
)

clock_measurable = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64", "aarch64", "arm64"),
    reason=f"no dependent-add loop for {platform.machine()}",
)

CONDITION_FIELDS = (
    "t",
    "cpu_ghz_measured",
    "governor",
    "cpufreq_cur_mhz",
    "cpuinfo_mhz",
    "load_avg_1m",
    "load_avg_5m",
    "load_avg_15m",
)


@clock_measurable
def test_clock_is_plausible_and_repeatable():
    first_hz, second_hz = measure_cpu_clock_hz(), measure_cpu_clock_hz()
    assert 0.5e9 < first_hz < 6e9
    assert 0.5e9 < second_hz < 6e9
    # A shared, noisy box: tolerant, but a broken loop or timer is far outside this.
    assert abs(first_hz - second_hz) / max(first_hz, second_hz) < 0.2


@clock_measurable
def test_twice_the_adds_take_twice_the_time():
    """Time scales with the chain, so the adds really are a dependent chain and nothing else."""
    blocks = 8000  # about 1M adds, a third of a millisecond at 3 GHz
    ratios = []
    for _ in range(3):  # a retry only helps against preemption; a broken loop fails all three
        single_s = time_add_blocks_s(blocks, repeats=5)
        double_s = time_add_blocks_s(2 * blocks, repeats=5)
        ratios.append(double_s / single_s)
        if 1.8 < ratios[-1] < 2.2:
            break
    assert 1.8 < ratios[-1] < 2.2, ratios


@clock_measurable
def test_longer_repetitions_read_the_same_clock():
    short_hz = measure_cpu_clock_hz(min_time_s=0.001)
    long_hz = measure_cpu_clock_hz(min_time_s=0.01)
    assert abs(short_hz - long_hz) / long_hz < 0.2


def test_other_architectures_raise_a_clear_reason():
    with pytest.raises(ClockUnavailable, match=r"riscv64.*supported: .*x86_64"):
        _add_block_asm("riscv64")
    assert issubclass(ClockUnavailable, RuntimeError)


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_add_block_is_one_dependent_chain(machine):
    lines = _add_block_asm(machine).split("\n\t")
    assert len(lines) == ADDS_PER_BLOCK
    assert len(set(lines)) == 1  # every add writes and reads the same accumulator, $0
    assert lines[0].startswith("add") and "$0" in lines[0]


def test_real_conditions_carry_every_field_or_a_reason():
    conditions = read_cpu_conditions()
    for field in CONDITION_FIELDS:
        assert field in conditions, field
        if conditions[field] is None:
            assert conditions["unavailable"].get(field), field
    datetime.fromisoformat(conditions["t"])
    assert conditions["t"].endswith("+00:00")
    if conditions["cpu_ghz_measured"] is not None:
        assert 0.5 < conditions["cpu_ghz_measured"] < 6


def write_fake_cpu(root: Path, cpu: int, governor: str, cur_khz: int) -> None:
    cpufreq = root / f"cpu{cpu}" / "cpufreq"
    cpufreq.mkdir(parents=True)
    (cpufreq / "scaling_governor").write_text(f"{governor}\n")
    (cpufreq / "scaling_cur_freq").write_text(f"{cur_khz}\n")


def test_fake_cpufreq_tree(tmp_path):
    for cpu, governor in enumerate(["performance", "powersave", "performance"]):
        write_fake_cpu(tmp_path / "cpu", cpu, governor, cur_khz=3_000_000 + cpu * 100_000)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\ncpu MHz\t\t: 2445.402\nprocessor\t: 1\ncpu MHz\t: 2500\n")

    conditions = read_cpu_conditions(tmp_path / "cpu", cpuinfo)
    assert conditions["governor"] == ["performance", "powersave"]
    assert conditions["cpufreq_cur_mhz"] == [3000.0, 3100.0, 3200.0]
    assert conditions["cpuinfo_mhz"] == [2445.402, 2500.0]
    assert {"governor", "cpufreq_cur_mhz", "cpuinfo_mhz"}.isdisjoint(conditions["unavailable"])


def test_missing_cpufreq_and_cpuinfo_are_named(tmp_path):
    (tmp_path / "cpu" / "cpu0").mkdir(parents=True)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")  # aarch64 prints no MHz

    conditions = read_cpu_conditions(tmp_path / "cpu", cpuinfo)
    unavailable = conditions["unavailable"]
    assert conditions["governor"] is None
    assert "cpu0/cpufreq" in unavailable["governor"]
    assert conditions["cpufreq_cur_mhz"] is None
    assert "cpu0/cpufreq" in unavailable["cpufreq_cur_mhz"]
    assert conditions["cpuinfo_mhz"] is None
    assert "cpu MHz" in unavailable["cpuinfo_mhz"]


def test_unreadable_cpufreq_value_is_named_not_partial(tmp_path):
    write_fake_cpu(tmp_path / "cpu", 0, "schedutil", cur_khz=2_000_000)
    write_fake_cpu(tmp_path / "cpu", 1, "schedutil", cur_khz=2_000_000)
    (tmp_path / "cpu" / "cpu1" / "cpufreq" / "scaling_cur_freq").unlink()

    conditions = read_cpu_conditions(tmp_path / "cpu", tmp_path / "cpuinfo")
    assert conditions["governor"] == ["schedutil"]
    assert conditions["cpufreq_cur_mhz"] is None
    assert "cpu1/cpufreq/scaling_cur_freq" in conditions["unavailable"]["cpufreq_cur_mhz"]


def test_blas_info_names_the_library_and_threading_variables(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("OPENBLAS_VERBOSE", "0")
    monkeypatch.setenv("ROOFLAB_UNRELATED", "x")
    info = blas_info()
    assert info["env"]["OMP_NUM_THREADS"] == "1"
    assert info["env"]["OPENBLAS_VERBOSE"] == "0"
    assert "ROOFLAB_UNRELATED" not in info["env"]
    if not info["blas_libraries"]:
        assert info["unavailable"]["blas_libraries"]
    for library in info["blas_libraries"]:
        assert library["internal_api"]
        assert library["num_threads"] >= 1
        assert library["filepath"]


@clock_measurable
def test_a_reading_far_below_the_last_is_taken_again(monkeypatch):
    """A virtual CPU stopped by its hypervisor slows every run of one probe: the probe is taken
    again and the highest reading kept; a clock that really fell stays low."""
    from rooflab.conditions import cpu as conditions

    real_hz = measure_cpu_clock_hz()
    real = conditions.time_add_blocks_s
    slow_first = iter([3.0, 1.0, 1.0])  # the first probe 3x slower, then as it really is
    monkeypatch.setattr(conditions, "time_add_blocks_s", lambda b, r: real(b, r) * next(slow_first))
    assert measure_cpu_clock_hz() > 0.8 * real_hz
    monkeypatch.setattr(conditions, "time_add_blocks_s", lambda b, r: real(b, r) * 3.0)
    fallen = measure_cpu_clock_hz()
    assert fallen < 0.5 * real_hz  # every probe read it: reported, not hidden
