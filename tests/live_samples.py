"""Live states as a server would echo them after an apply: the plan tests' fixtures.

Shared by tests/unit/test_plan.py and tests/unit/test_plan_memo.py; a module of its own
(tests/ is on pytest's pythonpath) so that the tests import it by name, whatever the way
pytest is started (``pytest`` or ``python -m pytest``).
"""

from __future__ import annotations

from typing import Any

from reconciler.model.normalize import desired_config
from reconciler.model.state import LiveState, ServerInfo
from reconciler.specs.spec import MANAGED_KEY, Spec

SERVER = ServerInfo(version="2.12.8", api_level=3)


def live_of(*specs: Spec, managed: bool = True, server: ServerInfo = SERVER) -> LiveState:
    """The live state a server would hold after applying ``specs`` (as it echoes configs)."""
    streams: dict[str, Any] = {}
    consumers: dict[tuple[str, str], Any] = {}
    for item in [s for s in specs if s.kind != "Consumer"]:
        streams[item.stream_name] = server_copy(desired_config(item, server), managed)
    for item in [s for s in specs if s.kind == "Consumer"]:
        parent = streams[item.stream_name]
        config = desired_config(item, server, stream_config=parent)
        consumers[(item.stream_name, item.name)] = server_copy(config, managed)
    return LiveState(server=server, streams=streams, consumers=consumers)


def server_copy(config: dict[str, Any], managed: bool) -> dict[str, Any]:
    metadata = {"_nats.ver": SERVER.version, "_nats.level": "3", "_nats.req.level": "0"}
    metadata.update(config["metadata"])
    if not managed:
        metadata.pop(MANAGED_KEY)
    return {**config, "metadata": metadata}
