"""JetStreamClient against real nats-server processes: paging, error mapping, KV, domains."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from servers import Cluster, NatsServer, run

from reconciler.errors import ConnectError, NotFound, PermissionDenied, RequestTimeout, ServerError
from reconciler.jetstream import ConnectionOptions, JetStreamClient, open_client

Body = Callable[[JetStreamClient], Awaitable[Any]]


def with_client(url: str, body: Body, **options: Any) -> Any:
    async def go() -> Any:
        async with open_client(ConnectionOptions(servers=url, **options)) as client:
            return await body(client)

    return run(go())


def stream(name: str, **config: Any) -> dict[str, Any]:
    return {"name": name, "subjects": [f"{name}.>"], "storage": "memory", **config}


async def create_many(client: JetStreamClient, configs: list[dict[str, Any]]) -> None:
    limit = asyncio.Semaphore(64)

    async def create(config: dict[str, Any]) -> None:
        async with limit:
            await client.create_stream(config)

    await asyncio.gather(*(create(c) for c in configs))


async def sent(
    client: JetStreamClient, work: Callable[[], Awaitable[Any]]
) -> tuple[Any, list[str]]:
    """``work()``'s result and the subjects of the requests ``client`` sent to the server
    meanwhile, in the order it sent them. (Recorded at the connection: a second
    connection subscribed to the API subjects missed a request now and then on a loaded
    machine, although its subscription had been flushed first.)"""
    seen: list[str] = []
    send = client.nc.request

    async def recording(subject: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(subject)
        return await send(subject, *args, **kwargs)

    client.nc.request = recording  # type: ignore[method-assign]
    try:
        return await work(), seen
    finally:
        client.nc.request = send  # type: ignore[method-assign]


def test_lists_page_past_the_page_size(clean_server: NatsServer) -> None:
    async def body(client: JetStreamClient) -> tuple[int, int, int]:
        await create_many(client, [stream(f"P{i:03d}") for i in range(600)])
        infos = await client.list_streams()
        names = await client.stream_names()
        live = await client.fetch_live()
        assert {i["config"]["name"] for i in infos} == set(names) == set(live.streams)
        return len(infos), len(names), len(live.streams)

    assert with_client(clean_server.url, body) == (600, 600, 600)


def test_consumers_are_listed_while_the_stream_list_is_still_read(
    server_factory: Callable[..., NatsServer],
) -> None:
    """Over a slow link, waiting for the stream list's last page before listing any
    consumer costs a round trip per page: the first page's consumers go out first. (A
    server of its own: the count of pages is exactly what this server holds.)"""
    clean_server = server_factory()

    async def body(client: JetStreamClient) -> tuple[Any, list[str]]:
        await create_many(client, [stream(f"Q{i:03d}") for i in range(600)])
        limit = asyncio.Semaphore(64)

        async def add(i: int) -> None:
            async with limit:
                config = {"durable_name": "C", "ack_policy": "explicit"}
                await client.create_consumer(f"Q{i:03d}", config, action="create")

        await asyncio.gather(*(add(i) for i in range(600)))
        return await sent(client, client.fetch_live)

    live, seen = with_client(clean_server.url, body)
    assert len(live.streams) == 600 and len(live.consumers) == 600
    assert live.consumers[("Q599", "C")]["ack_policy"] == "explicit"
    pages = [i for i, subject in enumerate(seen) if subject == "$JS.API.STREAM.LIST"]
    lists = [i for i, subject in enumerate(seen) if subject.startswith("$JS.API.CONSUMER.LIST.")]
    assert len(pages) == 3 and len(lists) == 600
    assert lists[0] < pages[-1]


def test_a_read_asks_for_the_server_info_and_the_stream_list_at_once(
    clean_server: NatsServer,
) -> None:
    """Over a slow link every round trip counts: opening a client asks nothing, and the
    read sends its INFO and its first STREAM.LIST together. With the server frozen just
    after the client connected, both are in flight at once (before: only INFO, which
    opening the client had already asked)."""

    async def body(client: JetStreamClient) -> tuple[set[str], Any]:
        await client.create_stream(stream("ONE"))  # asks no INFO
        clean_server.pause()
        try:
            reading = asyncio.ensure_future(client.fetch_live())
            await asyncio.sleep(0.3)  # the client sends; the frozen server answers nothing
            in_flight = set(client._waiting)  # the requests awaiting an answer
        finally:
            clean_server.resume()
        return in_flight, await reading

    in_flight, live = with_client(clean_server.url, body)
    assert in_flight == {"$js.api.info", "$js.api.stream.list"}
    assert set(live.streams) == {"ONE"} and live.server.version


def test_callers_asking_for_the_server_info_at_once_share_one_request(
    clean_server: NatsServer,
) -> None:
    async def body(client: JetStreamClient) -> tuple[list[Any], list[str]]:
        async def ask() -> list[Any]:
            answers = await asyncio.gather(*(client.server_info() for _ in range(5)))
            return [*answers, await client.server_info()]

        return await sent(client, ask)

    answers, seen = with_client(clean_server.url, body)
    assert seen == ["$JS.API.INFO"]
    assert all(answer is answers[0] for answer in answers)


def test_a_failed_server_info_is_asked_again(server_factory: Callable[..., NatsServer]) -> None:
    """A timed-out INFO is not remembered: the next caller asks again and gets it."""
    server = server_factory()

    async def body(client: JetStreamClient) -> Any:
        server.pause()
        try:
            with pytest.raises(RequestTimeout):
                await client.server_info()
        finally:
            server.resume()
        return await client.server_info()

    info = with_client(server.url, body, timeout=0.5)
    assert info.version


def test_consumer_list_pages_past_the_page_size(clean_server: NatsServer) -> None:
    async def body(client: JetStreamClient) -> Any:
        await client.create_stream(stream("MANY"))
        limit = asyncio.Semaphore(64)

        async def add(i: int) -> None:
            async with limit:
                config = {"durable_name": f"c{i:03d}", "ack_policy": "explicit"}
                await client.create_consumer("MANY", config, action="create")

        await asyncio.gather(*(add(i) for i in range(300)))
        return await client.list_consumers("MANY"), await client.fetch_live()

    consumers, live = with_client(clean_server.url, body)
    assert len(consumers) == 300
    assert len(live.consumers) == 300
    assert live.consumers[("MANY", "c299")]["ack_policy"] == "explicit"
    assert live.stream_state["MANY"].consumer_count == 300


def test_fetch_live_keeps_configs_exactly_as_the_server_sent_them(clean_server: NatsServer) -> None:
    async def body(client: JetStreamClient) -> Any:
        await client.create_stream(stream("ORDERS", max_age=3_600_000_000_000))
        await client.create_consumer(
            "ORDERS", {"durable_name": "audit", "ack_policy": "explicit"}, action="create"
        )
        await client.publish("ORDERS.new", b"{}")
        return await client.fetch_live(), await client.stream_info("ORDERS")

    live, info = with_client(clean_server.url, body)
    # STREAM.LIST and STREAM.INFO differ only in the server-owned metadata keys (2.11+).
    listed = {k: v for k, v in live.streams["ORDERS"].items() if k != "metadata"}
    assert listed == {k: v for k, v in info["config"].items() if k != "metadata"}
    assert live.streams["ORDERS"]["max_age"] == 3_600_000_000_000
    assert live.streams["ORDERS"]["duplicate_window"] == 120_000_000_000
    assert live.stream_state["ORDERS"].messages == 1
    assert live.consumers[("ORDERS", "audit")]["ack_wait"] == 30_000_000_000
    assert live.server.version == live.server.version.strip() and live.server.api_level >= 1


@pytest.mark.parametrize("large", [True, False], ids=["large", "small"])
def test_fetch_live_shares_equal_values_of_a_large_account_but_never_a_config(
    clean_server: NatsServer, monkeypatch: pytest.MonkeyPatch, large: bool
) -> None:
    """Live configs of an account of ``SHARE_FROM`` resources or more are read with their
    equal strings and integers made one object (the memory of 100,000 consumers); a
    smaller account's are not (the walk would cost more than it saves). Either way they
    are exactly what CONSUMER.INFO says, each a dict of its own: changing one changes no
    other."""
    from reconciler.jetstream import live as live_module

    # this account holds 4 resources: large when that is enough, small when it is not
    monkeypatch.setattr(live_module, "SHARE_FROM", 4 if large else 5)

    async def body(client: JetStreamClient) -> Any:
        await client.create_stream(stream("SHARE"))
        await client.create_stream(stream("OTHER"))
        for name in ("first", "second"):
            config = {"durable_name": name, "ack_policy": "explicit", "metadata": {"team": "a"}}
            await client.create_consumer("SHARE", config, action="create")
        infos = [await client.consumer_info("SHARE", n) for n in ("first", "second")]
        return await client.fetch_live(), infos

    live, infos = with_client(clean_server.url, body)
    first, second = live.consumers[("SHARE", "first")], live.consumers[("SHARE", "second")]
    for listed, info in ((first, infos[0]), (second, infos[1])):
        # CONSUMER.LIST and CONSUMER.INFO differ only in server-owned metadata keys (2.11+)
        assert {k: v for k, v in listed.items() if k != "metadata"} == {
            k: v for k, v in info["config"].items() if k != "metadata"
        }
        assert listed["metadata"]["team"] == "a"
    assert (first["ack_policy"] is second["ack_policy"]) is large
    assert (first["ack_wait"] is second["ack_wait"]) is large  # 30 s in ns: not a cached int
    one, other = live.streams["SHARE"], live.streams["OTHER"]
    assert one["retention"] == other["retention"] == "limits"
    assert (one["retention"] is other["retention"]) is large
    assert first is not second and first["metadata"] is not second["metadata"]
    first["metadata"]["team"] = "b"
    assert second["metadata"]["team"] == "a"


def test_confirm_adds_what_a_list_missed_and_copies_nothing_when_it_missed_nothing(
    clean_server: NatsServer,
) -> None:
    async def body(client: JetStreamClient) -> None:
        await client.create_stream(stream("SEEN"))
        await client.create_consumer("SEEN", {"durable_name": "old"}, action="create")
        live = await client.fetch_live()
        declared = (["SEEN"], [("SEEN", "old")])
        assert await client.confirm(live, *declared) is live
        # Created after the list was read: INFO finds them; what exists nowhere stays out.
        await client.create_stream(stream("LATE"))
        await client.create_consumer("LATE", {"durable_name": "c"}, action="create")
        await client.create_consumer("SEEN", {"durable_name": "new"}, action="create")
        wanted = [("SEEN", "old"), ("SEEN", "new"), ("LATE", "c"), ("SEEN", "nowhere")]
        confirmed = await client.confirm(live, ["SEEN", "LATE", "GHOST"], wanted)
        assert set(confirmed.streams) == {"SEEN", "LATE"}
        assert set(confirmed.consumers) == {("SEEN", "old"), ("SEEN", "new"), ("LATE", "c")}
        assert confirmed.stream_state["LATE"].consumer_count == 1
        assert set(live.consumers) == {("SEEN", "old")}  # the list read is left as it was

    with_client(clean_server.url, body)


def test_missing_stream_and_consumer_raise_not_found(clean_server: NatsServer) -> None:
    async def body(client: JetStreamClient) -> list[int]:
        codes = []
        with pytest.raises(NotFound) as missing_stream:
            await client.stream_info("NOPE")
        codes.append(missing_stream.value.err_code)
        await client.create_stream(stream("HERE"))
        with pytest.raises(NotFound) as missing_consumer:
            await client.consumer_info("HERE", "nobody")
        codes.append(missing_consumer.value.err_code)
        with pytest.raises(NotFound):
            await client.delete_stream("NOPE")
        return codes

    assert with_client(clean_server.url, body) == [10059, 10014]


def test_server_errors_carry_err_code_and_subject(clean_server: NatsServer) -> None:
    async def body(client: JetStreamClient) -> None:
        await client.create_stream(stream("TAKEN"))
        with pytest.raises(ServerError) as in_use:
            await client.create_stream({"name": "TAKEN", "subjects": ["other.>"]})
        assert in_use.value.err_code == 10058
        assert in_use.value.subject == "$JS.API.STREAM.CREATE.TAKEN"
        assert not isinstance(in_use.value, NotFound)

    with_client(clean_server.url, body)


def test_consumer_actions_are_explicit(clean_server: NatsServer) -> None:
    async def body(client: JetStreamClient) -> None:
        await client.create_stream(stream("ACT"))
        config = {"durable_name": "worker", "ack_policy": "explicit", "max_deliver": 5}
        with pytest.raises(ServerError) as update_missing:
            await client.create_consumer("ACT", config, action="update")
        assert update_missing.value.err_code == 10149
        await client.create_consumer("ACT", config, action="create")
        changed = {**config, "max_deliver": 7}
        with pytest.raises(ServerError) as create_existing:
            await client.create_consumer("ACT", changed, action="create")
        assert create_existing.value.err_code == 10148
        updated = await client.create_consumer("ACT", changed, action="update")
        assert updated["config"]["max_deliver"] == 7
        await client.delete_consumer("ACT", "worker")
        assert await client.list_consumers("ACT") == []

    with_client(clean_server.url, body)


def test_stream_update_and_delete(clean_server: NatsServer) -> None:
    async def body(client: JetStreamClient) -> None:
        await client.create_stream(stream("UPD"))
        updated = await client.update_stream(stream("UPD", max_msgs=10))
        assert updated["config"]["max_msgs"] == 10
        await client.delete_stream("UPD")
        assert "UPD" not in await client.stream_names()

    with_client(clean_server.url, body)


def test_pause_and_resume_consumer(clean_server: NatsServer) -> None:
    async def body(client: JetStreamClient) -> None:
        await client.create_stream(stream("PAUSE"))
        config = {"durable_name": "p", "ack_policy": "explicit"}
        await client.create_consumer("PAUSE", config, action="create")
        paused = await client.pause_consumer("PAUSE", "p", "2099-01-01T00:00:00Z")
        assert paused["paused"] is True
        resumed = await client.pause_consumer("PAUSE", "p", None)
        assert resumed["paused"] is False

    with_client(clean_server.url, body)


def test_kv_primitives_compare_and_set(clean_server: NatsServer) -> None:
    bucket = {
        "name": "KV_locks",
        "subjects": ["$KV.locks.>"],
        "max_msgs_per_subject": 1,
        "allow_rollup_hdrs": True,
        "deny_delete": True,
        "discard": "new",
    }

    async def body(client: JetStreamClient) -> None:
        await client.create_stream(bucket)
        assert await client.kv_get("locks", "apply") is None
        first = await client.kv_create("locks", "apply", b"run-1")
        with pytest.raises(ServerError) as taken:
            await client.kv_create("locks", "apply", b"run-2")
        assert taken.value.err_code == 10071
        second = await client.kv_update("locks", "apply", b"run-1 again", first)
        with pytest.raises(ServerError):
            await client.kv_update("locks", "apply", b"stale", first)
        entry = await client.kv_get("locks", "apply")
        assert entry is not None and (entry.value, entry.revision) == (b"run-1 again", second)
        await client.kv_delete("locks", "apply", revision=second)
        assert await client.kv_get("locks", "apply") is None
        assert await client.kv_create("locks", "apply", b"run-3") > second
        with pytest.raises(NotFound):
            await client.kv_get("nobucket", "apply")

    with_client(clean_server.url, body)


def test_requests_use_the_jetstream_domain(server_factory: Callable[..., NatsServer]) -> None:
    server = server_factory(domain="hub")

    async def body(client: JetStreamClient) -> Any:
        await client.create_stream(stream("DOM"))
        return client.subject("INFO"), await client.server_info(), await client.stream_names()

    subject, info, names = with_client(server.url, body, domain="hub")
    assert subject == "$JS.hub.API.INFO"
    assert info.domain == "hub"
    assert names == ["DOM"]
    with pytest.raises(ConnectError, match="domain 'elsewhere'"):
        with_client(server.url, lambda c: c.stream_names(), domain="elsewhere")


def test_no_jetstream_is_explained(server_factory: Callable[..., NatsServer]) -> None:
    server = server_factory(jetstream=False)
    with pytest.raises(ConnectError, match="JetStream is not enabled"):
        with_client(server.url, lambda c: c.stream_names())


def test_permission_violation_raises_permission_denied(
    server_factory: Callable[..., NatsServer],
) -> None:
    reader = {
        "user": "reader",
        "password": "r3ad",
        "permissions": {"publish": {"deny": ["$JS.API.STREAM.CREATE.>"]}},
    }
    server = server_factory(users=[reader])

    async def body(client: JetStreamClient) -> list[str]:
        with pytest.raises(PermissionDenied, match=r"(?i)STREAM\.CREATE\.DENIED"):
            await client.create_stream(stream("DENIED"))
        return await client.stream_names()  # the connection stays usable

    assert with_client(server.url, body, user="reader", password="r3ad", timeout=30) == []


def test_a_denial_fails_only_its_own_request_and_a_cancel_stays_a_cancel(
    server_factory: Callable[..., NatsServer],
) -> None:
    """The denied request fails; the requests in flight beside it answer. A request its
    caller cancels raises CancelledError (not a denial, not a timeout) and leaves nothing
    registered behind."""
    reader = {
        "user": "reader",
        "password": "r3ad",
        "permissions": {"publish": {"deny": ["$JS.API.STREAM.CREATE.>"]}},
    }
    server = server_factory(users=[reader])

    async def body(client: JetStreamClient) -> None:
        results = await asyncio.gather(
            client.create_stream(stream("DENIED")),
            *(client.stream_names() for _ in range(20)),
            return_exceptions=True,
        )
        assert isinstance(results[0], PermissionDenied)
        assert all(r == [] for r in results[1:]), results[1:]
        server.pause()
        try:
            pending = asyncio.ensure_future(client.request("STREAM.NAMES", {"offset": 0}))
            await asyncio.sleep(0.2)
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending
        finally:
            server.resume()
        assert not client._waiting
        assert await client.stream_names() == []

    with_client(server.url, body, user="reader", password="r3ad", timeout=30)


def test_unanswered_request_times_out_naming_the_subject(
    server_factory: Callable[..., NatsServer],
) -> None:
    server = server_factory()

    async def body(client: JetStreamClient) -> None:
        await client.server_info()
        server.pause()
        try:
            with pytest.raises(RequestTimeout, match=r"\$JS\.API\.STREAM\.NAMES"):
                await client.request("STREAM.NAMES", {"offset": 0}, timeout=0.3)
        finally:
            server.resume()

    with_client(server.url, body)


@pytest.mark.cluster
def test_cluster_takes_a_replicated_stream_and_consumer(cluster: Cluster) -> None:
    async def body(client: JetStreamClient) -> Any:
        info = await client.server_info()
        created = await client.create_stream(stream("R3", num_replicas=3, storage="file"))
        consumer = {"durable_name": "r3c", "ack_policy": "explicit"}
        await client.create_consumer("R3", consumer, action="create")
        live = await client.fetch_live()
        await client.delete_stream("R3")
        return info, created, live

    info, created, live = with_client(cluster.urls, body, timeout=15)
    assert info.clustered
    assert created["config"]["num_replicas"] == 3
    assert len(created["cluster"]["replicas"]) == 2
    assert ("R3", "r3c") in live.consumers


def test_every_supported_version_answers_the_same_api(versioned_server: NatsServer) -> None:
    async def body(client: JetStreamClient) -> Any:
        info = await client.server_info()
        await create_many(client, [stream(f"V{i:03d}") for i in range(300)])
        config = {"durable_name": "c", "ack_policy": "explicit"}
        await client.create_consumer("V000", config, action="create")
        with pytest.raises(ServerError) as exists:
            await client.create_consumer("V000", {**config, "max_deliver": 3}, action="create")
        live = await client.fetch_live()
        for name in live.streams:
            await client.delete_stream(name)
        return info, live, exists.value.err_code

    info, live, err_code = with_client(versioned_server.url, body)
    assert versioned_server.version in (None, info.version)
    major_minor = info.version_tuple[:2]
    expected_level = {(2, 10): 0, (2, 11): 1}.get(major_minor)
    if expected_level is not None:
        assert info.api_level == expected_level
    else:
        assert info.api_level >= 2
    assert len(live.streams) == 300 and ("V000", "c") in live.consumers
    assert err_code == 10148


def test_confirm_looks_again_without_stream_names_when_a_user_may_not_list_them(
    server_factory: Callable[..., NatsServer],
) -> None:
    """Several declared streams missing from the list: one STREAM.NAMES says which exist
    now. A user denied STREAM.NAMES still gets each one's INFO, and the same answer."""
    lister = {
        "user": "lister",
        "password": "l1st",
        "permissions": {"publish": {"deny": ["$JS.API.STREAM.NAMES"]}},
    }
    server = server_factory(users=[lister])

    async def body(client: JetStreamClient) -> tuple[set[str], set[str]]:
        live = await client.fetch_live()
        await client.create_stream(stream("LATE1"))
        await client.create_stream(stream("LATE2"))
        confirmed = await client.confirm(live, ["LATE1", "LATE2", "GHOST"], [])
        with pytest.raises(PermissionDenied):
            await client.stream_names()
        return set(live.streams), set(confirmed.streams)

    listed, confirmed = with_client(server.url, body, user="lister", password="l1st", timeout=30)
    assert listed == set() and confirmed == {"LATE1", "LATE2"}
