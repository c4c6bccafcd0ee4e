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
    for fn in (str, collective_kind, lambda s: s.upper()):
        want = per_category(col, fn, rows)[col.cat.codes.to_numpy()[pick]]
        got = codes_values(col, cat_codes(col)[pick], fn)
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
