"""Text for the cross-rank section of the report: wait vs transfer and the stragglers.

Formatting only; the numbers come from :class:`traceoverlap.collectives.Collectives`.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import numpy as np

from ._format import ms, pct

if TYPE_CHECKING:
    from ..collectives import Collectives


def straggler_lines(coll: Collectives) -> list[str]:
    """Plain lines (no markup), ms with two decimals."""
    inst = coll.instances
    n_ranks = len(coll.stragglers)
    lines = [f"Across ranks: {len(inst)} collectives matched on {n_ranks} ranks"]
    if inst.empty:
        return lines
    total = int(coll.per_rank["dur_ns"].sum())
    wait = int(coll.per_rank["wait_ns"].sum())
    lines.append(
        f"  collective time {ms(total)} ms (all ranks): {ms(wait)} ms waiting for a later rank "
        f"({pct(wait / total if total else None)}), {ms(total - wait)} ms transfer"
    )
    split = coll.step_split
    ew, et = int(split["exposed_wait_ns"].sum()), int(split["exposed_transfer_ns"].sum())
    if ew + et:
        lines.append(
            f"  exposed comm over all steps: {ms(ew)} ms waiting ({pct(ew / (ew + et))}), "
            f"{ms(et)} ms transfer"
        )
    if coll.aligned:
        lines.append("  arrived last (others waited for it):")
        for r in coll.stragglers.to_dict("records"):
            n = int(r["instances"])
            lines.append(
                f"    rank {r['rank']}: last in {r['last_count']} of {n} ({pct(r['last_ratio'])}), "
                f"others waited {ms(r['waited_for_ns'])} ms"
            )
        top = coll.top_straggler
        if top is not None and wait:
            waited = int(coll.stragglers.iloc[0]["waited_for_ns"])
            lines.append(
                f"  straggler: rank {top} ({pct(waited / wait)} of all waiting was for it)"
            )
    else:
        lines.append("  arrival order not shown: rank clocks could not be aligned")
    skew = coll.step_skew
    if not skew.empty:
        sk = skew["skew_ns"].to_numpy().astype(np.int64)
        worst = skew.iloc[int(np.argmax(sk))]
        slow = skew["slowest_rank"].value_counts()
        lines.append(
            f"  step-time skew across ranks: median {ms(float(np.median(sk)))} ms, worst step "
            f"{worst['step']}: {ms(worst['skew_ns'])} ms (slowest rank {worst['slowest_rank']})"
        )
        lines.append(
            f"  slowest rank most often: rank {slow.index[0]} ({slow.iloc[0]} of {len(skew)} steps)"
        )
    return lines


def render_stragglers(coll: Collectives, width: int = 80) -> str:
    """The lines wrapped to ``width`` columns, continuation lines indented two more spaces."""
    out = []
    for line in straggler_lines(coll):
        indent = " " * (len(line) - len(line.lstrip(" ")))
        out.append(
            textwrap.fill(
                line.strip(),
                width=width,
                initial_indent=indent,
                subsequent_indent=indent + "  ",
                break_on_hyphens=False,
            )
        )
    return "\n".join(out)
