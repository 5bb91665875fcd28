"""The report's page: one offline HTML file, each machine's summary and charts, with Vega,
Vega-Lite and vega-embed inline (vl-convert's bundle) and a box that shows any rendering error."""

from __future__ import annotations

import contextlib
import functools
import html
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rooflab.report.names import attribute, script_json, url

if TYPE_CHECKING:
    import altair as alt


@dataclass
class Chart:
    name: str  # file stem and element id: safe, from report.names.name_part
    title: str
    how_to_read: str
    chart: alt.TopLevelMixin
    notes_html: str = ""  # shown under the chart


PAGE_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { padding: 2px 10px; text-align: left; border-bottom: 1px solid #eee; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
section.chart { margin: 2.5em 0; }
p.how { color: #444; max-width: 60em; }
ul.failed, p.warning, span.warning { color: #a00; }
#report-errors:empty { display: none; }
#report-errors { color: #a00; border: 1px solid #a00; padding: 0.5em; }
"""

# Recorded into the page so that a headless browser's DOM shows any failure.
ERROR_HOOK = """
window.reportErrors = [];
function reportError(message) {
  window.reportErrors.push(String(message));
  var box = document.getElementById('report-errors');
  if (box) { box.textContent = window.reportErrors.join('\\n'); }
}
window.addEventListener('error', function (e) { reportError(e.message || e); });
window.addEventListener('unhandledrejection', function (e) { reportError(e.reason); });
"""


@dataclass
class MachineSection:
    title: str
    anchor: str
    summary: str
    charts: list[Chart]


def _chart_html(chart: Chart, heading: str) -> str:
    return (
        f"<section class='chart'><{heading}>{html.escape(chart.title)}</{heading}>"
        f"<p class='how'>{html.escape(chart.how_to_read)}</p>"
        f"<div class='vega-chart' id='chart-{attribute(chart.name)}'></div>{chart.notes_html}"
        f"<p class='files'><a href='{url(chart.name + '.png')}'>PNG</a> · "
        f"<a href='{url(chart.name + '.svg')}'>SVG</a></p></section>"
    )


def _body_html(machines: list[MachineSection], across: list[Chart]) -> str:
    """One machine: its summary and charts. Several: a list of them, the charts across them
    (`across`: the machines side by side), then a section each."""
    if len(machines) == 1:
        (only,) = machines
        parts = [only.summary] + [_chart_html(chart, "h2") for chart in only.charts]
        if not only.charts:
            parts.append("<p class='empty'>Nothing to chart yet.</p>")
        return "\n".join(parts)
    items = "".join(
        f"<li><a href='#{url(m.anchor)}'>{html.escape(m.title)}</a> ({len(m.charts)} charts)</li>"
        for m in machines
    )
    parts = [
        f"<p>The store holds {len(machines)} machine/backend pairs; each has its own ceilings, "
        f"points and charts, never mixed.</p><ul class='machines'>{items}</ul>",
        *(_chart_html(chart, "h2") for chart in across),
    ]
    for m in machines:
        charts = "".join(_chart_html(chart, "h3") for chart in m.charts) or (
            "<p class='empty'>Nothing to chart yet.</p>"
        )
        parts.append(
            f"<section class='machine' id='{attribute(m.anchor)}'><h2>{html.escape(m.title)}</h2>"
            f"{m.summary}{charts}</section>"
        )
    return "\n".join(parts)


def _page(title: str, body: str, specs: dict[str, dict]) -> str:
    bundle = _vega_bundle()
    # no `<` in the specs' JSON: a name can end the script or open a comment in it
    specs_json = script_json(specs)
    embed = f"""
const specs = {specs_json};
const done = [];
for (const [name, spec] of Object.entries(specs)) {{
  const element = document.getElementById('chart-' + name);
  done.push(window.vegaEmbed(element, spec, {{renderer: 'svg', actions: false}})
    .catch(reportError));
}}
Promise.all(done).then(() => document.body.setAttribute('data-rendered', 'true'));
"""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>{PAGE_STYLE}</style>
<script>{ERROR_HOOK}</script>
</head>
<body>
<h1>{html.escape(title)}</h1>
<pre id="report-errors"></pre>
{body}
<script type="module">{bundle}</script>
<script type="module">{embed}</script>
</body>
</html>
"""


@functools.cache
def _vega_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one script. vl-convert takes about 2 s to build it, so
    the first build is kept in the user's cache folder, named by the vl-convert and Vega-Lite
    versions it was built for, and every later report (a campaign's report job) reads it; where
    that folder cannot be written, it is built each time."""
    import vl_convert as vlc
    from platformdirs import user_cache_path

    version = vl_version()
    kept = user_cache_path("rooflab") / f"vega-bundle-{vlc.__version__}-{version}.js"
    with contextlib.suppress(OSError, UnicodeDecodeError):
        return kept.read_text(encoding="utf-8")
    bundle = vlc.javascript_bundle(vl_version=version)
    partial = kept.with_name(f".{kept.name}.{os.getpid()}.partial")
    try:  # whole or not at all: another report reads it as soon as it is renamed
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(bundle, encoding="utf-8")
        partial.replace(kept)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
    return bundle


def vl_version() -> str:
    """The Vega-Lite version altair writes, as vl-convert names it ("v5.20")."""
    import altair as alt

    return "v" + ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])


EMPTY_HTML = (
    "<p class='empty'>The store holds no runs yet: there is nothing to report. Run the workflow "
    "(or <code>rooflab measure</code> and <code>rooflab store ingest</code>) first.</p>"
)


def index_html(
    machines: list[MachineSection], specs: dict[str, dict], across: list[Chart] = ()
) -> str:
    """The whole page: its title, the machines' summaries and charts (with several machines,
    the charts `across` them first), and each chart's spec."""
    if not machines:
        title, body = "rooflab report", EMPTY_HTML
    elif len(machines) == 1:
        title, body = f"rooflab report: {machines[0].title}", _body_html(machines, [])
    else:
        title = f"rooflab report: {len(machines)} machines"
        body = _body_html(machines, list(across))
    return _page(title, body, specs)


def table_html(frame, classes: str, float_format=None) -> str:
    """A DataFrame as an HTML table, every header and text cell escaped quotes and all (pandas
    escapes < > & only; a host or sweep name may hold anything)."""

    def escaped(value):
        return html.escape(value) if isinstance(value, str) else value

    shown = frame.rename(columns=lambda column: html.escape(str(column))).map(escaped)
    return shown.to_html(
        index=False, classes=classes, border=0, escape=False, float_format=float_format
    )
