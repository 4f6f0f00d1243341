"""What a rule reads is found in its code, never in its strings or comments
(``specs.policy.code_of``): each expression compiles as CEL, and the fields after a
quote inside a comment or a triple-quoted string are still selected."""

from __future__ import annotations

import cel
import pytest

from reconciler.specs.policy import code_of, selected

CASES = [
    ("// can't\nresource.declared.max_msgs <= 1000 // it's", "declared", "max_msgs"),
    ("resource.name != '''it's''' && resource.desired.max_bytes > 0", "desired", "max_bytes"),
    ('r"\\d" == "a//b" && resource.live.num_replicas > 1', "live", "num_replicas"),
    ('b"""a\\"""b""" == b"" && resource.desired.max_age > 0 // "', "desired", "max_age"),
]


@pytest.mark.parametrize(("source", "config", "key"), CASES)
def test_fields_after_quotes_and_comments_are_selected(source: str, config: str, key: str) -> None:
    cel.compile(source)  # valid CEL: the lexer must agree with it
    assert selected([source])[config] == frozenset({key})


def test_code_of_keeps_the_code_and_blanks_the_rest() -> None:
    assert code_of("'x' == resource.name // 'y'") == '"" == resource.name  '
