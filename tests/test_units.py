import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rooflab.units import (
    UnitError,
    as_quantity,
    format_quantity,
    parse_byte_rate,
    parse_bytes,
    parse_flop,
    parse_flop_rate,
    parse_quantity,
    parse_time,
)


@pytest.mark.parametrize(
    ("text", "parse", "expected"),
    [
        ("2 TB/s", parse_byte_rate, 2e12),
        ("3.35 TB/s", parse_byte_rate, 3.35e12),
        ("900 GiB/s", parse_byte_rate, 900 * 2**30),
        ("2039 GB/s", parse_byte_rate, 2.039e12),
        ("120 TFLOP/s", parse_flop_rate, 120e12),
        ("989.4 TFLOP/s", parse_flop_rate, 989.4e12),
        ("12 GFLOP", parse_flop, 12e9),
        ("0.12 GFLOP", parse_flop, 0.12e9),
        ("200 MB", parse_bytes, 200e6),
        ("16 KiB", parse_bytes, 16384),
        ("1 kB", parse_bytes, 1000),
        ("1.5 TiB", parse_bytes, 1.5 * 2**40),
        ("2 PiB", parse_bytes, 2 * 2**50),
        ("3 PB", parse_bytes, 3e15),
        ("64B", parse_bytes, 64),
        ("16.785 us", parse_time, 16.785e-6),
        ("16.785 μs", parse_time, 16.785e-6),
        ("16.785 µs", parse_time, 16.785e-6),  # micro sign U+00B5
        ("3 ms", parse_time, 3e-3),
        ("250 ns", parse_time, 250e-9),
        ("1e-3 s", parse_time, 1e-3),
    ],
)
def test_parse_known_units(text, parse, expected):
    assert parse(text) == pytest.approx(expected, rel=1e-15)


def test_decimal_and_binary_prefixes_are_not_mixed():
    assert parse_bytes("1 GB") == 1e9
    assert parse_bytes("1 GiB") == 2**30
    assert parse_byte_rate("1 GB/s") != parse_byte_rate("1 GiB/s")


@pytest.mark.parametrize(
    ("text", "kind", "says"),
    [
        ("2 T", "byte_rate", "prefix without a unit"),
        ("5 GBps", "byte_rate", "B/s"),
        ("5 GB/sec", "byte_rate", "B/s"),
        ("-1 TB/s", "byte_rate", "negative"),
        ("nan", "byte_rate", "not a number"),
        ("inf TB/s", "byte_rate", "not a number"),
        ("2", "byte_rate", "no unit"),
        ("", "bytes", "not a number"),
        ("2 KB", "bytes", "kB"),
        ("1 TFLOPS", "flop_rate", "FLOP/s"),
        ("1 tflops", "flop_rate", "FLOP/s"),
        ("8 Gb/s", "byte_rate", "bits"),
        ("2 TB", "byte_rate", "not in B/s"),
        ("120 TFLOP/s", "byte_rate", "not in B/s"),
        ("2 TB/s", "flop_rate", "not in FLOP/s"),
        ("3 parsecs", "time", "unknown unit"),
        ("1e400 B", "bytes", "not finite"),
    ],
)
def test_refusals_say_what_was_expected(text, kind, says):
    with pytest.raises(UnitError) as caught:
        parse_quantity(text, kind)
    message = str(caught.value)
    assert says in message
    assert repr(text) in message
    assert "\n" not in message


def test_zero_rate_refused_where_positive_required():
    with pytest.raises(UnitError, match="zero"):
        parse_byte_rate("0 TB/s")
    assert parse_bytes("0 B") == 0


def test_as_quantity_takes_numbers_as_base_units_and_refuses_bools():
    assert as_quantity(2e8, "bytes") == 2e8
    assert as_quantity("200 MB", "bytes") == 2e8
    for bad in (True, -1, float("nan")):
        with pytest.raises(UnitError):
            as_quantity(bad, "bytes")


def test_format_picks_readable_prefixes():
    assert format_quantity(16.785408e-6, "time") == "16.785 μs"
    assert format_quantity(2e12, "byte_rate") == "2 TB/s"
    assert format_quantity(120e12, "flop_rate") == "120 TFLOP/s"
    assert format_quantity(33554432, "flop") == "33.554 MFLOP"
    assert format_quantity(0, "bytes") == "0 B"
    assert format_quantity(2.5, "time") == "2.5 s"
    assert format_quantity(0, "time") == "0 s"
    # a value at a prefix's own step takes that prefix, not the one below
    assert format_quantity(1e3, "bytes") == "1 kB" and format_quantity(1e6, "bytes") == "1 MB"
    assert format_quantity(1e-3, "time") == "1 ms" and format_quantity(999.5, "bytes") == "999.5 B"


KINDS = ["bytes", "byte_rate", "flop", "flop_rate", "time"]


@given(
    st.sampled_from(KINDS),
    st.floats(min_value=1e-9, max_value=1e20, allow_nan=False, allow_infinity=False),
)
def test_format_then_parse_round_trips(kind, value):
    text = format_quantity(value, kind, digits=17)
    assert math.isclose(parse_quantity(text, kind), value, rel_tol=1e-12)
