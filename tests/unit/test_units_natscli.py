"""Units as people write them: everything the nats CLI accepts, with its meaning.

The nats CLI (natscli ``internal/util.ParseStringAsBytes``) reads every size suffix as
binary and case-insensitively (``1GB`` = ``1G`` = ``1gib`` = 2^30); its durations
(``fisk.ParseDuration``, the same as jsm.go's) add ``d``/``D``, ``w``/``W``, ``M`` (30
days) and ``y``/``Y`` (365 days) to Go's. A value whose meaning changed (``1GB`` was
10^9 bytes here) is a warning, once per file, naming FILE:LINE.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reconciler.errors import Problem
from reconciler.model.values import display
from reconciler.specs.units import (
    DURATION_PATTERN,
    SIZE_PATTERN,
    format_size,
    parse_duration,
    parse_size,
)
from reconciler.specs.validate import load_specs

DAY = 86400 * 10**9


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("1G", 2**30),
        ("1GB", 2**30),
        ("1GiB", 2**30),
        ("1gb", 2**30),
        ("1gib", 2**30),
        ("1mb", 2**20),
        ("1M", 2**20),
        ("1K", 1024),
        ("1k", 1024),
        ("1KB", 1024),
        ("2T", 2 * 2**40),
        ("1TB", 2**40),
        ("100b", 100),
        ("1024", 1024),
        ("1.5K", 1536),
    ],
)
def test_sizes_read_as_the_nats_cli_reads_them(text: str, nbytes: int) -> None:
    assert parse_size(text) == nbytes
    assert re.search(SIZE_PATTERN, text), "the JSON Schema accepts it too"


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("1y", 365 * DAY),
        ("1Y", 365 * DAY),
        ("1M", 30 * DAY),
        ("2D", 2 * DAY),
        ("1W", 7 * DAY),
        ("1y1d", 366 * DAY),
        ("0", 0),
        ("1m", 60 * 10**9),
    ],
)
def test_durations_read_as_the_nats_cli_reads_them(text: str, nanos: int) -> None:
    assert parse_duration(text) == nanos
    assert re.search(DURATION_PATTERN, text), "the JSON Schema accepts it too"


def test_sizes_are_written_in_binary_units_only() -> None:
    assert format_size(2**30) == "1GiB"
    assert parse_size(format_size(10**9)) == 10**9
    assert "GB" not in format_size(10**9)


def _spec_file(path: Path, name: str, **fields: str) -> Path:
    lines = [f"kind: Stream\nname: {name}\nsubjects: [{name.lower()}.>]"]
    lines += [f"{key}: {value}" for key, value in fields.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_an_ambiguous_size_is_a_warning_once_per_file_naming_file_and_line(
    tmp_path: Path,
) -> None:
    first = _spec_file(tmp_path / "a.yaml", "A", max_bytes="1GB", max_msg_size="1MB")
    second = _spec_file(tmp_path / "b.yaml", "B", max_bytes="2GB")
    _spec_file(tmp_path / "c.yaml", "C", max_bytes="1GiB", max_age="1y")
    warnings: list[Problem] = []
    specs = {s.name: s for s in load_specs([tmp_path], warnings=warnings)}
    assert specs["A"].config["max_bytes"] == 2**30
    assert specs["A"].config["max_msg_size"] == 2**20
    assert specs["C"].config["max_age"] == 365 * DAY
    said = [str(w) for w in warnings]
    assert len(said) == 2, said
    assert said[0].startswith(f"{first}:4: warning: ")
    assert said[1].startswith(f"{second}:4: warning: ")
    assert "1073741824 bytes" in said[0] and "10^9" in said[0]
    assert "1 more in this file" in said[0]


def test_a_month_is_a_warning_too(tmp_path: Path) -> None:
    _spec_file(tmp_path / "a.yaml", "A", max_age="1M")
    warnings: list[Problem] = []
    load_specs([tmp_path], warnings=warnings)
    assert len(warnings) == 1 and "30 days" in str(warnings[0])


@pytest.mark.parametrize(
    ("value", "written", "shown"),
    [
        (2**30, None, "1GiB (1073741824)"),
        (2**30, "1GB", "1GB (1073741824)"),
        (3 * 2**30, "1G", "3G (3221225472)"),
        (512, None, "512B"),
        (10**9, None, "953.7MiB (1000000000)"),
    ],
)
def test_sizes_show_binary_units_and_the_byte_count(
    value: int, written: str | None, shown: str
) -> None:
    assert display(value, path="max_bytes", written=written) == shown


def test_a_duration_shows_in_the_unit_it_was_written_in() -> None:
    assert display(2 * 365 * DAY, path="max_age", written="1y") == "2y"
