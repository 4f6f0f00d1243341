"""``reconcile failover`` runs apply's rules (issue 41), on two real JetStream domains:
its server changes are apply's plan steps (an update of the origin's stream: fenced; an
update of the mirror: promoted; a create of each consumer), judged by the shared verdict
with the policies (``--policy`` and the project's: a deny exits 3) and the lifecycle
(``mode: observe`` on the environment or the stream: never written) before anything
changes. Both servers are read with a raw client before and after."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_runner import reconcile
from servers import NatsServer, run
from terminal import QUESTION, Terminal
from test_dr_failover import (  # noqa: F401 (a fixture)
    _restarted_standby,
    check_after,
    is_fenced,
    ready,
)
from test_dr_standby import consumers, last_seq
from test_lifecycle import _info, _publish

pytestmark = pytest.mark.integration

#: A mirror in west stays a mirror: the promotion (an update dropping ``mirror``) breaks it.
KEEP_MIRRORS = """\
rules:
  - id: west-keeps-mirrors
    level: deny
    message: a mirror in west stays a mirror
    kinds: [Stream]
    when: resource.environment == "west"
    expr: "!has(resource.live.mirror) || has(resource.desired.mirror)"
"""
#: East's streams keep their subjects: the fence (an update of its subjects) breaks it.
KEEP_SUBJECTS = """\
rules:
  - id: east-keeps-subjects
    level: deny
    message: streams in east keep their subjects
    kinds: [Stream]
    when: resource.environment == "east"
    expr: resource.desired.subjects == resource.live.subjects
"""
#: Consumers keep ``max_deliver`` unlimited: the failover's creates keep it (it holds).
HOLDS = """\
rules:
  - id: unlimited-redelivery
    level: deny
    message: consumers redeliver until acknowledged
    kinds: [Consumer]
    expr: resource.desired.max_deliver == -1
"""

#: West's streams keep their duplicate_window: the failover's restore of a mirror's breaks it.
KEEP_WINDOW = """\
rules:
  - id: west-keeps-its-window
    level: deny
    message: duplicate_window in west is changed by apply only
    kinds: [Stream]
    when: resource.environment == "west"
    expr: >-
      !has(resource.desired.duplicate_window) || (has(resource.live.duplicate_window)
      && resource.desired.duplicate_window == resource.live.duplicate_window)
"""

FAILOVER = ("failover", "--from", "east", "--to", "west", "--yes")


def unchanged(east: NatsServer, west: NatsServer) -> None:
    """Nothing was changed on either side: east not fenced and taking writes, west still
    a mirror of its 50 messages, with no consumer."""
    assert _info(east.url, "ORDERS")["config"]["subjects"] == ["orders.>"]
    assert _info(west.url, "ORDERS")["config"]["mirror"]["name"] == "ORDERS"
    assert consumers(west) == []
    assert last_seq(east) == 50 and last_seq(west) == 50
    run(_publish(east.url, "orders.new", 1))  # east still acknowledges writes
    assert last_seq(east) == 51
    assert not is_fenced(east)


def test_a_policy_deny_exits_3_and_changes_neither_server(
    ready: tuple[NatsServer, NatsServer, Path],  # noqa: F811
) -> None:
    east, west, root = ready
    (root / "mirrors.yaml").write_text(KEEP_MIRRORS, encoding="utf-8")
    denied = reconcile(*FAILOVER, "--policy", "mirrors.yaml", cwd=root)
    assert denied.returncode == 3, denied.stdout + denied.stderr
    assert "west-keeps-mirrors" in denied.stderr
    assert _info(east.url, "ORDERS")["config"]["subjects"] == ["orders.>"]  # not fenced
    assert consumers(west) == []

    # the project's policies: the fence of east is denied, on east's side
    (root / "subjects.yaml").write_text(KEEP_SUBJECTS, encoding="utf-8")
    project = (root / "reconcile.yaml").read_text(encoding="utf-8")
    (root / "reconcile.yaml").write_text(project + "policies: [subjects.yaml]\n")
    denied = reconcile(*FAILOVER, cwd=root)
    assert denied.returncode == 3, denied.stdout + denied.stderr
    assert "east-keeps-subjects" in denied.stderr
    unchanged(east, west)


@pytest.mark.parametrize("where", ["environment", "stream"])
def test_an_observed_environment_or_stream_is_refused_and_never_written(
    ready: tuple[NatsServer, NatsServer, Path],  # noqa: F811
    where: str,
) -> None:
    east, west, root = ready
    if where == "environment":
        project = root / "reconcile.yaml"
        text = project.read_text(encoding="utf-8")
        observed = "    domain: west\n    lifecycle: {mode: observe}\n"
        project.write_text(text.replace("    domain: west\n", observed), encoding="utf-8")
    else:
        specs = root / "specs" / "orders.yaml"
        text = specs.read_text(encoding="utf-8")
        observed = "max_age: 7d\nlifecycle:\n  mode: observe\n"
        specs.write_text(text.replace("max_age: 7d\n", observed, 1), encoding="utf-8")
    refused = reconcile(*FAILOVER, cwd=root)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "observe" in refused.stderr
    assert ("reconcile.yaml:" if where == "environment" else "orders.yaml:") in refused.stderr
    unchanged(east, west)


def test_a_failover_the_policies_allow_still_runs(
    ready: tuple[NatsServer, NatsServer, Path],  # noqa: F811
) -> None:
    """Policies evaluated on the failover's steps that hold: it fails over as before."""
    east, west, root = ready
    (root / "holds.yaml").write_text(HOLDS, encoding="utf-8")
    project = (root / "reconcile.yaml").read_text(encoding="utf-8")
    (root / "reconcile.yaml").write_text(project + "policies: [holds.yaml]\n")
    done = reconcile(*FAILOVER, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    check_after(east, west, [], 50)


def test_a_policy_added_while_the_question_waited_is_judged_under_the_locks(
    ready: tuple[NatsServer, NatsServer, Path],  # noqa: F811
) -> None:
    """The failover is judged again once both locks are held, as apply plans again
    under its lock: a deny committed while the question waited refuses it, nothing
    changed on either side."""
    east, west, root = ready
    (root / "rules.yaml").write_text(HOLDS, encoding="utf-8")  # holds when asked
    args = ("failover", "--from", "east", "--to", "west", "--policy", "rules.yaml")
    term = Terminal(*args, cwd=root)
    assert term.read_until(QUESTION), term.text
    (root / "rules.yaml").write_text(KEEP_SUBJECTS, encoding="utf-8")  # a deny meanwhile
    assert term.answer(b"yes\r") == 3, term.text
    assert "east-keeps-subjects" in term.text
    unchanged(east, west)


def test_the_restore_of_a_restarted_mirrors_window_is_judged_as_a_step(
    server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    """The update giving a restarted standby's mirror its duplicate_window back before
    the fence is one of the failover's steps on west, judged as apply's: a policy
    denying it exits 3 and neither server is touched (east not fenced, west's mirror
    still without a window)."""
    east, west, root = _restarted_standby(server_factory, tmp_path)
    (root / "window.yaml").write_text(KEEP_WINDOW, encoding="utf-8")
    denied = reconcile(*FAILOVER, "--policy", "window.yaml", cwd=root)
    assert denied.returncode == 3, denied.stdout + denied.stderr
    assert "west-keeps-its-window" in denied.stderr
    assert not is_fenced(east)
    config = _info(west.url, "ORDERS")["config"]
    assert config["mirror"]["name"] == "ORDERS" and not config.get("duplicate_window")
    assert consumers(west) == []
