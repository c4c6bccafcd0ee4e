"""Terminal table: one row per (rank, step), then the summary, what to try, and caveats.

Fits an 80-column terminal; colours only when writing to a terminal (and NO_COLOR is unset).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table
from rich.text import Text

from ..core.fmt import TerminalText
from ..core.vocab import Bottleneck
from ._format import (
    ITEM_LINES,
    describe_inputs,
    finding_item,
    has_other_steps,
    make_console,
    step_table_header,
    step_table_rows,
    summary_lines,
    wrap,
    wrap_cut,
)
from .across_ranks import render_across_ranks
from .whatif_report import advice_lines

if TYPE_CHECKING:
    from ..run.results import Analysis
    from ..whatif.advice import Advice

#: Where the verdicts (and the causes, and the ``other`` part) are explained.
VERDICTS_DOC = "docs/diagnosis.md"

_STYLE = {
    Bottleneck.PEER_WAIT: "bold magenta",
    Bottleneck.COMMUNICATION: "bold red",
    Bottleneck.EXPOSED_COMMUNICATION: "yellow",
    Bottleneck.MEMORY: "cyan",
    Bottleneck.IDLE: "magenta",
    Bottleneck.COMPUTE: "green",
}


def _cut_to_item(text: str, width: int, indent: str, cont: str) -> list[str]:
    return wrap_cut(text, width, ITEM_LINES, indent, cont)


def _what_to_try(
    analysis: Analysis, what_if: list[str], width: int, verbose: bool
) -> tuple[list[str], list[str]]:
    """The items of "What to try" (findings, then the what-if lines), wrapped and, unless
    ``verbose``, shortened; and the note saying what ``--verbose`` adds, when it adds some."""
    shown = analysis.findings if verbose else analysis.findings[:ITEMS]
    more = len(analysis.findings) - len(shown)
    out: list[str] = []
    cut = False
    for i, finding in enumerate(shown, 1):
        lines, shortened = finding_item(i, finding, width, verbose=verbose)
        cut = cut or shortened
        out += lines
    for line in what_if:
        lines = (wrap if verbose else _cut_to_item)(line, width, "  - ", "      ")
        cut = cut or lines[-1].endswith("…")
        out += lines
    if not (cut or more):
        return out, []
    extra = f"{more} more finding(s), " if more else ""
    note = (
        f"(--verbose: {extra}each item whole, with the collectives behind it; "
        "--format json: everything)"
    )
    return out, wrap(note, width, "  ", "   ")


def build_table(analysis: Analysis) -> Table:
    table = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        padding=0,
        collapse_padding=True,
        header_style="bold",
    )
    *numbers, verdict = step_table_header(analysis)
    for col in numbers:
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column(verdict, justify="left", no_wrap=True)
    for (*cells, short), bottleneck in step_table_rows(analysis):
        table.add_row(*cells, Text(short, style=_STYLE.get(bottleneck, "")))
    return table


def _wrap(line: str, width: int) -> str:
    indent = " " * (len(line) - len(line.lstrip(" ")))
    cont = indent + ("   " if line.lstrip()[:1].isdigit() else "    ")
    return "\n".join(wrap(line.lstrip(" "), width, indent, cont))


#: What to try's items without ``--verbose``; the rest are counted.
ITEMS = 4


def render(
    analysis: Analysis,
    *,
    color: bool = False,
    width: int = 80,
    advice: Advice | None = None,
    verbose: bool = False,
) -> str:
    """The table, the summary, "What to try" (the findings, then ``advice``: what the what-if
    would buy, :func:`traceoverlap.whatif.advise`), the notes and the run across ranks, wrapped
    to ``width`` (at least 80) columns. Each item of "What to try" takes at most
    :data:`~._format.ITEM_LINES` lines, and at most :data:`ITEMS` findings are shown, unless
    ``verbose``: then every finding is whole, with the collectives behind it (as in JSON)."""
    buf = io.StringIO()
    console = make_console(buf, color=color, width=width)
    wrap_at = max(width, 80)

    def say(lines: list[str]) -> None:
        for line in lines:
            console.print(_wrap(line, wrap_at), soft_wrap=True, markup=False)

    def say_wrapped(lines: list[str]) -> None:
        for line in lines:
            console.print(line, soft_wrap=True, markup=False)

    say(describe_inputs(analysis))
    other = has_other_steps(analysis)
    console.print()
    console.print(build_table(analysis))
    console.print(
        "ms; step = compute + exposed + memory + idle"
        + (" + other (memory: copies with" if other else " (memory: copies with nothing else"),
        style="dim",
    )
    console.print(
        ("nothing else " if other else "")
        + "running); overlap = share of comm hidden behind compute",
        style="dim",
    )
    if other:
        console.print(
            "other: only other steps' work ran in the window (overlapping steps; not idle)",
            style="dim",
        )
    console.print(f"verdicts: {VERDICTS_DOC}", style="dim")
    console.print()
    say(summary_lines(analysis))
    what_if = advice_lines(advice) if advice is not None else []
    if analysis.findings or what_if:
        console.print()
        console.print("What to try:", style="bold")
        lines, note = _what_to_try(analysis, what_if, wrap_at, verbose)
        say_wrapped(lines)
        for line in note:
            console.print(line, style="dim", soft_wrap=True, markup=False)
    if analysis.notes:
        console.print()
        console.print("Notes:", style="bold")
        say([f"  - {note}" for note in analysis.notes])
    if analysis.multi_rank and analysis.collectives is not None:
        console.print()
        console.print(
            render_across_ranks(analysis.collectives, analysis.steps, wrap_at),
            soft_wrap=True,
            markup=False,
        )
    # rich pads the last column to its width: trailing blanks only get in the way of diffs
    return TerminalText("\n".join(line.rstrip() for line in buf.getvalue().split("\n")))
