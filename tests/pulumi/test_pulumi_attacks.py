"""The Pulumi provider host attacked as a careless user or another run would: through the
real ``python -m pulumi.dynamic`` host, against a real nats-server, streams and messages
counted with a raw client before and after."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pulumi
import pytest
from migration_helpers import dump, killed_migration_script, publish_many, settled_dumps
from pulumi.runtime import rpc
from pulumi_host import ProviderHost, configured, up
from servers import NatsServer, options, run
from test_provider_host import (
    DIFF_NONE,
    MALLORY,
    _publish,
    api,
    consumer_inputs,
    stream_inputs,
    unique,
)

from pulumi_provider import JetStreamProvider, operations
from reconciler.door_words import spoken
from reconciler.execution import lock
from reconciler.execution import run as engine
from reconciler.execution.lock import Lease, LockSettings
from reconciler.jetstream import ConnectionOptions, open_client
from reconciler.model.migration import temp_name
from reconciler.model.normalize import ownership_marker
from reconciler.planning.steps import Migrate
from reconciler.specs.lifecycle import Lifecycle
from reconciler.specs.spec import CLAIM_KEY

pytestmark = pytest.mark.integration


@pytest.fixture
def server(clean_server: NatsServer) -> NatsServer:
    return clean_server


def _streams(server: NatsServer) -> set[str]:
    return set(api(server, "STREAM.NAMES").get("streams") or [])


# --- a timeout that is no time: a check failure or one line, never a traceback ------------


@pytest.mark.parametrize("written", ["abc", "-1", "nan", "0"])
def test_a_stack_timeout_that_is_no_time_changes_nothing_and_shows_no_traceback(
    server: NatsServer, written: str
) -> None:
    with configured({"jetstream:servers": server.url, "jetstream:timeout": written}) as host:
        name = unique("BADTIMEOUT")
        checked, failures = host.check(stream_inputs(name))
        assert failures == []  # the stack config is not the resource's input
        before = _streams(server)
        with pytest.raises(grpc.RpcError) as refused:
            host.create(checked)
        details = str(refused.value.details())
        assert "Traceback" not in details
        assert "jetstream:timeout" in details and repr(written) in details
        assert _streams(server) == before


def test_a_connection_input_timeout_that_is_no_time_is_a_check_failure(
    server: NatsServer,
) -> None:
    with configured({"jetstream:servers": server.url}) as host:
        name = unique("BADINPUT")
        inputs = {**stream_inputs(name), "connection": {"timeout": "abc"}}
        _, failures = host.check(inputs)
        assert [f.property for f in failures] == ["connection"]
        assert "'abc'" in failures[0].reason
        before = _streams(server)
        with pytest.raises(grpc.RpcError) as refused:
            host.create(inputs)  # an engine that skips check still gets one line
        assert "Traceback" not in str(refused.value.details())
        assert _streams(server) == before


# --- the apply lock, whatever the stack's lockTimeout says ---------------------------------

#: A lease another run keeps: it never expires while the test runs.
KEPT = LockSettings(lease_seconds=3600)


async def _keep_lock(server: NatsServer) -> Lease:
    async with open_client(options(server)) as client:
        await lock.prepare(client, KEPT)
        return await lock.acquire(client, MALLORY, timeout=0, settings=KEPT)


async def _release(server: NatsServer, lease: Lease) -> None:
    async with open_client(options(server)) as client:
        assert await lock.release(client, lease, settings=KEPT)


@pytest.mark.parametrize("written", ["0", "0.0001", "1e-300", "-1", "abc", "inf"])
def test_no_lock_timeout_lets_a_change_through_a_lock_another_run_holds(
    server: NatsServer, written: str
) -> None:
    """Create, update and delete are all refused, the streams and messages unchanged."""
    base = {"jetstream:servers": server.url}
    with configured(base) as setup:
        kept, gone = unique("KEPT"), unique("GONE")
        kept_id, _, kept_outputs = setup.apply(stream_inputs(kept, max_age="1h"))
        gone_id, _, gone_outputs = setup.apply(stream_inputs(gone))
    run(_publish(server.url, f"{kept}.a", 3))
    lease = run(_keep_lock(server))
    try:
        with configured({**base, "jetstream:lockTimeout": written}) as host:
            made = unique("MADE")
            created, _ = host.check(stream_inputs(made))
            updated, _ = host.check(stream_inputs(kept, max_age="2h"))
            before = _streams(server)
            attempts = [
                lambda: host.create(created),
                lambda: host.update(kept_id, kept_outputs, updated),
                lambda: host.delete(gone_id, gone_outputs),
            ]
            for attempt in attempts:
                with pytest.raises(grpc.RpcError) as refused:
                    attempt()
                assert "Traceback" not in str(refused.value.details())
            assert _streams(server) == before
            info = api(server, f"STREAM.INFO.{kept}")
            assert info["config"]["max_age"] == 3_600_000_000_000
            assert info["state"]["messages"] == 3
    finally:
        run(_release(server, lease))


# --- a destroy deletes only what this project manages ---------------------------------------


def _destroy_refused_over_theirs(
    server: NatsServer, host: ProviderHost, metadata: dict[str, str]
) -> tuple[str, dict[str, Any], dict[str, Any], str]:
    """The stack made JOBS (allow_destroy: its messages may go with it); someone deleted
    it and made a JOBS of their own (``metadata`` its marker, if any), 5 messages in it.
    The stack's destroy is refused, with no traceback, and the 5 stay. Returns the
    resource's id and outputs, their stream's config and the refusal's words."""
    name = unique("JOBS")
    id_, _, outputs = host.apply({**stream_inputs(name), "allow_destroy": True})
    assert api(server, f"STREAM.DELETE.{name}").get("success")
    theirs = {"name": name, "subjects": [f"{name}.>"], "metadata": metadata}
    assert "error" not in api(server, f"STREAM.CREATE.{name}", theirs)
    run(_publish(server.url, f"{name}.a", 5))
    with pytest.raises(grpc.RpcError) as refused:
        host.delete(id_, outputs)
    details = str(refused.value.details())
    assert "Traceback" not in details
    assert api(server, f"STREAM.INFO.{name}")["state"]["messages"] == 5
    return id_, outputs, theirs, details


def test_a_destroy_never_deletes_another_projects_stream_of_the_same_name(
    server: NatsServer,
) -> None:
    """Another project (owner teamb) made the JOBS the stack's destroy met. It deleted
    teamb's stream and its messages, where ``apply --prune`` never touches another
    owner's resource. Now refused naming the owner."""
    with configured({"jetstream:servers": server.url}) as host:
        *_, details = _destroy_refused_over_theirs(server, host, ownership_marker("teamb"))
        assert "teamb" in details


def test_a_destroy_never_deletes_an_unmarked_stream_made_again_under_the_name(
    server: NatsServer,
) -> None:
    """Someone made the JOBS the stack's destroy met by hand (no managed-by marker). It
    was deleted, where ``apply --prune`` leaves an unmarked stream alone. Now refused; the
    stream is still there for a destroy that sees the marker back."""
    with configured({"jetstream:servers": server.url}) as host:
        id_, outputs, theirs, details = _destroy_refused_over_theirs(server, host, {})
        assert "managed-by marker" in details
        theirs["metadata"] = ownership_marker("default")
        assert "error" not in api(server, f"STREAM.UPDATE.{theirs['name']}", theirs)
        host.delete(id_, outputs)  # marked as this project's again: deleted (allow_destroy)
        assert theirs["name"] not in _streams(server)


def test_an_update_never_changes_another_projects_stream_of_the_same_name(
    server: NatsServer,
) -> None:
    """As the destroy above, for an update: teamb's JOBS keeps its config and messages."""
    with configured({"jetstream:servers": server.url}) as host:
        name = unique("JOBS")
        id_, _, outputs = host.apply(stream_inputs(name, max_age="1h"))
        assert api(server, f"STREAM.DELETE.{name}").get("success")
        theirs = {"name": name, "subjects": [f"{name}.>"], "max_age": 3_600_000_000_000}
        theirs["metadata"] = ownership_marker("teamb")
        assert "error" not in api(server, f"STREAM.CREATE.{name}", theirs)
        run(_publish(server.url, f"{name}.a", 5))
        news, _ = host.check(stream_inputs(name, max_age="2h"))
        with pytest.raises(grpc.RpcError) as refused:
            host.update(id_, outputs, news)
        assert "teamb" in str(refused.value.details())
        assert "--" not in str(refused.value.details())  # no --take-over: Pulumi has none
        info = api(server, f"STREAM.INFO.{name}")
        assert info["config"]["max_age"] == 3_600_000_000_000
        assert info["state"]["messages"] == 5


# --- a replace is judged as a replace --------------------------------------------------------

NO_REPLACE = """\
rules:
  - id: no-replace
    level: deny
    message: a stream is never replaced (its messages would go)
    expr: step.action != "replace"
"""


def test_a_policy_denying_replace_refuses_a_pulumi_replace_before_anything_changes(
    server: NatsServer, tmp_path: Path
) -> None:
    """Pulumi runs a replace as a delete and a create, which the provider judged as
    ``delete`` and ``create``: a deny rule on ``replace`` (the action ``reconcile plan``
    gives the same change) never fired, and ``allow_destroy`` let the stream and its 7
    messages go. The diff now judges the replace: refused, naming the rule, the stream
    and its messages kept."""
    policy = tmp_path / "no-replace.yaml"
    policy.write_text(NO_REPLACE, encoding="utf-8")
    with configured({"jetstream:servers": server.url}) as plain_host:
        host = plain_host.using(JetStreamProvider(policies=[str(policy)]))
        name = unique("KEEPER")
        inputs = {**stream_inputs(name, storage="file"), "allow_destroy": True}
        id_, _, outputs = host.apply(inputs)
        run(_publish(server.url, f"{name}.a", 7))
        with pytest.raises(grpc.RpcError) as refused:
            up(host, id_, outputs, {**inputs, "storage": "memory"})
        details = str(refused.value.details())
        assert "no-replace" in details and "Traceback" not in details
        info = api(server, f"STREAM.INFO.{name}")
        assert info["config"]["storage"] == "file"
        assert info["state"]["messages"] == 7
        # an update the rule does not deny goes through the same provider
        _, updated = up(host, id_, outputs, {**inputs, "max_age": "1h"})
        assert updated["live_config"]["max_age"] == 3_600_000_000_000
        assert api(server, f"STREAM.INFO.{name}")["state"]["messages"] == 7


# --- a refusal names Pulumi's own arguments, never a CLI flag --------------------------------

CHILD = killed_migration_script("HALFWAY")


def test_an_interrupted_migration_is_refused_naming_migrate_true_not_a_cli_flag(
    server: NatsServer, tmp_path: Path
) -> None:
    """A migration of the stack's stream to memory stopped half-way (its process killed).
    An update without ``migrate`` is refused, nothing changed, and the refusal said
    "resumed only with --migrate": a flag no Pulumi program has. It names the resource's
    ``migrate=True`` now, as does the migration's step in the provider's words (it said
    "apply --migrate finishes the migration")."""
    with configured({"jetstream:servers": server.url}) as host:
        inputs = stream_inputs("HALFWAY", storage="file")
        id_, _, outputs = host.apply(inputs)
        run(publish_many(server, ["HALFWAY.a"], 20))
        spec = tmp_path / "halfway.yaml"
        spec.write_text(
            "kind: Stream\nname: HALFWAY\nsubjects: [HALFWAY.>]\nstorage: memory\n",
            encoding="utf-8",
        )
        step = run(engine.plan([spec], options(server), migrate=True)).steps[0]
        assert isinstance(step, Migrate) and not step.blocked
        child = subprocess.run(
            [sys.executable, "-c", CHILD, server.url, json.dumps(dict(step.config)), "restored"],
            check=False,
            capture_output=True,
            timeout=120,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr.decode()
        temp = temp_name("HALFWAY")
        assert temp in _streams(server)
        halfway = run(settled_dumps(server, ["HALFWAY", temp]))  # its copy may go on
        news, _ = host.check({**inputs, "storage": "memory"})
        with pytest.raises(grpc.RpcError) as refused:
            host.update(id_, outputs, news)
        details = str(refused.value.details())
        assert "migrate=True" in details
        assert "--" not in details and "Traceback" not in details
        assert [run(dump(server, name)) for name in ("HALFWAY", temp)] == halfway
        with spoken(operations.WORDS):
            (resumed,) = run(engine.plan([spec], options(server))).steps
        assert isinstance(resumed, Migrate) and resumed.blocked
        assert resumed.reasons[0].endswith(": migrate=True finishes the migration")
        assert "--" not in " ".join(resumed.reasons), resumed.reasons


def test_a_creds_file_that_is_none_is_named_as_the_stack_sets_it_not_a_cli_flag(
    server: NatsServer, tmp_path: Path
) -> None:
    """``jetstream:creds`` names a file that is no credentials file (a seed saved under
    the name, a wrong file): the error said "--creds PATH: not a NATS credentials file",
    a flag no Pulumi program has. It names the connection's creds where a program sets
    them now; nothing is created."""
    wrong = tmp_path / "app.creds"
    wrong.write_text("no JWT, no seed\n", encoding="utf-8")
    with configured({"jetstream:servers": server.url, "jetstream:creds": str(wrong)}) as host:
        checked, failures = host.check(stream_inputs(unique("CREDSWORDS")))
        assert failures == []
        before = _streams(server)
        with pytest.raises(grpc.RpcError) as refused:
            host.create(checked)
    details = str(refused.value.details())
    assert "the connection's creds (jetstream:creds or the `connection` input)" in details
    assert "--creds" not in details and "Traceback" not in details, details
    assert _streams(server) == before


# --- a create that adopts a stream honours the resource's allow_destroy ---------------------


def test_a_create_adopting_a_fuller_stream_honours_allow_destroy_as_its_refusal_says(
    server: NatsServer,
) -> None:
    """A stream made outside Pulumi holds 20 messages; the program declares it with
    ``max_msgs=5``. The create (which adopts it) is refused, telling the user to "set
    allow_destroy=True on the resource": with it set, the create was refused again with
    the same words (create never passed the resource's ``allow_destroy`` on), a refusal
    no program could get past. Without it the 20 messages stay; with it, 5 do, as an
    update of a resource already in the state."""
    with configured({"jetstream:servers": server.url}) as host:
        name = unique("ADOPTFULL")
        api(server, f"STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name}.>"]})
        run(_publish(server.url, f"{name}.a", 20))
        checked, failures = host.check(stream_inputs(name, max_msgs=5))
        assert failures == []
        with pytest.raises(grpc.RpcError) as refused:
            host.create(checked)
        details = str(refused.value.details())
        assert "allow_destroy=True" in details and "Traceback" not in details
        assert api(server, f"STREAM.INFO.{name}")["state"]["messages"] == 20
        allowed, _ = host.check(stream_inputs(name, max_msgs=5, allow_destroy=True))
        id_, outputs = host.create(allowed)
        assert id_ == name and outputs["live_config"]["max_msgs"] == 5
        assert api(server, f"STREAM.INFO.{name}")["state"]["messages"] == 5


def _memory_stream_outside_pulumi(server: NatsServer, name: str) -> None:
    """A memory stream ``name`` made by another tool, holding 20 messages."""
    api(
        server,
        f"STREAM.CREATE.{name}",
        {"name": name, "subjects": [f"{name}.>"], "storage": "memory"},
    )
    run(_publish(server.url, f"{name}.a", 20))


def test_a_create_adopting_a_stream_of_another_storage_migrates_it_with_migrate(
    server: NatsServer,
) -> None:
    """A memory stream made outside Pulumi, holding 20 messages, declared with
    ``storage="file"`` and ``migrate=True``: the create refused it as a replace (create
    never passed ``migrate`` on). It migrates it now, as an update would, every message
    kept; the claim is recorded on the stream the migration made (a plan of its own)."""
    with configured({"jetstream:servers": server.url}) as host:
        name = unique("ADOPTMIGRATE")
        _memory_stream_outside_pulumi(server, name)
        checked, failures = host.check(stream_inputs(name, storage="file", migrate=True))
        assert failures == []
        _, outputs = host.create(checked)
        assert outputs["live_config"]["storage"] == "file"
        info = api(server, f"STREAM.INFO.{name}")
        assert (info["config"]["storage"], info["state"]["messages"]) == ("file", 20)
        assert info["config"]["metadata"][CLAIM_KEY] == outputs["claim"]


def test_a_create_over_a_stream_only_a_replace_could_change_says_a_way_that_works(
    server: NatsServer,
) -> None:
    """A create over a memory stream made outside Pulumi, declared as a file stream, is
    refused (Pulumi replaces only what its state holds): it said "run `pulumi refresh`,
    then `pulumi up` replaces it", but a refresh does not know a resource that is not in
    the state, so the next `pulumi up` creates it again and is refused again. It names
    the field and the ways out that work now; the 20 messages stay."""
    with configured({"jetstream:servers": server.url}) as host:
        name = unique("ADOPTCLASH")
        _memory_stream_outside_pulumi(server, name)
        checked, _ = host.check(stream_inputs(name, storage="file"))
        with pytest.raises(grpc.RpcError) as refused:
            host.create(checked)
        details = str(refused.value.details())
        assert "pulumi refresh" not in details and "Traceback" not in details, details
        assert name in details and "storage" in details and "migrate=True" in details
        assert "--" not in details
        info = api(server, f"STREAM.INFO.{name}")
        assert (info["config"]["storage"], info["state"]["messages"]) == ("memory", 20)


# --- a replace the account has no room for is refused before the delete --------------------

MiB = 1024 * 1024


def test_a_replace_the_account_has_no_room_for_fails_the_diff_and_keeps_the_stream(
    server_factory: Callable[..., NatsServer],
) -> None:
    """An account with 8 MiB of memory; a file stream of 1 MiB holding 7 messages, with
    ``allow_destroy``, changed to a memory stream of 20 MiB. Pulumi replaces it: the diff
    (which judged only lifecycle and policy, never the account) let Pulumi delete the
    stream and its messages, then the create was refused for capacity: the stream gone,
    nothing made. The diff now judges the replace against the account, as apply does
    before its first step: refused, naming the limit; the stream and its messages kept."""
    accounts = {
        "TEAM": {
            "jetstream": {"max_file": 64 * MiB, "max_mem": 8 * MiB},
            "users": [{"user": "team", "password": "s3cretPW"}],
        }
    }
    server = server_factory(config={"accounts": accounts})
    stack = {"jetstream:servers": server.url, "jetstream:user": "team"}
    with configured({**stack, "jetstream:password": "s3cretPW"}) as host:
        name = unique("ROOMLESS")
        inputs = stream_inputs(name, max_bytes="1MiB", allow_destroy=True)
        id_, _, outputs = host.apply(inputs)
        run(_publish(f"nats://team:s3cretPW@127.0.0.1:{server.port}", f"{name}.a", 7))
        with pytest.raises(grpc.RpcError) as refused:
            up(host, id_, outputs, {**inputs, "storage": "memory", "max_bytes": "20MiB"})
        details = str(refused.value.details())
        assert name in details and "memory" in details, details
        assert "Traceback" not in details and "s3cretPW" not in details
        info = run(_info(server, name))
        assert (info["config"]["storage"], info["state"]["messages"]) == ("file", 7)
        # a replace that fits goes through the same diff
        _, replaced = up(host, id_, outputs, {**inputs, "storage": "memory"})
        assert replaced["live_config"]["storage"] == "memory"


async def _info(server: NatsServer, name: str) -> dict[str, Any]:
    async with open_client(
        ConnectionOptions(servers=server.url, user="team", password="s3cretPW")
    ) as client:
        return await client.stream_info(name)


# --- a replace to another name or stream: made beside the old one, or judged first ----------


def _made(server: NatsServer) -> set[str]:
    """The streams on the server but the apply lock's bucket."""
    return _streams(server) - {"KV_RECONCILE_LOCKS"}


def _messages(server: NatsServer, name: str) -> int:
    return int(api(server, f"STREAM.INFO.{name}")["state"]["messages"])


def _theirs(server: NatsServer, name: str, subjects: list[str]) -> None:
    """Stream ``name`` made by another project (owner teamb)."""
    theirs = {"name": name, "subjects": subjects, "metadata": ownership_marker("teamb")}
    assert "error" not in api(server, f"STREAM.CREATE.{name}", theirs)


def test_a_renamed_stream_is_made_before_the_old_one_goes_so_a_refused_create_keeps_it(
    server: NatsServer,
) -> None:
    """A stream holding 7 messages (``allow_destroy``) renamed, to subjects of its own.
    Pulumi deleted it first (the diff said delete-before-replace for every replace); the
    create was then refused (here another project made a stream of the new name between
    the preview and the up): the stream and its 7 messages gone, nothing made. The diff
    now lets Pulumi make the new stream first: refused, the old one and its messages
    stay; a rename that works makes the new stream while the old one still holds its
    messages, then deletes the old one."""
    with configured({"jetstream:servers": server.url}) as host:
        old, new = unique("RENAMED"), unique("RENAMETO")
        id_, _, outputs = host.apply(stream_inputs(old, allow_destroy=True))
        run(_publish(server.url, f"{old}.a", 7))
        renamed = stream_inputs(new, allow_destroy=True)
        checked, _ = host.check(renamed, outputs)
        assert host.diff(id_, outputs, checked).deleteBeforeReplace is False
        with pytest.raises(grpc.RpcError) as refused:
            up(host, id_, outputs, renamed, meanwhile=lambda: _theirs(server, new, ["T.>"]))
        assert "teamb" in str(refused.value.details())
        assert _messages(server, old) == 7
        assert api(server, f"STREAM.DELETE.{new}").get("success")  # teamb lets go of it
        seen: list[tuple[set[str], int]] = []
        made_id, made = up(
            host,
            id_,
            outputs,
            renamed,
            between=lambda: seen.append((_made(server), _messages(server, old))),
        )
        assert seen == [({old, new}, 7)]  # both at once, the old one whole
        assert (made_id, made["name"]) == (new, new)
        assert _made(server) == {new}


def test_a_stream_removed_from_the_program_is_kept_and_the_way_to_delete_it_said(
    server: NatsServer,
) -> None:
    """A stream holding 2 messages, without ``allow_destroy``, taken out of the program:
    Pulumi deletes it with the inputs it was last applied with, so setting
    ``allow_destroy`` in the program cannot reach it. The refusal said only "set
    allow_destroy=True on the resource"; it now says to put it back with it first (or
    empty it, or drop it from the stack), and the stream keeps its messages."""
    with configured({"jetstream:servers": server.url}) as host:
        name = unique("REMOVED")
        id_, _, outputs = host.apply(stream_inputs(name))
        run(_publish(server.url, f"{name}.a", 2))
        with pytest.raises(grpc.RpcError) as refused:
            host.delete(id_, outputs)
        details = str(refused.value.details())
        assert "put it back" in details and "pulumi state delete" in details, details
        assert _messages(server, name) == 2


def test_a_replaced_stream_given_messages_before_its_delete_is_kept_and_the_way_out_said(
    server: NatsServer,
) -> None:
    """An empty stream without ``allow_destroy``, renamed: the diff lets Pulumi make the
    new stream first, and messages reach the old one before Pulumi deletes it. The
    delete is refused (its messages kept); Pulumi retries it with the inputs the old
    resource had, so setting ``allow_destroy`` in the program cannot help, and the
    refusal names what can: emptying the stream, or dropping it from the stack."""
    with configured({"jetstream:servers": server.url}) as host:
        old, new = unique("LATEMSGS"), unique("LATETO")
        id_, _, outputs = host.apply(stream_inputs(old))
        renamed = stream_inputs(new)
        checked, _ = host.check(renamed, outputs)
        assert host.diff(id_, outputs, checked).deleteBeforeReplace is False
        arrive = lambda: run(_publish(server.url, f"{old}.a", 3))  # noqa: E731
        with pytest.raises(grpc.RpcError) as refused:
            up(host, id_, outputs, renamed, between=arrive)
        details = str(refused.value.details())
        assert "pulumi state delete" in details and "Traceback" not in details, details
        assert _made(server) == {old, new} and _messages(server, old) == 3


@pytest.mark.parametrize("shared", [False, True], ids=["own-subjects", "old-subjects"])
def test_a_rename_onto_another_projects_stream_fails_the_diff_and_keeps_the_stream(
    server: NatsServer, shared: bool
) -> None:
    """A stream holding 7 messages (``allow_destroy``) renamed to a name another project
    (owner teamb) already holds: Pulumi deleted it first and the create was refused, the
    stream and its messages gone. With subjects of its own, or the old stream's (which
    cannot be on the server twice: that rename deletes first), the diff now judges the
    create: refused, naming teamb, before anything is deleted. A rename to a free name
    goes through: beside the old one with subjects of its own, after it with its
    subjects."""
    with configured({"jetstream:servers": server.url}) as host:
        old, taken, free = unique("KEPTNAME"), unique("TAKEN"), unique("FREE")
        id_, _, outputs = host.apply(stream_inputs(old, allow_destroy=True))
        run(_publish(server.url, f"{old}.a", 7))
        _theirs(server, taken, [f"{taken}.>"])

        def renamed(name: str) -> dict[str, Any]:
            subjects = [f"{old}.>"] if shared else [f"{name}.>"]
            return {**stream_inputs(name, allow_destroy=True), "subjects": subjects}

        with pytest.raises(grpc.RpcError) as refused:
            up(host, id_, outputs, renamed(taken))
        details = str(refused.value.details())
        assert "teamb" in details and "Traceback" not in details, details
        assert _messages(server, old) == 7
        checked, _ = host.check(renamed(free), outputs)
        assert host.diff(id_, outputs, checked).deleteBeforeReplace is shared
        made_id, _ = up(host, id_, outputs, renamed(free))
        assert made_id == free
        assert _made(server) == {taken, free}
        assert _messages(server, taken) == 0  # theirs, untouched


@pytest.mark.parametrize("change", ["name", "storage"])
def test_a_replace_whose_delete_is_refused_fails_the_diff_and_makes_nothing(
    server: NatsServer, change: str
) -> None:
    """A stream holding 3 messages, without ``allow_destroy``, renamed, or changed to
    memory storage: the delete of the old one is refused (its messages). Made first, the
    renamed stream would stay beside an old one that never goes; deleted first, the
    stream's dependents would go before the refusal. The diff now judges that delete:
    refused, naming allow_destroy, nothing made or changed."""
    with configured({"jetstream:servers": server.url}) as host:
        old, new = unique("UNDELETABLE"), unique("NEVERMADE")
        id_, _, outputs = host.apply(stream_inputs(old))
        run(_publish(server.url, f"{old}.a", 3))
        changed = stream_inputs(new) if change == "name" else stream_inputs(old, storage="memory")
        checked, _ = host.check(changed, outputs)
        with pytest.raises(grpc.RpcError) as refused:
            host.diff(id_, outputs, checked)
        assert "allow_destroy=True" in str(refused.value.details())
        assert _made(server) == {old}
        info = api(server, f"STREAM.INFO.{old}")
        assert (info["config"]["storage"], info["state"]["messages"]) == ("file", 3)


def test_a_consumer_moved_onto_a_stream_not_there_keeps_the_old_consumer(
    server: NatsServer,
) -> None:
    """A consumer whose ``stream`` is changed to a stream the server does not hold: Pulumi
    deleted it first, then its create was refused, the consumer (and where its readers
    were) gone. It is made first now: refused, the old consumer stays with the 4
    messages it has not delivered; moved to a stream that is there, it is made on it,
    then the old one deleted."""
    with configured({"jetstream:servers": server.url}) as host:
        stream, missing, other = unique("CMOVED"), unique("CMISSING"), unique("COTHER")
        host.apply(stream_inputs(stream))
        id_, _, outputs = host.apply(consumer_inputs(stream, "READER"))
        run(_publish(server.url, f"{stream}.a", 4))
        with pytest.raises(grpc.RpcError) as refused:
            up(host, id_, outputs, consumer_inputs(missing, "READER"))
        assert "Traceback" not in str(refused.value.details())
        info = api(server, f"CONSUMER.INFO.{stream}.READER")
        assert info["num_pending"] == 4
        host.apply(stream_inputs(other))
        checked, _ = host.check(consumer_inputs(other, "READER"), outputs)
        assert host.diff(id_, outputs, checked).deleteBeforeReplace is False
        made_id, _ = up(host, id_, outputs, consumer_inputs(other, "READER"))
        assert made_id == f"{other}/READER"
        assert "error" in api(server, f"CONSUMER.INFO.{stream}.READER")
        assert "error" not in api(server, f"CONSUMER.INFO.{other}.READER")


def test_a_consumer_whose_stream_is_not_there_says_so_and_how_to_order_it(
    server: NatsServer,
) -> None:
    """A consumer whose stream the server does not hold (not made yet, or made by a
    resource the consumer does not depend on): the refusal said "external stream ...
    does not exist", a word the program never wrote (the provider declares the stream
    external behind the scenes). It now says the consumer's stream is not on the server
    and how to order it: the stream as a resource of the program that the consumer
    depends on, or made first. Nothing is made."""
    with configured({"jetstream:servers": server.url}) as host:
        missing = unique("NOSTREAM")
        checked, failures = host.check(consumer_inputs(missing, "READER"))
        assert failures == []  # the inputs are fine: the server is what lacks the stream
        with pytest.raises(grpc.RpcError) as refused:
            host.create(checked)
        details = str(refused.value.details())
        assert "external" not in details and "Traceback" not in details, details
        assert f"its stream {missing} does not exist on the server" in details, details
        assert "depends_on" in details, details
        assert missing not in _streams(server)
        assert "error" in api(server, f"CONSUMER.INFO.{missing}.READER")


@pytest.mark.parametrize("retention", ["limits", "workqueue"])
def test_a_renamed_consumer_is_made_beside_the_old_one_unless_its_workqueue_refuses_it(
    server: NatsServer, retention: str
) -> None:
    """A consumer renamed: made beside the old one, then the old one deleted (the diff
    said delete first for every replace). On a workqueue stream the server refuses two
    consumers of overlapping filters side by side, so there the old one goes first."""
    with configured({"jetstream:servers": server.url}) as host:
        stream = unique("CRENAMED")
        host.apply(stream_inputs(stream, retention=retention))
        reader = consumer_inputs(stream, "OLD", filter_subject=f"{stream}.a")
        id_, _, outputs = host.apply(reader)
        renamed = {**reader, "name": "NEW"}
        checked, _ = host.check(renamed, outputs)
        first = host.diff(id_, outputs, checked).deleteBeforeReplace
        assert first is (retention == "workqueue")
        made_id, _ = up(host, id_, outputs, renamed)
        assert made_id == f"{stream}/NEW"
        names = api(server, f"CONSUMER.NAMES.{stream}")["consumers"]
        assert names == ["NEW"]


# --- resources that swap names in one `pulumi up` ------------------------------------------


def _swapped(
    host: ProviderHost, id_: str, outputs: dict[str, Any], renamed: dict[str, Any]
) -> tuple[dict[str, Any], Callable[[], tuple[str, dict[str, Any]]]]:
    """``pulumi up`` of a program naming its resources by list position, an item inserted
    at the front: resource 0 (``id_``, ``outputs``) now declares ``renamed``, a new
    resource 1 declares what resource 0 declared. As the engine runs it: resource 0's
    replace made new-first (its diff says so), then resource 1's create, refused (the
    live resource still holds resource 0's claim), which stops the ``pulumi up`` before
    it deletes resource 0's old resource. Returns resource 1's inputs and the next
    ``pulumi up``: Pulumi deletes the old resource first (pending deletion), then makes
    resource 1 (its id and outputs)."""
    checked, failures = host.check(renamed, outputs)
    assert failures == []
    diff = host.diff(id_, outputs, checked)
    assert diff.replaces and diff.deleteBeforeReplace is False
    host.create(checked)
    declared = {k: outputs[k] for k in renamed if k in outputs}
    with pytest.raises(grpc.RpcError) as refused:
        host.apply(declared)
    details = str(refused.value.details())
    assert CLAIM_KEY in details and "swap names" in details, details
    assert outputs["claim"] not in details and "Traceback" not in details, details

    def next_up() -> tuple[str, dict[str, Any]]:
        host.delete(id_, outputs)
        one_id, _, one = host.apply(declared)
        return one_id, one

    return declared, next_up


def test_streams_swapping_names_in_one_up_never_take_the_one_the_other_holds(
    server: NatsServer,
) -> None:
    """Resource 0 renamed A -> B, resource 1 now declaring A, in one ``pulumi up``:
    resource 1 adopted the A that still existed, then Pulumi deleted resource 0's old
    resource, A, with its 5 messages (its allow_destroy allowed it), and resource 1's
    state named a stream that was gone. Each create or adoption records a claim in its
    outputs and in the stream's metadata, and no create takes a resource holding
    another's: resource 1's create is refused, A keeps its 5 messages and resource 0's
    claim. The next ``pulumi up`` deletes resource 0's old A first, as its allow_destroy
    allows, then makes resource 1's."""
    with configured({"jetstream:servers": server.url}) as host:
        a, b = unique("SWAPA"), unique("SWAPB")
        id_, _, outputs = host.apply(stream_inputs(a, allow_destroy=True))
        run(_publish(server.url, f"{a}.x", 5))
        _, next_up = _swapped(host, id_, outputs, stream_inputs(b, allow_destroy=True))
        assert _made(server) == {a, b} and _messages(server, a) == 5
        assert _claim_on(server, a) == outputs["claim"]
        one_id, one = next_up()
        assert (one_id, one["name"]) == (a, a) and _claim_on(server, a) == one["claim"]
        assert _made(server) == {a, b} and _messages(server, a) == 0


def test_consumers_swapping_names_in_one_up_never_take_the_one_the_other_holds(
    versioned_server: NatsServer,
) -> None:
    """The same with consumers of one stream, on every supported server (consumers hold
    metadata since nats-server 2.10, the oldest): the consumer resource 1 declared stays
    resource 0's, made at the same time as before, until the next ``pulumi up``."""
    server = versioned_server
    with configured({"jetstream:servers": server.url}) as host:
        stream = unique("CSWAP")
        host.apply(stream_inputs(stream))
        id_, _, outputs = host.apply(consumer_inputs(stream, "A"))
        made = api(server, f"CONSUMER.INFO.{stream}.A")["created"]
        _, next_up = _swapped(host, id_, outputs, consumer_inputs(stream, "B"))
        info = api(server, f"CONSUMER.INFO.{stream}.A")
        assert info.get("created") == made
        assert info["config"]["metadata"][CLAIM_KEY] == outputs["claim"]
        assert sorted(api(server, f"CONSUMER.NAMES.{stream}")["consumers"]) == ["A", "B"]
        assert next_up()[0] == f"{stream}/A"
        assert sorted(api(server, f"CONSUMER.NAMES.{stream}")["consumers"]) == ["A", "B"]


def test_a_delete_leaving_a_stream_another_resource_took_says_so_in_one_line(
    clean_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    provider = JetStreamProvider(connection={"servers": clean_server.url})
    inputs = provider.check({}, {**stream_inputs("TAKEN"), "allow_destroy": True}).inputs
    first = provider.create(inputs)
    assert api(clean_server, "STREAM.DELETE.TAKEN").get("success")  # deleted by hand ...
    second = provider.create(inputs)  # ... and another resource of the name makes it again
    monkeypatch.setattr(pulumi.log, "info", lambda message, *_, **__: said.append(message))
    provider.delete(first.id, first.outs)
    assert len(said) == 1 and "TAKEN" in said[0] and "another resource" in said[0], said
    assert _made(clean_server) == {"TAKEN"}
    provider.delete(second.id, second.outs)
    assert _made(clean_server) == set()


def test_a_claim_written_by_someone_else_never_lets_a_delete_through(server: NatsServer) -> None:
    """The claim is metadata anyone may write: a stream made again by hand under the
    name, holding the resource's own claim copied, is still refused for its missing
    managed-by marker, its messages kept."""
    with configured({"jetstream:servers": server.url}) as host:
        name = unique("COPIED")
        id_, _, outputs = host.apply(stream_inputs(name, allow_destroy=True))
        assert api(server, f"STREAM.DELETE.{name}").get("success")
        claim = {CLAIM_KEY: outputs["claim"]}
        copied = {"name": name, "subjects": [f"{name}.>"], "metadata": claim}
        assert "error" not in api(server, f"STREAM.CREATE.{name}", copied)
        run(_publish(server.url, f"{name}.a", 2))
        with pytest.raises(grpc.RpcError) as refused:
            host.delete(id_, outputs)
        assert "managed-by marker" in str(refused.value.details())
        assert _messages(server, name) == 2


def test_the_claim_is_no_change_to_a_refresh_or_a_diff_and_an_update_keeps_it(
    server: NatsServer,
) -> None:
    """The claim is in the outputs and the stream's metadata: a refresh reads the same
    outputs back, the same inputs diff empty, and an update (which sends the whole
    metadata) keeps it, writing it back where someone stripped it, never over another
    resource's (that update is refused); the resource's delete still deletes."""
    with configured({"jetstream:servers": server.url}) as host:
        name = unique("CLAIMED")
        id_, inputs, outputs = host.apply(stream_inputs(name, allow_destroy=True))
        live = api(server, f"STREAM.INFO.{name}")["config"]["metadata"]
        assert live[CLAIM_KEY] == outputs["claim"]
        assert host.read(id_, outputs, inputs) == (id_, outputs)
        assert host.diff(id_, outputs, inputs).changes == DIFF_NONE
        news, _ = host.check(stream_inputs(name, allow_destroy=True, max_age="1h"), outputs)
        updated = host.update(id_, outputs, news)
        live = api(server, f"STREAM.INFO.{name}")["config"]
        assert live["max_age"] == 3_600_000_000_000
        assert updated["claim"] == outputs["claim"] == live["metadata"][CLAIM_KEY]
        assert host.diff(id_, updated, news).changes == DIFF_NONE
        for held, expected in ((None, outputs["claim"]), ("theirs", "theirs")):
            metadata = {k: v for k, v in live["metadata"].items() if k != CLAIM_KEY}
            live["metadata"] = {**metadata, **({CLAIM_KEY: held} if held else {})}
            assert "error" not in api(server, f"STREAM.UPDATE.{name}", live)
            age = "2h" if held is None else "3h"
            news, _ = host.check(stream_inputs(name, allow_destroy=True, max_age=age), updated)
            if held is None:
                host.update(id_, updated, news)
            else:  # another's: never written
                with pytest.raises(grpc.RpcError) as refused:
                    host.update(id_, updated, news)
                assert "a claim this provider did not write" in str(refused.value.details())
            live = api(server, f"STREAM.INFO.{name}")["config"]
            assert live["metadata"][CLAIM_KEY] == expected
            assert live["max_age"] == 7_200_000_000_000  # 3h never written
        live["metadata"][CLAIM_KEY] = outputs["claim"]
        assert "error" not in api(server, f"STREAM.UPDATE.{name}", live)
        run(_publish(server.url, f"{name}.a", 1))
        host.delete(id_, updated)
        assert name not in _made(server)


def test_outputs_without_a_claim_delete_as_before(server: NatsServer) -> None:
    """Outputs an older provider wrote hold no claim: their delete is what it was."""
    with configured({"jetstream:servers": server.url}) as host:
        name = unique("UNCLAIMED")
        id_, _, outputs = host.apply(stream_inputs(name, allow_destroy=True))
        assert api(server, f"STREAM.DELETE.{name}").get("success")
        host.apply(stream_inputs(name, allow_destroy=True))  # another claim on the server
        older = {k: v for k, v in outputs.items() if k != "claim"}
        host.delete(id_, older)
        assert name not in _made(server)


NO_METADATA_UPDATES = """\
rules:
  - id: no-metadata-updates
    level: deny
    message: a resource's metadata is never changed here
    expr: step.action != "update" || !step.fields.exists(f, f.startsWith("metadata"))
"""


def _claim_on(server: NatsServer, name: str) -> str | None:
    metadata = api(server, f"STREAM.INFO.{name}")["config"].get("metadata") or {}
    return metadata.get(CLAIM_KEY)


def _unclaimed(server: NatsServer, name: str) -> None:
    """Stream ``name`` without its claim, as ``reconcile apply`` (or an older provider)
    leaves a stream it made: the managed-by marker, no claim."""
    config = api(server, f"STREAM.INFO.{name}")["config"]
    config["metadata"] = {k: v for k, v in config["metadata"].items() if k != CLAIM_KEY}
    assert "error" not in api(server, f"STREAM.UPDATE.{name}", config)
    assert _claim_on(server, name) is None


def test_the_claim_an_adoption_as_declared_writes_is_judged_as_any_update(
    server: NatsServer, tmp_path: Path
) -> None:
    """A resource adopting a stream that already matches it (nothing to apply; made by
    ``reconcile apply``, no claim) wrote its claim in an update of its own after the
    plan: no policy rule judged it. It is a step of the plan now: a policy refusing
    metadata updates refuses the adoption with its usual message (no claim written), an
    environment in ``mode: observe`` adopts without writing it (one holding another
    resource's claim too: it is never written); without either it is written. The
    stream's 3 messages stay through each."""
    policy = tmp_path / "no-metadata-updates.yaml"
    policy.write_text(NO_METADATA_UPDATES, encoding="utf-8")
    observed = operations.Environment("prod", Lifecycle(observe=True, observed_at="p.yaml:3"))
    with configured({"jetstream:servers": server.url}) as plain_host:
        name = unique("ADOPTED")
        inputs = stream_inputs(name)
        _, _, first = plain_host.apply(inputs)
        run(_publish(server.url, f"{name}.a", 3))
        watching = plain_host.using(JetStreamProvider(environment=observed))
        _, _, watched = watching.apply(inputs)  # another resource's: watched, not written
        assert "claim" not in watched
        assert _claim_on(server, name) == first["claim"]
        _unclaimed(server, name)
        judged = plain_host.using(JetStreamProvider(policies=[str(policy)]))
        with pytest.raises(grpc.RpcError) as refused:
            judged.apply(inputs)
        details = str(refused.value.details())
        assert "no-metadata-updates" in details and "Traceback" not in details, details
        assert _claim_on(server, name) is None
        assert _messages(server, name) == 3
        watching = plain_host.using(JetStreamProvider(environment=observed))
        _, _, watched = watching.apply(inputs)
        assert "claim" not in watched
        assert _claim_on(server, name) is None
        assert _messages(server, name) == 3
        _, _, adopted = plain_host.apply(inputs)
        assert adopted["claim"] is not None
        assert _claim_on(server, name) == adopted["claim"]
        assert _messages(server, name) == 3


def test_a_rename_whose_old_stream_another_resource_took_is_judged_as_its_delete_leaves_it(
    server: NatsServer,
) -> None:
    """Resource 0 (no allow_destroy) renamed A -> B after A was deleted by hand and made
    again by resource 1 (its claim on A). The diff judged the delete of A without the
    claim: refused for A's 5 messages, though the delete the update makes leaves A
    (resource 1's). The diff now judges it as the delete does: B is made beside A, A's
    delete leaves it, its messages kept."""
    with configured({"jetstream:servers": server.url}) as host:
        a, b = unique("TAKENA"), unique("TAKENB")
        id_, _, outputs = host.apply(stream_inputs(a))
        assert api(server, f"STREAM.DELETE.{a}").get("success")
        host.apply(stream_inputs(a))  # resource 1 makes A again
        run(_publish(server.url, f"{a}.x", 5))
        checked, _ = host.check(stream_inputs(b), outputs)
        diff = host.diff(id_, outputs, checked)
        assert list(diff.replaces) == ["name"] and diff.deleteBeforeReplace is False
        assert _made(server) == {a} and _messages(server, a) == 5
        made_id, _ = up(host, id_, outputs, stream_inputs(b))
        assert made_id == b
        assert _made(server) == {a, b} and _messages(server, a) == 5


def test_a_replace_onto_a_stream_another_resource_took_is_refused_at_the_diff(
    server: NatsServer,
) -> None:
    """Resource 0 (allow_destroy, taken away with the change) changes A's storage after
    A was deleted by hand and made again by resource 1. The diff judged A's delete
    without the claim: allowed, so A had to go first, and the create was judged without
    A: the preview promised the replace. The update's delete leaves A (resource 1's),
    and the create then found A, of the other storage, holding 5 messages, and was
    refused. The diff now judges both as the update makes them: refused (A holds
    another resource's claim), nothing changed, A's messages counted after each step."""
    with configured({"jetstream:servers": server.url}) as host:
        name = unique("TAKENSTORE")
        inputs = stream_inputs(name, storage="file")
        id_, _, outputs = host.apply({**inputs, "allow_destroy": True})
        assert api(server, f"STREAM.DELETE.{name}").get("success")
        host.apply(inputs)  # resource 1 makes it again
        run(_publish(server.url, f"{name}.x", 5))
        checked, _ = host.check({**inputs, "storage": "memory"}, outputs)
        with pytest.raises(grpc.RpcError) as refused:
            host.diff(id_, outputs, checked)
        details = str(refused.value.details())
        assert CLAIM_KEY in details and "Traceback" not in details, details
        info = api(server, f"STREAM.INFO.{name}")
        assert info["config"]["storage"] == "file" and info["state"]["messages"] == 5
        with pytest.raises(grpc.RpcError):  # pulumi up stops at the same diff
            up(host, id_, outputs, {**inputs, "storage": "memory"})
        info = api(server, f"STREAM.INFO.{name}")
        assert info["config"]["storage"] == "file" and info["state"]["messages"] == 5


NO_NEW_BUCKETS = """\
rules:
  - id: no-new-buckets
    level: deny
    message: no KeyValue bucket is made here
    expr: step.action != "create" || resource.kind != "KeyValue"
"""


def test_a_kind_change_on_the_same_stream_is_judged_without_the_old_one_before_it_goes(
    server: NatsServer, tmp_path: Path
) -> None:
    """A stream named ``KV_<bucket>`` holding 5 messages (``allow_destroy``) declared as
    the KeyValue bucket of that stream: the same stream name, so the old one must go
    first. With a policy denying new buckets, Pulumi deleted the stream and its messages,
    then the create was refused: nothing left. The diff now judges the create without
    the old stream: refused, naming the rule, the stream kept; without the rule, the
    stream goes first and the bucket is made."""
    policy = tmp_path / "no-new-buckets.yaml"
    policy.write_text(NO_NEW_BUCKETS, encoding="utf-8")
    with configured({"jetstream:servers": server.url}) as plain_host:
        host = plain_host.using(JetStreamProvider(policies=[str(policy)]))
        bucket = unique("settings")
        stream = {
            "kind": "Stream",
            "name": f"KV_{bucket}",
            "subjects": [f"$KV.{bucket}.>"],
            "storage": "memory",
            "allow_destroy": True,
        }
        id_, _, outputs = host.apply(stream)
        run(_publish(server.url, f"$KV.{bucket}.a", 5))
        kind_changed = {"kind": "KeyValue", "name": bucket, "storage": "memory"}
        with pytest.raises(grpc.RpcError) as refused:
            up(host, id_, outputs, kind_changed)
        assert "no-new-buckets" in str(refused.value.details())
        assert _messages(server, f"KV_{bucket}") == 5
        checked, _ = plain_host.check(kind_changed, outputs)
        assert plain_host.diff(id_, outputs, checked).deleteBeforeReplace is True
        made_id, made = up(plain_host, id_, outputs, kind_changed)
        assert (made_id, made["kind"]) == (bucket, "KeyValue")
        assert _messages(server, f"KV_{bucket}") == 0


@pytest.mark.parametrize("unknown", ["servers", "connection"])
def test_a_replace_whose_connection_is_not_known_in_the_preview_is_previewed(
    server: NatsServer, unknown: str
) -> None:
    """A renamed stream whose connection comes from a resource the same ``pulumi up``
    makes: its servers (or the whole connection) are not known in the preview. The diff
    judged the replace against that unknown server: the preview failed, ``cannot connect
    to <pulumi.output.Unknown object ...>``, or a traceback (an Unknown has no items). It
    now shows the replace unjudged; the diff of ``pulumi up``, with the values known,
    judges it."""
    with configured({"jetstream:servers": server.url}) as host:
        old, new = unique("KNOWNLATER"), unique("RENAMEDLATER")
        id_, _, outputs = host.apply(stream_inputs(old))
        later = {"servers": rpc.UNKNOWN} if unknown == "servers" else rpc.UNKNOWN
        checked, failures = host.check({**stream_inputs(new), "connection": later}, outputs)
        assert failures == []
        diff = host.diff(id_, outputs, checked)
        assert list(diff.replaces) == ["name"]
        known, _ = host.check({**stream_inputs(new), "connection": {"servers": server.url}})
        assert host.diff(id_, outputs, known).deleteBeforeReplace is False
        assert _made(server) == {old}


# --- a live resource another Pulumi resource holds is never written, replaced or taken -----


def _refused_over_held(details: str, name: str, held: str) -> None:
    """A refusal over ``name`` holding another resource's claim ``held``: naming the
    resource, the claim's key and its first characters (never its whole value), and
    the ways out."""
    assert name in details and CLAIM_KEY in details, details
    assert "another Pulumi resource" in details and "pulumi state delete" in details, details
    assert f"a claim starting {held[:8]}" in details, details  # which one: its start
    assert held not in details and "Traceback" not in details, details


def _untouched(server: NatsServer, name: str, held: str, storage: str = "file") -> None:
    """Stream ``name`` still holds its 5 messages, its storage and the claim ``held``."""
    info = api(server, f"STREAM.INFO.{name}")
    assert info["state"]["messages"] == 5
    assert info["config"]["storage"] == storage and info["config"]["max_msgs"] == -1
    assert info["config"]["metadata"][CLAIM_KEY] == held


@pytest.mark.parametrize(
    "declared",
    [
        {"storage": "memory", "allow_destroy": True},
        {"storage": "memory", "migrate": True},
        {"max_msgs": 2, "allow_destroy": True},
        {},
    ],
    ids=["replace", "migrate", "lossy-update", "as-declared"],
)
def test_a_create_never_replaces_writes_or_takes_a_stream_another_resource_holds(
    server: NatsServer, declared: dict[str, Any]
) -> None:
    """Resource 0 holds stream A (its claim, 5 messages); resource 1 of the same program
    (or another stack) declares A too. Its create replaced A with ``allow_destroy`` (the
    5 messages deleted), migrated it, trimmed it, or adopted it as declared, each time
    writing its own claim over resource 0's. It is refused now, naming A and the claim
    that holds it: A, its messages and resource 0's claim counted after the step."""
    with configured({"jetstream:servers": server.url}) as host:
        name = unique("HELD")
        _, _, zero = host.apply(stream_inputs(name, storage="file", allow_destroy=True))
        run(_publish(server.url, f"{name}.a", 5))
        checked, failures = host.check(stream_inputs(name, **{"storage": "file", **declared}))
        assert failures == []
        with pytest.raises(grpc.RpcError) as refused:
            host.create(checked)
        _refused_over_held(str(refused.value.details()), name, zero["claim"])
        _untouched(server, name, zero["claim"])


def test_a_create_never_replaces_a_consumer_another_resource_holds(server: NatsServer) -> None:
    """The same for a consumer: resource 1 declaring resource 0's consumer with another
    ack policy (only a replace changes it) replaced it, its delivery state lost."""
    with configured({"jetstream:servers": server.url}) as host:
        stream = unique("CHELD")
        host.apply(stream_inputs(stream))
        _, _, zero = host.apply(consumer_inputs(stream, "READER"))
        run(_publish(server.url, f"{stream}.a", 5))
        made = api(server, f"CONSUMER.INFO.{stream}.READER")["created"]
        other = consumer_inputs(stream, "READER", ack_policy="all", allow_destroy=True)
        checked, _ = host.check(other)
        with pytest.raises(grpc.RpcError) as refused:
            host.create(checked)
        _refused_over_held(str(refused.value.details()), f"{stream}/READER", zero["claim"])
        info = api(server, f"CONSUMER.INFO.{stream}.READER")
        assert (info["created"], info["num_pending"]) == (made, 5)
        assert info["config"]["ack_policy"] == "explicit"
        assert info["config"]["metadata"][CLAIM_KEY] == zero["claim"]


def _taken_since(
    host: ProviderHost, server: NatsServer, name: str, **theirs: Any
) -> tuple[str, dict[str, Any], str]:
    """Resource 0 made stream ``name`` (``allow_destroy``); then the stream was deleted by
    hand and resource 1 (another stack, say) made it again, ``theirs``, and it took 5
    messages. Returns resource 0's id and outputs, and resource 1's claim."""
    id_, _, zero = host.apply(stream_inputs(name, storage="file", allow_destroy=True))
    assert api(server, f"STREAM.DELETE.{name}").get("success")
    _, _, one = host.apply(stream_inputs(name, **theirs))
    run(_publish(server.url, f"{name}.a", 5))
    assert zero["claim"] != one["claim"]
    return id_, zero, one["claim"]


@pytest.mark.parametrize("theirs", ["file", "memory"])
def test_a_replace_never_creates_over_a_stream_another_resource_holds(
    server: NatsServer, theirs: str
) -> None:
    """Resource 0 changes its stream's storage to memory (``allow_destroy``) after
    resource 1 made the stream again under the name. The delete of the replace leaves
    the stream (resource 1's claim), so the diff had Pulumi create first, and the create
    replaced resource 1's stream (file: its 5 messages deleted) or adopted it (memory,
    as declared), resource 1's claim overwritten. The diff refuses it now, as does the
    create Pulumi makes when ``delete_before_replace`` overrides the diff's order (the
    delete leaves the stream): its messages and resource 1's claim counted after each."""
    with configured({"jetstream:servers": server.url}) as host:
        name = unique("REPLACEHELD")
        id_, zero, held = _taken_since(host, server, name, storage=theirs)
        memory = stream_inputs(name, storage="memory", allow_destroy=True)
        checked, _ = host.check(memory, zero)
        with pytest.raises(grpc.RpcError) as refused:
            host.diff(id_, zero, checked)
        _refused_over_held(str(refused.value.details()), name, held)
        _untouched(server, name, held, theirs)
        with pytest.raises(grpc.RpcError):  # pulumi up stops at the same diff
            up(host, id_, zero, memory)
        _untouched(server, name, held, theirs)
        host.delete(id_, zero)  # delete_before_replace: the delete leaves it ...
        _untouched(server, name, held, theirs)
        with pytest.raises(grpc.RpcError) as refused:  # ... and the create is refused
            host.create(checked)
        _refused_over_held(str(refused.value.details()), name, held)
        _untouched(server, name, held, theirs)


@pytest.mark.parametrize(
    "change",
    [{"max_msgs": 2}, {"storage": "memory", "migrate": True}],
    ids=["lossy-update", "migrate"],
)
def test_an_update_never_writes_a_stream_another_resource_holds(
    server: NatsServer, change: dict[str, Any]
) -> None:
    """Resource 0's update (``allow_destroy``) after resource 1 made its stream again
    under the name: it trimmed resource 1's stream to 2 messages, or migrated it to
    memory storage. It is refused now: the stream, its 5 messages and resource 1's claim
    counted after it."""
    with configured({"jetstream:servers": server.url}) as host:
        name = unique("UPDATEHELD")
        id_, zero, held = _taken_since(host, server, name)
        changed = stream_inputs(name, **{"storage": "file", "allow_destroy": True, **change})
        with pytest.raises(grpc.RpcError) as refused:
            up(host, id_, zero, changed)
        _refused_over_held(str(refused.value.details()), name, held)
        _untouched(server, name, held)
