"""The skeleton every measuring run shares (the machine held, its progress, the quiet check, its
id, tables and conditions, and its closing `runs` row: what ran, where, with which code and
settings)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from rooflab.backends.base import Backend
from rooflab.conditions.disturbance import DisturbanceSettings, QuietCheck, wait_for_quiet
from rooflab.experiments.machine_lock import measuring_job
from rooflab.progress import Progress
from rooflab.records import SCHEMA_VERSION, git_state, new_run_id, stable_hash, utc_now


def run_row(
    backend: Backend,
    *,
    run_id: str,
    kind: str,
    sweep: str | None,
    started_at: datetime,
    ended_at: datetime,
    settings: dict,
    quiet: QuietCheck | None = None,
) -> dict:
    metadata = backend.run_metadata()
    commit, dirty = git_state()
    as_json = {
        key: json.dumps(metadata.pop(key), sort_keys=True, default=str)
        for key in ("library_versions", "machine", "blas")
    }
    return {
        "run_id": run_id,
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "sweep": sweep,
        "started_at": started_at,
        "ended_at": ended_at,
        **metadata,
        **as_json,
        "backend_requested": backend.backend_requested,
        "backend_note": backend.backend_note,
        "git_commit": commit,
        "git_dirty": dirty,
        "config_hash": stable_hash(settings),
        "settings": json.dumps(settings, sort_keys=True, default=str),
        **(quiet.columns() if quiet else {}),
    }


@dataclass
class MeasuringRun:
    """One measuring run as every experiment records it: its id, its Progress, the rows of its
    tables (`conditions` among them), when it started and the quiet check before it; `close`
    adds the conditions after it and its `runs` row."""

    backend: Backend
    kind: str
    name: str | None  # the runs row's `sweep`: the sweep, workload or scenario measured
    progress: Progress
    run_id: str
    tables: dict[str, list[dict]]
    started_at: datetime
    quiet: QuietCheck | None
    around: bool  # the conditions read before and after the whole run (else per measurement)

    def close(self, settings: dict) -> dict[str, list[dict]]:
        """The run's last rows (the conditions after it, its `runs` row); its tables."""
        if self.around:
            self.tables["conditions"].append(conditions_row(self.backend, self.run_id, "after"))
        self.tables["runs"] = [
            run_row(
                self.backend,
                run_id=self.run_id,
                kind=self.kind,
                sweep=self.name,
                started_at=self.started_at,
                ended_at=utc_now(),
                settings=settings,
                quiet=self.quiet,
            )
        ]
        return self.tables


@contextlib.contextmanager
def measuring_run(
    backend: Backend,
    kind: str,
    name: str | None,
    *,
    tables: tuple[str, ...],
    disturbance: DisturbanceSettings | None,
    run_id: str | None = None,
    around: bool = True,
    what: str | None = None,
) -> Iterator[MeasuringRun]:
    """A measuring run of `kind`: the machine held throughout (machine_lock; `what` holds it,
    by default its label "<kind> <name>"), its Progress, a wait for quiet where `disturbance`
    is given, a run id, empty `tables` beside `conditions` (with a reading before the run where
    `around`); close it for its rows."""
    label = f"{kind} {name}" if name else kind
    with measuring_job(what or label, label) as progress:
        quiet = None
        if disturbance is not None:
            progress.update("checking that the machine is quiet")
            quiet = quiet_check(backend, disturbance, label)
        run_id = run_id or new_run_id()
        rows: dict[str, list[dict]] = {"conditions": [], **{table: [] for table in tables}}
        if around:
            rows["conditions"].append(conditions_row(backend, run_id, "before"))
        yield MeasuringRun(backend, kind, name, progress, run_id, rows, utc_now(), quiet, around)


def quiet_check(backend: Backend, settings: DisturbanceSettings, label: str) -> QuietCheck:
    """Before measuring: wait (bounded) for other processes to leave the CPUs this backend's
    measurement needs (all its threads on a CPU, one to drive a GPU) and the GPU."""
    cpus = backend.default_threads() if backend.host_contention_matters else 1
    return wait_for_quiet(
        settings,
        cpus_needed=cpus,
        label=label,
        gpu_other_processes=backend.gpu_other_processes,
    )


def conditions_row(backend: Backend, run_id: str, phase: str, config_id: str | None = None) -> dict:
    return _as_row(run_id, backend.read_conditions(phase, config_id))


def during_rows(run_id: str, readings: list[dict]) -> list[dict]:
    """Rows of the readings a backend sampled in the background during a measurement."""
    return [_as_row(run_id, reading) for reading in readings]


def _as_row(run_id: str, reading: dict) -> dict:
    reading = dict(reading)
    reading["unavailable"] = json.dumps(reading.get("unavailable") or {}, sort_keys=True)
    return {"run_id": run_id, **reading}
