"""Who waited for whom: the credit of exposed waiting (docs/job-model.md, diagnosis.md §6).

Every exposed-wait nanosecond of a unit lies in the wait part of at least one matched instance
on that unit. It is credited once: to the rank that instance waited for (its last arrival; a
directed send/recv: the peer), and where the wait parts of several instances overlap on the
unit, to the instance whose last arrival came latest (then the higher row). The credit of a
window therefore sums exactly to that window's ``exposed_wait_ns``.

Columnar: the wait parts are cut at every boundary into elementary segments per window, each
segment takes the highest-priority wait part covering it (a sorted range join, no Python loop),
and the exposed wait set is measured inside each segment.

Blame chains (:func:`blame_table`) follow each wait to the rank at its end and name what that
rank was doing from the host ranges the map kept (:mod:`traceoverlap.rank.hostranges`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core import intervals as iv
from ..core.fmt import ms_unit, pct
from ..core.intervals import GroupedIntervals
from ..core.schema import BLAME, EXPOSED_WAIT_NS, WAIT_NS, WAITED_FOR_RANK
from ..rank.hostranges import COMM_CALLS, HOST_RANGE_COLUMNS, KERNEL_MARK

I64 = npt.NDArray[np.int64]
CREDIT_COLUMNS = (
    "window",
    "unit",
    "rank",
    "step",
    "instance",
    WAITED_FOR_RANK.name,
    EXPOSED_WAIT_NS.name,
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
    return _sum_by_pair(bw[win_seg], row[who], ns)


def _sum_by_pair(w: I64, r: I64, ns: I64) -> tuple[I64, I64, I64]:
    """Per (w, r) in (w, r) order: the sum of the positive ``ns`` (what ``groupby(["w", "r"],
    sort=True)["ns"].sum()`` of the rows with ns > 0 gives), by a sort and run sums: a
    DataFrame and its groupby cost ~1 ms a call."""
    pos = ns > 0
    w, r, ns = w[pos].astype(np.int64), r[pos].astype(np.int64), ns[pos].astype(np.int64)
    if w.size == 0:
        return w, r, ns
    order = np.lexsort((r, w))
    w, r, ns = w[order], r[order], ns[order]
    new = np.ones(w.size, dtype=bool)
    new[1:] = (w[1:] != w[:-1]) | (r[1:] != r[:-1])
    first = np.flatnonzero(new)
    return w[first], r[first], np.add.reduceat(ns, first)


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
    key = np.asarray(key, dtype=np.int64)
    unit_rank = np.asarray(unit_rank, dtype=np.int64)
    a = np.asarray(aligned_start, dtype=np.int64)
    n = key.size
    # per key its rows, latest start first (ties: the lower rank, then row order); ~a orders
    # as -a would, without its overflow
    order = np.lexsort((unit_rank, ~a, key))
    ks = key[order]
    new = np.ones(n, dtype=bool)
    new[1:] = ks[1:] != ks[:-1]
    first = np.flatnonzero(new)
    group = np.empty(n, dtype=np.int64)
    group[order] = np.cumsum(new) - 1  # per row, its key's position among the keys
    rs = unit_rank[order]
    # the key's first row: its latest start and its last arrival; its second row, if any
    second = first + 1
    has2 = second < np.append(first[1:], n)
    latest = a[order][first][group]
    t1 = rs[first][group]
    t2 = np.where(has2, rs[np.minimum(second, max(n - 1, 0))], -1)[group]
    target = np.where((t1 == unit_rank) & (t2 >= 0), t2, t1)
    target = np.where(peer >= 0, peer, target)
    target = np.where(wait_ns > 0, target, -1).astype(np.int64)
    return target, latest


BLAME_COLUMNS = BLAME.names
#: The longest chain followed (ranks waiting for ranks waiting for ...).
MAX_CHAIN = 8
#: Causes are looked up for this many blame rows, most waiting first (each costs a scan of two
#: ranks' ranges); the rest keep their chain with no cause (a run of 1,000s of rank-steps).
MAX_CAUSE_ROWS = 2000
#: Below this share of its lateness a cause is "unexplained" (diagnosis.md §6).
EXPLAINED_RATIO = 0.5


def empty_blame() -> pd.DataFrame:
    return pd.DataFrame(columns=list(BLAME_COLUMNS))


class _Arrivals:
    """Lookups over the matched arrivals (aligned clock), as sorted arrays (no per-row Python
    objects): per instance its first arrival (time and rank), per (instance, rank) that rank's
    arrival and its step window's start, per rank its wait parts."""

    def __init__(self, per_rank: pd.DataFrame, window_start: I64, offsets: dict[int, int]) -> None:
        # the matched rows of the columns read (not a copy of the whole frame's rows)
        m = per_rank["matched"].astype(bool).to_numpy()

        def col(name: str) -> npt.NDArray[Any]:
            out: npt.NDArray[Any] = per_rank[name].to_numpy()[m]
            return out

        a = col("aligned_start_ns").astype(np.int64)
        end = col("aligned_end_ns").astype(np.int64)
        inst = col("instance").astype(np.int64)
        rank = col("rank").astype(np.int64)
        unit = col("unit").astype(np.int64)
        off_of = np.zeros(int(unit.max()) + 1 if unit.size else 1, dtype=np.int64)
        for u, o in offsets.items():
            if 0 <= u < off_of.size:
                off_of[u] = o
        ws = window_start[col("window").astype(np.int64)] - off_of[unit] if m.any() else a
        self.n_ranks = int(rank.max()) + 1 if rank.size else 1
        # per (instance, rank): sorted keys; the earliest of several units of one rank
        k = inst * self.n_ranks + rank
        order = np.lexsort((a, k))
        first_k = np.ones(order.size, dtype=bool)
        first_k[1:] = k[order][1:] != k[order][:-1]
        sel = order[first_k]
        self.k, self.a, self.ws, self.e = k[sel], a[sel], ws[sel], end[sel]
        # per rank, its instances (for the last point two ranks were in step): sorted by rank
        by_rank = np.argsort(self.k % self.n_ranks, kind="stable")
        self.r_rank = (self.k % self.n_ranks)[by_rank]
        self.r_inst, self.r_e = (self.k // self.n_ranks)[by_rank], self.e[by_rank]
        # per instance: its first arrival (ties: the lowest rank)
        order = np.lexsort((rank, a, inst))
        first = np.ones(order.size, dtype=bool)
        first[1:] = inst[order][1:] != inst[order][:-1]
        sel = order[first]
        self.i_inst, self.i_first, self.i_rank = inst[sel], a[sel], rank[sel]
        waited_for = per_rank[WAITED_FOR_RANK.name]
        w = (col(WAIT_NS.name) > 0) & waited_for.notna().to_numpy()[m]
        target = np.where(w, waited_for.fillna(-1).to_numpy()[m], -1).astype(np.int64)
        wait = col(WAIT_NS.name).astype(np.int64)
        wo = np.flatnonzero(w)
        wo = wo[np.argsort(rank[wo], kind="stable")]
        self.w_rank = rank[wo]
        self.w_start, self.w_end = a[wo], a[wo] + wait[wo]
        self.w_target, self.w_inst = target[wo], inst[wo]

    def _lookup(self, inst: int, rank: int) -> int:
        """Position of (inst, rank) in the per-arrival arrays, -1 when absent."""
        key = inst * self.n_ranks + rank
        j = int(np.searchsorted(self.k, key))
        return j if j < self.k.size and int(self.k[j]) == key else -1

    def _first(self, inst: int) -> tuple[int, int] | None:
        j = int(np.searchsorted(self.i_inst, inst))
        if j < self.i_inst.size and int(self.i_inst[j]) == inst:
            return int(self.i_first[j]), int(self.i_rank[j])
        return None

    def lateness(self, inst: int, rank: int) -> tuple[int, int]:
        """[first arrival, ``rank``'s arrival) of an instance, aligned."""
        f = self._first(inst)
        lo = f[0] if f is not None else 0
        j = self._lookup(inst, rank)
        return lo, max(lo, int(self.a[j]) if j >= 0 else lo)

    def _start(self, inst: int, rank: int, default: int) -> int:
        j = self._lookup(inst, rank)
        return int(self.ws[j]) if j >= 0 else default

    def _waiting(self, rank: int, lo: int, hi: int) -> tuple[int, int, int]:
        """(ns ``rank`` waited in [lo, hi), the rank it waited for most there, in which
        instance); (0, -1, -1) when none."""
        b0 = int(np.searchsorted(self.w_rank, rank, side="left"))
        b1 = int(np.searchsorted(self.w_rank, rank, side="right"))
        if b0 == b1 or hi <= lo:
            return 0, -1, -1
        ov = np.clip(
            np.minimum(self.w_end[b0:b1], hi) - np.maximum(self.w_start[b0:b1], lo), 0, None
        )
        if int(ov.sum()) == 0:
            return 0, -1, -1
        tg = self.w_target[b0:b1]
        uniq, inv = np.unique(tg, return_inverse=True)
        tgt = int(uniq[int(np.argmax(np.bincount(inv, weights=ov)))])
        j = int(np.argmax(np.where(tg == tgt, ov, -1)))
        return int(ov.sum()), tgt, int(self.w_inst[b0 + j])

    def follow(self, inst: int, rank: int) -> tuple[int, int] | None:
        """(rank waited for, instance) when ``rank``, late in ``inst``, spent at least half of
        its lateness more than the first arrival waiting for others in the windows of
        :meth:`windows` (a delay that propagates: it waited earlier, then computed late), else
        None."""
        early, e_lo, lo, r_lo, hi, _ = self.windows(inst, rank)
        if hi <= lo:
            return None
        mine, tgt, where = self._waiting(rank, r_lo, hi)
        theirs, _, _ = self._waiting(early, e_lo, lo)
        if tgt < 0 or 2 * (mine - theirs) < hi - lo:
            return None
        return tgt, where

    def _in_step(self, inst: int, rank: int, early: int, hi: int, lo: int) -> tuple[int, int]:
        """Where ``rank`` (arriving at ``hi``) and ``early`` (arriving at ``lo``) were last in
        step before ``inst``: the end, on each, of the latest other instance both had finished
        before arriving at ``inst`` (aligned). A lateness can only build up since then: a
        delay before it was absorbed there. (-1, -1) when they shared none."""
        b0 = int(np.searchsorted(self.r_rank, rank, side="left"))
        b1 = int(np.searchsorted(self.r_rank, rank, side="right"))
        ins, ends = self.r_inst[b0:b1], self.r_e[b0:b1]
        cand = np.flatnonzero((ends <= hi) & (ins != inst))
        if cand.size == 0:
            return -1, -1
        key = ins[cand] * self.n_ranks + early
        j = np.minimum(np.searchsorted(self.k, key), self.k.size - 1)
        ok = (self.k[j] == key) & (self.e[j] <= lo)
        if not ok.any():
            return -1, -1
        best = int(np.argmax(np.where(ok, ends[cand], np.iinfo(np.int64).min)))
        return int(ends[cand[best]]), int(self.e[j[best]])

    def windows(self, inst: int, rank: int) -> tuple[int, int, int, int, int, int | None]:
        """(first-arrival rank, its [since, arrival), ``rank``'s [since, arrival), late at
        start), aligned: what the root and its early peer did since their steps began or, when
        earlier, since the end of the latest other instance both had finished
        (:meth:`_in_step`). A straggler that sleeps after its step's last collective (in the
        optimizer) starts its next step late: the time since that step's start does not hold
        the sleep, the time since the last shared collective does. "Late at start": when the
        trace holds no earlier instance of the two, how late ``rank`` already began its step
        (the lateness began before the capture); None when it does, or ``rank`` came first."""
        f = self._first(inst)
        early = f[1] if f is not None else rank
        lo, hi = self.lateness(inst, rank)
        r_start, e_start = self._start(inst, rank, lo), self._start(inst, early, lo)
        if early == rank:
            return early, e_start, lo, r_start, hi, None
        r_since, e_since = self._in_step(inst, rank, early, hi, lo)
        if r_since < 0:
            return early, e_start, lo, r_start, hi, r_start - e_start
        if r_since >= r_start:
            return early, e_start, lo, r_start, hi, None
        return early, e_since, lo, r_since, hi, None


class _Ranges:
    """One unit's host ranges as arrays: name codes, spans, and its communication calls."""

    def __init__(self, ranges: pd.DataFrame | None) -> None:
        if ranges is None or ranges.empty:
            ranges = pd.DataFrame(columns=list(HOST_RANGE_COLUMNS))
        names = ranges["name"].to_numpy(dtype=object)
        comm = names == COMM_CALLS
        codes, uniq = _factorize(names[~comm])
        self.codes = codes.astype(np.int64)
        self.names = np.asarray(uniq, dtype=object)
        self.s = ranges["start_ns"].to_numpy(np.int64)[~comm]
        self.e = ranges["end_ns"].to_numpy(np.int64)[~comm]
        cs = ranges["start_ns"].to_numpy(np.int64)[comm]
        self.calls = (np.zeros(cs.size, np.int64), cs, ranges["end_ns"].to_numpy(np.int64)[comm])
        # GPU kernels (device time): a host communication call says nothing about them
        self.labels, self.kernel = _labels(self.names)
        self._at: dict[str, int] | None = None
        # the calls (a union: disjoint) sorted, with the running total of their lengths
        _, cs, ce = self.calls
        order = np.argsort(cs, kind="stable")
        self.call_s, self.call_e = cs[order], ce[order]
        self.call_cum = np.concatenate(([0], np.cumsum(self.call_e - self.call_s)))

    def encloses(self, outer: str, inner: str, lo: int, hi: int) -> bool:
        """Whether a range named ``outer`` holds a range named ``inner`` (both met in
        [lo, hi), own clock): ``outer`` is around it, not beside it."""
        if self._at is None:  # per name its code (the last of a text met twice), kept
            self._at = dict(zip(self.labels, range(len(self.labels)), strict=True))
        at = self._at
        if outer not in at or inner not in at or outer == inner:
            return False
        live = (self.e > lo) & (self.s < hi)
        o = live & (self.codes == at[outer])
        i = live & (self.codes == at[inner])
        if not o.any() or not i.any():
            return False
        os_, oe = iv.union(self.s[o], self.e[o])
        if os_.size == 0:  # only empty ranges of that name: around nothing
            return False
        k = np.searchsorted(os_, self.s[i], side="right") - 1
        return bool(((k >= 0) & (self.e[i] <= oe[np.maximum(k, 0)])).any())

    def totals(self, lo: int, hi: int) -> dict[str, int]:
        """Per range name: its time inside [lo, hi) (own clock) outside communication calls (a
        range around a send that waited did not *do* anything for that long)."""
        if self.s.size == 0 or hi <= lo:
            return {}
        # only the ranges and calls that meet [lo, hi): the others add 0 ns to every name
        live = (self.e > lo) & (self.s < hi)
        codes = self.codes[live]
        a = np.maximum(self.s[live], lo)
        b = np.maximum(np.minimum(self.e[live], hi), a)
        inside = self._in_calls(b) - self._in_calls(a)  # |[a, b) ∩ calls|
        if self.kernel.any():
            inside = np.where(self.kernel[codes], 0, inside)
        per = np.bincount(codes, weights=(b - a) - inside, minlength=self.names.size)
        hit = np.flatnonzero(per > 0)
        labels = self.labels
        got = per[hit].astype(np.int64).tolist()
        return {labels[i]: v for i, v in zip(hit.tolist(), got, strict=True)}

    def _in_calls(self, x: I64) -> I64:
        """Per time: the calls' time before it (what :func:`iv.grouped_covered` sums for one
        group, its prefix sums and binary search kept from one window to the next)."""
        if self.call_s.size == 0:
            return np.zeros(x.size, dtype=np.int64)
        k = np.searchsorted(self.call_s, x, side="right") - 1
        kk = np.maximum(k, 0)
        part = np.clip(x - self.call_s[kk], 0, self.call_e[kk] - self.call_s[kk])
        return np.asarray(np.where(k >= 0, self.call_cum[kk] + part, 0), dtype=np.int64)


def _factorize(names: npt.NDArray[Any]) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """``pd.factorize(names)`` (codes in order of first appearance, and the names met): in a
    dict when every name is a str (a few times faster on thousands of ranges)."""
    values = names.tolist()
    if set(map(type, values)) - {str}:  # nulls (code -1) and other objects: pandas' rules
        codes, uniq = pd.factorize(names)
        return np.asarray(codes, dtype=np.int64), np.asarray(uniq, dtype=object)
    first = dict.fromkeys(values)  # in order of first appearance
    if len(first) == len(values):  # every name once (a GPU unit's kernels by call): no lookups
        return np.arange(len(values), dtype=np.int64), np.array(values, dtype=object)
    seen = dict(zip(first, range(len(first)), strict=True))
    got = np.fromiter(map(seen.__getitem__, values), dtype=np.int64, count=len(values))
    return got, np.array(list(seen), dtype=object)


def _labels(names: npt.NDArray[Any]) -> tuple[list[str], npt.NDArray[np.bool_]]:
    """Per name: its text (``str(n)``), and whether it is a GPU kernel's (starts with
    :data:`KERNEL_MARK`). For names that are all str, their first characters in one numpy cast
    (a ``startswith`` call per name cost ~3x that on 40 000 kernels)."""
    values = names.tolist()
    if set(map(type, values)) - {str}:
        return [str(n) for n in values], np.array(
            [str(n).startswith(KERNEL_MARK) for n in values], dtype=bool
        )
    return values, np.asarray(names.astype("U1") == KERNEL_MARK, dtype=bool).reshape(-1)


#: Ranges that name a phase of the step, not what the rank was doing in it (diagnosis.md §14).
_PHASE = re.compile(
    r"(?i)^(##\s*)?(forward|backward|optimizer|train_step|training_step|train|step|iteration)"
    r"\b|\.forward$|^Optimizer\.|^DistributedDataParallel|^FullyShardedDataParallel"
)


def _is_op(name: str) -> bool:
    """An op (``aten::mm``, ``fbgemm::...``) or a GPU kernel, not a range a user named."""
    return name.startswith(KERNEL_MARK) or "::" in name


def _cause(
    root: _Ranges,
    root_win: tuple[int, int],
    peer: _Ranges | None,
    peer_win: tuple[int, int],
    late: int = 0,
) -> tuple[str | None, int]:
    """What the root was doing during its lateness (diagnosis.md §14, "specific"): per range or
    op of its main thread (and, on a GPU rank, per kernel by name and call order within the
    step), its time beyond the same one on its early peer, both over the windows of
    :meth:`_Arrivals.windows` (own clocks). Of those whose excess explains at least
    :data:`EXPLAINED_RATIO` of the lateness ``late``, the deepest: one around none of the others
    (``expert`` rather than the ``forward`` around it, ``straggler_sleep`` rather than
    ``train_step``: an enclosing range always grows with its child), the largest excess first. When none does (or
    ``late`` is 0), among names within 90 % of the largest excess the innermost, as before.
    (name, excess ns); (None, 0) when none ran longer."""
    mine = root.totals(*root_win)
    theirs = peer.totals(*peer_win) if peer is not None else {}
    if not mine:
        return None, 0
    excess = {n: v - theirs.get(n, 0) for n, v in mine.items()}
    best = max(excess.values())
    if best <= 0:
        return None, 0
    most = [n for n, x in excess.items() if late > 0 and x >= EXPLAINED_RATIO * late]
    if most:
        # a range the user named (``expert``, ``dataloader``) says where, the ops inside it
        # (``aten::mm``) only what: the ranges first, unless they are only phases (``forward``
        # around an ``aten::index`` that grew); then the deepest, a range around none of the
        # others (``straggler_sleep`` inside each ``microbatch#k``, all inside ``forward``);
        # then the largest excess
        named = [n for n in most if not _is_op(n) and not _PHASE.search(n)]
        pool = named or most
        deepest = [
            n for n in pool if not any(root.encloses(n, m, *root_win) for m in pool if m != n)
        ] or pool
        name = min(deepest, key=lambda n: (-excess[n], mine[n], n))
    else:
        near = [n for n, x in excess.items() if 10 * x >= 9 * best]
        name = min(near, key=lambda n: (mine[n], n))
    return name.removeprefix(KERNEL_MARK), int(excess[name])


def blame_table(
    credit: pd.DataFrame,
    per_rank: pd.DataFrame,
    host: dict[int, pd.DataFrame | None],
    unit_of_rank: dict[int, int],
    offsets: dict[int, int],
    window_start: I64,
) -> pd.DataFrame:
    """One row per (waiting window, rank credited) (:data:`BLAME_COLUMNS`): follow the credited
    rank while it was itself waiting (:meth:`_Arrivals.follow`) to the rank it waited for, until
    a rank that was not; then the range of that root rank's main thread that ran longest beyond
    the same range on the instance's first arrival (``host``: per unit its ranges, own clock;
    ``offsets``: own clock - aligned clock; ``window_start``: per global window its start, own
    clock). One small loop per row (rows are windows x credited ranks, not events)."""
    if credit.empty:
        return empty_blame()
    arr = _Arrivals(per_rank, window_start, offsets)
    cache: dict[int | None, _Ranges] = {}

    def ranges_of(u: int | None) -> _Ranges:
        if u not in cache:
            cache[u] = _Ranges(host.get(u) if u is not None else None)
        return cache[u]

    out = []
    for n, row in enumerate(_blame_keys(credit)):
        q, inst = row.waited_for_rank, row.instance
        chain = [q]
        for _ in range(MAX_CHAIN):
            nxt = arr.follow(inst, q)
            if nxt is None or nxt[0] in chain or nxt[0] == row.rank:
                break
            q, inst = nxt
            chain.append(q)
        lo, hi = arr.lateness(inst, q)
        early, e_lo, e_hi, r_lo, r_hi, late_at_start = arr.windows(inst, q)
        ru, eu = unit_of_rank.get(q), unit_of_rank.get(early)
        ro = offsets.get(ru, 0) if ru is not None else 0
        eo = offsets.get(eu, 0) if eu is not None else 0
        cause, cause_ns = (
            _cause(
                ranges_of(ru),
                (r_lo + ro, r_hi + ro),
                ranges_of(eu) if early != q else None,
                (e_lo + eo, e_hi + eo),
                hi - lo,
            )
            if n < MAX_CAUSE_ROWS
            else (None, 0)
        )
        late = hi - lo
        cause_ns = min(cause_ns, late)
        out.append(
            {
                "window": int(row.window),
                "rank": int(row.rank),
                "step": row.step,
                WAITED_FOR_RANK.name: int(row.waited_for_rank),
                EXPOSED_WAIT_NS.name: int(row.total_ns),
                "chain": tuple(chain),
                "root_rank": q,
                "lateness_ns": int(late),
                "cause": cause,
                "cause_ns": cause_ns,
                "explained_ratio": (cause_ns / late) if late > 0 else None,
                "late_at_start_ns": late_at_start if n < MAX_CAUSE_ROWS else None,
            }
        )
    df = pd.DataFrame(out, columns=list(BLAME_COLUMNS))
    df["late_at_start_ns"] = pd.array(df["late_at_start_ns"].tolist(), dtype="Int64")
    return df.sort_values(["window", WAITED_FOR_RANK.name], kind="stable").reset_index(drop=True)


class _BlameKey(NamedTuple):
    window: int
    rank: int
    step: str
    waited_for_rank: int
    instance: int
    total_ns: int


def _blame_keys(credit: pd.DataFrame) -> list[_BlameKey]:
    """One per (window, rank, step, rank waited for) of the credit: its exposed wait summed
    (``total_ns``) and the instance that holds most of it (ties: the lower instance), most
    waiting first (ties: by window, rank, step, rank waited for). Sorted arrays and run sums:
    the groupby / sort / reindex chain this replaces cost milliseconds on a few hundred rows."""
    w = credit["window"].to_numpy(np.int64)
    r = credit["rank"].to_numpy(np.int64)
    wf = credit[WAITED_FOR_RANK.name].to_numpy(np.int64)
    inst = credit["instance"].to_numpy(np.int64)
    ns = credit[EXPOSED_WAIT_NS.name].to_numpy(np.int64)
    steps, sc = np.unique(
        np.array(credit["step"].astype(str).tolist(), dtype=object), return_inverse=True
    )
    sc = sc.reshape(-1)
    order = np.lexsort((inst, wf, sc, r, w))
    w, r, sc, wf, inst, ns = (x[order] for x in (w, r, sc, wf, inst, ns))

    def starts(*cols: I64) -> I64:
        new = np.zeros(w.size, dtype=bool)
        new[0] = True
        for c in cols:
            new[1:] |= c[1:] != c[:-1]
        return np.flatnonzero(new)

    ki = starts(w, r, sc, wf, inst)  # (key, instance) runs
    kk = starts(w, r, sc, wf)  # key runs
    per_inst = np.add.reduceat(ns, ki)
    key_of = np.cumsum(np.isin(ki, kk)) - 1  # per (key, instance) run: its key
    total = np.add.reduceat(per_inst, np.flatnonzero(np.isin(ki, kk)))
    # per key, the instance with the most wait: first of (key, -sum, instance)
    best_order = np.lexsort((inst[ki], -per_inst, key_of))
    first = np.ones(best_order.size, dtype=bool)
    first[1:] = key_of[best_order][1:] != key_of[best_order][:-1]
    best = ki[best_order[first]]
    top = np.lexsort((r[kk], w[kk], -total))  # stable: equal ones stay in key order
    cols = (w[kk], r[kk], sc[kk], wf[kk], inst[best], total)
    w_, r_, s_, wf_, i_, t_ = (c[top].tolist() for c in cols)
    return [
        _BlameKey(a, b, str(steps[c]), d, e, f)
        for a, b, c, d, e, f in zip(w_, r_, s_, wf_, i_, t_, strict=True)
    ]


def blame_line(b: Mapping[str, Any]) -> str:
    """``rank 0 waited 41.00 ms for rank 2 <- rank 2 waited for rank 3 <- rank 3's
    `straggler_sleep` ran 40.00 ms longer than its early peer's, of its 40.00 ms lateness
    (100% explained)``."""
    chain = list(b["chain"])
    text = f"rank {b['rank']} waited {ms_unit(int(b['exposed_wait_ns']))} for rank {chain[0]}"
    for a, c in zip(chain, chain[1:], strict=False):
        text += f" <- rank {a} was itself waiting for rank {c}"
    ratio = b["explained_ratio"]
    root = chain[-1]
    if int(b["lateness_ns"]) <= 0:
        # the root ended its previous work no later than its early peer: the wait is end-time
        # noise or work the trace does not show, not a measured lateness
        return text + f" <- rank {root} was not measurably late: unexplained"
    # a ratio column holding None comes back from pandas as NaN: both mean "not known"
    if b["cause"] is None or ratio is None or ratio != ratio or ratio < EXPLAINED_RATIO:
        text += f" <- rank {root} was late by {ms_unit(int(b['lateness_ns']))}: unexplained"
        before = b.get("late_at_start_ns")
        if before is not None and not pd.isna(before) and 2 * int(before) >= int(b["lateness_ns"]):
            # late from its step's start, and nothing earlier in the trace to compare with
            text += (
                f" (it began its step {ms_unit(int(before))} after its peer, before the first "
                "collective of the two that the trace holds: the cause precedes the capture)"
            )
        return text
    return text + (
        f" <- rank {root}'s `{b['cause']}` ran {ms_unit(int(b['cause_ns']))} longer than its "
        f"early peer's, of its {ms_unit(int(b['lateness_ns']))} lateness ({pct(ratio)} explained)"
    )


def top_blame(blame: pd.DataFrame, limit: int = 3) -> pd.DataFrame:
    """The blame rows summed over steps per (waiting rank, chain, cause, whether the lateness
    began before the capture), most waiting first: what the reports print
    (``exposed_wait_ns``, ``lateness_ns``, ``cause_ns`` and ``late_at_start_ns`` summed;
    ``explained_ratio`` recomputed from the sums)."""
    if blame.empty:
        return blame
    before = blame["late_at_start_ns"]
    known = before.notna().to_numpy()
    # the rows summed per key in a dict, keys in order of first appearance (a groupby with
    # sort=False, on a few hundred rows where its per-call cost dominates)
    sums: dict[tuple[Any, ...], list[int]] = {}
    for *key, e, la, c, s in zip(
        blame["rank"].tolist(),
        blame[WAITED_FOR_RANK.name].tolist(),
        blame["chain"].tolist(),
        blame["root_rank"].tolist(),
        blame["cause"].fillna("").tolist(),
        known.tolist(),
        blame[EXPOSED_WAIT_NS.name].to_numpy(np.int64).tolist(),
        blame["lateness_ns"].to_numpy(np.int64).tolist(),
        blame["cause_ns"].to_numpy(np.int64).tolist(),
        before.fillna(0).to_numpy(np.int64).tolist(),
        strict=True,
    ):
        got = sums.get(tuple(key))
        if got is None:
            sums[tuple(key)] = [e, la, c, s]
        else:
            got[0] += e
            got[1] += la
            got[2] += c
            got[3] += s
    keys, vals = list(sums), list(sums.values())
    order = sorted(range(len(keys)), key=lambda i: (-vals[i][0], keys[i][0]))  # stable
    keys, vals = [keys[i] for i in order], [vals[i] for i in order]
    chains = np.empty(len(keys), dtype=object)
    chains[:] = [k[2] for k in keys]
    late = np.array([v[1] for v in vals], dtype=np.int64)
    g = pd.DataFrame(
        {
            "rank": np.array([k[0] for k in keys], dtype=np.int64),
            WAITED_FOR_RANK.name: np.array([k[1] for k in keys], dtype=np.int64),
            "chain": chains,
            "root_rank": np.array([k[3] for k in keys], dtype=np.int64),
            "cause": [k[4] or None for k in keys],
            EXPOSED_WAIT_NS.name: np.array([v[0] for v in vals], dtype=np.int64),
            "lateness_ns": late,
            "cause_ns": np.array([v[2] for v in vals], dtype=np.int64),
            "late_at_start_ns": pd.array(
                [v[3] if k[5] else None for k, v in zip(keys, vals, strict=True)], dtype="Int64"
            ),
        }
    )
    g["explained_ratio"] = [
        (int(v[2]) / int(x)) if x > 0 else None for v, x in zip(vals, late, strict=True)
    ]
    return g.head(limit).reset_index(drop=True)


@dataclass(frozen=True)
class StragglerVerdict:
    """Whether the run has a straggler (diagnosis.md §14): ``rank`` is named only when the
    exposed waiting that traces back to it (its blame chains' roots) is at least ``min_ratio`` of
    the run's step time and it is the late rank of most of the steps whose waiting is material;
    ``moving``: when that late rank changes from step to step, per rank the steps it led (then
    ``rank`` is None); ``wait_ratio``: the run's exposed waiting over its step time; ``rank_ratio``:
    the top root rank's share of step time."""

    rank: int | None
    wait_ratio: float | None
    rank_ratio: float | None
    min_ratio: float
    moving: tuple[tuple[int, tuple[str, ...]], ...] = ()

    @property
    def rank_named(self) -> bool:
        return self.rank is not None

    def text(self) -> str:
        """``straggler: rank 2 (waiting for it is 37.4% of step time)``, ``the late rank moves:
        3 in steps 2, 4; 5 in steps 3, 5``, or ``no straggler: waiting is 3.0% of step time``."""
        if self.moving:
            return "the late rank moves: " + "; ".join(
                f"{r} in step{'s' if len(s) > 1 else ''} {', '.join(s)}" for r, s in self.moving
            )
        if self.rank is not None:
            return f"straggler: rank {self.rank} (waiting for it is {pct(self.rank_ratio)} of step time)"
        if self.wait_ratio is not None and self.wait_ratio >= self.min_ratio:
            return (
                f"no straggler: waiting is {pct(self.wait_ratio)} of step time, spread over "
                f"ranks (none causes {pct(self.min_ratio)})"
            )
        return (
            f"no straggler: waiting is {pct(self.wait_ratio)} of step time (below "
            f"{pct(self.min_ratio)})"
        )


#: diagnosis.md §14: the late rank is "stable" when it leads at least this share of the steps
#: whose waiting is material; else it moves.
STABLE_SHARE = 2 / 3
#: ... or when it leads at least half of them and the waiting that traces back to it is at least
#: this many times the next rank's: one rank clearly late, the other steps' leaders noise (a loaded
#: host's jitter picks a different late rank in a step or two)
STABLE_DOMINANCE = 2.0


def straggler_verdict(
    blame: pd.DataFrame, steps: pd.DataFrame, min_ratio: float
) -> StragglerVerdict | None:
    """The run's :class:`StragglerVerdict` from the blame rows (``window``, ``step``,
    ``root_rank``, ``exposed_wait_ns``) and the step rows (``step``, ``step_ns``,
    ``exposed_wait_ns``), None without steps. Per step label, the late rank is the root with the
    most exposed waiting in it; a step counts when its waiting is at least ``min_ratio`` of its
    time (summed over ranks). The late rank moves when no rank leads :data:`STABLE_SHARE` of the
    steps that count (and two or more lead some), unless the rank with the most waiting leads
    half of them and causes :data:`STABLE_DOMINANCE` times the next rank's waiting. The rank
    named is the one that passed that test: the stable leader, else the dominant rank."""
    if steps.empty:
        return None
    step_ns = int(steps["step_ns"].sum())
    wait_ns = int(steps[EXPOSED_WAIT_NS.name].sum())
    wait_ratio = wait_ns / step_ns if step_ns > 0 else None
    if blame.empty or step_ns <= 0:
        return StragglerVerdict(None, wait_ratio, None, min_ratio)
    roots = blame.groupby("root_rank")[EXPOSED_WAIT_NS.name].sum().sort_values(ascending=False)
    top, top_ns = int(roots.index[0]), int(roots.iloc[0])
    rank_ratio = top_ns / step_ns
    if rank_ratio < min_ratio:
        return StragglerVerdict(None, wait_ratio, rank_ratio, min_ratio)
    label = steps["step"].astype(str)
    per_step_ns = steps.groupby(label)["step_ns"].sum()
    b = blame.assign(step=blame["step"].astype(str))
    by = b.groupby(["step", "root_rank"])[EXPOSED_WAIT_NS.name].sum().reset_index()
    by = by.sort_values(["step", EXPOSED_WAIT_NS.name, "root_rank"], ascending=[True, False, True])
    lead = by.drop_duplicates("step")
    in_step = b.groupby("step")[EXPOSED_WAIT_NS.name].sum()
    material = [
        (str(s), int(r))
        for s, r in zip(lead["step"], lead["root_rank"], strict=True)
        if int(per_step_ns.get(s, 0)) > 0
        and int(in_step.get(s, 0)) >= min_ratio * int(per_step_ns.get(s, 0))
    ]
    leaders: dict[int, list[str]] = {}
    for s, r in sorted(material, key=lambda x: _step_key(x[0])):
        leaders.setdefault(r, []).append(s)
    if not leaders:  # no step's waiting is material on its own: the run's total decides
        return StragglerVerdict(top, wait_ratio, rank_ratio, min_ratio)
    # the rank that leads the most steps that count (ties: the most waiting); it is named when it
    # leads STABLE_SHARE of them, the rank with the most waiting when it dominates (half of the
    # steps and STABLE_DOMINANCE times the next rank's waiting); else the late rank moves
    best = max(leaders, key=lambda r: (len(leaders[r]), int(roots.get(r, 0))))
    second_ns = int(roots.iloc[1]) if len(roots) > 1 else 0
    dominant = (
        2 * len(leaders.get(top, ())) >= len(material) and top_ns >= STABLE_DOMINANCE * second_ns
    )
    if len(leaders[best]) >= STABLE_SHARE * len(material) and not dominant:
        best_ratio = int(roots.get(best, 0)) / step_ns
        if best_ratio >= min_ratio:
            return StragglerVerdict(best, wait_ratio, best_ratio, min_ratio)
    if len(leaders) >= 2 and not dominant:
        moving = tuple(
            (r, tuple(s)) for r, s in sorted(leaders.items(), key=lambda x: _step_key(x[1][0]))
        )
        return StragglerVerdict(None, wait_ratio, rank_ratio, min_ratio, moving)
    return StragglerVerdict(top, wait_ratio, rank_ratio, min_ratio)


def _step_key(label: str) -> tuple[int, str]:
    """Step labels in step order: by their number when they carry one."""
    digits = "".join(ch for ch in label.split("#")[0] if ch.isdigit())
    return (int(digits) if digits else 1 << 62, label)
