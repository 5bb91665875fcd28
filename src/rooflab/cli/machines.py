"""Which machine of the store a command means: `--machine` of `rooflab runs`, `--measured MACHINE`
of `rooflab model`. A machine is named by a prefix of its machine_id or by its host name."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Machine:
    machine_id: str
    host: str | None

    def __str__(self) -> str:
        return f"{self.machine_id} (host {self.host})" if self.host else self.machine_id


def matching(machines: list[Machine], text: str) -> list[Machine]:
    """The machines whose machine_id starts with `text` or whose host is `text`, each once."""
    found = [m for m in machines if m.machine_id.startswith(text) or m.host == text]
    return list(dict.fromkeys(found))


def listed(machines: list[Machine]) -> str:
    return ", ".join(map(str, dict.fromkeys(machines))) or "none"
