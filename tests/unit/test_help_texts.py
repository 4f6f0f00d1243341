"""Help texts say what each option does for the command it is on: ``drift --owner`` does
not talk about ``--prune`` (drift deletes nothing); ``plan``/``apply`` offer ``--full``;
the top-level help says import reads Terraform, NACK and the nats CLI."""

from __future__ import annotations

import re

from click.testing import CliRunner

from reconciler.cli import cli


def _help(*args: str) -> str:
    done = CliRunner().invoke(cli, [*args, "--help"], terminal_width=200)
    assert done.exit_code == 0, done.output
    return done.output


def _option(text: str, name: str) -> str:
    """The help of option ``name`` (its lines up to the next option)."""
    found = re.search(rf"^\s+{re.escape(name)}\b.*?(?=^\s+-|\Z)", text, flags=re.M | re.S)
    assert found is not None, text
    return " ".join(found.group(0).split())


def test_drift_owner_help_does_not_mention_prune() -> None:
    owner = _option(_help("drift"), "--owner")
    assert "--prune" not in owner
    assert "other owners' resources" in owner


def test_plan_and_apply_say_prune_deletes_only_the_owners_resources() -> None:
    for command in ("plan", "apply"):
        assert "this --owner's" in _option(_help(command), "--prune")


def test_plan_and_apply_offer_full() -> None:
    for command in ("plan", "apply"):
        assert "Over 50 steps" in _option(_help(command), "--full")


def test_top_level_help_says_what_import_reads() -> None:
    line = next(line for line in _help().splitlines() if line.strip().startswith("import"))
    assert all(word in line for word in ("Terraform", "NACK", "nats CLI")), line


def test_export_and_import_say_what_overwrite_replaces() -> None:
    for command in ("export", "import"):
        assert "did not write" in _option(_help(command), "--overwrite")
