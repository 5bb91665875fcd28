"""An import run: a profile another tool recorded (rooflab.imports) kept as a run of kind
`import`, with its provenance (imported_profiles) and its operators (imported_operators). Nothing
is measured: the run records where it was read (this machine, the profile's backend) and with
which code, so the roofline step places the operators on that machine's latest ceilings."""

from __future__ import annotations

import json

from rooflab.backends.base import Backend
from rooflab.experiments.runs import run_row
from rooflab.imports import Profile
from rooflab.records import TABLES, new_run_id, utc_now

# imported_operators' columns kept as JSON text
_AS_JSON = ("input_dims", "counted")


def import_tables(profile: Profile, name: str, backend: Backend) -> dict[str, list[dict]]:
    """The tables of one import run of `profile`, named `name` (the runs row's `sweep`)."""
    now = utc_now()
    run_id = new_run_id(now)
    provenance = {
        "name": name,
        "file": profile.path.name,
        "sha256": profile.sha256,
        "tool": profile.tool,
        "tool_version": profile.tool_version,
        "device": profile.device,
        "recorded_at": profile.recorded_at,
    }
    settings = {key: provenance[key] for key in ("tool", "file", "sha256")}
    run = run_row(
        backend, run_id=run_id, kind="import", sweep=name, started_at=now, ended_at=now,
        settings=settings,
    )  # fmt: skip
    columns = [c for c in TABLES["imported_operators"].names if c != "run_id"]
    operators = [
        {"run_id": run_id} | {c: _stored(c, operator.get(c)) for c in columns}
        for operator in profile.operators
    ]
    return {
        "runs": [run],
        "imported_profiles": [
            {"run_id": run_id, **provenance}
            | {
                "settings": json.dumps(profile.settings, sort_keys=True),
                "notes": json.dumps(profile.notes),
                "operators": len(operators),
            }
        ],
        "imported_operators": operators,
    }


def _stored(column: str, value):
    return json.dumps(value) if column in _AS_JSON and value is not None else value
