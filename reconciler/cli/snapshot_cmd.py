"""``reconcile snapshot --env NAME --out FILE``: live configs as JSON Lines for the fleet job."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from reconciler.cli.options import (
    connection_options,
    project_file_option,
    to_connection_options,
)
from reconciler.cli.output import notice


def _check_env(_: click.Context, __: click.Parameter, value: str) -> str:
    if not value or value.startswith(".") or any(c in value for c in "/\\\n\r\t "):
        raise click.BadParameter("an environment name is a folder name: no spaces or slashes")
    return value


@click.command()
@click.option(
    "--env",
    required=True,
    callback=_check_env,
    help="Environment name: the project file's environment (its connection is used), or "
    "the sub-folder of the fleet's spec folder.",
)
@project_file_option
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="JSON Lines file to write (replaced atomically); '-' for stdout.",
)
@connection_options
def snapshot(env: str, out: Path, project_file: Path | None, **conn: Any) -> int:
    """Write every live stream and consumer as a JSON Lines snapshot record.

    One record per line: {env, captured_at, kind, stream, name, config, server_version,
    api_level}; config is the server's own config object, verbatim (KeyValue and
    ObjectStore buckets appear as their KV_/OBJ_ streams). The tool's own apply lock
    bucket and a backup's temporary mirrors (any RECONCILE_BACKUP_ stream) are left
    out, each named on stderr. See
    schemas/snapshot.schema.json.
    """
    from reconciler.execution import stages
    from reconciler.execution.stages import environment_target
    from reconciler.identity import tools_own
    from reconciler.model.values import printable
    from reconciler.planning.snapshot import snapshot_records
    from reconciler.specs.project import find_project, load_project

    options = to_connection_options(conn)
    found = project_file or find_project()
    if found is not None:
        project = load_project(found)
        if env in project.environments:  # the environment's own server
            options = environment_target(project, env, options, project.owner or "").options
    live = asyncio.run(stages.fetch_live(options, on_notice=notice))
    for name in sorted(n for n in live.streams if tools_own(n)):  # said, as backup does
        notice(f"{printable(name)}: the tool's own stream, not user data: left out")
    records = snapshot_records(live, env=env, captured_at=datetime.now(UTC))
    count = _write(records, out)
    where = "stdout" if str(out) == "-" else str(out)
    streams = sum(1 for record in records if record["kind"] == "Stream")
    notice(
        f"snapshot of {env}: {streams} streams, {len(records) - streams} consumers "
        f"({count} records) written to {where}"
    )
    return 0


def _write(records: list[dict[str, Any]], out: Path) -> int:
    from reconciler.cli.output import write_whole
    from reconciler.planning.snapshot import write_jsonl

    if str(out) == "-":
        return write_jsonl(records, sys.stdout)
    write_whole(out, lambda file: write_jsonl(records, file), what="--out (or - for stdout)")
    return len(records)
