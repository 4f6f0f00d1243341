"""``reconcile failover --from east --to west``: the standbys of east's streams take over
(docs/dr.md). Plans and asks like apply; ``--check`` shows each pair's health only."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from reconciler.cli.options import (
    Seconds,
    connection_options,
    format_option,
    owner_option,
    policy_option,
    required_project,
)
from reconciler.console.terminal import TerminalConsole
from reconciler.errors import ExitStatus, ReconcileError

if TYPE_CHECKING:
    from reconciler.execution.failover import FailoverPlan, FailoverResult


@click.command()
@click.option("--from", "origin", required=True, metavar="ENV", help="The primary environment.")
@click.option("--to", "standby", required=True, metavar="ENV", help="The standby environment.")
@click.option(
    "--stream", "streams", multiple=True, metavar="NAME", help="Only these pairs (repeat)."
)
@click.option(
    "--project",
    "project_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The project file (default: reconcile.yaml here).",
)
@click.option(
    "--wait",
    type=Seconds(minimum=0.1),
    default=30.0,
    show_default=True,
    help="How long a mirror may take to reach its fenced origin's last sequence; "
    "past it the origin gets its subjects back and the pair is refused.",
)
@click.option(
    "--unplanned",
    is_flag=True,
    help="The origin cannot be reached: promote without fencing it, and say what may be lost.",
)
@click.option(
    "--rollback", is_flag=True, help="Give fenced origins their subjects back (none promoted)."
)
@click.option(
    "--check", is_flag=True, help="Show each pair's health; change nothing (exit 2: not healthy)."
)
@format_option(["text", "json"], "failover plan, each pair's health and the result")
@click.option(
    "--lock-timeout",
    type=Seconds(),
    default=60.0,
    show_default=True,
    help="How long to wait for each server's apply lock.",
)
@click.option("--yes", "-y", "auto_approve", is_flag=True, help="Fail over without asking.")
@policy_option
@owner_option
@connection_options
def failover(
    origin: str,
    standby: str,
    streams: tuple[str, ...],
    project_file: Path | None,
    wait: float,
    unplanned: bool,
    rollback: bool,
    check: bool,
    fmt: str,
    lock_timeout: float,
    auto_approve: bool,
    policies: tuple[Path, ...],
    owner: str,
    **conn: Any,
) -> int:
    """Fail the standby pairs of --from over to --to: fence, wait, promote, consumers, verify.

    Judged as apply judges a plan before it asks: each environment's lifecycle (mode
    observe refuses) and policies (its project ones, then --policy; a deny exits 3)."""
    from reconciler.cli.options import project_target
    from reconciler.cli.plan_cmd import asks_for_yes
    from reconciler.execution.failover import fail_over, failover_request
    from reconciler.execution.stages import PlanRequest
    from reconciler.model.values import inert_json

    ctx = click.get_current_context()
    project = required_project(project_file, "failover needs a project file")
    requests = [
        PlanRequest.for_target(
            project_target(ctx, project, paths=(), conn=conn, owner=owner, env_name=name),
            policies=policies,
        )
        for name in (origin, standby)
    ]
    request = failover_request(
        requests[0],
        requests[1],
        streams=streams,
        wait=wait,
        unplanned=unplanned,
        rollback=rollback,
        approved=auto_approve,
        lock_timeout=lock_timeout,
        check=check,
    )
    console = TerminalConsole()
    asks = asks_for_yes(console, auto_approve) and not check

    async def ask(_: FailoverPlan) -> bool:
        return bool(await console.confirm(cast(Any, None)))

    def show(plan: FailoverPlan) -> None:
        if fmt == "text":
            click.echo("\n".join(plan.lines()))

    locked: list[bool] = []
    try:
        result = asyncio.run(
            fail_over(
                request,
                console,
                confirm=ask if asks else None,
                on_plan=show,
                on_locked=lambda: locked.append(True),
            )
        )
    except KeyboardInterrupt:
        console.notice(_interrupted(origin, standby, began=bool(locked)))
        return ExitStatus.INTERRUPTED
    if check:
        if fmt == "json":
            pairs = [state.health.to_json() for state in result.plan.states]
            click.echo(inert_json(json.dumps(pairs, indent=2)))
        fine = all(
            state.health.healthy and not state.refusals(rollback=False)
            for state in result.plan.states
        )
        return 0 if fine else 2
    return _report(result, fmt)


def _interrupted(origin: str, standby: str, *, began: bool) -> str:
    """What a Ctrl-C left: nothing before both apply locks were held (the question, the
    wait for a lock); after, each pair in flight stopped where it was, an origin fenced
    and not yet promoted given its subjects back (``PairSteps.run``)."""
    if not began:
        return "interrupted before the failover began: nothing was changed"
    return (
        "interrupted during the failover: a pair stopped between its fence and its promotion "
        f"has {origin}'s subjects back, a promoted one stays promoted; see each pair with "
        f"`reconcile failover --check --from {origin} --to {standby}`. A mirror whose "
        "duplicate_window the failover gave back knows the Nats-Msg-Id of what it mirrored "
        "since then only, and a run again before that window has passed does not wait for "
        "it: run it once the window has passed (docs/dr.md#not-done-yet)"
    )


def _report(result: FailoverResult, fmt: str) -> int:
    from reconciler.model.values import inert_json, printable

    if fmt == "json":
        body = {
            "done": list(result.done),
            "problems": list(result.problems),
            "cancelled": result.cancelled,
            "unavailable_seconds": dict(result.unavailable),
            "pairs": [s.health.to_json() for s in result.plan.states],
        }
        click.echo(inert_json(json.dumps(body, indent=2)))
    if result.cancelled:
        return 1
    if result.problems:
        lines = "\n".join(f"    {p}" for p in result.problems)
        raise ReconcileError(
            f"failover refused or unfinished for {len(result.problems)} pair(s):\n{lines}"
        )
    if fmt == "text":
        if not result.plan.has_changes:
            click.echo("Nothing to do.")
        elif result.plan.rollback:  # no write was moved: the origins have theirs back
            click.echo(
                f"Rollback complete: {len(result.done)} pair(s): {result.plan.origin} takes "
                "the writes again.",
                file=sys.stdout,
            )
        else:
            windows = ", ".join(f"{k} {v:.2f}s" for k, v in sorted(result.unavailable.items()))
            # each stream's window with no write acknowledged: its fence to its promotion
            took = f"; writes unavailable (fence to promotion): {windows}" if windows else ""
            # stream names: escaped as every other line of the failover (``##[`` in one)
            done = printable(f"Failover complete: {len(result.done)} pair(s){took}.")
            click.echo(done, file=sys.stdout)
    return 0
