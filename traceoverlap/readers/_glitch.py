"""GPU activities timed far outside the capture: clock glitches, dropped with a note.

A kernel recorded at time 0 in a trace whose clock counts from boot (CUPTI timestamps of a
machine up for 51 days) would stretch its step to 51 days. The rule: a GPU activity (kernel,
memcpy, memset) that ends more than :data:`MARGIN_NS` (or the host span, if longer) before the
first host event of its file, or starts that long after the last one, cannot have been launched
by that host timeline: it is dropped and the ranks that had one say so in a note. GPU work runs
behind its launch by milliseconds, seconds at most, so nothing real is that far away.
"""

from __future__ import annotations

import numpy as np

from ..core.fmt import duration
from ..core.model import GPU_ACTIVITY_CATEGORIES, Timeline, in_categories

__all__ = ["drop_clock_glitches", "MARGIN_NS"]

#: How far outside the host events a GPU activity may lie before it is a clock glitch (1 hour).
MARGIN_NS = 3600 * 10**9


def drop_clock_glitches(tl: Timeline) -> Timeline:
    """``tl`` without GPU activities far outside its host events (see the module docstring)."""
    ev = tl.events
    if ev.empty:
        return tl
    is_gpu = in_categories(ev["category"], GPU_ACTIVITY_CATEGORIES)
    if not is_gpu.any() or is_gpu.all():
        return tl
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    h0, h1 = int(start[~is_gpu].min()), int(end[~is_gpu].max())
    margin = max(MARGIN_NS, h1 - h0)
    far = is_gpu & ((end < h0 - margin) | (start > h1 + margin))
    if not far.any():
        return tl
    hit = set(ev["rank"].to_numpy()[far].tolist())
    per_rank = {r: int(np.count_nonzero(far & (ev["rank"].to_numpy() == r))) for r in hit}

    def note(n: int) -> str:
        return (
            f"Dropped {n} GPU {'activity' if n == 1 else 'activities'} timed more than "
            f"{duration(margin)} outside the host events of the capture (a clock glitch, such as "
            "a kernel at time 0): no launch of this timeline can be that far away."
        )

    traces = tuple(
        t.with_notes(note(per_rank[t.rank])) if t.rank in per_rank else t for t in tl.traces
    )
    return Timeline(ev[~far].reset_index(drop=True), traces)
