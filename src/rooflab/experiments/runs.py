"""The `runs` row every measuring job writes: what ran, where, with which code and settings."""

from __future__ import annotations

import json
from datetime import datetime

from rooflab.backends.base import Backend
from rooflab.conditions.disturbance import DisturbanceSettings, QuietCheck, wait_for_quiet
from rooflab.records import SCHEMA_VERSION, git_state, stable_hash, utc_now


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


def close_run(
    backend: Backend,
    tables: dict,
    *,
    run_id: str,
    kind: str,
    name: str,
    started_at,
    settings: dict,
    quiet: QuietCheck | None = None,
) -> dict:
    """A measuring run's last rows: the conditions after it, and its `runs` row; `tables`."""
    tables["conditions"].append(conditions_row(backend, run_id, "after"))
    tables["runs"] = [
        run_row(
            backend,
            run_id=run_id,
            kind=kind,
            sweep=name,
            started_at=started_at,
            ended_at=utc_now(),
            settings=settings,
            quiet=quiet,
        )
    ]
    return tables


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
