"""The timeline measurement (docs/timelines.md): a decode-like step of many small kernels, where
the time between launches, not the kernels, can be most of the step.

A step is L layers of: an M=1 GEMM (a GEMV) y = x·W_l (x 1×H, W_l H×H), a bias add y += b_l, a
relu y = max(y, 0) and a residual add x = x + y (layer 0 reads the step's input x_in, so a step
can be repeated). Inputs come from numpy.random.default_rng(seed): W ~ U(-1, 1)/sqrt(H), b ~
U(-0.01, 0.01), x_in ~ U(-1, 1), so 32 layers stay far from overflow. Modes:

- `eager`: one launch (CUDA) or one numpy call (CPU) per op: 4L kernels per step.
- `graph` (CUDA only; skipped on a CPU with a log line): the eager step captured once with CuPy's
  stream capture and replayed with one graph launch per step (4L kernel nodes).
- `fused`: CUDA: per layer the GEMV and one elementwise kernel for bias, relu and residual (2L
  kernels); CPU: the whole step as one numba call (1 kernel).

The GEMV on CUDA is rooflab's own kernel in every mode (timeline_kernels: CuPy refuses cuBLAS
during stream capture). Per mode: `step_s`, the host's wall time of a step, launch to
synchronise, sampled as every measurement here is (timing.measure with host_wall_time); `busy_s`,
the sum of the kernels' own times in an instrumented step; `gap_s` = step_s - busy_s; one
`timeline_kernels` row per kernel of that instrumented step. A kernel's own time leaves out what
launching it costs the host: on CUDA, the device time between events with the step queued
behind a spin kernel (timeline_kernels); on a CPU, perf_counter around each call less what the
same call costs on one-element arrays (numpy's and numba's dispatch, the CPU's launch overhead).
The row's `busy_method` says which.

Ledger of a step (`timeline_ledger`; s = bytes per element; the cold-cache bytes of the mode's
passes; a multiply-add is 2 FLOP, an add 1, the max 0: a comparison is no FLOP):

    per layer                    FLOP   bytes
    GEMV                         2H²    (H² + 2H)·s   reads W_l and x, writes y
    bias add (eager, graph)      H      3H·s          reads y and b_l, writes y
    relu (eager, graph)          0      2H·s          reads y, writes y
    residual (eager, graph)      H      3H·s          reads x and y, writes x
    bias+relu+residual (fused)   2H     4H·s          reads y, b_l and x, writes x

so every mode does L(2H² + 2H) FLOP; eager and graph move L(H² + 10H)·s bytes, fused
L(H² + 6H)·s (the CPU's fused step makes the same passes inside its one call).

Correct before timed: each mode's x after one step is checked against a float64 numpy step on
the same stored inputs (max |x - ref| / max |ref| within UNIT_ROUNDOFF[dtype] * L * (8 sqrt(H) +
16): a GEMV's H-term sums per layer, errors adding over the layers, a wide margin); a mode that
fails is one TimelineError naming the scenario and the mode, and nothing is returned.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Mapping

import numpy as np

from rooflab.backends.base import Backend
from rooflab.conditions.disturbance import add_gpu_processes
from rooflab.experiments import timeline_kernels
from rooflab.experiments.correctness import UNIT_ROUNDOFF
from rooflab.experiments.runs import MeasuringRun, conditions_row, during_rows, measuring_run
from rooflab.experiments.timeline_kernels import Buffers, EventTimeline, Op
from rooflab.experiments.timing import TimingSettings, host_wall_time, measure, sample_rows
from rooflab.vocabulary import CacheState

MODES = ("eager", "graph", "fused")
DTYPES = {"fp32": np.dtype("float32"), "fp64": np.dtype("float64")}
BACKENDS = ("cpu", "cuda")
SPEC_KEYS = ("layers", "hidden", "dtype", "modes", "seed")
MEMORY_SHARE = 0.5  # the operands may take at most this share of the backend's free memory


class TimelineError(ValueError):
    """A timeline scenario that cannot be measured as asked, or a mode whose result is wrong."""


def timeline_ledger(
    layers: int, hidden: int, itemsize: int, mode: str, backend_name: str
) -> tuple[int, int, int]:
    """(FLOP, bytes, kernels) of one step (the module's table)."""
    if mode not in MODES:
        raise TimelineError(f"unknown timeline mode {mode!r}; known: {', '.join(MODES)}")
    if backend_name not in BACKENDS:
        raise TimelineError(f"unknown backend {backend_name!r}; known: {', '.join(BACKENDS)}")
    if mode == "graph" and backend_name != "cuda":
        raise TimelineError("timeline mode 'graph' needs CUDA graphs: GPU only")
    h = hidden
    flops = layers * (2 * h * h + 2 * h)
    elementwise = 4 * h if mode == "fused" else 8 * h
    bytes_ = layers * (h * h + 2 * h + elementwise) * itemsize
    if mode != "fused":
        return flops, bytes_, 4 * layers
    return flops, bytes_, 1 if backend_name == "cpu" else 2 * layers  # CPU: one numba call


def checked_spec(name: str, spec: Mapping) -> dict:
    """The scenario's spec with its defaults (modes: all, seed: 0); one TimelineError naming
    the scenario and what is wrong."""
    if not isinstance(spec, Mapping):
        raise TimelineError(f"timeline {name}: the spec must be a mapping, got {spec!r}")
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise TimelineError(
            f"timeline {name}: unknown key(s) {', '.join(map(str, unknown))}; "
            f"known: {', '.join(SPEC_KEYS)}"
        )
    spec = {"modes": list(MODES), "seed": 0, **spec}
    for key in ("layers", "hidden"):
        if key not in spec:
            raise TimelineError(f"timeline {name}: {key} is missing")
        value = spec[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TimelineError(f"timeline {name}: {key} must be an integer >= 1, got {value!r}")
    if spec.get("dtype") not in DTYPES:
        raise TimelineError(
            f"timeline {name}: dtype must be one of {', '.join(DTYPES)}, got {spec.get('dtype')!r}"
        )
    seed = spec["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise TimelineError(f"timeline {name}: seed must be an integer >= 0, got {seed!r}")
    modes = spec["modes"]
    if isinstance(modes, str) or not isinstance(modes, list | tuple) or not modes:
        raise TimelineError(f"timeline {name}: modes must be a non-empty list, got {modes!r}")
    for mode in modes:
        if mode not in MODES:
            raise TimelineError(
                f"timeline {name}: unknown mode {mode!r}; known: {', '.join(MODES)}"
            )
    if len(set(modes)) != len(modes):
        raise TimelineError(f"timeline {name}: a mode is named twice in {list(modes)}")
    return {**spec, "modes": list(modes)}


def run_timeline(
    backend: Backend,
    name: str,
    spec: dict,
    timing: TimingSettings,
    *,
    run_id: str | None = None,
) -> dict[str, list[dict]]:
    """Check and time every mode of timeline scenario `name` (`spec`: layers, hidden, dtype,
    modes, seed); the rows of each table (nothing written). Holds the machine lock throughout."""
    spec = checked_spec(name, spec)
    if backend.name not in BACKENDS:
        raise TimelineError(f"timeline {name}: backend {backend.name!r} is not cpu or cuda")
    modes = [m for m in spec["modes"] if m != "graph" or backend.name == "cuda"]
    if len(modes) < len(spec["modes"]):
        skipped = "mode graph skipped: CUDA graphs need a GPU"
        print(f"rooflab: timeline {name}: {skipped}", file=sys.stderr)
    with measuring_run(
        backend, "timeline", name,
        tables=("samples", "timeline_steps", "timeline_kernels"), disturbance=timing.disturbance,
        run_id=run_id,
    ) as run:  # fmt: skip
        _modes(run, spec, modes, timing)
        return run.close({"timeline": spec, "timing": timing.record()})


def _modes(run: MeasuringRun, spec, modes, timing) -> None:
    """Build, check and time the step in each mode, into the run's tables."""
    backend, name, progress, run_id, tables = (
        run.backend, run.name, run.progress, run.run_id, run.tables
    )  # fmt: skip
    planned = timing.warmup_s + timing.cooldown_s + timing.min_time_s
    progress.plan([planned] * len(modes))
    with backend.limited_library_threads(), _device_stream(backend) as stream:
        scenario = _Scenario(backend, name, spec, stream)
        steps = {mode: scenario.build(mode) for mode in modes}  # each checked: correct first
        for mode in modes:
            progress.start(f"{name}/{mode}", planned)
            step_row = _time_step(
                backend, scenario, mode, steps[mode], timing, tables, run_id, progress
            )
            kernel_rows, busy_s, method = scenario.kernel_timeline(mode, step_row["step_s"])
            ids = {"run_id": run_id, "config_id": step_row["config_id"]}
            tables["timeline_kernels"] += [{**ids, **row} for row in kernel_rows]
            gap_s = None if busy_s is None else step_row["step_s"] - busy_s
            tables["timeline_steps"].append(
                step_row | {"busy_s": busy_s, "gap_s": gap_s, "busy_method": method}
            )


@contextlib.contextmanager
def _device_stream(backend: Backend):
    """On CUDA, a non-blocking stream of the measurement's own, current for CuPy's launches and
    the one backend.synchronize() waits for (CudaBackend.on_stream); None on a CPU."""
    if backend.name != "cuda":
        yield None
        return
    stream = backend.array_module.cuda.Stream(non_blocking=True)
    with backend.on_stream(stream), stream:
        yield stream


def _time_step(backend, scenario, mode, step, timing, tables, run_id, progress) -> dict:
    """The step's host wall time (launch to synchronise), sampled with condition readings
    around it as every timed point's; its samples appended to `tables`."""
    config_id = f"{scenario.name}/{mode}"
    flops, bytes_, kernels = scenario.ledger(mode)
    before = conditions_row(backend, run_id, "before", config_id)
    with backend.sampling_conditions(config_id) as during:
        measured = measure(
            step,
            backend,
            timing,
            CacheState.WARM,
            progress,
            label=f"{config_id}/{CacheState.WARM}",
            timer=host_wall_time(backend),
        )
    readings = [before, *during_rows(run_id, during)]
    readings.append(conditions_row(backend, run_id, "after", config_id))
    tables["conditions"].extend(readings)
    tables["samples"].extend(
        sample_rows(run_id, config_id, CacheState.WARM, measured.samples, flops, "FLOP")
    )
    summary = measured.summary(timing.noisy_iqr_ratio)
    spec = scenario.spec
    return {
        "run_id": run_id,
        "config_id": config_id,
        "scenario": scenario.name,
        "mode": mode,
        "layers": spec["layers"],
        "hidden": spec["hidden"],
        "dtype": spec["dtype"],
        "kernels": kernels,
        **summary.columns(),
        "step_s": summary.median_s,
        "flops": flops,
        "bytes": bytes_,
        "noisy": summary.noisy,
        **add_gpu_processes(measured.verdict, readings).columns(),
    }


class _Scenario:
    """One scenario's arrays on the backend, its float64 reference, and each mode's step."""

    def __init__(self, backend: Backend, name: str, spec: dict, stream):
        self.backend, self.name, self.spec, self.stream = backend, name, spec, stream
        self.xp = backend.array_module
        self.dtype = DTYPES[spec["dtype"]]
        layers, hidden = spec["layers"], spec["hidden"]
        needed = self.dtype.itemsize * (layers * hidden * (hidden + 1) + 3 * hidden)
        available = backend.memory_available_bytes()
        if needed > MEMORY_SHARE * available:
            raise TimelineError(
                f"timeline {name}: its operands take {needed} B, more than "
                f"{MEMORY_SHARE:.0%} of the {available} B free on backend {backend.name}"
            )
        self.buffers, self.reference = _inputs(self.xp, self.dtype, layers, hidden, spec["seed"])
        self.kernels = None
        if backend.name == "cuda":
            self.kernels = timeline_kernels.CudaKernels(self.xp, self.dtype)
        self.ops: dict[str, list[Op]] = {}

    def ledger(self, mode: str) -> tuple[int, int, int]:
        spec = self.spec
        return timeline_ledger(
            spec["layers"], spec["hidden"], self.dtype.itemsize, mode, self.backend.name
        )

    def _ops(self, mode: str) -> list[Op]:
        if mode not in self.ops:
            kernel_mode = "eager" if mode == "graph" else mode  # a graph replays the eager step
            if self.kernels is None:
                self.ops[mode] = timeline_kernels.cpu_ops(kernel_mode, self.buffers)
            else:
                self.ops[mode] = self.kernels.ops(kernel_mode, self.buffers)
        return self.ops[mode]

    def build(self, mode: str):
        """The mode's step, run once and checked (TimelineError when wrong)."""
        step = timeline_kernels.run_all(self._ops(mode))
        if mode == "graph":
            step()  # every kernel loaded (and compiled) before the capture
            self.backend.synchronize()
            graph = timeline_kernels.capture(self.stream, step)
            step = _graph_step(graph, self.stream)
        self._check(mode, step)
        return step

    def _check(self, mode: str, step) -> None:
        x = self.buffers.x
        x.fill(np.nan)  # a step that does not write x cannot pass
        step()
        self.backend.synchronize()
        got = x.get(stream=self.stream) if self.stream is not None else x
        got = np.asarray(got, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            error = float(np.max(np.abs(got - self.reference)) / np.max(np.abs(self.reference)))
        spec = self.spec
        tolerance = (
            UNIT_ROUNDOFF[spec["dtype"]] * spec["layers"] * (8 * math.sqrt(spec["hidden"]) + 16)
        )
        if not error <= tolerance:  # NaN fails too
            raise TimelineError(
                f"timeline {self.name}: mode {mode} is wrong: max relative error {error:.3g} of x "
                f"after one step > tolerance {tolerance:.3g}"
            )

    def kernel_timeline(self, mode: str, step_s: float) -> tuple[list[dict], float | None, str]:
        """The rows of one instrumented step, its busy time and how it was measured."""
        ops = self._ops(mode)
        if self.kernels is None:
            fixed = timeline_kernels.cpu_fixed_costs(mode, self.dtype)
            spans = timeline_kernels.cpu_kernel_times(ops, fixed)
            what = "numpy call" if mode == "eager" else "numba call (the whole step)"
            method = (
                f"time.perf_counter() before and after each {what} of an instrumented step (the "
                f"one of {timeline_kernels.INSTRUMENTED_STEPS} with the median busy time), less "
                "the call's fixed cost (its median on one-element arrays: dispatch and timer, "
                "the CPU's launch overhead); busy: the sum of what is left"
            )
            return self._rows(mode, ops, spans), _busy(spans), method
        hold_s = timeline_kernels.hold_seconds(step_s, len(ops))
        if mode != "graph":
            return self._event_timeline(mode, ops, hold_s, "CUDA events recorded between launches")
        try:
            return self._event_timeline(
                mode, ops, hold_s, "event record nodes in a second captured graph"
            )
        except Exception as error:  # CuPy or CUDA refused event record nodes, or their times
            return self._graph_fallback(error, hold_s)

    def _event_timeline(self, mode, ops, hold_s, where) -> tuple[list[dict], float, str]:
        in_graph = mode == "graph"
        timeline = EventTimeline(self.xp, self.stream, ops, in_graph=in_graph)
        durations = timeline.held_durations(self.kernels, hold_s)
        ends = timeline.launched_ends()
        if durations is not None:
            event_s = timeline_kernels.event_seconds(
                self.xp, self.stream, self.kernels, len(ops), hold_s, in_graph
            )
            durations = [max(0.0, seconds - event_s) for seconds in durations]
        if durations is None:
            spans = list(zip([0.0, *ends[:-1]], ends, strict=True))
            method = (
                f"{where} of an as-launched instrumented step: the host could not queue the "
                "step behind a spin kernel, so each interval holds its launch's host time too "
                "(busy is an upper bound)"
            )
        else:
            spans = timeline_kernels.placed(durations, ends)
            method = (
                f"{where}: each kernel's device time from a step queued whole behind a spin "
                "kernel (no launch time in it) less an event record's own, placed to end where "
                "the event after it fired as launched (each the median of "
                f"{timeline_kernels.INSTRUMENTED_STEPS} instrumented steps); busy: the sum of "
                "the placed times"
            )
        return self._rows(mode, ops, spans), _busy(spans), method

    def _graph_fallback(self, error: Exception, hold_s: float) -> tuple[list, float | None, str]:
        why = f"{type(error).__name__}: {error}".splitlines()[0]
        ops = self._ops("eager")
        eager = EventTimeline(self.xp, self.stream, ops, in_graph=False)
        durations = eager.held_durations(self.kernels, hold_s)
        if durations is None:
            return [], None, f"no per-kernel timeline: event record nodes refused ({why})"
        event_s = timeline_kernels.event_seconds(
            self.xp, self.stream, self.kernels, len(ops), hold_s, False
        )
        method = (
            f"no per-kernel timeline: event record nodes refused in a captured graph ({why}); "
            "busy: the eager kernels' device times (the same kernels launched one by one, queued "
            "behind a spin kernel, less an event record's own), summed"
        )
        return [], float(sum(max(0.0, d - event_s) for d in durations)), method

    def _rows(self, mode: str, ops: list[Op], spans) -> list[dict]:
        return [
            {
                "scenario": self.name,
                "mode": mode,
                "position": position,
                "layer": op.layer,
                "kernel": op.kernel,
                "start_s": start,
                "end_s": end,
                "duration_s": end - start,
            }
            for position, (op, (start, end)) in enumerate(zip(ops, spans, strict=True))
        ]


def _busy(spans) -> float:
    return float(sum(end - start for start, end in spans))


def _graph_step(graph, stream):
    def step() -> None:
        graph.launch(stream)

    return step


def _inputs(xp, dtype: np.dtype, layers: int, hidden: int, seed: int):
    """The arrays of a scenario (on the backend, in `dtype`) and the float64 reference of x after
    one step, computed on the values as stored."""
    rng = np.random.default_rng(seed)
    x_in = rng.uniform(-1.0, 1.0, hidden).astype(dtype)
    w = np.empty((layers, hidden, hidden), dtype=dtype)
    b = np.empty((layers, hidden), dtype=dtype)
    reference = x_in.astype(np.float64)
    for layer in range(layers):  # one layer's float64 draws at a time
        w[layer] = rng.uniform(-1.0, 1.0, (hidden, hidden)) / math.sqrt(hidden)
        b[layer] = rng.uniform(-0.01, 0.01, hidden)
        y = reference @ w[layer].astype(np.float64) + b[layer].astype(np.float64)
        reference = reference + np.maximum(y, 0.0)
    buffers = Buffers(
        x_in=xp.asarray(x_in),
        x=xp.empty(hidden, dtype=dtype),
        y=xp.empty(hidden, dtype=dtype),
        w=xp.asarray(w),
        b=xp.asarray(b),
    )
    return buffers, reference
