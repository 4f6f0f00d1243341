"""Planning KeyValue entries (pure): create, update with the revision, adoption, owners,
prune only of this owner's entries, and secrets never shown."""

from __future__ import annotations

import base64

from reconciler.locations import Location
from reconciler.planning.entries import (
    MANAGED_HEADER,
    OWNER_HEADER,
    SECRET_SHOWN,
    LiveEntry,
    plan_entries,
    shown,
)
from reconciler.planning.plan import Ownership
from reconciler.specs.spec import Spec

HERE = Location("e.yaml", 1)


def b64(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return base64.b64encode(data).decode()


def entry(key: str, value: str, *, secret: bool = False, bucket: str = "cfg") -> Spec:
    config = {"value": b64(value), "secret": secret}
    return Spec(kind="KeyValueEntry", name=key, config=config, source=HERE, stream=bucket)


def live(key: str, value: str, revision: int = 7, owner: str | None = "default") -> LiveEntry:
    headers = {} if owner is None else {MANAGED_HEADER: "reconcile"}
    if owner not in (None, "default"):
        headers[OWNER_HEADER] = owner
    return LiveEntry("cfg", key, b64(value), revision, headers)


MINE = Ownership("default")


def test_create_update_unchanged() -> None:
    specs = [entry("a", "1"), entry("b", "2"), entry("c", "3")]
    current = {("cfg", "b"): live("b", "old", 9), ("cfg", "c"): live("c", "3")}
    out = plan_entries(specs, current, scanned_buckets=frozenset({"cfg"}), ownership=MINE)
    assert [(s.action, s.name) for s in out.steps] == [("create", "a"), ("update", "b")]
    update = out.steps[1]
    assert update.live["revision"] == 9  # the compare-and-set revision
    assert [(f.before, f.after) for f in update.fields] == [("old", "2")]
    assert [u.name for u in out.unchanged] == ["c"]


def test_a_fresh_bucket_gets_every_entry_created() -> None:
    out = plan_entries(
        [entry("a", "1")],
        {("cfg", "a"): live("a", "1")},
        fresh_buckets=frozenset({"cfg"}),
        ownership=MINE,
    )
    assert [s.action for s in out.steps] == ["create"]


def test_an_unmarked_value_is_adopted_and_another_owners_is_refused() -> None:
    adopted = plan_entries(
        [entry("a", "1")], {("cfg", "a"): live("a", "1", owner=None)}, ownership=MINE
    )
    (step,) = adopted.steps
    assert step.action == "update" and step.fields == () and step.reasons[0].startswith("adopt")
    refused = plan_entries(
        [entry("a", "1")], {("cfg", "a"): live("a", "1", owner="team-b")}, ownership=MINE
    )
    assert refused.steps == [] and "managed by owner 'team-b'" in refused.problems[0].message
    taken = plan_entries(
        [entry("a", "1")],
        {("cfg", "a"): live("a", "1", owner="team-b")},
        ownership=Ownership("default", take_over=True),
    )
    assert [s.action for s in taken.steps] == ["update"]


def test_prune_touches_only_this_owners_undeclared_entries() -> None:
    current = {
        ("cfg", "gone"): live("gone", "x"),
        ("cfg", "theirs"): live("theirs", "x", owner="team-b"),
        ("cfg", "app"): live("app", "x", owner=None),
    }
    scanned = frozenset({"cfg"})
    kept = plan_entries([], current, scanned_buckets=scanned, ownership=MINE)
    assert [o.name for o in kept.orphans] == ["gone"] and [f.name for f in kept.foreign] == [
        "theirs"
    ]
    assert kept.steps == [] and kept.unmanaged == []
    pruned = plan_entries([], current, scanned_buckets=scanned, prune=True, ownership=MINE)
    assert [(s.action, s.name) for s in pruned.steps] == [("delete", "gone")]
    assert pruned.steps[0].destructive and pruned.steps[0].live["revision"] == 7
    unscanned = plan_entries([], current, scanned_buckets=frozenset(), prune=True, ownership=MINE)
    assert unscanned.steps == []


def test_secrets_are_never_shown_and_binary_values_are_base64() -> None:
    out = plan_entries(
        [entry("pw", "new-secret", secret=True)],
        {("cfg", "pw"): live("pw", "old-secret")},
        ownership=MINE,
    )
    (step,) = out.steps
    assert [(f.before, f.after) for f in step.fields] == [(SECRET_SHOWN, SECRET_SHOWN)]
    assert "secret" not in repr(step.to_json()).replace("(secret)", "")
    assert shown(b64(b"\x00\x01"), secret=False) == "base64:AAE="
    assert shown(b64("x" * 500), secret=False).endswith("…")
