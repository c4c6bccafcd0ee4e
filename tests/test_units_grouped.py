"""Units cut as slices when a Timeline's rows are grouped by rank (the nsys reader's order):
the same units, row for row, as cutting them with a mask."""

from __future__ import annotations

import numpy as np

from traceoverlap.core.model import Timeline, TraceInfo, make_events, split_units


def _timeline(rank: list[int]) -> Timeline:
    n = len(rank)
    ev = make_events(
        n,
        {
            "rank": np.array(rank),
            "start_ns": np.arange(n) * 10,
            "end_ns": np.arange(n) * 10 + 5,
            "category": ["kernel" if i % 2 else "runtime" for i in range(n)],
            "name": [f"k{i}" for i in range(n)],
            "device": [0 if i % 2 else -1 for i in range(n)],
        },
    )
    return Timeline(ev, tuple(TraceInfo("x", "nsys", r) for r in sorted(set(rank))))


def test_grouped_rows_give_the_units_a_mask_gives() -> None:
    # rows 0-2 rank 0, rows 3-5 rank 1: grouped; the same rows interleaved are not
    grouped = split_units(_timeline([0, 0, 0, 1, 1, 1]))
    mixed = _timeline([0, 1, 0, 1, 0, 1])
    order = np.argsort(mixed.events["rank"].to_numpy(), kind="stable")
    by_mask = split_units(mixed)
    assert [u.traces[0].rank for u in grouped] == [0, 1]
    for g, m, rows in zip(grouped, by_mask, (order[:3], order[3:]), strict=True):
        assert g.events["rank"].tolist() == m.events["rank"].tolist()
        assert list(g.events.index) == [0, 1, 2] == list(m.events.index)
        # the mixed table's rank-r rows in their order are rows 0,2,4 / 1,3,5
        assert m.events["name"].astype(str).tolist() == [f"k{i}" for i in rows]
    assert grouped[1].events["name"].astype(str).tolist() == ["k3", "k4", "k5"]
