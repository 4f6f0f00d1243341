"""What an unattended heal may apply (planning.heal): creates and updates that delete
nothing, and never what depends on a step that needs a person."""

from __future__ import annotations

from reconciler.identity import ResourceRef
from reconciler.model.diff import ReplaceReason
from reconciler.model.loss import Loss
from reconciler.model.state import ServerInfo
from reconciler.planning.heal import split_for_heal
from reconciler.planning.steps import Create, Delete, Migrate, Plan, Replace, Step, Update

SERVER = ServerInfo(version="2.15.1", api_level=5)


def _stream(name: str) -> ResourceRef:
    return ResourceRef("Stream", name)


def _consumer(stream: str, name: str) -> ResourceRef:
    return ResourceRef("Consumer", name, stream)


def _labels(steps: tuple[Step, ...]) -> list[str]:
    return [s.label for s in steps]


def test_creates_and_lossless_updates_are_healed() -> None:
    plan = Plan(
        SERVER,
        changes=(
            Create(ref=_stream("A"), config={"name": "A"}),
            Update(ref=_stream("B"), config={"name": "B"}, live={"name": "B"}),
            Create(ref=_consumer("A", "C"), config={"name": "C"}),
        ),
    )
    split = split_for_heal(plan)
    assert _labels(split.steps) == ["Stream A", "Stream B", "Consumer A/C"]
    assert split.refused == ()
    assert split.safe.server is SERVER


def test_replace_delete_migrate_and_lossy_update_need_a_person() -> None:
    lossy = Loss("max_msgs", "drops 90 messages", 90)
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
            Update(ref=_stream("L"), config={"name": "L"}, live={"name": "L"}, losses=(lossy,)),
            Update(ref=_stream("OK"), config={"name": "OK"}, live={"name": "OK"}),
        ),
    )
    split = split_for_heal(plan)
    assert _labels(split.steps) == ["Stream OK"]
    assert _labels(tuple(r.step for r in split.refused)) == [
        "Stream R",
        "Stream D",
        "Stream M",
        "Stream L",
    ]
    assert all(r.why for r in split.refused)


def test_what_depends_on_a_refused_stream_is_refused_too() -> None:
    """A consumer of a replaced stream, a consumer created again with it, and a stream
    mirroring it (and that mirror's consumer) all wait for a person."""
    plan = Plan(
        SERVER,
        changes=(
            Replace(ref=_stream("R"), config={"name": "R"}, live={"name": "R"}),
            Create(ref=_consumer("R", "NEW"), config={"name": "NEW"}),
            Create(ref=_consumer("R", "OLD"), config={"name": "OLD"}, live={"name": "OLD"}),
            Create(ref=_stream("MIRROR"), config={"name": "MIRROR", "mirror": {"name": "R"}}),
            Create(ref=_consumer("MIRROR", "C"), config={"name": "C"}),
            Create(ref=_stream("FREE"), config={"name": "FREE"}),
        ),
    )
    split = split_for_heal(plan)
    assert _labels(split.steps) == ["Stream FREE"]
    why = {r.step.label: r.why for r in split.refused}
    assert "Stream R" in why["Consumer R/NEW"]
    assert "Stream R" in why["Stream MIRROR"]
    assert "Stream MIRROR" in why["Consumer MIRROR/C"]
