"""Export loses nothing and writes only where asked: one file per resource whatever its
name, never through a symlink, long names handled, the count true, and applying the
export (even with --prune) deletes nothing. On a real nats-server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness import reconcile
from servers import NatsServer, run

from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.planning.export import name_of_file

pytestmark = pytest.mark.integration

NAMES = ["A+B", "A_B", "A:B", "A|B", "A%B", "Ä-ü", "L" * 250]


async def _create(url: str, names: list[str]) -> None:
    async with open_client(ConnectionOptions(servers=url)) as client:
        for index, name in enumerate(names):
            await client.create_stream({"name": name, "subjects": [f"export.{index}.>"]})
            await client.publish(f"export.{index}.m", b"kept")


async def _state(url: str) -> dict[str, int]:
    async with open_client(ConnectionOptions(servers=url)) as client:
        return {
            i["config"]["name"]: int(i["state"]["messages"])
            for i in await client.list_streams()
            if not i["config"]["name"].startswith("KV_")
        }


def export(server: NatsServer, out: Path) -> Any:
    return reconcile("export", "--out", str(out), "--server", server.url)


def test_every_stream_gets_its_own_file_and_the_export_plans_empty(
    clean_server: NatsServer, tmp_path: Path, figures
) -> None:
    run(_create(clean_server.url, NAMES))
    out = tmp_path / "out"
    done = export(clean_server, out)
    assert done.returncode == 0, done.stderr
    files = sorted(p.name for p in out.glob("*.yaml"))
    assert len(files) == len(NAMES)
    assert f"exported {len(NAMES)} file(s)" in done.stderr
    readable = {name_of_file(f) for f in files} - {None}
    assert readable == {("Stream", n) for n in NAMES if len(n) < 100}
    assert all(len(f.encode()) <= 255 for f in files)
    figures.add("export_files", len(files))
    plan = reconcile("plan", str(out), "--server", clean_server.url, "--format", "json")
    assert plan.returncode == 0, plan.stderr
    changes = json.loads(plan.stdout)["changes"]
    assert all(
        c["action"] == "update" and c["fields"][0]["path"].startswith("metadata") for c in changes
    )


def test_applying_an_export_with_prune_deletes_nothing(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    run(_create(clean_server.url, NAMES[:4]))
    before = run(_state(clean_server.url))
    out = tmp_path / "out"
    assert export(clean_server, out).returncode == 0
    done = reconcile("apply", "-y", str(out), "--prune", "--allow-data-loss", "--server",
                     clean_server.url)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert run(_state(clean_server.url)) == before


def test_a_symlink_in_the_output_folder_is_replaced_never_written_through(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Refused without --overwrite (export did not write it); replaced with it."""
    run(_create(clean_server.url, ["A_B"]))
    outside = tmp_path / "outside.txt"
    outside.write_text("do not touch")
    out = tmp_path / "out"
    out.mkdir()
    (out / "stream-A_B.yaml").symlink_to(outside)
    refused = export(clean_server, out)
    assert refused.returncode == 1 and "stream-A_B.yaml (a symbolic link)" in refused.stderr
    assert (out / "stream-A_B.yaml").is_symlink()
    done = reconcile("export", "--out", str(out), "--overwrite", "--server", clean_server.url)
    assert done.returncode == 0, done.stderr
    assert outside.read_text() == "do not touch"
    written = out / "stream-A_B.yaml"
    assert not written.is_symlink() and "name: A_B" in written.read_text()
    assert not list(out.glob(".export-*"))  # no temporary file left behind


def test_an_unwritable_folder_is_a_clear_error(clean_server: NatsServer, tmp_path: Path) -> None:
    run(_create(clean_server.url, ["A_B"]))
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = export(clean_server, blocker / "out")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert str(blocker / "out") in done.stderr


def test_exported_files_name_no_path_of_the_exporting_machine(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    run(_create(clean_server.url, ["A_B"]))
    out = tmp_path / "out"
    assert export(clean_server, out).returncode == 0
    text = (out / "stream-A_B.yaml").read_text()
    assert "file://" not in text and str(Path.home()) not in text and "/work/" not in text
    assert "$schema=https://" in text
