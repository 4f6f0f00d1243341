"""A plan's unmanaged notes less those the project's ignore rules hide (pure).

Only :class:`~reconciler.planning.steps.Unmanaged` notes are ever left out: a step, an
unchanged, orphaned or foreign resource is never matched by a name rule
(:mod:`reconciler.specs.ignore` holds the rules and how they match). An unmanaged
consumer is hidden by a rule of its own, or with the unmanaged stream or bucket a rule
hides (unless a later negated rule names the consumer). The plan keeps the counts per
rule (``Plan.hidden``) and the rules (``Plan.ignore``: drift's field rules), so every
renderer says how many each rule hid.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from reconciler.planning.steps import Plan, Unmanaged
from reconciler.specs.ignore import IgnoreRule, IgnoreRules, tally


def hide_notes(plan: Plan, rules: IgnoreRules) -> Plan:
    """``plan`` without the unmanaged notes ``rules`` hide (the same plan without rules)."""
    if not rules:
        return plan
    found: Counter[IgnoreRule] = Counter({rule: 0 for rule in rules.rules})
    hidden_streams: dict[str, IgnoreRule] = {}
    kept: list[Unmanaged] = []
    for note in sorted(plan.unmanaged, key=lambda n: n.ref.is_child):  # streams first
        rule = _rule_for(note, rules, hidden_streams)
        if rule is None:
            kept.append(note)
            continue
        found[rule] += 1
        if not note.ref.is_child:
            hidden_streams[note.ref.stream_name] = rule
    kept.sort(key=lambda n: n.ref.sort_key)
    return replace(plan, unmanaged=tuple(kept), hidden=tally(found), ignore=rules)


def _rule_for(
    note: Unmanaged, rules: IgnoreRules, hidden_streams: dict[str, IgnoreRule]
) -> IgnoreRule | None:
    own = rules.deciding(note.kind, note.name, note.stream)
    if own is not None:
        return None if own.negated else own
    return hidden_streams.get(note.ref.stream_name) if note.ref.is_child else None
