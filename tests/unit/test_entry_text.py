"""Which KeyValue values read as text (``model.values.entry_text``), the one rule the
plan (``planning.entries.shown``) and an exported entry (``export.entry_document``) use."""

from __future__ import annotations

import base64

import pytest

from reconciler.locations import Location
from reconciler.model.values import display, entry_text
from reconciler.planning.entries import shown
from reconciler.planning.export import entry_document
from reconciler.specs.spec import Spec


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"on", "on"),
        (b"hello\n", "hello\n"),
        (b'{\r\n  "a": 1\r\n}\r\n', '{\r\n  "a": 1\r\n}\r\n'),
        (b"a\tb\n", "a\tb\n"),
        ("héllo\n".encode(), "héllo\n"),
        (b"\x1b[31mred\n", None),  # a terminal escape: base64, never raw
        (b"\x00\x01", None),
        (b"\xff\xfe", None),
    ],
)
def test_text_with_line_breaks_is_text_and_controls_are_not(data: bytes, text: str | None) -> None:
    assert entry_text(data) == text


def test_a_final_line_break_is_shown_as_a_visible_marker_not_base64() -> None:
    value = base64.b64encode(b"hello\n").decode()
    assert shown(value, secret=False) == "hello\n"
    assert display(shown(value, secret=False), path="value") == '"hello\\n"'
    spec = Spec(
        kind="KeyValueEntry",
        name="motd",
        stream="app",
        config={"value": value},
        source=Location("specs.yaml", 1),
    )
    assert entry_document(spec) == {
        "kind": "KeyValueEntry",
        "bucket": "app",
        "key": "motd",
        "value": "hello\n",
    }
