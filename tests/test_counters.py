"""Hardware counters (issue 7): tool parsers against recorded tool output only (tests/fixtures/),
and the pairing, calibration and fail-closed rules with constructed inputs (our own structures)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rooflab.backends.base import nvtx_name
from rooflab.counters import (
    Calibration,
    KernelMetric,
    Pairing,
    PairingError,
    Unavailable,
    UntrustedCounts,
    bypassed_levels,
    bytes_by_level,
    calibrate,
    counter_rows,
    counters_range,
    derive_cpu,
    flops_from_counters,
    hierarchical_points,
    llc_line_bytes,
    missing_metrics,
    model_vs_counted,
    ncu_command,
    ncu_problem,
    ncu_version,
    nvtx_push_pop_filter,
    pair,
    parse_ncu_csv,
    parse_perf_stat,
    parse_query_metrics,
    perf_stat_command,
    plan_collection,
    pmu_note,
    query_available_metrics,
    run_ncu,
    run_perf_stat,
    sum_over_kernels,
    wanted_metrics,
)
from rooflab.counters.ncu import (
    CLOCK_METRICS,
    DRAM_READ,
    DRAM_WRITE,
    DURATION,
    L1_BYTES,
    L2_BYTES,
    REPLAY_PASSES,
    CounterParseError,
    NcuCommand,
    NcuResult,
    base_name,
    fixed_metrics,
    ncu_outcome,
    parse_ncu_version,
    replay_passes,
)
from rooflab.counters.perf import DEFAULT_EVENTS
from rooflab.counters.tool import ToolRun, run_tool

FIXTURES = Path(__file__).parent / "fixtures"
NCU_FIXTURES = FIXTURES / "ncu"
PERF_FIXTURES = FIXTURES / "perf"
OWED = "fixture owed: record on a GPU"


def read(path: Path) -> str:
    if not path.exists():
        pytest.skip(f"{OWED} ({path.relative_to(FIXTURES)})")
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def option(argv, name):
    """The value after `name` in argv (the flag must appear exactly once)."""
    assert list(argv).count(name) == 1, f"{name} appears {list(argv).count(name)} times"
    return argv[list(argv).index(name) + 1]


# -- ncu: the command line -------------------------------------------------------------------------

CHILD = [sys.executable, "-m", "rooflab.counters.gemm_child", "--sweep", "s", "--dtype", "bf16"]


@pytest.mark.parametrize("cache_control", ["all", "none"])
@pytest.mark.parametrize("replay_mode", ["kernel", "application"])
def test_ncu_command_passes_every_experiment_changing_setting(cache_control, replay_mode):
    cmd = ncu_command(
        CHILD,
        nvtx_range="main:bf16:nn:m64_n4096_k4096:counters",
        metrics=[DRAM_READ, DRAM_WRITE],
        cache_control=cache_control,
        replay_mode=replay_mode,
        ncu="/opt/ncu/ncu",
        log_file="/tmp/out.csv",
    )
    argv = cmd.argv
    assert argv[0] == "/opt/ncu/ncu"
    assert option(argv, "--cache-control") == cache_control
    assert option(argv, "--clock-control") == "none"
    assert option(argv, "--replay-mode") == replay_mode
    assert option(argv, "--target-processes") == "all"
    assert "--nvtx" in argv
    assert option(argv, "--nvtx-include") == "main:bf16:nn:m64_n4096_k4096:counters/"
    assert option(argv, "--metrics") == f"{DRAM_READ},{DRAM_WRITE}"
    assert "--csv" in argv
    assert option(argv, "--page") == "raw"
    assert option(argv, "--print-units") == "base"
    assert option(argv, "--log-file") == "/tmp/out.csv"
    # ncu 2024.1.1 has no "--" separator: the child follows the last option directly
    assert "--" not in argv
    assert list(argv[-len(CHILD) :]) == CHILD
    assert cmd.settings == {
        "tool": "ncu",
        "cache_control": cache_control,
        "clock_control": "none",
        "replay_mode": replay_mode,
        "target_processes": "all",
        "nvtx_range": "main:bf16:nn:m64_n4096_k4096:counters",
        "nvtx_domain": None,
        "nvtx_include": "main:bf16:nn:m64_n4096_k4096:counters/",
        "metrics": [DRAM_READ, DRAM_WRITE],
        "page": "raw",
        "print_units": "base",
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cache_control": "flush"}, "cache_control"),
        ({"replay_mode": "range"}, "replay_mode"),
        ({"metrics": []}, "no metrics"),
        ({"metrics": ["dram__bytes_read.sum,lts__t_bytes.sum"]}, "not an ncu metric"),
        ({"child": ["--help"]}, "no '--' separator"),
        ({"child": []}, "must be a program"),
    ],
)
def test_ncu_command_refuses(kwargs, message):
    args = {"nvtx_range": "r", "metrics": [DURATION], "cache_control": "all", **kwargs}
    child = args.pop("child", CHILD)
    with pytest.raises(ValueError, match=message):
        ncu_command(child, **args)


def test_nvtx_names_need_no_escape_in_ncus_filter():
    # push/pop range: the name and a trailing "/"; a domain before "@"
    assert nvtx_push_pop_filter("A_range") == "A_range/"
    assert nvtx_push_pop_filter("x:y", domain="rooflab") == "rooflab@x:y/"
    # a config id's "/" would read as nesting of ranges "main", "fp32", ...: written as ":"
    assert nvtx_name("main/fp32/nt/m1_n2_k3/warm") == "main:fp32:nt:m1_n2_k3:warm"
    assert counters_range("main/fp32/nt/m1_n2_k3") == "main:fp32:nt:m1_n2_k3:counters"
    assert nvtx_push_pop_filter(counters_range("main/fp32/nt/m1_n2_k3")) == (
        "main:fp32:nt:m1_n2_k3:counters/"
    )
    # what ncu would read as filter syntax, or as its regex mode, is refused, never escaped
    for bad in (
        "main/fp32",
        "a@b",
        "a,b",
        "[a",
        "a]",
        "a*b",
        "a+b",
        "a\\b",
        "cost$",
        "",
        "regex:a",
    ):
        with pytest.raises(ValueError, match="NVTX"):
            nvtx_push_pop_filter(bad)
    with pytest.raises(ValueError, match="NVTX name 'd/e'"):
        nvtx_push_pop_filter("a", domain="d/e")


# -- ncu missing, refused, failing: Unavailable with the reason, never an exception ----------------


def test_ncu_missing_is_unavailable_with_the_reason(tmp_path):
    missing = str(tmp_path / "no-such-ncu")
    for result in (
        ncu_version(ncu=missing),
        query_available_metrics("gh100", ncu=missing),
        query_available_metrics(ncu=missing),
        run_ncu(
            ncu_command(
                CHILD, nvtx_range="r", metrics=[DURATION], cache_control="all", ncu=missing
            ),
            timeout_s=30,
        ),
    ):
        assert isinstance(result, Unavailable)
        assert result.tool == "ncu"
        assert result.status == "unavailable"
        assert result.reason == f"{missing}: not found (no such program on PATH or at that path)"


def test_ncu_not_executable_is_unavailable(tmp_path):
    not_executable = tmp_path / "ncu"
    not_executable.write_text("#!/bin/sh\necho hi\n")
    not_executable.chmod(0o644)
    result = ncu_version(ncu=str(not_executable))
    assert isinstance(result, Unavailable)
    assert result.reason.startswith(f"{not_executable}: not permitted to run it")


def test_ncu_version_parses_the_recorded_version_text():
    text = read(NCU_FIXTURES / "version" / "ncu-2024.1.1.stdout.txt")
    assert parse_ncu_version(text) == "2024.1.1.0"
    assert parse_ncu_version("ncu: command not found") is None


def test_err_nvgpuctrperm_is_counters_not_permitted():
    templates = read(NCU_FIXTURES / "err_nvgpuctrperm" / "message_templates.txt").splitlines()
    assert len(templates) == 3
    for line in templates:
        for run in (ToolRun(("ncu",), 1, line + "\n", ""), ToolRun(("ncu",), 0, "", line)):
            problem = ncu_problem(run)
            assert isinstance(problem, Unavailable)
            assert problem.reason.startswith("counters not permitted (ERR_NVGPUCTRPERM): ")
            assert line.strip() in problem.reason  # the exact words, not a paraphrase


def test_no_driver_query_and_profile_are_unavailable_in_ncus_words():
    query = read(NCU_FIXTURES / "no_driver" / "query_metrics.stdout.txt")
    problem = ncu_problem(ToolRun(("ncu",), 1, query, ""))
    assert problem == Unavailable("ncu", "exit status 1: ==ERROR== Driver could not be loaded.")
    log = read(NCU_FIXTURES / "no_driver" / "profile.log.txt")
    stderr = read(NCU_FIXTURES / "no_driver" / "profile.stderr.txt")
    assert parse_ncu_csv(log) == []
    problem = ncu_problem(ToolRun(("ncu",), 1, "", stderr), log)
    assert isinstance(problem, Unavailable)
    assert "failed to connect to the CUDA driver" in problem.reason
    assert "==WARNING== No kernels were profiled." in problem.reason
    invalid = read(NCU_FIXTURES / "query_metrics" / "invalid_chip.stdout.txt")
    problem = ncu_problem(ToolRun(("ncu",), 1, invalid, ""))
    assert problem.reason == "exit status 1: ==ERROR== Invalid chip gh999"
    assert ncu_problem(ToolRun(("ncu",), 0, "fine\n", "")) is None


# -- ncu: metric availability per chip (recorded --query-metrics) ---------------------------------


def test_gh100_metric_list_has_the_fixed_metrics_and_one_fp16_tensor_alternative():
    text = read(NCU_FIXTURES / "query_metrics" / "gh100.ncu-2024.1.1.csv.gz")
    available = parse_query_metrics(text)
    assert available.chip == "gh100"
    assert len(available.names) > 3000
    assert missing_metrics(fixed_metrics(), available.names) == []
    # gh100 has the fp16 tensor aggregate, not the per-accumulator split of ga100 and ad10x
    assert missing_metrics(wanted_metrics(), available.names) == [
        "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
        "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
    ]
    plan = plan_collection(available)
    assert plan.checked and plan.missing == ()
    assert plan.tensor_metrics["fp16_tensor"] == ("sm__ops_path_tensor_src_fp16.sum",)
    assert plan.tensor_metrics["bf16_tensor"] == ("sm__ops_path_tensor_src_bf16_dst_fp32.sum",)
    assert "sm__ops_path_tensor_src_fp16_dst_fp32.sum" not in plan.metrics
    assert len(plan.metrics) == len(set(plan.metrics))
    with pytest.raises(ValueError, match="not in the list"):
        parse_query_metrics(text, chip="ga100")


def test_plan_records_what_a_chip_lacks():
    text = read(NCU_FIXTURES / "query_metrics" / "gh100.ncu-2024.1.1.csv.gz")
    names = parse_query_metrics(text).names - {"lts__t_bytes", "sm__ops_path_tensor_src_fp8"}
    plan = plan_collection(type(parse_query_metrics(text))("gh100", frozenset(names)))
    assert plan.missing == (L2_BYTES, "sm__ops_path_tensor_src_fp8.sum")
    assert L2_BYTES not in plan.metrics and "fp8_tensor" not in plan.tensor_metrics
    unchecked = plan_collection(None)
    assert not unchecked.checked and unchecked.missing == ()


THREE_CHIPS = NCU_FIXTURES / "query_metrics" / "ad102_ga100_gh100.ncu-2024.1.1.csv.gz"
FP16_SPLIT = (
    "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
    "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
)


def test_a_list_of_several_chips_needs_one_named():
    with pytest.raises(ValueError, match=r"several chips listed \(ad102, ga100, gh100\); name one"):
        parse_query_metrics(read(THREE_CHIPS))


def test_each_chip_of_a_several_chip_list_reads_its_own_column():
    """ncu's list for ad102 (Ada), ga100 (A100) and gh100 (H100/H200), one column each: each
    chip's plan takes the fp16 tensor alternative that chip has, and only gh100 lacks nothing."""
    text = read(THREE_CHIPS)
    plans = {}
    for chip in ("ad102", "ga100", "gh100"):
        available = parse_query_metrics(text, chip=chip)
        assert available.chip == chip
        assert missing_metrics(fixed_metrics(), available.names) == []
        plans[chip] = plan_collection(available)
    assert plans["gh100"].tensor_metrics["fp16_tensor"] == ("sm__ops_path_tensor_src_fp16.sum",)
    assert plans["ga100"].tensor_metrics["fp16_tensor"] == FP16_SPLIT
    assert plans["ad102"].tensor_metrics["fp16_tensor"] == FP16_SPLIT
    assert plans["gh100"].missing == plans["ad102"].missing == ()
    # A100 has no FP8 tensor path: its counter is recorded as missing, never collected
    assert plans["ga100"].missing == ("sm__ops_path_tensor_src_fp8.sum",)
    assert "fp8_tensor" not in plans["ga100"].tensor_metrics
    assert "sm__ops_path_tensor_src_fp8.sum" not in plans["ga100"].metrics
    # two recordings of ncu's gh100 list agree: the column read is gh100's, not a neighbour's
    single = parse_query_metrics(read(NCU_FIXTURES / "query_metrics" / "gh100.ncu-2024.1.1.csv.gz"))
    assert parse_query_metrics(text, chip="gh100").names == single.names
    assert parse_query_metrics(text, chip="ga100").names != single.names


def test_every_ncu_metric_name_is_listed_for_some_chip():
    """The names rooflab asks for exist (as base names) in ncu's own list for ad102, ga100 or
    gh100: a misspelt metric fails here, not first under ncu on a GPU."""
    text = read(THREE_CHIPS)
    names = set().union(
        *(parse_query_metrics(text, chip=c).names for c in ("ad102", "ga100", "gh100"))
    )
    for metric in wanted_metrics():
        assert base_name(metric) in names, metric


# -- ncu: the raw CSV (recorded) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kernel", "read_bytes", "write_bytes", "duration_ns"),
    [
        ("sobelDouble", "void Sobel<double>(uchar4 *, uchar4 *, int, int)", 4196352, 35456, 628032),
        (
            "transposeCoalesced",
            "transposeCoalesced(float *, float *, int, int)",
            268457472,
            265940992,
            1420832,
        ),
    ],
)
def test_parse_recorded_raw_csv(name, kernel, read_bytes, write_bytes, duration_ns):
    text = read(NCU_FIXTURES / "import_sample" / f"{name}.raw.csv")
    rows = parse_ncu_csv(text)
    header = text.splitlines()[0].split('","')
    assert len(rows) == sum("__" in cell for cell in header)  # every metric column, one kernel
    assert {r.kernel_id for r in rows} == {0} and {r.kernel_name for r in rows} == {kernel}
    by_metric = {r.metric: r for r in rows}
    assert by_metric[DRAM_READ].value == read_bytes and by_metric[DRAM_READ].unit == "byte"
    assert by_metric[DRAM_WRITE].value == write_bytes
    assert by_metric[DURATION].value == duration_ns and by_metric[DURATION].unit == "nsecond"
    assert by_metric["sm__cycles_elapsed.avg.per_second"].unit == "cycle/second"
    # requested but absent from the report: ncu drops them silently, so they are missing here
    absent = set(wanted_metrics()) - set(by_metric)
    assert {L2_BYTES, L1_BYTES} <= absent
    totals = sum_over_kernels(rows)
    assert totals[DRAM_READ].total == read_bytes and totals[DRAM_READ].kernels == 1
    clock = totals["sm__cycles_elapsed.avg.per_second"]
    assert not clock.summable and clock.total is None and clock.minimum == clock.maximum > 1e8
    levels = bytes_by_level(totals)
    assert levels == {"HBM": read_bytes + write_bytes, "L2": None, "L1": None}
    counted = flops_from_counters(totals)
    # nothing counted, nothing invented: every path is None, with the metrics it lacks
    for path in counted.paths.values():
        assert path.flops is None and path.missing


def test_counter_rows_keep_kernels_range_sums_missing_and_settings():
    rows = parse_ncu_csv(read(NCU_FIXTURES / "import_sample" / "sobelDouble.raw.csv"))
    # L1_BYTES requested and absent: ncu drops it from the CSV without a word
    cmd = ncu_command(CHILD, nvtx_range="r", metrics=[DRAM_READ, L1_BYTES], cache_control="none")
    result = NcuResult(rows, sum_over_kernels(rows), cmd, ToolRun(cmd.argv, 0, "", ""))
    ids = {"run_id": "c1", "config_id": CONFIG, "tool_version": "2024.1.1.0", "chip": "ga102"}
    out = counter_rows(result, settings=cmd.settings, missing=[L2_BYTES], **ids)
    kernel = [r for r in out if r["scope"] == "kernel"]
    absent = ("missing", "not in output")
    summed = {r["metric"]: r for r in out if r["scope"] == "range" and r["status"] not in absent}
    assert len(kernel) == len(rows) and set(summed) == {r.metric for r in rows}
    assert summed[DRAM_READ]["value"] == 4196352 and summed[DRAM_READ]["unit"] == "byte"
    assert summed["sm__cycles_elapsed.avg.per_second"]["value"] is None
    (missing,) = [r for r in out if r["status"] == "missing"]
    assert missing["metric"] == L2_BYTES
    assert missing["reason"] == "not available on chip ga102 (ncu 2024.1.1.0 --query-metrics)"
    (dropped,) = [r for r in out if r["status"] == "not in output"]
    assert dropped["metric"] == L1_BYTES and dropped["value"] is None
    assert dropped["reason"].startswith("requested, but ncu printed no column for it")
    for row in out:
        assert (row["cache_control"], row["clock_control"], row["replay_mode"]) == (
            "none",
            "none",
            "kernel",
        )
        assert row["nvtx_include"] == "r/" and row["tool"] == "ncu"
    (gone,) = counter_rows(Unavailable("ncu", "exit status 1: x"), settings=cmd.settings, **ids)
    assert (gone["status"], gone["reason"], gone["value"]) == (
        "unavailable",
        "exit status 1: x",
        None,
    )


def test_parse_ncu_csv_refuses_a_row_that_does_not_fit():
    text = read(NCU_FIXTURES / "import_sample" / "sobelDouble.raw.csv")
    lines = text.splitlines()
    with pytest.raises(ValueError, match="does not fit"):
        parse_ncu_csv("\n".join([*lines, lines[-1].rsplit(",", 1)[0]]))
    # ncu's own lines around the CSV (as with CSV on stdout) are skipped
    noisy = "==PROF== Connected to process 1\n" + text + "==PROF== Disconnected from process 1\n"
    assert parse_ncu_csv(noisy) == parse_ncu_csv(text)


def test_replay_passes_from_ncus_progress_lines():
    # ncu's progress lines as printed in its own manual (NsightComputeCli, "Quickstart", ncu
    # 2024.1.1 package): one per profiled kernel
    manual = (
        "==PROF== Connected to process 5971 (/tmp/vectorAdd)\n"
        '==PROF== Profiling "vectorAdd_A" - 0: 0%....50%....100% - 46 passes\n'
        '==PROF== Profiling "vectorAdd_B" - 1: 0%....50%....100% - 46 passes\n'
        "==PROF== Disconnected from process 5971\n"
    )
    assert replay_passes(manual) == [46, 46]
    assert replay_passes(manual.replace("46 passes", "1 pass", 1)) == [1, 46]
    assert replay_passes(read(NCU_FIXTURES / "no_driver" / "profile.log.txt")) == []


def _scripted_ncu(tmp_path: Path, log_text: str, stderr: str = "", code: int = 0) -> Path:
    """A stand-in for ncu's profile that writes `log_text` to its --log-file."""
    (tmp_path / "log.txt").write_text(log_text)
    script = tmp_path / "ncu"
    script.write_text(
        f"""#!{sys.executable}
import shutil, sys
args = sys.argv[1:]
shutil.copy({str(tmp_path / "log.txt")!r}, args[args.index("--log-file") + 1])
sys.stderr.write({stderr!r})
sys.exit({code})
"""
    )
    script.chmod(0o755)
    return script


def test_a_tools_output_file_is_read_back_and_an_earlier_runs_file_never_is(tmp_path):
    out = tmp_path / "out.txt"
    writes = ["/bin/sh", "-c", f"echo counted >{out}; echo said; echo warned >&2"]
    run = run_tool("ncu", writes, 60, out)
    assert (run.returncode, run.file_text, run.output) == (0, "counted\n", "said\n\nwarned\n")
    run = run_tool("ncu", ["/bin/sh", "-c", "exit 3"], 60, out)  # wrote nothing this time
    assert (run.returncode, run.file_text, run.output) == (3, None, "")
    assert not out.exists()
    assert run_tool("ncu", ["/bin/sh", "-c", "echo only"], 60).output == "only\n"


def test_csv_not_understood_is_unavailable_not_a_crash(tmp_path):
    text = read(NCU_FIXTURES / "import_sample" / "sobelDouble.raw.csv")
    broken = text + text.splitlines()[-1].rsplit(",", 1)[0] + "\n"  # a row cut short
    with pytest.raises(CounterParseError):
        parse_ncu_csv(broken)
    ncu = _scripted_ncu(tmp_path, broken)
    log = tmp_path / "profile.csv"
    command = ncu_command(
        CHILD, nvtx_range="r", metrics=[DRAM_READ], cache_control="all", ncu=str(ncu), log_file=log
    )
    result = run_ncu(command, timeout_s=60)
    assert isinstance(result, Unavailable)
    assert result.reason.startswith("ncu's CSV not understood: row does not fit")


def test_a_failing_program_under_ncu_leaves_its_traceback_in_the_reason(tmp_path):
    # the program's own stderr (a real traceback) beside ncu's recorded lines for a failing child
    failed = subprocess.run(
        [sys.executable, "-c", "import json; json.loads('{')"], capture_output=True, text=True
    )
    assert failed.returncode == 1 and "Traceback" in failed.stderr
    log = read(NCU_FIXTURES / "no_driver" / "profile.log.txt")
    problem = ncu_problem(ToolRun(("ncu",), 1, "", failed.stderr), log)
    assert problem.reason.startswith(
        "exit status 1: ==ERROR== The application returned an error code (1). | "
        "==WARNING== No kernels were profiled. | the program's stderr ends: "
    )
    assert problem.reason.endswith(
        "json.decoder.JSONDecodeError: Expecting property name "
        "enclosed in double quotes: line 1 column 2 (char 1)"
    )
    # through run_ncu as well, with a program that fails
    ncu = _scripted_ncu(tmp_path, log, stderr=failed.stderr, code=1)
    command = ncu_command(
        CHILD,
        nvtx_range="r",
        metrics=[DRAM_READ],
        cache_control="all",
        ncu=str(ncu),
        log_file=tmp_path / "profile.csv",
    )
    assert run_ncu(command, timeout_s=60) == problem


def gemm_fixtures() -> list[Path]:
    return sorted((NCU_FIXTURES / "gemm").glob("*.raw.csv"))


@pytest.mark.parametrize("csv_path", gemm_fixtures() or [None], ids=lambda p: p and p.stem)
def test_recorded_gemm_profiles(csv_path):
    """ncu CSV of real GEMMs (tests/fixtures/ncu/record_gemm.py on a GPU): every planned metric
    parsed, sums consistent, and the calibration the recorder saw reproduced."""
    if csv_path is None:
        pytest.skip(f"{OWED} (tests/fixtures/ncu/gemm/*.raw.csv: run record_gemm.py)")
    meta = json.loads(csv_path.with_name(csv_path.name.replace(".raw.csv", ".json")).read_text())
    text = csv_path.read_text()
    stdout, stderr = (
        csv_path.with_name(csv_path.name.replace(".raw.csv", f".{part}.txt")).read_text()
        for part in ("stdout", "stderr")
    )
    # the recorded profile read again as the counters step reads one (rooflab.counters.ncu)
    command = NcuCommand(tuple(meta["argv"]), meta["settings"], str(csv_path))
    run = ToolRun(command.argv, meta["returncode"], stdout, stderr, text)
    result = ncu_outcome(command, run)
    if meta["problem"]:  # a profile that failed on the GPU: the same reason from its output
        assert isinstance(result, Unavailable) and result.reason == meta["problem"]
        return
    assert isinstance(result, NcuResult), result
    # ncu 2025 prints no progress lines into a log file, but a raw-page column per kernel: read
    # here with the csv module alone (from the header on: units, then kernels)
    table = list(csv.DictReader(io.StringIO(text[text.index('"ID",') :])))[1:]
    assert len(table) == meta["kernels"]
    assert list(result.passes) == [int(row[REPLAY_PASSES]) for row in table]
    assert list(result.passes) == meta["replay_passes"]  # as the recorder read them
    assert all(passes >= 1 for passes in result.passes)
    # only what was asked for (and the passes) is kept: the raw page holds every device
    # attribute besides
    asked = set(meta["settings"]["metrics"])
    assert {r.metric for r in result.rows} == asked | {REPLAY_PASSES}
    assert len(parse_ncu_csv(text)) > len(result.rows)
    rows = [r for r in result.rows if r.metric != REPLAY_PASSES]
    totals = sum_over_kernels(rows)
    for metric in (DRAM_READ, DRAM_WRITE, L2_BYTES, L1_BYTES):
        per_kernel = [r.value for r in rows if r.metric == metric]
        assert totals[metric].total == pytest.approx(sum(per_kernel))
        assert totals[metric].kernels == meta["kernels"]
    assert bytes_by_level(totals)["HBM"] > 0
    flops = flops_from_counters(totals).flops(meta["compute_path"])
    assert flops is not None
    seen = calibrate(flops, meta["m"], meta["n"], meta["k"], path=meta["compute_path"])
    assert seen.trusted is meta["expect_trusted"]


# -- ncu: sums and FLOPs over our own rows ---------------------------------------------------------


def kernel_rows(kernel_id, values, unit="byte"):
    return [KernelMetric(kernel_id, f"k{kernel_id}", m, v, unit, str(v)) for m, v in values.items()]


def test_sum_over_kernels_adds_counters_and_keeps_rates_apart():
    rows = kernel_rows(0, {DRAM_READ: 100.0, DRAM_WRITE: 10.0}) + kernel_rows(
        1, {DRAM_READ: 50.0, DRAM_WRITE: None}
    )
    rows += kernel_rows(0, {CLOCK_METRICS[0]: 1.9e9}, "cycle/second")
    rows += kernel_rows(1, {CLOCK_METRICS[0]: 1.7e9}, "cycle/second")
    totals = sum_over_kernels(rows)
    assert totals[DRAM_READ].total == 150.0 and totals[DRAM_READ].kernels == 2
    # a kernel without a value: the sum is unknown, not the sum of the rest
    assert totals[DRAM_WRITE].total is None and totals[DRAM_WRITE].kernels_without_value == 1
    clock = totals[CLOCK_METRICS[0]]
    assert clock.total is None and (clock.minimum, clock.maximum) == (1.7e9, 1.9e9)
    with pytest.raises(ValueError, match="different units"):
        sum_over_kernels(kernel_rows(0, {DURATION: 1.0}, "nsecond") + kernel_rows(1, {DURATION: 1}))


def test_flops_are_add_plus_mul_plus_two_fma_per_precision():
    def sass(op):
        return f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum"

    totals = {sass("fadd"): 10, sass("fmul"): 20, sass("ffma"): 30, sass("dadd"): 1}
    totals |= {sass("dmul"): 2, sass("dfma"): 3, sass("hadd"): 4, sass("hmul"): 5}
    totals |= {sass("hfma"): 6}
    counted = flops_from_counters(totals)
    assert counted.flops("fp32_fma") == 10 + 20 + 2 * 30
    assert counted.flops("fp64_fma") == 1 + 2 + 2 * 3
    assert counted.flops("fp16_fma") == 4 + 5 + 2 * 6
    # the half weights are a stated convention, changed together (per lane: hadd and hmul x 2,
    # hfma x 4, as later ncu versions weigh packed HFMA2/HADD2/HMUL2)
    per_lane = flops_from_counters(totals, hfma_flop_per_inst=4)
    assert per_lane.flops("fp16_fma") == 2 * 4 + 2 * 5 + 4 * 6
    assert per_lane.flops("fp32_fma") == 10 + 20 + 2 * 30  # other precisions untouched
    del totals[sass("ffma")]
    missing = flops_from_counters(totals).paths["fp32_fma"]
    assert missing.flops is None and missing.missing == (sass("ffma"),)


def test_tensor_ops_per_dtype_with_the_chips_alternative():
    gh100 = {"sm__ops_path_tensor_src_fp16.sum": 8e9}
    assert flops_from_counters(gh100).flops("fp16_tensor") == 8e9
    ga100 = {
        "sm__ops_path_tensor_src_fp16_dst_fp16.sum": 1e9,
        "sm__ops_path_tensor_src_fp16_dst_fp32.sum": 7e9,
    }
    assert flops_from_counters(ga100).flops("fp16_tensor") == 8e9
    both = gh100 | ga100
    plan = {"fp16_tensor": ("sm__ops_path_tensor_src_fp16_dst_fp32.sum",)}
    assert flops_from_counters(both, tensor_metrics=plan).flops("fp16_tensor") == 7e9
    bf16 = {"sm__ops_path_tensor_src_bf16_dst_fp32.sum": 3e9}
    assert flops_from_counters(bf16, tensor_flop_per_op=2).flops("bf16_tensor") == 6e9
    assert flops_from_counters(bf16).flops("tf32_tensor") is None


# -- calibration ---------------------------------------------------------------------------------

M, N, K = 64, 4096, 4096
F = 2 * M * N * K


@pytest.mark.parametrize(
    ("counted", "trusted", "words"),
    [
        (F, True, "counted/2MNK = 1, within 1%"),
        (F * 1.005, True, "within 1%"),
        (F * 0.995, True, "within 1%"),
        (F * 1.0099, True, "within 1%"),
        (F * 1.0101, False, "more than 1%"),
        (F * 1.02, False, "counted/2MNK = 1.02 (off by 2.00%, more than 1%)"),
        (F * 0.98, False, "counted/2MNK = 0.98 (off by 2.00%, more than 1%)"),
        (F / 2, False, "counted/2MNK = 0.5 (off by 50.00%"),
        (0, False, f"counter reads zero for 2MNK = {F} FLOP"),
        (None, False, "counter missing"),
        (math.nan, False, "not a count"),
        (-1.0, False, "not a count"),
    ],
)
def test_calibrate(counted, trusted, words):
    result = calibrate(counted, M, N, K, path="bf16_tensor")
    assert result.trusted is trusted
    assert result.expected_flops == F
    assert result.reason.startswith("bf16_tensor: ")
    assert words in result.reason
    if not trusted:
        assert "untrusted" in result.reason
    if counted is not None and math.isfinite(counted) and counted >= 0:
        assert result.ratio == counted / F  # stored: how far the counter was off
    else:
        assert result.ratio is None


def test_calibrate_refuses_nonsense_shapes_and_tolerances():
    with pytest.raises(ValueError):
        calibrate(F, 0, N, K)
    for tolerance in (1.5, 1.0, -0.01):
        with pytest.raises(ValueError, match="tolerance must be in"):
            calibrate(F, M, N, K, tolerance=tolerance)
    assert calibrate(F, M, N, K, tolerance=0.0).trusted  # an exact count passes a zero tolerance
    assert calibrate(2 * N * K, 1, N, K).trusted  # M = 1, the weight-reuse sweep's first point
    assert not calibrate(F + 2, M, N, K, tolerance=0.0).trusted


# -- pairing ---------------------------------------------------------------------------------------

CONFIG = "main/bf16/nn/m64_n4096_k4096"


def timing(cache_state, median_s, run_id="20260101T000000Z-aaaa", config_id=CONFIG, **extra):
    return {
        "run_id": run_id,
        "config_id": config_id,
        "cache_state": cache_state,
        "median_s": median_s,
        "sweep": "main",
        "m": M,
        "n": N,
        "k": K,
        "dtype": "bf16",
        "layout": "nn",
        **extra,
    }


TIMINGS = [timing("warm", 20e-6), timing("cold", 35e-6), timing("cold", 1.0, config_id="other")]


def test_flushed_replay_pairs_with_cold_and_no_flush_with_warm():
    cold = pair({"config_id": CONFIG, "cache_control": "all"}, TIMINGS)
    assert (cold.cache_state, cold.timing["median_s"]) == ("cold", 35e-6)
    assert cold.label == "flushed replay ↔ cold timing"
    warm = pair({"config_id": CONFIG, "cache_control": "none"}, TIMINGS)
    assert (warm.cache_state, warm.timing["median_s"]) == ("warm", 20e-6)
    assert warm.label == "no-flush replay ↔ warm timing"


def test_never_paired_across_cache_states():
    only_warm = [timing("warm", 20e-6)]
    with pytest.raises(PairingError, match=r"pairs only with a cold timing.*never paired across"):
        pair({"config_id": CONFIG, "cache_control": "all"}, only_warm)
    only_cold = [timing("cold", 35e-6)]
    with pytest.raises(PairingError, match="pairs only with a warm timing"):
        pair({"config_id": CONFIG, "cache_control": "none"}, only_cold)
    with pytest.raises(PairingError, match="no pairing rule"):
        pair({"config_id": CONFIG, "cache_control": "some"}, TIMINGS)


def test_pairing_takes_the_newest_run_of_the_same_machine():
    timings = [
        timing("cold", 30e-6, run_id="20260102T000000Z-bbbb", machine_id="a"),
        timing("cold", 40e-6, run_id="20260101T000000Z-aaaa", machine_id="a"),
        timing("cold", 10e-6, run_id="20260103T000000Z-cccc", machine_id="b"),
    ]
    chosen = pair({"config_id": CONFIG, "cache_control": "all", "machine_id": "a"}, timings)
    assert chosen.timing["median_s"] == 30e-6
    with pytest.raises(PairingError, match="on machine c"):
        pair({"config_id": CONFIG, "cache_control": "all", "machine_id": "c"}, timings)
    with pytest.raises(PairingError, match="no usable median_s"):
        pair({"config_id": CONFIG, "cache_control": "all"}, [timing("cold", 0.0)])


# -- hierarchical points (fail closed) -------------------------------------------------------------

CEILINGS = {"HBM": 4e12, "L2": 1.2e13, "bf16_tensor": 7e14}


def trusted() -> Calibration:
    return calibrate(F * 1.002, M, N, K, path="bf16_tensor")


def cold_pairing() -> Pairing:
    return pair({"config_id": CONFIG, "cache_control": "all"}, TIMINGS)


@pytest.mark.parametrize("counted", [0, None, F * 1.02, F / 2])
def test_untrusted_counts_never_reach_a_point(counted):
    untrusted = calibrate(counted, M, N, K, path="bf16_tensor")
    levels = {"HBM": 3.4e7, "L2": 1e8}
    with pytest.raises(UntrustedCounts, match="no Roofline point"):
        hierarchical_points(cold_pairing(), untrusted, levels, CEILINGS, "bf16_tensor")


def test_a_calibration_admits_only_its_own_path_and_shape():
    levels = {"HBM": 3.4e7}
    with pytest.raises(UntrustedCounts, match="cannot admit a point on path fp16_tensor"):
        hierarchical_points(
            cold_pairing(), trusted(), levels, CEILINGS | {"fp16_tensor": 1}, "fp16_tensor"
        )
    other_shape = calibrate(2 * 128 * N * K, 128, N, K, path="bf16_tensor")
    with pytest.raises(ValueError, match="calibration is for"):
        hierarchical_points(cold_pairing(), other_shape, levels, CEILINGS, "bf16_tensor")


def test_hierarchical_points_name_the_limiting_level():
    # F = 2^31 FLOP. HBM: I = F/3.4e7 = 63.2, B·I = 2.5e14; L2: I = F/2e8 = 10.7, B·I = 1.3e14
    levels = {"HBM": 3.4e7, "L2": 2e8, "L1": 5e8}
    rows = hierarchical_points(
        cold_pairing(), trusted(), levels, CEILINGS, "bf16_tensor", counters_run_id="c1"
    )
    assert [r["level"] for r in rows] == ["HBM", "L2", "L1"]
    by_level = {r["level"]: r for r in rows}
    for level, q in levels.items():
        assert by_level[level]["intensity"] == pytest.approx(F / q)
        assert by_level[level]["bytes"] == q
    assert by_level["HBM"]["attainable_flops_per_s"] == pytest.approx(4e12 * F / 3.4e7)
    assert by_level["L2"]["attainable_flops_per_s"] == pytest.approx(1.2e13 * F / 2e8)
    # each level's bound: its bytes at its bandwidth, or the compute time where that is longer
    assert by_level["HBM"]["bound_s"] == pytest.approx(3.4e7 / 4e12)
    assert by_level["L2"]["bound_s"] == pytest.approx(2e8 / 1.2e13)
    assert {r["limiting_level"] for r in rows} == {"L2"}
    assert {r["limiter"] for r in rows} == {"L2"}
    hier = 1.2e13 * F / 2e8
    for row in rows:
        assert row["hierarchical_attainable_flops_per_s"] == pytest.approx(hier)
    # L1 has no measured ceiling here: its intensity is kept, no bound is made up
    assert by_level["L1"]["bandwidth_b_per_s"] is None
    assert by_level["L1"]["attainable_flops_per_s"] is None
    for row in rows:
        assert row["q_source"] == "counters"
        assert row["flops"] == F  # useful work; the counted FLOPs only admitted the point
        assert row["flops_counted"] == pytest.approx(F * 1.002)
        assert row["median_s"] == 35e-6  # the cold timing's median, never a counter duration
        assert row["achieved_flops_per_s"] == pytest.approx(F / 35e-6)
        assert row["efficiency"] == pytest.approx(F / 35e-6 / hier)
        assert row["pairing"] == "flushed replay ↔ cold timing"
        assert row["cache_state"] == "cold" and row["cache_control"] == "all"
        assert row["counters_run_id"] == "c1"


def test_compute_limits_when_every_level_allows_more():
    # HBM: I = 2147, B·I = 8.6e15; L2: I = 1074, B·I = 1.3e16; both above C = 7e14
    levels = {"HBM": 1e6, "L2": 2e6}
    rows = hierarchical_points(cold_pairing(), trusted(), levels, CEILINGS, "bf16_tensor")
    assert {r["limiter"] for r in rows} == {"compute"}
    assert {r["limiting_level"] for r in rows} == {"HBM"}  # still the tighter of the two levels
    assert {r["hierarchical_attainable_flops_per_s"] for r in rows} == {7e14}
    assert all(r["attainable_flops_per_s"] == 7e14 for r in rows)
    assert all(r["bound_s"] == pytest.approx(F / 7e14) for r in rows)


def test_hierarchical_points_need_a_ceiling():
    with pytest.raises(ValueError, match="no bandwidth ceiling"):
        hierarchical_points(cold_pairing(), trusted(), {"L1": 1e8}, CEILINGS, "bf16_tensor")
    with pytest.raises(ValueError, match="no compute ceiling"):
        hierarchical_points(cold_pairing(), trusted(), {"HBM": 1e8}, {"HBM": 1e12}, "bf16_tensor")


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_hierarchical_points_refuse_counted_bytes_that_are_not_a_count(bad):
    with pytest.raises(ValueError, match="counted bytes must be finite and >= 0"):
        hierarchical_points(
            cold_pairing(), trusted(), {"HBM": 3.4e7, "L2": bad}, CEILINGS, "bf16_tensor"
        )


def test_zero_counted_bytes_at_a_level_give_no_memory_bound_there():
    # zero is a count (warm operands that never left the L2), not a missing counter
    rows = hierarchical_points(
        cold_pairing(), trusted(), {"HBM": 0.0, "L2": 2e8}, CEILINGS, "bf16_tensor"
    )
    hbm = next(r for r in rows if r["level"] == "HBM")
    assert hbm["intensity"] == math.inf and hbm["attainable_flops_per_s"] == 7e14
    assert {r["limiting_level"] for r in rows} == {"L2"}


def test_a_level_counting_fewer_bytes_than_the_one_outside_it_gets_no_point():
    # as recorded on an H200 (tests/fixtures/ncu/gemm/bf16_m4096_n4096_k4096_cache-all): cuBLAS
    # loads through TMA, so l1tex__t_bytes saw 12,160 B against 1.0 GB at L2
    levels = {"HBM": 1.767e8, "L2": 1.017e9, "L1": 12_160.0}
    assert set(bypassed_levels(levels)) == {"L1"}
    assert "12160 B counted, under 0.5 x the 1.017e+09 B at L2" in bypassed_levels(levels)["L1"]
    rows = hierarchical_points(cold_pairing(), trusted(), levels, CEILINGS, "bf16_tensor")
    assert [r["level"] for r in rows] == ["HBM", "L2"]
    # L1 at zero: no point either; L2 below HBM: the same rule one level out
    assert set(bypassed_levels({"HBM": 3.4e7, "L2": 6.4e7, "L1": 0.0})) == {"L1"}
    assert set(bypassed_levels({"HBM": 3.4e7, "L2": 0.0})) == {"L2"}
    # equal counts, more inside, or a little less (the H200's SIMT SGEMM, fp32 2048^3: 0.99 x
    # its L2 bytes at L1): every level kept
    assert bypassed_levels({"HBM": 3.4e7, "L2": 3.4e7, "L1": 5e8}) == {}
    assert bypassed_levels({"HBM": 3.614e7, "L2": 4.23e8, "L1": 4.194e8}) == {}
    assert set(bypassed_levels({"HBM": 3.614e7, "L2": 4.23e8, "L1": 2.1e8})) == {"L1"}


# -- model vs counted bytes ------------------------------------------------------------------------


def test_model_vs_counted_direction():
    over = model_vs_counted(34_078_720, 12_000_000)
    assert over.direction == "model over-counts"
    assert over.ratio == pytest.approx(12_000_000 / 34_078_720)
    assert "by 2.84x" in over.statement
    under = model_vs_counted(34_078_720, 40_000_000)
    assert under.direction == "model under-counts" and under.ratio > 1
    assert "under-counts by 1.17x" in under.statement
    assert model_vs_counted(1e6, 1.005e6).direction == "agrees"
    assert model_vs_counted(1e6, 0).direction == "model over-counts"
    with pytest.raises(ValueError):
        model_vs_counted(0, 1e6)
    with pytest.raises(ValueError):
        model_vs_counted(1e6, math.nan)


# -- perf (recorded on this development machine) ---------------------------------------------------


def test_perf_stat_command():
    cmd = perf_stat_command(DEFAULT_EVENTS, ["python", "-c", "pass"], output_path="/tmp/p.txt")
    assert cmd.argv == (
        "perf",
        "stat",
        "-x,",
        "-e",
        "cycles,instructions,LLC-load-misses,LLC-loads,cache-misses",
        "-o",
        "/tmp/p.txt",
        "--",
        "python",
        "-c",
        "pass",
    )
    with pytest.raises(ValueError):
        perf_stat_command([], ["true"])


@pytest.mark.parametrize("name", ["matmul_default.stderr.txt", "matmul_ofile.perf.txt"])
def test_perf_not_supported_everywhere_is_unavailable_with_the_reason(name):
    stat = parse_perf_stat(read(PERF_FIXTURES / name))
    assert list(stat.counts) == list(DEFAULT_EVENTS)
    assert {c.status for c in stat.counts.values()} == {"not supported"}
    assert all(c.value is None for c in stat.counts.values())
    assert stat.other_lines == []
    result = derive_cpu(stat, line_bytes=64, note="no CPU PMU exposed to this kernel")
    assert result.status == "unavailable"
    assert result.measured == {} and result.derived == []
    assert result.reason == (
        "perf: cycles, instructions, LLC-load-misses, LLC-loads, cache-misses <not supported>"
        " (no CPU PMU exposed to this kernel)"
    )


def test_perf_counted_software_event_beside_unsupported_ones():
    stat = parse_perf_stat(read(PERF_FIXTURES / "matmul_task_clock.stderr.txt"))
    clock = stat.counts["task-clock"]
    assert (clock.status, clock.value, clock.unit, clock.percent_running) == (
        "counted",
        339.61,
        "msec",
        100.0,
    )
    result = derive_cpu(stat, ("task-clock", *DEFAULT_EVENTS), line_bytes=64)
    assert result.status == "partial"
    assert result.measured == {"task-clock": 339.61}
    assert result.derived == []  # nothing follows from task-clock alone
    assert "cycles, instructions, LLC-load-misses, LLC-loads, cache-misses <not supported>" in (
        result.reason
    )


def test_perf_not_counted_and_syntax_errors():
    group = parse_perf_stat(read(PERF_FIXTURES / "group_not_counted.stderr.txt"))
    assert group.counts["task-clock"].status == "not counted"
    assert group.counts["cycles"].status == "not supported"
    result = derive_cpu(group, ("task-clock", "cycles"))
    assert result.status == "unavailable"
    assert result.reason == "perf: task-clock <not counted>; cycles <not supported>"
    error = parse_perf_stat(read(PERF_FIXTURES / "fp_event_syntax_error.stderr.txt"), 129)
    assert error.counts == {} and error.returncode == 129
    result = derive_cpu(error, ("fp_arith_inst_retired.scalar_double",))
    assert result.status == "unavailable"
    assert result.reason.startswith(
        "perf: fp_arith_inst_retired.scalar_double not in perf's output | perf said: "
        "event syntax error: 'fp_arith_inst_retired.scalar_double'"
    )


def test_derive_cpu_from_counted_events():
    """The arithmetic of derive_cpu on our own PerfStat (a machine with a PMU is owed)."""
    lines = [
        "2000000,,cycles,1000,100.00,,",
        "3000000,,instructions,1000,100.00,1.50,insn per cycle",
        "1000,,LLC-load-misses,1000,100.00,,",
        "4000,,LLC-loads,1000,100.00,,",
    ]
    result = derive_cpu(parse_perf_stat("\n".join(lines)), DEFAULT_EVENTS[:4], line_bytes=64)
    assert result.status == "ok" and result.reason is None
    derived = {d["name"]: d for d in result.derived}
    assert derived["ipc"]["value"] == 1.5
    assert derived["llc_load_miss_ratio"]["value"] == 0.25
    estimate = derived["llc_miss_bytes_estimate"]
    assert (estimate["value"], estimate["unit"], estimate["kind"]) == (64000, "B", "estimate")
    assert "loads only" in estimate["basis"]
    no_line = derive_cpu(parse_perf_stat("\n".join(lines)), DEFAULT_EVENTS[:4], line_bytes=None)
    assert "llc_miss_bytes_estimate" not in {d["name"] for d in no_line.derived}


def test_derive_cpu_from_a_partial_pmu_derives_only_what_its_counts_allow():
    """A PMU that counts cycles and LLC loads but not instructions or LLC misses (the status
    lines in perf's own format, as in tests/fixtures/perf): no ratio is made from half of it."""
    lines = [
        "2000000,,cycles,1000,100.00,,",
        "<not supported>,,instructions,0,100.00,,",
        "<not supported>,,LLC-load-misses,0,100.00,,",
        "4000,,LLC-loads,1000,100.00,,",
    ]
    result = derive_cpu(parse_perf_stat("\n".join(lines)), DEFAULT_EVENTS[:4], line_bytes=64)
    assert result.status == "partial" and result.derived == []
    assert result.measured == {"cycles": 2e6, "LLC-loads": 4000}
    assert result.reason == "perf: instructions, LLC-load-misses <not supported>"


def test_pmu_note_and_line_size_from_sysfs_shaped_folders(tmp_path):
    devices = tmp_path / "devices"
    for name in ("breakpoint", "software", "tracepoint"):
        (devices / name).mkdir(parents=True)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 hypervisor avx2\n")
    note = pmu_note(devices, cpuinfo)
    assert note == (
        "no CPU PMU exposed to this kernel (event sources: breakpoint, software, tracepoint); "
        "CPU flag 'hypervisor' set: a virtual machine"
    )
    (devices / "cpu").mkdir()
    assert pmu_note(devices, cpuinfo) is None
    cache = tmp_path / "cache"
    for index, (level, kind, line) in enumerate(
        [(1, "Data", 64), (1, "Instruction", 64), (3, "Unified", 128)]
    ):
        folder = cache / f"index{index}"
        folder.mkdir(parents=True)
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "coherency_line_size").write_text(f"{line}\n")
    assert llc_line_bytes(cache) == 128
    assert llc_line_bytes(tmp_path / "none") is None


def test_perf_missing_is_unavailable(tmp_path):
    missing = str(tmp_path / "no-perf")
    result = run_perf_stat(perf_stat_command(["cycles"], ["true"], perf=missing), timeout_s=30)
    assert result == Unavailable(
        "perf", f"{missing}: not found (no such program on PATH or at that path)"
    )


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed here")
def test_perf_collection_for_real(tmp_path):
    """perf stat on this machine: on a VM without a PMU (these development machines) every event
    is unavailable with the reason; where the PMU is exposed, cycles count and IPC follows."""
    command = perf_stat_command(
        DEFAULT_EVENTS,
        [sys.executable, "-c", "import numpy as np; a = np.ones((256, 256)); a @ a"],
        output_path=tmp_path / "perf.txt",
    )
    stat = run_perf_stat(command, timeout_s=120)
    assert not isinstance(stat, Unavailable), stat
    assert set(stat.counts) == set(DEFAULT_EVENTS)
    note = pmu_note()
    result = derive_cpu(stat, DEFAULT_EVENTS, line_bytes=llc_line_bytes(), note=note)
    if all(c.status != "counted" for c in stat.counts.values()):
        assert result.status == "unavailable"
        assert result.reason.startswith("perf: cycles, instructions, LLC-load-misses")
        assert "<not supported>" in result.reason or "<not counted>" in result.reason
        if note is not None:
            assert result.reason.endswith(f"({note})")
    else:
        assert stat.counts["cycles"].value > 0
        assert "ipc" in {d["name"] for d in result.derived}


# -- the child a profiler runs ---------------------------------------------------------------------


CHILD_CPU = [sys.executable, "-m", "rooflab.counters.gemm_child", "--backend", "cpu"]


def test_gemm_child_runs_one_config_inside_its_counters_range():
    from rooflab.backends.base import Backend

    if not hasattr(Backend, "nvtx_range"):
        pytest.skip("rooflab.backends.base.Backend.nvtx_range is not in this checkout yet")
    done = subprocess.run(
        [*CHILD_CPU, "--sweep", "t", "--dtype", "fp32", "--m", "8", "--n", "16", "--k", "32"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {
        "config_id": "t/fp32/nn/m8_n16_k32",
        "nvtx_range": "t:fp32:nn:m8_n16_k32:counters",
        "backend": "cpu",
    }
