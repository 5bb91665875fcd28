"""What a ceilings run will measure, worked out before it measures anything: its settings (from
the config's `ceilings` section), the working sets of its sweep, each level's plateau, and the
refusals: a kernel, dtype or size this backend cannot measure, or a working set, library GEMM or
host-link buffer larger than the memory available to it (checked before anything is allocated)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from rooflab.backends.base import Backend, BackendError
from rooflab.backends.cuda_host_link import check_buffer, copy_bytes
from rooflab.conditions.disturbance import DisturbanceSettings
from rooflab.config import ConfigError, defaults
from rooflab.experiments.cache_edges import MEMORY_ABOVE, PLATEAU_ABOVE, PLATEAU_BELOW
from rooflab.experiments.item_plans import PRIOR_FLOP_PER_S, planned_timing_s
from rooflab.experiments.timing import TimingSettings
from rooflab.model import tensor_bytes
from rooflab.units import UnitError, format_quantity, parse_bytes

# Headroom left for the interpreter, BLAS workspace and the rest of the machine (as for GEMMs).
MEMORY_HEADROOM = 0.8

# A backend's local cache (a GPU's L1) is swept per SM from LOCAL_MIN_BYTES to LOCAL_ABOVE x its
# capacity, so the sweep shows the plateau and the fall into the next level.
LOCAL_MIN_BYTES, LOCAL_ABOVE = 4 * 1024, 4
# An adaptive sweep starts from one working set per octave and each plateau's two ends (where a
# level's best point usually sits), then halves the step between neighbours whose rates differ by
# more than EDGE_CHANGE, down to 1 / points_per_octave of an octave: fine steps at the edges only.
COARSE_PER_OCTAVE, EDGE_CHANGE = 1, 0.1


_SIZES = {
    "min_working_set": "min_working_set_bytes",
    "max_working_set": "max_working_set_bytes",
    "host_link_buffer": "host_link_buffer_bytes",
}


def _settings(ceilings: dict, where: str) -> dict:
    """A validated `ceilings` section as CeilingSettings' fields: sizes parsed into bytes (None
    for `auto` or null), lists as tuples."""
    fields = {}
    for key, value in ceilings.items():
        if key not in _SIZES:
            fields[key] = tuple(value) if isinstance(value, list) else value
        elif value is None or (key == "max_working_set" and value == "auto"):
            fields[_SIZES[key]] = None
        else:
            try:
                fields[_SIZES[key]] = int(parse_bytes(value, positive=True))
            except UnitError as error:
                raise ConfigError(f"{where}.{key}: {error}") from None
    return fields


_DEFAULT = _settings(defaults("ceilings"), "ceilings")  # config/schema.yaml: meaning and default


@dataclass(frozen=True)
class CeilingSettings:
    min_working_set_bytes: int = _DEFAULT["min_working_set_bytes"]
    # The sweep's cap; None: 8x the total cache capacity. Either way the sweep stops earlier once
    # the memory plateau is established (experiments.cache_edges.memory_plateau).
    max_working_set_bytes: int | None = _DEFAULT["max_working_set_bytes"]
    points_per_octave: int = _DEFAULT["points_per_octave"]  # an adaptive sweep's finest step
    adaptive: bool = _DEFAULT["adaptive"]
    kernels: tuple[str, ...] = _DEFAULT["kernels"]
    threads: int | None = _DEFAULT["threads"]  # None: all usable cores
    window_s: float = _DEFAULT["window_s"]
    windows: int = _DEFAULT["windows"]  # the floor of windows per point or round
    rel_width: float = _DEFAULT["rel_width"]  # stopping rule: the median window's interval
    max_point_s: float = _DEFAULT["max_point_s"]  # stopping rule's cap on one point's windows
    max_rounds: int = _DEFAULT["max_rounds"]  # FMA rounds, while the best two disagree
    fma_dtypes: tuple[str, ...] = _DEFAULT["fma_dtypes"]
    blas_dtypes: tuple[str, ...] = _DEFAULT["blas_dtypes"]
    blas_n: int = _DEFAULT["blas_n"]
    # Not config keys: the library GEMMs' sampling and the clock change a ceiling is flagged at.
    blas_timing: TimingSettings = field(
        default_factory=lambda: TimingSettings(
            warmup_s=0.2, min_time_s=0.1, min_samples=10, max_time_s=1.0
        )
    )
    max_clock_change: float = 0.05
    disturbance: DisturbanceSettings = field(default_factory=DisturbanceSettings)
    # Bytes of each host-link copy, on a backend with a host link (CUDA); None: not measured.
    host_link_buffer_bytes: int | None = _DEFAULT["host_link_buffer_bytes"]


QUICK = CeilingSettings(
    points_per_octave=2,
    kernels=("triad",),
    window_s=0.005,
    max_point_s=0.2,
    blas_n=1024,
    blas_timing=TimingSettings(warmup_s=0.1, min_time_s=0.05, min_samples=6, max_time_s=0.3),
    host_link_buffer_bytes=256 * 1024 * 1024,  # over 2x the L2 of an H100 or H200 (50, 60 MiB)
)
# The fixed budgets of rooflab before its stopping rule (every point 5 windows of 50 ms, 4 points
# per octave, five FMA rounds, library GEMMs sampled 1 s): benchmarks/ceilings_adaptive.py
# measures both in one process.
FIXED = CeilingSettings(
    adaptive=False,
    window_s=0.05,
    windows=5,
    rel_width=0.0,
    max_point_s=0.0,
    blas_timing=TimingSettings(
        warmup_s=0.3, min_time_s=1.0, min_samples=5, rel_width=0.0, max_time_s=0.0
    ),
)


def settings_from_config(
    ceilings: dict, where: str = "ceilings", disturbance: dict | None = None
) -> CeilingSettings:
    """CeilingSettings from a validated config's `ceilings` section (sizes parsed with units)."""
    return CeilingSettings(
        **_settings(ceilings, where), disturbance=DisturbanceSettings.from_config(disturbance or {})
    )


def working_set_sizes(low: int, high: int, points_per_octave: int) -> list[int]:
    """Geometric from `low` to `high` inclusive, rounded to 1 KiB."""
    octaves = math.log2(high / low)
    count = max(1, math.ceil(octaves * points_per_octave))
    sizes = {round(low * 2 ** (i * octaves / count) / 1024) * 1024 for i in range(count + 1)}
    return sorted(sizes)


def sweep_start(
    low: int, high: int, settings: CeilingSettings, level_windows: dict[str, tuple[int, int]]
) -> list[int]:
    """The working sets a sweep measures first: every step of a full sweep; for an adaptive one,
    one per octave and each plateau's ends inside [low, high] (refine adds the rest)."""
    if not settings.adaptive:
        return working_set_sizes(low, high, settings.points_per_octave)
    # 2 % inside each end: a workload's real working set is rounded to whole chunks per thread
    ends = {
        round(end / 1024) * 1024
        for lo, hi in level_windows.values()
        for end in (lo * 1.02, hi * 0.98)
        if low <= end <= high
    }
    grid = set(working_set_sizes(low, high, COARSE_PER_OCTAVE))
    if any(end < high <= end * 1.03 for end in ends):
        # the memory plateau's end, 2 % inside the sweep's: `high` itself would add the sweep's
        # largest allocation again (seconds on a machine with a large last-level cache)
        grid.discard(high)
    return sorted(grid | ends)


def refine(measured: dict[int, float], settings: CeilingSettings) -> list[int]:
    """Working sets to add to an adaptive sweep: the geometric midpoint of each pair of
    neighbours whose rates differ by more than EDGE_CHANGE and lie more than the finest step
    apart (rounded to 1 KiB; none already measured). Empty when the sweep is done."""
    if not settings.adaptive:
        return []
    finest = 2 ** (1 / settings.points_per_octave)
    sizes = sorted(measured)
    added = []
    for a, b in itertools.pairwise(sizes):
        ratio = measured[b] / measured[a] if measured[a] > 0 else math.inf
        if abs(ratio - 1) <= EDGE_CHANGE or b / a <= finest * 1.01:
            continue
        middle = round(math.sqrt(a * b) / 1024) * 1024
        if a < middle < b and middle not in measured:
            added.append(middle)
    return added


def plateaus(
    cache_bytes_by_level: dict[str, int], high: int, memory_level: str | None = "DRAM"
) -> dict[str, tuple[int, int]]:
    """Working-set range of each level's plateau as the reported capacities place it, levels in
    order of size, then the memory (None: none): where an adaptive sweep starts (sweep_start).
    The windows its ceilings come from are found from its points (cache_edges.level_windows)."""
    windows, below = {}, 0
    for level, size in sorted(cache_bytes_by_level.items(), key=lambda item: item[1]):
        windows[level] = (int(PLATEAU_ABOVE * below), int(PLATEAU_BELOW * size))
        below = size
    if memory_level is not None:
        windows[memory_level] = (int(MEMORY_ABOVE * sum(cache_bytes_by_level.values())), high)
    return windows


def narrower_sweep_end(level_windows: dict[str, tuple[int, int]]) -> int:
    """Where a narrower vector path's bandwidth sweep stops: at the start of the last cache
    level's plateau. The width of the loads matters in a core's own caches (L1, L2), not behind
    them (the shared L3 and memory read alike at 256 and 512 bits), and the largest working sets
    are the sweep's costliest points (allocating and touching gigabytes)."""
    caches = list(level_windows)[:-1]  # the last window is the memory's
    if len(caches) < 2:
        return max(hi for _, hi in level_windows.values())
    return level_windows[caches[-1]][0]


def check_supported(backend: Backend, settings: CeilingSettings) -> None:
    """Refuse, before measuring anything, what this backend cannot measure."""
    for what, asked, known in (
        ("stream kernel", settings.kernels, backend.stream_kernels),
        ("FMA dtype", settings.fma_dtypes, backend.fma_dtypes),
        ("library GEMM dtype", settings.blas_dtypes, backend.gemm_dtypes),
    ):
        missing = [item for item in asked if item not in known]
        if missing:
            raise BackendError(
                f"backend {backend.name} has no {what} {', '.join(map(repr, missing))}; "
                f"supported: {', '.join(known)}"
            )
    backend.fma_isas()  # a CPU with no vector path rooflab builds says so here
    if backend.has_host_link and settings.host_link_buffer_bytes is not None:
        caches = sum(backend.cache_bytes_by_level().values())
        check_buffer(settings.host_link_buffer_bytes, caches)


class CeilingsTooLarge(BackendError):
    """A working set or library GEMM of the ceilings that would not fit in memory."""


def largest_working_set(backend: Backend, settings: CeilingSettings) -> int:
    """The most the bandwidth sweep may reach: the configured size, or 8x the total cache
    capacity (reached only where the memory plateau is not established before it)."""
    return settings.max_working_set_bytes or 8 * sum(backend.cache_bytes_by_level().values())


def check_memory(backend: Backend, settings: CeilingSettings, where: str = "ceilings") -> None:
    """Refuse, before allocating anything, a sweep or library GEMM the memory cannot hold; the
    error names the config key to lower."""
    available = int(backend.memory_available_bytes() * MEMORY_HEADROOM)
    what = f"{format_quantity(available, 'bytes')} available to it ({backend.name})"
    high = largest_working_set(backend, settings)
    if high > available:
        raise CeilingsTooLarge(
            f"{where}.max_working_set: the sweep's largest working set, "
            f"{format_quantity(high, 'bytes')}, does not fit in the {what}"
        )
    for dtype in settings.blas_dtypes:
        needed = 3 * tensor_bytes(dtype, settings.blas_n**2)  # X, W and Y of an n x n x n GEMM
        if needed > available:
            raise CeilingsTooLarge(
                f"{where}.blas_n: {settings.blas_n} needs {format_quantity(needed, 'bytes')} for "
                f"the {dtype} library GEMM's three n x n matrices, more than the {what}"
            )
    if backend.has_host_link and settings.host_link_buffer_bytes is not None:
        needed = copy_bytes(settings.host_link_buffer_bytes)  # its device buffer
        if needed > available:
            raise CeilingsTooLarge(
                f"{where}.host_link_buffer: the host link's device buffer, "
                f"{format_quantity(needed, 'bytes')}, does not fit in the {what}"
            )


def planned_point_s(settings: CeilingSettings) -> float:
    """Planned seconds of one sweep point or FMA round: twice its floor of windows (the stopping
    rule's usual count on a shared machine), each at least `window_s` (1.5 x on average: a
    window's work is sized by doubling), sizing it and the warm-up call."""
    return settings.window_s * (3 * settings.windows + 2.5)


# A sweep point's own cost past its windows: allocating and first touching its working set, and
# each window at least one pass over it (a 4 GB point took about 4 s on a 2-vCPU VM).
PLANNED_S_PER_BYTE = 1e-9
LIBRARY_SHARE_OF_FMA = 0.5


def planned_sweep_point_s(settings: CeilingSettings, working_set: int) -> float:
    """Planned seconds of one sweep point: planned_point_s and its working set's own cost."""
    return planned_point_s(settings) + PLANNED_S_PER_BYTE * working_set


def planned_blas_s(
    settings: CeilingSettings, rest_s: float = 0.0, flop_rate: float | None = None
) -> float:
    """Planned seconds of one library GEMM ceiling: its check (a call and the reference), its
    warm-up, idle (`rest_s`: the backend's rest_before_peak_s) and sampling, at `flop_rate` (the
    dtype's FMA roof measured before it; a prior before that: experiments.item_plans)."""
    # a library GEMM reaches about half its dtype's FMA roof or more (45 % fp32, 47 % fp64 on
    # the 2-vCPU VM's AVX-512, quiet, 2026-12-04)
    rate = LIBRARY_SHARE_OF_FMA * flop_rate if flop_rate else PRIOR_FLOP_PER_S
    call_s = 2 * settings.blas_n**3 / rate
    one_round = replace(settings.blas_timing, rounds=1)  # sampled in one go
    return 2 * call_s + rest_s + planned_timing_s(one_round, call_s)


def planned_work(
    settings: CeilingSettings, working_sets: Sequence[int], rest_s: float = 0.0, isas: int = 1
) -> list[float]:
    """Planned seconds of each item of a run, in order: two FMA rounds (each dtype on each of
    `isas` instruction paths), the sweep points the sweeps start from (`working_sets`, every
    kernel's), the library GEMMs. The ETA starts from it (progress); a sweep's refinements and
    further FMA rounds are added as they are decided."""
    fma = [planned_point_s(settings)] * (2 * len(settings.fma_dtypes) * isas)
    points = [planned_sweep_point_s(settings, size) for size in working_sets]
    return fma + points + [planned_blas_s(settings, rest_s)] * len(settings.blas_dtypes)
