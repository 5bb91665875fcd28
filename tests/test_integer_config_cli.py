"""FP8 and int8 GEMMs (cuBLASLt) in the campaign config and in `rooflab model gemm`: the dtypes the
cuda backend alone accepts, the layout and alignment refused at validation, the host link's size
checked before any job, and an int8 GEMM's ledger printed in OP and OP/s, never FLOP."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from rooflab.backends.cpu import CpuBackend
from rooflab.backends.cublaslt_args import LT_GEMM_TYPES
from rooflab.cli import main
from rooflab.config import (
    CPU_GEMM_DTYPES,
    LT_DTYPE_ALIGNMENT,
    ConfigError,
    load_config,
    validate_config,
)
from rooflab.model import gemm_ledger
from rooflab.store import ingest
from tests import constructed_integer

CONFIG = Path(__file__).resolve().parents[1] / "config"
SWEEP = {"m": [1, 64], "n": [4096], "k": [4096], "layouts": ["nt"]}


def _config(dtypes, backend="cuda", blas=None, **sweep) -> dict:
    config = {"backend": backend, "sweeps": {"q": {**SWEEP, "dtypes": dtypes, **sweep}}}
    if blas is not None:
        config["ceilings"] = {"blas_dtypes": blas}
    return config


def _refusal(config: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        validate_config(copy.deepcopy(config), "c.yaml")
    return str(caught.value)


def test_cuda_accepts_fp8_and_int8_sweeps_and_library_ceilings_in_layout_nt():
    dtypes = ["fp8_e4m3", "fp8_e5m2", "int8"]
    config = validate_config(_config(dtypes, blas=["bf16", *dtypes]), "c.yaml")
    assert config["sweeps"]["q"]["dtypes"] == dtypes
    assert config["ceilings"]["blas_dtypes"] == ["bf16", *dtypes]
    # int8 needs N and K multiples of 4 only
    validate_config(_config(["int8"], n=[4100], k=[12]), "c.yaml")
    # auto may become cuda: the CPU backend refuses them when it runs (as it does bf16)
    validate_config(_config(["int8"], backend="auto"), "c.yaml")


@pytest.mark.parametrize("layouts", [None, ["nn"], ["nn", "nt"]])
@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2", "int8"])
def test_layout_nn_is_refused_naming_the_key_the_dtype_and_the_layout(dtype, layouts):
    config = _config([dtype, "bf16"])
    if layouts is None:
        del config["sweeps"]["q"]["layouts"]  # the default, [nn]
    else:
        config["sweeps"]["q"]["layouts"] = layouts
    assert _refusal(config) == (
        f"c.yaml: sweeps.q.layouts: dtype {dtype!r} with layout nn is refused: cuBLASLt runs "
        "FP8 and int8 GEMMs only in its TN format (W stored N×K), layout nt; give layouts: [nt] "
        "(the default is [nn])"
    )


def test_bf16_keeps_layout_nn():
    validate_config(_config(["bf16"], layouts=["nn", "nt"]), "c.yaml")


@pytest.mark.parametrize(
    ("dtype", "size", "value", "says"),
    [
        ("fp8_e4m3", "n", [4096, 4097], "sweeps.q.n[1]: dtype 'fp8_e4m3' needs N a multiple of 16"),
        ("fp8_e5m2", "k", [4104], "sweeps.q.k[0]: dtype 'fp8_e5m2' needs K a multiple of 16"),
        ("int8", "k", [4098], "sweeps.q.k[0]: dtype 'int8' needs K a multiple of 4"),
    ],
)
def test_n_and_k_off_cublaslt_alignment_are_refused(dtype, size, value, says):
    assert says in _refusal(_config([dtype], **{size: value}))


def test_the_config_rules_are_cublaslts_own():
    for dtype, alignment in LT_DTYPE_ALIGNMENT.items():
        assert LT_GEMM_TYPES[dtype].alignment == alignment
        assert LT_GEMM_TYPES[dtype].tn_only
    assert set(LT_GEMM_TYPES) - set(LT_DTYPE_ALIGNMENT) == {"bf16"}
    assert CpuBackend.gemm_dtypes == CPU_GEMM_DTYPES


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2", "int8"])
def test_backend_cpu_refuses_them_naming_the_supported_dtypes(dtype):
    says = f"backend cpu does not support dtype {dtype!r}; supported: fp64, fp32"
    assert f"c.yaml: sweeps.q.dtypes: {says}" in _refusal(_config([dtype], backend="cpu"))
    blas = _config(["fp64"], backend="cpu", blas=["fp64", dtype])
    assert f"c.yaml: ceilings.blas_dtypes: {says}" in _refusal(blas)


def test_the_default_cpu_campaign_is_unchanged():
    config = load_config(CONFIG / "config.yaml")
    assert config["ceilings"]["blas_dtypes"] == ["fp64", "fp32"]
    for sweep in config["sweeps"].values():
        assert not set(sweep["dtypes"]) & set(LT_DTYPE_ALIGNMENT)


@pytest.mark.parametrize(
    ("size", "says"),
    [
        ("512 MiBs", "unknown unit 'MiBs'"),
        ("512", "has no unit"),
        ("0 MiB", "is zero"),
        ("1 GBps", "write bytes per second as B/s"),
    ],
)
def test_a_host_link_buffer_without_a_known_size_fails_at_validation(tmp_path, size, says):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"backend": "cuda", "ceilings": {"host_link_buffer": size}}))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ceilings.host_link_buffer: ")
    assert says in str(caught.value)


@pytest.mark.parametrize("size", ["256 MiB", "1 GB", None])
def test_a_host_link_buffer_with_a_unit_or_null_is_accepted(size):
    config = validate_config({"ceilings": {"host_link_buffer": size}}, "c.yaml")
    assert config["ceilings"]["host_link_buffer"] == size


def test_a_stage_scenario_is_never_drawn_against_an_integer_path():
    stages = {
        "s": {"compute_path": "int8_tensor", "stages": [{"name": "A", "flops": 1, "bytes": 1}]}
    }
    assert "stages.s.compute_path: unknown compute path 'int8_tensor'" in _refusal(
        {"stages": stages}
    )
    stages["s"]["compute_path"] = "fp8_tensor"  # FLOP/s: a stage may run on it
    validate_config({"stages": stages}, "c.yaml")


def test_counters_may_name_an_fp8_configuration():
    ids = ["weight_reuse_fp8/fp8_e4m3/nt/m1_n4096_k4096"]
    assert validate_config({"counters": {"configs": ids}}, "c.yaml")["counters"]["configs"] == ids


def test_gpu_campaign_adds_fp8_and_int8_weight_reuse_and_ceilings():
    config = load_config(CONFIG / "gpu.yaml")
    assert {"fp8_e4m3", "int8"} <= set(config["ceilings"]["blas_dtypes"])
    bf16 = config["sweeps"]["weight_reuse"]
    for name, dtype in (("weight_reuse_fp8", "fp8_e4m3"), ("weight_reuse_int8", "int8")):
        sweep = config["sweeps"][name]
        assert sweep["dtypes"] == [dtype] and sweep["layouts"] == ["nt"]
        assert sweep["n"] == bf16["n"] and sweep["k"] == bf16["k"]
        assert all(size % 16 == 0 for size in sweep["n"] + sweep["k"])
        # the fewest points that show the reuse curve: every one has a bf16 twin, from M = 1
        # (memory-bound) past the ridge
        assert set(sweep["m"]) < set(bf16["m"]) and min(sweep["m"]) == 1
        assert max(sweep["m"]) >= 1024 and len(sweep["m"]) <= len(bf16["m"]) // 2
        assert set(sweep["cache_states"]) == {"warm", "cold"}


# -- rooflab model gemm ---------------------------------------------------------------------------

INT8 = ["--n", "8192", "--k", "8192", "--x-dtype", "int8", "--w-dtype", "int8"]
INT8 += ["--y-dtype", "int32"]


def _run(capsys, *args) -> tuple[int, str, str]:
    status = main(["model", "gemm", "--m", "1,256", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_model_gemm_gives_an_int8_gemm_in_op_and_op_per_s(capsys):
    status, out, _ = _run(capsys, *INT8, "--device", "h200-sxm", "--format", "json")
    assert status == 0
    rows = json.loads(out)
    assert not any("flops" in key for row in rows for key in row)
    ledger = gemm_ledger(256, 8192, 8192, "int8", "int8", "int32")
    assert rows[1]["ops"] == ledger.flops == 2 * 256 * 8192 * 8192
    assert rows[1]["bytes"] == ledger.bytes and rows[1]["intensity"] == ledger.intensity
    assert rows[1]["peak_ops_per_s"] == 1978.9e12
    assert rows[1]["attainable_ops_per_s"] == 1978.9e12 and rows[1]["limiter"] == "compute"
    assert rows[0]["peak_source"] == "datasheet h200-sxm, integer path int8"
    status, out, _ = _run(capsys, *INT8, "--device", "h200-sxm")
    first, sources, header, *_ = out.splitlines()
    assert "peak 1.9789 POP/s" in first and "ridge 412.271 OP/B" in first
    assert "integer operations (OP, not FLOP)" in first
    assert sources.startswith("peak from datasheet h200-sxm, integer path int8; bandwidth from")
    assert header.split()[3:6] == ["ops", "(GOP)", "bytes"]
    assert "intensity (OP/B)" in header and "attainable_ops_per_s (POP/s)" in header
    assert "FLOP" not in header


def test_model_gemm_keeps_fp8_in_flop(capsys):
    args = ["--n", "4096", "--k", "4096", "--dtype", "fp8_e4m3", "--device", "h200-sxm"]
    status, out, _ = _run(capsys, *args)
    assert status == 0
    assert "peak 1.9789 PFLOP/s" in out and "path fp8;" in out and "flops (" in out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--peak", "1000 TFLOP/s", "--bandwidth", "2 TB/s"],
            "--peak: '1000 TFLOP/s' is not in OP/s",
        ),
        (["--peak", "1000 TOPS", "--bandwidth", "2 TB/s"], "write OP/s for a rate"),
        (["--device", "article-hypothetical"], "no integer path 'int8'"),
        (["--device", "h200-sxm", "--path", "bf16"], "no integer path 'bf16'"),
    ],
)
def test_model_gemm_refuses_a_flop_per_s_peak_for_an_int8_gemm(capsys, args, says):
    status, out, err = _run(capsys, *INT8, *args)
    assert status == 2 and out == ""
    assert says in err and len(err.splitlines()) == 1


def test_model_gemm_refuses_an_op_per_s_peak_for_a_flop_gemm(capsys):
    args = ["--n", "64", "--k", "64", "--dtype", "bf16", "--peak", "100 TOP/s"]
    status, _, err = _run(capsys, *args, "--bandwidth", "1 TB/s")
    assert status == 2 and "is not in FLOP/s" in err


def test_model_gemm_what_ifs_of_an_int8_preset(capsys):
    _, out, _ = _run(
        capsys, *INT8, "--device", "h200-sxm", "--bandwidth", "3 TB/s", "--format", "json"
    )
    row = json.loads(out)[0]
    assert (row["peak_ops_per_s"], row["bandwidth_b_per_s"]) == (1978.9e12, 3e12)
    assert row["bandwidth_source"] == "--bandwidth"
    _, out, _ = _run(capsys, *INT8, "--device", "h200-sxm", "--peak", "1 POP/s", "--format", "json")
    row = json.loads(out)[0]
    assert (row["peak_ops_per_s"], row["bandwidth_b_per_s"]) == (1e15, 4.8e12)
    assert row["peak_source"] == "--peak"
    assert row["bandwidth_source"] == "datasheet h200-sxm, level HBM"


@pytest.fixture
def integer_store(tmp_path):
    results = tmp_path / "results"
    constructed_integer.write_campaign(results)
    ingest(results / "rooflab.duckdb", results)
    return str(results / "rooflab.duckdb")


def test_model_gemm_on_measured_ceilings_pairs_int8_with_its_integer_path(capsys, integer_store):
    db = ["--measured", "--db", integer_store, "--format", "json"]
    status, out, err = _run(capsys, *INT8, *db)
    assert status == 0, err
    row = json.loads(out)[0]
    assert row["peak_ops_per_s"] == 1.4e15 and row["bandwidth_b_per_s"] == 4e12
    assert row["peak_source"].startswith("measured int8_tensor (cublaslt_matmul)")
    _, out, _ = _run(capsys, "--n", "64", "--k", "64", "--dtype", "bf16", *db)
    assert json.loads(out)[0]["peak_flops_per_s"] == 760e12  # the faster bf16 row
    for args, says in (
        ([*INT8, "--path", "bf16_tensor"], "--path bf16_tensor is no integer path"),
        (["--n", "64", "--k", "64", "--dtype", "bf16", "--path", "int8_tensor"], "integer path"),
    ):
        status, _, err = _run(capsys, *args, *db)
        assert status == 2 and says in err, err


def test_model_stages_is_never_bounded_by_an_integer_path(capsys, integer_store):
    stages = str(CONFIG / "stages" / "article-two-stage.yaml")
    status = main(
        ["model", "stages", stages, "--measured", "--db", integer_store, "--path", "int8_tensor"]
    )
    assert status == 2
    assert "--path int8_tensor is an integer path (OP/s)" in capsys.readouterr().err
