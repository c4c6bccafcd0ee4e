"""The text outputs fit the terminal: every line of analyze's table format, whatif's text, compare's
table and demo's output is at most the width asked for (80 and 120 columns), a path is never
split, and each item of "What to try" takes at most ITEM_LINES lines unless --verbose."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import WORKLOAD_FIXTURES

from traceoverlap import AnalyzeOptions, analyze
from traceoverlap.cli.profile import demo_text
from traceoverlap.reporters import compare_text, text, whatif_report
from traceoverlap.reporters._format import CUT, ITEM_LINES, wrap, wrap_cut
from traceoverlap.run.compare import compare
from traceoverlap.whatif import advise, load_graph, what_if
from traceoverlap.whatif.advice import MAX_NODES

WIDTHS = (80, 120)
RUNS = ("slow_rank", "tp_slow", "moe_slow")


def _analysis(name: str):  # noqa: ANN202
    opts = AnalyzeOptions(graph=True, graph_max_nodes=MAX_NODES)
    return analyze(str(WORKLOAD_FIXTURES / name), opts)


_CACHE: dict[str, object] = {}


def _cached(name: str):  # noqa: ANN202
    if name not in _CACHE:
        _CACHE[name] = _analysis(name)
    return _CACHE[name]


def _too_long(out: str, width: int) -> list[str]:
    return [line for line in out.splitlines() if len(line) > width]


def _items(out: str) -> list[list[str]]:
    """The items of "What to try": a numbered finding or a ``- what-if`` line, and the lines
    that continue it."""
    block = out.split("What to try:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    items: list[list[str]] = []
    for line in block:
        if re.match(r"  (\d+\.|-) ", line):
            items.append([line])
        elif line.startswith("  (--verbose"):
            break
        else:
            items[-1].append(line)
    return items


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", RUNS)
def test_analyze_text_fits_the_width(name: str, width: int) -> None:
    a = _cached(name)
    for verbose in (False, True):
        out = text.render(a, width=width, advice=advise(a), verbose=verbose)  # type: ignore[arg-type]
        assert not _too_long(out, width), (name, width, verbose, _too_long(out, width))
    short = text.render(a, width=width, advice=advise(a))  # type: ignore[arg-type]
    items = _items(short)
    assert items, "the run has findings: What to try is shown"
    assert all(len(item) <= ITEM_LINES for item in items), [len(i) for i in items]


def test_verbose_shows_what_the_short_items_leave_out() -> None:
    a = _cached("slow_rank")
    short = text.render(a, advice=advise(a))  # type: ignore[arg-type]
    full = text.render(a, advice=advise(a), verbose=True)  # type: ignore[arg-type]
    assert "--verbose" in short and "where: " not in short
    assert "where: " in full and "--verbose" not in full
    # every finding's whole advice is in the verbose output (joined back from its lines)
    flat = " ".join(full.split())
    for f in a.findings:  # type: ignore[attr-defined]
        assert " ".join(f.advice.split()) in flat


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ("naive_slow", "tp_slow"))
def test_whatif_text_fits_the_width(name: str, width: int) -> None:
    out = whatif_report.render_text(what_if(load_graph(WORKLOAD_FIXTURES / name)), width=width)
    assert not _too_long(out, width), _too_long(out, width)
    assert "\0" not in out
    # the rows keep their numbers on their first line: name, step ms, range, (where a scenario
    # starts a late rank earlier, tp_slow's: the replay from the same starts,) speedup
    assert re.search(
        r"^  replay +\d+\.\d\d +[\d.]+-[\d.]+ +(\d+\.\d\d +)?1\.00x  nothing", out, re.M
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_and_demo_fit_the_width(width: int) -> None:
    runs = {s: _cached(s) for s in ("naive", "bucketed")}
    cmp = compare(runs["naive"], runs["bucketed"])  # type: ignore[arg-type]
    out = compare_text.render_table(cmp, width=width)
    assert not _too_long(out, width), _too_long(out, width)
    for verbose in (False, True):
        out = demo_text(runs, "traceoverlap-demo", width=width, verbose=verbose)
        assert not _too_long(out, width), (verbose, _too_long(out, width))
    # about a screen by default: two summaries and the comparison, not two whole reports
    short = demo_text(runs, "traceoverlap-demo", width=width)
    assert len(short.splitlines()) <= 60
    assert len(demo_text(runs, "traceoverlap-demo", width=width, verbose=True).splitlines()) > 60


def test_a_long_path_is_never_split(tmp_path: Path) -> None:
    folder = tmp_path / ("a-folder-whose-name-is-longer-than-a-line-" * 3) / "slow_rank"
    shutil.copytree(WORKLOAD_FIXTURES / "slow_rank", folder)
    a = analyze(str(folder))
    out = text.render(a, width=80)
    for t in a.traces:
        assert str(t.path) in out.splitlines() or any(
            line.strip() == f"{t.path}:" or line.startswith(f"{t.path}:")
            for line in out.splitlines()
        ), f"{t.path} is split across lines"
    # every other line still fits
    assert all(len(line) <= 80 for line in out.splitlines() if str(folder) not in line)


def test_wrap_breaks_at_spaces_only() -> None:
    path = "/x/" + "y" * 90 + "/rank0.json.gz"
    lines = wrap(f"file {path}: kineto 1 · rank 0", 80)
    assert lines == ["file", f"    {path}:", "    kineto 1 · rank 0"]


def test_wrap_cut_prefers_a_clause() -> None:
    text_ = "first clause is here; second clause is rather longer than the rest of it; third"
    # 1 line of 40: all of it needs 3, two clauses 2; the first one and the mark fit in 1
    assert wrap_cut(text_, 40, 1, "", "  ") == ["first clause is here;" + CUT]
    # no clause fits in 1 line of 20: words, then the mark
    assert wrap_cut(text_, 20, 1, "", "  ") == ["first clause is" + CUT]
    # room for everything: unchanged
    assert wrap_cut(text_, 200, 1, "", "") == [text_]
