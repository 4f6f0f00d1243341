"""The provider's server work: one resource read, created, updated or deleted.

Everything here goes through the pipeline's stages (``reconciler.execution.stages``),
scoped to the one resource: under the server's apply lock (``stages.locked``, the lock
``reconcile apply``, a restore and the agent's heals take), read, plan (with every check
``reconcile apply`` makes), verdict, execute. Each function takes an open client; the
provider opens one per call.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulumi_provider.connection import set_with
from reconciler.door_words import Allowance, Setting, Words
from reconciler.errors import (
    ApplyFailed,
    NotFound,
    PermissionDenied,
    Problem,
    ReconcileError,
    RefusalKind,
    RefusedPlan,
    SpecError,
)
from reconciler.execution import stages
from reconciler.execution.stages import QUIET, Observer, PlanRequest
from reconciler.identity import ResourceRef
from reconciler.jetstream import JetStreamClient
from reconciler.model.diff import FieldChange
from reconciler.model.normalize import live_config
from reconciler.model.state import LiveState, ServerInfo
from reconciler.model.values import bucket_field_name
from reconciler.planning.steps import Create, Migrate, Plan, Replace, Update
from reconciler.specs.checks import work_queue_partitions
from reconciler.specs.lifecycle import MANAGE, Lifecycle
from reconciler.specs.spec import CLAIM_KEY, SERVER_OWNED_METADATA, Spec

#: The identity of a managed resource: enough to find it on a server. Its Pulumi id is
#: ``ref.path``: the stream name, ``STREAM/CONSUMER``, or the bucket name.
Target = ResourceRef

#: How long a change waits for another run's apply lock, unless the stack says otherwise.
LOCK_TIMEOUT = stages.LOCK_TIMEOUT

#: How a Pulumi program allows what the executor refuses (an update that deletes stored
#: messages, a delete of a stream holding some).
ALLOW_WITH = "It deletes stored messages: set allow_destroy=True on the resource to allow it."
#: The same for a delete, which Pulumi makes with the inputs the resource was last applied
#: with: the old resource of a replace keeps the ``allow_destroy`` it had, whatever the
#: program says now.
DELETE_ALLOW_WITH = (
    "It deletes stored messages: set allow_destroy=True on the resource to allow it. "
    "Pulumi deletes with the inputs the resource was last applied with: one removed from "
    "the program, or the old resource of a replace, keeps the allow_destroy it had (put "
    "it back with allow_destroy=True and run `pulumi up` first, or empty its stream, or "
    "keep it and drop it from the stack with `pulumi state delete URN`)."
)
#: The same for the delete of a replace, judged at the diff: Pulumi deletes the old
#: resource with its recorded inputs, so an ``allow_destroy=True`` given with the change
#: does not count yet (docs/pulumi.md, Constraints of dynamic providers).
REPLACE_ALLOW_WITH = (
    "It deletes stored messages: Pulumi deletes the old resource of a replace with the "
    "inputs it was last applied with, so an allow_destroy=True given with this change does "
    "not count: set allow_destroy=True alone in a `pulumi up` of its own, then make this "
    "change (or set migrate=True to keep the messages, for a change a migration makes: "
    "a stream's storage, retention to or from workqueue, docs/migrate.md)."
)

#: Why a consumer is refused when the server does not hold its stream. The provider plans
#: a consumer beside an ``external`` declaration of its stream (:func:`with_stream`): the
#: engine's "external stream ... does not exist" names a word the program never wrote.
NO_STREAM = (
    "its stream {stream} does not exist on the server: declare the stream as a resource "
    "of this program and give the consumer stream=<that resource>.name (or "
    "opts=ResourceOptions(depends_on=[<that resource>])), so that Pulumi creates the "
    "stream first; a stream managed elsewhere must be created before its consumers"
)

#: What the engine's messages name a CLI flag for, in a Pulumi program's words: the
#: resource's arguments and the stack's config (a connection setting: the `connection`
#: input's field or its ``jetstream:`` config). None: Pulumi has no way to allow it (the
#: message leaves it out, or names the `reconcile` command that has it).
WORDS: Words = {
    Allowance.MIGRATE: "migrate=True",
    Allowance.MIGRATE_RUN: "migrate=True",
    Allowance.MIGRATION: None,
    Allowance.TAKE_OVER: None,
    Allowance.LOCK_TIMEOUT: "jetstream:lockTimeout",
    Allowance.NO_LOCK: None,
    Setting.CREDS: set_with("creds"),
    Setting.NKEY: set_with("nkey"),
    Setting.TLS_CA: set_with("tls_ca"),
    Setting.CLIENT_CERT: set_with("tls_cert", "tls_key"),
    Setting.USER_PASSWORD: f"{set_with('user', 'password')}, or its token",
    Setting.MONITOR: set_with("monitor"),
    Setting.SYSTEM_USER: set_with("system_creds", "system_context"),
}


@dataclass(frozen=True)
class Live:
    """A resource as the server holds it: its config verbatim and the server's facts."""

    server: ServerInfo
    config: Mapping[str, Any]  # a consumer's config, or the (bucket's) stream config
    messages: int = 0
    stream_config: Mapping[str, Any] | None = None  # consumers: their stream's config


async def observe(client: JetStreamClient, target: Target) -> Live | None:
    """The live resource, or None when the server does not have it."""
    server = await client.server_info()
    try:
        stream = await client.stream_info(target.stream_name)
        if target.kind != "Consumer":
            messages = int(stream.get("state", {}).get("messages", 0))
            return Live(server, stream["config"], messages)
        info = await client.consumer_info(target.stream_name, target.name)
    except NotFound:
        return None
    return Live(server, info["config"], stream_config=stream["config"])


@dataclass(frozen=True)
class Environment:
    """The project environment a resource belongs to (``JetStreamSpecs(project=...,
    environment=...)``): its name (the policies' ``resource.environment``) and its
    lifecycle, merged into the resource's by the planner, as ``--env`` does."""

    name: str | None = None
    lifecycle: Lifecycle = MANAGE


#: A resource of no project environment.
NO_ENVIRONMENT = Environment()


def request_for(
    *,
    migrate: bool = False,
    policies: Sequence[str] = (),
    environment: Environment = NO_ENVIRONMENT,
) -> PlanRequest:
    """The plan request of one resource: no files (the resource's inputs are its spec),
    the resource's ``migrate``, the provider's policy files and environment."""
    return stages.resource_request(
        migrate=migrate,
        policies=[Path(p) for p in policies],
        lifecycle=environment.lifecycle,
        env=environment.name,
    )


async def converge(
    client: JetStreamClient,
    spec: Spec,
    *,
    allow_data_loss: bool = False,
    migrate: bool = False,
    observer: Observer = QUIET,
    policies: Sequence[str] = (),
    lock_timeout: float | None = stages.LOCK_TIMEOUT,
    environment: Environment = NO_ENVIRONMENT,
    creating: bool = False,
    claim: str | None = None,
) -> Live:
    """Create or update the resource exactly as ``reconcile apply`` would, then read it.

    The pipeline's stages, scoped to this resource, all under the server's apply lock
    (waiting up to ``lock_timeout`` seconds for another run's, then refused naming its
    holder, nothing changed): the read (its stream and consumers,
    and the account's other streams listed, so capacity and subjects count them all),
    the plan with every check ``reconcile apply`` makes (fields and replicas the server
    supports, capacity, a migration's room and working consumers, policy), the verdict,
    and the one executor: an existing resource without the managed-by marker is
    adopted, an update sends the complete config. A replace is refused here: Pulumi
    plans replaces itself (Diff), so one showing up now means the server changed since
    the last refresh; or, ``creating``, that a resource not in the stack's state already
    exists there (Pulumi replaces only what its state holds). An update that would
    delete stored messages (a tighter limit on a stream holding them) is refused unless
    the resource sets ``allow_destroy``, like a delete. With ``migrate``, a change an
    update cannot make migrates the messages (the resource's ``migrate`` input). The
    provider reads only the resource's own stream, so it never sees, and never acts on,
    a migration record left by an interrupted migration: ``reconcile apply --migrate``
    finishes or rolls back such a migration (docs/migrate.md).

    ``claim``: the resource's claim (:func:`new_claim`), recorded in the live resource's
    metadata by a step of the plan (:func:`_with_claim`), judged with it, where the live
    resource holds none (one this resource creates or adopts; one whose claim an older
    tool's update dropped). A live resource holding another claim is another Pulumi
    resource's: refused, nothing written, replaced, migrated or claimed
    (:func:`refuse_held`). A migration makes the stream again from its config: the claim
    is then recorded by a plan of its own, made and judged the same way once it is done.
    """
    target = spec.ref

    async def judged(state: LiveState) -> tuple[Plan, stages.Allowances]:
        return await _judged(
            client,
            spec,
            state,
            allow_data_loss=allow_data_loss,
            migrate=migrate,
            policies=policies,
            environment=environment,
            creating=creating,
            locked=True,
            claim=claim,
        )

    async with stages.locked(client, timeout=lock_timeout, on_notice=observer.notice) as held:
        plan, allowances = await judged(await read_around(client, target, observer))
        await stages.execute(plan, client, observer=observer, allowances=allowances, held=held)
        if claim is not None and any(
            isinstance(step, Migrate) and step.ref == target for step in plan.changes
        ):
            after, allowances = await judged(await read_around(client, target, observer))
            await stages.execute(after, client, observer=observer, allowances=allowances, held=held)
        live = await observe(client, target)
    if live is None:
        observed = [note.reasons[0] for note in plan.observed if note.missing]  # lifecycle
        why = observed[0] if observed else "vanished right after apply"
        raise ReconcileError(f"{spec.kind} {target.path}: {why}")
    return live


async def _judged(
    client: JetStreamClient,
    spec: Spec,
    state: LiveState,
    *,
    allow_data_loss: bool,
    migrate: bool,
    policies: Sequence[str],
    environment: Environment,
    creating: bool,
    locked: bool,
    claim: str | None = None,
) -> tuple[Plan, stages.Allowances]:
    """The plan of ``spec`` against ``state`` and the allowances it is applied with, once
    the verdict found nothing refusing it (raised otherwise): what :func:`converge` applies,
    and what :func:`judge_replace` judges before Pulumi changes anything.

    A live resource holding another resource's claim is refused first, nothing planned
    (:func:`refuse_held`). Then the plan stage with every check but the policy rules,
    then the step recording ``claim`` (:func:`_with_claim`), then the policy rules on
    the whole plan (``stages.with_policy``), then the verdict: the claim's write is
    judged as every other step is (a rule on ``step.fields`` sees
    ``metadata.io.jetstream-gitops/claim``)."""
    if spec.kind == "Consumer" and spec.stream_name not in state.streams:
        message = NO_STREAM.format(stream=spec.stream_name)
        raise SpecError([Problem(spec.source, "", message)])
    refuse_held(spec, state, claim, creating=creating, environment=environment)
    request = request_for(migrate=migrate, policies=policies, environment=environment)
    specs = with_stream(spec)
    unjudged = request_for(migrate=migrate, environment=environment)  # its rules: below
    plan = await stages.plan(client, specs, state, unjudged, locked=locked)
    if claim is not None:
        plan = _with_claim(plan, spec, state, claim, environment=environment)
    plan = await stages.with_policy(plan, specs, state, request)
    allowances = stages.Allowances(allow_data_loss=allow_data_loss, allow_with=ALLOW_WITH)
    refusals = stages.verdict(plan, allowances)
    if refusals and refusals[0].kind is RefusalKind.DATA_LOSS and not plan.lossy_updates:
        raise RefusedPlan(
            _creating_replace(spec, plan) if creating else _changed_since(spec),
            kind=RefusalKind.CHANGED,
        ) from refusals[0]
    stages.refuse(refusals)
    return plan, allowances


async def judge_replace(
    client: JetStreamClient,
    spec: Spec,
    old: Target,
    *,
    allow_data_loss: bool = False,
    migrate: bool = False,
    allow_destroy: bool = False,
    declared: Spec | None = None,
    claim: str | None = None,
    observer: Observer = QUIET,
    policies: Sequence[str] = (),
    environment: Environment = NO_ENVIRONMENT,
) -> bool:
    """Judge the replace Pulumi is about to make of ``old`` by ``spec`` (Pulumi makes it
    itself: a delete and a create) and say whether the old resource must be deleted
    first (True) or the new one may be created beside it first (False). Read only, no
    lock: each step judges again, with the server as it is then.

    - the delete of ``old`` is judged as :func:`destroy` judges it, by the same function
      (:func:`_judged_removal`: ``allow_destroy``, its ``declared`` lifecycle and its
      ``claim``: the old outputs', as Pulumi's delete gets them), so a replace whose
      delete would be refused changes nothing (created first, the new resource would be
      left beside an old one that stays);
    - an old resource holding another resource's claim is one the delete leaves as it
      is: the new one is judged beside it, and created first (a create refused then
      changes nothing); of the same name, that create is refused now, as it would be
      then (:func:`refuse_held`: never over another resource's claim);
    - when the new resource can stand beside the old one (another stream, another
      consumer: :func:`_in_the_way`) and its create, planned against the server as it
      is, passes (:func:`_judged`, as :func:`converge` plans it), Pulumi creates it
      first and deletes the old one after: a create refused then (the server changed
      meanwhile) leaves the old one, and its messages, as they were. A consumer whose
      stream the server does not hold yet is created first unjudged (its stream may be
      made by the same ``pulumi up``; its create is judged when it runs);
    - otherwise (the same stream name, subjects or workqueue filters the old one
      holds, room only without it, ...) Pulumi deletes first: the create is judged
      against the server with ``old`` counted as gone, and what would refuse it (the
      account's capacity, another project's resource of that name, a policy, ...)
      refuses the replace now, before anything is deleted.
    """
    state = await read_around(client, spec.ref, observer, also=old)
    removal = request_for(policies=policies, environment=environment)  # as destroy's
    deleted = await _judged_removal(
        client, old, state, removal, allow_destroy, declared, claim, allow_with=REPLACE_ALLOW_WITH
    )

    async def create_judged(live: LiveState) -> None:
        await _judged(
            client,
            spec,
            live,
            allow_data_loss=allow_data_loss,
            migrate=migrate,
            policies=policies,
            environment=environment,
            creating=True,
            locked=False,
            claim=new_claim(),  # the create records one: its step judged with the rest
        )

    if deleted is None:  # left as it is: the new one is made beside it
        if not (spec.kind == "Consumer" and spec.stream_name not in state.streams):
            await create_judged(state)
        return False
    if not _in_the_way(spec, old, state):
        if spec.kind == "Consumer" and spec.stream_name not in state.streams:
            return False
        try:
            await create_judged(state)
            return False
        except ReconcileError:
            pass  # refused beside the old one: judged below without it
    await create_judged(_without(state, old))
    return True


def _in_the_way(spec: Spec, old: Target, state: LiveState) -> bool:
    """Whether ``old`` takes the place on the server that ``spec`` needs, so that it must
    go first: the same stream name (a stream, a bucket's stream), the same consumer, the
    stream the new consumer lives in, or the same workqueue stream with filters the
    server refuses side by side (``specs.checks.work_queue_partitions``)."""
    new = spec.ref
    if not (new.is_child and old.is_child):
        return new.stream_name == old.stream_name
    if new.stream_name != old.stream_name:
        return False
    if new.name == old.name:
        return True
    live = state.consumers.get((old.stream_name, old.name))
    stream = state.streams.get(old.stream_name) or {}
    if live is None or stream.get("retention") != "workqueue":
        return False
    theirs = Spec(
        kind="Consumer", name=old.name, config=live, source=spec.source, stream=old.stream
    )
    return any(True for _ in work_queue_partitions([spec, theirs]))


def _without(state: LiveState, gone: Target) -> LiveState:
    """``state`` as the server holds it once ``gone`` is deleted (a stream, with its
    consumers)."""
    if gone.is_child:
        key = (gone.stream_name, gone.name)
        consumers = {k: c for k, c in state.consumers.items() if k != key}
        counts = dict(state.stream_state)
        held = counts.get(gone.stream_name)
        if held is not None and key in state.consumers:
            counts[gone.stream_name] = dataclasses.replace(
                held, consumer_count=max(held.consumer_count - 1, 0)
            )
        return dataclasses.replace(state, consumers=consumers, stream_state=counts)
    name = gone.stream_name
    return dataclasses.replace(
        state,
        streams={n: c for n, c in state.streams.items() if n != name},
        stream_state={n: s for n, s in state.stream_state.items() if n != name},
        consumers={k: c for k, c in state.consumers.items() if k[0] != name},
    )


def _changed_since(spec: Spec) -> str:
    return (
        f"{spec.kind} {spec.ref.path} changed on the server in a way an update "
        "cannot undo; run `pulumi refresh`, then `pulumi up` replaces it"
    )


def _creating_replace(spec: Spec, plan: Plan) -> str:
    """Why a create is refused over a resource only a replace could change: the fields,
    and the ways out (a refresh does not know a resource the state does not hold)."""
    fields = sorted(
        {
            bucket_field_name(step.kind, reason.field)
            for step in plan.changes
            if isinstance(step, Replace) and step.ref == spec.ref
            for reason in step.because
        }
    )
    which = f" ({', '.join(fields)})" if fields else ""
    return (
        f"{spec.kind} {spec.ref.path} already exists on the server and only a replace "
        f"could change it{which}; Pulumi replaces only what its state holds: declare it "
        "as the server holds it, delete it on the server first, or (a stream's storage "
        "or retention) set migrate=True to migrate its messages"
    )


#: Said when the user may not list the account's streams (``$JS.API.STREAM.LIST``).
UNLISTED = (
    "the user may not list the account's streams: the capacity check counts only the "
    "stream of {label}; the server refuses what does not fit"
)


async def read_around(
    client: JetStreamClient, target: Target, observer: Observer, *, also: Target | None = None
) -> LiveState:
    """The live state around ``target`` (and ``also``: a replace's old resource): its
    stream and consumers, the account's other streams listed (capacity and subjects
    count them). A user who may not list them (a permission scoped to its own streams)
    gets its own streams' only, and is told."""
    refs = (target,) if also is None else (target, also)
    try:
        return await stages.read(client, stages.Scope.of(*refs))
    except PermissionDenied:
        observer.notice(UNLISTED.format(label=target.label))
        return await stages.read(client, stages.Scope(frozenset(r.stream_name for r in refs)))


def with_stream(spec: Spec) -> list[Spec]:
    """The specs to plan: a consumer comes with an ``external`` declaration of its stream."""
    if spec.kind != "Consumer" or spec.stream is None:
        return [spec]
    stream = Spec(kind="Stream", name=spec.stream, config={}, source=spec.source, external=True)
    return [stream, spec]


async def destroy(
    client: JetStreamClient,
    target: Target,
    *,
    allow_destroy: bool,
    observer: Observer = QUIET,
    policies: Sequence[str] = (),
    lock_timeout: float | None = stages.LOCK_TIMEOUT,
    declared: Spec | None = None,
    environment: Environment = NO_ENVIRONMENT,
    claim: str | None = None,
) -> None:
    """Delete the resource through the pipeline's stages, under the server's apply lock
    (as :func:`converge`): the planner's delete step
    (what ``reconcile plan --prune`` shows for it: the same loss, the same lifecycle
    protections), the verdict, the one executor. A step that deletes messages (a stream
    or bucket holding some, the last consumer of an interest stream holding some, a
    consumer whose filter alone keeps messages there) is refused unless the resource
    sets ``allow_destroy``. Any other consumer, or an empty stream, loses no message.

    A resource already gone is not an error: the goal state is reached.

    ``declared``: the spec the resource was last declared with (its recorded inputs),
    whose ``lifecycle`` governs the delete as apply's planner applies it: with
    ``prevent_destroy`` the delete is refused (whatever the server's record says), in
    ``mode: observe`` the server's resource is left as it is (Pulumi forgets it).

    ``claim``: the claim the resource recorded when it created or adopted the live one
    (:func:`new_claim`). A live resource holding another claim was created or adopted since
    by another Pulumi resource (a program whose resources swap names in one ``pulumi
    up``: the old resource of a rename deleted at its end, after another resource took
    the name): it is left as it is, said in one line, and the delete succeeds (Pulumi
    forgets this resource). None (outputs of an older provider), or a live resource
    holding no claim: deleted as before.
    """
    async with stages.locked(client, timeout=lock_timeout, on_notice=observer.notice) as held:
        state = await read_around(client, target, observer)
        request = request_for(policies=policies, environment=environment)
        judged = await _judged_removal(
            client, target, state, request, allow_destroy, declared, claim
        )
        if judged is None:
            observer.notice(TAKEN.format(label=target.label))
            return
        plan, allowances = judged
        for note in plan.observed:
            observer.notice(f"{note.ref.label}: {note.reasons[0]}")
        if not plan.changes:
            return  # gone: the goal state is reached
        try:
            await stages.execute(plan, client, observer=observer, allowances=allowances, held=held)
        except ApplyFailed:
            if await observe(client, target) is not None:
                raise  # gone meanwhile: the goal state is reached


async def _judged_removal(
    client: JetStreamClient,
    target: Target,
    state: LiveState,
    request: PlanRequest,
    allow_destroy: bool,
    declared: Spec | None,
    claim: str | None,
    *,
    allow_with: str = DELETE_ALLOW_WITH,
) -> tuple[Plan, stages.Allowances] | None:
    """The plan deleting ``target`` from ``state`` and the allowances it is applied with,
    once the verdict found nothing refusing it (raised otherwise; another project's
    resource is refused): what :func:`destroy` applies, and what :func:`judge_replace`
    judges before Pulumi changes anything (``allow_with``: how a refusal says to allow
    it). None when the live resource holds a claim that is not ``claim``
    (:func:`claimed_by_another`): the delete leaves it as it is, nothing judged."""
    if claimed_by_another(_raw(state, target), claim):
        return None
    plan = await stages.plan_removal(client, target, state, request, declared=declared)
    keeps = any(loss.messages for step in plan.changes for loss in step.losses)
    allowances = stages.Allowances(allow_replace=allow_destroy or not keeps, allow_with=allow_with)
    stages.refuse(stages.verdict(plan, allowances))
    return plan, allowances


# --- the claim: which Pulumi resource created or adopted a live one ------------------------

#: What a delete says when another Pulumi resource holds the live resource now.
TAKEN = (
    "{label}: not deleted: it now belongs to another resource, of this stack or another "
    "(its claim is not this resource's: another resource created or adopted it since, "
    "under the same name): it is left as it is, and Pulumi forgets this resource"
)
#: Why the provider updates a resource only to record its claim.
CLAIM_REASON = "record the claim of the Pulumi resource that created or adopted it"


def new_claim() -> str:
    """The claim a create or an adoption records: a fresh random value, kept in the
    resource's outputs and in the live resource's metadata (``CLAIM_KEY``); an update
    keeps the one its outputs hold. No secret: it tells two Pulumi resources of one
    name apart, it grants nothing."""
    return secrets.token_hex(16)


def claim_of(config: Mapping[str, Any] | None) -> str | None:
    """The claim a live config's metadata holds, None when none."""
    metadata = (config or {}).get("metadata")
    found = metadata.get(CLAIM_KEY) if isinstance(metadata, Mapping) else None
    return found if isinstance(found, str) else None


def claimed_by_another(config: Mapping[str, Any] | None, claim: str | None) -> bool:
    """Whether the live resource (its raw ``config``) holds a claim that is not
    ``claim``: another Pulumi resource created or adopted it since.

    The claim is metadata anyone may write, so it only ever keeps a delete from
    happening, never lets one through: a forged claim makes a delete leave the resource
    (the safe side: its messages stay), and every other rule of the delete (the marker,
    the owner, ``allow_destroy``, the lifecycle, the policies) is judged as before when
    the claim is this resource's, or missing (no ``claim``: outputs of an older provider;
    no live claim: one an update by an older tool dropped)."""
    if claim is None or config is None:
        return False
    found = claim_of(config)
    return found is not None and found != claim


#: Why a create (an adoption, the create of a replace) or an update is refused over a live
#: resource holding another Pulumi resource's claim (:func:`refuse_held`): the headline,
#: then why and the ways out, a line each.
HELD = (
    "{label} holds the claim of another Pulumi resource (its metadata {key} is {shown}, "
    "not this resource's): it is left as it is; nothing was changed."
)
HELD_CREATE = (
    "Another resource of this program, or of another stack, created or adopted it: this "
    "create would take it from that resource (adopt, update, migrate or replace it).",
    "Declare it in one resource only: remove this resource from the program or give it "
    "another name. To move it here on purpose (Pulumi cannot import a dynamic resource), "
    "drop the other resource from its stack without deleting it (`pulumi state delete "
    "URN`), remove {key} from the live resource's metadata, then `pulumi up`. When the "
    "other is the old resource of a replace in this same `pulumi up` (resources that "
    "swap names), the next `pulumi up` deletes it first, as its allow_destroy allows, "
    "then makes this one.",
)
HELD_UPDATE = (
    "Another resource created or adopted it since this one did (it was deleted and made "
    "again under the name): this update would change that resource's.",
    "Remove this resource from the program (its delete leaves the live resource as it "
    "is) or drop it from the stack (`pulumi state delete URN`); the other resource keeps "
    "managing it.",
)


def refuse_held(
    spec: Spec,
    state: LiveState,
    claim: str | None,
    *,
    creating: bool,
    environment: Environment,
) -> None:
    """Refuse (raise) a create or an update of ``spec`` over a live resource holding a
    claim that is not ``claim`` (:func:`claimed_by_another`, the rule a delete keeps):
    another Pulumi resource created or adopted it, and no step of this one may write,
    migrate, replace or claim it. A create's ``claim`` is a fresh one, so any claim the
    live resource holds refuses it; the create of a replace is judged here too, at the
    diff (:func:`judge_replace`) and when Pulumi makes it. One holding no claim is
    adopted (or updated) as before; no ``claim`` (outputs of an older provider): as
    before; an observed resource (its lifecycle's or its environment's ``mode:
    observe``) is never written, so it may watch another resource's. The claim is named
    by its first characters, only when this provider could have written it (anyone may
    write one: never shown whole, nor any other text)."""
    raw = _raw(state, spec.ref)
    if spec.lifecycle.merged(environment.lifecycle).observe:
        return
    if not claimed_by_another(raw, claim):
        return
    found = claim_of(raw) or ""
    ours = len(found) == 32 and all(c in "0123456789abcdef" for c in found)
    shown = f"a claim starting {found[:8]}" if ours else "a claim this provider did not write"
    message = HELD.format(label=spec.ref.label, key=CLAIM_KEY, shown=shown)
    details = [line.format(key=CLAIM_KEY) for line in (HELD_CREATE if creating else HELD_UPDATE)]
    raise RefusedPlan(message, details=details, kind=RefusalKind.PREVENTED)


def _records(config: Mapping[str, Any], claim: str | None) -> bool:
    """Whether ``claim`` is to be written in ``config``'s metadata: where it holds none
    (a live resource holding another claim is refused before: :func:`refuse_held`)."""
    return claim is not None and claim_of(config) is None


def _with_claim(
    plan: Plan,
    spec: Spec,
    state: LiveState,
    claim: str,
    *,
    environment: Environment,
) -> Plan:
    """``plan`` with the step recording ``claim`` in the metadata of ``spec``'s resource
    (where :func:`_records` says so), a step like any other, for the policy rules and the
    verdict to judge (:func:`_judged`): the create or update of the resource sends it
    (an update naming the field), or, for a resource planned unchanged (adopted as
    declared, or one whose claim an older tool's update dropped), an update of its own
    (:func:`_claiming`). The lifecycle decides as it decides every write: an observed
    resource's steps are notes already (nothing sends it), and one observed unchanged is
    never written (its environment's lifecycle merged in, as the planner merges it)."""
    target = spec.ref

    def claimed(step: Any) -> Any:
        if step.ref != target or not isinstance(step, Create | Update):
            return step
        if not _records(step.config, claim):
            return step
        metadata = {**(step.config.get("metadata") or {}), CLAIM_KEY: claim}
        config = {**step.config, "metadata": metadata}
        if isinstance(step, Create):
            return dataclasses.replace(step, config=config)
        change = FieldChange(f"metadata.{CLAIM_KEY}", claim_of(step.config), claim)
        return dataclasses.replace(step, config=config, fields=(*step.fields, change))

    changes = tuple(claimed(step) for step in plan.changes)
    raw = _raw(state, target)
    unchanged = any(entry.ref == target for entry in plan.unchanged)
    observed = spec.lifecycle.merged(environment.lifecycle).observe
    if not unchanged or raw is None or observed or not _records(raw, claim):
        return dataclasses.replace(plan, changes=changes)
    stream = state.streams.get(target.stream_name) if target.is_child else None
    step = _claiming(spec, raw, plan.server, claim, stream)
    rest = tuple(entry for entry in plan.unchanged if entry.ref != target)
    return dataclasses.replace(plan, changes=(*changes, step), unchanged=rest)


def _raw(state: LiveState, target: Target) -> Mapping[str, Any] | None:
    """The target's config as the server sent it, None when it is not there."""
    if target.is_child:
        return state.consumers.get((target.stream_name, target.name))
    return state.streams.get(target.stream_name)


def _claiming(
    spec: Spec,
    raw: Mapping[str, Any],
    server: ServerInfo,
    claim: str,
    stream: Mapping[str, Any] | None,
) -> Update:
    """The update recording ``claim`` in the metadata of the live resource ``raw``: its
    config sent back as the server holds it (the server's own metadata keys left out),
    the claim its one changed field."""
    config = dict(raw)
    kept = (config.get("metadata") or {}).items()
    metadata = {k: v for k, v in kept if k not in SERVER_OWNED_METADATA}
    config["metadata"] = {**metadata, CLAIM_KEY: claim}
    return Update(
        ref=spec.ref,
        fields=(FieldChange(f"metadata.{CLAIM_KEY}", claim_of(raw), claim),),
        reasons=(CLAIM_REASON,),
        source=spec.source,
        config=config,
        live=live_config(spec.kind, raw, server, stream_config=stream),
    )
