"""Human units for durations and sizes, both ways.

Durations: a sequence of ``<number><unit>`` terms, units ``ns us µs ms s m h d w``
(``"250ms"``, ``"1h30m"``, ``"1.5h"``, ``"7d"``, ``"2w"``); the wire form is integer
nanoseconds. Sizes: one ``<number><unit>`` term, binary units ``KiB MiB GiB TiB PiB EiB``
or decimal ``B KB MB GB TB PB EB`` (``"64MiB"``, ``"1GB"``); the wire form is integer bytes.
Integers are taken as already in wire units. ``format_*`` gives the shortest exact human
form, so ``parse_duration(format_duration(n)) == n`` for every non-negative ``n``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from reconciler.errors import brief
from reconciler.specs.fields import INT64_MAX, unit_paths

_DURATION_UNITS: dict[str, int] = {
    "w": 7 * 24 * 3600 * 10**9,
    "d": 24 * 3600 * 10**9,
    "h": 3600 * 10**9,
    "m": 60 * 10**9,
    "s": 10**9,
    "ms": 10**6,
    "us": 10**3,
    "µs": 10**3,
    "ns": 1,
}
_FORMAT_DURATION_UNITS = [(u, n) for u, n in _DURATION_UNITS.items() if u != "µs"]

_SIZE_UNITS: dict[str, int] = {
    "B": 1,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
    "PiB": 1024**5,
    "EiB": 1024**6,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "PB": 1000**5,
    "EB": 1000**6,
}

_NUMBER = r"\d+(?:\.\d+)?"
#: Regular expressions shared with the JSON Schemas (``schemas/document.schema.json``).
DURATION_PATTERN = rf"^(?:{_NUMBER}(?:ns|us|µs|ms|s|m|h|d|w))+$"
SIZE_PATTERN = rf"^{_NUMBER} ?(?:B|KiB|MiB|GiB|TiB|PiB|EiB|KB|MB|GB|TB|PB|EB)$"
_DURATION_TERM = re.compile(rf"({_NUMBER})(ns|us|µs|ms|s|m|h|d|w)")
_SIMPLE_DURATION = re.compile(r"(\d+)(ns|us|µs|ms|s|m|h|d|w)")
_SIZE = re.compile(rf"({_NUMBER}) ?(B|KiB|MiB|GiB|TiB|PiB|EiB|KB|MB|GB|TB|PB|EB)")

DURATION_EXAMPLES = "250ms, 30s, 1h30m, 7d, 2w or integer nanoseconds"
SIZE_EXAMPLES = "512KiB, 64MiB, 1GiB, 1GB or integer bytes (-1 = unlimited)"


class UnitError(ValueError):
    """A value is not a valid duration or size."""


#: No duration or size needs a longer text (the largest is 19 digits and a unit).
MAX_UNIT_TEXT = 64


def _not_too_long(value: str, unit: str) -> None:
    if len(value) > MAX_UNIT_TEXT:
        raise UnitError(f"{brief(value)} is not a {unit}: far too long ({len(value)} characters)")


def parse_duration(value: str | int) -> int:
    """Nanoseconds for ``"1h30m"``-style strings; integers are returned as they are."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise UnitError(f"{value!r} is not a duration ({DURATION_EXAMPLES})")
    if isinstance(value, int):
        return value
    text = value.strip()
    _not_too_long(value, "duration")
    simple = _SIMPLE_DURATION.fullmatch(text)
    if simple is not None:  # the common "30s" form, without fractions
        return _exact(
            Fraction(int(simple.group(1)) * _DURATION_UNITS[simple.group(2)]),
            value,
            "duration",
            "nanosecond",
        )
    if not text or _DURATION_TERM.sub("", text) != "":
        raise UnitError(f"{value!r} is not a duration ({DURATION_EXAMPLES})")
    total = sum(
        (Fraction(number) * _DURATION_UNITS[unit] for number, unit in _DURATION_TERM.findall(text)),
        Fraction(0),
    )
    return _exact(total, value, "duration", "nanosecond")


def parse_size(value: str | int) -> int:
    """Bytes for ``"64MiB"``-style strings; integers are returned as they are."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise UnitError(f"{value!r} is not a size ({SIZE_EXAMPLES})")
    if isinstance(value, int):
        return value
    text = value.strip()
    _not_too_long(value, "size")
    if text.startswith("-"):
        raise UnitError(f"{value!r}: a size cannot be negative (use -1 for unlimited)")
    match = _SIZE.fullmatch(text)
    if match is None:
        raise UnitError(f"{value!r} is not a size ({SIZE_EXAMPLES})")
    total = Fraction(match.group(1)) * _SIZE_UNITS[match.group(2)]
    return _exact(total, value, "size", "byte")


def _exact(total: Fraction, value: str, what: str, unit: str) -> int:
    if total.denominator != 1:
        raise UnitError(f"{value!r} is not a whole number of {unit}s")
    result = int(total)
    if result > INT64_MAX:
        raise UnitError(f"{value!r} is too large: a {what} must fit in a signed 64-bit integer")
    return result


def format_duration(nanos: int) -> str:
    """The shortest exact human form of ``nanos`` (``7200000000000 -> "2h"``)."""
    if nanos < 0:
        raise UnitError(f"{nanos} is a negative duration")
    if nanos == 0:
        return "0s"
    single = next(f"{nanos // n}{u}" for u, n in _FORMAT_DURATION_UNITS if nanos % n == 0)
    parts, rest = [], nanos
    for unit, size in _FORMAT_DURATION_UNITS:
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    compound = "".join(parts)
    return compound if len(compound) < len(single) else single


def format_size(nbytes: int) -> str:
    """The shortest exact human form of ``nbytes`` (``1073741824 -> "1GiB"``)."""
    if nbytes < 0:
        raise UnitError(f"{nbytes} is a negative size")
    if nbytes == 0:
        return "0B"
    candidates = [f"{nbytes // n}{u}" for u, n in _SIZE_UNITS.items() if nbytes % n == 0]
    return min(candidates, key=len)


def approx_size(nbytes: int) -> str:
    """A size for people to read, rounded (``1756890 -> "1.7 MiB"``); exact below 1 KiB."""
    if nbytes < 1024:
        return f"{nbytes} B"
    value, unit = float(nbytes), "B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):  # noqa: B007 - the last one is kept
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f} {unit}"


_ONE_TERM = re.compile(r"^\s*(\d+)\s*([a-zA-Zµ]+)\s*$")


def format_like(value: int, written: str, unit: str) -> str | None:
    """``value`` in the unit of ``written`` (``"14d"``: 30 days → ``"30d"``), when that is
    exact; None otherwise (then the shortest form is used)."""
    match = _ONE_TERM.match(written)
    table = _DURATION_UNITS if unit == "duration" else _SIZE_UNITS
    if match is None or match.group(2) not in table or value < 0:
        return None
    size = table[match.group(2)]
    return f"{value // size}{match.group(2)}" if value % size == 0 else None


def to_human(kind: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a wire config with positive durations and sizes in human units."""
    human: dict[str, Any] = copy.deepcopy(dict(config))
    for _path, unit, container, key in unit_paths(kind, human):
        value = container[key]  # type: ignore[index]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            continue
        text = format_duration(value) if unit == "duration" else format_size(value)
        container[key] = text  # type: ignore[index]
    return human
