"""Refusals are values with a kind (issue 40): the verdict's (``execution.verdict``),
a heal's (``planning.heal``), and the one exit status type every door returns."""

from __future__ import annotations

import pytest

from reconciler.errors import (
    ExitStatus,
    PermissionDenied,
    PolicyDenied,
    RefusalKind,
    RefusedPlan,
    ServerError,
    changes_status,
)
from reconciler.execution.verdict import Allowances, refuse, verdict
from reconciler.identity import ResourceRef
from reconciler.model.diff import ReplaceReason
from reconciler.model.loss import Loss
from reconciler.model.state import ServerInfo
from reconciler.planning.findings import PolicyFinding
from reconciler.planning.heal import NeedsPerson, split_for_heal
from reconciler.planning.steps import Create, Delete, Migrate, Plan, Replace, Update

SERVER = ServerInfo(version="2.15.1", api_level=5)
LOSSY = Loss("max_msgs", "drops 90 messages", 90)


def _stream(name: str) -> ResourceRef:
    return ResourceRef("Stream", name)


def _lossy_update(name: str) -> Update:
    return Update(ref=_stream(name), config={"name": name}, live={"name": name}, losses=(LOSSY,))


def test_every_refusal_of_a_plan_is_a_value_with_its_kind_most_binding_first() -> None:
    deny = PolicyFinding("no-loss", "deny", "loses nothing", _stream("L"), "update", "p.yaml:3")
    plan = Plan(
        SERVER,
        changes=(
            _lossy_update("L"),
            Delete(ref=_stream("P"), prevented="prevented by lifecycle prevent_destroy"),
            Migrate(ref=_stream("M"), config={"name": "M"}, blocked="not bound to this owner"),
        ),
        policy=(deny,),
    )
    kinds = [refusal.kind for refusal in verdict(plan)]
    assert kinds == [
        RefusalKind.POLICY,
        RefusalKind.PREVENTED,
        RefusalKind.BLOCKED,
        RefusalKind.DATA_LOSS,
    ]
    with pytest.raises(PolicyDenied) as raised:
        refuse(verdict(plan))
    assert raised.value.exit_code == ExitStatus.POLICY_DENY


def test_an_allowance_lifts_only_the_data_loss_refusal() -> None:
    plan = Plan(SERVER, changes=(_lossy_update("L"),))
    (refused,) = verdict(plan, Allowances(allow_with="set allow_destroy"))
    assert refused.kind is RefusalKind.DATA_LOSS and refused.headline.endswith("allow_destroy")
    assert refused.details == ("update Stream L: drops 90 messages",)
    assert verdict(plan, Allowances(allow_data_loss=True)) == ()
    assert verdict(plan, Allowances(allow_replace=True)) != ()  # a lossy update is no replace


def test_a_refused_plan_is_an_error_exit_unless_a_policy_denies() -> None:
    assert RefusedPlan("x").exit_code == ExitStatus.ERROR == 1
    assert RefusedPlan("x").kind is RefusalKind.DATA_LOSS
    assert [int(s) for s in ExitStatus] == [0, 1, 2, 3, 130]
    assert changes_status(True) == 2 and changes_status(True, detailed=False) == 0
    assert changes_status(False) == ExitStatus.OK


def test_each_step_a_heal_leaves_to_a_person_has_a_kind() -> None:
    """What the agent's metric label and /status read, never the English text."""
    plan = Plan(
        SERVER,
        changes=(
            Replace(
                ref=_stream("R"),
                config={"name": "R"},
                live={"name": "R"},
                because=(ReplaceReason("storage", "storage cannot change"),),
            ),
            Delete(ref=_stream("D")),
            Migrate(ref=_stream("M"), config={"name": "M"}),
            _lossy_update("L"),
            Update(ref=_stream("P"), config={"name": "P"}, live={"name": "P"}, prevented="no"),
            Create(ref=ResourceRef("Consumer", "C", "R"), config={"name": "C"}, live={"name": "C"}),
            Create(ref=ResourceRef("Consumer", "N", "M"), config={"name": "N"}),
        ),
    )
    kinds = {r.step.label: r.kind for r in split_for_heal(plan).refused}
    assert kinds == {
        "Stream R": NeedsPerson.REPLACE,
        "Stream D": NeedsPerson.DELETE,
        "Stream M": NeedsPerson.MIGRATION,
        "Stream L": NeedsPerson.UPDATE,
        "Stream P": NeedsPerson.PREVENTED,
        "Consumer R/C": NeedsPerson.RECREATED,
        "Consumer M/N": NeedsPerson.DEPENDS,
    }


def test_a_permission_denied_is_a_server_error_as_the_hierarchy_says() -> None:
    """errors.py draws PermissionDenied under ServerError: a caller handling the
    server's refusals handles it too, its message kept as it is."""
    denied = PermissionDenied("permission denied: the user may not publish to $JS.API.INFO")
    assert isinstance(denied, ServerError)
    assert str(denied) == "permission denied: the user may not publish to $JS.API.INFO"
    assert denied.exit_code == ExitStatus.ERROR


def test_changes_nobody_approved_are_refused_with_their_own_kind() -> None:
    from reconciler.execution.run import check_approved
    from reconciler.jetstream import ConnectionOptions

    options = ConnectionOptions(servers="nats://127.0.0.1:4222")
    with pytest.raises(RefusedPlan) as refused:
        check_approved(False, SERVER, options, "apply")
    assert refused.value.kind is RefusalKind.NOT_APPROVED
    check_approved(True, SERVER, options, "apply")  # approved: no refusal
