"""NACK manifests of several Accounts (issue 35): each Account's streams and consumers go
to that Account's environment only (its own ``resources`` folder), never into the specs
every environment shares; applied per environment to two real servers, each holds its
own. And an ``ackWait`` the server keeps as written although it redelivers at once
(NACK's CRD default ``1ns``) is a warning at its line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import nats
import yaml
from cli_runner import reconcile
from servers import NatsServer, run

ACCOUNT = """\
apiVersion: jetstream.nats.io/v1beta2
kind: Account
metadata:
  name: {name}
spec:
  servers: ["{url}"]
---
"""
STREAM = """\
apiVersion: jetstream.nats.io/v1beta2
kind: Stream
metadata:
  name: orders-{team}
spec:
  account: {team}
  name: ORDERS
  subjects: ["{team}.orders.>"]
  storage: file
---
apiVersion: jetstream.nats.io/v1beta2
kind: Consumer
metadata:
  name: ship-{team}
spec:
  account: {team}
  streamName: ORDERS
  durableName: SHIP
  ackPolicy: explicit
  ackWait: 30s
---
"""


async def _streams(url: str) -> dict[str, list[str]]:
    nc = await nats.connect(url)
    try:
        reply = await nc.request("$JS.API.STREAM.LIST", b"{}")
        streams = json.loads(reply.data)["streams"] or []
        configs = [s["config"] for s in streams]
        return {c["name"]: c["subjects"] for c in configs if c["name"] != "KV_RECONCILE_LOCKS"}
    finally:
        await nc.close()


def test_each_accounts_streams_go_to_its_own_environment_only(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    servers = {team: server_factory() for team in ("team-a", "team-b")}
    manifests = tmp_path / "k8s"
    manifests.mkdir()
    for team, server in servers.items():
        (manifests / f"{team}.yaml").write_text(
            ACCOUNT.format(name=team, url=server.url) + STREAM.format(team=team)
        )
    (tmp_path / "reconcile.yaml").write_text(
        "specs: [specs]\nenvironments:\n  dev:\n    embedded: true\n"
    )
    done = reconcile("import", "--from", "nack", "k8s", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "specs").exists()  # nothing shared: no empty folder made
    assert "reconcile.yaml shares specs with every environment" in done.stderr
    (tmp_path / "specs").mkdir()  # as it says: the project names it
    project = yaml.safe_load((tmp_path / "reconcile.yaml").read_text())
    for team in servers:
        assert project["environments"][team]["resources"] == [f"specs-{team}"]
        written = yaml.safe_load_all(
            (tmp_path / f"specs-{team}" / "stream-ORDERS.yaml").read_text()
        )
        assert [d["kind"] for d in written if d] == ["Stream", "Consumer"]
    for team, server in servers.items():
        applied = reconcile("apply", "--env", team, "--yes", cwd=tmp_path)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert run(_streams(server.url)) == {"ORDERS": [f"{team}.orders.>"]}
        again = reconcile("plan", "--env", team, "--detailed-exitcode", cwd=tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr


def test_when_every_resource_names_an_account_no_empty_out_folder_is_made(
    tmp_path: Path,
) -> None:
    """``--out specs`` when no resource is shared: it made ``specs/`` empty and said
    ``imported 0 file(s) to specs``. Now it says what went where and makes no folder."""
    manifests = tmp_path / "k8s"
    manifests.mkdir()
    for team in ("team-a", "team-b"):
        text = ACCOUNT.format(name=team, url="nats://127.0.0.1:4222") + STREAM.format(team=team)
        (manifests / f"{team}.yaml").write_text(text)
    done = reconcile("import", "--from", "nack", "k8s", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "specs").exists()
    assert "imported 0 file(s)" not in done.stderr
    assert "nothing imported into specs: every resource names an Account" in done.stderr
    for team in ("team-a", "team-b"):
        assert f"imported 1 file(s) to specs-{team}" in done.stderr
        assert (tmp_path / f"specs-{team}" / "stream-ORDERS.yaml").exists()
    assert "shares specs" not in done.stderr  # no project file names it


def test_accounts_alone_write_no_folder_and_say_so(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(ACCOUNT.format(name="team-a", url="nats://127.0.0.1:4222"))
    done = reconcile("import", "--from", "nack", "a.yaml", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "a.yaml"]
    assert "imported 0 file(s)" not in done.stderr
    assert "nothing imported into specs: the files hold NACK Accounts only" in done.stderr
    assert "1 NACK Account(s) found" in done.stderr


def test_account_specs_inside_the_shared_specs_are_refused_before_writing(
    tmp_path: Path,
) -> None:
    manifests = tmp_path / "k8s"
    manifests.mkdir()
    for team in ("team-a", "team-b"):
        text = ACCOUNT.format(name=team, url="nats://127.0.0.1:4222") + STREAM.format(team=team)
        (manifests / f"{team}.yaml").write_text(text)
    project = "specs: [.]\nenvironments:\n  dev:\n    embedded: true\n"
    (tmp_path / "reconcile.yaml").write_text(project)
    done = reconcile("import", "--from", "nack", "k8s", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "shares with every environment" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "specs").exists() and not (tmp_path / "specs-team-a").exists()
    assert (tmp_path / "reconcile.yaml").read_text() == project


def test_a_resource_naming_an_account_not_in_the_manifests_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(STREAM.format(team="team-x"))
    done = reconcile("import", "--from", "nack", "s.yaml", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1
    assert "s.yaml:6: account: Account 'team-x' is not among the manifests" in done.stderr
    assert not (tmp_path / "specs").exists()


def test_an_ack_wait_the_server_keeps_although_it_redelivers_at_once_warns(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    (tmp_path / "c.yaml").write_text(
        (Path(__file__).resolve().parents[1] / "data" / "nack" / "stream.yml").read_text()
        + "\n"
        + (Path(__file__).resolve().parents[1] / "data" / "nack" / "consumer_pull.yml").read_text()
    )
    done = reconcile("import", "--from", "nack", "c.yaml", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "c.yaml:" in done.stderr and "ackWait 1ns" in done.stderr, done.stderr
    assert "redelivered" in done.stderr
    # the server keeps 1ns as written: no rounding to save the consumer (measured)
    server = ["--server", clean_server.url]
    assert reconcile("apply", "specs", *server, "--yes", cwd=tmp_path).returncode == 0

    async def ack_wait() -> int:
        nc = await nats.connect(clean_server.url)
        try:
            reply = await nc.request("$JS.API.CONSUMER.INFO.mystream.my-pull-consumer", b"")
            return int(json.loads(reply.data)["config"]["ack_wait"])
        finally:
            await nc.close()

    assert run(ack_wait()) == 1
