"""Issue 40 item 6 (disk full): a write that runs out of space says so in one line naming the file,
exits non-zero, and leaves nothing half-written (a `.partial` run folder, a `.index.html.tmp`, a
new store's file or WAL, a temporary Parquet or JSON file).

A real full filesystem: a tmpfs of a few MiB mounted for each test (root only; skipped, with the
reason, where mounting is not permitted), filled to its last byte, then the real commands."""

import errno
import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from rooflab.records import DiskFull
from rooflab.store import ingest, query, rebuild
from tests.conftest import run_rooflab
from tests.store_runs import T0, gemm_run, two_machines

FILLER = "filler"


class Disk:
    """A mounted tmpfs: `fill()` writes FILLER until the device refuses a byte and gives
    `files()` then; `files()` is every path under it but FILLER, to compare before and after a
    failed write."""

    def __init__(self, root: Path):
        self.root = root

    def fill(self) -> set[Path]:
        handle = os.open(self.root / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while True:
                os.write(handle, b"\0" * 65536)
        except OSError as error:
            assert error.errno == errno.ENOSPC, error
        finally:
            os.close(handle)
        return self.files()

    def free(self) -> None:
        (self.root / FILLER).unlink()

    def files(self) -> set[Path]:
        return {path for path in self.root.rglob("*") if path.name != FILLER}


@pytest.fixture
def disk(tmp_path):
    """A 6 MiB tmpfs at tmp_path/disk, unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("a real full disk needs a tmpfs mounted, which needs root")
    if shutil.which("mount") is None:
        pytest.skip("no mount command here")
    root = tmp_path / "disk"
    root.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip() or 'not permitted'})")
    try:
        yield Disk(root)
    finally:
        if subprocess.run(["umount", str(root)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(root)], check=True)


def one_error_line(stderr: str, path: Path | str) -> str:
    """The one line a command printed, checked: it names `path` (or a file whose name starts
    so) and says the disk is full."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"rooflab: error: {path}"), stderr
    assert ": no space left on the device (writing " in lines[0], stderr
    return lines[0]


def in_a_job(script: str, log: Path, *args: object) -> subprocess.CompletedProcess:
    """`script` run as a workflow script runs: a Python process whose stderr and logging go to
    its log (rooflab.workflow.log_to), its arguments in sys.argv."""
    code = "from rooflab.workflow import log_to\nlog = log_to(sys.argv[1])\n"
    return subprocess.run(
        [sys.executable, "-c", "import sys\n" + code + textwrap.dedent(script), log, *args],
        capture_output=True,
        text=True,
        check=False,
    )


def job_error_line(result: subprocess.CompletedProcess, log: Path, path: Path) -> str:
    """A job that failed in one line: status 1, nothing on stderr, one line in its log."""
    text = log.read_text()
    assert result.returncode == 1 and result.stderr == "", (result.stderr, text)
    assert "Traceback" not in text, text
    lines = text.splitlines()
    assert len(lines) == 1 and " ERROR " in lines[0], text
    message = lines[0].split(" ERROR ", 1)[1]
    assert message.startswith(f"{path}: no space left on the device ("), text
    return message


def test_a_job_that_keeps_its_run_on_a_full_disk_fails_in_one_line_and_keeps_nothing(
    disk, tmp_path
):
    """What time_gemm (and every measuring job) does once it has measured: keep_run writes the
    run folder and then the receipt naming it."""
    measured = gemm_run(tmp_path / "measured")  # the tables a job returns, from a real run
    receipt = disk.root / "sweeps" / "decode" / "time_gemm.json"
    receipt.parent.mkdir(parents=True)
    before = disk.fill()
    log = tmp_path / "time_gemm.log"
    result = in_a_job(
        """
        from rooflab.records import read_run
        from rooflab.workflow import keep_run
        tables = {name: table.to_pylist() for name, table in read_run(sys.argv[2]).items()}
        keep_run(tables, sys.argv[3])
        """,
        log,
        measured,
        receipt,
    )
    run_dir = receipt.parent / "runs" / measured.name
    line = job_error_line(result, log, run_dir)
    assert line.endswith("(writing the run's tables); nothing was kept")
    # no `.partial` folder, no run folder, no receipt: Snakemake reruns the job whole
    assert disk.files() - before <= {receipt.parent / "runs"}
    assert not any((receipt.parent / "runs").iterdir())


def test_a_receipt_on_a_full_disk_is_one_line_and_leaves_no_temporary(disk, tmp_path):
    """The ingest job's last step, write_receipt: the old receipt stays as it was."""
    receipt = disk.root / "ingest.json"
    receipt.write_text('{"added": []}\n')
    before = disk.fill()
    log = tmp_path / "ingest.log"
    result = in_a_job(
        """
        from rooflab.workflow import write_receipt
        write_receipt(sys.argv[2], {"db": "results/rooflab.duckdb", "added": ["r" * 9000]})
        """,
        log,
        receipt,
    )
    line = job_error_line(result, log, receipt)
    assert line.endswith("(writing the JSON file); the file is as it was")
    assert disk.files() == before and receipt.read_text() == '{"added": []}\n'


def test_measure_refuses_a_full_disk_before_measuring(disk):
    """`rooflab measure` checks that its --out folder takes a byte before it measures: a full
    disk is said in one line, and nothing is measured for nothing."""
    out = disk.root / "runs"
    disk.fill()
    result = run_rooflab("measure", "ceilings", "--backend", "cpu", "--quick", "--out", out)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == (
        f"rooflab: error: {out}: cannot write a run there (No space left on device); "
        "nothing was measured\n"
    )
    assert disk.files() == {out}  # the folder asked for, empty: no probe file left


@pytest.fixture
def stored_on_disk(disk):
    """A store on the tmpfs with two machines' runs in it, and a new run not yet stored."""
    results = disk.root / "results"
    results.mkdir()
    two_machines(results)
    db = results / "rooflab.duckdb"
    ingest(db, results)
    new_run = gemm_run(results, started_at=T0 + timedelta(hours=5))
    return results, db, new_run


def test_ingest_on_a_full_disk_is_one_line_and_the_store_keeps_what_it_had(disk, stored_on_disk):
    results, db, new_run = stored_on_disk
    before = disk.fill()
    result = run_rooflab("store", "ingest", "--db", db, "--results", results)
    assert result.returncode == 2, result.stderr
    line = one_error_line(result.stderr, db)
    assert line.endswith("free space, then run `rooflab store ingest` again")
    assert disk.files() == before  # no WAL, no temporary beside the store
    assert query(db, "SELECT count(*) AS n FROM runs").column("n").to_pylist() == [4]
    # space again: the same command stores the run
    disk.free()
    result = run_rooflab("store", "ingest", "--db", db, "--results", results)
    assert result.returncode == 0 and "added 1 run(s), 4 already there" in result.stdout
    stored = query(db, "SELECT run_id FROM runs").column("run_id").to_pylist()
    assert new_run.name in stored


def test_a_new_store_on_a_full_disk_leaves_no_empty_file(disk):
    results = disk.root / "results"
    gemm_run(results)
    before = disk.fill()
    db = results / "rooflab.duckdb"
    result = run_rooflab("store", "ingest", "--db", db, "--results", results)
    assert result.returncode == 2
    one_error_line(result.stderr, db)
    assert disk.files() == before  # no empty rooflab.duckdb (nor WAL) that is not a store


def test_rebuild_on_a_full_disk_keeps_the_store_and_removes_the_new_one(disk, stored_on_disk):
    results, db, _ = stored_on_disk
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    before = disk.fill()
    with pytest.raises(DiskFull, match=r"no space left on the device \(writing the new store\)"):
        rebuild(db, results)
    assert disk.files() == before  # no `.rooflab.duckdb.rebuild-<pid>` nor its WAL
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    # the command: its first write (the derived tables) is refused the same way
    result = run_rooflab("store", "rebuild", "--db", db, "--results", results, cwd=disk.root)
    assert result.returncode == 2
    one_error_line(result.stderr, results / "roofline" / "roofline_points.parquet")
    assert disk.files() - before <= {results / "roofline"}
    assert not any((results / "roofline").iterdir())  # no `.<table>.parquet.tmp`


def test_report_on_a_full_disk_is_one_line_and_leaves_no_partial_file(disk, tmp_path):
    results = tmp_path / "results"  # the store elsewhere; the report on the full disk
    two_machines(results)
    db = results / "rooflab.duckdb"
    ingest(db, results)
    out = disk.root / "report"
    out.mkdir()
    disk.fill()
    result = run_rooflab("report", "--db", db, "--out", out)
    assert result.returncode == 2, result.stderr
    line = one_error_line(result.stderr, f"{out}/")  # the chart file it was writing
    assert line.endswith("(writing the report); index.html was not replaced")
    assert disk.files() == {out}  # no empty chart file, no .index.html.tmp
