"""Issue 26 (hardening): `rooflab query` reads the store and nothing else; one bad run folder does
not block the store (it is set aside, named, and every other run is stored); a killed rebuild's
temporary files are removed by the next rebuild. Real DuckDB files, real Parquet files truncated."""

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rooflab.cli import main
from rooflab.records import MEASURED_TABLES
from rooflab.store import (
    QueryRefused,
    RunsSetAside,
    connect_read_only,
    ingest,
    query,
    read_view,
    rebuild,
)
from rooflab.store.integrity import read_back
from tests.conftest import installed_script, run_rooflab
from tests.store_runs import (
    T0,
    file_row_counts,
    gemm_run,
    rows,
    store_row_counts,
    two_machines,
    write_roofline_points,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def results(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    return folder


@pytest.fixture
def db(results, empty_store):
    """results/rooflab.duckdb: a store with no runs yet (conftest's empty one, copied)."""
    return Path(shutil.copyfile(empty_store, results / "rooflab.duckdb"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def truncate(path: Path) -> bytes:
    """Cut a real Parquet file in half (as a full disk or a killed copy leaves it); its bytes."""
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    return whole


# -- A. `rooflab query` reads the store and nothing else -------------------------------------------


@pytest.fixture
def stored(results, db):
    """A store with two machines' runs, and a file outside it."""
    run_dirs = two_machines(results)
    ingest(db, results)
    outside = results.parent / "outside.csv"
    outside.write_text("secret\n42\n")
    return run_dirs, outside


def escapes(run_dir: Path, tmp: Path, db: Path) -> list[tuple[str, str, Path | None]]:
    """(SQL, what the refusal says, a path that must not appear or change)."""
    kept = run_dir / "runs.parquet"
    outside_read = "it reads or writes outside the store"
    return [
        (f"COPY (SELECT 1) TO '{kept}'", outside_read, kept),  # the tester's destroyed record
        (f"COPY (SELECT * FROM runs) TO '{tmp / 'copy.csv'}'", outside_read, tmp / "copy.csv"),
        (f"COPY runs TO '{tmp / 'copy.parquet'}' (FORMAT parquet)", outside_read, None),
        (f"COPY (SELECT 1) TO '{db}'", "it writes to the store's own file", db),
        (f"SELECT * FROM read_text('{tmp / 'outside.csv'}')", outside_read, None),
        (f"SELECT * FROM read_csv('{tmp / 'outside.csv'}')", outside_read, None),
        (f"SELECT * FROM '{tmp / 'outside.csv'}'", outside_read, None),
        ("SELECT * FROM read_text('/etc/passwd')", outside_read, None),
        (f"SELECT * FROM glob('{tmp}/*')", outside_read, None),
        (f"EXPORT DATABASE '{tmp / 'exported'}'", outside_read, tmp / "exported"),
        ("INSTALL httpfs", "installs or loads an extension", None),
        ("LOAD httpfs", "installs or loads an extension", None),
        (f"ATTACH '{tmp / 'other.duckdb'}' AS other", outside_read, tmp / "other.duckdb"),
        ("SET enable_external_access = true", "changes the setting enable_external_access", None),
        ("RESET enable_external_access", "changes the setting enable_external_access", None),
        ("SET lock_configuration = false", "changes the setting lock_configuration", None),
        ("SET autoinstall_known_extensions = true", "changes the setting autoinstall", None),
        (f"SET temp_directory = '{tmp / 'spill'}'", "changes the setting temp_directory", None),
        ("CREATE TABLE mine (a INTEGER)", "it would change the store (CREATE)", None),
        ("INSERT INTO runs (run_id) VALUES ('x')", "it would change the store (INSERT)", None),
        ("DELETE FROM runs", "it would change the store (DELETE)", None),
        ("DROP VIEW run_summary", "it would change the store (DROP)", None),
        (f"SELECT 1; COPY (SELECT 1) TO '{tmp / 'second.csv'}'", outside_read, tmp / "second.csv"),
    ]


def test_query_refuses_every_way_out_of_the_store(stored, results, db):
    run_dirs, outside = stored
    tmp = outside.parent
    cases = escapes(run_dirs[0], tmp, db)
    before = {path: (digest(path) if path.exists() else None) for _, _, path in cases if path}
    store_before = store_row_counts(db)
    for sql, says, _ in cases:
        with pytest.raises(QueryRefused) as caught:
            query(db, sql)
        message = str(caught.value)
        assert message.startswith("query refused: ") and says in message, (sql, message)
        assert "\n" not in message
    for path, was in before.items():
        assert (digest(path) if path.exists() else None) == was, path  # not created, not changed
    assert not (tmp / "copy.parquet").exists() and not (tmp / "spill").exists()
    assert not list(Path.home().glob(".duckdb/extensions/*/*/httpfs*"))  # nothing fetched
    # the store and its kept files are as they were: ordinary reads and a rebuild still work
    assert store_row_counts(db) == store_before
    assert rebuild(db, results).bad_runs == []
    assert store_row_counts(db) == file_row_counts(run_dirs)


def test_ordinary_reads_of_tables_and_views_keep_working(stored, db):
    run_dirs, outside = stored
    assert query(db, "SELECT count(*) AS n FROM runs").to_pylist() == [{"n": len(run_dirs)}]
    summary = rows(db, "SELECT run_id, kind FROM run_summary ORDER BY run_id")
    assert [r["run_id"] for r in summary] == sorted(d.name for d in run_dirs)
    assert query(db, "SELECT * FROM latest_ceilings").num_rows == 8
    # DuckDB's own functions that read nothing outside (settings, the catalog, a temp table)
    assert rows(db, "SELECT current_setting('TimeZone') AS tz") == [{"tz": "UTC"}]
    assert query(db, "SELECT * FROM duckdb_tables()").num_rows > 0
    assert rows(db, "CREATE TEMP TABLE t AS SELECT 1 AS a; SELECT a FROM t") == [{"a": 1}]
    # the report's way in: the same locked connection, read_view on it
    connection = connect_read_only(db)
    try:
        scopes = read_view(connection, "report_scopes", order_by=("position",))
        assert len(scopes) == 2
        with pytest.raises(duckdb.PermissionException):
            connection.execute(f"COPY runs TO '{outside.parent / 'copy.csv'}'")
        assert not (outside.parent / "copy.csv").exists()
        with pytest.raises(duckdb.InvalidInputException, match="locked"):
            connection.execute("SET enable_external_access = true")
    finally:
        connection.close()


def test_cli_query_refusal_is_one_line_and_non_zero(stored, db, capsys):
    run_dirs, _ = stored
    kept = run_dirs[0] / "runs.parquet"
    was = digest(kept)
    assert main(["query", f"COPY (SELECT 1) TO '{kept}'", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rooflab: error: query refused: it reads or writes outside the store")
    assert err.count("\n") == 1 and digest(kept) == was
    # the installed command, as the tester ran it: no traceback, the file untouched
    result = run_rooflab("query", f"COPY (SELECT 1) TO '{kept}'", "--db", db, cwd=REPO)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.startswith("rooflab: error: query refused:")
    assert result.stderr.count("\n") == 1 and digest(kept) == was
    result = run_rooflab("query", "SELECT * FROM read_text('/etc/shadow')", "--db", db, cwd=REPO)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "file /etc/shadow" in result.stderr and result.stdout == ""


# -- B. a bad run is set aside; every good run is stored ----------------------------------------


def test_a_truncated_samples_file_sets_its_run_aside_and_the_others_are_stored(results, db):
    good = two_machines(results)
    broken = gemm_run(results, started_at=T0 + timedelta(hours=3))
    after = gemm_run(results, started_at=T0 + timedelta(hours=4))  # sorts after the bad run
    samples = broken / "samples.parquet"
    whole = truncate(samples)
    cut = digest(samples)
    report = ingest(db, results, strict=False)
    assert sorted(report.added_run_ids) == sorted(d.name for d in [*good, after])
    ((run_id, reason),) = report.bad_runs
    assert run_id == broken.name
    assert reason.startswith(f"{samples}: cannot read this Parquet file (")
    assert "magic bytes" in reason and "\n" not in reason
    assert store_row_counts(db) == file_row_counts([*good, after])
    assert store_row_counts(db, broken.name) == dict.fromkeys(MEASURED_TABLES, 0)
    assert digest(samples) == cut and sorted(p.name for p in broken.iterdir())  # left as it was
    # the next ingest does not stop at it either, and names it again
    again = ingest(db, results, strict=False)
    assert again.added_run_ids == [] and [r for r, _ in again.bad_runs] == [broken.name]
    assert len(again.present_run_ids) == len(good) + 1
    # strict (the default, what the workflow's ingest calls): everything good stored, then raise
    with pytest.raises(RunsSetAside, match=r"1 run\(s\) set aside, not stored: .*samples\.parquet"):
        ingest(db, results)
    # fixed: the next ingest stores it
    samples.write_bytes(whole)
    fixed = ingest(db, results)
    assert fixed.added_run_ids == [broken.name] and fixed.bad_runs == []
    assert store_row_counts(db) == file_row_counts([*good, broken, after])


def test_cli_ingest_names_the_bad_run_and_exits_non_zero(results, db, capsys):
    good = gemm_run(results, started_at=T0)
    broken = gemm_run(results, started_at=T0 + timedelta(hours=1))
    samples = broken / "samples.parquet"
    truncate(samples)
    assert main(["store", "ingest", "--db", str(db), "--results", str(results)]) == 2
    out, err = capsys.readouterr()
    assert "added 1 run(s), 0 already there, 1 set aside" in out
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith(
        f"rooflab: run {broken.name} set aside, not stored: {samples}: cannot read this Parquet "
        "file ("
    )
    assert lines[1] == (
        "rooflab: error: 1 run(s) set aside (named above; the files are left as they are), "
        "everything else stored: fix or remove the bad files, then run `rooflab store ingest` "
        "again"
    )
    assert store_row_counts(db, good.name) == file_row_counts([good])
    # the installed command: the same, no traceback
    result = run_rooflab("store", "ingest", "--db", db, "--results", results, cwd=REPO)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"rooflab: run {broken.name} set aside" in result.stderr
    assert "added 0 run(s), 1 already there, 1 set aside" in result.stdout
    # the user removes the bad folder: the ingest succeeds
    shutil.rmtree(broken)
    assert main(["store", "ingest", "--db", str(db), "--results", str(results)]) == 0
    out, err = capsys.readouterr()
    assert "0 set aside" in out and err == ""


def test_cli_rebuild_stores_every_good_run_and_a_later_ingest_the_fixed_one(results, db, capsys):
    run_dirs = two_machines(results)
    ingest(db, results)
    samples = run_dirs[2] / "samples.parquet"  # the second machine's ceilings run
    whole = truncate(samples)
    assert main(["store", "rebuild", "--db", str(db), "--results", str(results)]) == 2
    out, err = capsys.readouterr()
    assert out.startswith(f"rebuilt from {results}: ") and "added 3 run(s)" in out
    assert f"rooflab: run {run_dirs[2].name} set aside, not stored: {samples}" in err
    assert "Traceback" not in err and err.count("\n") == 2
    assert store_row_counts(db) == file_row_counts([run_dirs[0], run_dirs[1], run_dirs[3]])
    assert sorted(p.name for p in results.glob("*rooflab.duckdb*")) == ["rooflab.duckdb"]
    samples.write_bytes(whole)
    assert main(["store", "ingest", "--db", str(db), "--results", str(results)]) == 0
    assert "added 1 run(s), 3 already there, 0 set aside" in capsys.readouterr().out
    assert store_row_counts(db) == file_row_counts(run_dirs)


def test_a_run_whose_rows_do_not_fit_the_store_is_rolled_back_and_set_aside(results, db):
    def with_energy(run_dir, values):
        energy = pa.table({"run_id": [run_dir.name] * len(values), "joules": values})
        pq.write_table(energy, run_dir / "energy.parquet")  # a table of a newer rooflab
        return run_dir

    first = with_energy(gemm_run(results, started_at=T0), [0.5])
    misfit = with_energy(gemm_run(results, started_at=T0 + timedelta(hours=1)), [[0.5, 0.6]])
    last = gemm_run(results, started_at=T0 + timedelta(hours=2))
    report = ingest(db, results, strict=False)
    assert report.added_run_ids == [first.name, last.name]
    ((run_id, reason),) = report.bad_runs
    assert run_id == misfit.name
    assert reason.startswith(f"{misfit / 'energy.parquet'}: cannot store it in table energy")
    # its runs, conditions, samples... went in before energy failed: all rolled back
    assert store_row_counts(db, misfit.name) == dict.fromkeys(MEASURED_TABLES, 0)
    assert rows(db, "SELECT run_id FROM energy") == [{"run_id": first.name}]


def test_a_bad_derived_file_is_reported_and_the_runs_are_stored(results, db, capsys):
    run_dirs = two_machines(results)
    write_roofline_points(results, {run_dirs[1].name: 3})
    ingest(db, results)
    newer = gemm_run(results, started_at=T0 + timedelta(hours=5))
    write_roofline_points(results, {run_dirs[1].name: 1})
    points = results / "roofline" / "roofline_points.parquet"
    truncate(points)
    report = ingest(db, results, strict=False)
    assert report.added_run_ids == [newer.name] and report.bad_runs == []
    ((path, reason),) = report.bad_derived
    assert path == str(points) and reason.startswith(f"{points}: cannot read this Parquet file")
    assert report.roofline_run_ids == []
    assert rows(db, "SELECT count(*) AS n FROM roofline_points") == [{"n": 3}]  # earlier ones kept
    with pytest.raises(RunsSetAside, match="derived tables not replaced"):
        ingest(db, results)
    assert main(["store", "ingest", "--db", str(db), "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"rooflab: derived tables not replaced (the store keeps the earlier ones): {points}: "
    )
    assert "rooflab: error: the derived tables not replaced (named above;" in err


# -- a killed rebuild's temporary files ------------------------------------------------------------


def test_the_next_rebuild_removes_what_a_killed_rebuild_left(results, db, capsys):
    run_dirs = two_machines(results)
    ingest(db, results)
    # A rebuild that stops inside its second run's transaction, and is killed there.
    script = textwrap.dedent(
        """
        import sys, time
        from rooflab import store
        from rooflab.store import writer
        real_insert = writer._Writer._insert
        seen = []
        def insert(self, name, table):
            real_insert(self, name, table)
            if name == "samples":
                seen.append(name)
                if len(seen) == 2:
                    print("inside", flush=True)
                    time.sleep(60)
        writer._Writer._insert = insert
        store.rebuild(sys.argv[1], sys.argv[2])
        """
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", script, str(db), str(results)], stdout=subprocess.PIPE, text=True
    )
    assert worker.stdout.readline().strip() == "inside"
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    left = sorted(p.name for p in results.glob(f".rooflab.duckdb.rebuild-{worker.pid}*"))
    assert left and left[0] == f".rooflab.duckdb.rebuild-{worker.pid}"
    # a temporary file of a rebuild still running (this process's parent stands in) is kept
    alive = results / f".rooflab.duckdb.rebuild-{os.getppid()}"
    alive.write_bytes(b"")
    report = rebuild(db, results)
    assert sorted(p.name for p in report.stale_removed) == left
    assert alive.exists()
    assert sorted(p.name for p in results.glob("*rooflab.duckdb*")) == [alive.name, db.name]
    assert store_row_counts(db) == file_row_counts(run_dirs)
    # the command says what it removed
    stale = results / ".rooflab.duckdb.rebuild-999999999"  # no such process
    stale.write_bytes(b"")
    assert main(["store", "rebuild", "--db", str(db), "--results", str(results)]) == 0
    assert capsys.readouterr().err == (
        f"rooflab: removed {stale}, left by a rebuild that was killed\n"
    )
    assert not stale.exists() and alive.exists()


# -- issue 40: ingest reads the store back before it says it succeeded -----------------------------


def damage_a_block_of(db: Path, table: str) -> int:
    """Overwrite bytes inside a data block of `table` (one no other table uses), past the block's
    checksum, as a disk that flips bits does; the file still opens. The block's byte offset."""
    with duckdb.connect(str(db), read_only=True) as connection:
        size = connection.execute("SELECT block_size FROM pragma_database_size()").fetchone()
        block_size = size[0]
        blocks = {
            name: {
                row[0]
                for row in connection.execute(
                    f"SELECT DISTINCT block_id FROM pragma_storage_info('{name}') "
                    "WHERE block_id >= 0"
                ).fetchall()
            }
            for (name,) in connection.execute("SELECT table_name FROM duckdb_tables()").fetchall()
        }
    others = set().union(*(ids for name, ids in blocks.items() if name != table))
    block = min(blocks[table] - others)
    offset = 3 * 4096 + block * block_size  # after the file's three 4 KiB headers
    with db.open("r+b") as stream:
        stream.seek(offset + 64)
        stream.write(b"\xff" * 64)
    return offset


def test_the_read_back_counts_every_table_and_a_file_of_none(results, db, tmp_path):
    two_machines(results)
    ingest(db, results)
    with duckdb.connect(str(db), read_only=True) as connection:
        (tables,) = connection.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database()"
        ).fetchone()
    assert read_back(db) == tables > 0
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    assert read_back(empty) == 0


@pytest.mark.parametrize(
    ("table", "stored_rows"),
    [("conditions", 12), ("runs", 4)],
    ids=["a table ingest does not read", "runs, which ingest reads"],
)
def test_ingest_fails_in_one_line_on_a_store_with_a_damaged_block(results, db, table, stored_rows):
    """Found by an adversarial run: `rooflab store ingest` exited 0 on a store with a corrupt
    block that queries then failed on. Now it reads every table back whole first; a damaged block
    that ingest reads on its way (the runs table: which runs are stored) is named the same way,
    not a DuckDB traceback."""
    run_dirs = two_machines(results)
    ingest(db, results)
    offset = damage_a_block_of(db, table)
    with duckdb.connect(str(db), read_only=True) as connection:  # opens and counts, but ...
        assert connection.execute(f"SELECT count(*) FROM {table}").fetchone() == (stored_rows,)
        with pytest.raises(duckdb.Error, match="Corrupt database file"):  # ... cannot be read
            connection.execute(f"SELECT * FROM {table}").fetchall()
    new_run = gemm_run(results, started_at=T0 + timedelta(hours=5))
    result = run_rooflab("store", "ingest", "--db", db, "--results", results)
    assert result.returncode == 2, result.stdout
    assert result.stdout == ""  # no line that says it added the run
    assert re.fullmatch(
        re.escape(f"rooflab: error: {db}: table {table} cannot be read back (Corrupt database ")
        + r"file: computed checksum \d+ does not match stored checksum \d+ "
        + re.escape(
            f"in block at location {offset}); the kept run folders are not damaged: `rooflab "
            "store rebuild` recreates the store from them\n"
        ),
        result.stderr,
    ), result.stderr
    # the repair it names
    result = run_rooflab("store", "rebuild", "--db", db, "--results", results, cwd=results)
    assert result.returncode == 0, result.stderr
    assert store_row_counts(db) == file_row_counts([*run_dirs, new_run])
    stored = query(db, f"SELECT count(*) AS n FROM (SELECT * FROM {table})")["n"][0].as_py()
    assert stored > stored_rows


@pytest.mark.slow  # a real Snakemake run of the ingest rule
def test_the_ingest_rule_fails_in_one_line_on_a_damaged_store(results, db, tmp_path):
    """The workflow's ingest job (workflow_scripts/ingest.py, run by Snakemake): the same check,
    one line in its log, no receipt, so the campaign does not end as if the store were good."""
    two_machines(results)
    ingest(db, results)
    damage_a_block_of(db, "conditions")
    gemm_run(results, started_at=T0 + timedelta(hours=5))
    receipt, log = tmp_path / "store" / "ingest.json", tmp_path / "logs" / "ingest.log"
    (tmp_path / "Snakefile").write_text(
        textwrap.dedent(
            f"""
            rule ingest:
                output:
                    receipt="{receipt}",
                log:
                    "{log}",
                params:
                    db="{db}",
                    results="{results}",
                script:
                    "{REPO / "workflow_scripts" / "ingest.py"}"
            """
        )
    )
    result = subprocess.run(
        [installed_script("snakemake"), "--cores", "1", "--directory", tmp_path],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0, result.stdout + result.stderr
    text = log.read_text()
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    assert f" ERROR {db}: table conditions cannot be read back (Corrupt database file: " in text
    assert not receipt.exists()
