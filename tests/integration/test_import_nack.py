"""``reconcile import --from nack``: NACK's manifests become specs whose first plan, on a
server configured as NACK's controller configures it, changes nothing but the marker.

Test data: NACK's published examples (tests/data/nack, origin in its README). The server
side is configured with the JSON NACK's controller sends. It is written out here from
NACK's ``streamSpecToConfig`` / ``consumerSpecToConfig``, the CRD defaults and jsm.go's
templates, not computed by the importer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, run

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "nack"
SECOND = 1_000_000_000
YEAR = 365 * 24 * 3600 * SECOND
#: jsm.go's DefaultStream, which NACK creates streams from.
TEMPLATE = {
    "retention": "limits",
    "discard": "old",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_msgs_per_subject": -1,
    "max_bytes": -1,
    "max_age": YEAR,
    "max_msg_size": -1,
    "num_replicas": 1,
}
STREAMS = [
    {
        **TEMPLATE,
        "name": "mystream",
        "subjects": ["orders.*"],
        "storage": "file",
        "max_age": 3600 * SECOND,
    },
    {
        **TEMPLATE,
        "name": "mystream-sources",
        "storage": "file",
        "sources": [{"name": "m1"}, {"name": "m2"}],
    },
    {
        **TEMPLATE,
        "name": "mystream-mirror",
        "storage": "file",
        "mirror": {
            "name": "my-publish-subj",
            "external": {"api": "FOO.JS.API", "deliver": "FOO.DELIVER.SYNC.MIRRORS"},
        },
    },
    {
        **TEMPLATE,
        "name": "OLD",
        "subjects": ["old.>"],
        "storage": "memory",
        "duplicate_window": 90 * SECOND,
    },
]
CONSUMERS = [
    {  # consumer_pull.yml: the CRD's ackWait default is 1ns
        "durable_name": "my-pull-consumer",
        "deliver_policy": "all",
        "ack_policy": "explicit",
        "ack_wait": 1,
        "replay_policy": "instant",
        "filter_subject": "orders.received",
        "max_deliver": 20,
    },
    {  # consumer_push.yml
        "durable_name": "my-push-consumer",
        "deliver_subject": "my-push-consumer.orders",
        "deliver_policy": "last",
        "ack_policy": "none",
        "ack_wait": 1,
        "replay_policy": "instant",
        "description": "my consumer description",
        "flow_control": True,
        "idle_heartbeat": SECOND,
    },
]
#: A manifest of NACK's first API version, written for this test in its v1beta1 shape.
V1BETA1 = """\
apiVersion: jetstream.nats.io/v1beta1
kind: Stream
metadata:
  name: old
spec:
  name: OLD
  subjects: ["old.>"]
  duplicateWindow: 1m30s
---
apiVersion: jetstream.nats.io/v1beta2
kind: Account
metadata:
  name: team-a
spec:
  servers: ["nats://nats:4222"]
  creds:
    secret:
      name: team-a-creds
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: unrelated
data: {}
"""


async def configure_as_nack_does(url: str) -> None:
    import nats

    nc = await nats.connect(url)
    try:
        for stream in STREAMS:
            reply = await nc.request(
                f"$JS.API.STREAM.CREATE.{stream['name']}", json.dumps(stream).encode()
            )
            assert "error" not in json.loads(reply.data), reply.data
        for config in CONSUMERS:
            body = {"stream_name": "mystream", "config": config}
            subject = f"$JS.API.CONSUMER.CREATE.mystream.{config['durable_name']}"
            reply = await nc.request(subject, json.dumps(body).encode())
            assert "error" not in json.loads(reply.data), reply.data
    finally:
        await nc.close()


def test_nacks_examples_and_a_v1beta1_stream_import_and_plan_nothing_but_the_marker(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    run(configure_as_nack_does(clean_server.url))
    manifests = tmp_path / "k8s"
    manifests.mkdir()
    for name in ("stream", "consumer_pull", "consumer_push", "stream_sources", "stream_mirror"):
        (manifests / f"{name}.yml").write_text((DATA / f"{name}.yml").read_text())
    (manifests / "old.yaml").write_text(V1BETA1)
    project = tmp_path / "reconcile.yaml"
    project.write_text(
        "# the platform team's project\nspecs: [specs]\nenvironments:\n"
        "  dev:\n    embedded: true  # local\n"
    )
    imported = reconcile("import", "--from", "nack", "k8s", "--out", "specs", cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert (
        "k8s/old.yaml:16: warning: creds: Account team-a: set NACK_TEAM_A_CREDS_FILE"
        in imported.stderr
    )
    assert "added environment(s) team-a to reconcile.yaml" in imported.stderr
    skipped = [line for line in imported.stderr.splitlines() if "'unrelated'" in line]
    assert len(skipped) == 1 and skipped[0].startswith("k8s/old.yaml:"), imported.stderr
    assert "ConfigMap" in skipped[0] and "skipped" in skipped[0]
    text = project.read_text()
    assert text.startswith("# the platform team's project\n") and "embedded: true  # local" in text
    envs = reconcile("envs", cwd=tmp_path)
    assert envs.returncode == 0, envs.stderr
    assert "team-a" in envs.stdout and "nats://nats:4222" in envs.stdout
    written = (tmp_path / "specs" / "stream-mystream.yaml").read_text()
    assert "max_age: 1h" in written and "ack_wait: 1ns" in written
    assert "managed-by" not in written
    assert "max_age: 365d" in (tmp_path / "specs" / "stream-OLD.yaml").read_text()

    plan = reconcile(
        "plan", "specs", "--server", clean_server.url, "--format", "json", cwd=tmp_path
    )
    assert plan.returncode == 0, plan.stderr
    changes = json.loads(plan.stdout)["changes"]
    assert len(changes) == 6, changes
    for change in changes:  # adoption only: the marker, nothing else
        assert change["action"] == "update", change
        assert {f["path"].split(".")[0] for f in change["fields"]} == {"metadata"}, change
    assert (
        reconcile("apply", "specs", "--server", clean_server.url, "-y", cwd=tmp_path).returncode
        == 0
    )
    again = reconcile(
        "plan", "specs", "--server", clean_server.url, "--detailed-exitcode", cwd=tmp_path
    )
    assert again.returncode == 0, again.stdout


def test_a_bad_go_duration_is_reported_at_its_line(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "apiVersion: jetstream.nats.io/v1beta2\nkind: Stream\nmetadata: {name: s}\n"
        "spec:\n  name: S\n  subjects: [s]\n  maxAge: 1 day\n"
    )
    done = reconcile("import", "--from", "nack", "s.yaml", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1
    assert "s.yaml:7: maxAge: '1 day' is not a Go duration" in done.stderr, done.stderr
    assert not (tmp_path / "specs").exists()


def account(name: str, namespace: str = "default") -> str:
    """A NACK Account whose password is kept in a Kubernetes Secret."""
    return (
        "apiVersion: jetstream.nats.io/v1beta2\nkind: Account\n"
        f"metadata:\n  name: {name}\n  namespace: {namespace}\n"
        "spec:\n  servers: [nats://nats:4222]\n"
        f"  user:\n    user: {name}\n    secret:\n      name: {name}-password\n"
    )


def test_accounts_whose_names_derive_one_variable_are_refused_naming_both(
    tmp_path: Path,
) -> None:
    """team-a and team.a both gave NACK_TEAM_A_PASSWORD: one team's password for both."""
    (tmp_path / "a.yaml").write_text(account("team-a"))
    (tmp_path / "b.yaml").write_text(account("team.a"))
    project = tmp_path / "reconcile.yaml"
    project.write_text("specs: [specs]\n")
    done = reconcile("import", "--from", "nack", "a.yaml", "b.yaml", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert (
        "b.yaml:4: metadata.name: Accounts 'team-a' (a.yaml:4) and 'team.a' both derive the "
        "environment variable NACK_TEAM_A_PASSWORD" in done.stderr
    ), done.stderr
    assert "Traceback" not in done.stderr
    assert project.read_text() == "specs: [specs]\n"  # no environment added


def test_two_accounts_of_one_name_are_refused_naming_both(tmp_path: Path) -> None:
    """One name in two namespaces: the second silently replaced the first environment."""
    (tmp_path / "accounts.yaml").write_text(
        account("team-a", "east") + "---\n" + account("team-a", "west")
    )
    done = reconcile("import", "--from", "nack", "accounts.yaml", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert (
        "accounts.yaml:16: metadata.name: a second Account named 'team-a' (the first is at "
        "accounts.yaml:4)" in done.stderr
    ), done.stderr
    assert "environments:" not in done.stderr
