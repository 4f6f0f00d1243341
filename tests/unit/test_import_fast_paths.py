"""The Terraform importer's fast paths give what its slow paths give, on tricky inputs:
the block cutter that looks for line ends only after a top-level block has closed, the
arithmetic that skips Python's parser for a text holding no number, the value of a
string with nothing to interpolate, the spec fields' locations."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reconciler.importers import hcl, hcl_eval, terraform
from reconciler.locations import Location

#: Pieces of HCL text whose quotes, brackets, comments, heredocs and line ends the cutter
#: must follow (valid or not: an unbalanced text is one piece either way).
_HCL_PIECES = st.sampled_from(
    [
        "\n",
        "\r\n",
        " ",
        'resource "a" "b" {',
        "locals {",
        "}",
        "{",
        "]",
        "[1, (2)]",
        "(",
        ")",
        "x = 1",
        '"a } string"',
        '"${ {a = "}"} }"',
        '"%{ if x }}%{ endif }"',
        '"$${x} %%{y}"',
        '"\\" }"',
        '"unterminated',
        "# } comment",
        "// { comment",
        "/* } \n { */",
        "/* unterminated",
        "<<EOT\n} x\nEOT",
        "<<-EOT\n  }\n  EOT",
        "<<EOT\nnever closed",
    ]
)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_HCL_PIECES, max_size=30).map("".join))
def test_the_cutter_cuts_where_it_cut_looking_at_every_line_end(text: str) -> None:
    """blocks() looks for a line's end only once a top-level block has closed (elsewhere
    a line end decides nothing): the same pieces as with every line end looked at."""
    fast = hcl.blocks(text)
    slow_pattern = hcl._IN_CODE_INSIDE
    try:
        hcl._IN_CODE_INSIDE = hcl._IN_CODE  # every line end a token, as before
        slow = hcl.blocks(text)
    finally:
        hcl._IN_CODE_INSIDE = slow_pattern
    assert fast == slow
    assert "".join(piece for _, piece in fast) == text


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return ("value", call())
    except hcl_eval.Unreadable as err:
        return ("unreadable", str(err))


_ARITHMETIC = st.lists(
    st.sampled_from(
        [
            "1",
            "60",
            "99999999999999999999",
            "1e3",
            "1e999",
            "2.5e3",
            "1_000",
            "0x10",
            ".5",
            "5j",
            "S1",
            "a-1e999",
            "var.a-1",
            "jetstream_stream.S1.id",
            "é1",
            "x²5",
            "٣",
            '"s1"',
            '"9"',
            " * ",
            " - ",
            "-",
            "+",
            "//",
            "(",
            ")",
            ".",
            " ",
            "True",
        ]
    ),
    max_size=8,
).map("".join)


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(_ARITHMETIC)
@example("jetstream_stream.S1.id - 1e999")  # a refusal: its number out of range
@example("var.x * (99999999999999999999)")
@example("var.x\t-\n5")
def test_arithmetic_of_a_text_without_a_number_is_what_python_s_parser_gives(text: str) -> None:
    """arithmetic() skips the parser for a text in which no number can start: the same
    value or the same refusal as parsing it."""
    stripped = text.strip()
    fast = _outcome(lambda: hcl_eval.arithmetic(text))
    if len(stripped) > hcl_eval.MAX_EXPRESSION:
        return
    slow = _outcome(lambda: hcl_eval._evaluated.__wrapped__(stripped))
    assert fast == slow


@pytest.mark.parametrize("text", ["jetstream_stream.S1.id", "var.days", "local.a-b"])
def test_a_reference_is_never_given_to_python_s_parser(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each resource's reference to another (``jetstream_stream.S1.id``) was parsed by
    Python's parser, one text per resource, past the cache's size."""
    parsed: list[str] = []
    monkeypatch.setattr(hcl_eval.ast, "parse", lambda text, mode: parsed.append(text))
    assert hcl_eval.arithmetic(text) is None
    assert parsed == []


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(alphabet=st.sampled_from(list('ab $%{}<\n\\"-1')), max_size=12))
def test_a_string_without_a_template_is_its_own_value(text: str) -> None:
    """Module.value returns a string holding no ``${``, ``%{`` nor ``<<`` as it is:
    what working it out as a template gives."""
    if "${" in text or "%{" in text or "<<" in text:
        return
    module = hcl_eval.Module()
    assert module.value(text) == text
    assert module._template(text) == text


def test_a_heredoc_an_escape_and_an_interpolation_are_still_worked_out() -> None:
    module = hcl_eval.Module(locals={"a": "x"})
    assert module.value("<<EOT\nhi\nEOT") == "hi\n"
    assert module.value("$${a} %%{b}") == "${a} %{b}"
    assert module.value("a ${local.a}") == "a x"


def test_spec_fields_are_located_in_the_mapping_s_order() -> None:
    """_spec_locations walks the attributes set, not the table: the same fields, in the
    table's order, each at the first attribute mapping to it (placement_cluster and
    placement_tags both say where ``placement`` is)."""
    for kind, table in terraform._SPEC_FIELD.items():
        attrs = [*reversed(table), "unknown_attribute"]
        where = {a: Location("main.tf", n) for n, a in enumerate(attrs, 1)}
        resource = terraform.Resource(kind, "x", {}, Location("main.tf", 1), where)
        slow = {f: resource.at(a) for a, f in table.items() if a in resource.where}
        fast = terraform._spec_locations(resource)
        assert list(fast.items()) == list(slow.items())
        half = dict(list(where.items())[::2])
        resource = terraform.Resource(kind, "x", {}, Location("main.tf", 1), half)
        slow = {f: resource.at(a) for a, f in table.items() if a in resource.where}
        assert list(terraform._spec_locations(resource).items()) == list(slow.items())


#: Attribute values whose text a reader could misjudge: literals the fast path reads from
#: the text, and near misses it must leave to the tree (escapes, templates, a sign, too
#: many digits, a comment inside, a string across lines).
_VALUES = st.sampled_from(
    [
        "0",
        "007",
        "123456789012345678",
        "1234567890123456789",
        "1e3",
        "2.5",
        "-5",
        "- 5",
        "true",
        "false",
        "null",
        "truex",
        '""',
        '"plain text"',
        '"a $ sign"',
        '"100%"',
        '"${var.x}"',
        '"$${x}"',
        '"%{ if true }y%{ endif }"',
        '"tab\\tescaped"',
        '"quote \\" inside"',
        '"é ünï"',
        '"\\u00e9"',
        '[1, "a", true, null]',
        '{ a = "b", "c" = 1 }',
        "( 5 )",
        "/* c */ 5",
        "5 # trailing",
        "jetstream_stream.S1.id",
        "60 * 60",
    ]
)
_BETWEEN = st.sampled_from(["", "  # a comment\n", "\n", "  /* block */\n", "  // line\n"])


@st.composite
def _block(draw: st.DrawFn) -> str:
    keys = draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4, unique=True))
    lines = "".join(f"{draw(_BETWEEN)}  {key} = {draw(_VALUES)}\n" for key in keys)
    nested = "  inner {\n    x = " + draw(_VALUES) + "\n  }\n" if draw(st.booleans()) else ""
    return f'resource "t" "r" {{{draw(_BETWEEN).rstrip()}\n{lines}{nested}{draw(_BETWEEN)}}}\n'


def _read(text: str) -> Any:
    try:
        return ("blocks", hcl.parse(text, 1, "main.tf"))
    except Exception as err:
        return ("refused", type(err).__name__, str(err))


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(_block())
def test_values_read_from_their_text_are_what_the_tree_gives(text: str) -> None:
    """hcl reads a literal (a short number, a string with no escape or template, true,
    false, null) from its text, and finds a block's body where it usually stands: the
    same blocks, values, lines and refusals as walking the tree for each."""
    fast = _read(text)
    plain = hcl._PLAIN
    try:
        hcl._PLAIN = re.compile(rb"(?!)(x)?(y)?(z)?")  # never: every value from the tree
        slow = _read(text)
    finally:
        hcl._PLAIN = plain
    assert fast == slow
