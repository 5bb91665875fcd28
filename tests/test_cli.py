import json
import subprocess
import sys
from pathlib import Path

import pytest

from rooflab.cli import main
from tests.conftest import run_rooflab as rooflab

REPO = Path(__file__).resolve().parents[1]

ARTICLE = ["--n", "4096", "--k", "4096", "--dtype", "bf16"]
HYPOTHETICAL = ["--peak", "120 TFLOP/s", "--bandwidth", "2 TB/s"]


def test_model_gemm_json_reproduces_the_article_table():
    result = rooflab(
        "model", "gemm", "--m", "1,32,128", *ARTICLE, *HYPOTHETICAL, "--format", "json"
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["m"] for r in rows] == [1, 32, 128]
    required = "m n k flops bytes intensity compute_s memory_s bound_s limiter"
    required += " attainable_flops_per_s bound_s_per_row"
    assert all(set(required.split()) <= set(r) for r in rows)
    assert [round(r["intensity"], 4) for r in rows] == [0.9995, 31.5077, 120.4706]
    assert [round(r["bound_s"] * 1e6, 3) for r in rows] == [16.785, 17.039, 35.791]
    assert [r["limiter"] for r in rows] == ["memory", "memory", "compute"]
    assert rows[2]["bound_s_per_row"] == pytest.approx(rows[2]["bound_s"] / 128)
    assert rows[0]["flops"] == 33_554_432 and rows[0]["bytes"] == 33_570_816


def model_gemm_json(capsys, *args: str) -> list[dict]:
    """The rows of `rooflab model gemm ARGS --format json`, run in this process."""
    assert main(["model", "gemm", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_model_gemm_with_device_preset_matches_explicit_figures(capsys):
    from_preset = model_gemm_json(
        capsys, "--m", "1,32,128", *ARTICLE, "--device", "article-hypothetical"
    )
    explicit = model_gemm_json(capsys, "--m", "1,32,128", *ARTICLE, *HYPOTHETICAL)
    sources = {"peak_source", "bandwidth_source"}
    assert [{k: v for k, v in row.items() if k not in sources} for row in from_preset] == [
        {k: v for k, v in row.items() if k not in sources} for row in explicit
    ]
    assert {(r["peak_source"], r["bandwidth_source"]) for r in from_preset} == {
        ("datasheet article-hypothetical, path bf16", "datasheet article-hypothetical, level HBM")
    }
    assert {(r["peak_source"], r["bandwidth_source"]) for r in explicit} == {
        ("--peak", "--bandwidth")
    }


def test_model_gemm_table_has_readable_units(capsys):
    assert main(["model", "gemm", "--m", "1,128", *ARTICLE, *HYPOTHETICAL]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "peak 120 TFLOP/s" in out[0] and "cold-cache model" in out[0]
    header, first, last = out[1].split("  "), out[2].split(), out[3].split()
    header = [h.strip() for h in header if h.strip()]
    assert header[3:9] == [
        "flops (GFLOP)",
        "bytes (MB)",
        "intensity (FLOP/B)",
        "compute_s (μs)",
        "memory_s (μs)",
        "bound_s (μs)",
    ]
    bound = header.index("bound_s (μs)")
    assert (first[bound], last[bound]) == ("16.785", "35.791")


def test_model_gemm_csv(capsys):
    assert main(["model", "gemm", "--m", "1", *ARTICLE, *HYPOTHETICAL, "--format", "csv"]) == 0
    header, row = capsys.readouterr().out.strip().splitlines()
    assert header.split(",")[:3] == ["m", "n", "k"]
    assert row.startswith("1,4096,4096,")


def test_mixed_dtypes_and_beta(capsys):
    shape = ["--m", "8", "--n", "64", "--k", "32", "--beta", "1"]
    dtypes = ["--x-dtype", "int8", "--w-dtype", "int4", "--y-dtype", "fp16"]
    # int8 x int4 multiplies integers: its work is in OP, its peak in OP/s
    ceilings = ["--peak", "120 TOP/s", "--bandwidth", "2 TB/s"]
    (row,) = model_gemm_json(capsys, *shape, *dtypes, *ceilings)
    assert row["bytes"] == 8 * 32 + 32 * 64 // 2 + 2 * (8 * 64 * 2)
    assert row["ops"] == 2 * 8 * 64 * 32 and row["peak_ops_per_s"] == 120e12


def test_model_stages_reproduces_200_vs_101_us():
    stage_file = REPO / "config" / "stages" / "article-two-stage.yaml"
    result = rooflab("model", "stages", str(stage_file), *HYPOTHETICAL, "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["critical_path_s"] == pytest.approx(200e-6, rel=1e-12)
    assert report["aggregate_s"] == pytest.approx(101e-6, rel=1e-12)
    assert report["bound_s"] == pytest.approx(200e-6, rel=1e-12)
    assert report["critical_path"] == ["A", "B"]
    assert [(s["name"], s["limiter"]) for s in report["stages"]] == [
        ("A", "memory"),
        ("B", "compute"),
    ]
    table = rooflab("model", "stages", str(stage_file), *HYPOTHETICAL)
    assert "critical path  200 μs" in table.stdout and "aggregate      101 μs" in table.stdout


BAD_STAGE_FILES = {
    "cycle": (
        "stages:\n  - {name: A, flops: 1, bytes: 1, after: [B]}\n"
        "  - {name: B, flops: 1, bytes: 1, after: [A]}\n",
        "cycle: A -> B -> A",
    ),
    "unknown": ("stages:\n  - {name: A, flops: 1, bytes: 1, after: [Z]}\n", "unknown stage 'Z'"),
    "unit": ("stages:\n  - {name: A, flops: 12 GFLOPS, bytes: 1}\n", "stages[0].flops"),
    "key": ("stages:\n  - {name: A, flops: 1, byte: 1}\n", "unknown key 'byte' in stages[0]"),
    "extra": ("stages:\n  - {name: A, flops: 1, bytes: 1, deps: []}\n", "unknown key 'deps'"),
    "yaml": ("stages: [\n", "not valid YAML"),
    "twice": (
        "stages:\n  - {name: A, flops: 1, bytes: 1}\n  - {name: A, flops: 2, bytes: 2}\n",
        "stages: stage 'A' is defined twice",
    ),
    "infinite": ("stages:\n  - {name: A, flops: .inf, bytes: 1}\n", "must be a finite number"),
    "path": (
        "compute_path: fp32_fmaa\nstages:\n  - {name: A, flops: 1, bytes: 1}\n",
        "compute_path: unknown compute path 'fp32_fmaa'; known: bf16_tensor, ",
    ),
    "level": (
        "memory_level: VRAM\nstages:\n  - {name: A, flops: 1, bytes: 1}\n",
        "memory_level: unknown memory level 'VRAM'; known: L1, L2, L3, DRAM, HBM",
    ),
    "binary": (b"stages:\n  - {name: \xff\xfe, flops: 1, bytes: 1}\n", "not UTF-8 text (byte 0xff"),
    "deep": ("[" * 5000 + "]" * 5000, "nested too deeply to read"),
    "not finite": (".nan\n", "top level: must be a finite number, got nan"),
    "control": ("stages:\n  - {name: \x00, flops: 1, bytes: 1}\n", "not text (character #x0000"),
}


@pytest.mark.parametrize("case", sorted(BAD_STAGE_FILES))
def test_bad_stage_files_get_one_line_and_status_2(tmp_path, case):
    text, says = BAD_STAGE_FILES[case]
    stage_file = tmp_path / f"{case}.yaml"
    (stage_file.write_bytes if isinstance(text, bytes) else stage_file.write_text)(text)
    result = rooflab("model", "stages", str(stage_file), *HYPOTHETICAL)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr
    assert lines[0].startswith(f"rooflab: error: {stage_file}")  # the file is named


def test_model_stages_takes_2000_stages_listed_last_first(tmp_path):
    stage_file = tmp_path / "chain.yaml"
    entries = [
        f"  - {{name: s{i}, flops: 0, bytes: 2 MB, after: [s{i - 1}]}}" for i in range(1, 2000)
    ]
    stage_file.write_text(
        "stages:\n" + "\n".join(entries[::-1]) + "\n  - {name: s0, flops: 0, bytes: 2 MB}\n"
    )
    result = rooflab("model", "stages", str(stage_file), *HYPOTHETICAL, "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["critical_path"] == [f"s{i}" for i in range(2000)]
    assert report["critical_path_s"] == pytest.approx(2000 * 1e-6, rel=1e-9)


def test_a_binary_devices_file_is_one_line(tmp_path):
    devices = tmp_path / "devices.yaml"
    devices.write_bytes(b"devices:\n  h200-sxm: \x89PNG\r\n\x1a\n\xff")
    result = rooflab(
        "model", "gemm", "--m", "1", *ARTICLE, "--device", "h200-sxm", "--devices", devices
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"rooflab: error: {devices}: not UTF-8 text (byte 0x89 at offset 21)"
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--peak", "2 T", "--bandwidth", "2 TB/s"], "--peak: '2 T'"),
        (["--peak", "120 TFLOP/s", "--bandwidth", "5 GBps"], "--bandwidth: '5 GBps'"),
        (["--peak", "120 TFLOP/s", "--bandwidth", "-1 TB/s"], "negative"),
        (["--peak", "nan", "--bandwidth", "2 TB/s"], "'nan'"),
        (["--peak", "120 TFLOP/s"], "give --peak and --bandwidth"),
        (["--device", "h900"], "unknown device 'h900'"),
        (["--device", "a100-sxm-80gb", "--path", "fp8"], "has no path 'fp8'"),
        (["--device", "h200-sxm", "--peak", "1", "--bandwidth", "1 TB/s"], "--peak: '1' has no"),
        (
            ["--device", "h200-sxm", "--peak", "1 TFLOP/s", "--bandwidth", "1 TB/s"],
            "--peak and --bandwidth both given: --device would not be used",
        ),
        (["--device", "h200-sxm", "--measured"], "give --device or --measured, not both"),
        ([*HYPOTHETICAL, "--path", "bf16"], "--path and --level choose a figure of --device"),
        (["--device", "h200-sxm", "--level", "L2"], "device h200-sxm has no level 'L2'"),
    ],
)
def test_bad_ceilings_get_one_line_and_status_2(args, says):
    result = rooflab("model", "gemm", "--m", "1", *ARTICLE, *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--m", "1,x", "--n", "8", "--k", "8", "--dtype", "fp32"], "--m expects"),
        (["--m", "0", "--n", "8", "--k", "8", "--dtype", "fp32"], "must be positive"),
        (["--m", "1", "--n", "8", "--k", "8", "--dtype", "fp7"], "invalid choice: 'fp7'"),
        (["--m", "1", "--n", "8", "--k", "8"], "give --dtype"),
        (["--n", "8", "--k", "8", "--dtype", "fp32"], "required: --m"),
    ],
)
def test_usage_errors_are_one_line(args, says, capsys):
    assert main(["model", "gemm", *args, *HYPOTHETICAL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


@pytest.mark.parametrize("seconds", ["-1", "nan", "inf", "soon"])
def test_a_lock_timeout_must_be_finite_seconds(seconds, tmp_path, capsys):
    db = tmp_path / "r.duckdb"
    assert main(["store", "ingest", "--db", str(db), "--lock-timeout", seconds]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"expects seconds >= 0, got '{seconds}'" in err[0]
    assert not db.exists()


def test_module_entry_point_runs():
    result = subprocess.run(
        [sys.executable, "-m", "rooflab", "--version"], capture_output=True, text=True, check=True
    )
    assert result.stdout.startswith("rooflab ")
