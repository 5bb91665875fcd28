import re

import pyarrow.parquet as pq
import pytest

from rooflab.records import (
    SCHEMA_VERSION,
    TABLES,
    RecordError,
    new_run_id,
    read_run,
    stable_hash,
    write_run,
)


def test_write_run_is_one_folder_of_parquet_files(tmp_path):
    run_id = new_run_id()
    rows = [
        {
            "run_id": run_id,
            "config_id": "c",
            "cache_state": "warm",
            "sample_idx": 0,
            "seconds": 1e-3,
            "clock_mhz": 3200.0,
            "amount": 2e9,
            "amount_unit": "FLOP",
            "wait_s": 2e-6,
            "cpu_s": 2.1e-3,
            "involuntary_switches": 0,
            "disturbed": False,
            "round": 0,
        }
    ]
    run_dir = write_run(tmp_path, run_id, {"samples": rows, "timed_points": []})
    assert run_dir == tmp_path / run_id
    assert sorted(p.name for p in run_dir.iterdir()) == ["samples.parquet", "timed_points.parquet"]
    assert [p.name for p in tmp_path.iterdir()] == [run_id]  # no partial folder left
    tables = read_run(run_dir)
    assert tables["samples"].to_pylist() == rows
    assert tables["timed_points"].schema == TABLES["timed_points"]  # typed even when empty
    assert pq.read_schema(run_dir / "samples.parquet") == TABLES["samples"]


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        ([{"run_id": "r", "secnds": 1.0}], "unknown column(s) secnds"),
        ([{"run_id": "r", "seconds": "fast"}], "table samples"),
    ],
)
def test_bad_rows_write_nothing(tmp_path, rows, says):
    good = [{"run_id": "r", "config_id": "c", "cache_state": "warm", "n_samples": 3}]
    with pytest.raises(RecordError, match=re.escape(says)):
        write_run(tmp_path, "r", {"timed_points": good, "samples": rows})
    assert list(tmp_path.iterdir()) == []


def test_run_ids_sort_by_time_and_differ():
    first, second = new_run_id(), new_run_id()
    assert first != second
    assert first[:16] <= second[:16]


def test_stable_hash_ignores_key_order():
    assert stable_hash({"a": 1, "b": [1, 2]}) == stable_hash({"b": [1, 2], "a": 1})
    assert stable_hash({"a": 1}) != stable_hash({"a": 2})


def test_every_table_has_a_run_id_and_runs_has_a_schema_version():
    assert all("run_id" in schema.names for schema in TABLES.values())
    assert {
        "schema_version",
        "machine_id",
        "git_commit",
        "git_dirty",
        "config_hash",
        "host",
        "backend",
    } <= set(TABLES["runs"].names)
    assert SCHEMA_VERSION >= 1
