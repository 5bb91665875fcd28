"""A machine's summary at the top of its section: what it is, its runs, its latest ceilings and
how steady they were, its ridge points, its hardware counters, and a count of its points."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import rooflab.report.queries as queries
from rooflab.report.page import table_html
from rooflab.units import format_quantity
from rooflab.vocabulary import MEMORY_LEVELS, ROOF_BEATEN_EFFICIENCY

if TYPE_CHECKING:
    import pandas as pd


def _path_text(ceiling) -> str:
    """The instruction path of a CPU's kernels (`avx512, 512-bit`), "-" where none is named."""
    import pandas as pd

    isa = getattr(ceiling, "isa", None)
    if isa is None or pd.isna(isa):
        return "-"
    return f"{isa}, {int(ceiling.vector_bits)}-bit"


def _beaten_text(ceiling) -> str:
    import pandas as pd

    beaten = getattr(ceiling, "roof_beaten", None)
    if beaten is None or pd.isna(beaten) or not beaten:
        return ""
    why = html.escape(str(ceiling.roof_beaten_evidence))
    return f"; <span class='warning'>roof beaten: {why}</span>"


def _rate_text(value: float, unit: str) -> str:
    if unit == "B/s":
        return f"{value / 1e9:.4g} GB/s"
    if unit == "FLOP/s":
        return f"{value / 1e9:.4g} GFLOP/s"
    if unit == "OP/s":  # an integer path (int8): OP/s, never FLOP/s
        return format_quantity(value, "op_rate", 4)
    return f"{value:.4g} {html.escape(str(unit))}"


def _or_dash(value) -> str:
    """A cell's text, "-" where it has none (the host link's bytes have no dtype)."""
    import pandas as pd

    return "-" if value is None or pd.isna(value) else str(value)


def _windows_text(ceiling) -> str:
    """How steady the samples behind a ceiling were; for a best-of-rounds path, how far its
    rounds spread (a low round is a slow spell of the machine, or a clock that moved)."""
    import pandas as pd

    if pd.isna(ceiling.n_windows):
        return "not stored (a run of an older rooflab)"
    text = f"{int(ceiling.n_windows)} samples, IQR {ceiling.iqr_ratio:.1%} of the median rate"
    if not pd.isna(ceiling.rounds_min):
        low, high = (_rate_text(v, ceiling.unit) for v in (ceiling.rounds_min, ceiling.rounds_max))
        text += f"; best of {int(ceiling.n_points)} rounds, whose medians spanned {low} to {high}"
    return text


def _disturbed_text(ceiling) -> str:
    if not ceiling.disturbed:
        return ""
    why = html.escape(str(ceiling.disturbance or "no reason stored"))
    return f"; <span class='warning'>disturbed: {why}</span>"


def _disturbed_points_text(points: pd.DataFrame) -> str:
    """How many points are disturbed, and how many have no verdict (runs of an older rooflab,
    whose flag is null: counted as not disturbed)."""
    disturbed, unjudged = int(points.disturbed.sum()), int((~points.judged).sum())
    notes = ["ringed on the Roofline"] if disturbed else []
    if unjudged:
        notes.append(f"{unjudged} not judged: runs of an older rooflab")
    return f"<b>{disturbed}</b> disturbed" + (f" ({'; '.join(notes)})" if notes else "")


def summary_html(connection, scope, facts) -> str:
    """One machine's summary (`scope`): from the `facts` its charts were drawn from (ceilings,
    points, failed checks, the counters lines) and from its runs in the store."""
    ceilings, points, failed = facts["ceilings"], facts["points"], facts["failed"]
    # the runs behind the ceilings and points shown: a busy machine in an older run the page
    # no longer shows is not this page's concern
    shown = sorted({scope.get("ceilings_run_id"), *points.get("run_id", [])} - {None})
    counts = queries.run_counts(connection, scope, shown)
    esc = html.escape
    backend = esc(str(scope["backend"]))
    if isinstance(counts.backend_note, str):  # `auto` chose another backend than CUDA: why
        backend += f" <span class='note'>({esc(counts.backend_note)})</span>"
    rows = [
        ("host", esc(str(scope["host"]))),
        ("machine id", f"<code>{esc(str(scope['machine_id']))}</code>"),
        ("backend", backend),
        ("device", esc(str(scope["device_name"]))),
        (
            "runs",
            f"{counts.runs} ({counts.gemm_runs} GEMM), {counts['first']:%Y-%m-%d %H:%M} "
            f"to {counts['last']:%Y-%m-%d %H:%M} UTC",
        ),
    ]
    out = ["<table class='summary'>"]
    out += [f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows]
    out.append("</table>")
    if counts.busy_runs:
        out.append(
            f"<p class='warning'>Taken on a busy machine: <b>{counts.busy_runs}</b> of the "
            f"{len(shown)} run(s) behind these ceilings and points; the newest, run "
            f"<code>{esc(str(counts.busy_run))}</code>, warned: "
            f"“{esc(str(counts.busy_warning))}”.</p>"
        )

    if ceilings.empty:
        out.append("<p>No ceilings measured on this machine yet.</p>")
    else:
        run = esc(str(scope.get("ceilings_run_id")))
        out.append(f"<h3>Latest ceilings (run <code>{run}</code>)</h3><table class='ceilings'>")
        out.append(
            "<tr><th>ceiling</th><th>value</th><th>kernel</th><th>dtype</th>"
            "<th>instruction path</th><th>samples behind it</th></tr>"
        )
        for r in ceilings.itertuples():
            out.append(
                f"<tr><td>{esc(r.name)}</td><td class='num'>{_rate_text(r.value, r.unit)}</td>"
                f"<td>{esc(str(r.kernel))}</td><td>{esc(_or_dash(r.dtype))}</td>"
                f"<td>{esc(_path_text(r))}</td>"
                f"<td>{_windows_text(r)}{_disturbed_text(r)}{_beaten_text(r)}</td></tr>"
            )
        out.append("</table>")
        disturbed = int(ceilings.disturbed.sum())
        if disturbed:
            out.append(
                f"<p class='warning'><b>{disturbed}</b> of the {len(ceilings)} ceilings disturbed: "
                "other processes took time from their measurement (why: in the table), so their "
                "values may be low and points read against them high.</p>"
            )
        beaten = ceilings[ceilings.get("roof_beaten", False) == True]  # noqa: E712 - nulls
        for r in beaten.itertuples():
            out.append(
                f"<p class='warning roof-beaten'>The <b>{esc(r.name)}</b> roof is beaten: "
                f"{esc(str(r.roof_beaten_evidence))}. A roof that a library call beats is below "
                "what this machine does: its points' efficiencies are too high.</p>"
            )
        memory = ceilings[(ceilings.kind == "bandwidth") & ceilings.name.isin(MEMORY_LEVELS)]
        compute = ceilings[ceilings.kind == "compute"]
        if not memory.empty and not compute.empty:
            level, bw = memory.iloc[0]["name"], float(memory.iloc[0].value)
            ridges = ", ".join(
                f"{esc(r.name)} {r.value / bw:.3g} {'OP' if r.unit == 'OP/s' else 'FLOP'}/byte"
                for r in compute.itertuples()
            )
            against = f"{esc(str(level))} ({bw / 1e9:.4g} GB/s)"
            out.append(f"<p>Ridge points against {against}: {ridges}.</p>")
    if facts.get("counters_html"):
        out.append(facts["counters_html"])
    if points.empty:
        out.append("<p>No Roofline points on this machine yet.</p>")
    else:
        limiter = points.limiter.value_counts()
        out.append(
            f"<p>{len(points)} Roofline points (newest run per configuration and cache state): "
            f"<b>{limiter.get('compute', 0)}</b> compute-bound, "
            f"<b>{limiter.get('memory', 0)}</b> memory-bound; "
            f"<b>{int(points.noisy.sum())}</b> noisy; "
            f"{_disturbed_points_text(points)}; "
            f"<b>{failed.config_id.nunique()}</b> configuration(s) failed correctness.</p>"
        )
        above = int((points.efficiency > ROOF_BEATEN_EFFICIENCY).sum())
        if above:
            out.append(
                f"<p class='warning'><b>{above}</b> point(s) sit above their roof (efficiency "
                f"over {ROOF_BEATEN_EFFICIENCY:.0%}): the ceilings under-measure this machine, or "
                "the ceilings run and the sweep ran under different conditions (compare the clocks "
                "in the conditions chart, and the load on the machine).</p>"
            )
    out.append(furthest_html(queries.furthest_from_roof(connection, scope), scope))
    out.append(unplaced_html(queries.unplaced_points(connection, scope), scope))
    return "\n".join(out)


UNPLACED_SHOWN = 50  # rows of the unplaced points' table; the rest by SQL
FURTHEST_SHOWN = 10  # rows of the table of the points furthest from their roofs


def furthest_html(rows: pd.DataFrame, scope) -> str:
    """The FURTHEST_SHOWN points furthest from their roofs (view diagnoses): why each sits
    there, what to try next and the bound after it; the query for all (docs/diagnosis.md)."""
    import pandas as pd

    if rows.empty:
        return ""
    shown = rows.head(FURTHEST_SHOWN)
    table = pd.DataFrame(
        {
            "point": shown.key,
            "kind": shown.kind,
            "cache state": shown.cache_state,
            "level": shown.level,
            "efficiency": [f"{e:.3g}" for e in shown.efficiency],
            "cause": shown.cause,
            "next step": shown.next_step,
            "median": [format_quantity(t, "time", 3) for t in shown.median_s],
            "predicted": [
                format_quantity(t, "time", 3) if pd.notna(t) else "" for t in shown.predicted_s
            ],
        }
    )
    sql = queries.view_sql("diagnoses", scope)
    return (
        f"<h3>Furthest from their roofs</h3><p class='diagnoses'>The {len(shown)} point(s) "
        "furthest from their roofs, why each sits there and what to try next, with the bound "
        f"after that step (all {len(rows)}: <code>rooflab explain</code>, or "
        f"<code>{html.escape(sql)}</code>):</p>" + table_html(table, "diagnoses")
    )


def unplaced_html(rows: pd.DataFrame, scope) -> str:
    """The timed points of the machine that have no Roofline point (view
    latest_unplaced_points): how many, by reason, and each with why (the first UNPLACED_SHOWN;
    the query for all)."""
    if rows.empty:
        return ""
    esc = html.escape
    by_reason = ", ".join(
        f"<b>{count}</b> {esc(str(reason))}" for reason, count in rows.reason.value_counts().items()
    )
    sql = queries.view_sql("latest_unplaced_points", scope)
    shown = rows.head(UNPLACED_SHOWN)
    which = f"The first {len(shown)} of them" if len(rows) > len(shown) else "Each of them"
    table = shown.rename(
        columns={"config_id": "configuration", "cache_state": "cache state", "run_id": "run"}
    )[["sweep", "configuration", "cache state", "reason", "why", "run"]]
    return (
        f"<h3>Timed points without a Roofline point</h3><p class='warning unplaced'><b>{len(rows)}"
        f"</b> timed point(s) (newest run per configuration and cache state) have no Roofline "
        f"point: {by_reason}. They are timed and stored, but not drawn. {which}, with why "
        f"(all: <code>{esc(sql)}</code>):</p>" + table_html(table, "unplaced")
    )


def counters_summary_html(state: pd.DataFrame, points: pd.DataFrame) -> str:
    """The lines of a machine's summary about its hardware counters (nothing without a counters
    run): unavailable with the reason, replays not admitted and why, and the points made."""
    if state.empty:
        return ""
    esc = html.escape
    lines = []
    status = state[state.what == "status"]
    unavailable = status[status.status == "unavailable"]
    profiled = status[status.status.isin(["ok", "partial"])]
    for reason, group in unavailable.groupby("reason", sort=True):
        sweeps = ", ".join(sorted(set(group.sweep)))
        scope = "" if profiled.empty else f" for sweep(s) {esc(sweeps)}"
        lines.append(
            f"<p class='counters'><b>Hardware counters: unavailable</b>{scope} — "
            f"{esc(str(reason))}; points use model bytes (<code>q_source = model</code>).</p>"
        )
    calibration = state[state.what == "calibration"]
    for verdict, words in (("untrusted", "failed calibration"), ("unpaired", "not paired")):
        rows = calibration[calibration.status == verdict]
        if not rows.empty:
            reasons = "; ".join(esc(str(r)) for r in rows.reason)
            lines.append(
                f"<p class='counters warning'>Hardware counters: {int(rows.n.sum())} replay(s) "
                f"{words}, no point from them: {reasons}.</p>"
            )
    if not points.empty:
        configs = points[["config_id", "cache_state"]].drop_duplicates()
        limiting = ", ".join(
            f"{esc(level)} {count}"
            for level, count in points.drop_duplicates(["config_id", "cache_state"])
            .limiting_level.value_counts()
            .items()
        )
        lines.append(
            f"<p class='counters'>Hardware counters: <b>{len(configs)}</b> configuration(s) "
            f"with hierarchical points (<code>q_source = counters</code>; limiting level: "
            f"{limiting}); every other point uses model bytes (<code>q_source = model</code>)."
            "</p>"
        )
    elif unavailable.empty and not profiled.empty:
        lines.append(
            "<p class='counters'>Hardware counters collected, but none reached a point; "
            "points use model bytes (<code>q_source = model</code>).</p>"
        )
    return "\n".join(lines)
