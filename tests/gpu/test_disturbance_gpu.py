"""Another process on the GPU, as NVML sees it: counted, waited for, and the points measured
beside it flagged. A quiet device gives clean points (issue 24)."""

import subprocess
import sys
import time
from dataclasses import replace

from rooflab.conditions.disturbance import DisturbanceSettings
from rooflab.experiments.gemm import run_gemm_sweep
from rooflab.experiments.runs import quiet_check
from rooflab.experiments.timing import TimingSettings

SWEEP = {
    "m": [1, 256],
    "n": [4096],
    "k": [4096],
    "dtypes": ["bf16"],
    "layouts": ["nn"],
    "cache_states": ["warm", "cold"],
    "seed": 0,
}
TIMING = TimingSettings(warmup_s=0.02, min_time_s=0.05, min_samples=5)
# A second process with a CUDA context on the same device, idle: it holds the device, not the SMs.
HOLDER = "import cupy, time\ncupy.zeros(1)\nprint('ready', flush=True)\ntime.sleep(60)"


def test_a_quiet_device_gives_clean_points(cuda):
    assert cuda.gpu_other_processes() == 0, "another process holds this GPU: not a quiet device"
    tables = run_gemm_sweep(cuda, "quiet", SWEEP, TIMING)
    for point in tables["timed_points"]:
        assert point["gpu_other_processes"] == 0
        assert not point["disturbed"], point["disturbance"]
    assert all(c["gpu_other_processes"] == 0 for c in tables["conditions"])
    assert tables["runs"][0]["busy_warning"] is None


def test_another_process_on_the_gpu_is_counted_waited_for_and_flagged(cuda):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 20
        while cuda.gpu_other_processes() < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert cuda.gpu_other_processes() == 1
        check = quiet_check(cuda, DisturbanceSettings(quiet_wait_s=1), "test")
        assert check.waited_s >= 1 and "1 other process(es) used the GPU" in check.warning
        unwaited = replace(TIMING, disturbance=DisturbanceSettings(quiet_wait_s=0))
        tables = run_gemm_sweep(cuda, "shared", SWEEP, unwaited)
        for point in tables["timed_points"]:
            assert point["disturbed"] and point["gpu_other_processes"] == 1
            assert "1 other process(es) used the GPU" in point["disturbance"]
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 20
    while cuda.gpu_other_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cuda.gpu_other_processes() == 0
