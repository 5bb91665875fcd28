"""The compiled CPU kernels: exact work accounting, correct results on every path this CPU has, and
code of the path's vector width with the path's FMA count per loop iteration (read from the
assembly each path compiles to)."""

import platform
import re
import warnings

import numpy as np
import pytest

from rooflab.backends import cpu_ir, cpu_kernels
from rooflab.backends.cpu_paths import PATHS, PATHS_BY_ISA, vector_paths

HOST_PATHS = [path.isa for path in cpu_kernels.host_paths()]


@pytest.mark.parametrize("kernel", sorted(cpu_kernels.STREAM_KERNELS))
def test_stream_arrays_match_the_working_set_and_thread_chunks(kernel):
    arrays = cpu_kernels.allocate_stream(kernel, 3 * 64 * 1024, threads=2)
    assert len(arrays) == cpu_kernels.STREAM_KERNELS[kernel]
    n = arrays[0].size
    assert all(a.size == n for a in arrays) and n % (2 * 64) == 0
    assert sum(a.nbytes for a in arrays) == pytest.approx(3 * 64 * 1024, rel=0.05)
    assert all(np.all(a != 0) for a in arrays)
    assert all(a.ctypes.data % 64 == 0 for a in arrays)  # whole lines: no split vector loads


def test_triad_arrays_start_at_page_offsets_0_3_and_2_kib():
    """No two arrays share a page offset (4K aliasing), and not the 0/1/2 KiB layout that ran
    the AVX2 triad 5 % slower at L2."""
    arrays = cpu_kernels.allocate_stream("triad", 3 * 1024 * 1024, threads=2)
    assert [a.ctypes.data % 4096 for a in arrays] == [0, 3072, 2048]


@pytest.mark.parametrize("isa", HOST_PATHS)
def test_triad_computes_a_equals_b_plus_s_c(isa):
    a, b, c = cpu_kernels.allocate_stream("triad", 48 * 1024, threads=2)
    b[:], c[:] = 1.0, 2.0
    cpu_kernels.run_stream("triad", (a, b, c), reps=1, threads=2, isa=isa)
    assert np.allclose(a, 1.0 + 3.0 * 2.0)


@pytest.mark.parametrize("isa", HOST_PATHS)
def test_read_sums_every_element_of_every_pass(isa):
    """The bytes counted are bytes read: the checksum is reps x the sum of the whole array
    (integer values, so the sum is exact in any order)."""
    (a,) = cpu_kernels.allocate_stream("read", 256 * 1024, threads=2)
    a[:] = np.arange(a.size) % 1000 + 1
    assert cpu_kernels.run_stream("read", (a,), reps=3, threads=2, isa=isa) == 3 * a.sum()


@pytest.mark.parametrize("isa", HOST_PATHS)
def test_copy_writes_every_element_and_leaves_the_source(isa):
    a, b = cpu_kernels.allocate_stream("copy", 128 * 1024, threads=2)
    a[:] = np.arange(a.size) + 1.0
    source = a.copy()
    cpu_kernels.run_stream("copy", (a, b), reps=2, threads=2, isa=isa)
    assert np.array_equal(b, source) and np.array_equal(a, source)


def test_arrays_the_kernels_cannot_cover_are_refused():
    """The kernels run whole loop trips only: a ragged array would leave elements unread while
    their bytes were counted, so it is refused, not run."""
    with pytest.raises(ValueError, match="use allocate_stream"):
        cpu_kernels.run_stream("read", (np.ones(2 * 1003),), reps=1, threads=2)
    with pytest.raises(ValueError, match="no 'sve' vector path"):
        cpu_kernels.run_fma("fp64", 10, 1, isa="sve")


@pytest.mark.parametrize("isa", HOST_PATHS)
@pytest.mark.parametrize("dtype", ["fp64", "fp32"])
def test_fma_flops_count_every_chain_and_lane(isa, dtype):
    path = PATHS_BY_ISA[isa]
    per_thread = path.fma_chains * path.vector_bits // {"fp64": 64, "fp32": 32}[dtype]
    assert cpu_kernels.fma_flops(dtype, 10, 2, isa) == 2 * per_thread * 10 * 2
    # Lane j starts at 1 + 1e-3 j and after n steps of acc += x y holds 1 + 1e-3 j + n x y:
    # the checksum says every lane of every chain ran every iteration.
    iters, xy = 10_000, cpu_ir.FMA_X[dtype] * cpu_ir.FMA_Y[dtype]
    expected = 2 * sum(1 + 1e-3 * j + iters * xy for j in range(per_thread))
    total = cpu_kernels.run_fma(dtype, iters, 2, isa)
    assert total == pytest.approx(expected, rel=1e-3 if dtype == "fp32" else 1e-9)


def test_the_widest_path_is_the_default():
    assert cpu_kernels.fma_flops("fp64", 1, 1) == cpu_kernels.fma_flops("fp64", 1, 1, HOST_PATHS[0])
    widths = [PATHS_BY_ISA[isa].vector_bits for isa in HOST_PATHS]
    assert widths == sorted(widths, reverse=True)


def test_paths_follow_the_cpu_features():
    paths, unbuilt = vector_paths("x86_64", {"avx512f", "avx2", "fma"})
    assert [p.isa for p in paths] == ["avx512", "avx2"] and not unbuilt
    paths, _ = vector_paths("x86_64", {"avx2", "fma"})  # Zen 3, Haswell
    assert [p.isa for p in paths] == ["avx2"]
    paths, unbuilt = vector_paths("x86_64", {"avx", "sse2"})  # Sandy Bridge: no FMA
    assert paths == () and "no FMA vector path" in unbuilt[0]
    paths, unbuilt = vector_paths("aarch64", {"neon", "sve"})
    assert [p.isa for p in paths] == ["neon"] and "SVE" in unbuilt[0]
    paths, unbuilt = vector_paths("riscv64", {"v"})
    assert paths == () and "riscv64" in unbuilt[0]


# -- the code each path compiles to ------------------------------------------------------------

_FMA = {"x86_64": re.compile(r"^\s*vfmadd\w+\s+(.*)$"), "aarch64": re.compile(r"^\s*fmla\s+(.*)$")}
_BRANCH = re.compile(r"^\s*(j\w+|b\.\w+|b)\s+(\.LBB\w+)\s*$")


def loop_body(assembly: str, function: str) -> list[str]:
    """The lines of the innermost loop of `function` (the last backward branch's body)."""
    start = assembly.index(f"\n{function}:")
    lines = assembly[start : assembly.index(".Lfunc_end", start)].splitlines()
    labels = {line[:-1]: i for i, line in enumerate(lines) if re.match(r"^\.LBB\w+:$", line)}
    loops = [
        (labels[m.group(2)], i)
        for i, line in enumerate(lines)
        if (m := _BRANCH.match(line)) and labels.get(m.group(2), len(lines)) < i
    ]
    assert loops, f"{function}: no loop found"
    first, last = min(loops, key=lambda loop: loop[1] - loop[0])  # the innermost
    return lines[first + 1 : last + 1]


def registers_of(path, dtype: str) -> str:
    if path.architecture == "aarch64":
        lanes = path.lanes(dtype)
        return rf"v\d+\.{lanes}{'d' if dtype == 'fp64' else 's'}"
    return {512: r"%zmm\d+", 256: r"%ymm\d+"}[path.vector_bits]


def check_path(path, host: bool) -> None:
    assembly = cpu_ir.assembly(path, host=host)
    fma = _FMA[path.architecture]
    for dtype in ("fp64", "fp32"):
        body = loop_body(assembly, f"fma_{dtype}")
        fmas = [m.group(1) for line in body if (m := fma.match(line))]
        assert len(fmas) == path.fma_chains, f"{path.isa} {dtype}: {len(fmas)} FMAs per iteration"
        width = re.compile(registers_of(path, dtype))
        # three vectors of the width (Arm may take x·y's broadcast y as one element: v0.d[0])
        element = re.compile(r"v\d+\.[ds]\[\d\]")
        assert all(
            len(width.findall(ops)) + len(element.findall(ops)) == 3 and width.match(ops.split()[0])
            for ops in fmas
        ), fmas
        assert not any(re.search(r"\(|\[", line) for line in body if not fma.match(line)), (
            "the chains spill to memory"
        )
    # triad: one FMA per vector of a trip; read: one add per partial sum; all of the width
    add = {"x86_64": r"^\s*vaddpd\s+(.*)$", "aarch64": r"^\s*fadd\s+(.*)$"}[path.architecture]
    width = re.compile(registers_of(path, "fp64"))
    for kernel, pattern, vectors in (
        ("triad", fma, path.stream_unroll),
        ("read", re.compile(add), cpu_ir.READ_ACCUMULATORS),
    ):
        body = loop_body(assembly, f"stream_{kernel}")
        operations = [m.group(1) for line in body if (m := pattern.match(line))]
        assert len(operations) == vectors, f"{path.isa} {kernel}: {body}"
        assert all(width.match(ops.split()[-1 if "%" in ops else 0]) for ops in operations), body


@pytest.mark.parametrize("path", PATHS, ids=[path.isa for path in PATHS])
def test_each_path_compiles_to_its_width_and_fma_count(path):
    """Every path is checked as built for this CPU where the CPU has it, else as cross-compiled
    for its architecture's generic CPU (the code a machine with that path would run); a path
    that cannot be built here is named."""
    on_host = path.isa in HOST_PATHS
    if not on_host:
        warnings.warn(
            f"{path.isa} ({path.label}) is not a path of this CPU ({platform.machine()}): its "
            "code is checked as cross-compiled, not run",
            stacklevel=1,
        )
    check_path(path, host=on_host)


def test_a_runner_keeps_its_arrays_alive():
    """The runner holds raw pointers into the arrays: it must keep them, or a timed call reads
    freed memory (a segmentation fault seen when only the pointers were kept)."""
    import gc
    import weakref

    arrays = cpu_kernels.allocate_stream("triad", 96 * 1024, threads=2)
    base = weakref.ref(arrays[0].base)
    run = cpu_kernels.stream_runner("triad", arrays, threads=2)
    del arrays
    gc.collect()
    assert base() is not None
    assert np.isfinite(run(2))
