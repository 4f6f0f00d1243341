"""The workers' own file reading (reconciler.fleet.lines) against Spark's text readers.

The read used to go through Spark's ``wholeTextFiles`` (small files) and ``textFile``
(big ones, split). The workers now open the files themselves; these tests hold that
they see exactly the lines Spark's readers saw, on files made to be awkward: every kind
of line break, at and across range boundaries, invalid UTF-8, blank lines, no final
line break, gzip."""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.fleet.lines import DECODING, Piece, _ranges, plan_units, range_lines, whole_lines
from reconciler.fleet.records import read_unit

#: Bytes that make line reading hard: every line break, UTF-8 of 2-4 bytes, and bytes
#: that are never valid UTF-8 (a lone continuation, an overlong start, a surrogate).
AWKWARD = [b"\n", b"\r", b"\r\n", b"a", b"{}", b" ", "é".encode(), "€".encode(),
           "😀".encode(), b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", "\u2028".encode(),
           b"\x0b", b"\x85", b"\xed\xa0", b"\xed\xbf\xbf", b"\xf0\x90", b"\xe0\xa0",
           b"\xf4\x8f\xbf\xbf", b"\xef\xbb\xbf", b"\xed\x9f\xbf", b"\xf5"]  # fmt: skip
contents = st.lists(st.sampled_from(AWKWARD), max_size=60).map(b"".join)


def hadoop_lines(data: bytes) -> list[str]:
    """Lines as Hadoop's LineRecordReader reads them: ended at \\r\\n, \\r or \\n, no
    line after a final break, no byte order mark."""
    lines = re.split(rb"\r\n|\r|\n", data)
    if lines and lines[-1] == b"":
        lines.pop()
    if lines:  # and a byte order mark at the start
        lines[0] = lines[0].removeprefix(b"\xef\xbb\xbf")
    return [line.decode("utf-8", DECODING) for line in lines]


def cut_lines(path: Path, parts: int) -> list[str]:
    size = path.stat().st_size
    return [
        line
        for number, (start, end) in enumerate(_ranges(str(path), size, parts))
        for line in range_lines(Piece(str(path), start, end, number))
    ]


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=contents, parts=st.integers(1, 12))
def test_the_ranges_of_a_cut_file_hold_each_line_once_whatever_the_cuts(
    tmp_path: Path, data: bytes, parts: int
) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_bytes(data)
    assert cut_lines(path, parts) == hadoop_lines(data)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=contents)
def test_a_whole_file_has_the_lines_of_the_same_file_cut(tmp_path: Path, data: bytes) -> None:
    """Whole or cut, a file's lines end where Hadoop ends them: never at U+2028, U+0085
    or a vertical tab (``str.splitlines`` ended the lines of whole files there)."""
    path = tmp_path / "whole.jsonl"
    path.write_bytes(data)
    assert whole_lines(str(path)) == hadoop_lines(data)
    zipped = tmp_path / "whole.jsonl.gz"
    zipped.write_bytes(gzip.compress(data))
    assert whole_lines(str(zipped)) == hadoop_lines(data)


def test_a_record_holding_a_line_separator_in_a_string_is_one_record(tmp_path: Path) -> None:
    """A snapshot written by another tool, a raw U+2028 in a description: the record was
    read as two bad lines, and the bad line after it was named a line too far."""
    record = {
        "env": "eu",
        "captured_at": "2026-03-01T12:30:00Z",
        "kind": "Stream",
        "stream": "ORDERS",
        "name": "ORDERS",
        "server_version": "2.12.3",
        "api_level": 3,
        "config": {"name": "ORDERS", "subjects": ["orders.>"], "description": "a\u2028b\u0085c"},
    }
    text = json.dumps(record, ensure_ascii=False)
    assert "\u2028" in text  # written raw, as JSON allows
    path = tmp_path / "eu.jsonl"
    path.write_text(f"{text}\nnot json\n", encoding="utf-8")
    rows = read_unit([Piece(str(path))])
    assert [row[:3] for row in rows.rows() if row[0] is not None] == [("eu", "ORDERS", "")]
    (bad,) = rows.bad
    assert bad[6:9] == (str(path), None, 2)


def test_a_cut_gzip_file_is_read_from_its_start(tmp_path: Path) -> None:
    data = b"one\r\ntwo\rthree\n\nfour"
    path = tmp_path / "big.jsonl.gz"
    path.write_bytes(gzip.compress(data[:9]) + gzip.compress(data[9:]))  # two members
    assert cut_lines(path, 4) == ["one", "two", "three", "", "four"]
    assert whole_lines(str(path)) == ["one", "two", "three", "", "four"]


def test_a_line_longer_than_a_block_is_read_whole(tmp_path: Path) -> None:
    long = "x" * (3 << 20)
    path = tmp_path / "long.jsonl"
    path.write_text(f"a\r{long}\r\nb")
    assert cut_lines(path, 5) == ["a", long, "b"]


def test_files_of_one_name_are_read_by_one_unit(tmp_path: Path) -> None:
    files = []
    for day in range(3):
        for env in ("eu", "us"):
            path = tmp_path / f"day{day}" / f"{env}.jsonl"
            path.parent.mkdir(exist_ok=True)
            path.write_text("x" * 1000 + "\n")
            files.append(path)
    units, layout = plan_units(files, parallelism=1, min_partitions=2)
    assert layout == []
    assert [sorted({Path(p.path).name for p in unit}) for unit in units] == [
        ["eu.jsonl"],
        ["us.jsonl"],
    ]
    big = tmp_path / "big.jsonl"
    big.write_text("y\n" * 1000)
    units, layout = plan_units([big], parallelism=1, min_partitions=3, whole_file_limit=100)
    assert layout == [(str(big), 0, 3)]
    assert [(u[0].start, u[0].end, u[0].number) for u in units] == [
        (0, 667, 0),
        (667, 1334, 1),
        (1334, 2000, 2),
    ]


@pytest.mark.integration
def test_the_workers_read_the_lines_spark_read(spark: Any, tmp_path: Path) -> None:
    """Spark's line reader as the oracle, on 40 random awkward files and their gzip
    copies: ``textFile``'s lines, for whole files and cut ones alike. (The former read
    of whole files, ``wholeTextFiles`` then ``str.splitlines``, also ended lines at
    U+2028 and its kind: they differ only there.)"""
    sc = spark.sparkContext
    rng = random.Random(42)
    paths = []
    for number in range(40):
        data = b"".join(rng.choice(AWKWARD) for _ in range(rng.randrange(80)))
        paths.append(tmp_path / f"f{number:02d}.jsonl")
        paths[-1].write_bytes(data)
        paths.append(tmp_path / f"f{number:02d}.jsonl.gz")
        paths[-1].write_bytes(gzip.compress(data))
    whole = dict(sc.wholeTextFiles(",".join(map(str, paths)), 4).collect())
    cut = sc.union([sc.textFile(str(p), 3).map(lambda line, p=str(p): (p, line)) for p in paths])
    by_file: dict[str, list[str]] = {}
    for path, line in cut.collect():
        by_file.setdefault(path, []).append(line)
    for path in paths:
        lines = by_file.get(str(path), [])
        assert whole_lines(str(path)) == lines, path.name
        assert cut_lines(path, 3) == lines, path.name
        text = whole[path.as_uri().replace("file:///", "file:/")]
        if not re.search("[\x0b\x0c\x1c-\x1e\x85\u2028\u2029\ufeff]", text):
            assert text.splitlines() == lines, path.name  # the former read, elsewhere
