"""Every schema's ``$id`` is clearly local (a relative id: no made-up web address), and
every ``yaml-language-server`` comment in the examples names a schema file that exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = sorted((ROOT / "schemas").glob("*.json"))
_COMMENT = re.compile(r"#\s*yaml-language-server:\s*\$schema=(\S+)")


@pytest.mark.parametrize("path", SCHEMAS, ids=lambda p: p.name)
def test_every_schema_id_is_its_own_file_name(path: Path) -> None:
    schema = json.loads(path.read_text(encoding="utf-8"))
    assert schema["$id"] == path.name
    jsonschema.Draft202012Validator.check_schema(schema)


def _comments() -> list[tuple[Path, str]]:
    found = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        for match in _COMMENT.finditer(path.read_text(encoding="utf-8")):
            found.append((path, match.group(1)))
    return found


@pytest.mark.parametrize(("path", "named"), _comments(), ids=lambda v: str(v)[-40:])
def test_every_yaml_language_server_comment_names_a_schema_file(path: Path, named: str) -> None:
    assert not named.startswith(("http://", "https://")), f"{path}: {named}"
    assert (path.parent / named).resolve().is_file(), f"{path}: {named}"
