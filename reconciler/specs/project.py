"""The project file: one spec repository, many environments.

``reconcile.yaml`` at the root of a spec repository names the owner, the spec folders
shared by every environment, and each environment's connection, JetStream domain,
overlays and extra resources (``schemas/project.schema.json``). It is validated like a
spec file, every problem as ``FILE:LINE: field: message``, before anything connects.

Secrets never live in the file: ``password`` and ``token`` can only name an environment
variable (``{env: PROD_NATS_PASSWORD}``), credential files are paths, and a server URL
carrying credentials is refused. Variables are read when an environment is used
(:meth:`Environment.connection`), and an unset one is an error naming the field and line,
never a value.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from reconciler.errors import Problem, SpecError
from reconciler.locations import Location
from reconciler.specs.document import Document
from reconciler.specs.ignore import NO_RULES, IgnoreRules, project_rules
from reconciler.specs.lifecycle import MANAGE, Lifecycle, lifecycle_of
from reconciler.specs.loader import load_file
from reconciler.specs.paths import outside_problem, repository_root
from reconciler.specs.schema import did_you_mean, schema_problems
from reconciler.specs.server_url import split_scheme, userinfo
from reconciler.specs.spec import Spec

#: The name ``reconcile`` looks for in the current directory.
PROJECT_FILE = "reconcile.yaml"
#: Connection fields whose literal value is a file path (relative to the project file,
#: inside the repository: one elsewhere is named by ``{env: NAME}``).
_PATH_FIELDS = ("creds", "nkey", "tls.ca", "tls.cert", "tls.key", "system_creds")
#: Connection fields an environment may set, as ConnectionOptions names them.
_CONNECTION_FIELDS = {
    "servers": "servers",
    "context": "context",
    "creds": "creds",
    "nkey": "nkey",
    "user": "user",
    "password": "password",
    "token": "token",
    "tls.ca": "tls_ca",
    "tls.cert": "tls_cert",
    "tls.key": "tls_key",
    "domain": "domain",
    "monitor": "monitor",
    "system_creds": "system_creds",
    "system_context": "system_context",
}
_SECRET_FIELDS = frozenset({"password", "token"})
#: The fields that decide which account (and JetStream domain) an environment writes in.
_ACCOUNT_FIELDS = ("servers", "context", "creds", "nkey", "user", "token", "domain")


@dataclass(frozen=True)
class FromEnv:
    """A value read from an environment variable when the environment is used."""

    var: str
    field: str  # "environments.prod.password"
    where: Location


@dataclass(frozen=True)
class Environment:
    """One environment of a project: where it connects and what it changes."""

    name: str
    where: Location
    settings: Mapping[str, str | FromEnv]  # connection fields (dotted tls.* names)
    embedded: bool = False
    overlays: tuple[Path, ...] = ()
    resources: tuple[Path, ...] = ()
    description: str = ""
    #: ``lifecycle:`` for every resource of the environment, merged into each spec's
    #: (safety wins: ``specs.lifecycle.Lifecycle.merged``).
    lifecycle: Lifecycle = MANAGE

    @property
    def domain(self) -> str | None:
        value = self.settings.get("domain")
        return value if isinstance(value, str) else None

    @property
    def account(self) -> tuple[tuple[str, str], ...] | None:
        """Where it writes, as the file says it (a variable by its name, never its value):
        two environments with the same account write in one JetStream account of one
        server as one user. None: embedded (a server of its own)."""
        if self.embedded:
            return None
        return tuple(
            (key, f"${value.var}" if isinstance(value, FromEnv) else value)
            for key, value in sorted(self.settings.items())
            if key in _ACCOUNT_FIELDS
        )

    def connection(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The connection values (ConnectionOptions' names), variables read from
        ``environ`` (the process environment by default).

        Raises :class:`SpecError` naming every unset variable with its field and line.
        """
        environ = os.environ if environ is None else environ
        values: dict[str, str] = {}
        problems: list[Problem] = []
        for key, value in self.settings.items():
            if isinstance(value, FromEnv):
                found = environ.get(value.var, "")
                if not found:
                    message = f"environment variable {value.var} is not set (or empty)"
                    problems.append(Problem(value.where, value.field, message))
                    continue
                if key == "servers" and any(_netloc(u) is None for u in found.split(",")):
                    message = f"environment variable {value.var}: {NOT_A_URL}"
                    problems.append(Problem(value.where, value.field, message))
                    continue
                values[_CONNECTION_FIELDS[key]] = found
            else:
                values[_CONNECTION_FIELDS[key]] = value
        if problems:
            raise SpecError(problems)
        return values

    def describe(self) -> dict[str, Any]:
        """What ``reconcile envs`` shows: targets and where secrets come from, no secret."""
        shown: dict[str, Any] = {"name": self.name}
        for key, value in self.settings.items():
            shown[key] = f"${value.var}" if isinstance(value, FromEnv) else value
        if self.embedded:
            shown["servers"] = "embedded nats-server"
        shown["overlays"] = [str(p) for p in self.overlays]
        shown["resources"] = [str(p) for p in self.resources]
        if not self.lifecycle.is_default:
            shown["lifecycle"] = self.lifecycle.settings()
        return shown


@dataclass(frozen=True)
class Project:
    """A parsed, validated project file."""

    path: Path
    specs: tuple[Path, ...]
    environments: Mapping[str, Environment] = field(default_factory=dict)
    owner: str | None = None
    #: Drift ignore rules: ``ignore:``, then ``.reconcileignore`` next to this file.
    ignore: IgnoreRules = NO_RULES
    #: Policy files every run of this project evaluates (docs/policy.md).
    policies: tuple[Path, ...] = ()
    #: Each path the file names: its field and line (the first place naming it).
    places: Mapping[Path, tuple[str, Location]] = field(
        default_factory=dict, compare=False, repr=False
    )
    #: The line of ``environments:`` (an unknown environment's error names it).
    environments_at: Location | None = field(default=None, compare=False, repr=False)

    @property
    def root(self) -> Path:
        return self.path.parent

    @cached_property
    def domains(self) -> tuple[tuple[str, str | None], ...]:
        """Each environment's name and JetStream domain (worked out once: the agent of
        many environments shares one project among their requests)."""
        return tuple((env.name, env.domain) for env in self.environments.values())

    def environment(self, name: str) -> Environment:
        """The environment called ``name``, or a SpecError naming the known ones."""
        found = self.environments.get(name)
        if found is not None:
            return found
        known = sorted(self.environments)
        hint = did_you_mean(name, known)
        message = f"no environment {name!r}{hint} (known: {', '.join(known)})"
        where = self.environments_at or Location(str(self.path), 1)
        raise SpecError([Problem(where, "environments", message)])

    def spec_paths(self, environment: Environment) -> list[Path]:
        """The shared spec paths, then the environment's own resources."""
        return [*self.specs, *environment.resources]

    def missing(self, environment: Environment) -> list[Problem]:
        """Each spec path, resource and overlay of ``environment`` that does not exist,
        at the line naming it."""
        problems: list[Problem] = []
        for path in dict.fromkeys([*self.spec_paths(environment), *environment.overlays]):
            if not path.exists():
                field_path, where = self.places.get(path, ("", Location(str(self.path), 1)))
                message = f"{path} does not exist (environment {environment.name} plans it)"
                problems.append(Problem(where, field_path, message))
        return problems

    def load_specs(self, environment: Environment, *, strict: bool = False) -> list[Spec]:
        """The environment's validated specs: its spec paths with its overlays merged in
        (what ``plan --env`` plans); raises one SpecError."""
        from reconciler.specs.validate import load_specs

        paths = self.spec_paths(environment)
        return load_specs(paths, overlays=environment.overlays, strict=strict)


def find_project(directory: Path | None = None) -> Path | None:
    """``reconcile.yaml`` in ``directory`` (the current one by default), if there is one."""
    candidate = directory / PROJECT_FILE if directory else Path(PROJECT_FILE)
    return candidate if candidate.is_file() else None


def load_project(path: str | Path) -> Project:
    """Read and validate a project file; raise one SpecError with every problem. A
    project file that is a symlink pointing out of its repository (a pull request can
    make one) is refused unread: a bad line of it is quoted under its error."""
    path = Path(path)
    root = repository_root([path.parent])
    why = outside_problem(root, path.name, path.parent)
    if why is not None:
        raise SpecError([Problem(Location(str(path), 1), "", f"not read: {why}")])
    problems: list[Problem] = []
    documents = load_file(path, problems, within=root)  # swapped since the check: not read
    if not problems and len(documents) != 1:
        count = f"{len(documents)} documents" if documents else "nothing"
        problems.append(Problem(Location(str(path), 1), "", f"expected one mapping, found {count}"))
    if problems:
        raise SpecError(problems)
    document = documents[0]
    problems = [_no_secret_echo(p) for p in schema_problems(document, "project")]
    if problems:
        raise SpecError(problems)
    return _project(path, document)


@dataclass(frozen=True)
class _Named:
    """Turns a path the project file names into one relative to the current folder,
    after checking it stays inside the repository (:mod:`reconciler.specs.paths`)."""

    folder: Path  # the project file's folder, as given
    root: Path  # the repository root (resolved)
    document: Document
    problems: list[Problem]
    places: dict[Path, tuple[str, Location]] = field(default_factory=dict)

    def __call__(self, named: Any, field_path: str) -> Path:
        where = self.document.where(field_path)
        why = outside_problem(self.root, str(named), self.folder)
        if why is not None:
            self.problems.append(Problem(where, field_path, why))
        path = self.folder / str(named)
        self.places.setdefault(path, (field_path, where))
        return path


def _project(path: Path, document: Document) -> Project:
    body = document.body
    problems: list[Problem] = []
    named = _Named(path.parent, repository_root([path]), document, problems)
    environments = {
        name: _environment(name, raw, named, document, problems)
        for name, raw in body["environments"].items()
    }
    specs = tuple(named(p, f"specs.{i}") for i, p in enumerate(body["specs"]))
    ignore = project_rules(document, body.get("ignore", ()), path.parent, problems)
    policies = tuple(named(p, f"policies.{i}") for i, p in enumerate(body.get("policies", ())))
    if problems:
        raise SpecError(problems)
    owner = body.get("owner")
    return Project(
        path=path,
        specs=specs,
        environments=environments,
        owner=owner,
        ignore=ignore,
        policies=policies,
        places=named.places,
        environments_at=document.where("environments"),
    )


def _environment(
    name: str, raw: Mapping[str, Any], named: _Named, document: Document, problems: list[Problem]
) -> Environment:
    prefix = f"environments.{name}"
    settings: dict[str, str | FromEnv] = {}
    flat = dict(raw)
    for key, value in (raw.get("tls") or {}).items():
        flat[f"tls.{key}"] = value
    for key in _CONNECTION_FIELDS:
        if key not in flat:
            continue
        value, where = flat[key], document.where(f"{prefix}.{key}")
        if isinstance(value, dict):
            settings[key] = FromEnv(str(value["env"]), f"{prefix}.{key}", where)
        elif isinstance(value, list):
            settings[key] = ",".join(str(v) for v in value)
        else:
            path_field = f"{prefix}.{key}"
            settings[key] = str(named(value, path_field)) if key in _PATH_FIELDS else str(value)
        literal = settings[key]
        if key == "servers" and isinstance(literal, str):
            problem = _url_problem(literal, f"{prefix}.servers", where)
            if problem is not None:
                problems.append(problem)
    names_server = any(k in settings for k in ("servers", "context"))
    if raw.get("embedded") and names_server:
        message = "an embedded environment names no servers or context"
        problems.append(
            Problem(document.where(f"{prefix}.embedded"), f"{prefix}.embedded", message)
        )
    if not raw.get("embedded") and not names_server:  # never a silent throwaway server
        message = "names no server: set servers (or context), or embedded: true"
        problems.append(Problem(document.where(prefix), prefix, message))
    return Environment(
        name=name,
        where=document.where(prefix),
        settings=settings,
        embedded=bool(raw.get("embedded", False)),
        overlays=_paths(named, raw, f"{prefix}.overlays"),
        resources=_paths(named, raw, f"{prefix}.resources"),
        description=str(raw.get("description", "")),
        lifecycle=lifecycle_of(
            raw.get("lifecycle"), None, document.where, problems, prefix=f"{prefix}.lifecycle"
        ),
    )


def _paths(named: _Named, raw: Mapping[str, Any], field_path: str) -> tuple[Path, ...]:
    listed = raw.get(field_path.rsplit(".", 1)[1], ())
    return tuple(named(p, f"{field_path}.{i}") for i, p in enumerate(listed))


def _no_secret_echo(problem: Problem) -> Problem:
    """A schema problem at a secret field says what to write, never the value given."""
    if problem.path.rsplit(".", 1)[-1] not in _SECRET_FIELDS:
        return problem
    message = (
        "a secret never goes in the project file: write {env: NAME}, naming the "
        "environment variable that holds it"
    )
    return Problem(problem.location, problem.path, message)


#: What an unreadable server URL is told (never quoted: it may come from a variable).
NOT_A_URL = "not a valid server URL (nats://HOST:PORT)"


def _netloc(url: str) -> str | None:
    """The host part of one server URL (``""`` for an empty one); None when it is no
    URL: unreadable (``nats://x[2J``: urllib's "Invalid IPv6 URL"), without a host, or
    holding a control character, which every output naming the server would print."""
    rest = url.strip().partition("://")[2] or url.strip()
    try:
        netloc = urllib.parse.urlsplit(f"nats://{rest}").netloc
    except ValueError:
        return None
    if url.strip() and (not netloc or not url.isprintable()):
        return None
    return netloc


def _url_problem(servers: str, field_path: str, where: Location) -> Problem | None:
    """A problem when a server URL carries credentials (they belong in user/password),
    or is no URL at all (:func:`_netloc`)."""
    for url in servers.split(","):
        netloc = _netloc(url)
        if netloc is None:
            return Problem(where, field_path, NOT_A_URL)
        if userinfo(split_scheme(url)[1]) is not None:  # whatever a parser makes of it
            message = (
                "a server URL carries credentials; the project file holds no secrets: "
                "use user and password: {env: NAME} (or token, creds)"
            )
            return Problem(where, field_path, message)
    return None


def add_environments(path: Path, environments: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Add ``environments`` to the project file at ``path`` as text, leaving every other
    line (comments included) as it is; the names added. A name already there is kept as
    it is. The file is validated afterwards and restored when that fails."""
    import yaml

    original = path.read_text(encoding="utf-8")
    existing = load_project(path).environments
    new = {name: dict(env) for name, env in environments.items() if name not in existing}
    if not new:
        return []
    lines = original.splitlines(keepends=True)
    header = next(
        (i for i, line in enumerate(lines) if re.match(r"^environments:\s*(#.*)?$", line)), None
    )
    if header is None and any(line.startswith("environments:") for line in lines):
        message = "environments is written inline: add the imported environments by hand"
        raise SpecError([Problem(Location(str(path), 1), "environments", message)])
    indent = "  "
    if header is not None:
        following = next(
            (x for x in lines[header + 1 :] if x.strip() and not x.lstrip().startswith("#")), ""
        )
        indent = following[: len(following) - len(following.lstrip())] or "  "
    block = yaml.safe_dump(new, sort_keys=False, default_flow_style=False, indent=2)
    body = "".join(
        indent + line if line.strip() else line for line in block.splitlines(keepends=True)
    )
    if header is None:
        text = original + ("" if original.endswith("\n") or not original else "\n")
        text += "environments:\n" + body
    else:
        text = "".join(lines[: header + 1]) + body + "".join(lines[header + 1 :])
    path.write_text(text, encoding="utf-8")
    try:
        load_project(path)
    except SpecError:
        path.write_text(original, encoding="utf-8")
        raise
    return sorted(new)
