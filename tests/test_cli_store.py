"""Issue 27, the store's command line: `rooflab query | runs | sql | schema` and `rooflab model
--measured`, run as the installed command against a real store: the `quick_ceilings_run` of this
machine, two real `rooflab measure gemm` runs of one sweep (a rerun), the roofline step's real
derived tables, and the constructed runs of two other machines (tests/test_store.py)."""

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rooflab.cli import RUN_KINDS, main
from rooflab.devices import load_device_presets
from rooflab.records import DERIVED_TABLES, POINT_VIEWS, TABLES
from rooflab.roofline import build_analysis, write_analysis
from rooflab.store import VIEWS_SQL, ingest
from rooflab.store.comparisons import STORE_TABLES
from rooflab.vocabulary import DIAGNOSIS_CAUSES
from tests.conftest import UNJUDGED, installed_script, run_rooflab
from tests.store_runs import two_machines
from tests.table_rows import clock_or_reason

REPO = Path(__file__).resolve().parents[1]
ARTICLE_STAGES = "config/stages/article-two-stage.yaml"
TINY = """\
backend: cpu
timing: {warmup_s: 0.01, warmup_min_calls: 1, min_time_s: 0.02, min_samples: 5, max_samples: 50}
disturbance: <unjudged>
sweeps:
  tiny: {m: [1, 16], n: [64], k: [64], dtypes: [fp32, fp64], layouts: [nn],
         cache_states: [warm, cold]}
""".replace("<unjudged>", json.dumps(UNJUDGED))


def ok(*args, cwd: Path | None = None) -> str:
    result = run_rooflab(*args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def as_json(*args) -> list[dict]:
    return json.loads(ok(*args, "--format", "json"))


def query(store: Path, sql: str) -> list[dict]:
    """The rows of `rooflab query SQL` on the store."""
    return as_json("query", sql, "--db", store)


def article_stages(*args) -> str:
    """`rooflab model stages` of the article's two stages, with `args`."""
    return ok("model", "stages", ARTICLE_STAGES, *args, cwd=REPO)


def one_line_error(result: subprocess.CompletedProcess, says: str) -> str:
    """The one line a refused command prints: status 2, no traceback, `rooflab: error:` once."""
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rooflab: error: ")
    assert not lines[0].startswith("rooflab: error: rooflab")  # one prefix
    assert says in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory, quick_ceilings_run) -> Path:
    root = tmp_path_factory.mktemp("cli_store")
    (root / "tiny.yaml").write_text(TINY)
    results = root / "results"
    _, ceilings_run = quick_ceilings_run
    shutil.copytree(ceilings_run, results / "ceilings" / "runs" / ceilings_run.name)
    measure = ["measure", "gemm", "--config", "tiny.yaml", "--sweep", "tiny"]
    for _ in range(2):  # the sweep and its rerun
        ok(*measure, "--out", "results/sweeps/tiny/runs", cwd=root)
    two_machines(results / "others")  # m-alpha (host alpha) and m-beta (host beta), in 2025
    analysis = build_analysis(
        [results / "ceilings" / "runs" / ceilings_run.name],
        sorted((results / "sweeps" / "tiny" / "runs").iterdir()),
    )
    assert analysis.points.model, "the tiny sweep gave no Roofline points"
    write_analysis(analysis, results / "roofline")
    db = results / "rooflab.duckdb"
    ingest(db, results)
    return db


@pytest.fixture(scope="module")
def here(store) -> dict:
    """This machine's runs row of the quick ceilings run."""
    (row,) = query(
        store, "SELECT * FROM runs WHERE kind = 'ceilings' AND host NOT IN ('alpha', 'beta')"
    )
    return row


# -- 8: a closed pipe, one unit per column --------------------------------------------------------


BIG = "SELECT range AS i, range * 1e-6 AS t_s FROM range(30000)"  # 0.5 MB: past any pipe buffer


def test_a_reader_that_stops_early_ends_the_command_quietly(store):
    reader = subprocess.Popen(
        [installed_script("rooflab"), "query", BIG, "--db", str(store), "--limit", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout.readline().split() == ["i", "t_s", "(ms)"]
    reader.stdout.close()  # as `head` does
    assert reader.wait(timeout=60) == 141  # 128 + SIGPIPE, as the shell reports a stopped writer
    assert reader.stderr.read() == ""
    pipeline = (
        f'"$0" query "{BIG}" --db "$1" --limit 0 | head -n 3; echo "status ${{PIPESTATUS[0]}}"'
    )
    shell = subprocess.run(
        ["bash", "-c", pipeline, installed_script("rooflab"), str(store)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout.splitlines()[1:] == ["    0         0", "    1     0.001", "status 141"]
    assert shell.stderr == ""


def test_a_table_gives_each_column_with_a_unit_one_unit_in_its_header(store):
    sql = (
        "SELECT config_id, cache_state, n_samples, flops, bytes_model, median_s, "
        "achieved_flops_per_s, noisy FROM latest_gemm_points ORDER BY config_id, cache_state"
    )
    table = ok("query", sql, "--db", store).splitlines()
    points = query(store, sql)
    header = re.split(r"\s{2,}", table[0].strip())
    units = {
        "flops": ("FLOP", {"": 1, "k": 1e3, "M": 1e6}),
        "bytes_model": ("B", {"": 1, "k": 1e3, "M": 1e6}),
        "median_s": ("s", {"": 1, "m": 1e-3, "μ": 1e-6, "n": 1e-9}),
        "achieved_flops_per_s": ("FLOP/s", {"M": 1e6, "G": 1e9, "T": 1e12}),
    }
    assert header[:3] == ["config_id", "cache_state", "n_samples"] and header[-1] == "noisy"
    scales = {}
    for column, (unit, prefixes) in units.items():
        scales[column] = prefixes[header_unit(header, column).removesuffix(unit)]
    for line, point in zip(table[1:], points, strict=True):
        cells = dict(zip(header, line.split(), strict=True))
        assert cells["n_samples"] == str(point["n_samples"])  # no unit: as it is
        for column in units:
            shown = float(cells[f"{column} ({header_unit(header, column)})"])
            assert shown * scales[column] == pytest.approx(point[column], rel=1e-4)
    # every value of a column in the same unit: no cell carries a unit of its own
    assert not re.search(r"\d (k|M|G)?(FLOP|B)\b|\d (m|μ|n)?s\b", "\n".join(table[1:]))
    runs = ok("runs", "--db", store).splitlines()[0].split()
    # the name says its unit (MHz, not scaled): no "(MHz)" after it (issue 44)
    assert {"clock_min_mhz", "clock_max_mhz"} <= set(runs) and "(MHz)" not in runs


def header_unit(header: list[str], column: str) -> str:
    (found,) = [h for h in header if h.startswith(f"{column} (")]
    return found[len(column) + 2 : -1]


# -- 9: latest_roofline_points, the documented keys -----------------------------------------------


def test_latest_roofline_points_holds_the_newest_runs_points_only(store):
    timing = as_json("runs", "--kind", "gemm", "--sweep", "tiny", "--db", store)
    assert len(timing) == 2
    older, newer = (r["run_id"] for r in timing)
    every = query(store, "SELECT * FROM roofline_points")
    assert {p["run_id"] for p in every} == {older, newer}  # a rerun keeps both in roofline_points
    latest = query(store, "SELECT * FROM latest_roofline_points")
    assert {p["run_id"] for p in latest} == {newer}
    keys = [(p["machine_id"], p["config_id"], p["cache_state"], p["level"]) for p in latest]
    assert len(keys) == len(set(keys)) == len([p for p in every if p["run_id"] == newer])
    assert {p["backend"] for p in latest} == {"cpu"} and all(p["started_at"] for p in latest)
    # the README's query, as it is printed there
    readme = (REPO / "README.md").read_text()
    (sql,) = [q for q in re.findall(r"```sql\n(.*?)```", readme, re.S) if "roofline_points" in q]
    assert "FROM latest_roofline_points" in sql
    assert len(query(store, sql)) == len(latest)


def test_ceiling_conditions_joins_each_ceiling_to_its_readings(store, here):
    ceilings = query(store, f"SELECT * FROM ceilings WHERE run_id = '{here['run_id']}'")
    readings = query(store, f"SELECT * FROM ceiling_conditions WHERE run_id = '{here['run_id']}'")
    for ceiling in ceilings:
        key = ("kind", "name", "kernel")  # a level has a row per kernel (triad, triad_avx2)
        mine = [r for r in readings if all(r[k] == ceiling[k] for k in key)]
        assert {r["phase"] for r in mine} >= {"before", "after"}, ceiling["name"]
        expected = re.sub(r"/ws[0-9]+$", "", ceiling["config_id"])
        assert {r["conditions_config_id"] for r in mine} == {expected}
        assert all(clock_or_reason(r) for r in mine), mine
    bandwidth = [c for c in ceilings if c["kind"] == "bandwidth"]
    assert bandwidth and all(c["config_id"].startswith("stream/") for c in bandwidth)


def test_the_store_page_names_every_join_key_and_run_kind():
    page = (REPO / "docs" / "store.md").read_text()
    tables = page.split("| table | one row per | columns |")[1].split("\n\n")[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]+ \| (.+) \|$", tables, re.M))
    keys = (
        "config_id",
        "cache_state",
        "machine_id",
        "ceilings_run_id",
        "counters_run_id",
        "timing_run_id",
        "timing_cache_state",
    )
    for table, schema in TABLES.items():
        for key in keys:
            if key in schema.names:
                assert f"`{key}`" in rows[table], f"docs/store.md: {table} lacks `{key}`"
    kinds = re.search(r"`kind` \(([^)]*)\)", rows["runs"]).group(1)
    assert set(kinds.split(", ")) == set(RUN_KINDS)
    assert "ceiling_conditions" in page and "latest_roofline_points" in page
    assert "regexp_replace(ceilings.config_id, '/ws[0-9]+$', '')" in page


# -- 10: runs filters, schema ---------------------------------------------------------------------


def test_runs_are_chosen_by_kind_sweep_machine_and_last(store, here):
    every = as_json("runs", "--db", store)
    assert len(every) == 1 + 2 + 4  # the quick ceilings, the sweep and its rerun, the others
    gemm = as_json("runs", "--kind", "gemm", "--db", store)
    assert gemm and {r["kind"] for r in gemm} == {"gemm"}
    assert {r["sweep"] for r in as_json("runs", "--sweep", "decode", "--db", store)} == {"decode"}
    alpha = as_json("runs", "--machine", "alpha", "--db", store)  # a host
    assert {r["machine_id"] for r in alpha} == {"m-alpha"} and len(alpha) == 2
    assert as_json("runs", "--machine", "m-b", "--db", store)[0]["host"] == "beta"  # a prefix
    mine = as_json("runs", "--machine", here["machine_id"][:6], "--db", store)
    assert {r["machine_id"] for r in mine} == {here["machine_id"]}
    last = as_json("runs", "--last", "2", "--db", store)
    assert [r["run_id"] for r in last] == [r["run_id"] for r in every[-2:]]  # oldest first
    both = as_json("runs", "--kind", "gemm", "--machine", "beta", "--last", "5", "--db", store)
    assert [(r["kind"], r["host"]) for r in both] == [("gemm", "beta")]
    table = ok("runs", "--kind", "ceilings", "--db", store).splitlines()
    assert len(table) == 1 + 3 and table[0].split()[:2] == ["run_id", "kind"]
    one_line_error(
        run_rooflab("runs", "--machine", "gamma", "--db", store),
        "no runs of a machine 'gamma' (a machine_id prefix or host)",
    )
    one_line_error(
        run_rooflab("runs", "--last", "0", "--db", store),
        "runs: argument --last: expects a positive integer, got '0'",
    )
    one_line_error(run_rooflab("runs", "--kind", "sweeps", "--db", store), "invalid choice")


def test_schema_lists_tables_and_views_and_a_relations_columns_types_and_units(store):
    listed = {r["name"]: r for r in as_json("schema", "--db", store)}
    assert set(listed) == {*TABLES, *VIEWS_SQL, *STORE_TABLES}
    for name in TABLES:
        kind = "derived table" if name in DERIVED_TABLES else "table"
        assert listed[name]["kind"] == kind and listed[name]["columns"] >= len(TABLES[name])
    assert {listed[name]["kind"] for name in VIEWS_SQL} == {"view"}
    columns = as_json("schema", "gemm_points", "--db", store)
    assert [c["column"] for c in columns] == POINT_VIEWS["gemm_points"][1]
    units = {c["column"]: c["unit"] for c in columns}
    assert units["median_s"] == "s" and units["bytes_model"] == units["flush_bytes"] == "B"
    assert units["flops"] == "FLOP" and units["achieved_flops_per_s"] == "FLOP/s"
    assert units["config_id"] == units["n_samples"] == "" and units["sm_clock_min_mhz"] == "MHz"
    types = {c["column"]: c["type"] for c in columns}
    assert types["median_s"] == "DOUBLE" and types["config_id"] == "VARCHAR"
    ceilings = {c["column"]: c["unit"] for c in as_json("schema", "ceilings", "--db", store)}
    assert ceilings["value"] == "per row: unit"
    conditions = {c["column"]: c["unit"] for c in as_json("schema", "conditions", "--db", store)}
    assert (conditions["temp_c"], conditions["power_w"]) == ("°C", "W")
    assert conditions["cpu_ghz_measured"] == "GHz"
    points = {c["column"]: c["unit"] for c in as_json("schema", "roofline_points", "--db", store)}
    assert points["bandwidth_b_per_s"] == "B/s" and points["intensity"] == "FLOP/B"
    table = [line.split() for line in ok("schema", "samples", "--db", store).splitlines()]
    assert table[0] == ["column", "type", "unit"]
    assert ["seconds", "DOUBLE", "s"] in table
    assert ["amount", "DOUBLE", "per", "row:", "amount_unit"] in table
    one_line_error(
        run_rooflab("schema", "gemm_point", "--db", store), "no table or view 'gemm_point' in"
    )


# -- 11: rooflab sql ------------------------------------------------------------------------------


def sql_session(store, script: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [installed_script("rooflab"), "sql", "--db", str(store), *args],
        input=script,
        capture_output=True,
        text=True,
        check=False,
    )


def test_sql_runs_each_statement_of_a_pipe_as_query_does(store):
    first = "SELECT kind, count(*) AS n FROM runs GROUP BY kind ORDER BY kind"
    second = "SELECT 'a;b' AS text, median_s FROM latest_gemm_points ORDER BY median_s LIMIT 2"
    script = f"-- two statements\n{first}\n;\n{second}; SELECT 42 AS answer;\n\nSELECT 7 AS last"
    session = sql_session(store, script)
    assert session.returncode == 0 and session.stderr == ""
    expected = [ok("query", q, "--db", store) for q in (first, second, "SELECT 42 AS answer")]
    assert session.stdout == "\n".join([*expected, ok("query", "SELECT 7 AS last", "--db", store)])
    as_json_ = sql_session(store, f"{first};\nSELECT 42 AS answer;", "--format", "json")
    arrays = as_json_.stdout.replace("]\n[", "]\n\x00[").split("\x00")
    assert [json.loads(a) for a in arrays][1] == [{"answer": 42}]


def test_sql_says_a_failed_statement_in_one_line_and_goes_on(store, tmp_path):
    outside = tmp_path / "out.csv"
    script = (
        "SELECT * FROM no_such_view;\n"
        f"COPY (SELECT 1) TO '{outside}';\n"
        "DELETE FROM runs;\n"
        "SELECT count(*) AS runs FROM runs;\n"
    )
    session = sql_session(store, script)
    assert session.returncode == 2
    assert session.stdout.split() == ["runs", "7"]
    errors = session.stderr.splitlines()
    assert len(errors) == 4 and all(e.startswith("rooflab: error: ") for e in errors)
    assert "Catalog Error" in errors[0] and "query refused" in errors[1]
    assert "read-only" in errors[2] and errors[3] == (
        "rooflab: error: 3 of 4 statement(s) failed (said above)"
    )
    assert not outside.exists() and "Traceback" not in session.stderr


def test_sql_holds_the_store_only_while_a_statement_runs(store):
    session = subprocess.Popen(
        [installed_script("rooflab"), "sql", "--db", str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        session.stdin.write("SELECT 1 AS one;\n")
        session.stdin.flush()
        assert session.stdout.readline().split() == ["one"]
        assert session.stdout.readline().split() == ["1"]
        # between statements, a writer gets the file at once
        ingested = run_rooflab(
            "store", "ingest", "--db", store, "--results", store.parent, "--lock-timeout", "0"
        )
        assert ingested.returncode == 0, ingested.stderr
        session.stdin.write("SELECT 2 AS two;\n")
        session.stdin.close()
        assert session.stdout.read().split() == ["two", "2"]
        assert session.wait(timeout=60) == 0
    finally:
        session.kill()


# -- 12: help, errors, a what-if on a preset ------------------------------------------------------


def test_help_says_what_each_option_does(store):
    gemm = ok("measure", "gemm", "-h")
    usage = " ".join(gemm.split("\n\n")[0].split())
    assert " --config CONFIG " in usage and "[--config" not in usage  # required, and says so
    assert "default settings when omitted" not in gemm and "(required)" in gemm
    ceilings = ok("measure", "ceilings", "-h")
    assert "[--config CONFIG]" in ceilings and "default settings when omitted" in ceilings
    assert "[--config" not in ok("measure", "counters", "-h").split("\n\n")[0]
    one_line_error(
        run_rooflab(
            "measure", "gemm", "--sweep", "tiny", "--out", store.parent / "x", refused=True
        ),
        "measure gemm: the following arguments are required: --config",
    )
    for command in (["query", "-h"], ["runs", "-h"], ["model", "gemm", "-h"], ["sql", "-h"]):
        text = " ".join(ok(*command).split())
        assert "--format {table,csv,json} table (the default" in text, command
    model = " ".join(ok("model", "gemm", "-h").split())
    presets = ", ".join(load_device_presets())
    assert f"--device NAME datasheet preset of config/devices.yaml: {presets}" in model


def test_a_usage_error_has_one_prefix():
    result = run_rooflab("model", "gemm", "--n", "8", "--peak", "1 TFLOP/s")
    assert result.stderr == (
        "rooflab: error: model gemm: the following arguments are required: --m, --k\n"
    )
    assert result.returncode == 2


def test_one_figure_of_a_preset_can_be_replaced():
    args = ["model", "gemm", "--m", "1,256", "--n", "8192", "--k", "8192", "--dtype", "bf16"]
    args += ["--device", "h100-sxm"]  # the preset: each call below replaces one of its figures
    rows = as_json(*args, "--bandwidth", "3 TB/s")
    assert {(r["peak_flops_per_s"], r["bandwidth_b_per_s"]) for r in rows} == {(989.4e12, 3e12)}
    assert {(r["peak_source"], r["bandwidth_source"]) for r in rows} == {
        ("datasheet h100-sxm, path bf16", "--bandwidth")
    }
    table = ok(*args, "--peak", "500 TFLOP/s").splitlines()
    assert "peak 500 TFLOP/s, bandwidth 3.35 TB/s" in table[0]
    assert table[1] == "peak from --peak; bandwidth from datasheet h100-sxm, level HBM"
    stages = article_stages("--device", "h100-sxm", "--path", "fp64", "--bandwidth", "2 TB/s")
    assert stages.splitlines()[-1] == (
        "ceilings       peak 34 TFLOP/s from datasheet h100-sxm, path fp64, "
        "bandwidth 2 TB/s from --bandwidth"
    )


# -- 13: model --measured -------------------------------------------------------------------------


GEMM = ["model", "gemm", "--m", "1,256", "--n", "1024", "--k", "1024"]


def best(store, run_id: str, kind: str, name: str) -> dict:
    (row,) = query(
        store,
        "SELECT arg_max(kernel, value) AS kernel, max(value) AS value FROM latest_ceilings "
        f"WHERE run_id = '{run_id}' AND kind = '{kind}' AND name = '{name}'",
    )
    return row


def test_model_measured_draws_the_bound_on_the_newest_ceilings(store, here):
    rows = as_json(*GEMM, "--dtype", "fp32", "--measured", "--db", store)
    fma = best(store, here["run_id"], "compute", "fp32_fma")
    (memory,) = [
        lv for lv in ("DRAM", "HBM") if best(store, here["run_id"], "bandwidth", lv)["value"]
    ]
    dram = best(store, here["run_id"], "bandwidth", memory)
    assert {r["peak_flops_per_s"] for r in rows} == {fma["value"]}
    assert {r["bandwidth_b_per_s"] for r in rows} == {dram["value"]}
    where = (
        f"ceilings run {here['run_id']} of machine {here['machine_id']} (host {here['host']}, cpu)"
    )
    assert rows[0]["peak_source"] == f"measured fp32_fma ({fma['kernel']}), {where}"
    assert rows[0]["bandwidth_source"] == f"measured {memory} ({dram['kernel']}), {where}"
    m1 = rows[0]
    assert m1["bound_s"] == pytest.approx(
        max(m1["flops"] / fma["value"], m1["bytes"] / dram["value"])
    )
    table = ok(*GEMM, "--dtype", "fp32", "--measured", here["host"], "--db", store).splitlines()
    assert table[1] == (
        f"peak from measured fp32_fma ({fma['kernel']}); bandwidth from measured {memory} "
        f"({dram['kernel']}); {where}"
    )
    assert table[2].split()[:3] == ["m", "n", "k"] and len(table) == 5


def test_model_measured_of_a_named_machine_with_a_path_a_level_and_a_what_if(store):
    alpha = as_json(*GEMM, "--dtype", "fp64", "--measured", "alpha", "--db", store)[0]
    assert (alpha["peak_flops_per_s"], alpha["bandwidth_b_per_s"]) == (1e12, 50e9)
    assert "machine m-alpha (host alpha, cpu)" in alpha["peak_source"]
    beta = as_json(*GEMM, "--dtype", "fp64", "--measured", "m-b", "--level", "L2", "--db", store)
    assert beta[0]["bandwidth_b_per_s"] == 200e9
    assert beta[0]["bandwidth_source"].startswith("measured L2 (triad), ceilings run ")
    faster = as_json(
        *GEMM, "--dtype", "fp64", "--measured", "alpha", "--bandwidth", "100 GB/s", "--db", store
    )[0]
    assert (faster["peak_flops_per_s"], faster["bandwidth_b_per_s"]) == (1e12, 100e9)
    assert faster["bandwidth_source"] == "--bandwidth"
    assert faster["memory_s"] == pytest.approx(alpha["memory_s"] / 2)
    stages = json.loads(
        article_stages(
            "--measured", "alpha", "--path", "fp64_fma", "--db", store, "--format", "json"
        )
    )
    assert (stages["peak_flops_per_s"], stages["bandwidth_b_per_s"]) == (1e12, 50e9)
    assert math.isclose(stages["bound_s"], 0.2e9 / 50e9 + 12e9 / 1e12)


def test_a_stage_file_names_its_measured_ceilings(store, tmp_path):
    named = tmp_path / "named.yaml"
    named.write_text(
        "compute_path: fp64_fma\nmemory_level: L2\n" + (REPO / ARTICLE_STAGES).read_text()
    )
    out = ok("model", "stages", named, "--measured", "beta", "--db", store).splitlines()
    assert out[-1].startswith(
        "ceilings       peak 1 TFLOP/s from measured fp64_fma (fma_chains), bandwidth 200 GB/s "
        "from measured L2 (triad); ceilings run "
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--dtype", "fp32", "--measured", "m-"], "machine 'm-' is ambiguous in"),
        (["--dtype", "fp32", "--measured", "gamma"], "no ceilings of a machine 'gamma'"),
        (["--dtype", "bf16", "--measured"], "no compute path pairs with bf16 on cpu; give --path"),
        (["--dtype", "fp32", "--measured", "alpha"], "no measured compute ceiling 'fp32_fma'"),
        (["--dtype", "fp64", "--measured", "alpha", "--level", "HBM"], "no measured bandwidth"),
        (
            ["--x-dtype", "fp32", "--w-dtype", "fp64", "--y-dtype", "fp64", "--measured"],
            "--path is needed with --measured here",
        ),
        (["--dtype", "fp32", "--measured", "--device", "h200-sxm"], "not both"),
    ],
)
def test_model_measured_refusals_are_one_line(store, args, says):
    line = one_line_error(run_rooflab(*GEMM, *args, "--db", store), says)
    if "ambiguous" in says:
        assert "m-alpha (host alpha)" in line and "m-beta (host beta)" in line


def test_model_measured_without_ceilings_or_store_is_one_line(tmp_path):
    empty = tmp_path / "results"
    empty.mkdir()
    ingest(empty / "rooflab.duckdb", empty)
    one_line_error(
        run_rooflab(*GEMM, "--dtype", "fp32", "--measured", "--db", empty / "rooflab.duckdb"),
        "no ceilings in",
    )
    one_line_error(
        run_rooflab(*GEMM, "--dtype", "fp32", "--measured", "--db", tmp_path / "none.duckdb"),
        "no store at",
    )


def test_query_caps_its_rows_and_its_time_and_says_so(store, capsys):
    big = "SELECT i FROM range(25000) t(i)"
    assert main(["query", big, "--db", str(store), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 10_000  # the default --limit, and stdout stays valid JSON
    assert "the first 10000 rows; the query has more (--limit N, 0 for all)" in err
    assert main(["query", big, "--db", str(store), "--format", "json", "--limit", "0"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 25_000 and not err
    slow = "SELECT count(*) FROM range(100000) a, range(100000) b, range(100000) c"
    assert main(["query", slow, "--db", str(store), "--timeout", "0.5"]) == 2
    err = capsys.readouterr().err
    assert (
        err.strip() == "rooflab: error: query stopped after 0.5 s (--timeout); nothing was changed"
    )


# -- issue 43: a diagnosis for every point ---------------------------------------------------------


def test_explain_gives_every_point_one_cause_with_the_stores_own_figures(store):
    """Every point of the measured store has one diagnosis in the `diagnoses` view, and each
    figure of its evidence named by a roofline_points column is that column's stored value."""
    points = query(store, "SELECT * FROM latest_roofline_points")
    diagnoses = as_json("explain", "--db", store)
    place = lambda row, key: (row[key], row["cache_state"], row["level"])  # noqa: E731
    assert sorted(place(d, "key") for d in diagnoses) == sorted(
        place(p, "config_id") for p in points
    )
    by_place = {place(p, "config_id"): p for p in points}
    for diagnosis in diagnoses:
        assert diagnosis["cause"] in DIAGNOSIS_CAUSES and diagnosis["next_step"], diagnosis
        assert diagnosis["kind"] in ("gemm", "workload", "counted")
        stored = by_place[place(diagnosis, "key")]
        assert diagnosis["efficiency"] == stored["efficiency"]
        named = {k.split(".", 1)[1]: v for k, v in diagnosis["evidence"].items() if "." in k}
        assert named and all(stored[column] == value for column, value in named.items())
        predicted = diagnosis["predicted_s"]
        assert (
            predicted is None
            or 0 < predicted <= diagnosis["median_s"] * 1.05
            or (diagnosis["cause"] == "above_roof")
        )
    first = diagnoses[0]
    same = as_json("explain", "--db", store, "--cause", first["cause"], "--key", first["key"])
    assert {d["cause"] for d in same} == {first["cause"]} and first in same
    run = as_json("explain", "--db", store, "--run", first["run_id"])
    assert {d["run_id"] for d in run} == {first["run_id"]} and len(run) >= 1
    table = ok("explain", "--db", store, "--key", first["key"]).splitlines()
    assert table[0].split()[:3] == ["key", "kind", "cache_state"] and "evidence" not in table[0]
    one_line_error(run_rooflab("explain", "--db", store, "--run", "nope"), "run nope is not in")
    refused = run_rooflab("explain", "--db", store, "--cause", "slow")
    assert refused.returncode == 2 and "invalid choice: 'slow'" in refused.stderr
