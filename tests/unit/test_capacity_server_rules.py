"""The server's own limits in the capacity computation (planning.capacity), pure: a
server's ``/jsz`` answer shaped as nats-server 2.15.1 sends it (docs/capacity.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from test_capacity_rules import SERVER, MiB, info, stream

from reconciler.model.normalize import ownership_marker
from reconciler.model.state import LiveState, ServerInfo
from reconciler.planning.capacity import Assessment, ServerRoom, assess, server_room
from reconciler.planning.plan import build_plan
from reconciler.render.capacity import capacity_lines
from reconciler.specs.validate import load_specs


def jsz(max_storage: int, reserved: int = 0, **extra: Any) -> dict[str, Any]:
    config = {"max_memory": 8 * MiB, "max_storage": max_storage, "store_dir": "/js"}
    return {"config": config, "reserved_storage": reserved, "reserved_memory": 0, **extra}


def assessed(
    tmp_path: Path,
    text: str,
    room: ServerRoom | None,
    live: dict[str, dict[str, Any]] | None = None,
    *,
    server: ServerInfo = SERVER,
    prune: bool = False,
) -> Assessment:
    (tmp_path / "specs.yaml").write_text(text)
    specs = load_specs([tmp_path / "specs.yaml"])
    state = LiveState(server, streams=live or {}, consumers={})
    the_plan = build_plan(specs, state, prune=prune)
    return assess(the_plan, state, info(), specs, server=room)


def test_other_accounts_reservations_count_against_the_servers_store(tmp_path: Path) -> None:
    room = server_room(jsz(20 * MiB, reserved=12 * MiB), "the monitoring endpoint X")
    found = assessed(tmp_path, "kind: Stream\nname: A\nmax_bytes: 9MiB\n", room)
    (error,) = found.errors
    assert str(error.location).endswith("specs.yaml:3")
    assert "21.0 MiB of the server's 20.0 MiB (max_file_store; now 12.0 MiB)" in error.message
    server = next(t for t in found.capacity.totals if t.scope == "server" and t.what == "file")
    assert (server.before, server.after, server.limit) == (12 * MiB, 21 * MiB, 20 * MiB)
    assert found.capacity.server_known


def test_a_full_server_refuses_an_unlimited_stream(tmp_path: Path) -> None:
    room = server_room(jsz(20 * MiB, reserved=20 * MiB), "the system account")
    found = assessed(tmp_path, "kind: Stream\nname: A\n", room)
    (error,) = found.errors
    assert "one byte" in error.message and "server's" in error.message


def test_a_delete_frees_no_server_room_before_the_creates(tmp_path: Path) -> None:
    live = {"OLD": stream("OLD", 10 * MiB, metadata=ownership_marker("default"))}
    room = server_room(jsz(20 * MiB, reserved=10 * MiB), "the monitoring endpoint X")
    text = "kind: Stream\nname: NEW\nmax_bytes: 15MiB\n"
    found = assessed(tmp_path, text, room, live, prune=True)
    (error,) = found.errors
    assert "25.0 MiB of the server's 20.0 MiB" in error.message
    assert "apply deletes last" in error.message


def test_unknown_server_limits_are_said_never_no_limit(tmp_path: Path) -> None:
    found = assessed(tmp_path, "kind: Stream\nname: A\nmax_bytes: 5MiB\n", None)
    assert found.errors == ()
    assert not found.capacity.server_known
    assert "--monitor" in found.capacity.server


def test_a_jsz_without_limits_of_its_own_is_unknown() -> None:
    room = server_room({"server_id": "N1"}, "the monitoring endpoint X")
    assert not room.known and "no JetStream limits" in room.said


def test_the_text_names_the_server_figure_and_the_unknown(tmp_path: Path) -> None:
    known = assessed(
        tmp_path, "kind: Stream\nname: A\nmax_bytes: 5MiB\n", server_room(jsz(20 * MiB), "X")
    )
    unknown = assessed(tmp_path, "kind: Stream\nname: A\nmax_bytes: 5MiB\n", None)
    (tmp_path / "specs.yaml").write_text("kind: Stream\nname: A\nmax_bytes: 5MiB\n")
    specs = load_specs([tmp_path / "specs.yaml"])
    plan = build_plan(specs, LiveState(SERVER, streams={}, consumers={}))
    known_lines = capacity_lines(replace(plan, capacity=known.capacity))
    unknown_lines = capacity_lines(replace(plan, capacity=unknown.capacity))
    assert "    server file storage reserved (every account): 0 B -> 5.0 MiB of 20.0 MiB (25%)" in (
        known_lines
    )
    assert not any("(no limit)" in line for line in unknown_lines)
    assert any("the server's own limit is unknown" in line for line in unknown_lines)
