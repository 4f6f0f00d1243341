"""Saved plans attacked: a file edited by whoever can touch the artifact (its digest
fixed up), and files no careless user should be able to crash apply with. Each apply
runs the CLI on a real nats-server and is refused with one line, changing nothing
(docs/saved-plans.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cli_runner import reconcile
from servers import NatsServer
from test_saved_plans import (
    ORDERS,
    action_step,
    apply_file,
    git,
    plan_out,
    publish,
    refit,
    repo,
    state,
)

from reconciler.planning.saved import integrity
from reconciler.specs.fingerprint import digest_files

pytestmark = pytest.mark.integration


def refused(done: Any, why: str) -> None:
    """Exit 1, one line naming ``why``, no traceback."""
    assert done.returncode == 1, done.stdout + done.stderr
    assert why in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_salt_that_is_not_hex_is_refused_not_a_traceback(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = repo(tmp_path)
    plan = plan_out(root, clean_server)
    refit(plan, lambda d: d["specs"].update(salt="not hex"))

    done = reconcile("apply", str(plan), "--server", clean_server.url, cwd=root)

    refused(done, "a saved plan this release cannot read")
    assert state(clean_server) == {}


def test_a_deeply_nested_file_is_refused_not_a_traceback(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = repo(tmp_path)
    plan = plan_out(root, clean_server)
    text = plan.read_text().rstrip().removesuffix("}")
    plan.write_text(text + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")

    done = reconcile("apply", str(plan), "--server", clean_server.url, cwd=root)

    refused(done, "not a saved plan (not JSON)")
    assert state(clean_server) == {}


def test_a_duplicate_key_is_refused(clean_server: NatsServer, tmp_path: Path) -> None:
    """A reader of the file sees the first ``prune``, Python's JSON the last: refused."""
    root = repo(tmp_path)
    plan = plan_out(root, clean_server)
    refit(plan, lambda d: d["request"].update(prune=True))  # the digest fits the last
    text = plan.read_text()
    plan.write_text(text.replace('"prune": true', '"prune": false, "prune": true', 1))

    done = reconcile("apply", str(plan), "--server", clean_server.url, cwd=root)

    refused(done, "duplicate key 'prune'")
    assert state(clean_server) == {}


def test_an_owner_the_command_line_refuses_is_refused_in_the_file(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``--owner`` takes letters, digits, '.', '_' and '-': so does the file."""
    root = repo(tmp_path)
    plan = plan_out(root, clean_server)
    refit(plan, lambda d: d["request"].update(owner="shop\x1b[2J\n"))

    done = reconcile("apply", str(plan), "--server", clean_server.url, cwd=root)

    refused(done, "a saved plan this release cannot read")
    assert state(clean_server) == {}


# --- an environment is the project file's, never the saved file's ------------------------

PROJECT = """\
owner: shop
specs: [specs]
environments:
  prod:
    servers: {url}
    overlays: [overlays/prod.yaml]
  staging:
    servers: nats://127.0.0.1:1
    resources: [staging]
"""


def two_environments(tmp_path: Path, server: NatsServer) -> Path:
    """prod: specs/ with the prod overlay (ORDERS keeps 500 messages); staging adds
    SCRATCH from staging/."""
    root = repo(tmp_path)
    (root / "overlays").mkdir()
    (root / "overlays" / "prod.yaml").write_text("kind: Stream\nname: ORDERS\nmax_msgs: 500\n")
    (root / "staging").mkdir()
    (root / "staging" / "scratch.yaml").write_text(
        "kind: Stream\nname: SCRATCH\nsubjects: [SCRATCH.*]\n"
    )
    (root / "reconcile.yaml").write_text(PROJECT.format(url=server.url))
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "environments")
    return root


def forged_for_prod(root: Path, server: NatsServer, paths: list[str], owner: str) -> Path:
    """A plan of ``paths`` (no overlay) made by ``owner``, relabelled as prod's: its
    request, its file digests (keyed with the salt the file gives away) and its digest
    all made to fit, as anyone holding the artifact can."""
    plan = plan_out(root, server, "../forged.plan", *paths[1:], "--owner", owner)
    document = json.loads(plan.read_text())
    named = document["request"] | {"env": "prod", "paths": paths, "overlays": []}
    roles = {"spec": [root / p for p in paths], "project": [root / "reconcile.yaml"]}
    specs = digest_files(roles, root=root, salt=document["specs"]["salt"])
    files = [{"path": f.path, "role": f.role, "digest": f.digest} for f in specs.files]
    document |= {
        "request": named,
        "specs": {"digest": specs.digest, "commit": specs.commit, "salt": specs.salt}
        | {"files": files},
    }
    body = {k: v for k, v in document.items() if k != "digest"}
    plan.write_text(json.dumps(body | {"digest": integrity(body)}, indent=2))
    return plan


def test_a_plan_for_an_environment_cannot_name_other_paths_or_drop_its_overlay(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The file said prod but named staging's folder too, and no overlay: applied, it
    created SCRATCH in prod and set ORDERS' max_msgs back from prod's 500 to unlimited."""
    root = two_environments(tmp_path, clean_server)
    applied = reconcile("apply", "--env", "prod", "--yes", cwd=root)
    assert applied.returncode == 0, applied.stderr
    publish(clean_server, "ORDERS.new", 10)
    before = state(clean_server)
    plan = forged_for_prod(root, clean_server, ["specs", "staging"], "shop")

    done = reconcile("apply", str(plan), "--env", "prod", cwd=root)

    refused(done, "the saved plan names paths specs, staging; environment prod reads specs")
    assert state(clean_server) == before
    assert before["ORDERS"]["messages"] == 10
    assert before["ORDERS"]["config"]["max_msgs"] == 500


def test_a_plan_for_an_environment_cannot_change_the_projects_owner(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = two_environments(tmp_path, clean_server)
    saved = reconcile("plan", "--env", "prod", "--out", "../prod.plan", cwd=root)
    assert saved.returncode == 0, saved.stderr
    plan = tmp_path / "prod.plan"
    genuine = plan.read_text()
    refit(plan, lambda d: d["request"].update(owner="payments"))

    done = reconcile("apply", str(plan), "--env", "prod", cwd=root)

    refused(done, "the saved plan names owner payments, not shop")
    assert state(clean_server) == {}

    plan.write_text(genuine)
    applied = reconcile("apply", str(plan), "--env", "prod", cwd=root)
    assert applied.returncode == 0, applied.stderr
    publish(clean_server, "ORDERS.new", 3)
    after = state(clean_server)
    assert after["ORDERS"]["config"]["max_msgs"] == 500
    assert after["ORDERS"]["messages"] == 3


def test_the_action_refuses_a_plan_for_an_environment_naming_other_paths(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The Action's plan-file input goes through the same rule as ``apply FILE``."""
    root = two_environments(tmp_path, clean_server)
    forged = forged_for_prod(root, clean_server, ["specs", "staging"], "shop")
    forged.rename(root / "p.json")
    saved = {"path": "", "environment": "prod", "plan-file": "p.json"}

    no_server = SimpleNamespace(url="")  # the environment names the server
    code, log, _ = action_step(root, no_server, mode="apply", **saved)  # type: ignore[arg-type]

    assert code == 1, log
    assert "the saved plan names paths specs, staging; environment prod reads specs" in log
    assert state(clean_server) == {}


# --- the account: unknown to a user who may not ask the server ----------------------------

JS_ONLY = {"publish": {"allow": ["$JS.API.>", "$KV.>"]}, "subscribe": {"allow": ["_INBOX.>"]}}


def two_accounts(server_factory: Callable[..., NatsServer]) -> NatsServer:
    """STAGING and PROD on one server; each has a user allowed only the JetStream API
    (as production users often are) and one allowed everything."""
    accounts = {
        name: {
            "jetstream": "enabled",
            "users": [
                {"user": user, "password": user, "permissions": JS_ONLY},
                {"user": user + "-admin", "password": user},
            ],
        }
        for name, user in (("STAGING", "staging"), ("PROD", "prod"))
    }
    return server_factory(name="shared", config={"accounts": accounts})


def test_a_plan_saved_in_one_account_is_refused_in_another_even_unread(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """A plan saved by STAGING's JetStream-only user, applied to PROD with PROD's: the
    account is unknown both times (they may not ask $SYS.REQ.USER.INFO), the server
    the same; each account keeps its own lineage, so the plan is refused (it was
    applied before the lineage). A user allowed to ask also sees the accounts named."""
    server = two_accounts(server_factory)
    root = repo(tmp_path)
    creds = ("--user", "staging", "--password", "staging")
    blind = reconcile(
        "plan", "specs", "--out", "../blind.plan", "--server", server.url, *creds, cwd=root
    )
    assert blind.returncode == 0, blind.stderr
    assert json.loads((root.parent / "blind.plan").read_text())["server"]["account"] is None
    as_prod = ("--user", "prod", "--password", "prod")
    done = reconcile("apply", "../blind.plan", "--server", server.url, *as_prod, cwd=root)
    refused(done, "lineage: ")
    assert state(server, user="prod", password="prod") == {}

    admin = ("--user", "staging-admin", "--password", "staging")
    seen = reconcile(
        "plan", "specs", "--out", "../seen.plan", "--server", server.url, *admin, cwd=root
    )
    assert seen.returncode == 0, seen.stderr
    prod = ("--user", "prod-admin", "--password", "prod")
    done = reconcile("apply", "../seen.plan", "--server", server.url, *prod, cwd=root)
    refused(done, "account: 'STAGING', now 'PROD'")
    assert state(server, user="prod", password="prod") == {}


# --- apply FILE --policy: rules the plan must have been made with ------------------------

RULES = """\
rules:
  - id: bounded
    level: deny
    message: every stream sets max_msgs
    expr: resource.kind != "Stream" || resource.desired.max_msgs > 0
"""


def test_apply_file_with_policy_refuses_a_plan_made_without_that_rule(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The file decides which policy files the re-plan evaluates; whoever applies it can
    require rules with --policy: a plan made (or edited) without one is refused."""
    root = repo(tmp_path)  # ORDERS sets no max_msgs: the rule denies it
    (root / "policies").mkdir()
    (root / "policies" / "bounded.yaml").write_text(RULES)
    plan = plan_out(root, clean_server)  # no --policy

    done = apply_file(root, clean_server, plan, "--policy", "policies/bounded.yaml")

    refused(done, "the saved plan leaves out the policy file policies/bounded.yaml")
    assert state(clean_server) == {}

    (root / "specs" / "orders.yaml").write_text(ORDERS.format(extra="max_msgs: 100"))
    plan = plan_out(root, clean_server, "../ruled.plan", "--policy", "policies/bounded.yaml")
    done = apply_file(root, clean_server, plan, "--policy", "policies/bounded.yaml")
    assert done.returncode == 0, done.stderr
    publish(clean_server, "ORDERS.new", 5)
    after = state(clean_server)
    assert after["ORDERS"]["config"]["max_msgs"] == 100
    assert after["ORDERS"]["messages"] == 5


def test_a_plan_saved_with_a_policy_keeps_its_rules_without_policy_at_apply(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """docs/saved-plans.md: ``--policy`` at apply requires files the plan was made with;
    the file may hold more, and every one it holds is evaluated again on the re-plan
    (a warn rule's finding shows at apply without ``--policy``). An apply naming a file
    the plan left out is refused naming that file, the one it lacks."""
    root = repo(tmp_path)  # ORDERS sets no max_msgs: the warn rule finds it
    (root / "policies").mkdir()
    (root / "policies" / "bounded.yaml").write_text(RULES.replace("level: deny", "level: warn"))
    (root / "policies" / "named.yaml").write_text(RULES.replace("bounded", "named"))
    plan = plan_out(root, clean_server, "../ruled.plan", "--policy", "policies/bounded.yaml")

    done = apply_file(root, clean_server, plan, "--policy", "policies/named.yaml")
    refused(done, "the saved plan leaves out the policy file policies/named.yaml")
    assert "bounded.yaml" not in done.stderr
    assert state(clean_server) == {}

    done = apply_file(root, clean_server, plan)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every stream sets max_msgs" in done.stdout + done.stderr  # evaluated again
    assert "ORDERS" in state(clean_server)


# --- take-over and owner: never granted by the file ------------------------------------------


def taken_over_plan(root: Path, server: NatsServer) -> Path:
    """ORDERS (10 messages) managed by owner payments; the specs edit its description;
    a plan made with --take-over by owner default."""
    done = reconcile(
        "apply", "specs", "--server", server.url, "--owner", "payments", "--yes", cwd=root
    )
    assert done.returncode == 0, done.stderr
    publish(server, "ORDERS.new", 10)
    (root / "specs" / "orders.yaml").write_text(ORDERS.format(extra="description: ours now"))
    return plan_out(root, server, "../taken.plan", "--take-over")


def test_a_saved_take_over_needs_take_over_at_apply(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """Taking another owner's resources is consent the applier gives, as --allow-*."""
    root = repo(tmp_path)
    plan = taken_over_plan(root, clean_server)
    before = state(clean_server)

    done = apply_file(root, clean_server, plan)

    refused(done, "the saved plan takes over resources another owner manages")
    assert state(clean_server) == before

    done = apply_file(root, clean_server, plan, "--take-over")
    assert done.returncode == 0, done.stderr
    after = state(clean_server)
    assert after["ORDERS"]["config"]["description"] == "ours now"
    assert after["ORDERS"]["messages"] == 10


def test_the_action_never_applies_a_take_over_or_another_owner_from_the_file(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The Action has no take-over input and its owner is the project's (or default): a
    plan-file that takes over, or acts as owner payments, was not made by it."""
    root = repo(tmp_path)
    taken_over_plan(root, clean_server).rename(root / "p.json")
    before = state(clean_server)

    code, log, _ = action_step(root, clean_server, mode="apply", **{"plan-file": "p.json"})

    assert code == 1, log
    assert "the saved plan takes over resources another owner manages" in log
    assert state(clean_server) == before

    refit(root / "p.json", lambda d: d["request"].update(take_over=False, owner="payments"))
    code, log, _ = action_step(root, clean_server, mode="apply", **{"plan-file": "p.json"})

    assert code == 1, log
    assert "the saved plan names owner payments, not default" in log
    assert state(clean_server) == before


def test_the_action_applies_a_plan_file_only_in_the_environment_it_names(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The step's 'environment' input decides the server: a plan for prod is refused in
    staging, in path mode, and after its environment was edited to staging."""
    root = two_environments(tmp_path, clean_server)
    no_server = SimpleNamespace(url="")  # the environment names the server
    prod = {"path": "", "environment": "prod", "plan-file": "p.json"}
    code, log, _ = action_step(root, no_server, mode="plan", **prod)  # type: ignore[arg-type]
    assert code == 0, log

    staging = prod | {"environment": "staging"}
    code, log, _ = action_step(root, no_server, mode="apply", **staging)  # type: ignore[arg-type]
    assert code == 1, log
    assert "the plan was saved for environment prod; this apply names environment staging" in log

    code, log, _ = action_step(root, clean_server, mode="apply", **{"plan-file": "p.json"})
    assert code == 1, log
    assert "the plan was saved for environment prod; this apply names no environment" in log

    refit(root / "p.json", lambda d: d["request"].update(env="staging"))
    code, log, _ = action_step(root, no_server, mode="apply", **prod)  # type: ignore[arg-type]
    assert code == 1, log
    assert "the plan was saved for environment staging; this apply names environment prod" in log
    assert state(clean_server) == {}


# --- prune: consent given at apply as at plan ----------------------------------------------


def pruning_plan(root: Path, server: NatsServer) -> Path:
    """ORDERS and OLD applied from the specs (OLD with 4 messages), OLD's spec removed,
    and a plan saved with --prune: it deletes OLD."""
    (root / "specs" / "old.yaml").write_text("kind: Stream\nname: OLD\nsubjects: [old]\n")
    done = reconcile("apply", "specs", "--server", server.url, "--yes", cwd=root)
    assert done.returncode == 0, done.stderr
    publish(server, "old", 4)
    (root / "specs" / "old.yaml").unlink()
    return plan_out(root, server, "../pruning.plan", "--prune")


def test_a_saved_prune_needs_prune_at_apply(clean_server: NatsServer, tmp_path: Path) -> None:
    """--allow-replace given for the reviewed plan's replace must not let a prune the
    file carries (or an edit put there) delete what no spec declares."""
    root = repo(tmp_path)
    plan = pruning_plan(root, clean_server)
    before = state(clean_server)

    done = apply_file(root, clean_server, plan, "--allow-replace")

    refused(done, "the saved plan was made with prune and is applied without it")
    assert state(clean_server) == before
    assert before["OLD"]["messages"] == 4

    done = apply_file(root, clean_server, plan, "--allow-replace", "--prune")
    assert done.returncode == 0, done.stderr
    assert "OLD" not in state(clean_server)


def test_the_action_applies_a_pruning_plan_file_only_with_prune(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    root = repo(tmp_path)
    pruning_plan(root, clean_server).rename(root / "p.json")
    before = state(clean_server)
    saved = {"plan-file": "p.json", "allow-replace": "true"}

    code, log, _ = action_step(root, clean_server, mode="apply", **saved)

    assert code == 1, log
    assert "the saved plan was made with prune and is applied without it" in log
    assert state(clean_server) == before

    code, log, _ = action_step(root, clean_server, mode="apply", prune="true", **saved)
    assert code == 0, log
    assert "OLD" not in state(clean_server)
    assert state(clean_server)["ORDERS"] == before["ORDERS"]


def test_the_action_requires_its_policy_input_of_a_plan_file(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The apply step's 'policy' input names rules the plan-file must have been made
    with (it was refused with plan-file, so an apply step could require none)."""
    root = repo(tmp_path, extra="max_msgs: 100")
    (root / "policies").mkdir()
    (root / "policies" / "bounded.yaml").write_text(RULES)
    ruled = {"plan-file": "p.json", "policy": "policies/bounded.yaml"}
    code, log, _ = action_step(root, clean_server, mode="plan", **{"plan-file": "bare.json"})
    assert code == 0, log

    code, log, _ = action_step(
        root, clean_server, mode="apply", **ruled | {"plan-file": "bare.json"}
    )

    assert code == 1, log
    assert "the saved plan leaves out the policy file policies/bounded.yaml" in log
    assert state(clean_server) == {}

    code, log, _ = action_step(root, clean_server, mode="plan", **ruled)
    assert code == 0, log
    code, log, _ = action_step(root, clean_server, mode="apply", **ruled)
    assert code == 0, log
    publish(clean_server, "ORDERS.new", 2)
    assert state(clean_server)["ORDERS"]["messages"] == 2


# --- plan --out: a file, written through a symlink, never over a device -----------------


def test_plan_out_refuses_a_device_and_writes_through_a_symlink(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """``--out /dev/stdout`` run as root replaced the /dev/stdout symlink with a regular
    file (the temporary file was renamed over it): a link to a device is refused, and a
    link to a file is written through, the link kept. (The test names a link in its own
    folder: pointed at /dev itself, the old code would replace the device.)"""
    root = repo(tmp_path)
    device = tmp_path / "to-null"
    device.symlink_to("/dev/null")

    done = reconcile("plan", "specs", "--out", str(device), "--server", clean_server.url, cwd=root)

    refused(done, "not a regular file")
    assert device.is_symlink()

    (tmp_path / "plans").mkdir()
    link = tmp_path / "latest.plan"
    link.symlink_to(tmp_path / "plans" / "p.json")
    done = reconcile("plan", "specs", "--out", str(link), "--server", clean_server.url, cwd=root)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink()
    assert '"format": "jetstream-gitops saved plan"' in (tmp_path / "plans" / "p.json").read_text()
    applied = reconcile("apply", str(link), "--server", clean_server.url, cwd=root)
    assert applied.returncode == 0, applied.stderr
    publish(clean_server, "ORDERS.new", 1)
    assert state(clean_server)["ORDERS"]["messages"] == 1


def test_a_saved_plan_runs_as_the_owner_apply_names(
    clean_server: NatsServer, tmp_path: Path
) -> None:
    """The owner is a boundary between teams: a plan saved (or edited) as owner
    payments is applied only by an apply that says --owner payments."""
    root = repo(tmp_path)
    plan = plan_out(root, clean_server, "../payments.plan", "--owner", "payments")

    done = apply_file(root, clean_server, plan)

    refused(done, "the saved plan names owner payments, not default")
    assert state(clean_server) == {}

    done = apply_file(root, clean_server, plan, "--owner", "payments")
    assert done.returncode == 0, done.stderr
    publish(clean_server, "ORDERS.new", 3)
    after = state(clean_server)
    assert after["ORDERS"]["config"]["metadata"]["io.jetstream-gitops/owner"] == "payments"
    assert after["ORDERS"]["messages"] == 3
