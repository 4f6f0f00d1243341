"""The Pulumi host formats this tool's errors as their message; bugs keep a traceback."""

from __future__ import annotations

import traceback

import pytest

from pulumi_provider.host_errors import _Plain, message
from pulumi_provider.inputs import to_spec
from reconciler.errors import RefusedPlan, SpecError


def formatted(error: Exception) -> str:
    try:
        raise error
    except Exception:
        return _Plain(traceback).format_exc()


def test_a_refusal_is_its_reason_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECONCILE_DEBUG", raising=False)
    assert formatted(RefusedPlan("Stream ORDERS: set allow_destroy")) == (
        "Stream ORDERS: set allow_destroy"
    )


def test_debug_and_bugs_keep_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECONCILE_DEBUG", raising=False)
    assert "Traceback" in formatted(ValueError("a bug"))
    monkeypatch.setenv("RECONCILE_DEBUG", "1")
    assert "Traceback" in formatted(RefusedPlan("Stream ORDERS: set allow_destroy"))
    assert _Plain(traceback).format_list is traceback.format_list  # the rest is the module


@pytest.mark.parametrize(
    ("name", "shown"),
    [("A\u202eB", "A\\u202eB"), ("A\x1b[2JB", "A\\x1b[2JB"), ("C\u200bD", "C\\u200bD")],
)
def test_a_resource_named_with_a_hidden_character_is_labelled_escaped(
    name: str, shown: str
) -> None:
    """The label (``pulumi:Stream/NAME:0``) of a refused resource holds its name escaped,
    as the message after it does: printed anywhere, the error reads as one line of text,
    and the host's own escaping leaves it as it is."""
    with pytest.raises(SpecError) as caught:
        to_spec({"kind": "Stream", "name": name, "subjects": ["a"]})
    (problem,) = caught.value.problems
    assert str(problem.location) == f"pulumi:Stream/{shown}:0"
    assert str(caught.value).isprintable() and message(caught.value) == str(caught.value)
