"""The CUDA C kernels compile for sm_80 and sm_90 without a GPU, and do the work they are counted
for: the FLOPs of fma.cu and the accesses of stream.cu are read from the compiled PTX.

nvcc (on PATH on the development machines) checks the sources as C++; NVRTC, with the options
CuPy's RawModule adds, checks them the way the CUDA backend compiles them at run time.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rooflab.backends.cuda_kernels import (
    STREAM_ARRAYS,
    fma_kernel_shape,
    kernel_source,
    stream_function,
)

KERNELS = Path(__file__).resolve().parents[1] / "src" / "rooflab" / "kernels"
SOURCES = sorted(KERNELS.glob("*.cu"))
ARCHS = ("80", "90")
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")

# The options cupy.cuda.compiler adds for a RawModule (CuPy 14), and rooflab's own.
CUPY_NVRTC_OPTIONS = ("-std=c++17", "--device-as-default-execution-space", "-ftz=true")


def test_every_kernel_file_is_found():
    assert {p.stem for p in SOURCES} == {"stream", "fma", "timing"}
    for path in SOURCES:
        assert kernel_source(path.stem) == path.read_text()  # what the package loads


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_nvcc_compiles(tmp_path, source, arch):
    result = subprocess.run(
        [
            NVCC,
            "-std=c++17",
            f"-arch=sm_{arch}",
            "-cubin",
            *("-Werror", "all-warnings"),
            *("-o", str(tmp_path / f"{source.stem}.cubin"), str(source)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / f"{source.stem}.cubin").stat().st_size > 0


@needs_nvcc
def test_nvcc_rejects_a_broken_kernel(tmp_path):
    """The compile test can fail: a syntax error is caught without a GPU."""
    broken = tmp_path / "broken.cu"
    broken.write_text(kernel_source("stream").replace("double2 v;", "double2 v", 1))
    result = subprocess.run(
        [NVCC, "-arch=sm_90", "-cubin", "-o", str(tmp_path / "b.cubin"), str(broken)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as error:  # cupy missing, or its NVRTC library missing
        pytest.skip(f"NVRTC through CuPy is not available here: {error}")
    return nvrtc


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_nvrtc_compiles_as_rawmodule_does(source, arch):
    nvrtc = _nvrtc()
    program = nvrtc.createProgram(source.read_text(), source.name, (), ())
    try:
        nvrtc.compileProgram(program, (*CUPY_NVRTC_OPTIONS, f"-arch=sm_{arch}"))
        assert len(nvrtc.getCUBIN(program)) > 0
    except nvrtc.NVRTCError as error:
        pytest.fail(f"{error}\n{nvrtc.getProgramLog(program)}")
    finally:
        nvrtc.destroyProgram(program)


def _ptx_entries(tmp_path, name: str) -> dict[str, str]:
    ptx = tmp_path / f"{name}.ptx"
    subprocess.run(
        [NVCC, "-std=c++17", "-arch=sm_90", "--ptx", "-o", str(ptx), str(KERNELS / f"{name}.cu")],
        check=True,
        capture_output=True,
    )
    text = ptx.read_text()
    starts = [(m.group(1), m.start()) for m in re.finditer(r"\.entry (\w+)\(", text)]
    bounds = [*(start for _, start in starts[1:]), len(text)]
    return {entry: text[start:end] for (entry, start), end in zip(starts, bounds, strict=True)}


@needs_nvcc
def test_fma_kernels_run_as_many_fmas_as_they_are_counted_for(tmp_path):
    chains, repeat = fma_kernel_shape()
    entries = _ptx_entries(tmp_path, "fma")
    instruction = {"fma_fp64": "fma.rn.f64", "fma_fp32": "fma.rn.f32", "fma_fp16": "fma.rn.f16x2"}
    for entry, fma in instruction.items():
        # The chains are unrolled: one loop iteration holds exactly chains x repeat FMAs.
        assert entries[entry].count(fma) == chains * repeat, entry


def _loop_labels(body: str) -> list[str]:
    """The labels of a PTX entry that a branch jumps back to: one per loop."""
    defined: set[str] = set()
    back = []
    for line in body.splitlines():
        if label := re.match(r"\s*(\$\w+):", line):
            defined.add(label.group(1))
        if branch := re.search(r"\bbra(?:\.uni)?\s+(\$\w+);", line):
            back.extend([branch.group(1)] if branch.group(1) in defined else [])
    return back


def _vector_accesses(body: str) -> tuple[int, int]:
    """(loads, stores) of 16-byte vectors that bypass L1 (.cg), in the PTX of one entry."""
    return body.count("ld.global.cg.v2.f64"), body.count("st.global.cg.v2.f64")


@needs_nvcc
def test_stream_kernels_access_as_many_arrays_as_their_bytes_count(tmp_path):
    entries = _ptx_entries(tmp_path, "stream")
    for kernel, arrays in STREAM_ARRAYS.items():
        body = entries[stream_function(kernel, one_pass=False)]
        # One 16-byte access per array per element, in the 4-way unrolled loop and the remainder.
        assert sum(_vector_accesses(body)) == 5 * arrays, kernel
        assert "ld.global.v2" not in body.replace("ld.global.cg", ""), kernel  # no L1-cached load
        # the passes (reps) and, inside each, the unrolled loop and the remainder
        assert len(_loop_labels(body)) == 3, kernel


@needs_nvcc
def test_one_pass_kernels_move_one_vector_per_thread_and_loop_nowhere(tmp_path):
    entries = _ptx_entries(tmp_path, "stream")
    stores = {"read": 0, "copy": 1, "triad": 1}
    for kernel, arrays in STREAM_ARRAYS.items():
        body = entries[stream_function(kernel, one_pass=True)]
        # each thread: one 16-byte access per array, once; the host launches it once per pass
        assert _vector_accesses(body) == (arrays - stores[kernel], stores[kernel]), kernel
        assert _loop_labels(body) == [], kernel
        assert "ld.global.ca" not in body and "ld.global.v2" not in body, kernel
        assert "%ctaid.x" in body and "%tid.x" in body, kernel  # thread i moves vector i


@needs_nvcc
def test_l1_read_loads_through_l1_once_per_vector_of_its_blocks_region(tmp_path):
    body = _ptx_entries(tmp_path, "stream")["l1_read"]
    # One 16-byte L1-cached load per vector, in the 4-way unrolled loop and the remainder; no
    # store, no load that bypasses L1 (the bytes counted are the L1's reads).
    assert body.count("ld.global.ca.v2.f64") == 5
    assert "ld.global.cg" not in body and "st.global" not in body.replace("st.global.f64", "")
    # Where a block reads depends on the block: each reads a region of its own, not one buffer
    # that all blocks of an SM share.
    assert "%ctaid.x" in body and "%nctaid" not in body
