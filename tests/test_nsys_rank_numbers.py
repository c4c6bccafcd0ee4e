"""The ``rank N`` texts of an NVTX table are found with C substring searches over joined blocks
(:func:`traceoverlap.readers.nsys._nvtx._containing`): the same strings as the per-string rule
it replaced, ``"ank" in s or "ANK" in s`` then the ``rank N`` pattern."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from traceoverlap.readers.nsys import _nvtx
from traceoverlap.readers.nsys._nvtx import _RANK_TEXT, _containing, _rank_numbers


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
