"""The report of a store of many runs over many sweeps: every image stays within a bound, the page
says what it leaves out and gives the query for it, and that query returns those rows.

A real store of 150 runs over 30 sweeps (benchmarks/many_runs.py: run folders as a CPU campaign
keeps them, the roofline step and ingest), in which the newest run of an older sweep (sweep003)
is twice as slow: its history is drawn though other sweeps ran after it. The 1,000 runs over 100
sweeps of the issue: benchmarks/report_many_runs.py (under 10 s there).
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rooflab.report.history_charts as history_charts
import rooflab.report.queries as queries
from rooflab.report import build_report
from rooflab.report.run_charts import CHART_ROWS
from rooflab.report.sweep_charts import SWEEPS_DRAWN
from rooflab.store import connect_read_only, query
from tests.report_pages import tables_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from many_runs import (
    CACHE_STATES,
    MAX_PNG_BYTES,
    MAX_PNG_SIDE_PX,
    SHAPES,
    png_size,
    store_runs,
    write_many_runs,
)

# A store of 150 runs and a report that draws every image: over 10 s here.
pytestmark = pytest.mark.slow

RUNS, SWEEPS = 150, 30
SLOWER_SWEEP = "sweep003"


def _twice_as_slow(run_dir: Path) -> None:
    for table, columns in (
        ("timed_points", ("median_s", "p25_s", "p75_s")),
        ("samples", ("seconds",)),
    ):
        path = run_dir / f"{table}.parquet"
        rows = pq.read_table(path).to_pylist()
        for row in rows:
            for column in columns:
                row[column] *= 2
        pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path)


@pytest.fixture(scope="module")
def scale(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    results = root / "results"
    write_many_runs(results, RUNS, SWEEPS)
    *_, newest = sorted((results / "sweeps" / SLOWER_SWEEP / "runs").iterdir())
    _twice_as_slow(newest)
    db = store_runs(results)
    report = build_report(db, root / "report")
    (scope,) = query(db, "SELECT machine_id, backend FROM report_scopes").to_pylist()
    return {"db": db, "report": report, "page": report.index.read_text(), "scope": scope}


def test_every_image_of_a_report_of_many_runs_is_bounded(scale):
    pngs = [path for path in scale["report"].files if path.suffix == ".png"]
    assert len(pngs) == len(scale["report"].charts) and len(pngs) < 30
    for path in pngs:
        width, height = png_size(path)
        assert max(width, height) <= MAX_PNG_SIDE_PX, (path.name, width, height)
        assert path.stat().st_size <= MAX_PNG_BYTES, path.name


def _queries_on_page(page: str) -> list[str]:
    return [html.unescape(sql) for sql in re.findall(r"<code>(SELECT [^<]*)</code>", page)]


def test_the_newest_sweeps_are_drawn_and_the_rest_listed_with_their_query(scale):
    drawn = {n.removeprefix("reuse_time_") for n in scale["report"].charts if "reuse_time_" in n}
    # runs go round the sweeps in turn: the newest runs are the last sweeps'
    assert drawn == {f"sweep{i:03d}" for i in range(SWEEPS - SWEEPS_DRAWN, SWEEPS)}
    (table,) = tables_of(scale["page"], "sweeps-left-out")
    header, *rows = table
    assert header[:3] == ["sweep", "points", "newest run (UTC)"]
    assert {row[0] for row in rows} == {f"sweep{i:03d}" for i in range(SWEEPS - SWEEPS_DRAWN)}
    assert {row[1] for row in rows} == {str(len(SHAPES) * len(CACHE_STATES))}
    (sql,) = [q for q in _queries_on_page(scale["page"]) if "latest_model_points" in q]
    listed = query(scale["db"], sql.replace("<sweep>", "sweep000")).to_pylist()
    assert len(listed) == len(SHAPES) * len(CACHE_STATES)


def test_the_history_draws_the_sweeps_that_moved_then_the_newest(scale):
    (name,) = [n for n in scale["report"].charts if n.endswith("history")]
    spec = scale["report"].specs[name]
    panels = {
        row["panel"].removesuffix(": median time")
        for rows in spec["datasets"].values()
        for row in rows
        if "panel" in row
    }
    newest = {f"sweep{i:03d}" for i in range(SWEEPS - history_charts.HISTORY_PANELS + 1, SWEEPS)}
    assert panels == {SLOWER_SWEEP, *newest}  # one ceilings run: no ceiling has a history
    (table,) = tables_of(scale["page"], "history-left-out")
    header, *rows = table
    assert header[0] == "sweep or workload" and len(rows) == SWEEPS - len(newest) - 1
    assert SLOWER_SWEEP not in {row[0] for row in rows}
    (sql,) = [q for q in _queries_on_page(scale["page"]) if "FROM history" in q and "name =" in q]
    runs = query(scale["db"], sql.replace("<sweep or workload>", "sweep000")).to_pylist()
    assert len(runs) == (RUNS // SWEEPS) * len(SHAPES) * len(CACHE_STATES)


def test_distributions_and_changes_draw_the_most_telling_and_say_how_many_are_left_out(scale):
    keys = SWEEPS * len(SHAPES) * len(CACHE_STATES)
    assert f"Drawn: {CHART_ROWS} of the {keys} boxes" in scale["page"]
    assert f"Drawn: {CHART_ROWS} of the {keys} configurations" in scale["page"]
    changes = scale["report"].specs["change"]
    labels = {
        row["label"] for rows in changes["datasets"].values() for row in rows if "label" in row
    }
    assert len(labels) == CHART_ROWS
    slower = query(scale["db"], "SELECT label FROM median_changes WHERE verdict = 'slower'").column(
        "label"
    )
    assert {label.as_py() for label in slower} >= {
        f"{SLOWER_SWEEP}/fp64/nn/m{m}_n256_k256 · {state}" for m in SHAPES for state in CACHE_STATES
    }
    assert {label.as_py() for label in slower} <= labels
    for sql in _queries_on_page(scale["page"]):
        if "sample_quantiles" in sql or "median_changes" in sql:
            assert len(query(scale["db"], sql).to_pylist()) == keys


def test_a_long_history_draws_each_keys_newest_runs_over_its_first(scale, monkeypatch):
    monkeypatch.setattr(history_charts, "HISTORY_RUNS", 3)  # 5 runs per key here
    with connect_read_only(scale["db"]) as connection:
        (chart,) = history_charts.history_charts(
            connection, {**scale["scope"], "host": "h", "device_name": "d"}
        )
        full = queries.history(connection, scale["scope"])
    rows = [r for rows in chart.chart.to_dict()["datasets"].values() for r in rows if "ratio" in r]
    assert {row["position"] for row in rows} == {3, 4, 5}
    first = full[full.position == 1].set_index("key").value
    for row in rows:
        value = full[(full.key == row["key"]) & (full.position == row["position"])].value.iloc[0]
        assert row["ratio"] == pytest.approx(value / first[row["key"]])
    assert "newest 3 runs are drawn" in chart.notes_html
