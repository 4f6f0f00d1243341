"""The Pulumi host formats this tool's errors as their message; bugs keep a traceback."""

from __future__ import annotations

import traceback

import pytest

from pulumi_provider.host_errors import _Plain
from reconciler.errors import RefusedPlan


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
