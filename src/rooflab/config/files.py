"""Reading rooflab's config files: the config folder (the checkout's, else the wheel's copy),
YAML read with bounds (size, alias expansion, nesting) through libyaml, and ConfigError, what
every reader of a config file raises: one line naming the file and the problem."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO_CONFIG_DIR = Path(__file__).resolve().parents[3] / "config"
PACKAGED_CONFIG_DIR = Path(__file__).resolve().parents[1] / "_config"


class ConfigError(ValueError):
    """A configuration or input file that cannot be used as written."""


def config_file(name: str) -> Path:
    """A file of config/ (schema.yaml, devices.yaml): the checkout's own, else the wheel's copy."""
    for folder in (REPO_CONFIG_DIR, PACKAGED_CONFIG_DIR):
        if (folder / name).is_file():
            return folder / name
    raise ConfigError(f"config/{name} not found in {REPO_CONFIG_DIR} or {PACKAGED_CONFIG_DIR}")


MAX_YAML_BYTES = 16 << 20  # a campaign config or stages file is kilobytes; 16 MiB is no config
MAX_YAML_NODES = 1_000_000  # nodes a file may hold once its aliases are expanded
# libyaml's safe loader where PyYAML was built with it (the wheels are): the pure-Python scanner
# takes a minute on a 100,000-stage chain
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_expansion(text: str, path: Path) -> None:
    """Refuse a file whose aliases expand it past MAX_YAML_NODES nodes (a "billion laughs"
    file of 1 KB expands to 10^9), counted from the parser's events before anything is built."""
    sizes: dict[str, int] = {}  # anchor -> nodes of its expanded subtree
    frames: list[list] = [[None, 0]]  # [anchor, nodes so far] of each open collection
    total = 0
    for event in yaml.parse(text, Loader=YAML_LOADER):
        if isinstance(event, yaml.AliasEvent):
            nodes = sizes.get(event.anchor, 1)
        elif isinstance(event, yaml.ScalarEvent):
            nodes = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            frames.append([event.anchor, 1])
            continue
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, nodes = frames.pop()
            if anchor:
                sizes[anchor] = nodes
            frames[-1][1] += nodes
            continue
        else:
            continue
        if getattr(event, "anchor", None) and not isinstance(event, yaml.AliasEvent):
            sizes[event.anchor] = nodes
        frames[-1][1] += nodes
        total = frames[0][1] + sum(frame[1] for frame in frames[1:])
        if total > MAX_YAML_NODES:
            raise ConfigError(
                f"{path}: its aliases expand it past {MAX_YAML_NODES} nodes (alias "
                f"*{event.anchor} at line {event.start_mark.line + 1}); write the values out"
                if isinstance(event, yaml.AliasEvent)
                else f"{path}: more than {MAX_YAML_NODES} nodes"
            )


def load_yaml(path: str | Path) -> object:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})"
        ) from None
    if len(data) > MAX_YAML_BYTES:
        raise ConfigError(
            f"{path}: {len(data)} bytes, over the {MAX_YAML_BYTES} a config or stages file may have"
        )
    try:
        if "*" in text:  # an alias is written *name: a file without one is bounded by its size
            _check_expansion(text, path)
        return yaml.load(text, Loader=YAML_LOADER)  # a safe loader: plain data only
    except yaml.reader.ReaderError as error:  # valid UTF-8, but control characters
        raise ConfigError(
            f"{path}: not text (character #x{error.character:04x} at position {error.position})"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read") from None
    except yaml.YAMLError as error:
        if "maximum nesting depth" in str(getattr(error, "problem", error)):  # libyaml's limit
            raise ConfigError(f"{path}: nested too deeply to read") from None
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(
            f"{path}:{where} is not valid YAML ({getattr(error, 'problem', error)})"
        ) from None
