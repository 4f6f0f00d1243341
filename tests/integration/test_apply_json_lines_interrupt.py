"""``apply --format json`` stays JSON Lines whatever the server holds (a forged owner's
line separators and terminal controls are escaped), and when Ctrl-C arrives while a line
is being written: a reader slower than the apply (``| jq`` on a busy runner) fills the pipe, the
plan line's write blocks, and SIGINT then made CPython's buffered stdout drop the rest of
that line (the first step record was glued to half a plan). Against a real nats-server;
the streams the result line says were applied are counted on the server."""

from __future__ import annotations

import fcntl
import json
import signal
import struct
import termios
import time
from pathlib import Path

import nats
from cli_runner import reconcile, started
from servers import NatsServer, run

from reconciler.specs.spec import MANAGED_KEY, MANAGED_VALUE, OWNER_KEY

#: Bytes a Linux pipe holds by default: the plan line is bigger, so its write blocks.
PIPE_BYTES = 65_536


def _specs(folder: Path) -> Path:
    folder.mkdir()
    described = "d" * 2_000  # 60 streams, a plan line of about 150 KB
    docs = [
        f"kind: Stream\nname: SIG{i:02d}\nsubjects: [sig{i:02d}.>]\ndescription: {described}\n"
        for i in range(60)
    ]
    (folder / "streams.yaml").write_text("---\n".join(docs), encoding="utf-8")
    return folder


def _queued(fd: int) -> int:
    """Bytes waiting in the pipe behind ``fd``."""
    raw = fcntl.ioctl(fd, termios.FIONREAD, struct.pack("i", 0))
    return int(struct.unpack("i", raw)[0])


async def _streams(url: str) -> set[str]:
    """The streams the apply made (its lock bucket left out)."""
    nc = await nats.connect(url)
    try:
        info = await nc.request("$JS.API.STREAM.NAMES", b"{}", timeout=5)
        names = json.loads(info.data).get("streams") or []
        return {name for name in names if name.startswith("SIG")}
    finally:
        await nc.close()


def test_ctrl_c_while_the_plan_line_is_blocked_keeps_every_line_json(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    specs = _specs(tmp_path / "specs")
    args = ["apply", str(specs), "--server", clean_server.url, "-y", "--format", "json"]
    child = started(*args, cwd=tmp_path, text=False)
    assert child.stdout is not None
    deadline = time.monotonic() + 60
    while _queued(child.stdout.fileno()) < PIPE_BYTES:  # the plan line's write is blocked
        assert child.poll() is None and time.monotonic() < deadline, child.stderr
        time.sleep(0.02)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    lines = out.decode("utf-8").splitlines()
    records = [json.loads(line) for line in lines]  # every line is one JSON document
    assert records[0]["type"] == "plan" and records[0]["plan"]["summary"]["create"] == 60
    assert {r["type"] for r in records[1:-1]} <= {"step"}
    result = records[-1]
    assert result["type"] == "result" and result["interrupted"] is True, err
    assert result["applied"] + result["skipped"] + result["failed"] == 60
    assert child.returncode == 130
    applied = {r["name"] for r in records[1:-1] if r["outcome"] == "applied"}
    assert len(applied) == result["applied"]
    assert run(_streams(clean_server.url)) == applied


async def _forged_foreign_stream(url: str, owner: str, description: str) -> None:
    """A stream someone stamped with another owner's marker: its owner and description
    are the server's words, anyone's."""
    config = {
        "name": "FORGED",
        "subjects": ["forged.>"],
        "description": description,
        "metadata": {MANAGED_KEY: MANAGED_VALUE, OWNER_KEY: owner},
    }
    nc = await nats.connect(url)
    try:
        reply = await nc.request("$JS.API.STREAM.CREATE.FORGED", json.dumps(config).encode())
        assert "error" not in json.loads(reply.data)
    finally:
        await nc.close()


def test_a_forged_owner_cannot_split_a_json_line_or_reach_the_terminal(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    owner = "team\u2028{}\x85\u2029\x9b2J\u202eevil\x1c"
    run(_forged_foreign_stream(clean_server.url, owner, owner))
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "s.yaml").write_text("kind: Stream\nname: MINE\nsubjects: [mine.>]\n", "utf-8")
    args = ["apply", str(specs), "--server", clean_server.url, "-y", "--format", "json"]
    done = reconcile(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]  # str.splitlines
    assert [r["type"] for r in records] == ["plan", "step", "result"]
    assert records[0]["plan"]["foreign"][0]["owner"] == owner  # read back exactly
    for raw in ("\u2028", "\u2029", "\x85", "\x9b", "\u202e", "\x1c"):
        assert raw not in done.stdout
