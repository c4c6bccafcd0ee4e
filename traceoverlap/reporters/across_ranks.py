"""Text for the cross-rank section of the report: wait vs transfer and the stragglers.

Formatting only; the numbers come from :class:`traceoverlap.run.matching.Collectives`.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import numpy as np

from ..core import fmt
from ..core.schema import (
    EXPOSED_COMM_NS,
    EXPOSED_UNMATCHED_NS,
    EXPOSED_WAIT_NS,
    ROOT_WAITED_FOR_NS,
    WAIT_NS,
)

if TYPE_CHECKING:
    import pandas as pd

    from ..run.matching import Collectives


def across_ranks_lines(coll: Collectives, steps: pd.DataFrame) -> list[str]:
    """Plain lines (no markup), ms with two decimals. ``steps`` is the step table shown: the
    exposed waiting and transfer are its parts (each exposed ns once, as in the table and the
    HTML), not a sum over collective instances, which counts twice the ns where concurrent
    instances were exposed together."""
    pr = coll.per_rank
    matched = pr[pr["matched"].astype(bool)] if len(pr) else pr
    given = (
        f" (among the {coll.ranks_given} ranks given of a world of {coll.world_size})"
        if coll.partial
        else ""
    )
    lines = [
        f"Across ranks{given}: {coll.n_matched} collectives matched on {len(coll.stragglers)} ranks"
    ]
    um = int(steps[EXPOSED_UNMATCHED_NS.name].sum()) if EXPOSED_UNMATCHED_NS.name in steps else 0
    unknown = (
        f", {fmt.ms(um)} ms with no wait / transfer split (unmatched: no peer or pair in the "
        "trace, or a transfer the bytes do not explain)"
        if um
        else ""
    )
    if matched.empty:
        if um:
            lines.append(f"  exposed communication (the step parts){unknown[1:]}")
        return lines
    total = int(matched["dur_ns"].sum())
    wait = int(matched[WAIT_NS.name].sum())
    lines.append(
        f"  collective time {fmt.ms(total)} ms (all ranks): {fmt.ms(wait)} ms waiting for a "
        f"later rank ({fmt.pct(wait / total if total else None)}), {fmt.ms(total - wait)} ms "
        "transfer"
    )
    ew = int(steps[EXPOSED_WAIT_NS.name].sum())
    ex = int(steps[EXPOSED_COMM_NS.name].sum())
    if ex:
        lines.append(
            f"  exposed communication (the step parts): {fmt.ms(ew)} ms waiting "
            f"({fmt.pct(ew / ex)}), {fmt.ms(ex - ew - um)} ms transfer{unknown}"
        )
    if coll.aligned:
        how = "unix clocks" if coll.clock == "unix" else "clocks aligned on collective end times"
        lines.append(f"  arrived last (others waited for it; {how}):")
        for r in coll.stragglers.to_dict("records"):
            lines.append(
                f"    rank {r['rank']}: last in {r['last_count']} of {r['instances']} "
                f"({fmt.pct(r['last_ratio'])}), others waited {fmt.ms(r['waited_for_ns'])} ms "
                f"({fmt.ms(r['exposed_waited_for_ns'])} exposed"
                + (
                    f"; {fmt.ms(r['root_waited_for_ns'])} traces back to it)"
                    if r.get(ROOT_WAITED_FOR_NS.name, 0) != r["exposed_waited_for_ns"]
                    else ")"
                )
            )
        top = coll.top_straggler
        if top is not None and wait:
            st = coll.stragglers
            waited = int(st.loc[st["rank"] == top, "waited_for_ns"].iloc[0])
            if coll.partial:
                lines.append(
                    f"  latest among the ranks given: rank {top} ({fmt.pct(waited / wait)} of the "
                    "waiting seen here); ranks not given may be later still"
                )
            else:
                lines.append(
                    f"  straggler: rank {top} ({fmt.pct(waited / wait)} of all waiting was for it"
                    + (
                        f"; {fmt.pct(coll.verdict.rank_ratio)} of step time)"
                        if coll.verdict is not None
                        else ")"
                    )
                )
        elif coll.verdict is not None and not coll.verdict.rank_named:
            lines.append(f"  {coll.verdict.text()}")
    else:
        lines.append("  arrival order not shown: rank clocks could not be aligned")
    skew = coll.step_skew
    if not skew.empty:
        sk = skew["skew_ns"].to_numpy().astype(np.int64)
        worst = skew.iloc[int(np.argmax(sk))]
        slow = skew["slowest_rank"].value_counts()
        lines.append(
            f"  step-time skew across ranks: median {fmt.ms(float(np.median(sk)))} ms, worst "
            f"step {worst['step']}: {fmt.ms(worst['skew_ns'])} ms (slowest rank "
            f"{worst['slowest_rank']})"
        )
        lines.append(
            f"  slowest rank most often: rank {slow.index[0]} ({slow.iloc[0]} of {len(skew)} steps)"
        )
    return lines


def render_across_ranks(coll: Collectives, steps: pd.DataFrame, width: int = 80) -> str:
    """The lines wrapped to ``width`` columns, continuation lines indented two more spaces."""
    out = []
    for line in across_ranks_lines(coll, steps):
        indent = " " * (len(line) - len(line.lstrip(" ")))
        out.append(
            textwrap.fill(
                line.strip(),
                width=width,
                initial_indent=indent,
                subsequent_indent=indent + "  ",
                break_on_hyphens=False,
                break_long_words=False,  # a path stays whole
            )
        )
    return "\n".join(out)
