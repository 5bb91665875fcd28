"""Cold samples with named operands: their cache lines flushed from every level (CpuBackend's
make_cold, backends.cpu_evict), checked against reads of memory on this machine."""

import platform
import statistics

import numpy as np
import pytest

from rooflab.backends.cpu import CpuBackend
from rooflab.backends.cpu_evict import _byte_span, evictor_for_this_machine
from rooflab.experiments.cache_edges import FALL

needs_a_flush_instruction = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64"), reason="no cache-line flush known here"
)


@pytest.mark.parametrize(
    "view",
    [
        lambda a: a,
        lambda a: a.T,
        lambda a: a[::-1],
        lambda a: a[:, ::-2],
        lambda a: a[3:5, 7:9],
        lambda a: a[2:2],
    ],
    ids=["whole", "transposed", "rows reversed", "columns reversed, every other", "block", "empty"],
)
def test_a_views_byte_span_is_the_memory_its_elements_reach(view):
    array = np.arange(12 * 16, dtype=np.float64).reshape(12, 16)
    shown = view(array)
    low, high = _byte_span(shown)
    if shown.size == 0:
        assert low == high
        return
    base = array.ctypes.data
    offsets = [base + 8 * int(i) for i in np.ravel(shown).astype(np.int64)]  # value = index
    assert low == min(offsets) and high == max(offsets) + 8


@needs_a_flush_instruction
def test_make_cold_evicts_the_operands_it_is_given_and_flushes_without_them():
    backend = CpuBackend()
    x, w, y = np.ones((8, 64)), np.ones((64, 32), dtype=np.float32), np.empty((8, 32))
    flushed, method = backend.make_cold([x, w, y])
    assert flushed == x.nbytes + w.nbytes + y.nbytes
    instruction = evictor_for_this_machine().instruction
    assert method.startswith(f"{instruction} of every cache line of the call's operands ({flushed}")
    assert backend.make_cold() == (backend.flush_bytes, backend.flush_method)
    assert backend.make_cold([]) == (backend.flush_bytes, backend.flush_method)


@needs_a_flush_instruction
@pytest.mark.slow  # rounds of real reads of memory
def test_a_read_of_evicted_data_runs_at_memory_speed_and_warm_it_is_faster():
    """Half the last level (at most 16 MiB, at least twice the levels below it) fits in it: warm,
    a read of it is clearly faster than a read of memory (where it is not, as on some VMs, the
    test has nothing to tell and skips); right after make_cold names it, no faster than memory.
    Reads alternate in one process and each figure is a median of rounds, so a slow spell of a
    shared machine moves all three alike."""
    from rooflab.backends import cpu_kernels

    backend = CpuBackend()
    caches = backend.cache_bytes_by_level()
    last = max(caches, key=caches.get)
    below = sum(size for level, size in caches.items() if level != last)
    size = min(caches[last] // 2, 16 << 20)
    if size < 2 * below:
        pytest.skip(f"this machine's {last} is not larger than twice the levels below it")
    threads = backend.default_threads()
    inside = cpu_kernels.allocate_stream("read", size, threads)
    far = cpu_kernels.allocate_stream("read", max(1 << 30, 8 * caches[last]), threads)
    read_inside = cpu_kernels.stream_runner("read", inside, threads, None)
    read_far = cpu_kernels.stream_runner("read", far, threads, None)

    def rate(arrays, run) -> float:
        return sum(a.nbytes for a in arrays) / backend.time_call(lambda: run(1))

    cold, warm, memory = [], [], []
    for _ in range(15):
        memory.append(rate(far, read_far))
        backend.make_cold(inside)
        cold.append(rate(inside, read_inside))
        read_inside(1)  # a non-inclusive last level fills as the level below evicts to it
        warm.append(rate(inside, read_inside))
    cold, warm, memory = (statistics.median(r) for r in (cold, warm, memory))
    figures = f"cold {cold / 1e9:.1f}, warm {warm / 1e9:.1f}, memory {memory / 1e9:.1f} GB/s"
    if warm <= 1.2 * memory:  # a VM's share of a last level can read no faster than memory
        pytest.skip(
            f"this machine's {last} reads no faster than memory, so cold cannot show: {figures}"
        )
    assert cold < (1 + FALL) * memory, figures
