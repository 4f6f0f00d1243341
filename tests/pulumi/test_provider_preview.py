"""``pulumi preview`` as a user reads it, from the provider's answers through the real
provider host (no Pulumi CLI: tests/pulumi/pulumi_host.py renders the CLI's table from
Check and Diff, as the engine does), against a real nats-server. A preview changes
nothing: the messages published before it are all there after it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import nats
import pytest
from pulumi_host import Existing, ProviderHost, configured, preview
from servers import NatsServer, run

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def host(nats_server: NatsServer) -> Iterator[ProviderHost]:
    with configured({"jetstream:servers": nats_server.url}) as provider_host:
        yield provider_host


async def _published_then_counted(url: str, stream: str, subject: str, count: int) -> int:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        for index in range(count):
            await nc.request(subject, str(index).encode(), timeout=5)
        reply = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)
        return int(json.loads(reply.data)["state"]["messages"])
    finally:
        await nc.close()


def _stream(name: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "Stream", "name": name, "subjects": [f"{name}.>"], **fields}


def _consumer(name: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "Consumer", "stream": "PVORDERS", "name": name, **fields}


def _existing(host: ProviderHost, inputs: dict[str, Any]) -> Existing:
    id_, checked, outputs = host.apply(inputs)
    return Existing(id_, checked, outputs)


def test_preview_shows_each_resource_as_pulumi_prints_it_and_changes_nothing(
    host: ProviderHost, clean_server: NatsServer
) -> None:
    orders = _existing(host, _stream("PVORDERS", max_age="1h", max_bytes="1GiB"))
    ship = _existing(host, _consumer("ship", ack_policy="explicit"))
    audit = _existing(host, _stream("PVAUDIT"))
    url = clean_server.url
    assert run(_published_then_counted(url, "PVORDERS", "PVORDERS.a", 25)) == 25

    shown = preview(
        host,
        [
            (_stream("PVORDERS", max_age="2h", max_bytes="1GiB"), orders),  # update
            (_consumer("ship", ack_policy="all"), ship),  # immutable: a replace
            (_stream("PVAUDIT"), audit),  # unchanged
            (_stream("PVNEW"), None),  # create
            (_stream("PVBAD", max_age="10 parsecs"), None),  # a Check failure
        ],
    )

    assert shown == (
        "   Type                                     Name     Plan    Info\n"
        "~  pulumi-python:dynamic/jetstream:Stream   PVORDERS update  [diff: ~max_age]\n"
        "+- pulumi-python:dynamic/jetstream:Consumer ship     replace [diff: ~ack_policy]\n"
        "+  pulumi-python:dynamic/jetstream:Stream   PVNEW    create\n"
        "\n"
        "Resources:\n"
        "    + 1 to create\n"
        "    ~ 1 to update\n"
        "    +-1 to replace\n"
        "    3 changes. 1 unchanged\n"
        "\n"
        "Diagnostics:\n"
        "    pulumi-python:dynamic/jetstream:Stream (PVBAD): max_age: "
        "'10 parsecs' is not a duration"
        " (250ms, 30s, 1h30m, 7d, 1M (30 days), 1y (365 days) or integer nanoseconds)\n"
    )
    assert run(_published_then_counted(url, "PVORDERS", "PVORDERS.a", 0)) == 25
    reply = run(_info(url, "PVNEW"))
    assert reply["error"]["err_code"] == 10059  # a preview created nothing


async def _info(url: str, stream: str) -> dict[str, Any]:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        reply = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)
        return dict(json.loads(reply.data))
    finally:
        await nc.close()
