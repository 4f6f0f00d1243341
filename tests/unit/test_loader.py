"""Loading YAML/JSON spec files, nats CLI configs and backups, with FILE:LINE everywhere."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.errors import SpecError
from reconciler.locations import Lines, Location
from reconciler.specs import files, yaml_block, yaml_lines, yaml_plain
from reconciler.specs.document import Abort, Document
from reconciler.specs.loader import load_documents
from reconciler.specs.yaml_lines import compose_documents


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def problems_of(paths: list[Path]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_documents(paths)
    return [str(p) for p in caught.value.problems]


def test_yaml_documents_keep_the_line_of_every_value(tmp_path: Path) -> None:
    path = write(
        tmp_path / "s.yaml",
        "kind: Stream\nname: A\nsubjects:\n  - a.one\n  - a.two\n---\n\nkind: KeyValue\nname: b\n",
    )
    first, second = load_documents([path])
    assert first.body == {"kind": "Stream", "name": "A", "subjects": ["a.one", "a.two"]}
    assert first.source == Location(str(path), 1)
    assert first.locations["subjects.1"] == Location(str(path), 5)
    assert second.source == Location(str(path), 8)
    assert second.where("name") == Location(str(path), 9)


def test_where_falls_back_to_the_enclosing_field_then_the_document(tmp_path: Path) -> None:
    document = load_documents([write(tmp_path / "s.yaml", "kind: Stream\nmirror:\n  name: X\n")])[0]
    assert document.where("mirror.name.deeper").line == 3
    assert document.where("nowhere").line == 1


def test_empty_documents_are_skipped(tmp_path: Path) -> None:
    path = write(tmp_path / "s.yaml", "---\n---\n# only a comment\n---\nkind: Stream\nname: A\n")
    assert [d.body["name"] for d in load_documents([path])] == ["A"]


def test_json_object_and_list_files_carry_lines(tmp_path: Path) -> None:
    one = write(tmp_path / "one.json", '{\n  "kind": "Stream",\n  "name": "A"\n}\n')
    many = write(
        tmp_path / "many.json",
        '[\n {"kind": "Stream", "name": "B"},\n {"kind": "Stream",\n  "name": "C"}\n]',
    )
    documents = load_documents([one, many])
    assert [d.body["name"] for d in documents] == ["A", "B", "C"]
    assert documents[0].where("name").line == 3
    assert documents[2].source.line == 3
    assert documents[2].where("name").line == 4


def test_timestamps_stay_rfc3339_strings(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "kind: Consumer\npause_until: 2030-01-01T00:00:00Z\n")
    assert load_documents([path])[0].body["pause_until"] == "2030-01-01T00:00:00Z"


def test_merge_keys_are_expanded(tmp_path: Path) -> None:
    text = "base: &b {retention: limits, storage: file}\n---\nkind: Stream\nname: A\n"
    text += "<<: {storage: memory, max_msgs: 5}\nstorage: file\n"
    documents = load_documents([write(tmp_path / "s.yaml", text)])
    assert documents[1].body == {"max_msgs": 5, "kind": "Stream", "name": "A", "storage": "file"}


def test_malformed_yaml_is_reported_where_it_needs_fixing_quoted_with_a_caret(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "bad.yaml", "kind: Stream\nname: A\nsubjects: [a, b\nmax_age: 1h\n")
    (problem,) = problems_of([path])
    head, quoted, caret = problem.splitlines()
    assert head.startswith(f"{path}:3: invalid YAML (column 11):")  # the unclosed '['
    assert quoted == "    subjects: [a, b" and caret == "    " + " " * 10 + "^"


def test_json_with_trailing_garbage_is_reported_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.json", '{"kind": "Stream",\n "name": "A"}\n\ntrailing\n')
    assert problems_of([path]) == [
        f"{path}:4: invalid JSON: unexpected content after the JSON value"
    ]


def test_duplicate_fields_are_reported_with_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "dup.yaml", "kind: Stream\nname: A\nname: B\n")
    assert problems_of([path]) == [
        f"{path}:3: name: duplicate field with another value (first at {path}:2)"
    ]


def test_a_duplicate_field_with_the_same_value_is_a_warning(tmp_path: Path) -> None:
    from reconciler.specs.validate import load_specs

    path = write(tmp_path / "dup.json", '{"kind": "Stream",\n "name": "A",\n "name": "A"}')
    warnings: list[Any] = []
    assert [s.name for s in load_specs([path], warnings=warnings)] == ["A"]
    assert [str(w) for w in warnings] == [
        f"{path}:3: warning: name: duplicate field with the same value (first at {path}:2); "
        "drop one"
    ]
    with pytest.raises(SpecError, match="duplicate field with the same value"):
        load_specs([path], strict=True)


def test_duplicate_fields_in_json_are_reported(tmp_path: Path) -> None:
    path = write(tmp_path / "dup.json", '{"kind": "Stream",\n "kind": "Consumer"}')
    assert "duplicate field" in problems_of([path])[0]


def test_binary_garbage_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    path = write(tmp_path / "garbage.yaml", b"kind: Stream\n\xff\xfe\x00\x81binary")
    assert problems_of([path]) == [
        f"{path}:2: not a text file (invalid UTF-8 at byte 13); expected YAML or JSON"
    ]


def test_a_document_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "list.yaml", "- kind: Stream\n")
    assert problems_of([path]) == [f"{path}:1: a document must be a mapping of fields"]


def test_folders_are_walked_recursively_in_sorted_order(tmp_path: Path) -> None:
    write(tmp_path / "b.yaml", "kind: Stream\nname: B\n")
    write(tmp_path / "a" / "z.yml", "kind: Stream\nname: AZ\n")
    write(tmp_path / "a.json", '{"kind": "Stream", "name": "A"}')
    write(tmp_path / "notes.txt", "not a spec")
    write(tmp_path / ".hidden" / "x.yaml", "kind: Stream\nname: HIDDEN\n")
    names = [d.body["name"] for d in load_documents([tmp_path])]
    assert names == ["A", "B", "AZ"]


def test_a_symlink_loop_in_a_folder_is_reported(tmp_path: Path) -> None:
    write(tmp_path / "specs" / "s.yaml", "kind: Stream\nname: A\n")
    os.symlink(tmp_path / "specs", tmp_path / "specs" / "again")
    (problem,) = problems_of([tmp_path / "specs"])
    assert problem.startswith(f"{tmp_path / 'specs' / 'again'}:1: symlink loop")


def test_a_loop_through_two_sibling_folders_is_reported(tmp_path: Path) -> None:
    write(tmp_path / "x" / "a.yaml", "kind: Stream\nname: A\n")
    write(tmp_path / "y" / "b.yaml", "kind: Stream\nname: B\n")
    os.symlink(tmp_path / "y", tmp_path / "x" / "to_y")
    os.symlink(tmp_path / "x", tmp_path / "y" / "to_x")
    found = problems_of([tmp_path])
    assert found and all("symlink loop" in p for p in found)


def test_a_self_referencing_symlink_file_is_reported(tmp_path: Path) -> None:
    os.symlink(tmp_path / "loop.yaml", tmp_path / "loop.yaml")
    (problem,) = problems_of([tmp_path / "loop.yaml"])
    assert "symlink loop" in problem


def test_a_named_pipe_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.yaml")
    (problem,) = problems_of([tmp_path])
    assert problem == f"{tmp_path / 'pipe.yaml'}:1: not a regular file (a device, pipe or socket?)"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every folder")
def test_an_unreadable_folder_is_reported(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        assert "cannot read" in problems_of([tmp_path])[0]
    finally:
        locked.chmod(0o755)


def test_a_missing_path_is_reported(tmp_path: Path) -> None:
    assert problems_of([tmp_path / "nope.yaml"]) == [f"{tmp_path / 'nope.yaml'}:1: no such file"]


def test_alias_bombs_are_refused(tmp_path: Path) -> None:
    lines = ["kind: Stream", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    path = write(tmp_path / "bomb.yaml", "\n".join(lines) + "\n")
    assert "alias expansion" in problems_of([path])[0]


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "deep.yaml", "kind: Stream\nx: " + "[" * 100 + "]" * 100 + "\n")
    assert "nesting deeper than 64 levels" in problems_of([path])[0]


def test_ten_thousand_documents_load(tmp_path: Path) -> None:
    text = "".join(f"---\nkind: Stream\nname: S{i}\n" for i in range(10_000))
    documents = load_documents([write(tmp_path / "many.yaml", text)])
    assert len(documents) == 10_000
    assert documents[-1].where("name").line == 3 * 9_999 + 3


def test_a_nats_cli_stream_config_gets_kind_stream(tmp_path: Path) -> None:
    config = {"name": "ORDERS", "subjects": ["ORDERS.*"], "retention": "limits", "storage": "file"}
    (document,) = load_documents([write(tmp_path / "orders.json", json.dumps(config, indent=2))])
    assert document.body == {"kind": "Stream", **config}
    assert document.where("retention").line == 6


def test_a_nats_cli_consumer_config_takes_its_stream_from_stream_name(tmp_path: Path) -> None:
    config = {"stream_name": "ORDERS", "durable_name": "NEW", "ack_policy": "explicit"}
    (document,) = load_documents([write(tmp_path / "new.json", json.dumps(config))])
    assert document.body == {
        "kind": "Consumer",
        "stream": "ORDERS",
        "durable_name": "NEW",
        "ack_policy": "explicit",
    }


def test_a_consumer_config_without_its_stream_asks_for_stream(tmp_path: Path) -> None:
    path = write(tmp_path / "new.json", '{"durable_name": "NEW", "ack_policy": "explicit"}')
    (problem,) = problems_of([path])
    assert "add `stream: STREAM_NAME`" in problem
    assert problem.startswith(f"{path}:1:")


def test_stream_and_consumer_info_outputs_are_unwrapped(tmp_path: Path) -> None:
    info = {"config": {"name": "S", "retention": "limits"}, "created": "2025-01-01T00:00:00Z"}
    consumer = {"stream_name": "S", "name": "C", "config": {"durable_name": "C"}, "created": "x"}
    write(tmp_path / "a.json", json.dumps(info, indent=1))
    write(tmp_path / "b.json", json.dumps(consumer))
    stream_doc, consumer_doc = load_documents([tmp_path])
    assert stream_doc.body == {"kind": "Stream", "name": "S", "retention": "limits"}
    assert stream_doc.where("retention").line == 4
    assert consumer_doc.body == {"kind": "Consumer", "stream": "S", "durable_name": "C"}


def backup_entry(kind: str, payload: object) -> str:
    raw = json.dumps(payload, indent=2).encode()
    return json.dumps(
        {
            "type": kind,
            "time": "2025-01-01T00:00:00Z",
            "configuration": base64.b64encode(raw).decode(),
            "checksum": hashlib.sha256(raw).hexdigest(),
        },
        indent=2,
    )


def test_a_nats_backup_folder_is_read_as_specs(tmp_path: Path) -> None:
    stream = {"name": "ORDERS", "subjects": ["ORDERS.*"], "retention": "limits"}
    consumer = {"name": "NEW", "stream": "ORDERS", "config": {"durable_name": "NEW"}}
    write(tmp_path / "backup" / "stream_ORDERS.json", backup_entry("stream", stream))
    write(
        tmp_path / "backup" / "stream_ORDERS_consumer_NEW.json", backup_entry("consumer", consumer)
    )
    stream_doc, consumer_doc = load_documents([tmp_path / "backup"])
    assert stream_doc.body == {"kind": "Stream", **stream}
    assert consumer_doc.body == {"kind": "Consumer", "stream": "ORDERS", "durable_name": "NEW"}
    assert consumer_doc.source.line == 4  # the "configuration" line of the backup file


def test_a_damaged_backup_file_is_reported(tmp_path: Path) -> None:
    entry = json.loads(backup_entry("stream", {"name": "S"}))
    entry["checksum"] = "0" * 64
    path = write(tmp_path / "stream_S.json", json.dumps(entry))
    assert "checksum mismatch" in problems_of([path])[0]


def test_yaml_documents_without_kind_are_not_guessed(tmp_path: Path) -> None:
    path = write(tmp_path / "s.yaml", "name: S\nretention: limits\n")
    (document,) = load_documents([path])
    assert "kind" not in document.body


def test_document_is_frozen() -> None:
    document = Document(body={}, source=Location("f", 1))
    with pytest.raises(AttributeError):
        document.body = {"x": 1}  # type: ignore[misc]


def test_a_document_made_holds_what_its_fields_say() -> None:
    """``Document``'s own ``__init__`` (it fills its fields directly) makes what the
    dataclass's fields say, by keyword or position, each default a new dict."""
    import dataclasses

    where, other = Location("f", 1), Location("g", 2)
    given = {"body": {"a": 1}, "source": where, "locations": {"a": where}, "overlay": other}
    for made in (Document(**given), Document(*given.values())):
        assert {f.name: getattr(made, f.name) for f in dataclasses.fields(Document)} == given
        assert made == Document(**given) and made != Document(**{**given, "overlay": None})
    bare = Document(body={}, source=where)
    assert bare.locations == {} and bare.overlay is None
    assert bare.locations is not Document(body={}, source=where).locations
    assert dataclasses.replace(bare, overlay=other).overlay == other


TRICKY_YAML = [
    "kind: Stream\nname: A\n",
    "a: &x {b: [1, 2.5, true, null, ~, 0x1F, 1_000, '3', \"4\"]}\nc: *x\nd: {<<: *x, e: f}\n",
    "? complex\n: value\nlist:\n- - nested\n  - more\n- !!str 123\n- !!int '7'\nempty:\n",
    "---\n---\nblock: |\n  line one\n  line two\nfolded: >\n  folded text\n...\n---\nx: 1\n",
    "when: 2024-01-01T00:00:00Z\nyes: no\non: off\n",
    "[1, [2, [3, {a: b}]]]\n",
]


def _shape(node: Any) -> Any:
    if isinstance(node, yaml.MappingNode):
        return (node.tag, node.start_mark.line, [(_shape(k), _shape(v)) for k, v in node.value])
    if isinstance(node, yaml.SequenceNode):
        return (node.tag, node.start_mark.line, [_shape(item) for item in node.value])
    return (node.tag, node.start_mark.line, node.value)


@pytest.mark.parametrize("text", TRICKY_YAML)
def test_the_stack_composer_builds_what_libyaml_composes(text: str) -> None:
    ours = [_shape(n) for n in compose_documents(text, "t.yaml")]
    theirs = [_shape(n) for n in yaml.compose_all(text, Loader=yaml.SafeLoader)]
    assert ours == theirs


def test_an_undefined_alias_is_a_located_problem(tmp_path: Path) -> None:
    path = write(tmp_path / "s.yaml", "kind: Stream\nname: *nowhere\n")
    assert problems_of([path]) == [f"{path}:2: undefined alias *nowhere"]


@pytest.mark.parametrize("brk", ["\r", "\r\n", "\x85", "\u2028", "\u2029"])
def test_a_yaml_error_after_unusual_line_breaks_is_still_a_problem(
    tmp_path: Path, brk: str
) -> None:
    text = brk.join(["kind: Stream", "name: A", "subjects: [a, b", "max_age: 1h", ""])
    path = tmp_path / "odd.yaml"
    path.write_text(text, encoding="utf-8", newline="")
    (problem,) = problems_of([path])
    assert problem.startswith(f"{path}:") and "invalid YAML" in problem


REPO = Path(__file__).resolve().parents[2]
SPEC_FILES = sorted(
    p
    for folder in ("examples", "tests/data")
    for pattern in ("*.yaml", "*.yml")
    for p in (REPO / folder).rglob(pattern)
)


@pytest.mark.parametrize("text", TRICKY_YAML)
def test_libyamls_own_composer_builds_the_same_trees_where_it_is_used(text: str) -> None:
    assert yaml_lines._fits_libyaml(text)
    fast = yaml.compose_all(text, Loader=yaml_lines._ComposingLoader)
    assert [_shape(n) for n in fast] == [_shape(n) for n in compose_documents(text, "t.yaml")]


def test_every_example_loads_the_same_on_the_fast_and_the_careful_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert len(SPEC_FILES) > 15
    block = load_documents(SPEC_FILES)
    monkeypatch.setattr(yaml_lines, "block_documents", lambda text, name: None)
    plain = load_documents(SPEC_FILES)
    monkeypatch.setattr(yaml_lines, "plain_documents", lambda text, name: None)
    fast = load_documents(SPEC_FILES)
    monkeypatch.setattr(yaml_lines, "C_COMPOSER_DEPTH", -1)  # every text takes the careful path
    careful = load_documents(SPEC_FILES)
    assert [(d.body, d.source, dict(d.locations)) for d in fast] == [
        (d.body, d.source, dict(d.locations)) for d in careful
    ]
    assert [(d.body, d.source, dict(d.locations)) for d in plain] == [
        (d.body, d.source, dict(d.locations)) for d in careful
    ]
    assert [(d.body, d.source, dict(d.locations)) for d in block] == [
        (d.body, d.source, dict(d.locations)) for d in careful
    ]
    read_by_lines = [p for p in SPEC_FILES if yaml_block.block_documents(p.read_text(), "x")]
    assert len(read_by_lines) > 5  # the line reader is not a dead path


PLAIN_YAML = [
    "kind: Stream\nname: A\nsubjects:\n  - a.>\n  - 'b'\nmax_age: 7d\n---\n"
    "kind: Consumer\nstream: A\nname: C\nfilter_subject: a.c\nmax_deliver: 5\n",
    "---\n---\n# only a comment\n---\nkind: Stream\nname: A\n...\n",
    "a: {b: [1, 2.5, true, null, ~, 0x1F, 1_000, '3', \"4\", 1:30, 0o17, .inf]}\n"
    "when: 2024-01-01T00:00:00Z\nyes: no\non: off\n? complex\n: value\nempty:\n"
    "block: |\n  line one\n  line two\nfolded: >\n  folded text\n1: one\n",
    "",
    "# nothing\n",
]


def _read_both_ways(text: str) -> tuple[Any, Any]:
    careful: list[Any] = []
    for root in compose_documents(text, "t.yaml"):
        document = yaml_lines._document_from_node(root, "t.yaml", [])
        if document is not None:
            careful.append((document.body, document.source, dict(document.locations)))
    plain = yaml_plain.plain_documents(text, "t.yaml")
    assert plain is not None
    return [(d.body, d.source, dict(d.locations)) for d in plain], careful


@pytest.mark.parametrize("text", [*PLAIN_YAML, TRICKY_YAML[0], TRICKY_YAML[3], TRICKY_YAML[4]])
def test_plain_yaml_is_read_from_the_events_as_the_careful_path_reads_it(text: str) -> None:
    plain, careful = _read_both_ways(text)
    assert plain == careful
    for (body, _, _), (again, _, _) in zip(plain, careful, strict=True):
        assert [type(v) for v in body.values()] == [type(v) for v in again.values()]


@pytest.mark.parametrize(
    "text",
    [
        TRICKY_YAML[1],  # anchors, aliases, merge keys
        TRICKY_YAML[2],  # tags
        TRICKY_YAML[5],  # a list as a document
        "kind: Stream\nname: A\nname: A\n",  # a duplicate field: a warning to say
        "kind: Stream\nname: A\nname: B\n",  # a duplicate field: an error to say
        "kind: Stream\n[a]: b\n",  # a field name that is not a string
        "just a scalar\n",
        "kind: Stream\nname: [a, b\n",  # invalid YAML
        "x: " + "[" * 100 + "]" * 100 + "\n",  # deeper than MAX_DEPTH
        "x: 1" + "0" * 5000 + "\n",
        "x: !!binary aGk=\n",
        "x: =\n",  # the YAML 'value' tag: unsupported
        "<<: {a: 1}\n",
    ],
)
def test_anything_else_is_left_to_the_careful_path(text: str) -> None:
    assert yaml_plain.plain_documents(text, "t.yaml") is None


@pytest.mark.parametrize(
    "text",
    [
        "kind: Stream\nname: A\nname: B\n",  # a duplicate field, the document's own
        "name: A\nname: A\n",  # the same value: a warning to say
        "kind: Stream\nm:\n  a: 1\nkind: Stream\n",  # again after a nested field
        "kind: Stream\n---\nkind: Consumer\nkind: Consumer\n",  # in a second document
        "  kind: Stream\n",  # an indented first line
        "- kind\n",  # a document that is a list
    ],
)
def test_the_line_reader_leaves_what_libyaml_must_say(text: str) -> None:
    """The line reader's quick path for a document's own ``key: value`` lines still
    leaves a duplicate field (and a first line it cannot open a document with) to the
    careful path, which says it at its line."""
    assert yaml_block.block_documents(text, "t.yaml") is None
    _same_reading(text)


def test_a_document_past_the_node_limit_is_left_to_the_careful_path() -> None:
    text = "x:\n" + "".join(f"  - {i}\n" for i in range(yaml_plain.MAX_NODES))
    assert yaml_plain.plain_documents(text, "t.yaml") is None
    under = "x:\n" + "".join(f"  - {i}\n" for i in range(yaml_plain.MAX_NODES - 2))
    assert yaml_plain.plain_documents(under, "t.yaml") is not None


@pytest.mark.parametrize(
    "text",
    [
        "x: " + "[" * 30_000 + "]" * 30_000 + "\n",  # crashes libyaml's composer
        "x:\n" + "".join(" " * i + "- \n" for i in range(1, 1500)),  # block nesting
        "x: " + "- " * 1200 + "a\n",  # compact sequences: one line, no indentation
        "---\na: 1\n---\n" + "{" * 2001 + "}" * 2001 + "\n",  # the deep one is not first
    ],
)
def test_text_that_may_nest_deep_never_reaches_libyamls_composer(text: str) -> None:
    assert not yaml_lines._fits_libyaml(text)


def _marks(node: yaml.Node, path: str, out: dict[str, int]) -> dict[str, int]:
    """Every field's and item's line as the YAML parser marks it (no merge keys)."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            field = f"{path}.{key.value}" if path else str(key.value)
            out[field] = key.start_mark.line + 1
            _marks(value, field, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            out[f"{path}.{index}" if path else str(index)] = item.start_mark.line + 1
            _marks(item, f"{path}.{index}" if path else str(index), out)
    return out


def test_every_field_keeps_its_line_far_into_a_file_and_far_from_its_document(
    tmp_path: Path,
) -> None:
    """Field lines are kept as distances from their document's first line: right for
    documents hundreds of lines into a file and for fields hundreds of lines into one."""
    filler = "# filler\n" * 400
    text = (
        f"{filler}kind: Stream\nname: A\n{chr(10) * 300}subjects:\n  - a.one\n\n  - a.two\n"
        "metadata:\n  team: x\n  nested:\n    deep: [1, 2]\n---\n"
        f"{filler}kind: Consumer\nstream: A\nname: c\nfilter_subjects: [a.one]\n"
    )
    path = write(tmp_path / "far.yaml", text)
    documents = load_documents([path])
    composed = [n for n in yaml.compose_all(text) if n is not None]
    assert len(documents) == len(composed) == 2
    for document, node in zip(documents, composed, strict=True):
        assert document.source == Location(str(path), node.start_mark.line + 1)
        lines = {field: where.line for field, where in document.locations.items()}
        assert lines == _marks(node, "", {})
        assert {where.file for where in document.locations.values()} == {str(path)}
    assert documents[0].where("subjects.1").line == 706
    assert documents[0].where("metadata.nested.deep.1.x") == Location(str(path), 710)


def _careful(text: str) -> tuple[list[Any], list[Any]]:
    """A text's documents and problems as the careful path (the stack composer) says."""
    problems: list[Any] = []
    documents: list[Any] = []
    try:
        for root in compose_documents(text, "t.yaml"):
            document = yaml_lines._document_from_node(root, "t.yaml", problems)
            if document is not None:
                documents.append(document)
    except (yaml.YAMLError, Abort) as err:
        problems.append(err)
    return documents, problems


def _same_reading(text: str) -> None:
    """The line reader reads ``text`` as the careful path does, values, types and
    lines, or leaves it (None); it never reads a text the careful path finds fault with."""
    read = yaml_block.block_documents(text, "t.yaml")
    if read is None:
        return
    documents, problems = _careful(text)
    assert not problems
    ours = [(d.body, d.source, dict(d.locations)) for d in read]
    assert ours == [(d.body, d.source, dict(d.locations)) for d in documents]
    assert repr([d.body for d in read]) == repr([d.body for d in documents])  # 1 vs 1.0, True


BLOCK_YAML = [
    *PLAIN_YAML,
    "kind: Stream\nname: B00001\ndescription: orders of shop 1\nsubjects:\n  - b1.>\n"
    "storage: memory\nmax_age: 7d\n---\nkind: Consumer\nstream: B00001\nname: C0\n"
    "filter_subject: b1.c0\nack_policy: explicit\nmax_deliver: 5\n",
    "a:\n- x\n- 'y'\nb:\n  c:\n    d: [1, '2', \"3\"]\n  e: []\nf: -1  # a comment\n",
    "# head\n\nkind: Stream   \nname: A # x\nmetadata:\n  io.x/y-z: v w\nempty:\nlast: ~\n",
]


@pytest.mark.parametrize("text", BLOCK_YAML)
def test_the_line_reader_reads_plain_block_yaml_as_libyaml_does(text: str) -> None:
    _same_reading(text)


def test_the_line_reader_reads_the_usual_spec_file() -> None:
    assert yaml_block.block_documents(BLOCK_YAML[-3], "t.yaml") is not None
    assert yaml_block.block_documents(BLOCK_YAML[-2], "t.yaml") is not None


#: Pieces of lines, near misses included: indicators, tabs, odd indentation, quotes,
#: comments, values YAML 1.1 reads as numbers, booleans, null, times, sexagesimals.
_INDENTS = st.sampled_from(["", "", " ", "  ", "    ", "\t"])
_KEYS = st.sampled_from(["a", "b", "kind", "a.b", "x-y", "yes", "<<", "'q'", "1", "a b", "? a"])
_VALUES = st.sampled_from(
    [
        "",
        " x",
        " x y",
        " 1",
        " -1",
        " 0x1F",
        " 1_000",
        " 1:30",
        " 0o17",
        " 017",
        " .inf",
        " 1.5",
        " 1e3",
        " yes",
        " No",
        " on",
        " ~",
        " null",
        " 2024-01-01",
        " 'q'",
        ' "d"',
        " 'it''s'",
        ' "a\\"b"',
        " [a, b]",
        " []",
        " [ a ,b ]",
        " [a, [b]]",
        " {a: b}",
        " |",
        " >",
        " &x v",
        " *x",
        " !!str 1",
        " a #c",
        " a#c",
        " # c",
        " a: b",
        " -",
        " - x",
        " a,b",
        " b1.>",
        " >x",
        " =",
        " x=y",
        " (x)",
        "   ",
        " \t",
        ' ""',
        " ''",
        ":",
    ]
)
_LINES = st.one_of(
    st.builds(lambda i, k, v: f"{i}{k}:{v}", _INDENTS, _KEYS, _VALUES),
    st.builds(lambda i, v: f"{i}-{v}", _INDENTS, _VALUES),
    st.sampled_from(["", "---", "...", "# c", "  # c", "--- x", "%YAML 1.1", "  x", "- - a"]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_LINES, max_size=12), st.sampled_from(["\n", "\r\n", ""]))
def test_the_line_reader_reads_as_libyaml_or_not_at_all(lines: list[str], end: str) -> None:
    _same_reading("\n".join(lines) + end)


_SCALARS = st.sampled_from(
    [
        "x", "x y", "x  y", "1", "-1", "0x1F", "1_000", "0o17", "017", ".inf", "1.5", "1e3",
        "yes", "No", "on", "OFF", "~", "null", "Null", "2024-01-01", "'q'", '"d"', "''", "b1.>",
        "x=y", "(x)", "a - b", "-", ".", "...", "a*", "$x", "0", "+1", "0b101", "1.0", "-.5",
        "TRUE", "y", "n", "'yes'", '"1"', "a#b", "a # b", "9" * 30, "_", "/p/q", "a.b.c",
    ]
)  # fmt: skip
_TREES = st.recursive(
    st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3)),
    lambda inner: st.dictionaries(st.sampled_from(["a", "b", "c", "kind", "x.y"]), inner),
    max_leaves=12,
)


def _rendered(tree: Any, indent: int, step: int, draw: Any) -> list[str]:
    pad = " " * indent
    out = []
    for key, value in tree.items():
        if isinstance(value, dict):
            out.append(f"{pad}{key}:")
            out += _rendered(value, indent + step, step, draw)
        elif isinstance(value, list) and draw(st.booleans()):
            out.append(f"{pad}{key}: [{', '.join(value)}]")
        elif isinstance(value, list):
            out.append(f"{pad}{key}:")
            under = pad + " " * draw(st.sampled_from([0, step]))
            out += [f"{under}- {item}" for item in value]
        else:
            tail = draw(st.sampled_from(["", "  ", " # c"]))
            out.append(f"{pad}{key}: {value}{tail}")
    return out


@st.composite
def _block_texts(draw: st.DrawFn) -> str:
    """Block YAML as people write it, sometimes with one line moved, copied or broken."""
    documents = []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        tree = draw(st.dictionaries(st.sampled_from(["kind", "name", "m"]), _TREES, min_size=1))
        documents.append(_rendered(tree, 0, draw(st.sampled_from([1, 2, 4])), draw))
    lines = [line for document in documents for line in [*document, "---"]][:-1]
    for _ in range(draw(st.integers(min_value=0, max_value=3))):  # blank lines, comments
        at = draw(st.integers(min_value=0, max_value=len(lines)))
        lines.insert(at, draw(st.sampled_from(["", "# note", "   # note", "  ", "---"])))
    if lines and draw(st.booleans()):
        at = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        change = draw(st.sampled_from(["indent", "dedent", "copy", "tab", "drop"]))
        if change == "indent":
            lines[at] = " " + lines[at]
        elif change == "dedent":
            lines[at] = lines[at][1:]
        elif change == "copy":
            lines.insert(at, lines[at])
        elif change == "tab":
            lines[at] = "\t" + lines[at]
        else:
            del lines[at]
    return "\n".join(lines) + "\n"


@settings(max_examples=400, deadline=None)
@given(_block_texts())
def test_the_line_reader_reads_written_block_yaml_as_libyaml_does(text: str) -> None:
    _same_reading(text)


def test_a_read_documents_lines_are_kept_compactly_and_read_the_same(tmp_path: Path) -> None:
    """Once a document is read its lines are frozen (a tuple beside paths shared by the
    documents with the same fields): every field's line reads as before, and what a
    document has no line for is not found."""
    text = "kind: Stream\nname: A\nsubjects:\n  - a.>\n---\nkind: Stream\nname: B\nsubjects: [b]\n"
    first, second = load_documents([write(tmp_path / "s.yaml", text)])
    assert dict(first.locations) == {
        "kind": Location(str(tmp_path / "s.yaml"), 1),
        "name": Location(str(tmp_path / "s.yaml"), 2),
        "subjects": Location(str(tmp_path / "s.yaml"), 3),
        "subjects.0": Location(str(tmp_path / "s.yaml"), 4),
    }
    assert second.where("subjects.0").line == 8 and second.where("nowhere").line == 6
    assert "subjects.1" not in second.locations and second.locations.get("subjects.1") is None
    assert list(first.locations) is not None and len(second.locations) == 4
    lines = first.locations
    assert isinstance(lines, Lines)
    with pytest.raises(RuntimeError):
        lines.add("more", 9)
    many = "x:\n" + "".join(f"  - {i}\n" for i in range(100))
    (big,) = load_documents([write(tmp_path / "big.yaml", many)])
    assert big.where("x.99").line == 101 and len(big.locations) == 101


def test_each_document_is_let_go_of_once_its_spec_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading holds a spec per document, not a document beside every spec: when a
    document is validated, those before it are gone (their values freed)."""
    from reconciler.specs import validate

    for index in range(3):
        write(tmp_path / f"s{index}.yaml", f"kind: Stream\nname: S{index}\nmax_age: 1h\n")
    seen: list[weakref.ref[Document]] = []
    alive: list[list[bool]] = []
    real = validate.spec_from_document

    def spying(document: Document, problems: list[Any], *, root: Path | None = None) -> Any:
        alive.append([ref() is not None for ref in seen])
        seen.append(weakref.ref(document))
        return real(document, problems, root=root)

    monkeypatch.setattr(validate, "spec_from_document", spying)
    specs = validate.load_specs([tmp_path])
    assert [s.name for s in specs] == ["S0", "S1", "S2"]
    assert alive == [[], [False], [False, False]]
    assert specs[2].where("max_age").line == 3


@settings(max_examples=200, deadline=None)
@given(_block_texts())
def test_a_line_read_before_reads_the_same_again(text: str) -> None:
    """The line reader keeps how each line read (a repository repeats its lines): a text
    read with that memory empty and read again from it gives the same documents, and
    each document gets its own lists (one document's list changed is not another's)."""
    yaml_block._KNOWN.clear()
    first = yaml_block.block_documents(text, "t.yaml")
    again = yaml_block.block_documents(text, "t.yaml")
    if first is None:
        assert again is None
        return
    assert again is not None
    shown = [(repr(d.body), d.source, dict(d.locations)) for d in first]
    assert shown == [(repr(d.body), d.source, dict(d.locations)) for d in again]
    twice = yaml_block.block_documents("a: [x, y]\nb:\n  - [z]\n---\na: [x, y]\nb:\n  - [z]\n", "t")
    assert twice is not None
    twice[0].body["a"].append("changed")
    twice[0].body["b"][0].append("changed")
    assert twice[1].body == {"a": ["x", "y"], "b": [["z"]]}


_FIRST_CHARACTERS = st.text(
    alphabet=st.sampled_from("abyYnNoOtTfF~0123456789.+-=<!&*_ xX:#'\"/$"), max_size=8
)


@settings(max_examples=500, deadline=None)
@given(_FIRST_CHARACTERS, st.sampled_from([(True, False), (False, True), (True, True)]))
def test_a_scalars_tag_is_the_resolvers_own(value: str, implicit: tuple[bool, bool]) -> None:
    """A scalar whose first character starts none of PyYAML's rules is a string without
    the resolver being asked: the same tag the resolver gives, for every text."""
    expected = yaml_plain._RESOLVER.resolve(yaml.ScalarNode, value, implicit)
    assert yaml_plain.implicit_tag(value, implicit) == expected


def test_a_file_grown_past_the_cap_since_it_was_judged_is_not_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 100)
    grown = tmp_path / "grown.yaml"
    grown.write_bytes(b"#" * 150)
    fd = os.open(grown, os.O_RDONLY)
    try:
        assert files._read_all(fd, 10) is None  # judged at 10 bytes, 150 now
    finally:
        os.close(fd)
    (problem,) = problems_of([grown])
    assert "file too large" in problem


def test_each_walked_file_has_the_real_path_of_its_folder_or_of_its_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (real / "sub" / "a.yaml").write_text("kind: Stream\n")
    (tmp_path / "elsewhere.yaml").write_text("kind: Stream\n")
    os.symlink(real / "sub", tmp_path / "linked")
    os.symlink(tmp_path / "elsewhere.yaml", real / "sub" / "b.yaml")
    found = files.real_spec_files([tmp_path / "linked"], [])
    assert found == [
        (tmp_path / "linked" / "a.yaml", os.path.realpath(real / "sub" / "a.yaml")),
        (tmp_path / "linked" / "b.yaml", os.path.realpath(tmp_path / "elsewhere.yaml")),
    ]
    for path, resolved in found:
        assert resolved == os.path.realpath(path)


def test_what_is_not_a_regular_file_is_refused_without_being_opened(tmp_path: Path) -> None:
    """A named pipe with a writer waiting for a reader: had the loader opened it (to
    judge it after), the writer's open would have returned. It is still waiting."""
    pipe = tmp_path / "pipe.yaml"
    os.mkfifo(pipe)
    opened = threading.Event()

    def writer() -> None:
        with open(pipe, "wb"):  # blocks until a reader opens the pipe
            opened.set()

    waiting = threading.Thread(target=writer, daemon=True)
    waiting.start()
    (problem,) = problems_of([pipe])
    assert "not a regular file" in problem
    assert not opened.wait(0.5)
    with open(pipe, "rb"):  # let the writer go
        waiting.join(5)
    assert opened.is_set()


@pytest.mark.parametrize("where", ["spec file", "value_file"])
def test_a_pipe_in_the_specs_is_refused_never_waited_on_with_the_spec_cache(
    where: str, tmp_path: Path
) -> None:
    """A named pipe where a spec file or a ``value_file`` is (a checkout can hold one):
    the spec cache's key and the value read take the loader's guards, so the run says
    "not a regular file" at once; reading it waited for a writer for ever."""
    from cli_runner import reconcile

    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.yaml").write_text(
        "kind: Stream\nname: A\nsubjects: [a.>]\n---\nkind: KeyValue\nname: flags\n---\n"
        "kind: KeyValueEntry\nbucket: flags\nkey: k\nvalue_file: pipe.json\n"
    )
    os.mkfifo(specs / ("pipe.yaml" if where == "spec file" else "pipe.json"))
    cache = {"RECONCILE_SPEC_CACHE": str(tmp_path / "cache"), "RECONCILE_CACHE_KEY": "k" * 40}
    done = reconcile("plan", "specs", cwd=tmp_path, env=cache)  # a timeout fails it
    assert done.returncode == 1
    assert "not a regular file" in done.stderr


def test_a_value_file_that_cannot_be_read_says_why_once_and_a_folder_is_not_a_pipe(
    tmp_path: Path,
) -> None:
    """Since value_file took files.read_bytes (b920321) a missing one said "cannot read
    'x': cannot read: ..." and a folder was called "not a regular file (a device, pipe or
    socket?)"; each says what it is, once, as before."""
    from reconciler.specs.validate import load_specs

    (tmp_path / ".git").mkdir()
    (tmp_path / "folder").mkdir()
    entry = "---\nkind: KeyValueEntry\nbucket: flags\nkey: {key}\nvalue_file: {name}\n"
    (tmp_path / "a.yaml").write_text(
        "kind: KeyValue\nname: flags\n"
        + entry.format(key="gone", name="missing.bin")
        + entry.format(key="dir", name="folder")
    )
    with pytest.raises(SpecError) as caught:
        load_specs([tmp_path / "a.yaml"])
    said = {p.location.line: p.message for p in caught.value.problems}
    assert set(said) == {7, 12}, said
    assert all(message.count("cannot read") == 1 for message in said.values()), said
    assert "missing.bin" in said[7] and "folder" in said[12]
    assert "pipe" not in said[12]
