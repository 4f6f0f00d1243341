"""No declared name or subject holds a control or invisible format character.

The server takes ESC, C1 controls and bidi overrides in a stream's or consumer's name, and
a spec could declare one: a reviewer of the pull request then reads another name than the
one applied (Trojan Source: U+202E reverses what follows). Every name and subject field
refuses them (``$defs/visible_text`` in document.schema.json, which every name and subject
definition refers to), in jsonschema-rs's quick yes and in jsonschema alike, and the loader says
so at the value's ``FILE:LINE``, the value escaped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reconciler.errors import SpecError
from reconciler.specs.schema import (
    SCHEMA_FILES,
    VISIBLE_TEXT,
    hidden_character,
    quick_check,
    schema,
    validator,
)
from reconciler.specs.validate import load_specs

#: One character of each range the schemas leave out, its ends included.
HIDDEN = [
    *"\x00\x09\x0a\x1b\x1f\x7f\x85\x9b\x9f\xad",
    *"\u061c\u180e\u200b\u200c\u200d\u200e\u200f\u2028\u2029\u202a\u202e",
    *"\u2060\u2064\u2066\u2069\u206a\u206f\ufeff\ufff9\ufffb",
    # the other invisible format characters: shorthand and musical format controls, the
    # tags (a name's letters spelled again invisibly: 'ORDERS' + tags reads 'ORDERS')
    *"\U0001bca0\U0001bca3\U0001d173\U0001d17a\U000e0000\U000e0001\U000e0041\U000e007f",
]
#: Near them and allowed: what a name of another script or a subject may hold; a ZWNJ
#: or ZWJ between two visible characters of another script or emoji (Persian's plural
#: "orders", a Devanagari conjunct, emoji sequences: the joiner changes what is drawn).
SHOWN = [
    *["\u00e9", "\u2065", "\u2070", "\ufff8", "\ufffc", "\U0001f600", "\ufe0f"],
    "\u0633\u0641\u0627\u0631\u0634\u200c\u0647\u0627",
    "\u0915\u094d\u200d\u0937",
    "\U0001f469\u200d\U0001f4bb",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "\U0001f3f3\ufe0f\u200d\U0001f308",
]
#: A joiner where it draws nothing: beside ASCII, at an end, two in a row.
JOINED_WRONG = ["\u00e9\u200dx", "x\u200c\u00e9", "\u00e9\u200d", "\u00e9\u200d\u200d\u00f6"]

STREAM = "kind: Stream\nname: S\nsubjects: [s.>]\n"
#: (document text, its path) with ``{v}`` where the tested value goes: each is valid as
#: it is (``{v}`` empty).
CASES = {
    "stream name": ('kind: Stream\nname: "S{v}"\nsubjects: [s.>]\n', "name"),
    "subject": ('kind: Stream\nname: S\nsubjects: ["s.{v}x"]\n', "subjects.0"),
    "mirror name": ('kind: Stream\nname: S\nmirror:\n  name: "O{v}"\n', "mirror.name"),
    "source filter": (
        'kind: Stream\nname: S\nsources:\n  - name: O\n    filter_subject: "o{v}.>"\n',
        "sources.0.filter_subject",
    ),
    "source transform": (
        "kind: Stream\nname: S\nsources:\n  - name: O\n    subject_transforms:\n"
        '      - {src: "o.>", dest: "p{v}.>"}\n',
        "sources.0.subject_transforms.0.dest",
    ),
    "external api": (
        'kind: Stream\nname: S\nmirror:\n  name: O\n  external: {api: "$JS.hub{v}.API"}\n',
        "mirror.external.api",
    ),
    "external deliver": (
        'kind: Stream\nname: S\nmirror:\n  name: O\n  external: {deliver: "d{v}.x"}\n',
        "mirror.external.deliver",
    ),
    "source consumer": (
        "kind: Stream\nname: S\nsources:\n  - name: O\n"
        '    consumer: {name: "C{v}", deliver_subject: d.x}\n',
        "sources.0.consumer.name",
    ),
    "stream transform": (
        STREAM + 'subject_transform: {src: "s.>", dest: "t{v}.>"}\n',
        "subject_transform.dest",
    ),
    "republish": (
        'kind: Stream\nname: S\nsubjects: [s.>]\nrepublish: {src: "s.>", dest: "r{v}.>"}\n',
        "republish.dest",
    ),
    "consumer name": (STREAM + '---\nkind: Consumer\nstream: S\nname: "C{v}"\n', "name"),
    "consumer stream": (
        'kind: Stream\nname: "S{v}"\nsubjects: [s.>]\n'
        '---\nkind: Consumer\nstream: "S{v}"\nname: C\n',
        "stream",
    ),
    "filter subject": (
        STREAM + '---\nkind: Consumer\nstream: S\nname: C\nfilter_subject: "s.{v}a"\n',
        "filter_subject",
    ),
    "filter subjects": (
        STREAM + '---\nkind: Consumer\nstream: S\nname: C\nfilter_subjects: ["s.b", "s.{v}a"]\n',
        "filter_subjects.1",
    ),
    "deliver subject": (
        STREAM + '---\nkind: Consumer\nstream: S\nname: C\ndeliver_subject: "d.{v}x"\n',
        "deliver_subject",
    ),
    "deliver group": (
        STREAM
        + "---\nkind: Consumer\nstream: S\nname: C\ndeliver_subject: d.x\n"
        + 'deliver_group: "g{v}"\n',
        "deliver_group",
    ),
    "bucket source domain": (
        'kind: KeyValue\nname: b\nsources:\n  - name: o\n    domain: "hub{v}"\n',
        "sources.0.domain",
    ),
    "bucket republish": (
        'kind: KeyValue\nname: b\nrepublish: {src: ">", dest: "r{v}.>"}\n',
        "republish.dest",
    ),
}


def _written(text: str, value: str) -> str:
    """``text`` with ``value`` in place of ``{v}``, written as YAML's double-quoted escapes
    (a NUL or ESC cannot stand in a YAML file as it is)."""
    escaped = "".join(c if " " < c < "\x7f" else f"\\U{ord(c):08X}" for c in value)
    return text.replace("{v}", escaped)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hidden_character_is_refused_in_every_name_and_subject_at_its_line(
    tmp_path: Path, case: str
) -> None:
    text, path = CASES[case]
    spec = tmp_path / "s.yaml"
    line = 1 + max(n for n, row in enumerate(text.splitlines()) if "{v}" in row)
    for shown in ["", *SHOWN]:  # the document is valid without the character
        spec.write_text(_written(text, shown), encoding="utf-8")
        load_specs([spec])
    for value in [*HIDDEN, *JOINED_WRONG]:
        spec.write_text(_written(text, value), encoding="utf-8")
        with pytest.raises(SpecError) as caught:
            load_specs([spec])
        refused = [(str(p.location), p.path) for p in caught.value.problems]
        assert (f"{spec}:{line}", path) in refused, (ascii(value), refused)
        said = next(p for p in caught.value.problems if p.path == path).message
        char = hidden_character(value) or ""
        assert char and f"U+{ord(char):04X}" in said and char not in said, ascii(said)


@pytest.mark.parametrize("case", sorted(CASES))
def test_both_engines_refuse_each_hidden_character(case: str) -> None:
    """jsonschema-rs (the quick yes) and jsonschema (what explains) refuse the same
    documents: a yes from either would let the name through unexplained or unchecked;
    both take a joiner between two visible characters of another script or emoji."""
    text, _ = CASES[case]
    for char in [*HIDDEN, *JOINED_WRONG, *SHOWN]:
        for body in yaml.safe_load_all(_written(text, char)):
            kind = body["kind"]
            plain = yaml.safe_load_all(_written(text, ""))
            valid = char in SHOWN or any(other == body for other in plain)
            assert quick_check(kind)(body) is valid, (case, ascii(char))
            assert validator(kind).is_valid(body) is valid, (case, ascii(char))


def test_a_bidi_override_written_as_it_is_is_refused(tmp_path: Path) -> None:
    """The Trojan Source way: the character itself in the file, not an escape."""
    spec = tmp_path / "s.yaml"
    spec.write_text("kind: Stream\nname: ORDERS\u202eX\nsubjects: [o.>]\n", encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_specs([spec])
    (problem,) = caught.value.problems
    assert (str(problem.location), problem.path) == (f"{spec}:2", "name")
    assert "U+202E" in problem.message and "\u202e" not in str(problem)


def _patterns(node: object) -> list[str]:
    if isinstance(node, dict):
        own = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        return own + [p for value in node.values() for p in _patterns(value)]
    if isinstance(node, list):
        return [p for value in node for p in _patterns(value)]
    return []


def test_the_list_is_in_one_place_and_every_name_and_subject_refers_to_it() -> None:
    """The characters are listed once, in ``$defs/visible_text``; each name or subject
    definition refers to it (``$ref``) beside its own pattern for the rest, and no other
    pattern of any schema copies the list."""
    defs = schema("document")["$defs"]
    listed = defs["visible_text"]["pattern"].removeprefix("^(?:[^").partition("]")[0]
    every = [p for key in SCHEMA_FILES for p in _patterns(schema(key))]
    assert [p for p in every if listed in p] == [defs["visible_text"]["pattern"]]
    named = [defs[name] for name in ("subject", "literal_subject", "stream_name")]
    named += [defs["consumer_name"]]
    named.append(schema("KeyValue")["$defs"]["bucket_source"]["properties"]["domain"])
    for definition in named:
        assert definition["$ref"] == VISIBLE_TEXT, definition
    assert [hidden_character(f"a{c}") for c in HIDDEN] == HIDDEN
    assert [hidden_character(f"a{c}") for c in SHOWN] == [None] * len(SHOWN)


def test_a_name_broken_twice_by_one_character_is_one_problem(tmp_path: Path) -> None:
    """A tab breaks the name's own pattern (white space) and ``$defs/visible_text``'s: one
    problem, the one naming the character; a name broken by its own pattern alone still
    reads in its own words."""
    spec = tmp_path / "s.yaml"
    spec.write_text('kind: Stream\nname: "OR\\tD"\nsubjects: [o.>]\n', encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_specs([spec])
    (problem,) = caught.value.problems
    assert (str(problem.location), problem.path) == (f"{spec}:2", "name")
    assert "U+0009" in problem.message and "\t" not in problem.message
    spec.write_text("kind: Stream\nname: OR.D\nsubjects: [o.>]\n", encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_specs([spec])
    (problem,) = caught.value.problems
    assert "stream name" in problem.message and "U+" not in problem.message
