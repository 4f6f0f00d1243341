"""A restore refused because the server holds a stream of the backup's name that
differs from it names every difference, on the stream's one line (the first few dozen,
then how many more): a user cannot fix what is not named."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from test_lifecycle import _info, _publish, _request

from reconciler.backup.restore_plan import DIFFERENCES_SHOWN

pytestmark = pytest.mark.integration

CONSUMERS = 30


def _backed_up(server: NatsServer, tmp_path: Path) -> Path:
    """ORDERS with 10 messages and :data:`CONSUMERS` consumers, backed up."""
    consumers = "".join(
        f"---\nkind: Consumer\nstream: ORDERS\nname: c{n:02}\nack_policy: explicit\n"
        for n in range(CONSUMERS)
    )
    specs = tmp_path / "specs.yaml"
    specs.write_text('kind: Stream\nname: ORDERS\nsubjects: ["orders.>"]\n' + consumers)
    done = reconcile("apply", str(specs), "--server", server.url, "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run(_publish(server.url, "orders.new", 10))
    out = tmp_path / "backup"
    taken = reconcile("backup", str(specs), "--out", str(out), "--server", server.url, cwd=tmp_path)
    assert taken.returncode == 0, taken.stderr
    return out


def _refused_line(server: NatsServer, out: Path, tmp_path: Path) -> str:
    """The restore's refusal, nothing changed: the line naming ORDERS."""
    before = _info(server.url, "ORDERS")["state"]
    result = reconcile("restore", str(out), "--server", server.url, "--yes", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "differ from the backup" in result.stderr
    assert _info(server.url, "ORDERS")["state"] == before
    lines = [line for line in result.stderr.splitlines() if line.startswith("  ORDERS: ")]
    assert len(lines) == 1, result.stderr  # one line per stream
    return lines[0]


def test_a_refused_restore_names_every_difference(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Hole: the refusal named the first difference and "(and N more)": the last
    sequence was named, the 3 consumers someone deleted were not. Each is named now."""
    server = server_factory()
    out = _backed_up(server, tmp_path)
    run(_publish(server.url, "orders.new", 5))
    for n in (3, 17, 29):
        reply = run(_request(server.url, f"$JS.API.CONSUMER.DELETE.ORDERS.c{n:02}"))
        assert reply.get("success"), reply

    line = _refused_line(server, out, tmp_path)
    assert "messages is 15, the backup has 10" in line, line
    assert "last_seq is 15, the backup has 10" in line, line
    for n in (3, 17, 29):
        assert f"consumer c{n:02} is missing" in line, line
    assert "more" not in line, line


def test_a_refused_restore_names_the_first_few_dozen_differences_and_counts_the_rest(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Every consumer deleted and messages added: more differences than a line holds
    well. The first :data:`DIFFERENCES_SHOWN` are named, then how many more."""
    server = server_factory()
    out = _backed_up(server, tmp_path)
    run(_publish(server.url, "orders.new", 5))
    for n in range(CONSUMERS):
        assert run(_request(server.url, f"$JS.API.CONSUMER.DELETE.ORDERS.c{n:02}"))["success"]

    line = _refused_line(server, out, tmp_path)
    named = line.removeprefix("  ORDERS: ").split("; ")
    total = int(line.rsplit("(", 1)[1].split()[0])
    assert total > DIFFERENCES_SHOWN and len(named) == DIFFERENCES_SHOWN + 1, line
    assert named[-1] == f"and {total - DIFFERENCES_SHOWN} more ({total} differences)", line
    assert "consumer c00 is missing" in named and "last_seq is 15, the backup has 10" in named
