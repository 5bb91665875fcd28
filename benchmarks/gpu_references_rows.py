"""The pure part of benchmarks/gpu_ceilings_vs_references.py: what a comparison is, the rounds
that alternate its two sides, its row (ratio, target, missed or skipped), the printed line and the
JSON document, written atomically. No CuPy, PyTorch or GPU is needed here: the measuring is
given in (`measure`, each comparison's `prepare`), so all of this is tested with constructed
values (tests/test_gpu_references_script.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rooflab.backends.base import BackendError

TARGET = 0.98  # rooflab >= 98 % of its reference, for the ceilings rooflab claims
REASON_CHARS = 300  # a skipped row's reason: its first line, at most this long


class Unavailable(Exception):
    """A side of a comparison cannot run here (a peer missing, a check failed): its row is
    skipped with this reason, and the run goes on."""


@dataclass(frozen=True)
class Side:
    """One side of a comparison: `time_call(call)` gives the seconds of one timed call, and each
    call does `amount` units (B, FLOP or OP; a batch of calls counts them all)."""

    label: str
    time_call: Callable[[Callable[[], object]], float]
    call: Callable[[], object]
    amount: float


@dataclass(frozen=True)
class Prepared:
    """A comparison ready to time: rooflab's sides (its value in a round is the best of them,
    as its ceilings take the faster method) and the reference."""

    ours: tuple[Side, ...]
    reference: Side


@dataclass(frozen=True)
class Comparison:
    """What one row compares. `prepare` makes the operands and checks them (raising Unavailable,
    or any error, makes the row skipped); it runs only where PyTorch is usable if `needs_torch`."""

    name: str
    unit: str  # B/s, FLOP/s, OP/s
    reference: str  # the reference's name, as printed
    target: float | None  # None: informational, no target
    prepare: Callable[[], Prepared]
    needs_torch: bool = False
    note: str = ""


@dataclass(frozen=True)
class Row:
    """One comparison's result: both values (the best round of each), or why it was skipped."""

    name: str
    unit: str
    reference: str
    target: float | None
    rooflab: float | None = None
    reference_value: float | None = None
    rooflab_method: str = ""  # which of rooflab's sides gave its value
    reference_method: str = ""  # what the reference side ran, where it says more than its name
    skipped: str | None = None
    note: str = ""
    rounds: list[dict] = field(default_factory=list)  # each round's rates, as measured

    def __post_init__(self) -> None:
        if self.skipped is None:
            for what, value in (("rooflab", self.rooflab), ("reference", self.reference_value)):
                if value is None or not math.isfinite(value) or value <= 0:
                    raise ValueError(f"{self.name}: the {what} rate must be > 0, got {value}")

    @property
    def ratio(self) -> float | None:
        return None if self.skipped is not None else self.rooflab / self.reference_value

    @property
    def missed(self) -> bool | None:
        """Whether rooflab is under its target; None where there is no target or no ratio."""
        ratio = self.ratio
        if ratio is None or self.target is None:
            return None
        return ratio < self.target

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "unit": self.unit,
            "rooflab": self.rooflab,
            "rooflab_method": self.rooflab_method or None,
            "reference": self.reference,
            "reference_method": self.reference_method or None,
            "reference_value": self.reference_value,
            "ratio": self.ratio,
            "target": self.target,
            "missed": self.missed,
            "skipped": self.skipped,
            "note": self.note or None,
            "rounds": self.rounds,
        }


def reason(error: BaseException) -> str:
    """One line saying why: the error's first line, with its type unless it is one of the
    one-line refusals (Unavailable, rooflab's BackendError)."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if not isinstance(error, Unavailable | BackendError):
        text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


def row_of(comparison: Comparison, **result) -> Row:
    """The row of `comparison` with its `result`: the rates and methods, or why it was skipped."""
    head = (comparison.name, comparison.unit, comparison.reference, comparison.target)
    return Row(*head, note=comparison.note, **result)


def run_comparisons(
    comparisons: Sequence[Comparison],
    rounds: int,
    measure: Callable[[Side], float],
    torch_missing: str | None = None,
    after_each: Callable[[], object] = lambda: None,
) -> list[Row]:
    """Each comparison prepared once, then `rounds` rounds in which every comparison's sides are
    measured back to back (`measure(side)`: its rate, units per second), rooflab first; each side
    keeps its best round. `torch_missing`: why PyTorch is unusable (its comparisons are skipped
    unprepared), None where it is. `after_each` runs after each comparison's round (the clock
    reading). A side that fails to prepare or to run skips its row, never the run."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    prepared: dict[int, Prepared] = {}
    skipped: dict[int, str] = {}
    for index, comparison in enumerate(comparisons):
        if comparison.needs_torch and torch_missing:
            skipped[index] = torch_missing
            continue
        try:
            prepared[index] = comparison.prepare()
        except Exception as error:  # a peer or rooflab's side unavailable: the row says why
            skipped[index] = reason(error)
    measured: dict[int, list[dict]] = {index: [] for index in prepared}
    for _ in range(rounds):
        for index, ready in prepared.items():
            if index in skipped:
                continue
            try:
                ours = {side.label: measure(side) for side in ready.ours}
                theirs = measure(ready.reference)
                for value in (*ours.values(), theirs):
                    if not (math.isfinite(value) and value > 0):
                        raise Unavailable(f"a side measured {value} units per second")
            except Exception as error:
                skipped[index] = reason(error)
                continue
            finally:
                after_each()
            measured[index].append({"rooflab": ours, "reference": theirs})
    rows = []
    for index, comparison in enumerate(comparisons):
        if index in skipped:
            rows.append(row_of(comparison, skipped=skipped[index]))
            continue
        labels = [side.label for side in prepared[index].ours]
        best_side = {label: max(r["rooflab"][label] for r in measured[index]) for label in labels}
        label = max(best_side, key=best_side.__getitem__)
        rows.append(
            row_of(
                comparison,
                rooflab=best_side[label],
                reference_value=max(r["reference"] for r in measured[index]),
                rooflab_method=label,
                reference_method=prepared[index].reference.label,
                rounds=measured[index],
            )
        )
    return rows


def format_row(row: Row) -> str:
    """The printed line of a row."""
    head = f"{row.name:<34} {row.unit:<7}"
    if row.skipped is not None:
        return f"{head} skipped: {row.skipped}"
    if row.target is None:
        verdict = "informational, no target"
    else:
        verdict = f"target >= {row.target}" + (": MISSED" if row.missed else "")
    ours = f" [{row.rooflab_method}]" if row.rooflab_method else ""
    said = row.reference_method and row.reference_method not in row.reference
    theirs = f" [{row.reference_method}]" if said else ""
    return (
        f"{head} rooflab{ours} {row.rooflab:.4g}  {row.reference}{theirs} "
        f"{row.reference_value:.4g}  ratio {row.ratio:.3f} ({verdict})"
    )


def any_missed(rows: Iterable[Row]) -> bool:
    return any(row.missed for row in rows)


def clock_range(clocks: Iterable[float | None]) -> dict | None:
    """The SM clock readings seen (MHz), None where none was readable."""
    seen = [c for c in clocks if c]
    return {"min_mhz": min(seen), "max_mhz": max(seen), "readings": len(seen)} if seen else None


def clock_text(clock: dict | None) -> str:
    if clock is None:
        return "SM clock not readable"
    return f"SM clock {clock['min_mhz']:.0f}-{clock['max_mhz']:.0f} MHz"


def document(
    *,
    device: str,
    date_utc: str,
    clock: dict | None,
    versions: dict[str, Any],
    rounds: int,
    samples: int,
    settings: dict[str, Any],
    timing: str,
    rows: Sequence[Row],
) -> dict:
    """The JSON object of one run."""
    return {
        "benchmark": "benchmarks/gpu_ceilings_vs_references.py",
        "device": device,
        "date_utc": date_utc,
        "sm_clock": clock,
        **versions,
        "rounds": rounds,
        "samples": samples,
        "settings": settings,
        "timing": timing,
        "rows": [row.as_dict() for row in rows],
        "missed": [row.name for row in rows if row.missed],
    }
