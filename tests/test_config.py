import subprocess
from pathlib import Path

import pytest
import yaml

from rooflab.config import ConfigError, campaign_config, load_config, validate_config
from rooflab.devices import load_device_presets
from tests.conftest import copy_workflow, installed_script

REPO = Path(__file__).resolve().parents[1]


def test_default_config_is_valid_and_defaults_are_filled():
    config = load_config(REPO / "config" / "config.yaml")
    assert config["backend"] == "auto"
    assert config["timing"]["noisy_iqr_ratio"] == 0.1
    assert {"weight_reuse", "tails"} <= set(config["sweeps"])


def test_the_settings_defaults_are_the_schemas():
    """The settings classes take their defaults from the schema (rooflab.config.defaults), which
    every campaign and command gets: built from an empty config, each equals its class built bare
    (a default written into a class again fails here)."""
    from rooflab.conditions.disturbance import DisturbanceSettings
    from rooflab.experiments.ceiling_plan import CeilingSettings, settings_from_config
    from rooflab.experiments.counters import CounterSettings
    from rooflab.experiments.timing import TimingSettings

    defaults = validate_config({})
    disturbance = defaults["disturbance"]
    assert DisturbanceSettings.from_config(disturbance) == DisturbanceSettings()
    assert TimingSettings.from_config(defaults["timing"], disturbance) == TimingSettings()
    ceilings = settings_from_config(defaults["ceilings"], disturbance=disturbance)
    assert ceilings == CeilingSettings()
    assert CounterSettings.from_config(defaults["counters"]) == CounterSettings()


def test_sweep_defaults_are_filled():
    config = validate_config({"sweeps": {"s": {"m": [1], "n": [8], "k": [8], "dtypes": ["fp32"]}}})
    assert config["sweeps"]["s"]["cache_states"] == ["warm", "cold"]
    assert config["sweeps"]["s"]["layouts"] == ["nn"]


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"bakend": "cpu"}, "unknown key 'bakend' at the top level"),
        ({"backend": "rocm"}, "backend: 'rocm' is not one of"),
        ({"timing": {"warmup": 1}}, "unknown key 'warmup' in timing"),
        ({"sweeps": {"s": {"m": [1, 0], "n": [8], "k": [8], "dtypes": ["fp32"]}}}, "sweeps.s.m[1]"),
        (
            {"sweeps": {"s": {"m": [1], "n": [8], "k": [8], "dtypes": ["fp12"]}}},
            "sweeps.s.dtypes[0]",
        ),
        ({"sweeps": {"s": {"m": [1], "n": [8], "k": [8], "dtype": ["fp32"]}}}, "sweeps.s"),
        (
            {"stages": {"x": {"stages": [{"name": "A", "flops": "1 TB", "bytes": 0}]}}},
            "stages.x stages[0].flops",
        ),
    ],
)
def test_bad_config_names_the_key(config, says):
    with pytest.raises(ConfigError) as caught:
        validate_config(config)
    assert says in str(caught.value)


def test_device_presets_parse_with_units():
    presets = load_device_presets()
    assert presets["h200-sxm"].bandwidth_b_per_s["HBM"] == 4.8e12
    assert presets["h100-sxm"].peak_flops_per_s["bf16"] == 989.4e12
    assert presets["article-hypothetical"].peak_flops_per_s["bf16"] == 120e12
    assert all(p.source for p in presets.values())


def _snakemake(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [installed_script("snakemake"), "-n", "--cores", "1", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_snakemake_dry_run_validates_the_default_config(tmp_path):
    result = _snakemake(copy_workflow(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_snakemake_refuses_an_unknown_key_and_names_it(tmp_path):
    workdir = copy_workflow(tmp_path)
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    config["sweeps"] = {
        "reuse": {"m": [1], "n": [8], "k": [8], "dtypes": ["fp32"], "cache_state": ["warm"]}
    }
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    result = _snakemake(workdir)
    assert result.returncode != 0
    assert "unknown key 'cache_state' in sweeps.reuse" in result.stdout + result.stderr


@pytest.mark.parametrize("name", ["config.yaml", "gpu.yaml"])
def test_shipped_campaigns_are_valid(name):
    config = load_config(REPO / "config" / name)
    assert config["sweeps"]
    for sweep in config["sweeps"].values():
        assert sweep["cache_states"] == ["warm", "cold"]


def test_invalid_yaml_names_the_file_and_line(tmp_path):
    path = tmp_path / "config.yaml"
    # the flow list opened on line 3 is never closed: YAML stops at the ':' on line 4
    path.write_text("backend: cpu\ntiming:\n  warmup_s: [0.1\n  min_samples: 3\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: line 4 is not valid YAML (")  # then YAML's words


ONLY_MINE = {
    "backend": "cpu",
    "sweeps": {"mine": {"m": [1, 2], "n": [64], "k": [64], "dtypes": ["fp32"]}},
    "stages": {"mine": {"stages": [{"name": "A", "flops": 1, "bytes": 1}]}},
}


def test_a_campaign_files_named_sections_replace_the_defaults(tmp_path):
    default = tmp_path / "config.yaml"
    default.write_text((REPO / "config" / "config.yaml").read_text())
    mine = tmp_path / "only_mine.yaml"
    mine.write_text(yaml.safe_dump(ONLY_MINE))
    more = tmp_path / "more.yaml"
    more.write_text(
        yaml.safe_dump({"sweeps": {"also": {"m": [3], "n": [8], "k": [8], "dtypes": ["fp64"]}}})
    )
    # What Snakemake hands the Snakefile: everything merged key by key, defaults under the rest.
    merged = yaml.safe_load(default.read_text())
    merged["backend"] = "cpu"
    merged["sweeps"].update(ONLY_MINE["sweeps"])
    merged["stages"].update(ONLY_MINE["stages"])
    config = campaign_config(merged, [mine, more, str(default)], default)
    assert config is merged
    assert set(config["sweeps"]) == {"mine", "also"}
    assert config["sweeps"]["also"] == {"m": [3], "n": [8], "k": [8], "dtypes": ["fp64"]}
    assert set(config["stages"]) == {"mine"}
    assert config["timing"]["min_time_s"] == 0.02  # the other sections still merge
    validate_config(config)


def test_without_a_campaign_file_the_defaults_stay(tmp_path):
    default = REPO / "config" / "config.yaml"
    config = yaml.safe_load(default.read_text())
    timing_only = tmp_path / "timing.yaml"
    timing_only.write_text("timing: {min_samples: 20}\n")
    for files in ([default], [timing_only, default], []):
        kept = campaign_config(yaml.safe_load(default.read_text()), files, default)
        assert kept == config


def test_snakemake_configfile_runs_only_that_campaigns_sweeps(tmp_path):
    mine = tmp_path / "only_mine.yaml"
    mine.write_text(yaml.safe_dump(ONLY_MINE))
    result = _snakemake(REPO, "--configfile", str(mine))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "results/sweeps/mine/local/timing.json" in output
    assert "sweeps/weight_reuse/" not in output and "sweeps/tails/" not in output
