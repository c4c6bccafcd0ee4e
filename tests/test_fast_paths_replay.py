"""The replay's per-replay plan (issue 40, round 4) against the searches it replaces.

A settle of one step's chunk found its edges by searching every edge of the graph for targets in
the chunk, and each round recomputed the arrivals of every collective instance of the run from
every member's start. ``_Plan`` finds each chunk's edges once per replay, and ``_Arrivals``
recomputes only the chunk's own instances, from their members. Here, on real run graphs of
fixtures (steps, collectives across ranks, point-to-point edges, GPU streams) and on random
starts: the edges a chunk gets from the plan are those the search finds, in the same order, and
the restricted arrivals are the whole run's at the chunk's instances.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from traceoverlap import AnalyzeOptions, analyze
from traceoverlap.whatif.graph import RunGraph, run_graph
from traceoverlap.whatif.replay import (
    _Arrivals,
    _arrivals_of_starts,
    _chunks,
    _edges_into,
    _members,
    _plan,
    _pos_in,
    _State,
    _sub,
    observed_params,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "workloads"
# several steps; collectives across 4 ranks; pipeline send/recv; an MoE all-to-all; 8 ranks
RUNS = ("naive4_slow", "pipeline4", "moe_slow", "ddp_8", "style_fsdp_prefetch")


def _graph(name: str) -> RunGraph:
    g = run_graph(analyze(FIXTURES / name, AnalyzeOptions(graph=True)))
    assert g is not None
    return g


@pytest.mark.parametrize("name", RUNS)
def test_a_chunks_edges_from_the_plan_are_the_searched_ones(name: str) -> None:
    g = _graph(name)
    chunks = _chunks(g)
    assert len(chunks) > 2  # the runs have steps: chunks to settle one at a time
    plan = _plan(g, list(chunks), _members(g))
    n_edges = n_e = 0
    for c, idx in enumerate(chunks):
        m = idx.size
        for dst, src, kind in ((g.dst, g.src, "d"), (g.edst, g.esrc, "e")):
            want = _edges_into(idx, m, dst, src)
            got = plan.into(c, dst, src, kind)
            for w, h in zip(want, got, strict=True):
                assert np.array_equal(w, h)
            if kind == "d":
                n_edges += want[0].size
            else:
                n_e += want[0].size
        # the search itself: positions of the chunk's nodes, -1 elsewhere
        x = np.arange(g.start_ns.size)
        pos = _pos_in(idx, m, x)
        assert np.array_equal(np.flatnonzero(pos >= 0), np.sort(idx))
    # every edge lands in exactly one chunk (its target's)
    assert n_edges == g.dst.size and n_e == g.edst.size


@pytest.mark.parametrize("name", RUNS[:3])
def test_random_edges_between_any_chunks_are_found_as_searched(name: str) -> None:
    """Edges of a run go forward in time, so their sources are seldom in a later chunk than
    their targets: random edges between any nodes (a source in any chunk, before or after the
    target's) are found by the plan as by the search."""
    g = _graph(name)
    chunks = _chunks(g)
    rng = np.random.default_rng(11)
    n = g.start_ns.size
    dst = rng.integers(0, n, size=4 * n)
    src = rng.integers(0, n, size=4 * n)
    g2 = RunGraph(**{**{f: getattr(g, f) for f in g.__dataclass_fields__}, "dst": dst, "src": src})
    plan = _plan(g2, list(chunks), _members(g2))
    for c, idx in enumerate(chunks):
        want = _edges_into(idx, idx.size, dst, src)
        got = plan.into(c, dst, src, "d")
        for w, h in zip(want, got, strict=True):
            assert np.array_equal(w, h)


@pytest.mark.parametrize("name", RUNS)
def test_a_chunks_arrivals_are_the_whole_runs(name: str) -> None:
    g = _graph(name)
    mb = _members(g)
    assert mb.n_inst > 0
    chunks = _chunks(g)
    plan = _plan(g, list(chunks), mb)
    rng = np.random.default_rng(7)
    for idx in [*chunks, np.arange(g.start_ns.size)]:
        j = np.minimum(np.searchsorted(mb.nodes, idx), mb.nodes.size - 1)
        mpos = j[mb.nodes[j] == idx]  # the chunk's members (into mb.nodes)
        rel = _Arrivals.of(mb, mpos, plan.by_instance)
        for _ in range(3):
            ms = rng.integers(0, 10**6, size=mb.nodes.size, dtype=np.int64)
            want = _arrivals_of_starts(mb, ms)[mb.inst[mpos]]
            # as a round computes it: the members' starts, the pairs' firsts, the latest pair
            sub_ms = ms[rel.members]
            first = np.full(rel.n_pairs, np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(first, rel.pair, sub_ms)
            arrival = np.full(rel.n_inst, -(2**62), dtype=np.int64)
            np.maximum.at(arrival, rel.pair_inst, first)
            assert np.array_equal(arrival[rel.m_d], want)
            assert np.array_equal(rel.members[rel.mloc], mpos)


@pytest.mark.parametrize("name", RUNS[:2])
def test_a_sub_from_the_plan_is_the_searched_sub(name: str) -> None:
    """Every field of a chunk's settle data, with its edges from the plan and searched."""
    g = _graph(name)
    p = observed_params(g)
    mb = _members(g)
    chunks = _chunks(g)
    plan = _plan(g, list(chunks), mb)
    start = p.floor_ns.copy()
    kall = np.unique(np.concatenate([mb.nodes, g.edst])).astype(np.int64)
    st = _State(start, start + p.dur_ns, kall, np.zeros(kall.size, np.int64), 0)
    for c, idx in enumerate(chunks):
        if not idx.size:
            continue
        a, b = _sub(g, p, idx, mb, st, plan, c), _sub(g, p, idx, mb, st, plan, None)
        for f in a.__dataclass_fields__:
            va, vb = getattr(a, f), getattr(b, f)
            if isinstance(va, np.ndarray):
                assert np.array_equal(va, vb), f
            else:
                assert va == vb, f
