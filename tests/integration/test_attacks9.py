"""The front doors other than the agent, attacked as an attacker and a careless user
would (the Pulumi provider, saved plans, the Action, drift and export), against real
nats-server processes, messages counted with a raw client before and after."""

from __future__ import annotations

import base64
import json
import os
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cli_runner import reconcile
from pulumi.runtime.proto import provider_pb2
from pulumi_host import ProviderHost, configured
from servers import NatsServer, options, run
from test_action import GitHubStandIn, Workspace, github  # noqa: F401 (a fixture)
from test_lifecycle import _edit, _info, _messages, _publish
from test_provider_host import api
from test_saved_plans import action_step, plan_out, refit, repo, state

from pulumi_provider import JetStreamProvider
from reconciler.errors import RefusedPlan
from reconciler.execution import lock
from reconciler.execution.saved_plans import MAX_SAVED_BYTES
from reconciler.jetstream import open_client
from reconciler.specs.lifecycle import PROTECT_KEY
from reconciler.specs.spec import MANAGED_KEY

pytestmark = pytest.mark.integration

DIFF_NONE = provider_pb2.DiffResponse.DIFF_NONE
DIFF_SOME = provider_pb2.DiffResponse.DIFF_SOME


@pytest.fixture(scope="module")
def host(nats_server: NatsServer) -> Iterator[ProviderHost]:
    """The real ``python -m pulumi.dynamic`` host, on the session server."""
    with configured({"jetstream:servers": nats_server.url}) as provider_host:
        yield provider_host


def _orders(**fields: Any) -> dict[str, Any]:
    return {"kind": "Stream", "name": "ORDERS", "subjects": ["orders.>"], **fields}


# --- Pulumi: the lifecycle a resource declared governs its delete ------------------------


def test_a_pulumi_delete_of_a_protected_stream_is_refused_when_its_record_was_removed(
    clean_server: NatsServer,
) -> None:
    """``prevent_destroy`` in the resource's inputs protects it, not only the record its
    create wrote on the server: someone removing that record by hand (it is data anyone
    can write) does not unprotect what the program declares protected."""
    provider = JetStreamProvider(connection={"servers": clean_server.url})
    news = provider.check({}, _orders(lifecycle={"prevent_destroy": True})).inputs
    created = provider.create(news)
    run(_publish(clean_server.url, "orders.new", 5))
    metadata = dict(_info(clean_server.url, "ORDERS")["config"]["metadata"])
    del metadata[PROTECT_KEY]
    _edit(clean_server.url, "ORDERS", metadata=metadata)  # the record removed by hand
    with pytest.raises(RefusedPlan, match="prevent_destroy"):
        provider.delete(created.id, {**created.outs, "allow_destroy": True})
    assert _messages(clean_server.url) == 5


def test_a_pulumi_delete_of_an_observed_stream_leaves_it_on_the_server(
    host: ProviderHost, clean_server: NatsServer
) -> None:
    """A resource declared ``mode: observe`` is never written, so removing it from the
    program (or ``pulumi destroy``) forgets it and leaves the server's stream and its
    messages, even with ``allow_destroy``. Declaring the mode is itself a change the
    preview shows (an update), so the outputs the delete gets record it."""
    id_, _, outputs = host.apply(_orders())
    run(_publish(clean_server.url, "orders.new", 7))
    observing, _ = host.check(_orders(lifecycle={"mode": "observe"}))
    assert host.diff(id_, outputs, observing).changes == DIFF_SOME
    outputs = host.update(id_, outputs, {**observing, "allow_destroy": True})
    host.delete(id_, outputs)
    assert _messages(clean_server.url) == 7


def test_a_pulumi_preview_of_an_observed_stream_that_differs_is_no_change(
    host: ProviderHost, clean_server: NatsServer
) -> None:
    """The preview of an observed resource whose declared config differs from the live
    one (an immutable field included) is no change and no replace, never a traceback:
    nothing is ever written to it."""
    observed = _orders(lifecycle={"mode": "observe"})
    id_, _, outputs = host.apply(_orders())
    outputs = host.update(id_, outputs, host.check(observed)[0])
    run(_publish(clean_server.url, "orders.new", 3))
    for change in ({"storage": "memory"}, {"max_age": "1h"}):
        news, failures = host.check({**observed, **change})
        assert failures == []
        answer = host.diff(id_, outputs, news)
        assert (answer.changes, list(answer.replaces)) == (DIFF_NONE, [])
    assert _messages(clean_server.url) == 3


def test_a_pulumi_replace_the_new_lifecycle_prevents_is_refused_at_the_preview(
    host: ProviderHost, clean_server: NatsServer
) -> None:
    """Pulumi replaces a resource itself (delete with the old outputs, then create): a
    change declaring ``prevent_destroy`` together with a change only a replace makes
    (storage) was a replace whose delete the old inputs allowed, and the messages went.
    ``reconcile apply`` refuses that replace whatever the flags; the preview does now,
    before anything changes. A change an update makes is still an update."""
    id_, _, outputs = host.apply(_orders(allow_destroy=True))
    run(_publish(clean_server.url, "orders.new", 6))
    protected = _orders(allow_destroy=True, lifecycle={"prevent_destroy": True})
    replaced, _ = host.check({**protected, "storage": "memory"})
    with pytest.raises(grpc.RpcError) as refused:
        host.diff(id_, outputs, replaced)
    assert "prevent_destroy" in str(refused.value.details())
    updated, _ = host.check({**protected, "max_age": "1h"})
    answer = host.diff(id_, outputs, updated)
    assert (answer.changes, list(answer.replaces)) == (DIFF_SOME, [])
    assert _messages(clean_server.url) == 6


# --- secrets in invalid specs: never quoted in an error -----------------------------------

#: A secret as a careless user writes one: in a stream's metadata under a secret-looking
#: key (the wrong type), and as a secret KeyValue entry's value holding ": " (invalid
#: plain YAML, so the file is not even parsed).
SECRET = "Hunter2-x9Kq7"
SECRET_NUMBER = 8675309120417
METADATA = f"""\
kind: Stream
name: ORDERS
subjects: ["orders.>"]
metadata:
  db_password: {SECRET_NUMBER}
  api_token: ["{SECRET}-list"]
"""
ENTRY = f"""\
kind: KeyValueEntry
bucket: config
key: db
secret: true
value: {SECRET}: and more
"""


@pytest.fixture
def workspace(tmp_path: Path, github: GitHubStandIn) -> Workspace:  # noqa: F811 (a fixture)
    return Workspace(tmp_path / "ws", github)


def _forms(*secrets: str) -> list[str]:
    """Each secret as text and in the forms a report could turn it into."""
    found = []
    for secret in secrets:
        found += [secret, base64.b64encode(secret.encode()).decode()]
    return found


def test_an_invalid_spec_never_quotes_a_secret_in_the_actions_log_summary_or_annotations(
    clean_server: NatsServer, workspace: Workspace
) -> None:
    """Plans and reports redact a value under a secret-looking name and a secret entry's
    value; the errors of an invalid spec did not: the schema error quoted the value
    (``got integer 8675309120417``) and a YAML error quoted the line holding it. Both
    now say where and what is wrong without it, in every output of the step."""
    workspace.spec.write_text(METADATA, encoding="utf-8")
    (workspace.spec.parent / "entry.yaml").write_text(ENTRY, encoding="utf-8")
    result = workspace.step(clean_server, mode="plan")
    assert result.code == 1
    said = "\n".join([result.stdout, result.stderr, result.summary, *result.outputs.values()])
    assert "specs/orders.yaml:5" in said and "specs/entry.yaml:5" in said
    for form in _forms(SECRET, str(SECRET_NUMBER)):
        assert form not in said
    assert not api(clean_server, "STREAM.NAMES").get("streams")  # nothing was changed


def test_a_pulumi_check_never_quotes_a_secret_metadata_value(host: ProviderHost) -> None:
    """The check failures ``pulumi preview`` prints come from the same validation."""
    inputs = _orders(metadata={"db_password": SECRET_NUMBER, "api_token": [SECRET]})
    _, failures = host.check(inputs)
    assert {f.property for f in failures} == {"metadata.db_password", "metadata.api_token"}
    said = " ".join(f.reason for f in failures)
    for form in _forms(SECRET, str(SECRET_NUMBER)):
        assert form not in said


# --- the Action: a saved plan is data; its strings never become workflow commands ---------

#: What a forged saved plan can carry: a line break and a command, an OSC title, a bidi
#: override, the runner's older command form found anywhere in a line, a mention, HTML.
HOSTILE = "x\n::error::pwned\x1b]0;title\x07\u202e##[error]forged @team <b>z</b>"


def test_a_forged_saved_plans_file_names_never_reach_the_actions_log_raw(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A saved plan downloaded from a pull request's run is anyone's: a policy file name
    in it became the ``file=`` of an ``::error`` annotation unescaped (ESC, U+202E and
    ``##[error]`` raw in the log line). The apply is refused, nothing changes, and every
    log line is inert."""
    root = repo(tmp_path)
    plan = plan_out(root, clean_server)
    refit(plan, lambda d: d["request"].update(policies=[HOSTILE]))
    code, log, _ = action_step(root, clean_server, mode="apply", **{"plan-file": str(plan)})
    assert code == 1
    for line in log.splitlines():
        assert "\x1b" not in line and "\u202e" not in line and "##[" not in line, line
        assert not line.startswith("::error::pwned"), line
    assert state(clean_server) == {}


# --- saved plans: a file that is no plan is refused unread ---------------------------------


def test_a_plan_file_that_is_a_pipe_is_refused_never_waited_on(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The Action's ``plan-file`` read whatever the path named: a FIFO (or a symlink to
    ``/dev/zero``) hung the step, or filled its memory, until the job's timeout."""
    root = repo(tmp_path)
    fifo = tmp_path / "reviewed.plan"
    os.mkfifo(fifo)
    code, log, _ = action_step(root, clean_server, mode="apply", **{"plan-file": str(fifo)})
    assert code == 1 and "not a regular file" in log, log
    assert state(clean_server) == {}


def test_a_saved_plan_larger_than_any_plan_is_refused_unread(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """A file with the saved plan's marker and a gigabyte after it (sparse: it takes no
    room) is refused from its size, never read whole into memory."""
    root = repo(tmp_path)
    plan = plan_out(root, clean_server)
    with plan.open("r+b") as file:
        file.truncate(MAX_SAVED_BYTES + 1)
    done = reconcile("apply", str(plan), "--server", clean_server.url, cwd=root)
    assert done.returncode == 1, done.stderr
    assert f"larger than {MAX_SAVED_BYTES >> 20} MiB" in done.stderr
    assert "Traceback" not in done.stderr
    assert state(clean_server) == {}


# --- export: what the server holds is written so it shows as what it is --------------------

#: Format characters a description or metadata can carry: a bidi override (what follows
#: reads backwards in a reviewer's diff and terminal), an isolate, a zero-width space.
BIDI = "amount: 100\u202e00 EUR\u2066x\u2069\u200b"


def test_an_export_writes_format_characters_as_escapes_and_reads_back_the_same(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``reconcile export`` wrote a bidi override from a live description or metadata
    key raw into the spec file it writes (and prints): the file a reviewer reads in a
    pull request showed other text than it holds. Now each is an escape inside a
    double-quoted string, and the exported files plan no change to those fields."""
    config = {"subjects": ["orders.>"], "description": BIDI, "metadata": {f"k{BIDI}": BIDI}}
    assert "error" not in api(clean_server, "STREAM.CREATE.ORDERS", {"name": "ORDERS", **config})
    run(_publish(clean_server.url, "orders.new", 4))
    out = tmp_path / "exported"
    printed = reconcile("export", "--server", clean_server.url, cwd=tmp_path)
    written = reconcile("export", "--server", clean_server.url, "--out", str(out), cwd=tmp_path)
    assert printed.returncode == 0 and written.returncode == 0, written.stderr
    text = (out / "stream-ORDERS.yaml").read_text(encoding="utf-8")
    for said in (printed.stdout, text):
        assert not any(unicodedata.category(c) == "Cf" for c in said), said
        assert "\\u202e" in said
    planned = reconcile(
        "plan", str(out), "--server", clean_server.url, "--format", "json", cwd=tmp_path
    )
    changes = json.loads(planned.stdout)["changes"]
    assert [f["path"] for c in changes for f in c["fields"]] == [f"metadata.{MANAGED_KEY}"]
    assert _messages(clean_server.url) == 4


# --- Pulumi: an error shows what someone else wrote as text --------------------------------


def test_a_pulumi_error_naming_a_hostile_lock_holder_is_escaped(clean_server: NatsServer) -> None:
    """The apply lock's lease is a KeyValue value anyone with access can write; the
    provider host printed its holder raw in the error ``pulumi up`` shows (an ESC screen
    clear, an OSC 8 link, U+202E). The CLI escapes the same error; now Pulumi does too,
    and nothing is created."""
    holder = lock.Holder(owner="EVIL\x1b[2J\u202e", host="h\x1b]8;;http://e\x07x", pid=1, run="x")

    async def take() -> None:
        async with open_client(options(clean_server)) as client:
            await lock.acquire(client, holder, timeout=0)

    run(take())
    config = {"jetstream:servers": clean_server.url, "jetstream:lockTimeout": "0.2"}
    with configured(config) as waiting:
        checked, _ = waiting.check(_orders())
        with pytest.raises(grpc.RpcError) as refused:
            waiting.create(checked)
    details = str(refused.value.details())
    assert "EVIL" in details and "Traceback" not in details
    assert not any(raw in details for raw in ("\x1b", "\x07", "\u202e")), repr(details)
    assert "ORDERS" not in (api(clean_server, "STREAM.NAMES").get("streams") or [])


def test_the_action_refuses_a_plan_file_inside_the_spec_folder_as_plan_out_does(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``plan --out`` refuses a file inside a spec folder: the next run reads it as a
    spec (``jetstream-plan.json`` there: ``missing `kind```, every later plan and apply
    refused). The Action's ``plan-file`` wrote it there. One rule now."""
    root = repo(tmp_path)
    inside = root / "specs" / "jetstream-plan.json"
    code, log, _ = action_step(root, clean_server, mode="plan", **{"plan-file": str(inside)})
    assert code == 1 and "inside the spec folder" in log, log
    assert not inside.exists()
    assert state(clean_server) == {}


# --- drift: a report that cannot be written says where --------------------------------------


def test_a_drift_report_that_cannot_be_written_names_the_file_and_why(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``drift --out`` under a file (a typo) ended in ``unexpected FileExistsError ...:
    a reply no NATS server sends ..., or a bug``: the server blamed for a local file.
    The report is now written as ``plan --out`` writes its file (whole, or one line
    naming it and why); a report that can be written still is."""
    specs = tmp_path / "orders.yaml"
    specs.write_text("kind: Stream\nname: ORDERS\nsubjects: [orders.>]\n", encoding="utf-8")
    url = ["--server", clean_server.url]
    under_a_file = specs / "report.html"
    done = reconcile("drift", str(specs), *url, "--out", str(under_a_file), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert f"cannot write {under_a_file}" in done.stderr and "NATS" not in done.stderr
    report = tmp_path / "reports" / "drift.md"
    done = reconcile(
        "drift", str(specs), *url, "--format", "markdown", "--out", str(report), cwd=tmp_path
    )
    assert done.returncode == 2 and "ORDERS" in report.read_text(encoding="utf-8")
