"""Markdown output: inputs, the step table and the summary, for a PR comment or a wiki page."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._format import SHORT_BOTTLENECK, describe_inputs, ms, pct, summary_lines

if TYPE_CHECKING:
    from ..analysis import Analysis


def render(analysis: Analysis) -> str:
    out = ["## traceoverlap", ""]
    out += [f"- {line}" for line in describe_inputs(analysis)]
    out += [
        "",
        "| rank | step | step ms | compute ms | comm ms | exposed ms | overlap | idle ms | bottleneck |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|:---|",
    ]
    for r in analysis.steps.itertuples(index=False):
        out.append(
            f"| {r.rank} | {r.step} | {ms(r.step_ns)} | {ms(r.compute_ns)} | {ms(r.comm_ns)} | "
            f"{ms(r.exposed_comm_ns)} | {pct(r.overlap_ratio)} | {ms(r.idle_ns)} | "
            f"{SHORT_BOTTLENECK.get(r.bottleneck, r.bottleneck)} |"
        )
    out += ["", "```"] + summary_lines(analysis) + ["```"]
    extra = getattr(analysis.collectives, "render_text", None)
    if callable(extra):
        out += ["", "**Across ranks**", "", "```", extra().rstrip("\n"), "```"]
    if analysis.notes:
        out += ["", "**Notes**", ""] + [f"- {n}" for n in analysis.notes]
    return "\n".join(out) + "\n"
