"""Imported operators on a machine's roofs (roofline.imported): the roof of each operator, the level
its bytes sit in, its bound and efficiency, its diagnosis, and why one without a ledger or a roof
gets no point."""

import pytest

from rooflab.devices import device_preset
from rooflab.imports import OPERATOR_COLUMNS
from rooflab.model import gemm_ledger
from rooflab.roofline.imported import measured_roofs, place, preset_roofs, time_without_work

CEILINGS = [
    ("compute", "fp32_fma", 200e9),
    ("compute", "fp64_fma", 100e9),
    ("bandwidth", "L1", 400e9),
    ("bandwidth", "L2", 150e9),
    ("bandwidth", "L3", 80e9),
    ("bandwidth", "DRAM", 20e9),
]
CACHES = {"L1": 48 * 1024, "L2": 1 << 21, "L3": 32 << 20}


def roofs():
    ceilings = {
        "run_id": "c1",
        "peak": {name: value for kind, name, value in CEILINGS if kind == "compute"},
        "bandwidth": {name: value for kind, name, value in CEILINGS if kind == "bandwidth"},
        "caches": CACHES,
        "memory_level": "DRAM",
    }
    return measured_roofs("m1", ceilings, "cpu", "box")


def operator(index, op, **given):
    return dict.fromkeys(OPERATOR_COLUMNS) | {"index": index, "op": op, "kind": "cpu_op"} | given


def test_a_matmul_sits_under_its_gemm_path_and_the_level_that_holds_its_operands():
    ledger = gemm_ledger(64, 512, 256, "fp32")  # 64 x 256 @ 256 x 512: 704 kB, in L2
    addmm = operator(0, "aten::addmm", dtype="fp32", time_s=1e-4, flops=ledger.flops,
                     bytes=ledger.bytes, ledger="matmul")  # fmt: skip
    (point,) = place([addmm], roofs())
    assert (point["compute_path"], point["level"]) == ("fp32_fma", "L2")
    intensity = ledger.flops / ledger.bytes
    attainable = min(200e9, 150e9 * intensity)
    assert point["intensity"] == pytest.approx(intensity)
    assert point["attainable_flops_per_s"] == pytest.approx(attainable)
    assert point["efficiency"] == pytest.approx(ledger.flops / 1e-4 / attainable)
    assert point["limiter"] == ("compute" if 150e9 * intensity > 200e9 else "memory")
    assert point["cause"] in ("compute_path", "at_roof", "low_reuse", "memory_parallelism")
    assert point["next_step"] and point["unplaced"] is None


def test_an_elementwise_op_past_the_caches_sits_under_the_memory_and_its_fma_path():
    n = 16 << 20  # 3 x 64 MiB: past the 32 MiB L3
    add = operator(1, "aten::add", dtype="fp32", time_s=0.02, flops=n, bytes=12 * n,
                   ledger="elementwise")  # fmt: skip
    (point,) = place([add], roofs())
    placed = (point["compute_path"], point["level"], point["limiter"])
    assert placed == ("fp32_fma", "DRAM", "memory")
    assert point["efficiency"] == pytest.approx((n / 0.02) / (20e9 * n / (12 * n)))


def test_an_operator_without_a_ledger_or_a_roof_keeps_its_time_and_says_why():
    bare = operator(2, "aten::copy_", dtype="fp32", time_s=3e-3)
    half = operator(3, "aten::mul", dtype="bf16", time_s=1e-3, flops=10, bytes=40,
                    ledger="elementwise")  # fmt: skip
    first, second = place([bare, half], roofs())
    assert first["unplaced"] == "no ledger" and first["efficiency"] is None
    assert first["time_s"] == 3e-3
    assert second["unplaced"].startswith("no bf16 compute roof in ceilings run c1")
    assert "fp32_fma, fp64_fma" in second["unplaced"]


def test_a_datasheet_preset_is_its_dtype_path_and_its_memory():
    preset = preset_roofs(device_preset("h200-sxm"))
    assert preset["source"] == "datasheet" and preset["memory_level"] == "HBM"
    ledger = gemm_ledger(4096, 4096, 4096, "bf16")
    mm = operator(0, "aten::mm", dtype="bf16", time_s=2e-3, flops=ledger.flops,
                  bytes=ledger.bytes, ledger="matmul")  # fmt: skip
    (point,) = place([mm], preset)
    assert (point["compute_path"], point["level"]) == ("bf16", "HBM")
    assert point["peak_flops_per_s"] == preset["peak"]["bf16"]


def test_the_time_without_work_is_the_kernels_without_counts_in_an_export():
    counted = operator(0, "gemm", kind="kernel", time_s=3.0, flops=10, bytes=10)
    bare = operator(1, "sobel", kind="kernel", time_s=1.0, bytes=10, q_source="counters")
    (gpu,) = time_without_work([counted, bare]).values()
    assert (gpu["total_s"], gpu["without_ledger_s"], gpu["share_without_ledger"]) == (4, 1, 0.25)


def test_an_operator_of_no_flops_keeps_its_ledger_but_no_point():
    relu = operator(0, "aten::clamp_min", dtype="fp32", time_s=1e-3, flops=0, bytes=8 << 20,
                    ledger="elementwise")  # fmt: skip
    (point,) = place([relu], roofs())
    assert point["unplaced"].startswith("F = 0") and point["efficiency"] is None


def test_a_counted_kernel_of_a_recorded_h200_export_sits_under_its_counted_path(tmp_path):
    # tests/fixtures/ncu/gemm: cuBLAS's bf16 GEMM 4096^3 profiled by ncu on an H200 (README)
    from pathlib import Path

    from rooflab.imports import read_profile

    export = Path(__file__).parent / "fixtures/ncu/gemm/bf16_m4096_n4096_k4096_cache-all.raw.csv"
    (kernel,) = read_profile("ncu", export).operators
    preset = preset_roofs(device_preset("h200-sxm"))
    (point,) = place([kernel], preset)
    assert (point["compute_path"], point["level"], point["limiter"]) == ("bf16", "HBM", "compute")
    flops = 2 * 4096**3
    assert point["flops"] == pytest.approx(flops, rel=0.01)  # the counters' calibration
    assert point["efficiency"] == pytest.approx(flops / point["time_s"] / 989.4e12, rel=0.01)
    assert set(point["levels"]) == {"HBM"}  # the preset's only level
    # on roofs that measured the L2 as well, each counted level is bounded against its own
    measured = measured_roofs(
        "h200",
        {"run_id": "c", "peak": {"bf16_tensor": 700e12}, "caches": {},
         "bandwidth": {"HBM": 4.0e12, "L2": 10e12}, "memory_level": "HBM"},
        "cuda",
    )  # fmt: skip
    (counted,) = place([kernel], measured)
    assert counted["compute_path"] == "bf16_tensor" and set(counted["levels"]) == {"HBM", "L2"}
    levels = kernel["counted"]["bytes_by_level"]
    assert counted["levels"]["L2"]["intensity"] == pytest.approx(kernel["flops"] / levels["L2"])
