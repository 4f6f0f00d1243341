"""The HCL reader (reconciler.importers.hcl on tree-sitter's grammar): what a block holds,
as the importer's evaluator reads it, and Terraform's reading kept where the grammar
reads otherwise. Every refusal is a SpecError at the file and line of what it refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reconciler.errors import SpecError
from reconciler.importers import hcl, terraform

TEXT = """# a comment
resource "jetstream_stream" "S" {
  name     = "S\\n\\"q\\" \\u00e9 ${var.x} $${y} %{ if true }a%{ endif }"
  blanks   = "  two  spaces "
  empty    = ""
  subjects = ["a", "b",]
  max_age  = 60 * 60 * -1
  negative = -5
  exponent = 1e3
  fraction = 2.5
  flag     = true
  nothing  = null
  object   = { a = 1, "b" = 2, c: [3] }
  ref      = jetstream_stream.X.id
  call     = max(1, 2)
  heredoc  = <<-EOT
    hi ${x}
    EOT
  mirror {
    name = "M"
  }
  mirror {
    name = "N"
  }
}
variable "days" { default = 7 }
locals {
  prefix = "orders"
}
provider "jetstream" {}
"""


def test_a_block_holds_literals_as_values_and_other_expressions_as_their_text() -> None:
    stream, variable, local = hcl.parse(TEXT, 10, "main.tf")
    assert (stream.kind, stream.label, stream.line) == ("jetstream_stream", "S", 11)
    assert stream.body == {
        "name": 'S\n"q" é ${var.x} $${y} %{ if true }a%{ endif }',
        "blanks": "  two  spaces ",
        "empty": "",
        "subjects": ["a", "b"],
        "max_age": "${60 * 60 * -1}",
        "negative": -5,
        "exponent": "${1e3}",  # hcl_eval reads it exactly, never as a float
        "fraction": 2.5,
        "flag": True,
        "nothing": None,
        "object": {"a": 1, "b": 2, "c": [3]},
        "ref": "${jetstream_stream.X.id}",
        "call": "${max(1, 2)}",
        "heredoc": "<<-EOT\n    hi ${x}\n    EOT",
        "mirror": [{"name": "M"}, {"name": "N"}],
    }
    assert stream.lines["name"] == 12 and stream.lines["mirror"] == 28
    assert stream.lines["heredoc"] == 25
    assert (variable.kind, variable.label, variable.body) == ("variable", "days", {"default": 7})
    assert (local.kind, local.label, local.body) == ("locals", "", {"prefix": "orders"})


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("1e3", "${1e3}"),
        ("1E+3", "${1E+3}"),
        ("5-1e3", "${5-1e3}"),
        ("[1e3, 2]", ["${1e3}", 2]),
        ('"1e3 in a string"', "1e3 in a string"),
    ],
)
def test_an_exponent_without_a_fraction_is_a_number_as_terraform_reads_it(
    value: str, read: Any
) -> None:
    """The grammar lexes ``1e3`` as ``1`` then a name (a syntax error); Terraform reads
    a number."""
    (block,) = hcl.parse(f'resource "t" "r" {{\n  a = {value}\n  b-1e3 = 1\n}}\n', 1, "m.tf")
    assert block.body == {"a": read, "b-1e3": 1}


def refused(text: str) -> str:
    with pytest.raises(SpecError) as raised:
        hcl.parse(text, 1, "main.tf")
    (problem,) = raised.value.problems
    return f"{problem.location.file}:{problem.location.line}: {problem.message}"


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("  a = 0x10\n", "main.tf:3: invalid HCL: '0x10' is not a number"),
        ('  a = "two\nlines"\n', "main.tf:3: a quoted string ends at its line"),
        ('  a = "${x} and\nmore"\n', "main.tf:3: a quoted string ends at its line"),
        ('  a = "\\q"\n', "main.tf:3: invalid HCL"),
        ('  a = "A\\q"\n', "main.tf:3: invalid HCL"),
        ('  n = "B"\n  a = "x\\q"\n', "main.tf:4: invalid HCL"),
        ('  a = "\\uD800"\n', "main.tf:3: invalid escape sequence"),
        ("  a = 1\n  a = 2\n", "main.tf:4: the argument 'a' is set twice (the first at line 3)"),
        ("  a = 1\n  a {\n  }\n", "main.tf:4: 'a' is set both as an argument and as a block"),
        ("  a = [1\n", "main.tf:"),
    ],
    ids=[
        "hexadecimal",
        "newline",
        "newline-after-template",
        "escape",
        "escape-after-text",
        "escape-after-an-argument",
        "surrogate",
        "twice",
        "argument-and-block",
        "unclosed",
    ],
)
def test_what_terraform_refuses_is_refused_at_its_line(line: str, said: str) -> None:
    """The grammar reads hexadecimal, a newline in a quoted string, an argument set
    twice (python-hcl2 kept the last); Terraform refuses each."""
    message = refused(f'\nresource "t" "r" {{\n{line}}}\n')
    assert message.startswith(said), message


def test_a_syntax_error_is_at_its_line() -> None:
    message = refused('resource "t" "r" {\n  a = 1\n  b = = 2\n}\n')
    assert message.startswith("main.tf:3: invalid HCL"), message


def test_a_resource_block_without_its_two_labels_is_refused() -> None:
    message = refused('\nresource "jetstream_stream" {\n  name = "S"\n}\n')
    assert message.startswith("main.tf:2: a resource block has 2 label(s), not 1"), message


def test_a_label_with_a_line_break_is_refused_at_its_line() -> None:
    """Found by mutating the provider's example: a SpecError, never an internal one."""
    message = refused('\nresource "jetstream_stream" "OR\nDERS" {\n  name = "S"\n}\n')
    assert message.startswith("main.tf:2: a quoted string ends at its line"), message


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "(" * n + "1" + ")" * n,
        lambda n: "[" * n + "1" + "]" * n,
        lambda n: " * ".join(["2"] * (n + 1)),
        lambda n: "{a = " * n + "1" + "}" * n,
    ],
)
def test_nesting_is_read_to_its_bound_and_refused_past_it(make: Any) -> None:
    text = 'resource "t" "r" {{\n  a = 1\n  b = {}\n}}\n'
    hcl.parse(text.format(make(hcl.MAX_NESTING - 2)), 1, "main.tf")
    message = refused(text.format(make(hcl.MAX_NESTING + 1)))
    assert message.startswith("main.tf:3: nested too deeply"), message


def test_a_bare_name_is_a_reference_not_text(tmp_path: Path) -> None:
    """``name = ORDERS`` names something (Terraform refuses it: a resource type needs an
    attribute); python-hcl2 read it as the text "ORDERS" and the import took it."""
    (block,) = hcl.parse('resource "t" "r" {\n  a = ORDERS\n}\n', 1, "main.tf")
    assert block.body == {"a": "${ORDERS}"}
    path = tmp_path / "main.tf"
    path.write_text('resource "jetstream_stream" "S" {\n  name = ORDERS\n  subjects = ["s"]\n}\n')
    with pytest.raises(SpecError) as raised:
        terraform.load([path])
    (problem,) = raised.value.problems
    assert (problem.location.file, problem.location.line) == (str(path), 2), problem
    assert "'ORDERS' is not resolved" in problem.message, problem.message
