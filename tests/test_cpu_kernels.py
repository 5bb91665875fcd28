"""The compiled CPU kernels: exact work accounting, and SIMD code where the ceiling needs it."""

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rooflab.backends import cpu_kernels


@pytest.mark.parametrize("kernel", sorted(cpu_kernels.STREAM_KERNELS))
def test_stream_arrays_match_the_working_set_and_thread_chunks(kernel):
    arrays = cpu_kernels.allocate_stream(kernel, 3 * 64 * 1024, threads=2)
    assert len(arrays) == cpu_kernels.STREAM_KERNELS[kernel]
    n = arrays[0].size
    assert all(a.size == n for a in arrays) and n % (2 * 64) == 0
    assert sum(a.nbytes for a in arrays) == pytest.approx(3 * 64 * 1024, rel=0.05)
    assert all(np.all(a != 0) for a in arrays)


def test_triad_computes_a_equals_b_plus_s_c():
    a, b, c = cpu_kernels.allocate_stream("triad", 48 * 1024, threads=2)
    b[:], c[:] = 1.0, 2.0
    cpu_kernels.run_stream("triad", (a, b, c), reps=1, threads=2)
    assert np.allclose(a, 1.0 + 3.0 * 2.0)


@pytest.mark.parametrize("elements", [None, 2 * 1003])  # allocate_stream's, and a ragged size
def test_read_sums_every_element_of_every_pass(elements):
    """The bytes counted are bytes read: the checksum is reps x the sum of the whole array
    (integer values, so the sum is exact in any order)."""
    if elements is None:
        (a,) = cpu_kernels.allocate_stream("read", 256 * 1024, threads=2)
    else:
        a = np.empty(elements)
    a[:] = np.arange(a.size) % 1000 + 1
    assert cpu_kernels.run_stream("read", (a,), reps=3, threads=2) == 3 * a.sum()


def test_copy_writes_every_element_and_leaves_the_source():
    a, b = cpu_kernels.allocate_stream("copy", 128 * 1024, threads=2)
    a[:] = np.arange(a.size) + 1.0
    source = a.copy()
    cpu_kernels.run_stream("copy", (a, b), reps=2, threads=2)
    assert np.array_equal(b, source) and np.array_equal(a, source)


def test_fma_flops_count_every_chain():
    per_thread = cpu_kernels.FMA_LANES["fp64"]
    assert cpu_kernels.fma_flops("fp64", 10, 2) == 2 * per_thread * 10 * 2
    assert np.isfinite(cpu_kernels.run_fma("fp32", 1000, 1))


@pytest.mark.skipif(
    platform.machine() != "x86_64" or "avx2" not in Path("/proc/cpuinfo").read_text(),
    reason="checks x86 AVX2 code generation",
)
def test_fma_chains_compile_to_vector_fma(tmp_path):
    # numba turns LLVM's SLP vectorizer off by default; without it the chains compile to scalar
    # FMAs and the ceiling silently drops to a fraction of the peak. A fresh cache directory is
    # needed because inspect_asm() is empty for a kernel loaded from the cache.
    script = (
        "from rooflab.backends import cpu_kernels as k\n"
        "k.run_fma('fp64', 1, 1)\n"
        "print('\\n'.join(k._fma_f64.inspect_asm().values()))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)},
    )
    # Packed FMAs at whatever width the CPU offers: ymm on AVX2, zmm where numba targets AVX-512
    # (12 ymm chains become 6 zmm ones); scalar `sd` FMAs are what a lost vectorizer leaves.
    vector_fmas = re.findall(r"vfmadd\d+pd\s[^\n]*%[xyz]mm", result.stdout)
    scalar_fmas = re.findall(r"vfmadd\d+sd\s", result.stdout)
    assert len(vector_fmas) >= 6 and len(vector_fmas) > len(scalar_fmas)
