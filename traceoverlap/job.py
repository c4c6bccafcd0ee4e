"""Who waited for whom: the credit of exposed waiting (docs/job-model.md, diagnosis.md §6).

Every exposed-wait nanosecond of a unit lies in the wait part of at least one matched instance
on that unit. It is credited once: to the rank that instance waited for (its last arrival; a
directed send/recv: the peer), and where the wait parts of several instances overlap on the
unit, to the instance whose last arrival came latest (then the higher row). The credit of a
window therefore sums exactly to that window's ``exposed_wait_ns``.

Columnar: the wait parts are cut at every boundary into elementary segments per window, each
segment takes the highest-priority wait part covering it (a sorted range join, no Python loop),
and the exposed wait set is measured inside each segment.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from . import intervals as iv
from .intervals import GroupedIntervals

I64 = npt.NDArray[np.int64]

CREDIT_COLUMNS = (
    "window",
    "unit",
    "rank",
    "step",
    "instance",
    "waited_for_rank",
    "exposed_wait_ns",
)


def credit_segments(
    row: I64,
    window: I64,
    start: I64,
    end: I64,
    priority: I64,
    exposed_wait: GroupedIntervals,
    n_windows: int,
) -> tuple[I64, I64, I64]:
    """Exposed wait ns per (window, row): ``row``/``window``/``start``/``end`` are the wait parts
    (one per instance piece; ``row`` the instance row it belongs to), ``priority`` per part
    (higher wins where parts overlap; ties: the higher row). ``exposed_wait``: the grouped
    disjoint exposed-wait set per window, which the parts must cover. Returns (window, row, ns)
    with ns > 0."""
    keep = end > start
    row, window, start, end, priority = (x[keep] for x in (row, window, start, end, priority))
    z = np.zeros(0, np.int64)
    n = row.size
    if n == 0:
        return z, z.copy(), z.copy()
    pw = np.concatenate((window, window))
    pt = np.concatenate((start, end))
    order = np.lexsort((pt, pw))
    sw, st = pw[order], pt[order]
    new = np.ones(2 * n, dtype=bool)
    new[1:] = (sw[1:] != sw[:-1]) | (st[1:] != st[:-1])
    inv = np.empty(2 * n, dtype=np.int64)
    inv[order] = np.cumsum(new) - 1
    bw, bt = sw[new], st[new]
    lo, hi = inv[:n], inv[n:]
    part, seg = iv.range_pairs(lo, hi)
    # per segment, the covering part with the highest (priority, row)
    by = np.lexsort((-row[part], -priority[part], seg))
    seg_s, part_s = seg[by], part[by]
    first = np.ones(seg_s.size, dtype=bool)
    first[1:] = seg_s[1:] != seg_s[:-1]
    win_seg, who = seg_s[first], part_s[first]
    ns = iv.grouped_covered(exposed_wait, bw[win_seg], bt[win_seg], bt[win_seg + 1], n_windows)
    df = pd.DataFrame({"w": bw[win_seg], "r": row[who], "ns": ns})
    df = df[df["ns"] > 0].groupby(["w", "r"], sort=True)["ns"].sum().reset_index()
    return (
        df["w"].to_numpy(np.int64),
        df["r"].to_numpy(np.int64),
        df["ns"].to_numpy(np.int64),
    )


def waited_for_ranks(
    key: I64,
    unit_rank: I64,
    aligned_start: I64,
    wait_ns: I64,
    peer: I64,
) -> tuple[I64, I64]:
    """Per matched (instance, unit) row: the rank its wait part is credited to (-1: no wait) and
    the priority of its wait part (the instance's latest aligned start).

    ``key``: matched instance key per row; ``peer``: for a directed send/recv, the other rank
    (else -1). A collective's rows are credited to its last arrival (latest aligned start); on a
    tie, the lowest-numbered tied rank. The last arrival's own wait part (durations, not
    arrivals, decide waits: noise in end times) goes to the latest of the *other* members, so
    no rank is ever credited with its own waiting."""
    df = pd.DataFrame({"key": key, "rank": unit_rank, "a": aligned_start})
    latest = df.groupby("key")["a"].transform("max").to_numpy(np.int64)
    by = df.sort_values(["key", "a", "rank"], ascending=[True, False, True], kind="stable")
    nth = by.groupby("key").cumcount().to_numpy()
    top1 = pd.Series(by["rank"].to_numpy()[nth == 0], index=by["key"].to_numpy()[nth == 0])
    top2 = pd.Series(by["rank"].to_numpy()[nth == 1], index=by["key"].to_numpy()[nth == 1])
    t1 = top1.reindex(key).to_numpy(np.int64)
    t2 = top2.reindex(key).fillna(-1).to_numpy(np.int64)
    target = np.where((t1 == unit_rank) & (t2 >= 0), t2, t1)
    target = np.where(peer >= 0, peer, target)
    target = np.where(wait_ns > 0, target, -1).astype(np.int64)
    return target, latest
