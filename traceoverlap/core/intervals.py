"""Interval algebra on integer-nanosecond half-open intervals ``[start, end)``, vectorised.

Everything here takes and returns numpy ``int64`` arrays; nothing loops over intervals in Python.
An *interval set* is a pair ``(starts, ends)`` of equal-length arrays. A *disjoint* set is sorted
by start with no two intervals overlapping or touching (what :func:`union` returns).

Grouped variants work on many independent sets at once (one per (rank, step, kind)): each row
carries a group id, and groups never interact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
_Int = TypeVar("_Int", bound=np.integer)
Intervals = tuple[IntArray, IntArray]

_I64_MIN = np.iinfo(np.int64).min
_I64_MAX = np.iinfo(np.int64).max


def _as_i64(a: npt.ArrayLike) -> IntArray:
    return np.asarray(a, dtype=np.int64)


def union(starts: npt.ArrayLike, ends: npt.ArrayLike) -> Intervals:
    """Merge any intervals into a disjoint sorted set; empty intervals (end <= start) vanish."""
    s = _as_i64(starts)
    e = _as_i64(ends)
    keep = e > s
    if s.size == 0:
        return s[keep], e[keep]
    if not keep.all():  # (copies of ~1 MB cost page faults: none when nothing is dropped)
        s, e = s[keep], e[keep]
        if s.size == 0:
            return s, e
    if not (s[1:] >= s[:-1]).all():  # else already in order (kernels, calls, a lane's ops)
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    run_max = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    # an interval opens a new block when it starts after everything before it has ended
    np.greater(s[1:], run_max[:-1], out=new[1:])
    first = np.flatnonzero(new)
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = s.size - 1
    return s[first], run_max[last]


def measure(starts: npt.ArrayLike, ends: npt.ArrayLike) -> int:
    """Total length covered by the intervals (overlaps counted once)."""
    s, e = union(starts, ends)
    return int((e - s).sum())


def range_pairs(lo: IntArray, hi: IntArray) -> tuple[IntArray, IntArray]:
    """Every pair ``(i, j)`` with ``lo[i] <= j < hi[i]`` (empty ranges give none), ordered by
    ``i`` then ``j``: the candidate pairs of a sorted range join, without a Python loop."""
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    i = np.repeat(np.arange(lo.size, dtype=np.int64), counts)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return i, np.repeat(lo, counts).astype(np.int64) + offsets


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two *disjoint sorted* sets, as a disjoint sorted set."""
    a_s, a_e = _as_i64(a[0]), _as_i64(a[1])
    b_s, b_e = _as_i64(b[0]), _as_i64(b[1])
    if a_s.size == 0 or b_s.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # b intervals that can overlap a[i]: those ending after a_s[i] and starting before a_e[i]
    lo = np.searchsorted(b_e, a_s, side="right")
    hi = np.searchsorted(b_s, a_e, side="left")
    ai, bi = range_pairs(lo, hi)
    s = np.maximum(a_s[ai], b_s[bi])
    e = np.minimum(a_e[ai], b_e[bi])
    keep = e > s
    return s[keep], e[keep]


def complement(a: Intervals, lo: int = int(_I64_MIN), hi: int = int(_I64_MAX)) -> Intervals:
    """Gaps of a *disjoint sorted* set within ``[lo, hi)``."""
    a_s, a_e = _as_i64(a[0]), _as_i64(a[1])
    starts = np.concatenate(([lo], a_e))
    ends = np.concatenate((a_s, [hi]))
    starts = np.maximum(starts, lo)
    ends = np.minimum(ends, hi)
    keep = ends > starts
    return starts[keep], ends[keep]


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """``a`` minus ``b`` for *disjoint sorted* sets (e.g. exposed comm = comm minus compute)."""
    a_s = _as_i64(a[0])
    if a_s.size == 0:
        return a_s, _as_i64(a[1])
    return intersect(a, complement(b))


def clip(starts: npt.ArrayLike, ends: npt.ArrayLike, lo: int, hi: int) -> Intervals:
    """Clip intervals to ``[lo, hi)``; intervals left empty are dropped."""
    s = np.maximum(_as_i64(starts), lo)
    e = np.minimum(_as_i64(ends), hi)
    keep = e > s
    return s[keep], e[keep]


# --- grouped operations -------------------------------------------------------------------
#
# Many independent interval sets (one per group id) are laid end to end on one axis, each group in
# its own slot as wide as the group's own extent, so a single vectorised union/intersection handles
# all of them and intervals from different groups can never touch. Slots are packed by cumulative
# width: one far-away timestamp widens only its own group's slot. When the groups together are
# wider than the int64 axis allows, they are processed in consecutive batches that fit.

GroupedIntervals = tuple[IntArray, IntArray, IntArray]
_AXIS = 2**62


def group_min_max(
    groups: IntArray, lo_values: IntArray, hi_values: IntArray, n_groups: int
) -> tuple[IntArray, IntArray]:
    """Per group ``0..n_groups-1``: the least of ``lo_values`` and the greatest of ``hi_values``
    of its rows (int64 max / min for a group without rows); ``groups`` non-negative.

    ``np.minimum.at`` / ``np.maximum.at`` cost ~50 ns per row. Rows come in runs of one group
    (a window's activities; two sorted sets one after the other): each run is reduced at C
    speed (``reduceat``) and only the runs' results, a few hundred, go through ``.at``."""
    lo = np.full(n_groups, _I64_MAX, dtype=np.int64)
    hi = np.full(n_groups, _I64_MIN, dtype=np.int64)
    if groups.size == 0:
        return lo, hi
    new = np.ones(groups.size, dtype=bool)
    np.not_equal(groups[1:], groups[:-1], out=new[1:])
    first = np.flatnonzero(new)
    g = groups[first]
    run_lo = np.minimum.reduceat(lo_values, first)
    run_hi = np.maximum.reduceat(hi_values, first)
    if (g[1:] > g[:-1]).all():  # sorted: one run per group
        lo[g] = run_lo
        hi[g] = run_hi
    else:
        np.minimum.at(lo, g, run_lo)
        np.maximum.at(hi, g, run_hi)
    return lo, hi


def unique_values(values: npt.NDArray[_Int]) -> npt.NDArray[_Int]:
    """``np.unique(values)`` of integers (sorted, distinct, same dtype), by a sort: numpy 2's
    plain ``np.unique`` hashes first, ~15x a sort on many distinct values (a unit's 57 000 host
    starts: 9 ms against 0.6 ms) and ~4x on a few (lane or device codes of every row)."""
    s = np.sort(values, axis=None)
    keep = np.empty(s.size, dtype=bool)
    keep[:1] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def unique_inverse(values: IntArray) -> tuple[IntArray, IntArray]:
    """``np.unique(values, return_inverse=True)`` for non-negative keys of a small range (a
    window times a lane): by a presence table instead of a sort, the same answer."""
    if values.size == 0 or values.min() < 0 or values.max() >= 1 << 22:
        u, inv = np.unique(values, return_inverse=True)
        return u, inv.astype(np.int64)
    present = np.bincount(values, minlength=1) > 0
    u = np.flatnonzero(present)
    lut = np.zeros(present.size, dtype=np.int64)
    lut[u] = np.arange(u.size, dtype=np.int64)
    return u.astype(values.dtype), lut[values]


def _widths(
    groups: IntArray, starts: IntArray, ends: IntArray, n_groups: int
) -> tuple[IntArray, IntArray, npt.NDArray[np.float64]]:
    """Per group: origin (earliest start), top (latest end) and slot width as floats (an int64
    subtraction could itself overflow on absurd inputs)."""
    origin, top = group_min_max(groups, starts, ends, n_groups)
    used = origin != _I64_MAX
    origin[~used] = 0
    top[~used] = 0
    top = np.maximum(top, origin)  # a group of empty queries still gets a slot of width 1
    width = np.where(used, top.astype(np.float64) - origin.astype(np.float64), 0.0) + 1.0
    return origin, top, width


def _slots(
    groups: IntArray, starts: IntArray, ends: IntArray, n_groups: int
) -> tuple[IntArray, IntArray]:
    """Per group: origin (its earliest start) and base (where its slot begins on the axis), so
    that ``t -> base[g] + (t - origin[g])`` keeps groups apart. Raises OverflowError when the
    slots do not fit on one axis (the callers then split the groups into batches)."""
    origin, top, width = _widths(groups, starts, ends, n_groups)
    if float(width.sum()) >= _AXIS:
        raise OverflowError("interval groups too wide to pack on one int64 axis")
    w = top - origin + 1
    base = np.concatenate(([0], np.cumsum(w)[:-1])).astype(np.int64)
    return origin, base


def _batches(
    groups: IntArray, starts: IntArray, ends: IntArray, n_groups: int
) -> list[tuple[int, int]]:
    """Consecutive group ranges [lo, hi) whose slots fit on one axis."""
    width = _widths(groups, starts, ends, n_groups)[2]
    out: list[tuple[int, int]] = []
    lo, acc = 0, 0.0
    for g, w in enumerate(width.tolist()):
        if w >= _AXIS:
            raise OverflowError(
                f"one interval group spans {w:.3g} ns, beyond what int64 nanoseconds can hold"
            )
        if acc + w >= _AXIS:
            out.append((lo, g))
            lo, acc = g, 0.0
        acc += w
    out.append((lo, n_groups))
    return out


def _in_batches(
    op: Callable[..., GroupedIntervals],
    sets: list[GroupedIntervals],
    n_groups: int,
) -> GroupedIntervals:
    allg = np.concatenate([x[0] for x in sets])
    alls = np.concatenate([x[1] for x in sets])
    alle = np.concatenate([x[2] for x in sets])
    parts = []
    for lo, hi in _batches(allg, alls, alle, n_groups):
        sub = []
        for g, s, e in sets:
            m = (g >= lo) & (g < hi)
            sub.append((g[m] - lo, s[m], e[m]))
        rg, rs, re_ = op(*sub, hi - lo)
        parts.append((rg + lo, rs, re_))
    return (
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
    )


def grouped_union(
    groups: npt.ArrayLike, starts: npt.ArrayLike, ends: npt.ArrayLike, n_groups: int | None = None
) -> GroupedIntervals:
    """Union within each group. Returns ``(group, start, end)`` sorted by group then start."""
    g = _as_i64(groups)
    s = _as_i64(starts)
    e = _as_i64(ends)
    ng = int(g.max()) + 1 if n_groups is None and g.size else (n_groups or 0)
    keep = e > s  # empty intervals vanish (and must not shape the packing)
    if not keep.all():
        g, s, e = g[keep], s[keep], e[keep]
    if g.size == 0:
        z = np.zeros(0, np.int64)
        return z, z.copy(), z.copy()
    try:
        origin, base = _slots(g, s, e, ng)
    except OverflowError:
        return _in_batches(lambda a, n: grouped_union(a[0], a[1], a[2], n), [(g, s, e)], ng)
    shift = base[g] - origin[g]
    us, ue = union(s + shift, e + shift)
    ug = np.searchsorted(base, us, side="right") - 1
    ushift = base[ug] - origin[ug]
    return ug.astype(np.int64), us - ushift, ue - ushift


def grouped_length(s: GroupedIntervals, n_groups: int) -> IntArray:
    """Total length of each group of a grouped *disjoint* set, as ``n_groups`` totals."""
    g, a, b = s
    return np.bincount(g, weights=(b - a), minlength=n_groups).astype(np.int64)


def grouped_measure(groups: IntArray, starts: IntArray, ends: IntArray, n_groups: int) -> IntArray:
    """Length covered within each group, as an array of ``n_groups`` totals (0 where empty)."""
    return grouped_length(grouped_union(groups, starts, ends, n_groups), n_groups)


def _grouped_binary(
    op: Callable[[Intervals, Intervals], Intervals],
    a: GroupedIntervals,
    b: GroupedIntervals,
    n_groups: int,
) -> GroupedIntervals:
    """Apply a set operation group by group: pack both sets on one axis, operate, unpack."""
    ag, a_s, a_e = (_as_i64(x) for x in a)
    bg, b_s, b_e = (_as_i64(x) for x in b)
    if ag.size == 0:
        z = np.zeros(0, np.int64)
        return z, z.copy(), z.copy()
    allg = np.concatenate((ag, bg))
    try:
        origin, base = _slots(
            allg, np.concatenate((a_s, b_s)), np.concatenate((a_e, b_e)), n_groups
        )
    except OverflowError:
        return _in_batches(
            lambda x, y, n: _grouped_binary(op, x, y, n), [(ag, a_s, a_e), (bg, b_s, b_e)], n_groups
        )
    ash = base[ag] - origin[ag]
    bsh = base[bg] - origin[bg]
    s, e = op((a_s + ash, a_e + ash), (b_s + bsh, b_e + bsh))
    g = np.searchsorted(base, s, side="right") - 1
    sh = base[g] - origin[g]
    return g.astype(np.int64), s - sh, e - sh


def grouped_intersect(a: GroupedIntervals, b: GroupedIntervals, n_groups: int) -> GroupedIntervals:
    """Intersection, group by group, of two grouped *disjoint* sets (as from grouped_union)."""
    return _grouped_binary(intersect, a, b, n_groups)


def grouped_subtract(a: GroupedIntervals, b: GroupedIntervals, n_groups: int) -> GroupedIntervals:
    """``a`` minus ``b``, group by group, for grouped *disjoint* sets."""
    return _grouped_binary(subtract, a, b, n_groups)


def grouped_covered(
    c: GroupedIntervals, q_group: IntArray, q_start: IntArray, q_end: IntArray, n_groups: int
) -> IntArray:
    """``|[q_start, q_end) ∩ c[q_group]|`` per query, for a grouped *disjoint* set ``c``: the groups
    packed on one axis, a prefix sum of lengths and two binary searches per query."""
    cg, cs, ce = (_as_i64(x) for x in c)
    qg, qs, qe = _as_i64(q_group), _as_i64(q_start), _as_i64(q_end)
    out = np.zeros(qg.size, dtype=np.int64)
    if qg.size == 0 or cg.size == 0:
        return out
    qe = np.maximum(qe, qs)
    allg = np.concatenate((cg, qg))
    try:
        origin, base = _slots(allg, np.concatenate((cs, qs)), np.concatenate((ce, qe)), n_groups)
    except OverflowError:
        for lo, hi in _batches(allg, np.concatenate((cs, qs)), np.concatenate((ce, qe)), n_groups):
            cm = (cg >= lo) & (cg < hi)
            qm = (qg >= lo) & (qg < hi)
            out[qm] = grouped_covered(
                (cg[cm] - lo, cs[cm], ce[cm]), qg[qm] - lo, qs[qm], qe[qm], hi - lo
            )
        return out
    shift = base[cg] - origin[cg]
    ps, pe = cs + shift, ce + shift
    order = np.argsort(ps, kind="stable")
    ps, pe = ps[order], pe[order]
    cum = np.concatenate(([0], np.cumsum(pe - ps)))

    def before(x: IntArray) -> IntArray:
        k = np.searchsorted(ps, x, side="right") - 1
        kk = np.maximum(k, 0)
        part = np.clip(x - ps[kk], 0, pe[kk] - ps[kk])
        return np.where(k >= 0, cum[kk] + part, 0)

    qshift = base[qg] - origin[qg]
    return (before(qe + qshift) - before(qs + qshift)).astype(np.int64)


def next_at_or_after(q_key: IntArray, q_t: IntArray, c_key: IntArray, c_t: IntArray) -> IntArray:
    """Per query: the index (into ``c``) of the candidate with the same key whose time is the
    first at or after the query's time, -1 when none. One sort of queries and candidates
    together by (key, time, query first); no loop over either."""
    qk, qt, ck, ct = (_as_i64(x) for x in (q_key, q_t, c_key, c_t))
    if qk.size and ck.size:
        fast = _next_in_sorted(qk, qt, ck, ct)
        if fast is not None:
            return fast
    return _next_by_sort(qk, qt, ck, ct)


def _next_in_sorted(qk: IntArray, qt: IntArray, ck: IntArray, ct: IntArray) -> IntArray | None:
    """:func:`next_at_or_after` when the candidates are already in (key, time) order (a lane's
    calls by start, as most callers hold them): each key's times are shifted into a slot of
    their own, so that one increasing array answers every query by a binary search instead of
    a sort of queries and candidates together. None when they are not in that order, or the
    slots would not fit in int64."""
    up = ck[1:] > ck[:-1]
    if not (up | ((ck[1:] == ck[:-1]) & (ct[1:] >= ct[:-1]))).all():
        return None
    lo, hi = int(ct.min()), int(ct.max())
    first = np.empty(ck.size, dtype=bool)
    first[:1] = True
    first[1:] = up
    keys = ck[first]
    span = hi - lo + 1
    if lo <= -(2**62) or hi >= 2**62 or span * (keys.size + 1) >= 2**62:
        return None
    slot = np.cumsum(first) - 1
    shifted = (ct - lo) + slot * span
    b = np.searchsorted(keys, qk)
    bb = np.minimum(b, keys.size - 1)
    known = (b < keys.size) & (keys[bb] == qk)
    # a time past the key's last candidate lands on the next key's first (or past the end)
    j = np.searchsorted(shifted, np.clip(qt, lo, hi + 1) - lo + bb * span, side="left")
    jj = np.minimum(j, ck.size - 1)
    ok = known & (j < ck.size) & (ck[jj] == qk)
    return np.where(ok, jj, -1).astype(np.int64)


def _next_by_sort(qk: IntArray, qt: IntArray, ck: IntArray, ct: IntArray) -> IntArray:
    """:func:`next_at_or_after` by one sort of queries and candidates together."""
    n_q = qk.size
    out = np.full(n_q, -1, dtype=np.int64)
    if n_q == 0 or ck.size == 0:
        return out
    keys = np.concatenate((qk, ck))
    times = np.concatenate((qt, ct))
    is_c = np.concatenate((np.zeros(n_q, dtype=bool), np.ones(ck.size, dtype=bool)))
    order = np.lexsort((is_c, times, keys))
    pos = np.where(is_c[order], np.arange(order.size), order.size)
    nxt = np.minimum.accumulate(pos[::-1])[::-1]  # the first candidate slot at or after each
    slot = np.empty(order.size, dtype=np.int64)
    slot[order] = np.arange(order.size)
    p = nxt[slot[:n_q]]
    has = p < order.size
    j = np.maximum(order[np.minimum(p, order.size - 1)] - n_q, 0)
    ok = has & (ck[j] == qk)
    out[ok] = j[ok]
    return out
