"""Interval algebra: hand cases and properties (hypothesis)."""

import numpy as np
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from traceoverlap.core import intervals as iv


def test_union_merges_overlapping_and_touching():
    # [0,5) [3,8) overlap -> [0,8); [8,10) touches -> [0,10); [12,13) apart; empty [20,20) vanishes
    s, e = iv.union([3, 0, 8, 12, 20], [8, 5, 10, 13, 20])
    assert s.tolist() == [0, 12] and e.tolist() == [10, 13]
    assert iv.measure([3, 0, 8, 12], [8, 5, 10, 13]) == 11


def test_range_pairs_by_hand():
    # ranges [2,4) [0,0) [5,6) [3,1): i=0 gives j 2,3; i=1 and i=3 are empty; i=2 gives j 5
    i, j = iv.range_pairs(np.array([2, 0, 5, 3]), np.array([4, 0, 6, 1]))
    assert i.tolist() == [0, 0, 2] and j.tolist() == [2, 3, 5]
    i, j = iv.range_pairs(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert i.size == 0 and j.size == 0


def test_group_min_max_by_hand():
    # groups 2, 0, 2, 0 (unsorted) of 4 groups: group 0 has lo 5, 1 -> 1 and hi 7, 9 -> 9; group
    # 2 has lo 3, 8 -> 3 and hi 4, 10 -> 10; groups 1 and 3 have no row: int64 max / min
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    g = np.array([2, 0, 2, 0])
    lo, hi = iv.group_min_max(g, np.array([3, 5, 8, 1]), np.array([4, 7, 10, 9]), 4)
    assert lo.tolist() == [1, big, 3, big] and hi.tolist() == [9, small, 10, small]
    lo, hi = iv.group_min_max(
        np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), 2
    )
    assert lo.tolist() == [big, big] and hi.tolist() == [small, small]


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(-50, 50), st.integers(-50, 50)), max_size=30),
    st.booleans(),
)
def test_group_min_max_equals_ufunc_at(rows: list, many: bool) -> None:
    # what it replaces: np.minimum.at / np.maximum.at into int64 max / min (many groups: the
    # path for group ids beyond 16 bits)
    n = 40000 if many else 6
    g = np.array([r[0] * (n // 6) for r in rows], dtype=np.int64)
    a = np.array([r[1] for r in rows], dtype=np.int64)
    b = np.array([r[2] for r in rows], dtype=np.int64)
    lo = np.full(n, np.iinfo(np.int64).max)
    hi = np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(lo, g, a)
    np.maximum.at(hi, g, b)
    got_lo, got_hi = iv.group_min_max(g, a, b, n)
    assert got_lo.tolist() == lo.tolist() and got_hi.tolist() == hi.tolist()


def test_intersect_and_subtract_by_hand():
    a = iv.union([0, 10], [6, 20])  # [0,6) [10,20)
    b = iv.union([4, 12, 18], [11, 14, 30])  # [4,11) [12,14) [18,30)
    s, e = iv.intersect(a, b)
    # [4,6) [10,11) [12,14) [18,20)
    assert list(zip(s.tolist(), e.tolist())) == [(4, 6), (10, 11), (12, 14), (18, 20)]
    s, e = iv.subtract(a, b)
    # a minus b: [0,4) [11,12) [14,18)
    assert list(zip(s.tolist(), e.tolist())) == [(0, 4), (11, 12), (14, 18)]


def test_grouped_ops_keep_groups_apart():
    # group 0: [0,10) ; group 1: [0,10) -- same times, must not merge across groups
    g, s, e = iv.grouped_union([0, 1, 1], [0, 0, 5], [10, 4, 10])
    assert g.tolist() == [0, 1, 1] and s.tolist() == [0, 0, 5] and e.tolist() == [10, 4, 10]
    a = iv.grouped_union([0, 1], [0, 0], [10, 10])
    b = iv.grouped_union([1], [5], [20])
    gi, si, ei = iv.grouped_intersect(a, b, 2)
    assert gi.tolist() == [1] and si.tolist() == [5] and ei.tolist() == [10]
    gs, ss, es = iv.grouped_subtract(a, b, 2)
    assert list(zip(gs.tolist(), ss.tolist(), es.tolist())) == [(0, 0, 10), (1, 0, 5)]


intervals_st = st.lists(
    st.tuples(st.integers(-1000, 1000), st.integers(0, 300)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=30,
)


def _arr(xs):
    return np.array([x[0] for x in xs], np.int64), np.array([x[1] for x in xs], np.int64)


def _brute_cover(xs):
    return {t for s, e in xs for t in range(s, e)}


@settings(max_examples=examples(200), deadline=None)
@given(intervals_st, intervals_st)
def test_properties(xs, ys):
    a = iv.union(*_arr(xs))
    b = iv.union(*_arr(ys))
    # union is idempotent and matches a brute-force cover
    a2 = iv.union(*a)
    assert a2[0].tolist() == a[0].tolist() and a2[1].tolist() == a[1].tolist()
    assert iv.measure(*a) == len(_brute_cover(xs))
    inter = iv.intersect(a, b)
    overlap = int((inter[1] - inter[0]).sum())
    assert overlap == len(_brute_cover(xs) & _brute_cover(ys))
    # overlap <= min(compute, comm); exposed + overlap = comm
    comm, comp = iv.measure(*a), iv.measure(*b)
    assert overlap <= min(comm, comp)
    exp = iv.subtract(a, b)
    assert int((exp[1] - exp[0]).sum()) + overlap == comm


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 500), st.integers(0, 100)), max_size=40)
)
def test_grouped_measure_matches_per_group(rows):
    g = np.array([r[0] for r in rows], np.int64)
    s = np.array([r[1] for r in rows], np.int64)
    e = s + np.array([r[2] for r in rows], np.int64)
    got = iv.grouped_measure(g, s, e, 4)
    for k in range(4):
        assert got[k] == iv.measure(s[g == k], e[g == k])


# grouped sets: any group layout, empty and inverted intervals, groups far apart on the axis
_grouped_rows = st.lists(
    st.tuples(
        st.integers(0, 4),
        st.one_of(st.integers(-50, 300), st.integers(10**17, 10**17 + 300)),
        st.integers(-30, 120),  # a negative length: an empty (inverted) interval
    ),
    max_size=40,
)


def _split(rows: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = np.array([r[0] for r in rows], np.int64)
    s = np.array([r[1] for r in rows], np.int64)
    return g, s, s + np.array([r[2] for r in rows], np.int64)


def _per_group(ops: tuple[np.ndarray, np.ndarray, np.ndarray], k: int) -> list[tuple[int, int]]:
    g, s, e = ops
    return list(zip(s[g == k].tolist(), e[g == k].tolist(), strict=True))


@settings(max_examples=examples(300), deadline=None)
@given(_grouped_rows, _grouped_rows)
def test_grouped_ops_equal_per_group_ops(xs: list, ys: list) -> None:
    # an empty interval in one group once shifted another group's slot (issue 11's fuzzing found
    # a collective's wait part lost that way); one far-away group must not overflow the packing
    a = iv.grouped_union(*_split(xs), 5)
    b = iv.grouped_union(*_split(ys), 5)
    inter = iv.grouped_intersect(a, b, 5)
    sub = iv.grouped_subtract(a, b, 5)
    for k in range(5):
        ga, gb = _split(xs), _split(ys)
        ua = iv.union(ga[1][ga[0] == k], ga[2][ga[0] == k])
        ub = iv.union(gb[1][gb[0] == k], gb[2][gb[0] == k])
        assert _per_group(a, k) == list(zip(ua[0].tolist(), ua[1].tolist(), strict=True))
        want_i = iv.intersect(ua, ub)
        assert _per_group(inter, k) == list(zip(*[x.tolist() for x in want_i], strict=True))
        want_s = iv.subtract(ua, ub)
        assert _per_group(sub, k) == list(zip(*[x.tolist() for x in want_s], strict=True))
        # covered length of every interval of ys by a, against the per-group intersection
        qg, qs, qe = _split(ys)
        m = qg == k
        cov = iv.grouped_covered(a, qg[m], qs[m], qe[m], 5)
        for q, (s0, e0) in enumerate(zip(qs[m].tolist(), qe[m].tolist(), strict=True)):
            inside = iv.intersect(ua, iv.union([s0], [e0]))
            assert cov[q] == int((inside[1] - inside[0]).sum())


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(-3, 40), max_size=40), st.booleans())
def test_unique_inverse_equals_np_unique(xs: list, wide: bool) -> None:
    # small non-negative keys take the presence table; a negative or huge key, np.unique
    a = np.array(xs, dtype=np.int64) * (1 << 30 if wide else 1)
    u, inv = iv.unique_inverse(a)
    want_u, want_inv = np.unique(a, return_inverse=True)
    assert u.tolist() == want_u.tolist() and inv.tolist() == want_inv.tolist()
    assert u.dtype == np.int64 and inv.dtype == np.int64
