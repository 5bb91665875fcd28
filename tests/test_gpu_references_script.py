"""benchmarks/gpu_ceilings_vs_references.py without a GPU: its exit without one, its rows (ratio,
target, missed, skipped), its rounds, its JSON file and its skipped rows where PyTorch is missing.

Every rate below is constructed here to exercise the logic (CONSTRUCTED_*, fake timers): none is
a measurement of any device.
"""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rooflab.backends.base import BackendError, LibraryVariant
from rooflab.workflow import write_json_atomic

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPT = BENCHMARKS / "gpu_ceilings_vs_references.py"
SETTINGS = {"n": 8192, "copy_gib": 2.0, "host_mib": 512}


@pytest.fixture
def rows_module(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("gpu_references_rows")


@pytest.fixture
def peers_module(rows_module):  # benchmarks/ on the path
    return importlib.import_module("gpu_references_peers")


@pytest.fixture
def script_module(rows_module):
    return importlib.import_module("gpu_ceilings_vs_references")


def constructed_side(rows, label, rates):
    """A side whose `measure` gives the constructed `rates`, one per round, in order."""
    pending = iter(rates)
    return rows.Side(label, time_call=None, call=lambda: next(pending), amount=1.0)


def measure_constructed(side):
    return side.call()


# -- without a GPU --


def test_without_a_gpu_it_exits_2_with_one_line(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no device, even on a GPU machine
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "1", "--json", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("no GPU benchmark: "), result.stderr
    assert "cuda" in lines[0]
    assert result.stdout == ""
    assert not (tmp_path / "r.json").exists()


# -- rows: ratio, target, missed --


def test_a_row_under_its_target_is_missed(rows_module):
    CONSTRUCTED_OURS, CONSTRUCTED_REFERENCE = 3.9e12, 4.3e12
    row = rows_module.Row(
        "copy", "B/s", "memcpy", 0.98, rooflab=CONSTRUCTED_OURS, reference_value=4.3e12
    )
    assert row.ratio == pytest.approx(CONSTRUCTED_OURS / CONSTRUCTED_REFERENCE)
    assert row.missed is True
    assert rows_module.any_missed([row])
    line = rows_module.format_row(row)
    assert "ratio 0.907" in line and "MISSED" in line


def test_a_row_at_or_over_its_target_is_not_missed(rows_module):
    at = rows_module.Row("gemm", "FLOP/s", "peer", 0.98, rooflab=98.0, reference_value=100.0)
    over = rows_module.Row("gemm", "FLOP/s", "peer", 0.98, rooflab=110.0, reference_value=100.0)
    assert at.missed is False and over.missed is False
    assert not rows_module.any_missed([at, over])
    assert "MISSED" not in rows_module.format_row(at)


def test_an_informational_row_has_a_ratio_and_no_verdict(rows_module):
    row = rows_module.Row("M=16", "FLOP/s", "F.linear", None, rooflab=1.0, reference_value=2.0)
    assert row.ratio == 0.5
    assert row.missed is None
    assert not rows_module.any_missed([row])
    assert "informational, no target" in rows_module.format_row(row)


def test_a_skipped_row_has_no_ratio(rows_module):
    row = rows_module.Row("fp8", "FLOP/s", "torch._scaled_mm", 0.98, skipped="no PyTorch")
    assert row.ratio is None and row.missed is None
    assert rows_module.format_row(row).endswith("skipped: no PyTorch")
    assert row.as_dict()["ratio"] is None and row.as_dict()["skipped"] == "no PyTorch"


@pytest.mark.parametrize("reference", [0.0, -1.0, float("nan"), None])
def test_a_row_refuses_a_reference_rate_that_is_no_rate(rows_module, reference):
    with pytest.raises(ValueError, match="reference rate"):
        rows_module.Row("copy", "B/s", "memcpy", 0.98, rooflab=1.0, reference_value=reference)


# -- rounds --


def test_each_side_keeps_its_best_round_and_rooflab_its_best_method(rows_module):
    rows = rows_module
    sides = rows.Prepared(
        ours=(
            constructed_side(rows, "sm", [10.0, 30.0]),  # CONSTRUCTED: best in round 2
            constructed_side(rows, "memcpy", [20.0, 25.0]),
        ),
        reference=constructed_side(rows, "peer", [40.0, 35.0]),  # CONSTRUCTED: best in round 1
    )
    after = []
    comparison = rows.Comparison("host", "B/s", "torch", 0.98, prepare=lambda: sides)
    (row,) = rows.run_comparisons(
        [comparison], 2, measure_constructed, after_each=lambda: after.append(1)
    )
    assert (row.rooflab, row.rooflab_method, row.reference_value) == (30.0, "sm", 40.0)
    assert row.ratio == 0.75 and row.missed is True
    assert len(row.rounds) == 2 and row.rounds[1]["rooflab"] == {"sm": 30.0, "memcpy": 25.0}
    assert after == [1, 1]


def test_a_side_that_cannot_prepare_or_run_skips_its_row_only(rows_module):
    rows = rows_module

    def unavailable():
        raise rows.Unavailable("nvmath-python is not importable")

    def broken():
        raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED\nmore lines")

    def fails_in_round():
        def call():
            raise RuntimeError("device lost")

        return rows.Prepared((rows.Side("x", None, call, 1.0),), constructed_side(rows, "r", []))

    good = rows.Prepared((constructed_side(rows, "x", [2.0]),), constructed_side(rows, "r", [1.0]))
    zero = rows.Prepared((constructed_side(rows, "x", [2.0]),), constructed_side(rows, "r", [0.0]))
    result = rows.run_comparisons(
        [
            rows.Comparison("a", "OP/s", "peer", 0.98, unavailable),
            rows.Comparison("b", "OP/s", "peer", 0.98, broken),
            rows.Comparison("c", "OP/s", "peer", 0.98, fails_in_round),
            rows.Comparison("d", "OP/s", "peer", 0.98, lambda: good),
            rows.Comparison("e", "OP/s", "peer", 0.98, lambda: zero),
        ],
        1,
        measure_constructed,
    )
    assert [row.skipped for row in result] == [
        "nvmath-python is not importable",
        "RuntimeError: CUBLAS_STATUS_NOT_SUPPORTED",
        "RuntimeError: device lost",
        None,
        "a side measured 0.0 units per second",
    ]
    assert result[3].ratio == 2.0


def test_rounds_must_be_positive(rows_module):
    with pytest.raises(ValueError, match="rounds"):
        rows_module.run_comparisons([], 0, measure_constructed)


# -- the JSON file --


def constructed_document(rows_module):
    rows = [
        rows_module.Row("copy", "B/s", "memcpy", 0.98, rooflab=3.9e12, reference_value=4.3e12),
        rows_module.Row("M=16", "FLOP/s", "F.linear", None, rooflab=2.0, reference_value=1.0),
        rows_module.Row("fp8", "FLOP/s", "torch._scaled_mm", 0.98, skipped="no PyTorch"),
    ]
    return rows_module.document(
        device="constructed device",
        date_utc="2000-01-01T00:00:00Z",
        clock=rows_module.clock_range([None, 1980.0, 1755.0]),
        versions={"torch": {"version": None, "status": "no PyTorch"}, "cupy": "constructed"},
        rounds=2,
        samples=30,
        settings=SETTINGS,
        timing="constructed",
        rows=rows,
    )


def test_the_json_file_holds_every_row_and_the_run(rows_module, tmp_path):
    path = write_json_atomic(
        tmp_path / "out" / "references.json", constructed_document(rows_module)
    )
    data = json.loads(path.read_text())
    assert data["device"] == "constructed device" and data["rounds"] == 2
    assert data["sm_clock"] == {"min_mhz": 1755.0, "max_mhz": 1980.0, "readings": 2}
    assert data["torch"]["status"] == "no PyTorch"
    copy, linear, fp8 = data["rows"]
    assert copy["ratio"] == pytest.approx(3.9 / 4.3) and copy["missed"] is True
    assert copy["target"] == 0.98 and copy["unit"] == "B/s"
    assert linear["target"] is None and linear["missed"] is None and linear["ratio"] == 2.0
    assert fp8["skipped"] == "no PyTorch" and fp8["ratio"] is None
    assert data["missed"] == ["copy"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["references.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(rows_module, tmp_path):
    path = tmp_path / "references.json"
    path.write_text('{"old": true}\n')
    data = constructed_document(rows_module)
    data["rows"][0]["rooflab"] = float("nan")  # JSON has no NaN: the dump fails midway
    with pytest.raises(ValueError):
        write_json_atomic(path, data)
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["references.json"]


def test_no_clock_reading_says_so(rows_module):
    assert rows_module.clock_range([None, None]) is None
    assert rows_module.clock_text(None) == "SM clock not readable"


# -- PyTorch or cuBLASLt missing --


class StubBackend:
    """No GPU: every call rooflab's side would make is refused, as a backend that cannot run it;
    what was asked is recorded."""

    def __init__(self):
        self.asked = []

    def __getattr__(self, name):
        def refuse(*args, **kwargs):
            self.asked.append(name)
            raise BackendError(f"stub backend: no {name} here")

        return refuse


def test_missing_torch_is_said_and_skips_every_pytorch_row(peers_module, rows_module, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails, as where absent
    torch, why = peers_module.torch_status()
    assert torch is None and why.startswith("PyTorch is not installed")
    assert peers_module.versions(torch, why)["torch"] == {"version": None, "status": why}

    backend = StubBackend()
    comparisons = peers_module.comparisons(backend, None, SETTINGS)
    rows = rows_module.run_comparisons(comparisons, 2, measure_constructed, torch_missing=why)
    assert len(rows) == len(comparisons) == 10
    by_torch = {row.name + " vs " + row.reference: row.skipped for row in rows}
    pytorch_rows = [row for row in rows if row.reference.startswith("torch")]
    assert len(pytorch_rows) == 8
    assert all(row.skipped == why for row in pytorch_rows), by_torch
    # the other two ask rooflab's side first, and this backend refuses: skipped, no crash
    others = [row for row in rows if not row.reference.startswith("torch")]
    assert [row.reference for row in others] == ["cudaMemcpyAsync D2D", "cupy.matmul"]
    assert all(row.skipped.startswith("stub backend: no ") for row in others)
    assert backend.asked == ["default_threads", "gemm_operands"]  # none for the PyTorch rows


def test_rooflab_without_cublaslt_skips_its_rows_with_the_reason(peers_module, rows_module):
    why = "nvmath-python is not importable (constructed); rooflab reaches cuBLASLt through it"

    class NoCublasLt(StubBackend):
        def gemm_operands(self, m, n, k, dtype, layout, seed):
            raise BackendError(f"backend cuda does not support dtype {dtype!r}: {why}")

        def library_variants(self, dtype):
            description = "cuBLAS gemmEx; cuBLASLt not timed beside it (nvmath-python unavailable)"
            return (LibraryVariant("matmul", "cuBLAS gemmEx", description),)

    present = SimpleNamespace(__version__="constructed")  # PyTorch "present": rooflab is missing
    comparisons = [
        c
        for c in peers_module.comparisons(NoCublasLt(), present, SETTINGS)
        if "GEMM" in c.name and ("FP8" in c.name or "int8" in c.name or "cuBLASLt" in c.name)
    ]
    rows = rows_module.run_comparisons(comparisons, 1, measure_constructed)
    assert [row.name for row in rows] == [
        "FP8 e4m3 GEMM 8192^3 (nt)",
        "int8 GEMM 8192^3 (nt)",
        "bf16 GEMM 8192^3 cuBLASLt",
    ]
    assert rows[0].skipped.endswith(why) and "'fp8_e4m3'" in rows[0].skipped
    assert rows[1].skipped.endswith(why) and "'int8'" in rows[1].skipped
    assert "nvmath-python unavailable" in rows[2].skipped
    assert all(row.ratio is None for row in rows)


# -- main, wired to constructed comparisons --


def test_main_prints_writes_and_exits_1_on_a_missed_target(
    script_module, monkeypatch, tmp_path, capsys
):
    rows = sys.modules["gpu_references_rows"]
    backend = SimpleNamespace(device_name="constructed GPU", sample_clock_mhz=lambda: 1980.0)

    def constructed(backend, torch, settings):
        assert torch is None and settings["n"] == 512
        return [
            rows.Comparison(
                "missed", "B/s", "peer", 0.98,
                lambda: rows.Prepared(
                    (constructed_side(rows, "ours", [90.0, 95.0]),),
                    constructed_side(rows, "peer", [100.0, 100.0]),
                ),
            ),
            rows.Comparison("needs torch", "FLOP/s", "torch.x", 0.98, None, needs_torch=True),
        ]  # fmt: skip

    monkeypatch.setattr(script_module, "select_backend", lambda name: backend)
    monkeypatch.setattr(script_module, "torch_status", lambda: (None, "constructed: no PyTorch"))
    monkeypatch.setattr(script_module, "comparisons", constructed)
    monkeypatch.setattr(script_module, "rate", lambda side, samples: side.call())
    path = tmp_path / "references.json"
    status = script_module.main(["--n", "512", "--rounds", "2", "--json", str(path)])
    out = capsys.readouterr().out
    assert status == 1
    assert out.startswith("constructed GPU; SM clock 1980-1980 MHz; best of 2 rounds")
    assert "ratio 0.950 (target >= 0.98: MISSED)" in out
    assert "skipped: constructed: no PyTorch" in out
    data = json.loads(path.read_text())
    assert data["missed"] == ["missed"] and data["rows"][1]["skipped"] == "constructed: no PyTorch"
    assert data["torch"] == {"version": None, "status": "constructed: no PyTorch"}
    assert data["settings"] == {"n": 512, "copy_gib": 2.0, "host_mib": 512}
