"""How a value is shown to people and what of it may be shown at all: one home.

Every renderer (plan text and Markdown, drift text, Markdown and HTML, the fleet
report), the GitHub Action and the Pulumi provider format and redact values here:

- :func:`redact` replaces whatever is stored under a secret-looking key (password, token,
  seed, creds, nkey, ...) by ``"<redacted>"``, at any depth, metadata included;
- :func:`display` gives one short line: ``(absent)`` for a missing value, ``unlimited``
  for ``-1`` in a limit, durations in human units, sizes in binary units with the byte
  count (``1GiB (1073741824)``, ``units.readable_size``), JSON otherwise (strings
  quoted, so an empty string is visible);
- :func:`field_label` names a bucket's stream field as its spec does (``max_age (ttl)``);
- :func:`printable` makes text from a spec, a file name or the server inert on a terminal
  and in a CI log: the one escaping function for text (Markdown's is
  ``render.markdown.cell``/``code``; GitHub's workflow commands' is ``action.runner``).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from reconciler.identity import BUCKET_KINDS
from reconciler.specs.fields import UNIT_FIELDS, Unit, is_secret
from reconciler.specs.units import format_duration, format_like, readable_size

REDACTED = "<redacted>"
ABSENT = "(absent)"
UNLIMITED = "unlimited"
MAX_WIDTH = 120

#: Stream fields of a bucket as the bucket's spec (and Pulumi inputs) name them.
BUCKET_FIELD_NAMES: Mapping[str, str] = {
    "num_replicas": "replicas",
    "max_msgs_per_subject": "history",
    "max_age": "ttl",
    "max_msg_size": "max_value_size",
    "subject_delete_marker_ttl": "limit_marker_ttl",
}
_KV_ONLY = frozenset({"history", "max_value_size", "limit_marker_ttl"})

#: Count limits where -1 means "no limit" (sizes are limits too).
LIMIT_FIELDS = frozenset(
    {
        "max_msgs",
        "max_consumers",
        "max_msgs_per_subject",
        "max_deliver",
        "max_ack_pending",
        "max_waiting",
        "max_batch",
        "max_request_batch",
        "max_request_max_bytes",
    }
)


#: Unicode categories never shown as they are: controls (C0 with ESC, CR, LF and NUL,
#: DEL, C1 with CSI and OSC's 0x9d), format characters (bidi overrides such as U+202E,
#: isolates, zero-width ones) and the line and paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: Whitespace then a colon: where a GitHub workflow command (``::error::``) would start.
_COMMAND_START = re.compile(r"^(\s*):")
#: What starts a GitHub workflow command in the runner's older form (``##[error]msg``,
#: ``##[add-mask]``, ``##[stop-commands]``): the runner finds it anywhere in a line.
LEGACY_COMMAND = "##["


def printable(text: str) -> str:
    """``text`` with every character that could move the cursor, clear the screen, open
    a hyperlink (OSC 8), change colours, reorder what follows (bidi overrides) or start
    a new line written as an escape (``\\x1b``, ``\\u202e``, ``\\n``), a leading
    colon as ``\\x3a`` and the ``#`` of ``##[`` as ``\\x23``: no line can then hold a
    GitHub workflow command made of it (``::error::`` at its start, or the runner's older
    ``##[error]`` anywhere in it). Text without such characters is returned as it is."""
    if text.isprintable() and not text.lstrip().startswith(":") and LEGACY_COMMAND not in text:
        return text
    escaped = "".join(_escaped(char) for char in text).replace(LEGACY_COMMAND, "#\\x23[")
    return _COMMAND_START.sub(lambda match: match.group(1) + "\\x3a", escaped, count=1)


def inert_json(text: str) -> str:
    """JSON text (as ``json.dumps`` writes it) that no GitHub runner reads a workflow
    command in when it is printed to a job log: the ``#`` of every ``##[`` (only ever
    inside a string) written as ``\\u0023``, which every JSON reader reads back as ``#``.
    (``::`` cannot start a line of it: every line starts with a bracket, a brace, blanks
    or a quote.)"""
    return text.replace(LEGACY_COMMAND, "#\\u0023[")


def hidden(char: str) -> bool:
    """Whether ``char`` is never shown as it is (:data:`_HIDDEN_CATEGORIES`)."""
    return unicodedata.category(char) in _HIDDEN_CATEGORIES


def _escaped(char: str) -> str:
    if not hidden(char):
        return char
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def redact(value: Any, *, path: str = "") -> Any:
    """``value`` with anything stored under a secret-looking key replaced by a marker."""
    if is_secret(path):
        return REDACTED if value is not None else None
    if isinstance(value, Mapping):
        return {str(k): redact(v, path=str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value


def unit_of(kind: str, path: str) -> Unit | None:
    """Whether the field at ``path`` of a ``kind`` holds a duration or a size."""
    parts = path.split(".")
    tables = [UNIT_FIELDS.get(kind, {}), UNIT_FIELDS["Stream"]]  # buckets diff as streams
    for table in tables:
        for pattern, unit in table.items():
            wanted = pattern.split(".")
            if len(wanted) == len(parts) and all(
                w == p or (w == "*" and p.isdigit()) for w, p in zip(wanted, parts, strict=True)
            ):
                return unit
    return None


def _leaf(path: str) -> str:
    parts = [part for part in path.split(".") if not part.isdigit()]
    return parts[-1] if parts else path


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _durations(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_integer(v) and v >= 0 for v in value)


def _human(value: int, unit: Unit | None, leaf: str) -> str | None:
    if value == -1 and (unit == "size" or leaf in LIMIT_FIELDS):
        return UNLIMITED
    if unit == "duration" and value >= 0:
        return format_duration(value)
    if unit == "size" and value >= 0:
        return readable_size(value)
    return None


def display(
    value: Any,
    *,
    path: str = "",
    kind: str = "Stream",
    limit: int = MAX_WIDTH,
    written: str | None = None,
) -> str:
    """A value as one short line: secrets redacted, human units, JSON otherwise.

    ``written`` is how the spec wrote this field (``"14d"``): a duration or size is then
    shown in that unit (``30d``, not ``4w2d``), so both sides of a change read alike.
    """
    if value is None:
        return ABSENT
    shown = redact(value, path=path)
    unit = unit_of(kind, path)
    if written and unit == "size" and _integer(shown) and shown >= 0:
        return readable_size(shown, written)
    if written and unit and _integer(shown):
        alike = format_like(shown, written, unit)
        if alike is not None:
            return alike
    if _integer(shown):
        human = _human(shown, unit, _leaf(path))
        if human is not None:
            return human
    if _durations(shown) and unit is None and unit_of(kind, f"{path}.0") == "duration":
        return "[" + ", ".join(format_duration(v) for v in shown) + "]"
    text = json.dumps(shown, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
    text = printable(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def field_label(kind: str, path: str) -> str:
    """``max_age (ttl)`` for a bucket's stream field, the path itself otherwise."""
    alias = bucket_field_name(kind, path)
    return path if alias == path else f"{path} ({alias})"


def written_as(kind: str, written: Mapping[str, str]) -> Mapping[str, str]:
    """A spec's written texts keyed by the config path a plan shows (a bucket's ``ttl``
    is its stream's ``max_age``): for other kinds ``written`` itself (not a copy: one per
    plan entry was 6 MiB at 101,000 resources)."""
    if kind not in BUCKET_KINDS:
        return written
    by_bucket_name = {bucket_field_name(kind, path): path for path in BUCKET_FIELD_NAMES}
    return {by_bucket_name.get(path, path): text for path, text in written.items()}


def bucket_field_name(kind: str, path: str) -> str:
    """The name a bucket spec gives a stream field (``max_age`` → ``ttl``), else ``path``."""
    if kind not in BUCKET_KINDS:
        return path
    alias = BUCKET_FIELD_NAMES.get(path)
    if alias is None or (kind == "ObjectStore" and alias in _KV_ONLY):
        return path
    return alias


#: Characters a KeyValue value may hold and still be shown as text: line breaks and tabs
#: (a file an editor saved ends in one). ``display`` shows them as ``\n``, ``\r``, ``\t``.
_TEXT_BREAKS = frozenset("\n\r\t")


def entry_text(data: bytes) -> str | None:
    """A KeyValue value as text when it is text: UTF-8 whose characters are printable,
    line breaks and tabs included (``b"hello\\n"`` is ``"hello\\n"``, which the plan
    shows as ``"hello\\n"`` and an export writes as text); None: show it as base64."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.isprintable() or all(c.isprintable() or c in _TEXT_BREAKS for c in text):
        return text
    return None
