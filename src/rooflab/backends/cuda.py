"""The CUDA backend: CuPy for device memory, cuBLAS (gemmEx) for GEMM, CUDA C kernels for ceilings.

Read against docs/gpu.md:

- Timing: CUDA events on one dedicated non-blocking stream. Each sample enqueues the stream-holding
  kernel (kernels/timing.cu), the start event, the call, the stop event, and only then lets the
  stream go, so the interval holds the device's work back to back and none of the host's time to
  enqueue it. The host waits on the stop event (explicit synchronisation) before reading it.
- Cold cache: `flush_cache` reads a device buffer of 2x the L2 size (cudaDevAttrL2CacheSize), or
  sized from the L2 edge a ceilings run measured (base.flush_size), on the same stream, before
  the sample's events, leaving clean lines (as ncu's flush does).
- Conditions: NVML (rooflab.conditions.nvml), read only; a background sampler runs during each
  measurement.
- GEMM: cublasGemmEx on rooflab's own cuBLAS handle (default math mode, host pointer mode), with
  the data and compute types of rooflab.backends.cublas_args.GEMM_TYPES: fp64, fp32, TF32 tensor
  cores (fp32 data), fp16 and bf16 (fp32 accumulate); bf16 operands are uint16 bit patterns.
  FP8 (e4m3, e5m2) and int8 through cuBLASLt where nvmath-python loads it and the device has
  them (rooflab.backends.cublaslt), and bf16 through cuBLASLt beside cuBLAS in the ceilings.
- Ceilings: kernels/stream.cu and kernels/fma.cu through cupy.RawModule (NVRTC), grid = SM count
  x resident blocks per SM, except read, copy and triad past the L2, which launch a grid over the
  whole array once per pass (rooflab.backends.cuda_stream).

Everything runs on device 0 (set CUDA_VISIBLE_DEVICES to pick another GPU).
"""

from __future__ import annotations

import contextlib
import ctypes
import weakref
from collections.abc import Callable, Iterator

import numpy as np

from rooflab import machine
from rooflab.backends.base import (
    Backend,
    BackendError,
    CeilingLoad,
    GemmOperands,
    LocalCache,
    flush_size,
    nvtx_name,
)
from rooflab.backends.bfloat16 import BF16_NAN_BITS, bf16_bits_to_float32, float32_to_bf16_bits
from rooflab.backends.cublas_args import GEMM_TYPES, row_major_gemm
from rooflab.backends.cublaslt import CublasLtGemms, LtPlan
from rooflab.backends.cublaslt_args import INT32_POISON, LT_ONLY_DTYPES
from rooflab.backends.cuda_identity import cuda_versions, gpu_identity, version_text
from rooflab.backends.cuda_kernels import (
    BLOCK,
    FMA_FP16,
    FMA_FP32,
    FMA_FP64,
    ONE_PASS_ABOVE_L2,
    READ_SENTINEL,
    STREAM_ARRAYS,
    STREAM_FUNCTIONS,
    VECTOR_BYTES,
    fma_flops_per_iteration,
    kernel_source,
    pack_half2,
    stream_forms_note,
)
from rooflab.backends.cuda_stream import StreamLoads
from rooflab.backends.random_operands import random_nonzero
from rooflab.conditions.nvml import ConditionSampler, GpuMonitor, as_text

HOLD_TIMEOUT_S = 2.0  # longest the stream-holding kernel waits for the host to let it go
# Launches a held stream takes before it is let go: CUDA queues about a thousand per stream, and
# a host launching past that would wait for the held device until the hold timed out.
HELD_LAUNCHES = 256


class CudaBackend(StreamLoads, CublasLtGemms, Backend):
    name = "cuda"
    stream_kernels = tuple(STREAM_ARRAYS)
    fma_dtypes = ("fp64", "fp32", "fp16")
    memory_level = "HBM"
    has_host_link = True  # PCIe / NVLink-C2C to host memory: the level `host` (cuda_host_link)
    host_contention_matters = False  # events time the device; other GPU users are what count
    rest_before_peak_s = 1.0  # docs/measurements/2026-11-30-h200.md, run 3

    def __init__(self, device_id: int = 0, conditions_period_s: float = 0.01) -> None:
        import cupy
        from cupy.cuda import runtime
        from cupy_backends.cuda.api import driver
        from cupy_backends.cuda.libs import cublas

        self._cp, self._runtime, self._driver, self._cublas = cupy, runtime, driver, cublas
        self.array_module = cupy
        self.device = cupy.cuda.Device(device_id)
        self.device.use()
        attributes = self.device.attributes
        properties = runtime.getDeviceProperties(device_id)
        self.sm_count = int(attributes["MultiProcessorCount"])
        self.l2_bytes = int(attributes["L2CacheSize"])
        self.max_threads_per_sm = int(attributes["MaxThreadsPerMultiProcessor"])
        # L1 and shared memory are one array per SM; with no shared memory carved out (what the L1
        # kernel asks for), its L1 holds at least the most shared memory an SM can give (sm_90:
        # 256 KiB array, 228 KiB shared; sm_80: 192 and 164 KiB). CUDA reports no L1 size.
        self.l1_bytes_per_sm = int(attributes["MaxSharedMemoryPerMultiprocessor"])
        self.local_cache = LocalCache(
            level="L1",
            bytes_per_unit=self.l1_bytes_per_sm,
            kernel="l1_read",
            capacity_note=(
                "per-SM L1 data capacity taken as cudaDevAttrMaxSharedMemoryPerMultiprocessor, a "
                "lower bound of the unified L1/shared array with no shared memory carved out"
            ),
        )
        self.compute_capability = int(self.device.compute_capability)  # e.g. 90
        self.device_name = as_text(properties["name"])
        self.memory_bytes = int(properties["totalGlobalMem"])
        self.pci_bus_id = self.device.pci_bus_id
        self._load_cublaslt()

        self._stream = cupy.cuda.Stream(non_blocking=True)
        self._start, self._stop = cupy.cuda.Event(), cupy.cuda.Event()
        self._modules = {
            name: cupy.RawModule(code=kernel_source(name), options=("-std=c++17",))
            for name in ("stream", "fma", "timing")
        }
        self._kernels = {
            name: self._modules[module].get_function(name)  # compiles (NVRTC, cached on disk)
            for module, names in (
                ("stream", STREAM_FUNCTIONS),
                ("fma", ("fma_fp64", "fma_fp32", "fma_fp16")),
                ("timing", ("hold_stream",)),
            )
            for name in names
        }
        # All of the unified L1/shared array as L1: an attribute of our own kernel, not a device
        # setting.
        self._kernels["l1_read"].preferred_shared_memory_carveout = 0

        # cuBLAS: a handle of our own, so no one else's math mode (CUPY_TF32) reaches fp32.
        self._handle = cublas.create()
        weakref.finalize(self, cublas.destroy, self._handle)
        cublas.setMathMode(self._handle, cublas.CUBLAS_DEFAULT_MATH)
        cublas.setPointerMode(self._handle, cublas.CUBLAS_POINTER_MODE_HOST)
        # Our handle works on our stream. CuPy's gemmEx also points a handle at the current stream,
        # but only once some stream has been made current (an internal flag): do not rely on it.
        cublas.setStream(self._handle, self._stream.ptr)

        # Flags of the stream-holding kernel, in mapped pinned host memory (unified addressing
        # makes the host pointer valid on the device).
        self._flags_ptr = runtime.hostAlloc(8, runtime.hostAllocMapped)
        weakref.finalize(self, runtime.freeHost, self._flags_ptr)
        self._release = ctypes.c_int32.from_address(self._flags_ptr)
        self._timed_out = ctypes.c_int32.from_address(self._flags_ptr + 4)
        self.hold_stream = True
        self.timing_note = ""
        self._samples_timed = 0

        # A read, not a write: it leaves the L2 holding clean lines of the buffer (dirty lines
        # left by earlier work are written back during the flush), as ncu's --cache-control all
        # does. A writing flush would leave a full L2 of dirty lines, whose write-back would land
        # in the timed call's HBM traffic. 2x the L2, or sized from its measured edge (size_flush).
        self.flush_bytes, self._flush_why = flush_size(self.cache_bytes_by_level())
        with self._stream:
            self._flush_buffer = cupy.zeros(self.flush_bytes // 8, dtype=cupy.float64)
            self._flush_sink = cupy.zeros(1, dtype=cupy.float64)
        self._flush_grid = self._grid(self._kernels["stream_read"], self.default_threads())

        self.monitor = GpuMonitor(self.pci_bus_id)
        self._conditions_period_s = conditions_period_s
        self._static = self.monitor.static_info()
        self.host = machine.cpu_identity()
        self.identity = gpu_identity(
            self.host,
            {
                "name": self.device_name,
                "pci_bus_id": self.pci_bus_id,
                "compute_capability": self.compute_capability,
                "sm_count": self.sm_count,
                "l2_bytes": self.l2_bytes,
                "l1_bytes_per_sm_lower_bound": self.l1_bytes_per_sm,
                "memory_bytes": self.memory_bytes,
                "max_threads_per_sm": self.max_threads_per_sm,
            },
            self._static,
            None if self.monitor.available else (self.monitor.error or "NVML unavailable"),
        )

        # Load every kernel (lazy module loading would otherwise load one inside a held stream)
        # and touch the flush buffer, so no first-use cost lands in a measurement.
        self.flush_cache()
        self._release.value, self._timed_out.value = 1, 0
        with self._stream:
            self._launch_hold()
        for dtype in self.fma_dtypes:
            self.fma_workload(dtype, BLOCK).run(1)
        self.warm_stream_kernels()
        self.synchronize()
        if self._timed_out.value:
            raise BackendError("the stream-holding kernel timed out although it was released")

    # -- identity and conditions --
    def run_metadata(self) -> dict:
        runtime = self._runtime
        versions = cuda_versions(self._cp, self._cublas.getVersion(self._handle))
        versions.update(self._lt.versions())
        timing = (
            "CUDA events on a dedicated non-blocking stream; "
            + (
                "stream held by a spinning kernel while each sample is enqueued (device time only)"
                if self.hold_stream
                else "events recorded as the call is enqueued"
            )
            + (f"; {self.timing_note}" if self.timing_note else "")
        )
        identity = {
            **self.identity,
            "timing_method": timing,
            "stream_kernel_forms": stream_forms_note(self.l2_bytes),
        }
        return {
            "host": self.host["hostname"],
            "machine_id": self.identity["machine_id"],
            "backend": self.name,
            "device_name": self.device_name,
            "device_uuid": self._static.get("nvml_uuid"),
            "driver_version": self._static.get("driver_version")
            or version_text(runtime.driverGetVersion()),
            "runtime_version": version_text(runtime.runtimeGetVersion()),
            "library_versions": versions,
            "machine": identity,
            "blas": {
                "library": "cuBLAS",
                "version": versions["cublas"],
                "call": "cublasGemmEx on rooflab's own handle",
                "math_mode": "CUBLAS_DEFAULT_MATH",
                "types": {dtype: types.description for dtype, types in GEMM_TYPES.items()},
                "cublaslt": self._lt.metadata(),
            },
        }

    def read_conditions(self, phase: str, config_id: str | None = None) -> dict:
        return self.monitor.reading(phase, config_id)

    def sample_clock_mhz(self) -> float | None:
        return self.monitor.sm_clock_mhz()

    def gpu_other_processes(self) -> int:
        if not self.monitor.available:
            return 0
        try:
            return self.monitor.other_processes()
        except Exception:  # NVML without process listing: nothing to wait for
            return 0

    def host_delays_enter_timing(self) -> bool:
        # Behind a held stream every call is queued before the device starts, so a host thread
        # kept off its CPU meanwhile cannot lengthen the events' interval.
        return not self.hold_stream

    @contextlib.contextmanager
    def sampling_conditions(self, config_id: str | None = None) -> Iterator[list[dict]]:
        readings: list[dict] = []
        if not self.monitor.available:
            yield readings
            return
        sampler = ConditionSampler(self.monitor, config_id, self._conditions_period_s).start()
        try:
            yield readings
        finally:
            readings.extend(sampler.stop())

    @contextlib.contextmanager
    def nvtx_range(self, label: str) -> Iterator[None]:
        from cupy.cuda import nvtx

        if not nvtx.available:
            yield
            return
        nvtx.RangePush(nvtx_name(label))
        try:
            yield
        finally:
            nvtx.RangePop()

    @contextlib.contextmanager
    def on_stream(self, stream) -> Iterator[None]:
        """The ceiling loads' launches inside go to `stream` (a CuPy stream) instead of the
        measuring stream: stages side by side on streams of their own (stage_overlap)."""
        measuring, self._stream = self._stream, stream
        try:
            yield
        finally:
            self._stream = measuring

    # -- memory and caches --
    def memory_available_bytes(self) -> int:
        free, _ = self._runtime.memGetInfo()
        return int(free) + int(self._cp.get_default_memory_pool().free_bytes())

    def cache_bytes_by_level(self) -> dict[str, int]:
        return {"L2": self.l2_bytes}

    @property
    def flush_method(self) -> str:
        return (
            f"read of a {self.flush_bytes} B device buffer ({self._flush_why}; ld.global.cg, "
            "kernel stream_read) on the measuring stream before each sample, outside its events"
        )

    def _resize_flush(self, why: str) -> None:
        self._flush_why = why
        with self._stream:
            self._flush_buffer = self._cp.zeros(self.flush_bytes // 8, dtype=self._cp.float64)
        self.flush_cache()  # touched now: no first-use cost in a measurement
        self.synchronize()

    def memory_sweep_from(self) -> int:
        # where read, copy and triad switch to one pass per launch, which moves HBM as fast as
        # cudaMemcpy: every point that may set the HBM ceiling runs that form
        return ONE_PASS_ABOVE_L2 * self.l2_bytes

    def flush_cache(self) -> None:
        n = self.flush_bytes // VECTOR_BYTES
        args = (self._flush_buffer, np.uint64(n), np.int32(1), np.float64(READ_SENTINEL))
        with self._stream:
            self._kernels["stream_read"]((self._flush_grid,), (BLOCK,), (*args, self._flush_sink))

    # -- running and timing --
    def synchronize(self) -> None:
        self._stream.synchronize()

    def _launch_hold(self) -> None:
        self._kernels["hold_stream"](
            (1,),
            (1,),
            (
                np.uint64(self._flags_ptr),
                np.uint64(self._flags_ptr + 4),
                np.uint64(int(HOLD_TIMEOUT_S * 1e9)),
            ),
        )

    def time_call(self, call: Callable[[], object]) -> float:
        held = self.hold_stream
        with self._stream:
            if held:
                self._release.value, self._timed_out.value = 0, 0
                self._launch_hold()
            try:
                self._start.record(self._stream)
                call()
                self._stop.record(self._stream)
            finally:
                self._release.value = 1
        self._stop.synchronize()
        self._samples_timed += 1
        if held and self._timed_out.value:
            # The call waited for the device while the stream was held (a lazily loaded kernel,
            # an allocation that synchronises): never trust that sample, and stop holding.
            self.hold_stream = False
            self.timing_note = (
                f"the stream-holding kernel timed out at sample {self._samples_timed}; later "
                "samples were timed without it"
            )
            return self.time_call(call)
        return self._cp.cuda.get_elapsed_time(self._start, self._stop) * 1e-3

    def launch_passes(self, launch: Callable[[int], object], passes: int) -> None:
        """`launch(i)` for i = 0 .. passes - 1 on the measuring stream. A stream held by
        time_call is let go after HELD_LAUNCHES of them: the queued passes then keep the device
        busy while the host enqueues the rest, since a pass (cuda_kernels.ONE_PASS_ABOVE_L2) is
        much longer than the host's time to launch one."""
        with self._stream:
            for index in range(passes):
                if index == HELD_LAUNCHES:
                    self._release.value = 1
                launch(index)

    def gemm_operands(self, m, n, k, dtype, layout, seed) -> GemmOperands:
        self.check_dtype(dtype)
        if dtype in LT_ONLY_DTYPES:  # FP8, int8: cuBLASLt (layout nn refused there)
            return self._lt.operands(self._stream, m, n, k, dtype, layout, seed)
        if layout not in ("nn", "nt"):
            raise BackendError(f"unknown layout {layout!r}; supported: nn, nt")
        cp, runtime, cublas = self._cp, self._runtime, self._cublas
        types = GEMM_TYPES[dtype]
        shape = row_major_gemm(m, n, k, layout)
        with self._stream:
            x = self._as_dtype(random_nonzero(cp, (m, k), seed, stream=0), dtype)
            w_shape = (k, n) if layout == "nn" else (n, k)
            w = self._as_dtype(random_nonzero(cp, w_shape, seed, stream=1), dtype)
            y = cp.empty((m, n), dtype=types.storage)
        alpha = np.ones((), dtype=types.scalar_dtype)
        beta = np.zeros((), dtype=types.scalar_dtype)
        data_type = getattr(runtime, types.data_type)
        arguments = (
            self._handle,
            shape.transa,
            shape.transb,
            shape.m,
            shape.n,
            shape.k,
            alpha.ctypes.data,
            w.data.ptr,
            data_type,
            shape.lda,
            x.data.ptr,
            data_type,
            shape.ldb,
            beta.ctypes.data,
            y.data.ptr,
            data_type,
            shape.ldc,
            getattr(cublas, types.compute_type),
            cublas.CUBLAS_GEMM_DEFAULT,
        )
        # alpha and beta travel with the arguments that point at them.
        return GemmOperands(x, w, y, layout, dtype=dtype, plan=(arguments, alpha, beta))

    def _as_dtype(self, values, dtype: str):
        cp = self._cp
        if dtype == "bf16":
            return float32_to_bf16_bits(cp, values.astype(cp.float32))
        return values.astype(GEMM_TYPES[dtype].storage)

    def matmul(self, operands: GemmOperands) -> None:
        if isinstance(operands.plan, LtPlan):  # FP8, int8 (and bf16 in the ceilings)
            return operands.plan.run(self._stream.ptr)
        with self._stream:
            self._cublas.gemmEx(*operands.plan[0])

    def poison(self, array) -> None:
        """NaN; bf16 bit patterns: a quiet NaN; int32 (int8 GEMMs): INT32_POISON."""
        value = {np.uint16: BF16_NAN_BITS, np.int32: INT32_POISON}.get(array.dtype.type, np.nan)
        with self._stream:
            array.fill(value)

    def to_host(self, array):
        host = array.get(stream=self._stream)
        return bf16_bits_to_float32(np, host) if host.dtype == np.uint16 else host

    # -- ceilings --
    def _grid(self, kernel, threads: int) -> int:
        """Blocks: the threads asked for, at most what the SMs hold at once (one wave)."""
        per_sm = self._driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, BLOCK, 0)
        return max(1, min(self.sm_count * max(1, per_sm), -(-threads // BLOCK)))

    def host_link_loads(self, buffer_bytes: int) -> list:
        """The host link's copies (rooflab.backends.cuda_host_link): the SM copy over mapped
        pinned memory, cudaMemcpyAsync from pinned and from pageable memory, each checked."""
        from rooflab.backends.cuda_host_link import host_link_loads

        copy = self._kernels["stream_copy"]
        grid = self._grid(copy, self.default_threads())
        return host_link_loads(self._cp, self._stream, buffer_bytes, copy, grid, self.device)

    def fma_workload(self, dtype: str, threads: int, isa: str | None = None) -> CeilingLoad:
        if isa is not None:
            raise BackendError(f"backend cuda has one FMA path, not {isa!r}")
        if dtype not in self.fma_dtypes:
            raise BackendError(
                f"backend cuda has no FMA kernel for {dtype!r}; known: {', '.join(self.fma_dtypes)}"
            )
        cp = self._cp
        function = self._kernels[f"fma_{dtype}"]
        grid = self._grid(function, threads)
        with self._stream:
            if dtype == "fp16":
                out = cp.empty(grid * BLOCK, dtype=cp.uint32)
                x, y, start = (pack_half2(value) for value in FMA_FP16)
                constants = (x, y, start)
            else:
                out = cp.empty(grid * BLOCK, dtype=cp.float64 if dtype == "fp64" else cp.float32)
                constants = FMA_FP64 if dtype == "fp64" else FMA_FP32

        def run(iters: int) -> None:
            with self._stream:
                function((grid,), (BLOCK,), (np.int64(iters), *constants, out))

        return CeilingLoad(
            run=run,
            amount_per_unit=fma_flops_per_iteration(dtype, grid * BLOCK),
            unit="FLOP",
            threads=grid * BLOCK,
        )

    def default_threads(self) -> int:
        return self.sm_count * self.max_threads_per_sm

    def library_description(self, dtype: str) -> str:
        if dtype in LT_ONLY_DTYPES:
            return self._lt.description(dtype)
        return f"cuBLAS gemmEx, {GEMM_TYPES[dtype].description}"
