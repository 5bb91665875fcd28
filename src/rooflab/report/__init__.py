"""The report (docs/report.md): one self-contained offline HTML page, plus a PNG and an SVG per
chart.

`build_report(db_path, out_dir)` only reads the store (one read-only connection, closed at the
end). Every chart's data is aggregated in SQL: one row per configuration and cache state (the
newest run's), per sweep point, per condition reading, or per quantile; raw samples never reach
the page. The page inlines Vega, Vega-Lite and vega-embed (vl-convert's bundle), so it opens
without a network.

Every machine and backend in the store gets its own section (summary and charts): ceilings are
never drawn against another machine's points; with several, one chart puts their Rooflines side
by side, each against its own roofs, on shared axes. With more than one machine, chart names (and
file names) start with host, backend and machine id (`names.name_part`).

The modules, each depending only on those listed after it:

- `build`: `build_report`, and which charts a machine gets;
- `page`: the HTML page around the charts; `summary`: a machine's summary;
- `queries`: the SQL the report runs on the store;
- one module per chart family: `roofline_chart` (with `roofline_points`: its points, their
  marks and its title), `counter_charts` (hardware counters),
  `sweep_charts` (ceiling sweep, weight reuse), `run_charts` (samples, conditions, change),
  `stage_charts` (stage bounds), `workload_charts` (your own kernels), `schedule_charts` (stages
  measured, with `timeline_charts`: a step per mode), `history_charts` (every run of a key, the
  newest comparisons), `machine_charts` (several machines side by side);
- what the charts share: `axes` (roof geometry, time and size labels), `labels` (placing roof
  labels), `disturbed_marks` (how a disturbed measurement is marked);
- `names`: how names from the config and the store become chart names, ids and file names (one
  to one: a slug and a hash of any name that is not already safe), and the page's escaping of
  them (JSON inside <script>, attributes, hrefs).

altair and vl_convert are imported inside the functions: the CLI imports this package lazily too.
"""

from rooflab.report.build import Report, build_report

__all__ = ["Report", "build_report"]
