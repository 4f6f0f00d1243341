"""``reconcile import --from nats-cli|terraform|nack PATH... --out DIR``: another tool's
files as specs."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from reconciler.cli.export_cmd import write_files, write_folders
from reconciler.cli.options import overwrite_option, strict_option
from reconciler.cli.output import notice
from reconciler.errors import ReconcileError
from reconciler.importers import IMPORTERS

if TYPE_CHECKING:
    from reconciler.specs.project import Environment


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
    help="Write one spec file per stream or bucket into this folder (default: stdout). "
    "nack: the resources naming an Account go to OUT-<account> beside it, that "
    "environment's own resources.",
)
@overwrite_option
@click.option(
    "--project",
    "project_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="nack: the project file that NACK Account resources become environments of "
    "(default: reconcile.yaml here, when it exists).",
)
@strict_option
def import_(
    paths: tuple[Path, ...],
    source: str,
    out: Path | None,
    overwrite: bool,
    strict: bool,
    project_file: Path | None,
) -> int:
    """Turn another tool's files into spec files; no server.

    The files are read and validated as `reconcile validate` does (every problem with its
    file and line, nothing written when one is found); each stream or bucket is written
    with its consumers and only the fields that change something, durations and sizes in
    human units. Nothing is invented: no ownership marker, no value the files did not
    hold. `reconcile plan` on the result then adopts the resources already on a server
    (it adds the marker) and changes nothing else. Importing again into the same folder
    refreshes the files import or export wrote; a file of the same name they did not
    write is refused, and nothing written, unless --overwrite.
    """
    from reconciler.execution.stages import fewer_collections

    # Nearly all an import allocates lives to its end: the collector's passes over it
    # were 13% of an import of 30,000 resources (perf record; the peak RSS is the same).
    with fewer_collections():
        return _import(paths, source, out, overwrite, strict, project_file)


def _import(
    paths: tuple[Path, ...],
    source: str,
    out: Path | None,
    overwrite: bool,
    strict: bool,
    project_file: Path | None,
) -> int:
    from reconciler.console import shown
    from reconciler.importers import read
    from reconciler.model.defaults import newest_server
    from reconciler.planning.export import import_files
    from reconciler.planning.export_text import file_texts
    from reconciler.specs.project import PROJECT_FILE

    found = read(source, paths, strict=strict)
    for warning in found.warnings:
        click.echo(shown(str(warning)), err=True)  # names, file names: escaped
    if not found.specs and not found.environments and not any(found.by_environment.values()):
        listed = ", ".join(str(path) for path in paths)  # escaped where it is printed
        raise ReconcileError(
            f"nothing to import from {listed}: no resource found as --from {source} reads "
            "them; nothing was written"
        )
    project = project_file or (Path(PROJECT_FILE) if Path(PROJECT_FILE).exists() else None)
    folders = _own_folders(found.by_environment, found.environments, out, project)  # checked
    server = newest_server()
    shared = import_files(found.specs, server)
    if out is None:  # stdout (no Account owns a resource: _own_folders)
        write_files(shared, out, command="import")
    else:  # every folder checked before any is written
        writes = {out: file_texts(shared, command="import")} if shared else {}
        for name, folder in folders.items():
            own = import_files(found.by_environment[name], server)
            writes[folder] = file_texts(own, command="import")
        write_folders(writes, command="import", overwrite=overwrite)
        if not shared:
            _nothing_shared(out, bool(folders), project)
    if found.environments:
        base = project.parent if project is not None and project.exists() else Path()
        environments = {
            name: {**env, "resources": [os.path.relpath(folders[name], base)]}
            if name in folders
            else env
            for name, env in found.environments.items()
        }
        _environments(environments, project)
    return 0


def _nothing_shared(out: Path, owned: bool, project: Path | None) -> None:
    """Say why nothing went to ``out`` (NACK: every resource names an Account, or the
    files hold Accounts only), which is not made for nothing; and when the project file
    shares ``out`` with every environment and it does not exist, that they fail to plan
    until it does."""
    why = (
        "every resource names an Account (written to its environment's folder)"
        if owned
        else "the files hold NACK Accounts only, no stream, consumer or bucket"
    )
    made = "" if out.exists() else f"; {out} was not created"
    notice(f"nothing imported into {out}: {why}{made}")
    if out.exists() or project is None or not project.exists():
        return
    from reconciler.specs.project import load_project

    where = Path(os.path.realpath(out))
    if any(Path(os.path.realpath(p)) == where for p in load_project(project).specs):
        notice(
            f"{project} shares {out} with every environment (specs:): they fail to plan "
            f"until it exists; create it, or take it out of specs:"
        )


def _own_folders(
    names: Collection[str],
    accounts: Mapping[str, Mapping[str, Any]],
    out: Path | None,
    project: Path | None,
) -> dict[str, Path]:
    """Where each environment's own specs go: ``OUT-<name>``, beside ``OUT`` (never inside
    it, nor inside any spec folder the project shares: every environment applies those,
    and one Account's streams would go into the other's; nor for an environment the
    project already has that connects to other servers than the Account's). Refused,
    before anything is written, when that cannot hold. Names differing only in case get
    folders a case-insensitive disk keeps apart, the export's rule (``apart_in_case``:
    the second gains ``~`` and a hash; the names taken in order, so the same each time).
    """
    from reconciler.planning.export import apart_in_case

    if not names:
        return {}
    if out is None:
        raise click.UsageError(
            f"--out is needed: the resources of Account(s) {', '.join(sorted(names))} go "
            "to a folder of their own each"
        )
    ordered = sorted(names)
    given = apart_in_case((f"{out.name}-{name}" for name in ordered), "")
    folders = {name: out.parent / folder for name, folder in zip(ordered, given, strict=True)}
    if project is None or not project.exists():
        return folders
    from reconciler.specs.project import load_project

    loaded = load_project(project)
    shared = [Path(os.path.realpath(p)) for p in loaded.specs]
    for name, folder in folders.items():
        _same_servers(name, accounts.get(name, {}), loaded.environments.get(name), project)
        real = Path(os.path.realpath(folder))
        inside = next((p for p in shared if real == p or real.is_relative_to(p)), None)
        if inside is not None:
            raise ReconcileError(
                f"{folder}: Account {name}'s specs would be inside {inside}, which {project} "
                "shares with every environment: give --out a folder beside the shared specs"
            )
        if not real.is_relative_to(Path(os.path.realpath(project.parent))):
            raise ReconcileError(
                f"{folder}: Account {name}'s specs would be outside the folder of {project}, "
                "where its environments' resources must be"
            )
    return folders


def _same_servers(
    name: str, account: Mapping[str, Any], existing: Environment | None, project: Path
) -> None:
    """An environment ``name`` already in the project must connect where the Account
    does (a second import of the same manifests): else the Account's specs, written to
    its folder, would be applied to that environment's servers. The servers are not
    shown (a URL may hold a password)."""
    wanted = ",".join(str(s) for s in account.get("servers") or [])
    if existing is not None and existing.settings.get("servers", "") != wanted:
        raise ReconcileError(
            f"Account {name}: {project} already has an environment {name} that connects "
            "to other servers: the Account's specs would be applied there; rename the "
            "Account or that environment"
        )


def _environments(environments: dict[str, dict[str, Any]], project: Path | None) -> None:
    """NACK Accounts into the project file's environments (or shown, when there is none)."""
    import yaml

    from reconciler.specs.project import PROJECT_FILE, add_environments

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
    for name in kept:  # its own specs are not applied until it names them
        if resources := environments[name].get("resources"):
            click.echo(
                f"environment {name}: add resources: {resources} to it in {project}, or its "
                "Account's specs are not applied with it",
                err=True,
            )
