"""The host link without a GPU: its plan and names, the byte ledger, the refusals, the choice of
its ceiling (the faster pinned method per direction; pageable never), what the CPU backend does
(nothing), and a measurement end to end through a CPU backend given a host link of sleeps."""

import ctypes
import gc
import time
from dataclasses import replace
from types import SimpleNamespace

import duckdb
import numpy as np
import pandas as pd
import pytest

from rooflab.backends.base import BackendError, CeilingLoad
from rooflab.backends.cpu import CpuBackend
from rooflab.backends.cuda_host_link import (
    HOST_LEVEL,
    PLAN,
    HostLinkCase,
    HostLinkLoad,
    HostLinkUnavailable,
    check_buffer,
    check_can_map,
    copy_bytes,
    host_link_loads,
    mapped_pointer,
)
from rooflab.conditions.disturbance import DisturbanceSettings
from rooflab.config import ConfigError, validate_config
from rooflab.experiments.ceiling_plan import (
    QUICK,
    CeilingsTooLarge,
    check_memory,
    check_supported,
    settings_from_config,
)
from rooflab.experiments.ceilings import run_ceilings
from rooflab.experiments.host_link_ceilings import (
    ceiling_rows,
    direction_ceilings,
    measure_host_link,
)
from rooflab.progress import Progress
from rooflab.records import to_table
from rooflab.report.roofline_chart import _roofs
from rooflab.roofline.points import ceiling_values
from rooflab.store.report_views import REPORT_VIEWS_SQL
from rooflab.vocabulary import MEMORY_LEVELS
from tests.conftest import UNJUDGED

MiB = 1024 * 1024
KERNELS = (
    "h2d_sm_pinned",
    "h2d_memcpy_pinned",
    "h2d_memcpy_pageable",
    "d2h_sm_pinned",
    "d2h_memcpy_pinned",
    "d2h_memcpy_pageable",
)
PINNED = {kernel for kernel in KERNELS if not kernel.endswith("pageable")}


# -- the plan, names and ledger --


def test_the_plan_measures_both_directions_both_methods_and_pageable_memcpy_only():
    assert tuple(case.kernel for case in PLAN) == KERNELS
    assert [case.config_id for case in PLAN] == [f"host/{k}" for k in KERNELS]
    assert [case.sets_ceiling for case in PLAN] == [True, True, False] * 2
    # the SM copy and its cudaMemcpyAsync peer are taken back to back, per direction
    assert [(c.direction, c.method) for c in PLAN[:2]] == [("h2d", "sm"), ("h2d", "memcpy")]


def test_a_case_refuses_what_cannot_be_measured():
    with pytest.raises(ValueError, match="pinned only"):
        HostLinkCase("h2d", "sm", "pageable")  # an SM copy needs mapped memory
    with pytest.raises(ValueError, match="unknown host-link 'p2p'"):
        HostLinkCase("p2p", "memcpy", "pinned")
    assert "pageable host memory" in HostLinkCase("d2h", "memcpy", "pageable").describe()


def test_the_ledger_counts_each_copy_once_in_whole_vectors():
    assert copy_bytes(512 * MiB) == 512 * MiB
    assert copy_bytes(100) == 96  # 16-byte vectors
    with pytest.raises(BackendError, match="at least 16 B"):
        copy_bytes(8)


def test_a_buffer_the_l2_could_serve_is_refused_naming_the_key():
    check_buffer(120 * MiB, 60 * MiB)
    with pytest.raises(BackendError, match=r"ceilings\.host_link_buffer: .* less than 2x"):
        check_buffer(64 * MiB, 60 * MiB)


def test_a_device_that_cannot_map_host_memory_is_refused_with_what_was_found():
    check_can_map({"CanMapHostMemory": 1, "UnifiedAddressing": 1})
    with pytest.raises(HostLinkUnavailable) as refused:
        check_can_map({"CanMapHostMemory": 0, "UnifiedAddressing": 1}, "device 0")
    text = str(refused.value)
    assert "device 0" in text and "CanMapHostMemory = 0" in text
    assert "UnifiedAddressing" not in text  # only what is missing
    assert "ceilings.host_link_buffer: null" in text  # the way out
    with pytest.raises(HostLinkUnavailable, match="UnifiedAddressing = unreported"):
        check_can_map({"CanMapHostMemory": 1})
    assert isinstance(refused.value, BackendError)


def test_pinned_memory_without_a_device_address_is_refused():
    assert mapped_pointer(0x1000, 0x1000, memory_type=1, host_type=1) == 0x1000
    with pytest.raises(HostLinkUnavailable, match="no device address"):
        mapped_pointer(0x1000, 0, memory_type=1, host_type=1)
    with pytest.raises(HostLinkUnavailable, match="memory type 0"):
        mapped_pointer(0x1000, 0x1000, memory_type=0, host_type=1)


# -- settings --


def test_the_buffer_setting_is_parsed_with_its_unit_and_can_be_switched_off():
    default = settings_from_config(validate_config({})["ceilings"])
    assert default.host_link_buffer_bytes == 512 * MiB  # nvbandwidth's default --bufferSize
    config = validate_config({"ceilings": {"host_link_buffer": "256 MiB"}})
    assert settings_from_config(config["ceilings"]).host_link_buffer_bytes == 256 * MiB
    off = validate_config({"ceilings": {"host_link_buffer": None}})
    assert settings_from_config(off["ceilings"]).host_link_buffer_bytes is None
    with pytest.raises(ConfigError, match=r"ceilings\.host_link_buffer: '1 GB/s'"):
        settings_from_config({**config["ceilings"], "host_link_buffer": "1 GB/s"})
    with pytest.raises(ConfigError, match="host_link_buffer"):
        validate_config({"ceilings": {"host_link_buffer": 512}})  # a number has no unit


# -- the ceiling: the faster pinned method per direction, pageable never --


def _row(kernel: str, value: float, disturbed: bool = False) -> dict:
    case = next(c for c in PLAN if c.kernel == kernel)
    return {
        "run_id": "r",
        "config_id": case.config_id,
        "kernel": kernel,
        "threads": 4096 if case.method == "sm" else None,
        "value": value,
        "unit": "B/s",
        "ci_rel_width": 0.01,
        "stop_reason": "converged",
        "disturbed": disturbed,
        "disturbance": "busy" if disturbed else None,
        "n_disturbed": 0,
        "other_cpus": None,
        "steal_fraction": None,
        "gpu_other_processes": 0,
    }


def test_each_direction_takes_its_faster_pinned_method_never_pageable():
    rows = [
        _row("h2d_sm_pinned", 50e9),
        _row("h2d_memcpy_pinned", 52e9),
        _row("h2d_memcpy_pageable", 80e9),  # faster, as it can be where pageable memory is mapped
        _row("d2h_sm_pinned", 55e9),
        _row("d2h_memcpy_pinned", 60e9, disturbed=True),
        _row("d2h_memcpy_pageable", 20e9),
    ]
    chosen = direction_ceilings(rows)
    assert chosen["h2d"]["kernel"] == "h2d_memcpy_pinned"
    assert chosen["d2h"]["kernel"] == "d2h_sm_pinned"  # a clean row beats a disturbed one
    # where every pinned row was disturbed, the fastest of them, carrying its flag
    both = [_row("d2h_sm_pinned", 55e9, True), _row("d2h_memcpy_pinned", 60e9, True)]
    assert direction_ceilings(both)["d2h"]["kernel"] == "d2h_memcpy_pinned"
    assert direction_ceilings([_row("h2d_memcpy_pageable", 80e9)]) == {}


def test_ceiling_rows_are_the_pinned_cases_named_host_each_saying_whether_it_sets_the_ceiling():
    rates = (50e9, 52e9, 80e9, 57e9, 56e9, 20e9)
    rows = [_row(kernel, rate) for kernel, rate in zip(KERNELS, rates, strict=True)]
    how = {kernel: f"how {kernel}" for kernel in KERNELS}
    ceilings = ceiling_rows(rows, "r", how, {})
    to_table("ceilings", ceilings)  # every row fits the table's schema
    by_kernel = {row["kernel"]: row for row in ceilings}
    assert set(by_kernel) == PINNED
    assert {row["name"] for row in ceilings} == {HOST_LEVEL}
    assert all(row["kind"] == "bandwidth" and row["unit"] == "B/s" for row in ceilings)
    assert by_kernel["h2d_memcpy_pinned"]["method"].startswith(
        "how h2d_memcpy_pinned; the h2d ceiling"
    )
    assert "not the h2d ceiling" in by_kernel["h2d_sm_pinned"]["method"]
    assert "; the d2h ceiling (faster than its peer" in by_kernel["d2h_sm_pinned"]["method"]
    assert "50 GB/s" in by_kernel["h2d_memcpy_pinned"]["method"]  # its peer's rate beside it
    # The level's roof is its best kernel's, as on every level: here the best pinned row.
    _, bandwidth = ceiling_values({"ceilings": to_table("ceilings", ceilings)})
    assert bandwidth == {HOST_LEVEL: 57e9}
    assert HOST_LEVEL not in MEMORY_LEVELS  # no point is ever placed at the host link


# -- the CPU backend: no host link, nothing changes --


@pytest.fixture(scope="module")
def cpu():
    return CpuBackend()


def test_the_cpu_backend_has_no_host_link_and_measures_none(cpu):
    assert not cpu.has_host_link and cpu.host_link_loads(512 * MiB) == []
    tables = {"conditions": [], "ceilings": [], "ceiling_sweep": [], "samples": []}
    with Progress("host link") as progress:
        measure_host_link(cpu, QUICK, "r", tables, progress, 0.01)
    assert tables == {"conditions": [], "ceilings": [], "ceiling_sweep": [], "samples": []}
    # nor does its setting refuse anything there, however small
    tiny = replace(QUICK, host_link_buffer_bytes=16)
    check_supported(cpu, tiny)
    check_memory(cpu, tiny)


# -- end to end through a CPU backend given a host link of sleeps --

# seconds per MB copied: h2d pageable is the fastest (it must still not set the ceiling), d2h's
# SM copy beats its memcpy
SECONDS_PER_MB = {
    "h2d_sm_pinned": 0.0010,
    "h2d_memcpy_pinned": 0.0005,
    "h2d_memcpy_pageable": 0.00025,
    "d2h_sm_pinned": 0.0005,
    "d2h_memcpy_pinned": 0.0010,
    "d2h_memcpy_pageable": 0.0020,
}


class SleepingLinkBackend(CpuBackend):
    """The CPU backend with a host link whose copies are sleeps of known rates: the pageable ones
    timed by a timer of their own (as on CUDA, where they cannot run behind the held stream)."""

    has_host_link = True

    def __init__(self) -> None:
        super().__init__()
        self.own_timer_calls = 0
        self.buffers_asked: list[int] = []

    def cache_bytes_by_level(self) -> dict[str, int]:
        # an H200's (its L2 50 MiB), not this machine's: the 256 MiB buffer must be 2x past them
        return {"L1": 256 * 1024, "L2": 50 * 2**20}

    def _own_timer(self, call) -> float:
        self.own_timer_calls += 1
        started = time.perf_counter()
        call()
        return time.perf_counter() - started

    def host_link_loads(self, buffer_bytes: int) -> list:
        self.buffers_asked.append(buffer_bytes)
        loads = []
        for case in PLAN:
            seconds = SECONDS_PER_MB[case.kernel]
            pageable = case.memory == "pageable"
            load = CeilingLoad(
                run=lambda reps, s=seconds: time.sleep(reps * s), amount_per_unit=10**6, unit="B"
            )
            loads.append(
                HostLinkLoad(case, load, timer=self._own_timer if pageable else None, timing="t")
            )
        return loads


LENIENT = DisturbanceSettings(**UNJUDGED)
SETTINGS = replace(
    QUICK,
    window_s=0.004,
    max_point_s=0.1,
    host_link_buffer_bytes=256 * MiB,
    disturbance=LENIENT,
)


@pytest.fixture(scope="module")
def sleeping():
    backend = SleepingLinkBackend()
    tables = {"conditions": [], "ceilings": [], "ceiling_sweep": [], "samples": []}
    with Progress("host link") as progress:
        measure_host_link(backend, SETTINGS, "r", tables, progress, 0.05)
    return backend, tables


def test_every_case_becomes_a_sweep_row_and_the_pinned_ones_ceilings(sleeping):
    backend, tables = sleeping
    assert backend.buffers_asked == [256 * MiB]
    for name, rows in tables.items():
        to_table(name, rows)  # every row fits its schema
    sweep = {row["kernel"]: row for row in tables["ceiling_sweep"]}
    assert tuple(sweep) == KERNELS
    for kernel, row in sweep.items():
        assert row["level"] == (None if kernel.endswith("pageable") else HOST_LEVEL)
        assert row["config_id"] == f"host/{kernel}" and row["working_set_bytes"] == 10**6
        # the sleeps' rates, within what sleeping overshoots by
        assert 0.7 < row["value"] * SECONDS_PER_MB[kernel] / 1e6 <= 1.01, (kernel, row["value"])
    ceilings = {row["kernel"]: row for row in tables["ceilings"]}
    assert set(ceilings) == PINNED
    assert "; the h2d ceiling (faster" in ceilings["h2d_memcpy_pinned"]["method"]
    assert "; the d2h ceiling (faster" in ceilings["d2h_sm_pinned"]["method"]
    assert "not the d2h ceiling" in ceilings["d2h_memcpy_pinned"]["method"]
    # the roof: the best pinned rate, although pageable h2d was faster still
    _, bandwidth = ceiling_values({"ceilings": to_table("ceilings", tables["ceilings"])})
    assert bandwidth[HOST_LEVEL] == max(sweep[k]["value"] for k in ceilings)
    assert bandwidth[HOST_LEVEL] < sweep["h2d_memcpy_pageable"]["value"]


def test_every_window_and_condition_is_kept_under_the_case_config_id(sleeping):
    backend, tables = sleeping
    samples = pd.DataFrame(tables["samples"])
    counts = samples.groupby("config_id").size()
    assert set(counts.index) == {f"host/{k}" for k in KERNELS}
    assert (counts >= SETTINGS.windows).all()
    readings = {(c["config_id"], c["phase"]) for c in tables["conditions"]}
    assert {(f"host/{k}", phase) for k in KERNELS for phase in ("before", "after")} <= readings
    # a pageable copy is timed by its own timer: every one of its windows (and its sizing)
    pageable = counts[[f"host/{k}" for k in KERNELS if k.endswith("pageable")]].sum()
    assert backend.own_timer_calls >= pageable


def test_a_backend_with_a_host_link_refuses_a_buffer_its_caches_could_serve():
    backend = SleepingLinkBackend()
    caches = sum(backend.cache_bytes_by_level().values())
    with pytest.raises(BackendError, match=r"ceilings\.host_link_buffer"):
        check_supported(backend, replace(SETTINGS, host_link_buffer_bytes=caches))
    check_supported(backend, replace(SETTINGS, host_link_buffer_bytes=None))  # not measured
    huge = replace(SETTINGS, host_link_buffer_bytes=backend.memory_available_bytes() * 2)
    with pytest.raises(CeilingsTooLarge, match=r"ceilings\.host_link_buffer: the host link's"):
        check_memory(backend, huge)


def test_a_ceilings_run_takes_the_host_link_with_the_other_levels():
    backend = SleepingLinkBackend()
    settings = replace(
        SETTINGS,
        min_working_set_bytes=64 * 1024,
        max_working_set_bytes=256 * 1024,
        kernels=("read",),
        fma_dtypes=("fp64",),
        blas_dtypes=(),
        max_rounds=2,
    )
    tables = run_ceilings(backend, settings)
    for name, rows in tables.items():
        to_table(name, rows)
    names = {(row["name"], row["kernel"]) for row in tables["ceilings"]}
    assert {(HOST_LEVEL, k) for k in PINNED} <= names
    assert any(name != HOST_LEVEL for name, _ in names)
    (run,) = tables["runs"]
    assert '"host_link_buffer_bytes": 268435456' in run["settings"]


# -- the report draws `host` as a roof, and keeps it out of the working-set sweep chart --


def test_the_roofline_draws_host_as_the_slowest_labelled_roof():
    ceilings = pd.DataFrame(
        [
            {"kind": "bandwidth", "name": HOST_LEVEL, "kernel": "d2h_sm_pinned", "value": 5.5e10},
            {"kind": "bandwidth", "name": "HBM", "kernel": "read", "value": 4.5e12},
            {"kind": "compute", "name": "bf16_tensor", "kernel": "matmul", "value": 8e14},
        ]
    )
    bandwidths, _, texts = _roofs(ceilings)
    assert list(bandwidths) == ["HBM", HOST_LEVEL]
    assert texts[HOST_LEVEL] == "host 55 GB/s (d2h_sm_pinned)"


def test_the_sweep_chart_view_leaves_the_host_links_copies_out():
    connection = duckdb.connect()
    connection.execute(
        "CREATE TABLE ceiling_sweep AS SELECT * FROM (VALUES "
        "('r', 'stream/read/ws1024', 'read', 1024, 1e11, 'L2', 0.01), "
        "('r', 'host/h2d_sm_pinned', 'h2d_sm_pinned', 268435456, 5e10, 'host', 0.01), "
        "('r', 'host/d2h_memcpy_pageable', 'd2h_memcpy_pageable', 268435456, 2e10, NULL, 0.01)"
        ") AS t(run_id, config_id, kernel, working_set_bytes, value, level, iqr_ratio)"
    )
    kernels = connection.execute(REPORT_VIEWS_SQL["ceiling_sweep_points"]).fetchall()
    assert [row[1] for row in kernels] == ["read"]


# -- the GPU part's logic, on a stand-in for CuPy whose "device" is host memory --


class _DeviceArray(np.ndarray):
    """A numpy array with CuPy's `.data.ptr`."""

    @property
    def data(self):
        return SimpleNamespace(ptr=self.ctypes.data)


class FakeCuPy:
    """What cuda_host_link asks of CuPy, over host memory: pinned memory is a ctypes buffer
    whose device address is its own, copies are memmoves, events read the host clock."""

    def __init__(self, device_pointer_of=lambda ptr: ptr) -> None:
        self.pinned: dict[int, object] = {}
        self.freed: list[int] = []
        self.copies: list[tuple[int, int, int, int]] = []  # (dst, src, bytes, kind)
        fake = self

        class Event:
            def record(self, stream=None):
                self.t = time.perf_counter()

            def synchronize(self):
                pass

        def host_alloc(size, flags):
            assert flags == 2  # cudaHostAllocMapped
            buffer = ctypes.create_string_buffer(size)
            fake.pinned[ctypes.addressof(buffer)] = buffer
            return ctypes.addressof(buffer)

        def memcpy_async(dst, src, size, kind, stream):
            fake.copies.append((dst, src, size, kind))
            ctypes.memmove(dst, src, size)

        self.cuda = SimpleNamespace(
            runtime=SimpleNamespace(
                hostAllocMapped=2,
                memoryTypeHost=1,
                memcpyHostToDevice=1,
                memcpyDeviceToHost=2,
                hostAlloc=host_alloc,
                freeHost=lambda ptr: fake.freed.append(ptr),
                pointerGetAttributes=lambda ptr: SimpleNamespace(
                    devicePointer=device_pointer_of(ptr), type=1
                ),
                memcpyAsync=memcpy_async,
            ),
            Event=Event,
            get_elapsed_time=lambda start, stop: (stop.t - start.t) * 1e3,
        )
        self.uint64 = np.uint64

    def ones(self, count, dtype):
        return np.ones(count, dtype=dtype).view(_DeviceArray)


class FakeStream:
    ptr = 7

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass


def _address(value) -> int:
    return int(value) if isinstance(value, np.integer) else value.ctypes.data


def fake_copy_kernel(grid, block, args):
    """stream_copy(a, b, n, reps): b = a, n 16-byte vectors, reps times."""
    source, target, n, reps = args
    assert grid == (4,) and block == (256,) and reps >= 1
    for _ in range(int(reps)):
        ctypes.memmove(_address(target), _address(source), int(n) * 16)


MAPPABLE = SimpleNamespace(attributes={"CanMapHostMemory": 1, "UnifiedAddressing": 1}, id=0)


def test_the_loads_copy_their_buffer_each_way_and_are_checked_before_timing():
    cp = FakeCuPy()
    loads = host_link_loads(cp, FakeStream(), 4 * MiB + 8, fake_copy_kernel, 4, MAPPABLE)
    assert [link.case for link in loads] == list(PLAN)
    buffers = loads[0].owner
    assert buffers.nbytes == 4 * MiB  # whole 16-byte vectors
    assert all(link.owner is buffers and link.load.amount_per_unit == 4 * MiB for link in loads)
    # each check copied one buffer's worth with the right kind, memcpy cases only
    kinds = [(size, kind) for _, _, size, kind in cp.copies]
    assert kinds == [(4 * MiB, 1), (4 * MiB, 1), (4 * MiB, 2), (4 * MiB, 2)]
    # the last check (d2h pageable) left its mark in pageable memory, from the device
    assert (buffers.pageable == buffers.device).all() and buffers.pageable[0] == 0x5EED << 48 | 6
    # a copy runs `reps` times; the SM copies use the kernel's threads, the memcpys none
    by_kernel = {link.case.kernel: link for link in loads}
    buffers.pinned.fill(3)
    by_kernel["h2d_sm_pinned"].load.run(2)
    assert (buffers.device == 3).all() and by_kernel["h2d_sm_pinned"].load.threads == 4 * 256
    buffers.device.fill(4)
    by_kernel["d2h_memcpy_pinned"].load.run(1)
    assert (buffers.pinned == 4).all() and by_kernel["d2h_memcpy_pinned"].load.threads is None
    # pageable copies carry a timer of their own; the pinned ones use the backend's
    assert [link.timer is not None for link in loads] == [False, False, True] * 2
    assert loads[2].timer(lambda: None) >= 0
    # the pinned buffer lives as long as a load does, then is freed
    del buffers, by_kernel
    gc.collect()
    assert cp.freed == []
    del loads
    gc.collect()
    assert cp.freed == list(cp.pinned)


def test_a_copy_that_leaves_the_target_unwritten_stops_before_timing():
    def half_copy(grid, block, args):
        source, target, n, reps = args
        fake_copy_kernel(grid, block, (source, target, np.uint64(int(n) // 2), reps))

    with pytest.raises(BackendError, match="h2d_sm_pinned: one copy of 1048576 B left words"):
        host_link_loads(FakeCuPy(), FakeStream(), MiB, half_copy, 4, MAPPABLE)


def test_host_memory_the_device_cannot_address_is_refused_before_any_copy():
    cp = FakeCuPy(device_pointer_of=lambda ptr: 0)
    with pytest.raises(HostLinkUnavailable, match="no device address"):
        host_link_loads(cp, FakeStream(), MiB, fake_copy_kernel, 4, MAPPABLE)
    unmappable = SimpleNamespace(attributes={"CanMapHostMemory": 0, "UnifiedAddressing": 1}, id=1)
    cp = FakeCuPy()
    with pytest.raises(HostLinkUnavailable, match="device 1, which cannot map it"):
        host_link_loads(cp, FakeStream(), MiB, fake_copy_kernel, 4, unmappable)
    assert cp.pinned == {}  # refused before pinning anything
