"""The counters step on a real GPU (issue 7): ncu profiles one bf16 GEMM in its NVTX range, the
tensor-core count matches 2MNK within 1%, and the replay pairs with the cold timing.

Needs ncu on PATH (or ROOFLAB_NCU) with the right to read the GPU's counters: without ncu the
test is skipped; without the right (ERR_NVGPUCTRPERM) it is skipped with ncu's own words, which
is itself a finding to write down (docs/counters.md §6).
"""

import os
import shutil

import pytest

from rooflab.devices import matching_preset
from rooflab.experiments.counters import CounterSettings, counters_status, run_counters
from rooflab.experiments.gemm import run_gemm_sweep
from rooflab.experiments.timing import TimingSettings
from rooflab.records import write_run
from rooflab.roofline import counter_points

NCU = os.environ.get("ROOFLAB_NCU") or shutil.which("ncu")
SWEEP = {
    "m": [2048],
    "n": [4096],
    "k": [4096],
    "dtypes": ["bf16"],
    "layouts": ["nn"],
    "cache_states": ["cold"],
    "seed": 0,
}
TIMING = TimingSettings.from_config(
    {"warmup_s": 0.05, "warmup_min_calls": 3, "min_time_s": 0.1, "min_samples": 10}
    | {"max_samples": 200, "noisy_iqr_ratio": 0.1, "max_clock_change": 0.05}
)


def test_bf16_tensor_count_matches_2mnk_within_one_percent(cuda, tmp_path):
    if NCU is None:
        pytest.skip("ncu (Nsight Compute CLI) is not on PATH; set ROOFLAB_NCU")
    timing = run_gemm_sweep(cuda, "gpucounters", SWEEP, TIMING)
    timing_dir = write_run(tmp_path / "runs", timing["runs"][0]["run_id"], timing)
    settings = CounterSettings(ncu=NCU, cache_controls=("all",), timeout_s=300)
    tables = run_counters(cuda, "gpucounters", SWEEP, settings, timing_dir)
    status, reason = counters_status(tables["counters"])
    if status == "unavailable":
        pytest.skip(f"ncu could not count here: {reason}")
    assert status == "ok", reason
    (cal,) = tables["counter_calibration"]
    assert cal["compute_path"] == "bf16_tensor"
    assert cal["expected_flops"] == 2 * 2048 * 4096 * 4096
    assert cal["trusted"], cal["reason"]  # counted / 2MNK within 1%
    assert abs(cal["ratio"] - 1) <= 0.01, cal["reason"]
    assert cal["pairing"] == "flushed replay ↔ cold timing" and cal["timing_cache_state"] == "cold"
    ranges = [r for r in tables["counters"] if r["scope"] == "range"]
    hbm = [r for r in ranges if r["metric"] == "dram__bytes_read.sum"]
    assert hbm and hbm[0]["value"] > 0
    (ok,) = [r for r in tables["counters"] if r["metric"] is None and r["status"] == "ok"]
    assert "kernel(s) profiled in the range" in ok["reason"]  # the NVTX filter matched
    counters_dir = write_run(tmp_path / "runs", tables["runs"][0]["run_id"], tables)
    machine = tables["runs"][0]["machine_id"]
    # The campaign pairs points with this machine's measured ceilings; here only the step's
    # records are checked, against the datasheet figures of the device (when it has a preset).
    preset = matching_preset(cuda.device_name)
    if preset is None or "bf16" not in preset.peak_flops_per_s:
        return
    ceilings = {
        machine: {
            "run_id": f"datasheet {preset.key}",
            "peak": {"bf16_tensor": preset.peak_flops_per_s["bf16"]},
            "bandwidth": {"HBM": preset.bandwidth_b_per_s["HBM"]},
        }
    }
    points, notes = counter_points([counters_dir], [timing_dir], ceilings)
    # cuBLAS on Hopper (sm_90) loads its operands through TMA into shared memory, around
    # l1tex__t_bytes (an H200 counted 1984 B at L1 against 483 MB at L2): no L1 point, one note
    bypassed = [n for n in notes if n.endswith("; no L1 point")]
    assert notes == bypassed and len(bypassed) <= 1
    assert {p["level"] for p in points} == {"HBM", "L2"} | (set() if bypassed else {"L1"})
    assert {p["q_source"] for p in points} == {"counters"}
    assert {p["limiting_level"] for p in points} == {"HBM"}  # the only level with a ceiling
