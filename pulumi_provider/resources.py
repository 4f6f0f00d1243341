"""Pulumi resources ``Stream``, ``Consumer``, ``KeyValue`` and ``ObjectStore``.

Inputs are the spec fields, with the same names and units as a spec file (``max_age="1h"``
or integer nanoseconds), given as a ``spec`` mapping, as keyword arguments, or both::

    orders = Stream("orders", subjects=["ORDERS.*"], max_age="7d")
    Consumer("new", stream="ORDERS", filter_subject="ORDERS.new", ack_policy="explicit",
             opts=pulumi.ResourceOptions(depends_on=[orders]))

``name`` defaults to the resource name. ``connection`` (servers, creds, nkey, user,
password, token, tls_ca, tls_cert, tls_key, context, domain) is a secret input; without it
the stack config (``jetstream:servers``, ...) and then ``NATS_URL`` are used.
``allow_destroy=True`` lets Pulumi delete (or replace) a stream or bucket holding messages.
``migrate=True`` changes a stream's or bucket's immutable fields by migrating its messages
(an update in the preview, never a replace; docs/migrate.md).
``policy=["policies/starter.yaml"]`` names policy files (docs/policy.md): a deny rule that
does not hold refuses create, update and delete before anything changes.
``project_environment`` is the project environment (name, lifecycle) ``JetStreamSpecs``
reads from a project file for its children.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pulumi
import pulumi.dynamic

from pulumi_provider.inputs import SECRET_INPUTS
from pulumi_provider.operations import NO_ENVIRONMENT, Environment
from pulumi_provider.provider import JetStreamProvider

#: Outputs every resource exposes besides its inputs.
_COMMON_OUTPUTS = ("live_config", "server")


class JetStreamResource(pulumi.dynamic.Resource):
    """A JetStream resource managed by :class:`JetStreamProvider`; its ``kind`` is fixed."""

    kind: ClassVar[str]
    _extra_outputs: ClassVar[tuple[str, ...]] = ()

    live_config: pulumi.Output[dict[str, Any]]
    """The config the server holds (for buckets: their ``KV_``/``OBJ_`` stream's)."""
    server: pulumi.Output[dict[str, Any]]
    """Version and API level of the server the resource was last read from."""
    connection: pulumi.Output[dict[str, Any]]
    """The connection input without its credentials (secret)."""

    def __init__(
        self,
        resource_name: str,
        spec: Mapping[str, Any] | None = None,
        *,
        connection: pulumi.Input[Mapping[str, Any]] | None = None,
        allow_destroy: pulumi.Input[bool] | None = None,
        migrate: pulumi.Input[bool] | None = None,
        policy: Sequence[str] = (),
        opts: pulumi.ResourceOptions | None = None,
        project_environment: Environment = NO_ENVIRONMENT,
        **fields: Any,
    ) -> None:
        props = resource_inputs(self.kind, resource_name, spec, fields)
        if allow_destroy is not None:
            props["allow_destroy"] = allow_destroy
        if migrate is not None:
            props["migrate"] = migrate
        followed = [r for r in _depends_on(opts) if isinstance(r, JetStreamResource)]
        names: Awaitable[list[str] | None] = secret_names(dict(props), followed)
        self._secret_names: pulumi.Output[list[str] | None] = pulumi.Output.from_input(names)
        props[SECRET_INPUTS] = self._secret_names
        props["connection"] = None if connection is None else pulumi.Output.secret(connection)
        for name in (*_COMMON_OUTPUTS, *self._extra_outputs):
            props[name] = None
        secret = pulumi.ResourceOptions(additional_secret_outputs=["connection"])
        super().__init__(
            JetStreamProvider(
                connection, [str(Path(p).resolve()) for p in policy], project_environment
            ),
            resource_name,
            props,
            pulumi.ResourceOptions.merge(secret, opts),
        )


async def secret_names(
    props: Mapping[str, Any], followed: Sequence[JetStreamResource] = ()
) -> list[str] | None:
    """The inputs holding a Pulumi secret anywhere inside (``Output.secret``, a secret
    config value, a mapping holding one), by name, and ``stream_config`` when the
    consumer's stream, among the resources it depends on (``followed``), has one (the
    stream's config is that output); None when there is none (the input is then left
    out, so a stack without secrets keeps its state as it was). The provider host gets
    every secret unwrapped: this list is how it knows which outputs to return as
    secrets."""
    names = [name for name, value in props.items() if await _is_secret(value)]
    if props.get("kind") == "Consumer":
        streams = [r for r in followed if type(r).kind == "Stream"]  # r.kind: an output
        if any([await stream._secret_names.future() for stream in streams]):
            names.append("stream_config")
    return sorted(names) or None


def _depends_on(opts: pulumi.ResourceOptions | None) -> list[Any]:
    """The resources ``opts`` names in ``depends_on`` (those given as resources)."""
    found = opts.depends_on if opts is not None else None
    if found is None:
        return []
    return list(found) if isinstance(found, (list, tuple)) else [found]


async def _is_secret(value: Any) -> bool:
    if value is None:
        return False
    return await pulumi.Output.from_input(value).is_secret()


def resource_inputs(
    kind: str, resource_name: str, spec: Mapping[str, Any] | None, fields: Mapping[str, Any]
) -> dict[str, Any]:
    """The inputs of one resource: spec mapping, then keyword fields, ``kind`` fixed."""
    props: dict[str, Any] = {**(spec or {}), **fields}
    declared = props.get("kind", kind)
    if declared != kind:
        raise ValueError(f"{resource_name}: a {kind} resource cannot declare kind {declared!r}")
    props["kind"] = kind
    if "name" not in props and "durable_name" not in props:
        props["name"] = resource_name
    return props


class Stream(JetStreamResource, module="jetstream", name="Stream"):
    """A JetStream stream."""

    kind = "Stream"


class Consumer(JetStreamResource, module="jetstream", name="Consumer"):
    """A durable consumer of ``stream`` (the stream's name); ``name`` is the durable name."""

    kind = "Consumer"
    _extra_outputs = ("stream_config",)

    stream_config: pulumi.Output[dict[str, Any]]
    """The config of the consumer's stream when it was last read."""


class KeyValue(JetStreamResource, module="jetstream", name="KeyValue"):
    """A KeyValue bucket (the stream ``KV_<name>``), with the client libraries' fields."""

    kind = "KeyValue"
    _extra_outputs = ("bucket",)

    bucket: pulumi.Output[dict[str, Any]]
    """The live bucket in the client libraries' fields (history, ttl, ...)."""


class ObjectStore(JetStreamResource, module="jetstream", name="ObjectStore"):
    """An ObjectStore bucket (the stream ``OBJ_<name>``)."""

    kind = "ObjectStore"
    _extra_outputs = ("bucket",)

    bucket: pulumi.Output[dict[str, Any]]
    """The live bucket in the client libraries' fields."""


RESOURCE_CLASSES: Mapping[str, type[JetStreamResource]] = {
    cls.kind: cls for cls in (Stream, Consumer, KeyValue, ObjectStore)
}
