"""Integer (int8, OP/s) and FP8 roofs and points in everything that reads results: the datasheet
presets, the vocabulary, the roofline step, the store's views and the report. An int8 GEMM's work
is 2MNK integer operations (OP): it is placed only against OP/s roofs, never a FLOP/s one, and
every place that shows its rates says OP/s. The runs are CONSTRUCTED (tests/constructed_integer.py),
not measurements."""

from __future__ import annotations

import re

import pytest

from rooflab.backends import cuda_host_link
from rooflab.config import ConfigError
from rooflab.devices import load_device_presets
from rooflab.report import build_report
from rooflab.roofline import build_analysis
from rooflab.store import query
from rooflab.vocabulary import (
    HOST_LEVEL,
    INTEGER_PATHS,
    compute_path,
    datasheet_path,
    path_unit,
)
from tests import constructed_integer as constructed
from tests.report_pages import channel_of, spec_rows, store_of

# -- datasheet presets and vocabulary -----------------------------------------------------------


def test_presets_keep_integer_peaks_in_op_per_s_apart_from_flop_per_s():
    presets = load_device_presets()
    for key, dense in (("h100-sxm", 1978.9e12), ("h200-sxm", 1978.9e12), ("a100-sxm-80gb", 624e12)):
        assert presets[key].peak_ops_per_s == {"int8": dense}
        assert "int8" not in presets[key].peak_flops_per_s
    assert presets["h200-sxm"].peak_flops_per_s["fp8"] == 1978.9e12
    assert presets["article-hypothetical"].peak_ops_per_s == {}


def _devices(tmp_path, integer: str, paths: str = "bf16: 1 TFLOP/s") -> str:
    path = tmp_path / "devices.yaml"
    path.write_text(
        "devices:\n  x:\n    name: X\n    source: s\n"
        f"    paths: {{{paths}}}\n    integer_paths: {{{integer}}}\n    levels: {{HBM: 1 TB/s}}\n"
    )
    return str(path)


@pytest.mark.parametrize(
    ("integer", "paths", "says"),
    [
        ("int8: 2 TFLOP/s", "bf16: 1 TFLOP/s", "devices.x: '2 TFLOP/s' is not in OP/s"),
        ("int8: 2 TOPS", "bf16: 1 TFLOP/s", "write OP/s for a rate"),
        ("int8: 2 TOP/s", "int8: 1 TFLOP/s", "int8 both in paths (FLOP/s) and integer_paths"),
    ],
)
def test_a_preset_refuses_an_integer_peak_that_is_not_op_per_s(tmp_path, integer, paths, says):
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        load_device_presets(_devices(tmp_path, integer, paths))


def test_vocabulary_pairs_fp8_with_flop_per_s_and_int8_with_the_integer_path():
    assert compute_path("cuda", "fp8_e4m3") == compute_path("cuda", "fp8_e5m2") == "fp8_tensor"
    assert compute_path("cuda", "int8") == "int8_tensor"
    assert compute_path("cpu", "int8") is None and compute_path("cpu", "fp8_e4m3") is None
    assert datasheet_path("fp8_e4m3") == datasheet_path("fp8_e5m2") == "fp8"
    assert datasheet_path("int8") == "int8"  # devices.yaml integer_paths (OP/s)
    assert {"int8_tensor"} == INTEGER_PATHS
    assert path_unit("int8_tensor") == "OP/s"
    assert path_unit("fp8_tensor") == path_unit("bf16_tensor") == "FLOP/s"
    # the host link's level is one word, shared by the backend and the experiment
    assert cuda_host_link.HOST_LEVEL is HOST_LEVEL == "host"


# -- the roofline step --------------------------------------------------------------------------


def _points(results, changes=None):
    runs = constructed.write_campaign(results, changes)
    analysis = build_analysis(runs["ceilings"], runs["gemm"])
    return analysis, {(p["dtype"], p["m"]): p for p in analysis.points.model}


def test_int8_points_go_against_the_op_per_s_roof_and_fp8_against_fp8_tensor(tmp_path):
    _, points = _points(tmp_path / "results")
    assert set(points) == {(d, m) for d in constructed.GEMMS for m in constructed.MS}
    for m in constructed.MS:
        int8, fp8, bf16 = points["int8", m], points["fp8_e4m3", m], points["bf16", m]
        assert (int8["compute_path"], int8["work_unit"]) == ("int8_tensor", "OP")
        assert (fp8["compute_path"], fp8["work_unit"]) == ("fp8_tensor", "FLOP")
        assert (bf16["compute_path"], bf16["work_unit"]) == ("bf16_tensor", "FLOP")
        assert int8["peak_flops_per_s"] == 1.4e15 and fp8["peak_flops_per_s"] == 1.3e15
        assert bf16["peak_flops_per_s"] == 760e12  # the faster of cuBLAS and cuBLASLt
        assert int8["level"] == "HBM"  # cold
    assert points["int8", 1]["limiter"] == "memory"
    assert points["int8", 4096]["limiter"] == "compute"
    assert points["int8", 4096]["attainable_flops_per_s"] == 1.4e15  # in OP/s, as its work


@pytest.mark.parametrize(
    ("changes", "missing"),
    [
        # a backend that stored its int8 ceiling as FLOP/s: no roof for an OP count
        ({("int8_tensor", "cublaslt_matmul"): {"unit": "FLOP/s"}}, "int8"),
        # an FP8 ceiling in OP/s: no roof for its FLOP
        ({("fp8_tensor", "cublaslt_matmul"): {"unit": "OP/s"}}, "fp8_e4m3"),
    ],
)
def test_a_point_is_never_placed_under_a_roof_of_another_unit(tmp_path, changes, missing):
    _, points = _points(tmp_path / "results", changes)
    assert {dtype for dtype, _ in points} == set(constructed.GEMMS) - {missing}


# -- the store's views --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    results = tmp_path_factory.mktemp("integer") / "results"
    db = store_of(results, _points(results)[0])
    return {"db": db, "report": build_report(db, results.parent / "report", images=False)}


def test_views_carry_each_points_work_unit_and_each_roofs_unit(campaign):
    db = campaign["db"]
    rows = query(
        db, "SELECT DISTINCT dtype, compute_path, work_unit FROM latest_model_points ORDER BY 1"
    ).to_pylist()
    assert rows == [
        {"dtype": "bf16", "compute_path": "bf16_tensor", "work_unit": "FLOP"},
        {"dtype": "fp8_e4m3", "compute_path": "fp8_tensor", "work_unit": "FLOP"},
        {"dtype": "int8", "compute_path": "int8_tensor", "work_unit": "OP"},
    ]
    ceilings = {
        r["name"]: r
        for r in query(db, "SELECT * FROM ceiling_summary WHERE kind = 'compute'").to_pylist()
    }
    assert (ceilings["int8_tensor"]["unit"], ceilings["int8_tensor"]["value"]) == ("OP/s", 1.4e15)
    assert ceilings["fp8_tensor"]["unit"] == "FLOP/s"
    bf16 = ceilings["bf16_tensor"]
    assert (bf16["kernel"], bf16["value"]) == ("cublaslt_matmul", 760e12)
    sheet = query(
        db, "SELECT name, value, unit FROM latest_datasheet_roofs WHERE kind = 'compute'"
    ).to_pylist()
    assert {"name": "int8", "value": 1978.9e12, "unit": "OP/s"} in sheet
    assert {"name": "fp8", "value": 1978.9e12, "unit": "FLOP/s"} in sheet
    assert {r["unit"] for r in sheet if r["name"] != "int8"} == {"FLOP/s"}
    units = query(db, "SELECT DISTINCT work_unit FROM latest_roofline_points").to_pylist()
    assert {r["work_unit"] for r in units} == {"FLOP", "OP"}


# -- the report ---------------------------------------------------------------------------------


def _titles(spec: dict, channel: str) -> set[str]:
    return {encoding["title"] for encoding in channel_of(spec, channel) if "title" in encoding}


def test_the_flop_roofline_leaves_every_op_per_s_roof_and_int8_point_off(campaign):
    report = campaign["report"]
    assert report.charts[:2] == ["roofline", "integer_roofline"]
    spec = report.specs["roofline"]
    rows = spec_rows(spec)
    roofs = {r["ceiling"] for r in rows if "ceiling" in r}
    assert not any("int8" in roof or re.search(r"(?<!FL)OP/s", roof) for roof in roofs), roofs
    assert {"fp8_tensor 1.3 PFLOP/s (library)", "bf16_tensor 760 TFLOP/s (library)"} <= roofs
    assert "fp8 1.979 PFLOP/s (datasheet NVIDIA H200 SXM 141GB)" in roofs
    drawn = {r["dtype"] for r in rows if "achieved_flops_per_s" in r}
    assert drawn == {"bf16", "fp8_e4m3"}
    assert _titles(spec, "y") >= {"Performance (FLOP/s)"}


def test_the_integer_roofline_draws_int8_in_op_per_s_with_its_datasheet_figure(campaign):
    spec = campaign["report"].specs["integer_roofline"]
    rows = spec_rows(spec)
    roofs = {r["ceiling"] for r in rows if "ceiling" in r}
    assert "int8_tensor 1.4 POP/s (library)" in roofs
    assert "int8 1.979 POP/s (datasheet NVIDIA H200 SXM 141GB)" in roofs
    assert "HBM 4 TB/s (read)" in roofs
    assert not any("FLOP" in roof or "bf16" in roof or "fp8" in roof for roof in roofs), roofs
    points = [r for r in rows if "achieved_flops_per_s" in r]
    assert {r["dtype"] for r in points} == {"int8"} and len(points) == 2
    assert _titles(spec, "y") >= {"Performance (OP/s)"}
    assert _titles(spec, "x") >= {"Arithmetic intensity (OP/byte)"}
    tooltips = {t.get("title", "") for ts in channel_of(spec, "tooltip") for t in ts}
    assert {"achieved (OP/s)", "attainable (OP/s)", "intensity (OP/byte)"} <= tooltips
    assert not any("FLOP" in title for title in tooltips)
    assert spec["title"]["text"].startswith("Integer Roofline (OP/s): ")


def test_the_page_says_where_int8_is_drawn_and_shows_it_in_op_per_s(campaign):
    page = campaign["report"].index.read_text()
    assert "Not on this chart: the OP/s ceiling int8_tensor and 2 integer GEMM points" in page
    assert "Integer Roofline (OP/s)</h" in page
    row = page.split("<td>int8_tensor</td>", 1)[1].split("</tr>", 1)[0]
    assert "1.4 POP/s" in row and "FLOP" not in row
    assert "int8_tensor 350 OP/byte" in page  # its ridge against HBM, in OP per byte
    assert "fp8_tensor 325 FLOP/byte" in page
    int8_sweep = page.split("Sweep reuse_int8: efficiency vs M", 1)[1].split("</section>", 1)[0]
    assert "Achieved OP/s over the attainable OP/s" in int8_sweep


def test_a_machine_without_integer_work_gets_no_integer_roofline(tmp_path):
    from tests import constructed_counters

    results = tmp_path / "results"
    runs = constructed_counters.write_campaign(results)
    db = store_of(results, build_analysis([runs["ceilings"]], [runs["gemm"]]))
    report = build_report(db, tmp_path / "report", images=False)
    assert "roofline" in report.charts and "integer_roofline" not in report.charts
    assert "Not on this chart" not in report.index.read_text()


def test_machines_side_by_side_keep_int8_off_the_flop_panels_and_in_op_per_s_in_the_table():
    import pandas as pd

    from rooflab.report.machine_charts import MachineRoofs, ceilings_table, machines_roofline

    def ceilings(int8: float) -> pd.DataFrame:
        roofs = [
            ("bandwidth", "HBM", "read", 4e12, "B/s"),
            ("compute", "bf16_tensor", "cublaslt_matmul", 7e14, "FLOP/s"),
            ("compute", "int8_tensor", "cublaslt_matmul", int8, "OP/s"),
        ]
        return pd.DataFrame(roofs, columns=["kind", "name", "kernel", "value", "unit"])

    points = pd.DataFrame(
        [
            {"config_id": f"r/{d}/nt/m1", "cache_state": "cold", "intensity": x, "median_s": 1e-5}
            | {"achieved_flops_per_s": y, "efficiency": 0.5, "work_unit": unit, "dtype": d}
            for d, x, y, unit in (("bf16", 1.0, 3e12, "FLOP"), ("int8", 2.0, 5e12, "OP"))
        ]
    )
    machines = [
        MachineRoofs("a", "ma", ceilings(1.4e15), points),
        MachineRoofs("b", "mb", ceilings(6e14), points),
    ]
    chart = machines_roofline(machines).to_dict()
    rows = spec_rows(chart)
    assert {r["roof"] for r in rows if "roof" in r} == {"HBM", "bf16_tensor"}
    assert {r["config_id"] for r in rows if "config_id" in r} == {"r/bf16/nt/m1"}
    table = ceilings_table(machines).set_index("ceiling")
    assert table.loc["compute int8_tensor"].tolist() == [
        "1.4 POP/s (cublaslt_matmul)",
        "600 TOP/s (cublaslt_matmul)",
    ]
    assert table.loc["compute bf16_tensor", "a"] == "700 TFLOP/s (cublaslt_matmul)"
