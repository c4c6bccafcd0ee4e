"""Markdown output: inputs, the step table, the summary and what to try, for a PR comment."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._format import (
    describe_inputs,
    finding_lines,
    step_table_header,
    step_table_rows,
    summary_lines,
)
from .across_ranks import across_ranks_lines
from .whatif_report import advice_lines

if TYPE_CHECKING:
    from ..run.results import Analysis
    from ..whatif.advice import Advice


def render(analysis: Analysis, advice: Advice | None = None) -> str:
    """``advice``: what the what-if would buy, listed under "What to try"
    (:func:`traceoverlap.whatif.advise`)."""
    out = ["## traceoverlap", ""]
    out += [f"- {line}" for line in describe_inputs(analysis)]
    # numbers right-aligned, the verdict left
    header = step_table_header(analysis)
    out += [
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---:|" * (len(header) - 1) + ":---|",
    ]
    out += ["| " + " | ".join(cells) + " |" for cells, _ in step_table_rows(analysis)]
    out += ["", "```"] + summary_lines(analysis) + ["```"]
    what_if = advice_lines(advice) if advice is not None else []
    if analysis.findings or what_if:
        out += ["", "**What to try**", ""] + finding_lines(analysis.findings)
        out += [f"- {line}" for line in what_if]
    if analysis.multi_rank and analysis.collectives is not None:
        out += ["", "**Across ranks**", "", "```"] + across_ranks_lines(
            analysis.collectives, analysis.steps
        )
        out += ["```"]
    if analysis.notes:
        out += ["", "**Notes**", ""] + [f"- {n}" for n in analysis.notes]
    return "\n".join(out) + "\n"
