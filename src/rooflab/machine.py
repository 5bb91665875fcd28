"""Machine identity: which CPU, caches and memory a run was measured on.

Everything is read from Linux's /proc and /sys (roots are parameters, so a fake tree can stand in).
What cannot be read is named in an `unavailable` dict with the reason, never left as a silent null.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "CacheInfoUnavailable",
    "cache_bytes_by_level",
    "cpu_dirs",
    "cpu_identity",
    "cpuinfo_values",
    "last_level_cache_bytes",
    "machine_fingerprint",
    "parse_cache_size_bytes",
    "parse_cpu_list",
    "read_caches",
]

SYS_CPU_ROOT = Path("/sys/devices/system/cpu")
PROC_ROOT = Path("/proc")

# Caches that hold data; instruction caches never see a GEMM's operands.
DATA_CACHE_TYPES = ("Data", "Unified")

_BYTES_PER_GIB = 1 << 30
_SIZE_SUFFIX_BYTES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


class CacheInfoUnavailable(RuntimeError):
    """The cache hierarchy could not be read, so cache-sized working sets cannot be chosen."""


def cpu_dirs(sys_cpu_root: Path = SYS_CPU_ROOT) -> list[tuple[int, Path]]:
    """(cpu id, directory) for every cpuN under the sysfs cpu root, in cpu order."""
    if not sys_cpu_root.is_dir():
        return []
    found = []
    for entry in sys_cpu_root.iterdir():
        match = re.fullmatch(r"cpu(\d+)", entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), entry))
    return sorted(found)


def cpuinfo_values(key: str, cpuinfo_path: Path = PROC_ROOT / "cpuinfo") -> list[str]:
    """Every value of one /proc/cpuinfo key (one per logical cpu on x86), in file order."""
    values = []
    for line in cpuinfo_path.read_text().splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == key:
            values.append(value.strip())
    return values


def parse_cpu_list(text: str) -> frozenset[int]:
    """A kernel cpu list such as '0-3,8,10-11' as a set of cpu ids."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def parse_cache_size_bytes(text: str) -> int:
    """A sysfs cache size such as '32K', '32768K' or '1M' in bytes."""
    match = re.fullmatch(r"(\d+)\s*([KMG]?)i?B?", text.strip(), flags=re.IGNORECASE)
    if not match:
        raise ValueError(f"unrecognised cache size {text!r}")
    return int(match.group(1)) * _SIZE_SUFFIX_BYTES[match.group(2).upper()]


def read_caches(
    sys_cpu_root: Path = SYS_CPU_ROOT, usable_cpu_ids: Iterable[int] | None = None
) -> tuple[list[dict], str | None]:
    """The cache hierarchy, one entry per distinct (level, type, size, sharing), and why if empty.

    Every cpu lists each cache it sees, so a cache shared by 8 cpus appears 8 times: instances
    are told apart by their shared_cpu_list. `usable_instances` counts the instances that touch a
    cpu this process may run on (the affinity mask), which is what its working sets can fill.
    """
    usable = frozenset(usable_cpu_ids) if usable_cpu_ids is not None else _usable_cpu_ids()
    cpus = cpu_dirs(sys_cpu_root)
    if not cpus:
        return [], f"no cpu directories under {sys_cpu_root}"
    size_by_instance: dict[tuple[int, str, frozenset[int]], int] = {}
    problems = []
    for _, cpu_dir in cpus:
        for index_dir in sorted((cpu_dir / "cache").glob("index[0-9]*")):
            try:
                level = int((index_dir / "level").read_text())
                cache_type = (index_dir / "type").read_text().strip()
                size_bytes = parse_cache_size_bytes((index_dir / "size").read_text())
                shared = parse_cpu_list((index_dir / "shared_cpu_list").read_text())
            except (OSError, ValueError) as error:
                problems.append(f"{index_dir}: {error}")
                continue
            size_by_instance[(level, cache_type, shared)] = size_bytes
    if not size_by_instance:
        first_cache_dir = cpus[0][1] / "cache"
        reason = "; ".join(problems) or f"no {first_cache_dir}/index* entries"
        return [], reason
    groups: dict[tuple[int, str, int, int], dict] = {}
    for (level, cache_type, shared), size_bytes in size_by_instance.items():
        key = (level, cache_type, size_bytes, len(shared))
        group = groups.setdefault(
            key,
            {
                "level": level,
                "type": cache_type,
                "size_bytes": size_bytes,
                "shared_cpu_count": len(shared),
                "instances": 0,
                "usable_instances": 0,
            },
        )
        group["instances"] += 1
        group["usable_instances"] += bool(shared & usable)
    caches = [groups[key] for key in sorted(groups)]
    return caches, ("; ".join(problems) or None)


def machine_fingerprint(
    hostname: str, cpu_model: str, logical_cpus: int, caches: list[dict], memory_bytes: int | None
) -> str:
    """A short stable id (16 hex chars of sha256) that groups runs by machine.

    The hostname keeps two identical cluster nodes apart. Memory is rounded to GiB because
    MemTotal moves by megabytes with kernel reservations (a kernel update is the same machine).
    Caches enter without usable_instances: a narrower affinity mask is still the same machine.
    """
    cache_shape = sorted(
        (c["level"], c["type"], c["size_bytes"], c["shared_cpu_count"], c["instances"])
        for c in caches
    )
    memory_gib = round(memory_bytes / _BYTES_PER_GIB) if memory_bytes else None
    canonical = json.dumps(
        {
            "hostname": hostname,
            "cpu_model": cpu_model,
            "logical_cpus": logical_cpus,
            "caches": cache_shape,
            "memory_gib": memory_gib,
        },
        sort_keys=True,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def cpu_identity(
    sys_cpu_root: Path = SYS_CPU_ROOT,
    proc_root: Path = PROC_ROOT,
    usable_cpu_ids: Iterable[int] | None = None,
) -> dict:
    """Who this machine is: hostname, cpu model, cpu counts, caches, memory and machine_id."""
    unavailable: dict[str, str] = {}
    usable = frozenset(usable_cpu_ids) if usable_cpu_ids is not None else _usable_cpu_ids()
    hostname = socket.gethostname()
    cpu_model = _cpu_model(proc_root / "cpuinfo", unavailable)
    logical_cpus = os.cpu_count() or len(cpu_dirs(sys_cpu_root))
    physical_cores = _physical_cores(sys_cpu_root, unavailable)
    if physical_cores is None:
        physical_cores = logical_cpus
    caches, cache_problem = read_caches(sys_cpu_root, usable)
    if cache_problem:
        unavailable["caches"] = cache_problem
    memory_bytes = _memory_bytes(proc_root / "meminfo", unavailable)
    return {
        "hostname": hostname,
        "cpu_model": cpu_model,
        "architecture": platform.machine(),
        "logical_cpus": logical_cpus,
        "usable_cpus": len(usable),
        "physical_cores": physical_cores,
        "caches": caches,
        "memory_bytes": memory_bytes,
        "machine_id": machine_fingerprint(hostname, cpu_model, logical_cpus, caches, memory_bytes),
        "unavailable": unavailable,
    }


def cache_bytes_by_level(identity: dict) -> dict[str, int]:
    """Data/unified cache bytes per level ("L1", "L2", ...) summed over the usable instances."""
    totals: dict[str, int] = {}
    for cache in _data_caches(identity):
        name = f"L{cache['level']}"
        totals[name] = totals.get(name, 0) + cache["size_bytes"] * cache["usable_instances"]
    return dict(sorted(totals.items()))


def last_level_cache_bytes(identity: dict) -> int:
    """Total last-level cache this process can fill: size × instances its cpus touch."""
    caches = _data_caches(identity)
    last_level = max(cache["level"] for cache in caches)
    return sum(
        cache["size_bytes"] * cache["usable_instances"]
        for cache in caches
        if cache["level"] == last_level
    )


def _data_caches(identity: dict) -> list[dict]:
    caches = [c for c in identity.get("caches", []) if c["type"] in DATA_CACHE_TYPES]
    if not caches:
        reason = identity.get("unavailable", {}).get("caches", "identity lists no caches")
        raise CacheInfoUnavailable(f"no data or unified cache information: {reason}")
    return caches


def _usable_cpu_ids() -> frozenset[int]:
    try:
        return frozenset(os.sched_getaffinity(0))
    except AttributeError:  # not Linux: assume every cpu is usable
        return frozenset(range(os.cpu_count() or 1))


def _cpu_model(cpuinfo_path: Path, unavailable: dict[str, str]) -> str:
    try:
        names = cpuinfo_values("model name", cpuinfo_path)
        if names:
            return names[0]
        # aarch64 has no model name; implementer and part still identify the core design.
        implementer = cpuinfo_values("CPU implementer", cpuinfo_path)
        part = cpuinfo_values("CPU part", cpuinfo_path)
        if implementer and part:
            return f"implementer {implementer[0]} part {part[0]}"
        reason = f"{cpuinfo_path} has no 'model name'"
    except OSError as error:
        reason = f"cannot read {cpuinfo_path}: {error}"
    fallback = platform.processor()
    unavailable["cpu_model"] = f"{reason}; used platform.processor() = {fallback!r}"
    return fallback or "unknown"


def _physical_cores(sys_cpu_root: Path, unavailable: dict[str, str]) -> int | None:
    cores = set()
    for _, cpu_dir in cpu_dirs(sys_cpu_root):
        topology = cpu_dir / "topology"
        try:
            package_id = (topology / "physical_package_id").read_text().strip()
            core_id = (topology / "core_id").read_text().strip()
        except OSError as error:
            unavailable["physical_cores"] = f"{error}; counted logical cpus instead"
            return None
        die_path = topology / "die_id"  # core ids may repeat across dies of one package
        die_id = die_path.read_text().strip() if die_path.exists() else ""
        cores.add((package_id, die_id, core_id))
    if not cores:
        unavailable["physical_cores"] = f"no cpu topology under {sys_cpu_root}; counted logical"
        return None
    return len(cores)


def _memory_bytes(meminfo_path: Path, unavailable: dict[str, str]) -> int | None:
    try:
        for line in meminfo_path.read_text().splitlines():
            if line.startswith("MemTotal:"):
                value, unit = line.split()[1:3]
                if unit != "kB":
                    raise ValueError(f"unexpected MemTotal unit {unit!r}")
                return int(value) * 1024
        unavailable["memory_bytes"] = f"{meminfo_path} has no MemTotal line"
    except (OSError, ValueError) as error:
        unavailable["memory_bytes"] = f"cannot read MemTotal from {meminfo_path}: {error}"
    return None
