"""The connection flags every server-facing command shares.

    @click.command()
    @connection_options
    def plan(..., **conn: Any) -> None:
        options = to_connection_options(conn)

With none of ``--server``, ``--creds``, ``--nkey``, ``--user``, ``--token``, ``--tls-*`` or
``--context`` (nor their environment variables) the command uses the embedded server with
its state in ``--store``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:  # nats-py is imported only when a command connects
    from reconciler.execution.stages import Target
    from reconciler.jetstream.connection import ConnectionOptions
    from reconciler.specs.project import Project

DEFAULT_STORE = Path(".reconcile")

F = TypeVar("F", bound=Callable[..., Any])

_FILE = click.Path(exists=True, dir_okay=False)


class Seconds(click.ParamType[float]):
    """A time in seconds: a number (``30``, ``2.5``) or a duration (``250ms``, ``2m``, ``1h``)."""

    name = "DURATION"

    def __init__(self, minimum: float = 0.0) -> None:
        self.minimum = minimum

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        from reconciler.specs.units import UnitError, parse_seconds

        try:
            seconds = parse_seconds(value)
        except UnitError:
            self.fail(f"{str(value).strip()!r} is not a time (30, 2.5, 250ms, 2m, 1h)", param, ctx)
        if seconds < self.minimum:
            self.fail(f"{value!r} is below {self.minimum:g}s", param, ctx)
        return seconds


def _seconds(name: str, help_text: str) -> Callable[[F], F]:
    return click.option(
        name, type=Seconds(minimum=0.1), default=5.0, show_default=True, help=help_text
    )


def _owner(ctx: click.Context, param: click.Parameter, value: str) -> str:
    import re

    from reconciler.specs.spec import OWNER_PATTERN

    if not re.fullmatch(OWNER_PATTERN, value):
        raise click.BadParameter(
            f"{value!r}: letters, digits, '.', '_' and '-' (at most 64, starting with a "
            "letter or digit)"
        )
    return value


#: The project whose resources a run manages (marker in their metadata).
owner_option: Callable[[F], F] = click.option(
    "--owner",
    default="default",
    envvar="RECONCILE_OWNER",
    show_default=True,
    show_envvar=True,
    callback=_owner,
    help="The project (owner) this run manages: its resources carry its name; other owners' "
    "resources are listed and never touched.",
)


def format_option(choices: list[str], what: str) -> Callable[[F], F]:
    """``--format``: how a command prints ``what`` (text by default)."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default="text",
        show_default=True,
        help=f"How to print the {what}.",
    )


#: Every step of a long plan in full (``plan``, ``apply``).
full_option: Callable[[F], F] = click.option(
    "--full",
    is_flag=True,
    help="Show every step in full. Over 50 steps, text and Markdown show the destructive "
    "steps in full and fold the others per kind and action (names and counts).",
)

#: Warnings (odd but accepted specs) as errors, for CI that wants them.
strict_option: Callable[[F], F] = click.option(
    "--strict",
    is_flag=True,
    help="Treat warnings (an identical duplicate key, ack_wait next to backoff, ...) as errors.",
)

#: Permission for ``export``/``import --out`` to replace files neither wrote
#: (``export_cmd.refuse_foreign``).
overwrite_option: Callable[[F], F] = click.option(
    "--overwrite",
    is_flag=True,
    help="Also replace files of the same name in --out that export or import did not "
    "write (a hand-written file, a link: never written through). Without it such a file "
    "is refused, named, and nothing is written; the files export or import wrote (their "
    "header says so) are replaced either way.",
)

#: Permission to take over resources another owner manages.
take_over_option: Callable[[F], F] = click.option(
    "--take-over",
    is_flag=True,
    help="Declaring a resource another owner manages is refused; this takes it over.",
)


#: Policy files (docs/policy.md), after the project file's ``policies:``.
policy_option: Callable[[F], F] = click.option(
    "--policy",
    "policies",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A policy file of CEL rules every planned resource must keep (docs/policy.md); "
    "repeatable, after the project file's policies. A broken deny rule exits 3 (apply "
    "changes nothing); a warn rule is shown.",
)


#: The embedded server's state folder (JetStream store, log, pid/port file).
store_option: Callable[[F], F] = click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STORE,
    envvar="RECONCILE_STORE",
    show_default=True,
    help="State folder of the embedded server (JetStream store, log, pid/port file).",
)


def lock_options(verb: str) -> Callable[[F], F]:
    """``--lock-timeout`` and ``--no-lock`` of a command that changes a server (apply,
    restore): the same apply lock, the same words; ``verb`` says what runs without it."""
    timeout = click.option(
        "--lock-timeout",
        type=Seconds(),
        default=60.0,
        show_default=True,
        help="How long to wait for another apply's lock: seconds or a duration (2m).",
    )
    no_lock = click.option(
        "--no-lock", is_flag=True, help=f"{verb} without taking the server's apply lock."
    )

    def decorate(command: F) -> F:
        return timeout(no_lock(command))

    return decorate


_OPTIONS: list[Callable[[F], F]] = [
    click.option(
        "--server",
        "server",
        envvar="NATS_URL",
        show_envvar=True,
        metavar="URL[,URL...]",
        help="NATS server URL(s). Without any server option the embedded server is used.",
    ),
    click.option("--creds", type=_FILE, help="User credentials file (JWT and nkey seed)."),
    click.option("--nkey", type=_FILE, help="File holding a user nkey seed."),
    click.option("--user", help="User name."),
    click.option("--password", envvar="NATS_PASSWORD", show_envvar=True, help="Password."),
    click.option("--token", envvar="NATS_TOKEN", show_envvar=True, help="Auth token."),
    click.option("--tls-ca", type=_FILE, help="CA certificate to verify the server."),
    click.option("--tls-cert", type=_FILE, help="Client certificate (with --tls-key)."),
    click.option("--tls-key", type=_FILE, help="Client certificate's private key."),
    click.option(
        "--context",
        envvar="NATS_CONTEXT",
        show_envvar=True,
        help="Name of a `nats` CLI context (~/.config/nats/context/NAME.json).",
    ),
    click.option("--domain", help="JetStream domain ($JS.<domain>.API)."),
    click.option(
        "--monitor",
        metavar="URL",
        help="The server's HTTP monitoring endpoint (http://HOST:8222): a plan reads the "
        "server's own JetStream limits there (docs/capacity.md).",
    ),
    click.option(
        "--system-creds",
        type=_FILE,
        help="Credentials of a system account user: a plan asks the server's own "
        "JetStream limits with them (docs/capacity.md).",
    ),
    click.option(
        "--system-context",
        help="A `nats` CLI context of a system account user (as --system-creds).",
    ),
    _seconds("--timeout", "How long to wait for each server answer (5, 3s, 500ms)."),
    _seconds("--connect-timeout", "How long to wait for the connection (5, 10s)."),
    store_option,
]

CONNECTION_PARAMS = (
    "server",
    "creds",
    "nkey",
    "user",
    "password",
    "token",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "context",
    "domain",
    "monitor",
    "system_creds",
    "system_context",
    "timeout",
    "connect_timeout",
    "store",
)


def connection_options(command: F) -> F:
    """Add the connection flags to a click command (they arrive as keyword arguments)."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def to_connection_options(values: Mapping[str, Any]) -> ConnectionOptions:
    """The :class:`ConnectionOptions` for the flags' values (other keys are ignored)."""
    from reconciler.jetstream.connection import ConnectionOptions

    def text(name: str) -> str | None:
        value = values.get(name)
        return str(value) if value not in (None, "") else None

    return ConnectionOptions(
        servers=_server(values),
        creds=text("creds"),
        nkey=text("nkey"),
        user=text("user"),
        password=text("password"),
        token=text("token"),
        tls_ca=text("tls_ca"),
        tls_cert=text("tls_cert"),
        tls_key=text("tls_key"),
        context=text("context"),
        domain=text("domain"),
        monitor=text("monitor"),
        system_creds=text("system_creds"),
        system_context=text("system_context"),
        timeout=float(values.get("timeout") or 5.0),
        connect_timeout=float(values.get("connect_timeout") or 5.0),
        store=Path(values.get("store") or DEFAULT_STORE),
    )


def _server(values: Mapping[str, Any]) -> str | None:
    """``--server`` as given; an empty one (``--server ''``, or ``NATS_URL`` set to an empty
    string, which click reads as unset) stays empty, and :class:`ConnectionOptions` refuses
    it: a blank variable never switches a run to the embedded server."""
    import os

    value = values.get("server")
    if value is None and "server" in values:
        value = os.environ.get("NATS_URL")
    return None if value is None else str(value)


# --- projects and environments -----------------------------------------------------------

#: The connection flags an environment sets itself (timeouts and --store stay the run's).
ENVIRONMENT_PARAMS = CONNECTION_PARAMS[:-3]

#: The project file a command reads (``reconcile.yaml`` in the current directory by default).
project_file_option: Callable[[F], F] = click.option(
    "--project",
    "project_file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="RECONCILE_PROJECT",
    show_envvar=True,
    help="The project file (default: reconcile.yaml in the current directory, if any).",
)

_PROJECT_OPTIONS: list[Callable[[F], F]] = [
    project_file_option,
    click.option(
        "--env",
        "env_name",
        metavar="NAME",
        envvar="RECONCILE_ENV",
        show_envvar=True,
        help="The project's environment to use: its server, domain, overlays and resources "
        "(instead of PATHS and connection flags).",
    ),
]


def project_options(command: F) -> F:
    """Add ``--project`` and ``--env`` to a command."""
    for option in reversed(_PROJECT_OPTIONS):
        command = option(command)
    return command


def _given(ctx: click.Context, name: str) -> bool:
    from click.core import ParameterSource

    return ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE


def resolve_target(
    ctx: click.Context,
    *,
    paths: tuple[Path, ...],
    conn: Mapping[str, Any],
    owner: str = "default",
    project_file: Path | None = None,
    env_name: str | None = None,
    needs_paths: bool = True,
    without_paths: str = "give spec PATHS (or run where a reconcile.yaml is)",
    load: Callable[[Path], Project] | None = None,
) -> Target:
    """The run's target: PATHS and connection flags as given, or a project environment.

    Without a project file (and without ``--env``) this is today's behaviour. With one,
    ``--env NAME`` (or a project with a single environment and no PATHS) takes the
    environment's connection, spec paths, overlays and the project's owner; a connection
    flag or an ``--owner`` given on the command line that contradicts it is an error.
    ``without_paths`` is the usage error when there are neither PATHS nor a project file
    (a command with another way to choose, as ``backup --all``, names it there).
    ``load`` reads the project file (``load_project``; the agent's of many environments
    reads it once for all of them: ``agent.source.ProjectReads``).
    """
    from reconciler.execution.stages import Target
    from reconciler.specs.project import find_project, load_project

    found = project_file or (find_project() if env_name or not paths else None)
    if found is None:
        if env_name:
            raise click.UsageError("--env needs a project file: reconcile.yaml or --project")
        if needs_paths and not paths:
            raise click.UsageError(without_paths)
        from reconciler.specs.ignore import rules_next_to

        _unread_policies(ctx)
        ignore = rules_next_to(paths)  # .reconcileignore in the spec folders
        return Target(tuple(paths), to_connection_options(conn), owner, ignore=ignore)
    project = (load or load_project)(Path(found))
    return project_target(ctx, project, paths=paths, conn=conn, owner=owner, env_name=env_name)


def _unread_policies(ctx: click.Context) -> None:
    """Spec PATHS without ``--env`` read no project file: when the one here names
    ``policies:`` and the command evaluates policies but was given no ``--policy``, say
    once (stderr) that those rules are not evaluated and how to include them."""
    if "policies" not in ctx.params or ctx.params["policies"] or ctx.meta.get("unread-policies"):
        return
    from reconciler.errors import ReconcileError
    from reconciler.model.values import printable
    from reconciler.specs.project import PROJECT_FILE, find_project, load_project

    found = find_project()
    try:
        project = None if found is None else load_project(found)
    except ReconcileError:  # not asked for: a broken project file is not this run's error
        return
    if project is None or not project.policies:
        return
    ctx.meta["unread-policies"] = True
    names = sorted(project.environments)
    env = f"--env {names[0]}" if len(names) == 1 else f"--env NAME ({', '.join(names)})"
    given = " ".join(f"--policy {path}" for path in project.policies)
    listed = ", ".join(str(path) for path in project.policies)
    message = (
        f"note: {PROJECT_FILE}'s policies ({listed}) are not evaluated: spec PATHS without "
        f"--env read no project file; name an environment ({env}) or give them ({given})"
    )
    click.echo(printable(message), err=True)


def required_project(project_file: Path | None, why: str) -> Project:
    """The project file given (``--project``) or found here; a usage error saying ``why``
    one is needed when there is none (the one rule of every command that needs one)."""
    from reconciler.specs.project import find_project, load_project

    found = project_file or find_project()
    if found is None:
        raise click.UsageError(f"{why}: reconcile.yaml here, or --project FILE")
    return load_project(found)


def project_owner(ctx: click.Context, project: Project, owner: str) -> str:
    """The run's owner with a project file: the project's own (an ``--owner`` given on
    the command line that contradicts it is an error), else ``owner``."""
    if project.owner and _given(ctx, "owner") and owner != project.owner:
        raise click.UsageError(f"--owner {owner} contradicts the project's owner {project.owner}")
    return project.owner or owner


def project_target(
    ctx: click.Context,
    project: Project,
    *,
    paths: tuple[Path, ...],
    conn: Mapping[str, Any],
    owner: str,
    env_name: str | None,
) -> Target:
    """:func:`resolve_target` once the project file is read (``plan --all-envs`` reads it
    once for every environment)."""
    from reconciler.execution.stages import environment_target, paths_target

    owner = project_owner(ctx, project, owner)
    if env_name is None and paths:
        return paths_target(project, tuple(paths), to_connection_options(conn), owner)
    if env_name is None:
        if len(project.environments) != 1:
            names = ", ".join(sorted(project.environments))
            raise click.UsageError(f"name an environment with --env ({names}) or give PATHS")
        env_name = next(iter(project.environments))
    if paths:
        raise click.UsageError("give either spec PATHS or --env, not both")
    clash = [name for name in ENVIRONMENT_PARAMS if _given(ctx, name)]
    if clash:
        flag = "--" + clash[0].replace("_", "-")
        raise click.UsageError(f"{flag} cannot be combined with --env: {env_name} names its own")
    return environment_target(project, env_name, to_connection_options(conn), owner)
