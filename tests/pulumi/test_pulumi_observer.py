"""The Pulumi provider is a run observer like the Consoles: each step the executor runs
for it is reported on Pulumi's info channel (stderr without an engine), escaped."""

from __future__ import annotations

import pytest
from servers import NatsServer

from pulumi_provider import JetStreamProvider

pytestmark = pytest.mark.integration


def test_each_step_is_reported_as_the_consoles_report_it(
    clean_server: NatsServer, capfd: pytest.CaptureFixture[str]
) -> None:
    provider = JetStreamProvider(connection={"servers": clean_server.url})
    inputs = {"kind": "Stream", "name": "SEEN", "subjects": ["seen.>"]}
    created = provider.create(provider.check({}, inputs).inputs)
    assert "info: [1/1] applied create Stream SEEN" in capfd.readouterr().err
    provider.delete(created.id, created.outs)
    assert "info: [1/1] applied delete Stream SEEN" in capfd.readouterr().err
