"""The cross-rank reduce's fast paths (issue 40) against the pandas code they replace: each must
give the same answer to the bit on random inputs, or an output would move."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from traceoverlap.core.schema import EXPOSED_UNMATCHED_NS
from traceoverlap.run.analysis import _unmatched_why
from traceoverlap.run.matching import _offsets

#: end times near a unix-clock epoch (float64 steps of 256 ns there) and small ones
ENDS = st.one_of(
    st.integers(0, 50), st.integers(1_700_000_000_000_000_000, 1_700_000_000_000_009_000)
)


def _offsets_pandas(m: pd.DataFrame, use: npt.NDArray[np.bool_]) -> dict[int, int]:
    """The replaced ``matching._offsets``: a pivot table and a BFS over its column pairs."""
    sub = m[use]
    off: dict[int, int] = {}
    if sub.empty:
        return off
    ends = sub.pivot_table(index="key", columns="unit", values="end_ns", aggfunc="max")
    cols = [int(c) for c in ends.columns]
    for root in cols:
        if root in off:
            continue
        off[root] = 0
        frontier = [root]
        while frontier:
            a = frontier.pop()
            for b in cols:
                if b in off:
                    continue
                both = ends[[a, b]].dropna()
                if both.empty:
                    continue
                d = (both[b].to_numpy(np.int64) - both[a].to_numpy(np.int64)).astype(np.float64)
                off[b] = off[a] + int(np.median(d))
                frontier.append(b)
    return off


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 5), ENDS, st.booleans()), max_size=40))
def test_offsets_match_the_pivot_table_bfs(rows):
    # (key, unit, end, used): duplicate (key, unit) cells take their max; a missing cell makes
    # the pivot float64, rounding every end (the numpy table must round them alike)
    m = pd.DataFrame(
        {
            "key": np.array([r[0] for r in rows], np.int64),
            "unit": np.array([r[1] for r in rows], np.int64),
            "end_ns": np.array([r[2] for r in rows], np.int64),
        }
    )
    use = np.array([r[3] for r in rows], dtype=bool)
    assert _offsets(m, use) == _offsets_pandas(m, use)


def _unmatched_why_pandas(pr: pd.DataFrame, n_windows: int) -> list[str | None]:
    """The replaced ``analysis._unmatched_why``: a groupby of the texts, sorted per window."""
    out: list[str | None] = [None] * n_windows
    ns = pr[EXPOSED_UNMATCHED_NS.name].to_numpy(np.int64)
    rows = pr[ns > 0]
    if rows.empty:
        return out
    why = rows["unmatched_why"].fillna("no peer to match it with").astype(str)
    text = rows["name"].astype(str) + " on rank " + rows["rank"].astype(str) + ": " + why
    g = (
        pd.DataFrame(
            {"window": rows["window"].to_numpy(np.int64), "text": text.to_numpy(), "ns": ns[ns > 0]}
        )
        .groupby(["window", "text"], sort=False)
        .agg(ns=("ns", "sum"), n=("ns", "size"))
        .reset_index()
        .sort_values(["window", "ns", "text"], ascending=[True, False, True], kind="stable")
    )
    for w, part in g.groupby("window", sort=False):
        said = [
            (f"{n}x " if n > 1 else "") + t
            for t, n in zip(part["text"].tolist()[:2], part["n"].tolist()[:2], strict=True)
        ]
        more = len(part) - len(said)
        out[int(w)] = "; ".join(said) + (f"; and {more} more" if more > 0 else "")
    return out


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.sampled_from(["ncclAllReduce", "allgather", "b", "Ab"]),
            st.integers(0, 3),
            st.sampled_from([None, "count differs", "no peer", "a"]),
            st.integers(0, 4),
        ),
        max_size=30,
    )
)
def test_unmatched_why_matches_the_groupby(rows):
    # (window, name, rank, why, ns): texts summed per window, most ns first, ties by text
    pr = pd.DataFrame(
        {
            "window": np.array([r[0] for r in rows], np.int64),
            "name": [r[1] for r in rows],
            "rank": np.array([r[2] for r in rows], np.int64),
            "unmatched_why": [r[3] for r in rows],
            EXPOSED_UNMATCHED_NS.name: np.array([r[4] for r in rows], np.int64),
        }
    )
    got = _unmatched_why(cast(Any, SimpleNamespace(per_rank=pr)), 4)
    assert got == _unmatched_why_pandas(pr, 4)
