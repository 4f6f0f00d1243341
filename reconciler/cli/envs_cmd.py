"""``reconcile envs``: the environments of the project file and where each one points."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from reconciler.cli.options import format_option, project_file_option, required_project
from reconciler.model.values import inert_json


@click.command()
@project_file_option
@format_option(["text", "json"], "environments")
def envs(project_file: Path | None, fmt: str) -> int:
    """List the project's environments: server, domain, credentials' source, overlays.

    Secrets are never shown: a password or token appears as the variable that holds it
    ($NAME), a server URL without its credentials. Nothing connects to a server.
    """
    from reconciler.jetstream.connection import redact_url
    from reconciler.model.values import printable

    project = required_project(project_file, "no project file")
    rows: list[dict[str, Any]] = []
    for environment in project.environments.values():
        shown = environment.describe()
        servers = shown.get("servers")
        if isinstance(servers, str) and not servers.startswith(("$", "embedded")):
            shown["servers"] = ",".join(redact_url(url) for url in servers.split(","))
        rows.append(shown)
    if fmt == "json":
        document = {"project": str(project.path), "owner": project.owner, "environments": rows}
        click.echo(inert_json(json.dumps(document, indent=2)))
        return 0
    click.echo(f"{project.path}: owner {project.owner or 'default'}, {len(rows)} environment(s)")
    for row in rows:
        auth = [
            f"{key} {row[key]}"
            for key in ("context", "creds", "nkey", "user", "password", "token")
            if key in row
        ]
        where = row.get("servers") or row.get("context")
        domain = f", domain {row['domain']}" if "domain" in row else ""
        click.echo(printable(f"  {row['name']}: {where}{domain}"))
        if auth:
            click.echo(printable(f"      auth: {', '.join(auth)}"))
        extras = [f"{len(row['overlays'])} overlay(s)", f"{len(row['resources'])} extra path(s)"]
        click.echo(f"      {', '.join(extras)}")
        if "lifecycle" in row:
            said = ", ".join(f"{k}: {json.dumps(v)}" for k, v in row["lifecycle"].items())
            click.echo(printable(f"      lifecycle: {said}"))
    return 0
