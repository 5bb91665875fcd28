"""The host link in a ceilings run, on a backend that has one (CUDA; backends.cuda_host_link):
H2D and D2H copies of one buffer, each timed by the stopping rule like a sweep point
(experiments.ceiling_windows), recorded in the run's tables:

- `ceiling_sweep`: one row per case (config_id `host/<kernel>`: h2d_sm_pinned, h2d_memcpy_pinned,
  h2d_memcpy_pageable, and d2h likewise), `working_set_bytes` the bytes of one copy, `level`
  `host` for pinned memory and null for pageable (a measurement that sets no ceiling);
- `ceilings`: the pinned cases, kind bandwidth, name `host`, as every level has a row per kernel.
  The level's value, and its roof on the Roofline, is its best kernel's (max over its rows, as for
  read/copy/triad on HBM); each row's method says whether it is its direction's ceiling (the
  faster of the SM copy and cudaMemcpyAsync) and what its peer moved. Pageable memory is never a
  `ceilings` row, so it can never be the ceiling.
"""

from __future__ import annotations

from collections.abc import Callable

from rooflab.backends.base import Backend
from rooflab.backends.cuda_host_link import (
    DIRECTIONS,
    METHODS,
    PLAN,
    HostLinkCase,
    HostLinkLoad,
)
from rooflab.conditions.disturbance import add_gpu_processes, wait_until_idle
from rooflab.conditions.nvml import clock_flags
from rooflab.experiments.ceiling_plan import CeilingSettings
from rooflab.experiments.ceiling_windows import time_workload, window_rule
from rooflab.experiments.runs import conditions_row, during_rows
from rooflab.progress import Progress
from rooflab.units import format_quantity
from rooflab.vocabulary import HOST_LEVEL, CacheState

CASES = {case.kernel: case for case in PLAN}
# The columns a ceiling row takes from its case's sweep row as they are.
SHARED = (
    "config_id",
    "kernel",
    "threads",
    "value",
    "unit",
    "ci_rel_width",
    "stop_reason",
    "disturbed",
    "disturbance",
    "n_disturbed",
    "other_cpus",
    "steal_fraction",
    "gpu_other_processes",
)


class _TimedWith:
    """`backend` as time_workload sees it, each call timed by `timer` instead of its time_call (a
    pageable copy makes the host wait, so it cannot be queued behind a held stream). The host's
    delays then enter the timing, so take_sample judges them."""

    def __init__(self, backend: Backend, timer: Callable[[Callable[[], object]], float]) -> None:
        self._backend = backend
        self.time_call = timer

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    def host_delays_enter_timing(self) -> bool:
        return True


def direction_ceilings(rows: list[dict]) -> dict[str, dict]:
    """Per direction, the row that is its `host` ceiling: the fastest pinned case (SM copy or
    cudaMemcpyAsync), a clean one where there is one. Pageable cases are never chosen."""
    chosen = {}
    for direction in DIRECTIONS:
        pinned = [
            row
            for row in rows
            if CASES[row["kernel"]].direction == direction and CASES[row["kernel"]].sets_ceiling
        ]
        clean = [row for row in pinned if not row.get("disturbed")]
        if pinned:
            chosen[direction] = max(clean or pinned, key=lambda row: row["value"])
    return chosen


def _rate(row: dict) -> str:
    return format_quantity(row["value"], "byte_rate", 4)


def _verdict(row: dict, rows: list[dict], chosen: dict[str, dict]) -> str:
    """Whether `row` is its direction's ceiling, beside its pinned peer's rate."""
    case = CASES[row["kernel"]]
    peers = [
        r
        for r in rows
        if r is not row
        and CASES[r["kernel"]].direction == case.direction
        and CASES[r["kernel"]].sets_ceiling
    ]
    peer = "; ".join(f"{METHODS[CASES[r['kernel']].method]} {_rate(r)}" for r in peers) or "none"
    if chosen.get(case.direction) is row:
        return f"the {case.direction} ceiling (faster than its peer: {peer})"
    return f"not the {case.direction} ceiling: its peer was faster ({peer})"


def ceiling_rows(
    rows: list[dict], run_id: str, how: dict[str, str], flags: dict[str, dict]
) -> list[dict]:
    """The `ceilings` rows of the pinned cases among `rows` (their ceiling_sweep rows), name
    `host`; `how`: each case's method text (by kernel), `flags`: its clock flags (by config_id)."""
    chosen = direction_ceilings(rows)
    return [
        {
            "run_id": run_id,
            "kind": "bandwidth",
            "name": HOST_LEVEL,
            "dtype": None,  # bytes, whatever they hold
            **{key: row.get(key) for key in SHARED},
            "method": f"{how[row['kernel']]}; {_verdict(row, rows, chosen)}",
            "cache_state": CacheState.WARM,
            "working_set_min_bytes": None,  # a buffer, not a cache plateau
            "working_set_max_bytes": None,
            "n_points": 1,
            **flags.get(row["config_id"], {}),
        }
        for row in rows
        if CASES[row["kernel"]].sets_ceiling
    ]


def _method(case: HostLinkCase, link: HostLinkLoad, settings, rule_text: str) -> str:
    return (
        f"{case.describe()}: copies of one {link.load.amount_per_unit} B buffer, each counted "
        f"once (the bytes that cross the host link; the HBM side of a copy is not counted); "
        f"the median of its windows of >= {settings.window_s} s ({rule_text}), timed by "
        f"{link.timing}"
    )


def measure_host_link(
    backend: Backend,
    settings: CeilingSettings,
    run_id: str,
    tables: dict[str, list[dict]],
    progress: Progress,
    planned_s: float,
) -> None:
    """Measure every host-link case of `backend` (none without a host link, or with
    ceilings.host_link_buffer null) into `tables`: conditions, samples, ceiling_sweep and
    ceilings rows. `planned_s`: the planned seconds of one case (progress)."""
    if not backend.has_host_link or settings.host_link_buffer_bytes is None:
        return
    progress.add([planned_s] * (len(PLAN) + 1))  # the buffers, then each case
    progress.start("host link: pinned and pageable buffers, each copy checked", planned_s)
    wait_until_idle()
    loads = backend.host_link_loads(settings.host_link_buffer_bytes)
    rule = window_rule(settings)
    rows, how, flags = [], {}, {}
    for link in loads:
        case, config_id = link.case, link.case.config_id
        progress.start(f"host link {case.kernel}", planned_s)
        timed = backend if link.timer is None else _TimedWith(backend, link.timer)
        before = conditions_row(backend, run_id, "before", config_id)
        with backend.sampling_conditions(config_id) as during, backend.nvtx_range(config_id):
            windows = time_workload(timed, link.load, settings.window_s, rule, settings.disturbance)
        readings = [before, *during_rows(run_id, during)]
        readings.append(conditions_row(backend, run_id, "after", config_id))
        tables["conditions"].extend(readings)
        tables["samples"].extend(windows.sample_rows(run_id, config_id))
        verdict = add_gpu_processes(windows.verdict, readings)
        rows.append(
            {
                "run_id": run_id,
                "config_id": config_id,
                "kernel": case.kernel,
                "working_set_bytes": link.load.amount_per_unit,
                "threads": link.load.threads,
                "value": windows.median_rate(),
                "unit": "B/s",
                "reps": windows.units,
                "n_windows": len(windows.rates()),
                "window_s": settings.window_s,
                "iqr_ratio": windows.iqr_ratio(),
                "level": HOST_LEVEL if case.sets_ceiling else None,
                **windows.stop.columns(),
                **verdict.columns(),
            }
        )
        how[case.kernel] = _method(case, link, settings, rule.describe())
        flags[config_id] = clock_flags(readings, settings.max_clock_change)
        note = " (disturbed)" if verdict.disturbed else ""
        progress.update(f"{rows[-1]['value'] / 1e9:.2f} GB/s{note}")
    tables["ceiling_sweep"].extend(rows)
    tables["ceilings"].extend(ceiling_rows(rows, run_id, how, flags))
