"""The Kineto Timeline build's shortcuts give what the general paths give."""

import numpy as np
import pandas as pd
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from traceoverlap.readers.kineto._categories import codes_in
from traceoverlap.readers.kineto._table import _factorize_rows, _lanes
from traceoverlap.readers.kineto._values import INT64_MAX, checked_ns

_US = st.one_of(
    st.floats(-1e16, 1e16, allow_nan=False),
    st.sampled_from([0.0, 0.5, -0.5, 1.7e15 + 0.123, 9.2e15, -9.2e15, 2.0**53]),
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_US, min_size=1, max_size=20), st.sampled_from([0, 1, 10**18, INT64_MAX - 10**15]))
def test_checked_ns_whole_array_path_is_the_masked_one(us: list, base: int) -> None:
    # a NaN row sends the array through the masked path; the other rows must read the same
    a = np.array(us, dtype=np.float64)
    ns, ok = checked_ns(a, base)
    ns_m, ok_m = checked_ns(np.append(a, np.nan), base)
    assert ok.tolist() == ok_m[:-1].tolist() and ns.tolist() == ns_m[:-1].tolist()


def test_checked_ns_by_hand() -> None:
    # 1.5 us -> 1500 ns (+ base 7); 2.0004 us -> 2000 ns (the fraction rounds to whole ns)
    ns, ok = checked_ns(np.array([1.5, 2.0004]), 7)
    assert ns.tolist() == [1507, 2007] and ok.all()
    ns, ok = checked_ns(np.array([1.5, 1e17]), 0)  # 1e17 us is beyond int64 ns
    assert ns.tolist() == [1500, 0] and ok.tolist() == [True, False]


def _lanes_by_row(gpu_side, pid, tid, device, stream, tnames):  # type: ignore[no-untyped-def]
    """The per-row construction that _lanes replaced (every row's pair factorized)."""
    n = len(pid)
    several = len(pd.unique(device[gpu_side])) > 1
    lane_codes = np.zeros(n, dtype=np.int64)
    tname_codes = np.zeros(n, dtype=np.int64)
    lane_labels: list[str] = []
    tname_labels = [""]
    host = ~gpu_side
    if host.any():
        uniq, inv = _factorize_rows(pid[host], tid[host])
        idx = []
        for kp, kt in uniq:
            tn = tnames.get((kp, kt), "")
            lane_labels.append(f"thread {kt}" + (f" ({tn})" if tn else ""))
            if tn not in tname_labels:
                tname_labels.append(tn)
            idx.append(tname_labels.index(tn))
        lane_codes[host] = inv
        tname_codes[host] = np.array(idx, dtype=np.int64)[inv]
    if gpu_side.any():
        uniq, inv = _factorize_rows(device[gpu_side], stream[gpu_side])
        first = len(lane_labels)
        for kd, ks in uniq:
            lane_labels.append((f"gpu {kd} " if several else "") + f"stream {ks}")
        lane_codes[gpu_side] = inv + first
    codes, uniques = pd.factorize(np.array(lane_labels, dtype=object))
    return (
        pd.Categorical.from_codes(codes[lane_codes], categories=pd.Index(list(uniques))),
        pd.Categorical.from_codes(tname_codes, categories=pd.Index(tname_labels)),
    )


_ROW = st.tuples(
    st.booleans(), st.integers(1, 2), st.integers(1, 3), st.integers(0, 1), st.integers(7, 8)
)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(_ROW, st.integers(1, 4)), min_size=1, max_size=30))
def test_lanes_by_runs_are_the_lanes_by_row(runs: list) -> None:
    rows = [r for r, k in runs for _ in range(k)]  # runs of one lane, as a trace's rows come
    cols = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(1, 5)]
    gpu = np.array([r[0] for r in rows], dtype=bool)
    # process 2 reuses thread 1's label: the two lanes merge into one category
    tnames = {(1, 1): "pt_main_thread", (2, 3): "pt_gloo_runloop", (2, 1): "pt_main_thread"}
    got = _lanes(gpu, *cols, tnames)
    want = _lanes_by_row(gpu, *cols, tnames)
    for g, w in zip(got, want, strict=True):
        assert list(g.categories) == list(w.categories)
        assert g.codes.tolist() == w.codes.tolist() and g.codes.dtype == w.codes.dtype


def test_codes_in_is_isin() -> None:
    codes = np.array([-1, 0, 3, 9, 3, 2], dtype=np.int8)
    assert codes_in(codes, [3, 2]).tolist() == [False, False, True, False, True, True]
    assert codes_in(codes, []).tolist() == [False] * 6
    many = list(range(2, 12))  # more than a handful: np.isin
    assert codes_in(codes, many).tolist() == np.isin(codes, many).tolist()
