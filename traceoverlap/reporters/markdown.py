"""Markdown output: inputs, the step table, the summary and what to try, for a PR comment."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import fmt
from ..summary import unit_key
from ._format import (
    SHORT_BOTTLENECK,
    describe_inputs,
    finding_lines,
    several_devices,
    summary_lines,
)
from .across_ranks import across_ranks_lines

if TYPE_CHECKING:
    from ..results import Analysis


def render(analysis: Analysis) -> str:
    out = ["## traceoverlap", ""]
    out += [f"- {line}" for line in describe_inputs(analysis)]
    out += [
        "",
        "| rank | step | step ms | compute | exposed | memory | idle | comm | overlap | bottleneck |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---|",
    ]
    several = several_devices(analysis)
    for r in analysis.steps.itertuples(index=False):
        out.append(
            f"| {unit_key(r.rank, r.device, r.rank in several)} | {r.step} | "
            f"{fmt.ms(r.step_ns)} | {fmt.ms(r.compute_ns)} | {fmt.ms(r.exposed_comm_ns)} | "
            f"{fmt.ms(r.memory_only_ns)} | {fmt.ms(r.idle_ns)} | {fmt.ms(r.comm_ns)} | "
            f"{fmt.pct(r.overlap_ratio)} | {SHORT_BOTTLENECK.get(r.bottleneck, r.bottleneck)} |"
        )
    out += ["", "```"] + summary_lines(analysis) + ["```"]
    if analysis.findings:
        out += ["", "**What to try**", ""] + finding_lines(analysis.findings)
    if analysis.multi_rank and analysis.collectives is not None:
        out += ["", "**Across ranks**", "", "```"] + across_ranks_lines(analysis.collectives)
        out += ["```"]
    if analysis.notes:
        out += ["", "**Notes**", ""] + [f"- {n}" for n in analysis.notes]
    return "\n".join(out) + "\n"
