"""Apply's rule for a stream the specs declare a standby mirror (``planning.standby.
guarded``), on the steps a restore brings: in the standby environment the stream is the
mirror its spec declares or nothing. A backup's config is data someone else may have
written: a mirror of another stream, of the origin's stream in another domain, or of a
part of it, under the standby's name, is refused as a plain stream is."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.identity import ResourceRef
from reconciler.locations import Location
from reconciler.model.defaults import STREAM_FIELDS
from reconciler.model.diff import replace_reasons
from reconciler.model.standby import ONE_WAY
from reconciler.model.state import ServerInfo
from reconciler.planning.standby import PREVENTED, for_environment, guarded, made_primaries
from reconciler.planning.steps import Create, Plan, Replace, Update
from reconciler.specs.spec import Spec
from reconciler.specs.standby import Standby

ORDERS = {"name": "ORDERS", "subjects": ["orders.>"]}
DOMAINS = {"east": "east", "west": "west"}
EAST = {"api": "$JS.east.API"}


def _specs(environment: str) -> list[Spec]:
    """The environment's specs as it plans them (its standby stream a mirror there)."""
    standby = Standby(primary="east", environment="west", where="specs/orders.yaml:5")
    spec = Spec("Stream", "ORDERS", ORDERS, Location("specs/orders.yaml", 1), standby=standby)
    return for_environment([spec], environment, DOMAINS).specs


def _restored(config: dict[str, Any], environment: str) -> str:
    step = Create(ref=ResourceRef("Stream", "ORDERS"), config=config)
    plan = guarded(Plan(ServerInfo("2.12.8", 1), (step,)), _specs(environment), environment)
    return plan.changes[0].prevented


def _mirror(**mirror: Any) -> dict[str, Any]:
    return {"name": "ORDERS", "mirror": {"name": "ORDERS", "external": EAST, **mirror}}


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(ORDERS, id="a plain stream"),
        pytest.param({"name": "ORDERS", "mirror": {"name": "OTHER", "external": EAST}}, id="OTHER"),
        pytest.param({"name": "ORDERS", "mirror": "ORDERS"}, id="not a mapping"),
        pytest.param(_mirror(external={"api": "$JS.evil.API"}), id="another domain's ORDERS"),
        pytest.param(_mirror(external=None), id="west's own ORDERS"),
        pytest.param(_mirror(external={**EAST, "deliver": "elsewhere"}), id="another delivery"),
        pytest.param(_mirror(filter_subject="orders.eu"), id="a part of it"),
        pytest.param(_mirror(opt_start_seq=1_000_000), id="from a later point"),
        pytest.param(
            {**_mirror(), "republish": {"src": ">", "dest": "orders.loop.>"}},
            id="republishing what it copies",
        ),
        pytest.param({**_mirror(), "deny_purge": True}, id="denying purges for good"),
        pytest.param({**_mirror(), "deny_delete": True}, id="denying deletes for good"),
        pytest.param({**_mirror(), "sealed": True}, id="sealed"),
    ],
)
def test_the_standby_environment_takes_only_the_declared_mirror(config: dict[str, Any]) -> None:
    why = _restored(config, "west")
    assert why.startswith(PREVENTED) and "specs/orders.yaml:5" in why
    assert "evil" not in why and "elsewhere" not in why  # the backup's words are not said


def test_the_declared_mirror_is_taken_there_and_a_plain_stream_in_the_primary() -> None:
    assert _restored(_mirror(), "west") == ""
    # as the server reports it back: the delivery subject empty, a start at 0
    assert _restored(_mirror(external={**EAST, "deliver": ""}, opt_start_seq=0), "west") == ""
    assert _restored(ORDERS, "east") == ""


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(_mirror(), id="the standby's own backup: a mirror of itself"),
        pytest.param(_mirror(external={"api": "$JS.evil.API"}), id="another domain's ORDERS"),
    ],
)
def test_the_primary_never_takes_a_mirror(config: dict[str, Any]) -> None:
    """In the environment taking the writes a mirror takes none (west's backup restored
    into east made east's ORDERS a mirror of itself); the way out is said."""
    why = _restored(config, "east")
    assert why.startswith(PREVENTED) and "specs/orders.yaml:5" in why and "--unplanned" in why
    assert "evil" not in why


def test_a_plain_stream_in_the_standby_environment_is_never_replaced_and_the_way_out_is_said() -> (
    None
):
    """A plain ORDERS taking writes in west (promoted, or made by an earlier restore) is
    never replaced by the mirror: that would delete what it took. The reason says both
    ways out: make west the primary, or, nothing having promoted it, delete it by hand
    once what it holds is in east (then apply makes the mirror)."""
    view = _specs("west")
    step = Replace(ref=ResourceRef("Stream", "ORDERS"), config=view[0].config, live=ORDERS)
    plan = guarded(Plan(ServerInfo("2.12.8", 1), (step,)), view, "west")
    why = plan.changes[0].prevented
    assert why.startswith(PREVENTED) and "specs/orders.yaml:5" in why
    assert "standby.primary: west" in why and "deleted by hand" in why and "in east" in why


def test_no_other_stream_listens_on_the_origins_subjects_in_either_environment() -> None:
    """A backup's stream of another name (a lookalike, a dev server's) on the origin's
    subjects, restored where the mirror is kept or where the origin is (fenced after a
    failover), would take writes beside the pair's: the mirror has no subjects and the
    fenced origin its fence subject, so nothing on the server overlaps it."""
    for subjects in (["orders.eu.>"], ["orders.*"], [">"]):
        step = Create(ref=ResourceRef("Stream", "\u041eRDERS"), config={"subjects": subjects})
        for environment in ("west", "east"):
            plan = Plan(ServerInfo("2.12.8", 1), (step,))
            why = guarded(plan, _specs(environment), environment).changes[0].prevented
            assert why.startswith(PREVENTED) and "specs/orders.yaml:5" in why, subjects
    other = Create(ref=ResourceRef("Stream", "AUDIT"), config={"subjects": ["audit.>"]})
    assert (
        guarded(Plan(ServerInfo("2.12.8", 1), (other,)), _specs("west"), "west")
        .changes[0]
        .prevented
        == ""
    )


def test_the_standbys_mirror_never_comes_with_a_backups_consumers() -> None:
    """Apply makes none on the mirror (the failover creates them at the promotion): the
    very mirror declared, restored with the backup's consumers, is refused."""
    step = Create(ref=ResourceRef("Stream", "ORDERS"), config=_mirror())
    plan = Plan(ServerInfo("2.12.8", 1), (step,))
    why = guarded(plan, _specs("west"), "west", consumers={"ORDERS": 1}).changes[0].prevented
    assert why.startswith(PREVENTED) and "specs/orders.yaml:5" in why
    assert guarded(plan, _specs("west"), "west", consumers={"ORDERS": 0}).changes[0].prevented == ""


def test_the_primary_never_makes_the_stream_again_while_its_standby_takes_writes() -> None:
    """Made again in the primary (its stream lost after a failover), a stream with its
    subjects would take writes beside the promoted standby: the create is listed for
    the caller to read the standby, and prevented with the reason it read."""
    view = _specs("east")
    step = Create(ref=ResourceRef("Stream", "ORDERS"), config=ORDERS)
    plan = Plan(ServerInfo("2.12.8", 1), (step,))
    assert made_primaries(plan, view, "east") == {"ORDERS": "west"}
    assert made_primaries(plan, _specs("west"), "west") == {}  # the mirror's: not a primary
    taken = {"ORDERS": "ORDERS in west takes the writes"}
    why = guarded(plan, view, "east", taken=taken).changes[0].prevented
    assert why.startswith(PREVENTED) and "specs/orders.yaml:5" in why and "west" in why
    assert guarded(plan, view, "east").changes[0].prevented == ""  # nothing taken: made
    # an update giving east's mirror (a failback's, the role swap reverted) its subjects
    promote = Update(ref=ResourceRef("Stream", "ORDERS"), config=ORDERS, live=_mirror())
    assert made_primaries(Plan(ServerInfo("2.12.8", 1), (promote,)), view, "east") == {
        "ORDERS": "west"
    }
    kept = Update(ref=ResourceRef("Stream", "ORDERS"), config=ORDERS, live=ORDERS)
    assert made_primaries(Plan(ServerInfo("2.12.8", 1), (kept,)), view, "east") == {}


def test_a_seal_or_deny_the_spec_declares_is_the_mirrors_too() -> None:
    standby = Standby(primary="east", environment="west", where="specs/orders.yaml:5")
    config = {**ORDERS, "deny_delete": True, "deny_purge": True}
    spec = Spec("Stream", "ORDERS", config, Location("specs/orders.yaml", 1), standby=standby)
    view = for_environment([spec], "west", DOMAINS).specs
    assert view[0].config["deny_delete"] and view[0].config["deny_purge"]
    step = Create(ref=ResourceRef("Stream", "ORDERS"), config=view[0].config)
    assert guarded(Plan(ServerInfo("2.12.8", 1), (step,)), view, "west").changes[0].prevented == ""


def test_what_no_update_turns_off_is_what_the_diff_plans_as_a_replace() -> None:
    """``model.standby.ONE_WAY`` (measured on 2.15.1: docs/jetstream-notes.md) is every
    switch of a stream whose turning off ``model.diff`` plans as a replace on the newest
    server, and nothing else: the two lists never drift apart."""
    server = ServerInfo("2.15.1", 5)
    switches = [name for name, field in STREAM_FIELDS.items() if field.absent is False]
    off_by_replace = {
        name
        for name in switches
        if any(
            reason.field == name
            for reason in replace_reasons("Stream", {name: False}, {name: True}, server)
        )
    }
    assert off_by_replace == set(ONE_WAY)
