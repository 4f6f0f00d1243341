"""What a person approved and the plan made again after the answer (planning.review), and
the secrets a server URL holds (jetstream.connection): pure, no server."""

from __future__ import annotations

import pytest

from reconciler.errors import ConnectError
from reconciler.identity import ResourceRef
from reconciler.jetstream.connection import ConnectionOptions, redact_url, url_secrets
from reconciler.model.diff import FieldChange
from reconciler.model.loss import Loss
from reconciler.model.state import ServerInfo
from reconciler.planning.review import differences
from reconciler.planning.steps import Create, Delete, Plan, Step, Update

SERVER = ServerInfo(version="2.12.1", api_level=2)
WAIT = ResourceRef("Stream", "WAIT")
CALM = ResourceRef("Stream", "CALM")


def update(ref: ResourceRef, *losses: Loss, after: int = 10) -> Update:
    change = FieldChange("max_msgs", -1, after)
    return Update(ref=ref, fields=(change,), losses=losses, config={}, live={})


def plan(*steps: Step) -> Plan:
    return Plan(server=SERVER, changes=steps)


def test_the_same_steps_destroying_the_same_are_the_plan_reviewed() -> None:
    shown = plan(update(WAIT), Create(ref=CALM, config={"name": "CALM"}))
    now = plan(update(WAIT), Create(ref=CALM, config={"name": "CALM"}))
    assert differences(shown, now) == []


def test_an_update_that_now_deletes_messages_is_named_with_its_loss() -> None:
    lost = Loss("max_msgs", "holds 100 messages; max_msgs 10 deletes at least 90", 90)
    said = differences(plan(update(WAIT), update(CALM)), plan(update(WAIT, lost), update(CALM)))
    assert said == [
        "Stream WAIT: the update now destroys data (holds 100 messages; max_msgs 10 deletes "
        "at least 90) (shown: destroys nothing)"
    ]


def test_a_loss_through_another_field_is_a_different_plan_a_larger_count_is_not() -> None:
    shown = plan(update(WAIT, Loss("max_msgs", "holds 20 messages; ...", 10)))
    more = plan(update(WAIT, Loss("max_msgs", "holds 30 messages; ...", 20)))
    reworded = plan(update(WAIT, Loss("max_msgs", "holds 20 messages (said otherwise)", 10)))
    other = plan(update(WAIT, Loss("max_age", "holds 20 messages; ...", 10)))
    assert differences(shown, more) == []  # approved as lossy through max_msgs: still is
    assert differences(shown, reworded) == []
    assert differences(shown, other) == [
        "Stream WAIT: the update now destroys data (holds 20 messages; ...) "
        "(shown: destroys data (holds 20 messages; ...))"
    ]


def test_steps_added_removed_or_changed_are_each_named() -> None:
    shown = plan(update(WAIT), Create(ref=CALM, config={}))
    now = plan(update(WAIT, after=20), Delete(ref=ResourceRef("Stream", "GONE")))
    assert differences(shown, now) == [
        "Stream CALM: the create shown is no longer needed",
        "Stream GONE: now needs a delete that was not shown (destroys data)",
        "Stream WAIT: the update now changes max_msgs (shown: max_msgs)",
    ]
    as_replace = plan(update(WAIT), Create(ref=CALM, config={}))
    replaced = plan(Delete(ref=WAIT), Create(ref=CALM, config={}))
    assert differences(as_replace, replaced) == [
        "Stream WAIT: now a delete, shown as an update (destroys data)"
    ]


@pytest.mark.parametrize(
    ("url", "secrets", "shown"),
    [
        ("nats://alice:s3cret@h:4222", ["s3cret"], "nats://alice:***@h:4222"),
        ("alice:s3cret@h:4222", ["s3cret"], "alice:***@h:4222"),
        ("T0KEN@h:4222", ["T0KEN"], "***@h:4222"),
        ("tls://T0KEN@h", ["T0KEN"], "tls://***@h"),
        ("nats://u:p@ss@h:4222", ["p@ss"], "nats://u:***@h:4222"),
        ("nats://h:4222", [], "nats://h:4222"),
    ],
    ids=["user-password", "no-scheme", "token", "tls-token", "at-in-password", "none"],
)
def test_url_secrets_are_what_redact_url_hides(url: str, secrets: list[str], shown: str) -> None:
    assert url_secrets(url) == secrets
    assert redact_url(url) == shown
    assert not any(secret in redact_url(url) for secret in secrets)


def test_url_secrets_of_a_list() -> None:
    assert url_secrets("nats://a:x1@h1, T0KEN@h2 ,nats://h3") == ["x1", "T0KEN"]


@pytest.mark.parametrize("servers", ["", " ", " , "], ids=["empty", "blank", "comma"])
def test_an_empty_server_is_refused_not_the_embedded_server(servers: str) -> None:
    with pytest.raises(ConnectError, match="empty"):
        ConnectionOptions(servers=servers)
    assert not ConnectionOptions().is_configured  # none given: the embedded server
