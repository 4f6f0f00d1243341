"""``JetStreamProvider``: one Pulumi dynamic provider for every kind, chosen by ``kind``.

Constraints of dynamic providers this class respects:

- It is pickled (with dill, by reference to this importable module) into every resource's
  ``__provider`` property and unpickled in the provider host, so it holds no connection:
  each method opens one with ``asyncio.run`` and closes it before returning.
- Methods are synchronous; numbers arrive as floats (turned back into ints here).
- Create, update and delete change the server under its apply lock (the lock
  ``reconcile apply`` and a restore take), waiting ``jetstream:lockTimeout`` for another
  run's. The host runs a program's resources in threads: they take it one at a time.
- Credentials never reach outputs: outputs keep the spec fields, the server's live config
  and the connection without its secret fields. Read and Delete only see outputs, so they
  take credentials from the connection captured in the provider object (the resources of
  this package capture it; ``__provider`` is always stored as a secret), the stack config
  (``jetstream:*``) or ``NATS_URL``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

from pulumi import Output
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    ConfigureRequest,
    CreateResult,
    DiffResult,
    ReadResult,
    ResourceProvider,
    UpdateResult,
)
from pulumi.runtime import rpc

from pulumi_provider import operations
from pulumi_provider.changes import compare, server_facts
from pulumi_provider.connection import (
    connection_problems,
    lock_timeout,
    public_connection,
    resolve_connection,
    stack_connection,
    stack_lock_timeout,
    unknown_connection_fields,
)
from pulumi_provider.host_errors import plain_errors_in_host
from pulumi_provider.inputs import (
    CLAIM,
    CONTROL_FIELDS,
    OUTPUT_FIELDS,
    SECRET_INPUTS,
    checked_inputs,
    failure_reason,
    has_unknowns,
    hide,
    kind_problem,
    plain,
    secret_inputs,
    secret_values,
    spec_body,
    spec_failures,
    to_spec,
)
from pulumi_provider.observer import PulumiObserver
from pulumi_provider.operations import Live, Target
from reconciler.door_words import spoken
from reconciler.errors import ReconcileError, SpecError
from reconciler.execution.stages import Observer
from reconciler.identity import Kind
from reconciler.jetstream import JetStreamClient, open_client
from reconciler.model.buckets import bucket_config
from reconciler.specs.lifecycle import Lifecycle
from reconciler.specs.spec import Spec

T = TypeVar("T")

#: Create, update and delete of this host's resources, one at a time: each holds the
#: server's apply lock, and threads of one host waiting on each other's lease would each
#: poll it (and spend their wait) instead of taking it as soon as it is free.
_CHANGING = threading.Lock()


class JetStreamProvider(ResourceProvider):
    """Manages streams, consumers, KeyValue and ObjectStore buckets on a NATS server."""

    def __init__(
        self,
        connection: Any = None,
        policies: Sequence[str] = (),
        environment: operations.Environment = operations.NO_ENVIRONMENT,
    ) -> None:
        """``connection``: a mapping (values may be pulumi Outputs, captured when pickled);
        ``policies``: policy files (docs/policy.md) create, update and delete keep;
        ``environment``: the project environment of the resource (its name and lifecycle,
        as ``JetStreamSpecs`` reads them from the project file)."""
        super().__init__()
        self.connection = connection  # captured for Read/Delete (outputs hold no secrets)
        self.policies = tuple(str(p) for p in policies)
        # plain data in the pickle (its name and its lifecycle's settings); none: none
        self.environment = (
            None
            if environment == operations.NO_ENVIRONMENT
            else {"name": environment.name, **environment.lifecycle.to_json()}
        )
        self._stack: dict[str, Any] = {}
        self._lock_timeout: str | None = None

    def configure(self, req: ConfigureRequest) -> None:
        plain_errors_in_host()  # a refusal reads as its reason, not a traceback
        self._stack = stack_connection(req.config)
        self._lock_timeout = stack_lock_timeout(req.config)

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        inputs = checked_inputs(news)
        failures = [
            CheckFailure(path, failure_reason(path, reason, news))
            for path, reason in input_problems(news)
        ]
        return CheckResult(inputs, failures)

    def diff(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        with secrets_hidden(news), spoken(operations.WORDS):
            change = compare(olds, news, self._policies, self._environment)
        first = None
        if change.replaces:  # Pulumi replaces it itself: judged now, the order chosen
            first = _not_known_yet(news) or self._judge_replace(id_, olds, news)
        return DiffResult(
            changes=change.changes,
            replaces=change.replaces,
            delete_before_replace=first,
        )

    def _judge_replace(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> bool:
        """Whether Pulumi must delete the old resource before it creates the new one
        (``operations.judge_replace``); a replace the server would refuse is refused
        now, before Pulumi deletes or creates anything. The create is judged with the
        new inputs' allowances, the delete with the old outputs' (Pulumi's delete gets
        them: its claim too, so a live resource another resource holds now is judged as
        the delete leaves it)."""
        spec = to_spec(news)
        old = target_of(id_, olds)
        return self._run(
            news,
            lambda client, observer: operations.judge_replace(
                client,
                spec,
                old,
                allow_data_loss=bool(plain(news.get("allow_destroy", False))),
                migrate=bool(plain(news.get("migrate", False))),
                allow_destroy=bool(plain(olds.get("allow_destroy", False))),
                declared=declared_spec(olds),
                claim=claim_in(olds),
                observer=observer,
                policies=self._policies,
                environment=self._environment,
            ),
        )

    def create(self, props: dict[str, Any]) -> CreateResult:
        spec = to_spec(props)
        # a create adopting an existing resource is an update of it: the same allowances
        claim = operations.new_claim()  # a fresh one: this resource creates or adopts it
        live = self._converge(spec, props, claim, creating=True)
        return CreateResult(spec.ref.path, outputs(props, live, _recorded(claim, live)))

    def _converge(
        self, spec: Spec, props: dict[str, Any], claim: str | None, *, creating: bool = False
    ) -> Live:
        """The live resource once ``spec`` is applied with ``props``' allowances
        (``allow_destroy``, ``migrate``), under the lock, through the apply's stages, and
        its ``claim`` recorded (``operations.converge``)."""
        allow = bool(plain(props.get("allow_destroy", False)))
        migrate = bool(plain(props.get("migrate", False)))
        return self._run(
            props,
            lambda client, observer: operations.converge(
                client,
                spec,
                allow_data_loss=allow,
                migrate=migrate,
                observer=observer,
                policies=self._policies,
                lock_timeout=self._lock_wait(),
                environment=self._environment,
                creating=creating,
                claim=claim,
            ),
            changes=True,
        )

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        target = target_of(id_, props)
        live = self._run(props, lambda client, _observer: operations.observe(client, target))
        if live is None:  # gone: Pulumi drops it from the state on refresh
            return ReadResult("", {})
        return ReadResult(id_, outputs(props, live, claim_in(props)))  # the claim kept

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        claim = claim_in(olds)  # kept: this resource still holds what it created
        live = self._converge(to_spec(news), news, claim)
        return UpdateResult(outputs(news, live, claim))

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        target = target_of(id_, props)
        allow = bool(plain(props.get("allow_destroy", False)))
        declared = declared_spec(props)
        claim = claim_in(props)
        self._run(
            props,
            lambda client, observer: operations.destroy(
                client,
                target,
                allow_destroy=allow,
                observer=observer,
                policies=self._policies,
                lock_timeout=self._lock_wait(),
                declared=declared,
                environment=self._environment,
                claim=claim,
            ),
            changes=True,
        )

    def _run(
        self,
        props: Mapping[str, Any],
        work: Callable[[JetStreamClient, Observer], Awaitable[T]],
        *,
        changes: bool = False,
    ) -> T:
        """Open a connection for this one call, do the work, close it. ``changes``: the
        work changes the server (one at a time in this host, :data:`_CHANGING`). What
        it says (notices, steps, its error) never shows an input that was a secret."""
        options = resolve_connection(plain(props.get("connection")), self._captured(), self._stack)
        observer = PulumiObserver(secret_values(props))

        async def session() -> T:
            async with open_client(options, on_notice=observer.notice) as client:
                return await work(client, observer)

        with secrets_hidden(props), spoken(operations.WORDS):  # its messages in Pulumi's words
            if not changes:
                return asyncio.run(session())
            with _CHANGING:
                return asyncio.run(session())

    def _lock_wait(self) -> float:
        """Seconds a change waits for another run's apply lock (``jetstream:lockTimeout``,
        else ``RECONCILE_LOCK_TIMEOUT``, else the CLI's default)."""
        written = getattr(self, "_lock_timeout", None)  # pickled before it existed: None
        return lock_timeout(written, operations.LOCK_TIMEOUT)

    @property
    def _policies(self) -> tuple[str, ...]:
        """The policy files (an object pickled before policies existed has none)."""
        return tuple(getattr(self, "policies", ()))

    @property
    def _environment(self) -> operations.Environment:
        """The resource's project environment (an object pickled before environments
        existed has none)."""
        written = getattr(self, "environment", None)
        if not written:
            return operations.NO_ENVIRONMENT
        lifecycle = Lifecycle.from_json(written)
        return operations.Environment(written.get("name"), lifecycle)

    def _captured(self) -> dict[str, Any] | None:
        return _mapping(_resolved(self.connection))


def input_problems(news: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every problem with a resource's inputs, as (property, reason)."""
    problem = kind_problem(news)
    if problem:
        return [("kind", problem)]
    connection = _mapping(news.get("connection"))
    found = [
        ("connection", f"unknown connection field {name!r}")
        for name in unknown_connection_fields(connection)
    ]
    if not has_unknowns(connection):  # preview: a timeout not known yet is checked later
        found += [("connection", why) for why in connection_problems(connection)]
    for flag in ("allow_destroy", "migrate"):
        if not isinstance(plain(news.get(flag, False)), bool):
            found.append((flag, "must be true or false"))
    if has_unknowns(spec_body(news)):  # preview with values not known yet
        return found
    try:
        to_spec(news)
    except SpecError as err:
        found.extend(spec_failures(err))
    return found


def _not_known_yet(news: Mapping[str, Any]) -> bool:
    """Whether an input a replace is judged with is not known yet (a preview, with a
    value from a resource not made yet: the spec, or the connection, whose unknown
    server the judge would try to reach). Such a replace is not judged: the diff of
    ``pulumi up`` gets every value and judges it."""
    judged = [spec_body(news), *(news.get(k) for k in ("connection", "allow_destroy", "migrate"))]
    return has_unknowns(judged)


def declared_spec(props: Mapping[str, Any]) -> Spec | None:
    """The spec a resource's outputs were declared with, when its ``lifecycle`` (which
    governs its delete) needs it."""
    return to_spec(props) if plain(props.get("lifecycle")) else None


def claim_in(props: Mapping[str, Any]) -> str | None:
    """The claim a resource's outputs recorded (:data:`CLAIM`), None when they hold none
    (written by an older provider, or a resource never claimed)."""
    claim = plain(props.get(CLAIM))
    return claim if isinstance(claim, str) and claim else None


def _recorded(claim: str, live: Live) -> str | None:
    """``claim`` when the live resource holds it (not, say, in ``mode: observe``)."""
    return claim if operations.claim_of(live.config) == claim else None


def outputs(props: Mapping[str, Any], live: Live, claim: str | None = None) -> dict[str, Any]:
    """Outputs: the spec fields as declared, the live config, the resource's ``claim``
    (when it has one), and no credentials."""
    outs = {k: plain(v) for k, v in props.items() if k not in CONTROL_FIELDS | OUTPUT_FIELDS}
    outs["allow_destroy"] = bool(plain(props.get("allow_destroy", False)))
    outs["migrate"] = bool(plain(props.get("migrate", False)))
    connection = public_connection(_mapping(props.get("connection")))
    if connection:
        outs["connection"] = connection
    outs["live_config"] = dict(live.config)
    outs["server"] = server_facts(live.server)
    if live.stream_config is not None:
        outs["stream_config"] = dict(live.stream_config)
    kind = outs.get("kind")
    if kind in ("KeyValue", "ObjectStore"):
        outs["bucket"] = bucket_config(kind, str(outs.get("name")), live.config)
    if claim is not None:
        outs[CLAIM] = claim
    return secret_outputs(outs, secret_inputs(props))


#: The outputs that repeat the inputs' values (the server's configs, the bucket).
_ECHOES = ("live_config", "stream_config", "bucket")


def secret_outputs(outs: dict[str, Any], secrets: tuple[str, ...]) -> dict[str, Any]:
    """``outs`` with every output that holds a secret input's value returned as a secret:
    the inputs named in ``secrets`` and the configs that repeat them. The engine stores
    a secret encrypted; a stack with no secret input keeps its outputs as they were."""
    if not secrets:
        return outs
    for name in (*secrets, *_ECHOES):
        if name in outs and name != "connection":  # connection: secret already, and public
            outs[name] = rpc.wrap_rpc_secret(outs[name])
    outs[SECRET_INPUTS] = list(secrets)
    return outs


@contextlib.contextmanager
def secrets_hidden(props: Mapping[str, Any]) -> Iterator[None]:
    """An error raised inside, with the inputs' secret values (:func:`secret_values`)
    hidden from its message. This tool's error stays one (one line in ``pulumi up``);
    another keeps its type's name and loses the chain that would show the value."""
    secrets = secret_values(props)
    try:
        yield
    except Exception as err:
        text = str(err)
        if not any(secret in text for secret in secrets):
            raise
        if isinstance(err, ReconcileError):
            raise ReconcileError(hide(text, secrets)) from None
        raise RuntimeError(f"{type(err).__name__}: {hide(text, secrets)}") from None


def target_of(id_: str, props: Mapping[str, Any]) -> Target:
    """The resource's identity from its properties, or from its id (``STREAM/NAME``)."""
    kind = str(plain(props.get("kind", "Stream")))
    name = plain(props.get("name"))
    stream = plain(props.get("stream"))
    if name is None:
        stream, _, name = id_.rpartition("/") if kind == "Consumer" else (None, "", id_)
    return Target(cast(Kind, kind), str(name), str(stream) if stream else None)


def _resolved(value: Any) -> Any:
    """A captured value with the pulumi Outputs inside it replaced by their values."""
    if isinstance(value, Output):
        return _resolved(value.get())  # restored by the host: get() returns the value
    if isinstance(value, Mapping):
        return {k: _resolved(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_resolved(v) for v in value]
    return value


def _mapping(value: Any) -> dict[str, Any] | None:
    value = plain(value)
    return value if isinstance(value, dict) else None
