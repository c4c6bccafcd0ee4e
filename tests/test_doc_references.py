"""Every document the package's strings point to exists, with the section they name: the help, the
errors, the HTML footer and the docstrings say ``docs/cli.md 'Configuration file'`` or
``diagnosis.md §3``, and a section that moves (as README's did, to docs/) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO

PACKAGE = REPO / "traceoverlap"
DOCS = REPO / "docs"

#: ``docs/cli.md``, ``diagnosis.md §3``, ``docs/cli.md 'CI gate'``, ``docs/cli.md "JSON schema"``
#: (a name may be split over two lines of a docstring; quotes may be doubled in a help string)
_DOC = re.compile(r"(?:docs/)?([a-z][a-z-]*)\.md\b")
_SECTION = re.compile(r"(?:docs/)?([a-z][a-z-]*)\.md\s*§\s*(\d+)")
_TITLED = re.compile(r"(?:docs/)?([a-z][a-z-]*)\.md\s+(['\"])([^'\"\n]+)\2")
_README = re.compile(r"README(?:'s)?\s*(['\"])([^'\"\n]+)\1")


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _headings(doc: Path) -> list[str]:
    return [
        line.lstrip("#").strip()
        for line in _text(doc).splitlines()
        if line.startswith("#") and not line.startswith("#!")
    ]


def _references(pattern: re.Pattern[str]) -> list[tuple[str, tuple[str, ...]]]:
    return [
        (p.relative_to(REPO).as_posix(), m.groups())
        for p in _sources()
        for m in pattern.finditer(_text(p))
    ]


def test_the_package_names_documents() -> None:
    # the test would pass vacuously if the patterns stopped matching the package's spelling
    assert len(_references(_SECTION)) > 20
    assert len(_references(_TITLED)) >= 3


@pytest.mark.parametrize("where,name", sorted({(w, g[0]) for w, g in _references(_DOC)}))
def test_named_document_exists(where: str, name: str) -> None:
    if name in ("readme", "changelog", "contributing", "metrics-1", "style"):
        return  # not a docs/ page (style.md is the shared contract's)
    assert (DOCS / f"{name}.md").is_file(), f"{where} names {name}.md, which docs/ lacks"


@pytest.mark.parametrize("where,ref", sorted(set(_references(_SECTION))))
def test_numbered_section_exists(where: str, ref: tuple[str, str]) -> None:
    name, number = ref
    heads = _headings(DOCS / f"{name}.md")
    assert any(h.startswith(f"{number}. ") for h in heads), (
        f"{where} names {name}.md §{number}; its headings: {heads}"
    )


@pytest.mark.parametrize("where,ref", sorted(set(_references(_TITLED))))
def test_titled_section_exists(where: str, ref: tuple[str, str, str]) -> None:
    name, _, title = ref
    heads = _headings(DOCS / f"{name}.md")
    assert any(h.startswith(title) for h in heads), (
        f"{where} names {name}.md '{title}'; its headings: {heads}"
    )


def test_readme_sections_named_exist() -> None:
    heads = _headings(REPO / "README.md")
    missing = [
        f"{where}: README '{g[1]}'" for where, g in _references(_README) if g[1] not in heads
    ]
    assert not missing, f"README has no such section (moved to docs/?): {missing}"


def test_no_bare_readme_pointer() -> None:
    """``see README`` with no section names nothing a reader can find."""
    bare = re.compile(r"\bsee (?:the )?README\b(?!\s*['\"])|README's (?![\"'])")
    hits = [p.relative_to(REPO).as_posix() for p in _sources() if bare.search(_text(p))]
    assert not hits, f"README pointers without a section: {hits}"
