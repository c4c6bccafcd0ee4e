"""The blame ranges' fast paths (issue 40, round 3) against the numpy / pandas / Python code they
replace: the same answer to the bit on random inputs, or an output would move."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from traceoverlap.core import intervals as iv
from traceoverlap.core.model import column_plan, make_events, take_rows
from traceoverlap.core.schema import WAIT_NS, WAITED_FOR_RANK
from traceoverlap.rank.hostranges import (
    COMM_CALLS,
    HOST_RANGE_COLUMNS,
    KERNEL_MARK,
    _frame,
    _unique_inverse,
)
from traceoverlap.run.job import (
    _Arrivals,
    _factorize,
    _labels,
    _Ranges,
    _sum_by_pair,
    waited_for_ranks,
)

#: Names as the blame ranges carry them: kernels (KERNEL_MARK first), ranges, the calls' row,
#: texts that only look like the mark, the empty text.
TEXTS = st.one_of(
    st.sampled_from([f"{KERNEL_MARK}k (call 1 in the step)", "fwd", COMM_CALLS, "", KERNEL_MARK]),
    st.text(alphabet=st.sampled_from(["a", KERNEL_MARK, "\x00", "é", "\U0001f600"]), max_size=4),
)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 50), st.data())
def test_unique_inverse_is_np_unique(bound, data):
    keys = np.asarray(data.draw(st.lists(st.integers(0, bound - 1), max_size=40)), dtype=np.int64)
    # the table (a bound near the keys' count) and, past it, numpy's sort
    for b in (bound, bound + 4 * keys.size + 65_537):
        uniq, inv = _unique_inverse(keys, b)
        want_uniq, want_inv = np.unique(keys, return_inverse=True)
        assert uniq.tolist() == want_uniq.tolist()
        assert inv.tolist() == want_inv.reshape(-1).tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(TEXTS, max_size=12))
def test_frame_is_the_frame_pandas_inferred(names):
    # what host_ranges / kernel_ranges built before: an object array, pandas inferring the dtype
    arr = np.array(names, dtype=object)
    start = np.arange(len(names), dtype=np.int64)
    end = start + 3
    got = _frame(arr, start.copy(), end.copy())
    want = pd.DataFrame(
        {"name": pd.array(arr, dtype=object), "start_ns": start, "end_ns": end},
        columns=list(HOST_RANGE_COLUMNS),
    )
    assert list(got.dtypes) == list(want.dtypes)
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(TEXTS, st.none(), st.integers(0, 2)), max_size=12))
def test_labels_are_str_and_startswith(names):
    arr = np.array(names, dtype=object)
    labels, kernel = _labels(arr)
    # what _Ranges computed before, per name
    assert labels == [str(n) for n in arr]
    assert kernel.dtype == bool
    assert kernel.tolist() == [str(n).startswith(KERNEL_MARK) for n in arr]


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.lists(TEXTS, max_size=12), st.lists(TEXTS, max_size=12, unique=True)))
def test_factorize_every_name_once_is_pandas_factorize(names):
    # unique lists take the shortcut (codes 0..n-1), the others the dict
    arr = np.array(names, dtype=object)
    codes, uniq = _factorize(arr)
    want_codes, want_uniq = pd.factorize(arr)
    assert codes.dtype == np.int64
    assert codes.tolist() == want_codes.tolist()
    assert list(uniq) == list(want_uniq)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", f"{KERNEL_MARK}a", "None"]),
            st.integers(0, 30),
            st.integers(0, 10),
        ),
        max_size=12,
    ),
    st.tuples(st.integers(0, 30), st.integers(0, 30)),
)
def test_encloses_with_its_name_table_kept(ranges, window):
    frame = pd.DataFrame(
        {
            "name": [n for n, _, _ in ranges],
            "start_ns": np.array([s for _, s, _ in ranges], np.int64),
            "end_ns": np.array([s + d for _, s, d in ranges], np.int64),
        }
    )
    r = _Ranges(frame)
    lo, hi = min(window), max(window)
    for outer in ("a", "b", f"{KERNEL_MARK}a", "zz"):
        for inner in ("a", "b", f"{KERNEL_MARK}a"):
            got = r.encloses(outer, inner, lo, hi)
            # the table built per call, as before
            r._at = None
            assert got == r.encloses(outer, inner, lo, hi)
    assert r._at == {str(n): i for i, n in enumerate(r.names)}


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 20), st.data())
def test_take_rows_shares_a_constant_column(n, data):
    # pid the same on every row (one process), seq varying or not: the rows taken are the
    # boolean selection's, a constant column shared (stride 0) instead of copied per row
    seq = np.asarray(data.draw(st.lists(st.integers(-1, 0), min_size=n, max_size=n)), np.int64)
    start = np.arange(n, dtype=np.int64)
    ev = make_events(
        n,
        {
            "pid": np.full(n, 7, np.int64),
            "seq": seq,
            "start_ns": start,
            "end_ns": start + 1,
            "category": np.array(["cpu_op"] * n, dtype=object),
            "name": np.array(["a"] * n, dtype=object),
        },
    )
    keep = np.asarray(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    plan = column_plan(ev)
    got = take_rows(ev, np.flatnonzero(keep), plan)
    want = ev[keep].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert list(got.dtypes) == list(want.dtypes)
    if got.shape[0] > 1:  # (the strides of 0 or 1 rows say nothing)
        assert got["pid"].to_numpy().strides == (0,)
        assert (got["seq"].to_numpy().strides == (0,)) == bool((seq == seq[0]).all())


def _sum_by_pair_pandas(w, r, ns):
    """credit_segments' tail as it was: a DataFrame, its rows with ns > 0 grouped."""
    df = pd.DataFrame({"w": w, "r": r, "ns": ns})
    df = df[df["ns"] > 0].groupby(["w", "r"], sort=True)["ns"].sum().reset_index()
    return df["w"].to_numpy(np.int64), df["r"].to_numpy(np.int64), df["ns"].to_numpy(np.int64)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(-2, 9)), max_size=30))
def test_sum_by_pair_is_the_groupby(rows):
    w, r, ns = (np.array([x[i] for x in rows], dtype=np.int64) for i in range(3))
    got = _sum_by_pair(w, r, ns)
    want = _sum_by_pair_pandas(w, r, ns)
    for g, x in zip(got, want, strict=True):
        assert g.dtype == np.int64
        assert g.tolist() == x.tolist()


def _waited_for_ranks_pandas(key, unit_rank, aligned_start, wait_ns, peer):
    """waited_for_ranks as it was: a groupby transform, a sort, cumcount and two reindexes."""
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


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 4),  # instance key
            st.integers(0, 3),  # rank
            st.sampled_from([0, 5, 9, -(2**63), 2**63 - 1]),  # aligned start, ties and extremes
            st.integers(0, 2),  # wait ns
            st.integers(-1, 3),  # peer
        ),
        max_size=25,
    )
)
def test_waited_for_ranks_is_the_pandas_chain(rows):
    cols = [np.array([x[i] for x in rows], dtype=np.int64) for i in range(5)]
    got = waited_for_ranks(*cols)
    want = _waited_for_ranks_pandas(*cols)
    for g, x in zip(got, want, strict=True):
        assert g.dtype == np.int64
        assert g.tolist() == x.tolist()


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),  # matched
            st.integers(0, 20),  # aligned start
            st.integers(0, 5),  # duration
            st.integers(0, 3),  # instance
            st.integers(0, 2),  # rank (= unit)
            st.integers(0, 1),  # window
            st.integers(0, 3),  # wait ns
            st.one_of(st.none(), st.integers(0, 2)),  # rank waited for
        ),
        max_size=15,
    )
)
def test_arrivals_read_the_matched_rows_of_each_column(rows):
    # _Arrivals reads the matched rows column by column; it read them from a copy of the frame's
    # matched rows before: on that copy (every row matched) both readings are the same
    frame = pd.DataFrame(
        {
            "matched": np.array([r[0] for r in rows], dtype=bool),
            "aligned_start_ns": np.array([r[1] for r in rows], dtype=np.int64),
            "aligned_end_ns": np.array([r[1] + r[2] for r in rows], dtype=np.int64),
            "instance": np.array([r[3] for r in rows], dtype=np.int64),
            "rank": np.array([r[4] for r in rows], dtype=np.int64),
            "unit": np.array([r[4] for r in rows], dtype=np.int64),
            "window": np.array([r[5] for r in rows], dtype=np.int64),
            WAIT_NS.name: np.array([r[6] for r in rows], dtype=np.int64),
            WAITED_FOR_RANK.name: np.array(
                [np.nan if r[7] is None else r[7] for r in rows], dtype=np.float64
            ),
        }
    )
    window_start = np.array([0, 10], dtype=np.int64)
    offsets = {0: 0, 1: 3, 2: -2}
    got = _Arrivals(frame, window_start, offsets)
    want = _Arrivals(frame[frame["matched"]].reset_index(drop=True), window_start, offsets)
    for name in vars(want):
        g, w = getattr(got, name), getattr(want, name)
        assert np.array_equal(g, w), name
        assert np.asarray(g).dtype == np.asarray(w).dtype, name


def _union_before(starts, ends):
    """iv.union as it was: every interval kept copied, every set sorted."""
    s, e = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_max = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    np.greater(s[1:], run_max[:-1], out=new[1:])
    first = np.flatnonzero(new)
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = s.size - 1
    return s[first], run_max[last]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(-3, 8)), max_size=20), st.booleans())
def test_union_is_as_before(spans, in_order):
    # in start order (the shortcut) or not, with empty and reversed intervals among them
    if in_order:
        spans = sorted(spans, key=lambda x: x[0])
    s = np.array([a for a, _ in spans], dtype=np.int64)
    e = np.array([a + d for a, d in spans], dtype=np.int64)
    got = iv.union(s, e)
    want = _union_before(s, e)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.int64
        assert g.tolist() == w.tolist()
        assert not np.shares_memory(g, s) and not np.shares_memory(g, e)
