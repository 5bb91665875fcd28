"""Hostile and colliding names in the report (issue 26): every name that reaches the page (sweeps,
`stages` scenarios, hosts, device names, machine and config ids) is escaped in each context it
lands in, and maps to its chart name and files one to one.

The store is real: the quick ceilings run conftest shares, one `rooflab measure gemm` of a tiny
sweep, and copies of that run under other sweep names (its Parquet rows edited: the config schema
restricts sweep names, the records do not), plus a second machine whose host, machine id and
device name are hostile; the `stages` scenarios are passed to build_analysis the way the
workflow's roofline step passes the config's. The page is loaded in headless chromium.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import html.parser
import json
import re
import shutil

import pytest

from rooflab.cli import main
from rooflab.records import read_run
from rooflab.report import build_report
from rooflab.report.names import (
    attribute,
    duplicates,
    name_part,
    script_json,
    url,
)
from rooflab.roofline import build_analysis
from tests.conftest import UNJUDGED
from tests.report_pages import (
    CHROMIUM,
    NO_CHROMIUM,
    copy_run,
    render_in_browser,
    rooflab_ok,
    scale_times,
    store_of,
)

PWNED = "PWNED"
ATTRIBUTE_XSS = "x'><img src=x onerror=\"document.title='PWNED'\"><i x='"
COMMENT = "<!--<script>"
SCRIPT_END = "</script><script>document.title='PWNED'</script>"
SLASH = "dir/../name"
UNICODE = 'wé ight "q" 重み\u2028'
HOSTILE = [ATTRIBUTE_XSS, COMMENT, SCRIPT_END, SLASH, UNICODE]

# sweep name -> factor on its times: a-b and a_b must each keep their own data
SWEEPS = {"a-b": 1.0, "a_b": 3.0, ATTRIBUTE_XSS: 1.0, COMMENT: 1.0, SLASH: 1.0, UNICODE: 1.0}
FAILED_SWEEP = ATTRIBUTE_XSS  # one of its configurations fails its check: listed under the roof
SECOND_MACHINE = {
    "host": "<!--<script>h'\"/é",
    "machine_id": "m/<!--'\"><img src=x onerror=\"document.title='PWNED'\">",
    "device_name": "dev <img src=x onerror=\"document.title='PWNED'\"> </script>",
}
SECOND_SWEEP = SCRIPT_END


def _scenario(first_stage: str) -> dict:
    return {
        "compute_path": "fp32_fma",
        "memory_level": "DRAM",
        "stages": [
            {"name": first_stage, "flops": "0.1 GFLOP", "bytes": "100 MB"},
            {"name": "B", "flops": "1 GFLOP", "bytes": "1 MB", "after": [first_stage]},
        ],
    }


STAGES = {name: _scenario(ATTRIBUTE_XSS) for name in [*HOSTILE, "a-b", "a_b", "decode_step"]}

# what other processes do is left unjudged (and not waited out): only the names matter here
TINY_CONFIG = """\
backend: cpu
disturbance: <unjudged>
timing:
  warmup_s: 0.01
  warmup_min_calls: 1
  min_time_s: 0.01
  min_samples: 5
  max_samples: 20
sweeps:
  tiny:
    m: [1, 16]
    n: [64]
    k: [64]
    dtypes: [fp32]
    layouts: [nn]
    cache_states: [warm, cold]
""".replace("<unjudged>", json.dumps({**UNJUDGED, "retake_factor": 0}))


# -- the mapping and the escaping, without a store ----------------------------------------------


def test_safe_names_keep_their_chart_names_and_others_get_a_slug_and_a_hash():
    for safe in ("weight_reuse", "decode_step", "tiny", "a-b", "a_b", "x" * 64):
        assert name_part(safe) == safe
    digest = hashlib.sha256(SLASH.encode()).hexdigest()[:10]
    assert name_part(SLASH) == f"dir____name_{digest}"
    assert name_part("Tiny") == "Tiny_" + hashlib.sha256(b"Tiny").hexdigest()[:10]
    names = [*HOSTILE, "a-b", "a_b", "a b", "a.b", "a/b", "Tiny", "tiny", "", "x" * 65, "x" * 300]
    parts = [name_part(name) for name in names]
    assert len({part.casefold() for part in parts}) == len(names)  # one to one, case ignored
    assert parts == [name_part(name) for name in names]  # stable
    for part in parts:
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", part), part


def test_shared_names_are_found_ignoring_case_and_refused():
    from rooflab.report import build
    from rooflab.store import StoreError

    assert duplicates(["a", "b", "A", "c", "b", "a"]) == ["a", "b"]
    assert duplicates(["reuse_time_a-b", "reuse_time_a_b"]) == []
    with pytest.raises(build.ChartNamesShared, match=r"share the name\(s\) 'stages_x'") as caught:
        build._refuse_shared_names(["roofline", "stages_x", "stages_X"])
    assert isinstance(caught.value, StoreError)  # the CLI prints it as one line, exit status 2


def test_script_json_has_no_markup_and_is_the_same_value():
    value = {name: [name, {"title": name}] for name in [*HOSTILE, "a & b > c", "\u2029"]}
    text = script_json(value)
    assert not set(text) & set("<>&\u2028\u2029")
    assert "</script" not in text.lower() and "<!--" not in text
    assert json.loads(text) == value
    assert attribute(ATTRIBUTE_XSS) == html.escape(ATTRIBUTE_XSS, quote=True)
    assert "'" not in attribute(ATTRIBUTE_XSS) and '"' not in attribute(ATTRIBUTE_XSS)
    assert url("a b/c.png") == "a%20b%2Fc.png" and url("x'.svg") == "x%27.svg"


def test_the_page_escapes_titles_ids_links_and_specs(monkeypatch):
    from rooflab.report import page
    from rooflab.report.page import Chart, MachineSection, index_html

    monkeypatch.setattr(page, "_vega_bundle", lambda: "/* the bundle */")
    machines = [
        MachineSection(
            title=f"{host} (cpu, {SECOND_MACHINE['device_name']})",
            anchor="machine-" + name_part(host),
            summary="",
            charts=[
                Chart(f"stages_{name_part(name)}", f"Stage bounds: {name}", name, None)
                for name in HOSTILE
            ],
        )
        for host in (SECOND_MACHINE["host"], "node-b")
    ]
    specs = {f"stages_{name_part(name)}": {"title": name} for name in HOSTILE}
    text = index_html(machines, specs)
    assert "<img" not in text and "<!--" not in text and "<i " not in text
    assert text.count("<script") == 3  # the error hook, the bundle, the embedding: no more
    for name in HOSTILE:
        assert f"Stage bounds: {html.escape(name)}</h3>" in text
    embedded = text.split("const specs = ", 1)[1].split(";\nconst done", 1)[0]
    assert json.loads(embedded) == specs


def test_machine_prefixes_are_safe_and_distinct_where_machine_ids_share_a_start(monkeypatch):
    import pandas as pd

    from rooflab.report import queries

    rows = pd.DataFrame(
        [
            {"host": "node-b", "backend": "cpu", "machine_id": "b" * 16, "position": 0},
            {"host": SECOND_MACHINE["host"], "backend": "cpu", "machine_id": "b" * 8 + "c" * 8},
            {"host": SECOND_MACHINE["host"], "backend": "cpu", "machine_id": "b" * 8 + "d" * 8},
            {"host": "other", "backend": "cuda", "machine_id": SECOND_MACHINE["machine_id"]},
        ]
    )
    monkeypatch.setattr(queries, "read_view", lambda *args, **kwargs: rows)
    prefixes = [scope["prefix"] for scope in queries.scopes(None)]
    assert prefixes[0] == "node-b_cpu_bbbbbbbb__"  # safe: as before
    assert len(set(prefixes)) == len(prefixes)
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+__", prefix) for prefix in prefixes)


# -- a real store with hostile names --------------------------------------------------------------


def _renamed(sweep: str, factor: float, fail: bool = False):
    """An edit of a copied GEMM run: its sweep renamed (its config ids too), its times scaled."""

    def edit(tables):
        for rows in tables.values():
            for row in rows:
                if row.get("sweep") is not None:
                    row["sweep"] = sweep
                config_id = row.get("config_id")
                if isinstance(config_id, str) and config_id.startswith("tiny/"):
                    row["config_id"] = sweep + config_id.removeprefix("tiny")
        scale_times(tables, factor)
        if fail:
            first = min(row["config_id"] for row in tables["correctness"])
            for row in tables["correctness"]:
                if row["config_id"] == first:
                    row["passed"] = False

    return edit


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, quick_ceilings_run):
    root = tmp_path_factory.mktemp("hostile")
    (root / "tiny.yaml").write_text(TINY_CONFIG)
    rooflab_ok(
        "measure", "gemm", "--config", "tiny.yaml", "--sweep", "tiny", "--out", "measured",
        cwd=root,
    )  # fmt: skip
    (gemm_run,) = sorted((root / "measured").iterdir())
    _, ceilings_run = quick_ceilings_run
    results = root / "results"
    shutil.copytree(ceilings_run, results / "ceilings" / "runs" / ceilings_run.name)
    (started,) = read_run(gemm_run)["runs"].column("started_at").to_pylist()
    sweeps_dir = results / "sweeps" / "renamed" / "runs"
    for i, (sweep, factor) in enumerate(SWEEPS.items()):
        edit = _renamed(sweep, factor, fail=sweep == FAILED_SWEEP)
        copy_run(gemm_run, sweeps_dir, started + dt.timedelta(minutes=i), edit=edit)
    later = started + dt.timedelta(hours=1)
    copy_run(ceilings_run, results / "ceilings" / "runs", later, runs=SECOND_MACHINE)
    copy_run(gemm_run, sweeps_dir, later, runs=SECOND_MACHINE, edit=_renamed(SECOND_SWEEP, 1.0))

    analysis = build_analysis(
        sorted((results / "ceilings" / "runs").iterdir()),
        sorted(sweeps_dir.iterdir()),
        stages=STAGES,
    )
    db = store_of(results, analysis)
    return {"db": db, "report": build_report(db, root / "report")}


def _charts_of(report, kind: str, name: str) -> list[str]:
    """The charts (of either machine) of `kind` for sweep or scenario `name`."""
    return [c for c in report.charts if c.endswith(f"__{kind}_{name_part(name)}")]


@pytest.mark.slow  # the store behind it runs a real measurement
def test_every_name_gets_its_own_charts_and_files(hostile):
    report = hostile["report"]
    assert len(set(report.charts)) == len(report.charts)
    for sweep in SWEEPS:
        for kind in ("reuse_time", "reuse_efficiency"):
            assert len(_charts_of(report, kind, sweep)) == 1, (kind, sweep)
    for scenario in STAGES:  # one per machine: both have ceilings to put them on
        assert len(_charts_of(report, "stages", scenario)) == 2, scenario
    # today's names of safe names are kept
    assert any(c.endswith("__stages_decode_step") for c in report.charts)
    assert any(c.endswith("__reuse_time_a-b") for c in report.charts)
    files = [path for path in report.files if path.suffix in (".png", ".svg")]
    assert len(set(files)) == len(files) == 2 * len(report.charts)
    assert all(path.parent == report.out_dir and path.is_file() for path in files)
    assert sorted(p.name for p in report.out_dir.iterdir() if p.suffix in (".png", ".svg")) == (
        sorted(p.name for p in files)
    )


@pytest.mark.slow  # the store behind it runs a real measurement
def test_a_dash_and_an_underscore_keep_their_own_data_and_files(hostile):
    report = hostile["report"]
    (dash,) = _charts_of(report, "reuse_time", "a-b")
    (underscore,) = _charts_of(report, "reuse_time", "a_b")
    assert dash != underscore

    def seconds(name):
        rows = [r for rows in report.specs[name]["datasets"].values() for r in rows]
        return {
            (r["series"], r["cache_state"], r["m"], r["quantity"], r["source"]): r["seconds"]
            for r in rows
            if r["source"] == "measured median"
        }

    a, b = seconds(dash), seconds(underscore)
    assert a and a.keys() == b.keys()
    assert all(b[key] == pytest.approx(3 * a[key]) for key in a)  # a_b's times were tripled
    for suffix in (".png", ".svg"):
        first, second = (report.out_dir / f"{n}{suffix}" for n in (dash, underscore))
        assert first.read_bytes() != second.read_bytes()
    assert "Sweep a-b: " in (report.out_dir / f"{dash}.svg").read_text()
    assert "Sweep a_b: " in (report.out_dir / f"{underscore}.svg").read_text()
    for sweep in ("a-b", "a_b"):  # each stages scenario too
        (name, _) = _charts_of(report, "stages", sweep)
        assert report.specs[name]["title"]["text"].startswith(f"{sweep} (measured ceilings")


@pytest.mark.slow  # the store behind it runs a real measurement
def test_the_page_holds_no_hostile_markup(hostile):
    page = hostile["report"].index.read_text()
    before_bundle, rest = page.split('<script type="module">', 1)
    embedding = rest.rsplit('<script type="module">', 1)[1]
    for text in (before_bundle, embedding.split("</script>", 1)[0]):
        assert "<img" not in text and 'onerror="document' not in text and "<!--" not in text
    assert "</script" not in embedding.split("</script>", 1)[0]
    for name in [*SWEEPS, *STAGES]:
        assert html.escape(name) in before_bundle, name
    assert html.escape(SECOND_MACHINE["device_name"]) in before_bundle
    for svg in hostile["report"].out_dir.glob("*.svg"):
        text = svg.read_text()
        assert "<img" not in text and "<script" not in text and "<!--" not in text, svg.name


@pytest.mark.slow  # the store behind it runs a real measurement
def test_a_name_with_a_slash_does_not_crash_the_cli(hostile, tmp_path):
    out = tmp_path / "r"
    assert main(["report", "--db", str(hostile["db"]), "--out", str(out)]) == 0
    assert not [path for path in out.iterdir() if path.is_dir()]
    (name,) = _charts_of(hostile["report"], "reuse_time", SLASH)
    assert (out / f"{name}.png").is_file() and "/" not in name


@pytest.mark.slow  # the store behind it runs a real measurement
def test_names_that_would_still_share_a_chart_are_refused_in_one_line(
    hostile, tmp_path, monkeypatch, capsys
):
    from rooflab.report import build, sweep_charts

    for module in (build, sweep_charts):  # every sweep one chart name
        monkeypatch.setattr(module, "name_part", lambda name: "same")
    assert main(["report", "--db", str(hostile["db"]), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "share the name(s) " in err and "reuse_time_same" in err
    assert not (tmp_path / "r").exists()  # refused before anything was written


class _Text(html.parser.HTMLParser):
    """A page's text (outside script and style) and the tags and attributes of its elements."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.text, self.tags, self.skip = [], [], 0

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self.skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self.skip -= tag in ("script", "style") and self.skip > 0

    def handle_data(self, data):
        if not self.skip:
            self.text.append(data)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
def test_hostile_names_render_as_text_in_a_real_browser_and_run_no_script(hostile, tmp_path):
    # every chart renders, no console error, no error recorded by the page; its DOM once drawn
    dom = render_in_browser(hostile["report"], tmp_path)
    parsed = _Text()
    parsed.feed(dom)
    (title,) = re.findall(r"<title>(.*?)</title>", dom, re.S)
    assert html.unescape(title) == "rooflab report: 2 machines"  # no script set it
    assert PWNED not in title
    assert not [tag for tag, _ in parsed.tags if tag in ("img", "i")]
    assert not [attrs for _, attrs in parsed.tags if any(k.startswith("on") for k in attrs)]
    text = "".join(parsed.text)
    for sweep in SWEEPS:  # each sweep's charts headed by its name
        assert f"Sweep {sweep}: time vs M" in text, sweep
        assert f"Sweep {sweep}: efficiency vs M" in text, sweep
    for scenario in STAGES:
        assert f"Stage bounds: {scenario}" in text, scenario
    assert f"{SECOND_MACHINE['host']} (cpu, {SECOND_MACHINE['device_name']})" in text
    assert SECOND_MACHINE["machine_id"] in text  # the summary's machine id
    assert f"{FAILED_SWEEP}/fp32/nn/" in text  # the failed configuration, under the Roofline
    # every machine's anchor is an element of the page, linked from the list of machines
    links = [attrs["href"] for tag, attrs in parsed.tags if tag == "a" and "href" in attrs]
    ids = {attrs["id"] for _, attrs in parsed.tags if "id" in attrs}
    anchors = [link[1:] for link in links if link.startswith("#")]
    assert len(anchors) == 2 and set(anchors) <= ids
