"""The host link on a real GPU: H2D and D2H, the SM copy over mapped pinned memory and its
cudaMemcpyAsync peer, and cudaMemcpyAsync from pageable memory, measured as a ceilings run
measures them (experiments.host_link_ceilings), then checked against physics and each other.

Bounds are generous on purpose: PCIe 3 x16 moves about 12 GB/s, PCIe 5 x16 about 55 and
NVLink-C2C (Grace Hopper) up to 450 GB/s a direction, so any host link lies between 1 GB/s and
1 TB/s; a rate outside that is a wrong byte count or a copy that did not happen.
"""

from dataclasses import replace

import pytest

from rooflab.backends.base import BackendError, CeilingLoad
from rooflab.backends.cuda_host_link import HOST_LEVEL, PLAN, HostLinkLoad, check_copy
from rooflab.experiments.ceiling_plan import QUICK, check_memory, check_supported
from rooflab.experiments.host_link_ceilings import measure_host_link
from rooflab.progress import Progress
from rooflab.records import to_table

MiB = 1 << 20
SETTINGS = replace(QUICK, window_s=0.01, host_link_buffer_bytes=256 * MiB)


@pytest.fixture(scope="module")
def host_link(cuda):
    check_supported(cuda, SETTINGS)
    check_memory(cuda, SETTINGS)
    tables = {"conditions": [], "ceilings": [], "ceiling_sweep": [], "samples": []}
    with Progress("host link") as progress:
        measure_host_link(cuda, SETTINGS, "gpu-host-link", tables, progress, 0.2)
    rates = {row["kernel"]: row["value"] for row in tables["ceiling_sweep"]}
    print("host link (GB/s):", {kernel: round(rate / 1e9, 2) for kernel, rate in rates.items()})
    return tables, rates


def test_every_case_is_measured_and_fits_its_table(cuda, host_link):
    tables, rates = host_link
    assert cuda.has_host_link
    assert list(rates) == [case.kernel for case in PLAN]
    for name, rows in tables.items():
        to_table(name, rows)
    assert {row["name"] for row in tables["ceilings"]} == {HOST_LEVEL}
    assert {row["kernel"] for row in tables["ceilings"]} == {
        case.kernel for case in PLAN if case.sets_ceiling
    }
    assert all(row["working_set_bytes"] == 256 * MiB for row in tables["ceiling_sweep"])


def test_every_rate_is_a_host_link_rate(host_link):
    _, rates = host_link
    for kernel, rate in rates.items():
        assert 1e9 < rate < 1e12, (kernel, rate)


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_pinned_memcpy_is_no_slower_than_pageable(host_link, direction):
    _, rates = host_link
    pinned, pageable = rates[f"{direction}_memcpy_pinned"], rates[f"{direction}_memcpy_pageable"]
    assert pinned >= 0.95 * pageable, (pinned, pageable)


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_the_sm_copy_and_cudamemcpy_agree_within_2x(host_link, direction):
    _, rates = host_link
    ratio = rates[f"{direction}_sm_pinned"] / rates[f"{direction}_memcpy_pinned"]
    assert 0.5 < ratio < 2, ratio


def test_the_host_roof_is_the_fastest_pinned_case(host_link):
    tables, rates = host_link
    roof = max(row["value"] for row in tables["ceilings"])
    assert roof == max(rate for kernel, rate in rates.items() if kernel.endswith("_pinned"))


def test_pageable_copies_never_held_the_stream(cuda, host_link):
    # a pageable copy makes the host wait: timed behind the held stream it would time the hold out
    assert cuda.hold_stream, cuda.timing_note


def test_a_copy_that_copies_nothing_is_refused_before_timing(cuda):
    cp = cuda.array_module
    (link, *_) = cuda.host_link_loads(256 * MiB)
    idle = HostLinkLoad(
        link.case, CeilingLoad(run=lambda reps: None, amount_per_unit=256 * MiB, unit="B")
    )
    with pytest.raises(BackendError, match="without the source's value"):
        check_copy(cp, cp.cuda.Stream(non_blocking=True), link.owner, idle, 0x1234)
