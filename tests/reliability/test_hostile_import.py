"""Hostile files given to ``reconcile import`` end in one ``FILE:LINE`` error, never a
traceback, and in bounded work; the Terraform importer's work grows linearly with the file.

Every user path runs the CLI on real files in ``tmp_path``. Linearity is counted, never
timed: the lines the importer's own module executes for N and 4N resources, and the
calls and input sizes of the HCL parser.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from cli_runner import reconcile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.importers import hcl, hcl_eval, terraform

#: Five lines: the hostile resource starts at line 6, its ``max_msgs`` is on line 9.
BEFORE = 'resource "jetstream_stream" "OK" {\n  name     = "OK"\n  subjects = ["ok"]\n}\n\n'
HOSTILE = (
    'resource "jetstream_stream" "S" {\n'
    '  name     = "S"\n'
    '  subjects = ["s"]\n'
    "  max_msgs = VALUE\n"
    "}\n"
)
LINE = 9
INT64_MAX = 2**63 - 1


def hostile(value: str) -> str:
    return HOSTILE.replace("VALUE", value)


def import_tf(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "main.tf").write_text(text, encoding="utf-8")
    return reconcile("import", "--from", "terraform", "main.tf", "--out", "specs", cwd=tmp_path)


def refused_at(
    done: subprocess.CompletedProcess[str], tmp_path: Path, line: int, said: str, figures: Any
) -> None:
    """One error line at ``main.tf:LINE`` saying ``said``; no traceback, nothing written
    (one more hostile input tried, for RELIABILITY.md)."""
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1 and len(errors[0]) < 500, done.stderr[:2000]
    assert errors[0].startswith(f"main.tf:{line}: "), errors[0]
    assert said in errors[0], errors[0]
    assert not (tmp_path / "specs").exists()
    figures.add("inputs_tried")


# --- numbers ------------------------------------------------------------------------------


def test_4300_digit_numbers_multiplied_are_an_error_at_their_line(
    tmp_path: Path, figures: Any
) -> None:
    """The reported case: a traceback (Python's limit on int-to-text conversion)."""
    big = "9" * 4300
    done = import_tf(tmp_path, BEFORE + hostile(f"{big} * {big}"))
    refused_at(done, tmp_path, LINE, "max_msgs", figures)


def test_a_number_too_long_for_python_to_read_is_an_error_at_its_line(
    tmp_path: Path, figures: Any
) -> None:
    done = import_tf(tmp_path, BEFORE + hostile("9" * 5000))
    refused_at(done, tmp_path, LINE, "a number of 5000 digits: out of range", figures)


@pytest.mark.parametrize(
    "value",
    [
        str(INT64_MAX + 1),
        "1000000 * 1000000 * 1000000 * 1000000",  # small numbers, a 25-digit product
        "-9223372036854775807 - 2",
        "1e999999999",  # a huge exponent: never 10**999999999
        "1e19",
    ],
)
def test_a_number_out_of_the_int64_range_is_an_error_at_its_line(
    tmp_path: Path, value: str, figures: Any
) -> None:
    done = import_tf(tmp_path, BEFORE + hostile(value))
    refused_at(done, tmp_path, LINE, "must fit in a signed 64-bit integer", figures)


def test_whole_numbers_in_exponent_form_are_read_exactly(tmp_path: Path) -> None:
    text = hostile("2.5e3").replace("}\n", "  max_consumers = 1e3\n}\n")
    done = import_tf(tmp_path, text)
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "specs" / "stream-S.yaml").read_text()
    assert "max_msgs: 2500" in written and "max_consumers: 1000" in written, written


# --- shapes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "(" * 800 + "1" + ")" * 800,  # brackets deeper than the parser's stack
        "[" * 800 + "1" + "]" * 800,
        " * ".join(["2"] * 3000),  # a chain of operators, as deep
    ],
    ids=["parentheses", "lists", "operators"],
)
def test_nesting_deeper_than_the_parser_is_an_error_at_its_line(
    tmp_path: Path, value: str, figures: Any
) -> None:
    done = import_tf(tmp_path, BEFORE + hostile(value))
    refused_at(done, tmp_path, LINE, "nested too deeply", figures)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("0x10", "is not a number"),
        ('"two\nlines"', "a quoted string ends at its line"),
        ("1\n  max_msgs = 2", "the argument 'max_msgs' is set twice"),
        ('"\\q"', "invalid HCL"),
    ],
    ids=["hexadecimal", "newline-in-string", "argument-twice", "bad-escape"],
)
def test_what_terraform_refuses_and_the_grammar_reads_is_an_error_at_its_line(
    tmp_path: Path, value: str, said: str, figures: Any
) -> None:
    """tree-sitter's grammar reads these; Terraform refuses them, and so does the import
    (an argument set twice was imported with its last value)."""
    done = import_tf(tmp_path, BEFORE + hostile(value))
    line = LINE + 1 if "twice" in said else LINE
    refused_at(done, tmp_path, line, said, figures)


def test_a_long_expression_is_not_evaluated(tmp_path: Path, figures: Any) -> None:
    """200 operations: parsed, but longer than the importer evaluates."""
    done = import_tf(tmp_path, BEFORE + hostile(" * ".join(["1"] * 200)))
    refused_at(done, tmp_path, LINE, f"longer than {terraform.MAX_EXPRESSION} characters", figures)


def test_a_file_over_the_size_cap_is_refused_unparsed(tmp_path: Path, figures: Any) -> None:
    """A very long string: 9 MiB of it, over the 8 MiB cap (the parser would hold ~2 GiB)."""
    description = "a" * (9 * 2**20)
    text = hostile("1").replace("}\n", f'  description = "{description}"\n}}\n')
    done = import_tf(tmp_path, text)
    refused_at(done, tmp_path, 1, "larger than the 8 MiB cap on a .tf file", figures)


@pytest.mark.parametrize(
    ("kind", "attribute", "said"),
    [
        ("jetstream_stream", 'mirror = "ORDERS"', "mirror: jetstream_stream.S: expected a list"),
        ("jetstream_stream", "subject_transform = [1]", "subject_transform.0: "),
        ("jetstream_stream", "mirror {\n    external = 5\n  }", "mirror.0.external: "),
        ("jetstream_consumer", "backoff = 5", "backoff: jetstream_consumer.S: expected a list"),
        ("jetstream_consumer", 'sample_freq = "x"', "expected an integer, got 'x'"),
    ],
    ids=["string-block", "number-in-block-list", "nested-block", "number-list", "text-number"],
)
def test_a_value_of_the_wrong_shape_is_an_error_at_its_line(
    tmp_path: Path, kind: str, attribute: str, said: str, figures: Any
) -> None:
    """A string where the provider has a block, a number where it has a list: each was
    a traceback (AttributeError, TypeError, ValueError) in the mapping."""
    text = (
        f'resource "{kind}" "S" {{\n  name = "S"\n  durable_name = "S"\n'
        f'  stream_id = "JETSTREAM_STREAM_S"\n  {attribute}\n}}\n'
    )
    refused_at(import_tf(tmp_path, BEFORE + text), tmp_path, 10, said, figures)


def test_a_state_file_nested_past_the_json_parsers_stack_is_an_error(
    tmp_path: Path, figures: Any
) -> None:
    """100,000 nested lists for a value: json.loads ran out of stack (RecursionError)."""
    state = {"version": 4, "resources": [{"type": "jetstream_stream", "name": "S"}]}
    text = json.dumps(state).replace('"S"', '"S", "x": ' + "[" * 100_000 + "]" * 100_000)
    (tmp_path / "terraform.tfstate").write_text(text)
    done = reconcile("import", "--from", "terraform", "terraform.tfstate", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.startswith("terraform.tfstate:1: nesting deeper than"), done.stderr
    figures.add("inputs_tried")


NACK_STREAM = "apiVersion: jetstream.nats.io/v1beta2\nkind: Stream\nmetadata: {name: s}\nspec:\n"


@pytest.mark.parametrize(
    ("manifest", "line", "said"),
    [
        (NACK_STREAM + "  name: S\n  placement: east\n", 6, "spec.placement: expected an object"),
        (NACK_STREAM + "  name: S\n  sources: [1]\n", 6, "spec.sources.0: expected an object"),
        (
            NACK_STREAM + "  name: S\n  maxAge: " + "9" * 400 + "h\n",
            6,
            "is out of range for a Go duration",  # was a float overflowing to infinity
        ),
        (
            "apiVersion: jetstream.nats.io/v1beta2\nkind: Account\nmetadata: {name: a}\n"
            "spec:\n  creds: /etc/creds\n",
            5,
            "spec.creds: expected an object, got a string (the value is not shown",
        ),
        (
            "apiVersion: jetstream.nats.io/v1beta2\nkind: Account\nmetadata: team-a\n",
            3,
            "metadata: expected an object",
        ),
    ],
    ids=["placement", "sources", "duration", "account-creds", "account-metadata"],
)
def test_a_nack_field_of_the_wrong_shape_is_an_error_at_its_line(
    tmp_path: Path, manifest: str, line: int, said: str, figures: Any
) -> None:
    (tmp_path / "main.yaml").write_text(manifest)
    done = reconcile("import", "--from", "nack", "main.yaml", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.startswith(f"main.yaml:{line}: ") and said in done.stderr, done.stderr
    assert not (tmp_path / "specs").exists()
    figures.add("inputs_tried")


@pytest.mark.parametrize(
    ("importer", "file", "text", "line", "code"),
    [
        (
            "terraform",
            "main.tf",
            'resource "jetstream_stream" "S" {\n  name     = "ORD\\u202eERS"\n'
            '  subjects = ["s.>"]\n}\n',
            2,
            "U+202E",
        ),
        (
            "terraform",
            "main.tf",
            'resource "jetstream_stream" "S" {\n  name     = "S"\n  subjects = ["s.>"]\n}\n'
            'resource "jetstream_consumer" "C" {\n  stream_id      = jetstream_stream.S.id\n'
            '  durable_name   = "C"\n  filter_subject = "s.\\u001bx"\n}\n',
            8,
            "U+001B",
        ),
        ("nack", "main.yaml", NACK_STREAM + "  name: ORD\u202eERS\n  subjects: [s]\n", 5, "U+202E"),
        (
            "nats-cli",
            "main.json",
            '{"name": "OR\\u200bD", "subjects": ["s"], "retention": "limits", "storage": "file"}\n',
            1,
            "U+200B",
        ),
    ],
    ids=["terraform-name", "terraform-filter", "nack-raw-name", "nats-cli-name"],
)
def test_a_name_or_subject_no_spec_may_hold_is_an_error_at_its_line(
    tmp_path: Path, importer: str, file: str, text: str, line: int, code: str, figures: Any
) -> None:
    """A name or subject holding a control or bidi character (docs/spec-format.md) is
    refused as ``validate`` refuses it, at the line of the file that sets it, the value
    escaped; nothing is written."""
    (tmp_path / file).write_text(text, encoding="utf-8")
    done = reconcile("import", "--from", importer, file, "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"{file}:{line}: "), done.stderr
    assert f"holds {code}" in errors[0], errors[0]
    assert not any(c in done.stderr for c in "\u202e\u200b\x1b"), ascii(done.stderr)
    assert not (tmp_path / "specs").exists()
    figures.add("inputs_tried")


# --- linear work --------------------------------------------------------------------------

STREAM_AND_CONSUMER = """# group {i}: a stream and its consumer
resource "jetstream_stream" "S{i}" {{
  name        = "S{i}"
  subjects    = ["s{i}.>"]
  description = "braces {{ in strings }} and an escaped $${{template}}"
  max_age     = 60 * 60 * 24
}}

resource "jetstream_consumer" "C{i}" {{
  stream_id    = jetstream_stream.S{i}.id
  durable_name = "C{i}"
  backoff      = [1, 5]
}}
"""


def tf_file(folder: Path, groups: int) -> Path:
    path = folder / f"main{groups}.tf"
    path.write_text("".join(STREAM_AND_CONSUMER.format(i=i) for i in range(groups)))
    return path


def lines_run_in_the_importer(path: Path) -> int:
    """How many lines of reconciler/importers/terraform.py and hcl_eval.py (the
    expressions) run to import ``path``."""
    modules = {terraform.__file__, hcl_eval.__file__}
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        nonlocal count
        count += event == "line"
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        return local if frame.f_code.co_filename in modules else None

    sys.settrace(calls)
    try:
        terraform.load([path])
    finally:
        sys.settrace(None)
    return count


def test_the_importers_work_grows_linearly_with_the_file(tmp_path: Path) -> None:
    """4x the resources, at most 5x the lines run (it was 11.5x: every resource's line
    numbers were searched for down to the end of the file)."""
    small = lines_run_in_the_importer(tf_file(tmp_path, 30))
    large = lines_run_in_the_importer(tf_file(tmp_path, 120))
    assert large <= 5 * small, (small, large)


def state_file(folder: Path, streams: int) -> Path:
    """A terraform.tfstate of ``streams`` stream resources."""
    resources = [
        {
            "mode": "managed",
            "type": "jetstream_stream",
            "name": f"S{i}",
            "instances": [{"attributes": {"name": f"S{i}", "subjects": [f"s{i}.>"]}}],
        }
        for i in range(streams)
    ]
    path = folder / f"state{streams}" / "terraform.tfstate"
    path.parent.mkdir()
    path.write_text(json.dumps({"version": 4, "resources": resources}, indent=2))
    return path


def test_the_importers_work_on_a_state_file_grows_linearly(tmp_path: Path) -> None:
    """A state file's attribute lines were looked for among all of its locations once per
    resource (it was 15x for 4x the resources)."""
    small = lines_run_in_the_importer(state_file(tmp_path, 40))
    large = lines_run_in_the_importer(state_file(tmp_path, 160))
    assert large <= 5 * small, (small, large)


@pytest.fixture
def parser_inputs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The length of each text the HCL parser (tree-sitter) is given to parse."""
    sizes: list[int] = []
    parser = hcl._parser()

    class Counted:
        def parse(self, source: bytes) -> Any:
            sizes.append(len(source))
            return parser.parse(source)

    monkeypatch.setattr(hcl, "_parser", Counted)
    yield sizes


def test_the_parser_reads_each_block_once_and_never_the_whole_file(
    tmp_path: Path, parser_inputs: list[int]
) -> None:
    """The parser's work and memory are those of one block (its parse tree is ~80x the
    text): 300 resources are 300 parses, together the file's length, none longer than
    one stream and its consumer."""
    path = tf_file(tmp_path, 150)
    documents, _ = terraform.load([path])
    assert len(documents) == 300
    assert len(parser_inputs) == 300, len(parser_inputs)
    assert sum(parser_inputs) == len(path.read_bytes())
    assert max(parser_inputs) < len(STREAM_AND_CONSUMER.format(i=149)), max(parser_inputs)


@pytest.mark.slow
def test_30000_resources_are_30000_parses_of_one_block_each(
    tmp_path: Path, parser_inputs: list[int], figures: Any
) -> None:
    path = tf_file(tmp_path, 15_000)
    documents, _ = terraform.load([path])
    assert len(documents) == 30_000
    assert len(parser_inputs) == 30_000
    assert max(parser_inputs) < len(STREAM_AND_CONSUMER.format(i=14_999))
    figures.add("scale_resources_checked", 30_000)


def test_the_block_cutter_steps_over_strings_comments_and_heredocs() -> None:
    """Braces in strings, templates, comments and heredocs do not cut a block; the pieces
    join back to the file."""
    text = (
        "# } a comment\n"
        'resource "a" "b" {\n'
        '  x = "} ${ {a = "}"} } %{ if true }}%{ endif }"\n'
        "  /* } */ y = 1 // }\n"
        "  z = <<EOT\n"
        "}\n"
        "EOT\n"
        "}\n"
        'resource "a" "c" { x = [1, (2)] }\n'
        "locals {\n  a = 1\n}\n"
    )
    pieces = hcl.blocks(text)
    assert [first for first, _ in pieces] == [1, 9, 10]
    assert "".join(piece for _, piece in pieces) == text
    assert hcl.blocks('resource "a" "b" {\n  x = "}\n') == [(1, 'resource "a" "b" {\n  x = "}\n')]


# Pieces of valid HCL whose braces, quotes and newlines a naive cutter would misread.
_TRICKY_VALUES = st.sampled_from(
    [
        '"plain"',
        '"a } brace"',
        '"a { brace"',
        '"${jetstream_stream.S.id} and }"',
        '"%{ if true }yes%{ endif }"',
        '"$${literal} }"',
        '"escaped \\" quote }"',
        "[1, (2), [3]]",
        '{ a = "}", b = [1] }',
        "60 * 60",
        '<<EOT\n} not a brace\n  "not a quote\nEOT',
        "<<-EOT\n    indented }\n    EOT",
    ]
)
_TRICKY_COMMENTS = st.sampled_from(["", "# } a comment\n", "// { another\n", "/* }\n { */\n"])


@st.composite
def tricky_tf(draw: st.DrawFn) -> tuple[str, int]:
    """A .tf text of valid HCL and how many top-level blocks it has."""
    parts = []
    count = draw(st.integers(1, 5))
    for index in range(count):
        values = draw(st.lists(_TRICKY_VALUES, min_size=1, max_size=4))
        body = "".join(f"  a{n} = {value}\n" for n, value in enumerate(values))
        kind = draw(st.sampled_from(["resource", "locals", "variable"]))
        header = {"resource": f'resource "t" "r{index}"', "locals": "locals"}.get(
            kind, f'variable "v{index}"'
        )
        nested = "  inner {\n    b = 1\n  }\n" if draw(st.booleans()) else ""
        blank = draw(st.sampled_from(["", "\n", "\n\n"]))
        parts.append(f"{draw(_TRICKY_COMMENTS)}{header} {{\n{body}{nested}}}\n{blank}")
    return "".join(parts), count


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(tf=tricky_tf())
def test_parsing_block_by_block_reads_what_parsing_the_whole_file_reads(
    tf: tuple[str, int],
) -> None:
    """The cutter cuts after each block and never inside a string, template, comment or
    heredoc: the pieces join back to the file and, parsed one by one, hold exactly what
    the whole file does (blocks, values and lines)."""
    text, count = tf
    pieces = hcl.blocks(text)
    assert "".join(piece for _, piece in pieces) == text
    assert len(pieces) in (count, count + 1), pieces  # + the blank lines after the last
    whole = hcl.parse(text, 1, "main.tf")
    assert len(whole) == count
    merged = [block for first, piece in pieces for block in hcl.parse(piece, first, "main.tf")]
    assert merged == whole
