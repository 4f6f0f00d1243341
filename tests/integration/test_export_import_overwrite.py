"""``reconcile export --out DIR`` and ``reconcile import ... --out DIR`` replace only the
files one of them wrote (the header says so): exporting again refreshes the folder; a
file of the same name written by hand is refused with one error naming it, nothing
written at all, unless ``--overwrite`` (one rule: ``export_cmd.refuse_foreign``). Both
replaced such a file without a word before, and one that appeared between the check and
the write until the write applied the rule again (``export_cmd.write_folders``)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer, run

from reconciler.cli import export_cmd
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


def _in_process(
    *args: str, cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """``reconcile ARGS`` run in this process (so a test can reach the seam between the
    check and the write), in the environment :func:`reconcile` gives it: exit status and
    standard error."""
    from reconciler.cli import main

    monkeypatch.chdir(cwd)
    for variable in [v for v in os.environ if v.startswith(("NATS_", "RECONCILE_"))]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("NO_COLOR", "1")
    capsys.readouterr()
    with pytest.raises(SystemExit) as ended:
        main(list(args))
    return int(ended.value.code or 0), capsys.readouterr().err


def _after_the_check(monkeypatch: pytest.MonkeyPatch, plant: Callable[[], None]) -> None:
    """``plant`` runs once every folder is checked, before any file is written."""
    check = export_cmd.refuse_foreign

    def checked_then_planted(*args: Any, **kwargs: Any) -> None:
        check(*args, **kwargs)
        plant()

    monkeypatch.setattr(export_cmd, "refuse_foreign", checked_then_planted)


@pytest.mark.parametrize("planted", ["a file", "a link"])
def test_export_refuses_a_file_or_a_link_appearing_after_its_check(
    clean_server: NatsServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    planted: str,
) -> None:
    """A name free at the check, taken before the write (a hand-written file, a link to
    a file outside): refused as the check refuses it, never replaced nor followed; no
    temporary file stays. Both were replaced before."""
    run(_create(clean_server.url, ["ORDERS"]))
    out, outside = tmp_path / "specs", tmp_path / "outside.txt"
    outside.write_text("not yours")
    taken = out / "stream-ORDERS.yaml"

    def plant() -> None:
        out.mkdir()
        if planted == "a file":
            taken.write_text(MINE)
        else:
            taken.symlink_to(outside)

    _after_the_check(monkeypatch, plant)
    export = ("export", "--out", str(out), "--server", clean_server.url)
    code, said = _in_process(*export, cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and "Traceback" not in said and len(said.strip().splitlines()) == 1
    assert f"{taken} (" in said and "--overwrite" in said and "nothing was written" in said
    assert [p.name for p in out.iterdir()] == ["stream-ORDERS.yaml"]  # no temporary file
    assert outside.read_text() == "not yours"
    if planted == "a file":
        assert taken.read_text() == MINE
    else:
        assert taken.is_symlink() and os.readlink(taken) == str(outside)


def test_export_refuses_its_own_file_replaced_by_a_hand_written_one_after_its_check(
    clean_server: NatsServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A file export wrote, ours at the check, someone's own at the write: kept as it
    is (its text and its inode), the refusal naming it."""
    run(_create(clean_server.url, ["ORDERS"]))
    out = tmp_path / "specs"
    export = ("export", "--out", str(out), "--server", clean_server.url)
    assert _in_process(*export, cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)[0] == 0
    mine = out / "stream-ORDERS.yaml"
    inode: list[int] = []

    def plant() -> None:
        mine.unlink()
        mine.write_text(MINE)
        inode.append(mine.stat().st_ino)

    _after_the_check(monkeypatch, plant)
    code, said = _in_process(*export, cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and f"{mine} (no header" in said and "nothing was written" in said, said
    assert mine.read_text() == MINE and mine.stat().st_ino == inode[0]
    assert sorted(p.name for p in out.iterdir()) == ["stream-ORDERS.yaml"]


def test_a_nack_import_refuses_a_file_appearing_in_an_account_folder_after_its_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Import writes with the same rule: the shared folder is written, then the file
    planted in the Account's folder is refused and kept, the error saying what was
    written."""
    (tmp_path / "k8s.yaml").write_text(ACCOUNT)
    own = tmp_path / "specs-team-a" / "stream-ORDERS.yaml"

    def plant() -> None:
        own.parent.mkdir()
        own.write_text(MINE)

    _after_the_check(monkeypatch, plant)
    command = ("import", "--from", "nack", "k8s.yaml", "--out", "specs")
    code, said = _in_process(*command, cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 1 and str(Path("specs-team-a") / "stream-ORDERS.yaml") in said, said
    assert "1 file(s) were written" in said and "--overwrite" in said
    assert own.read_text() == MINE
    assert sorted(p.name for p in own.parent.iterdir()) == ["stream-ORDERS.yaml"]
