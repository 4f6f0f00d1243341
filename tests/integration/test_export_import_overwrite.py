"""``reconcile export --out DIR`` and ``reconcile import ... --out DIR`` replace only the
files one of them wrote (the header says so): exporting again refreshes the folder; a
file of the same name written by hand is refused with one error naming it, nothing
written at all, unless ``--overwrite`` (one rule: ``export_cmd.refuse_foreign``). Both
replaced such a file without a word before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, run

from reconciler.jetstream import ConnectionOptions, open_client

pytestmark = pytest.mark.integration

MINE = "# my own notes on ORDERS, kept by hand\nkind: Stream\nname: ORDERS\n"


async def _create(url: str, names: list[str]) -> None:
    async with open_client(ConnectionOptions(servers=url)) as client:
        for name in names:
            await client.create_stream({"name": name, "subjects": [f"{name.lower()}.>"]})


def test_export_again_refreshes_its_files_and_refuses_a_hand_written_one(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    run(_create(clean_server.url, ["ORDERS", "SHIPPING"]))
    server = ("--server", clean_server.url)
    out = tmp_path / "specs"
    first = reconcile("export", "--out", str(out), *server, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = reconcile("export", "--out", str(out), *server, cwd=tmp_path)  # the refresh
    assert again.returncode == 0, again.stderr
    assert "exported 2 file(s)" in again.stderr

    (out / "stream-ORDERS.yaml").write_text(MINE)
    (out / "stream-SHIPPING.yaml").unlink()
    refused = reconcile("export", "--out", str(out), *server, cwd=tmp_path)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert str(out / "stream-ORDERS.yaml") in refused.stderr
    assert "--overwrite" in refused.stderr and "nothing was written" in refused.stderr
    assert (out / "stream-ORDERS.yaml").read_text() == MINE
    assert not (out / "stream-SHIPPING.yaml").exists()  # checked before writing any

    forced = reconcile("export", "--out", str(out), "--overwrite", *server, cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "name: ORDERS" in (out / "stream-ORDERS.yaml").read_text()
    assert "by hand" not in (out / "stream-ORDERS.yaml").read_text()
    assert (out / "stream-SHIPPING.yaml").exists()


def test_import_refuses_a_hand_written_file_the_same_way(tmp_path: Path) -> None:
    source = tmp_path / "natscli"
    source.mkdir()
    for name in ("ORDERS", "MEM"):  # the nats CLI's config files (its file name says so)
        config = {"name": name, "subjects": [f"{name}.*"], "retention": "limits"}
        (source / f"{name}_config.json").write_text(json.dumps(config))
    command = ("import", "--from", "nats-cli", "natscli", "--out", "specs")
    assert reconcile(*command, cwd=tmp_path).returncode == 0
    again = reconcile(*command, cwd=tmp_path)
    assert again.returncode == 0, again.stderr

    specs = tmp_path / "specs"
    (specs / "stream-ORDERS.yaml").write_text(MINE)
    (specs / "stream-MEM.yaml").unlink()
    refused = reconcile(*command, cwd=tmp_path)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert str(Path("specs") / "stream-ORDERS.yaml") in refused.stderr
    assert (specs / "stream-ORDERS.yaml").read_text() == MINE
    assert not (specs / "stream-MEM.yaml").exists()

    forced = reconcile(*command, "--overwrite", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "imported by `reconcile import`" in (specs / "stream-ORDERS.yaml").read_text()


ACCOUNT = """\
apiVersion: jetstream.nats.io/v1beta2
kind: Account
metadata:
  name: team-a
spec:
  servers: ["nats://127.0.0.1:4222"]
---
apiVersion: jetstream.nats.io/v1beta2
kind: Stream
metadata:
  name: orders
spec:
  account: team-a
  name: ORDERS
  subjects: ["orders.>"]
---
apiVersion: jetstream.nats.io/v1beta2
kind: Stream
metadata:
  name: shared
spec:
  name: SHARED
  subjects: ["shared.>"]
"""


def test_nack_checks_every_folder_before_it_writes_any(tmp_path: Path) -> None:
    """A hand-written file in an Account's folder: the shared folder is not written
    either, nor the project file changed."""
    (tmp_path / "k8s.yaml").write_text(ACCOUNT)
    project = "specs: [specs]\nenvironments:\n  dev:\n    embedded: true\n"
    (tmp_path / "reconcile.yaml").write_text(project)
    (tmp_path / "specs-team-a").mkdir()
    (tmp_path / "specs-team-a" / "stream-ORDERS.yaml").write_text(MINE)
    done = reconcile("import", "--from", "nack", "k8s.yaml", "--out", "specs", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert str(Path("specs-team-a") / "stream-ORDERS.yaml") in done.stderr
    assert not (tmp_path / "specs").exists()
    assert (tmp_path / "reconcile.yaml").read_text() == project
