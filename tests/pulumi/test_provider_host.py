"""The provider through the real Pulumi dynamic provider host, against a real nats-server.

One ``python -m pulumi.dynamic`` process serves the whole module; requests are built the
way the Pulumi engine builds them (see tests/pulumi/pulumi_host.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import count
from pathlib import Path
from typing import Any

import grpc
import nats
import pytest
from pulumi.runtime.proto import provider_pb2
from pulumi.runtime.rpc import UNKNOWN
from pulumi_host import ProviderHost, configured, up
from servers import NatsServer, options, run
from servers import publish as _publish

from pulumi_provider import JetStreamProvider
from pulumi_provider.component import resource_spec
from reconciler.execution import lock
from reconciler.execution.lock import Holder, Lease
from reconciler.jetstream import open_client
from reconciler.specs.loader import load_documents
from reconciler.specs.spec import MANAGED_KEY, MANAGED_VALUE
from reconciler.specs.validate import validate_documents

pytestmark = pytest.mark.integration

DIFF_NONE = provider_pb2.DiffResponse.DIFF_NONE
DIFF_SOME = provider_pb2.DiffResponse.DIFF_SOME
_names = count()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def host(nats_server: NatsServer) -> Iterator[ProviderHost]:
    with configured({"jetstream:servers": nats_server.url}) as provider_host:
        yield provider_host


@pytest.fixture
def server(clean_server: NatsServer) -> NatsServer:
    return clean_server


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


async def _api(url: str, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        payload = json.dumps(body).encode() if body is not None else b""
        reply = await nc.request(f"$JS.API.{subject}", payload, timeout=5)
        return dict(json.loads(reply.data))
    finally:
        await nc.close()


def api(server: NatsServer, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """A raw JetStream API request, as an out-of-band change by someone else."""
    return run(_api(server.url, subject, body))


def version_of(server: NatsServer) -> tuple[int, ...]:
    version = str(server.monitor("varz")["version"]).split("-")[0]
    return tuple(int(part) for part in version.split("."))


def stream_inputs(name: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "Stream", "name": name, "subjects": [f"{name}.>"], **fields}


# --- check --------------------------------------------------------------------------------


def test_valid_stream_passes_check_with_numbers_back_as_integers(host: ProviderHost) -> None:
    inputs, failures = host.check(stream_inputs("VALID", max_age="1h", max_msgs=1000))
    assert failures == []
    assert inputs["max_msgs"] == 1000
    assert inputs["max_age"] == "1h"


def test_invalid_stream_reports_every_bad_field(host: ProviderHost) -> None:
    _, failures = host.check(
        stream_inputs("BAD", storage="disk", max_age="10 parsecs", max_bytes=-5, subjectz=["x"])
    )
    reported = {f.property for f in failures}
    assert {"storage", "max_age", "max_bytes"} <= reported
    assert any("subjectz" in f.property or "subjectz" in f.reason for f in failures)
    assert all(f.reason for f in failures)


def test_unknown_kind_is_a_check_failure(host: ProviderHost) -> None:
    _, failures = host.check({"kind": "Queue", "name": "Q"})
    assert [f.property for f in failures] == ["kind"]


def test_misspelt_connection_field_and_non_boolean_allow_destroy_are_check_failures(
    host: ProviderHost,
) -> None:
    inputs = {**stream_inputs("CONN"), "connection": {"server": "x"}, "allow_destroy": "yes"}
    _, failures = host.check(inputs)
    assert {f.property for f in failures} == {"connection", "allow_destroy"}


# --- streams: create, diff, update, refresh, delete ----------------------------------------


def test_create_makes_the_stream_and_an_unchanged_input_diffs_empty(
    host: ProviderHost, server: NatsServer
) -> None:
    name = unique("CREATED")
    id_, inputs, outputs = host.apply(stream_inputs(name, max_age="1h"))
    assert id_ == name
    live = api(server, f"STREAM.INFO.{name}")["config"]
    assert live["max_age"] == 3_600_000_000_000
    assert outputs["live_config"]["max_age"] == 3_600_000_000_000
    assert host.diff(id_, outputs, inputs).changes == DIFF_NONE


def test_same_value_in_other_units_diffs_empty(host: ProviderHost, server: NatsServer) -> None:
    name = unique("UNITS")
    id_, _, outputs = host.apply(stream_inputs(name, max_age="1h"))
    news, _ = host.check(stream_inputs(name, max_age="60m"))
    assert host.diff(id_, outputs, news).changes == DIFF_NONE


def test_in_place_change_is_an_update_that_keeps_messages(
    host: ProviderHost, server: NatsServer
) -> None:
    name = unique("INPLACE")
    id_, _, outputs = host.apply(stream_inputs(name, max_age="1h"))
    run(_publish(server.url, f"{name}.a", 3))
    news, _ = host.check(stream_inputs(name, max_age="2h", description="orders"))
    diff = host.diff(id_, outputs, news)
    assert diff.changes == DIFF_SOME
    assert list(diff.replaces) == []
    updated = host.update(id_, outputs, news)
    info = api(server, f"STREAM.INFO.{name}")
    assert info["config"]["max_age"] == 7_200_000_000_000
    assert info["config"]["description"] == "orders"
    assert info["state"]["messages"] == 3
    assert updated["live_config"]["max_age"] == 7_200_000_000_000
    assert host.diff(id_, updated, news).changes == DIFF_NONE


def test_an_update_that_deletes_messages_needs_allow_destroy(
    host: ProviderHost, server: NatsServer
) -> None:
    name = unique("SHRINK")
    id_, _, outputs = host.apply(stream_inputs(name, max_msgs=100))
    run(_publish(server.url, f"{name}.a", 20))
    news, _ = host.check(stream_inputs(name, max_msgs=5))
    with pytest.raises(grpc.RpcError) as refused:
        host.update(id_, outputs, news)
    details = str(refused.value.details())
    assert "deletes stored messages" in details and "holds 20 messages" in details
    assert api(server, f"STREAM.INFO.{name}")["state"]["messages"] == 20
    allowed, _ = host.check(stream_inputs(name, max_msgs=5, allow_destroy=True))
    host.update(id_, outputs, allowed)
    assert api(server, f"STREAM.INFO.{name}")["state"]["messages"] == 5


@pytest.mark.parametrize(
    ("before", "after", "field"),
    [
        ({"storage": "file"}, {"storage": "memory"}, "storage"),
        ({"retention": "limits"}, {"retention": "workqueue"}, "retention"),
        ({"deny_delete": True}, {"deny_delete": False}, "deny_delete"),
        ({"deny_purge": True}, {"deny_purge": False}, "deny_purge"),
        ({"allow_msg_ttl": True}, {"allow_msg_ttl": False}, "allow_msg_ttl"),
        ({"allow_msg_schedules": True}, {"allow_msg_schedules": False}, "allow_msg_schedules"),
        ({"allow_msg_counter": False}, {"allow_msg_counter": True}, "allow_msg_counter"),
    ],
)
def test_immutable_stream_field_change_is_a_replace(
    host: ProviderHost,
    server: NatsServer,
    before: dict[str, Any],
    after: dict[str, Any],
    field: str,
) -> None:
    needs = {"allow_msg_ttl": (2, 11), "allow_msg_schedules": (2, 12), "allow_msg_counter": (2, 12)}
    if version_of(server) < needs.get(field, (0,)):
        pytest.skip(f"{field} needs a newer nats-server")
    name = unique("IMMUTABLE")
    id_, _, outputs = host.apply(stream_inputs(name, **before))
    news, _ = host.check(stream_inputs(name, **after))
    diff = host.diff(id_, outputs, news)
    assert diff.changes == DIFF_SOME
    assert list(diff.replaces) == [field]
    assert diff.deleteBeforeReplace


def test_with_migrate_a_storage_change_is_an_update_that_keeps_every_message(
    host: ProviderHost, server: NatsServer
) -> None:
    """The resource's ``migrate`` input: the preview shows an update, never a replace, and
    the update migrates the messages."""
    name = unique("MIGRATE")
    id_, _, outputs = host.apply(stream_inputs(name, storage="file"))
    run(_publish(server.url, f"{name}.a", 50))
    news, failures = host.check(stream_inputs(name, storage="memory", migrate=True))
    assert not failures
    diff = host.diff(id_, outputs, news)
    assert diff.changes == DIFF_SOME
    assert list(diff.replaces) == []
    updated = host.update(id_, outputs, news)
    info = api(server, f"STREAM.INFO.{name}")
    assert info["config"]["storage"] == "memory"
    assert info["state"]["messages"] == 50
    assert updated["migrate"] is True
    assert host.diff(id_, updated, news).changes == DIFF_NONE
    _, failures = host.check(stream_inputs(name, migrate="yes"))
    assert [(f.property, f.reason) for f in failures] == [("migrate", "must be true or false")]


def test_unsealing_a_sealed_stream_is_a_replace(host: ProviderHost, server: NatsServer) -> None:
    name = unique("SEALED")
    id_, _, outputs = host.apply(stream_inputs(name))
    sealed, _ = host.check(stream_inputs(name, sealed=True))
    assert list(host.diff(id_, outputs, sealed).replaces) == []  # sealing is an update
    outputs = host.update(id_, outputs, sealed)
    assert api(server, f"STREAM.INFO.{name}")["config"]["sealed"] is True
    unsealed, _ = host.check(stream_inputs(name, sealed=False))
    assert list(host.diff(id_, outputs, unsealed).replaces) == ["sealed"]


def test_changing_the_mirrored_stream_is_a_replace(host: ProviderHost, server: NatsServer) -> None:
    first, second, name = unique("ORIGIN"), unique("ORIGIN"), unique("MIRROR")
    host.apply(stream_inputs(first))
    host.apply(stream_inputs(second))
    id_, _, outputs = host.apply({"kind": "Stream", "name": name, "mirror": {"name": first}})
    news, _ = host.check({"kind": "Stream", "name": name, "mirror": {"name": second}})
    assert list(host.diff(id_, outputs, news).replaces) == ["mirror"]


def test_renaming_a_stream_is_a_replace(host: ProviderHost, server: NatsServer) -> None:
    name = unique("RENAMED")
    id_, _, outputs = host.apply(stream_inputs(name))
    news, _ = host.check({**stream_inputs(name), "name": name + "X"})
    diff = host.diff(id_, outputs, news)
    assert list(diff.replaces) == ["name"]
    assert diff.deleteBeforeReplace  # the old stream's subjects: it goes first


def test_a_rename_refused_for_its_messages_says_how_to_allow_it_and_that_way_works(
    host: ProviderHost, server: NatsServer
) -> None:
    """Pulumi deletes a replace's old resource with its recorded inputs: an
    ``allow_destroy=True`` given with the rename does not count. The refusal said "set
    allow_destroy=True on the resource", which a user had just done; it now says to set it
    in a ``pulumi up`` of its own first, and following that makes the rename."""
    name = unique("RENAMEDKEPT")
    id_, _, outputs = host.apply(stream_inputs(name))
    run(_publish(server.url, f"{name}.a", 3))
    renamed, _ = host.check({**stream_inputs(name), "name": name + "X", "allow_destroy": True})
    with pytest.raises(grpc.RpcError) as refused:
        host.diff(id_, outputs, renamed)
    assert "`pulumi up` of its own" in str(refused.value.details())
    assert api(server, f"STREAM.INFO.{name}")["state"]["messages"] == 3

    allowed, _ = host.check(stream_inputs(name, allow_destroy=True))  # the advice, followed
    id_, outputs = up(host, id_, outputs, allowed)
    new_id, _ = up(host, id_, outputs, renamed)
    assert new_id == name + "X"
    assert api(server, f"STREAM.INFO.{name}")["error"]["err_code"] == 10059


def test_refresh_shows_an_out_of_band_change_and_the_next_diff_updates(
    host: ProviderHost, server: NatsServer
) -> None:
    name = unique("DRIFTED")
    id_, inputs, outputs = host.apply(stream_inputs(name, max_age="1h"))
    config = api(server, f"STREAM.INFO.{name}")["config"]
    changed = api(server, f"STREAM.UPDATE.{name}", {**config, "max_age": 10_800_000_000_000})
    assert "error" not in changed
    read_id, refreshed = host.read(id_, outputs, inputs)
    assert read_id == id_
    assert refreshed["live_config"]["max_age"] == 10_800_000_000_000
    diff = host.diff(id_, refreshed, inputs)
    assert diff.changes == DIFF_SOME
    assert list(diff.replaces) == []


def test_refresh_of_a_stream_deleted_out_of_band_returns_an_empty_id(
    host: ProviderHost, server: NatsServer
) -> None:
    name = unique("VANISHED")
    id_, inputs, outputs = host.apply(stream_inputs(name))
    api(server, f"STREAM.DELETE.{name}")
    read_id, _ = host.read(id_, outputs, inputs)
    assert read_id == ""


def test_delete_removes_an_empty_stream(host: ProviderHost, server: NatsServer) -> None:
    name = unique("DELETED")
    id_, _, outputs = host.apply(stream_inputs(name))
    host.delete(id_, outputs)
    assert api(server, f"STREAM.INFO.{name}")["error"]["err_code"] == 10059


def test_delete_of_a_stream_holding_messages_is_refused(
    host: ProviderHost, server: NatsServer
) -> None:
    name = unique("KEPT")
    id_, _, outputs = host.apply(stream_inputs(name))
    run(_publish(server.url, f"{name}.a", 2))
    with pytest.raises(grpc.RpcError) as refused:
        host.delete(id_, outputs)
    assert "allow_destroy" in str(refused.value.details())
    assert "Traceback" not in str(refused.value.details())  # the reason, as the CLI says it
    assert api(server, f"STREAM.INFO.{name}")["state"]["messages"] == 2


def test_delete_with_allow_destroy_removes_a_stream_holding_messages(
    host: ProviderHost, server: NatsServer
) -> None:
    name = unique("DESTROYED")
    id_, _, outputs = host.apply({**stream_inputs(name), "allow_destroy": True})
    run(_publish(server.url, f"{name}.a", 2))
    host.delete(id_, outputs)
    assert api(server, f"STREAM.INFO.{name}")["error"]["err_code"] == 10059


def test_turning_on_allow_destroy_is_an_update_that_a_later_delete_honours(
    host: ProviderHost, server: NatsServer
) -> None:
    name = unique("OPTIN")
    id_, _, outputs = host.apply(stream_inputs(name))
    run(_publish(server.url, f"{name}.a", 1))
    news, _ = host.check({**stream_inputs(name), "allow_destroy": True})
    diff = host.diff(id_, outputs, news)
    assert (diff.changes, list(diff.replaces)) == (DIFF_SOME, [])
    outputs = host.update(id_, outputs, news)
    assert outputs["allow_destroy"] is True
    host.delete(id_, outputs)
    assert api(server, f"STREAM.INFO.{name}")["error"]["err_code"] == 10059


def test_create_adopts_an_existing_stream_like_reconcile_apply(
    host: ProviderHost, server: NatsServer
) -> None:
    name = unique("ADOPTED")
    api(server, f"STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name}.>"], "max_msgs": 5})
    _, _, outputs = host.apply(stream_inputs(name))
    live = api(server, f"STREAM.INFO.{name}")["config"]
    assert live["metadata"][MANAGED_KEY] == MANAGED_VALUE
    assert live["max_msgs"] == -1  # the spec's value (the default), as apply sends it
    assert outputs["live_config"]["max_msgs"] == -1


def test_create_over_an_existing_stream_needing_a_replace_is_refused(
    host: ProviderHost, server: NatsServer
) -> None:
    name = unique("CLASH")
    api(
        server,
        f"STREAM.CREATE.{name}",
        {"name": name, "subjects": [f"{name}.>"], "storage": "memory"},
    )
    checked, _ = host.check(stream_inputs(name, storage="file"))
    with pytest.raises(grpc.RpcError) as refused:
        host.create(checked)
    assert "only a replace could change it (storage)" in str(refused.value.details())
    assert api(server, f"STREAM.INFO.{name}")["config"]["storage"] == "memory"


# --- consumers -----------------------------------------------------------------------------


def consumer_inputs(stream: str, name: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "Consumer", "stream": stream, "name": name, "ack_policy": "explicit", **fields}


def test_consumer_lifecycle(host: ProviderHost, server: NatsServer) -> None:
    stream = unique("CSTREAM")
    host.apply(stream_inputs(stream))
    id_, inputs, outputs = host.apply(
        consumer_inputs(stream, "NEW", filter_subject=f"{stream}.new", ack_wait="30s")
    )
    assert id_ == f"{stream}/NEW"
    assert host.diff(id_, outputs, inputs).changes == DIFF_NONE
    news, _ = host.check(
        consumer_inputs(stream, "NEW", filter_subject=f"{stream}.new", ack_wait="1m")
    )
    diff = host.diff(id_, outputs, news)
    assert (diff.changes, list(diff.replaces)) == (DIFF_SOME, [])
    updated = host.update(id_, outputs, news)
    live = api(server, f"CONSUMER.INFO.{stream}.NEW")["config"]
    assert live["ack_wait"] == 60_000_000_000
    assert updated["live_config"]["ack_wait"] == 60_000_000_000
    host.delete(id_, updated)
    assert api(server, f"CONSUMER.INFO.{stream}.NEW")["error"]["err_code"] == 10014


@pytest.mark.parametrize(
    ("before", "after", "field"),
    [
        ({"deliver_policy": "all"}, {"deliver_policy": "new"}, "deliver_policy"),
        ({"ack_policy": "explicit"}, {"ack_policy": "all"}, "ack_policy"),
        ({"replay_policy": "instant"}, {"replay_policy": "original"}, "replay_policy"),
        ({"max_waiting": 512}, {"max_waiting": 10}, "max_waiting"),
        ({}, {"deliver_subject": "deliver.here"}, "deliver_subject"),
        (
            {"deliver_policy": "by_start_sequence", "opt_start_seq": 1},
            {"deliver_policy": "by_start_sequence", "opt_start_seq": 5},
            "opt_start_seq",
        ),
        (
            {"deliver_subject": "push.a", "idle_heartbeat": "5s", "flow_control": True},
            {"deliver_subject": "push.a", "idle_heartbeat": "10s", "flow_control": True},
            "idle_heartbeat",
        ),
        (
            {"deliver_subject": "push.b", "idle_heartbeat": "5s", "flow_control": True},
            {"deliver_subject": "push.b", "idle_heartbeat": "5s", "flow_control": False},
            "flow_control",
        ),
    ],
)
def test_immutable_consumer_field_change_is_a_replace(
    host: ProviderHost,
    server: NatsServer,
    before: dict[str, Any],
    after: dict[str, Any],
    field: str,
) -> None:
    stream = unique("CIMMUTABLE")
    host.apply(stream_inputs(stream))
    id_, _, outputs = host.apply(consumer_inputs(stream, "C", **before))
    news, failures = host.check(consumer_inputs(stream, "C", **after))
    assert failures == []
    diff = host.diff(id_, outputs, news)
    assert diff.changes == DIFF_SOME
    assert list(diff.replaces) == [field]
    assert diff.deleteBeforeReplace


def test_refresh_of_a_consumer_deleted_out_of_band_returns_an_empty_id(
    host: ProviderHost, server: NatsServer
) -> None:
    stream = unique("CGONE")
    host.apply(stream_inputs(stream))
    id_, inputs, outputs = host.apply(consumer_inputs(stream, "C"))
    api(server, f"CONSUMER.DELETE.{stream}.C")
    assert host.read(id_, outputs, inputs)[0] == ""


# --- buckets -------------------------------------------------------------------------------


def test_key_value_bucket_lifecycle(host: ProviderHost, server: NatsServer) -> None:
    bucket = unique("config")
    id_, inputs, outputs = host.apply(
        {"kind": "KeyValue", "name": bucket, "history": 5, "ttl": "1h"}
    )
    assert id_ == bucket
    live = api(server, f"STREAM.INFO.KV_{bucket}")["config"]
    assert live["max_msgs_per_subject"] == 5
    assert outputs["bucket"]["history"] == 5
    assert host.diff(id_, outputs, inputs).changes == DIFF_NONE
    news, _ = host.check({"kind": "KeyValue", "name": bucket, "history": 10, "ttl": "1h"})
    assert list(host.diff(id_, outputs, news).replaces) == []
    updated = host.update(id_, outputs, news)
    assert updated["bucket"]["history"] == 10
    storage, _ = host.check(
        {"kind": "KeyValue", "name": bucket, "history": 10, "storage": "memory"}
    )
    assert "storage" in list(host.diff(id_, updated, storage).replaces)
    host.delete(id_, updated)
    assert api(server, f"STREAM.INFO.KV_{bucket}")["error"]["err_code"] == 10059


def test_object_store_bucket_lifecycle(host: ProviderHost, server: NatsServer) -> None:
    bucket = unique("files")
    id_, inputs, outputs = host.apply({"kind": "ObjectStore", "name": bucket, "max_bytes": "1MiB"})
    live = api(server, f"STREAM.INFO.OBJ_{bucket}")["config"]
    assert live["max_bytes"] == 1024 * 1024
    assert outputs["bucket"]["max_bytes"] == 1024 * 1024
    assert host.diff(id_, outputs, inputs).changes == DIFF_NONE
    host.delete(id_, outputs)
    assert api(server, f"STREAM.INFO.OBJ_{bucket}")["error"]["err_code"] == 10059


# --- connections and secrets ---------------------------------------------------------------


def test_credentials_never_appear_in_outputs_and_delete_uses_the_captured_connection(
    host: ProviderHost, server_factory: Any
) -> None:
    secured = server_factory(users=[{"user": "app", "password": "s3cret-pw"}])
    connection = {"servers": secured.url, "user": "app", "password": "s3cret-pw"}
    provider = host.using(JetStreamProvider(connection))
    id_, inputs, outputs = provider.apply({**stream_inputs("SECURED"), "connection": connection})
    assert "s3cret-pw" not in json.dumps(outputs)
    assert outputs["connection"] == {"servers": secured.url, "user": "app"}
    _, refreshed = provider.read(id_, outputs, inputs)
    assert "s3cret-pw" not in json.dumps(refreshed)
    provider.delete(id_, outputs)  # outputs hold no password: the captured one is used
    assert provider.read(id_, outputs, inputs)[0] == ""


def test_rejected_credentials_fail_without_showing_them(
    host: ProviderHost, server_factory: Any
) -> None:
    secured = server_factory(users=[{"user": "app", "password": "s3cret-pw"}])
    connection = {"servers": secured.url, "user": "app", "password": "wrong-pw"}
    checked, _ = host.check({**stream_inputs("DENIED"), "connection": connection})
    with pytest.raises(grpc.RpcError) as failed:
        host.create(checked)
    details = str(failed.value.details())
    assert "wrong-pw" not in details
    assert "check credentials" in details and "Traceback" not in details


def test_a_secret_inputs_value_is_in_no_check_failure_and_no_error(
    host: ProviderHost, server: NatsServer
) -> None:
    """The host gets secrets unwrapped; ``secret_inputs`` names them, and neither a check
    failure nor a refusal quotes their values."""
    _, failures = host.check(
        {**stream_inputs("HIDDEN"), "max_age": "s3cr3t-age", "secret_inputs": ["max_age"]}
    )
    assert [f.property for f in failures] == ["max_age"]
    assert "s3cr3t" not in failures[0].reason
    host.apply(stream_inputs("TAKEN", subjects=["s3cr3t.>"]))
    inputs = {**stream_inputs("CLASH", subjects=["s3cr3t.>"]), "secret_inputs": ["subjects"]}
    checked, failures = host.check(inputs)
    assert failures == []
    with pytest.raises(grpc.RpcError) as refused:
        host.create(checked)  # its subjects overlap TAKEN's: refused, naming them
    assert "TAKEN" in str(refused.value.details())
    assert "s3cr3t" not in str(refused.value.details())


# --- the example folders, as JetStreamSpecs sends them -------------------------------------


@pytest.mark.parametrize("folder", ["shop", "buckets"])
def test_every_example_document_applies_and_then_diffs_empty(
    host: ProviderHost, server: NatsServer, folder: str
) -> None:
    documents = load_documents([EXAMPLES / folder])
    specs = [s for s in validate_documents(documents) if not s.external]
    bodies = {d.source: d.body for d in documents}
    applied = []
    for spec in sorted(specs, key=lambda s: s.kind == "Consumer"):
        applied.append(host.apply(resource_spec(spec, bodies[spec.source])))
    for id_, inputs, outputs in applied:
        assert host.diff(id_, outputs, inputs).changes == DIFF_NONE, id_
    for id_, _, outputs in reversed(applied):
        host.delete(id_, outputs)
    left = api(server, "STREAM.NAMES").get("streams") or []
    assert not {spec.stream_name for spec in specs} & set(left)


# --- preview: values not known yet ---------------------------------------------------------


def test_preview_with_unknown_values_checks_without_failures(host: ProviderHost) -> None:
    inputs = {**consumer_inputs(UNKNOWN, "C"), "ack_wait": UNKNOWN}
    _, failures = host.check(inputs)
    assert failures == []


def test_preview_with_an_unknown_name_is_a_replace(host: ProviderHost, server: NatsServer) -> None:
    name = unique("PREVIEW")
    id_, _, outputs = host.apply(stream_inputs(name))
    diff = host.diff(id_, outputs, {**stream_inputs(name), "name": UNKNOWN})
    assert diff.changes == DIFF_SOME
    assert list(diff.replaces) == ["name"]
    unknown_field = host.diff(id_, outputs, stream_inputs(name, max_age=UNKNOWN))
    assert (unknown_field.changes, list(unknown_field.replaces)) == (DIFF_SOME, [])


# --- the apply lock --------------------------------------------------------------------------

#: Someone else's run holding the server's apply lock (another host: never taken over).
MALLORY = Holder(owner="mallory", host="elsewhere.example", pid=4242, run="other-run")


@pytest.fixture(scope="module")
def impatient(nats_server: NatsServer) -> Iterator[ProviderHost]:
    """A host whose stack waits one second for the apply lock (``jetstream:lockTimeout``)."""
    provider_host = ProviderHost()
    provider_host.configure({"jetstream:servers": nats_server.url, "jetstream:lockTimeout": "1"})
    yield provider_host
    provider_host.close()


async def _take_lock(server: NatsServer) -> Lease:
    async with open_client(options(server)) as client:
        return await lock.acquire(client, MALLORY, timeout=0)


async def _release_lock(server: NatsServer, lease: Lease) -> None:
    async with open_client(options(server)) as client:
        assert await lock.release(client, lease)


def _stream_names(server: NatsServer) -> set[str]:
    return set(api(server, "STREAM.NAMES").get("streams") or [])


def test_a_change_waits_for_another_runs_apply_lock_then_fails_naming_it_and_changes_nothing(
    impatient: ProviderHost, server: NatsServer
) -> None:
    kept, gone, made = unique("LOCKKEPT"), unique("LOCKGONE"), unique("LOCKMADE")
    kept_id, _, kept_outputs = impatient.apply(stream_inputs(kept, max_age="1h"))
    gone_id, _, gone_outputs = impatient.apply({**stream_inputs(gone), "allow_destroy": True})
    run(_publish(server.url, f"{kept}.a", 3))
    run(_publish(server.url, f"{gone}.a", 2))
    lease = run(_take_lock(server))
    before = _stream_names(server)
    created, _ = impatient.check(stream_inputs(made))
    updated, _ = impatient.check(stream_inputs(kept, max_age="2h"))
    attempts = [
        lambda: impatient.create(created),
        lambda: impatient.update(kept_id, kept_outputs, updated),
        lambda: impatient.delete(gone_id, gone_outputs),
    ]
    for attempt in attempts:
        with pytest.raises(grpc.RpcError) as refused:
            attempt()
        details = str(refused.value.details())
        assert "mallory on elsewhere.example (pid 4242)" in details
        assert "jetstream:lockTimeout" in details and "--" not in details  # Pulumi's words
    assert _stream_names(server) == before
    kept_info = api(server, f"STREAM.INFO.{kept}")
    assert kept_info["config"]["max_age"] == 3_600_000_000_000
    assert kept_info["state"]["messages"] == 3
    assert api(server, f"STREAM.INFO.{gone}")["state"]["messages"] == 2
    run(_release_lock(server, lease))
    for attempt in attempts:
        attempt()
    assert _stream_names(server) == before - {gone} | {made}
    kept_info = api(server, f"STREAM.INFO.{kept}")
    assert kept_info["config"]["max_age"] == 7_200_000_000_000
    assert kept_info["state"]["messages"] == 3


def test_a_change_waiting_for_the_apply_lock_goes_on_once_it_is_released(
    host: ProviderHost, server: NatsServer
) -> None:
    name = unique("LOCKWAIT")
    id_, _, outputs = host.apply(stream_inputs(name, max_age="1h"))
    lease = run(_take_lock(server))
    news, _ = host.check(stream_inputs(name, max_age="2h"))
    with ThreadPoolExecutor(1) as pool:
        update = pool.submit(host.update, id_, outputs, news)
        time.sleep(1.5)  # the update is waiting (the CLI's 60 s) or not yet begun
        assert not update.done()
        assert api(server, f"STREAM.INFO.{name}")["config"]["max_age"] == 3_600_000_000_000
        run(_release_lock(server, lease))
        updated = update.result(timeout=60)
    assert updated["live_config"]["max_age"] == 7_200_000_000_000
    assert api(server, f"STREAM.INFO.{name}")["config"]["max_age"] == 7_200_000_000_000
