"""Renderers: the same Plan as text (Terraform-like), Markdown (PR comments) or JSON.

Each format lives in its own module, imported on first use; drift reports have their
own renderers next to these (``drift_text``, ``drift_markdown``, ``drift_html``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from reconciler.planning.steps import Plan

PlanFormat = Literal["text", "json", "markdown"]

__all__ = ["PlanFormat", "render_plan"]


def render_plan(
    plan: Plan,
    fmt: PlanFormat,
    *,
    color: bool = False,
    allowed: Collection[str] = (),
    full: bool = False,
) -> str:
    """``plan`` in ``fmt``; ``color`` adds ANSI colours to text (ignored otherwise).
    ``full`` shows every step in full (text and Markdown fold the harmless ones of a plan
    over ``render.text.FOLD_OVER`` steps otherwise; JSON is always whole).

    ``allowed`` names the flags the run was given (``--allow-data-loss``, ...): the
    warning about destructive steps then says they are allowed, not that a flag is needed.
    """
    if fmt == "json":
        from reconciler.render.json import render_json

        return render_json(plan)
    if fmt == "markdown":
        from reconciler.render.markdown import render_markdown

        return render_markdown(plan, allowed=allowed, full=full)
    if fmt == "text":
        from reconciler.render.text import render_text

        return render_text(plan, color=color, allowed=allowed, full=full)
    raise ValueError(f"unknown plan format {fmt!r} (text, json or markdown)")
