"""rooflab.counters.ncu (issue 7): the ncu command line, ncu missing or refused, metric
availability per chip, the raw CSV and the bytes and FLOPs summed from it, against recorded
tool output only (tests/fixtures/ncu) and our own rows."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rooflab.backends.base import nvtx_name
from rooflab.counters import (
    KernelMetric,
    Unavailable,
    bytes_by_level,
    calibrate,
    counter_rows,
    counters_range,
    flops_from_counters,
    missing_metrics,
    ncu_command,
    ncu_problem,
    ncu_version,
    nvtx_push_pop_filter,
    parse_ncu_csv,
    parse_query_metrics,
    plan_collection,
    query_available_metrics,
    run_ncu,
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
from rooflab.counters.tool import ToolRun
from tests.counters_fixtures import CONFIG, NCU_FIXTURES, OWED, read


def option(argv, name):
    """The value after `name` in argv (the flag must appear exactly once)."""
    assert list(argv).count(name) == 1, f"{name} appears {list(argv).count(name)} times"
    return argv[list(argv).index(name) + 1]


# -- ncu: the command line -------------------------------------------------------------------------

CHILD = [sys.executable, "-m", "rooflab.experiments.profiled", "--case", '{"kind": "gemm"}']


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


def run_scripted_ncu(
    tmp_path: Path, log_text: str, stderr: str = "", code: int = 0
) -> NcuResult | Unavailable:
    """run_ncu's outcome under a stand-in for ncu's profile that writes `log_text` to its
    --log-file, `stderr` to its stderr and exits with `code`."""
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
    command = ncu_command(
        CHILD,
        nvtx_range="r",
        metrics=[DRAM_READ],
        cache_control="all",
        ncu=str(script),
        log_file=tmp_path / "profile.csv",
    )
    return run_ncu(command, timeout_s=60)


def test_csv_not_understood_is_unavailable_not_a_crash(tmp_path):
    text = read(NCU_FIXTURES / "import_sample" / "sobelDouble.raw.csv")
    broken = text + text.splitlines()[-1].rsplit(",", 1)[0] + "\n"  # a row cut short
    with pytest.raises(CounterParseError):
        parse_ncu_csv(broken)
    result = run_scripted_ncu(tmp_path, broken)
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
    assert run_scripted_ncu(tmp_path, log, stderr=failed.stderr, code=1) == problem


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
