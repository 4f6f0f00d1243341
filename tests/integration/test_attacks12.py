"""Attacks on spec PATHS read with ``--project FILE`` (no environment) and on the engine's
hints said in each door's words, against real nats-server processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from agent_harness import link_error, project_of
from cli_runner import reconcile
from credentials import make_operator
from migration_helpers import dump, publish_many
from pulumi_host import configured
from servers import NatsServer, options, write
from test_provider_host import stream_inputs, unique
from test_saved_plans import ORDERS, api, git

from pulumi_provider import operations
from reconciler.door_words import spoken
from reconciler.errors import RefusedPlan
from reconciler.execution.migrate import migrate
from reconciler.jetstream import open_client
from reconciler.specs.spec import OWNER_KEY

pytestmark = pytest.mark.integration


def _repository(tmp_path: Path, project: str) -> Path:
    root = tmp_path / "repo"
    (root / "specs").mkdir(parents=True)
    write(root / "specs", ORDERS.format(extra=""), "orders.yaml")
    write(root, project, "reconcile.yaml")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "specs")
    return root


def test_a_plan_of_paths_saved_with_a_project_file_is_applied_as_its_owner(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``plan --project reconcile.yaml specs --out FILE`` plans as the project's owner
    (``owner: shop``) and saves the project file's digest; ``apply FILE --project
    reconcile.yaml`` then ran as owner ``default`` (the project file read only for its
    digest), so the plan it had just reviewed was refused (``the saved plan names owner
    shop, not default``), against docs/saved-plans.md: the owner is the project's. The
    apply takes the project's owner now, as the plan did; ``--owner`` contradicting it
    is refused, as at plan, with nothing changed."""
    url = clean_server.url
    project = f"owner: shop\nspecs: [specs]\nenvironments:\n  dev:\n    servers: {url}\n"
    root = _repository(tmp_path, project)
    where = ("--project", "reconcile.yaml", "--server", url)
    planned = reconcile("plan", "specs", "--out", "../p.plan", *where, cwd=root)
    assert planned.returncode == 0, planned.stderr
    plan = str((root / "../p.plan").resolve())

    other = reconcile("apply", plan, *where, "--owner", "payments", cwd=root)
    assert other.returncode != 0
    assert "--owner payments contradicts the project's owner shop" in other.stderr
    assert "Traceback" not in other.stderr
    assert "ORDERS" not in (api(clean_server, "STREAM.NAMES").get("streams") or [])

    done = reconcile("apply", plan, *where, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    info = api(clean_server, "STREAM.INFO.ORDERS")["config"]
    assert info["metadata"][OWNER_KEY] == "shop", info["metadata"]


# --- the connection settings the engine still named by the CLI's flags -------------------


def _settings(server: NatsServer, root: Path) -> dict[str, tuple[dict[str, str], str]]:
    """Each setting a Pulumi program or an environment sets wrong, as (its stack config,
    where Pulumi's words name it): a monitoring URL that is no http(s) URL, a system
    account user who is not one (a user of no account here, its creds file in ``root``
    named from there: nobody answers), server URL credentials holding a '/'."""
    port = server.url.rsplit(":", 1)[1]
    system = str(make_operator(root / "operator").creds.relative_to(root))
    return {
        "monitor": ({"jetstream:monitor": f"127.0.0.1:{port}"}, "jetstream:monitor"),
        "system": ({"jetstream:systemCreds": system}, "jetstream:systemCreds"),
        "url": (
            {"jetstream:servers": f"nats://al/ice:s3cret-pw@127.0.0.1:{port}"},
            "jetstream:user/jetstream:password",
        ),
    }


@pytest.mark.parametrize("setting", ["monitor", "system", "url"])
def test_pulumi_names_a_wrong_connection_setting_as_the_stack_sets_it_not_a_cli_flag(
    clean_server: NatsServer, tmp_path: Path, setting: str
) -> None:
    """The stack's ``jetstream:monitor`` that is no http URL, ``jetstream:systemCreds`` of
    a user outside the system account, a server URL whose credentials hold a '/': the
    provider's error said ``--monitor``, ``(--system-creds, --system-context)``, ``give
    them with --user/--password (or --token)``: flags no Pulumi program has. Each names
    the connection's field where a program sets it now; nothing is created, no secret
    shown."""
    config, words = _settings(clean_server, tmp_path)[setting]
    if setting == "system":  # the provider host's folder is not this one
        config = {key: str(tmp_path / value) for key, value in config.items()}
    name = unique("WORDS")
    with configured({"jetstream:servers": clean_server.url, **config}) as host:
        checked, failures = host.check(stream_inputs(name))
        assert failures == []
        with pytest.raises(grpc.RpcError) as refused:
            host.create(checked)
    details = str(refused.value.details())
    assert words in details and "the `connection` input" in details, details
    assert " --" not in details and "(--" not in details, details
    assert "Traceback" not in details and "s3cret-pw" not in details, details
    assert name not in (api(clean_server, "STREAM.NAMES").get("streams") or [])


#: Each setting of an environment, and the field the agent names it by.
AGENT_FIELDS = {
    "monitor": "monitor",
    "system": "system_creds, system_context",
    "url": "user/password or token",
}


@pytest.mark.parametrize("setting", list(AGENT_FIELDS))
def test_the_agent_names_a_wrong_setting_by_its_flag_or_its_environments_field(
    clean_server: NatsServer,
    tmp_path: Path,
    run: Any,
    monkeypatch: pytest.MonkeyPatch,
    setting: str,
) -> None:
    """An environment's ``monitor`` that is no http URL, ``system_creds`` of a user
    outside the system account, or ``servers: {env: VAR}`` whose credentials hold a '/':
    the agent said ``--monitor URL``, ``(--system-creds, --system-context)``, ``give
    them with --user/--password (or --token)``, though the value came from the project
    file. It names both ways the agent takes each now, as it does ``creds``."""
    root = tmp_path / "project"
    root.mkdir()
    config, _ = _settings(clean_server, root)[setting]
    (value,) = config.values()
    project = project_of(root, {"blue": clean_server.url})
    text = project.read_text()
    if setting == "url":  # a literal one is refused at its line: a variable's is not
        monkeypatch.setenv("ATTACKS12_BLUE_URL", value)
        text = text.replace(clean_server.url, "{env: ATTACKS12_BLUE_URL}")
    else:
        field = {"monitor": "monitor", "system": "system_creds"}[setting]
        text += f"    {field}: {value}\n"
    project.write_text(text, encoding="utf-8")

    error = link_error(project, "blue", run)
    assert f"(or the environment's {AGENT_FIELDS[setting]})" in error, error
    assert "s3cret-pw" not in error, error


def test_a_migration_refused_midway_names_the_run_that_resumes_it_in_the_doors_words(
    clean_server: NatsServer, run: Any
) -> None:
    """A stream made during a migration (after the plan looked) that sources the stream
    migrated: the migration refuses to delete it, and said "then apply --migrate
    resumes" under Pulumi's words too (a program migrates with ``migrate=True``; it has
    no ``apply``). It names the door's run that migrates now; nothing is deleted."""
    stream = unique("MIGWORDS")

    async def scenario() -> str:
        async with open_client(options(clean_server)) as client:
            config = {"name": stream, "subjects": [f"{stream}.>"], "storage": "file"}
            await client.create_stream(config)
            await publish_many(clean_server, [f"{stream}.a"], 5)
            live = (await client.stream_info(stream))["config"]

            async def meddle(phase: str) -> None:
                if phase == "remembered":  # another client, after the plan looked
                    copy = {"name": f"{stream}_AGG", "sources": [{"name": stream}]}
                    await client.create_stream(copy)

            with spoken(operations.WORDS), pytest.raises(RefusedPlan) as refused:
                await migrate(client, stream, {**live, "storage": "memory"}, on_phase=meddle)
            return str(refused.value)

    said = run(scenario())
    assert "then migrate=True resumes" in said, said
    assert "--migrate" not in said, said
    assert len(run(dump(clean_server, stream))) == 5
