"""What the counters tests (tests/test_counters_*.py) share: where the recorded tool output lies
(tests/fixtures/ncu, tests/fixtures/perf), how a recording is read (skipped where still owed to a
GPU), the config id they use, and a stand-in ncu that replays recorded output."""

from __future__ import annotations

import gzip
import stat
import sys
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


def replaying_ncu(
    tmp_path: Path, profile: Path = NCU_FIXTURES / "import_sample" / "sobelDouble.raw.csv"
) -> Path:
    """A stand-in for ncu that replays RECORDED ncu output (tests/fixtures/ncu): its version
    text, gh100's metric list, and `profile` as every profile's CSV, by default the raw CSV of
    NVIDIA's sobelDouble sample report (an RTX A4500 kernel, not a GEMM). That one exercises the
    step's success path here; its counts belong to that sample, so calibration must refuse them."""
    query = gzip.decompress(
        (NCU_FIXTURES / "query_metrics" / "gh100.ncu-2024.1.1.csv.gz").read_bytes()
    )
    (tmp_path / "query.csv").write_bytes(query)
    script = tmp_path / "ncu"
    script.write_text(
        f"""#!{sys.executable}
import shutil, sys
args = sys.argv[1:]
if args == ["--version"]:
    sys.stdout.write(open({str(NCU_FIXTURES / "version" / "ncu-2024.1.1.stdout.txt")!r}).read())
elif "--query-metrics" in args:
    sys.stdout.write(open({str(tmp_path / "query.csv")!r}).read())
else:
    log = args[args.index("--log-file") + 1]
    shutil.copy({str(profile)!r}, log)
"""
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script
