"""rooflab.imports.ncu_export (issue 45, item 3): an Nsight Compute raw-page CSV read as one
operator row per kernel, against the recorded exports only (tests/fixtures/ncu: the H200 GEMM
profiles and NVIDIA's RTX A4500 sample reports); bad inputs are altered copies of them."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
from pathlib import Path

import pytest

from rooflab.counters.points import bypassed_levels, calibrate
from rooflab.imports import OPERATOR_COLUMNS, ProfileError
from rooflab.imports.ncu_export import NEEDED_METRICS, REEXPORT_COMMAND, read_ncu_export
from tests.counters_fixtures import NCU_FIXTURES

GEMM = sorted((NCU_FIXTURES / "gemm").glob("*.raw.csv"))
SOBEL = NCU_FIXTURES / "import_sample" / "sobelDouble.raw.csv"
TRANSPOSE = NCU_FIXTURES / "import_sample" / "transposeCoalesced.raw.csv"
BF16_NONE = NCU_FIXTURES / "gemm" / "bf16_m4096_n4096_k4096_cache-none.raw.csv"
BF16_ALL = NCU_FIXTURES / "gemm" / "bf16_m4096_n4096_k4096_cache-all.raw.csv"
# The kernels cuBLAS chose on the H200 (tests/fixtures/ncu/README.md), by file name prefix
KERNELS = {
    "bf16_m4096": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
    "bf16_m64_": "nvjet_sm90_tst_64x32_64x16_1x2_h_bz_NNT",
    "fp32_": "cutlass_80_simt_sgemm_256x128_8x4_nn_align1",
    "fp64_": "sm90_xmma_gemm_f64f64_",
}
# What the A4500 samples lack of the metrics rooflab reads (ncu dropped them on export)
SAMPLE_PRESENT = {
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg.per_second",
    "dram__cycles_elapsed.avg.per_second",
}


def recorded(csv_path: Path) -> dict:
    return json.loads(csv_path.with_name(csv_path.name.replace(".raw.csv", ".json")).read_text())


def refused(path: Path) -> str:
    """The one line a bad file is refused with; it names the file."""
    with pytest.raises(ProfileError) as caught:
        read_ncu_export(path)
    message = str(caught.value)
    assert str(path) in message
    assert "\n" not in message
    return message


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def csv_line(row: list[str]) -> str:
    """A row as ncu quotes it: every field."""
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerow(row)
    return out.getvalue()


# -- the recorded H200 GEMM profiles --------------------------------------------------------------


def test_every_recorded_gemm_profile_is_here():
    assert len(GEMM) == 8


@pytest.mark.parametrize("csv_path", GEMM, ids=lambda p: p.name)
def test_a_recorded_gemm_is_one_kernel_whose_count_meets_2mnk_as_at_recording(csv_path):
    case = recorded(csv_path)
    profile = read_ncu_export(csv_path)
    assert (profile.tool, profile.device) == ("ncu", case["chip"])
    assert profile.sha256 == hashlib.sha256(csv_path.read_bytes()).hexdigest()
    assert len(profile.operators) == case["kernels"] == 1
    (kernel,) = profile.operators
    assert set(kernel) == set(OPERATOR_COLUMNS)
    assert (kernel["index"], kernel["kind"]) == (0, "kernel")
    name = next(v for k, v in KERNELS.items() if csv_path.name.startswith(k))
    assert name in kernel["op"]
    counted = kernel["counted"]
    path, (m, n, k) = case["compute_path"], (case["m"], case["n"], case["k"])
    assert (counted["compute_path"], kernel["dtype"]) == (path, case["dtype"])
    calibration = calibrate(counted["flops_by_path"][path], m, n, k, path=path)
    assert calibration.trusted is case["expect_trusted"] is True
    assert calibration.reason == case["calibration_at_recording"]
    # F is every path's count: the GEMM's path and an epilogue's (at most one op per output)
    counts = [f for f in counted["flops_by_path"].values() if f is not None]
    assert kernel["flops"] == sum(counts)
    assert 0 <= kernel["flops"] - counted["flops_by_path"][path] <= m * n
    assert len(counts) == len(counted["flops_by_path"])  # every path counted on the H200
    assert (kernel["flops_source"], kernel["q_source"]) == ("counters", "counters")
    assert kernel["bytes"] == counted["bytes_by_level"]["HBM"] > 0
    assert set(counted["bytes_by_level"]) == {"HBM", "L2", "L1"}
    assert 0 < kernel["time_s"] < 1e-3
    assert 1e9 < counted["sm_clock_hz"] < 2e9
    assert counted["missing_metrics"] == case["missing_metrics"] == []
    assert [counted["replay_passes"]] == profile.settings["replay_passes"] == case["replay_passes"]
    for setting in ("cache_control", "clock_control"):
        assert profile.settings[setting] == case["settings"][setting]
    assert profile.settings["replay_mode"] is None  # the raw page does not say
    assert not any("missing" in note for note in profile.notes)
    assert any("replay mode" in note for note in profile.notes)


def test_the_bf16_gemm_without_flush_reads_as_ncu_printed_it():
    """Every number checked against the CSV by eye: thousands separators, ns, hz."""
    profile = read_ncu_export(BF16_NONE)
    (kernel,) = profile.operators
    counted = kernel["counted"]
    assert kernel["op"] == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    assert kernel["time_s"] == pytest.approx(173_600e-9, rel=1e-12)
    assert counted["bytes_by_level"] == {
        "HBM": 148_888_832 + 28_047_360,
        "L2": 1_037_411_296,
        "L1": 12_160,
    }
    assert counted["flops_by_path"]["bf16_tensor"] == 137_438_953_472 == 2 * 4096**3
    assert counted["sm_clock_hz"] == 1_619_976_434.86
    assert counted["dram_clock_hz"] == 3_199_293_394.78
    assert counted["l2_clock_hz"] == 1_703_081_797.24
    assert (kernel["thread"], counted["grid"], counted["block"]) == ("13", [2, 66, 1], [384, 1, 1])
    assert counted["launch"]["launch__registers_per_thread"] == 168
    assert counted["kernel_id"] == 0
    assert "fixture:bf16:nn:m4096_n4096_k4096:counters" in counted["nvtx"][0]
    settings = profile.settings
    assert (settings["cache_control"], settings["clock_control"]) == ("none", "none")
    assert len(settings["settings_evidence"]) == 2
    assert settings["compute_capability"] == "9.0"
    assert settings["device"]["multiprocessor_count"] == 132
    assert settings["device"]["l2_cache_size"] == 62_914_560
    assert settings["profiler"]["profiler__replayer_passes"] == 6
    assert settings["process_names"] == ["python3.12"]


def test_a_flushed_profile_without_ncus_cache_note_is_read_as_cache_control_all():
    """ncu notes uncontrolled caches and clocks in its log; with the clock note there and the
    cache note absent, the caches were controlled (ncu's default, all)."""
    settings = read_ncu_export(BF16_ALL).settings
    assert (settings["cache_control"], settings["clock_control"]) == ("all", "none")


@pytest.mark.parametrize(
    "prefix, bypassed",
    [("bf16_m4096", {"L1"}), ("bf16_m64_", {"L1"}), ("fp32_", set()), ("fp64_", set())],
)
def test_bytes_per_level_feed_the_bypass_rule_of_the_counters_step(prefix, bypassed):
    """Hopper's TMA GEMMs move their operands around l1tex (README): no L1 point for them."""
    for csv_path in (p for p in GEMM if p.name.startswith(prefix)):
        (kernel,) = read_ncu_export(csv_path).operators
        assert set(bypassed_levels(kernel["counted"]["bytes_by_level"])) == bypassed


def test_kernels_keep_their_order_and_each_its_own_missing_metrics(tmp_path):
    """Two launches (the recorded row, and a copy with ID 1 whose duration ncu left n/a)."""
    text = lines(BF16_ALL)
    header = next(i for i, line in enumerate(text) if line.startswith('"ID"'))
    columns = next(csv.reader([text[header]]))
    second = next(csv.reader([text[header + 2]]))
    second[0], second[columns.index("gpu__time_duration.sum")] = "1", "n/a"
    path = tmp_path / "two.raw.csv"
    path.write_text("".join(text) + csv_line(second))
    profile = read_ncu_export(path)
    first, later = profile.operators
    assert [first["index"], later["index"]] == [0, 1]
    assert [first["counted"]["kernel_id"], later["counted"]["kernel_id"]] == [0, 1]
    assert later["time_s"] is None and first["time_s"] > 0
    assert later["flops"] == first["flops"]
    assert later["counted"]["missing_metrics"] == ["gpu__time_duration.sum"]
    (note,) = [note for note in profile.notes if "missing" in note]
    assert "1 of 2 kernels" in note and "gpu__time_duration.sum" in note
    assert profile.settings["replay_passes"] == [6, 6]


# -- NVIDIA's sample reports: only some metrics ---------------------------------------------------


@pytest.mark.parametrize(
    "csv_path, name, time_ns, hbm",
    [
        (SOBEL, "void Sobel<double>(uchar4 *, uchar4 *, int, int)", 628_032, 4_196_352 + 35_456),
        (
            TRANSPOSE,
            "transposeCoalesced(float *, float *, int, int)",
            1_420_832,
            268_457_472 + 265_940_992,
        ),
    ],
    ids=["sobelDouble", "transposeCoalesced"],
)
def test_a_sample_without_flop_counts_keeps_its_time_and_hbm_bytes_and_names_the_rest(
    csv_path, name, time_ns, hbm
):
    profile = read_ncu_export(csv_path)
    (kernel,) = profile.operators
    assert set(kernel) == set(OPERATOR_COLUMNS)
    assert kernel["op"] == name
    assert kernel["time_s"] == pytest.approx(time_ns * 1e-9, rel=1e-12)
    assert (kernel["bytes"], kernel["q_source"]) == (hbm, "counters")
    # no F: no point (the placement says "no ledger"), never a guess
    assert (kernel["flops"], kernel["flops_source"], kernel["dtype"]) == (None, None, None)
    counted = kernel["counted"]
    assert counted["bytes_by_level"] == {"HBM": hbm, "L2": None, "L1": None}
    assert set(counted["flops_by_path"].values()) == {None}
    assert counted["compute_path"] is None
    absent = [m for m in NEEDED_METRICS if m not in SAMPLE_PRESENT]
    assert counted["missing_metrics"] == absent
    # ncu 2024.1.1's raw page names no device: its index and compute capability
    assert profile.device == "CUDA device 0 (compute capability 8.6)"
    assert profile.settings["compute_capability"] == "8.6"
    assert profile.settings["cache_control"] is None
    assert profile.settings["clock_control"] is None
    (note,) = [note for note in profile.notes if "missing" in note]
    named, how = note.split("; re-export them with ")
    assert all(metric in named for metric in absent)
    assert not any(metric in named for metric in SAMPLE_PRESENT)
    assert "no L2 bytes" in named and "FLOPs not counted on fp64_fma" in named
    assert REEXPORT_COMMAND in how
    assert any("cache control, clock control" in note for note in profile.notes)
    assert all("\n" not in note for note in profile.notes)


# -- refused --------------------------------------------------------------------------------------


# ncu's details page: one row per metric (its shape, written here: not a recorded export)
DETAILS_PAGE = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    '"Section Name","Metric Name","Metric Unit","Metric Value"\n'
    '"0","1","app","127.0.0.1","k","1","7","GPU Speed Of Light Throughput","Duration",'
    '"usecond","628.03"\n'
)
NOT_A_RAW_PAGE = ("not an ncu raw-page CSV", REEXPORT_COMMAND)
# Each bad file: its name, what is written in it (None: no file), the words its refusal says
BAD_FILES = {
    "missing": ("absent.raw.csv", None, ("cannot read",)),
    "binary_report": (
        "report.ncu-rep",
        lambda: gzip.compress(SOBEL.read_bytes()),
        ("binary", "--page raw"),
    ),
    "not_utf8": (
        "latin1.csv",
        lambda: SOBEL.read_text().replace("Sobel", "Söbel").encode("latin-1"),
        ("not UTF-8",),
    ),
    "empty": ("export.csv", lambda: "", NOT_A_RAW_PAGE),
    "json": ("export.csv", lambda: '{"traceEvents": []}\n', NOT_A_RAW_PAGE),
    "other_csv": ("export.csv", lambda: "a,b,c\n1,2,3\n", NOT_A_RAW_PAGE),
    "header_without_a_kernel": (
        "empty.raw.csv",
        lambda: "".join(lines(TRANSPOSE)[:2]),
        ("holds no kernel",),
    ),
    "ncus_own_no_kernel_log": (
        "profile.log.csv",
        lambda: (NCU_FIXTURES / "no_driver" / "profile.log.txt").read_bytes(),
        ("ncu profiled no kernel", "No kernels were profiled"),
    ),
    "truncated": ("cut.raw.csv", lambda: BF16_ALL.read_text()[:-2000], ("truncated",)),
    "no_units_row": (
        "no_units.raw.csv",
        lambda: lines(SOBEL)[0] + "".join(lines(SOBEL)[2:]),
        ("no units row",),
    ),
    "details_page": ("details.csv", lambda: DETAILS_PAGE, ("details page", "--page raw")),
}


@pytest.mark.parametrize(("name", "content", "says"), list(BAD_FILES.values()), ids=list(BAD_FILES))
def test_a_file_that_is_no_raw_page_export_is_refused_saying_why(tmp_path, name, content, says):
    path = tmp_path / name
    if content is not None:  # None: no file at all
        written = content()
        path.write_bytes(written if isinstance(written, bytes) else written.encode())
    message = refused(path)
    assert all(words in message for words in says), message


def test_a_raw_page_without_any_needed_metric_is_refused_with_the_export_command(tmp_path):
    """The sample with its metric columns removed: only the launch's identity is left."""
    path = tmp_path / "bare.raw.csv"
    rows = [row[:11] for row in csv.reader(lines(TRANSPOSE))]
    assert rows[0][-1] == "CC" and not any("__" in name for name in rows[0])
    path.write_text("".join(csv_line(row) for row in rows))
    message = refused(path)
    assert "none of the metrics rooflab needs" in message
    missing = message.split("missing: ")[1].split("; ")[0].split(", ")
    assert missing == list(NEEDED_METRICS)
    assert REEXPORT_COMMAND in message


@pytest.mark.parametrize(
    "old, new, metric",
    [
        ('"nsecond"', '"usecond"', "gpu__time_duration.sum"),
        ('"byte","byte"', '"Mbyte","Mbyte"', "dram__bytes_read.sum"),
        ('"cycle/second","nsecond","cycle/second"', '"Ghz","nsecond","Ghz"', "per_second"),
    ],
    ids=["usecond", "Mbyte", "Ghz"],
)
def test_numbers_in_other_than_base_units_are_refused(tmp_path, old, new, metric):
    text = lines(TRANSPOSE)
    assert old in text[1]
    path = tmp_path / "scaled.raw.csv"
    path.write_text(text[0] + text[1].replace(old, new) + "".join(text[2:]))
    message = refused(path)
    assert "not in base units" in message and metric in message
    assert "--print-units base" in message
