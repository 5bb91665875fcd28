"""The built-in workloads' CUDA paths (rooflab.workloads.builtin) on a real GPU: each factory's
run() launches on the device and its check() against the float64 host reference passes, the
timer measures every case warm and cold, fusion moves the same F with a third of the Q, and ncu
counts each fp32 case's FLOPs as its ledger says it executes (within 1 %), the dense block
product's included."""

import os
import shutil

import pytest

from rooflab.experiments.counters import CounterSettings, counters_status, run_workload_counters
from rooflab.experiments.timing import TimingSettings
from rooflab.experiments.workload_cases import build_case, run_workload
from rooflab.records import write_run
from rooflab.workloads import cases, check_error, load_entry
from rooflab.workloads.builtin import DEFAULT_WORKLOADS

SMALL = {
    "relu_axpb_unfused": {"n": [1 << 20]},
    "relu_axpb_fused": {"n": [1 << 20]},
    "blockdiag_dense": {"n": [1024], "blocks": [8], "k": [64]},
    "blockdiag_blocks": {"n": [1024], "blocks": [8], "k": [64]},
    "pointer_chase": {"n": [1 << 16], "steps": [100_000]},
}
FAST = TimingSettings(warmup_s=0.02, min_time_s=0.05, min_samples=5)


@pytest.mark.parametrize("name", sorted(DEFAULT_WORKLOADS))
def test_each_builtin_workload_runs_on_the_gpu_and_passes_its_check(cuda, name):
    spec = DEFAULT_WORKLOADS[name]
    factory = load_entry(spec["entry"], name)
    for case in cases(name, SMALL[name], spec["dtypes"]):
        workload = build_case(factory, case, cuda)
        workload.run()
        cuda.synchronize()
        assert check_error(workload, case.config_id) <= workload.tolerance


def test_fusion_is_timed_warm_and_cold_with_a_third_of_the_bytes(cuda):
    tables = {
        name: run_workload(cuda, name, {**DEFAULT_WORKLOADS[name], "params": SMALL[name]}, FAST)
        for name in ("relu_axpb_unfused", "relu_axpb_fused")
    }
    for rows in tables.values():
        points = rows["timed_points"]
        assert [p["cache_state"] for p in points] == ["warm", "cold"]
        assert all(p["median_s"] > 0 and p["n_samples"] >= 5 for p in points)
    unfused, fused = (rows["timed_points"][0] for rows in tables.values())
    assert fused["flops"] == unfused["flops"] and 3 * fused["bytes_model"] == unfused["bytes_model"]


NCU = os.environ.get("ROOFLAB_NCU") or shutil.which("ncu")


@pytest.mark.parametrize(
    "name", ["relu_axpb_unfused", "relu_axpb_fused", "blockdiag_dense", "blockdiag_blocks"]
)
def test_ncu_counts_what_the_ledger_says_each_case_executes(cuda, name, tmp_path):
    if NCU is None:
        pytest.skip("ncu (Nsight Compute CLI) is not on PATH; set ROOFLAB_NCU")
    spec = {**DEFAULT_WORKLOADS[name], "params": SMALL[name], "cache_states": ["cold"]}
    timing = run_workload(cuda, name, spec, FAST)
    timing_dir = write_run(tmp_path / "runs", timing["runs"][0]["run_id"], timing)
    settings = CounterSettings(ncu=NCU, cache_controls=("all",), timeout_s=300, max_configs=1)
    tables = run_workload_counters(cuda, name, spec, settings, timing_dir)
    status, reason = counters_status(tables["counters"])
    if status == "unavailable":
        pytest.skip(f"ncu could not count here: {reason}")
    assert status == "ok", reason
    (point,) = timing["timed_points"]
    (cal,) = tables["counter_calibration"]
    assert cal["compute_path"] == "fp32_fma"
    assert cal["expected_flops"] == (point["executed_flops"] or point["flops"])
    assert cal["trusted"], cal["reason"]  # FADD + FMUL + 2·FFMA = the executed ledger, within 1 %
    assert cal["pairing"] == "flushed replay ↔ cold timing"
