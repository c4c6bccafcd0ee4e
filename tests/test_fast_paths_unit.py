"""The per-unit analysis's fast paths (issue 40) against the pandas / numpy code they replace:
the same answer to the bit on random inputs, or an output would move."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from traceoverlap.core.intervals import _next_by_sort, next_at_or_after, unique_values
from traceoverlap.core.model import (
    GPU_ACTIVITY_CATEGORIES,
    Timeline,
    TraceInfo,
    in_categories,
    make_events,
    split_units,
    take_rows,
)
from traceoverlap.rank.hostranges import HOST_RANGE_COLUMNS, KERNEL_MARK, kernel_ranges
from traceoverlap.rank.unit import top_names

NAMES = ["k1", "k2", "aten::mm", "nccl:all_reduce", "ProfilerStep#1", None]
CATS = ["kernel", "memcpy", "cpu_op", "runtime", "annotation"]


def _events(data: st.DataObject, n: int) -> pd.DataFrame:
    pick = lambda xs: data.draw(st.lists(st.sampled_from(xs), min_size=n, max_size=n))  # noqa: E731
    ints = lambda lo, hi: np.asarray(  # noqa: E731
        data.draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)), np.int64
    )
    cat = pick(CATS)
    device = np.where(np.isin(cat, ["kernel", "memcpy"]), ints(0, 2), -1)
    start = ints(0, 50)
    return make_events(
        n,
        {
            "rank": np.broadcast_to(np.int64(3), (n,)),  # as the Kineto reader gives it
            "pid": 7,
            "device": device,
            "stream": ints(-1, 2),
            "tid": ints(1, 2),
            "category": np.asarray(cat, dtype=object),
            "name": np.asarray(pick(NAMES), dtype=object),
            "lane": np.asarray(pick(["a", "b"]), dtype=object),
            "start_ns": start,
            "end_ns": start + ints(0, 9),
            "correlation": ints(-1, 5),
            "peer_rank": ints(-1, 1) if data.draw(st.booleans()) else -1,
        },
    )


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 30), st.data())
def test_take_rows_is_iloc(n, data):
    ev = _events(data, n)
    keep = np.asarray(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    got = take_rows(ev, np.flatnonzero(keep))
    want = ev[keep].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert list(got.dtypes) == list(want.dtypes)
    assert got.index.equals(want.index) and isinstance(got.index, pd.RangeIndex)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 30), st.data())
def test_split_units_per_gpu_is_the_boolean_selection(n, data):
    ev = _events(data, n)
    info = TraceInfo("t.json", "kineto", rank=3, pid=7, device_ids=(0, 1, 2), devices=("a",) * 3)
    units = split_units(Timeline(ev, (info,)))
    is_gpu = in_categories(ev["category"], GPU_ACTIVITY_CATEGORIES)
    devs = np.unique(ev["device"].to_numpy()[is_gpu])
    if devs.size <= 1:
        assert len(units) == 1 and units[0].events is ev
        return
    assert [u.traces[0].device for u in units] == devs.tolist()
    for u, d in zip(units, devs.tolist(), strict=True):
        # what split_units selected before: every host row and that GPU's rows, pandas' copy
        keep = ~is_gpu | (ev["device"].to_numpy() == d)
        pd.testing.assert_frame_equal(u.events, ev[keep].reset_index(drop=True), check_exact=True)


def _kernel_ranges_before(ev, kind, event_window, compute):
    """kernel_ranges as it was (numpy element per pair in the f-string)."""
    from traceoverlap.rank.hostranges import _name_codes

    rows = np.flatnonzero((kind == compute) & (event_window >= 0))
    if rows.size == 0:
        return pd.DataFrame(columns=list(HOST_RANGE_COLUMNS))
    start = ev["start_ns"].to_numpy()[rows]
    order = np.lexsort((start, event_window[rows]))
    rows, start = rows[order], start[order]
    labels, code = _name_codes(ev["name"], rows)
    win = event_window[rows]
    key = win.astype(np.int64) * (labels.size + 1) + code
    by = np.argsort(key, kind="stable")
    k_sorted = key[by]
    first = np.ones(by.size, dtype=bool)
    first[1:] = k_sorted[1:] != k_sorted[:-1]
    run_start = np.maximum.accumulate(np.where(first, np.arange(by.size), 0))
    nth = np.empty(by.size, dtype=np.int64)
    nth[by] = np.arange(by.size) - run_start + 1
    pair, inv = np.unique(code * (int(nth.max()) + 1) + nth, return_inverse=True)
    nth_max = int(nth.max()) + 1
    names = np.array(
        [f"{KERNEL_MARK}{labels[p // nth_max]} (call {p % nth_max} in the step)" for p in pair],
        dtype=object,
    )
    return pd.DataFrame(
        {
            "name": pd.array(names[inv.ravel()], dtype=object),
            "start_ns": start.astype(np.int64),
            "end_ns": ev["end_ns"].to_numpy()[rows].astype(np.int64),
        },
        columns=list(HOST_RANGE_COLUMNS),
    )


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 40), st.data())
def test_kernel_range_names_are_as_before(n, data):
    ev = _events(data, n)
    ev["name"] = ev["name"].cat.add_categories(["x"]).fillna("x")  # kernels always have a name
    kind = np.asarray(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int8)
    win = np.asarray(data.draw(st.lists(st.integers(-1, 3), min_size=n, max_size=n)), np.int64)
    got = kernel_ranges(ev, kind, win, 0)
    want = _kernel_ranges_before(ev, kind, win, 0)
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "step#1", "d"]), max_size=40), st.data())
def test_top_names_are_value_counts_head(values, data):
    n = len(values)
    rows = np.asarray(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    k = data.draw(st.integers(1, 6))
    # unused categories, in an order that is not the rows' first-occurrence order
    names = pd.Series(pd.Categorical(values, categories=["d", "step#1", "c", "b", "a", "zz"]))
    top = names[rows].astype(str).value_counts().head(k)
    want = tuple((str(a), int(b)) for a, b in top.items())
    assert top_names(names, rows, k) == want
    with_missing = pd.Series(pd.Categorical([*values, None]))  # the pandas path
    rows2 = np.append(rows, True)
    top2 = with_missing[rows2].astype(str).value_counts().head(k)
    assert top_names(with_missing, rows2, k) == tuple((str(a), int(b)) for a, b in top2.items())


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(-(2**40), 2**40), max_size=50),
    st.sampled_from([np.int8, np.int32, np.int64]),
    st.booleans(),
)
def test_unique_values_is_np_unique(values, dtype, few):
    a = np.asarray(values, dtype=np.int64)
    a = (a % 5 if few else a % 100).astype(dtype) if dtype is not np.int64 or few else a
    got, want = unique_values(a), np.unique(a)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()
    ro = np.broadcast_to(a[:1], (7,)) if a.size else a  # a stride-0 column, as readers make
    assert unique_values(ro).tolist() == np.unique(ro).tolist()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 4), st.integers(-5, 30)), max_size=30),
    st.lists(st.tuples(st.integers(0, 4), st.integers(-5, 30)), max_size=30),
    st.booleans(),
    st.sampled_from([1, 10**12]),
)
def test_next_at_or_after_in_sorted_candidates_is_the_joint_sort(qs, cs, sort, scale):
    # candidates in (key, time) order take the binary-search path; unsorted ones the sort
    cs = sorted(cs) if sort else cs
    q = np.asarray(qs, np.int64).reshape(-1, 2) * np.array([1, scale])
    c = np.asarray(cs, np.int64).reshape(-1, 2) * np.array([1, scale])
    got = next_at_or_after(q[:, 0], q[:, 1], c[:, 0], c[:, 1])
    want = _next_by_sort(q[:, 0], q[:, 1], c[:, 0], c[:, 1])
    assert got.tolist() == want.tolist()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from(["kernel", "cpu_op", "annotation", "x", None]), max_size=30),
    st.lists(st.sampled_from(["kernel", "annotation", "absent", "x"]), max_size=4),
    st.booleans(),
)
def test_in_categories_is_isin(values, wanted, many):
    # few categories take the list scan, many (a name column) get_indexer
    extra = [f"n{i}" for i in range(70)] if many else []
    col = pd.Series(
        pd.Categorical(values, categories=["kernel", "cpu_op", "annotation", "x"] + extra)
    )
    want = col.isin(wanted).to_numpy(dtype=bool)
    assert in_categories(col, wanted).tolist() == want.tolist()
