"""The kernels of the timeline measurement (experiments.timeline) and how one step of them is
timed kernel by kernel.

A step is a list of `Op`s, each one launch (GPU) or one call (CPU). The same arrays serve every
mode: `x_in` (the step's input, never written), `x` (the hidden state the step writes), `y` (the
GEMV's output), `w` (L×H×H) and `b` (L×H). Layer 0 reads `x_in` where later layers read `x`, so
a step is a pure function of `x_in` and may be repeated without the state growing.

- CPU: numpy calls (eager) or one numba function for the whole step (fused). A call's own time
  is perf_counter around it less its fixed cost, the same call's median on one-element arrays.
- CUDA: the GEMV is rooflab's own kernel (below), in every mode: CuPy refuses every cuBLAS call
  during stream capture (cupy_backends cublas.setStream raises NotImplementedError), and one GEMV
  for all modes leaves the launch structure as their only difference. Elementwise ops are CuPy
  ufuncs writing with `out=` (eager), or one ElementwiseKernel (fused). Nothing allocates.

Per-kernel times on CUDA come from events recorded between the kernels of an instrumented step,
enqueued twice: once behind a spinning kernel, so the whole step is queued before the device
starts and each interval between events is a kernel's device time, without the host's launch
time in it (an event enqueued before a launch fires as soon as the stream reaches it, long
before a starved stream gets the kernel); and once as launched, where the event after each
kernel fires where that kernel ends. Inside a graph the events are record nodes
(cuEventRecordWithFlags with CU_EVENT_RECORD_EXTERNAL: a plain record during capture only orders
the capture and is never timestamped); CuPy has no binding for it, so it is called in the
driver library through ctypes.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

CUDA_TYPES = {"float32": "float", "float64": "double"}
GEMV_COLUMNS, GEMV_ROWS = 32, 8  # a block: 32 columns (a warp reads them coalesced) x 8 row slices
CALIBRATION_CALLS = 200  # calls of each kind on one-element arrays: their fixed cost
INSTRUMENTED_STEPS = 5  # instrumented steps per mode; the one with the median busy time is kept
HOLD_FACTOR = 4  # a held pass's spin: this many times the step's measured wall time, plus 1 ms
HOLD_PER_KERNEL_S = 20e-6  # and this much per kernel, for the event records
HOLD_ATTEMPTS = 4  # each attempt spins 4x longer than the one before
CU_EVENT_RECORD_EXTERNAL = 1  # CUevent_record_flags: a record node when captured

GEMV_SOURCE = r"""
// y[j] = sum_i x[i] * w[i*n + j] (w row-major n x n). A warp reads 32 neighbours of a row of w
// (coalesced); the block's 8 row slices are summed in shared memory.
extern "C" __global__ void timeline_gemv(const real* __restrict__ x, const real* __restrict__ w,
                                         real* __restrict__ y, const int n) {
    __shared__ real partial[ROWS][COLUMNS + 1];
    const int j = blockIdx.x * COLUMNS + threadIdx.x;
    real sum = 0;
    if (j < n) {
        for (int i = threadIdx.y; i < n; i += ROWS) sum += x[i] * w[(size_t)i * n + j];
    }
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && j < n) {
        real total = 0;
        for (int r = 0; r < ROWS; ++r) total += partial[r][threadIdx.x];
        y[j] = total;
    }
}
"""

HOLD_SOURCE = r"""
// Spins for `ns` nanoseconds of the GPU's global timer: the stream behind it waits meanwhile.
extern "C" __global__ void timeline_hold(const unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""

# bias + relu + residual in one pass: reads y, b and the previous state, writes x.
FUSED_PARAMS = ("T y, T b, T previous", "T x")
FUSED_OPERATION = "T s = y + b; x = previous + (s > (T)0 ? s : (T)0);"


@dataclass(frozen=True)
class Op:
    """One launch (GPU) or call (CPU) of a step; `layer` None for a call spanning all layers."""

    layer: int | None
    kernel: str
    run: Callable[[], object]


@dataclass
class Buffers:
    x_in: object
    x: object
    y: object
    w: object
    b: object

    def source(self, layer: int):
        """What layer `layer` reads: the step's input first, then the state it writes."""
        return self.x_in if layer == 0 else self.x


# -- CPU -------------------------------------------------------------------------------------------


def cpu_ops(mode: str, buffers: Buffers) -> list[Op]:
    if mode == "fused":
        step = partial(fused_cpu_step(), buffers.x_in, buffers.w, buffers.b, buffers.x, buffers.y)
        return [Op(None, "step", step)]
    zero = buffers.y.dtype.type(0)
    ops = []
    for layer in range(buffers.w.shape[0]):
        source, y, x, b = buffers.source(layer), buffers.y, buffers.x, buffers.b[layer]
        ops += [
            Op(layer, "gemv", partial(np.matmul, source, buffers.w[layer], out=y)),
            Op(layer, "bias_add", partial(np.add, y, b, out=y)),
            Op(layer, "relu", partial(np.maximum, y, zero, out=y)),
            Op(layer, "residual_add", partial(np.add, source, y, out=x)),
        ]
    return ops


@functools.cache
def fused_cpu_step() -> Callable:
    """The whole step as one numba function (compiled at its first call), the GIL released."""
    import numba

    @numba.njit(nogil=True, cache=False)
    def step(x_in, w, b, x, y):
        layers, hidden = b.shape
        for layer in range(layers):
            source = x_in if layer == 0 else x
            for j in range(hidden):
                y[j] = 0
            for i in range(hidden):  # row by row: the inner loop runs along w's rows
                xi = source[i]
                for j in range(hidden):
                    y[j] += xi * w[layer, i, j]
            for j in range(hidden):
                s = y[j] + b[layer, j]
                if s > 0:
                    x[j] = source[j] + s
                else:
                    x[j] = source[j]

    return step


def cpu_fixed_costs(mode: str, dtype: np.dtype) -> dict[str, float]:
    """What each kind of call costs whatever its size, per kernel name: the median time of the
    same call on one-element arrays, timed as the instrumented step times it (perf_counter's own
    cost included). numpy's and numba's dispatch is the CPU's launch overhead: left out of busy."""
    tiny = Buffers(
        x_in=np.ones(1, dtype),
        x=np.ones(1, dtype),
        y=np.ones(1, dtype),
        w=np.ones((2, 1, 1), dtype),
        b=np.ones((2, 1), dtype),
    )
    ops = cpu_ops(mode, tiny)
    seconds: dict[str, list[float]] = {op.kernel: [] for op in ops}
    for _ in range(CALIBRATION_CALLS):
        for op in ops:
            started = time.perf_counter()
            op.run()
            seconds[op.kernel].append(time.perf_counter() - started)
    return {kernel: statistics.median(times) for kernel, times in seconds.items()}


def cpu_kernel_times(ops: Sequence[Op], fixed: dict[str, float]) -> list[tuple[float, float]]:
    """(start, end) of each call's own work in the instrumented step with the median busy time
    of INSTRUMENTED_STEPS, from the step's first call: time.perf_counter around each call, its
    fixed cost (cpu_fixed_costs) taken off the start."""
    steps = []
    for _ in range(INSTRUMENTED_STEPS):
        stamps = []
        for op in ops:
            started = time.perf_counter()
            op.run()
            ended = time.perf_counter()
            stamps.append((min(started + fixed[op.kernel], ended), ended))
        origin = stamps[0][0]
        steps.append([(start - origin, end - origin) for start, end in stamps])
    return _median_busy(steps)


def _median_busy(steps: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    busy = [sum(end - start for start, end in step) for step in steps]
    return steps[busy.index(statistics.median_low(busy))]


# -- CUDA ------------------------------------------------------------------------------------------


class CudaKernels:
    """The compiled kernels of one dtype (NVRTC, cached on disk by CuPy)."""

    def __init__(self, cupy, dtype: np.dtype):
        ctype = CUDA_TYPES[np.dtype(dtype).name]
        defines = (
            f"typedef {ctype} real;\n#define ROWS {GEMV_ROWS}\n#define COLUMNS {GEMV_COLUMNS}\n"
        )
        self.cupy = cupy
        self.gemv = cupy.RawKernel(defines + GEMV_SOURCE, "timeline_gemv")
        self.hold = cupy.RawKernel(HOLD_SOURCE, "timeline_hold")
        self.fused = cupy.ElementwiseKernel(
            *FUSED_PARAMS, FUSED_OPERATION, "timeline_bias_relu_residual"
        )

    def ops(self, mode: str, buffers: Buffers) -> list[Op]:
        cp = self.cupy
        hidden = buffers.x.shape[0]
        grid, block = (-(-hidden // GEMV_COLUMNS),), (GEMV_COLUMNS, GEMV_ROWS)
        zero = buffers.y.dtype.type(0)
        ops = []
        for layer in range(buffers.w.shape[0]):
            source, y, x, b = buffers.source(layer), buffers.y, buffers.x, buffers.b[layer]
            args = (source, buffers.w[layer], y, np.int32(hidden))
            ops.append(Op(layer, "gemv", partial(self.gemv, grid, block, args)))
            if mode == "fused":
                # `previous` is `x` itself after layer 0: CuPy copies an input that overlaps an
                # output unless it is the very same array object, so it is passed as such
                ops.append(Op(layer, "bias_relu_residual", partial(self.fused, y, b, source, x)))
                continue
            ops += [
                Op(layer, "bias_add", partial(cp.add, y, b, out=y)),
                Op(layer, "relu", partial(cp.maximum, y, zero, out=y)),
                Op(layer, "residual_add", partial(cp.add, source, y, out=x)),
            ]
        return ops

    def spin(self, seconds: float) -> None:
        self.hold((1,), (1,), (np.uint64(int(seconds * 1e9)),))


def run_all(ops: Sequence[Op]) -> Callable[[], None]:
    """One step: every op in order (their callables gathered once, off the timed path)."""
    runs = tuple(op.run for op in ops)

    def step() -> None:
        for run in runs:
            run()

    return step


@functools.cache
def _record_external() -> Callable:
    function = ctypes.CDLL("libcuda.so.1").cuEventRecordWithFlags
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def record_in_capture(event, stream) -> None:
    """An event record node in the graph being captured on `stream`."""
    status = _record_external()(event.ptr, stream.ptr, CU_EVENT_RECORD_EXTERNAL)
    if status != 0:
        raise RuntimeError(f"cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL) returned {status}")


def capture(stream, enqueue: Callable[[], None]):
    """A CUDA graph of what `enqueue` launches on `stream`, instantiated; the stream leaves
    capture mode whatever happens."""
    stream.begin_capture()
    try:
        enqueue()
    except BaseException:
        with contextlib.suppress(Exception):
            stream.end_capture()
        raise
    graph = stream.end_capture()
    graph.upload(stream)
    return graph


class EventTimeline:
    """An instrumented step on CUDA: an event before the first kernel and after every kernel."""

    def __init__(self, cupy, stream, ops: Sequence[Op], *, in_graph: bool):
        self.cupy, self.stream, self.ops = cupy, stream, list(ops)
        self.events = [cupy.cuda.Event() for _ in range(len(self.ops) + 1)]
        self.gate = cupy.cuda.Event(disable_timing=True)
        if in_graph:
            graph = capture(
                stream, partial(self._enqueue, partial(record_in_capture, stream=stream))
            )
            self.launch = partial(graph.launch, stream)
        else:
            self.launch = partial(self._enqueue, lambda event: event.record(stream))

    def _enqueue(self, record: Callable) -> None:
        record(self.events[0])
        for op, event in zip(self.ops, self.events[1:], strict=True):
            op.run()
            record(event)

    def _elapsed(self, first: int, last: int) -> float:
        return self.cupy.cuda.get_elapsed_time(self.events[first], self.events[last]) * 1e-3

    def held_durations(self, kernels: CudaKernels, hold_s: float) -> list[float] | None:
        """Each kernel's device time, the step queued whole behind a spin kernel (the median-busy
        of INSTRUMENTED_STEPS); None when the host could not queue it before the spin ended."""
        steps = []
        for _ in range(INSTRUMENTED_STEPS):
            for _attempt in range(HOLD_ATTEMPTS):
                kernels.spin(hold_s)
                self.gate.record(self.stream)
                self.launch()
                held = not self.gate.done  # the spin still ran once all was queued
                self.stream.synchronize()
                if held:
                    break
                hold_s *= 4
            else:
                return None
            ends = [self._elapsed(0, i) for i in range(1, len(self.events))]
            steps.append(list(zip([0.0, *ends[:-1]], ends, strict=True)))
        return [end - start for start, end in _median_busy(steps)]

    def launched_ends(self) -> list[float]:
        """Where each kernel ends in an as-launched step (from the event before the first), in
        the median-long of INSTRUMENTED_STEPS."""
        steps = []
        for _ in range(INSTRUMENTED_STEPS):
            self.launch()
            self.stream.synchronize()
            steps.append([self._elapsed(0, i) for i in range(1, len(self.events))])
        spans = [step[-1] for step in steps]
        return steps[spans.index(statistics.median_low(spans))]


def event_seconds(cupy, stream, kernels: CudaKernels, count: int, hold_s: float, in_graph: bool):
    """The device time of one event record, taken off each kernel's interval: the median interval
    between `count` + 1 events recorded back to back (as graph nodes for a graph), queued behind
    a spin kernel; 0 where the host could not queue them in time."""
    nothing = [Op(None, "none", lambda: None)] * count
    intervals = EventTimeline(cupy, stream, nothing, in_graph=in_graph).held_durations(
        kernels, hold_s
    )
    return statistics.median(intervals) if intervals else 0.0


def placed(durations: Sequence[float], ends: Sequence[float]) -> list[tuple[float, float]]:
    """Each kernel as (start, end): ending where its as-launched event fired and starting its
    device time before, but not before the kernel ahead of it ended (nor before 0)."""
    rows, previous = [], 0.0
    for duration, end in zip(durations, ends, strict=True):
        end = max(end, previous)
        start = max(end - duration, previous)
        rows.append((start, end))
        previous = end
    return rows


def hold_seconds(step_s: float, kernels: int) -> float:
    """A held pass's first spin: longer than the host takes to queue an instrumented step (its
    launches and an event per kernel), with room to spare."""
    return HOLD_FACTOR * step_s + 1e-3 + HOLD_PER_KERNEL_S * kernels
