"""What the report reads from the store: per machine and backend (a scope), each part of the page
from its named view (rooflab.store.views, documented there and in docs/store.md), through
store.read_view. No SQL here: `rooflab query "SELECT * FROM <view>"` gives a chart's rows."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rooflab.report.names import name_part
from rooflab.store import read_view
from rooflab.store.views import view_query

if TYPE_CHECKING:
    import pandas as pd

# The newest first within a configuration: the report's order of GEMM points.
_POINT_ORDER = ("sweep", "dtype", "layout", "n", "k", "m", "cache_state")


def scopes(connection) -> list[dict]:
    """One scope per machine and backend in the store: machine_id, backend, host, device_name,
    the newest ceilings run and its machine description. Machines with ceilings come first,
    newest ceilings run first; then the rest, newest run first."""
    rows = read_view(connection, "report_scopes", order_by=("position",))
    scopes = [
        {key: (None if _missing(value) else value) for key, value in row.items()}
        for row in rows.to_dict("records")
    ]
    if len(scopes) > 1:
        # host, backend and the machine id's first 8 characters; the whole id where two
        # machines share those
        short = [_machine_name(scope, 8) for scope in scopes]
        for scope in scopes:
            whole = short.count(_machine_name(scope, 8)) > 1
            scope["prefix"] = name_part(_machine_name(scope, None if whole else 8)) + "__"
    return scopes


def _machine_name(scope, id_chars: int | None) -> str:
    return f"{scope['host']}_{scope['backend']}_{str(scope['machine_id'])[:id_chars]}"


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _of(scope) -> dict:
    return {"machine_id": scope["machine_id"], "backend": scope["backend"]}


def view_sql(view: str, scope, /, **equal) -> str:
    """The query for a view's rows of one machine and backend (and `equal` columns), for the
    page to show where it leaves rows out."""
    return view_query(view, **_of(scope), **equal)


def _scoped(connection, view: str, scope, order_by: tuple[str, ...] = ()) -> pd.DataFrame:
    """The view's rows of one machine and backend, without the columns that only select or
    order them (the charts carry the data they draw, nothing more)."""
    rows = read_view(connection, view, order_by=order_by, **_of(scope))
    return rows.drop(columns=["machine_id", "backend", "position"], errors="ignore")


def ceilings(connection, scope) -> pd.DataFrame:
    """Latest ceilings of the machine: the best kernel per bandwidth level, every compute path;
    with the spread of the windows behind each value and, for the FMA paths, of their rounds."""
    rows = _scoped(connection, "ceiling_summary", scope)
    return rows.sort_values(["kind", "value"], ascending=[True, False], ignore_index=True)


def points(connection, scope) -> pd.DataFrame:
    return _scoped(connection, "latest_model_points", scope, _POINT_ORDER)


def failed(connection, scope) -> pd.DataFrame:
    return _scoped(connection, "failed_checks", scope, ("config_id", "metric"))


def unplaced_points(connection, scope) -> pd.DataFrame:
    """The newest timings of the machine that got no Roofline point, with the reason and why."""
    return _scoped(
        connection, "latest_unplaced_points", scope, ("sweep", "config_id", "cache_state")
    )


def furthest_from_roof(connection, scope) -> pd.DataFrame:
    """The machine's diagnosed points, furthest from their roofs first (view diagnoses)."""
    return _scoped(connection, "diagnoses", scope, ("efficiency", "key", "cache_state", "level"))


def counter_points(connection, scope) -> pd.DataFrame:
    order = ("sweep", "dtype", "n", "k", "m", "cache_state", "level")
    return _scoped(connection, "latest_counted_points", scope, order)


def counters_state(connection, scope) -> pd.DataFrame:
    order = ("what", "sweep", "status", "reason")
    return _scoped(connection, "counters_state", scope, order)


def ceiling_sweep(connection, run_id: str) -> pd.DataFrame:
    """A ceilings run's bandwidth per kernel and working set (GB/s), with its plateau level."""
    order = ("kernel", "working_set_bytes")
    rows = read_view(connection, "ceiling_sweep_points", order_by=order, run_id=run_id)
    return rows.drop(columns=["run_id"])


def bandwidth_plateaus(connection, run_id: str) -> pd.DataFrame:
    """The working-set range (lo, hi, and mid between them) each bandwidth ceiling of a ceilings
    run was taken over."""
    rows = read_view(connection, "bandwidth_plateaus", order_by=("lo",), run_id=run_id)
    return rows.drop(columns=["run_id"])


def sample_quantiles(connection, scope) -> pd.DataFrame:
    """The quantiles of each newest point's samples, with its verdict (steady, noisy, disturbed)."""
    return _scoped(connection, "sample_quantiles", scope, ("position",))


def conditions(connection, scope) -> pd.DataFrame:
    return _scoped(connection, "condition_readings", scope, ("quantity", "t"))


def median_changes(connection, scope) -> pd.DataFrame:
    """Each configuration's median in its two newest runs: the change, the noise band and the
    verdict (slower, faster, within noise)."""
    return _scoped(connection, "median_changes", scope, ("label",))


def run_counts(connection, scope, shown: list[str]) -> pd.Series:
    """The machine's runs: how many, of what, when, the newest backend note; and of the `shown`
    runs, those taken on a busy machine and the newest one's warning."""
    import pandas as pd

    runs = read_view(connection, "run_summary", order_by=("started_at", "run_id"), **_of(scope))
    newest = runs.iloc[-1] if len(runs) else None
    busy = runs[runs.busy_warning.notna() & runs.run_id.isin(shown)]
    return pd.Series(
        {
            "runs": len(runs),
            "gemm_runs": int((runs.kind == "gemm").sum()),
            "first": runs.started_at.min() if len(runs) else None,
            "last": runs.started_at.max() if len(runs) else None,
            "backend_note": newest.backend_note if newest is not None else None,
            "busy_runs": len(busy),
            "busy_run": busy.run_id.iloc[-1] if len(busy) else None,
            "busy_warning": busy.busy_warning.iloc[-1] if len(busy) else None,
        }
    )


def datasheet_roofs(connection, scope) -> pd.DataFrame:
    """The datasheet figures of the machine's device preset, if one matches (kind, name, value
    in FLOP/s or B/s, preset, device, source)."""
    return _scoped(connection, "latest_datasheet_roofs", scope, ("kind", "name"))


def cache_capacities(connection, scope) -> pd.DataFrame:
    """The data-cache bytes per level of the machine (its newest ceilings run)."""
    return _scoped(connection, "latest_cache_capacities", scope, ("bytes",))


def stage_bounds(connection, scope) -> pd.DataFrame:
    """The config's stage scenarios on the machine's measured ceilings, one row per stage."""
    return _scoped(connection, "latest_stage_bounds", scope, ("scenario", "position"))


def model_vs_counted(connection, scope) -> pd.DataFrame:
    """Per configuration and cache state: model bytes vs the counted memory-level bytes."""
    order = ("config_id", "cache_state")
    return _scoped(connection, "model_vs_counted_bytes", scope, order)


def implementation_comparisons(connection, scope) -> pd.DataFrame:
    """Two implementations of the same work (a workload's same_work_as): per case and cache
    state, the times, useful and executed FLOP/s and bytes of both, and what it says."""
    order = ("workload", "baseline", "dtype", "params", "cache_state")
    return _scoped(connection, "implementation_comparisons", scope, order)


def workload_param_points(connection, scope) -> pd.DataFrame:
    """Per workload, case and cache state, each param that varies across its cases: its value,
    the case's other params (series), the median time and the Roofline bound."""
    order = ("workload", "param", "series", "value", "value_text", "cache_state")
    return _scoped(connection, "workload_param_points", scope, order)


def stage_overlap(connection, scope) -> pd.DataFrame:
    """Measured stage scenarios: serial and overlapped times beside both bounds, and `says`."""
    return _scoped(connection, "stage_overlap", scope, ("scenario",))


def stage_timings(connection, scope) -> pd.DataFrame:
    """Each measured scenario's stages timed alone on their lanes, with their bounds."""
    return _scoped(connection, "latest_stage_timings", scope, ("scenario", "position"))


def timeline_modes(connection, scope) -> pd.DataFrame:
    """Per timeline scenario and mode: step, busy and gap times, kernels, the Roofline bound."""
    return _scoped(connection, "timeline_modes", scope, ("scenario", "mode"))


def timeline_kernels(connection, scope) -> pd.DataFrame:
    """The per-kernel timeline of one step per scenario and mode (`position`: launch order)."""
    order = ("scenario", "mode", "position")
    rows = read_view(connection, "latest_timeline_kernels", order_by=order, **_of(scope))
    return rows.drop(columns=["machine_id", "backend"])


def history(connection, scope) -> pd.DataFrame:
    """Every run of each point and ceiling of the machine (its value, noise band, commit and
    date), in run order per key (`position` 1: the key's oldest run)."""
    order = ("kind", "key", "position")
    rows = read_view(connection, "history", order_by=order, **_of(scope))
    return rows.drop(columns=["machine_id", "backend"])  # position is the run order: kept


def comparisons(connection, scope) -> pd.DataFrame:
    """Each key's newest run against the one before it: ratio, interval, verdict (slower, faster,
    same, incomparable), what changed, and what it says."""
    return _scoped(connection, "comparisons", scope, ("kind", "key"))


def imported_timeline(connection, scope) -> pd.DataFrame:
    """Per import (its newest run) and lane: busy time, gaps, the critical path, and `says`."""
    return _scoped(connection, "imported_timeline", scope, ("name", "lane"))


def imported_operators(connection, scope) -> pd.DataFrame:
    """Each import's events on a lane (top-level operators, GPU events): the Gantt chart's bars."""
    return _scoped(connection, "latest_imported_operators", scope, ("name", "start_s", "index"))


def imported_top_operators(connection, scope) -> pd.DataFrame:
    """Each import's top-level operators by name, ranked by their share of the end-to-end time."""
    return _scoped(connection, "imported_top_operators", scope, ("name", "rank"))


def imported_points(connection, scope) -> pd.DataFrame:
    """Each import's operators on the machine's roofs (unplaced ones with why), in trace order."""
    return _scoped(connection, "latest_imported_points", scope, ("name", "index"))
