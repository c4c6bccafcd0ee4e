"""The Kineto Timeline build's shortcuts give what the general paths give."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traceoverlap.readers.kineto._categories import codes_in
from traceoverlap.readers.kineto._table import _factorize_pairs, _factorize_rows
from traceoverlap.readers.kineto._values import INT64_MAX, checked_ns

_US = st.one_of(
    st.floats(-1e16, 1e16, allow_nan=False),
    st.sampled_from([0.0, 0.5, -0.5, 1.7e15 + 0.123, 9.2e15, -9.2e15, 2.0**53]),
)


@settings(max_examples=300, deadline=None)
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


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 2)), max_size=40), st.integers(1, 5))
def test_factorize_pairs_by_runs(rows: list, run: int) -> None:
    pairs = [p for p in rows for _ in range(run)]  # runs of equal pairs, as a thread's rows come
    a = np.array([p[0] for p in pairs], dtype=np.int64)
    b = np.array([p[1] for p in pairs], dtype=np.int64)
    got, codes = _factorize_pairs(a, b)
    want, want_codes = _factorize_rows(a, b)
    assert got == want and codes.tolist() == want_codes.tolist()
    assert codes.dtype == np.int64


def test_codes_in_is_isin() -> None:
    codes = np.array([-1, 0, 3, 9, 3, 2], dtype=np.int8)
    assert codes_in(codes, [3, 2]).tolist() == [False, False, True, False, True, True]
    assert codes_in(codes, []).tolist() == [False] * 6
    many = list(range(2, 12))  # more than a handful: np.isin
    assert codes_in(codes, many).tolist() == np.isin(codes, many).tolist()
