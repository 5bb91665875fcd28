#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU: install what is missing from carried wheels, run
# the GPU tests, run the GPU campaign end to end into a fresh store and report, and print last a
# table of measured ceilings beside their datasheet figures and a few weight-reuse points.
#
#   tests/gpu/device_check.sh [WHEELS]
#
# WHEELS: build/wheels.tar.xz (default; made here by tests/gpu/build_wheels.sh) or a folder of
# wheels. The machine needs Python 3.12 with cupy-cuda13x (or 12x), numpy, numba, pandas, pyarrow
# and nvidia-ml-py; everything else comes from WHEELS, installed into a throwaway virtual
# environment that sees the system's packages. Nothing is fetched from the network.
# Everything it writes (log, test report, store, report, summary) goes to $OUT if set, else to
# build/device_check/. Budget on one H200: about 8 minutes, install included.
# STEPS (default "tests campaign references"): which steps run after the install, each under its
# cap in seconds: tests (TESTS_TIMEOUT_S, 150), campaign and its summary (CAMPAIGN_TIMEOUT_S, 300),
# references (REFERENCES_TIMEOUT_S, 90: benchmarks/gpu_ceilings_vs_references.py), fixtures
# (FIXTURES_TIMEOUT_S, 120: tests/fixtures/ncu/record_gemm.py into $OUT/ncu_fixtures, ncu on PATH).
# A lent machine allows 600 s per command: `STEPS=fixtures` makes a second, short call.
set -uo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
WHEELS=${1:-$REPO/build/wheels.tar.xz}
OUT=${OUT:-$REPO/build/device_check}
PYTHON=${PYTHON:-python3}
VENV=${VENV:-/tmp/rooflab-device-venv}
TESTS_TIMEOUT_S=${TESTS_TIMEOUT_S:-150}
CAMPAIGN_TIMEOUT_S=${CAMPAIGN_TIMEOUT_S:-300}
REFERENCES_TIMEOUT_S=${REFERENCES_TIMEOUT_S:-90}
FIXTURES_TIMEOUT_S=${FIXTURES_TIMEOUT_S:-120}
STEPS=${STEPS:-tests campaign references}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/rooflab-cupy-cache}  # kernels compiled once, reused

mkdir -p "$OUT"
exec > >(tee "$OUT/device_check.log") 2>&1
STARTED=$SECONDS
FAILED=()
step() { echo; echo "== [$((SECONDS - STARTED)) s] $*"; }
wants() { [[ " $STEPS " == *" $1 "* ]]; }

step "machine"
nvidia-smi --query-gpu=name,uuid,driver_version,persistence_mode,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv 2>&1 || echo "nvidia-smi failed"
"$PYTHON" - <<'PY'
import sys
print("python", sys.version.split()[0])
try:
    import cupy
    print("cupy", cupy.__version__, "devices", cupy.cuda.runtime.getDeviceCount())
except Exception as error:
    print("cupy NOT USABLE:", error)
PY

step "install from $WHEELS into $VENV"
install() {
    set -e
    rm -rf "$VENV"
    "$PYTHON" -m venv --system-site-packages "$VENV"
    local folder=$WHEELS
    if [[ -f $WHEELS ]]; then
        folder=$(mktemp -d)
        "$PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$WHEELS" "$folder"
    fi
    # The folder is the full set of missing dependencies (pulp, only used by Snakemake's ILP
    # scheduler, is left out: the campaign runs with --scheduler greedy), so no resolution.
    "$VENV/bin/pip" install --quiet --no-index --no-deps "$folder"/*.whl
    "$VENV/bin/pip" install --quiet --no-index --no-deps --no-build-isolation -e "$REPO"
    "$VENV/bin/python" -c 'import rooflab, duckdb, snakemake, altair, vl_convert, pytest, cupy, pynvml'
}
if ! (install); then
    echo "install FAILED: nothing else can run"
    exit 1
fi
PY="$VENV/bin/python"
"$PY" -c 'from rooflab.backends.base import cuda_problem; print("cuda_problem:", cuda_problem())'

if wants tests; then
    step "GPU tests: pytest -m gpu tests/gpu (at most ${TESTS_TIMEOUT_S} s)"
    (cd "$REPO" && timeout "$TESTS_TIMEOUT_S" "$PY" -m pytest -m gpu tests/gpu -q -rs \
        -p no:cacheprovider --junitxml="$OUT/gpu-tests.xml") || FAILED+=("GPU tests")
fi

if wants campaign; then
    step "GPU campaign: snakemake --configfile config/gpu.yaml in a fresh folder (at most ${CAMPAIGN_TIMEOUT_S} s)"
    CAMPAIGN=$(mktemp -d /tmp/rooflab-campaign.XXXXXX)
    for name in Snakefile rules workflow_scripts config profiles environment.yml; do
        cp -r "$REPO/$name" "$CAMPAIGN/"
    done
    campaign_started=$SECONDS
    STORE=$CAMPAIGN/results/rooflab.duckdb
    if ! (cd "$CAMPAIGN" && PATH="$VENV/bin:$PATH" timeout "$CAMPAIGN_TIMEOUT_S" snakemake \
        --cores all --configfile config/gpu.yaml --scheduler greedy --keep-going); then
        FAILED+=("campaign")
        # Keep what the finished jobs measured (--keep-going: one failed job does not stop the
        # others): their run folders go into a store of their own, so the summary still shows
        # the ceilings and sweeps that completed before a failure or the time cap.
        STORE=$CAMPAIGN/results/partial.duckdb
        (cd "$CAMPAIGN" && "$PY" -m rooflab store ingest --db "$STORE" --results results) \
            || echo "partial ingest failed"
    fi
    echo "campaign took $((SECONDS - campaign_started)) s"
    mkdir -p "$OUT/campaign"
    cp -r "$CAMPAIGN/logs" "$OUT/campaign/" 2>/dev/null
    cp -r "$CAMPAIGN/results/report" "$OUT/campaign/" 2>/dev/null
    cp "$STORE" "$OUT/campaign/" 2>/dev/null
    if [[ -f $STORE ]] && "$PY" "$REPO/tests/gpu/device_summary.py" "$STORE" >"$OUT/summary.txt"
    then
        :
    else
        echo "no summary: the campaign did not reach ingest" >"$OUT/summary.txt"
        FAILED+=("summary")
    fi
fi

if wants references; then
    step "references: benchmarks/gpu_ceilings_vs_references.py (at most ${REFERENCES_TIMEOUT_S} s)"
    (cd "$REPO" && timeout "$REFERENCES_TIMEOUT_S" "$PY" benchmarks/gpu_ceilings_vs_references.py \
        --rounds 2) >"$OUT/references.txt" 2>&1 || FAILED+=("references")
    cat "$OUT/references.txt"
fi

if wants fixtures; then
    step "ncu fixtures: tests/fixtures/ncu/record_gemm.py --out \$OUT/ncu_fixtures (at most ${FIXTURES_TIMEOUT_S} s)"
    # Into $OUT, so they come back; copied unchanged into tests/fixtures/ncu/ afterwards. A cut run
    # keeps the configurations it finished (each writes its own files).
    (cd "$REPO" && timeout "$FIXTURES_TIMEOUT_S" "$PY" tests/fixtures/ncu/record_gemm.py \
        --out "$OUT/ncu_fixtures") || FAILED+=("ncu fixtures")
fi

echo
echo "device check took $((SECONDS - STARTED)) s; steps: $STEPS; failed: ${FAILED[*]:-nothing}"
if wants campaign; then
    echo
    cat "$OUT/summary.txt"  # last: the measured ceilings beside the datasheet
fi
[[ ${#FAILED[@]} -eq 0 ]]
