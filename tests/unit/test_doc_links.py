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


def _anchors(document: Path) -> set[str]:
    """The anchors GitHub gives ``document``'s headings (lower case, punctuation but
    hyphens dropped, spaces as hyphens)."""
    found = set()
    for line in document.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^#{1,6} (.+)$", line)
        if heading:
            words = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower())
            found.add(words.replace(" ", "-"))
    return found


def test_every_docs_anchor_the_code_names_is_a_heading() -> None:
    """A message, metric help or docstring naming ``docs/NAME.md#anchor`` sends the reader
    to a heading of that page (a plan's failback refusal named ``#failback``, a heading
    no page has)."""
    broken = []
    for source in sorted((REPO / "reconciler").rglob("*.py")):
        text = source.read_text(encoding="utf-8")
        for page, anchor in re.findall(r"docs/([\w-]+\.md)#([\w-]+)", text):
            if anchor not in _anchors(REPO / "docs" / page):
                broken.append(f"{source.relative_to(REPO)}: docs/{page}#{anchor}")
    assert broken == []
