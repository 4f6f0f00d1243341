"""Terraform expressions whose values grow exponentially are refused, not built: a
string or list doubled at each of 40 locals took 4.6 GB and over a minute."""

from __future__ import annotations

import pytest

from reconciler.importers.hcl_eval import MAX_VALUE, Module, Unreadable


def _doubling(step: object, first: object, steps: int) -> Module:
    """``local.a<n>`` is ``step`` made of ``local.a<n-1>`` (as the HCL reader gives it)."""
    module = Module()
    module.locals["a0"] = first
    for n in range(1, steps + 1):
        prev = "${local.a" + str(n - 1) + "}"
        module.locals[f"a{n}"] = [prev, prev] if isinstance(step, list) else prev + prev
    return module


def test_a_string_doubled_by_locals_is_refused_past_the_bound() -> None:
    module = _doubling("", "x" * 16, 22)  # 64 MiB if built
    with pytest.raises(Unreadable, match="is not evaluated"):
        module.value("${local.a22}")
    assert len(module.value("${local.a19}")) == 16 * 2**19 <= MAX_VALUE


def test_a_list_doubled_by_locals_is_refused_past_the_bound() -> None:
    """Lists of references share their parts in memory, but every part is written out
    (a spec, its copies, the schema check): 2**25 items is refused."""
    module = _doubling([], ["a"], 25)
    with pytest.raises(Unreadable, match="is not evaluated"):
        module.value("${local.a25}")
