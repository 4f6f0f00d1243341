"""Human units: parsing, shortest exact formatting, and the round trip."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.specs.units import (
    DURATION_PATTERN,
    SIZE_PATTERN,
    UnitError,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
    to_human,
)

INT64_MAX = 2**63 - 1


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("250ms", 250_000_000),
        ("30s", 30 * 10**9),
        ("1h30m", 5400 * 10**9),
        ("7d", 7 * 86400 * 10**9),
        ("2w", 14 * 86400 * 10**9),
        ("1.5h", 5400 * 10**9),
        ("10us", 10_000),
        ("10µs", 10_000),
        ("1ns", 1),
    ],
)
def test_durations_parse_to_nanoseconds(text: str, nanos: int) -> None:
    assert parse_duration(text) == nanos


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("512KiB", 512 * 1024),
        ("64MiB", 64 * 2**20),
        ("1GiB", 2**30),
        ("1GB", 2**30),  # as the nats CLI reads it (test_units_natscli.py)
        ("100B", 100),
        ("64 MiB", 64 * 2**20),
        ("1.5KiB", 1536),
    ],
)
def test_sizes_parse_to_bytes(text: str, nbytes: int) -> None:
    assert parse_size(text) == nbytes


def test_integers_keep_their_wire_meaning() -> None:
    assert parse_duration(5) == 5
    assert parse_size(-1) == -1


@pytest.mark.parametrize("text", ["10 parsecs", "", "5", "1x", "h", "1.5.5s", "-1s"])
def test_nonsense_durations_are_refused(text: str) -> None:
    with pytest.raises(UnitError, match="not a duration"):
        parse_duration(text)


def test_a_duration_overflowing_int64_is_refused() -> None:
    with pytest.raises(UnitError, match="64-bit"):
        parse_duration("106752d")  # 106,752 days > 2**63 ns


def test_a_negative_size_string_is_refused() -> None:
    with pytest.raises(UnitError, match="negative"):
        parse_size("-1GiB")


def test_fractional_bytes_are_refused() -> None:
    with pytest.raises(UnitError, match="whole number"):
        parse_size("1.5B")


def test_booleans_are_not_durations() -> None:
    with pytest.raises(UnitError):
        parse_duration(True)


@pytest.mark.parametrize(
    ("nanos", "text"),
    [(7_200_000_000_000, "2h"), (5400 * 10**9, "90m"), (1_500_000_000, "1500ms"), (0, "0s")],
)
def test_durations_format_to_the_shortest_exact_form(nanos: int, text: str) -> None:
    assert format_duration(nanos) == text


@pytest.mark.parametrize(
    ("nbytes", "text"), [(2**30, "1GiB"), (10**9, "1000000000B"), (1024, "1KiB"), (512, "512B")]
)
def test_sizes_format_to_the_shortest_exact_form(nbytes: int, text: str) -> None:
    assert format_size(nbytes) == text


@given(st.integers(min_value=0, max_value=INT64_MAX))
def test_durations_round_trip(nanos: int) -> None:
    text = format_duration(nanos)
    assert re.search(DURATION_PATTERN, text)
    assert parse_duration(text) == nanos


@given(st.integers(min_value=0, max_value=INT64_MAX))
def test_sizes_round_trip(nbytes: int) -> None:
    text = format_size(nbytes)
    assert re.search(SIZE_PATTERN, text)
    assert parse_size(text) == nbytes


@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(["s", "m", "h", "d", "w"]))
def test_human_durations_match_the_schema_pattern(count: int, unit: str) -> None:
    assert re.search(DURATION_PATTERN, f"{count}{unit}")


def test_to_human_converts_every_unit_field_and_keeps_sentinels() -> None:
    wire = {
        "max_age": 7 * 86400 * 10**9,
        "max_bytes": -1,
        "max_msg_size": 2**20,
        "duplicate_window": 0,
        "consumer_limits": {"inactive_threshold": 3600 * 10**9},
        "max_msgs": 1000,
    }
    human = to_human("Stream", wire)
    assert human == {
        "max_age": "1w",
        "max_bytes": -1,
        "max_msg_size": "1MiB",
        "duplicate_window": 0,
        "consumer_limits": {"inactive_threshold": "1h"},
        "max_msgs": 1000,
    }
    assert wire["max_age"] == 7 * 86400 * 10**9, "the input is not changed"


def test_to_human_converts_consumer_backoff_items() -> None:
    human = to_human("Consumer", {"ack_wait": 30 * 10**9, "backoff": [10**9, 5 * 10**9]})
    assert human == {"ack_wait": "30s", "backoff": ["1s", "5s"]}
