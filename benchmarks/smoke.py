"""`--smoke`, which every benchmark takes: its smallest run that still goes through all of its
code (sizes, rounds and windows cut down), so that `.ci/run` runs every benchmark and none breaks
unseen. A smoke run prints its figures as usual; they are not the benchmark's, so its targets are
not judged: it exits 0 unless it fails. Also the timing several benchmarks share."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable


def add_smoke(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the smallest run through all of the benchmark's code (.ci/run); targets not judged",
    )


def verdict(ok: bool, smoke: bool) -> int:
    """Print whether the targets were met; the exit status (1: missed, in a real run only)."""
    if ok:
        print("targets met")
    elif smoke:
        print("targets not judged (--smoke: not the benchmark's sizes)")
    else:
        print("target MISSED")
    return 0 if ok or smoke else 1


def seconds(work: Callable, *args, **kwargs) -> tuple[float, object]:
    """The wall seconds of one call `work(*args, **kwargs)`, and what it returned."""
    started = time.perf_counter()
    result = work(*args, **kwargs)
    return time.perf_counter() - started, result


def best_of(rounds: int, work: Callable[[], object]) -> float:
    """The fewest wall seconds of `rounds` calls of `work`."""
    return min(seconds(work)[0] for _ in range(rounds))
