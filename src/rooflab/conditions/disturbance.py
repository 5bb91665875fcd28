"""What the rest of the machine took from a measurement, as data (docs/disturbance.md).

A sample is only as good as the CPU time its threads got. On a shared machine another process can
hold a core while one of the measuring threads waits for it: a two-thread GEMM then waits a whole
scheduler slice, every call, so its samples are steadily wrong (30 ms for a 0.7 ms GEMM) with a
small spread that no noise rule sees. The kernel counts that wait exactly, per thread:

- run-queue wait: `/proc/self/task/<tid>/schedstat`, second field, ns a runnable thread of this
  process waited for a CPU. Read before and after every timed sample (outside the timed call);
- CPU time of the process (CLOCK_PROCESS_CPUTIME_ID) and its involuntary context switches
  (getrusage), beside the wall time;
- over a whole sampling phase: the CPU time every other process used (`/proc/stat`'s busy ticks
  minus this process's CPU time; ticks are 10 ms, so only a phase, not a sample, is long enough)
  and the time the hypervisor stole (`/proc/stat` steal).

A sample is `disturbed` when its threads waited for a CPU longer than `max_wait_fraction` of its
wall time. A measurement (GEMM point, sweep point, ceiling) is disturbed when it could not collect
its clean samples within the retake bound, when other processes used more than `max_other_cpus`
CPUs on average while it sampled (they compete for caches and memory even from another core), when
the hypervisor stole more than `max_steal_fraction` of the CPUs' time, or (GPU) when another
process used the device. Every reading is read only: nothing here changes the machine.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rooflab.config import defaults

PROC_TASKS = Path("/proc/self/task")
PROC_STAT = Path("/proc/stat")
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

_DEFAULT = defaults("disturbance")  # config/schema.yaml: each setting's meaning and default


@dataclass(frozen=True)
class DisturbanceSettings:
    max_wait_fraction: float = _DEFAULT["max_wait_fraction"]  # a sample's run-queue wait
    retake_factor: float = _DEFAULT["retake_factor"]  # disturbed samples re-taken, bounded
    max_other_cpus: float = _DEFAULT["max_other_cpus"]  # other processes, while sampling
    max_steal_fraction: float = _DEFAULT["max_steal_fraction"]  # the hypervisor's steal
    quiet_wait_s: float = _DEFAULT["quiet_wait_s"]  # wait this long for quiet before measuring
    quiet_max_other_cpus: float = _DEFAULT["quiet_max_other_cpus"]
    quiet_window_s: float = _DEFAULT["quiet_window_s"]  # each look at the machine's CPUs

    @classmethod
    def from_config(cls, section: dict) -> DisturbanceSettings:
        return cls(**section)


@dataclass(frozen=True)
class Snapshot:
    """Counters of this process (and the machine) at one instant."""

    wait_ns_by_tid: dict[int, int]
    cpu_ns: int
    involuntary_switches: int
    busy_ticks: int | None  # all CPUs, user + nice + system + irq + softirq
    steal_ticks: int | None
    monotonic_s: float


@dataclass(frozen=True)
class SampleDisturbance:
    """What the machine took from one timed sample (or ceiling window)."""

    wait_s: float | None  # run-queue wait of this process's threads; None where unreadable
    cpu_s: float  # CPU time of this process
    involuntary_switches: int
    disturbed: bool


@dataclass(frozen=True)
class PhaseDisturbance:
    """What other processes and the hypervisor used over a whole sampling phase."""

    seconds: float
    other_cpus: float | None  # mean CPUs used by other processes; None where /proc/stat is absent
    steal_fraction: float | None  # stolen share of all CPUs' time


class DisturbanceProbe:
    """Reads the counters above for this process; one per process (`probe()`)."""

    def __init__(self, tasks: Path = PROC_TASKS, stat: Path = PROC_STAT):
        self.tasks, self.stat = tasks, stat
        self._fds: dict[int, int] = {}
        self._excluded: set[int] = set()
        self._lock = threading.Lock()
        self.unavailable: str | None = None
        if not tasks.is_dir() or not any(tasks.glob("*/schedstat")):
            self.unavailable = f"no {tasks}/<tid>/schedstat (not Linux, or no CONFIG_SCHED_INFO)"
        self.cpus = os.cpu_count() or 1

    def exclude_current_thread(self) -> None:
        """Leave the calling thread out of the wait (a background reader, not a measuring
        thread: its wake-ups are not the measurement's)."""
        with self._lock:
            self._excluded.add(threading.get_native_id())

    def include_current_thread(self) -> None:
        with self._lock:
            self._excluded.discard(threading.get_native_id())

    def _wait_ns_by_tid(self) -> dict[int, int]:
        if self.unavailable:
            return {}
        waits: dict[int, int] = {}
        try:
            tids = [int(name) for name in os.listdir(self.tasks)]
        except OSError:
            return waits
        with self._lock:
            excluded = set(self._excluded)
            for tid in tids:
                if tid in excluded:
                    continue
                try:
                    fd = self._fds.get(tid)
                    if fd is None:
                        fd = self._fds[tid] = os.open(self.tasks / str(tid) / "schedstat", 0)
                    waits[tid] = int(os.pread(fd, 128, 0).split()[1])
                except (OSError, IndexError, ValueError):  # the thread ended meanwhile
                    self._forget(tid)
            for tid in set(self._fds) - set(tids):
                self._forget(tid)
        return waits

    def _forget(self, tid: int) -> None:
        fd = self._fds.pop(tid, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _machine_ticks(self) -> tuple[int | None, int | None]:
        try:
            with open(self.stat, "rb") as stat:
                fields = stat.readline().split()
        except OSError:
            return None, None
        if len(fields) < 9 or fields[0] != b"cpu":
            return None, None
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
        return user + nice + system + irq + softirq, steal

    def snapshot(self, machine: bool = False) -> Snapshot:
        """This process's counters; the machine's /proc/stat ticks too when `machine`."""
        busy, steal = self._machine_ticks() if machine else (None, None)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return Snapshot(
            wait_ns_by_tid=self._wait_ns_by_tid(),
            cpu_ns=time.process_time_ns(),
            involuntary_switches=usage.ru_nivcsw,
            busy_ticks=busy,
            steal_ticks=steal,
            monotonic_s=time.monotonic(),
        )

    def sample(
        self,
        before: Snapshot,
        after: Snapshot,
        seconds: float,
        settings: DisturbanceSettings,
        judge_wait: bool = True,
    ) -> SampleDisturbance:
        """One sample's disturbance; `judge_wait` False records the wait without judging it
        (where host delays cannot enter the timed interval: a held GPU stream)."""
        wait_s = None
        if not self.unavailable:
            wait_ns = sum(
                max(0, ns - before.wait_ns_by_tid.get(tid, 0))
                for tid, ns in after.wait_ns_by_tid.items()
            )
            wait_s = wait_ns * 1e-9
        disturbed = bool(
            judge_wait and wait_s is not None and wait_s > settings.max_wait_fraction * seconds
        )
        return SampleDisturbance(
            wait_s=wait_s,
            cpu_s=(after.cpu_ns - before.cpu_ns) * 1e-9,
            involuntary_switches=after.involuntary_switches - before.involuntary_switches,
            disturbed=disturbed,
        )

    def phase(self, before: Snapshot, after: Snapshot) -> PhaseDisturbance:
        seconds = max(after.monotonic_s - before.monotonic_s, 1e-9)
        if before.busy_ticks is None or after.busy_ticks is None:
            return PhaseDisturbance(seconds, None, None)
        busy_s = (after.busy_ticks - before.busy_ticks) / CLOCK_TICKS_PER_S
        ours_s = (after.cpu_ns - before.cpu_ns) * 1e-9
        steal_s = (after.steal_ticks - before.steal_ticks) / CLOCK_TICKS_PER_S
        return PhaseDisturbance(
            seconds=seconds,
            other_cpus=max(0.0, busy_s - ours_s) / seconds,
            steal_fraction=max(0.0, steal_s) / (seconds * self.cpus),
        )

    @contextlib.contextmanager
    def measuring_phase(self) -> Iterator[list[PhaseDisturbance]]:
        """Yields a list that holds the phase's PhaseDisturbance once the block ends."""
        result: list[PhaseDisturbance] = []
        before = self.snapshot(machine=True)
        try:
            yield result
        finally:
            result.append(self.phase(before, self.snapshot(machine=True)))


_PROBE: DisturbanceProbe | None = None


def probe() -> DisturbanceProbe:
    global _PROBE
    if _PROBE is None:
        _PROBE = DisturbanceProbe()
    return _PROBE


@dataclass
class Verdict:
    """A measurement's verdict: `disturbed`, and why (None when clean)."""

    n_disturbed: int = 0
    other_cpus: float | None = None
    steal_fraction: float | None = None
    gpu_other_processes: int | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def disturbed(self) -> bool:
        return bool(self.reasons)

    @property
    def disturbance(self) -> str | None:
        return "; ".join(self.reasons) or None

    def columns(self) -> dict:
        """The columns every measurement row carries (timed_points, ceilings, ceiling_sweep)."""
        columns = ("disturbed", "disturbance", "n_disturbed", "other_cpus", "steal_fraction")
        columns += ("gpu_other_processes",)
        return {name: getattr(self, name) for name in columns}


def judge(
    samples: list,
    phases: list[PhaseDisturbance],
    settings: DisturbanceSettings,
    *,
    min_clean: int,
    what: str = "samples",
    judge_host: bool = True,
) -> Verdict:
    """The verdict on a measurement from its samples (each with `.disturbed`, `.wait_s`,
    `.seconds`) and its sampling phases. `judge_host` False: other processes' CPU use and the
    hypervisor's steal are recorded but not judged (a GPU's events time the device). Other users
    of a GPU are added from the condition readings by add_gpu_processes."""
    disturbed = [s for s in samples if s.disturbed]
    clean = len(samples) - len(disturbed)
    verdict = Verdict(n_disturbed=len(disturbed))
    if disturbed and clean < min_clean:
        worst = max(disturbed, key=lambda s: s.wait_s / s.seconds if s.seconds > 0 else 0)
        verdict.reasons.append(
            f"{len(disturbed)} of {len(samples)} {what} disturbed, {clean} clean of the "
            f"{min_clean} needed: threads waited for a CPU up to {worst.wait_s * 1e3:.3g} ms "
            f"({worst.wait_s / worst.seconds:.0%} of a {worst.seconds * 1e3:.3g} ms sample)"
        )
    spans = [p for p in phases if p.seconds > 0]
    total_s = sum(p.seconds for p in spans)
    if spans and all(p.other_cpus is not None for p in spans):
        verdict.other_cpus = sum(p.other_cpus * p.seconds for p in spans) / total_s
        verdict.steal_fraction = sum(p.steal_fraction * p.seconds for p in spans) / total_s
        # /proc/stat counts busy time in clock ticks, a tick per CPU either way at each end of a
        # phase: a phase of tens of ms reads a few tenths of a CPU where nothing else ran.
        resolution = len(spans) * probe().cpus / (CLOCK_TICKS_PER_S * total_s)
        if judge_host and verdict.other_cpus - resolution > settings.max_other_cpus:
            verdict.reasons.append(
                f"other processes used {verdict.other_cpus:.2f} CPUs while it sampled "
                f"(limit {settings.max_other_cpus:g})"
            )
        if judge_host and verdict.steal_fraction > settings.max_steal_fraction:
            verdict.reasons.append(
                f"the hypervisor stole {verdict.steal_fraction:.1%} of the CPUs' time "
                f"(limit {settings.max_steal_fraction:.1%})"
            )
    return verdict


def add_gpu_processes(verdict: Verdict, readings: list[dict]) -> Verdict:
    """Other processes on the GPU, the most any of the measurement's condition readings saw (none
    read on a CPU): a measurement that shared the device is disturbed."""
    counts = [
        r["gpu_other_processes"] for r in readings if r.get("gpu_other_processes") is not None
    ]
    if not counts:
        return verdict
    count = max(counts)
    verdict.gpu_other_processes = count
    if count:
        verdict.reasons.append(f"{count} other process(es) used the GPU while it sampled")
    return verdict


@dataclass(frozen=True)
class QuietCheck:
    """What the machine was doing before a run measured: recorded in the `runs` row."""

    other_cpus: float | None  # at the last check
    waited_s: float
    warning: str | None  # set when the machine stayed busy past the wait

    def columns(self) -> dict:
        return {
            "busy_other_cpus": self.other_cpus,
            "quiet_waited_s": self.waited_s,
            "busy_warning": self.warning,
        }


def other_cpus_now(window_s: float, the_probe: DisturbanceProbe | None = None):
    """CPUs other processes used over the next `window_s` (this process sleeps meanwhile)."""
    the_probe = the_probe or probe()
    before = the_probe.snapshot(machine=True)
    time.sleep(window_s)
    return the_probe.phase(before, the_probe.snapshot(machine=True)).other_cpus


def wait_for_quiet(
    settings: DisturbanceSettings,
    *,
    cpus_needed: int,
    label: str,
    gpu_other_processes=None,
    stream=None,
) -> QuietCheck:
    """Wait, up to settings.quiet_wait_s, until other processes leave the CPUs this measurement
    needs (`cpus_needed` of the machine's) and, with `gpu_other_processes` (a callable), the GPU.
    Then go on either way; the warning says what was still busy (pyperf's stance on load)."""
    stream = stream or sys.stderr
    the_probe = probe()
    allowed = settings.quiet_max_other_cpus + max(0, the_probe.cpus - cpus_needed)
    started = time.monotonic()
    announced = False
    while True:
        other = other_cpus_now(settings.quiet_window_s, the_probe)
        gpu_others = gpu_other_processes() if gpu_other_processes else 0
        busy = []
        if other is not None and other > allowed:
            busy.append(f"other processes used {other:.2f} CPUs (this run needs {cpus_needed})")
        if gpu_others:
            busy.append(f"{gpu_others} other process(es) used the GPU")
        waited = time.monotonic() - started
        if not busy:
            return QuietCheck(other, round(waited, 3), None)
        if waited >= settings.quiet_wait_s:
            warning = (
                f"busy machine: {'; '.join(busy)} after waiting {waited:.0f} s for quiet; "
                "measured anyway, and disturbed samples are flagged"
            )
            print(f"[{label}] warning: {warning}", file=stream, flush=True)
            return QuietCheck(other, round(waited, 3), warning)
        if not announced:
            print(
                f"[{label}] waiting up to {settings.quiet_wait_s:g} s for quiet: {'; '.join(busy)}",
                file=stream,
                flush=True,
            )
            announced = True


def wait_until_idle(max_s: float = 1.0, window_s: float = 0.02, max_busy: float = 0.05) -> float:
    """Wait until this process's own threads stop using CPU, so that one thread pool is active
    at a time: OpenBLAS's workers spin about 0.1 s after a GEMM, OpenMP's a few ms after a
    numba kernel, and either would take a core from the next pool's threads. Returns the seconds
    waited (at most max_s)."""
    started = time.monotonic()
    while True:
        cpu_before = time.process_time()
        time.sleep(window_s)
        busy = (time.process_time() - cpu_before) / window_s
        waited = time.monotonic() - started
        if busy <= max_busy or waited >= max_s:
            return waited
