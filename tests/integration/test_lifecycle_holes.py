"""Attacks on lifecycle (issue 32), on real servers, messages counted after each:
KeyValue entries follow their bucket's lifecycle (an observed bucket gets no entry
written, a protected bucket's entries are never pruned), and other ways a protected
resource could lose messages or an observed one be written."""

from __future__ import annotations

from pathlib import Path

import nats
import pytest
from servers import NatsServer, run
from test_lifecycle import _info, _messages, _publish, _request

from reconciler.errors import RefusedPlan
from reconciler.execution import run as engine
from reconciler.execution.apply import apply_plan
from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.planning.steps import Plan

pytestmark = pytest.mark.integration

EVERY_FLAG = {"prune": True, "allow_replace": True, "allow_data_loss": True, "migrate": True}


def _options(server: NatsServer) -> ConnectionOptions:
    return ConnectionOptions(servers=server.url)


def _specs(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "specs"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / f"{name}.yaml").write_text(text, encoding="utf-8")
    return folder


ENTRY = "kind: KeyValueEntry\nbucket: cfg\nkey: {key}\nvalue: {value}\n"


def _bucket(tmp_path: Path, url: str) -> Path:
    """Bucket cfg with two entries (mode, speed) applied: KV_cfg holds 2 messages."""
    specs = _specs(
        tmp_path,
        cfg="kind: KeyValue\nname: cfg\nhistory: 5\n",
        mode=ENTRY.format(key="mode", value="fast"),
        speed=ENTRY.format(key="speed", value="high"),
    )
    applied = run(engine.apply([specs], ConnectionOptions(servers=url), lock_timeout=None))
    assert applied.ok
    assert _messages(url, "KV_cfg") == 2
    return specs


def test_an_observed_buckets_entries_are_never_written(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    url = clean_server.url
    specs = _bucket(tmp_path, url)
    observed = "kind: KeyValue\nname: cfg\nhistory: 5\nlifecycle: {mode: observe}\n"
    (specs / "cfg.yaml").write_text(observed)
    (specs / "mode.yaml").write_text(ENTRY.format(key="mode", value="slow"))
    (specs / "new.yaml").write_text(ENTRY.format(key="new", value="later"))
    (specs / "speed.yaml").unlink()
    options = _options(clean_server)
    the_plan = run(engine.plan([specs], options, prune=True))
    assert not the_plan.has_changes, [(s.action, s.name) for s in the_plan.changes]
    notes = {note.name: note for note in the_plan.observed if note.kind == "KeyValueEntry"}
    assert set(notes) == {"mode", "new", "speed"} and notes["new"].missing
    result = run(engine.apply([specs], options, lock_timeout=None, **EVERY_FLAG))
    assert result.ok and not result.applied
    assert _messages(url, "KV_cfg") == 2  # nothing written, nothing deleted


def test_a_protected_buckets_entries_are_never_pruned(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    url = clean_server.url
    specs = _bucket(tmp_path, url)
    (specs / "cfg.yaml").write_text(
        "kind: KeyValue\nname: cfg\nhistory: 5\nlifecycle: {prevent_destroy: true}\n"
    )
    options = _options(clean_server)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok  # records the protection
    (specs / "speed.yaml").unlink()
    (specs / "mode.yaml").write_text(ENTRY.format(key="mode", value="slow"))
    with pytest.raises(RefusedPlan) as refused:
        run(engine.apply([specs], options, lock_timeout=None, **EVERY_FLAG))
    (detail,) = refused.value.details
    assert detail.startswith("delete KeyValueEntry cfg/speed: prevented by lifecycle")
    assert f"{specs / 'cfg.yaml'}:4" in detail
    assert _messages(url, "KV_cfg") == 2  # speed still there, mode not written
    plain = run(engine.plan([specs], options))
    orphan = next(o for o in plain.orphans if o.name == "speed")
    assert any("--prune will not delete it" in r for r in orphan.reasons)
    # the bucket's spec removed too: its record on the server still protects its entries
    (specs / "cfg.yaml").unlink()
    with pytest.raises(RefusedPlan) as refused:
        run(engine.apply([specs], options, lock_timeout=None, **EVERY_FLAG))
    details = refused.value.details
    prevented = "delete KeyValueEntry cfg/speed: bucket cfg: prevented"
    assert any(d.startswith(prevented) for d in details), details
    assert _messages(url, "KV_cfg") == 2


INTEREST = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
retention: interest
lifecycle:
  prevent_destroy: true
---
kind: Consumer
stream: ORDERS
name: billing
ack_policy: explicit
"""
SHIPPER = """\
kind: Consumer
stream: ORDERS
name: shipper
ack_policy: explicit
{extra}
"""


async def _ack_all(url: str, durable: str, count: int) -> None:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        sub = await nc.jetstream().pull_subscribe_bind(durable, "ORDERS")
        for message in await sub.fetch(count, timeout=5):
            await message.ack_sync()
    finally:
        await nc.close()


CHANGES = {"removed": "delete", "replaced": "replace", "narrowed": "update"}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_protected_interest_streams_messages_keep_their_consumers(
    clean_server: NatsServer, tmp_path: Path, change: str
) -> None:
    """In an interest stream, a message lives while a consumer still needs it: deleting
    (pruning) or replacing the one consumer that has not acknowledged them, or narrowing
    its filter, deletes the protected stream's messages. Such a step is prevented."""
    url = clean_server.url
    specs = _specs(tmp_path, orders=INTEREST, shipper=SHIPPER.format(extra=""))
    options = _options(clean_server)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    run(_publish(url, "orders.new", 10))
    run(_ack_all(url, "billing", 10))  # only shipper still needs them
    assert _messages(url, "ORDERS") == 10
    if change == "removed":
        (specs / "shipper.yaml").unlink()
    else:
        extra = "deliver_policy: new" if change == "replaced" else "filter_subject: orders.none"
        (specs / "shipper.yaml").write_text(SHIPPER.format(extra=extra))
    with pytest.raises(RefusedPlan) as refused:
        run(engine.apply([specs], options, lock_timeout=None, **EVERY_FLAG))
    (detail,) = refused.value.details
    action = CHANGES[change]
    assert detail.startswith(f"{action} Consumer ORDERS/shipper: prevented: stream ORDERS"), detail
    assert _messages(url, "ORDERS") == 10
    consumers = run(_request(url, "$JS.API.CONSUMER.NAMES.ORDERS"))["consumers"]
    assert sorted(consumers) == ["billing", "shipper"]
    if change == "removed":  # without --prune, the orphan says so
        orphan = next(o for o in run(engine.plan([specs], options)).orphans)
        assert "--prune will not delete it: prevented: stream ORDERS" in orphan.reasons[-1]


def test_a_forged_protection_record_is_printed_cut(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A record of 120,000 characters (the server takes up to 128 KiB of metadata) is
    escaped and cut in the refusal, never echoed whole."""
    from reconciler.specs.lifecycle import PROTECT_KEY

    url = clean_server.url
    specs = _specs(tmp_path, other="kind: Stream\nname: OTHER\nsubjects: [other.>]\n")
    options = _options(clean_server)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    run(_publish(url, "other.new", 4))
    config = _info(url, "OTHER")["config"]
    forged = "\x1b]8;;https://x\x07" + "A" * 120_000
    config["metadata"] = config["metadata"] | {PROTECT_KEY: forged}
    answer = run(_request(url, "$JS.API.STREAM.UPDATE.OTHER", config))
    assert "error" not in answer, answer
    (specs / "other.yaml").unlink()
    (specs / "later.yaml").write_text("kind: Stream\nname: LATER\n")
    with pytest.raises(RefusedPlan) as refused:
        run(engine.apply([specs], options, lock_timeout=None, **EVERY_FLAG))
    (detail,) = refused.value.details
    assert len(detail) < 500 and "\x1b" not in detail and "\x07" not in detail, len(detail)
    assert "120,0" in detail  # says how long the record is
    assert _messages(url, "OTHER") == 4


def test_pulumi_never_deletes_a_consumer_a_protected_interest_stream_needs(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Pulumi's destroy builds its delete step itself, from the consumer alone: the
    stream's protection (recorded on the server) holds its consumers too."""
    from pulumi_provider import JetStreamProvider

    url = clean_server.url
    specs = _specs(tmp_path, orders=INTEREST)
    assert run(engine.apply([specs], _options(clean_server), lock_timeout=None)).ok
    provider = JetStreamProvider(connection={"servers": url})
    inputs = {"kind": "Consumer", "stream": "ORDERS", "name": "shipper", "ack_policy": "explicit"}
    created = provider.create(provider.check({}, inputs).inputs)
    run(_publish(url, "orders.new", 10))
    run(_ack_all(url, "billing", 10))
    with pytest.raises(RefusedPlan, match="retention interest"):
        provider.delete(created.id, {**created.outs, "allow_destroy": True})
    assert _messages(url, "ORDERS") == 10
    narrowed = {**inputs, "filter_subject": "orders.none", "allow_destroy": True}
    with pytest.raises(RefusedPlan) as refused:  # says why, not "run pulumi refresh"
        provider.update(created.id, created.outs, provider.check({}, narrowed).inputs)
    assert "retention interest" in " ".join(refused.value.details), refused.value
    assert _messages(url, "ORDERS") == 10


OBSERVED_INTEREST = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
retention: interest
lifecycle: {mode: observe}
---
kind: Consumer
stream: ORDERS
name: billing
ack_policy: explicit
"""


def test_an_observed_interest_streams_messages_keep_their_consumers(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A stream made by hand, observed, with consumers managed here: pruning the one
    consumer that still needs its messages would delete them (a write to the observed
    stream). Prevented."""
    url = clean_server.url
    made = {"name": "ORDERS", "subjects": ["orders.>"], "retention": "interest"}
    assert "error" not in run(_request(url, "$JS.API.STREAM.CREATE.ORDERS", made))
    specs = _specs(tmp_path, orders=OBSERVED_INTEREST, shipper=SHIPPER.format(extra=""))
    options = _options(clean_server)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    run(_publish(url, "orders.new", 10))
    run(_ack_all(url, "billing", 10))
    (specs / "shipper.yaml").unlink()
    with pytest.raises(RefusedPlan) as refused:
        run(engine.apply([specs], options, lock_timeout=None, **EVERY_FLAG))
    (detail,) = refused.value.details
    assert detail.startswith("delete Consumer ORDERS/shipper: prevented: stream ORDERS"), detail
    assert "lifecycle mode observe" in detail
    assert _messages(url, "ORDERS") == 10


WATCHED = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
storage: {storage}
---
kind: Consumer
stream: ORDERS
name: audit
ack_policy: explicit
lifecycle: {{mode: observe}}
"""


@pytest.mark.parametrize("migrate", [False, True], ids=["replace", "migrate"])
def test_an_observed_consumer_holds_its_replaced_stream(
    clean_server: NatsServer, tmp_path: Path, migrate: bool
) -> None:
    """Replacing (or migrating) a managed stream re-creates its consumers: an observed
    consumer would be destroyed, so the stream's step is prevented, every flag given."""
    url = clean_server.url
    made = {"durable_name": "audit", "name": "audit", "ack_policy": "explicit"}
    specs = _specs(tmp_path, orders=WATCHED.format(storage="file").split("---")[0])
    options = _options(clean_server)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    created = run(
        _request(
            url, "$JS.API.CONSUMER.CREATE.ORDERS.audit", {"stream_name": "ORDERS", "config": made}
        )
    )
    run(_publish(url, "orders.new", 6))
    (specs / "orders.yaml").write_text(WATCHED.format(storage="memory"))
    flags = {**EVERY_FLAG, "migrate": migrate}
    with pytest.raises(RefusedPlan) as refused:
        run(engine.apply([specs], options, lock_timeout=None, **flags))
    (detail,) = refused.value.details
    assert "its consumer audit has lifecycle mode observe and would go with it" in detail
    assert _messages(url, "ORDERS") == 6
    assert _info(url, "ORDERS")["config"]["storage"] == "file"
    after = run(_request(url, "$JS.API.CONSUMER.INFO.ORDERS.audit"))
    assert after["created"] == created["created"]  # the same consumer, never re-created


def test_a_heal_leaves_a_prevented_update_to_a_person(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The agent's heal applies creates and updates that delete nothing: a filter change
    its protected interest stream prevents is left to a person (never applied, and
    never a refusal of the heal's other steps)."""
    from reconciler.planning.heal import split_for_heal

    url = clean_server.url
    specs = _specs(tmp_path, orders=INTEREST, shipper=SHIPPER.format(extra=""))
    options = _options(clean_server)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    run(_publish(url, "orders.new", 10))
    run(_ack_all(url, "billing", 10))
    (specs / "shipper.yaml").write_text(SHIPPER.format(extra="filter_subject: orders.none"))
    (specs / "other.yaml").write_text("kind: Stream\nname: OTHER\n")
    split = split_for_heal(run(engine.plan([specs], options)))
    assert [step.label for step in split.steps] == ["Stream OTHER"]
    (refused,) = split.refused
    assert refused.step.label == "Consumer ORDERS/shipper" and "retention interest" in refused.why
    run(_apply(split.safe, options))  # what the heal applies: OTHER, never a refusal
    assert _messages(url, "ORDERS") == 10
    assert "error" not in _info(url, "OTHER")


async def _apply(the_plan: Plan, options: ConnectionOptions) -> None:
    async with open_client(options) as client:
        assert (await apply_plan(the_plan, client)).ok


IDLE = """\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
---
kind: Consumer
stream: ORDERS
name: shipper
ack_policy: explicit
lifecycle: {{prevent_destroy: true}}
{extra}
"""


def test_a_protected_consumer_is_never_given_an_inactive_threshold(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``inactive_threshold`` makes the server delete a consumer left without a client
    that long (measured: gone 4 s after 1s was applied): a protected consumer never
    gets one, created or updated, whatever the flags."""
    url = clean_server.url
    specs = _specs(tmp_path, orders=IDLE.format(extra=""))
    options = _options(clean_server)
    assert run(engine.apply([specs], options, lock_timeout=None)).ok
    (specs / "orders.yaml").write_text(IDLE.format(extra="inactive_threshold: 1s"))
    with pytest.raises(RefusedPlan) as refused:
        run(engine.apply([specs], options, lock_timeout=None, **EVERY_FLAG))
    (detail,) = refused.value.details
    assert detail.startswith("update Consumer ORDERS/shipper: prevented"), detail
    assert "inactive_threshold" in detail
    info = run(_request(url, "$JS.API.CONSUMER.INFO.ORDERS.shipper"))
    assert info["config"].get("inactive_threshold", 0) == 0
    (specs / "orders.yaml").write_text(IDLE.format(extra=""))
    later = IDLE.format(extra="inactive_threshold: 1s").split("---\n")[1]
    (specs / "later.yaml").write_text(later.replace("shipper", "later"))
    with pytest.raises(RefusedPlan) as refused:  # a create too
        run(engine.apply([specs], options, lock_timeout=None, **EVERY_FLAG))
    (detail,) = refused.value.details
    assert detail.startswith("create Consumer ORDERS/later: prevented"), detail
