"""``reconcile watch``: the GitOps agent (docs/agent.md).

Keeps a server converged with the specs: plans at least every ``--interval``, within a
second of an advisory naming a resource, and as soon as a new commit of ``--git`` is
seen; ``--mode heal`` applies what is safe (creates, updates that delete nothing) and
reports the rest as needing a person. Serves ``/metrics``, ``/healthz``, ``/readyz`` and
``/status`` on ``--listen``. ``--once``: one cycle, exit 0 in sync (or healed), 2 drift
remains, 1 error. ``--all-envs``, ``--env`` given more than once, or ``--shard I/N``
watch a project's environments from one process (docs/agent.md#many-environments).
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from reconciler.cli.options import (
    DEFAULT_STORE,
    Seconds,
    connection_options,
    owner_option,
    policy_option,
    project_file_option,
    resolve_target,
)

if TYPE_CHECKING:
    from reconciler.agent.endpoints import Endpoints
    from reconciler.agent.logs import Log
    from reconciler.agent.loop import Agent, NotServed, WatchSettings
    from reconciler.agent.shards import Shard
    from reconciler.agent.source import GitSource, MakeRequest, ProjectReads, Source
    from reconciler.execution.stages import PlanRequest
    from reconciler.specs.project import Environment, Project


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


class ShardOption(click.ParamType["Shard | None"]):
    """``I/N`` (I from 0), or ``POD-NAME-ORDINAL/N``: a StatefulSet pod's ordinal is I."""

    name = "I/N"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Shard | None:
        from reconciler.agent.shards import Shard, parse_shard
        from reconciler.errors import ReconcileError

        if value is None or isinstance(value, Shard):
            return value
        try:
            return parse_shard(str(value))
        except ReconcileError as err:
            self.fail(str(err), param, ctx)


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
    reads: ProjectReads | None = None,
) -> Any:
    """``root -> PlanRequest``: PATHS (and --project) as given, or inside a checkout;
    ``reads``: the project file read once for every environment an agent serves."""
    from reconciler.errors import ReconcileError, SpecError
    from reconciler.execution.stages import PlanRequest

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
                load=None if reads is None else reads.load,
            )
        except click.UsageError as err:
            raise ReconcileError(err.format_message()) from None
        request = PlanRequest.for_target(target, policies=policies)
        if root is None and request.project is not None and request.env is not None:
            # a folder the project file names and that is missing: a start-up error at
            # its line (with --git a later commit may add it: that cycle's error then)
            environment = request.project.environment(request.env)
            problems = request.project.missing(environment)
            if problems:
                raise SpecError(problems)
        return request

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
@click.option(
    "--env",
    "env_names",
    metavar="NAME",
    multiple=True,
    envvar="RECONCILE_ENV",
    show_envvar=True,
    help="The project's environment to watch (instead of PATHS and connection flags); "
    "more than once: each of them, from this one process.",
)
@click.option(
    "--all-envs",
    is_flag=True,
    help="Watch every environment of the project file, each with its own connection.",
)
@click.option(
    "--shard",
    type=ShardOption(),
    envvar="RECONCILE_SHARD",
    show_envvar=True,
    help="Watch only this shard's share of the environments (0/2, 1/2; or a "
    "StatefulSet pod's name: reconcile-watch-1/2): every agent of N computes the "
    "same split from the names.",
)
@owner_option
@policy_option
@project_file_option
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
    env_names: tuple[str, ...],
    all_envs: bool,
    shard: Shard | None,
    **conn: Any,
) -> int:
    """Keep the server converged with the specs, and say who changed what.

    PATHS are spec files or folders (with --git: inside the repository). Runs until
    SIGTERM or Ctrl-C; with --once, one cycle: exit 0 in sync (or healed), 2 when drift
    remains, 3 when a policy deny rule fails, 1 on error.

    --all-envs, --env NAME more than once, or --shard I/N: the project's environments,
    each with its own connection, lock, /status entry and `env` metric label.
    """
    from reconciler.agent.logs import Log
    from reconciler.agent.loop import Agent, WatchSettings
    from reconciler.agent.source import FixedSource, GitSource, ProjectReads

    names = tuple(dict.fromkeys(env_names))  # in order, each once
    many = all_envs or shard is not None or len(names) > 1
    if many and paths:
        raise click.UsageError(
            "--all-envs, --shard and several --env watch a project's environments: no PATHS"
        )
    if all_envs and names:
        raise click.UsageError("give either --all-envs or --env, not both")
    if git_url:
        _inside(paths, "PATH")
        if project_file is not None:
            _inside((project_file,), "--project")
    else:
        for path in paths:
            if not path.exists():
                raise click.BadParameter(f"{path} does not exist", param_hint="PATHS")
    env_name = names[0] if names and not many else None
    make = _request_maker(ctx, paths, conn, owner, project_file, env_name, policies)
    git: GitSource | None = None
    if git_url:
        digest = hashlib.sha256(f"{git_url}\0{git_ref}".encode()).hexdigest()[:16]
        store = Path(conn.get("store") or DEFAULT_STORE)
        git = GitSource(git_url, git_ref, git_cache or store / "git" / digest, make)
    settings = WatchSettings(
        interval=interval,
        mode="heal" if mode == "heal" else "observe",
        once=once,
        listen=listen,
        git_poll=git_poll,
        lock_timeout=lock_timeout,
        advisories=not no_advisories,
    )
    log = Log("json" if log_format == "json" else "text")
    if many:
        reads = ProjectReads()  # the project file read once per change, for all of them

        def make_for(name: str) -> MakeRequest:
            maker = _request_maker(ctx, (), conn, owner, project_file, name, policies, reads)
            return cast("MakeRequest", maker)

        return asyncio.run(
            _run_many(names, shard, git, make_for, settings, log, project_file, reads)
        )
    source: Source = git if git is not None else FixedSource(make)
    return asyncio.run(_run(Agent(source, settings, log)))


async def _run(agent: Agent) -> int:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, agent.stop.set)
    try:
        return await agent.run()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


async def _run_many(
    names: tuple[str, ...],
    shard: Shard | None,
    git: GitSource | None,
    make_for: Callable[[str], MakeRequest],
    settings: WatchSettings,
    log: Log,
    project_file: Path | None,
    reads: ProjectReads,
) -> int:
    """The project's environments (``names``, or all), this shard's share, each watched
    with its own connection (``reads``: the project file read once per change for
    all). With ``--git`` the project file is the first commit's: the listener answers
    while it is fetched (``/healthz`` 200, ``/readyz`` 503 saying so), as a liveness
    probe needs during a large repository's first fetch."""
    from reconciler.agent.endpoints import Endpoints
    from reconciler.errors import Problem, SpecError

    early: Endpoints | None = None
    if git is not None and settings.listen is not None:
        named = f"{git.shown_url} ({git.ref})"
        early = Endpoints.starting(
            f"fetching the first commit of {named}, which names the environments to serve"
        )
        await early.open(*settings.listen, log)
    agent = None
    try:
        agent = await _agent_of_many(
            names, shard, git, make_for, settings, log, project_file, reads, endpoints=early
        )
    except SpecError as err:  # the first commit's: its files as the user knows them
        if git is None:
            raise
        shown = [Problem(None, "", git.shown(str(p))) for p in err.problems]
        raise SpecError(shown, kind=err.kind) from None
    finally:
        if agent is None and early is not None:  # failed, or stopped during the fetch
            await early.close()
    return 0 if agent is None else await _run(agent)


async def _agent_of_many(
    names: tuple[str, ...],
    shard: Shard | None,
    git: GitSource | None,
    make_for: Callable[[str], MakeRequest],
    settings: WatchSettings,
    log: Log,
    project_file: Path | None,
    reads: ProjectReads,
    *,
    endpoints: Endpoints | None = None,
) -> Agent | None:
    """:func:`_run_many`'s agent (None: SIGTERM or SIGINT during the first fetch);
    ``endpoints``: listening already, the agent's from now on."""
    from reconciler.agent.loop import Agent, NotServed
    from reconciler.agent.source import FixedSource, SharedCheckout
    from reconciler.errors import Problem, SpecError
    from reconciler.locations import Location

    root: Path | None = None
    shared: SharedCheckout | None = None
    if git is not None:
        shared = SharedCheckout(git)
        if not await _unless_signalled(shared.refresh()):  # the project file at the head
            log.event("stopped")
            return None
        root = git.tree
    heal = settings.mode == "heal"
    chosen = _environments(names, shard, root, project_file, heal=heal, reads=reads)
    not_served = NotServed(chosen, log)
    if git is not None and shared is not None:  # each commit's list: one added is said
        shared.on_commit = _listing(git, names, shard, project_file, not_served, reads)
    sources: dict[str, Source] = {}
    problems: dict[tuple[Location | None, str], Problem] = {}  # a line said once
    for name in chosen:
        make = make_for(name)
        if heal and shared is not None:  # each commit's project file, as the first one's
            make = _kept_apart(make, chosen, project_file, reads)
        if shared is None:  # the project file read again after an edit: the same list
            make = _served_as_started(
                make,
                chosen,
                names,
                shard,
                project_file,
                heal=heal,
                not_served=not_served,
                reads=reads,
            )
        try:
            make(root)  # every environment's target resolved now: one broken stops the start
        except SpecError as err:  # every environment's problems said at once
            for problem in err.problems:
                problems.setdefault((problem.location, problem.path), problem)
            continue
        sources[name] = FixedSource(make) if shared is None else shared.view(make)
    if problems:
        raise SpecError(list(problems.values()))
    return Agent.serving(
        sources, settings, log, shard=shard, endpoints=endpoints, not_served=not_served
    )


async def _unless_signalled(work: Awaitable[None]) -> bool:
    """``work`` done (True), or given up on SIGTERM or SIGINT (False): a first fetch from a
    git server that never answers never keeps the agent from stopping."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    task, halt = asyncio.ensure_future(work), asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, halt}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        halt.cancel()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    if not task.done():
        task.cancel()
        return False
    task.result()
    return True


def _environments(
    names: tuple[str, ...],
    shard: Shard | None,
    root: Path | None,
    project_file: Path | None,
    *,
    heal: bool = False,
    reads: ProjectReads,
) -> list[str]:
    """The environments named (all the project's when none is), then the shard's share;
    ``heal``: refused when one of them writes in the account another environment does."""
    return _served(_read(root, project_file, reads), names, shard, heal=heal)


def _read(root: Path | None, project_file: Path | None, reads: ProjectReads) -> Project:
    """The project file (of the checkout ``root``), read once per change for all."""
    from reconciler.specs.project import find_project

    if root is not None:
        found: Path | None = _in_checkout(root, project_file)
    else:
        found = project_file or find_project()
    if found is None or (project_file is None and not found.is_file()):
        raise click.UsageError(
            "--all-envs, --shard and several --env need a project file: reconcile.yaml or --project"
        )
    return reads.load(found)  # a --project that cannot be read says so, at its name


def _served(
    project: Project, names: tuple[str, ...], shard: Shard | None, *, heal: bool
) -> list[str]:
    """:func:`_environments` of the project file read."""
    known = list(project.environments)
    for name in names:
        project.environment(name)  # an unknown name: an error naming the known ones
    chosen = list(names) or known
    served = chosen if shard is None else shard.select(chosen)
    if heal:
        _apart(project, served)
    return served


def _served_as_started(
    make: MakeRequest,
    served: list[str],
    names: tuple[str, ...],
    shard: Shard | None,
    project_file: Path | None,
    *,
    heal: bool,
    not_served: NotServed,
    reads: ProjectReads,
) -> MakeRequest:
    """``make``, refusing a project file (read again after an edit: ``FixedSource``)
    whose environments for this agent are not those it started with: a running agent
    keeps serving its list (one environment's task each, its seat taken), and says the
    new one is served after a restart (``not_served`` told); the environments' last
    valid project is kept. Healing, the file is held to :func:`_apart` as at the start.
    The file is read and checked once per change for every environment (``reads``)."""
    from reconciler.errors import ReconcileError

    def verdict(project: Project) -> None:
        now = _served(project, names, shard, heal=heal)
        not_served.saw(now, None)
        if set(now) != set(served):
            added = ", ".join(n for n in now if n not in served) or "none"
            gone = ", ".join(n for n in served if n not in now) or "none"
            raise ReconcileError(
                f"the environments to serve changed (added: {added}; removed: {gone}): a "
                f"running agent serves those it started with ({', '.join(served)}); "
                "restart it to serve the new list"
            )

    def checked(root: Path | None) -> PlanRequest:
        try:
            project = _read(root, project_file, reads)
        except click.UsageError as err:
            raise ReconcileError(err.format_message()) from None
        reads.derived(project, "served as started", lambda: verdict(project))
        return make(root)

    return checked


def _listing(
    git: GitSource,
    names: tuple[str, ...],
    shard: Shard | None,
    project_file: Path | None,
    not_served: NotServed,
    reads: ProjectReads,
) -> Callable[[Path], None]:
    """What tells ``not_served`` the environments of each new commit's project file for
    this agent (``--git``: the commit is served to those it started with; one added is
    served after a restart). One that cannot be read is said by the cycles."""
    from reconciler.errors import ReconcileError

    def listed(tree: Path) -> None:
        try:
            now = _environments(names, shard, tree, project_file, reads=reads)
        except (click.UsageError, ReconcileError):
            return
        not_served.saw(now, git.commit)

    return listed


def _kept_apart(
    make: MakeRequest, served: list[str], project_file: Path | None, reads: ProjectReads
) -> MakeRequest:
    """``make``, refusing a commit whose project file makes two environments write in
    one account (:func:`_apart`): that environment's cycle fails and heals nothing. The
    commit's file is read and checked once for every environment (``reads``)."""

    def checked(root: Path | None) -> PlanRequest:
        if root is not None:
            project = reads.load(_in_checkout(root, project_file))
            reads.derived(project, "apart", lambda: _apart(project, served))
        return make(root)

    return checked


def _in_checkout(root: Path, project_file: Path | None) -> Path:
    """The project file of the checkout ``root`` (``--project``, else reconcile.yaml)."""
    from reconciler.specs.project import PROJECT_FILE

    return root / (project_file or PROJECT_FILE)


def _apart(project: Project, served: list[str]) -> None:
    """Two environments healed in one account, each declaring it otherwise, undo each
    other's heals forever (each heal is the other's drift, at once by its advisory):
    one of them served here (by any shard) is refused, at its line, when the project
    file's text says so (the same servers, credentials and domain; other credentials
    may be another user of that account: :mod:`reconciler.agent.seats` asks the
    servers). An environment in ``lifecycle: {mode: observe}`` writes nothing and is
    left out."""
    from reconciler.agent.seats import SAME_TEXT, apart_error

    named = set(served)
    first: dict[tuple[tuple[str, str], ...], Environment] = {}
    for env in project.environments.values():
        if env.account is None or env.lifecycle.observe:
            continue
        other = first.setdefault(env.account, env)
        if other is not env and (env.name in named or other.name in named):
            raise apart_error(env, other, SAME_TEXT)
