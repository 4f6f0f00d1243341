"""``reconcile drift``: where the server differs from the specs (exit 0 in sync, 2 drift)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from reconciler.cli.options import (
    connection_options,
    format_option,
    owner_option,
    policy_option,
    project_options,
    resolve_target,
)
from reconciler.console.terminal import DriftFormat, TerminalConsole
from reconciler.errors import changes_status

if TYPE_CHECKING:
    from reconciler.planning.drift import DriftReport

FORMAT_NAMES = ["text", "json", "markdown", "html"]


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@format_option(FORMAT_NAMES, "report")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the report to FILE instead of standard output.",
)
@click.option(
    "--full",
    is_flag=True,
    help="Text: list every unmanaged and foreign resource by name (over 50 of them show "
    "as a count per kind).",
)
@owner_option
@policy_option
@project_options
@connection_options
@click.pass_context
def drift(
    ctx: click.Context,
    /,
    paths: tuple[Path, ...],
    fmt: str,
    out: Path | None,
    full: bool,
    owner: str,
    policies: tuple[Path, ...],
    project_file: Path | None,
    env_name: str | None,
    **conn: Any,
) -> int:
    """Report where the server differs from the specs.

    Exit status: 0 when everything is in sync, 2 when drift is found, 3 when a policy
    deny rule fails, 1 on error.
    Unmanaged resources that the project's ignore rules (reconcile.yaml's ignore:, a
    .reconcileignore) name are left out and counted per rule.
    """
    from reconciler.cli.output import write_whole
    from reconciler.execution import stages
    from reconciler.execution.stages import PlanRequest
    from reconciler.planning import drift as drift_report
    from reconciler.planning.policy import check_policy
    from reconciler.render.drift_text import headline, render_drift_text

    target = resolve_target(
        ctx, paths=paths, conn=conn, owner=owner, project_file=project_file, env_name=env_name
    )
    console = TerminalConsole(drift_format=cast(DriftFormat, fmt))
    wanted = PlanRequest.for_target(target, policies=policies, drift=True)
    plan = asyncio.run(stages.plan_for(wanted, console))
    report = drift_report.from_plan(plan)
    text = render_drift_text(report, full=True) if full and fmt == "text" else None
    if out is not None:  # the report and its findings written whole, or one line naming it
        whole = (text or console.drift_text(report)) + _policy_text(report, fmt)
        write_whole(out, lambda file: file.write(whole), what="--out (without it, standard output)")
        console.notice(f"{headline(report)} Report written to {out}.")
    else:
        if text is not None:
            click.echo(text, nl=False)
        else:
            console.show_drift(report)
        click.echo(_policy_text(report, fmt), nl=False)
    check_policy(report.policy, applying=False)  # a deny finding: exit 3 (docs/policy.md)
    return changes_status(report.has_drift)


def _policy_text(report: DriftReport, fmt: str) -> str:
    """The policy findings after a text or Markdown report (JSON carries them itself)."""
    from reconciler.render.policy import policy_lines, policy_markdown

    if not report.policy or fmt not in ("text", "markdown"):
        return ""
    lines = policy_lines if fmt == "text" else policy_markdown
    return "\n".join(lines(report.policy)) + "\n"
