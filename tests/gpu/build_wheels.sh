#!/usr/bin/env bash
# Build the wheels that tests/gpu/device_check.sh installs on a GPU machine without package-index
# access: rooflab's dependencies that such a machine lacks (Snakemake, DuckDB, Altair, vl-convert,
# ...), pytest, hatchling with editables to install rooflab itself from the working tree, and
# nvmath-python 0.8 with cuda-bindings 13, cuda-core 0.3.2 and cuda-pathfinder (about 9 MiB packed)
# for the cuBLASLt tests.
#
# The GPU machine already has Python 3.12, numpy, numba, pandas, pyarrow, cupy-cuda13x and
# nvidia-ml-py; those are left out, and so is PuLP (16 MB of solver binaries that only Snakemake's
# ILP scheduler uses; the check runs --scheduler greedy), and SciPy (about 35 MB: only `rooflab
# compare` and the store's comparisons of a key's two runs import it, and the check's fresh store
# holds one run per key, so nothing is compared). Wheels are built by a Python 3.12 here so
# binary wheels match the GPU machine's interpreter; sdist-only packages (connection_pool) become
# pure-Python wheels.
#
# Output: build/wheels.tar.xz (git-ignored), the wheels re-zipped without compression and then
# compressed together with xz, which packs the large binaries (DuckDB, vl-convert) far better than
# each wheel's own zip does; it must stay under the 64 MiB that travel with the working tree.
#
#   PYTHON=/path/to/python3.12 tests/gpu/build_wheels.sh [OUT.tar.xz]
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
ARCHIVE=${1:-$REPO/build/wheels.tar.xz}
PYTHON=${PYTHON:-python3.12}
LIMIT_MIB=64
LEAVE_OUT='^(numpy|numba|llvmlite|pandas|pyarrow|cupy.*|nvidia-ml-py|pulp|scipy|cutensor.*)$'

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
    echo "build_wheels: need a Python 3.12 (the GPU machine's); set PYTHON=/path/to/python3.12" >&2
    exit 2
fi

# rooflab's dependencies from pyproject.toml, less what the GPU machine has.
mapfile -t REQUIREMENTS < <("$PYTHON" - "$REPO/pyproject.toml" "$LEAVE_OUT" <<'PY'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
for requirement in project["dependencies"]:
    name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
    if not re.match(sys.argv[2], name, flags=re.IGNORECASE):
        print(requirement)
PY
)
REQUIREMENTS+=("pytest>=8" "hatchling>=1.24" "editables>=0.3")  # editables: hatchling -e
# cuBLASLt (FP8, INT8) through nvmath-python's low-level binding, for tests/gpu/
# test_cublaslt_gpu.py: nvmath and the CUDA Python packages it imports, for CUDA 13 (the GPU
# machine has cupy-cuda13x). nvmath-python 0.8, which takes cuda-core 0.3.2 (1.7 MiB packed);
# 1.0 needs cuda-core >= 0.5 (0.7.0: 12 MiB packed, past the 64 MiB limit). Not [sysctk13]: that
# adds cuTENSOR, which cuBLASLt does not need.
REQUIREMENTS+=(
    "nvmath-python>=0.8,<0.9" "cuda-core>=0.3.2,<0.4" "cuda-bindings>=13.0.1,<14"
    "cuda-pathfinder>=1.3.2,<2"
)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet --upgrade pip
mkdir -p "$WORK/wheels" "$WORK/stored"
"$WORK/venv/bin/pip" wheel --quiet --wheel-dir "$WORK/wheels" "${REQUIREMENTS[@]}"

# Drop what the GPU machine has (or does not need) if it came in as a transitive dependency, and
# store the rest uncompressed (same files, same names: still valid wheels) for xz to compress.
"$PYTHON" - "$WORK/wheels" "$WORK/stored" "$LEAVE_OUT" <<'PY'
import re, sys, zipfile
from pathlib import Path
source, target, leave_out = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
for wheel in sorted(source.glob("*.whl")):
    name = wheel.name.split("-")[0].replace("_", "-")
    if re.match(leave_out, name, flags=re.IGNORECASE):
        print(f"left out {wheel.name}")
        continue
    with zipfile.ZipFile(wheel) as packed, zipfile.ZipFile(target / wheel.name, "w") as stored:
        for entry in packed.infolist():
            data = packed.read(entry)
            entry.compress_type = zipfile.ZIP_STORED
            stored.writestr(entry, data)
PY

mkdir -p "$(dirname "$ARCHIVE")"
tar -C "$WORK/stored" -cf - . | xz -9 -T0 >"$ARCHIVE.partial"
mv "$ARCHIVE.partial" "$ARCHIVE"
count=$(find "$WORK/stored" -name '*.whl' | wc -l)
size_kib=$(du -k "$ARCHIVE" | cut -f1)
echo "build_wheels: $count wheels, $((size_kib / 1024)) MiB in $ARCHIVE"
if ((size_kib > LIMIT_MIB * 1024)); then
    echo "build_wheels: over the ${LIMIT_MIB} MiB that can travel with the working tree" >&2
    exit 1
fi
