"""The command ``plan --out FILE`` prints to apply the file: a person copies it. It said
``reconcile apply FILE`` whatever the plan was made with, and that command was refused
for a plan of an environment (``give --env prod``), of spec PATHS read with
``--project FILE`` (another owner), made with ``--prune``, ``--take-over`` or
``--owner``. Now it names each of those as the apply must give it, and the connection
flags the plan was given by name (never their values): the printed command, run with
that connection and ``--yes``, applies the plan, every message kept."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer
from test_saved_plans import ORDERS, create_orders, publish, repo, state

pytestmark = pytest.mark.integration


def printed_apply(stderr: str) -> tuple[list[str], str]:
    """The apply command the plan printed (what follows ``apply exactly it with:``): its
    words after ``reconcile apply``, and its note on the connection."""
    found = re.search(r"apply exactly it with: (.+)", stderr)
    assert found, stderr
    command, _, note = found.group(1).partition(" (with ")
    words = shlex.split(command)
    assert words[:2] == ["reconcile", "apply"], words
    return words[2:], note


def _hint(stderr: str) -> list[str]:
    return printed_apply(stderr)[0]


def test_the_printed_apply_of_a_plan_of_an_environment_applies_it(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = repo(tmp_path)
    (root / "reconcile.yaml").write_text(
        f"owner: shop\nspecs: [specs]\nenvironments:\n  prod:\n    servers: {clean_server.url}\n"
        "  staging:\n    servers: nats://127.0.0.1:1\n"
    )
    done = reconcile("plan", "--env", "prod", "--out", "../prod plan", cwd=root)
    assert done.returncode == 0, done.stderr
    words = _hint(done.stderr)
    assert "--env" in words and "prod" in words, words

    applied = reconcile("apply", *words, "--yes", cwd=root)
    assert applied.returncode == 0, applied.stderr
    assert "applying the saved plan" in applied.stderr
    assert set(state(clean_server)["ORDERS"]["consumers"]) == {"NEW"}


def test_the_printed_apply_of_paths_with_a_project_prune_and_take_over_applies_it(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Spec PATHS read with ``--project`` (owner ``shop``), ``--prune`` and
    ``--take-over``; the connection given by ``--server``: the command names the
    project, both consents and the flag, and applies the plan run with it."""
    root = repo(tmp_path)
    (root / "reconcile.yaml").write_text(
        "owner: shop\nspecs: [specs]\nenvironments:\n  dev:\n    servers: nats://127.0.0.1:1\n"
    )
    create_orders(clean_server, root)  # as owner default: shop takes it over
    (root / "specs" / "orders.yaml").write_text(ORDERS.format(extra="description: reviewed"))
    flags = ["--project", "reconcile.yaml", "--prune", "--take-over"]
    done = reconcile(
        "plan", "specs", *flags, "--out", "../paths.plan", "--server", clean_server.url, cwd=root
    )
    assert done.returncode == 0, done.stderr
    words = _hint(done.stderr)
    for flag in flags:
        assert flag in words, (flag, words)
    assert "--server" in done.stderr.split("apply exactly it with:", 1)[1]
    assert clean_server.url not in done.stderr.split("apply exactly it with:", 1)[1]
    publish(clean_server, "ORDERS.new", 5)  # 15 now
    unnamed = [w for w in words if w not in ("--project", "reconcile.yaml")]
    refused = reconcile("apply", *unnamed, "--server", clean_server.url, "--yes", cwd=root)
    assert refused.returncode == 1, refused.stderr
    said = "the plan was made with the project file reconcile.yaml, which this apply does not read"
    assert said in refused.stderr, refused.stderr

    applied = reconcile("apply", *words, "--server", clean_server.url, "--yes", cwd=root)
    assert applied.returncode == 0, applied.stderr
    after = state(clean_server)["ORDERS"]
    assert after["config"]["description"] == "reviewed"
    assert after["messages"] == 15


def test_the_printed_apply_names_an_owner_given_on_the_command_line(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = repo(tmp_path)
    done = reconcile(
        "plan", "specs", "--owner", "team-a", "--out", "../owned.plan",
        "--server", clean_server.url, cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    words = _hint(done.stderr)
    assert words[words.index("--owner") + 1] == "team-a", words

    applied = reconcile("apply", *words, "--server", clean_server.url, "--yes", cwd=root)
    assert applied.returncode == 0, applied.stderr
    assert "ORDERS" in state(clean_server)
