"""Names and neighbours turned against a migration (the attacker's review, round 16).

Each test publishes first and counts after, on a real nats-server, and failed on the
code before the fix it names.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from migration_helpers import api, dump
from servers import NatsServer, options, run, write
from test_migration_trust import TEMP, count, interrupted, names, orders, still_takes_publishes

from reconciler.errors import SpecError
from reconciler.execution import run as engine
from reconciler.model.migration import RECORD_KEY

pytestmark = pytest.mark.integration

#: A spec naming the temporary stream of ORDERS's migration.
TEMP_SPEC = f"""
kind: Stream
name: {TEMP}
subjects: ["other.>"]
"""


def test_a_spec_declaring_the_temporary_stream_is_refused_and_the_migration_keeps_it(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """ORDERS's migration is killed in phase refill: MIGRATING_ORDERS alone holds every
    message and takes ORDERS's publishes. A spec then declares a stream of that name.
    Before, it was planned as an update of the temporary stream (adopted: its record
    and its subjects taken away). Applied (one step at a time), publishes to orders.>
    got "no responders", the migration failed (err 10052, a mirror cycle), and the next
    plan no longer knew of it. Now plan and apply refuse at the spec's line, nothing
    moves, and apply --migrate still finishes with every message."""
    _, expected = interrupted(clean_server, tmp_path, "refill")
    memory = orders(tmp_path, "memory", name="m.yaml")
    both = write(tmp_path, memory.read_text() + "---" + TEMP_SPEC, "both.yaml")
    with pytest.raises(SpecError, match=r"both\.yaml:\d+: name: stream MIGRATING_ORDERS"):
        run(engine.plan([both], options(clean_server), migrate=True))
    with pytest.raises(SpecError, match="no spec may declare it"):
        run(engine.apply([both], options(clean_server), migrate=True, concurrency=1))
    temp = run(api(clean_server, f"STREAM.INFO.{TEMP}"))["config"]
    assert RECORD_KEY in temp["metadata"] and temp["subjects"] == ["orders.>"]
    assert count(clean_server, TEMP) == len(expected) == 300
    assert still_takes_publishes(clean_server, "orders.a")  # lands in MIGRATING_ORDERS
    assert run(engine.apply([memory], options(clean_server), migrate=True)).ok
    assert names(clean_server) == ["ORDERS"]
    assert run(dump(clean_server, "ORDERS")) == [*expected, ("orders.a", b"probe", ())]
    info = run(api(clean_server, "STREAM.INFO.ORDERS"))
    assert info["config"]["storage"] == "memory"
    billing = run(api(clean_server, "CONSUMER.INFO.ORDERS.BILLING"))
    assert billing["ack_floor"]["stream_seq"] == 40, json.dumps(billing)
