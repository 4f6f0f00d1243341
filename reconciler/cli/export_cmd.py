"""``reconcile export``: live state → spec files (a plan on them is empty)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click
import yaml

from reconciler.cli.options import connection_options, to_connection_options
from reconciler.cli.output import notice

HEADER = "# yaml-language-server: $schema={schema}\n# exported by `reconcile export`\n"


class _Dumper(yaml.SafeDumper):
    """Block style, keys in the order the export gives them."""


def _dump(documents: tuple[dict[str, Any], ...]) -> str:
    return yaml.dump_all(
        documents, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True
    )


@click.command(name="export")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write one file per stream or bucket into this folder (default: stdout).",
)
@connection_options
def export(out: Path | None, **conn: Any) -> int:
    """Write the server's streams, consumers and buckets as spec files."""
    from reconciler.execution import run
    from reconciler.planning.export import export_state

    live = asyncio.run(run.fetch_live(to_connection_options(conn), on_notice=notice))
    files = export_state(live)
    if out is None:
        click.echo("---\n".join(_dump(f.documents) for f in files), nl=False)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    from reconciler.specs.schema import SCHEMA_DIR

    schema = SCHEMA_DIR / "document.schema.json"
    for exported in files:
        text = HEADER.format(schema=schema.as_uri()) + _dump(exported.documents)
        (out / exported.name).write_text(text, encoding="utf-8")
    notice(f"exported {len(files)} file(s) to {out}")
    return 0
