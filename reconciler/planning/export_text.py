"""The text of an exported spec file: one rule for every writer of the export format
(``reconcile export`` and ``import``, and the ``specs/`` folder of a backup).

A file is the schema header, a line naming the command that wrote it, then its
documents as YAML (block style, keys in the export's order, no line folded).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import metadata
from typing import TYPE_CHECKING, Any

import yaml

from reconciler.errors import ReconcileError
from reconciler.model.values import LEGACY_COMMAND, hidden

if TYPE_CHECKING:
    from reconciler.planning.export import ExportedFile

#: Where editors find the spec schema: the published schema of the release that wrote the
#: file (its tag, so the address keeps resolving to the schema these files were checked
#: against when the branch moves on), never a path of the machine that exported (the
#: files are meant for git).
SCHEMA_URL = (
    "https://raw.githubusercontent.com/jetstream-gitops/jetstream-gitops/v{version}/"
    "schemas/document.schema.json"
)


@cache
def installed_version() -> str:
    """The installed release of the tool (a checkout that was never installed: 0.0.0);
    read once per process: reading the package's metadata parses its METADATA file, and
    an import of 30,000 resources spent half its time reading it for each of 20,000 files."""
    try:
        return metadata.version("jetstream-gitops")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def schema_url() -> str:
    """:data:`SCHEMA_URL` for the installed release."""
    return SCHEMA_URL.format(version=installed_version())


HEADER = "# yaml-language-server: $schema={schema}\n"


class _Slow(Exception):
    """A value :meth:`_Dumper.represent` leaves to PyYAML's own representer."""


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Block style, keys in the order the export gives them (libyaml's emitter when
    PyYAML has it: the same text, several times faster than the pure-Python one)."""

    def represent(self, data: Any) -> None:
        """One document: the nodes PyYAML's SafeRepresenter (with :func:`_string`) makes
        for plain JSON values, made directly (its dispatch per value was a fifth of an
        import of 30,000 resources). Anything else, and a dict or list met twice in a
        document (PyYAML writes an anchor and an alias), goes the representer's way."""
        if self.sort_keys or self.default_flow_style is not False or self.default_style:
            super().represent(data)
            return
        try:
            node = _node(data, set())
        except _Slow:
            super().represent(data)
            return
        self.serialize(node)


_STR, _INT, _BOOL = "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:bool"


def _node(data: Any, seen: set[int]) -> yaml.Node:
    kind = type(data)
    if kind is str:
        return yaml.ScalarNode(_STR, data, style=_style(data))
    if kind is int:
        return yaml.ScalarNode(_INT, str(data))
    if kind is bool:
        return yaml.ScalarNode(_BOOL, "true" if data else "false")
    if data is None:
        return yaml.ScalarNode("tag:yaml.org,2002:null", "null")
    if (kind is not dict and kind is not list) or id(data) in seen:
        raise _Slow
    seen.add(id(data))
    if kind is dict:
        pairs = [(_node(k, seen), _node(v, seen)) for k, v in data.items()]
        return yaml.MappingNode("tag:yaml.org,2002:map", pairs, flow_style=False)
    items = [_node(v, seen) for v in data]
    return yaml.SequenceNode("tag:yaml.org,2002:seq", items, flow_style=False)


#: What a string the server gave must not spread over lines or carry as it is when the
#: YAML is printed to a CI log: a line break (its next line could start ``::error::``),
#: a ``::`` (a folded line could too) or the runner's older ``##[command]`` form.
_UNSAFE_IN_LOGS = ("\n", "\r", "::", LEGACY_COMMAND)
_UNSAFE = re.compile("|".join(re.escape(part) for part in _UNSAFE_IN_LOGS))  # one search
#: Never fold a long line: a folded string's next line starts with what followed a blank.
_NO_FOLDING = 2**31 - 1


def _style(data: str) -> str | None:
    """Double-quoted when ``data`` holds anything of :data:`_UNSAFE_IN_LOGS` or a
    character that is not printable (a bidi override, a zero-width one: :func:`dump`
    writes those as escapes, which only a double-quoted string reads back)."""
    return '"' if _UNSAFE.search(data) or not data.isprintable() else None


def _string(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    """A string, double-quoted (line breaks as ``\\n``) when it holds anything of
    :data:`_UNSAFE_IN_LOGS`: then no line of the output starts a workflow command."""
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=_style(data))


_Dumper.add_representer(str, _string)


def dump(documents: tuple[dict[str, Any], ...]) -> str:
    """The documents as YAML, with nothing a log or a reviewer would read otherwise
    (:func:`_inert`)."""
    text = yaml.dump_all(
        documents,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=_NO_FOLDING,
    )
    return _inert(str(text))


def _inert(text: str) -> str:
    """PyYAML's text with ``##[`` written ``#\\x23[`` and each format character (U+202E
    reorders what a reviewer reads after it; PyYAML writes it as it is) as an escape:
    both only ever inside a double-quoted string (:func:`_style`), read back the same."""
    text = text.replace(LEGACY_COMMAND, "#\\x23[")
    if text.isascii():
        return text
    return _NOT_ASCII.sub(lambda found: _yaml_escape(found.group()), text)


_NOT_ASCII = re.compile(r"[^\x00-\x7f]")


def _yaml_escape(char: str) -> str:
    """``char`` as a YAML double-quoted string's escape when it is :func:`hidden`."""
    if not hidden(char):
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def file_text(exported: ExportedFile, *, command: str) -> str:
    """One file's text: the schema header, who wrote it (``export``/``import``), the YAML."""
    said = f"# {command}ed by `reconcile {command}`\n"
    return HEADER.format(schema=schema_url()) + said + dump(exported.documents)


#: What a file :func:`file_text` wrote begins with: the schema line (any address: older
#: releases named another) and the line naming the command, ``# exported by `reconcile
#: export``` or ``imported``/``import`` (older releases: ``# exported by `reconcile```).
_SCHEMA_LINE = HEADER.partition("{schema}")[0].encode()
_SAID = re.compile(rb"# (?:export|import)ed by `reconcile(?: export| import)?`\n")
#: How much of a file :func:`written_by_tool` reads (its first two lines).
HEAD_BYTES = 4096


def written_by_tool(head: bytes) -> bool:
    """Whether a file beginning with ``head`` (its first :data:`HEAD_BYTES` or all of
    it) is one ``reconcile export`` or ``import`` wrote: the one kind of file in an
    ``--out`` folder they replace without ``--overwrite`` (refreshing an export in place
    is the usual way to use it); anything else is someone's own file."""
    first, newline, rest = head.partition(b"\n")
    return bool(newline) and first.startswith(_SCHEMA_LINE) and _SAID.match(rest) is not None


def file_texts(files: list[ExportedFile], *, command: str) -> list[tuple[str, str]]:
    """(file name, text) of each file, no two names equal in any case: a name met again
    in other case is the export's ``case_twin_name`` (``apart_in_case``: a
    case-insensitive disk would keep one file of the two). Two resources mapping to one
    name is an error (``file_name`` is injective: that would be a bug)."""
    from reconciler.planning.export import apart_in_case

    seen: set[str] = set()
    for exported in files:
        if exported.name in seen:
            raise ReconcileError(f"two resources map to the file {exported.name}")
        seen.add(exported.name)
    names = apart_in_case(exported.name for exported in files)
    return [
        (name, file_text(exported, command=command))
        for name, exported in zip(names, files, strict=True)
    ]
