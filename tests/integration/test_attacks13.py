"""``plan --out FILE`` prints the apply to run (``test_saved_plan_hint.py``). A flag given
by its variable (``RECONCILE_OWNER``, ``RECONCILE_PROJECT``, ``NATS_URL``: a CI job's
usual way) was left out of it: the printed command, run in a shell without the variable,
was refused (``the saved plan names owner team-a, not default``; ``--env needs a project
file``), and the connection was not named at all. Now each is named as if typed; a
connection flag by name only, never its value (a URL's password, ``NATS_PASSWORD``,
``NATS_TOKEN``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer
from test_saved_plan_hint import printed_apply
from test_saved_plans import repo, state

pytestmark = pytest.mark.integration


def test_an_owner_given_by_its_variable_is_in_the_printed_apply(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = repo(tmp_path)
    done = reconcile(
        "plan", "specs", "--out", "../owned.plan", "--server", clean_server.url,
        cwd=root, env={"RECONCILE_OWNER": "team-a"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    words, _ = printed_apply(done.stderr)

    applied = reconcile("apply", *words, "--server", clean_server.url, cwd=root)  # no variable
    assert applied.returncode == 0, (words, applied.stderr)
    assert "ORDERS" in state(clean_server)


def test_a_project_given_by_its_variable_is_in_the_printed_apply(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = repo(tmp_path)
    (root / "conf").mkdir()
    (root / "conf" / "project.yaml").write_text(
        f"owner: shop\nspecs: [../specs]\nenvironments:\n  prod:\n    servers: {clean_server.url}\n"
    )
    variables = {
        "RECONCILE_PROJECT": "conf/project.yaml",
        "RECONCILE_ENV": "prod",
        "NATS_URL": "nats://127.0.0.1:1",  # not read: the environment names its server
    }
    done = reconcile("plan", "--out", "../prod.plan", cwd=root, env=variables)
    assert done.returncode == 0, done.stderr
    words, note = printed_apply(done.stderr)
    assert note == "", note  # the environment's own server: no connection flag to give

    applied = reconcile("apply", *words, cwd=root)  # no variable
    assert applied.returncode == 0, (words, applied.stderr)
    assert "ORDERS" in state(clean_server)


def test_a_connection_given_by_its_variables_is_named_never_its_values(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = repo(tmp_path)
    url = clean_server.url.replace("nats://", "nats://someone:UrlSecret1@")
    variables = {"NATS_URL": url, "NATS_PASSWORD": "PassSecret2", "NATS_TOKEN": "TokenSecret3"}
    done = reconcile("plan", "specs", "--out", "../var.plan", "--format", "json", cwd=root,
                     env=variables)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.lstrip().startswith("{") and "apply exactly" not in done.stdout
    _, note = printed_apply(done.stderr)
    for flag in ("--server", "--password", "--token"):
        assert flag in note, note
    for secret in ("UrlSecret1", "PassSecret2", "TokenSecret3"):
        assert secret not in done.stdout + done.stderr
