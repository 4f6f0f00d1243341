"""A run collects no cyclic garbage while it works, and leaves the collector as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from reconciler.execution.run import fewer_collections


@pytest.fixture(autouse=True)
def restore_collector() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


def test_a_run_collects_nothing_and_restores_the_collector_even_when_it_fails() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), fewer_collections():
        assert not gc.isenabled()
        raise RuntimeError("the run failed")
    assert gc.isenabled()


def test_nested_runs_leave_restoring_to_the_outermost() -> None:
    gc.enable()
    with fewer_collections():
        with fewer_collections():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_caller_stays_off() -> None:
    gc.disable()
    with fewer_collections():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_what_a_run_leaves_is_never_walked_again() -> None:
    gc.enable()
    with fewer_collections():
        kept = [{"config": i} for i in range(1000)]
    try:
        assert gc.get_freeze_count() >= len(kept)
        walked = {id(o) for generation in range(3) for o in gc.get_objects(generation)}
        assert not walked & {id(x) for x in kept}
    finally:
        gc.unfreeze()
