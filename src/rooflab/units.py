"""Quantities with explicit units: bytes, byte rates, FLOP, FLOP rates, OP, OP rates and times.

Decimal prefixes are powers of ten (GB = 1e9 B, TFLOP/s = 1e12 FLOP/s); binary prefixes are powers
of two (GiB = 2**30 B). Nothing is guessed: a number without a unit, a bare prefix (`2 T`), an
ambiguous spelling (`KB`, `TFLOPS`) or a non-finite or negative value is refused with a message that
says what was expected. Values are returned in base units: B, B/s, FLOP, FLOP/s, OP, OP/s, s.

OP counts integer operations (an int8 multiply-add counts 2, as an FMA counts 2 FLOP): an integer
GEMM's work and an integer tensor-core ceiling are in OP and OP/s (datasheets' "TOPS"), never in
FLOP, so an int8 rate is never drawn against a floating-point roof.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "KINDS",
    "UnitError",
    "as_quantity",
    "format_quantity",
    "parse_byte_rate",
    "parse_bytes",
    "parse_flop",
    "parse_flop_rate",
    "parse_op",
    "parse_op_rate",
    "parse_quantity",
    "parse_time",
]


class UnitError(ValueError):
    """A quantity that could not be read unambiguously."""


DECIMAL_PREFIXES = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
BINARY_PREFIXES = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "μs": 1e-6, "µs": 1e-6, "ns": 1e-9}

# kind -> (base unit, what a reader should write)
KINDS = {
    "bytes": ("B", "B, kB, MB, GB, TB (powers of 10) or KiB, MiB, GiB, TiB (powers of 2)"),
    "byte_rate": ("B/s", "e.g. 2 TB/s, 3.35 TB/s or 900 GiB/s"),
    "flop": ("FLOP", "FLOP, kFLOP, MFLOP, GFLOP, TFLOP or PFLOP"),
    "flop_rate": ("FLOP/s", "e.g. 120 TFLOP/s or 989.4 TFLOP/s"),
    "op": ("OP", "OP, kOP, MOP, GOP, TOP or POP (integer operations)"),
    "op_rate": ("OP/s", "e.g. 1978.9 TOP/s (integer operations per second)"),
    "time": ("s", "s, ms, us (or μs) or ns"),
}


def _unit_table() -> dict[str, tuple[str, float]]:
    table: dict[str, tuple[str, float]] = {}
    for prefix, factor in {**DECIMAL_PREFIXES, **BINARY_PREFIXES}.items():
        table[f"{prefix}B"] = ("bytes", factor)
        table[f"{prefix}B/s"] = ("byte_rate", factor)
    for prefix, factor in DECIMAL_PREFIXES.items():
        table[f"{prefix}FLOP"] = ("flop", factor)
        table[f"{prefix}FLOP/s"] = ("flop_rate", factor)
        table[f"{prefix}OP"] = ("op", factor)
        table[f"{prefix}OP/s"] = ("op_rate", factor)
    for unit, factor in TIME_UNITS.items():
        table[unit] = ("time", factor)
    return table


UNITS = _unit_table()

# Spellings people do write, refused with the reason.
_REFUSED_SPELLINGS = [
    (re.compile(r"^K(B|iB)?(/s)?$"), "K is not a prefix here; write kB (1e3 B) or KiB (2**10 B)"),
    (re.compile(r"^[kMGTPE]?i?B(ps|/sec)$"), "write bytes per second as B/s, e.g. GB/s"),
    (re.compile(r"^[kKMGTPE]?FLOPS?$", re.IGNORECASE), "write FLOP/s for a rate, FLOP for a count"),
    (re.compile(r"^[kKMGTPE]?OPS$", re.IGNORECASE), "write OP/s for a rate, OP for a count"),
    (re.compile(r"^[kKMGTPE]?i?b(ps|/s)?$"), "bits are not accepted; write bytes as B"),
]

_NUMBER_AND_UNIT = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(.*?)\s*$")


def _hint(unit: str) -> str | None:
    if unit in DECIMAL_PREFIXES or unit in BINARY_PREFIXES:
        return "a prefix without a unit"
    return next((reason for pattern, reason in _REFUSED_SPELLINGS if pattern.match(unit)), None)


def parse_quantity(text: str, kind: str, *, positive: bool = False) -> float:
    """Read `text` (e.g. "2 TB/s") as a quantity of `kind`; return it in base units."""
    if kind not in KINDS:
        raise ValueError(f"unknown quantity kind {kind!r}; known: {', '.join(KINDS)}")
    base, expected = KINDS[kind]
    if not isinstance(text, str):
        raise UnitError(f"expected text with a unit ({expected}), got {text!r}")
    match = _NUMBER_AND_UNIT.match(text)
    if not match:
        raise UnitError(f"{text!r} is not a number with a unit; expected {expected}")
    number, unit = match.groups()
    if not unit:
        raise UnitError(f"{text!r} has no unit; expected {expected}")
    if unit not in UNITS:
        hint = _hint(unit)
        reason = f" ({hint})" if hint else ""
        raise UnitError(f"{text!r}: unknown unit {unit!r}{reason}; expected {expected}")
    unit_kind, factor = UNITS[unit]
    if unit_kind != kind:
        raise UnitError(f"{text!r} is not in {base}; expected {expected}")
    value = float(number) * factor
    _check_value(value, text, positive)
    return value


def _check_value(value: float, text: object, positive: bool) -> None:
    if not math.isfinite(value):
        raise UnitError(f"{text!r} is not finite")
    if value < 0:
        raise UnitError(f"{text!r} is negative; quantities must be >= 0")
    if positive and value == 0:
        raise UnitError(f"{text!r} is zero; a positive value is required")


def parse_bytes(text: str, *, positive: bool = False) -> float:
    return parse_quantity(text, "bytes", positive=positive)


def parse_byte_rate(text: str, *, positive: bool = True) -> float:
    return parse_quantity(text, "byte_rate", positive=positive)


def parse_flop(text: str, *, positive: bool = False) -> float:
    return parse_quantity(text, "flop", positive=positive)


def parse_flop_rate(text: str, *, positive: bool = True) -> float:
    return parse_quantity(text, "flop_rate", positive=positive)


def parse_op(text: str, *, positive: bool = False) -> float:
    return parse_quantity(text, "op", positive=positive)


def parse_op_rate(text: str, *, positive: bool = True) -> float:
    return parse_quantity(text, "op_rate", positive=positive)


def parse_time(text: str, *, positive: bool = False) -> float:
    return parse_quantity(text, "time", positive=positive)


def as_quantity(value: object, kind: str, *, positive: bool = False) -> float:
    """A number is taken as already in base units (B, FLOP, ...); text is parsed with its unit."""
    if isinstance(value, bool):
        raise UnitError(f"{value!r} is not a quantity")
    if isinstance(value, (int, float)):
        _check_value(float(value), value, positive)
        return float(value)
    return parse_quantity(value, kind, positive=positive)


_SI_STEPS = [(1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]
_TIME_STEPS = [(1.0, "s"), (1e-3, "ms"), (1e-6, "μs"), (1e-9, "ns")]


def format_quantity(value: float, kind: str, digits: int = 5) -> str:
    """Print a base-unit value with a decimal prefix (time in s/ms/μs/ns), `digits` significant."""
    base, _ = KINDS[kind]
    if not math.isfinite(value):
        return f"{value} {base}"
    magnitude = abs(value)
    if kind == "time":
        scale, unit = next(((s, u) for s, u in _TIME_STEPS if magnitude >= s), _TIME_STEPS[-1])
    else:
        scale, prefix = next(((s, p) for s, p in _SI_STEPS if magnitude >= s), _SI_STEPS[-1])
        unit = prefix + base
    if value == 0:
        scale, unit = 1.0, base
    return f"{value / scale:.{digits}g} {unit}"
