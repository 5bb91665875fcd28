"""The report's measured schedules (docs/timelines.md): per measurable stages scenario, the
stages alone and the serial and overlapped schedules, each beside the bound it cannot beat; per
timeline scenario, one step per mode as a Gantt chart (report.timeline_charts)."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import rooflab.report.queries as queries
from rooflab.report.axes import WIDTH
from rooflab.report.names import name_part
from rooflab.report.page import Chart, table_html
from rooflab.report.timeline_charts import HOW as TIMELINE_HOW
from rooflab.report.timeline_charts import timeline_chart
from rooflab.units import format_quantity

if TYPE_CHECKING:
    import pandas as pd

STAGE_OVERLAP_HOW = (
    "Each bar is a measured time (median; the thin line spans the middle half of the samples): "
    "every stage alone on its lane (a core of its own on a CPU, a stream of its own on a GPU), "
    "then the stages one after another (serial, as their dependencies say) and all at once "
    "(overlapped). The black tick on each bar is the bound it cannot beat on this machine's "
    "measured ceilings: a stage's max(F/C, Q/B), the serial schedule's critical path, and the "
    "aggregate max(ΣF/C, ΣQ/B) for the overlapped one. A bar shorter than its tick is drawn "
    "red: a ledger or a ceiling is wrong."
)


def stage_overlap_chart(schedules: pd.Series, stages: pd.DataFrame):
    """`schedules`: one stage_overlap row; `stages`: its scenario's latest_stage_timings rows."""
    import altair as alt
    import pandas as pd

    rows = [
        {
            "what": f"{s.stage} alone ({s.placement})",
            "measured_ms": s.median_s * 1e3,
            "p25_ms": s.p25_s * 1e3,
            "p75_ms": s.p75_s * 1e3,
            "bound_ms": s.bound_s * 1e3,
            "bound": f"max(F/C, Q/B), {s.limiter}-bound",
            "beats_bound": bool(s.beats_bound),
        }
        for s in stages.itertuples()
    ]
    for schedule, bound, kind in (
        ("serial", schedules.critical_path_bound_s, "critical path"),
        ("overlapped", schedules.aggregate_bound_s, "aggregate"),
    ):
        measured = schedules[f"{schedule}_s"]
        rows.append(
            {
                "what": schedule,
                "measured_ms": measured * 1e3,
                "p25_ms": None,
                "p75_ms": None,
                "bound_ms": bound * 1e3,
                "bound": kind,
                "beats_bound": measured < bound and bool(schedules.beats_bound),
            }
        )
    frame = pd.DataFrame(rows)
    order = list(frame.what)
    y = alt.Y("what:N", sort=order, title=None)
    tooltip = [
        alt.Tooltip("what:N"),
        alt.Tooltip("measured_ms:Q", format=".4g", title="measured (ms)"),
        alt.Tooltip("bound_ms:Q", format=".4g", title="bound (ms)"),
        alt.Tooltip("bound:N", title="bound"),
    ]
    base = alt.Chart(frame)
    bars = base.mark_bar(height=18).encode(
        x=alt.X("measured_ms:Q", title="time (ms)"),
        y=y,
        color=alt.condition(alt.datum.beats_bound, alt.value("#d62728"), alt.value("#4c78a8")),
        tooltip=tooltip,
    )
    spread = base.mark_rule(color="#222").encode(x=alt.X("p25_ms:Q"), x2=alt.X2("p75_ms:Q"), y=y)
    ticks = base.mark_tick(color="black", thickness=3, size=26).encode(
        x=alt.X("bound_ms:Q"), y=y, tooltip=tooltip
    )
    return (bars + spread + ticks).properties(width=WIDTH, height=30 * len(frame))


# Why a stage as run is not the scenario's size (docs/timelines.md), per kernel: what it is
# rounded to, and on which backend what its working set is
ROUNDED_TO = {
    "stream": "a stream stage makes whole passes (at least one) over its working set ({where})",
    "fma": "an fma stage runs whole iterations of its FMA chains",
}
WORKING_SET = {"cpu": "the cold flush's size, past every cache", "cuda": "4x the GPU's L2"}


def resized_note(
    stages: pd.DataFrame, scenario: str, backend: str, under_bounds: bool = False
) -> str:
    """Where a stage was measured at another size than its scenario's (view latest_stage_timings'
    `resized`, on `backend`): a sentence per such stage naming both sizes and why, and one saying
    that the stage-bounds chart draws the scenario's sizes (`under_bounds`: the note is under
    that chart, else under the measured one); empty where every stage ran its own size."""
    if "resized" not in stages:
        return ""
    said = []
    for stage in stages[stages.resized.fillna(False).astype(bool)].itertuples():
        memory = stage.kernel == "stream"
        kind, measured, nominal = (
            ("bytes", stage.bytes, stage.nominal_bytes)
            if memory
            else ("flop", stage.flops, stage.nominal_flops)
        )
        why = ROUNDED_TO.get(stage.kernel, "it runs whole passes or iterations").format(
            where=WORKING_SET.get(backend, "past every cache")
        )
        other_ceilings = (
            isinstance(stage.ceilings_run_id, str) and stage.ceilings_run_id != stage.bounds_run_id
        )
        said.append(
            f"Stage {stage.stage} {'moved' if memory else 'did'} "
            f"{format_quantity(measured, kind, 3)} as measured, {measured / nominal:.2g}x the "
            f"scenario's {format_quantity(nominal, kind, 3)}: {why}, so its size was rounded "
            f"{'up' if measured > nominal else 'down'} to them"
            + (
                f"; and it was sized on the ceilings of run {stage.ceilings_run_id}, the "
                f"stage-bounds chart on those of run {stage.bounds_run_id}"
                if other_ceilings
                else ""
            )
            + "."
        )
    if not said:
        return ""
    said.append(
        f"This chart draws the scenario's nominal sizes; “Stages measured: {scenario}” those as "
        "run, and its bounds are theirs."
        if under_bounds
        else f"“Stage bounds: {scenario}” draws the scenario's nominal sizes; the stages, "
        "bounds and schedules here are of the sizes as run."
    )
    return f"<p class='resized'>{html.escape(' '.join(said))}</p>"


def stage_overlap_table(row: pd.Series) -> str:
    import pandas as pd

    shown = {
        "serial (ms)": row.serial_s * 1e3,
        "critical-path bound (ms)": row.critical_path_bound_s * 1e3,
        "overlapped (ms)": row.overlapped_s * 1e3,
        "aggregate bound (ms)": row.aggregate_bound_s * 1e3,
        "serial / overlapped": row.overlap_speedup,
        "C": f"{row.compute_path} {row.peak_flops_per_s / 1e9:.4g} GFLOP/s",
        "B": f"{row.memory_level} {row.bandwidth_b_per_s / 1e9:.4g} GB/s",
    }
    table = table_html(pd.DataFrame([shown]), "stage-overlap", float_format=lambda v: f"{v:.4g}")
    return f"<p>{html.escape(row.says)}</p>" + table


def schedule_charts(connection, scope) -> list[Chart]:
    """The measured schedules' charts of one machine and backend (none where nothing was run)."""
    charts = []
    overlap, stages = (
        queries.stage_overlap(connection, scope),
        queries.stage_timings(connection, scope),
    )
    for row in overlap.itertuples(index=False):
        row = overlap.loc[overlap.scenario == row.scenario].iloc[0]
        charts.append(
            Chart(
                f"stage_overlap_{name_part(row.scenario)}",
                f"Stages measured: {row.scenario}",
                STAGE_OVERLAP_HOW,
                stage_overlap_chart(row, stages[stages.scenario == row.scenario]),
                resized_note(
                    stages[stages.scenario == row.scenario], str(row.scenario), scope["backend"]
                )
                + stage_overlap_table(row),
            )
        )
    modes = queries.timeline_modes(connection, scope)
    kernels = queries.timeline_kernels(connection, scope)
    for scenario, steps in modes.groupby("scenario", sort=True):
        charts.append(
            Chart(
                f"timeline_{name_part(scenario)}",
                f"Step timeline: {scenario}",
                TIMELINE_HOW,
                timeline_chart(kernels[kernels.scenario == scenario], steps, str(scenario)),
                timeline_notes(steps),
            )
        )
    return charts


def timeline_notes(steps: pd.DataFrame) -> str:
    """Each mode in a sentence (view timeline_modes' `says`: its step, busy time, gap share and
    how far the step is from its Roofline bound), and the bound's C and B."""
    items = "".join(f"<li>{html.escape(says)}</li>" for says in steps.says)
    first = steps.iloc[0]
    bound = ""
    if first.bound_s == first.bound_s:  # not NaN: the machine has the ceilings to bound it
        bound = (
            f"<p>The step's Roofline bound: {first.bound_s * 1e6:.4g} μs, its FLOPs on "
            f"{first.compute_path} ({first.peak_flops_per_s / 1e9:.4g} GFLOP/s) and its eager "
            f"bytes at {first.memory_level} ({first.bandwidth_b_per_s / 1e9:.4g} GB/s).</p>"
        )
    return f"<ul>{items}</ul>{bound}"
