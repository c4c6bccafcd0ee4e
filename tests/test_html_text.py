"""The HTML report's text reads cleanly: one unit per table column (its heading says which), names
quoted in Markdown backticks shown as <code> (escaped), and no word broken inside a cell except a
long path or kernel name."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from conftest import WORKLOAD_FIXTURES

from traceoverlap import analyze, report_parts
from traceoverlap.reporters._html_page import CSS
from traceoverlap.reporters.html_report import _md, render_parts


class _Text(HTMLParser):
    """The page's visible text (no script, no style) and its tables as rows of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tables: list[list[list[str]]] = []
        self._skip = 0
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip -= 1
        elif tag in ("td", "th") and self._cell is not None and self.tables:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def page() -> _Text:
    # slow_rank: findings and blame lines quote `straggler_sleep`; collectives, stragglers, skew
    result = analyze(str(WORKLOAD_FIXTURES / "slow_rank"))
    parser = _Text()
    parser.feed(render_parts(result, report_parts(result), plotlyjs="cdn"))
    return parser


def test_no_raw_markdown_backticks_in_the_text(page: _Text) -> None:
    text = "".join(page.text)
    assert "straggler_sleep" in text  # the name the findings quote is there ...
    assert "`" not in text  # ... as <code>, not in backticks


def test_backticks_become_escaped_code() -> None:
    assert _md("rank 1's `a<b>` ran 2 ms") == "rank 1&#x27;s <code>a&lt;b&gt;</code> ran 2 ms"
    assert _md("no code <here>") == "no code &lt;here&gt;"


_UNIT = re.compile(r"(\d)\s*(s|ms|µs|ns)\b")


def test_one_unit_per_table_column(page: _Text) -> None:
    """No number cell carries a unit of its own that could differ from its neighbour's: a time
    column says "(ms)" in its heading and its cells are bare numbers."""
    checked = 0
    for table in page.tables:
        head, *rows = table
        for col, name in enumerate(head):
            cells = [r[col] for r in rows if col < len(r)]
            units = {m[2] for c in cells for m in _UNIT.finditer(c)}
            if name.endswith("(ms)"):
                checked += 1
                assert not units, (name, cells)
                assert all(re.fullmatch(r"[+-]?[\d,]+\.\d+|–", c) for c in cells), (name, cells)
            else:
                assert len(units) <= 1, (name, cells)
    assert checked >= 5  # the per-rank, collectives and stragglers tables have time columns


def test_cells_do_not_break_words() -> None:
    assert "break-all" not in CSS
    assert re.search(r"td \{ word-break: normal;", CSS)
    # only paths and kernel names may break anywhere
    found = re.findall(r"([^{}]*)\{[^}]*overflow-wrap: anywhere", CSS)
    assert [s.strip() for s in found] == ["td.path, td.name"]
