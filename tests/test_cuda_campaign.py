"""The GPU campaign's configuration, records and Roofline pairing, without a GPU."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from rooflab.backends.base import BackendError
from rooflab.backends.cpu import CpuBackend
from rooflab.backends.cublas_args import GEMM_TYPES
from rooflab.backends.cublaslt_args import LT_GEMM_TYPES
from rooflab.backends.selection import cuda_problem
from rooflab.config import load_config, load_yaml, validate_config
from rooflab.experiments.ceiling_plan import QUICK, check_supported, plateaus
from rooflab.experiments.ceilings import run_ceilings
from rooflab.experiments.correctness import tolerances
from rooflab.model import gemm_ledger
from rooflab.records import read_run, write_run
from rooflab.roofline import build_points, latest_ceilings_by_machine, roofline_points
from tests.conftest import run_rooflab
from tests.table_rows import runs_row

CONFIG = Path(__file__).resolve().parents[1] / "config"
MiB = 1 << 20


def _gpu_campaign() -> dict:
    """config.yaml with gpu.yaml merged over it, as `snakemake --configfile config/gpu.yaml`."""
    merged = load_yaml(CONFIG / "config.yaml")
    update_config(merged, load_yaml(CONFIG / "gpu.yaml"))
    return validate_config(merged, "config.yaml + gpu.yaml")


def test_gpu_campaign_is_gpu_only_once_merged_over_the_default():
    merged = _gpu_campaign()
    assert merged["backend"] == "cuda"
    assert merged["sweeps"] == load_config(CONFIG / "gpu.yaml")["sweeps"]  # nothing of the CPU's
    for name, sweep in merged["sweeps"].items():
        assert set(sweep["dtypes"]) <= set(GEMM_TYPES) | set(LT_GEMM_TYPES), name
    for name, scenario in merged["stages"].items():
        assert scenario["memory_level"] == "HBM", name  # the GPU's memory, not DRAM
        assert scenario["compute_path"].endswith(("_tensor", "_fma")), name


def test_gpu_campaign_holds_the_articles_weight_reuse_sweep():
    sweeps = load_config(CONFIG / "gpu.yaml")["sweeps"]
    reuse = [s for s in sweeps.values() if s["n"] == s["k"] and len(s["m"]) > 10]
    assert sorted(s["n"][0] for s in reuse) == [4096, 8192]
    for sweep in reuse:
        assert min(sweep["m"]) == 1 and max(sweep["m"]) == 8192
        assert set(sweep["dtypes"]) == {"bf16", "fp16"}
        assert set(sweep["cache_states"]) == {"warm", "cold"}
    tails = sweeps["tails"]
    assert set(tails["dtypes"]) == set(GEMM_TYPES) and set(tails["layouts"]) == {"nn", "nt"}
    assert all(n % 8 and k % 8 for n in tails["n"] for k in tails["k"])  # off the tile sizes


def test_gpu_ceilings_settings():
    ceilings = load_config(CONFIG / "gpu.yaml")["ceilings"]
    assert ceilings["fma_dtypes"] == ["fp64", "fp32", "fp16"]
    # cuBLAS's dtypes, and through cuBLASLt FP8 (e4m3) and int8
    assert set(ceilings["blas_dtypes"]) == set(GEMM_TYPES) | {"fp8_e4m3", "int8"}
    assert ceilings["blas_n"] >= 8192


def test_plateaus_name_the_gpu_memory():
    windows = plateaus({"L2": 50 * MiB}, high=1 << 30, memory_level="HBM")
    assert windows == {"L2": (0, 25 * MiB), "HBM": (200 * MiB, 1 << 30)}


def test_tolerances_of_the_tensor_core_dtypes():
    assert tolerances("bf16", 1024)["rel_frobenius"] == 2 * 2.0**-8 + 4 * 32 * 2.0**-23
    assert tolerances("fp16", 4096)["max_componentwise"] == 2.0**-11 + 4097 * 2.0**-23
    tf32 = tolerances("tf32", 1024)
    assert tf32["rel_frobenius"] == 2 * 2.0**-24 + 2 * 2.0**-10 + 4 * 32 * 2.0**-23
    assert tolerances("fp32", 1024)["rel_frobenius"] < tf32["rel_frobenius"] / 50


@pytest.fixture(scope="module")
def cpu():
    return CpuBackend()


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"fma_dtypes": ("fp32", "fp16")}, "no FMA dtype 'fp16'; supported: fp64, fp32"),
        ({"blas_dtypes": ("bf16",)}, "no library GEMM dtype 'bf16'; supported: fp64, fp32"),
    ],
)
def test_cpu_refuses_gpu_only_ceilings_before_measuring(cpu, change, says):
    from dataclasses import replace

    with pytest.raises(BackendError, match=says):
        check_supported(cpu, replace(QUICK, **change))
    with pytest.raises(BackendError, match=says):
        run_ceilings(cpu, replace(QUICK, **change))


def test_cli_refuses_fp16_fma_on_the_cpu_with_one_line(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"backend": "cpu", "ceilings": {"fma_dtypes": ["fp16"]}}))
    out = tmp_path / "out"
    result = run_rooflab("measure", "ceilings", "--config", config, "--out", out)
    assert result.returncode == 2
    assert "no FMA dtype 'fp16'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists() or not any(out.rglob("*.parquet"))


def test_auto_without_a_gpu_records_the_fallback(tmp_path):
    if cuda_problem() is None:
        pytest.skip("a CUDA device is usable here")
    config = tmp_path / "c.yaml"
    timing = {"warmup_s": 0.01, "min_time_s": 0.01, "min_samples": 3}
    sweeps = {"tiny": {"m": [2], "n": [8], "k": [8], "dtypes": ["fp64"]}}
    config.write_text(yaml.safe_dump({"backend": "auto", "timing": timing, "sweeps": sweeps}))
    out = tmp_path / "out"
    result = run_rooflab("measure", "gemm", "--config", config, "--sweep", "tiny", "--out", out)
    assert result.returncode == 0, result.stderr
    assert "fell back to cpu" in result.stderr
    (run_dir,) = out.iterdir()
    (run,) = read_run(run_dir)["runs"].to_pylist()
    assert run["backend"] == "cpu" and run["backend_requested"] == "auto"
    assert run["backend_note"].startswith("auto: no CUDA device (looked for")
    assert run["backend_note"].endswith("fell back to cpu")
    (point, *_) = read_run(run_dir)["timed_points"].to_pylist()
    assert point["clock_moved"] is None and point["sm_clock_min_mhz"] is None  # CPU: no SM clock


# -- Roofline pairing of a GPU run ----------------------------------------------------------------

GPU_MACHINE = {
    "gpu": {"name": "NVIDIA H200", "l2_bytes": 50 * MiB},
    "caches": [
        {
            "level": 2,
            "type": "Unified",
            "size_bytes": 50 * MiB,
            "shared_cpu_count": 0,
            "instances": 1,
            "usable_instances": 1,
        }
    ],
}


def _run_row(run_id, kind):
    return runs_row(
        run_id, kind, datetime(2026, 1, 1, tzinfo=UTC), backend="cuda", machine_id="gpu-1",
        machine=json.dumps(GPU_MACHINE),
    )  # fmt: skip


def _gemm_point(sweep, dtype, m, n, k, cache_state, median_s, **columns):
    """A timed layout nn GEMM point of run g, its F and Q from the model's ledger."""
    ledger = gemm_ledger(m, n, k, dtype)
    return (
        {"run_id": "g", "kind": "gemm", "sweep": sweep, "dtype": dtype, "layout": "nn"}
        | {"config_id": f"{sweep}/{dtype}/nn/m{m}_n{n}_k{k}", "m": m, "n": n, "k": k}
        | {"cache_state": cache_state, "median_s": median_s, "flops": ledger.flops}
        | {"bytes_model": ledger.bytes, "achieved_flops_per_s": ledger.flops / median_s, **columns}
    )


def test_gpu_points_pair_with_tensor_paths_and_l2_or_hbm(tmp_path):
    ceilings = [
        {"run_id": "c", "kind": kind, "name": name, "kernel": kernel, "value": value}
        for kind, name, kernel, value in (
            # The SMs' L1 has a ceiling (for counter points) but holds no warm operands between
            # kernels: neither a home for a warm point nor the memory.
            ("bandwidth", "L1", "l1_read", 30e12),
            ("bandwidth", "L2", "read", 10e12),
            ("bandwidth", "HBM", "copy", 4e12),
            ("compute", "bf16_tensor", "matmul", 8e14),
            ("compute", "fp32_fma", "fma", 6e13),
        )
    ]
    ceilings_dir = write_run(
        tmp_path / "ceilings", "c", {"runs": [_run_row("c", "ceilings")], "ceilings": ceilings}
    )
    points = [
        _gemm_point("s", dtype, m, n, k, state, 1e-5)
        for dtype, m, n, k, state in [
            ("bf16", 1, 4096, 4096, "warm"),  # 32 MiB of W: fits the 50 MiB L2
            ("bf16", 1, 4096, 4096, "cold"),
            ("bf16", 1, 8192, 8192, "warm"),  # 128 MiB: does not
            ("fp32", 64, 64, 64, "warm"),
            ("fp16", 64, 64, 64, "warm"),  # no fp16_tensor ceiling measured: not paired
        ]
    ]
    gemm_dir = write_run(
        tmp_path / "gemm", "g", {"runs": [_run_row("g", "gemm")], "timed_points": points}
    )
    machines = latest_ceilings_by_machine([ceilings_dir])
    assert machines["gpu-1"]["caches"] == {"L2": 50 * MiB}
    assert machines["gpu-1"]["memory_level"] == "HBM"
    paired = [
        (p["dtype"], p["n"], p["cache_state"], p["level"], p["compute_path"])
        for p in roofline_points([gemm_dir], machines)
    ]
    assert paired == [
        ("bf16", 4096, "warm", "L2", "bf16_tensor"),
        ("bf16", 4096, "cold", "HBM", "bf16_tensor"),
        ("bf16", 8192, "warm", "HBM", "bf16_tensor"),
        ("fp32", 64, "warm", "L2", "fp32_fma"),
    ]


# -- the device check's summary table, on a store of a (synthetic) GPU campaign --------------------


def test_device_summary_puts_measured_ceilings_beside_the_datasheet(tmp_path):
    from rooflab.roofline import build_analysis, write_analysis
    from rooflab.store import ingest
    from tests.gpu.device_summary import summary

    results = tmp_path / "results"
    machine = json.dumps({**GPU_MACHINE, "timing_method": "CUDA events; stream held"})
    started = datetime(2026, 1, 1, tzinfo=UTC)

    def run(run_id: str, kind: str, at: datetime, sweep: str | None = None) -> dict:
        return runs_row(
            run_id, kind, at, sweep, backend="cuda", machine_id="gpu-1", host="node",
            device_name="NVIDIA H200", machine=machine,
        )  # fmt: skip

    ceilings = [
        ("bandwidth", "HBM", "read", 4.1e12, False, False),
        ("bandwidth", "HBM", "copy", 4.3e12, False, False),
        ("bandwidth", "L2", "read", 11e12, False, False),
        ("compute", "fp32_fma", "fma_chains", 60e12, True, False),
        ("compute", "bf16_tensor", "matmul", 780e12, False, True),
    ]
    rows = [
        {"run_id": "c", "kind": kind, "name": name, "kernel": kernel, "value": value}
        | {"unit": "B/s" if kind == "bandwidth" else "FLOP/s"}
        | {"clock_moved": moved, "clock_capped": capped}
        for kind, name, kernel, value, moved, capped in ceilings
    ]
    ceilings_tables = {"runs": [run("c", "ceilings", started)], "ceilings": rows}
    ceilings_dir = write_run(results / "ceilings" / "runs", "c", ceilings_tables)
    unflagged = {"noisy": False, "clock_moved": False, "clock_capped": False}
    point = _gemm_point("weight_reuse", "bf16", 1, 4096, 4096, "cold", 10e-6, **unflagged)
    gemm_tables = {"runs": [run("g", "gemm", started)], "timed_points": [point]}
    gemm_dir = write_run(results / "sweeps" / "weight_reuse" / "runs", "g", gemm_tables)
    write_analysis(build_analysis([ceilings_dir], [gemm_dir]), results / "roofline")
    db = tmp_path / "rooflab.duckdb"
    ingest(db, results)

    lines = summary(str(db)).splitlines()
    assert lines[0] == "device: NVIDIA H200; datasheet preset: h200-sxm"
    hbm = next(line for line in lines if line.startswith("HBM bandwidth"))
    assert hbm.split() == ["HBM", "bandwidth", "4.3", "TB/s", "copy", "4.8", "TB/s", "0.90"]
    fp32 = next(line for line in lines if line.startswith("fp32 FMA")).split()
    assert fp32[2:4] == ["60", "TFLOP/s*"]
    bf16 = next(line for line in lines if line.startswith("bf16 tensor")).split()
    assert bf16[3:] == ["780", "TFLOP/s!", "matmul", "989", "TFLOP/s", "0.79"]
    reuse = next(line for line in lines if line.split()[:3] == ["4096", "cold", "1"])
    assert "HBM" in reuse and "memory" in reuse  # 33.6 MB in 10 us: 3.36 TB/s, memory-bound
    assert "3.36 TB/s" in reuse
    assert "timing: CUDA events; stream held" in lines
    counters = lines.index("hardware counters (ncu):")
    assert lines[counters + 1] == "  no counters run in the store"
    # 3.36 TB/s of a 4.3 TB/s HBM roof (0.78): memory-bound near its roof, low reuse at M = 1
    assert lines[counters + 3 :] == ["diagnoses (rooflab explain):", "  gemm: low_reuse 1"]


def test_device_summary_reports_the_counters_calibration_and_hierarchical_points(tmp_path):
    """The counters part of the device check's table, on CONSTRUCTED counters records
    (tests/constructed_counters.py, not a measurement): each profile's status, each
    calibration's counted/2MNK and pairing, and each hierarchical point's level and limit."""
    from rooflab.roofline import write_points
    from rooflab.store import ingest
    from tests import constructed_counters as constructed
    from tests.gpu.device_summary import counters_lines

    results = tmp_path / "results"
    runs = constructed.write_campaign(results)
    built = build_points([runs["ceilings"]], [runs["gemm"]], [runs["counters"]])
    assert built.notes == []
    write_points(built.counted, results / "roofline" / "roofline_points.parquet")
    db = tmp_path / "rooflab.duckdb"
    ingest(db, results)
    lines = counters_lines(str(db))
    assert lines[:2] == ["", "hardware counters (ncu):"]
    m64 = constructed.config_id(64)
    assert f"  {m64} --cache-control all: ok; ncu constructed" in lines
    calibration = [
        line.split() for line in lines if line.startswith(f"  {m64} ") and "True" in line
    ]
    assert [row[1:5] for row in calibration] == [
        ["all", "bf16_tensor", "1.0020", "True"],
        ["none", "bf16_tensor", "1.0020", "True"],
    ]
    points = [
        line.split()
        for line in lines
        if line.startswith(f"  {m64} ") and line.split()[2] in "HBM L2 L1"
    ]
    assert {(row[1], row[2]) for row in points} == {
        (state, level) for state in ("cold", "warm") for level in ("HBM", "L2", "L1")
    }
    assert len(built.counted) == 12  # 2 configurations x 2 cache states x 3 levels
