#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU: install what is missing from carried wheels, run
# the GPU tests, run the GPU campaign end to end into a fresh store and report, and print last a
# table of measured ceilings beside their datasheet figures, a few weight-reuse points, the
# counters' calibration and the diagnoses (causes per kind; each `conditions` point's SM clock
# against its roof's).
#
#   tests/gpu/device_check.sh [WHEELS]
#
# WHEELS: build/wheels.tar.xz (default; made here by tests/gpu/build_wheels.sh) or a folder of
# wheels. The machine needs Python 3.12 with cupy-cuda13x (or 12x), numpy, numba, pandas, pyarrow
# and nvidia-ml-py; everything else comes from WHEELS, installed into a throwaway virtual
# environment that sees the system's packages. Nothing is fetched from the network.
# Everything it writes goes to $OUT if set, else to build/device_check/: the log, the test report,
# the summary and the references (device_check.log, gpu-tests.xml, summary.txt, references.json)
# as plain files, and each step's folders packed into one archive (campaign.tar.gz: logs and
# report; store.tar.gz: the DuckDB file; nvml.tar.gz; ncu_fixtures.tar.gz, with the CUDA torch
# traces in its torch_cuda/), because a lent
# machine sends back at most 8 files.
# STEPS (default "tests campaign fixtures references"): which steps run after the install, each
# under its cap in seconds and never past TOTAL_S (default 570, for a 600 s command; a step with
# under 20 s left is skipped and named as such): tests (TESTS_TIMEOUT_S, 240), campaign and its
# summary (CAMPAIGN_TIMEOUT_S, 260), fixtures (FIXTURES_TIMEOUT_S, 120:
# tests/fixtures/nvml/record.py and its tests, then tests/fixtures/ncu/record_gemm.py, ncu on
# PATH, then tests/fixtures/torch/record_traces.py --device cuda: the CUDA traces owed to
# issue 45, imported once here), references (REFERENCES_TIMEOUT_S, 90: benchmarks/gpu_ceilings_vs_references.py, the
# peers: cudaMemcpyAsync, CuPy, PyTorch); not by default: adaptive (ADAPTIVE_TIMEOUT_S, 200:
# benchmarks/ceilings_adaptive.py on the GPU, the stopping rule's ceilings vs the fixed budgets),
# host_link (HOST_LINK_TIMEOUT_S, 60: tests/gpu/test_host_link_gpu.py with every case's rate
# printed, then, where the campaign ran, the host link's rows of its store), cublaslt
# (CUBLASLT_TIMEOUT_S, 90: tests/gpu/test_cublaslt_gpu.py with -s, FP8/INT8/bf16 through
# nvmath-python's cuBLASLt binding, carried in WHEELS; the `tests` step runs that file too,
# quietly).
# The campaign step prints "campaign took N s": the H200 campaign's wall time (goal: 60 s).
set -uo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
WHEELS=${1:-$REPO/build/wheels.tar.xz}
OUT=${OUT:-$REPO/build/device_check}
PYTHON=${PYTHON:-python3}
VENV=${VENV:-/tmp/rooflab-device-venv}
TESTS_TIMEOUT_S=${TESTS_TIMEOUT_S:-240}
CAMPAIGN_TIMEOUT_S=${CAMPAIGN_TIMEOUT_S:-260}
FIXTURES_TIMEOUT_S=${FIXTURES_TIMEOUT_S:-120}
REFERENCES_TIMEOUT_S=${REFERENCES_TIMEOUT_S:-90}
ADAPTIVE_TIMEOUT_S=${ADAPTIVE_TIMEOUT_S:-200}
HOST_LINK_TIMEOUT_S=${HOST_LINK_TIMEOUT_S:-60}
CUBLASLT_TIMEOUT_S=${CUBLASLT_TIMEOUT_S:-90}
TOTAL_S=${TOTAL_S:-570}
STEPS=${STEPS:-tests campaign fixtures references}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/rooflab-cupy-cache}  # kernels compiled once, reused

mkdir -p "$OUT"
exec > >(tee "$OUT/device_check.log") 2>&1
STARTED=$SECONDS
FAILED=()
step() { echo; echo "== [$((SECONDS - STARTED)) s] $*"; }
# wants STEP CAP: true when STEP was asked for and at least 20 s are left; sets LIMIT to its cap,
# cut to what is left of TOTAL_S.
wants() {
    [[ " $STEPS " == *" $1 "* ]] || return 1
    local left=$((TOTAL_S - (SECONDS - STARTED) - 5))
    if ((left < 20)); then
        echo "skipped $1: ${left} s left of TOTAL_S=${TOTAL_S}"
        FAILED+=("$1 (no time left)")
        return 1
    fi
    LIMIT=$(($2 < left ? $2 : left))
}
# pack NAME: $OUT/NAME (a folder) becomes $OUT/NAME.tar.gz, one file to send back.
pack() {
    [[ -d $OUT/$1 ]] || return 0
    tar -czf "$OUT/$1.tar.gz" -C "$OUT" "$1" && rm -rf "${OUT:?}/$1"
}

step "machine"
# ncu: on PATH, or else the newest Nsight Compute under /opt/nvidia (where NVIDIA's installer
# puts it); the campaign's counters jobs and the fixtures step need it on PATH.
if ! command -v ncu >/dev/null 2>&1; then
    candidates=(/opt/nvidia/nsight-compute/*/ /usr/local/cuda/nsight-compute*/)
    for found in $(printf '%s\n' "${candidates[@]}" | sort -V -r); do
        if [[ -x ${found}ncu ]]; then
            export PATH="${found%/}:$PATH"
            break
        fi
    done
fi
echo "ncu: $(command -v ncu || echo 'not found')"
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
# The machine's python3 may itself be a virtual environment (on the lent H200 it is
# /opt/torch/.venv), and a venv made from a venv with --system-site-packages sees the base
# interpreter's packages, not that venv's. So the new venv gets a .pth that adds every
# site-packages folder of $PYTHON after its own (the carried wheels win), and uses $PYTHON's pip
# through it (--without-pip: no ensurepip needed). `set -e` does not hold inside `if ! (...)`,
# hence `|| return 1` on every step.
install() {
    rm -rf "$VENV"
    "$PYTHON" -m venv --without-pip --system-site-packages "$VENV" || return 1
    local purelib folder=$WHEELS
    purelib=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
        || return 1
    "$PYTHON" -c 'import site; print("import site; " + "; ".join(
        f"site.addsitedir({p!r})" for p in site.getsitepackages()))' \
        >"$purelib/zz_rooflab_parent_site.pth" || return 1
    if [[ -f $WHEELS ]]; then
        folder=$(mktemp -d)
        "$PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$WHEELS" "$folder" || return 1
    fi
    # The folder is the full set of missing dependencies (pulp, only used by Snakemake's ILP
    # scheduler, is left out: the campaign runs with --scheduler greedy), so no resolution.
    "$VENV/bin/python" -m pip install --quiet --no-index --no-deps --no-compile "$folder"/*.whl \
        || return 1
    "$VENV/bin/python" -m pip install --quiet --no-index --no-deps --no-build-isolation \
        -e "$REPO" || return 1
    "$VENV/bin/python" -c 'import rooflab, duckdb, snakemake, altair, vl_convert, pytest, cupy, pynvml'
}
if ! (install); then
    echo "install FAILED: nothing else can run"
    exit 1
fi
PY="$VENV/bin/python"
"$PY" -c 'from rooflab.backends.selection import cuda_problem; print("cuda_problem:", cuda_problem())'

if wants tests "$TESTS_TIMEOUT_S"; then
    step "GPU tests: pytest -m gpu tests/gpu (at most ${LIMIT} s)"
    # PYTEST_DISABLE_PLUGIN_AUTOLOAD: plugins installed beside the machine's own pytest
    # (pytest-benchmark, -xdist, -timeout, ...) are seen through the .pth; none is ours.
    (cd "$REPO" && PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout "$LIMIT" "$PY" -m pytest -m gpu tests/gpu -q -rs \
        -p no:cacheprovider --junitxml="$OUT/gpu-tests.xml") || FAILED+=("GPU tests")
fi

if wants cublaslt "$CUBLASLT_TIMEOUT_S"; then
    step "cuBLASLt FP8/INT8/bf16: pytest -s tests/gpu/test_cublaslt_gpu.py (at most ${LIMIT} s)"
    "$PY" - <<'PY' || echo "nvmath-python NOT importable: the cuBLASLt tests will skip"
import nvmath
from nvmath.bindings import cublasLt
print("nvmath-python", nvmath.__version__, "cuBLASLt", cublasLt.get_version())
PY
    (cd "$REPO" && PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout "$LIMIT" "$PY" -m pytest -m gpu \
        tests/gpu/test_cublaslt_gpu.py -q -s -rs -p no:cacheprovider) || FAILED+=("cuBLASLt tests")
fi

CAMPAIGN_RAN=
if wants campaign "$CAMPAIGN_TIMEOUT_S"; then
    CAMPAIGN_RAN=1
    step "GPU campaign: snakemake --configfile config/gpu.yaml in a fresh folder (at most ${LIMIT} s)"
    CAMPAIGN=$(mktemp -d /tmp/rooflab-campaign.XXXXXX)
    for name in Snakefile rules workflow_scripts config profiles environment.yml; do
        cp -r "$REPO/$name" "$CAMPAIGN/"
    done
    campaign_started=$SECONDS
    STORE=$CAMPAIGN/results/rooflab.duckdb
    if ! (cd "$CAMPAIGN" && PATH="$VENV/bin:$PATH" timeout "$LIMIT" snakemake \
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
    mkdir -p "$OUT/campaign" "$OUT/store"
    cp -r "$CAMPAIGN/logs" "$OUT/campaign/" 2>/dev/null
    cp -r "$CAMPAIGN/results/report" "$OUT/campaign/" 2>/dev/null
    cp "$STORE" "$OUT/store/" 2>/dev/null
    if [[ -f $STORE ]] && "$PY" "$REPO/tests/gpu/device_summary.py" "$STORE" >"$OUT/summary.txt"
    then
        :
    else
        echo "no summary: the campaign did not reach ingest" >"$OUT/summary.txt"
        FAILED+=("summary")
    fi
    pack campaign
    pack store
fi

if wants host_link "$HOST_LINK_TIMEOUT_S"; then
    step "host link: tests/gpu/test_host_link_gpu.py -s, then the campaign's host rows (at most ${LIMIT} s)"
    # The test prints every case's rate ("host link (GB/s): {...}") before checking them:
    # 1 GB/s < rate < 1 TB/s, pinned memcpy >= 0.95 x pageable, SM copy / memcpy in (0.5, 2),
    # the host roof the fastest pinned case, no held-stream timeout, a no-op copy refused.
    (cd "$REPO" && PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout "$LIMIT" "$PY" -m pytest -m gpu \
        tests/gpu/test_host_link_gpu.py -q -s -rs -p no:cacheprovider) || FAILED+=("host link")
    # the store's copy in $OUT was packed; the campaign folder keeps the original
    if [[ -n $CAMPAIGN_RAN && -f ${STORE:-} ]]; then
        # every case of the campaign's ceilings run (pinned: level host; pageable: null), then
        # the `host` ceilings with the method that says which case is each direction's ceiling
        "$PY" -m rooflab query --db "$STORE" \
            "SELECT kernel, level, round(value / 1e9, 2) AS gb_per_s, working_set_bytes, reps,
                    n_windows, round(ci_rel_width, 3) AS width, stop_reason, disturbed
             FROM ceiling_sweep WHERE config_id LIKE 'host/%' ORDER BY config_id" \
            || FAILED+=("host link rows")
        "$PY" -m rooflab query --db "$STORE" \
            "SELECT kernel, round(value / 1e9, 2) AS gb_per_s, clock_moved, clock_capped, method
             FROM latest_ceilings WHERE name = 'host' ORDER BY kernel" \
            || FAILED+=("host link ceilings")
    fi
fi

if wants fixtures "$FIXTURES_TIMEOUT_S"; then
    step "NVML fixtures: tests/fixtures/nvml/record.py \$OUT, then tests/test_nvml_fixtures.py on it"
    # Read only, a few seconds: nvidia-smi -q (text and XML) and the raw NVML values of every call
    # rooflab makes, into $OUT/nvml, packed into nvml.tar.gz; unpack it unchanged with
    # `tar -xzf nvml.tar.gz -C tests/fixtures`. The tests then run on what was just recorded.
    NVML_LIMIT=$((LIMIT < 60 ? LIMIT : 60))
    (cd "$REPO" && timeout "$NVML_LIMIT" "$PY" tests/fixtures/nvml/record.py "$OUT" \
        --note "recorded by tests/gpu/device_check.sh's fixtures step") || FAILED+=("nvml fixtures")
    (cd "$REPO" && ROOFLAB_NVML_FIXTURES="$OUT/nvml" PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 \
        timeout "$NVML_LIMIT" "$PY" -m pytest tests/test_nvml_fixtures.py -q -rs \
        -p no:cacheprovider) || FAILED+=("nvml fixture tests")
    pack nvml
    step "ncu fixtures: tests/fixtures/ncu/record_gemm.py --out \$OUT/ncu_fixtures (at most ${LIMIT} s)"
    # Into $OUT, so they come back (packed); unpacked unchanged into tests/fixtures/ncu/
    # afterwards. A cut run keeps the configurations it finished (each writes its own files).
    (cd "$REPO" && timeout "$LIMIT" "$PY" tests/fixtures/ncu/record_gemm.py \
        --out "$OUT/ncu_fixtures") || FAILED+=("ncu fixtures")
    step "torch fixtures: tests/fixtures/torch/record_traces.py --device cuda (fp32, bf16)"
    # CUDA traces for rooflab import torch (issue 45), with the machine's torch, with what the
    # README beside them needs (torch, CUDA, driver, GPU, date), then read back by the importer
    # here. Packed inside ncu_fixtures.tar.gz (a lent machine sends back at most 8 files): its
    # torch_cuda/ folder goes to tests/fixtures/torch/.
    TORCH_OUT="$OUT/ncu_fixtures/torch_cuda"
    mkdir -p "$TORCH_OUT"
    (cd "$REPO" && for dtype in fp32 bf16; do
        timeout 60 "$PY" tests/fixtures/torch/record_traces.py --device cuda --dtype "$dtype" \
            --out "$TORCH_OUT" || exit 1
    done && { date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv;
              "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
            } > "$TORCH_OUT/recorded.txt" 2>&1 \
        && for trace in "$TORCH_OUT"/*_cuda*.json*; do
            "$PY" -m rooflab import torch "$trace" --device h200-sxm --format json \
                > "${trace%%.json*}.import.json" || exit 1
        done) || FAILED+=("torch fixtures")
    pack ncu_fixtures
fi

if wants references "$REFERENCES_TIMEOUT_S"; then
    step "references: benchmarks/gpu_ceilings_vs_references.py (at most ${LIMIT} s)"
    # rooflab against cudaMemcpyAsync, CuPy and PyTorch in the same process, printed here (the
    # log) and written to references.json (at most 8 files come back from a lent machine)
    (cd "$REPO" && timeout "$LIMIT" "$PY" benchmarks/gpu_ceilings_vs_references.py \
        --rounds 2 --json "$OUT/references.json") || FAILED+=("references")
fi

if wants adaptive "$ADAPTIVE_TIMEOUT_S"; then
    step "adaptive ceilings: benchmarks/ceilings_adaptive.py --backend cuda (at most ${LIMIT} s)"
    (cd "$REPO" && timeout "$LIMIT" "$PY" benchmarks/ceilings_adaptive.py --backend cuda \
        --rounds 1) >"$OUT/adaptive.txt" 2>&1 || FAILED+=("adaptive")
    cat "$OUT/adaptive.txt"
fi

echo
echo "device check took $((SECONDS - STARTED)) s; steps: $STEPS; failed: ${FAILED[*]:-nothing}"
ls -l "$OUT"
if [[ -n $CAMPAIGN_RAN ]]; then
    echo
    cat "$OUT/summary.txt"  # last: the measured ceilings beside the datasheet
fi
[[ ${#FAILED[@]} -eq 0 ]]
