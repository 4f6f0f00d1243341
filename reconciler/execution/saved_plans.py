"""A saved plan's checks at apply, in the order apply makes them (docs/saved-plans.md):
the request it names (paths inside the repository), the files it was made from (each
digest), the server it was made against (its identity, before the apply lock is taken),
and the plan made again (the same steps on the same observed live configs). Each
refusal raises :class:`~reconciler.errors.SavedPlanRefused` naming what changed;
nothing is written before the last check passed.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from reconciler.errors import PermissionDenied, ReconcileError, SavedPlanRefused, ServerError
from reconciler.execution import lineage
from reconciler.execution.environments import Target
from reconciler.execution.requests import PlanRequest
from reconciler.identity import LOCK_BUCKET
from reconciler.jetstream import JetStreamClient
from reconciler.jetstream.connection import ConnectionOptions
from reconciler.jetstream.server_identity import server_identity
from reconciler.model.server_identity import ServerIdentity
from reconciler.planning.saved import SavedPlan, SavedRequest
from reconciler.planning.steps import Plan
from reconciler.specs.fingerprint import SpecDigest, digest_files, relative
from reconciler.specs.paths import outside_problem
from reconciler.specs.spec import Spec

NOTHING_CHANGED = "nothing was changed"
PLAN_AGAIN = "plan again and review the new plan"


#: The largest saved plan ``apply FILE`` (and the Action's ``plan-file``) reads: a plan of
#: 101,000 changes with their live configs is a few hundred MB; a larger file is refused
#: before it is read into memory.
MAX_SAVED_BYTES = 1 << 30


def read_saved(path: Path) -> SavedPlan:
    """The saved plan in the file ``path`` (a symlink followed): a device, pipe or folder
    (``/dev/zero``, a FIFO: never read, never waited on) and a file larger than
    :data:`MAX_SAVED_BYTES` are refused, naming the file, as is a file that is no
    saved plan (``SavedPlan.parse``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without a writer
        with os.fdopen(fd, "rb") as file:
            found = os.fstat(file.fileno())
            if not stat.S_ISREG(found.st_mode):
                raise ReconcileError(f"cannot read {path}: not a regular file; give a saved plan")
            data = b"" if found.st_size > MAX_SAVED_BYTES else file.read(MAX_SAVED_BYTES + 1)
    except OSError as err:
        raise ReconcileError(f"cannot read {path}: {err.strerror or err}") from None
    if found.st_size > MAX_SAVED_BYTES or len(data) > MAX_SAVED_BYTES:
        raise ReconcileError(
            f"{path}: larger than {MAX_SAVED_BYTES >> 20} MiB, no saved plan; {NOTHING_CHANGED}"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ReconcileError(f"cannot read {path}: not UTF-8 text, no saved plan") from None
    return SavedPlan.parse(text, source=str(path))


def spec_folder_holding(out: Path, request: PlanRequest) -> Path | None:
    """The spec folder of ``request`` that a saved plan written to ``out`` would be inside
    (None: none): the next run would read the plan there as a spec. ``plan --out`` and
    the Action's ``plan-file`` refuse such a path."""
    where = out.resolve()
    inside = [p for p in request.paths if p.is_dir() and where.is_relative_to(p.resolve())]
    return inside[0] if inside else None


def saved_request(request: PlanRequest, root: Path) -> SavedRequest:
    """The flags of ``request`` as a saved plan keeps them (paths relative to ``root``)."""
    named = (*request.paths, *request.overlays, *request.policies)
    outside = [p for p in named if relative(Path(p), root).startswith("..")]
    if outside:
        raise SavedPlanRefused(
            f"{outside[0]} is outside the repository ({root}): a saved plan names its "
            "files inside it; run plan from the repository holding the specs"
        )
    return SavedRequest(
        paths=tuple(relative(p, root) for p in request.paths),
        overlays=tuple(relative(p, root) for p in request.overlays),
        env=request.env,
        owner=request.owner,
        take_over=request.take_over,
        prune=request.prune,
        strict=request.strict,
        migrate=request.migrate,
        migration=request.migration,
        policies=tuple(relative(Path(p), root) for p in request.policies),
    )


def plan_request(
    saved: SavedPlan,
    options: ConnectionOptions,
    required: Sequence[Path] = (),
    *,
    owner: str | None = None,
    take_over: bool = False,
    prune: bool | None = None,
) -> PlanRequest:
    """The request a saved plan names, its paths inside its root (:meth:`SavedPlan.at`),
    with ``options`` (the connection comes from the command line, the environment or the
    project, never from the file). ``required``: policy files the apply's command line
    names, which the plan must have been made with. ``owner``: the owner the front door
    runs as (None: the file's); ``take_over``: the applier allows taking over other
    owners' resources (the file never grants it, as it never grants ``--allow-*``);
    ``prune``: whether the applier prunes, which must be what the plan was made with
    (None: the file's)."""
    named, root = saved.request, saved.root
    if prune is not None and named.prune != prune:
        made, given = ("with", "without") if named.prune else ("without", "with")
        raise SavedPlanRefused(
            f"the saved plan was made {made} prune and is applied {given} it: prune "
            f"(deleting what no spec declares) is given at apply as at plan: {NOTHING_CHANGED}"
        )
    made_with = [f.path for f in saved.specs.files if f.role == "project"]
    if made_with and saved.project is None:
        raise SavedPlanRefused(
            f"the plan was made with the project file {made_with[0]}, which this apply does "
            f"not read: name it as the plan did: {NOTHING_CHANGED}"
        )
    if owner is not None and named.owner != owner:
        raise SavedPlanRefused(
            f"the saved plan names owner {named.owner}, not {owner}: {NOTHING_CHANGED}"
        )
    if named.take_over and not take_over:
        raise SavedPlanRefused(
            "the saved plan takes over resources another owner manages: apply it with "
            f"--take-over to allow that (the file never grants it): {NOTHING_CHANGED}"
        )
    for path in (*named.paths, *named.overlays, *named.policies):
        why = outside_problem(root, path, root)
        if why is not None:
            raise SavedPlanRefused(f"the saved plan names {why}: {NOTHING_CHANGED}")
    _check_environment(saved)
    request = PlanRequest(
        paths=tuple(_inside(root, p) for p in named.paths),
        options=options,
        overlays=tuple(_inside(root, p) for p in named.overlays),
        env=named.env,
        owner=named.owner,
        take_over=named.take_over,
        prune=named.prune,
        strict=named.strict,
        migrate=named.migrate,
        migration=named.migration,
        policies=tuple(_inside(root, p) for p in named.policies),
    )
    _check_project_policies(saved.project, request.policies, required)
    return request


# --- the saved-plan rules every front door applies (apply FILE, the Action's plan-file) ----

#: The flags a saved plan decides: the re-plan takes them from the file (with its spec
#: paths and overlays: an environment's are the project file's, checked), and an apply
#: that gives one of them is refused: the file keeps the flags it was made with.
PLAN_DECIDES = ("strict", "migrate", "migration")
#: Every request field the file decides: its spec paths and overlays, and those flags.
FILE_DECIDES = ("paths", "overlays", *PLAN_DECIDES)
#: What the apply decides, never the file: its connection and its environment (which
#: must be the file's), the owner it runs as, its consent (take over, prune, the policy
#: files it requires: the file must have been made with them, never grants them), the
#: environment's lifecycle and ignore rules as read now; and the ``--allow-*`` flags
#: (:class:`~reconciler.execution.requests.ApplyRequest`, as for any apply).
APPLY_DECIDES = (
    *("options", "env", "owner", "take_over", "prune", "policies", "lifecycle", "ignore"),
    *("domains", "project"),  # the environment's project as read now (docs/dr.md)
)
#: Request fields no saved plan has a say in (``drift``: a drift report's, never an apply's;
#: ``ahead``: files a child parses for the door, never kept).
NEITHER = ("drift", "ahead")


@dataclass(frozen=True, kw_only=True)
class Applying:
    """What the front door applying a saved plan gives (:data:`APPLY_DECIDES`)."""

    #: Where it applies, as for any apply: connection, environment, owner, the
    #: environment's lifecycle and ignore rules (its spec paths are the file's).
    target: Target
    take_over: bool = False
    prune: bool = False
    #: Policy files the apply requires (``--policy``, the Action's ``policy`` input).
    policies: tuple[Path, ...] = ()
    #: The :data:`PLAN_DECIDES` flags the door was given (each refused).
    given: tuple[str, ...] = ()
    #: The spec paths the door names beside the file, relative to the root (the Action's
    #: ``path`` input); None: it names none (``apply FILE`` takes no PATHS).
    paths: tuple[str, ...] | None = None
    #: How the door spells a flag in its messages (``--env``, ``input 'environment'``).
    spelled: Mapping[str, str] = field(default_factory=dict)


def refuse_given(
    saved: SavedPlan,
    *,
    env: str | None,
    given: Sequence[str] = (),
    paths: Sequence[str] | None = None,
    spelled: Mapping[str, str] | None = None,
) -> None:
    """Refuse what an apply may not give with a saved plan, before anything is read:
    a :data:`PLAN_DECIDES` flag (``given``), another environment than the file's
    (``env``), other spec paths than the file's (``paths``, when the door names some
    and the plan has no environment)."""
    names = dict(spelled or {})
    for flag in given:
        if flag in PLAN_DECIDES:
            shown = names.get(flag, flag)
            raise SavedPlanRefused(
                f"{shown} given with a saved plan: the plan decides {flag} (it keeps the "
                f"flags it was made with): {NOTHING_CHANGED}"
            )
    made, flag = saved.request.env, names.get("env", "the environment")
    if made != env:
        applied = f"environment {env}" if env else "no environment"
        hint = f"give {flag} {made}" if made else f"apply it without {flag}"
        saved_for = f"environment {made}" if made else "no environment"
        raise SavedPlanRefused(
            f"the plan was saved for {saved_for}; this apply names {applied}: {hint}: "
            f"{NOTHING_CHANGED}"
        )
    if made is None and paths is not None and tuple(paths) != saved.request.paths:
        raise SavedPlanRefused(
            f"the plan was saved for paths {_listed(saved.request.paths)}; this apply names "
            f"{_listed(paths)}: {NOTHING_CHANGED}"
        )


def resolve(
    saved: SavedPlan,
    applying: Applying,
    *,
    root: Path,
    project: Path | None,
    notice: Callable[[str], None] | None = None,
) -> tuple[SavedPlan, PlanRequest]:
    """The saved plan resolved in ``root`` (``project``: the project file the apply
    reads), and the request of its re-plan: the file's paths and :data:`PLAN_DECIDES`
    flags, the apply's :data:`APPLY_DECIDES`; refused when they disagree. The one
    place these rules live: ``apply FILE`` and the Action's ``plan-file`` call it."""
    target = applying.target
    refuse_given(
        saved,
        env=target.env,
        given=applying.given,
        paths=applying.paths,
        spelled=applying.spelled,
    )
    saved = saved.at(root, project)
    if notice is not None:
        notice(describe(saved))
    request = plan_request(
        saved,
        target.options,
        applying.policies,
        owner=target.owner,
        take_over=applying.take_over,
        prune=applying.prune,
    )
    request = replace(request, lifecycle=target.lifecycle, ignore=target.ignore)
    # where a standby mirrors from, the other side's connection: as read now (docs/dr.md)
    return saved, replace(request, domains=target.domains, project=target.project)


def _check_environment(saved: SavedPlan) -> None:
    """Refuse a saved plan for an environment that names other spec paths or overlays
    than the project file gives the environment now: the project file defines an
    environment, the saved file only records what it was (its owner is the one the
    front door runs as: ``plan_request``'s ``owner``)."""
    named, project = saved.request, saved.project
    if named.env is None or project is None:
        return
    from reconciler.specs.project import load_project

    read = load_project(project)
    environment = read.environment(named.env)
    kept = {
        "paths": tuple(relative(p, saved.root) for p in read.spec_paths(environment)),
        "overlays": tuple(relative(p, saved.root) for p in environment.overlays),
    }
    for what, wanted in kept.items():
        found = getattr(named, what)
        if found != wanted:
            raise SavedPlanRefused(
                f"the saved plan names {what} {_listed(found)}; environment {named.env} "
                f"reads {_listed(wanted)} ({project}): {NOTHING_CHANGED}; {PLAN_AGAIN}"
            )


def _listed(paths: Sequence[str]) -> str:
    return ", ".join(paths) if paths else "none"


def _check_project_policies(
    project: Path | None, policies: Sequence[Path], required: Sequence[Path] = ()
) -> None:
    """Refuse a saved plan whose request leaves out a policy file the project file names,
    or one the apply's command line requires (``required``): the file decides the
    re-plan's flags, never to drop the rules of whoever applies it."""
    from reconciler.specs.project import load_project

    kept = {Path(p).resolve() for p in policies}
    named: list[tuple[Path, str]] = []
    if project is not None:
        by = f"the project file {project} names"
        named += [(path, by) for path in load_project(project).policies]
    named += [(Path(path), "that --policy names") for path in required]
    for path, by in named:
        if path.resolve() not in kept:
            raise SavedPlanRefused(
                f"the saved plan leaves out the policy file {path} {by}: "
                f"{NOTHING_CHANGED}; {PLAN_AGAIN}"
            )


def _inside(root: Path, named: str) -> Path:
    """``named`` in ``root``, relative to the current folder when inside it (so files
    are named in messages as the plan named them)."""
    path = root / named
    cwd = Path.cwd()
    return path.relative_to(cwd) if path.is_relative_to(cwd) and path != cwd else path


def spec_digest(
    request: PlanRequest,
    specs: Sequence[Spec],
    *,
    root: Path,
    project: Path | None,
    salt: str | None = None,
) -> SpecDigest:
    """The digests of every file ``request`` read: its spec paths, overlays, policy
    files, the project file and the value files its specs named."""
    values = sorted({Path(s.value_file) for s in specs if s.value_file})
    policies = [Path(p) for p in request.policies]
    roles = {
        "spec": [*request.paths, *policies],
        "overlay": list(request.overlays),
        "project": [project] if project is not None else [],
        "value": values,
    }
    return digest_files(roles, root=root, salt=salt)


def check_specs(saved: SavedPlan, request: PlanRequest, specs: Sequence[Spec]) -> None:
    """Refuse when a file the plan was made from changed, went, or came."""
    root, project = saved.root, saved.project
    now = spec_digest(request, specs, root=root, project=project, salt=saved.specs.salt)
    changed = saved.specs.changes(now)
    if changed:
        raise SavedPlanRefused(
            f"the specs changed since the plan was saved: {NOTHING_CHANGED}; {PLAN_AGAIN}",
            details=changed,
        )


async def saved_identity(client: JetStreamClient, observed_at: str = "") -> ServerIdentity:
    """The identity ``plan --out`` saves: the server's, and the account's lineage,
    written first when the account has none yet (:func:`lineage.keep`), so the plan is
    bound to a value only this server (or another node of its cluster) holds. A user who
    may not write it gets one line saying so, and no file. ``observed_at``: where the
    environment declares lifecycle ``mode: observe`` (never written): the lineage is
    only read there, and an account without one saves no file."""
    if observed_at:
        found = await lineage.read(client)
        if found is None:
            raise SavedPlanRefused(
                f"the account has no lineage yet and the environment has lifecycle mode "
                f"observe ({observed_at}): never written, so it is not kept there; a saved "
                "plan is bound to it (docs/saved-plans.md): plan without --out (an observed "
                "environment's plan has no steps): nothing was saved"
            )
        return replace(await server_identity(client), lineage=found)
    try:
        kept = await lineage.keep(client)
    except PermissionDenied as err:
        raise SavedPlanRefused(
            f"the account has no lineage yet and this user may not write it ({err}): a "
            f"saved plan is bound to it (docs/saved-plans.md); apply once, or plan --out "
            f"once with a user that may write the apply lock's bucket {LOCK_BUCKET}: "
            "nothing was saved"
        ) from None
    except ServerError as err:  # the account has no room for the bucket, say
        raise SavedPlanRefused(
            f"the account has no lineage yet and the server refused to keep it in "
            f"{LOCK_BUCKET} ({err}): a saved plan is bound to it (docs/saved-plans.md): "
            "nothing was saved"
        ) from None
    return replace(await server_identity(client), lineage=kept)


@contextlib.asynccontextmanager
async def same_server(client: JetStreamClient, saved: SavedPlan | None) -> AsyncIterator[None]:
    """Refuse (before the apply lock writes anything) a server that is not the one the
    plan was saved against, its lineage included (read, never written here); nothing to
    check without a saved plan."""
    if saved is not None:
        if saved.server.lineage is None:  # plan --out always saves one: an edited file
            raise SavedPlanRefused(
                "the saved plan names no lineage of the account it was made in, so no "
                f"server can be told from another by it: {NOTHING_CHANGED}; {PLAN_AGAIN}"
            )
        now = replace(await server_identity(client), lineage=await lineage.read(client))
        changed = saved.server.differences(now)
        if changed:
            # which server refused it, credentials removed (every apply names its server)
            address = (await client.server_info()).address
            there = f" (connected to {address})" if address else ""
            raise SavedPlanRefused(
                f"the plan was saved against another server: {NOTHING_CHANGED}{there}",
                details=changed,
            )
    yield


def check_plan(saved: SavedPlan, now: Plan) -> None:
    """Refuse a plan made again that is not the saved one."""
    changed = saved.differences(now)
    if changed:
        raise SavedPlanRefused(
            f"the plan made now is not the saved one: {NOTHING_CHANGED}; {PLAN_AGAIN}",
            details=changed,
        )


def describe(saved: SavedPlan) -> str:
    """One line naming what the saved plan was made from (for a notice)."""
    commit = saved.specs.commit
    at = f" at commit {commit[:12]}" if commit else ""
    env = f" for environment {saved.request.env}" if saved.request.env else ""
    counts = ", ".join(f"{n} {action}" for action, n in saved.summary.items() if n)
    return f"applying the saved plan{env}{at} ({counts or 'no changes'})"


__all__ = [
    "APPLY_DECIDES",
    "FILE_DECIDES",
    "NEITHER",
    "PLAN_DECIDES",
    "Applying",
    "check_plan",
    "check_specs",
    "describe",
    "plan_request",
    "refuse_given",
    "resolve",
    "same_server",
    "saved_identity",
    "saved_request",
    "spec_digest",
]
