"""The counters step of one sweep or workload (issue 7, issue 28; docs/counters.md): hardware
counters for a bounded list of its timed configurations (`experiments.counter_targets`: a
sweep's GEMMs, a workload's cases), calibrated and paired, or `unavailable` with the reason.

- CUDA backend: each selected configuration runs once inside its NVTX range in a child process
  (`python -m rooflab.experiments.profiled`, for a GEMM configuration or a workload's case)
  under `ncu`, once per cache control (`all`: caches flushed before each replay pass, pairs with
  the `cold` timing; `none`: pairs with `warm`). The metric list is queried for the machine's
  chip first (what it lacks is recorded as missing). Counters are summed over every kernel in
  the range, per-kernel rows kept. The counted FLOPs of the configuration's compute path are
  calibrated against what it executes (a GEMM's 2MNK on `vocabulary.COMPUTE_PATH`; a workload
  case's executed FLOPs, else its useful ones, on its dtype's FMA path), and the replay is
  paired with the timing of the matching cache state in the timing run the step was given.
- CPU backend: `perf stat` around the same child, its events enabled only around the measured
  call (`--control`); counted events with what follows from them (IPC, an LLC-miss byte
  *estimate*), the others unavailable with perf's words (where none counts even around `true`,
  no child runs). No FLOP count is derived on a CPU, so no CPU counts reach a Roofline point.

A tool that is missing, not permitted, or failing gives an `unavailable` status row with the
tool's own words and stops the step (the next profile would fail the same way); the job still
succeeds and the Roofline keeps its model bytes (`q_source = model`). Nothing is invented: a
value that was not counted is null with its status. Roofline points from the counts are made by
`rooflab.roofline.counter_points`, from trusted calibrations only.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rooflab.backends.base import Backend
from rooflab.config import defaults
from rooflab.counters.ncu import (
    CACHE_CONTROLS,
    REPLAY_MODES,
    NcuResult,
    counter_rows,
    counters_range,
    flops_from_counters,
    ncu_command,
    ncu_version,
    plan_collection,
    query_available_metrics,
    run_ncu,
)
from rooflab.counters.perf import (
    PerfStat,
    derive_cpu,
    llc_line_bytes,
    perf_stat_command,
    pmu_note,
    run_perf_stat,
)
from rooflab.counters.points import PAIRINGS, PairingError, calibrate_ledger, pair
from rooflab.counters.tool import Unavailable, run_tool
from rooflab.experiments.counter_targets import (
    CountTarget,
    count_target,
    select_cases,
)
from rooflab.experiments.runs import measuring_run
from rooflab.progress import Progress
from rooflab.records import read_run, timed_rows

log = logging.getLogger("rooflab")

CALIBRATION_TOLERANCE = 0.01  # counted FLOPs within 1% of 2MNK (issue 7)
TOOLS = ("ncu", "perf")


_DEFAULT = defaults("counters")  # config/schema.yaml: each setting's meaning and default


@dataclass(frozen=True)
class CounterSettings:
    """The config's `counters` section."""

    enabled: bool = _DEFAULT["enabled"]
    max_configs: int = _DEFAULT["max_configs"]
    configs: tuple[str, ...] = tuple(_DEFAULT["configs"])
    cache_controls: tuple[str, ...] = tuple(_DEFAULT["cache_controls"])
    replay_mode: str = _DEFAULT["replay_mode"]
    ncu: str = _DEFAULT["ncu"]
    perf: str = _DEFAULT["perf"]
    perf_events: tuple[str, ...] = tuple(_DEFAULT["perf_events"])
    timeout_s: float = _DEFAULT["timeout_s"]
    warmup_calls: int = _DEFAULT["warmup_calls"]

    def __post_init__(self) -> None:
        if self.max_configs < 1:
            raise ValueError(f"counters.max_configs must be >= 1, got {self.max_configs}")
        bad = [c for c in self.cache_controls if c not in CACHE_CONTROLS]
        if bad or not self.cache_controls:
            raise ValueError(f"counters.cache_controls must be some of {CACHE_CONTROLS}: {bad}")
        if self.replay_mode not in REPLAY_MODES:
            raise ValueError(f"counters.replay_mode must be one of {REPLAY_MODES}")

    @classmethod
    def from_config(cls, section: Mapping) -> CounterSettings:
        tuples = ("configs", "cache_controls", "perf_events")
        return cls(**{k: tuple(v) if k in tuples else v for k, v in section.items()})


def status_row(run_id: str, config_id: str | None, status: str, reason: str | None, **extra):
    """A row of `counters` with no metric: how one profile (or the whole step) went."""
    scope = "range" if config_id else "run"
    return {"run_id": run_id, "config_id": config_id, "scope": scope, "metric": None} | {
        "status": status,
        "reason": reason,
        **extra,
    }


def counters_status(rows: Sequence[Mapping]) -> tuple[str, str | None]:
    """The step's status from its status rows: "ok", "partial" (some profiles unavailable),
    "unavailable" (none usable; the reasons, each once) or "none" (nothing was profiled)."""
    profiles = [r for r in rows if r["metric"] is None and r["status"] in ("ok", "partial")]
    missing = [r for r in rows if r["metric"] is None and r["status"] == "unavailable"]
    reasons = list(dict.fromkeys(r["reason"] for r in missing if r["reason"]))
    reason = " | ".join(reasons) or None
    if missing and not profiles:
        return "unavailable", reason
    if missing or any(r["status"] == "partial" for r in profiles):
        partial = reason or next(r["reason"] for r in profiles if r["status"] == "partial")
        return "partial", partial
    return ("ok", None) if profiles else ("none", None)


def run_counters(
    backend: Backend,
    sweep_name: str,
    sweep: Mapping,
    settings: CounterSettings,
    timing_run_dir: str | Path,
    *,
    tool: str | None = None,
    run_id: str | None = None,
) -> dict[str, list[dict]]:
    """Count the selected configurations of one sweep; the rows of each table (nothing written).

    `timing_run_dir`: the sweep's timing run (the configurations it timed are the candidates, its
    points are what replays pair with). `tool`: "ncu" or "perf"; by default ncu on the CUDA
    backend and perf on the CPU.

    Holds the machine lock (experiments.machine_lock) throughout: one measurement at a time."""

    return _count(backend, sweep_name, "sweep", sweep, settings, timing_run_dir, tool, run_id)


def run_workload_counters(
    backend: Backend,
    name: str,
    spec: Mapping,
    settings: CounterSettings,
    timing_run_dir: str | Path,
    *,
    tool: str | None = None,
    run_id: str | None = None,
) -> dict[str, list[dict]]:
    """Count the selected cases of one workload (`spec`: its config section) as `run_counters`
    counts a sweep's GEMMs: each case's run() once in its NVTX range, in a child that builds
    the case as the timing run did; ncu's FLOPs calibrated against the FLOPs its ledger says
    it executes."""

    return _count(backend, name, "workload", spec, settings, timing_run_dir, tool, run_id)


def _targets(backend, name, kind, spec, settings, timings) -> tuple[list[CountTarget], list]:
    """The cases to count (counter_targets) with their children, and those skipped, with why."""
    row = {t["config_id"]: t for t in timings}
    selection = select_cases(kind, name, spec, set(row), settings)
    chosen = [
        count_target(case, row[case.config_id], backend.name, settings.warmup_calls)
        for case in selection.configs
    ]
    return chosen, selection.skipped


def _count(backend, name, kind, spec, settings, timing_run_dir, tool, run_id) -> dict:
    """The step for a sweep or a workload (`kind`)."""
    tool = tool or ("ncu" if backend.name == "cuda" else "perf")
    if tool not in TOOLS:
        raise ValueError(f"tool must be one of {TOOLS}, got {tool!r}")
    with measuring_run(
        backend, "counters", name, what=f"counters of {kind} {name}",
        tables=("counters", "counter_calibration"), disturbance=None, run_id=run_id,
    ) as run:  # fmt: skip
        progress, run_id, tables = run.progress, run.run_id, run.tables
        timing = read_run(timing_run_dir)
        (timing_run,) = timing["runs"].to_pylist()
        timings = [{**p, "machine_id": timing_run["machine_id"]} for p in timed_rows(timing)]
        chosen, skipped = _targets(backend, name, kind, spec, settings, timings)
        common = {"tool": tool}
        for config_id, why in skipped:
            tables["counters"].append(status_row(run_id, config_id, "skipped", why, **common))
        step = _NcuStep if tool == "ncu" else _PerfStep
        context = _Context(backend, settings, timings, run_id, tables, progress)
        runs = len(settings.cache_controls) if tool == "ncu" else 1  # tool runs per configuration
        progress.plan([1.0] * runs * len(chosen), seconds_per_unit=None)
        if chosen:
            step(context).run(chosen)
        status, reason = counters_status(tables["counters"])
        log.info("counters of %s with %s: %s (%s)", name, tool, status, reason or "")
        run_settings = {  # what was asked for and of which timing run (the outcome is in the rows)
            "counters": asdict(settings),
            "tool": tool,
            "timing_run_id": timing_run["run_id"],
            "selected": [t.config_id for t in chosen],
            kind: dict(spec),
        }
        return run.close(run_settings)


@dataclass
class _Context:
    backend: Backend
    settings: CounterSettings
    timings: list[dict]
    run_id: str
    tables: dict[str, list[dict]]
    progress: Progress


class _NcuStep:
    """ncu per configuration and cache control; stops at the first profile that gives nothing."""

    def __init__(self, context: _Context):
        self.c = context
        self.version: str | None = None
        self.chip: str | None = None

    def add(self, rows: list[dict]) -> None:
        self.c.tables["counters"].extend(rows)

    def unavailable(self, config_id: str | None, reason: str, **extra) -> None:
        row = status_row(self.c.run_id, config_id, "unavailable", reason, tool="ncu", **extra)
        self.add([{**row, "tool_version": self.version, "chip": self.chip}])

    def run(self, configs: list[CountTarget]) -> None:
        settings = self.c.settings
        version = ncu_version(settings.ncu, timeout_s=min(settings.timeout_s, 120))
        if isinstance(version, Unavailable):
            self.unavailable(None, version.reason)
            return
        self.version = version.version
        available = query_available_metrics(ncu=settings.ncu, timeout_s=settings.timeout_s)
        if isinstance(available, Unavailable):
            plan = plan_collection(None)
            why = (
                f"metric list not queried ({available.reason}); collecting the first alternative "
                "of every tensor path unchecked (ncu refuses names it does not know)"
            )
            row = status_row(self.c.run_id, None, "unchecked", why, tool="ncu")
            self.add([{**row, "tool_version": self.version}])
        else:
            plan = plan_collection(available)
            self.chip = available.chip
        machine_id = self.c.backend.run_metadata()["machine_id"]
        with tempfile.TemporaryDirectory(prefix="rooflab-ncu-") as folder:
            for index, config in enumerate(configs):
                for cache_control in settings.cache_controls:
                    self.c.progress.start(f"{config.short_id} ncu --cache-control {cache_control}")
                    if not self.profile(config, cache_control, plan, machine_id, folder, index):
                        return

    def profile(self, config, cache_control, plan, machine_id, folder, index) -> bool:
        """One ncu run; False when the tool failed (the step stops)."""
        c, settings = self.c, self.c.settings
        state = PAIRINGS[cache_control][0]
        if not any(
            t["config_id"] == config.config_id and t["cache_state"] == state for t in c.timings
        ):
            why = (
                f"no {state} timing of this configuration to pair with: a replay with "
                f"--cache-control {cache_control} pairs only with a {state} timing; not profiled"
            )
            row = status_row(c.run_id, config.config_id, "skipped", why, tool="ncu")
            self.add([{**row, "cache_control": cache_control}])
            return True
        command = ncu_command(
            list(config.child),
            nvtx_range=counters_range(config.config_id),
            metrics=plan.metrics,
            cache_control=cache_control,
            replay_mode=settings.replay_mode,
            ncu=settings.ncu,
            log_file=Path(folder) / f"{index}-{cache_control}.csv",
        )
        log.info("ncu %s --cache-control %s", config.config_id, cache_control)
        result = run_ncu(command, settings.timeout_s)
        rows = counter_rows(
            result,
            run_id=c.run_id,
            config_id=config.config_id,
            settings=command.settings,
            tool_version=self.version,
            chip=self.chip,
            missing=plan.missing,
        )
        requested = ",".join(command.settings["metrics"])
        self.add([{**row, "metrics_requested": requested} for row in rows])
        if isinstance(result, Unavailable):
            # Every failure stops the step, "no kernel profiled" too: the child ran its range
            # (it exited cleanly), so the NVTX filter, the same for every configuration, matched
            # nothing, and the next profiles would spend their time to the same end.
            return False
        self.add_ok(config, cache_control, result, command.settings, requested)
        self.calibrate(config, cache_control, result, plan, machine_id)
        return True

    def add_ok(self, config, cache_control, result: NcuResult, settings, requested) -> None:
        kernels = len({r.kernel_id for r in result.rows})
        passes = ", ".join(map(str, result.passes)) or "not printed"
        row = status_row(
            self.c.run_id,
            config.config_id,
            "ok",
            f"{kernels} kernel(s) profiled in the range; replay passes per kernel: {passes}",
            tool="ncu",
            tool_version=self.version,
            chip=self.chip,
            cache_control=cache_control,
            clock_control=settings["clock_control"],
            replay_mode=settings["replay_mode"],
            nvtx_include=settings["nvtx_include"],
            metrics_requested=requested,
        )
        self.add([row])

    def calibrate(self, config, cache_control, result: NcuResult, plan, machine_id) -> None:
        path = config.compute_path
        counted = flops_from_counters(result.totals, tensor_metrics=plan.tensor_metrics)
        seen = calibrate_ledger(
            counted.flops(path) if path else None,
            config.expected_flops,
            CALIBRATION_TOLERANCE,
            path=path,
            ledger=config.ledger,
            shape=config.shape,
        )
        row = {
            "run_id": self.c.run_id,
            "config_id": config.config_id,
            "cache_control": cache_control,
            "compute_path": path,
            # the shape, the counted and expected FLOPs, their ratio and the verdict
            **{name: value for name, value in asdict(seen).items() if name != "path"},
            "formula": counted.paths[path].formula if path in counted.paths else None,
            "hfma_flop_per_inst": counted.hfma_flop_per_inst,
            "tensor_flop_per_op": counted.tensor_flop_per_op,
            "pairing": None,
            "timing_run_id": None,
            "timing_cache_state": None,
            "timing_median_s": None,
            "pairing_error": None,
        }
        record = {"config_id": config.config_id, "cache_control": cache_control}
        try:
            paired = pair({**record, "machine_id": machine_id}, self.c.timings)
        except PairingError as error:
            row["pairing_error"] = str(error)
        else:
            row.update(
                pairing=paired.label,
                timing_run_id=paired.timing["run_id"],
                timing_cache_state=paired.cache_state,
                timing_median_s=paired.timing["median_s"],
            )
        log.info("%s %s: %s", config.config_id, cache_control, seen.reason)
        self.c.tables["counter_calibration"].append(row)


class _PerfStep:
    """perf stat per configuration, events enabled around the measured call only."""

    def __init__(self, context: _Context):
        self.c = context

    def run(self, configs: list[CountTarget]) -> None:
        c, settings = self.c, self.c.settings
        version = run_tool("perf", [settings.perf, "--version"], min(settings.timeout_s, 60))
        if isinstance(version, Unavailable):
            c.tables["counters"].append(
                status_row(c.run_id, None, "unavailable", version.reason, tool="perf")
            )
            return
        tool_version = version.stdout.strip().removeprefix("perf version ") or None
        line, note = llc_line_bytes(), pmu_note()
        common = {"tool": "perf", "tool_version": tool_version}
        common["metrics_requested"] = ",".join(settings.perf_events)
        if configs and (probe := self.nothing_counts()) is not None:
            # Nothing counts even around `true` (a VM without a PMU): perf's answer is recorded
            # for the first configuration, and no child is started (a second each).
            c.progress.start(f"{configs[0].short_id} perf stat")
            c.tables["counters"].extend(self.rows(configs[0], probe, line, note, common))
            return
        for config in configs:
            c.progress.start(f"{config.short_id} perf stat")
            stat = self.measure(config)
            if isinstance(stat, Unavailable):
                row = status_row(c.run_id, config.config_id, "unavailable", stat.reason, **common)
                c.tables["counters"].append(row)
                return
            rows = self.rows(config, stat, line, note, common)
            c.tables["counters"].extend(rows)
            if rows[-1]["status"] == "unavailable":
                return  # nothing counted: the next configuration meets the same PMU and perf

    def nothing_counts(self) -> PerfStat | None:
        """What perf said of `true` where none of the events counts (or perf fails); None where
        one counts, or perf cannot run at all (measure says why)."""
        settings = self.c.settings
        command = perf_stat_command(settings.perf_events, ["true"], perf=settings.perf)
        stat = run_perf_stat(command, min(settings.timeout_s, 60))
        if isinstance(stat, Unavailable):
            return None
        counted = any(count.status == "counted" for count in stat.counts.values())
        return None if counted and not stat.returncode else stat

    def measure(self, config: CountTarget) -> PerfStat | Unavailable:
        settings = self.c.settings
        with tempfile.TemporaryDirectory(prefix="rooflab-perf-") as folder:
            ctl, ack = Path(folder) / "ctl.fifo", Path(folder) / "ack.fifo"
            os.mkfifo(ctl)
            os.mkfifo(ack)
            command = perf_stat_command(
                settings.perf_events,
                [*config.child, "--perf-control", f"{ctl},{ack}"],
                perf=settings.perf,
                output_path=Path(folder) / "perf.txt",
                control=(ctl, ack),
            )
            log.info("perf stat %s", config.config_id)
            return run_perf_stat(command, settings.timeout_s)

    def rows(self, config, stat: PerfStat, line, note, common) -> list[dict]:
        c, events = self.c, self.c.settings.perf_events
        ids = {"run_id": c.run_id, "config_id": config.config_id, **common}
        rows = []
        for event in events:
            count = stat.counts.get(event)
            status = "ok" if count and count.status == "counted" else None
            reason = None
            if count is None:
                status = "not in perf's output"
            elif status is None:
                status = count.status
                reason = f"perf: <{count.status}>"
            elif count.percent_running is not None and count.percent_running < 100:
                reason = f"multiplexed: counted {count.percent_running:g}% of the time, scaled"
            value = count.value if count and status == "ok" else None
            unit = (count.unit or None) if count else None
            rows.append(
                {**ids, "scope": "range", "metric": event, "value": value, "unit": unit}
                | {"status": status, "reason": reason}
            )
        if stat.returncode:
            said = " | ".join(stat.other_lines[-6:]) or "no message"
            why = f"perf stat exit status {stat.returncode} (perf or the measured child): {said}"
            return [*rows, status_row(c.run_id, config.config_id, "unavailable", why, **common)]
        derived = derive_cpu(stat, events, line_bytes=line, note=note)
        for figure in derived.derived:
            rows.append(
                {**ids, "scope": "derived", "metric": figure["name"], "value": figure["value"]}
                | {"unit": figure["unit"], "status": figure["kind"], "reason": figure["basis"]}
            )
        rows.append(
            status_row(c.run_id, config.config_id, derived.status, derived.reason, **common)
        )
        return rows
