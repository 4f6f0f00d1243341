"""A stream deleted and created again is a new stream, even when the server keeps its files.

nats-server answers a file stream's delete once its folder is renamed to ``.NAME`` and
removes that folder in the background; a second delete of ``NAME`` meanwhile leaves
``NAME`` on disk, answers success, and the next create brings the old messages back
(docs/jetstream-notes.md). These tests hold ``.NAME`` in place, as a slow background
removal would, and count the messages after a replace and after a migration.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from migration_helpers import api, dump, publish_many
from servers import NatsServer, options, run, write

from reconciler.errors import ApplyFailed
from reconciler.execution import recreate
from reconciler.execution import run as engine

STREAM = """
kind: Stream
name: ORDERS
subjects: ["orders.>"]
storage: file
{extra}
"""


def apply(path: Path, server: NatsServer, **kw: Any) -> engine.ApplyResult:
    return run(engine.apply([path], options(server), **kw))


def stream_dir(server: NatsServer, name: str) -> Path:
    (folder,) = server.store_dir.glob(f"jetstream/*/streams/{name}")
    return folder


def hold_removal(server: NatsServer) -> Path:
    """``.ORDERS`` on disk: what a delete of ORDERS moments before leaves while the server
    removes it in the background."""
    held = server.store_dir / "jetstream" / "$G" / "streams" / ".ORDERS"  # $G: no accounts
    (held / "msgs").mkdir(parents=True)
    (held / "msgs" / "1.blk").write_bytes(b"\0" * 64)
    return held


@pytest.fixture
def held_removal(clean_server: NatsServer) -> Iterator[Path]:
    """``hold_removal`` on the session server; the test removes it (or not) itself."""
    held = hold_removal(clean_server)
    yield held
    shutil.rmtree(held, ignore_errors=True)


def released_after(held: Path, seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, shutil.rmtree, args=(held,), kwargs={"ignore_errors": True})
    timer.start()
    return timer


async def publish(server: NatsServer, subject: str, count: int) -> list[int]:
    """Publish ``count`` messages; the sequences the stream acknowledged."""
    nc = await nats.connect(server.url)
    try:
        acks = []
        for i in range(count):
            reply = await nc.request(subject, f"new{i}".encode(), timeout=5)
            acks.append(json.loads(reply.data)["seq"])
        return acks
    finally:
        await nc.close()


def test_the_server_brings_a_deleted_stream_back_while_its_old_files_are_removed(
    clean_server: NatsServer, held_removal: Path
) -> None:
    """The server fact the engine guards against, shown with the raw API."""
    run(api(clean_server, "STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["o.>"]}))
    run(publish(clean_server, "o.x", 5))
    deleted = run(api(clean_server, "STREAM.DELETE.ORDERS"))
    assert deleted.get("success") is True  # answered as deleted...
    assert stream_dir(clean_server, "ORDERS").exists()  # ...but its files stayed
    again = run(api(clean_server, "STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["o.>"]}))
    assert again["state"]["messages"] == 5  # and a create brings them back


def test_a_replace_while_old_files_linger_gives_a_new_empty_stream(
    clean_server: NatsServer, tmp_path: Path, held_removal: Path, figures: Any
) -> None:
    assert apply(write(tmp_path, STREAM.format(extra=""), "a.yaml"), clean_server).ok
    run(publish_many(clean_server, ["orders.a"], 40))
    changed = write(tmp_path, STREAM.format(extra="retention: workqueue"), "b.yaml")
    timer = released_after(held_removal, 0.5)
    result = apply(changed, clean_server, allow_replace=True, allow_data_loss=True)
    timer.join()
    assert result.ok
    info = run(api(clean_server, "STREAM.INFO.ORDERS"))
    assert info["config"]["retention"] == "workqueue"
    assert info["state"]["messages"] == 0  # the 40 old messages did not come back
    assert run(publish(clean_server, "orders.b", 3)) == [1, 2, 3]
    assert [m[1] for m in run(dump(clean_server, "ORDERS"))] == [b"new0", b"new1", b"new2"]
    assert not run(engine.plan([changed], options(clean_server))).has_changes
    figures.add("leftovers_refused")
    figures.add("messages_checked", 40 + 3)


def test_old_files_that_never_go_stop_the_apply_with_the_stream_named(
    clean_server: NatsServer,
    tmp_path: Path,
    held_removal: Path,
    monkeypatch: pytest.MonkeyPatch,
    figures: Any,
) -> None:
    monkeypatch.setattr(recreate, "LEFTOVER_SECONDS", 0.5)
    assert apply(write(tmp_path, STREAM.format(extra=""), "a.yaml"), clean_server).ok
    run(publish_many(clean_server, ["orders.a"], 10))
    changed = write(tmp_path, STREAM.format(extra="retention: workqueue"), "b.yaml")
    with pytest.raises(ApplyFailed) as failure:
        apply(changed, clean_server, allow_replace=True, allow_data_loss=True)
    (failed,) = failure.value.report.failed
    assert "stream ORDERS" in failed and "brought back the deleted stream's files" in failed
    assert "10 messages" in failed
    # Left deleted, never left holding the old messages under the new config.
    names = run(api(clean_server, "STREAM.NAMES"))["streams"] or []
    assert "ORDERS" not in names
    # Once the server has removed the old files, the next apply creates it empty.
    shutil.rmtree(held_removal)
    shutil.rmtree(stream_dir(clean_server, "ORDERS"))  # what the server failed to remove
    assert apply(changed, clean_server).ok
    assert run(api(clean_server, "STREAM.INFO.ORDERS"))["state"]["messages"] == 0
    figures.add("leftovers_refused")


@pytest.mark.parametrize("version", [None, "2.10.26"], ids=["newest", "2.10.26"])
def test_a_migration_while_old_files_linger_keeps_every_message_once(
    server_factory: Callable[..., NatsServer],
    tmp_path: Path,
    version: str | None,
    figures: Any,
) -> None:
    """From 2.12 the new stream is a mirror of the temporary one (the old files hold the
    same messages at the same sequences); before, it is created empty and checked."""
    server = server_factory(version=version)
    assert apply(write(tmp_path, STREAM.format(extra=""), "a.yaml"), server).ok
    run(publish_many(server, ["orders.a", "orders.b"], 60))
    run(api(server, "STREAM.MSG.DELETE.ORDERS", {"seq": 9}))
    expected = run(dump(server, "ORDERS"))
    changed = write(tmp_path, STREAM.format(extra="retention: workqueue"), "b.yaml")
    held = hold_removal(server)
    timer = released_after(held, 0.5)
    result = apply(changed, server, migrate=True)
    timer.join()
    assert result.ok
    assert len(expected) == 59
    assert run(dump(server, "ORDERS")) == expected  # each message once, in order
    assert run(api(server, "STREAM.INFO.ORDERS"))["config"]["retention"] == "workqueue"
    assert not run(engine.plan([changed], options(server))).has_changes
    figures.add("messages_checked", len(expected))
