"""A restore runs apply's rules (issue 39, 40), on real servers, messages counted by a raw
client: the apply lock, the policies (``--policy`` and the project's: a deny exits 3
with nothing restored) and the environment's lifecycle."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, options, run
from test_lifecycle import _messages, _project, _publish

from reconciler.execution import lock
from reconciler.identity import is_reserved
from reconciler.jetstream import open_client

pytestmark = pytest.mark.integration

STREAM = "kind: Stream\nname: ORDERS\nsubjects: [orders.>]\n"
DENY = """\
rules:
  - id: three-replicas
    level: deny
    message: streams keep three replicas
    kinds: [Stream]
    expr: resource.desired.num_replicas >= 3
"""


def _backup(server: NatsServer, root: Path) -> Path:
    specs = root / "specs"
    specs.mkdir(parents=True)
    (specs / "orders.yaml").write_text(STREAM)
    url = ("--server", server.url)
    assert reconcile("apply", str(specs), *url, "--yes", cwd=root).returncode == 0
    run(_publish(server.url, "orders.new", 12))
    out = root / "backup"
    done = reconcile("backup", str(specs), "--out", str(out), *url, cwd=root)
    assert done.returncode == 0, done.stderr
    return out


async def _user_streams(server: NatsServer) -> list[str]:
    async with open_client(options(server)) as client:
        return [name for name in await client.stream_names() if not is_reserved(name)]


def test_a_policy_deny_exits_3_with_nothing_restored(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    out = _backup(clean_server, tmp_path)
    target = server_factory()
    policy = tmp_path / "policy.yaml"
    policy.write_text(DENY)
    args = ("restore", str(out), "--server", target.url, "--yes")
    denied = reconcile(*args, "--policy", str(policy), cwd=tmp_path)
    assert denied.returncode == 3, denied.stdout + denied.stderr
    assert "three-replicas" in denied.stderr
    assert run(_user_streams(target)) == []

    _project(tmp_path, target.url, "{}")  # the project's policies, read with --env
    project = (tmp_path / "reconcile.yaml").read_text()
    (tmp_path / "reconcile.yaml").write_text(project + "policies: [policy.yaml]\n")
    denied = reconcile("restore", str(out), "--env", "prod", "--yes", cwd=tmp_path)
    assert denied.returncode == 3, denied.stdout + denied.stderr
    assert "three-replicas" in denied.stderr
    assert run(_user_streams(target)) == []

    done = reconcile(*args, cwd=tmp_path)  # no policy: restored
    assert done.returncode == 0, done.stderr
    assert _messages(target.url) == 12


def test_the_environments_prevent_destroy_refuses_a_replace(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    out = _backup(clean_server, tmp_path)
    run(_publish(clean_server.url, "orders.new", 3))
    _project(tmp_path, clean_server.url, "{prevent_destroy: true}")
    flags = ("--replace-existing", "--allow-replace", "--allow-data-loss", "--yes")
    refused = reconcile("restore", str(out), "--env", "prod", *flags, cwd=tmp_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "environment's lifecycle prevent_destroy" in refused.stderr
    assert "reconcile.yaml:6" in refused.stderr, refused.stderr
    assert _messages(clean_server.url) == 15


def test_a_restore_waits_for_the_apply_lock_and_changes_nothing_without_it(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    """An apply holds the target's lock: the restore waits for it, gives up after
    --lock-timeout naming the holder, and restores nothing."""
    out = _backup(clean_server, tmp_path)
    target = server_factory()
    args = ("restore", str(out), "--server", target.url, "--yes", "--lock-timeout", "1")

    async def while_held() -> Any:
        async with (
            open_client(options(target)) as client,
            lock.hold(client, timeout=5, holder=lock.Holder.current("someone-applying")),
        ):
            return await asyncio.to_thread(reconcile, *args, cwd=tmp_path)

    refused = run(while_held())
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "someone-applying" in refused.stderr, refused.stderr
    assert run(_user_streams(target)) == []
    done = reconcile(*args, cwd=tmp_path)  # released: restored
    assert done.returncode == 0, done.stderr
    assert _messages(target.url) == 12


def test_a_restores_policy_refusal_is_applys_and_a_warning_is_shown(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    """The same rule refuses an apply of the specs and a restore of their backup into a
    fresh server with the same words (one verdict); at level warn the restore's plan
    shows the finding and restores."""
    out = _backup(clean_server, tmp_path)
    policy = tmp_path / "policy.yaml"
    policy.write_text(DENY)
    by_apply = server_factory()
    applied = reconcile(
        "apply", str(tmp_path / "specs"), "--server", by_apply.url, "--yes", "--policy",
        str(policy), cwd=tmp_path,
    )  # fmt: skip
    target = server_factory()
    args = ("restore", str(out), "--server", target.url, "--yes", "--policy", str(policy))
    restored = reconcile(*args, cwd=tmp_path)
    assert applied.returncode == restored.returncode == 3
    refusal = [line for line in applied.stderr.splitlines() if "three-replicas" in line]
    assert refusal and refusal == [
        line for line in restored.stderr.splitlines() if "three-replicas" in line
    ]
    assert run(_user_streams(target)) == run(_user_streams(by_apply)) == []

    policy.write_text(DENY.replace("level: deny", "level: warn"))
    warned = reconcile(*args, cwd=tmp_path)
    assert warned.returncode == 0, warned.stderr
    assert "policy warn three-replicas: Stream ORDERS (create)" in warned.stdout
    assert _messages(target.url) == 12


def test_an_observed_environment_is_never_restored_into(
    clean_server: NatsServer, server_factory: Any, tmp_path: Path
) -> None:
    out = _backup(clean_server, tmp_path)
    target = server_factory()
    _project(tmp_path, target.url, "{mode: observe}")
    refused = reconcile("restore", str(out), "--env", "prod", "--yes", cwd=tmp_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "mode observe" in refused.stderr and "reconcile.yaml:6" in refused.stderr
    assert run(_user_streams(target)) == []
