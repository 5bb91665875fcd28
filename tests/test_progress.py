"""Progress of a measuring job (rooflab.progress): the ETA from planned work, the status line on a
terminal (a real pseudo-terminal here), and when the campaign shows it at all."""

import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time

import pytest

from rooflab import progress as progress_module
from rooflab.backends.selection import select_backend
from rooflab.experiments.ceiling_plan import (
    CeilingSettings,
    planned_blas_s,
    planned_point_s,
    planned_sweep_point_s,
    planned_work,
)
from rooflab.experiments.item_plans import (
    PRIOR_BYTES_PER_S,
    PRIOR_CALL_S,
    PRIOR_FLOP_PER_S,
    SAMPLE_OVERHEAD_S,
    CallTimes,
    planned_timing_s,
)
from rooflab.experiments.runs import MeasuringRun
from rooflab.experiments.timed_cases import Built, time_cases
from rooflab.experiments.timing import TimingSettings
from rooflab.progress import ENV, Eta, Progress, TerminalLine, duration
from rooflab.workflow import progress_on_terminal


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def clocked(name: str, **kwargs) -> tuple[Progress, FakeClock, io.StringIO]:
    """A job's progress on a fake clock, its log in memory and no terminal."""
    clock, log = FakeClock(), io.StringIO()
    return Progress(name, stream=log, terminal=None, clock=clock, **kwargs), clock, log


def test_durations_read_as_people_say_them():
    assert [duration(s) for s in (0.04, 0.4, 2.46, 9.96, 12, 59.6, 125, 3725)] == [
        "0.0 s",
        "0.4 s",
        "2.5 s",
        "10 s",
        "12 s",
        "1 min 00 s",
        "2 min 05 s",
        "1 h 02 min",
    ]


SMALL_WORKING_SET = 1 << 20  # every point's, in the plan below: its own cost is a millisecond


def test_a_sweep_point_is_planned_with_its_working_sets_own_cost():
    settings = CeilingSettings()
    small, large = (planned_sweep_point_s(settings, size) for size in (16 << 10, 4 << 30))
    assert small == pytest.approx(planned_point_s(settings), rel=0.01)
    assert large > 20 * small  # a 4 GB point: seconds to allocate, touch and pass over
    planned = planned_work(settings, [16 << 10, 4 << 30])
    assert planned[2 * len(settings.fma_dtypes) :][:2] == [small, large]


def _ceilings_on_a_new_machine() -> list[tuple[float, float]]:
    """The ceilings of a full sweep on a 2-core machine like the issue's (3 kernels x 57 working
    sets; two FMA rounds that agree), in the order the job runs them: (planned, actual) seconds of
    each item. The first call of each kernel compiles it (numba, about half a second to a
    second), the smallest working sets go faster than planned, the rest a little slower; the
    library GEMMs take 1.2x their plan (made from the prior GEMM rate)."""
    settings = CeilingSettings(adaptive=False)
    point, blas = planned_point_s(settings), planned_blas_s(settings)
    point_at = planned_sweep_point_s(settings, SMALL_WORKING_SET)
    items = []

    def fma_round(compile_s: float = 0.0) -> None:
        items.extend([(point, 1.1 * point + compile_s)] * len(settings.fma_dtypes))

    fma_round(compile_s=0.5)
    for kernel in settings.kernels:
        items.extend(
            (point_at, (0.8 if i < 10 else 1.1) * point_at + 0.8 * (i == 0)) for i in range(57)
        )
        if kernel == settings.kernels[0]:
            fma_round()
    items.extend([(blas, 1.2 * blas)] * len(settings.blas_dtypes))
    planned = planned_work(settings, [SMALL_WORKING_SET] * (3 * 57))
    assert sorted(p for p, _ in items) == sorted(planned)  # the plan the job makes
    return items


def test_the_eta_is_honest_from_the_first_estimate():
    items = _ceilings_on_a_new_machine()
    planned = [p for p, _ in items]
    actual = [a for _, a in items]
    progress, clock, log = clocked("ceilings")
    progress.plan(planned)
    total = sum(actual)
    first = progress.left()
    assert total / 1.25 < first < total * 1.25, (first, total)

    estimates = []  # (ETA, actual seconds left) at the start of each item
    for index, seconds in enumerate(actual):
        progress.start(f"item {index}", planned[index])
        estimates.append((progress.left(), sum(actual[index:])))
        clock.advance(seconds)
    progress.close()
    for eta, left in estimates:
        if left > 10:
            assert left / 1.5 < eta < left * 1.5, (eta, left)
    assert f"done: {len(items)} of {len(items)} in {duration(total)}" in log.getvalue()

    # What the old line said once the first sweep point was done: elapsed / (points done /
    # points) - elapsed, with the first FMA round's time in `elapsed` but not in the count.
    elapsed = sum(actual[:3])
    old = elapsed / (1 / (3 * 57)) - elapsed
    new, left = estimates[3]
    assert old > 5 * left  # the "630 s for a 2-minute job"
    assert left / 1.25 < new < left * 1.25


def test_a_gemm_sweep_is_planned_from_its_timing_budgets():
    timing = TimingSettings(warmup_s=0.1, min_time_s=0.3, cooldown_s=0.0, rounds=1)
    assert planned_timing_s(timing) == pytest.approx(0.4)
    progress, clock, _ = clocked("gemm weight_reuse")
    progress.plan([planned_timing_s(timing)] * 44)
    for index in range(7):
        progress.start(f"fp32/nn/m{2**index}_n1024_k1024 cold", 0.4)
        clock.advance(0.4)
    progress.update("3 samples")  # 37 items of 0.4 s and the rest of this one
    assert progress.line() == (
        "gemm weight_reuse: 7/44 fp32/nn/m64_n1024_k1024 cold: 3 samples, 15 s left"
    )


def test_a_timing_is_planned_from_its_calls_time_per_round():
    # two rounds: each has half the time floor and half the sample floor, at least
    # MIN_ROUND_SAMPLES (6) of them
    timing = TimingSettings(warmup_s=0.01, warmup_min_calls=2, min_time_s=0.02, min_samples=10)
    assert planned_timing_s(timing) == pytest.approx(0.01 + 0.01)  # short calls: the floors
    # a 64 ms call (the pointer chase of the issue): two warm-up calls, six samples
    assert planned_timing_s(timing, 0.064) == pytest.approx(2 * 0.064 + 6 * (0.064 + 5e-4))
    # a cold sample's eviction counts per sample
    with_eviction = planned_timing_s(timing, 0.064, evict_s=0.01)
    assert with_eviction - planned_timing_s(timing, 0.064) == pytest.approx(6 * 0.01)
    assert SAMPLE_OVERHEAD_S == 5e-4


def test_a_case_not_yet_timed_is_planned_at_the_rate_of_the_nearest_intensity():
    calls = CallTimes()
    # two timed cases of a sweep: a memory-bound one (intensity 1) and a compute-bound one (100)
    calls.built("low", 1e6, 1e6)
    calls.built("high", 1e9, 1e7)
    calls.built("next", 4e9, 5e7)  # intensity 80
    calls.built("stream", 1e6, 1e8)
    # nothing timed yet: its bound at the prior rates, memory's for a streaming case
    assert calls.call_s("next") == pytest.approx(4e9 / PRIOR_FLOP_PER_S)
    assert calls.call_s("stream") == pytest.approx(1e8 / PRIOR_BYTES_PER_S)
    assert calls.call_s("unbuilt") == PRIOR_CALL_S
    timing = TimingSettings()
    calls.timed("low", "warm", 1e-3, 0.1, 10, timing)  # 1 GFLOP/s
    calls.timed("high", "warm", 0.02, 0.5, 10, timing)  # 50 GFLOP/s
    assert calls.call_s("next") == pytest.approx(4e9 / 50e9)  # near "high", not "low"
    assert calls.call_s("high") == 0.02  # a timed case: its own call
    assert calls.call_s("unbuilt") == 0.02  # no work known: the last case timed


def test_a_cold_samples_eviction_is_learnt_per_byte_of_operands():
    calls = CallTimes()
    operands = (bytearray(4 << 20), bytearray(4 << 20))  # 8 MiB: anything with nbytes counts
    operands = tuple(memoryview(a) for a in operands)
    calls.built("a", 1e6, 1e6, operands)
    calls.built("b", 1e6, 1e6, operands[:1])
    timing = TimingSettings(rounds=1)
    warm = planned_timing_s(timing, 1e-3)
    # 10 cold samples took 80 ms more than the warm plan: 8 ms of eviction per 8 MiB sample
    calls.timed("a", "cold", 1e-3, warm + 0.08, 10, timing)
    assert calls.evict_s("a") == pytest.approx(8e-3)
    assert calls.evict_s("b") == pytest.approx(4e-3)  # half the operands, half the eviction
    assert calls.planned_s("b", "cold", timing) == pytest.approx(
        planned_timing_s(timing, calls.call_s("b"), 4e-3)
    )


def test_an_item_that_builds_its_case_plans_the_quickest_build_and_the_check_after_it():
    calls, timing = CallTimes(), TimingSettings(rounds=2)
    timed = planned_timing_s(timing, calls.call_s("a"))
    # nothing built yet: nothing known of builds or checks
    assert calls.planned_s("a", "warm", timing, built=True, recheck=True) == timed
    calls.built("a", 1e6, 1e6, (memoryview(bytearray(1 << 20)),))  # 1 MiB of operands
    calls.build_timed("a", 2.5)  # round 1: its inputs, its check and the kernel's compile
    assert calls.build_s("a") == 2.5  # nothing quicker known yet
    assert calls.build_s("b") == 2.5  # not built yet: the quickest build so far
    calls.built("b", 1e6, 1e6, (memoryview(bytearray(16 << 20)),))  # 16 MiB, compiled already
    calls.build_timed("b", 0.32)  # 20 ns per byte
    calls.recheck_timed("a", 0.2)
    # the compile was a one-off: a's next build at b's rate per byte of its operands
    assert calls.build_s("a") == pytest.approx(0.02)
    assert calls.build_s("b") == pytest.approx(0.32)
    timed = planned_timing_s(timing, calls.call_s("a"))
    assert calls.planned_s("a", "warm", timing, built=True, recheck=True) == pytest.approx(
        timed + 0.02 + 0.2
    )
    assert calls.planned_s("a", "cold", timing) == planned_timing_s(timing, calls.call_s("a"))


def test_a_workload_job_plans_its_builds_and_checks():
    """The first state's item begins before the case is built, so the build is in its time and
    in its plan: the done line's plan counts what the job did."""

    class Slow:
        """A case whose build takes 0.15 s and whose check 0.05 s (a large input, a reference)."""

        kind, recheck, what = "workload", True, "slow case"

        def __init__(self, name):
            self.config_id = self.label = name

        def work_hint(self):
            return None

        def build(self, backend):
            time.sleep(0.15)

            def check(when):
                time.sleep(0.05)
                return [{"config_id": self.config_id, "passed": True, "detail": when}]

            return Built(lambda: None, check, {"flops": 1, "bytes_model": 8})

    log = io.StringIO()
    progress = Progress("workload slow", stream=log, terminal=None)
    run = MeasuringRun(
        select_backend("cpu"), "workload", "slow", progress, "r", {
            "correctness": [], "samples": [], "timed_points": [], "conditions": []},
        None, None, False,
    )  # fmt: skip
    timing = TimingSettings(rounds=2, warmup_s=0.0, min_time_s=0.01, min_samples=3, max_samples=20)
    time_cases(run, [Slow("a"), Slow("b")], ["warm", "cold"], timing)
    progress.close()
    # 2 cases x 2 rounds: builds 0.6 s, checks (after each of 8 timings, and 2 before) 0.5 s
    assert progress.promised > 0.75, log.getvalue()
    # both cases built in round 1: their work known, the plan gave an ETA from then
    assert progress.sized and progress.first_estimate is not None


def test_a_plan_short_throughout_is_corrected_not_capped_as_a_one_off():
    # The sweep: 88 timings planned at 34 ms each that took 350 ms each. Only the
    # first overrun is taken as a one-off (a compile); the ones after it are the real rate.
    progress, clock, _ = clocked("gemm a")
    progress.plan([0.034] * 88)
    for index in range(44):
        progress.start(f"item {index}", 0.034)
        clock.advance(0.35)
    progress.start("item 44", 0.034)
    left = progress.left()
    assert 44 * 0.35 / 1.5 < left < 44 * 0.35 * 1.5, left


def test_the_last_line_says_the_final_plan_and_the_first_estimate():
    progress, clock, log = clocked("gemm a")
    progress.plan([1.0] * 4)
    for index in range(4):  # learnt once the first has begun: each item takes 3 s
        progress.start(f"item {index}", 1.0 if index == 0 else 3.0, 3.0 * (3 - index))
        clock.advance(3.0)
    progress.close()
    # the items' plans as each began: 1 s, then 3 s each at the ETA's rate (3 s per planned s
    # after the first item, moving back towards 1 as the plan proves right)
    promised = progress.promised
    assert 10.0 < promised < 20.0
    # the first line said 1 + 9 s: the first item's plan and the rest as learnt by then
    assert log.getvalue().splitlines()[-1] == (
        f"[gemm a] done: 4 of 4 in 12 s (planned {duration(promised)}; first estimate 10 s)"
    )


def test_work_of_unknown_cost_has_no_eta_until_two_items_are_done():
    eta = Eta(10.0, seconds_per_unit=None)
    assert eta.left() is None
    eta.finished(1.0, 2.0)  # the first item: a library loaded, a kernel compiled
    assert eta.left() is None
    eta.finished(1.0, 0.5)
    assert eta.left() == pytest.approx(8 * 0.5)  # at the rate of the items after the first
    progress, _, _ = clocked("counters a")
    progress.plan([1.0] * 4, seconds_per_unit=None)
    progress.start("fp64/nn/m1_n16_k16 perf stat")
    assert progress.line() == "counters a: 1/4 fp64/nn/m1_n16_k16 perf stat"


def test_the_log_gets_a_line_every_few_seconds():
    progress, clock, log = clocked("gemm a", every_s=3.0)
    progress.plan([1.0] * 10)
    for index in range(10):
        progress.start(f"c{index}", 1.0)
        progress.update("1 sample")
        clock.advance(1.0)
    progress.close()
    lines = log.getvalue().splitlines()
    assert lines[0] == "[gemm a] 1/10 c0 (0.0 s in, 10 s left)"
    assert [line.split()[3] for line in lines[:-1]] == ["c0", "c3", "c6", "c9"]
    assert lines[-1] == "[gemm a] done: 10 of 10 in 10 s (planned 10 s; first estimate 10 s)"


def _read_all(fd: int, wait_s: float = 0.2) -> bytes:
    out = b""
    while select.select([fd], [], [], wait_s)[0]:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        out += chunk
    return out


def test_the_terminal_line_is_rewritten_in_place_and_throttled():
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 40, 0, 0))
    clock = FakeClock()
    with os.fdopen(terminal, "w") as stream:
        line = TerminalLine(stream, every_s=0.25, clock=clock)
        assert line.show("gemm a: 1/4 warm")
        assert not line.show("gemm a: 1/4 warm: 2 samples")  # within a quarter second
        clock.advance(0.3)
        assert line.show("gemm a: 2/4 cold, " + "x" * 60)  # wider than the terminal: cut
        line.end("gemm a: done")
        waits = TerminalLine(stream, every_s=0.25, clock=clock, delay_s=2.0)
        assert not waits.show("the first line of a job")  # Snakemake's line comes first
        clock.advance(1.9)
        assert not waits.show("the first line of a job")
        clock.advance(0.1)
        assert waits.show("the first line of a job")
        written = _read_all(controller).decode()
    os.close(controller)
    expected = (
        "\rgemm a: 1/4 warm\x1b[K"
        "\rgemm a: 2/4 cold, " + "x" * 20 + "…\x1b[K"
        "\rgemm a: done\x1b[K\r\n"  # the terminal turns the last \n into \r\n
        "\rthe first line of a job\x1b[K"
    )
    assert written == expected


CHILD = textwrap.dedent(
    """
    import sys, time
    from rooflab.progress import Progress
    sys.stderr = open(sys.argv[1], "a", buffering=1)  # as rooflab.workflow.log_to does
    with Progress("gemm a") as progress:
        progress.plan([0.3] * 10)
        for index in range(10):
            progress.start(f"m{index}", 0.3)
            time.sleep(0.3)
    """
)


@pytest.mark.slow  # a real measuring job in a pseudo-terminal session
@pytest.mark.parametrize("mode", ["tty", "off"])
def test_a_job_writes_its_status_line_to_its_controlling_terminal_only_when_asked(tmp_path, mode):
    """A job of the campaign, its stderr in its log, in a session whose controlling terminal is a
    pseudo-terminal: the status line reaches the terminal through /dev/tty when the Snakefile
    said `tty`, and nothing does otherwise; the log gets its lines either way."""
    log = tmp_path / "job.log"
    controller, terminal = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(log)],
        stdin=terminal,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a session of its own: the pty becomes its terminal
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        env={**os.environ, ENV: mode},
    )
    os.close(terminal)
    written = b""
    while child.poll() is None:
        written += _read_all(controller, 0.1)
    written += _read_all(controller, 0.1)
    os.close(controller)
    assert child.returncode == 0
    shown = written.decode()
    if mode == "tty":
        # the first line after Snakemake's `Select jobs to execute...`, two seconds in
        assert re.match(r"\rgemm a: ([7-9]|10)/10 m\d(, \d\.\d s left)?\x1b\[K\r", shown), shown
        assert "a: 1/10 " not in shown and "\rgemm a: 10/10 m9\x1b[K" in shown
        assert re.search(r"\rgemm a: done, 10 of 10 in \d\.\d s\x1b\[K\r\n$", shown)
    else:
        assert shown == ""
    logged = log.read_text()
    assert logged.startswith("[gemm a] 1/10 m0 (0.0 s in, 3.0 s left)\n")
    done = r"^\[gemm a\] done: 10 of 10 in \d\.\d s \(planned 3\.0 s; first estimate 3\.0 s\)$"
    assert re.search(done, logged, re.M)


def test_no_terminal_no_status_line(monkeypatch):
    monkeypatch.setenv(ENV, "tty")

    def no_terminal(*args, **kwargs):
        raise OSError(6, "No such device or address: '/dev/tty'")  # no controlling terminal

    monkeypatch.setattr(progress_module, "open", no_terminal, raising=False)
    assert TerminalLine.open() is None
    monkeypatch.undo()
    monkeypatch.delenv(ENV, raising=False)
    assert TerminalLine.open() is None  # not asked (rooflab measure, a cluster node)


class Stream:
    def __init__(self, tty: bool):
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    ("stdout", "stderr", "quiet", "shown"),
    [
        (True, True, None, True),
        (True, True, {"host"}, True),  # --quiet host hides the host name only
        (True, True, {"progress", "rules"}, False),  # plain --quiet
        (True, True, {"all"}, False),
        (True, False, None, False),  # 2> file, CI
        (False, True, None, False),  # snakemake ... > file
    ],
)
def test_the_campaign_shows_progress_only_where_it_is_interactive(
    monkeypatch, stdout, stderr, quiet, shown
):
    monkeypatch.delenv(ENV, raising=False)
    assert progress_on_terminal(quiet, (Stream(stdout), Stream(stderr))) is shown
    assert os.environ[ENV] == ("tty" if shown else "off")


def test_the_switch_tested_above_is_off_again_for_the_rest_of_the_suite():
    """Issue 44: the tests above set the switch the way the Snakefile does; each restores the
    suite's "off", so no later `rooflab measure` draws its status line into pytest's output."""
    assert os.environ[ENV] == "off"


def test_snakemakes_quietness_values_are_understood(monkeypatch):
    from snakemake.settings.enums import Quietness

    monkeypatch.delenv(ENV, raising=False)
    both = (Stream(True), Stream(True))
    assert not progress_on_terminal({Quietness.PROGRESS, Quietness.RULES}, both)
    assert progress_on_terminal({Quietness.HOST}, both)


def test_a_terminal_that_goes_away_does_not_stop_the_measurement():
    controller, terminal = pty.openpty()
    stream = os.fdopen(terminal, "w")
    line = TerminalLine(stream, every_s=0.0, owned=True)
    assert line.show("ceilings: 1/186 fma fp64 round 0")
    os.close(controller)  # the window is closed: writes fail with EIO
    line.show("ceilings: 2/186 fma fp32 round 0")
    line.show("ceilings: 3/186 read 16.4 kB")
    line.end("ceilings: done")  # no error, and the stream is let go
    assert line.gone and stream.closed


def test_a_failed_job_clears_its_line():
    controller, terminal = pty.openpty()
    clock = FakeClock()
    with os.fdopen(terminal, "w") as stream:
        line = TerminalLine(stream, every_s=0.25, clock=clock)
        with pytest.raises(RuntimeError), Progress("gemm a", terminal=line, clock=clock) as p:
            p.plan([0.4] * 2)
            p.start("fp64/nn/m1_n16_k16 warm", 0.4)
            raise RuntimeError("out of memory")
        written = _read_all(controller).decode()
    os.close(controller)
    assert written == "\rgemm a: 1/2 fp64/nn/m1_n16_k16 warm, 0.8 s left\x1b[K\r\x1b[K"


def test_a_guessed_plan_shows_no_eta_until_every_case_is_sized():
    # a workload of a small case then one 16 times larger: the small one's time is no plan for
    # the large one, whose work is known once it is built
    progress, clock, _ = clocked("workload relu")
    progress.plan([0.001] * 4, guessed=True)
    progress.start("n1M warm", 0.001)
    clock.advance(0.1)
    progress.start("n1M cold", 0.1, 0.3)
    assert progress.left() is None  # an item done, but the large case not built yet
    clock.advance(0.1)
    progress.sized_all()  # the large case built: its work known
    progress.start("n16M warm", 1.6, 1.6)
    assert progress.left() is not None and progress.left() > 1.6


def test_cases_of_unknown_work_promise_nothing_until_one_is_timed():
    # a user's kernels: their work is known only once built, so the plan is of unknown cost
    progress, clock, log = clocked("workload chase")
    progress.plan([0.001] * 4, guessed=True)
    progress.start("case 0 warm", 0.001)
    assert progress.line() == "workload chase: 1/4 case 0 warm"  # no ETA: nothing timed yet
    progress.sized_all()  # its one case built: every item's work is known
    clock.advance(3.0)  # the first took longer: it compiled the kernel
    for index in range(1, 4):  # then its call was timed: each planned at 2 s
        progress.start(f"case {index} warm", 2.0, 2.0 * (3 - index))
        clock.advance(2.0)
    progress.close()
    # the first ETA came with the second item: 3 s in, 6 s left
    assert log.getvalue().splitlines()[-1] == (
        "[workload chase] done: 4 of 4 in 9.0 s (planned 9.0 s; first estimate 9.0 s)"
    )
