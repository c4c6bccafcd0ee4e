"""Interval algebra on integer-nanosecond half-open intervals ``[start, end)``, vectorised.

Everything here takes and returns numpy ``int64`` arrays; nothing loops over intervals in Python.
An *interval set* is a pair ``(starts, ends)`` of equal-length arrays. A *disjoint* set is sorted
by start with no two intervals overlapping or touching (what :func:`union` returns).

Grouped variants work on many independent sets at once (one per (rank, step, kind)): each row
carries a group id, and groups never interact.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
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
    s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
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


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two *disjoint sorted* sets, as a disjoint sorted set."""
    a_s, a_e = _as_i64(a[0]), _as_i64(a[1])
    b_s, b_e = _as_i64(b[0]), _as_i64(b[1])
    if a_s.size == 0 or b_s.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # b intervals that can overlap a[i]: those ending after a_s[i] and starting before a_e[i]
    lo = np.searchsorted(b_e, a_s, side="right")
    hi = np.searchsorted(b_s, a_e, side="left")
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ai = np.repeat(np.arange(a_s.size), counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    bi = np.repeat(lo, counts) + offsets
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
# its own slot of width `span`, so a single vectorised union/intersection handles all of them and
# intervals from different groups can never touch.


def _packing(
    groups: IntArray, starts: IntArray, ends: IntArray, n_groups: int
) -> tuple[IntArray, int]:
    """Per-group origin and a slot width so that ``g * span + (t - origin[g])`` keeps groups apart."""
    origin = np.full(n_groups, _I64_MAX, dtype=np.int64)
    np.minimum.at(origin, groups, starts)
    origin[origin == _I64_MAX] = 0
    if starts.size == 0:
        return origin, 1
    span = int((ends - origin[groups]).max()) + 2
    if span * n_groups >= 2**62:
        raise OverflowError("interval groups too wide to pack on one int64 axis")
    return origin, span


def grouped_union(
    groups: npt.ArrayLike, starts: npt.ArrayLike, ends: npt.ArrayLike, n_groups: int | None = None
) -> tuple[IntArray, IntArray, IntArray]:
    """Union within each group. Returns ``(group, start, end)`` sorted by group then start."""
    g = _as_i64(groups)
    s = _as_i64(starts)
    e = _as_i64(ends)
    if g.size == 0:
        z = np.zeros(0, np.int64)
        return z, z.copy(), z.copy()
    ng = int(g.max()) + 1 if n_groups is None else n_groups
    origin, span = _packing(g, s, e, ng)
    base = g * span - origin[g]
    us, ue = union(s + base, e + base)
    ug = us // span
    ubase = ug * span - origin[ug]
    return ug, us - ubase, ue - ubase


def grouped_measure(groups: IntArray, starts: IntArray, ends: IntArray, n_groups: int) -> IntArray:
    """Length covered within each group, as an array of ``n_groups`` totals (0 where empty)."""
    ug, us, ue = grouped_union(groups, starts, ends, n_groups)
    return np.bincount(ug, weights=(ue - us), minlength=n_groups).astype(np.int64)


GroupedIntervals = tuple[IntArray, IntArray, IntArray]


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
    origin, span = _packing(allg, np.concatenate((a_s, b_s)), np.concatenate((a_e, b_e)), n_groups)
    abase = ag * span - origin[ag]
    bbase = bg * span - origin[bg]
    s, e = op((a_s + abase, a_e + abase), (b_s + bbase, b_e + bbase))
    g = s // span
    base = g * span - origin[g]
    return g, s - base, e - base


def grouped_intersect(a: GroupedIntervals, b: GroupedIntervals, n_groups: int) -> GroupedIntervals:
    """Intersection, group by group, of two grouped *disjoint* sets (as from grouped_union)."""
    return _grouped_binary(intersect, a, b, n_groups)


def grouped_subtract(a: GroupedIntervals, b: GroupedIntervals, n_groups: int) -> GroupedIntervals:
    """``a`` minus ``b``, group by group, for grouped *disjoint* sets."""
    return _grouped_binary(subtract, a, b, n_groups)
