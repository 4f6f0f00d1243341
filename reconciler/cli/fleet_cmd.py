"""``reconcile fleet drift``: drift across every environment of a fleet, on Apache Spark."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import click

from reconciler.cli.options import owner_option, project_owner
from reconciler.cli.output import notice
from reconciler.errors import ReconcileError

#: What ``pip install 'jetstream-gitops[fleet]'`` brings.
FLEET_MODULES = ("pyspark", "pyarrow", "pandas")


@click.group()
def fleet() -> None:
    """Fleet-wide reports over snapshots of many environments (Apache Spark)."""


@fleet.command()
@click.option(
    "--specs",
    "specs_dir",
    type=click.Path(exists=True, path_type=Path),
    help="A project file (reconcile.yaml: its environments and overlays), or a folder "
    "with one sub-folder of spec files per environment. Default: ./reconcile.yaml.",
)
@click.option(
    "--snapshots",
    required=True,
    type=click.Path(exists=True, path_type=Path),
    help="A JSON Lines snapshot file, or a folder of them (see `reconcile snapshot`).",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Output folder: drift/ and history/ (Parquet), summary.json, report.html.",
)
@click.option(
    "--backups",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A folder of backup folders, BACKUPS/<env>/.../manifest.json: adds the age of "
    "each stream's newest backup and the streams never backed up (OUT/backups).",
)
@click.option(
    "--spark-master",
    metavar="URL",
    envvar="SPARK_MASTER",
    show_envvar=True,
    help="Spark master, e.g. spark://host:7077 (default: local[*], this machine).",
)
@owner_option
def drift(
    specs_dir: Path | None,
    snapshots: Path,
    out_dir: Path,
    backups: Path | None,
    spark_master: str | None,
    owner: str,
) -> int:
    """Compare every environment's specs with its snapshots.

    Exit 0 when nothing drifted, 2 when drift is found, 1 on error (also when some
    snapshot lines or environment folders were invalid: they are reported with FILE:LINE,
    skipped, and everything else is still compared and written).
    """
    if missing := [m for m in FLEET_MODULES if importlib.util.find_spec(m) is None]:
        raise ReconcileError(
            f"the fleet job needs {', '.join(missing)}, not installed here: "
            "pip install 'jetstream-gitops[fleet]' (and Java for Spark)"
        )
    from reconciler.fleet.job import fleet_drift
    from reconciler.specs.project import find_project, load_project

    specs_dir = specs_dir or find_project()
    if specs_dir is None:
        raise click.UsageError("--specs is needed here: no reconcile.yaml in this folder")
    if specs_dir.is_file():  # a project file: its owner, as `plan --env` takes it
        owner = project_owner(click.get_current_context(), load_project(specs_dir), owner)
    result = fleet_drift(
        specs=specs_dir,
        snapshots=snapshots,
        out=out_dir,
        master=spark_master,
        on_notice=notice,
        backups=backups,
        owner=owner,
    )
    summary = result.summary
    for env in summary["errors"]["envs"]:
        when = f" ({env['day']})" if env["day"] else ""
        for problem in env["problems"]:
            notice(f"{env['env']}{when}: {problem}")
    for warning in summary["warnings"]:
        notice(f"warning: {warning}")
    for problem in summary["errors"].get("backups", ()):
        notice(problem)
    click.echo(_headline(summary, out_dir))
    return result.exit_code


def _headline(summary: dict[str, Any], out_dir: Path) -> str:
    totals, errors = summary["totals"], summary["errors"]
    envs = len(summary["by_env"])
    text = (
        f"{envs} environments: {totals['drift']} resources differ from the specs "
        f"({totals['drifted']} changed on the server in {totals['drifted_fields']} fields, "
        f"{totals['missing']} missing, {totals['unmanaged']} unmanaged (no spec), "
        f"{totals['orphaned']} orphaned); report in {out_dir}"
    )
    if "backups" in summary:
        backups = summary["backups"]
        text += f"; {backups['never_backed_up']} of {backups['streams']} streams never backed up"
    if errors["count"]:
        text += f"; {errors['count']} input errors (result incomplete)"
    return text
