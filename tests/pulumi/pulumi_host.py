"""Drive the real Pulumi dynamic provider host over gRPC, as the Pulumi engine does.

``python -u -m pulumi.dynamic`` prints its port; every request carries ``__provider``,
the provider object serialised with pulumi's own ``serialize_provider`` (dill + base64).
Properties travel as protobuf Structs, so numbers arrive as floats, exactly as from the
engine. The engine configures dynamic providers with ``acceptSecrets: false``, so it sends
secrets unwrapped; this harness does the same.
"""

from __future__ import annotations

import contextlib
import copy
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2
from pulumi.dynamic.dynamic import serialize_provider
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from pulumi_provider import JetStreamProvider

PROVIDER_KEY = "__provider"


def struct(props: Mapping[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(dict(props))
    return message


def as_dict(message: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as plain data, integral floats shown as ints for readable assertions."""
    return dict(_ints(json_format.MessageToDict(message)))


def _ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


@dataclass(frozen=True)
class Failure:
    property: str
    reason: str


class ProviderHost:
    """A running ``pulumi.dynamic`` provider host and a gRPC stub on it."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-u", "-m", "pulumi.dynamic"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline().decode().strip())
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = provider_pb2_grpc.ResourceProviderStub(self.channel)
        self.provider = serialize_provider(JetStreamProvider())

    def close(self) -> None:
        self.channel.close()
        self.process.terminate()
        self.process.wait(timeout=10)

    def configure(self, config: Mapping[str, str]) -> None:
        self.stub.Configure(provider_pb2.ConfigureRequest(args=struct(config)))

    def using(self, provider: JetStreamProvider) -> ProviderHost:
        """The same host, sending ``provider`` (e.g. one capturing a connection)."""
        view = copy.copy(self)
        view.provider = serialize_provider(provider)
        return view

    def _with_provider(self, props: Mapping[str, Any]) -> struct_pb2.Struct:
        return struct({**props, PROVIDER_KEY: self.provider})

    def check(
        self, news: Mapping[str, Any], olds: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], list[Failure]]:
        response = self.stub.Check(
            provider_pb2.CheckRequest(
                urn=_urn(news), olds=self._with_provider(olds or {}), news=self._with_provider(news)
            )
        )
        failures = [Failure(f.property, f.reason) for f in response.failures]
        return _strip(as_dict(response.inputs)), failures

    def diff(
        self, id_: str, olds: Mapping[str, Any], news: Mapping[str, Any]
    ) -> provider_pb2.DiffResponse:
        return self.stub.Diff(
            provider_pb2.DiffRequest(
                id=id_,
                urn=_urn(news),
                olds=self._with_provider(olds),
                news=self._with_provider(news),
            )
        )

    def create(self, inputs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        response = self.stub.Create(
            provider_pb2.CreateRequest(urn=_urn(inputs), properties=self._with_provider(inputs))
        )
        return response.id, _strip(as_dict(response.properties))

    def read(
        self, id_: str, outputs: Mapping[str, Any], inputs: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        response = self.stub.Read(
            provider_pb2.ReadRequest(
                id=id_,
                urn=_urn(inputs),
                properties=self._with_provider(outputs),
                inputs=self._with_provider(inputs),
            )
        )
        return response.id, _strip(as_dict(response.properties))

    def update(self, id_: str, olds: Mapping[str, Any], news: Mapping[str, Any]) -> dict[str, Any]:
        response = self.stub.Update(
            provider_pb2.UpdateRequest(
                id=id_,
                urn=_urn(news),
                olds=self._with_provider(olds),
                news=self._with_provider(news),
            )
        )
        return _strip(as_dict(response.properties))

    def delete(self, id_: str, outputs: Mapping[str, Any]) -> None:
        self.stub.Delete(
            provider_pb2.DeleteRequest(
                id=id_, urn=_urn(outputs), properties=self._with_provider(outputs)
            )
        )

    def apply(self, inputs: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """Check then Create, as ``pulumi up`` does for a new resource: (id, inputs, outputs)."""
        checked, failures = self.check(inputs)
        assert failures == [], failures
        id_, outputs = self.create(checked)
        return id_, checked, outputs


def _urn(props: Mapping[str, Any]) -> str:
    kind = props.get("kind", "Stream")
    return (
        f"urn:pulumi:test::jetstream::pulumi-python:dynamic/jetstream:{kind}::{props.get('name')}"
    )


def _strip(props: dict[str, Any]) -> dict[str, Any]:
    props.pop(PROVIDER_KEY, None)
    return props


# --- pulumi up, as the engine runs it for a resource in the state --------------------------


def up(
    host: ProviderHost,
    id_: str,
    outputs: Mapping[str, Any],
    inputs: Mapping[str, Any],
    *,
    meanwhile: Callable[[], object] | None = None,
    between: Callable[[], object] | None = None,
) -> tuple[str, dict[str, Any]]:
    """``pulumi up`` of one resource already in the state (``id_``, its ``outputs``) with
    new ``inputs``: Check, Diff, then as the diff says nothing, Update, or a replace:
    Delete (the old outputs) before Create when ``deleteBeforeReplace``, else Create,
    then Delete (the engine deletes the replaced resource after every create and
    update), as the engine does. Any error (a check failure as ``AssertionError``) stops
    it there, as it stops the engine. ``meanwhile`` runs after the diff, before any
    change (someone else's change between the preview and the up); ``between``, between
    a replace's two steps. Returns the id and outputs now in the state."""
    checked, failures = host.check(inputs, outputs)
    assert failures == [], failures
    diff = host.diff(id_, outputs, checked)
    if meanwhile is not None:
        meanwhile()
    if diff.changes != provider_pb2.DiffResponse.DIFF_SOME:
        return id_, dict(outputs)
    if not diff.replaces:
        return id_, host.update(id_, outputs, checked)
    if diff.deleteBeforeReplace:
        host.delete(id_, outputs)
        if between is not None:
            between()
        return host.create(checked)
    made = host.create(checked)
    if between is not None:
        between()
    host.delete(id_, outputs)
    return made


# --- secrets, as the engine handles them for a dynamic provider ----------------------------

#: The key and value that mark a secret in a property bag (Pulumi's wire format).
SECRET_SIG = "4dabf18193072939515e22adb298388d"
SECRET_VALUE = "1b47061264138c4ac30d75fd1eb44270"

#: What the state holds in place of a secret: its ciphertext, never the value.
CIPHERTEXT = "[ciphertext]"


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SECRET_SIG) == SECRET_VALUE


def unwrapped(value: Any) -> Any:
    """``value`` as the engine sends it to a provider that does not accept secrets (the
    dynamic provider host answers Configure with ``acceptSecrets: false``)."""
    if is_secret(value):
        return unwrapped(value["value"])
    if isinstance(value, dict):
        return {k: unwrapped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrapped(v) for v in value]
    return value


def stored(outputs: Mapping[str, Any], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The outputs as the engine writes them to the stack's state: the secret bit of each
    input kept on the output of the same name (the engine's ``annotateSecrets``, for
    providers that do not accept secrets), then every secret encrypted."""
    return dict(_encrypted(_annotated(dict(outputs), inputs)))


def _annotated(outs: dict[str, Any], ins: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in ins.items():
        if key not in outs:
            continue
        objects = [v for v in (outs[key], value) if isinstance(v, dict) and not is_secret(v)]
        if len(objects) == 2:  # both objects: the secret bit is kept field by field
            outs[key] = _annotated(dict(outs[key]), value)
            continue
        if not is_secret(outs[key]) and _holds_secret(value):
            outs[key] = {SECRET_SIG: SECRET_VALUE, "value": outs[key]}
    return outs


def _holds_secret(value: Any) -> bool:
    if is_secret(value):
        return True
    if isinstance(value, dict):
        return any(_holds_secret(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_secret(v) for v in value)
    return False


def _encrypted(value: Any) -> Any:
    if is_secret(value):
        return CIPHERTEXT
    if isinstance(value, dict):
        return {k: _encrypted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encrypted(v) for v in value]
    return value


# --- pulumi preview, as the CLI prints it ---------------------------------------------------

#: How ``pulumi preview`` marks each planned operation, and its word in the Plan column.
PREVIEW_OPS = {"create": "+ ", "update": "~ ", "replace": "+-"}


@dataclass(frozen=True)
class Existing:
    """A resource already in the stack's state: its id, last inputs and outputs."""

    id: str
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]


def preview(host: ProviderHost, stack: list[tuple[Mapping[str, Any], Existing | None]]) -> str:
    """What ``pulumi preview`` prints for ``stack`` (each resource's new inputs and its
    state, None when new), from the provider's own answers through the host: Check for
    every resource, Diff for those in the state; the ``[diff: ...]`` keys are the inputs
    that changed, as the engine shows them when a provider gives no detailed diff.
    Unchanged resources are counted, not listed (as without ``--show-sames``)."""
    rows: list[tuple[str, str, str, str, str]] = []
    errors: list[str] = []
    counts: dict[str, int] = {}
    for news, existing in stack:
        kind, name = str(news.get("kind", "Stream")), str(news.get("name"))
        checked, failures = host.check(news, existing.inputs if existing else None)
        if failures:
            errors += [f"    {_type(kind)} ({name}): {f.property}: {f.reason}" for f in failures]
            continue
        op, info = _planned(host, checked, existing)
        counts[op] = counts.get(op, 0) + 1
        if op != "same":
            rows.append((PREVIEW_OPS[op], _type(kind), name, op, info))
    return (
        _table(rows)
        + _summary(counts)
        + (("\nDiagnostics:\n" + "\n".join(errors) + "\n") if errors else "")
    )


def _planned(
    host: ProviderHost, checked: dict[str, Any], existing: Existing | None
) -> tuple[str, str]:
    if existing is None:
        return "create", ""
    diff = host.diff(existing.id, existing.outputs, checked)
    if diff.changes != provider_pb2.DiffResponse.DIFF_SOME:
        return "same", ""
    if diff.replaces:
        return "replace", "[diff: " + ", ".join(f"~{key}" for key in diff.replaces) + "]"
    return "update", _input_diff(existing.inputs, checked)


def _input_diff(olds: Mapping[str, Any], news: Mapping[str, Any]) -> str:
    keys = sorted((set(olds) | set(news)) - {PROVIDER_KEY})
    marks = [
        ("+" if key not in olds else "-" if key not in news else "~") + key
        for key in keys
        if olds.get(key) != news.get(key)
    ]
    return f"[diff: {', '.join(marks)}]" if marks else ""


def _type(kind: str) -> str:
    return f"pulumi-python:dynamic/jetstream:{kind}"


def _table(rows: list[tuple[str, str, str, str, str]]) -> str:
    head = ("  ", "Type", "Name", "Plan", "Info")
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(4)]
    lines = [
        " ".join(cell.ljust(widths[i]) if i < 4 else cell for i, cell in enumerate(row))
        for row in [head, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _summary(counts: Mapping[str, int]) -> str:
    lines = ["", "Resources:"]
    lines += [f"    {PREVIEW_OPS[op]}{counts[op]} to {op}" for op in PREVIEW_OPS if counts.get(op)]
    changes = sum(counts.get(op, 0) for op in PREVIEW_OPS)
    same = counts.get("same", 0)
    lines.append(f"    {changes} changes" + (f". {same} unchanged" if same else ""))
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def configured(config: Mapping[str, str]) -> Iterator[ProviderHost]:
    """A provider host of its own, configured with the stack config ``config``, closed
    after."""
    provider_host = ProviderHost()
    try:
        provider_host.configure(dict(config))
        yield provider_host
    finally:
        provider_host.close()
