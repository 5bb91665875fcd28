"""Datasheet presets (config/devices.yaml): dense peaks per instruction path, bandwidth per level.

Floating-point paths (`paths`) are in FLOP/s, integer paths (`integer_paths`, int8) in OP/s, each in
a field of its own: an integer rate is never read as FLOP/s.

These are vendor reference figures, labelled as such wherever they appear; they never stand in for
a measured ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rooflab.config import ConfigError, config_file, load_yaml
from rooflab.units import UnitError, parse_byte_rate, parse_flop_rate, parse_op_rate

__all__ = [
    "DevicePreset",
    "device_preset",
    "load_device_presets",
    "matching_preset",
]


@dataclass(frozen=True)
class DevicePreset:
    key: str
    name: str
    source: str
    match: tuple[str, ...]
    peak_flops_per_s: dict[str, float]  # path -> FLOP/s
    bandwidth_b_per_s: dict[str, float]  # level -> B/s
    peak_ops_per_s: dict[str, float] = field(default_factory=dict)  # integer path -> OP/s


def load_device_presets(path: str | Path | None = None) -> dict[str, DevicePreset]:
    path = Path(path) if path else config_file("devices.yaml")
    document = load_yaml(path)
    if not isinstance(document, dict) or not isinstance(document.get("devices"), dict):
        raise ConfigError(f"{path}: expected a top-level 'devices:' mapping")
    presets = {}
    for key, entry in document["devices"].items():
        where = f"{path}: devices.{key}"
        try:
            peaks = {p: parse_flop_rate(v) for p, v in entry["paths"].items()}
            levels = {lv: parse_byte_rate(v) for lv, v in entry["levels"].items()}
            integer = {p: parse_op_rate(v) for p, v in (entry.get("integer_paths") or {}).items()}
            shared = sorted(set(peaks) & set(integer))
            if shared:
                raise ConfigError(
                    f"{where}: {', '.join(shared)} both in paths (FLOP/s) and integer_paths "
                    "(OP/s); a path has one unit"
                )
            presets[key] = DevicePreset(
                key,
                entry["name"],
                entry["source"],
                tuple(entry.get("match", ())),
                peaks,
                levels,
                integer,
            )
        except (KeyError, TypeError, AttributeError) as error:
            raise ConfigError(f"{where}: missing or malformed {error}") from None
        except UnitError as error:
            raise ConfigError(f"{where}: {error}") from None
    return presets


def device_preset(key: str, path: str | Path | None = None) -> DevicePreset:
    presets = load_device_presets(path)
    if key not in presets:
        raise ConfigError(f"unknown device {key!r}; presets: {', '.join(presets)}")
    return presets[key]


def matching_preset(device_name: str | None, path: str | Path | None = None) -> DevicePreset | None:
    """The preset whose `match` substrings occur in the device name the driver reports, if any."""
    if not device_name:
        return None
    for preset in load_device_presets(path).values():
        if any(fragment in device_name for fragment in preset.match):
            return preset
    return None
