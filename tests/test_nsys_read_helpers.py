"""Helpers of the nsys reader that replaced slower pandas / Python steps give what those gave:

- the ``rank N`` texts of an NVTX table are found with C substring searches over joined blocks
  (:func:`traceoverlap.readers.nsys._nvtx._containing`): the same strings as the per-string rule
  it replaced, ``"ank" in s or "ANK" in s`` then the ``rank N`` pattern;
- inline NVTX texts the range filter refused get one code without hashing
  (``_factorize_texts``), the others ``pd.factorize``'s codes in its order;
- the source-category column from a bincount (``_used_categories``) equals
  ``Categorical.from_codes(...).remove_unused_categories()``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from traceoverlap.core.model import CATEGORIES
from traceoverlap.readers.nsys import _nvtx
from traceoverlap.readers.nsys._columns import REFUSED
from traceoverlap.readers.nsys._nvtx import (
    _RANK_TEXT,
    _containing,
    _factorize_texts,
    _rank_numbers,
)
from traceoverlap.readers.nsys._reader import _used_categories
from traceoverlap.readers.nsys._strings import category_index


def _reference(values: list[str]) -> list[int]:
    out = []
    for v in values:
        m = _RANK_TEXT.match(v) if ("ank" in v or "ANK" in v) else None
        out.append(int(m.group(1)) if m else -1)
    return out


_TEXTS = st.lists(
    st.one_of(
        st.text(alphabet=st.sampled_from("rRaAnNkK 0123:#[]_\x00\né"), max_size=12),
        st.sampled_from(["rank 3", "RANK 12", "[rank: 7]", "Rank 2", "rAnK 5", "rank", "ank 1"]),
    ),
    max_size=40,
)


@given(_TEXTS)
def test_rank_numbers_match_the_per_string_rule(values: list[str]) -> None:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    # "rAnK 5" holds neither "ank" nor "ANK": -1 by the rule, though the pattern would match
    assert _rank_numbers(arr).tolist() == _reference(values)


@given(_TEXTS)
def test_blocks_are_joined_without_crossing(values: list[str]) -> None:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    want = [i for i, v in enumerate(values) if "ank" in v or "ANK" in v]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_nvtx, "_JOIN_BLOCK", 3)  # several blocks: indices offset per block
        assert _containing(arr, ("ank", "ANK")).tolist() == want
    assert _containing(arr, ("ank", "ANK")).tolist() == want


def test_fixed_cases() -> None:
    arr = np.array(["rank 3", "xx", "an\x00k", "RANK 12", "rAnK 5", "", "[rank: 7]"], dtype=object)
    # "an\x00k" is not "ank": the NUL separator never completes a needle either
    assert _rank_numbers(arr).tolist() == [3, -1, -1, 12, -1, -1, 7]
    assert _rank_numbers(np.zeros(0, dtype=object)).tolist() == []


@given(st.lists(st.sampled_from(["a", "b", "rank 1", REFUSED, None, ""]), max_size=30))
def test_factorize_texts_codes_refused_apart(texts: list[str | None]) -> None:
    arr = np.empty(len(texts), dtype=object)
    arr[:] = texts
    codes, uniques = _factorize_texts(arr)
    # every row reads back its text (None: code -1)
    back = [None if c < 0 else uniques[c] for c in codes.tolist()]
    assert back == texts
    # the texts other than REFUSED come in pd.factorize's order (first appearance)
    kept = [t for t in texts if t is not None and t != REFUSED]
    assert [u for u in uniques.tolist() if u != REFUSED] == list(dict.fromkeys(kept))
    assert len(set(uniques.tolist())) == len(uniques)


@given(st.lists(st.integers(0, len(CATEGORIES) - 1), max_size=30))
def test_used_categories_is_remove_unused_categories(codes: list[int]) -> None:
    arr = np.array(codes, dtype=np.int32)
    want = pd.Categorical.from_codes(
        arr, categories=category_index(np.array(CATEGORIES, dtype=object))
    ).remove_unused_categories()
    got = _used_categories(arr)
    assert got.dtype == want.dtype
    assert got.codes.dtype == want.codes.dtype
    assert got.codes.tolist() == want.codes.tolist()
