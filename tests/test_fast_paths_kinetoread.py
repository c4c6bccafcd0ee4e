"""The Kineto reader's fast paths (issue 40) against the plain code they replace: each must give
the same answer to the bit, on random inputs, or a table (and so an output) would move."""

from __future__ import annotations

import zlib
from types import SimpleNamespace

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from traceoverlap.core.schema import STEPS, _unknown_as_na, conform
from traceoverlap.readers._shape import input_dims_code, input_dims_codes
from traceoverlap.readers.kineto import _columns
from traceoverlap.readers.kineto._columns import (
    DTYPE_BYTES,
    Codes,
    _decode_strings,
    _first_seen_codes,
    _raw_string,
    _used_input_dims_codes,
    collective_values,
)
from traceoverlap.readers.kineto._values import INT64_MAX, MAX_WORLD_SIZE, int_field, to_int


def _first_seen_reference(local: np.ndarray, strings: list[str], codes: Codes) -> np.ndarray:
    """The replaced construct: each row coded in turn, a new code for each new string."""
    return np.array([codes[strings[i]] for i in local.tolist()], dtype=np.int64)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f"]), min_size=1, max_size=6),
    st.lists(st.lists(st.integers(0, 30), max_size=40), min_size=1, max_size=4),
    st.lists(st.sampled_from(["a", "c", "x"]), max_size=3, unique=True),
)
def test_first_seen_codes_are_coding_the_rows_one_by_one(strings, chunks, known):
    # strings may repeat (two raw texts decoding to one string): they must share a code
    fast, slow = (
        Codes({k: i for i, k in enumerate(known)}),
        Codes({k: i for i, k in enumerate(known)}),
    )
    for rows in chunks:
        local = np.asarray([r % len(strings) for r in rows], dtype=np.int32)
        got = _first_seen_codes(local, strings, fast, np.int32)
        want = _first_seen_reference(local, strings, slow)
        assert got.dtype == np.int32
        assert got.tolist() == want.tolist()
        assert list(fast.items()) == list(slow.items())  # same codes, same order


def test_decode_strings_is_raw_string_per_text():
    raws = [b"abc", b"a\\u0041", b"\\n", b"abc", "é".encode(), b"", b"a\\u0041"]
    _columns._STRING_CACHE.clear()
    assert _decode_strings(raws) == [_raw_string(r) for r in raws]
    assert _decode_strings(raws) == [_raw_string(r) for r in raws]  # now from the cache
    try:
        _decode_strings([b"ok", b"\xff"])
    except UnicodeDecodeError:
        pass
    else:  # pragma: no cover
        raise AssertionError("invalid UTF-8 must raise as _raw_string does")
    assert b"\xff" not in _columns._STRING_CACHE


LONG_DIMS = b"[" + b"[7, 7], " * 90 + b"[]]"


@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        # a text longer than input_dims_code's cached ones too
        st.sampled_from([b"", b"[[1, 2], []]", b"[[1,2],[]]", b"[[3]]", b'["x"]', LONG_DIMS]),
        max_size=8,
    ),
    st.lists(st.integers(-1, 7), max_size=30),
)
def test_used_input_dims_codes_match_input_dims_codes(texts, ids):
    local = np.asarray([i if i < len(texts) else -1 for i in ids], dtype=np.int32)
    per = _used_input_dims_codes(texts, local)
    full = input_dims_codes(texts) if texts else np.zeros(0, np.int32)
    used = local[local >= 0]
    assert per.dtype == np.int32
    assert per[used].tolist() == full[used].tolist()
    # the code is CRC-32 of the text without white space, 31 bits; -1 for no text
    for t in texts:
        want = zlib.crc32(t.replace(b" ", b"")) >> 1 if t else -1
        assert input_dims_code(t) == want


def _collective_reference(args, coll_names, pg_names):
    """The replaced construct: numpy columns filled row by row."""
    m = len(args)
    codes = np.zeros(m, dtype=np.int32)
    pgs = np.zeros(m, dtype=np.int32)
    nbytes = np.full(m, -1, dtype=np.int64)
    seq = np.full(m, -1, dtype=np.int64)
    group = np.full(m, -1, dtype=np.int64)
    for r, a in enumerate(args):
        codes[r] = coll_names[str(a.coll_name)]
        if a.pg_name is not None:
            pgs[r] = pg_names[str(a.pg_name)]
        nel = max(to_int(a.in_nelems, -1), to_int(a.out_nelems, -1))
        size = DTYPE_BYTES.get(str(a.dtype), -1)
        total = nel * size if nel >= 0 and size > 0 else -1
        nbytes[r] = total if total <= INT64_MAX else -1
        s = a.seq if a.seq is not None else a.seq_lower
        seq[r] = to_int(s, -1) if s is not None else -1
        gs = int_field(a.group_size, 1, MAX_WORLD_SIZE) if a.group_size is not None else None
        group[r] = -1 if gs is None else gs
    return codes, nbytes, pgs, seq, group


odd = st.one_of(
    st.none(),
    st.integers(-5, 2**63 + 5),
    st.floats(allow_nan=True),
    st.sampled_from(["12", "x", " 7 ", "-3"]),
)
arg = st.builds(
    SimpleNamespace,
    coll_name=st.sampled_from(["allreduce", "broadcast", 3]),
    pg_name=st.one_of(st.none(), st.sampled_from(["0", "1", "default_pg"])),
    in_nelems=odd,
    out_nelems=odd,
    dtype=st.sampled_from(["Float", "BFloat16", "Nope", None]),
    seq=odd,
    seq_lower=odd,
    group_size=odd,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(arg, max_size=12))
def test_collective_values_match_row_by_row_filling(args):
    a_names, a_pgs = Codes({"": 0}), Codes({"": 0})
    b_names, b_pgs = Codes({"": 0}), Codes({"": 0})
    got = collective_values(args, a_names, a_pgs)
    want = _collective_reference(args, b_names, b_pgs)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        assert g.tolist() == w.tolist()
    assert list(a_names.items()) == list(b_names.items())
    assert list(a_pgs.items()) == list(b_pgs.items())


def _unknown_as_na_reference(s: pd.Series) -> pd.Series:
    """The replaced construct."""
    s = s.astype("Int64")
    return s.mask((s < 0).fillna(False))


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=30),
    st.sampled_from(["int64", "Int64", "object", "float64"]),
)
def test_unknown_as_na_is_astype_then_mask(values, dtype):
    if dtype == "int64":
        values = [-1 if v is None else v for v in values]
    if dtype == "float64":  # floats exact only up to 2**53
        values = [None if v is None else float(v % 2**40 - 2**39) for v in values]
    s = pd.Series(values, dtype=dtype, name="x", index=pd.RangeIndex(3, 3 + len(values)))
    got, want = _unknown_as_na(s), _unknown_as_na_reference(s)
    pd.testing.assert_series_equal(got, want, check_exact=True)
    assert got.isna().tolist() == want.isna().tolist()


def test_conform_keeps_frame_and_casts_declared_columns():
    # a nullable _ns column: -1 and None are unknown (<NA>); a label column becomes strings
    df = pd.DataFrame(
        {"rank": [0, 1], "step": [4, 5], "iteration_ns": [-1, 7], "extra": ["a", "b"]},
        index=pd.RangeIndex(2),
    )
    out = conform(df, STEPS)
    assert list(out.columns) == list(df.columns)
    assert str(out["iteration_ns"].dtype) == "Int64"
    assert out["iteration_ns"].isna().tolist() == [True, False]
    assert out["step"].tolist() == ["4", "5"] and str(out["step"].dtype) == "string"
    assert out["extra"].equals(df["extra"])
