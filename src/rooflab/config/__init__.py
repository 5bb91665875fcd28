"""Campaign configuration: YAML files validated against config/schema.yaml, defaults filled in.

The Snakefile and the CLI both go through `validate_config`, so a key means the same in both. Errors
are one line that names the key (`sweeps.decode.m[2]`) and what was expected. What the schema cannot
say is checked after it: every number finite, ranges whose ends are two keys, the usable CPUs, and
stage graphs (names, order, the ceilings a scenario is drawn against), and the dtypes only
cuBLASLt runs (FP8, int8): the cuda backend's alone, in layout nt, with N and K aligned.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path

from rooflab.config.files import MAX_YAML_BYTES, ConfigError, config_file, load_yaml
from rooflab.model import ModelError, Stage, sized_stage, topological_order
from rooflab.units import UnitError, as_quantity, parse_bytes
from rooflab.vocabulary import COMPUTE_PATH, INTEGER_PATHS, MEMORY_LEVELS, too_many_points

__all__ = [
    "COMPUTE_PATHS",
    "MAX_YAML_BYTES",
    "MEMORY_LEVEL_NAMES",
    "ConfigError",
    "campaign_config",
    "config_file",
    "defaults",
    "load_config",
    "load_scenario",
    "load_yaml",
    "stages_from_config",
    "usable_cpus",
    "validate_config",
]


# The measured ceilings a stages scenario may be drawn against (`compute_path`, `memory_level`):
# the path each GEMM dtype pairs with, the FMA chains (ceilings.fma_dtypes), the library GEMMs
# (CPU BLAS; cuBLAS without tensor cores), the cache levels and the memory behind them. Not an
# integer path (int8_tensor, in OP/s): a stage's work is in FLOP.
COMPUTE_PATHS = tuple(
    sorted(
        {
            *(
                path
                for paths in COMPUTE_PATH.values()
                for path in paths.values()
                if path not in INTEGER_PATHS
            ),
            *(f"{dtype}_fma" for dtype in ("fp64", "fp32", "fp16")),
            *(f"{dtype}_blas" for dtype in ("fp64", "fp32")),
            *(f"{dtype}_cublas" for dtype in ("fp64", "fp32")),
        }
    )
)
MEMORY_LEVEL_NAMES = ("L1", "L2", "L3", *MEMORY_LEVELS)
# GEMM dtypes only cuBLASLt runs (rooflab.backends.cublaslt_args), each with the multiple N and K
# must be of: the cuda backend's alone, and only in cuBLASLt's TN format (W stored N×K: layout nt;
# its FP8 and int8 kernels on Ada, Hopper and Blackwell GeForce take no other).
LT_DTYPE_ALIGNMENT = {"fp8_e4m3": 16, "fp8_e5m2": 16, "int8": 4}
CPU_GEMM_DTYPES = tuple(COMPUTE_PATH["cpu"])  # what the CPU backend's GEMMs and BLAS ceilings run

# Sections whose entries are named (a sweep, a scenario, a machine): a campaign file passed with
# --configfile replaces these of the default file instead of adding to them (campaign_config).
NAMED_SECTIONS = ("machines", "sweeps", "stages", "workloads", "timelines")


def _with_defaults(validator_class):
    """A validator that fills `default` values into the instance as it validates."""
    check_properties = validator_class.VALIDATORS["properties"]

    def fill_then_check(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(key, copy.deepcopy(subschema["default"]))
        yield from check_properties(validator, properties, instance, schema)

    from jsonschema import validators

    return validators.extend(validator_class, {"properties": fill_then_check})


@cache
def _schema() -> dict:
    return load_yaml(config_file("schema.yaml"))


def defaults(section: str) -> dict:
    """A section's defaults as config/schema.yaml writes them: the one place a setting's default
    lives (the settings classes take their own defaults from here). Read from the schema's
    `default` keys, as validation fills them, without loading the validator."""
    properties = _schema()["properties"][section]["properties"]
    return {k: copy.deepcopy(sub["default"]) for k, sub in properties.items() if "default" in sub}


def _key_path(path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _describe(error, prefix: tuple = ()) -> str:
    where = _key_path((*prefix, *error.absolute_path))
    if error.validator == "additionalProperties":
        allowed = set(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - allowed)
        known = f"; known keys: {', '.join(sorted(allowed))}" if allowed else ""
        place = f"in {where}" if where else "at the top level"
        return f"unknown key {', '.join(map(repr, unknown))} {place}{known}"
    if error.schema == _schema()["$defs"]["name"]:  # a name that becomes a folder, a target
        return (
            f"{where}: name {error.instance!r} may have only letters, digits, '_' and '-' (at "
            "most 100): it becomes a folder, a Snakemake target and a chart's file name"
        )
    return f"{where or 'top level'}: {error.message}"


def _non_finite(value: object, path: tuple = ()) -> tuple[tuple, float] | None:
    """(key path, value) of the first number that is not finite (YAML's .inf, .nan), if any."""
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        found = _non_finite(item, (*path, key))
        if found:
            return found
    return None


def _check(schema: dict, instance: object, source: str) -> None:
    found = _non_finite(instance)
    if found:
        path, value = found
        unit = " of seconds" if path and str(path[-1]).endswith("_s") else ""
        where = _key_path(path) or "top level"
        raise ConfigError(f"{source}: {where}: must be a finite number{unit}, got {value}")
    # jsonschema imported here: the settings classes read defaults() at import, without it
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    with _stage_lists_set_aside(instance, source):
        error = best_match(_with_defaults(Draft202012Validator)(schema).iter_errors(instance))
    if error is not None:
        raise ConfigError(f"{source}: {_describe(error)}")


LONG_STAGE_LIST = 1000  # stages past this are checked by a compiled validator, not jsonschema's


def _stage_lists(instance: object) -> list[tuple[tuple, dict]]:
    """(key path, its scenario) of each long stages list: a config's `stages.<name>.stages`, or
    a stages file's own `stages`."""
    stages = instance.get("stages") if isinstance(instance, dict) else None
    scenarios = {(): instance} if isinstance(stages, list) else stages
    if not isinstance(scenarios, dict):
        return []
    return [
        (("stages", name) if name else (), scenario)
        for name, scenario in scenarios.items()
        if isinstance(scenario, dict)
        and isinstance(scenario.get("stages"), list)
        and len(scenario["stages"]) > LONG_STAGE_LIST
    ]


@cache
def _stage_schema() -> tuple[dict, Callable]:
    """One stage's schema (with the definitions it refers to) and its compiled validator, which
    also fills its defaults."""
    import fastjsonschema

    stage = {**_schema()["$defs"]["scenario"]["properties"]["stages"]["items"]}
    stage["$defs"] = _schema()["$defs"]
    return stage, fastjsonschema.compile(stage, use_default=True)


@contextlib.contextmanager
def _stage_lists_set_aside(instance: object, source: str) -> Iterator[None]:
    """jsonschema takes ~0.1 ms a stage (10 s for a chain of 100,000): a long list's stages
    after its first are checked, and given their defaults, by a compiled validator of the stage
    schema, and set aside while jsonschema checks the rest; a stage it refuses is checked again
    by jsonschema, for the message every other key gets."""
    lists = _stage_lists(instance)
    if lists:
        import fastjsonschema

        schema, check_stage = _stage_schema()
        for path, scenario in lists:
            for index, stage in enumerate(scenario["stages"][1:], start=1):
                try:
                    check_stage(stage)
                except fastjsonschema.JsonSchemaException:
                    from jsonschema import Draft202012Validator
                    from jsonschema.exceptions import best_match

                    error = best_match(Draft202012Validator(schema).iter_errors(stage))
                    raise ConfigError(
                        f"{source}: {_describe(error, (*path, 'stages', index))}"
                    ) from None
    kept = [scenario["stages"] for _, scenario in lists]
    for _, scenario in lists:
        scenario["stages"] = scenario["stages"][:1]
    try:
        yield
    finally:
        for (_, scenario), stages in zip(lists, kept, strict=True):
            scenario["stages"] = stages


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), which the CPU backend measures with."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _check_shapes(config: dict, source: str) -> None:
    """GEMM sizes are whole numbers as written: JSON Schema counts 4.0 as an integer, and a
    float reaching the ledgers would stop the campaign with a traceback naming no key. A sweep
    or a workload's cases are bounded in number (vocabulary.MAX_POINTS_PER_SWEEP)."""
    for section, lists in (("sweeps", ("m", "n", "k", "dtypes", "layouts")), ("workloads", ())):
        for name, entry in config[section].items():
            if section == "workloads":
                lengths = {f"params.{key}": len(v) for key, v in entry.get("params", {}).items()}
                lengths["dtypes"] = len(entry["dtypes"])
            else:
                lengths = {key: len(entry[key]) for key in lists}
            refused = too_many_points(lengths)
            if refused:
                raise ConfigError(f"{source}: {section}.{name}: {refused}")
    for name, sweep in config["sweeps"].items():
        for key in ("m", "n", "k"):
            for index, value in enumerate(sweep.get(key) or []):
                if not isinstance(value, int) or isinstance(value, bool):
                    raise ConfigError(
                        f"{source}: sweeps.{name}.{key}[{index}]: must be a whole number "
                        f"written without a decimal point, got {value!r}"
                    )


def _check_ranges(config: dict, source: str) -> None:
    """What the schema cannot say: a range whose ends are two keys, and the CPUs there are."""
    timing = config["timing"]
    if timing["min_samples"] > timing["max_samples"]:
        raise ConfigError(
            f"{source}: timing.min_samples: must be at most timing.max_samples "
            f"({timing['max_samples']}), got {timing['min_samples']}"
        )
    ceilings, sizes = config["ceilings"], {}
    for key in ("min_working_set", "max_working_set"):
        if not (key == "max_working_set" and ceilings[key] == "auto"):
            try:
                sizes[key] = parse_bytes(ceilings[key], positive=True)
            except UnitError as error:
                raise ConfigError(f"{source}: ceilings.{key}: {error}") from None
    if sizes.get("min_working_set", 0) > sizes.get("max_working_set", math.inf):
        raise ConfigError(
            f"{source}: ceilings.min_working_set: must be at most ceilings.max_working_set "
            f"({ceilings['max_working_set']}), got {ceilings['min_working_set']}"
        )
    if ceilings["host_link_buffer"] is not None:
        try:
            parse_bytes(ceilings["host_link_buffer"], positive=True)
        except UnitError as error:
            raise ConfigError(f"{source}: ceilings.host_link_buffer: {error}") from None
    # On a cluster (a machine with sbatch options) the jobs run elsewhere: these CPUs say nothing.
    here = not any(m.get("slurm_extra") for m in config["machines"].values())
    threads, cpus = ceilings["threads"], usable_cpus()
    if here and config["backend"] != "cuda" and threads is not None and threads > cpus:
        raise ConfigError(
            f"{source}: ceilings.threads: at most the {cpus} CPUs this process may use "
            f"(backend {config['backend']}), got {threads}"
        )


def _check_lt_dtypes(config: dict, source: str) -> None:
    """The dtypes only cuBLASLt runs (LT_DTYPE_ALIGNMENT): not on backend cpu (in a sweep or
    ceilings.blas_dtypes), and in a sweep only with layout nt and N, K on their alignment."""
    cpu = config["backend"] == "cpu"
    asked = [("ceilings.blas_dtypes", config["ceilings"]["blas_dtypes"], None)]
    asked += [(f"sweeps.{name}.dtypes", s["dtypes"], s) for name, s in config["sweeps"].items()]
    for key, dtypes, sweep in asked:
        for dtype in (d for d in dtypes if d in LT_DTYPE_ALIGNMENT):
            if cpu:
                raise ConfigError(
                    f"{source}: {key}: backend cpu does not support dtype {dtype!r}; supported: "
                    f"{', '.join(CPU_GEMM_DTYPES)} (FP8 and int8 GEMMs run through cuBLASLt, on "
                    "backend cuda)"
                )
            if sweep is None:
                continue
            where = key.removesuffix(".dtypes")
            if "nn" in sweep["layouts"]:
                raise ConfigError(
                    f"{source}: {where}.layouts: dtype {dtype!r} with layout nn is refused: "
                    "cuBLASLt runs FP8 and int8 GEMMs only in its TN format (W stored N×K), "
                    "layout nt; give layouts: [nt] (the default is [nn])"
                )
            alignment = LT_DTYPE_ALIGNMENT[dtype]
            for size in ("n", "k"):
                for index, value in enumerate(sweep[size]):
                    if value % alignment:
                        raise ConfigError(
                            f"{source}: {where}.{size}[{index}]: dtype {dtype!r} needs "
                            f"{size.upper()} a multiple of {alignment} (cuBLASLt's alignment), "
                            f"got {value}"
                        )


def _check_scenario(scenario: dict, source: str, key: str = "") -> list[Stage]:
    """A scenario's ceiling names and stage graph (`key` names it in a config); its stages."""
    prefix = f"{key}." if key else ""
    for name, kind, known in (
        ("compute_path", "compute path", COMPUTE_PATHS),
        ("memory_level", "memory level", MEMORY_LEVEL_NAMES),
    ):
        if scenario[name] not in known:
            raise ConfigError(
                f"{source}: {prefix}{name}: unknown {kind} {scenario[name]!r}; "
                f"known: {', '.join(known)}"
            )
    where = f"{source}: {key}" if key else source
    measurable = scenario.get("measurable", False)
    for index, entry in enumerate(scenario["stages"]):
        given = {k for k in ("flops", "bytes", "kernel", "time_s") if k in entry}
        wanted = {"kernel", "time_s"} if measurable else {"flops", "bytes"}
        if given != wanted:
            kind = "a measurable" if measurable else "a modelled (measurable: false)"
            raise ConfigError(
                f"{where}.stages[{index}]: {kind} scenario's stage gives "
                f"{' and '.join(sorted(wanted))}, got {', '.join(sorted(given)) or 'neither'}"
            )
    if measurable and not scenario["compute_path"].endswith("_fma"):
        raise ConfigError(
            f"{where}.compute_path: a measurable scenario runs FMA chains: fp64_fma, fp32_fma or "
            f"fp16_fma, got {scenario['compute_path']!r}"
        )
    stages = stages_from_config(scenario["stages"], where)
    try:
        topological_order(stages)
    except ModelError as error:
        raise ConfigError(f"{source}: {prefix}stages: {error}") from None
    return stages


def validate_config(config: dict, source: str = "config") -> dict:
    """Validate `config` in place (defaults filled) and check its quantities; return it."""
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: expected a mapping of keys, got {type(config).__name__}")
    _check(_schema(), config, source)
    _check_ranges(config, source)
    _check_shapes(config, source)
    _check_lt_dtypes(config, source)
    for name, scenario in config["stages"].items():
        _check_scenario(scenario, source, f"stages.{name}")
    for name, workload in config["workloads"].items():
        other = workload.get("same_work_as")
        if other is not None and (other == name or other not in config["workloads"]):
            known = ", ".join(w for w in config["workloads"] if w != name) or "none"
            raise ConfigError(
                f"{source}: workloads.{name}.same_work_as: {other!r} is not another workload "
                f"of this config; workloads: {known}"
            )
    return config


def _merge(into: dict, update: dict) -> dict:
    """Snakemake's merge of config files: mappings key by key, anything else replaced."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
    return into


def campaign_config(config: dict, configfiles: Iterable[str | Path], default: str | Path) -> dict:
    """Snakemake merges `--configfile` files over the Snakefile's `configfile:` (`default`) key by
    key, which would add the default's sweeps to a campaign's own. Here each named section
    (NAMED_SECTIONS) that the user's files give comes from those files alone; the rest stays
    merged. `config` is changed in place and returned."""
    default = Path(default).resolve()
    own = [Path(f) for f in configfiles if Path(f).resolve() != default]
    documents = [d for d in map(load_yaml, own) if isinstance(d, dict)]
    for section in NAMED_SECTIONS:
        given = [d[section] for d in documents if isinstance(d.get(section), dict)]
        if given:
            config[section] = {}
            for part in given:
                _merge(config[section], part)
    return config


def load_config(path: str | Path) -> dict:
    config = load_yaml(path)
    return validate_config(config if config is not None else {}, str(path))


def load_scenario(path: str | Path) -> tuple[dict, list[Stage]]:
    """A stage file for `rooflab model stages` (the same shape as one `stages:` scenario): the
    keys it gives besides its stages, as written, and its stages, checked."""
    document = load_yaml(path)
    given = dict(document) if isinstance(document, dict) else {}  # before defaults are filled
    schema = {**_schema(), "$ref": "#/$defs/scenario"}
    for key in ("type", "additionalProperties", "properties", "title", "description"):
        schema.pop(key, None)
    _check(schema, document, str(path))
    return given, _check_scenario(document, str(path))


def stages_from_config(
    entries: list[dict], where: str, peak: float = 1.0, bandwidth: float = 1.0
) -> list[Stage]:
    """Stage entries as model Stages: {name, flops, bytes, after} with quantities parsed with
    units, or a measurable stage's {name, kernel, time_s, after} sized on these ceilings
    (model.sized_stage; the defaults only check the graph)."""
    stages = []
    for index, entry in enumerate(entries):
        if "kernel" in entry:
            after = tuple(entry.get("after", ()))
            stages.append(
                sized_stage(entry["name"], entry["kernel"], entry["time_s"], peak, bandwidth, after)
            )
            continue
        values = {}
        for key, kind in (("flops", "flop"), ("bytes", "bytes")):
            try:
                values[key] = as_quantity(entry[key], kind)
            except UnitError as error:
                raise ConfigError(f"{where} stages[{index}].{key}: {error}") from None
        stages.append(
            Stage(entry["name"], values["flops"], values["bytes"], tuple(entry.get("after", ())))
        )
    return stages
