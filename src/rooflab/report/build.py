"""`build_report`: which charts each machine in the store gets, from what the store holds, the
page around them and a PNG and an SVG per chart."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import rooflab.report.queries as queries
from rooflab.report.counter_charts import (
    hierarchical_roofline_chart,
    model_vs_counted_chart,
    model_vs_counted_table,
)
from rooflab.report.history_charts import history_charts
from rooflab.report.import_charts import import_charts
from rooflab.report.machine_charts import MachineRoofs, machines_chart
from rooflab.report.names import duplicates, name_part
from rooflab.report.page import (
    Chart,
    MachineSection,
    index_html,
    table_html,
    vl_version,
)
from rooflab.report.roofline_chart import compute_roofs_in, points_in, roofline_chart
from rooflab.report.roofline_points import roofline_title
from rooflab.report.run_charts import (
    CONDITION_QUANTITIES,
    change_chart,
    conditions_chart,
    distribution_chart,
    left_out_note,
    telling_changes,
    telling_distributions,
)
from rooflab.report.schedule_charts import resized_note, schedule_charts
from rooflab.report.stage_charts import stage_bounds_chart
from rooflab.report.summary import counters_summary_html, summary_html
from rooflab.report.sweep_charts import (
    SWEEPS_DRAWN,
    best_kernel_note,
    cache_marks,
    reuse_charts,
    sweep_chart,
)
from rooflab.report.workload_charts import (
    IMPLEMENTATIONS_HOW,
    PARAMS_HOW,
    WORKLOADS_HOW,
    comparison_chart,
    comparison_table,
    far_below_note,
    param_time_chart,
)
from rooflab.store import StoreError, connect_read_only, space_for

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Report:
    out_dir: Path
    index: Path
    charts: list[str] = field(default_factory=list)  # chart names, page order
    files: list[Path] = field(default_factory=list)
    specs: dict[str, dict] = field(default_factory=dict)  # Vega-Lite spec per chart name


ROOFLINE_HOW = (
    "Each point is one configuration and cache state (its newest run); slanted lines are the "
    "measured bandwidth ceilings per memory level, flat lines the measured compute ceilings "
    "(dashed: the library path), each roof in its own colour. A point takes the colour of the "
    "roof it is judged against (its memory level's where it is memory-bound, its compute "
    "path's where compute-bound), with a dotted line up to that roof: its length is the "
    "efficiency left on the table. Shape: the sweep; size: M; filled: warm cache, hollow: cold; "
    "a black triangle marks a point above its roof. Of two roofs' labels one above the other, "
    "the higher roof's is the upper one. Grey dashed roofs are the datasheet's."
)

INTEGER_HOW = (
    "The Roofline of the integer GEMMs (int8 x int8 -> int32 on the tensor cores): their work "
    "is 2MNK integer operations, in OP, not FLOP, so their roof is an OP/s ceiling "
    "(int8_tensor: cuBLASLt's int8 GEMM; dashed grey: the datasheet's int8 figure, in OP/s, "
    "dense) and their intensity is OP per byte of the cold-cache model. The bandwidth roofs are "
    "the same as on the Roofline above; no point here is comparable with a FLOP/s roof. Colours, "
    "shapes and guides as above."
)

HIERARCHICAL_HOW = (
    "Hardware counters (q_source = counters): each configuration (a GEMM, or a case of your "
    "workload) and cache state is one performance, its paired timing's median (flushed replay "
    "with the cold timing, no-flush replay with the warm one, never across), drawn at one "
    "intensity per memory level: the useful FLOPs (2MNK for a GEMM) over the bytes counted at "
    "that level (HBM from DRAM bytes, L2 from lts bytes, L1 from l1tex bytes). Its points are "
    "joined by a line; each is read against its own level's roof (same colour), and the "
    "tightest one is the limiting level. Only counts whose FLOPs matched what the ledger "
    "executes (2MNK, or a workload's executed FLOPs) within 1% are drawn. A level that counted "
    "under half the bytes of the level outside it gets no point: the kernel moved its data "
    "around that counter (cuBLAS on Hopper loads through TMA into shared memory, which l1tex "
    "bytes do not see); its count stays in the counters table."
)


def _counter_charts(
    counted: pd.DataFrame, ceilings: pd.DataFrame, compared: pd.DataFrame
) -> list[Chart]:
    labelled = counted.assign(config_id=counted.config_id + " · " + counted.cache_state)
    charts = [
        Chart(
            "hierarchical_roofline",
            "Hierarchical Roofline (hardware counters)",
            HIERARCHICAL_HOW,
            hierarchical_roofline_chart(labelled, ceilings),
        )
    ]
    if not compared.empty:
        table = table_html(model_vs_counted_table(compared), "model-vs-counted")
        charts.append(
            Chart(
                "model_vs_counted",
                "Model bytes vs counted memory bytes",
                "Per configuration and cache state: the cold-cache ledger Q_model (hollow) and "
                "the bytes counted at the memory level (filled). Counted below model: operands "
                "came from a cache (warm runs, reuse); counted above: the kernel moved more than "
                "the ideal ledger (re-reads, write-allocate, workspace).",
                model_vs_counted_chart(compared),
                table,
            )
        )
    return charts


def _charts(connection, scope) -> tuple[list[Chart], dict]:
    """The charts of one machine and backend (`scope`), in page order, and the facts its summary
    states."""
    ceilings = queries.ceilings(connection, scope)
    points = queries.points(connection, scope)
    failed = queries.failed(connection, scope)
    counted = queries.counter_points(connection, scope)
    pairs = queries.implementation_comparisons(connection, scope)
    charts: list[Chart] = []
    facts = {
        "ceilings": ceilings,
        "points": points,
        "failed": failed,
        "counters_html": counters_summary_html(queries.counters_state(connection, scope), counted),
    }

    integer_roofs = compute_roofs_in(ceilings, "OP")
    integer_points = points_in(points, "OP")
    integer = bool(integer_roofs) or not integer_points.empty
    flop_points = points_in(points, "FLOP")
    if not ceilings.empty or not flop_points.empty:
        notes = ""
        if not failed.empty:
            items = "".join(
                f"<li><code>{html.escape(r.config_id)}</code>: {html.escape(r.metric)} error "
                f"{r.error:.3g} &gt; tolerance {r.tolerance:.3g} (run {html.escape(r.run_id)})</li>"
                for r in failed.itertuples()
            )
            notes = f"<p>Failed correctness, not drawn:</p><ul class='failed'>{items}</ul>"
        workloads = "params" in points and points.params.notna().any()
        charts.append(
            Chart(
                "roofline",
                "Roofline",
                ROOFLINE_HOW + WORKLOADS_HOW * bool(workloads),
                roofline_chart(
                    ceilings,
                    flop_points,
                    queries.datasheet_roofs(connection, scope),
                    roofline_title(scope, flop_points),
                    pairs,
                ),
                notes + _integer_note(integer_roofs, integer_points) + far_below_note(flop_points),
            )
        )
    if integer:
        charts.append(
            Chart(
                "integer_roofline",
                "Integer Roofline (OP/s)",
                INTEGER_HOW,
                roofline_chart(
                    ceilings,
                    integer_points,
                    queries.datasheet_roofs(connection, scope),
                    roofline_title(scope, integer_points, "Integer Roofline (OP/s)"),
                    unit="OP",
                ),
                far_below_note(integer_points),
            )
        )
    if not pairs.empty:
        table = table_html(comparison_table(pairs), "implementations")
        charts.append(
            Chart(
                "implementations",
                "Same work, two implementations",
                IMPLEMENTATIONS_HOW,
                comparison_chart(pairs),
                table,
            )
        )

    if not counted.empty:
        compared = queries.model_vs_counted(connection, scope)
        charts += _counter_charts(counted, ceilings, compared)

    if scope.get("ceilings_run_id"):
        sweep = queries.ceiling_sweep(connection, scope["ceilings_run_id"])
        plateaus = queries.bandwidth_plateaus(connection, scope["ceilings_run_id"])
        if not sweep.empty:
            per_sm = (
                " l1_read (the SMs' L1) is drawn against the working set of one SM: every SM "
                "reads the same buffer, and its bandwidth is that of all SMs together."
                if (sweep.kernel == "l1_read").any()
                else ""
            )
            charts.append(
                Chart(
                    "ceiling_sweep",
                    "Ceiling sweep",
                    "Bandwidth of each kernel as the working set grows (newest ceilings run): "
                    "each drop marks a cache level left behind (dashed rules: total cache "
                    "capacities as reported and, where the sweep saw a level's fall, as "
                    "measured), and each shaded plateau is where that level's ceiling was taken."
                    + per_sm
                    + best_kernel_note(ceilings),
                    sweep_chart(
                        sweep, plateaus, cache_marks(queries.cache_capacities(connection, scope))
                    ),
                )
            )

    gemms = points[points.params.isna()] if "params" in points else points  # not workloads
    charts += reuse_charts(gemms, scope)

    varying = queries.workload_param_points(connection, scope)
    workloads = list(varying.groupby("workload", sort=True))
    for workload, rows in workloads[:SWEEPS_DRAWN]:  # a bounded page: the first by name
        charts.append(
            Chart(
                f"workload_time_{name_part(workload)}",
                f"Workload {workload}: time vs {', '.join(sorted(rows.param.unique()))}",
                PARAMS_HOW,
                param_time_chart(rows.reset_index(drop=True), str(workload)),
            )
        )
    if len(workloads) > SWEEPS_DRAWN:
        sql = queries.view_sql("workload_param_points", scope, workload="<workload>")
        charts[-1].notes_html += left_out_note(len(workloads), SWEEPS_DRAWN, "workloads", sql)

    quantiles = queries.sample_quantiles(connection, scope)
    if not quantiles.empty:
        boxes = telling_distributions(quantiles)
        what = "boxes, the disturbed and noisy first, then the widest spread"
        charts.append(
            Chart(
                "distributions",
                "Sample distributions",
                "One box per configuration and cache state (newest run), over the samples its "
                "statistics used (samples other processes took time from are left out, unless "
                "all were): whiskers span min to max, the box p25 to p75, the black tick is the "
                "median; red boxes were flagged noisy (IQR / median above the threshold), purple "
                "ones disturbed (other processes took time from the measurement; disturbed wins "
                "over noisy).",
                distribution_chart(boxes),
                left_out_note(
                    len(quantiles), len(boxes), what, queries.view_sql("sample_quantiles", scope)
                ),
            )
        )

    conditions = queries.conditions(connection, scope)
    if not conditions.empty:
        conditions["t"] = conditions["t"].dt.tz_convert("UTC").dt.tz_localize(None)
        charts.append(
            Chart(
                "conditions",
                "Conditions over time",
                "What the machine ran at before, during and after each measurement, one line "
                "per run, coloured by what it measured: the clock (the measured CPU clock, or the "
                "GPU's SM clock), and the GPU's temperature and power where NVML reads them. A dip "
                "or a spread within a run means its timings were taken at a different speed. Over "
                "long histories readings are grouped into short time buckets (median drawn, "
                "min–max as a bar). The clock axis starts at zero, so a dip reads at its true "
                "size; a dashed line marks the nominal clock (a GPU's max SM clock, a CPU's base "
                "clock where its model name states one) and a GPU's power limit."
                + _no_nominal_clock(conditions),
                conditions_chart(conditions),
            )
        )

    change = queries.median_changes(connection, scope)
    if not change.empty:
        moved = telling_changes(change)
        what = "configurations, those slower or faster first, then the largest changes"
        charts.append(
            Chart(
                "change",
                "Change since the previous run",
                "Each configuration's latest median over the one before (its two newest runs), "
                "on a log axis from 0.5× (twice as fast) to 2× (twice as slow); the grey band is "
                "± half the larger IQR / median of the two, so a dot outside it moved by more "
                "than the noise. A ratio beyond the axis is drawn at its edge as a triangle "
                "pointing out, its true value in the tooltip.",
                change_chart(moved),
                left_out_note(
                    len(change), len(moved), what, queries.view_sql("median_changes", scope)
                ),
            )
        )
    charts += history_charts(connection, scope)
    charts += schedule_charts(connection, scope)
    stages = queries.stage_bounds(connection, scope)
    measured = queries.stage_timings(connection, scope) if not stages.empty else stages
    for name, frame in stages.groupby("scenario", sort=True):
        charts.append(
            Chart(
                f"stages_{name_part(name)}",
                f"Stage bounds: {name}",
                "Each bar is a stage at its own bound max(F/C, Q/B) on this machine's measured "
                "ceilings, started when the stages it depends on finish; the dashed lines are "
                "the critical-path bound and the looser aggregate bound max(ΣF/C, ΣQ/B), one "
                "line where the two coincide.",
                stage_bounds_chart(frame.reset_index(drop=True), str(name)),
                # where the stages were measured at other sizes, this chart's are not theirs
                resized_note(
                    measured[measured.scenario == name], str(name), scope["backend"], True
                ),
            )
        )
    charts += import_charts(connection, scope, ceilings)
    for chart in charts:
        chart.name = scope.get("prefix", "") + chart.name
    return charts, facts


def _integer_note(roofs: list[str], points: pd.DataFrame) -> str:
    """Under the Roofline, where the machine has integer work: what is left off it, and where it
    is drawn instead."""
    if not roofs and points.empty:
        return ""
    what = [f"the OP/s ceiling{'s' * (len(roofs) > 1)} {', '.join(roofs)}"] * bool(roofs)
    what += [f"{len(points)} integer GEMM point{'s' * (len(points) > 1)}"] * (not points.empty)
    return (
        f"<p class='note'>Not on this chart: {' and '.join(what)}. Integer GEMMs do integer "
        "operations (OP), and an OP/s ceiling is not a FLOP/s ceiling: they are drawn on the "
        "Integer Roofline below, with OP/s axes.</p>"
    )


def _no_nominal_clock(conditions: pd.DataFrame) -> str:
    clock = conditions[conditions.quantity == CONDITION_QUANTITIES[0]]
    if clock.empty or clock.nominal.notna().any():
        return ""
    return " This machine records no nominal clock, so no line marks it."


class ChartNamesShared(StoreError):
    """Two charts of the store's report would share a name (and their PNG and SVG files)."""


def _refuse_shared_names(names: list[str]) -> None:
    """Two charts under one name would draw one's data in the other's place and overwrite its
    files: names map to chart names one to one (report.names), so only a hash collision or a
    contrived name gets here, and it is refused before anything is written (the CLI prints it
    as one line)."""
    shared = duplicates(names)
    if shared:
        raise ChartNamesShared(
            "two charts of the report would share the name(s) "
            + ", ".join(repr(name) for name in shared)
            + " and their PNG and SVG files; rename a sweep, stages scenario or host"
        )


def build_report(db_path: str | Path, out_dir: str | Path, images: bool = True) -> Report:
    """Write out_dir/index.html and a PNG and an SVG per chart; read-only on the store. Every
    number comes from the store's views; a `stages` scenario of the config gets a chart where the
    roofline step stored its bounds (view latest_stage_bounds). `images` False: the page and the
    specs only, no chart drawn (for a reader of the specs; most of the report's time)."""
    import vl_convert as vlc

    out_dir = Path(out_dir)
    connection = connect_read_only(db_path)
    machines: list[MachineSection] = []
    roofs: list[MachineRoofs] = []  # each machine's, for the machines side by side
    try:
        scopes = queries.scopes(connection)
        for scope in scopes:
            charts, facts = _charts(connection, scope)
            title = f"{scope['host']} ({scope['backend']}, {scope['device_name']})"
            machines.append(
                MachineSection(
                    title=title,
                    anchor="machine-" + scope.get("prefix", "").removesuffix("__"),
                    summary=summary_html(connection, scope, facts),
                    charts=charts,
                )
            )
            roofs.append(
                MachineRoofs(title, scope["machine_id"], facts["ceilings"], facts["points"])
            )
    finally:
        connection.close()

    side_by_side = machines_chart(roofs)  # None: one machine
    top = [side_by_side] if side_by_side else []
    every = top + [chart for machine in machines for chart in machine.charts]
    _refuse_shared_names([chart.name for chart in every])
    out_dir.mkdir(parents=True, exist_ok=True)
    report = Report(out_dir=out_dir, index=out_dir / "index.html")
    version = vl_version()
    for chart in every:
        spec = chart.chart.to_dict()
        report.specs[chart.name] = spec
        report.charts.append(chart.name)
        if not images:
            continue
        png = out_dir / f"{chart.name}.png"
        svg = out_dir / f"{chart.name}.svg"
        # the chart laid out once (Vega), its PNG rasterised from that SVG: half the time of
        # laying it out twice, on a 400-box chart of a million samples most of the report's
        drawn = vlc.vegalite_to_svg(spec, vl_version=version)
        _write(svg, drawn.encode("utf-8"))
        _write(png, vlc.svg_to_png(drawn, scale=2))
        report.files += [png, svg]
    page = index_html(machines, report.specs, [side_by_side] if side_by_side else [])
    temporary = report.index.with_name(".index.html.tmp")
    _write(temporary, page.encode("utf-8"), named=report.index)
    temporary.replace(report.index)
    report.files.append(report.index)
    return report


def _write(path: Path, data: bytes, named: Path | None = None) -> None:
    """One file of the report (`named`: the file it becomes). On a full disk the part written is
    removed and DiskFull names the file; index.html is replaced last, so it stays the last whole
    report."""
    kept = "index.html was not replaced"
    with space_for(named or path, "the report", kept=kept, partial=[path]):
        path.write_bytes(data)
