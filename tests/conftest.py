import shutil
import sys
from pathlib import Path

import pytest


def installed_script(name: str) -> str:
    """A console script of this environment (beside sys.executable), even when PATH lacks it."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed in this environment")
    return found
