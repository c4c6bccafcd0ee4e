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

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from . import intervals as iv
from .fmt import ms_unit, pct
from .intervals import GroupedIntervals

I64 = npt.NDArray[np.int64]

#: What a root rank was doing: the ranges of its main thread (docs/job-model.md, Blame).
HOST_RANGE_COLUMNS = ("name", "start_ns", "end_ns")
#: Names that are not "what the rank was doing": step markers, communication calls.
_NOT_A_CAUSE = re.compile(r"(?i)^(ProfilerStep#|gloo:|nccl:|c10d::|record_param_comms)")


def host_ranges(ev: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    """A unit's main-thread ranges inside [lo, hi) that can name what it was doing
    (:data:`HOST_RANGE_COLUMNS`): every ``record_function`` / NVTX range (annotation) and the
    top-level ``cpu_op`` s (those no other op of the thread encloses), never step markers or
    communication calls. The main thread is the host thread with the most ``cpu_op`` s outside
    gloo's workers. Columnar, a few rows per op at most."""
    cat = ev["category"]
    is_op = (cat == "cpu_op").to_numpy()
    is_ann = (cat == "annotation").to_numpy()
    tid = ev["tid"].to_numpy()
    worker = (ev["thread_name"].astype(str) == "pt_gloo_runloop").to_numpy()
    ops = is_op & ~worker
    if not ops.any():
        return pd.DataFrame(columns=list(HOST_RANGE_COLUMNS))
    t_ids, counts = np.unique(tid[ops], return_counts=True)
    main = int(t_ids[np.argmax(counts)])
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    on = (tid == main) & (end > lo) & (start < hi)
    op_rows = np.flatnonzero(on & is_op)
    op_rows = op_rows[np.lexsort((-end[op_rows], start[op_rows]))]
    if op_rows.size:
        reach = np.maximum.accumulate(end[op_rows])
        top = np.ones(op_rows.size, dtype=bool)
        top[1:] = start[op_rows][1:] >= reach[:-1]
        op_rows = op_rows[top]
    rows = np.sort(np.concatenate((op_rows, np.flatnonzero(on & is_ann))))
    names = ev["name"].to_numpy()[rows].astype(str)
    keep = np.array([_NOT_A_CAUSE.match(n) is None for n in np.unique(names)], dtype=bool)
    ok = keep[np.searchsorted(np.unique(names), names)] if names.size else np.zeros(0, bool)
    rows = rows[ok]
    return pd.DataFrame(
        {
            "name": ev["name"].to_numpy()[rows].astype(str),
            "start_ns": start[rows].astype(np.int64),
            "end_ns": end[rows].astype(np.int64),
        },
        columns=list(HOST_RANGE_COLUMNS),
    )


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


BLAME_COLUMNS = (
    "window",
    "rank",
    "step",
    "waited_for_rank",
    "exposed_wait_ns",
    "chain",
    "root_rank",
    "lateness_ns",
    "cause",
    "cause_ns",
    "explained_ratio",
)
#: The longest chain followed (ranks waiting for ranks waiting for ...).
MAX_CHAIN = 8
#: Below this share of its lateness a cause is "unexplained" (diagnosis.md §6).
EXPLAINED_RATIO = 0.5


def empty_blame() -> pd.DataFrame:
    return pd.DataFrame(columns=list(BLAME_COLUMNS))


class _Arrivals:
    """Lookups over the matched arrivals (aligned clock): per instance its first arrival, per
    (instance, rank) that rank's arrival, per rank its wait parts."""

    def __init__(self, per_rank: pd.DataFrame) -> None:
        pr = per_rank[per_rank["matched"].astype(bool).to_numpy()]
        a = pr["aligned_start_ns"].to_numpy(np.int64)
        self.first = pd.Series(a).groupby(pr["instance"].to_numpy()).min().to_dict()
        self.arrival = (
            pd.Series(a).groupby([pr["instance"].to_numpy(), pr["rank"].to_numpy()]).min().to_dict()
        )
        w = pr[(pr["wait_ns"].to_numpy() > 0) & pr["waited_for_rank"].notna().to_numpy()]
        ws = w["aligned_start_ns"].to_numpy(np.int64)
        self.waits: dict[int, tuple[I64, I64, I64, I64]] = {}
        for r, idx in pd.Series(np.arange(len(w))).groupby(w["rank"].to_numpy()).groups.items():
            i = np.asarray(idx, dtype=np.int64)
            self.waits[int(r)] = (
                ws[i],
                ws[i] + w["wait_ns"].to_numpy(np.int64)[i],
                w["waited_for_rank"].to_numpy()[i].astype(np.int64),
                w["instance"].to_numpy(np.int64)[i],
            )

    def lateness(self, inst: int, rank: int) -> tuple[int, int]:
        """[first arrival, ``rank``'s arrival) of an instance, aligned."""
        lo = int(self.first.get(inst, 0))
        return lo, max(lo, int(self.arrival.get((inst, rank), lo)))

    def follow(self, rank: int, lo: int, hi: int) -> tuple[int, int] | None:
        """(rank waited for, instance) when ``rank`` spent at least half of [lo, hi) waiting in
        one instance, else None."""
        w = self.waits.get(rank)
        if w is None or hi <= lo:
            return None
        ov = np.clip(np.minimum(w[1], hi) - np.maximum(w[0], lo), 0, None)
        j = int(np.argmax(ov))
        if 2 * int(ov[j]) < hi - lo:
            return None
        return int(w[2][j]), int(w[3][j])


def _cause(ranges: pd.DataFrame | None, lo: int, hi: int) -> tuple[str | None, int]:
    """The range open during [lo, hi) (own clock) that covers most of it; among those within
    90 % of the best, the shortest (the innermost). (None, 0) when nothing overlaps."""
    if ranges is None or ranges.empty or hi <= lo:
        return None, 0
    s = ranges["start_ns"].to_numpy(np.int64)
    e = ranges["end_ns"].to_numpy(np.int64)
    ov = np.clip(np.minimum(e, hi) - np.maximum(s, lo), 0, None)
    best = int(ov.max())
    if best <= 0:
        return None, 0
    near = np.flatnonzero(10 * ov >= 9 * best)
    j = int(near[np.argmin((e - s)[near])])
    return str(ranges["name"].iat[j]), int(ov[j])


def blame_table(
    credit: pd.DataFrame,
    per_rank: pd.DataFrame,
    host: dict[int, pd.DataFrame | None],
    unit_of_rank: dict[int, int],
    offsets: dict[int, int],
) -> pd.DataFrame:
    """One row per (waiting window, rank credited) (:data:`BLAME_COLUMNS`): follow the credited
    rank while it was itself waiting (at least half of its lateness inside one of its own wait
    parts) to the rank it waited for, until a rank that was not; then what that root rank's main
    thread was doing during its lateness (``host``: per unit its ranges, own clock;
    ``offsets``: own clock - aligned clock). One small loop per row (rows are windows x
    credited ranks, not events)."""
    if credit.empty:
        return empty_blame()
    key = ["window", "rank", "step", "waited_for_rank"]
    cr = credit.assign(step=credit["step"].astype(str))
    by_inst = cr.groupby([*key, "instance"], sort=True)["exposed_wait_ns"].sum().reset_index()
    top = by_inst.sort_values([*key, "exposed_wait_ns"], ascending=[*[True] * 4, False])
    top = top.drop_duplicates(key)
    total = cr.groupby(key, sort=True)["exposed_wait_ns"].sum()
    arr = _Arrivals(per_rank)
    out = []
    for row in top.itertuples(index=False):
        q, inst = int(row.waited_for_rank), int(row.instance)
        chain = [q]
        lo, hi = arr.lateness(inst, q)
        for _ in range(MAX_CHAIN):
            nxt = arr.follow(q, lo, hi)
            if nxt is None or nxt[0] in chain or nxt[0] == int(row.rank):
                break
            q, inst = nxt
            chain.append(q)
            lo, hi = arr.lateness(inst, q)
        unit = unit_of_rank.get(q)
        off = offsets.get(unit, 0) if unit is not None else 0
        cause, cause_ns = _cause(host.get(unit) if unit is not None else None, lo + off, hi + off)
        late = hi - lo
        out.append(
            {
                "window": int(row.window),
                "rank": int(row.rank),
                "step": row.step,
                "waited_for_rank": int(row.waited_for_rank),
                "exposed_wait_ns": int(total.loc[tuple(row[:4])]),
                "chain": tuple(chain),
                "root_rank": q,
                "lateness_ns": int(late),
                "cause": cause,
                "cause_ns": cause_ns,
                "explained_ratio": (cause_ns / late) if late > 0 else None,
            }
        )
    return pd.DataFrame(out, columns=list(BLAME_COLUMNS))


def blame_line(b: Mapping[str, Any]) -> str:
    """``rank 0 waited 41.00 ms for rank 2 <- rank 2 waited for rank 3 <- rank 3's
    `straggler_sleep` covered 40.00 ms of its 40.00 ms lateness (100% explained)``."""
    chain = list(b["chain"])
    text = f"rank {b['rank']} waited {ms_unit(int(b['exposed_wait_ns']))} for rank {chain[0]}"
    for a, c in zip(chain, chain[1:], strict=False):
        text += f" <- rank {a} was itself waiting for rank {c}"
    ratio = b["explained_ratio"]
    root = chain[-1]
    if b["cause"] is None or ratio is None or ratio < EXPLAINED_RATIO:
        return text + f" <- rank {root} was late by {ms_unit(int(b['lateness_ns']))}: unexplained"
    return text + (
        f" <- rank {root}'s `{b['cause']}` covered {ms_unit(int(b['cause_ns']))} of its "
        f"{ms_unit(int(b['lateness_ns']))} lateness ({pct(ratio)} explained)"
    )


def top_blame(blame: pd.DataFrame, limit: int = 3) -> pd.DataFrame:
    """The blame rows summed over steps per (waiting rank, chain, cause), most waiting first:
    what the reports print (``exposed_wait_ns``, ``lateness_ns`` and ``cause_ns`` summed;
    ``explained_ratio`` recomputed from the sums)."""
    if blame.empty:
        return blame
    b = blame.assign(cause=blame["cause"].fillna(""))
    key = ["rank", "waited_for_rank", "chain", "root_rank", "cause"]
    g = b.groupby(key, sort=False)[["exposed_wait_ns", "lateness_ns", "cause_ns"]].sum()
    g = g.reset_index().sort_values(["exposed_wait_ns", "rank"], ascending=[False, True])
    g["cause"] = [c or None for c in g["cause"]]
    late = g["lateness_ns"].to_numpy(np.int64)
    g["explained_ratio"] = [
        (int(c) / int(x)) if x > 0 else None for c, x in zip(g["cause_ns"], late, strict=True)
    ]
    return g.head(limit).reset_index(drop=True)
