"""A saved plan is bound to the account's lineage (docs/saved-plans.md): two servers both
named ``nats`` (a common default), same account, same streams, are still two servers.
Each test runs the CLI on real servers and counts the messages before and after."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer
from test_saved_plan_attacks import refused
from test_saved_plans import (
    ORDERS,
    action_step,
    api,
    apply_file,
    plan_out,
    publish,
    refit,
    repo,
    state,
)

from reconciler.identity import LOCK_BUCKET, kv_subject

pytestmark = pytest.mark.integration

LEGACY = """\
---
kind: Stream
name: LEGACY
subjects: ["LEGACY.*"]
"""


def two_named_nats(server_factory: Callable[..., NatsServer]) -> tuple[NatsServer, NatsServer]:
    """Two servers with the same server_name, no cluster, no domain, account $G."""
    return server_factory(name="nats"), server_factory(name="nats")


def lineage(server: NatsServer, **kw: Any) -> str | None:
    """The lineage the server's account holds, read with nats-py (None: none)."""
    body = {"last_by_subj": kv_subject(LOCK_BUCKET, "lineage")}
    reply = api(server, f"STREAM.MSG.GET.KV_{LOCK_BUCKET}", body, **kw)
    if "message" not in reply:
        return None
    return base64.b64decode(reply["message"]["data"]).decode()


def managed_with_legacy(server: NatsServer, root: Path) -> None:
    """ORDERS and LEGACY applied by the tool (so managed, by owner default), 10 messages
    in LEGACY; then LEGACY's spec is removed (the working tree only)."""
    spec = root / "specs" / "orders.yaml"
    spec.write_text(ORDERS.format(extra="") + LEGACY)
    done = reconcile("apply", "specs", "--server", server.url, "--yes", cwd=root)
    assert done.returncode == 0, done.stderr
    publish(server, "LEGACY.new", 10)
    spec.write_text(ORDERS.format(extra=""))


def test_a_plan_saved_on_one_nats_is_refused_on_another_nats(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Both servers hold the same managed streams; the plan (prune LEGACY, 10 messages)
    was reviewed against the first. Applied to the second it is refused, naming both
    lineages, and the second keeps its 10 messages; applied to the first, it runs."""
    first, second = two_named_nats(server_factory)
    root = repo(tmp_path)
    managed_with_legacy(first, root)
    managed_with_legacy(second, root)
    plan = plan_out(root, first, "../reviewed.plan", "--prune")
    before = state(second)
    assert before["LEGACY"]["messages"] == 10

    done = apply_file(root, second, plan, "--prune", "--allow-replace")

    refused(done, "the plan was saved against another server: nothing was changed")
    assert state(second) == before
    assert f"lineage: '{lineage(first)}' on server 'nats', now '{lineage(second)}'" in done.stderr
    saved = json.loads(plan.read_text())["server"]
    assert saved["name"] == "nats" and saved["lineage"] == lineage(first) != lineage(second)

    done = apply_file(root, first, plan, "--prune", "--allow-replace")

    assert done.returncode == 0, done.stderr
    assert set(state(first)) == {"ORDERS"}


def test_a_plan_made_where_no_lineage_exists_applies_once_there_and_never_elsewhere(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Both servers fresh: the tool never managed either account. ``plan --out`` writes
    the first's lineage; the second, which has none, is refused; the first takes the
    plan once; a second apply there is refused (its creates are no longer needed)."""
    first, second = two_named_nats(server_factory)
    root = repo(tmp_path)
    assert lineage(first) is None and lineage(second) is None

    plan = plan_out(root, first)
    done = apply_file(root, second, plan)

    refused(done, "the plan was saved against another server: nothing was changed")
    assert state(second) == {}
    kept = lineage(first)
    assert kept and json.loads(plan.read_text())["server"]["lineage"] == kept
    assert f"lineage: '{kept}' on server 'nats', now none" in done.stderr
    assert lineage(second) is None  # apply FILE never writes a lineage
    assert state(first) == {}  # plan --out wrote the lineage only: no stream of the user's

    done = apply_file(root, first, plan)

    assert done.returncode == 0, done.stderr
    publish(first, "ORDERS.new", 5)
    assert state(first)["ORDERS"]["messages"] == 5
    again = apply_file(root, first, plan)
    refused(again, "the plan made now is not the saved one")
    assert state(first)["ORDERS"]["messages"] == 5
    assert lineage(first) == kept  # written once, never replaced


READER = {
    "user": "reader",
    "password": "r3ad-only",
    "permissions": {
        "publish": {"deny": ["$JS.API.STREAM.CREATE.>", "$KV.>"]},
    },
}
ADMIN = {"user": "admin", "password": "adm1n-pw"}


def test_a_user_who_may_not_write_the_lineage_saves_no_plan_until_an_apply_kept_it(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """A read-only planner on an account the tool never managed: one line, no file
    (nothing it saved could tell this server from another). Any apply keeps the
    lineage, so after the first one the read-only planner saves plans."""
    server = server_factory(name="nats", users=[READER, ADMIN])
    root = repo(tmp_path)
    as_reader = ("--user", "reader", "--password", "r3ad-only")
    as_admin = ("--user", "admin", "--password", "adm1n-pw")
    out = tmp_path / "reader.plan"

    done = reconcile(
        "plan", "specs", "--out", str(out), "--server", server.url, *as_reader, cwd=root
    )

    refused(done, "the account has no lineage yet and this user may not write it")
    assert not out.exists()
    applied = reconcile("apply", "specs", "--server", server.url, *as_admin, "--yes", cwd=root)
    assert applied.returncode == 0, applied.stderr
    publish(server, "ORDERS.new", 3, user="admin", password="adm1n-pw")
    kept = lineage(server, user="admin", password="adm1n-pw")
    assert kept

    (root / "specs" / "orders.yaml").write_text(ORDERS.format(extra="description: reviewed"))
    done = reconcile(
        "plan", "specs", "--out", str(out), "--server", server.url, *as_reader, cwd=root
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["server"]["lineage"] == kept
    done = reconcile("apply", str(out), "--server", server.url, *as_admin, cwd=root)
    assert done.returncode == 0, done.stderr
    after = state(server, user="admin", password="adm1n-pw")
    assert after["ORDERS"]["config"]["description"] == "reviewed"
    assert after["ORDERS"]["messages"] == 3


def test_a_file_naming_no_lineage_is_refused_even_where_there_is_none(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """``plan --out`` always saves a lineage; a file edited to name none (its digest
    fixed up) would match every server that has none yet: refused."""
    first, second = two_named_nats(server_factory)
    root = repo(tmp_path)
    plan = plan_out(root, first)
    refit(plan, lambda d: d["server"].update(lineage=None))

    done = apply_file(root, second, plan)

    refused(done, "the saved plan names no lineage")
    assert state(second) == {} and lineage(second) is None


LEASE_ONLY = {
    "user": "leaser",
    "password": "l3aser-pw",
    "permissions": {
        "publish": {"allow": ["$JS.API.>", "$KV.RECONCILE_LOCKS.apply", "$SYS.REQ.USER.INFO"]},
        "subscribe": {"allow": ["_INBOX.>"]},
    },
}


def test_an_apply_allowed_the_lease_but_not_the_lineage_still_applies(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The apply keeps the lineage when it can; a user allowed only the lease key gets
    a notice, and the apply goes on (an apply never fails for the lineage)."""
    server = server_factory(name="nats", users=[LEASE_ONLY, ADMIN])
    root = repo(tmp_path)
    creds = {"user": "admin", "password": "adm1n-pw"}  # the raw client counting

    done = reconcile(
        "apply",
        "specs",
        "--server",
        server.url,
        "--user",
        "leaser",
        "--password",
        "l3aser-pw",
        "--yes",
        cwd=root,
    )

    assert done.returncode == 0, done.stderr
    assert "could not keep the account's lineage" in done.stderr
    publish(server, "ORDERS.new", 2, **creds)
    assert state(server, **creds)["ORDERS"]["messages"] == 2
    assert lineage(server, **creds) is None


def test_an_account_without_room_for_the_lineage_saves_no_plan_and_says_why(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """An account at its stream limit, managed with --no-lock (so no lock bucket and no
    lineage): plan --out cannot keep the lineage; one line saying so, no file."""
    accounts = {"A": {"jetstream": {"max_streams": 1}, "users": [{"user": "a", "password": "a"}]}}
    server = server_factory(name="nats", config={"accounts": accounts})
    root = repo(tmp_path)
    creds = ("--user", "a", "--password", "a")
    done = reconcile(
        "apply", "specs", "--server", server.url, *creds, "--yes", "--no-lock", cwd=root
    )
    assert done.returncode == 0, done.stderr
    publish(server, "ORDERS.new", 3, user="a", password="a")
    out = tmp_path / "p.plan"

    done = reconcile("plan", "specs", "--out", str(out), "--server", server.url, *creds, cwd=root)

    refused(done, "the account has no lineage yet and the server refused to keep it")
    assert not out.exists()
    assert state(server, user="a", password="a")["ORDERS"]["messages"] == 3


def test_the_action_refuses_a_plan_file_saved_on_another_nats(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The Action's plan-file goes through the same server check as apply FILE."""
    first, second = two_named_nats(server_factory)
    root = repo(tmp_path)
    code, log, _ = action_step(root, first, mode="plan", **{"plan-file": "p.json"})
    assert code == 0, log

    code, log, _ = action_step(root, second, mode="apply", **{"plan-file": "p.json"})

    assert code == 1, log
    assert f"lineage: '{lineage(first)}' on server 'nats', now none" in log
    assert state(second) == {}
    code, log, _ = action_step(root, first, mode="apply", **{"plan-file": "p.json"})
    assert code == 0, log
    publish(first, "ORDERS.new", 2)
    assert state(first)["ORDERS"]["messages"] == 2
