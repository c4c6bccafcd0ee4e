"""The rank modules' fast paths (issue 40, round 3) against the pandas code they replace: the
same answer to the bit (values, dtypes, element types) on random inputs, or an output would
move."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from traceoverlap.core.model import per_category
from traceoverlap.core.vocab import collective_kind
from traceoverlap.rank import steps
from traceoverlap.rank.graph import _last_launched_before, unique_pairs
from traceoverlap.rank.instances import instance_frame
from traceoverlap.rank.steps import cat_codes, codes_values

TEXTS = ["", "a", "nccl:all_reduce", "ncclKernel_AllReduce_RING", "gloo:send", "é", "stream 7"]


def _column(data: st.DataObject, n: int) -> pd.Series:
    """A categorical column with missing values and unused categories (as the readers give)."""
    cats = data.draw(st.lists(st.sampled_from(TEXTS[1:]), unique=True, max_size=6))
    vals = data.draw(st.lists(st.sampled_from([*cats, None]), min_size=n, max_size=n))
    return pd.Series(pd.Categorical(vals, categories=cats))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 25), st.data())
def test_codes_values_is_per_category(n, data):
    col = _column(data, n)
    rows = np.asarray(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    idx = np.flatnonzero(rows)
    pick = np.asarray(
        data.draw(st.lists(st.sampled_from(idx.tolist()), max_size=8)) if idx.size else [],
        dtype=np.int64,
    )
    for fn, slack in ((str, 0), (collective_kind, 0), (lambda s: s.upper(), 0), (str, 4096)):
        want = per_category(col, fn, rows)[col.cat.codes.to_numpy()[pick]]
        old = steps.TABLE_SLACK
        steps.TABLE_SLACK = slack  # 0: the sorted path whenever categories outnumber codes 4:1
        try:
            got = codes_values(col, cat_codes(col)[pick], fn)
        finally:
            steps.TABLE_SLACK = old
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tolist() == want.tolist()
        assert [type(x) for x in got] == [type(x) for x in want]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 25), st.data())
def test_cat_codes_is_cat_codes(n, data):
    col = _column(data, n)
    want = col.cat.codes.to_numpy()
    got = cat_codes(col)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.data())
def test_instance_frame_is_dataframe(n, data):
    """The frame built once from numpy columns (text ones given their dtype first) is the one
    ``pd.DataFrame`` infers, column by column, dtypes and index included."""
    texts = st.lists(st.sampled_from(TEXTS), min_size=n, max_size=n)
    ints = st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n)
    cols = {
        "local": np.arange(n, dtype=np.int64),
        "group_key": np.asarray(data.draw(texts), dtype=object),
        "label": np.asarray(data.draw(texts)).astype(str),  # a unicode array
        "seq": np.asarray(data.draw(ints), dtype=np.int64),
        "p2p": np.asarray(data.draw(st.lists(st.booleans(), min_size=n, max_size=n))),
        "lane": np.asarray(data.draw(texts), dtype=object),
    }
    want = pd.DataFrame(cols)
    got = instance_frame(cols)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert list(got.dtypes) == list(want.dtypes)
    assert type(got.index) is type(want.index)
    for c in want.columns:
        assert [type(x) for x in got[c]] == [type(x) for x in want[c]]


def _walk_back(d_thread, d_launch, j, c_thread, c_start, lookback):
    """The walk :func:`_last_launched_before` replaced (rank/graph.py ``_host_syncs``)."""
    found = np.full(j.size, -1, dtype=np.int64)
    for _ in range(lookback):
        live = (found < 0) & (j >= 0)
        if not live.any():
            break
        jj = np.maximum(j, 0)
        hit = live & (d_thread[jj] == c_thread) & (d_launch[jj] < c_start)
        found[hit] = jj[hit]
        j = np.where(live & ~hit, j - 1, j)
    return found


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 40), st.integers(0, 12), st.integers(1, 6), st.data())
def test_last_launched_before_is_the_walk(n, k, lookback, data):
    ints = lambda m, lo, hi: np.asarray(  # noqa: E731
        data.draw(st.lists(st.integers(lo, hi), min_size=m, max_size=m)), dtype=np.int64
    )
    d_thread, d_launch = ints(n, -1, 2), ints(n, 0, 20)
    j, c_thread, c_start = ints(k, -1, max(n - 1, -1)), ints(k, -1, 2), ints(k, 0, 20)
    want = _walk_back(d_thread, d_launch, j.copy(), c_thread, c_start, lookback)
    got = _last_launched_before(d_thread, d_launch, j, c_thread, c_start, lookback)
    assert np.array_equal(got, want)


WORDS = ["forward", "Backward", "## optimizer ##", "FSDP::all_gather", "c10d::send", "aten::mm"]
WORDS += ["DistributedDataParallel.forward", "expert_dispatch", "ProfilerStep#3", "é_moe", "x"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from(WORDS), max_size=8), min_size=1, max_size=3))
def test_host_names_memo_is_the_search(units):
    """The purpose patterns' answers remembered per name across units (some names new to each
    unit, some seen before) are each pattern's ``re.search`` of the name."""
    from traceoverlap.rank import purpose

    purpose._MEMO.clear()
    for names in units:
        _check_host_names(names)


def _check_host_names(names: list[str]) -> None:
    """A unit of host rows named ``names``: each purpose pattern's answers are its search."""
    from traceoverlap.rank import purpose

    col = pd.Series(pd.Categorical(names, categories=sorted(set(WORDS))))
    hn = purpose._HostNames(col, np.ones(len(names), dtype=bool))
    codes = col.cat.codes.to_numpy()
    for rx in purpose._MEMO_BIT:
        want = [rx.search(n) is not None for n in names]
        assert hn.any(rx) == any(want)
        assert hn.matching(rx)[codes].tolist() == want
        assert hn.rows(rx).tolist() == [i for i, w in enumerate(want) if w]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(WORDS), max_size=8), min_size=1, max_size=4),
    st.integers(0, 6),
)
def test_host_names_memo_is_the_search_when_full(units, cap):
    """As above with the memo's bound reached (a run of unique range names): the names it could
    not keep are searched again, by the unit's block or a block of the rest, same answers."""
    from traceoverlap.rank import purpose

    purpose._MEMO.clear()
    old_cap = purpose._MEMO_NAMES
    purpose._MEMO_NAMES = cap
    try:
        for names in units:
            _check_host_names(names)
            assert len(purpose._MEMO) <= cap
    finally:
        purpose._MEMO_NAMES = old_cap
        purpose._MEMO.clear()


def _remember_loop(memo, cap, names, values):
    """purpose._remember before it used dict.update (the reference)."""
    for name, v in zip(names, values, strict=True):
        if len(memo) < cap or name in memo:
            memo[name] = v


@settings(max_examples=80, deadline=None)
@given(
    st.dictionaries(st.sampled_from(WORDS), st.integers(1, 9), max_size=6),
    st.lists(st.tuples(st.sampled_from(WORDS), st.integers(1, 9)), max_size=12),
    st.integers(0, 12),
)
def test_remember_is_the_loop(start, pairs, cap):
    from traceoverlap.rank import purpose

    want = dict(start)
    _remember_loop(want, cap, [p[0] for p in pairs], [p[1] for p in pairs])
    old_cap = purpose._MEMO_NAMES
    purpose._MEMO.clear()
    purpose._MEMO.update(start)
    purpose._MEMO_NAMES = cap
    try:
        purpose._remember([p[0] for p in pairs], [p[1] for p in pairs])
        assert purpose._MEMO == want
        assert list(purpose._MEMO) == list(want)  # the same insertion order
    finally:
        purpose._MEMO_NAMES = old_cap
        purpose._MEMO.clear()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=30))
def test_unique_pairs_is_unique_along_an_axis(pairs):
    a = np.asarray([p[0] for p in pairs], dtype=np.int64)
    b = np.asarray([p[1] for p in pairs], dtype=np.int64)
    want = np.unique(np.stack([a, b]), axis=1) if a.size else np.zeros((2, 0), np.int64)
    got = unique_pairs(a, b)
    assert got[0].dtype == got[1].dtype == np.int64
    assert np.array_equal(got[0], want[0].astype(np.int64))
    assert np.array_equal(got[1], want[1].astype(np.int64))
