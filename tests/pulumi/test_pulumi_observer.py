"""The Pulumi provider is a run observer like the Consoles (each step the executor runs for
it is reported on Pulumi's info channel), and its outputs hold no credentials."""

from __future__ import annotations

from collections.abc import Callable

import pulumi
import pytest
from servers import NatsServer

from pulumi_provider import JetStreamProvider

pytestmark = pytest.mark.integration


def test_each_step_is_reported_as_the_consoles_report_it(
    clean_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    monkeypatch.setattr(pulumi.log, "info", lambda message, *_, **__: said.append(message))
    provider = JetStreamProvider(connection={"servers": clean_server.url})
    inputs = {"kind": "Stream", "name": "SEEN", "subjects": ["seen.>"]}
    created = provider.create(provider.check({}, inputs).inputs)
    assert said == ["[1/1] applied create Stream SEEN"]
    provider.delete(created.id, created.outs)
    assert said[1:] == ["[1/1] applied delete Stream SEEN"]


def test_a_server_url_holding_credentials_never_reaches_outputs(
    server_factory: Callable[..., NatsServer],
) -> None:
    """``nats://app:s3cret-pw@host`` as the resource's ``servers``: the outputs (kept in
    the Pulumi state in the clear) leave the URL out, as they leave out ``password``;
    read and delete take it from the captured connection."""
    import json

    secured = server_factory(users=[{"user": "app", "password": "s3cret-pw"}])
    url = secured.url.replace("nats://", "nats://app:s3cret-pw@")
    inputs = {"kind": "Stream", "name": "HIDDEN", "connection": {"servers": url}}
    provider = JetStreamProvider(connection={"servers": url})
    created = provider.create(provider.check({}, inputs).inputs)
    assert "s3cret-pw" not in json.dumps(created.outs)
    refreshed = provider.read(created.id, created.outs)
    assert "s3cret-pw" not in json.dumps(refreshed.outs)
    provider.delete(created.id, refreshed.outs)
    assert provider.read(created.id, refreshed.outs).id == ""
