import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


def installed_script(name: str) -> str:
    """A console script of this environment (beside sys.executable), even when PATH lacks it."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed in this environment")
    return found


def run_rooflab(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The installed `rooflab` console script, as users and scripts call it (output captured)."""
    return subprocess.run(
        [installed_script("rooflab"), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


REPO = Path(__file__).resolve().parents[1]
WORKFLOW_FILES = ("Snakefile", "rules", "workflow_scripts", "config", "profiles", "environment.yml")


def copy_workflow(target: Path, config: dict | None = None) -> Path:
    """The workflow's files in `target`, with `config` as config/config.yaml when given."""
    for name in WORKFLOW_FILES:
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, target / name)
    if config is not None:
        (target / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    return target
