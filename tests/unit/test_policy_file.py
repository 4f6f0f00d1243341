"""Policy files (docs/policy.md) are checked whole before anything is planned: every
problem is one FILE:LINE naming the rule; nothing is evaluated here (no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.errors import SpecError
from reconciler.specs.policy import NO_POLICY, load_policy

RULE = "  - id: {id}\n    level: deny\n    message: m\n    expr: {expr}\n"


def _file(tmp_path: Path, text: str, name: str = "policy.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _problems(*paths: Path) -> list[str]:
    with pytest.raises(SpecError) as err:
        load_policy(list(paths))
    return [str(p) for p in err.value.problems]


def test_no_paths_is_no_policy() -> None:
    assert load_policy([]) is NO_POLICY
    assert not NO_POLICY


def test_rules_compile_with_their_lines(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "rules:\n"
        + RULE.format(id="a", expr="resource.desired.subjects.all(s, s.startsWith('o.'))")
        + RULE.format(id="b", expr="step.loss_messages <= 1000"),
    )
    policy = load_policy([path])
    assert [(r.id, str(r.where)) for r in policy.rules] == [("a", f"{path}:5"), ("b", f"{path}:9")]


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("resource.kind ==", "rule 'x': invalid CEL"),
        ("resourse.kind == 'Stream'", "unknown variable 'resourse' (did you mean 'resource'?)"),
        ("resource.envirnoment == 'prod'", "unknown field resource.envirnoment (did you mean"),
        ("step.los_messages < 3", "unknown field step.los_messages (did you mean"),
    ],
)
def test_a_bad_expression_is_its_line_naming_the_rule(tmp_path: Path, expr: str, says: str) -> None:
    path = _file(tmp_path, "rules:\n" + RULE.format(id="x", expr=expr))
    (problem,) = _problems(path)
    assert problem.startswith(f"{path}:5: rules.0.expr: ")
    assert says in problem


def test_a_string_naming_a_field_is_not_a_field(tmp_path: Path) -> None:
    path = _file(tmp_path, "rules:\n" + RULE.format(id="x", expr='\'"resource.nope" != ""\''))
    assert len(load_policy([path]).rules) == 1


def test_schema_yaml_and_duplicate_ids_are_all_reported(tmp_path: Path) -> None:
    bad_schema = _file(
        tmp_path,
        "rules:\n  - id: a\n    level: block\n    message: m\n    expr: 'true'\n",
        "a.yaml",
    )
    bad_yaml = _file(tmp_path, "rules: [\n", "b.yaml")
    first = _file(tmp_path, "rules:\n" + RULE.format(id="same", expr="1 == 1"), "c.yaml")
    second = _file(tmp_path, "rules:\n" + RULE.format(id="same", expr="1 == 1"), "d.yaml")
    problems = _problems(bad_schema, bad_yaml, first, second)
    assert any(
        p.startswith(f"{bad_schema}:3: rules.0.level: 'block' is not one of deny, warn")
        for p in problems
    )
    assert any(p.startswith(f"{bad_yaml}:") for p in problems)
    assert any(
        p.startswith(f"{second}:5: id: rule 'same' is already defined at {first}:5")
        for p in problems
    )
