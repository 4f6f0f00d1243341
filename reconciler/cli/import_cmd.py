"""``reconcile import --from nats-cli|terraform|nack PATH... --out DIR``: another tool's
files as specs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from reconciler.cli.export_cmd import write_files
from reconciler.cli.options import strict_option
from reconciler.importers import IMPORTERS


@click.command(name="import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--from",
    "source",
    type=click.Choice(list(IMPORTERS)),
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
@click.option(
    "--project",
    "project_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="nack: the project file that NACK Account resources become environments of "
    "(default: reconcile.yaml here, when it exists).",
)
@strict_option
def import_(
    paths: tuple[Path, ...], source: str, out: Path | None, strict: bool, project_file: Path | None
) -> int:
    """Turn another tool's files into spec files; no server.

    The files are read and validated as `reconcile validate` does (every problem with its
    file and line, nothing written when one is found); each stream or bucket is written
    with its consumers and only the fields that change something, durations and sizes in
    human units. Nothing is invented: no ownership marker, no value the files did not
    hold. `reconcile plan` on the result then adopts the resources already on a server
    (it adds the marker) and changes nothing else.
    """
    from reconciler.console import shown
    from reconciler.importers import read
    from reconciler.model.defaults import newest_server
    from reconciler.planning.export import import_files

    found = read(source, paths, strict=strict)
    for warning in found.warnings:
        click.echo(shown(str(warning)), err=True)  # names, file names: escaped
    code = write_files(import_files(found.specs, newest_server()), out, command="import")
    if found.environments:
        _environments(found.environments, project_file)
    return code


def _environments(environments: dict[str, dict[str, Any]], given: Path | None) -> None:
    """NACK Accounts into the project file's environments (or shown, when there is none)."""
    import yaml

    from reconciler.specs.project import PROJECT_FILE, add_environments

    project = given or (Path(PROJECT_FILE) if Path(PROJECT_FILE).exists() else None)
    if project is None or not project.exists():
        from reconciler.model.values import printable

        dumped = yaml.safe_dump({"environments": environments}, sort_keys=False)
        snippet = "".join(f"{printable(line)}\n" for line in dumped.splitlines())  # escaped
        click.echo(
            f"{len(environments)} NACK Account(s) found; no project file to add them to "
            f"(--project, or create {PROJECT_FILE}). As environments:\n{snippet}",
            err=True,
        )
        return
    added = add_environments(project, environments)
    kept = sorted(set(environments) - set(added))
    if added:
        click.echo(f"added environment(s) {', '.join(added)} to {project}", err=True)
    if kept:
        click.echo(
            f"environment(s) {', '.join(kept)} already in {project}: left as they are", err=True
        )
