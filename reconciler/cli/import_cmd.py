"""``reconcile import --from nats-cli|terraform|nack PATH... --out DIR``: another tool's
files as specs."""

from __future__ import annotations

from pathlib import Path

import click

from reconciler.cli.export_cmd import write_files
from reconciler.cli.options import strict_option

SOURCES = ["nats-cli", "terraform", "nack"]


@click.command(name="import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--from",
    "source",
    type=click.Choice(SOURCES),
    required=True,
    help="What wrote the files: nats-cli (stream and consumer config or info JSON files, "
    "and `nats account backup` folders); terraform (terraform.tfstate, and .tf files or "
    "folders of the nats-io/jetstream provider); nack (the jetstream.nats.io custom "
    "resources of NACK, v1beta1 and v1beta2, as YAML files or folders).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write one spec file per stream or bucket into this folder (default: stdout).",
)
@strict_option
def import_(paths: tuple[Path, ...], source: str, out: Path | None, strict: bool) -> int:
    """Turn another tool's files into spec files; no server.

    The files are read and validated as `reconcile validate` does (every problem with its
    file and line, nothing written when one is found); each stream or bucket is written
    with its consumers and only the fields that change something, durations and sizes in
    human units. Nothing is invented: no ownership marker, no value the files did not
    hold. `reconcile plan` on the result then adopts the resources already on a server
    (it adds the marker) and changes nothing else.
    """
    from reconciler.model.defaults import newest_server
    from reconciler.planning.export import import_files
    from reconciler.specs import nack, terraform
    from reconciler.specs.validate import load_specs, validate_documents

    if source in ("terraform", "nack"):
        reader = terraform if source == "terraform" else nack
        documents, warnings = reader.load(list(paths))
        specs = validate_documents(documents, warnings=warnings, strict=strict)
        for warning in warnings:
            click.echo(str(warning), err=True)
    else:
        specs = load_specs(list(paths), strict=strict)
    return write_files(import_files(specs, newest_server()), out, command="import")
