"""The manual step a rollback with the standby lost prints (``pair_reads.unfence_by_hand``):
a command a person pastes into a shell, run by the nats CLI. Whatever a declared name or
subject holds (the schema allows a leading ``-`` or ``@``, quotes, ``$( )``), the shell
gives the CLI exactly the declared words, and the CLI's parser (fisk: a word after ``--``
is an argument; ``--flag=value`` keeps the value whole) reads none of them as a flag."""

from __future__ import annotations

import shlex

import pytest

from reconciler.execution.pair_reads import unfence_by_hand
from reconciler.locations import Location
from reconciler.planning.standby import Pair
from reconciler.specs.spec import Spec
from reconciler.specs.standby import Standby


def _command(name: str, subjects: list[str]) -> list[str]:
    standby = Standby(primary="east", environment="west", where="specs/s.yaml:3")
    config = {"name": name, "subjects": subjects}
    spec = Spec("Stream", name, config, Location("specs/s.yaml", 1), standby=standby)
    said = unfence_by_hand(Pair(spec, standby, ()))
    assert said.startswith("`") and said.endswith("`")
    return shlex.split(said[1:-1])


@pytest.mark.parametrize(
    ("name", "subjects"),
    [
        ("ORDERS", ["orders.>"]),
        ("-ORDERS", ["-orders.>", "@orders.eu"]),
        ("--help", ["--subjects", "-f"]),
        ("O'RDERS", ["$(touch x)", "`id`", "a'b\"c"]),
    ],
)
def test_the_cli_reads_the_declared_name_and_subjects_and_no_flag_of_them(
    name: str, subjects: list[str]
) -> None:
    words = _command(name, subjects)
    assert words[:4] == ["nats", "stream", "edit", "-f"]
    end = words.index("--")
    flags, after = words[4:end], words[end + 1 :]
    assert after == [name]  # the one argument: the stream, after the end of the flags
    assert flags == [f"--subjects={s}" for s in subjects]  # each value joined to its flag
