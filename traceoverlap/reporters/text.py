"""Terminal table: one row per (rank, step), then the run summary and caveats.

Fits an 80-column terminal; colours only when writing to a terminal (rich decides).
"""

from __future__ import annotations

import io
import textwrap
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from ._format import SHORT_BOTTLENECK, describe_inputs, make_console, ms, pct, summary_lines

if TYPE_CHECKING:
    from ..analysis import Analysis

_STYLE = {
    "communication-bound": "bold red",
    "exposed-communication": "yellow",
    "idle-bound": "magenta",
    "compute-bound": "green",
}


def build_table(analysis: Analysis) -> Table:
    table = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        padding=(0, 1),
        collapse_padding=True,
        header_style="bold",
    )
    for col, just in (
        ("rank", "right"),
        ("step", "right"),
        ("step ms", "right"),
        ("compute", "right"),
        ("comm", "right"),
        ("exposed", "right"),
        ("overlap", "right"),
        ("idle", "right"),
        ("bottleneck", "left"),
    ):
        table.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    df = analysis.steps
    for r in df.itertuples(index=False):
        table.add_row(
            str(r.rank),
            str(r.step),
            ms(r.step_ns),
            ms(r.compute_ns),
            ms(r.comm_ns),
            ms(r.exposed_comm_ns),
            pct(r.overlap_ratio),
            ms(r.idle_ns),
            f"[{_STYLE.get(r.bottleneck, '')}]{SHORT_BOTTLENECK.get(r.bottleneck, r.bottleneck)}[/]",
        )
    return table


def _wrap(line: str, width: int, indent: str) -> str:
    return textwrap.fill(line, width=width, subsequent_indent=indent, break_on_hyphens=False)


def render(analysis: Analysis, *, color: bool = False, width: int = 80) -> str:
    buf = io.StringIO()
    console = make_console(buf, color=color, width=width)
    wrap = max(width, 80)
    for line in describe_inputs(analysis):
        console.print(_wrap(line, wrap, "    "), soft_wrap=True, markup=False)
    console.print()
    console.print(build_table(analysis))
    console.print(
        "ms; overlap = share of comm hidden behind compute; exposed = comm nothing hid;",
        style="dim",
    )
    console.print(
        "bottleneck: compute / exposed-comm / comm-bound / idle-bound (README)", style="dim"
    )
    console.print()
    for line in summary_lines(analysis):
        console.print(_wrap(line, wrap, "    "), soft_wrap=True, markup=False)
    if analysis.notes:
        console.print()
        console.print("Notes:", style="bold")
        for note in analysis.notes:
            console.print(_wrap(f"  - {note}", wrap, "    "), soft_wrap=True, markup=False)
    extra = getattr(analysis.collectives, "render_text", None)
    if callable(extra):
        console.print()
        console.print(extra(), soft_wrap=True, markup=False)
    # rich pads the last column to its width: trailing blanks only get in the way of diffs and pastes
    return "\n".join(line.rstrip() for line in buf.getvalue().split("\n"))
