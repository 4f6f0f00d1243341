"""An error's details are lines of their own: the console keeps the breaks between them
and escapes each line, so a line break inside a name never makes a line of output."""

from __future__ import annotations

from reconciler.console import error_lines
from reconciler.errors import RefusedPlan
from reconciler.execution.apply import check_allowed
from reconciler.identity import ResourceRef
from reconciler.model.loss import Loss
from reconciler.model.state import ServerInfo
from reconciler.planning.steps import Delete, Plan


def test_a_refusal_lists_each_step_on_a_line_of_its_own() -> None:
    hostile = ResourceRef("Stream", "EVIL\n::error::pwned")
    plain = ResourceRef("Stream", "ORDERS")
    plan = Plan(
        server=ServerInfo("2.12.8", 3),
        changes=(
            Delete(ref=plain, losses=(Loss("messages", "holds 100 messages", 100),)),
            Delete(ref=hostile, losses=(Loss("messages", "holds 3 messages", 3),)),
        ),
    )
    try:
        check_allowed(plan, allow_replace=False)
    except RefusedPlan as err:
        lines = error_lines(err)
    else:
        raise AssertionError("a plan deleting data was allowed")
    assert lines[0].startswith("error: refusing to apply: 2 step(s) would destroy data")
    assert len(lines) == 3
    assert all("\n" not in line for line in lines)
    assert not any(line.lstrip().startswith("::") for line in lines)
    assert "ORDERS" in lines[1] or "ORDERS" in lines[2]
    assert any("EVIL\\n::error::pwned" in line for line in lines)


def test_str_of_an_error_with_details_reads_as_before() -> None:
    err = RefusedPlan("refused; nothing was changed.", details=["Stream A: x", "Stream B: y"])
    assert str(err) == "refused; nothing was changed.\n  Stream A: x\n  Stream B: y"
    assert err.headline == "refused; nothing was changed."
