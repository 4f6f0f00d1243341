"""``reconcile export``: live state → spec files (a plan on them is empty)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import yaml

from reconciler.cli.options import (
    connection_options,
    owner_option,
    project_options,
    resolve_target,
)
from reconciler.cli.output import notice
from reconciler.errors import ReconcileError
from reconciler.model.values import LEGACY_COMMAND

if TYPE_CHECKING:
    from reconciler.planning.export import ExportedFile

#: Where editors find the spec schema: a stable published address, never a path of the
#: machine that exported (the files are meant for git).
SCHEMA_URL = (
    "https://raw.githubusercontent.com/jetstream-gitops/jetstream-gitops/main/"
    "schemas/document.schema.json"
)
HEADER = "# yaml-language-server: $schema={schema}\n"


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Block style, keys in the order the export gives them (libyaml's emitter when
    PyYAML has it: the same text, several times faster than the pure-Python one)."""


#: What a string the server gave must not spread over lines or carry as it is when the
#: YAML is printed to a CI log: a line break (its next line could start ``::error::``),
#: a ``::`` (a folded line could too) or the runner's older ``##[command]`` form.
_UNSAFE_IN_LOGS = ("\n", "\r", "::", LEGACY_COMMAND)
#: Never fold a long line: a folded string's next line starts with what followed a blank.
_NO_FOLDING = 2**31 - 1


def _string(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    """A string, double-quoted (line breaks as ``\\n``) when it holds anything of
    :data:`_UNSAFE_IN_LOGS`: then no line of the output starts a workflow command."""
    style = '"' if any(part in data for part in _UNSAFE_IN_LOGS) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _string)


def _dump(documents: tuple[dict[str, Any], ...]) -> str:
    """The documents as YAML; a ``##[`` (only ever inside a double-quoted string, see
    :func:`_string`) written ``#\\x23[``, which YAML reads back as ``##[``."""
    text = yaml.dump_all(
        documents,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=_NO_FOLDING,
    )
    return str(text).replace(LEGACY_COMMAND, "#\\x23[")


def write_file(folder: Path, name: str, text: str) -> None:
    """Write ``folder/name`` without following a link that stands there.

    The text goes to a new temporary file in ``folder`` that is then renamed over
    ``name``: a rename replaces the directory entry itself, so an existing symlink is
    replaced, never written through (nothing outside the folder is touched).
    """
    if Path(name).name != name or name in ("", ".", ".."):
        raise ReconcileError(f"refusing to write {name!r}: not a plain file name")
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".export-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, folder / name)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@click.command(name="export")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write one file per stream or bucket into this folder (default: stdout).",
)
@owner_option
@click.option(
    "--all-owners",
    is_flag=True,
    help="Also export resources other owners manage (left out by default, so that "
    "applying the export, even with --prune, never touches them).",
)
@project_options
@connection_options
@click.pass_context
def export(
    ctx: click.Context,
    /,
    out: Path | None,
    owner: str,
    all_owners: bool,
    project_file: Path | None,
    env_name: str | None,
    **conn: Any,
) -> int:
    """Write the server's streams, consumers and buckets as spec files.

    File names are stream-NAME.yaml, kv-NAME.yaml and objectstore-NAME.yaml, with every
    character other than letters, digits, '_' and '-' written as %XX, so no two
    resources share a file. A plan on the exported files is empty.
    """
    from reconciler.execution import run
    from reconciler.planning.export import export_state

    target = resolve_target(
        ctx,
        paths=(),
        conn=conn,
        owner=owner,
        project_file=project_file,
        env_name=env_name,
        needs_paths=False,
    )
    live = asyncio.run(run.fetch_live(target.options, on_notice=notice))
    files = export_state(live, owner=None if all_owners else target.owner, on_skip=notice)
    return write_files(files, out, command="export")


def write_files(files: list[ExportedFile], out: Path | None, *, command: str) -> int:
    """Spec files into ``out`` (each by rename, with the schema header and the
    ``command`` that wrote them: export or import), or to stdout."""
    if out is None:
        click.echo("---\n".join(_dump(f.documents) for f in files), nl=False)
        return 0
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ReconcileError(f"{out}: cannot create the folder: {err.strerror}") from None
    written: set[str] = set()
    for exported in files:
        if exported.name in written:  # file_name is injective: this is a bug
            raise ReconcileError(f"two resources map to the file {exported.name}")
        said = f"# {command}ed by `reconcile {command}`\n"
        text = HEADER.format(schema=SCHEMA_URL) + said + _dump(exported.documents)
        try:
            write_file(out, exported.name, text)
        except OSError as err:
            raise ReconcileError(f"{out / exported.name}: {err.strerror}") from None
        written.add(exported.name)
    notice(f"{command}ed {len(written)} file(s) to {out}")
    return 0
