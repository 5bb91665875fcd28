"""GPU conditions from NVML (nvidia-ml-py): clocks, temperature, power, clock-event reasons.

Read only: rooflab calls no nvmlDeviceSet* function. It never changes clocks, power limits,
persistence mode, ECC or MIG; it records what it finds (docs/gpu.md, "Conditions").

- `GpuMonitor` opens the NVML device that is the CUDA device being measured (matched by PCI bus
  id), reads its static facts once (`static_info`) and one reading at a time (`reading`).
- `ConditionSampler` takes readings in a background thread while a measurement runs (phase
  "during"); the measuring thread starts and stops it around the measurement.
- `decode_clock_event_reasons` and `clock_flags` are pure: bit masks to names, readings to flags.

A field NVML cannot give (not supported on this board, no permission, no NVML at all) is None in
the reading and named in its `unavailable` mapping with the reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime

__all__ = [
    "CAP_REASONS",
    "ConditionSampler",
    "GpuMonitor",
    "clock_event_reason_table",
    "clock_flags",
    "decode_clock_event_reasons",
    "normalize_pci_bus_id",
]

# Reasons that mean the clock was held down by a thermal or power limit.
CAP_REASONS = frozenset(
    {
        "sw_power_cap",
        "hw_slowdown",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    }
)

# pynvml names one bit mask twice: nvmlClocksEventReason* (current) and nvmlClocksThrottleReason*
# (older; some bits exist only there). Event names win; within a family, the first name in sorted
# order (so bit 0x2 is applications_clocks_setting, not its alias user_defined_clocks).
_REASON_PREFIXES = ("nvmlClocksEventReason", "nvmlClocksThrottleReason")
_NOT_A_REASON = ("All", "None")

DEFAULT_PERIOD_S = 0.01


def _snake(camel: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", camel).lower()


def clock_event_reason_table(module=None) -> dict[int, str]:
    """bit -> name for every single-bit clock-event reason the pynvml module defines."""
    if module is None:
        import pynvml as module
    table: dict[int, str] = {}
    for prefix in _REASON_PREFIXES:
        for attribute in sorted(dir(module)):
            suffix = attribute.removeprefix(prefix)
            if suffix == attribute or suffix in _NOT_A_REASON:
                continue
            bit = getattr(module, attribute)
            if isinstance(bit, int) and bit > 0 and bit & (bit - 1) == 0:
                table.setdefault(bit, _snake(suffix))
    return dict(sorted(table.items()))


def decode_clock_event_reasons(bitmask: int, table: dict[int, str] | None = None) -> list[str]:
    """Names of the bits set in an NVML clock-event (throttle) reason mask, lowest bit first.

    A bit the table does not know is named `unknown_0x...` rather than dropped.
    """
    if bitmask < 0:
        raise ValueError(f"a reason mask is non-negative, got {bitmask}")
    table = clock_event_reason_table() if table is None else table
    names, bit = [], 1
    while bit <= bitmask:
        if bitmask & bit:
            names.append(table.get(bit, f"unknown_{bit:#x}"))
        bit <<= 1
    return names


def clock_flags(readings: Iterable[dict], max_clock_change: float) -> dict:
    """Flags of one measurement from its condition readings (before, during, after, per sample).

    - clock_moved: the SM clock's range exceeded `max_clock_change` of its highest value,
      (max - min) / max > max_clock_change;
    - clock_capped: some reading saw a thermal or power cap (CAP_REASONS);
    - clock_events: every clock-event reason seen, sorted, comma-joined ("" when none).

    Readings without an SM clock (the CPU backend, or NVML unavailable) give None flags.
    """
    if not 0 <= max_clock_change < 1:
        raise ValueError(f"max_clock_change is a fraction in [0, 1), got {max_clock_change}")
    readings = list(readings)
    clocks = [r["sm_clock_mhz"] for r in readings if r.get("sm_clock_mhz") is not None]
    reasons: set[str] = set()
    seen_reasons = False
    for reading in readings:
        text = reading.get("throttle_reasons")
        if text is not None:
            seen_reasons = True
            reasons.update(name for name in text.split(",") if name)
    if not clocks:
        return {
            "sm_clock_min_mhz": None,
            "sm_clock_max_mhz": None,
            "clock_moved": None,
            "clock_capped": (bool(reasons & CAP_REASONS) if seen_reasons else None),
            "clock_events": ",".join(sorted(reasons)) if seen_reasons else None,
        }
    low, high = min(clocks), max(clocks)
    return {
        "sm_clock_min_mhz": float(low),
        "sm_clock_max_mhz": float(high),
        "clock_moved": bool(high > 0 and (high - low) / high > max_clock_change),
        "clock_capped": bool(reasons & CAP_REASONS) if seen_reasons else None,
        "clock_events": ",".join(sorted(reasons)) if seen_reasons else None,
    }


def normalize_pci_bus_id(bus_id: str) -> str:
    """'0000:3B:00.0' and '00000000:3b:00.0' -> '00000000:3b:00.0' (NVML's 8-digit domain)."""
    match = re.fullmatch(
        r"\s*([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)\s*", bus_id
    )
    if not match:
        raise ValueError(f"not a PCI bus id: {bus_id!r}")
    domain, bus, device, function = (int(part, 16) for part in match.groups())
    return f"{domain:08x}:{bus:02x}:{device:02x}.{function:x}"


def _current_pending(pair, convert) -> dict:
    current, pending = pair
    return {"current": convert(current), "pending": convert(pending)}


def as_text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuMonitor:
    """NVML access to one GPU, read only. Without NVML every reading says why it is missing."""

    def __init__(self, pci_bus_id: str | None):
        self.error: str | None = None
        self._nvml = None
        self._handle = None
        self._reasons: dict[int, str] = {}
        try:
            import pynvml
        except ImportError as error:
            self.error = f"nvidia-ml-py (pynvml) is not installed: {error}"
            return
        try:
            pynvml.nvmlInit()
        except Exception as error:  # NVMLError_* (driver library missing, no permission, ...)
            self.error = f"nvmlInit failed: {error}"
            return
        self._nvml = pynvml
        self._reasons = clock_event_reason_table(pynvml)
        try:
            self._handle = self._find_handle(pci_bus_id)
        except Exception as error:
            self.error = f"no NVML device for PCI bus id {pci_bus_id!r}: {error}"

    def _find_handle(self, pci_bus_id: str | None):
        nvml = self._nvml
        if pci_bus_id is None:
            raise ValueError("the CUDA device's PCI bus id is unknown")
        wanted = normalize_pci_bus_id(pci_bus_id)
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            found = as_text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            if normalize_pci_bus_id(found) == wanted:
                return handle
        raise LookupError(f"none of {nvml.nvmlDeviceGetCount()} NVML devices has bus id {wanted}")

    @property
    def available(self) -> bool:
        return self._handle is not None

    def _read(self, fields: dict, unavailable: dict, name: str, read) -> None:
        if self._handle is None:
            fields[name] = None
            unavailable[name] = self.error or "NVML unavailable"
            return
        try:
            fields[name] = read()
        except Exception as error:  # NVMLError_NotSupported, NoPermission, ...
            fields[name] = None
            unavailable[name] = f"NVML: {error}"

    def sm_clock_mhz(self) -> float | None:
        if self._handle is None:
            return None
        try:
            return float(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
        except Exception:
            return None

    def other_processes(self) -> int:
        """Processes other than this one with a context on the GPU (compute or graphics).

        In a container NVML reports the host's pids, so this process may not appear under its
        own pid: then one of the listed processes is taken to be this one."""
        nvml, handle = self._nvml, self._handle
        pids = {p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
        with contextlib.suppress(Exception):  # not every GPU lists graphics processes
            pids |= {p.pid for p in nvml.nvmlDeviceGetGraphicsRunningProcesses(handle)}
        own = os.getpid()
        if own in pids:
            return len(pids - {own})
        return max(0, len(pids) - 1)  # this process holds a context, under a pid it cannot see

    def reading(self, phase: str, config_id: str | None = None) -> dict:
        """One row of the `conditions` table (without run_id; `unavailable` as a dict)."""
        nvml, handle = self._nvml, self._handle
        fields: dict = {"t": datetime.now(UTC), "phase": phase, "config_id": config_id}
        unavailable: dict[str, str] = {}
        read = lambda name, function: self._read(fields, unavailable, name, function)  # noqa: E731
        read("sm_clock_mhz", lambda: float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)))
        read(
            "mem_clock_mhz", lambda: float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM))
        )
        read(
            "temp_c",
            lambda: float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        )
        read("power_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        read(
            "throttle_reasons",
            lambda: ",".join(
                decode_clock_event_reasons(
                    nvml.nvmlDeviceGetCurrentClocksEventReasons(handle), self._reasons
                )
            ),
        )
        read("gpu_other_processes", self.other_processes)
        try:
            fields["load_avg_1m"] = os.getloadavg()[0]
        except OSError as error:
            fields["load_avg_1m"] = None
            unavailable["load_avg_1m"] = f"os.getloadavg() failed: {error}"
        for name in ("cpu_ghz_measured", "governor"):
            fields[name] = None
            unavailable[name] = "GPU backend: the host CPU's clock and governor are not measured"
        fields["unavailable"] = unavailable
        return fields

    def static_info(self) -> dict:
        """Facts that stay fixed during a run; what NVML cannot give is named in `unavailable`."""
        nvml, handle = self._nvml, self._handle
        info: dict = {}
        unavailable: dict[str, str] = {}
        read = lambda name, function: self._read(info, unavailable, name, function)  # noqa: E731
        enabled = lambda state: bool(state == 1)  # noqa: E731 - NVML_FEATURE_ENABLED
        read("nvml_name", lambda: as_text(nvml.nvmlDeviceGetName(handle)))
        read("nvml_uuid", lambda: as_text(nvml.nvmlDeviceGetUUID(handle)))
        read("driver_version", lambda: as_text(nvml.nvmlSystemGetDriverVersion()))
        read("cuda_driver_version", lambda: nvml.nvmlSystemGetCudaDriverVersion())
        read("persistence_mode", lambda: enabled(nvml.nvmlDeviceGetPersistenceMode(handle)))
        read("ecc_mode", lambda: _current_pending(nvml.nvmlDeviceGetEccMode(handle), enabled))
        read("mig_mode", lambda: _current_pending(nvml.nvmlDeviceGetMigMode(handle), int))
        for clock, key in (("sm", "NVML_CLOCK_SM"), ("mem", "NVML_CLOCK_MEM")):
            kind = getattr(nvml, key) if nvml else None
            read(
                f"applications_clock_{clock}_mhz",
                lambda kind=kind: nvml.nvmlDeviceGetApplicationsClock(handle, kind),
            )
            read(
                f"default_applications_clock_{clock}_mhz",
                lambda kind=kind: nvml.nvmlDeviceGetDefaultApplicationsClock(handle, kind),
            )
            read(
                f"max_clock_{clock}_mhz",
                lambda kind=kind: nvml.nvmlDeviceGetMaxClockInfo(handle, kind),
            )
        read("power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0)
        read(
            "supported_clock_event_reasons",
            lambda: decode_clock_event_reasons(
                nvml.nvmlDeviceGetSupportedClocksEventReasons(handle), self._reasons
            ),
        )
        info["unavailable"] = unavailable
        return info


class ConditionSampler:
    """Readings every `period_s` in a background thread, from start() until stop().

    NVML calls release the GIL (ctypes), and the measured interval is timed by CUDA events on the
    device, so the thread does not disturb what it observes.
    """

    def __init__(self, monitor: GpuMonitor, config_id: str | None, period_s=DEFAULT_PERIOD_S):
        if period_s <= 0:
            raise ValueError(f"period_s must be positive, got {period_s}")
        self.monitor, self.config_id, self.period_s = monitor, config_id, period_s
        self.readings: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rooflab-nvml", daemon=True)

    def _run(self) -> None:
        from rooflab.conditions.disturbance import probe

        probe().exclude_current_thread()  # its wake-ups are not the measurement's
        try:
            next_at = time.monotonic()
            while not self._stop.is_set():
                self.readings.append(self.monitor.reading("during", self.config_id))
                next_at += self.period_s
                self._stop.wait(max(0.0, next_at - time.monotonic()))
        finally:
            probe().include_current_thread()  # its id may be reused by a measuring thread

    def start(self) -> ConditionSampler:
        self._thread.start()
        return self

    def stop(self) -> list[dict]:
        self._stop.set()
        self._thread.join()
        return self.readings
