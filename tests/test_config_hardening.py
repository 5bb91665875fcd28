"""Config values the schema's types allow but the campaign cannot use: refused when the config is
loaded, with one line naming the key, by `validate_config` and by `rooflab measure ... --config`."""

import subprocess
import sys

import pytest
import yaml

from rooflab.backends.cublas_args import library_paths
from rooflab.config import (
    COMPUTE_PATHS,
    LONG_STAGE_LIST,
    MAX_YAML_BYTES,
    MEMORY_LEVEL_NAMES,
    ConfigError,
    config_file,
    load_config,
    load_yaml,
    usable_cpus,
    validate_config,
)
from rooflab.counters.points import LEVEL_ORDER
from rooflab.report.roofline_chart import BANDWIDTH_LEVELS, FMA_PATHS, LIBRARY_PATHS
from rooflab.vocabulary import COMPUTE_PATH, INTEGER_PATHS, MEMORY_LEVELS
from tests.conftest import run_rooflab

CPUS = usable_cpus()


def scenario(*stages: dict, **keys) -> dict:
    return {"stages": {"x": {**keys, "stages": list(stages)}}}


def stage(name: str, *after: str, flops: object = 1) -> dict:
    return {"name": name, "flops": flops, "bytes": 1, "after": list(after)}


# config -> the one line after "<file>: "
REFUSED = {
    "warmup inf": (
        {"timing": {"warmup_s": float("inf")}},
        "timing.warmup_s: must be a finite number of seconds, got inf",
    ),
    "min time nan": (
        {"timing": {"min_time_s": float("nan")}},
        "timing.min_time_s: must be a finite number of seconds, got nan",
    ),
    "factor -inf": (
        {"disturbance": {"retake_factor": float("-inf")}},
        "disturbance.retake_factor: must be a finite number, got -inf",
    ),
    "stage flops inf": (
        scenario(stage("A", flops=float("inf"))),
        "stages.x.stages[0].flops: must be a finite number, got inf",
    ),
    "warmup an hour": (
        {"timing": {"warmup_s": 7200}},
        "timing.warmup_s: 7200 is greater than the maximum of 3600",
    ),
    "samples crossed": (
        {"timing": {"min_samples": 50, "max_samples": 20}},
        "timing.min_samples: must be at most timing.max_samples (20), got 50",
    ),
    "working sets crossed": (
        {"ceilings": {"min_working_set": "1 GiB", "max_working_set": "1 MiB"}},
        "ceilings.min_working_set: must be at most ceilings.max_working_set (1 MiB), got 1 GiB",
    ),
    "working set unit": (
        {"ceilings": {"min_working_set": "16 KB"}},
        "ceilings.min_working_set: '16 KB': unknown unit 'KB' (K is not a prefix here; write kB "
        "(1e3 B) or KiB (2**10 B)); expected B, kB, MB, GB, TB (powers of 10) or KiB, MiB, GiB, "
        "TiB (powers of 2)",
    ),
    "working set auto min": (
        {"ceilings": {"min_working_set": "auto"}},
        "ceilings.min_working_set: 'auto' is not a number with a unit; expected B, kB, MB, GB, TB "
        "(powers of 10) or KiB, MiB, GiB, TiB (powers of 2)",
    ),
    "threads beyond cpus": (
        {"backend": "cpu", "ceilings": {"threads": CPUS + 1}},
        f"ceilings.threads: at most the {CPUS} CPUs this process may use (backend cpu), "
        f"got {CPUS + 1}",
    ),
    "threads beyond cpus, auto": (
        {"ceilings": {"threads": 1000 + CPUS}},
        f"ceilings.threads: at most the {CPUS} CPUs this process may use (backend auto), "
        f"got {1000 + CPUS}",
    ),
    "threads beyond any machine": (
        {"backend": "cuda", "ceilings": {"threads": 2**24}},
        "ceilings.threads: 16777216 is greater than the maximum of 1048576",
    ),
    "stage cycle": (
        scenario(stage("A", "C"), stage("B", "A"), stage("C", "B")),
        "stages.x.stages: stages form a cycle: A -> C -> B -> A",
    ),
    "stage twice": (
        scenario(stage("A"), stage("A")),
        "stages.x.stages: stage 'A' is defined twice",
    ),
    "stage after unknown": (
        scenario(stage("A", "Z")),
        "stages.x.stages: stage 'A' runs after unknown stage 'Z'",
    ),
    "unknown compute path": (
        scenario(stage("A"), compute_path="fp32_fmaa"),
        "stages.x.compute_path: unknown compute path 'fp32_fmaa'; known: "
        + ", ".join(COMPUTE_PATHS),
    ),
    "sweep of a million points": (
        {
            "sweeps": {
                "s": {
                    "m": list(range(1, 1001)),
                    "n": list(range(1, 1001)),
                    "k": [8],
                    "dtypes": ["fp32"],
                }
            }
        },
        "sweeps.s: 1,000,000 points (1000 m x 1000 n x 1 k x 1 dtypes x 1 layouts), over the "
        "100,000 a sweep may have; split it or thin its lists",
    ),
    "workload of too many cases": (
        {"workloads": {"w": {"entry": "m:f", "params": {p: list(range(64)) for p in "abc"}}}},
        "workloads.w: 262,144 points (64 params.a x 64 params.b x 64 params.c x 1 dtypes), over "
        "the 100,000 a sweep may have; split it or thin its lists",
    ),
    "scenario name that is a path": (
        {
            "stages": {
                "../../evil": {
                    "measurable": True,
                    "stages": [{"name": "a", "kernel": "stream", "time_s": 0.1}],
                }
            }
        },
        "stages: name '../../evil' may have only letters, digits, '_' and '-' (at most 100): "
        "it becomes a folder, a Snakemake target and a chart's file name",
    ),
    "sweep name that is markup": (
        {"sweeps": {"</script>x": {"m": [8], "n": [8], "k": [8], "dtypes": ["fp32"]}}},
        "sweeps: name '</script>x' may have only letters, digits, '_' and '-' (at most 100): "
        "it becomes a folder, a Snakemake target and a chart's file name",
    ),
    "unknown memory level": (
        scenario(stage("A"), memory_level="VRAM"),
        "stages.x.memory_level: unknown memory level 'VRAM'; known: L1, L2, L3, DRAM, HBM",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_validate_config_refuses_with_one_line_naming_the_key(case):
    config, says = REFUSED[case]
    with pytest.raises(ConfigError) as caught:
        validate_config(config, "config.yaml")
    assert str(caught.value) == f"config.yaml: {says}"


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_rooflab_measure_refuses_before_measuring(case, tmp_path):
    config, says = REFUSED[case]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))  # .inf and .nan written as YAML writes them
    out = tmp_path / "out"
    result = run_rooflab(
        "measure", "gemm", "--sweep", "s", "--config", path, "--out", out, refused=True
    )
    assert result.returncode != 0
    assert result.stderr.splitlines() == [f"rooflab: error: {path}: {says}"]
    assert not out.exists()


def test_the_limits_let_sensible_values_through():
    config = validate_config(
        {
            "backend": "cpu",
            "timing": {"warmup_s": 3600, "min_samples": 20, "max_samples": 20},
            "ceilings": {"threads": CPUS, "min_working_set": "1 MiB", "max_working_set": "1 MiB"},
            **scenario(stage("A"), stage("B", "A"), compute_path="bf16_tensor", memory_level="L2"),
        }
    )
    assert config["ceilings"]["threads"] == CPUS


def test_gpu_threads_and_cluster_nodes_are_not_held_to_these_cpus():
    # On the CUDA backend threads are GPU threads; on a cluster the jobs run on other nodes.
    validate_config({"backend": "cuda", "ceilings": {"threads": 4096 * CPUS}})
    validate_config(
        {
            "backend": "cpu",
            "machines": {"big": {"slurm_extra": "--constraint=big"}},
            "ceilings": {"threads": 4096 * CPUS},
        }
    )


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"backend: cpu\ntiming: \xff\xfe\n", "not UTF-8 text (byte 0xff at offset 21)"),
        (b"\x89PNG\r\n\x1a\n", "not UTF-8 text (byte 0x89 at offset 0)"),
        (b"backend: \x00cpu\n", "not text (character #x0000 at position 9)"),
    ],
)
def test_a_binary_config_names_the_file(data, says, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: {says}"
    out = tmp_path / "out"
    result = run_rooflab("measure", "ceilings", "--config", path, "--out", out, refused=True)
    assert result.returncode != 0
    assert result.stderr.splitlines() == [f"rooflab: error: {path}: {says}"]


def test_the_known_ceiling_names_are_every_name_the_code_measures():
    gpu_paths = {p for cc in (70, 80, 90) for p in library_paths(cc).values()}
    gemm_paths = {p for paths in COMPUTE_PATH.values() for p in paths.values()}
    known = {*FMA_PATHS, *LIBRARY_PATHS, *gpu_paths, *gemm_paths}
    # a stage's work is in FLOP: never an integer path (OP/s), every other one
    assert INTEGER_PATHS and known >= INTEGER_PATHS
    assert known - INTEGER_PATHS == set(COMPUTE_PATHS)
    assert {*BANDWIDTH_LEVELS, *LEVEL_ORDER, *MEMORY_LEVELS} == set(MEMORY_LEVEL_NAMES)


def test_the_schema_lists_the_known_ceiling_names():
    text = config_file("schema.yaml").read_text(encoding="utf-8")
    assert all(name in text for name in (*COMPUTE_PATHS, *MEMORY_LEVEL_NAMES))


LAUGHS = (
    "a: &a ["
    + ",".join(['"lol"'] * 9)
    + "]\n"
    + "".join(
        f"{b}: &{b} [" + ",".join([f"*{a}"] * 9) + "]\n"
        for a, b in zip("abcdefgh", "bcdefghi", strict=True)
    )
)  # 1 KB that expands to 9^9 strings


def test_a_billion_laughs_file_is_refused_in_one_line_before_it_expands(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(LAUGHS)
    assert len(LAUGHS) < 1100
    result = subprocess.run(
        [sys.executable, "-m", "rooflab", "model", "stages", str(bomb)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"rooflab: error: {bomb}: its aliases expand it past 1000000 nodes")
    assert len(line) < 300 and not result.stdout


def test_a_config_file_too_large_to_be_a_config_is_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("m: [" + "1," * (MAX_YAML_BYTES // 2) + "1]\n")
    with pytest.raises(ConfigError, match=r"big\.yaml: \d+ bytes, over the 16777216"):
        load_yaml(big)
    small = tmp_path / "anchors.yaml"  # aliases within the bound still load as before
    small.write_text("base: &b {warmup_s: 0.1}\ntiming: *b\n")
    assert load_yaml(small) == {"base": {"warmup_s": 0.1}, "timing": {"warmup_s": 0.1}}


def test_a_gemm_size_written_as_a_decimal_names_its_file_and_key(tmp_path):
    config = tmp_path / "m4.yaml"
    config.write_text(
        "sweeps:\n  s:\n    m: [1, 4.0]\n    n: [64]\n    k: [64]\n    dtypes: [fp32]\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert str(caught.value) == (
        f"{config}: sweeps.s.m[1]: must be a whole number written without a decimal point, got 4.0"
    )


def test_a_cycle_of_100000_stages_is_one_short_line():
    names = [f"s{i}" for i in range(100_000)]
    stages = [stage(name, names[i - 1]) for i, name in enumerate(names)]  # s0 after s99999
    with pytest.raises(ConfigError) as caught:
        validate_config(scenario(*stages), "config.yaml")
    said = str(caught.value)
    assert said == (
        "config.yaml: stages.x.stages: stages form a cycle: s0 -> s99999 -> s99998 -> s99997 "
        "-> (99993 more) -> s3 -> s2 -> s1 -> s0"
    )


@pytest.mark.parametrize(
    "bad",
    [{"name": "b", "flops": True, "bytes": 1}, {"name": "b", "flops": 1, "bytes": 1, "x": 1},
     {"name": "", "flops": 1, "bytes": 1}, {"name": "b", "flops": 1, "bytes": 1, "after": [1]}],
)  # fmt: skip
def test_a_long_stages_list_is_checked_with_the_same_words_as_a_short_one(bad):
    """A list past LONG_STAGE_LIST is checked by a compiled validator (jsonschema's costs 10 s
    for 100,000 stages); a stage it refuses gets the message it gets in a short list."""
    said = {}
    for length in (3, LONG_STAGE_LIST + 5):
        stages = [stage(f"s{i}") for i in range(length)]
        stages[2] = dict(bad)
        with pytest.raises(ConfigError) as caught:
            validate_config(scenario(*stages), "config.yaml")
        said[length] = str(caught.value)
    assert said[3] == said[LONG_STAGE_LIST + 5]
    assert "stages.x.stages[2]" in said[3]


def test_a_long_stages_list_gets_its_defaults_and_stays_whole():
    names = [f"s{i}" for i in range(5000)]
    stages = [{"name": n, "flops": 1, "bytes": 1} for n in names]
    config = validate_config(scenario(*stages), "config.yaml")
    checked = config["stages"]["x"]["stages"]
    assert [s["name"] for s in checked] == names
    assert all(s["after"] == [] for s in checked)
