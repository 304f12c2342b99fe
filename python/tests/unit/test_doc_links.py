"""Every link between the project's documents resolves, and every section a document names exists.

Documents: README.md, python/README.md, docs/**/*.md and specs/*.md. Checked, outside code blocks:

- a relative Markdown link ``[text](path#anchor)`` names an existing file, and its anchor (if any) one
  of that file's headings as GitHub renders it (lower case, punctuation dropped, spaces as hyphens, a
  repeated heading suffixed ``-1``, ``-2``...);
- a plain reference to a section, ``README.md, Development`` or ``codec.md, "Signature"`` (a document's
  name, a comma, then a capitalised heading's text), names a heading of that document.

Issue 31 found docs/guarantees.md citing "README.md, Resuming a run" after that section moved to
docs/usage.md; each check returns what it finds, and a test shows it finds that kind of fault.
"""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[3]
DOCUMENTS = sorted(
    {
        REPOSITORY / "README.md",
        REPOSITORY / "python" / "README.md",
        *(REPOSITORY / "docs").rglob("*.md"),
        *(REPOSITORY / "specs").glob("*.md"),
    }
    & {path for path in REPOSITORY.rglob("*.md") if ".venv" not in path.parts}
)

_CODE_BLOCK = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (.+?)\s*#*\s*$", re.MULTILINE)
_SECTION_REFERENCE = re.compile(
    r"\b((?:README|[\w-]+)\.md), \"?([A-Z][\w' -]+?)\"?(?=[;).,:]|$)", re.MULTILINE
)


def _prose(text: str) -> str:
    return _CODE_BLOCK.sub("", text)


def _slug(heading: str) -> str:
    text = re.sub(r"`|\*\*|\[|\]\([^)]*\)", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _headings(path: Path) -> list[str]:
    return [match.group(1).strip() for match in _HEADING.finditer(_prose(path.read_text(encoding="utf-8")))]


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for heading in _headings(path):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def dead_links(document: Path, text: str) -> list[str]:
    """Relative links of ``text`` (the contents of ``document``) whose file or anchor is missing."""
    problems: list[str] = []
    for match in _LINK.finditer(_prose(text)):
        target = match.group(1)
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        if not resolved.exists():
            problems.append(f"{document.name}: {target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            problems.append(f"{document.name}: {target}: no heading with that anchor")
    return problems


def stale_section_references(document: Path, text: str) -> list[str]:
    """Plain ``NAME.md, Section`` references of ``text`` whose document has no such heading."""
    by_name: dict[str, list[Path]] = {}
    for candidate in DOCUMENTS:
        by_name.setdefault(candidate.name, []).append(candidate)
    problems: list[str] = []
    for match in _SECTION_REFERENCE.finditer(_prose(text)):
        name, section = match.group(1), match.group(2).strip()
        targets = by_name.get(name, [])
        if not targets:
            continue  # not one of the project's documents
        if not any(heading.startswith(section) for target in targets for heading in _headings(target)):
            problems.append(f"{document.name}: {name}, {section}: no such section")
    return problems


def test_every_link_between_the_documents_resolves() -> None:
    problems = [problem for doc in DOCUMENTS for problem in dead_links(doc, doc.read_text(encoding="utf-8"))]
    assert problems == []


def test_every_section_a_document_names_exists() -> None:
    problems = [
        problem
        for doc in DOCUMENTS
        for problem in stale_section_references(doc, doc.read_text(encoding="utf-8"))
    ]
    assert problems == []


def test_the_checks_find_what_they_look_for() -> None:
    assert len(DOCUMENTS) >= 10
    guarantees = REPOSITORY / "docs" / "guarantees.md"
    broken = (
        "See [usage](usage.md#no-such-heading), [gone](gone.md) and [ok](usage.md#resuming-a-run).\n"
        "Listed in `allowed_checkpoint_types` (README.md, Resuming a run).\n"
        "```\n[in code](nowhere.md)\n```\n"
    )
    assert dead_links(guarantees, broken) == [
        "guarantees.md: usage.md#no-such-heading: no heading with that anchor",
        "guarantees.md: gone.md: no such file",
    ]
    assert stale_section_references(guarantees, broken) == [
        "guarantees.md: README.md, Resuming a run: no such section"
    ]
    assert stale_section_references(guarantees, "(README.md, Development)") == []
