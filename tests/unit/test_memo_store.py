"""Where the plan memo is kept: one file per (planning code, server facts, owner)."""

from __future__ import annotations

from pathlib import Path

from reconciler.execution import memo_store
from reconciler.model.state import ServerInfo

SERVER = ServerInfo(version="2.12.8", api_level=3, address="nats://127.0.0.1:4222")


def digests(prefix: bytes, count: int) -> set[bytes]:
    return {prefix + i.to_bytes(8, "big") for i in range(count)}


def plan_once(folder: Path, unchanged: set[bytes], server: ServerInfo = SERVER) -> set[bytes]:
    """A plan that finds ``unchanged`` unchanged; what it knew before it ran."""
    memo = memo_store.load(folder, server, "default")
    assert memo is not None
    known = set(memo.known)
    for key in unchanged:
        if not memo.unchanged(key):
            memo.remember(key)
    memo_store.store(folder, memo)
    return known


def test_environments_sharing_a_file_keep_each_others_answers(tmp_path: Path) -> None:
    staging, prod = digests(b"stagingX", 300), digests(b"prodXXXX", 500)
    assert plan_once(tmp_path, staging) == set()
    assert plan_once(tmp_path, prod) == staging
    assert plan_once(tmp_path, staging) == staging | prod
    other_node = ServerInfo(version="2.12.8", api_level=3, address="nats://127.0.0.1:5222")
    assert plan_once(tmp_path, prod, other_node) == staging | prod  # where is not a fact
    newer = ServerInfo(version="2.14.0", api_level=4)
    assert plan_once(tmp_path, prod, newer) == set()  # another release: its own file
    assert len(list(tmp_path.glob("plans-*.bin"))) == 2


def test_answers_about_states_that_are_gone_fall_out(tmp_path: Path) -> None:
    old = digests(b"oldXXXXX", memo_store.SPARE + 200)
    plan_once(tmp_path, old)
    current = digests(b"nowXXXXX", 100)
    assert plan_once(tmp_path, current) == old  # too many others: only what was found
    assert plan_once(tmp_path, current) == current


def test_a_torn_file_is_an_empty_memo_and_is_rewritten(tmp_path: Path) -> None:
    plan_once(tmp_path, digests(b"aXXXXXXX", 10))
    [file] = tmp_path.glob("plans-*.bin")
    file.write_bytes(file.read_bytes()[:-3])
    assert plan_once(tmp_path, digests(b"aXXXXXXX", 10)) == set()
    assert len(file.read_bytes()) == 16 * 10


def test_without_a_cache_folder_nothing_is_kept() -> None:
    assert memo_store.load(None, SERVER, "default") is None
    memo_store.store(None, None)
