"""Human units for durations and sizes, both ways, as the nats CLI reads them.

Durations: a sequence of ``<number><unit>`` terms, units ``ns us µs ms s m h`` (Go's),
``d D`` (a day), ``w W`` (a week), ``M`` (a month: 30 days) and ``y Y`` (a year: 365
days), as natscli's and jsm.go's ``ParseDuration`` (``"250ms"``, ``"1h30m"``, ``"1.5h"``,
``"7d"``, ``"1y"``; ``"0"``); the wire form is integer nanoseconds. Sizes: one
``<number><unit>`` term, suffixes read case-insensitively and always binary, as natscli's
``ParseStringAsBytes`` (``B``; ``K KB KiB`` = 1024; ``M MB MiB``; ``G GB GiB``; ``T TB TiB``;
and ``P``/``E`` likewise), or a string of digits (bytes); the wire form is integer bytes.
Integers are taken as already in wire units. ``format_*`` gives the shortest exact human
form (sizes in ``B KiB MiB GiB TiB PiB EiB`` only), so ``parse_duration(format_duration(n))
== n`` for every non-negative ``n``. :func:`ambiguity` says when a written value means
something else to a reader who assumes SI (``1GB``) or minutes (``1M``).
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from reconciler.errors import brief
from reconciler.specs.fields import INT64_MAX, unit_paths

_DAY = 24 * 3600 * 10**9
_DURATION_UNITS: dict[str, int] = {
    "y": 365 * _DAY,
    "Y": 365 * _DAY,
    "M": 30 * _DAY,
    "w": 7 * _DAY,
    "W": 7 * _DAY,
    "d": _DAY,
    "D": _DAY,
    "h": 3600 * 10**9,
    "m": 60 * 10**9,
    "s": 10**9,
    "ms": 10**6,
    "us": 10**3,
    "µs": 10**3,
    "ns": 1,
}
#: The units a duration is written in (one spelling each; no year or month: not exact).
_FORMAT_DURATION_UNITS = [
    (u, n) for u, n in _DURATION_UNITS.items() if u in {"w", "d", "h", "m", "s", "ms", "us", "ns"}
]

#: How many times a size suffix (upper-cased) doubles ten times: 1GB = 1G = 1GiB = 2**30.
_SIZE_POWERS: dict[str, int] = {
    suffix: power
    for power, letter in enumerate(("", "K", "M", "G", "T", "P", "E"))
    for suffix in ((letter, f"{letter}B", f"{letter}IB") if letter else ("B",))
}
#: The units a size is written in: binary, as the JSON API's byte counts read.
_SIZE_UNITS: dict[str, int] = {
    "B": 1,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
    "PiB": 1024**5,
    "EiB": 1024**6,
}
#: Suffixes that mean powers of 1000 in SI but powers of 1024 here and in the nats CLI.
_SI_LOOKING = frozenset({"KB", "MB", "GB", "TB", "PB", "EB"})

#: ASCII digits only, as Go's ``\d`` in the nats CLI (Python's ``\d``, ``int`` and
#: ``Fraction`` read any Unicode digit: an Arabic-Indic zero, which looks like a dot, made
#: ``"1\u0660m"`` ten minutes).
_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_DURATION_UNIT = "ns|us|µs|ms|s|m|h|d|w|D|W|M|y|Y"
#: Regular expressions shared with the JSON Schemas (``schemas/document.schema.json``).
DURATION_PATTERN = rf"^(?:0|(?:{_NUMBER}(?:{_DURATION_UNIT}))+)$"
SIZE_PATTERN = rf"^{_NUMBER}(?: ?(?:[bB]|[kKmMgGtTpPeE](?:[iI]?[bB])?))?$"
_DURATION_TERM = re.compile(rf"({_NUMBER})({_DURATION_UNIT})")
_SIMPLE_DURATION = re.compile(rf"([0-9]+)({_DURATION_UNIT})")
_SIZE = re.compile(rf"({_NUMBER})(?: ?([a-zA-Z]+))?")

DURATION_EXAMPLES = "250ms, 30s, 1h30m, 7d, 1M (30 days), 1y (365 days) or integer nanoseconds"
SIZE_EXAMPLES = (
    "512KiB, 64MiB, 1G, 1GiB (1GB = 1GiB, as in the nats CLI) or integer bytes (-1 = unlimited)"
)


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
    if text == "0":  # as Go's and the nats CLI's parsers
        return 0
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


def parse_seconds(value: object) -> float:
    """Seconds written as a number (``30``, ``2.5``) or a duration (``250ms``, ``2m``):
    the one reader of a time a user gives a run (``--timeout``, ``--lock-timeout``, the
    Pulumi stack's ``jetstream:lockTimeout``). :class:`UnitError` for anything else,
    ``nan`` and ``inf`` included (never a wait nobody can end)."""
    text = str(value).strip()
    try:
        found = float(text)
    except ValueError:
        found = parse_duration(text) / 1e9
    if not math.isfinite(found):
        raise UnitError(f"{brief(text)} is not a time ({DURATION_EXAMPLES})")
    return found


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
    power = _size_power(match.group(2) or "B") if match is not None else None
    if match is None or power is None:
        raise UnitError(f"{value!r} is not a size ({SIZE_EXAMPLES})")
    return _exact(Fraction(match.group(1)) * 1024**power, value, "size", "byte")


def _size_power(suffix: str) -> int | None:
    return _SIZE_POWERS.get(suffix.upper())


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


_ONE_TERM = re.compile(r"^\s*([0-9]+)\s*([a-zA-Zµ]+)\s*\Z")


def format_like(value: int, written: str, unit: str) -> str | None:
    """``value`` in the unit of ``written`` (``"14d"``: 30 days → ``"30d"``; ``"1GB"``:
    2 GiB → ``"2GB"``), when that is exact; None otherwise (then the shortest form is
    used)."""
    match = _ONE_TERM.match(written)
    if match is None or value < 0:
        return None
    suffix = match.group(2)
    if unit == "duration":
        size = _DURATION_UNITS.get(suffix)
    else:
        power = _size_power(suffix)
        size = None if power is None else 1024**power
    if size is None:
        return None
    return f"{value // size}{suffix}" if value % size == 0 else None


def readable_size(nbytes: int, written: str | None = None) -> str:
    """A size for a plan, a drift report or a PR comment: in the unit it was written in
    when that is exact, else in KiB/MiB/GiB... (exact, or rounded to a tenth), and the
    byte count where the two differ: ``"1GiB (1073741824)"``, ``"512B"``,
    ``"953.7MiB (1000000000)"``."""
    if nbytes < 0:
        raise UnitError(f"{nbytes} is a negative size")
    shown = format_like(nbytes, written, "size") if written else None
    if shown is None:
        exact = format_size(nbytes)
        shown = exact if not exact.endswith("B") or exact[-2].isalpha() else None
    if shown is None:  # not a whole number of KiB: rounded
        shown = approx_size(nbytes).replace(" ", "")
    digits = str(nbytes)
    return shown if shown in {digits, f"{digits}B"} else f"{shown} ({digits})"


#: How a warning about an ambiguous unit starts (one per file: ``specs.validate``).
AMBIGUOUS = "ambiguous unit: "


def ambiguity(text: str, unit: str) -> str | None:
    """Why ``text`` (a duration or size as written) may be read wrongly by a person:
    ``1GB`` is 2^30 bytes here and in the nats CLI but 10^9 in SI (and until this
    version here); ``1M`` is a month as a duration, not a minute. None when it is plain."""
    match = _ONE_TERM.match(text)
    if match is None:
        return None
    number, suffix = int(match.group(1)), match.group(2)
    if unit == "size" and suffix.upper() in _SI_LOOKING:
        power = _SIZE_POWERS[suffix.upper()]
        binary, decimal = number * 1024**power, number * 1000**power
        return (
            f"{text!r} means {binary} bytes ({number}{suffix[0].upper()}iB) as in the nats CLI, "
            f"not {decimal} (SI's 10^{3 * power}), which earlier versions of this tool read: "
            f"an unchanged spec's plan may show a change; write {number}{suffix[0].upper()}iB "
            f"or {decimal} to say which"
        )
    if unit == "duration" and suffix == "M":
        return (
            f"{text!r} means {30 * number} days (M is a month of 30 days, as in the nats "
            f"CLI), not {number} minute{'' if number == 1 else 's'} (m): write {30 * number}d "
            f"or {number}m to say which"
        )
    return None


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
