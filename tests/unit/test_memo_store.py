"""Where the plan memo is kept: one file per (planning code, server facts, owner), shared
by every plan with those, each renewing what it met and keeping what the others met."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def test_plans_sharing_a_file_keep_each_others_answers(tmp_path: Path) -> None:
    """Two environments of one release, then one small plan (a single resource, as the
    Pulumi provider plans): nobody's answers are lost."""
    staging, prod = digests(b"stagingX", 300), digests(b"prodXXXX", 500)
    assert plan_once(tmp_path, staging) == set()
    assert plan_once(tmp_path, prod) == staging
    one = set(list(prod)[:1])
    assert plan_once(tmp_path, one) == staging | prod
    assert plan_once(tmp_path, staging) == staging | prod
    other_node = ServerInfo(version="2.12.8", api_level=3, address="nats://127.0.0.1:5222")
    assert plan_once(tmp_path, prod, other_node) == staging | prod  # where is not a fact
    newer = ServerInfo(version="2.14.0", api_level=4)
    assert plan_once(tmp_path, prod, newer) == set()  # another release: its own file
    assert len(list(tmp_path.glob("plans-*.bin"))) == 2


def test_answers_no_plan_meets_any_more_fall_out(tmp_path: Path) -> None:
    gone, current = digests(b"goneXXXX", 50), digests(b"nowXXXXX", 20)
    plan_once(tmp_path, gone | current)
    for _ in range(memo_store.KEEP_PLANS - 1):
        plan_once(tmp_path, current)
    assert plan_once(tmp_path, current) == gone | current  # still within KEEP_PLANS
    assert plan_once(tmp_path, current) == current


def test_the_file_is_bounded_the_least_recently_met_first_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memo_store, "MAX_ENTRIES", 100)
    old, new = digests(b"oldXXXXX", 80), digests(b"newXXXXX", 60)
    plan_once(tmp_path, old)
    plan_once(tmp_path, new)
    known = plan_once(tmp_path, set())
    assert len(known) == 100 and new <= known


def test_a_torn_file_is_an_empty_memo_and_is_rewritten(tmp_path: Path) -> None:
    plan_once(tmp_path, digests(b"aXXXXXXX", 10))
    [file] = tmp_path.glob("plans-*.bin")
    file.write_bytes(file.read_bytes()[:-3])
    assert plan_once(tmp_path, digests(b"aXXXXXXX", 10)) == set()
    assert len(file.read_bytes()) == 20 * 10


def test_without_a_cache_folder_nothing_is_kept() -> None:
    assert memo_store.load(None, SERVER, "default") is None
    memo_store.store(None, None)
