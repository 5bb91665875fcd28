from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rooflab.machine import (
    CacheInfoUnavailable,
    cache_bytes_by_level,
    cpu_identity,
    last_level_cache_bytes,
    machine_fingerprint,
    parse_cache_size_bytes,
    parse_cpu_list,
    read_caches,
)

REAL_SYS_CPU = Path("/sys/devices/system/cpu")
KIB = 1024
MIB = 1024 * KIB


def write_cpu(root: Path, cpu: int, core_id: int, caches: list[tuple[int, str, str, str]]) -> None:
    """One fake sysfs cpu: topology plus cache/indexN for each (level, type, size, shared list)."""
    cpu_dir = root / f"cpu{cpu}"
    (cpu_dir / "topology").mkdir(parents=True)
    (cpu_dir / "topology" / "physical_package_id").write_text("0\n")
    (cpu_dir / "topology" / "core_id").write_text(f"{core_id}\n")
    for index, (level, cache_type, size, shared) in enumerate(caches):
        index_dir = cpu_dir / "cache" / f"index{index}"
        index_dir.mkdir(parents=True)
        for name, value in (("level", level), ("type", cache_type), ("size", size)):
            (index_dir / name).write_text(f"{value}\n")
        (index_dir / "shared_cpu_list").write_text(f"{shared}\n")


@pytest.fixture
def two_ccx_tree(tmp_path: Path) -> Path:
    """4 cpus = 2 SMT cores; each core has its own L1d/L1i/L2 and its own 16M L3 (two CCXs)."""
    root = tmp_path / "cpu"
    for cpu in range(4):
        pair = "0-1" if cpu < 2 else "2-3"
        caches = [
            (1, "Data", "32K", pair),
            (1, "Instruction", "32K", pair),
            (2, "Unified", "1024K", pair),
            (3, "Unified", "16384K", pair),
        ]
        write_cpu(root, cpu, core_id=cpu // 2, caches=caches)
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Fake CPU 9000\n")
    (tmp_path / "proc" / "meminfo").write_text("MemTotal:       16384000 kB\nMemFree: 1 kB\n")
    return tmp_path


def test_fake_tree_dedupes_shared_instances(two_ccx_tree):
    caches, problem = read_caches(two_ccx_tree / "cpu", usable_cpu_ids={0, 1, 2, 3})
    assert problem is None
    l3 = [c for c in caches if c["level"] == 3]
    # 4 cpus list an L3 each, but there are only 2 instances of 2 sharers.
    assert l3 == [
        {
            "level": 3,
            "type": "Unified",
            "size_bytes": 16 * MIB,
            "shared_cpu_count": 2,
            "instances": 2,
            "usable_instances": 2,
        }
    ]


def test_fake_tree_totals_follow_the_usable_cpus(two_ccx_tree):
    roots = {"sys_cpu_root": two_ccx_tree / "cpu", "proc_root": two_ccx_tree / "proc"}
    everything = cpu_identity(**roots, usable_cpu_ids={0, 1, 2, 3})
    one_core = cpu_identity(**roots, usable_cpu_ids={1})

    assert cache_bytes_by_level(everything) == {"L1": 64 * KIB, "L2": 2 * MIB, "L3": 32 * MIB}
    assert last_level_cache_bytes(everything) == 32 * MIB
    assert cache_bytes_by_level(one_core) == {"L1": 32 * KIB, "L2": 1 * MIB, "L3": 16 * MIB}
    assert last_level_cache_bytes(one_core) == 16 * MIB
    # Affinity is not identity: the same machine under taskset keeps its id.
    assert everything["machine_id"] == one_core["machine_id"]


def test_fake_tree_identity_fields(two_ccx_tree):
    identity = cpu_identity(two_ccx_tree / "cpu", two_ccx_tree / "proc", usable_cpu_ids={0})
    assert identity["cpu_model"] == "Fake CPU 9000"
    assert identity["physical_cores"] == 2  # SMT siblings share a core_id
    assert identity["memory_bytes"] == 16384000 * 1024
    assert identity["usable_cpus"] == 1
    assert identity["unavailable"] == {}


def test_missing_cache_info_raises_and_names_what_is_missing(tmp_path):
    write_cpu(tmp_path / "cpu", 0, core_id=0, caches=[])
    identity = cpu_identity(tmp_path / "cpu", tmp_path / "no-proc", usable_cpu_ids={0})
    assert "cache/index" in identity["unavailable"]["caches"]
    assert "MemTotal" in identity["unavailable"]["memory_bytes"]
    assert identity["memory_bytes"] is None
    with pytest.raises(CacheInfoUnavailable, match="cache/index"):
        cache_bytes_by_level(identity)
    with pytest.raises(CacheInfoUnavailable):
        last_level_cache_bytes(identity)


def test_unreadable_cache_size_is_reported(tmp_path):
    write_cpu(tmp_path / "cpu", 0, core_id=0, caches=[(1, "Data", "lots", "0")])
    caches, problem = read_caches(tmp_path / "cpu", usable_cpu_ids={0})
    assert caches == []
    assert "lots" in problem


@pytest.mark.skipif(
    not (REAL_SYS_CPU / "cpu0" / "cache").is_dir(), reason="no sysfs cache info here"
)
def test_real_sysfs_caches_are_consistent():
    identity = cpu_identity()
    assert identity["unavailable"].get("caches") is None
    caches = identity["caches"]
    assert min(c["level"] for c in caches) == 1
    for cache in caches:
        assert cache["size_bytes"] > 0
        assert 1 <= cache["usable_instances"] <= cache["instances"]
        assert cache["instances"] * cache["shared_cpu_count"] <= identity["logical_cpus"]
    by_level = cache_bytes_by_level(identity)
    assert "L1" in by_level
    assert last_level_cache_bytes(identity) == by_level[max(by_level)]


def test_real_identity_carries_every_field_and_a_stable_id():
    first, second = cpu_identity(), cpu_identity()
    for field in ("hostname", "cpu_model", "architecture", "memory_bytes", "physical_cores"):
        assert first[field] or field in first["unavailable"], field
    assert 1 <= first["usable_cpus"] <= first["logical_cpus"]
    assert first["physical_cores"] <= first["logical_cpus"]
    assert len(first["machine_id"]) == 16
    int(first["machine_id"], 16)
    assert first["machine_id"] == second["machine_id"]


FINGERPRINT_INPUTS = {
    "hostname": "node01",
    "cpu_model": "AMD EPYC",
    "logical_cpus": 2,
    "caches": [
        {
            "level": 3,
            "type": "Unified",
            "size_bytes": 32 * MIB,
            "shared_cpu_count": 2,
            "instances": 1,
            "usable_instances": 1,
        },
    ],
    "memory_bytes": 24 * 1024 * MIB,
}


@pytest.mark.parametrize(
    ("field", "other"),
    [
        ("hostname", "node02"),  # identical hardware, another node
        ("cpu_model", "AMD EPYC 7763"),
        ("logical_cpus", 4),
        ("caches", []),
        ("memory_bytes", 48 * 1024 * MIB),
    ],
)
def test_fingerprint_changes_with_each_input(field, other):
    base = machine_fingerprint(**FINGERPRINT_INPUTS)
    assert machine_fingerprint(**{**FINGERPRINT_INPUTS, field: other}) != base


def test_fingerprint_ignores_affinity_and_small_memory_drift():
    base = machine_fingerprint(**FINGERPRINT_INPUTS)
    narrower = [{**FINGERPRINT_INPUTS["caches"][0], "usable_instances": 0}]
    assert machine_fingerprint(**{**FINGERPRINT_INPUTS, "caches": narrower}) == base
    drifted = FINGERPRINT_INPUTS["memory_bytes"] - 30 * MIB  # a kernel update's reservation
    assert machine_fingerprint(**{**FINGERPRINT_INPUTS, "memory_bytes": drifted}) == base


@pytest.mark.parametrize(
    ("text", "size_bytes"),
    [("32K", 32 * KIB), ("32768K", 32 * MIB), ("1M", MIB), ("512", 512), ("48 KiB", 48 * KIB)],
)
def test_parse_cache_size_bytes(text, size_bytes):
    assert parse_cache_size_bytes(text) == size_bytes


def test_parse_cache_size_rejects_garbage():
    with pytest.raises(ValueError, match="cache size"):
        parse_cache_size_bytes("big")


def ranges_text(cpus: set[int]) -> str:
    """Format a cpu set as the kernel does: '0-3,8,10-11'."""
    parts, ordered = [], sorted(cpus)
    while ordered:
        first = last = ordered.pop(0)
        while ordered and ordered[0] == last + 1:
            last = ordered.pop(0)
        parts.append(str(first) if first == last else f"{first}-{last}")
    return ",".join(parts)


@given(st.sets(st.integers(min_value=0, max_value=300)))
def test_parse_cpu_list_round_trips(cpus):
    assert parse_cpu_list(ranges_text(cpus) + "\n") == cpus
