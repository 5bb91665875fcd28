"""A store with imported profiles, built the way the workflow builds one: results/ with a ceilings
run folder, one import run per (name, trace) in order (a name given twice: two runs of it, the
later the newer), the roofline step's derived tables, ingested. Used by test_report_imports; not
a test module, so pytest collects nothing here."""

from __future__ import annotations

import shutil
from pathlib import Path

from rooflab.backends.selection import select_backend
from rooflab.experiments.imported_runs import import_tables
from rooflab.imports import read_profile
from rooflab.records import write_run
from rooflab.roofline import analyse_results, write_analysis
from rooflab.store import ingest

TRACES = Path(__file__).parent / "fixtures" / "torch"


def import_store(
    root: Path, ceilings_run: Path | None, imports: list[tuple[str, str]]
) -> tuple[Path, list[str], list[str]]:
    """Under `root`: results/ with a copy of `ceilings_run` (None: no ceilings) and an import
    run of each (name, file of tests/fixtures/torch), derived and ingested into
    root/rooflab.duckdb: (the store, the import run ids in `imports`' order, the roofline
    step's notes)."""
    results = root / "results"
    if ceilings_run is not None:
        shutil.copytree(ceilings_run, results / "ceilings" / "runs" / ceilings_run.name)
    backend = select_backend("cpu")
    run_ids = []
    for name, file in imports:
        tables = import_tables(read_profile("torch", TRACES / file), name, backend)
        run_id = tables["runs"][0]["run_id"]
        write_run(results / "imports" / name / "runs", run_id, tables)
        run_ids.append(run_id)
    analysis = analyse_results(results)
    write_analysis(analysis, results / "roofline")
    db = root / "rooflab.duckdb"
    ingest(db, results)
    return db, run_ids, analysis.notes
