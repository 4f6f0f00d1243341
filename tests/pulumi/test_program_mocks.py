"""A Pulumi program with ``pulumi.runtime.set_mocks``: the resource graph the engine gets.

The mock monitor records every RegisterResource request (type, name, parent,
dependencies, secret outputs, inputs) exactly as the Pulumi engine would receive it.
"""

from __future__ import annotations

import asyncio
import json
import runpy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import nats
import pulumi
import pytest
from google.protobuf import json_format
from pulumi.runtime.mocks import MockCallArgs, MockMonitor, MockResourceArgs, Mocks
from pulumi_host import CIPHERTEXT, ProviderHost, configured, stored, unwrapped
from servers import publish as _publish
from servers import run

from pulumi_provider import Consumer, JetStreamSpecs, KeyValue, Stream
from reconciler.errors import SpecError

SECRET_SIG = "4dabf18193072939515e22adb298388d"


async def _jetstream(url: str, subject: str) -> dict[str, Any]:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        return dict(json.loads((await nc.request(f"$JS.API.{subject}", b"", timeout=5)).data))
    finally:
        await nc.close()


async def _stream_names(url: str) -> list[str]:
    return list((await _jetstream(url, "STREAM.NAMES")).get("streams") or [])


async def _messages(url: str, stream: str) -> int:
    return int((await _jetstream(url, f"STREAM.INFO.{stream}"))["state"]["messages"])


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pulumi"

SHOP = """\
kind: Stream
name: ORDERS
subjects: ["ORDERS.*"]
max_age: 7d
---
kind: Consumer
stream: ORDERS
name: NEW
ack_policy: explicit
filter_subject: ORDERS.new
---
kind: Consumer
stream: ORDERS
name: DISPATCH
ack_policy: explicit
filter_subject: ORDERS.dispatch
"""

ELSEWHERE = """\
kind: Stream
name: AUDIT
external: true
---
kind: Consumer
stream: AUDIT
name: READER
ack_policy: explicit
---
kind: KeyValue
name: settings
history: 5
"""


@dataclass(frozen=True)
class Registration:
    type: str
    name: str
    urn: str
    parent: str
    dependencies: list[str]
    secret_outputs: list[str]
    replace_with: list[str]
    inputs: dict[str, Any]


class RecordingMonitor(MockMonitor):
    def __init__(self, mocks: Mocks) -> None:
        super().__init__(mocks)
        self.registrations: list[Registration] = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        self.registrations.append(
            Registration(
                type=request.type,
                name=request.name,
                urn=response.urn,
                parent=request.parent,
                dependencies=list(request.dependencies),
                secret_outputs=list(request.additionalSecretOutputs),
                replace_with=list(request.replace_with),
                inputs=json_format.MessageToDict(request.object),
            )
        )
        return response


class EchoMocks(Mocks):
    def new_resource(self, args: MockResourceArgs) -> tuple[str, dict[str, Any]]:
        return f"{args.name}-id", {**args.inputs, "live_config": {}}

    def call(self, args: MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


@pytest.fixture
def monitor() -> Iterator[RecordingMonitor]:
    # Pulumi's mocks use the thread's current event loop; earlier tests' asyncio.run()
    # leaves none set, so give each program a fresh one.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    recording = RecordingMonitor(EchoMocks())
    pulumi.runtime.set_mocks(EchoMocks(), preview=False, monitor=recording)
    yield recording
    asyncio.set_event_loop(None)
    loop.close()


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    (tmp_path / "shop.yaml").write_text(SHOP)
    (tmp_path / "elsewhere.yaml").write_text(ELSEWHERE)
    return tmp_path


def by_name(monitor: RecordingMonitor) -> dict[str, Registration]:
    return {r.name: r for r in monitor.registrations}


@pulumi.runtime.test
def test_component_declares_one_resource_per_document(
    monitor: RecordingMonitor, specs: Path
) -> pulumi.Output[Any]:
    component = JetStreamSpecs("shop", path=specs)

    def check(_: Any) -> None:
        registered = by_name(monitor)
        assert set(component.resources) == {
            "Stream/ORDERS",
            "Consumer/ORDERS/NEW",
            "Consumer/ORDERS/DISPATCH",
            "Consumer/AUDIT/READER",
            "KeyValue/settings",
        }
        assert registered["shop"].type == "jetstream:index:JetStreamSpecs"
        assert registered["shop/Stream/ORDERS"].type == "pulumi-python:dynamic/jetstream:Stream"
        assert registered["shop/KeyValue/settings"].type.endswith("jetstream:KeyValue")
        assert "shop/Stream/AUDIT" not in registered  # external: managed elsewhere
        children = [r for r in monitor.registrations if r.name.startswith("shop/")]
        assert all(r.parent == registered["shop"].urn for r in children)

    return pulumi.Output.all(*(r.urn for r in component.resources.values())).apply(check)


@pulumi.runtime.test
def test_consumers_depend_on_and_are_replaced_with_their_stream(
    monitor: RecordingMonitor, specs: Path
) -> pulumi.Output[Any]:
    component = JetStreamSpecs("shop", path=specs)

    def check(_: Any) -> None:
        registered = by_name(monitor)
        orders = registered["shop/Stream/ORDERS"].urn
        assert orders in registered["shop/Consumer/ORDERS/NEW"].dependencies
        assert orders in registered["shop/Consumer/ORDERS/DISPATCH"].dependencies
        # the server deletes a stream's consumers with it: replaced together
        assert registered["shop/Consumer/ORDERS/NEW"].replace_with == [orders]
        assert registered["shop/Consumer/AUDIT/READER"].dependencies == []
        assert registered["shop/Stream/ORDERS"].dependencies == []

    return pulumi.Output.all(*(r.urn for r in component.resources.values())).apply(check)


@pulumi.runtime.test
def test_documents_keep_their_fields_and_human_units(
    monitor: RecordingMonitor, specs: Path
) -> pulumi.Output[Any]:
    component = JetStreamSpecs("shop", path=specs)

    def check(_: Any) -> None:
        inputs = by_name(monitor)["shop/Stream/ORDERS"].inputs
        assert inputs["kind"] == "Stream"
        assert inputs["max_age"] == "7d"
        assert inputs["subjects"] == ["ORDERS.*"]
        consumer = by_name(monitor)["shop/Consumer/ORDERS/NEW"].inputs
        assert (consumer["stream"], consumer["name"]) == ("ORDERS", "NEW")

    return pulumi.Output.all(*(r.urn for r in component.resources.values())).apply(check)


@pulumi.runtime.test
def test_connection_credentials_are_secret(monitor: RecordingMonitor) -> pulumi.Output[Any]:
    connection = {"servers": "nats://127.0.0.1:4222", "user": "app", "password": "s3cret-pw"}
    stream = Stream("orders", subjects=["ORDERS.*"], connection=connection)

    def check(args: list[Any]) -> None:
        registered = by_name(monitor)["orders"]
        assert args[1] is True  # the connection output is secret in the program
        assert "connection" in registered.secret_outputs
        assert registered.inputs["connection"][SECRET_SIG]  # sent to the engine as a secret
        assert registered.inputs["__provider"][SECRET_SIG]  # the pickled provider too

    secret = pulumi.Output.from_input(stream.connection.is_secret())  # type: ignore[attr-defined]
    return pulumi.Output.all(stream.urn, secret).apply(check)


@pulumi.runtime.test
def test_resources_from_code_fix_their_kind_and_default_the_name(
    monitor: RecordingMonitor,
) -> pulumi.Output[Any]:
    orders = Stream("ORDERS", {"subjects": ["ORDERS.*"]}, max_age="1h")
    new = Consumer(
        "new",
        stream="ORDERS",
        ack_policy="explicit",
        opts=pulumi.ResourceOptions(depends_on=[orders]),
    )
    bucket = KeyValue("settings", history=3)

    def check(_: Any) -> None:
        registered = by_name(monitor)
        assert registered["ORDERS"].inputs["name"] == "ORDERS"
        assert registered["ORDERS"].inputs["max_age"] == "1h"
        assert registered["new"].inputs["kind"] == "Consumer"
        assert registered["new"].dependencies == [registered["ORDERS"].urn]
        assert registered["settings"].inputs["kind"] == "KeyValue"

    return pulumi.Output.all(orders.urn, new.urn, bucket.urn).apply(check)


@pulumi.runtime.test
def test_the_example_program_declares_the_shop_folder_and_its_own_resources(
    monitor: RecordingMonitor,
) -> pulumi.Output[Any]:
    namespace = runpy.run_path(str(EXAMPLE / "__main__.py"))

    def check(_: Any) -> None:
        registered = by_name(monitor)
        assert {"EVENTS", "AUDIT", "settings", "assets"} <= set(registered)
        assert registered["AUDIT"].dependencies == [registered["EVENTS"].urn]
        orders = registered["shop/Stream/ORDERS"].urn
        assert orders in registered["shop/Consumer/ORDERS/NEW"].dependencies

    # Wait for every resource the check reads, not only some: a registration still in
    # flight when the check runs made this test fail now and then.
    declared = [v.urn for v in namespace.values() if isinstance(v, pulumi.Resource)]
    assert len(declared) >= 4  # EVENTS, AUDIT, settings, assets (and the shop folder)
    urns = [r.urn for r in namespace["shop"].resources.values()]
    return pulumi.Output.all(*declared, *urns).apply(check)


def test_a_resource_cannot_declare_another_kind() -> None:
    with pytest.raises(ValueError, match="cannot declare kind"):
        Stream("x", {"kind": "Consumer"})


def test_an_invalid_spec_folder_fails_the_program_with_file_and_line(
    monitor: RecordingMonitor, tmp_path: Path
) -> None:
    (tmp_path / "bad.yaml").write_text("kind: Stream\nname: BAD\nmax_age: 10 parsecs\n")
    with pytest.raises(SpecError) as failed:
        JetStreamSpecs("bad", path=tmp_path)
    assert "bad.yaml:3" in str(failed.value)


@pytest.mark.integration
def test_a_secret_connection_captured_by_the_program_reaches_the_provider_host(
    monitor: RecordingMonitor, server_factory: Any
) -> None:
    secured = server_factory(users=[{"user": "app", "password": "s3cret-pw"}])
    password = pulumi.Output.secret("s3cret-pw")

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        connection = {"servers": secured.url, "user": "app", "password": password}
        return Stream("CAPTURED", subjects=["CAPTURED.>"], connection=connection).urn

    program()
    provider = by_name(monitor)["CAPTURED"].inputs["__provider"]
    host = ProviderHost()
    try:
        host.provider = provider[SECRET_SIG] and provider["value"]
        # No connection input and no stack config: only the captured connection can work.
        id_, _, outputs = host.apply({"kind": "Stream", "name": "CAPTURED"})
        assert "s3cret-pw" not in json.dumps(outputs)
        host.delete(id_, outputs)
    finally:
        host.close()


# --- secret inputs: never in the state in plain text ----------------------------------------

PLAIN_SECRETS = ("s3cr3t-description", "s3cr3t-token", "s3cr3t-bucket")


@pytest.mark.integration
def test_secret_inputs_are_in_the_state_only_encrypted(
    monitor: RecordingMonitor, clean_server: Any
) -> None:
    """A field passed as a secret (a keyword, inside a mapping, in a ``spec``) reaches the
    provider host unwrapped; every output holding it (the echoed input, ``live_config``,
    a bucket's ``bucket``, the stream's config in its consumer's ``stream_config``) is
    returned as a secret, so the state the engine writes holds only its ciphertext."""

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        stream = Stream(
            "SECRETS",
            subjects=["SECRETS.>"],
            description=pulumi.Output.secret(PLAIN_SECRETS[0]),
            metadata={"team": "shop", "token": pulumi.Output.secret(PLAIN_SECRETS[1])},
        )
        reader = Consumer(
            "READER",
            stream="SECRETS",
            ack_policy="explicit",
            opts=pulumi.ResourceOptions(depends_on=[stream]),
        )
        bucket = KeyValue(
            "vault", {"history": 2, "description": pulumi.Output.secret(PLAIN_SECRETS[2])}
        )
        plain = Stream("PLAIN", subjects=["PLAIN.>"], description="nothing to hide")
        return pulumi.Output.all(stream.urn, reader.urn, bucket.urn, plain.urn)

    program()
    registered = by_name(monitor)
    with configured({"jetstream:servers": clean_server.url}) as host:
        for name in ("SECRETS", "READER", "vault"):
            inputs = dict(registered[name].inputs)
            host.provider = unwrapped(inputs.pop("__provider"))
            checked, failures = host.check(unwrapped(inputs))
            assert failures == []
            id_, outputs = host.create(checked)
            state = json.dumps(stored(outputs, inputs))
            assert not [s for s in PLAIN_SECRETS if s in state], (name, state)
            assert "live_config" in state  # the output is there, as ciphertext
            _, refreshed = host.read(id_, unwrapped(outputs), checked)  # pulumi refresh
            state = json.dumps(stored(refreshed, inputs))
            assert not [s for s in PLAIN_SECRETS if s in state], (name, state)
        # a stack without secrets keeps its outputs as they were: nothing secret
        inputs = dict(registered["PLAIN"].inputs)
        assert "secret_inputs" not in inputs
        host.provider = unwrapped(inputs.pop("__provider"))
        _, outputs = host.create(host.check(inputs)[0])
        assert "nothing to hide" in json.dumps(stored(outputs, inputs))
        assert CIPHERTEXT not in json.dumps(stored(outputs, inputs))


# --- a project file: its policies and an environment's lifecycle ----------------------------

PROJECT = """\
specs: [specs]
policies: [policies/prod.yaml]
environments:
  prod:
    servers: {env: PULUMI10_UNSET_NATS_URL}
    lifecycle: {prevent_destroy: true}
"""

PROD_POLICY = """\
rules:
  - id: prod-max-msgs
    level: deny
    message: streams in prod bound max_msgs
    kinds: [Stream]
    when: resource.environment == "prod" && step.action != "delete"
    expr: has(resource.declared.max_msgs)
"""


@pytest.mark.integration
def test_the_component_keeps_the_projects_policies_and_the_environments_lifecycle(
    monitor: RecordingMonitor, clean_server: Any, tmp_path: Path
) -> None:
    """``reconcile apply --env prod`` evaluates the project's ``policies:`` (with
    ``resource.environment`` "prod") and merges prod's ``prevent_destroy`` into every
    resource. ``JetStreamSpecs`` read neither: LOOSE was created against the deny rule,
    and BOUND was deleted with its messages. Both are now refused, as the CLI refuses
    them; the environment's connection (a variable not set) is not read."""
    (tmp_path / "reconcile.yaml").write_text(PROJECT, encoding="utf-8")
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "prod.yaml").write_text(PROD_POLICY, encoding="utf-8")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "streams.yaml").write_text(
        "kind: Stream\nname: BOUND\nsubjects: [BOUND.>]\nmax_msgs: 100\n---\n"
        "kind: Stream\nname: LOOSE\nsubjects: [LOOSE.>]\n",
        encoding="utf-8",
    )

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        shop = JetStreamSpecs(
            "prod", project=tmp_path / "reconcile.yaml", environment="prod", allow_destroy=True
        )
        return pulumi.Output.all(*(r.urn for r in shop.resources.values()))

    program()
    registered = by_name(monitor)
    with configured({"jetstream:servers": clean_server.url}) as host:
        loose = dict(registered["prod/Stream/LOOSE"].inputs)
        host.provider = unwrapped(loose.pop("__provider"))
        with pytest.raises(grpc.RpcError) as denied:
            host.create(host.check(loose)[0])
        assert "prod-max-msgs" in str(denied.value.details())
        bound = dict(registered["prod/Stream/BOUND"].inputs)
        host.provider = unwrapped(bound.pop("__provider"))
        id_, outputs = host.create(host.check(bound)[0])
        run(_publish(clean_server.url, "BOUND.a", 4))
        with pytest.raises(grpc.RpcError) as prevented:
            host.delete(id_, outputs)  # allow_destroy: only the lifecycle stops it
        assert "prevent_destroy" in str(prevented.value.details())
        assert "reconcile.yaml:6" in str(prevented.value.details())  # where it was declared
    names = run(_stream_names(clean_server.url))
    assert "BOUND" in names and "LOOSE" not in names
    assert run(_messages(clean_server.url, "BOUND")) == 4
