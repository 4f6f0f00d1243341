"""Reviewer-first output under attack: what a PR comment or a folded text plan must never
hide, however many steps there are and whatever the names hold.

- a policy ``deny`` is never cut out of a comment by a long list of what deletes lose
  (1,000 pruned streams with long names);
- a migration (blocked, prevented or not) is never folded away: what it copies and why
  apply refuses it stay visible in text and outside the Markdown folds;
- a forged owner or name holding ``</details>`` inside a code span does not make
  :func:`fit` lose count of the folds it must close.
"""

from __future__ import annotations

import re

from action.comment import COMMENT_LIMIT, comment_body
from reconciler.identity import ResourceRef
from reconciler.model.diff import FieldChange, ReplaceReason
from reconciler.model.loss import Loss
from reconciler.model.state import ServerInfo
from reconciler.planning.drift import from_plan
from reconciler.planning.findings import PolicyFinding
from reconciler.planning.steps import (
    Create,
    Delete,
    Foreign,
    Migrate,
    Plan,
    Replace,
    Step,
    Unmanaged,
    Update,
)
from reconciler.render.drift_markdown import render_drift_markdown
from reconciler.render.markdown import fit, render_markdown
from reconciler.render.text import render_text

SERVER = ServerInfo(version="2.12.8", api_level=3)


def _creates(count: int) -> tuple[Step, ...]:
    return tuple(
        Create(
            ref=ResourceRef("Stream", f"S{i:03d}"),
            fields=(FieldChange("subjects", None, [f"s{i}.>"]),),
            config={},
        )
        for i in range(count)
    )


def _outside_details(markdown: str) -> str:
    return re.sub(r"<details>.*?</details>", "", markdown, flags=re.S)


def test_a_policy_deny_survives_the_comment_cut_of_1000_pruned_streams() -> None:
    deletes = tuple(
        Delete(
            ref=ResourceRef("Stream", f"TENANT_{i:04d}_" + "EVENTS_ARCHIVE" * 8),
            losses=(Loss("", "deletes the stream with its 1,234,567 messages (12.3GiB)", 1),),
        )
        for i in range(1_000)
    )
    deny = PolicyFinding(
        rule="no-mass-prune",
        level="deny",
        message="never prune more than 10 streams at once",
        ref=deletes[0].ref,
        action="delete",
        rule_source="policies/prune.yaml:4",
    )
    plan = Plan(server=SERVER, changes=deletes, policy=(deny,))
    body = comment_body(render_markdown(plan), path="specs")
    assert len(body) <= COMMENT_LIMIT
    assert "no-mass-prune" in body and "never prune more than 10 streams" in body
    assert "apply refuses" in body
    assert "1000 step(s) destroy data" in body
    assert "… and 980 more" in body  # the losses list is a preview, each step is below


def _blocked_migration() -> Migrate:
    why = "the migration record names another owner"
    return Migrate(
        ref=ResourceRef("Stream", "AUDIT"),
        fields=(FieldChange("storage", "file", "memory"),),
        reasons=(f"blocked: {why}",),
        config={},
        blocked=why,
    )


def _prevented_migration() -> Migrate:
    why = "prevented by lifecycle prevent_destroy (specs/ledger.yaml:3); no flag allows this"
    return Migrate(
        ref=ResourceRef("Stream", "LEDGER"),
        fields=(FieldChange("storage", "file", "memory"),),
        reasons=(why,),
        config={},
        prevented=why,
    )


def test_a_folded_text_plan_shows_migrations_and_why_they_are_refused() -> None:
    migrations = (_blocked_migration(), _prevented_migration())
    plan = Plan(server=SERVER, changes=(*_creates(60), *migrations))
    text = render_text(plan)
    assert "+ 60 to create: Stream" in text  # still folded
    assert ">>> migrate Stream AUDIT" in text
    assert "# blocked: the migration record names another owner" in text
    assert ">>> migrate Stream LEDGER" in text
    assert "# prevented by lifecycle prevent_destroy (specs/ledger.yaml:3)" in text
    assert "# copies 0 messages" in text


def test_a_folded_markdown_plan_shows_migrations_outside_the_folds() -> None:
    migrations = (_blocked_migration(), _prevented_migration())
    plan = Plan(server=SERVER, changes=(*_creates(60), *migrations))
    visible = _outside_details(render_markdown(plan))
    assert "<summary>" not in visible
    assert "migrate Stream AUDIT" in visible
    assert "blocked: the migration record names another owner" in visible
    assert "migrate Stream LEDGER" in visible
    assert "prevented by lifecycle prevent_destroy (specs/ledger.yaml:3)" in visible


def test_a_prevented_update_is_not_folded_away() -> None:
    why = "prevented: the server records lifecycle prevent_destroy for it (last declared at x:1)"
    update = Update(
        ref=ResourceRef("Stream", "KEEP"),
        fields=(FieldChange("description", "a", "b"),),
        reasons=(why,),
        config={},
        live={},
        prevented=why,
    )
    text = render_text(Plan(server=SERVER, changes=(*_creates(60), update)))
    assert "~ update Stream KEEP" in text and f"# {why}" in text


def test_fit_closes_folds_when_forged_owners_hold_details_tags() -> None:
    owner = "x</details></details>`<details>"
    foreign = tuple(
        Foreign(ref=ResourceRef("Stream", f"F{i:03d}"), owner=owner) for i in range(300)
    )
    markdown = render_drift_markdown(from_plan(Plan(server=SERVER, foreign=foreign)))
    tags = re.compile(r"^</?details>$", re.M)
    for limit in (2_000, 5_000, 9_000):
        cut = fit(markdown, limit, where="the report")
        opened = sum(1 for t in tags.findall(cut) if t == "<details>")
        closed = sum(1 for t in tags.findall(cut) if t == "</details>")
        assert opened == closed == 1, (limit, opened, closed)
        assert cut.rstrip().endswith("The complete plan: the report.")
        note = cut.index("> [!NOTE]")
        assert cut.rindex("</details>") < note  # the note is outside the fold


def test_the_verdict_of_a_plan_apply_refuses_is_never_a_green_tick() -> None:
    create = _creates(1)
    deny = PolicyFinding(
        rule="r3-in-prod",
        level="deny",
        message="3 replicas in prod",
        ref=create[0].ref,
        action="create",
        rule_source="policies/prod.yaml:2",
    )
    denied = render_markdown(Plan(server=SERVER, changes=create, policy=(deny,)))
    assert denied.startswith("### ⛔ Denied by policy: 1 deny rule does not hold (1 finding)")
    blocked = render_markdown(Plan(server=SERVER, changes=(*create, _blocked_migration())))
    assert blocked.startswith("### ⛔ A migration is blocked, apply refuses: 1 to create, 1 to")
    fine = render_markdown(Plan(server=SERVER, changes=create))
    assert fine.startswith("### ✅ 1 to create: nothing is destroyed")


#: The longest JetStream name, of the character escaping makes longest in Markdown
#: (an ``@`` is followed by a zero-width space entity, so no one is notified).
LONG = "@" * 255


def test_long_names_on_the_server_never_push_the_steps_out_of_a_comment() -> None:
    unmanaged = tuple(
        Unmanaged(ref=ResourceRef("Stream", f"{i:03d}{LONG[3:]}")) for i in range(200)
    )
    foreign = tuple(
        Foreign(ref=ResourceRef("Stream", f"F{i:03d}{LONG[4:]}"), owner=LONG) for i in range(200)
    )
    replace = Replace(
        ref=ResourceRef("Stream", "EVENTS"),
        fields=(FieldChange("storage", "file", "memory"),),
        reasons=("storage cannot be changed",),
        config={},
        live={},
    )
    plan = Plan(server=SERVER, changes=(replace,), unmanaged=unmanaged, foreign=foreign)
    body = comment_body(render_markdown(plan), path="specs")
    assert len(body) <= COMMENT_LIMIT
    assert "**⚠️ replace Stream EVENTS**" in body
    assert '- storage: "file"' in body and '+ storage: "memory"' in body
    assert "200 unmanaged" in body and "200 managed by other owners" in body


def test_long_names_of_deleted_streams_never_push_a_policy_deny_out() -> None:
    deletes = tuple(
        Delete(
            ref=ResourceRef("Stream", f"{i:02d}{LONG[2:]}"),
            losses=(Loss("", f"deletes the stream with its messages ({LONG})", 1),),
        )
        for i in range(19)
    )
    deny = PolicyFinding(
        rule="no-prune",
        level="deny",
        message="never prune",
        ref=deletes[0].ref,
        action="delete",
        rule_source="policies/prune.yaml:4",
    )
    plan = Plan(server=SERVER, changes=deletes, policy=(deny,))
    body = comment_body(render_markdown(plan), path="specs")
    assert "`no-prune`" in body and "never prune" in body


def test_a_drift_comment_names_what_only_a_replace_undoes_however_long_the_table() -> None:
    drifted = tuple(
        Update(
            ref=ResourceRef("Stream", f"S{i:03d}"),
            fields=(FieldChange("description", "x" * 200, "y" * 200),),
            config={},
            live={},
        )
        for i in range(400)
    )
    why = "storage cannot be changed"
    replace = Replace(
        ref=ResourceRef("Stream", "ZZZ_LAST"),
        fields=(FieldChange("storage", "memory", "file"),),
        reasons=(why,),
        because=(ReplaceReason("storage", why),),
        config={},
        live={},
    )
    report = from_plan(Plan(server=SERVER, changes=(*drifted, replace)))
    body = comment_body(render_drift_markdown(report), path="specs")
    assert len(body) <= COMMENT_LIMIT
    assert "Cannot be undone in place" in body
    assert f"- Stream `ZZZ_LAST`: {why}" in body


def test_a_consumer_created_again_with_its_replaced_stream_is_not_folded_away() -> None:
    """Its delivery and acknowledgement state goes (``planning.steps.destroys``)."""
    why = "re-created: stream EVENTS is replaced"
    again = Create(
        ref=ResourceRef("Consumer", "audit", "EVENTS"),
        fields=(FieldChange("ack_policy", None, "explicit"),),
        reasons=(why,),
        config={},
        live={"ack_policy": "explicit"},
    )
    text = render_text(Plan(server=SERVER, changes=(*_creates(60), again)))
    assert "+ create Consumer EVENTS/audit" in text and f"# {why}" in text
    visible = _outside_details(render_markdown(Plan(server=SERVER, changes=(*_creates(60), again))))
    assert "create Consumer EVENTS/audit" in visible
