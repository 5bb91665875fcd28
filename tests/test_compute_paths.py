"""Compute roofs per instruction path, and a roof that a library GEMM beats flagged as the fault it
is (experiments.compute_paths)."""

from rooflab.experiments.compute_paths import beaten_roofs, fma_paths


def ceiling(name, dtype, value, kernel="fma_chains", unit="FLOP/s", kind="compute"):
    return {"name": name, "dtype": dtype, "value": value, "kernel": kernel, "unit": unit,
            "kind": kind}  # fmt: skip


def test_each_dtype_gets_a_roof_per_path_the_widest_its_default():
    paths = fma_paths(("fp64", "fp32"), ("avx512", "avx2"))
    assert [p.name for p in paths] == ["fp64_fma", "fp64_fma_avx2", "fp32_fma", "fp32_fma_avx2"]
    assert [p.config_id(1) for p in paths[:2]] == ["fma/fp64/round1", "fma/fp64/avx2/round1"]
    (gpu,) = fma_paths(("fp32",), (None,))  # a GPU's one FMA path keeps its plain name
    assert gpu.name == "fp32_fma" and gpu.config_id(0) == "fma/fp32/round0"


def test_a_blas_ceiling_above_its_dtypes_roof_flags_that_roof_with_both_figures():
    # as seen on an AVX-512 Xeon when the FMA chains ran at AVX2 width
    rows = [
        ceiling("fp64_fma", "fp64", 108e9),
        ceiling("fp64_fma_avx2", "fp64", 110e9),  # another path's roof: no fault of fp64_fma
        ceiling("fp64_blas", "fp64", 139e9, kernel="matmul"),
        ceiling("fp32_fma", "fp32", 400e9),
        ceiling("fp32_blas", "fp32", 300e9, kernel="matmul"),
        ceiling("DRAM", "fp64", 30e9, kernel="triad", unit="B/s", kind="bandwidth"),
    ]
    (line,) = beaten_roofs(rows, "cpu")
    assert "fp64_blas" in line and "139 GFLOP/s" in line and "fp64_fma 108 GFLOP/s" in line
    by_name = {row["name"]: row for row in rows}
    assert by_name["fp64_fma"]["roof_beaten"] is True
    assert by_name["fp64_fma"]["roof_beaten_evidence"].startswith("fp64_blas (matmul) 139")
    # the narrower path is the roof of AVX2 code, not of BLAS's GEMMs; fp32 holds
    assert by_name["fp64_fma_avx2"]["roof_beaten"] is False
    assert by_name["fp32_fma"]["roof_beaten"] is False
    assert by_name["DRAM"]["roof_beaten"] is None


def test_another_paths_roof_is_no_fault():
    """On a GPU a bf16 GEMM (its own tensor path) above the fp32 FMA roof is expected; an fp32
    cuBLAS GEMM above the fp32 FMA roof is a fault (it runs on the FMA pipes)."""
    rows = [
        ceiling("fp32_fma", "fp32", 50e12),
        ceiling("bf16_tensor", "bf16", 700e12, kernel="matmul"),
        ceiling("int8_tensor", "int8", 1400e12, kernel="matmul", unit="OP/s"),
        ceiling("fp32_cublas", "fp32", 55e12, kernel="matmul"),
    ]
    (line,) = beaten_roofs(rows, "cuda")
    assert line.startswith("roof beaten: fp32_cublas")
    assert [r["name"] for r in rows if r["roof_beaten"]] == ["fp32_fma"]


def point(config_id, efficiency, limiter="compute", **flags):
    return {
        "machine_id": "m1", "config_id": config_id, "cache_state": "warm", "limiter": limiter,
        "level": "L2", "compute_path": "fp64_fma", "work_unit": "FLOP",
        "peak_flops_per_s": 108e9, "bandwidth_b_per_s": 225e9,
        "achieved_flops_per_s": 108e9 * efficiency, "efficiency": efficiency, **flags,
    }  # fmt: skip


def test_a_clean_point_above_its_roof_beats_it_and_a_disturbed_one_does_not():
    from rooflab.roofline.points import beats_its_roof, roof_faults

    points = [
        point("fp64/nn/m512", 1.29),
        point("fp64/nn/m1024", 1.10),
        point("fp64/nn/m64", 1.30, disturbed=True),  # another process's time: no evidence
        point("fp64/nn/m128", 1.30, noisy=True),
        point("fp64/nn/m8", 1.03),  # within the noise of a roof
        point("fp64/nn/m1", 1.20, limiter="memory"),
    ]
    for p in points:
        p["roof_beaten"] = beats_its_roof(p)
    assert [p["roof_beaten"] for p in points] == [True, True, False, False, False, True]
    memory, compute = roof_faults(points)  # one line per roof, in order of its name
    assert "2 clean point(s) above fp64_fma (108 GFLOP/s)" in compute
    assert "best fp64/nn/m512 warm at 139.3 GFLOP/s, 1.29x" in compute
    assert "1 clean point(s) above L2 (225 GB/s)" in memory


def test_a_cpu_without_a_vector_path_refuses_ceilings_in_one_line(monkeypatch):
    """On an architecture rooflab builds no path for (ppc64le, riscv64), the ceilings step stops
    before measuring with the reason, not with a roof below the machine's."""
    import pytest

    from rooflab.backends import cpu_kernels
    from rooflab.backends.base import BackendError
    from rooflab.backends.cpu import CpuBackend
    from rooflab.backends.cpu_paths import vector_paths
    from rooflab.experiments.ceiling_plan import QUICK, check_supported

    backend = CpuBackend()
    monkeypatch.setattr(cpu_kernels, "_host_paths", lambda: vector_paths("ppc64le", {"vsx"}))
    with pytest.raises(BackendError, match=r"no CPU ceilings .* architecture 'ppc64le'"):
        check_supported(backend, QUICK)
