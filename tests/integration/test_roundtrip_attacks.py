"""Attacks on what other tools made round-tripping (issue 35): each test failed before
its fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import reconcile

_ACCOUNT = """\
apiVersion: jetstream.nats.io/v1beta2
kind: Account
metadata:
  name: {name!r}
spec:
  servers: ["nats://127.0.0.1:4222"]
---
apiVersion: jetstream.nats.io/v1beta2
kind: Stream
metadata:
  name: orders
spec:
  account: {name!r}
  name: ORDERS
  subjects: ["a.>"]
"""


@pytest.mark.parametrize("name", ["../../evil", "a/b", "Team", "tëam", "..", "a..b", ""])
def test_a_nack_account_name_kubernetes_refuses_is_refused_before_writing(
    tmp_path: Path, name: str
) -> None:
    """An Account's name becomes a folder (``OUT-<name>``) and an environment: a name
    Kubernetes never stores (not an RFC 1123 subdomain) wrote ``../../evil`` outside
    ``--out``'s folder; uppercase and unicode names collide on case-insensitive disks."""
    work = tmp_path / "work"
    (work / "k8s").mkdir(parents=True)
    (work / "k8s" / "a.yaml").write_text(_ACCOUNT.format(name=name))
    done = reconcile("import", "--from", "nack", "k8s", "--out", "specs", cwd=work)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "a.yaml:4: metadata.name:" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["a.yaml"]
