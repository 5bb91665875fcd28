import itertools
import json

import pytest

from rooflab.config import ConfigError, validate_config
from rooflab.experiments.ceilings import plateaus, settings_from_config, working_set_sizes
from rooflab.records import read_run
from tests.conftest import run_rooflab

KiB, MiB = 1024, 1024 * 1024


def test_working_set_grid_is_finer_than_2x_and_spans_the_range():
    sizes = working_set_sizes(16 * KiB, 256 * MiB, 4)
    assert sizes[0] == 16 * KiB and sizes[-1] == 256 * MiB
    assert all(b / a <= 2**0.25 * 1.05 for a, b in itertools.pairwise(sizes))
    assert len(sizes) == 14 * 4 + 1


def test_plateaus_sit_inside_each_level_and_outside_the_one_before():
    windows = plateaus({"L1": 64 * KiB, "L2": MiB, "L3": 32 * MiB}, high=512 * MiB)
    assert windows == {
        "L1": (0, 32 * KiB),
        "L2": (128 * KiB, 512 * KiB),
        "L3": (2 * MiB, 16 * MiB),
        "DRAM": (4 * (64 * KiB + MiB + 32 * MiB), 512 * MiB),
    }


def test_settings_from_config_parses_sizes_with_units():
    config = validate_config(
        {"ceilings": {"min_working_set": "32 KiB", "max_working_set": "1 GiB"}}
    )
    settings = settings_from_config(config["ceilings"])
    assert settings.min_working_set_bytes == 32 * KiB
    assert settings.max_working_set_bytes == 2**30
    default = settings_from_config(validate_config({})["ceilings"])
    assert default.max_working_set_bytes is None and default.kernels == ("read", "copy", "triad")
    with pytest.raises(ConfigError, match=r"ceilings\.max_working_set: '1 GB/s'"):
        settings_from_config({**config["ceilings"], "max_working_set": "1 GB/s"})


@pytest.fixture(scope="module")
def quick_ceilings(tmp_path_factory):
    out = tmp_path_factory.mktemp("ceilings")
    result = run_rooflab(
        "measure", "ceilings", "--backend", "cpu", "--quick", "--out", str(out), "--format", "json"
    )
    assert result.returncode == 0, result.stderr
    (run_dir,) = out.iterdir()
    return json.loads(result.stdout), read_run(run_dir)


def test_quick_ceilings_name_every_level_and_path(quick_ceilings):
    rows, _ = quick_ceilings
    by_name = {row["name"]: row for row in rows}
    assert set(by_name) == {
        "L1",
        "L2",
        "L3",
        "DRAM",
        "fp64_fma",
        "fp32_fma",
        "fp64_blas",
        "fp32_blas",
    }
    for row in rows:
        assert row["unit"] == ("B/s" if row["kind"] == "bandwidth" else "FLOP/s")
        assert row["value"] > 0 and row["method"]
    # Physical sanity that a broken kernel or byte count would violate.
    assert by_name["L1"]["value"] > by_name["DRAM"]["value"]
    assert by_name["fp32_fma"]["value"] > 1.3 * by_name["fp64_fma"]["value"]


def test_quick_ceilings_keep_every_sweep_point_and_condition(quick_ceilings):
    rows, tables = quick_ceilings
    sweep = tables["ceiling_sweep"].to_pylist()
    assert len(sweep) >= 20
    assert {p["level"] for p in sweep} >= {"L1", "L2", "L3", "DRAM"}
    bandwidth = {r["name"]: r["value"] for r in rows if r["kind"] == "bandwidth"}
    for level, value in bandwidth.items():
        on_plateau = [p["value"] for p in sweep if p["level"] == level]
        assert value == max(on_plateau)
    conditions = tables["conditions"].to_pylist()
    assert all(c["cpu_ghz_measured"] > 0.1 for c in conditions)
    assert all("throttle_reasons" in json.loads(c["unavailable"]) for c in conditions)
    (run,) = tables["runs"].to_pylist()
    assert run["kind"] == "ceilings" and json.loads(run["blas"])
