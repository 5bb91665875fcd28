"""The CUDA backend on a real GPU: GEMM correctness per dtype and layout, event timing against
physics, the L2 flush, NVML readings, a quick ceilings run, a small sweep end to end, and the
bandwidth kernels: copy against cudaMemcpyAsync, the one-pass kernels' bounds, the L1 read's fall
past the L1, and windows of more launches than CUDA queues.

Each test is small (the whole module takes well under a minute on an H200). Bounds come from the
datasheet preset of config/devices.yaml when the device matches one: a measured bandwidth above
the datasheet means the byte count is wrong.
"""

import statistics
import time
from dataclasses import replace

import numpy as np
import pytest

from rooflab.backends.base import flush_size
from rooflab.backends.cuda_kernels import BLOCK, READ_SENTINEL, one_pass_blocks
from rooflab.backends.selection import select_backend
from rooflab.devices import matching_preset
from rooflab.experiments.cache_edges import FALL, level_windows
from rooflab.experiments.ceiling_plan import QUICK, working_set_sizes
from rooflab.experiments.ceilings import run_ceilings
from rooflab.experiments.correctness import check_gemm
from rooflab.experiments.gemm import run_gemm_sweep
from rooflab.experiments.timing import TimingSettings
from rooflab.records import to_table

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16")


def _datasheet_hbm(cuda) -> float:
    preset = matching_preset(cuda.device_name)
    return preset.bandwidth_b_per_s["HBM"] if preset else 10e12  # no preset: a generous bound


@pytest.mark.parametrize("layout", ["nn", "nt"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("m", "n", "k"), [(1, 4096, 4096), (127, 4097, 1000)])
def test_matmul_is_correct(cuda, dtype, layout, m, n, k):
    operands = cuda.gemm_operands(m, n, k, dtype, layout, seed=2)
    cuda.poison(operands.y)
    cuda.matmul(operands)
    cuda.synchronize()
    checks, rows, cols = check_gemm(
        operands.x, operands.w, operands.y, layout, dtype, seed=2, xp=cuda.array_module
    )
    assert all(c.passed for c in checks), checks
    assert rows == min(m, 256) and cols == 256


def test_matmul_agrees_with_a_host_reference(cuda):
    operands = cuda.gemm_operands(5, 7, 300, "bf16", "nt", seed=4)
    cuda.matmul(operands)
    cuda.synchronize()
    x, w, y = (cuda.to_host(a).astype(np.float64) for a in (operands.x, operands.w, operands.y))
    np.testing.assert_allclose(y, x @ w.T, rtol=2**-7, atol=1e-2)


def test_unwritten_output_fails_on_the_device(cuda):
    operands = cuda.gemm_operands(64, 64, 64, "bf16", "nn", seed=1)
    cuda.poison(operands.y)  # and no matmul
    cuda.synchronize()
    checks, _, _ = check_gemm(
        operands.x, operands.w, operands.y, "nn", "bf16", xp=cuda.array_module
    )
    assert checks[0].metric == "finite" and not checks[0].passed
    assert checks[0].error == 64 * 64


def test_fp32_is_not_computed_in_tf32(cuda):
    """The same fp32 operands: the fp32 result must pass fp32's tolerance; on large K a TF32
    result would not (its error is about 2^-11, fp32's tolerance about 2^-24 sqrt(K))."""
    operands = cuda.gemm_operands(64, 256, 4096, "fp32", "nn", seed=3)
    cuda.matmul(operands)
    cuda.synchronize()
    checks, _, _ = check_gemm(
        operands.x, operands.w, operands.y, "nn", "fp32", xp=cuda.array_module
    )
    assert all(c.passed for c in checks), checks


def test_event_timing_of_a_known_copy_is_below_the_datasheet(cuda):
    import cupy

    n = 256 * MiB // 8
    with cuda._stream:
        a = cupy.ones(n, dtype=cupy.float64)
        b = cupy.empty_like(a)
    cuda.synchronize()
    copy = lambda: cupy.copyto(b, a)  # noqa: E731 - runs on the current (measuring) stream
    with cuda._stream:
        copy()
    seconds = statistics.median(cuda.time_call(copy) for _ in range(20))
    bandwidth = 2 * n * 8 / seconds  # read + write
    assert 0.2 * _datasheet_hbm(cuda) < bandwidth < _datasheet_hbm(cuda)
    host_started = time.perf_counter()
    cuda.time_call(copy)
    assert time.perf_counter() - host_started >= seconds * 0.9  # the host waited for the stop


def test_held_stream_times_device_work_only(cuda):
    """The host's time to enqueue a call is not in its sample: a call that dawdles 2 ms on the
    host before launching a microsecond kernel reads microseconds while the stream is held, and
    at least the 2 ms when the events are recorded as the call is enqueued."""
    workload = cuda.stream_workload("read", 4 * MiB, cuda.default_threads())
    workload.run(1)

    def dawdle_then_launch():
        time.sleep(0.002)
        workload.run(1)

    assert cuda.hold_stream, cuda.timing_note
    held = statistics.median(cuda.time_call(dawdle_then_launch) for _ in range(10))
    assert cuda.hold_stream, cuda.timing_note  # no timeout fell back
    try:
        cuda.hold_stream = False
        unheld = statistics.median(cuda.time_call(dawdle_then_launch) for _ in range(10))
    finally:
        cuda.hold_stream = True
    assert 0 < held < 100e-6
    assert unheld > 0.002


def test_flush_is_twice_the_l2_and_evicts_it(cuda):
    assert cuda.flush_bytes >= 2 * cuda.device.attributes["L2CacheSize"]
    assert cuda.cache_bytes_by_level() == {"L2": cuda.device.attributes["L2CacheSize"]}
    workload = cuda.stream_workload("read", 16 * MiB, cuda.default_threads())  # well inside the L2
    workload.run(1)
    warm = statistics.median(cuda.time_call(lambda: workload.run(1)) for _ in range(20))
    cold = []
    for _ in range(20):
        cuda.flush_cache()
        cold.append(cuda.time_call(lambda: workload.run(1)))
    assert statistics.median(cold) > 1.3 * warm


def test_the_flush_sized_from_the_measured_l2_edge_leaves_a_cold_read_at_hbm_speed(cuda):
    """The read sweep's L2 edge, found by the CPU's rules (cache_edges), sizes the flush
    (flush_size); right after that flush a read of half the edge is no faster than a read of
    HBM, while warm it is clearly faster, and the HBM plateau starts where every point runs the
    one-pass form (memory_sweep_from)."""
    caches = cuda.cache_bytes_by_level()
    l2, threads = caches["L2"], cuda.default_threads()
    rates = {}
    for size in working_set_sizes(1 * MiB, 8 * l2, 4):
        workload = cuda.stream_workload("read", size, threads)
        workload.run(2)
        seconds = statistics.median(cuda.time_call(lambda w=workload: w.run(4)) for _ in range(5))
        rates[workload.working_set_bytes or workload.amount_per_unit] = (
            4 * workload.amount_per_unit / seconds
        )
    windows, edges = level_windows(rates, caches, "HBM", 8 * l2, cuda.memory_sweep_from())
    edge = edges[0].measured_bytes
    shown = {size >> 20: round(rate / 1e12, 2) for size, rate in sorted(rates.items())}
    assert edge is not None and edge <= 1.5 * l2, shown  # MiB: TB/s
    assert windows["HBM"][0] >= cuda.memory_sweep_from() == 4 * l2
    reported = cuda.flush_bytes, cuda.flush_method
    cuda.size_flush(edge, "this test's sweep")
    try:
        assert cuda.flush_bytes == flush_size(caches, edge)[0] and "edge measured" in (
            cuda.flush_method
        )
        inside = cuda.stream_workload("read", edge // 2, threads)
        memory = cuda.stream_workload("read", 2 * cuda.flush_bytes, threads)

        def rate(workload) -> float:
            return workload.amount_per_unit / cuda.time_call(lambda: workload.run(1))

        cold, warm, far = [], [], []
        for _ in range(20):
            far.append(rate(memory))
            cuda.flush_cache()
            cold.append(rate(inside))
            warm.append(rate(inside))
        cold, warm, far = (statistics.median(r) for r in (cold, warm, far))
        figures = f"cold {cold / 1e12:.2f}, warm {warm / 1e12:.2f}, HBM {far / 1e12:.2f} TB/s"
        print(f"L2 edge {edge >> 20} MiB, flush {cuda.flush_bytes >> 20} MiB: {figures}")
        assert warm > 1.2 * far, figures
        assert cold < (1 + FALL) * far, figures
    finally:  # the session's backend flushes as it did
        cuda.flush_bytes, why = flush_size(caches)
        cuda._resize_flush(why)
        assert (cuda.flush_bytes, cuda.flush_method) == reported


def test_nvml_samples_in_the_background(cuda):
    assert cuda.monitor.available, cuda.monitor.error
    workload = cuda.fma_workload("fp32", cuda.default_threads())
    with cuda.sampling_conditions("probe") as during:
        deadline = time.perf_counter() + 0.2
        while time.perf_counter() < deadline:
            # 100 iterations of 8 chains x 64 FMAs on every resident thread: about 0.5 s at an
            # H200's fp32 peak, so the background sampler (every 10 ms) sees the call running
            cuda.time_call(lambda: workload.run(100))
    assert len(during) >= 5
    assert all(r["phase"] == "during" and r["config_id"] == "probe" for r in during)
    assert all(r["sm_clock_mhz"] > 100 and r["temp_c"] > 0 for r in during)
    assert all(isinstance(r["throttle_reasons"], str) for r in during)
    assert cuda.sample_clock_mhz() > 100
    # NVML gives mW: in W a board draws tens to hundreds (where this GPU reports power at all)
    assert all(20 < r["power_w"] < 1500 for r in during if r.get("power_w") is not None)
    static = cuda.monitor.static_info()
    if static.get("power_limit_w") is not None:
        assert 100 < static["power_limit_w"] < 1500
    if static.get("persistence_mode") is not None:
        assert isinstance(static["persistence_mode"], bool)


def test_select_backend_gives_the_gpu_with_its_identity(cuda):
    backend = select_backend("auto")
    assert backend.name == "cuda" and backend.backend_requested == "auto"
    assert backend.backend_note is None
    meta = cuda.run_metadata()
    assert meta["device_name"] and meta["device_uuid"].startswith("GPU-")
    assert meta["driver_version"] and meta["runtime_version"]
    assert meta["machine"]["caches"][0]["size_bytes"] == cuda.l2_bytes
    assert meta["machine"]["gpu"]["sm_count"] == cuda.sm_count


def test_quick_ceilings_give_l2_and_hbm_and_the_tensor_path(cuda):
    settings = replace(
        QUICK,
        min_working_set_bytes=1 * MiB,
        max_working_set_bytes=None,  # 8x the L2
        kernels=("read", "triad"),
        window_s=0.01,
        fma_dtypes=("fp32", "fp16"),
        blas_dtypes=("bf16",),
        blas_n=4096,
        blas_timing=TimingSettings(warmup_s=0.05, min_time_s=0.2, min_samples=5),
    )
    tables = run_ceilings(cuda, settings)
    for name, rows in tables.items():
        to_table(name, rows)  # every row fits its schema
    value = {(r["name"], r["kernel"]): r["value"] for r in tables["ceilings"]}
    names = {name for name, _ in value}
    assert {"L1", "L2", "HBM", "fp32_fma", "fp16_fma", "bf16_tensor"} <= names
    for kernel in ("read", "triad"):
        assert value[("L2", kernel)] > value[("HBM", kernel)]
        assert value[("HBM", kernel)] < _datasheet_hbm(cuda)
    # L1 above L2, and below what the SMs' load path can move at the highest SM clock: 128 B per
    # clock per SM on sm_80 and sm_90 (64 on older parts; the bound is then generous).
    assert value[("L1", "l1_read")] > value[("L2", "read")]
    max_clock_hz = cuda.identity["gpu"]["max_clock_sm_mhz"] * 1e6
    assert value[("L1", "l1_read")] < 128 * cuda.sm_count * max_clock_hz
    l1 = [r for r in tables["ceiling_sweep"] if r["kernel"] == "l1_read"]
    assert max(r["working_set_bytes"] for r in l1) >= 4 * cuda.l1_bytes_per_sm - 1024
    assert value[("bf16_tensor", "matmul")] > 2 * value[("fp32_fma", "fma_chains")]
    for row in tables["ceilings"]:
        assert row["sm_clock_max_mhz"] > 100 and row["clock_moved"] is not None
        # one FMA path per dtype on a GPU, unnamed; the bf16 tensor GEMM is no fault of fp32_fma
        assert row["isa"] is None and row["vector_bits"] is None
        assert row["roof_beaten"] is (False if row["kind"] == "compute" else None)
    assert any(c["phase"] == "during" for c in tables["conditions"])


def test_small_sweep_end_to_end(cuda):
    sweep = {
        "m": [1, 96],
        "n": [1000],
        "k": [1027],
        "dtypes": ["bf16", "tf32"],
        "layouts": ["nn", "nt"],
        "cache_states": ["warm", "cold"],
        "seed": 0,
    }
    timing = TimingSettings(warmup_s=0.02, min_time_s=0.05, min_samples=5)
    tables = run_gemm_sweep(cuda, "gpu_small", sweep, timing)
    for name, rows in tables.items():
        to_table(name, rows)
    assert all(r["passed"] for r in tables["correctness"])
    points = tables["timed_points"]
    assert len(points) == 2 * 2 * 2 * 2
    for point in points:
        assert point["median_s"] > 0 and point["n_samples"] >= 5
        assert point["sm_clock_min_mhz"] > 100 and isinstance(point["clock_events"], str)
        assert (point["flush_bytes"] >= 2 * cuda.l2_bytes) == (point["cache_state"] == "cold")
    (run,) = tables["runs"]
    assert run["backend"] == "cuda" and run["device_uuid"]


# -- bandwidth kernels (issue 31) ------------------------------------------------------------------


def _median_rate(cuda, call, amount: int, samples: int = 10) -> float:
    """`amount` over the median of `samples` event-timed calls, after one untimed call."""
    call()
    cuda.synchronize()
    return amount / statistics.median(cuda.time_call(call) for _ in range(samples))


def test_copy_past_the_l2_moves_as_fast_as_cudamemcpy(cuda):
    """rooflab's copy of 2 GiB per array against cudaMemcpyAsync device to device of the same
    bytes, in one process: the sides alternate for 3 rounds and each keeps its best median (both
    count read + write)."""
    import cupy
    from cupy.cuda import runtime

    workload = cuda.stream_workload("copy", 2 * 2 * GiB, cuda.default_threads())
    assert workload.amount_per_unit == 2 * 2 * GiB
    assert workload.threads >= 2 * GiB // 16  # the one-pass form: a thread per vector
    with cuda._stream:
        source = cupy.ones(2 * GiB // 8, dtype=cupy.float64)
        target = cupy.empty_like(source)

    def memcpy() -> None:
        runtime.memcpyAsync(
            target.data.ptr,
            source.data.ptr,
            source.nbytes,
            runtime.memcpyDeviceToDevice,
            cuda._stream.ptr,
        )

    ours, reference = [], []
    for _ in range(3):
        ours.append(_median_rate(cuda, lambda: workload.run(1), workload.amount_per_unit))
        reference.append(_median_rate(cuda, memcpy, 2 * source.nbytes))
    assert max(ours) >= 0.98 * max(reference), (ours, reference)
    assert max(ours) < _datasheet_hbm(cuda)


def test_one_pass_kernels_cover_every_vector_and_nothing_past_it(cuda):
    """n is not whole blocks: the last block's threads past n must not touch the arrays."""
    import cupy

    n = 5 * BLOCK + 32
    grid, kernels = (one_pass_blocks(n),), cuda._kernels
    with cuda._stream:
        a = cupy.arange(2 * (n + BLOCK), dtype=cupy.float64) + 1  # room past n, to see a stray
        b = cupy.zeros_like(a)
        c = cupy.full_like(a, 2.0)
        out = cupy.zeros_like(a)
        sink = cupy.zeros(1, dtype=cupy.float64)
        kernels["stream_copy_one_pass"](grid, (BLOCK,), (a, b, np.uint64(n)))
        kernels["stream_triad_one_pass"](grid, (BLOCK,), (out, a, c, np.uint64(n), np.float64(0.5)))
        kernels["stream_read_one_pass"](
            grid, (BLOCK,), (a, np.uint64(n), np.float64(READ_SENTINEL), sink)
        )
    host_a, host_b, host_out = (x.get(stream=cuda._stream) for x in (a, b, out))
    np.testing.assert_array_equal(host_b[: 2 * n], host_a[: 2 * n])
    np.testing.assert_array_equal(host_out[: 2 * n], host_a[: 2 * n] + 0.5 * 2.0)
    assert not host_b[2 * n :].any() and not host_out[2 * n :].any()
    assert sink.get(stream=cuda._stream)[0] == 0.0  # positive data never sums to the sentinel
    with cuda._stream:  # thread 0 loads 1 and 2: with 3 as the sentinel, its sum is stored
        kernels["stream_read_one_pass"](grid, (BLOCK,), (a, np.uint64(n), np.float64(3), sink))
    assert sink.get(stream=cuda._stream)[0] == 3.0


def test_l1_read_falls_past_the_l1(cuda):
    """Each block reads a region of its own: past the L1's capacity the SMs' loads go to the L2
    (and beyond), and the rate falls well below the plateau."""
    l1 = cuda.l1_bytes_per_sm

    def rate(per_sm: int) -> float:
        workload = cuda.local_cache_workload(per_sm, cuda.default_threads())
        assert per_sm - 4 * KiB < workload.working_set_bytes <= per_sm
        reps = max(1, int(2e-3 * 30e12 / workload.amount_per_unit))  # ~2 ms at an H200's plateau
        return _median_rate(cuda, lambda: workload.run(reps), workload.amount_per_unit * reps, 5)

    plateau = max(rate(per_sm) for per_sm in (l1 // 8, l1 // 4, l1 // 2))
    past = rate(4 * l1)
    assert past < 0.6 * plateau, (past, plateau)


def test_more_one_pass_launches_than_the_launch_queue_holds_stay_device_timed(cuda):
    """2000 passes in one sample (CUDA queues about 1000 launches): the hold is let go after
    HELD_LAUNCHES, never times out, and the host keeps ahead of the device (the time per pass
    matches that of 100 passes)."""
    workload = cuda.stream_workload("read", 8 * cuda.l2_bytes, cuda.default_threads())
    assert workload.threads >= workload.amount_per_unit // 16  # the one-pass form
    per_pass = {}
    for passes, samples in ((100, 5), (2000, 3)):
        rate = _median_rate(
            cuda, lambda p=passes: workload.run(p), workload.amount_per_unit * passes, samples
        )
        per_pass[passes] = workload.amount_per_unit / rate
    assert cuda.hold_stream, cuda.timing_note  # the hold never timed out
    assert per_pass[2000] < 1.05 * per_pass[100], per_pass
