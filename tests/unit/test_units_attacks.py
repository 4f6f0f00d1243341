"""Units as an attacker writes them: digits that are not ASCII.

Python's ``\\d`` (and ``int``, ``Fraction``) read every Unicode decimal digit, so
``"1\\u0660m"`` (an Arabic-Indic zero that looks like a dot) was ten minutes and ``"1\\u0665KB"``
(a five that looks like an ``o``) 15 KiB, where the nats CLI (Go's ASCII-only ``\\d``)
refuses both. A spec diff a reviewer reads must mean what it shows: only ASCII digits.
"""

from __future__ import annotations

import re

import pytest

from reconciler.errors import SpecError
from reconciler.locations import Location
from reconciler.specs.document import Document
from reconciler.specs.units import (
    DURATION_PATTERN,
    SIZE_PATTERN,
    UnitError,
    ambiguity,
    parse_duration,
    parse_size,
)
from reconciler.specs.validate import validate_documents

SIZES = ["1\u0665KB", "\uff11K", "1\u0660", "\u0967GiB", "1.\u0665G"]
DURATIONS = ["1\u0660m", "\uff15s", "1h\u0663\u0660m", "1.\u0665h", "\u0661d"]


@pytest.mark.parametrize("text", SIZES)
def test_a_size_with_non_ascii_digits_is_refused(text: str) -> None:
    with pytest.raises(UnitError):
        parse_size(text)
    assert not re.search(SIZE_PATTERN, text), "the JSON Schema refuses it too"
    assert ambiguity(text, "size") is None


@pytest.mark.parametrize("text", DURATIONS)
def test_a_duration_with_non_ascii_digits_is_refused(text: str) -> None:
    with pytest.raises(UnitError):
        parse_duration(text)
    assert not re.search(DURATION_PATTERN, text), "the JSON Schema refuses it too"


def test_a_spec_with_an_arabic_indic_zero_is_an_error_at_its_line() -> None:
    body = {"kind": "Stream", "name": "S", "subjects": ["s.>"], "max_age": "1\u0660m"}
    where = {"max_age": Location("spec.yaml", 4)}
    document = Document(body=body, source=Location("spec.yaml", 1), locations=where)
    with pytest.raises(SpecError) as caught:
        validate_documents([document])
    assert any("spec.yaml:4" in str(problem) for problem in caught.value.problems)


def test_ascii_digits_still_read_as_the_nats_cli_does() -> None:
    assert parse_size("15KB") == 15 * 1024
    assert parse_size("1.5G") == 3 * 2**29
    assert parse_duration("10m") == 600 * 10**9
    assert parse_duration("1h30m") == 5_400 * 10**9
