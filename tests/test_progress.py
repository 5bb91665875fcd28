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

import pytest

from rooflab import progress as progress_module
from rooflab.experiments.ceiling_plan import (
    CeilingSettings,
    planned_blas_s,
    planned_point_s,
    planned_sweep_point_s,
    planned_work,
)
from rooflab.experiments.timed_cases import planned_timing_s
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


def test_durations_read_as_people_say_them():
    assert [duration(s) for s in (0.4, 12, 59.6, 125, 3725)] == [
        "0 s",
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
    library GEMMs take 1.5x their budget."""
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
    items.extend([(blas, 1.5 * blas)] * len(settings.blas_dtypes))
    planned = planned_work(settings, [SMALL_WORKING_SET] * (3 * 57))
    assert sorted(p for p, _ in items) == sorted(planned)  # the plan the job makes
    return items


def test_the_eta_is_honest_from_the_first_estimate():
    items = _ceilings_on_a_new_machine()
    planned = [p for p, _ in items]
    actual = [a for _, a in items]
    clock = FakeClock()
    log = io.StringIO()
    progress = Progress("ceilings", stream=log, terminal=None, clock=clock)
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
    timing = TimingSettings(warmup_s=0.1, min_time_s=0.3, cooldown_s=0.0)
    assert planned_timing_s(timing) == pytest.approx(0.4)
    clock = FakeClock()
    progress = Progress("gemm weight_reuse", stream=io.StringIO(), terminal=None, clock=clock)
    progress.plan([planned_timing_s(timing)] * 44)
    for index in range(7):
        progress.start(f"fp32/nn/m{2**index}_n1024_k1024 cold", 0.4)
        clock.advance(0.4)
    progress.update("3 samples")  # 37 items of 0.4 s and the rest of this one
    assert progress.line() == (
        "gemm weight_reuse: 7/44 fp32/nn/m64_n1024_k1024 cold: 3 samples, 15 s left"
    )


def test_work_of_unknown_cost_has_no_eta_until_an_item_is_done():
    eta = Eta(10.0, seconds_per_unit=None)
    assert eta.left() is None
    eta.finished(1.0, 2.0)
    assert eta.left() == pytest.approx(18.0)
    clock = FakeClock()
    progress = Progress("counters a", stream=io.StringIO(), terminal=None, clock=clock)
    progress.plan([1.0] * 4, seconds_per_unit=None)
    progress.start("fp64/nn/m1_n16_k16 perf stat")
    assert progress.line() == "counters a: 1/4 fp64/nn/m1_n16_k16 perf stat"


def test_the_log_gets_a_line_every_few_seconds():
    clock = FakeClock()
    log = io.StringIO()
    progress = Progress("gemm a", every_s=3.0, stream=log, terminal=None, clock=clock)
    progress.plan([1.0] * 10)
    for index in range(10):
        progress.start(f"c{index}", 1.0)
        progress.update("1 sample")
        clock.advance(1.0)
    progress.close()
    lines = log.getvalue().splitlines()
    assert lines[0] == "[gemm a] 1/10 c0 (0 s in, 10 s left)"
    assert [line.split()[3] for line in lines[:-1]] == ["c0", "c3", "c6", "c9"]
    assert lines[-1] == "[gemm a] done: 10 of 10 in 10 s (planned 10 s)"


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
    assert (
        written
        == (
            "\rgemm a: 1/4 warm\x1b[K"
            "\rgemm a: 2/4 cold, " + "x" * 20 + "…\x1b[K"
            "\rgemm a: done\x1b[K\r\n"  # the terminal turns the last \n into \r\n
            "\rthe first line of a job\x1b[K"
        )
    )


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
        assert re.match(r"\rgemm a: ([7-9]|10)/10 m\d(, \d s left)?\x1b\[K\r", shown), shown
        assert "a: 1/10 " not in shown and "\rgemm a: 10/10 m9\x1b[K" in shown
        assert re.search(r"\rgemm a: done, 10 of 10 in \d s\x1b\[K\r\n$", shown)
    else:
        assert shown == ""
    logged = log.read_text()
    assert logged.startswith("[gemm a] 1/10 m0 (0 s in, 3 s left)\n")
    assert re.search(r"^\[gemm a\] done: 10 of 10 in \d s \(planned 3 s\)$", logged, re.M)


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
    assert written == "\rgemm a: 1/2 fp64/nn/m1_n16_k16 warm, 1 s left\x1b[K\r\x1b[K"
