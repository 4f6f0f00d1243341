"""Apply's rule for a stream the specs declare a standby mirror (``planning.standby.
guarded``), on the steps a restore brings: in the standby environment the stream is the
origin's mirror or nothing. A backup's config is data someone else may have written: a
mirror of another stream under the standby's name is refused as a plain stream is."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.identity import ResourceRef
from reconciler.locations import Location
from reconciler.model.state import ServerInfo
from reconciler.planning.standby import PREVENTED, guarded
from reconciler.planning.steps import Create, Plan
from reconciler.specs.spec import Spec
from reconciler.specs.standby import Standby

ORDERS = {"name": "ORDERS", "subjects": ["orders.>"]}
EXTERNAL = {"api": "$JS.east.API"}


def _spec() -> Spec:
    standby = Standby(primary="east", environment="west", where="specs/orders.yaml:5")
    return Spec("Stream", "ORDERS", ORDERS, Location("specs/orders.yaml", 1), standby=standby)


def _restored(config: dict[str, Any], environment: str) -> str:
    step = Create(ref=ResourceRef("Stream", "ORDERS"), config=config)
    plan = guarded(Plan(ServerInfo("2.12.8", 1), (step,)), [_spec()], environment)
    return plan.changes[0].prevented


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(ORDERS, id="a plain stream"),
        pytest.param({"name": "ORDERS", "mirror": {"name": "OTHER", **EXTERNAL}}, id="OTHER"),
        pytest.param({"name": "ORDERS", "mirror": "ORDERS"}, id="not a mapping"),
    ],
)
def test_the_standby_environment_takes_only_the_origins_mirror(config: dict[str, Any]) -> None:
    why = _restored(config, "west")
    assert why.startswith(PREVENTED) and "specs/orders.yaml:5" in why


def test_the_origins_mirror_is_taken_there_and_anything_in_the_primary() -> None:
    assert _restored({"name": "ORDERS", "mirror": {"name": "ORDERS", **EXTERNAL}}, "west") == ""
    assert _restored(ORDERS, "east") == ""
