"""The one rule for "one account of one server (or cluster)", whoever the user
(model.server_identity.Seat.same_as), which ``reconcile watch --mode heal`` refuses two
environments by: what the servers told, never the project file's text."""

from __future__ import annotations

from dataclasses import replace

from reconciler.agent.claims import claim_key
from reconciler.model.server_identity import Seat, ServerIdentity

ONE = ServerIdentity(name="nats", server_id="NA1", account="APP", lineage=None)
NODE = ServerIdentity(name="n1", server_id="NB1", cluster="c", account="APP")


def test_one_server_id_is_one_server_however_it_was_named() -> None:
    assert Seat(ONE, "agent").same_as(Seat(ONE, "agent")) is True


def test_another_user_of_the_account_is_the_same_seat() -> None:
    """A stream is the account's: a user is credentials into it, writing the same
    streams (two users healing two environments fought until the flapping hold)."""
    assert Seat(ONE, "agent").same_as(Seat(ONE, "other")) is True


def test_another_account_or_domain_is_another_seat() -> None:
    assert Seat(ONE, "").same_as(Seat(replace(ONE, account="B"), "")) is False
    assert Seat(ONE, "").same_as(Seat(replace(ONE, domain="hub"), "")) is False


def test_two_servers_of_one_name_are_told_apart_only_by_the_lineage() -> None:
    other = replace(ONE, server_id="NA2")  # both named nats (a common default)
    assert Seat(ONE, "").same_as(Seat(other, "")) is None  # cannot tell: the text rule
    kept = replace(ONE, lineage="L1")
    assert Seat(kept, "").same_as(Seat(replace(other, lineage="L2"), "")) is False
    assert Seat(kept, "").same_as(Seat(replace(other, lineage="L1"), "")) is True


def test_two_nodes_of_one_cluster_are_one_seat_by_the_cluster_and_lineage() -> None:
    other = replace(NODE, name="n2", server_id="NB2")
    assert Seat(NODE, "").same_as(Seat(other, "")) is None
    same = Seat(replace(NODE, lineage="L"), "")
    assert same.same_as(Seat(replace(other, lineage="L"), "")) is True
    elsewhere = replace(other, cluster="d", lineage="L")  # a lineage copied elsewhere
    assert same.same_as(Seat(elsewhere, "")) is False


def test_what_a_server_did_not_say_decides_nothing() -> None:
    unknown = replace(ONE, account=None)
    assert Seat(unknown, None).same_as(Seat(ONE, "agent")) is None
    assert Seat(unknown, "agent").same_as(Seat(unknown, "agent")) is None
    assert Seat(ONE, None).same_as(Seat(ONE, "agent")) is True  # the account says it


def test_a_claims_key_is_the_accounts_whoever_the_user_and_none_without_an_account() -> None:
    """Agents of other processes compare seats by the claim's key: another user of the
    account is the same key; an account the server did not say makes none (the check
    is left out, as the seat cannot be told)."""
    key = claim_key(Seat(ONE, "a"), "shop")
    assert key is not None and key.startswith("seat-")
    assert claim_key(Seat(ONE, "b"), "shop") == key == claim_key(Seat(ONE, None), "shop")
    assert claim_key(Seat(ONE, "a"), "billing") != key
    assert claim_key(Seat(replace(ONE, account="B"), "a"), "shop") != key
    assert claim_key(Seat(replace(ONE, domain="hub"), "a"), "shop") != key
    assert claim_key(Seat(replace(ONE, account=None), "a"), "shop") is None
