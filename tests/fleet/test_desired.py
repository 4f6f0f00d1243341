"""The desired side of the fleet job without Spark: env folders, contexts, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.errors import ReconcileError
from reconciler.fleet.desired import env_folders, load_fleet
from reconciler.model.state import ServerInfo

SPECS = """\
kind: Stream
name: RAW
external: true
---
kind: Consumer
stream: RAW
name: READER
ack_policy: explicit
---
kind: Stream
name: ORDERS
subjects: [orders.>]
allow_msg_ttl: true
"""


def fleet(tmp_path: Path) -> Path:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "specs.yaml").write_text(SPECS)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.yaml").write_text("kind: Stream\nname: X\nmax_age: 10 parsecs\n")
    (tmp_path / ".hidden").mkdir()
    return tmp_path


def test_each_visible_sub_folder_is_an_environment_and_invalid_ones_carry_problems(
    tmp_path: Path,
) -> None:
    envs = {e.env: e for e in load_fleet(fleet(tmp_path))}
    assert sorted(envs) == ["bad", "dev"]
    assert not envs["bad"].valid and str(envs["bad"].problems[0]).startswith(
        f"{tmp_path / 'bad' / 'x.yaml'}:3"
    )
    assert envs["dev"].needed_streams() == ("RAW",)
    assert envs["dev"].declared_streams() == {"RAW", "ORDERS"}


def test_a_fleet_folder_needs_environment_sub_folders(tmp_path: Path) -> None:
    with pytest.raises(ReconcileError, match="no environment sub-folders"):
        env_folders(tmp_path)


def test_what_the_plan_refuses_refuses_the_day(tmp_path: Path) -> None:
    env = {e.env: e for e in load_fleet(fleet(tmp_path))}["dev"]
    new = ServerInfo("2.12.3", 3)
    assert env.problems_on(new, lambda stream: stream == "RAW") == []
    missing = env.problems_on(new, lambda stream: False)
    assert [p.message for p in missing] == ["external stream RAW does not exist on the server"]
    old = env.problems_on(ServerInfo("2.10.25", 0), lambda stream: True)
    assert any("allow_msg_ttl" in str(p) and "2.11" in str(p) for p in old)


def test_specs_are_grouped_by_stream_as_the_planner_groups_them(tmp_path: Path) -> None:
    env = {e.env: e for e in load_fleet(fleet(tmp_path))}["dev"]
    groups = env.by_stream()
    assert sorted(groups) == ["ORDERS", "RAW"]
    stream, consumers = groups["RAW"]
    assert stream is not None and stream.external
    assert [c.name for c in consumers] == ["READER"]
    # what workers get: identity and source kept, field locations left on the driver
    assert stream.source.line and not stream.locations and not consumers[0].locations


def test_a_project_file_gives_each_environment_its_overlays(tmp_path: Path) -> None:
    """The fleet reads environments from reconcile.yaml: shared specs, each environment's
    overlays merged in, an environment with a broken overlay carrying its problem."""
    files = {
        "reconcile.yaml": (
            "specs: [specs]\nenvironments:\n"
            "  dev: {embedded: true}\n"
            "  prod: {servers: 'nats://prod:4222', overlays: [prod.yaml]}\n"
            "  broken: {servers: 'nats://b:4222', overlays: [broken.yaml]}\n"
        ),
        "specs/s.yaml": SPECS,
        "prod.yaml": "kind: Stream\nname: ORDERS\nmax_bytes: 1GiB\n",
        "broken.yaml": "kind: Stream\nname: NOPE\nmax_bytes: 1GiB\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    loaded = {env.env: env for env in load_fleet(tmp_path / "reconcile.yaml")}
    assert sorted(loaded) == ["broken", "dev", "prod"]

    def orders(env: str) -> dict[str, object]:
        return next(s.config for s in loaded[env].specs if s.name == "ORDERS")

    assert "max_bytes" not in orders("dev")
    assert orders("prod")["max_bytes"] == 2**30
    assert not loaded["broken"].valid
    assert "broken.yaml:2: name: overlay for Stream NOPE" in str(loaded["broken"].problems[0])
