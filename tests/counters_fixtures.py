"""What the counters tests (tests/test_counters_*.py) share: where the recorded tool output lies
(tests/fixtures/ncu, tests/fixtures/perf), how a recording is read (skipped where still owed to a
GPU), and the config id they use."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
NCU_FIXTURES = FIXTURES / "ncu"
PERF_FIXTURES = FIXTURES / "perf"
OWED = "fixture owed: record on a GPU"

CONFIG = "main/bf16/nn/m64_n4096_k4096"


def read(path: Path) -> str:
    if not path.exists():
        pytest.skip(f"{OWED} ({path.relative_to(FIXTURES)})")
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
