"""`reconcile apply` as a person meets it at a real terminal (a pseudo-terminal): the plan,
a question that only 'yes' answers, one completion line per step, colours unless NO_COLOR.
Without a terminal it never asks (the other e2e and integration tests run that way)."""

from __future__ import annotations

import functools
import os
import signal
from pathlib import Path

import pytest
from servers import NatsServer, run
from terminal import QUESTION
from terminal import Terminal as PlainTerminal

from reconciler.jetstream import ConnectionOptions, open_client

#: This file checks colours too: its terminals are coloured unless a test says NO_COLOR.
Terminal = functools.partial(PlainTerminal, colour=True)

REPO = Path(__file__).resolve().parents[2]
SHOP = REPO / "examples" / "shop"


def streams(server: NatsServer) -> list[str]:
    async def names() -> list[str]:
        async with open_client(ConnectionOptions(servers=server.url)) as client:
            return [n for n in await client.stream_names() if not n.startswith("KV_")]

    return run(names())


def test_apply_asks_and_anything_but_yes_changes_nothing(clean_server: NatsServer) -> None:
    term = Terminal("apply", str(SHOP), "--server", clean_server.url)
    assert term.read_until(QUESTION), term.text
    assert "create Stream ORDERS" in term.text  # the plan comes first
    term.type(b"no\r")
    assert term.finish() == 1
    assert "Apply cancelled: nothing was changed." in term.text
    assert streams(clean_server) == []


def test_ctrl_c_at_the_question_changes_nothing(clean_server: NatsServer) -> None:
    term = Terminal("apply", str(SHOP), "--server", clean_server.url)
    assert term.read_until(QUESTION), term.text
    os.killpg(term.process.pid, signal.SIGINT)
    assert term.finish() != 0
    assert streams(clean_server) == []


def test_yes_applies_with_one_completion_line_per_step(clean_server: NatsServer) -> None:
    term = Terminal("apply", str(SHOP), "--server", clean_server.url)
    assert term.read_until(QUESTION), term.text
    term.type(b"yes\r")
    assert term.finish() == 0, term.text
    assert "Stream ORDERS: created (" in term.text
    assert term.text.count(": created (") == 4  # the stream and its three consumers
    assert "Apply complete: 4 applied, 0 failed, 0 skipped." in term.text
    assert streams(clean_server) == ["ORDERS"]


@pytest.mark.parametrize("flag", ["--auto-approve", "-y"])
def test_auto_approve_does_not_ask(clean_server: NatsServer, flag: str) -> None:
    term = Terminal("apply", str(SHOP), "--server", clean_server.url, flag)
    assert term.finish() == 0, term.text
    assert QUESTION.decode() not in term.text
    assert streams(clean_server) == ["ORDERS"]


def test_colours_on_a_terminal_unless_no_color(clean_server: NatsServer) -> None:
    coloured = Terminal("plan", str(SHOP), "--server", clean_server.url)
    assert coloured.finish() == 0
    assert "\x1b[32m+ create Stream ORDERS" in coloured.text
    for way in ({"NO_COLOR": "1"}, None):
        args = ["plan", str(SHOP), "--server", clean_server.url]
        plain = Terminal(*(args if way else ["--no-color", *args]), env=way)
        assert plain.finish() == 0
        assert "\x1b[3" not in plain.text and "+ create Stream ORDERS" in plain.text


def test_validate_colours_errors_on_a_terminal_unless_no_color(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Stream\nname: S\nmax_age: soon\n")
    coloured = Terminal("validate", str(bad))
    assert coloured.finish() == 1
    assert f"\x1b[1m{bad}:3: \x1b[0m" in coloured.text and "\x1b[31m" in coloured.text
    plain = Terminal("validate", str(bad), env={"NO_COLOR": "1"})
    assert plain.finish() == 1
    assert "\x1b[" not in plain.text and f"{bad}:3: max_age:" in plain.text
