"""Campaign configuration: YAML files validated against config/schema.yaml, defaults filled in.

The Snakefile and the CLI both go through `validate_config`, so a key means the same in both. Errors
name the key (`sweeps.decode.m[2]`) and what was expected.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import best_match

from rooflab.model import Stage
from rooflab.units import UnitError, as_quantity

__all__ = [
    "ConfigError",
    "config_file",
    "load_config",
    "load_scenario",
    "load_yaml",
    "stages_from_config",
    "validate_config",
]

REPO_CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"
PACKAGED_CONFIG_DIR = Path(__file__).resolve().parent / "_config"


class ConfigError(ValueError):
    """A configuration or input file that cannot be used as written."""


def config_file(name: str) -> Path:
    """A file of config/ (schema.yaml, devices.yaml): the checkout's own, else the wheel's copy."""
    for folder in (REPO_CONFIG_DIR, PACKAGED_CONFIG_DIR):
        if (folder / name).is_file():
            return folder / name
    raise ConfigError(f"config/{name} not found in {REPO_CONFIG_DIR} or {PACKAGED_CONFIG_DIR}")


def load_yaml(path: str | Path) -> object:
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as stream:
            return yaml.safe_load(stream)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror})") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(
            f"{path}:{where} is not valid YAML ({getattr(error, 'problem', error)})"
        ) from None


def _with_defaults(validator_class):
    """A validator that fills `default` values into the instance as it validates."""
    check_properties = validator_class.VALIDATORS["properties"]

    def fill_then_check(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(key, copy.deepcopy(subschema["default"]))
        yield from check_properties(validator, properties, instance, schema)

    return validators.extend(validator_class, {"properties": fill_then_check})


@cache
def _schema() -> dict:
    return load_yaml(config_file("schema.yaml"))


def _key_path(path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _describe(error) -> str:
    where = _key_path(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = set(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - allowed)
        known = f"; known keys: {', '.join(sorted(allowed))}" if allowed else ""
        place = f"in {where}" if where else "at the top level"
        return f"unknown key {', '.join(map(repr, unknown))} {place}{known}"
    return f"{where or 'top level'}: {error.message}"


def _check(schema: dict, instance: object, source: str) -> None:
    error = best_match(_with_defaults(Draft202012Validator)(schema).iter_errors(instance))
    if error is not None:
        raise ConfigError(f"{source}: {_describe(error)}")


def validate_config(config: dict, source: str = "config") -> dict:
    """Validate `config` in place (defaults filled) and check its quantities; return it."""
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: expected a mapping of keys, got {type(config).__name__}")
    _check(_schema(), config, source)
    for name, scenario in config.get("stages", {}).items():
        stages_from_config(scenario["stages"], f"{source}: stages.{name}")
    return config


def load_config(path: str | Path) -> dict:
    config = load_yaml(path)
    return validate_config(config if config is not None else {}, str(path))


def load_scenario(path: str | Path) -> list[Stage]:
    """A stage file for `rooflab model stages`: the same shape as one `stages:` scenario."""
    document = load_yaml(path)
    schema = {**_schema(), "$ref": "#/$defs/scenario"}
    for key in ("type", "additionalProperties", "properties", "title", "description"):
        schema.pop(key, None)
    _check(schema, document, str(path))
    return stages_from_config(document["stages"], str(path))


def stages_from_config(entries: list[dict], where: str) -> list[Stage]:
    """Stage entries ({name, flops, bytes, after}) as model Stages; quantities parsed with units."""
    stages = []
    for index, entry in enumerate(entries):
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
