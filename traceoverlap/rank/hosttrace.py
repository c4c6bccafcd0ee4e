"""What a rank's host was doing in its last traced step: the Flight Recorder answer joined with
a Kineto / nsys trace of the same run (``traceoverlap hang --traces``, docs/hang.md).

The trace is joined on (process group, sequence id) where it records them (Kineto's
``record_param_comms`` args); the summary is the rank's main-thread ranges
(:func:`~traceoverlap.rank.hostranges.host_ranges`) over its last step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core import fmt
from ..core.vocab import STEP_RE
from .hostranges import COMM_CALLS, host_ranges

#: The default step marker (``ProfilerStep#12``).
_STEP = STEP_RE


def last_step_summary(
    ev: pd.DataFrame, rank: int, pg: str | None = None, seq: int | None = None, top: int = 3
) -> str | None:
    """One line: rank ``rank``'s last traced step, what its host ran in it (the longest named
    ranges, and the time inside communication calls), and whether the trace holds collective
    ``seq`` of group ``pg`` (its last one in the dumps). None when the trace has no events of
    that rank."""
    e = ev[ev["rank"].to_numpy() == rank]
    if e.empty:
        return None
    names = e["name"].astype(str)
    is_step = (e["category"] == "annotation").to_numpy(bool) & names.str.match(_STEP).to_numpy(bool)
    start = e["start_ns"].to_numpy(np.int64)
    end = e["end_ns"].to_numpy(np.int64)
    if is_step.any():
        i = int(np.flatnonzero(is_step)[np.argmax(start[is_step])])
        lo, hi = int(start[i]), int(end[i])
        where = f"its last traced step, {fmt.safe_text(names.iloc[i])} ({fmt.duration(hi - lo)})"
    else:
        lo, hi = int(start.min()), int(end.max())
        where = f"its whole trace ({fmt.duration(hi - lo)}, no step markers)"
    ranges = host_ranges(e, lo, hi)
    s = np.clip(ranges["start_ns"].to_numpy(np.int64), lo, hi)
    t = np.clip(ranges["end_ns"].to_numpy(np.int64), lo, hi)
    per = pd.Series(t - s).groupby(ranges["name"].to_numpy()).sum()
    comm = int(per.pop(COMM_CALLS)) if COMM_CALLS in per.index else 0
    per = per[per > 0].sort_values(ascending=False).head(top)
    ran = ", ".join(f"{fmt.safe_text(str(n))} {fmt.duration(d)}" for n, d in per.items())
    line = f"rank {rank}'s trace: in {where} its host ran " + (ran or "no named ranges")
    line += f"; {fmt.duration(comm)} inside communication calls"
    if pg is not None and seq is not None:
        pgs = e["process_group"].astype(str).to_numpy()
        seqs = e["seq"].to_numpy(np.int64)
        has_seq = (seqs >= 0) & (pgs == pg)
        if not has_seq.any():
            line += (
                f" (the trace records no sequence ids for group {fmt.safe_text(pg)}: not joined "
                "with the dumps' collectives)"
            )
        elif (has_seq & (seqs == seq)).any():
            j = int(np.flatnonzero(has_seq & (seqs == seq))[0])
            at = "in that step" if lo <= start[j] < hi else "before that step"
            line += f"; its last collective in the dumps, #{seq} of group {pg}, is traced {at}"
        else:
            last = int(seqs[has_seq].max())
            line += f"; the trace ends at #{last} of group {pg}, before the dumps' #{seq}"
    return line
