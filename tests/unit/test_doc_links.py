"""Documents point only at files inside the repository: every relative link of the
README, RELIABILITY.md and docs/ resolves to a file of this checkout, and no document
sends a reader to a folder beside it (the team's shared notes are not shipped)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted(
    [REPO / "README.md", REPO / "RELIABILITY.md", *(REPO / "docs").glob("*.md")]
    + [p for p in (REPO / "examples").rglob("*.md")]
)
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves_inside_the_repository(document: Path) -> None:
    text = document.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or an anchor in the same page
        path = (document.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(REPO) or not path.exists():
            broken.append(target)
    assert broken == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_document_points_outside_the_checkout(document: Path) -> None:
    text = document.read_text(encoding="utf-8")
    assert "../shared" not in text
    assert "/work/" not in text
