"""Imported profiles in the store (docs/imports.md): an import run (kind import) with its
provenance and operators, placed by the roofline step on this machine's measured ceilings (the
suite's quick ceilings run), ingested, compared operator by operator across two traces of the same
model, and the command line's `rooflab import` on measured roofs and on bad input."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from rooflab.backends.selection import select_backend
from rooflab.cli import main
from rooflab.experiments.imported_runs import import_tables
from rooflab.imports import read_profile
from rooflab.records import write_run
from rooflab.roofline import analyse_results
from rooflab.store import connect_read_only
from rooflab.store.import_comparisons import compare_imports
from tests.import_store import TRACES
from tests.report_pages import store_of
from tests.store_runs import rows


@pytest.fixture(scope="module")
def store(tmp_path_factory, quick_ceilings_run):
    """results/ with this host's quick ceilings and two imports of the recorded MLP traces (the
    addmm fused and not), derived and ingested: (db, {name: run_id})."""
    results = tmp_path_factory.mktemp("imports") / "results"
    _, ceilings = quick_ceilings_run
    shutil.copytree(ceilings, results / "ceilings" / "runs" / ceilings.name)
    backend = select_backend("cpu")
    runs = {}
    for name, file in (("mlp_unfused", "mlp_unfused.json.gz"), ("mlp", "mlp.json.gz")):
        tables = import_tables(read_profile("torch", TRACES / file), name, backend)
        run_id = tables["runs"][0]["run_id"]
        write_run(results / "imports" / name / "runs", run_id, tables)
        runs[name] = run_id
    # an H200's export read on this CPU machine (the backend the campaign's job would choose)
    export = Path(__file__).parent / "fixtures/ncu/gemm/bf16_m4096_n4096_k4096_cache-all.raw.csv"
    tables = import_tables(read_profile("ncu", export), "gemm", select_backend("auto"))
    runs["gemm"] = tables["runs"][0]["run_id"]
    write_run(results / "imports" / "gemm" / "runs", runs["gemm"], tables)
    return store_of(results, analyse_results(results)), runs


def test_an_import_run_keeps_where_its_profile_came_from(store):
    db, runs = store
    (profile,) = rows(db, f"SELECT * FROM imported_profiles WHERE run_id = '{runs['mlp']}'")
    digest = hashlib.sha256((TRACES / "mlp.json.gz").read_bytes()).hexdigest()
    assert (profile["tool"], profile["file"], profile["sha256"]) == ("torch", "mlp.json.gz", digest)
    assert profile["device"] == "cpu" and profile["recorded_at"].startswith("2026-12-05T06:39")
    (run,) = rows(db, f"SELECT kind, sweep, git_commit FROM runs WHERE run_id = '{runs['mlp']}'")
    assert (run["kind"], run["sweep"]) == ("import", "mlp") and run["git_commit"]
    operators = rows(db, f"SELECT * FROM imported_operators WHERE run_id = '{runs['mlp']}'")
    recorded = read_profile("torch", TRACES / "mlp.json.gz").operators
    assert len(operators) == profile["operators"] == len(recorded)
    addmm = next(o for o in operators if o["op"] == "aten::addmm")
    assert json.loads(addmm["input_dims"])[1] == [64, 256]  # the batch's activations
    assert addmm["flops"] == 2 * 64 * 256 * 512 and addmm["nested"] and addmm["parent"] is not None


def test_the_roofline_step_places_imported_operators_on_this_machines_ceilings(store):
    db, runs = store
    points = rows(db, f"SELECT * FROM imported_points WHERE run_id = '{runs['mlp']}'")
    (ceilings_run,) = {p["ceilings_run_id"] for p in points}
    assert ceilings_run is not None
    addmm = [p for p in points if p["op"] == "aten::addmm"]
    assert addmm and all(p["compute_path"] == "fp32_fma" and p["efficiency"] > 0 for p in addmm)
    # 64 x 256 and 256 x 512 fp32 operands, 723 kB: in a cache of this host, not the memory
    assert all(p["level"] not in ("DRAM", "HBM") for p in addmm)
    assert all(p["cause"] and p["next_step"] for p in addmm)
    assert {p["unplaced"] for p in points if p["op"] == "aten::copy_"} == {"no ledger"}


def test_a_gpus_export_is_never_placed_under_a_cpus_roofs(store):
    db, runs = store
    (backend,) = rows(db, f"SELECT backend FROM runs WHERE run_id = '{runs['gemm']}'")
    if backend["backend"] != "cpu":
        pytest.skip("this machine has a GPU: the export goes on its GPU ceilings")
    (point,) = rows(db, f"SELECT * FROM imported_points WHERE run_id = '{runs['gemm']}'")
    assert point["efficiency"] is None and point["ceilings_run_id"] is None
    assert point["unplaced"].startswith("recorded on NVIDIA H200, imported on a cpu machine")


def test_two_traces_of_one_model_are_compared_operator_by_operator(store):
    db, runs = store
    with connect_read_only(db) as connection:
        compared = compare_imports(connection, runs["mlp_unfused"], runs["mlp"])
    keys = {row["key"] for row in compared}
    # the backward matmuls are in both traces, three steps of each: three samples per key
    assert any(key.startswith("aten::mm [[64, 128], [128, 512]]") for key in keys)
    assert not any(key.startswith("aten::addmm") for key in keys)  # only the fused trace has it
    assert {row["kind"] for row in compared} == {"import"}
    assert all(row["baseline_run_id"] == runs["mlp_unfused"] for row in compared)
    assert all(row["verdict"] in ("faster", "slower", "same", "incomparable", "inconclusive")
               for row in compared)  # fmt: skip


def test_rooflab_compare_names_two_import_runs(store, capsys):
    db, runs = store
    status = main(["compare", "--db", str(db), "--baseline", runs["mlp_unfused"],
                   "--candidate", runs["mlp"], "--format", "json"])  # fmt: skip
    assert status == 0
    compared = json.loads(capsys.readouterr().out)
    assert compared and {row["kind"] for row in compared} == {"import"}


def test_rooflab_import_places_a_trace_on_this_hosts_measured_roofs(store, capsys):
    db, _ = store
    assert main(["import", "torch", str(TRACES / "elementwise.json"), "--db", str(db),
                 "--format", "json"]) == 0  # fmt: skip
    out = capsys.readouterr()
    points = json.loads(out.out)
    placed = [p for p in points if p["efficiency"] is not None]
    assert placed and {p["compute_path"] for p in placed} == {"fp32_fma"}
    # 2^20 fp32 elements in and out, 8 MiB: past the L2, under the L3 of this host or in DRAM
    assert {p["op"] for p in placed} >= {"aten::mul", "aten::add", "aten::sum"}
    assert "placed on ceilings run" in out.err and "cpu time without a ledger" in out.err
    # the trace's timeline: end to end, its thread's busy time and gaps, the top operators
    assert "rooflab: end to end " in out.err and " busy, " in out.err
    assert "top operators by share of end to end: aten::" in out.err


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"traceEvents": [{"ph": "X", "cat": "cpu_op"', "truncated"),
        ("[1, 2, 3]", "traceEvents"),
    ],
)
def test_a_bad_trace_is_one_line_and_exit_2(tmp_path, capsys, content, says):
    bad = tmp_path / "trace.json"
    bad.write_text(content)
    assert main(["import", "torch", str(bad), "--device", "h200-sxm"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and says in err


def test_a_trace_without_shapes_says_to_record_them(capsys):
    assert main(["import", "torch", str(TRACES / "mlp_noshapes.json"), "--device", "h200-sxm"]) == 2
    assert "record_shapes=True" in capsys.readouterr().err


@pytest.mark.slow
def test_the_campaign_imports_each_file_and_again_when_it_changes(tmp_path):
    import os
    import subprocess

    from tests.campaigns import TINY
    from tests.conftest import copy_workflow, installed_script

    workdir = copy_workflow(tmp_path, {**TINY, "imports": {"mlp": {"tool": "torch",
                                       "file": "traces/mlp.json.gz"}}})  # fmt: skip
    (workdir / "traces").mkdir()
    trace = shutil.copy(TRACES / "mlp.json.gz", workdir / "traces" / "mlp.json.gz")
    receipt = "results/imports/mlp/receipt.json"

    def snakemake(*args):
        command = [installed_script("snakemake"), "--cores", "1", receipt, *args]
        return subprocess.run(command, cwd=workdir, capture_output=True, text=True, check=False)

    done = snakemake()
    assert done.returncode == 0, done.stderr
    kept = json.loads((workdir / receipt).read_text())
    assert kept["kind"] == "import" and kept["sweep"] == "mlp"
    log = (workdir / "logs" / "import_profile" / "mlp.log").read_text()
    assert "336 operators of mlp.json.gz (torch" in log
    assert "Nothing to be done" in snakemake("-n").stdout + snakemake("-n").stderr
    os.utime(trace)  # touched, not changed (Snakemake keeps small inputs' checksums): no rerun
    assert "Nothing to be done" in snakemake("-n").stdout
    shutil.copy(TRACES / "mlp_unfused.json.gz", trace)  # the file changed: it is read again
    again = snakemake("-n")
    assert again.returncode == 0 and "import_profile" in again.stdout
    # a file that is not a trace: the job fails in one line naming it, and keeps nothing
    trace.write_bytes(b'{"traceEvents": [')
    failed = snakemake()
    assert failed.returncode != 0
    errors = [line for line in (workdir / "logs" / "import_profile" / "mlp.log").read_text()
              .splitlines() if "ERROR" in line or "error" in line]  # fmt: skip
    assert len(errors) == 1 and "mlp.json.gz" in errors[0], errors
    assert not (workdir / receipt).exists()
    assert len(list((workdir / "results" / "imports" / "mlp" / "runs").iterdir())) == 1


def test_the_docs_query_finds_the_time_without_a_ledger(store):
    import re

    db, _ = store
    page = (Path(__file__).parents[1] / "docs" / "imports.md").read_text()
    (sql,) = re.findall(r"```sql\n(.*?)```", page, re.S)
    found = {row["op"] for row in rows(db, sql)}
    # ones_like has no ledger; a linear's work is its addmm's, so it is not listed
    assert "aten::ones_like" in found and "aten::linear" not in found
