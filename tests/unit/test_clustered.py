"""Which server INFO says JetStream runs clustered (``jetstream.transport.clustered``):
the INFO nats-server 2.15.1 sent for each kind (docs/jetstream-notes.md)."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.jetstream.transport import clustered

MEMBER = ["127.0.0.1:4222", "127.0.0.1:4223", "127.0.0.1:4224"]


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"server_name": "solo"}, False),  # a plain single server names no cluster
        ({"server_name": "c1-n0", "cluster": "c1", "connect_urls": MEMBER}, True),
        ({"server_name": "c1-n0", "cluster": "c1"}, True),  # no_advertise: none advertised
        ({"server_name": "edge", "cluster": "edge"}, False),  # a leafnode's, named itself
        ({"server_name": "edge", "cluster": "edge", "connect_urls": MEMBER}, True),
        ({"server_name": "edge", "cluster": ""}, False),
    ],
)
def test_a_server_is_clustered_when_its_info_names_a_cluster_not_itself(
    info: dict[str, Any], expected: bool
) -> None:
    assert clustered(info) is expected
