"""``reconcile watch``: the GitOps agent (docs/agent.md).

Keeps a server converged with the specs: plans at least every ``--interval``, within a
second of an advisory naming a resource, and as soon as a new commit of ``--git`` is
seen; ``--mode heal`` applies what is safe (creates, updates that delete nothing) and
reports the rest as needing a person. Serves ``/metrics``, ``/healthz``, ``/readyz`` and
``/status`` on ``--listen``. ``--once``: one cycle, exit 0 in sync (or healed), 2 drift
remains, 1 error.
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from reconciler.cli.options import (
    DEFAULT_STORE,
    Seconds,
    connection_options,
    owner_option,
    policy_option,
    project_options,
    resolve_target,
)

if TYPE_CHECKING:
    from reconciler.agent.loop import Agent
    from reconciler.execution.requests import PlanRequest


class Listen(click.ParamType[tuple[str, int] | None]):
    """``HOST:PORT`` (port 0: any free port), or ``off``."""

    name = "HOST:PORT"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, int] | None:
        if value is None or isinstance(value, tuple):
            return cast("tuple[str, int] | None", value)
        text = str(value).strip()
        if text == "off":
            return None
        host, _, port = text.rpartition(":")
        if not host or not port.isdigit() or int(port) > 65535:
            self.fail(f"{text!r} is not HOST:PORT (127.0.0.1:9464) nor 'off'", param, ctx)
        return host.strip("[]"), int(port)


def _inside(paths: tuple[Path, ...], what: str) -> None:
    for path in paths:
        if path.is_absolute() or ".." in path.parts:
            raise click.UsageError(
                f"with --git, {what} {path} must be a path inside the repository"
            )


def _request_maker(
    ctx: click.Context,
    paths: tuple[Path, ...],
    conn: dict[str, Any],
    owner: str,
    project_file: Path | None,
    env_name: str | None,
    policies: tuple[Path, ...] = (),
) -> Any:
    """``root -> PlanRequest``: PATHS (and --project) as given, or inside a checkout."""
    from reconciler.errors import ReconcileError
    from reconciler.execution.requests import PlanRequest

    def make(root: Path | None) -> PlanRequest:
        found_paths, found_project = paths, project_file
        if root is not None:
            found_paths = tuple(root / p for p in paths)
            default = root / "reconcile.yaml"
            if project_file is not None:
                found_project = root / project_file
            elif (env_name or not paths) and default.is_file():
                found_project = default
        try:
            target = resolve_target(
                ctx,
                paths=found_paths,
                conn=conn,
                owner=owner,
                project_file=found_project,
                env_name=env_name,
            )
        except click.UsageError as err:
            raise ReconcileError(err.format_message()) from None
        return PlanRequest.for_target(target, policies=policies)

    return make


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--interval",
    type=Seconds(minimum=0.1),
    default="1m",
    show_default=True,
    help="A full re-plan at least this often (30s, 1m, 5m).",
)
@click.option(
    "--mode",
    type=click.Choice(["observe", "heal"]),
    default="observe",
    show_default=True,
    help="observe: report drift. heal: also apply creates and updates that delete "
    "nothing (never a replace, delete, prune, migration or lossy update).",
)
@click.option(
    "--once",
    is_flag=True,
    help="One cycle; exit 0 in sync or healed, 2 drift, 3 a policy deny, 1 error.",
)
@click.option(
    "--listen",
    type=Listen(),
    default="127.0.0.1:9464",
    show_default=True,
    help="Where /metrics, /healthz, /readyz and /status answer ('off': nowhere).",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="One line per cycle and per change, as text or JSON lines (on standard error).",
)
@click.option(
    "--no-advisories",
    is_flag=True,
    help="Do not listen to JetStream advisories: find changes with each interval's plan "
    "only (no attribution).",
)
@click.option("--git", "git_url", metavar="URL", help="Plan this git repository's branch head.")
@click.option("--ref", "git_ref", default="main", show_default=True, help="The branch (--git).")
@click.option(
    "--git-poll",
    type=Seconds(minimum=0.1),
    default=None,
    help="How often to look for a new commit (default: --interval).",
)
@click.option(
    "--git-cache",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the repository is fetched to (default: .reconcile/git/<hash of URL>).",
)
@click.option(
    "--lock-timeout",
    type=Seconds(minimum=0.1),
    default=60.0,
    show_default=True,
    help="How long a heal waits for the apply lock (an apply elsewhere holds it).",
)
@owner_option
@policy_option
@project_options
@connection_options
@click.pass_context
def watch(
    ctx: click.Context,
    /,
    paths: tuple[Path, ...],
    interval: float,
    mode: str,
    once: bool,
    listen: tuple[str, int] | None,
    log_format: str,
    no_advisories: bool,
    git_url: str | None,
    git_ref: str,
    git_poll: float | None,
    git_cache: Path | None,
    lock_timeout: float,
    owner: str,
    policies: tuple[Path, ...],
    project_file: Path | None,
    env_name: str | None,
    **conn: Any,
) -> int:
    """Keep the server converged with the specs, and say who changed what.

    PATHS are spec files or folders (with --git: inside the repository). Runs until
    SIGTERM or Ctrl-C; with --once, one cycle: exit 0 in sync (or healed), 2 when drift
    remains, 3 when a policy deny rule fails, 1 on error.
    """
    from reconciler.agent.logs import Log
    from reconciler.agent.loop import Agent, WatchSettings
    from reconciler.agent.source import FixedSource, GitSource, Source

    if git_url:
        _inside(paths, "PATH")
        if project_file is not None:
            _inside((project_file,), "--project")
    else:
        for path in paths:
            if not path.exists():
                raise click.BadParameter(f"{path} does not exist", param_hint="PATHS")
    make = _request_maker(ctx, paths, conn, owner, project_file, env_name, policies)
    source: Source
    if git_url:
        digest = hashlib.sha256(f"{git_url}\0{git_ref}".encode()).hexdigest()[:16]
        store = Path(conn.get("store") or DEFAULT_STORE)
        source = GitSource(git_url, git_ref, git_cache or store / "git" / digest, make)
    else:
        source = FixedSource(make)
    settings = WatchSettings(
        interval=interval,
        mode="heal" if mode == "heal" else "observe",
        once=once,
        listen=listen,
        git_poll=git_poll,
        lock_timeout=lock_timeout,
        advisories=not no_advisories,
    )
    agent = Agent(source, settings, Log("json" if log_format == "json" else "text"))
    return asyncio.run(_run(agent))


async def _run(agent: Agent) -> int:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, agent.stop.set)
    try:
        return await agent.run()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
