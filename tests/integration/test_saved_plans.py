"""Saved plans on real servers: ``reconcile plan --out FILE`` then ``reconcile apply FILE``
applies exactly what was reviewed, or refuses and changes nothing (docs/saved-plans.md).

Every test runs the CLI as a user does (a subprocess, in a git work tree holding the
specs), changes the server with nats-py where the world moves on meanwhile, and counts
the messages and configs before and after each apply it claims changed nothing."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from cli_runner import reconcile
from servers import NatsServer, run

from reconciler.identity import INTERNAL_STREAMS
from reconciler.planning.saved import integrity

pytestmark = pytest.mark.integration

ORDERS = """\
kind: Stream
name: ORDERS
subjects: ["ORDERS.*"]
max_age: 1h
{extra}
---
kind: Consumer
stream: ORDERS
name: NEW
ack_policy: explicit
filter_subject: ORDERS.new
"""


# --- the repository and the server, as a user has them ---------------------------------


def repo(tmp_path: Path, extra: str = "") -> Path:
    """A git work tree with specs/orders.yaml committed."""
    root = tmp_path / "repo"
    (root / "specs").mkdir(parents=True)
    (root / "specs" / "orders.yaml").write_text(ORDERS.format(extra=extra))
    git(root, "init", "-q")
    git(root, "add", "specs")
    git(root, "commit", "-q", "-m", "specs")
    return root


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


async def _with_nc(url: str, work: Callable[[Any], Any], **connect: Any) -> Any:
    nc = await nats.connect(url, **connect)
    try:
        return await work(nc)
    finally:
        await nc.close()


def with_nc(server: NatsServer, work: Callable[[Any], Any], **connect: Any) -> Any:
    return run(_with_nc(server.url, work, **connect))


def api(server: NatsServer, op: str, body: dict[str, Any] | None = None, **kw: Any) -> Any:
    """One JetStream API request made with nats-py."""

    async def go(nc: Any) -> Any:
        payload = json.dumps(body).encode() if body is not None else b""
        reply = await nc.request(f"$JS.API.{op}", payload, timeout=5)
        return json.loads(reply.data)

    return with_nc(server, go, **kw)


def publish(server: NatsServer, subject: str, count: int, **kw: Any) -> None:
    async def go(nc: Any) -> None:
        js = nc.jetstream()
        for i in range(count):
            await js.publish(subject, f"m{i}".encode())

    with_nc(server, go, **kw)


def state(server: NatsServer, **kw: Any) -> dict[str, Any]:
    """Every stream's config and message count, and every consumer's config: what an
    apply that changed nothing leaves exactly as it was."""
    names = api(server, "STREAM.NAMES", **kw).get("streams") or []
    found: dict[str, Any] = {}
    for name in sorted(n for n in names if n not in INTERNAL_STREAMS):
        info = api(server, f"STREAM.INFO.{name}", **kw)
        consumers = api(server, f"CONSUMER.LIST.{name}", **kw).get("consumers") or []
        found[name] = {
            "config": info["config"],
            "messages": info["state"]["messages"],
            "consumers": {c["name"]: c["config"] for c in consumers},
        }
    return found


def plan_out(root: Path, server: NatsServer, out: str = "../reviewed.plan", *extra: str) -> Path:
    done = reconcile("plan", "specs", "--out", out, "--server", server.url, *extra, cwd=root)
    assert done.returncode == 0, done.stderr
    return (root / out).resolve()


def apply_file(root: Path, server: NatsServer, plan: Path, *extra: str) -> Any:
    return reconcile("apply", str(plan), "--server", server.url, *extra, cwd=root)


def create_orders(server: NatsServer, root: Path) -> None:
    """ORDERS and NEW as the specs declare them, with 10 messages."""
    done = reconcile("apply", "specs", "--server", server.url, "--yes", cwd=root)
    assert done.returncode == 0, done.stderr
    publish(server, "ORDERS.new", 10)


def refit(plan: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit a saved plan as an attacker would: change it, then fix its digest up."""
    document = json.loads(plan.read_text())
    change(document)
    body = {k: v for k, v in document.items() if k != "digest"}
    document["digest"] = integrity(body)
    plan.write_text(json.dumps(document, indent=2))


# --- tests ----------------------------------------------------------------------------


def test_a_saved_plan_applies_the_reviewed_steps(clean_server: NatsServer, tmp_path: Path) -> None:
    root = repo(tmp_path)
    create_orders(clean_server, root)
    (root / "specs" / "orders.yaml").write_text(ORDERS.format(extra="description: reviewed"))
    (root / "specs" / "audit.yaml").write_text("kind: Stream\nname: AUDIT\nsubjects: [audit]\n")
    git(root, "add", "specs")
    git(root, "commit", "-q", "-m", "more")
    before = state(clean_server)

    printed = reconcile(
        "plan", "specs", "--out", "../reviewed.plan", "--format", "json",
        "--server", clean_server.url, cwd=root,
    )  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout)["summary"]["create"] == 1  # stdout as before
    saved = json.loads((tmp_path / "reviewed.plan").read_text())
    assert saved["specs"]["commit"] == git(root, "rev-parse", "HEAD")
    assert [f["path"] for f in saved["specs"]["files"]] == ["specs/audit.yaml", "specs/orders.yaml"]
    assert state(clean_server) == before  # plan --out changes nothing

    done = apply_file(root, clean_server, tmp_path / "reviewed.plan")  # no .json: the marker

    assert done.returncode == 0, done.stderr
    assert "applying the saved plan" in done.stderr
    after = state(clean_server)
    assert after["ORDERS"]["config"]["description"] == "reviewed"
    assert after["ORDERS"]["messages"] == 10
    assert set(after) == {"ORDERS", "AUDIT"}
    assert set(after["ORDERS"]["consumers"]) == {"NEW"}


def test_a_live_change_after_the_plan_refuses_it(clean_server: NatsServer, tmp_path: Path) -> None:
    root = repo(tmp_path)
    create_orders(clean_server, root)
    (root / "specs" / "orders.yaml").write_text(ORDERS.format(extra="max_msgs: 1000"))
    plan = plan_out(root, clean_server)
    config = api(clean_server, "STREAM.INFO.ORDERS")["config"]
    api(clean_server, "STREAM.UPDATE.ORDERS", {**config, "max_age": 7200 * 10**9})  # someone
    publish(clean_server, "ORDERS.new", 5)
    before = state(clean_server)

    done = apply_file(root, clean_server, plan)

    assert done.returncode == 1
    assert "the plan made now is not the saved one: nothing was changed" in done.stderr
    assert "Stream ORDERS" in done.stderr and "max_age" in done.stderr
    assert state(clean_server) == before
    assert before["ORDERS"]["messages"] == 15


def test_a_rewritten_value_refuses_the_saved_entry_update(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The same steps, but a live config (an entry's revision) other than the plan
    saw: someone wrote the key meanwhile, even with the value it had."""
    root = repo(tmp_path)
    entry = "kind: KeyValue\nname: cfg\n---\nkind: KeyValueEntry\nbucket: cfg\nkey: mode\n"
    entry += "value: {}\n"
    (root / "specs" / "cfg.yaml").write_text(entry.format("a"))
    done = reconcile("apply", "specs", "--server", clean_server.url, "--yes", cwd=root)
    assert done.returncode == 0, done.stderr
    (root / "specs" / "cfg.yaml").write_text(entry.format("b"))
    plan = plan_out(root, clean_server)

    async def rewrite(nc: Any) -> None:
        kv = await nc.jetstream().key_value("cfg")
        await kv.put("mode", b"a")  # the value it had: a new revision

    with_nc(clean_server, rewrite)
    before = state(clean_server)

    done = apply_file(root, clean_server, plan)

    assert done.returncode == 1
    assert "KeyValueEntry cfg/mode: its live config changed" in done.stderr
    assert "revision" in done.stderr
    assert state(clean_server) == before


def test_a_spec_edit_after_the_plan_refuses_it(clean_server: NatsServer, tmp_path: Path) -> None:
    root = repo(tmp_path)
    plan = plan_out(root, clean_server)
    (root / "specs" / "orders.yaml").write_text(ORDERS.format(extra="max_msgs: 5"))
    (root / "specs" / "more.yaml").write_text("kind: Stream\nname: MORE\nsubjects: [more]\n")

    done = apply_file(root, clean_server, plan)

    assert done.returncode == 1
    assert "the specs changed since the plan was saved" in done.stderr
    assert "specs/orders.yaml: changed since the plan was saved" in done.stderr
    assert "specs/more.yaml: new since the plan was saved" in done.stderr
    assert state(clean_server) == {}


def test_an_edited_file_is_refused(clean_server: NatsServer, tmp_path: Path) -> None:
    root = repo(tmp_path)
    plan = plan_out(root, clean_server)
    text = plan.read_text()
    plan.write_text(text.replace('"ORDERS.*"', '"ORDERS.>"'))  # the digest left as it was

    done = apply_file(root, clean_server, plan)

    assert done.returncode == 1
    assert "the saved plan was edited or corrupted" in done.stderr
    assert state(clean_server) == {}


def test_a_step_added_to_the_file_with_its_digest_fixed_is_never_run(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The digest stops edits only from someone who cannot recompute it. What stops an
    attacker who can: apply executes the plan made again from the specs, and refuses
    it when it is not the file's. A delete of a stream the specs never mention, added
    to the file with a live config to match, is refused; the stream keeps its data."""
    root = repo(tmp_path)
    api(clean_server, "STREAM.CREATE.VICTIM", {"name": "VICTIM", "subjects": ["victim"]})
    publish(clean_server, "victim", 7)
    plan = plan_out(root, clean_server)
    victim = api(clean_server, "STREAM.INFO.VICTIM")["config"]

    def add_delete(document: dict[str, Any]) -> None:
        document["plan"]["changes"].append(
            {"action": "delete", "kind": "Stream", "name": "VICTIM", "stream": None,
             "fields": [], "reasons": [], "source": None, "destructive": True, "loss": []}
        )  # fmt: skip
        document["live"].append(
            {"kind": "Stream", "name": "VICTIM", "stream": None, "digest": None, "config": victim}
        )
        document["request"]["prune"] = True

    refit(plan, add_delete)
    before = state(clean_server)

    allowed = ("--allow-replace", "--allow-data-loss", "--prune")
    done = apply_file(root, clean_server, plan, *allowed)

    assert done.returncode == 1, done.stderr
    assert "Stream VICTIM: the delete shown is no longer needed" in done.stderr
    assert state(clean_server) == before
    assert before["VICTIM"]["messages"] == 7


def test_a_config_changed_in_the_file_with_its_digest_fixed_is_refused(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = repo(tmp_path)
    plan = plan_out(root, clean_server)

    def widen(document: dict[str, Any]) -> None:
        for change in document["plan"]["changes"]:
            for field in change["fields"]:
                if field["path"] == "subjects":
                    field["after"] = [">"]

    refit(plan, widen)

    done = apply_file(root, clean_server, plan)

    assert done.returncode == 1
    assert "Stream ORDERS: the create now changes" in done.stderr
    assert state(clean_server) == {}


def test_another_server_refuses_the_plan(
    clean_server: NatsServer, server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    root = repo(tmp_path)
    plan = plan_out(root, clean_server)
    other = server_factory(name="other")

    done = apply_file(root, other, plan)

    assert done.returncode == 1
    assert "the plan was saved against another server: nothing was changed" in done.stderr
    assert "server name: 'test', now 'other'" in done.stderr
    assert api(other, "STREAM.NAMES").get("streams") in (None, [])  # not even the lock
    assert state(clean_server) == {}


SECRET = "s3cr3t-value-never-saved"


def test_the_file_holds_no_secret(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """Neither the connection's credentials (a URL's user and password, a token) nor a
    secret KeyValue entry's value, in any form: text, base64, plain SHA-256."""
    root = repo(tmp_path)
    (root / "specs" / "cfg.yaml").write_text(
        "kind: KeyValue\nname: cfg\n---\nkind: KeyValueEntry\nbucket: cfg\nkey: db.password\n"
        f"value: {SECRET}\nsecret: true\n"
    )
    users = server_factory(users=[{"user": "alice", "password": "pa55-w0rd-x"}])
    token = server_factory(name="tokened", token="t0ken-never-saved")
    url = f"nats://alice:pa55-w0rd-x@127.0.0.1:{users.port}"
    # the entry exists: its live value is planned against (an update of a secret)
    done = reconcile("apply", "specs", "--server", url, "--yes", cwd=root)
    assert done.returncode == 0, done.stderr
    (root / "specs" / "cfg.yaml").write_text(
        (root / "specs" / "cfg.yaml").read_text().replace(SECRET, SECRET + "-2")
    )
    runs = [
        ("--server", url),
        ("--server", token.url, "--token", "t0ken-never-saved"),
        ("--server", users.url, "--user", "alice", "--password", "pa55-w0rd-x"),
    ]
    for index, connection in enumerate(runs):
        out = f"../plan{index}.json"
        done = reconcile("plan", "specs", "--out", out, *connection, cwd=root)
        assert done.returncode == 0, done.stderr
        text = (root / out).read_text()
        for secret in (SECRET, "pa55-w0rd-x", "t0ken-never-saved", "alice"):
            for form in (
                secret,
                base64.b64encode(secret.encode()).decode(),
                hashlib.sha256(secret.encode()).hexdigest(),
                base64.b64encode((SECRET + "-2").encode()).decode(),
            ):
                assert form not in text, (index, form)
        assert "(secret)" in text  # the value's change, redacted as the plan JSON does
    # and the saved plan of the secret's update applies
    done = reconcile("apply", str(tmp_path / "plan0.json"), "--server", url, cwd=root)
    assert done.returncode == 0, done.stderr


def test_a_saved_destructive_plan_still_needs_the_allow_flag(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = repo(tmp_path)
    create_orders(clean_server, root)
    (root / "specs" / "orders.yaml").write_text(ORDERS.format(extra="storage: memory"))
    plan = plan_out(root, clean_server)
    before = state(clean_server)

    refused = apply_file(root, clean_server, plan)

    assert refused.returncode == 1
    assert "--allow-replace" in refused.stderr
    assert state(clean_server) == before
    assert before["ORDERS"]["messages"] == 10

    allowed = apply_file(root, clean_server, plan, "--allow-replace")

    assert allowed.returncode == 0, allowed.stderr
    assert state(clean_server)["ORDERS"]["config"]["storage"] == "memory"


def test_a_saved_plan_without_changes_applies_as_a_no_op(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = repo(tmp_path)
    create_orders(clean_server, root)
    plan = plan_out(root, clean_server)
    before = state(clean_server)

    done = apply_file(root, clean_server, plan)
    again = apply_file(root, clean_server, plan)

    assert done.returncode == 0 and again.returncode == 0, done.stderr + again.stderr
    assert "No changes" in done.stdout
    assert state(clean_server) == before


def test_a_plan_saved_for_an_environment_is_applied_in_that_environment(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The project file is one of the files digested; the environment names the
    server at apply (given again with --env, never taken from the file)."""
    root = repo(tmp_path)
    (root / "overlays").mkdir()
    (root / "overlays" / "prod.yaml").write_text("kind: Stream\nname: ORDERS\nmax_msgs: 500\n")
    (root / "reconcile.yaml").write_text(
        f"owner: shop\nspecs: [specs]\nenvironments:\n  prod:\n    servers: {clean_server.url}\n"
        "    overlays: [overlays/prod.yaml]\n  staging:\n    servers: nats://127.0.0.1:1\n"
    )
    done = reconcile("plan", "--env", "prod", "--out", "../prod.plan", cwd=root)
    assert done.returncode == 0, done.stderr
    saved = json.loads((tmp_path / "prod.plan").read_text())
    assert {(f["path"], f["role"]) for f in saved["specs"]["files"]} == {
        ("reconcile.yaml", "project"),
        ("overlays/prod.yaml", "overlay"),
        ("specs/orders.yaml", "spec"),
    }
    plan = tmp_path / "prod.plan"

    unnamed = reconcile("apply", str(plan), cwd=root)
    other = reconcile("apply", str(plan), "--env", "staging", cwd=root)
    pruned = reconcile("apply", str(plan), "--env", "prod", "--prune", cwd=root)
    assert unnamed.returncode == other.returncode == pruned.returncode == 1
    assert (
        "the plan was saved for environment prod; this apply names no environment: give --env prod"
        in unnamed.stderr
    )
    assert "saved for environment prod; this apply names environment staging" in other.stderr
    assert "the saved plan was made without prune and is applied with it" in pruned.stderr
    assert state(clean_server) == {}

    project = (root / "reconcile.yaml").read_text()
    (root / "reconcile.yaml").write_text(project + "# edited\n")
    edited = reconcile("apply", str(plan), "--env", "prod", cwd=root)
    assert edited.returncode == 1
    assert "reconcile.yaml: changed since the plan was saved" in edited.stderr
    assert state(clean_server) == {}

    (root / "reconcile.yaml").write_text(project)  # as it was
    applied = reconcile("apply", str(plan), "--env", "prod", cwd=root)
    assert applied.returncode == 0, applied.stderr
    assert state(clean_server)["ORDERS"]["config"]["max_msgs"] == 500


def test_plan_out_refuses_a_file_inside_a_spec_folder(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = repo(tmp_path)
    done = reconcile(
        "plan", "specs", "--out", "specs/plan.json", "--server", clean_server.url, cwd=root
    )
    assert done.returncode == 1
    assert "is inside the spec folder specs" in done.stderr
    assert not (root / "specs" / "plan.json").exists()


# --- the GitHub Action: input plan-file ---------------------------------------------------


def action_step(root: Path, server: NatsServer, **inputs: str) -> tuple[int, str, dict[str, str]]:
    """``python -m action`` as the runner runs it in workspace ``root``: exit status,
    standard output (the job log) and the step's outputs."""
    temp = root.parent / f"runner-{len(list(root.parent.glob('runner-*')))}"
    temp.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(root.parent),
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(root),
        "GITHUB_OUTPUT": str(temp / "output"),
        "GITHUB_STEP_SUMMARY": str(temp / "summary.md"),
        "RUNNER_TEMP": str(temp),
        "INPUT_PATH": "specs",
        "INPUT_SERVER": server.url,
    } | {"INPUT_" + name.upper().replace("-", "_"): value for name, value in inputs.items()}
    done = subprocess.run(
        [sys.executable, "-m", "action"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    outputs = {}
    if (temp / "output").exists():
        lines = (temp / "output").read_text().split("\n")
        for i, line in enumerate(lines):
            name, _, delimiter = line.partition("<<")
            if delimiter:
                outputs[name] = lines[i + 1]
    return done.returncode, done.stdout, outputs


def test_the_action_saves_the_plan_on_the_pull_request_and_applies_that_file(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = repo(tmp_path)
    create_orders(clean_server, root)
    (root / "specs" / "orders.yaml").write_text(ORDERS.format(extra="description: merged"))

    code, log, outputs = action_step(root, clean_server, mode="plan", **{"plan-file": "p.json"})

    assert code == 0, log
    assert outputs["plan-file"] == str(root / "p.json")
    assert outputs["has-changes"] == "true"
    assert state(clean_server)["ORDERS"]["config"].get("description") is None
    saved = {"plan-file": "p.json"}
    pruning, log, _ = action_step(root, clean_server, mode="apply", prune="true", **saved)
    assert pruning == 1
    assert "the saved plan was made without prune and is applied with it" in log

    code, log, outputs = action_step(root, clean_server, mode="apply", **saved)

    assert code == 0, log
    after = state(clean_server)
    assert after["ORDERS"]["config"]["description"] == "merged"
    assert after["ORDERS"]["messages"] == 10

    again, log, _ = action_step(root, clean_server, mode="apply", **{"plan-file": "p.json"})

    assert again == 1  # applied once: its update is no longer needed
    assert "the plan made now is not the saved one" in log
    assert state(clean_server) == after


def test_a_saved_plan_is_applied_alone(clean_server: NatsServer, tmp_path: Path) -> None:
    root = repo(tmp_path)
    plan = plan_out(root, clean_server)
    done = reconcile("apply", str(plan), "specs", "--server", clean_server.url, "--yes", cwd=root)
    assert done.returncode == 1
    assert "is a saved plan: apply it alone, without PATHS" in done.stderr
    assert state(clean_server) == {}


@pytest.mark.cluster
def test_a_cluster_is_one_server_whichever_node_answers(cluster: Any, tmp_path: Path) -> None:
    """Saved through one node, applied through another: the same cluster (its name,
    not the node's), so the plan applies; every node has the stream after."""
    root = repo(tmp_path)
    first, second = cluster.nodes[0], cluster.nodes[1]
    plan = plan_out(root, first)
    saved = json.loads(plan.read_text())["server"]
    assert saved["cluster"] and saved["name"] == first.name

    done = apply_file(root, second, plan)

    assert done.returncode == 0, done.stderr
    assert set(state(second)) == {"ORDERS"}
    assert api(first, "STREAM.DELETE.ORDERS")["success"] is True
