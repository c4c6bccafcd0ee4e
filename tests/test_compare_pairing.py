"""compare pairs collectives by key (name, purpose, bytes) and order within a step, never by bare
position (issue 21): when the runs' collectives of a family do not correspond (per-parameter
all-reduces against buckets), that family is compared as a whole, and a note says so."""

from __future__ import annotations

import numpy as np
from conftest import WORKLOAD_FIXTURES

from traceoverlap import analyze
from traceoverlap.core.model import Timeline, TraceInfo, make_events
from traceoverlap.run.compare import compare

MS = 1_000_000


def _run(reduces: list[tuple[int, int]]) -> Timeline:
    """One CPU rank, one ProfilerStep#1 [0, 100) ms, compute [0, 50) ms, then gloo all-reduces
    (start, end) in ms after the compute: each is exposed for its whole length."""
    n = 2 + len(reduces)
    ev = make_events(
        n,
        {
            "category": ["annotation", "cpu_op"] + ["annotation"] * len(reduces),
            "name": ["ProfilerStep#1", "aten::mm"] + ["gloo:all_reduce"] * len(reduces),
            "tid": [1, 1] + [2] * len(reduces),
            "thread_name": ["python", "python"] + ["pt_gloo_runloop"] * len(reduces),
            "start_ns": np.array([0, 0] + [s for s, _ in reduces]) * MS,
            "end_ns": np.array([100, 50] + [e for _, e in reduces]) * MS,
        },
    )
    return Timeline(ev, (TraceInfo(path="r0.json", format="kineto", rank=0, clock="unix"),))


def test_runs_with_different_collectives_compare_the_family_as_a_whole() -> None:
    # baseline: 4 all-reduces of 10 ms each, exposed 40 ms; candidate: 1 of 16 ms, exposed 16 ms.
    # By position the candidate's only all-reduce would pair with the baseline's first (10 -> 16,
    # "+6 ms" while exposure fell by 24 ms); by family: 40 -> 16 ms, delta -24 ms
    base = analyze(_run([(50, 60), (60, 70), (70, 80), (80, 90)]))
    cand = analyze(_run([(50, 66)]))
    c = compare(base, cand, baseline_label="A", candidate_label="B")
    (row,) = c.collectives.to_dict("records")
    assert row["paired_by"] == "family" and row["collective"] == "AllReduce (the family per step)"
    assert (row["baseline_exposed_ns"], row["candidate_exposed_ns"]) == (40 * MS, 16 * MS)
    assert row["delta_ns"] == -24 * MS
    note = c.notes[0]
    assert note.startswith("A has 4 all_reduce")
    assert "a step, B 1 all_reduce" in note and "compared by family only" in note


def test_runs_with_the_same_collectives_pair_them_in_order() -> None:
    # 2 all-reduces in each run: the first 10 -> 4 ms exposed, the second 10 -> 10 ms
    base = analyze(_run([(50, 60), (60, 70)]))
    cand = analyze(_run([(50, 54), (60, 70)]))
    c = compare(base, cand)
    (row,) = c.collectives.to_dict("records")  # the second did not change: not listed
    assert (row["collective"], row["paired_by"]) == ("all_reduce #1", "order")
    assert row["delta_ns"] == -6 * MS
    assert not any("family only" in n for n in c.notes)


def test_naive_vs_bucketed_fixtures_are_compared_by_family() -> None:
    naive = analyze(WORKLOAD_FIXTURES / "naive")
    bucketed = analyze(WORKLOAD_FIXTURES / "bucketed")
    c = compare(naive, bucketed, baseline_label="naive", candidate_label="bucketed")
    notes = [n for n in c.notes if "compared by family only" in n]
    assert len(notes) == 1 and notes[0].startswith("naive has ")
    # naive: one all-reduce per parameter; bucketed: one per 0.1 MiB bucket, so fewer
    counts = [int(w) for w in notes[0].replace(",", " ").split() if w.isdigit()]
    assert counts[0] > counts[1] >= 1
    assert c.collectives["paired_by"].tolist() == ["family"]
    # the family's exposure per step fell, as exposed comm did
    assert float(c.collectives["delta_ns"].iloc[0]) < 0
    # the same run on both sides pairs every collective with itself: no note, no change
    same = compare(naive, naive)
    assert not any("family only" in n for n in same.notes) and same.collectives.empty


def test_naive_vs_overlap_fixtures_pair_per_parameter_all_reduces() -> None:
    # both runs issue one all-reduce per parameter: they correspond, and are paired in order
    c = compare(analyze(WORKLOAD_FIXTURES / "naive_8"), analyze(WORKLOAD_FIXTURES / "overlap_8"))
    assert not any("family only" in n for n in c.notes)
    assert set(c.collectives["paired_by"]) == {"order"}
    assert all(x.startswith("all_reduce #") for x in c.collectives["collective"])


def test_one_name_with_several_purposes_is_paired_within_each() -> None:
    # an MoE step issues all_to_all twice as dispatch and twice as combine: the n-th dispatch
    # pairs with the n-th dispatch, never with a combine, and the label says which
    c = compare(
        analyze(WORKLOAD_FIXTURES / "moe_slow"), analyze(WORKLOAD_FIXTURES / "moe_slow_regen")
    )
    a2a = [x for x in c.collectives["collective"] if x.startswith("all_to_all")]
    assert a2a and set(c.collectives["paired_by"]) == {"order"}
    assert all(
        x.startswith(("all_to_all (moe-dispatch, ", "all_to_all (moe-combine, ")) for x in a2a
    )
    assert not any("family only" in n for n in c.notes)
