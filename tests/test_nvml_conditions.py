"""NVML conditions without a GPU: reason decoding with pynvml's own bit values, clock flags, the
background sampler, and a monitor that names what it could not read."""

import time

import pytest

from rooflab.conditions.disturbance import probe
from rooflab.conditions.nvml import (
    CAP_REASONS,
    ConditionSampler,
    GpuMonitor,
    clock_event_reason_table,
    clock_flags,
    decode_clock_event_reasons,
    normalize_pci_bus_id,
)

pynvml = pytest.importorskip("pynvml")


def test_reason_table_uses_pynvml_bits():
    table = clock_event_reason_table(pynvml)
    assert table[pynvml.nvmlClocksEventReasonGpuIdle] == "gpu_idle"
    assert table[pynvml.nvmlClocksEventReasonSwPowerCap] == "sw_power_cap"
    assert table[pynvml.nvmlClocksEventReasonHwSlowdown] == "hw_slowdown"
    assert table[pynvml.nvmlClocksEventReasonSwThermalSlowdown] == "sw_thermal_slowdown"
    assert table[pynvml.nvmlClocksEventReasonHwThermalSlowdown] == "hw_thermal_slowdown"
    assert table[pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown] == "hw_power_brake_slowdown"
    # The alias of bit 0x2 (UserDefinedClocks) does not replace its first name.
    assert table[pynvml.nvmlClocksEventReasonApplicationsClocksSetting] == (
        "applications_clocks_setting"
    )
    assert all(bit & (bit - 1) == 0 for bit in table)  # single bits only: no "All", no "None"
    assert set(CAP_REASONS) <= set(table.values())


def test_decode_real_masks():
    mask = (
        pynvml.nvmlClocksEventReasonGpuIdle
        | pynvml.nvmlClocksEventReasonSwPowerCap
        | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    )
    assert decode_clock_event_reasons(mask) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert decode_clock_event_reasons(pynvml.nvmlClocksEventReasonNone) == []
    everything = decode_clock_event_reasons(pynvml.nvmlClocksThrottleReasonAll)
    assert len(everything) == bin(pynvml.nvmlClocksThrottleReasonAll).count("1")


def test_unknown_bits_are_named_not_dropped():
    assert decode_clock_event_reasons(1 << 40, {}) == ["unknown_0x10000000000"]
    with pytest.raises(ValueError):
        decode_clock_event_reasons(-1)


def _reading(clock, reasons=""):
    return {"sm_clock_mhz": clock, "throttle_reasons": reasons}


def test_clock_flags():
    steady = clock_flags([_reading(1980), _reading(1975), _reading(1980, "gpu_idle")], 0.05)
    assert steady == {
        "sm_clock_min_mhz": 1975.0,
        "sm_clock_max_mhz": 1980.0,
        "clock_moved": False,
        "clock_capped": False,
        "clock_events": "gpu_idle",
    }
    moved = clock_flags([_reading(1980), _reading(1700, "sw_power_cap,sync_boost")], 0.05)
    assert moved["clock_moved"] and moved["clock_capped"]
    assert moved["clock_events"] == "sw_power_cap,sync_boost"
    # The threshold is configurable: 14 % moved is fine at 0.2.
    assert not clock_flags([_reading(1980), _reading(1700)], 0.2)["clock_moved"]
    assert clock_flags([_reading(1000), _reading(949)], 0.05)["clock_moved"]
    assert not clock_flags([_reading(1000), _reading(951)], 0.05)["clock_moved"]
    assert not clock_flags([_reading(1000), _reading(950)], 0.05)["clock_moved"]  # "more than"
    assert clock_flags([_reading(1000), _reading(999)], 0.0)["clock_moved"]  # any move at all


def test_clock_flags_without_gpu_readings_are_null():
    cpu = [{"sm_clock_mhz": None, "throttle_reasons": None, "cpu_ghz_measured": 3.0}]
    assert clock_flags(cpu, 0.05) == {
        "sm_clock_min_mhz": None,
        "sm_clock_max_mhz": None,
        "clock_moved": None,
        "clock_capped": None,
        "clock_events": None,
    }
    for fraction in (1.5, 1.0, -0.1):
        with pytest.raises(ValueError, match="max_clock_change is a fraction"):
            clock_flags(cpu, fraction)


def test_pci_bus_ids_of_cuda_and_nvml_compare_equal():
    assert normalize_pci_bus_id("0000:3B:00.0") == normalize_pci_bus_id("00000000:3b:00.0")
    assert normalize_pci_bus_id("0000:3B:00.0") == "00000000:3b:00.0"
    with pytest.raises(ValueError):
        normalize_pci_bus_id("GPU-1234")


@pytest.fixture
def no_nvml_monitor():
    monitor = GpuMonitor("0000:01:00.0")
    if monitor.available:
        pytest.skip("NVML and a GPU are present here")
    return monitor


def test_monitor_without_nvml_names_every_missing_field(no_nvml_monitor):
    reading = no_nvml_monitor.reading("before", "cfg")
    assert reading["phase"] == "before" and reading["config_id"] == "cfg"
    for field in ("sm_clock_mhz", "mem_clock_mhz", "temp_c", "power_w", "throttle_reasons"):
        assert reading[field] is None
        assert reading["unavailable"][field] == no_nvml_monitor.error
    assert no_nvml_monitor.sm_clock_mhz() is None
    static = no_nvml_monitor.static_info()
    assert static["persistence_mode"] is None and "persistence_mode" in static["unavailable"]


def test_sampler_reads_in_the_background_until_stopped(no_nvml_monitor):
    sampler = ConditionSampler(no_nvml_monitor, "cfg", period_s=0.005).start()
    time.sleep(0.1)
    # its wake-ups are not a measuring thread's wait: left out while it runs, and only then
    assert sampler._thread.native_id in probe()._excluded
    readings = sampler.stop()
    assert sampler._thread.native_id not in probe()._excluded
    assert len(readings) >= 5
    assert {r["phase"] for r in readings} == {"during"}
    assert {r["config_id"] for r in readings} == {"cfg"}
    times = [r["t"] for r in readings]
    assert times == sorted(times)
    count = len(readings)
    time.sleep(0.02)
    assert len(sampler.readings) == count  # stopped means stopped
