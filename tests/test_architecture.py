"""The import graph of src/rooflab against docs/architecture.md: no cycle (imports inside functions
count), imports only in the directions the layers allow, and no module past ~500 lines."""

import ast
import graphlib
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "rooflab"
MAX_LINES = 500

# A layer (the first name under rooflab) may import
# the layers listed, and `model`, `units` (pure arithmetic) and `vocabulary` from anywhere.
ALLOWED = {
    "": {"workloads"},  # rooflab/__init__: the public `from rooflab import Workload`
    "__main__": {"cli"},
    "cli": {
        "backends",
        "conditions",
        "config",
        "devices",
        "experiments",
        "records",
        "report",
        "roofline",
        "store",
        "workloads",
        "comparison",
        "imports",
        "machine",
    },
    "workflow": {"records", "progress"},
    "report": {"store"},
    "store": {"records", "comparison"},
    "roofline": {"records", "counters", "config", "devices", "machine", "imports"},
    "imports": {"counters"},
    "experiments": {
        "backends",
        "conditions",
        "records",
        "counters",
        "config",
        "progress",
        "workloads",
        "imports",
    },
    "counters": {"backends"},
    "backends": {"conditions", "machine"},
    "conditions": {"machine", "config"},
    "config": set(),
    "devices": {"config"},
    "machine": set(),
    "records": set(),
    "progress": set(),
    "workloads": set(),
    "comparison": set(),
    "model": set(),
    "units": set(),
    "vocabulary": set(),
}
EVERYWHERE = {"model", "units", "vocabulary"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in SRC.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """The rooflab modules `name` imports, anywhere in its file."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = (node.module or "").removeprefix("rooflab").lstrip(".")
                if not (node.module or "").startswith("rooflab"):
                    continue
            candidates = [target, *(f"{target}.{a.name}".lstrip(".") for a in node.names)]
        elif isinstance(node, ast.Import):
            candidates = [
                a.name.removeprefix("rooflab").lstrip(".")
                for a in node.names
                if a.name.startswith("rooflab")
            ]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in MODULES:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                found.add(candidate)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def layer(name: str) -> str:
    return name.split(".")[0]


def test_the_graph_sees_imports_inside_functions():
    # report.build imports the store at module level; cli.store the report inside a function
    assert "store" in GRAPH["report.build"] and "report" in GRAPH["cli.store"]


def test_no_import_cycle():
    graphlib.TopologicalSorter(GRAPH).prepare()  # a cycle raises CycleError, naming its modules


def test_imports_follow_the_layers():
    crossings = {
        (name, target)
        for name, targets in GRAPH.items()
        for target in targets
        if target and layer(target) not in {layer(name), *EVERYWHERE, *ALLOWED.get(layer(name), ())}
    }
    assert crossings == set(), "an import against docs/architecture.md"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_stay_small(name):
    lines = len(MODULES[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name}: {lines} lines (limit {MAX_LINES})"


def test_every_layer_is_described():
    layers = {layer(name) for name in MODULES if name}
    assert layers - set(ALLOWED) == set()
    described = (SRC.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    for name in layers:
        assert f"`{name}`" in described, f"docs/architecture.md does not describe `{name}`"
    # and every module has its room named there
    unnamed = [
        name
        for name in MODULES
        if name
        and not any(
            f"`{short}`" in described
            for short in (name.split(".")[-1], ".".join(name.split(".")[-2:]))
        )
    ]
    assert unnamed == [], f"docs/architecture.md does not name {unnamed}"


def test_the_cache_states_are_one_vocabulary():
    """The config's cache states are rooflab.vocabulary's, and no module spells them itself."""
    import yaml

    from rooflab.vocabulary import CACHE_STATES, NCU_PAIRINGS

    schema = yaml.safe_load((SRC.parents[1] / "config" / "schema.yaml").read_text())
    sweep = schema["properties"]["sweeps"]["additionalProperties"]["properties"]
    assert sweep["cache_states"]["items"]["enum"] == list(CACHE_STATES)
    assert {state for state, _ in NCU_PAIRINGS.values()} == set(CACHE_STATES)
    spelled = re.compile(r"""["'](warm|cold)["']""")
    for name, path in MODULES.items():
        if name != "vocabulary":
            assert not spelled.search(path.read_text(encoding="utf-8")), name


def test_the_report_reads_named_views_only():
    """No SQL and no DuckDB inside report/: it reads the store through store.read_view, so a
    user's `SELECT * FROM <view>` and a chart agree by construction."""
    sql = re.compile(r"\b(SELECT|FROM|WHERE|GROUP BY|QUALIFY)\b.*\b(FROM|BY|AS)\b")
    for name, path in MODULES.items():
        if name.startswith("report"):
            text = path.read_text(encoding="utf-8")
            assert "duckdb" not in text, name
            code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
            assert not [line for line in code if sql.search(line) and "rooflab query" not in line]


def test_every_view_is_documented():
    from rooflab.store.views import VIEWS_SQL

    described = (SRC.parents[1] / "docs" / "store.md").read_text(encoding="utf-8")
    assert [name for name in VIEWS_SQL if f"`{name}`" not in described] == []


def test_every_benchmark_takes_smoke_and_is_listed():
    """.ci/run runs every benchmark (a script with a __main__) with --smoke, so each must take it
    (benchmarks/smoke.py) and be in docs/benchmarks.md's table."""
    benchmarks = SRC.parents[1] / "benchmarks"
    listed = (SRC.parents[1] / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    scripts = [p for p in benchmarks.glob("*.py") if '__name__ == "__main__"' in p.read_text()]
    assert len(scripts) >= 10
    for script in scripts:
        text = script.read_text(encoding="utf-8")
        assert "add_smoke(parser)" in text and "verdict(" in text, script.name
        assert f"benchmarks/{script.name}" in listed, script.name


def test_no_test_module_imports_another():
    """Shared test helpers live in helper modules (tests/store_runs.py, tests/report_pages.py,
    ...), never in a test module another one imports: a test module is only run, not used."""
    tests = SRC.parents[1] / "tests"
    importing = re.compile(
        r"^\s*(from tests(\.\w+)* import test_|from tests\.(\w+\.)*test_\w+ "
        r"|import tests\.(\w+\.)*test_)",
        re.M,
    )
    for path in [*tests.rglob("*.py"), *(SRC.parents[1] / "benchmarks").glob("*.py")]:
        assert not importing.search(path.read_text(encoding="utf-8")), path.name
