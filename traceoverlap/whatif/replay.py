"""Replay of the run graph (docs/whatif.md §2): the earliest-start schedule, vectorised per lane.

Every node ``i`` keeps, from the trace, a duration ``dur_ns`` and a *slack* ``slack_ns``: how
long after it was ready it started (host think time, launch latency; never negative: where the
trace breaks an edge the replay follows the edge, and that is the replay's error). A node is
ready at the latest of: its lane predecessor's end, the ends (launch calls: the starts) of its
edge sources, and, for the successor of a collective's node, the collective's end. So on a lane

    start_i = max(start_{i-1} + dur_{i-1}, R_i) + slack_i

which unrolls, with ``P_i`` the lane's running sum of slack (to i) and durations (before i), to
``start_i = P_i + cummax_{j<=i}(R_j + slack_j - P_j)``: one cumulative maximum per lane, for all
lanes at once. Collectives: an instance's arrival ``A`` is the latest start of its members' first
nodes; each member node ends at ``max(start + dur, A + post)`` where ``post`` is what followed the
last arrival on that member in the trace (the transfer, plus its own tail). Edges and collectives
are joined per round, until nothing moves (a fixpoint: starts only grow from a lower bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from .graph import RunGraph

I64 = npt.NDArray[np.int64]
NEG = np.int64(-(2**62))
#: Rounds after which the replay stops and says it did not settle.
MAX_ROUNDS = 10_000


@dataclass(frozen=True)
class Params:
    """What a scenario may change, per node (ns): ``dur_ns`` (for a matched collective's node:
    the part after the last arrival, the least it can take), ``slack_ns``, ``post_ns`` (matched
    collective nodes: end - last arrival; else unused) and ``floor_ns`` (a lane's first node with
    no edge: its observed start; other lane-first nodes: the run's first start)."""

    dur_ns: I64
    slack_ns: I64
    post_ns: I64
    floor_ns: I64


@dataclass(frozen=True)
class Schedule:
    start_ns: I64
    end_ns: I64
    rounds: int
    settled: bool


def _lane_first(lane: I64) -> npt.NDArray[np.bool_]:
    first = np.ones(lane.size, dtype=bool)
    first[1:] = lane[1:] != lane[:-1]
    return first


@dataclass(frozen=True)
class _Members:
    """Matched collective nodes: per node its dense instance (-1 none); per matched node its
    (instance, unit) pair id; per pair its instance."""

    dense: I64
    nodes: I64
    pair: I64
    pair_inst: I64
    n_inst: int


def _members(g: RunGraph) -> _Members:
    m = np.flatnonzero(g.inst >= 0)
    dense = np.full(g.inst.size, -1, dtype=np.int64)
    if m.size == 0:
        z = np.zeros(0, np.int64)
        return _Members(dense, z, z, z, 0)
    keys, inv = np.unique(g.inst[m], return_inverse=True)
    dense[m] = inv
    pk, pair = np.unique(inv.astype(np.int64) * max(g.n_units, 1) + g.unit[m], return_inverse=True)
    return _Members(
        dense, m, pair.astype(np.int64), (pk // max(g.n_units, 1)).astype(np.int64), keys.size
    )


def _arrivals_of(mb: _Members, start: I64) -> I64:
    """Per instance: the latest over its units of the unit's first (earliest) node start."""
    return _arrivals_of_starts(mb, start[mb.nodes])


def _arrivals_of_starts(mb: _Members, member_start: I64) -> I64:
    """:func:`_arrivals_of` from the starts of the collective nodes (in ``mb.nodes`` order)."""
    arr = np.full(mb.n_inst, NEG, dtype=np.int64)
    if mb.n_inst == 0:
        return arr
    first = np.full(mb.pair_inst.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, mb.pair, member_start)
    np.maximum.at(arr, mb.pair_inst, first)
    return arr


def _arrivals(g: RunGraph, start: I64) -> tuple[I64, I64]:
    """Per matched instance (dense id): its last arrival; and per node its dense id (-1 none)."""
    mb = _members(g)
    return _arrivals_of(mb, start), mb.dense


def _edge_ready(g: RunGraph, start: I64, end: I64) -> I64:
    ready = np.full(start.size, NEG, dtype=np.int64)
    if g.src.size:
        val = np.where(g.src_start, start[g.src], end[g.src]) + g.gap
        np.maximum.at(ready, g.dst, val)
    return ready


def observed_params(g: RunGraph) -> Params:
    """The parameters that make the replay reproduce the trace (the identity)."""
    start, end = g.start_ns, g.end_ns
    arrival, dense = _arrivals(g, start)
    matched = dense >= 0
    a = np.where(matched, arrival[np.maximum(dense, 0)] if arrival.size else 0, 0)
    post = np.where(matched, end - a, 0).astype(np.int64)
    floor_end = np.where(matched, end, NEG)
    if g.edst.size:
        np.maximum.at(floor_end, g.edst, end[g.esrc] + g.egap)
    has_floor = floor_end != NEG
    dur = np.where(has_floor, np.maximum(end - np.maximum(start, floor_end), 0), end - start)
    first = _lane_first(g.lane)
    ready = _observed_ready(g, start, end, first)
    has_edge = np.zeros(start.size, dtype=bool)
    has_edge[g.dst] = True
    t0 = int(start.min()) if start.size else 0
    floor = np.full(start.size, NEG, dtype=np.int64)
    floor[first] = np.where(has_edge[first], t0, start[first])
    ready = np.maximum(ready, floor)
    slack = np.maximum(start - ready, 0).astype(np.int64)
    return Params(dur.astype(np.int64), slack, post, floor)


def _observed_ready(g: RunGraph, start: I64, end: I64, first: npt.NDArray[np.bool_]) -> I64:
    """Per node, when the trace's own times allow it to start: its lane predecessor's end
    (none for a lane's ``first`` node) and every edge into it."""
    prev_end = np.empty_like(end)
    prev_end[0:1] = NEG
    prev_end[1:] = end[:-1]
    prev_end[first] = NEG
    return np.maximum(prev_end, _edge_ready(g, start, end))


def broken_edges(g: RunGraph) -> I64:
    """Per node: 1 where the trace started it before its lane predecessor ended or before an
    edge allowed (clock skew between host and device, overlapping ops on a lane, a clipped
    capture): there the replay follows the edge and departs from the trace."""
    start, end = g.start_ns, g.end_ns
    first = _lane_first(g.lane)
    ready = _observed_ready(g, start, end, first)
    return (start < ready).astype(np.int64)


def _lane_prefix(p: Params, first: npt.NDArray[np.bool_]) -> I64:
    """P_i: the lane's running sum of slack (to i) and durations (before i)."""
    dur_before = np.empty_like(p.dur_ns)
    dur_before[0:1] = 0
    dur_before[1:] = p.dur_ns[:-1]
    dur_before[first] = 0
    inc = p.slack_ns + dur_before
    c = np.cumsum(inc)
    base = c - inc  # sum before the node
    lane_base = np.maximum.accumulate(np.where(first, base, np.iinfo(np.int64).min))
    return (c - lane_base).astype(np.int64)


@dataclass
class _State:
    start: I64
    end: I64
    coll: I64
    t0: int


def _index_dtype(n: int) -> type[np.signedinteger[Any]]:
    """Positions among ``n`` nodes: int32 where they fit (half the memory of the per-node maps
    a settle builds over the whole graph)."""
    return np.int32 if n < 2**31 else np.int64


@dataclass(frozen=True)
class _Sub:
    """What the rounds over the nodes ``idx`` (a lane-ordered subset) reuse. Nothing outside the
    subset moves while it settles, so what comes from outside is read once: the lane floors
    (with the lane predecessors in earlier subsets), the edges from outside (their largest value
    per target), the other collective nodes' starts. Inside: the subset's parameters, its lane
    prefix and segment numbers, the edges between its nodes by position.

    ``sel``: the subset as an index array, or as a slice when it is one run of nodes (the whole
    graph: views, no copies)."""

    sel: I64 | slice
    first: npt.NDArray[np.bool_]
    floor: I64
    ext_ready: I64
    src_pos: I64
    src_start: npt.NDArray[np.bool_]
    gap: I64
    e_pos: I64
    ext_coll: I64
    esrc_pos: I64
    egap: I64
    ee_pos: I64
    slack: I64
    dur: I64
    prefix: I64
    seg: I64
    n_lanes: int
    d: I64
    msel: npt.NDArray[np.bool_]
    mpos: I64
    post: I64
    member_start: I64


def _sub(g: RunGraph, p: Params, idx: I64, mb: _Members, node_pos: I64, st: _State) -> _Sub:
    n = g.start_ns.size
    whole = idx.size == 0 or (int(idx[0]) + idx.size - 1 == int(idx[-1]))
    sel: I64 | slice = slice(int(idx[0]), int(idx[0]) + idx.size) if whole and idx.size else idx
    lane = g.lane[sel]
    first = _lane_first(lane)
    prev = idx - 1
    carried = first & (prev >= 0) & (g.lane[np.maximum(prev, 0)] == lane)
    floor = p.floor_ns[sel]
    if carried.any():
        # a subset's first node of a lane follows that lane's previous node (in an earlier
        # subset, which does not move while this one settles)
        pc = prev[carried]
        floor = floor.copy()
        floor[carried] = np.maximum(np.maximum(floor[carried], st.end[pc]), st.coll[pc])
    pos = np.full(n, -1, dtype=_index_dtype(n))  # per node its position in the subset
    pos[sel] = np.arange(idx.size)
    # edges into the subset: from outside, their value now (fixed) folded per target; from
    # inside, read from the subset's state each round
    e_in = np.flatnonzero(pos[g.dst] >= 0)
    e_src = pos[g.src[e_in]]
    inner = e_src >= 0
    ext_ready = np.full(idx.size, NEG, dtype=np.int64)
    e_out = e_in[~inner]
    if e_out.size:
        val = np.where(g.src_start[e_out], st.start[g.src[e_out]], st.end[g.src[e_out]])
        np.maximum.at(ext_ready, pos[g.dst[e_out]], val + g.gap[e_out])
    e_in = e_in[inner]
    ee_in = np.flatnonzero(pos[g.edst] >= 0)
    ee_src = pos[g.esrc[ee_in]]
    ee_inner = ee_src >= 0
    ext_coll = np.full(idx.size, NEG, dtype=np.int64)
    ee_out = ee_in[~ee_inner]
    if ee_out.size:
        np.maximum.at(ext_coll, pos[g.edst[ee_out]], st.end[g.esrc[ee_out]] + g.egap[ee_out])
    ee_in = ee_in[ee_inner]
    slack = p.slack_ns[sel]
    dur = p.dur_ns[sel]
    sub = Params(dur, slack, p.post_ns[sel], floor)
    d = mb.dense[sel]
    msel = d >= 0
    return _Sub(
        sel=sel,
        first=first,
        floor=floor,
        ext_ready=ext_ready,
        src_pos=e_src[inner],
        src_start=g.src_start[e_in],
        gap=g.gap[e_in],
        e_pos=pos[g.dst[e_in]],
        ext_coll=ext_coll,
        esrc_pos=ee_src[ee_inner],
        egap=g.egap[ee_in],
        ee_pos=pos[g.edst[ee_in]],
        slack=slack,
        dur=dur,
        prefix=_lane_prefix(sub, first),
        seg=np.cumsum(first).astype(np.int64) - 1,
        n_lanes=int(first.sum()),
        d=d,
        msel=msel,
        mpos=node_pos[idx[msel]],
        post=p.post_ns[sel][msel],
        member_start=st.start[mb.nodes],
    )


def _sub_cummax(v: I64, sb: _Sub) -> I64:
    """Cumulative maximum restarting at every lane of the subset (lanes are contiguous), its
    segment numbers reused."""
    if v.size == 0:
        return v
    lo, hi = int(v.min()), int(v.max())
    span = hi - lo + 1
    if span * (sb.n_lanes + 1) < 2**62:
        off = sb.seg * span
        shifted = v - lo
        shifted += off
        np.maximum.accumulate(shifted, out=shifted)
        shifted -= off
        shifted += lo
        return shifted
    # the lane ids only matter for grouping: the segment numbers group the same rows
    out = pd.Series(v).groupby(sb.seg, sort=False).cummax().to_numpy()
    return np.asarray(out, dtype=np.int64)


def _round(
    sb: _Sub, mb: _Members, start: I64, end: I64, coll: I64, t0: int
) -> tuple[I64, I64, I64, bool]:
    """One round over a subset, from its state (``start``, ``end``, ``coll``: the last round's):
    edges and collectives read from that state, lanes by one cumulative maximum. Returns the
    new state and whether anything moved."""
    ready = sb.ext_ready.copy()
    if sb.src_pos.size:
        val = np.where(sb.src_start, start[sb.src_pos], end[sb.src_pos]) + sb.gap
        np.maximum.at(ready, sb.e_pos, val)
    prev_coll = np.empty(coll.size, dtype=np.int64)
    prev_coll[0:1] = NEG
    prev_coll[1:] = coll[:-1]
    prev_coll[sb.first] = NEG
    # every start is >= the run's first start: clamping keeps the lane maxima in a narrow range
    np.maximum(ready, sb.floor, out=ready)
    np.maximum(ready, prev_coll, out=ready)
    np.maximum(ready, t0, out=ready)
    ready += sb.slack
    ready -= sb.prefix
    new_start = _sub_cummax(ready, sb)
    new_start += sb.prefix
    new_coll = np.full(coll.size, NEG, dtype=np.int64)
    if mb.n_inst and sb.mpos.size:
        ms = sb.member_start.copy()
        ms[sb.mpos] = new_start[sb.msel]
        arrival = _arrivals_of_starts(mb, ms)
        new_coll[sb.msel] = arrival[sb.d[sb.msel]] + sb.post
    np.maximum(new_coll, sb.ext_coll, out=new_coll)
    if sb.esrc_pos.size:
        np.maximum.at(new_coll, sb.ee_pos, end[sb.esrc_pos] + sb.egap)
    moved = not (np.array_equal(new_start, start) and np.array_equal(new_coll, coll))
    new_end = new_start + sb.dur
    np.maximum(new_end, new_coll, out=new_end)
    return new_start, new_end, new_coll, moved


def _settle(
    g: RunGraph, p: Params, idx: I64, mb: _Members, st: _State, max_rounds: int
) -> tuple[int, bool]:
    node_pos = np.full(g.start_ns.size, -1, dtype=_index_dtype(g.start_ns.size))
    node_pos[mb.nodes] = np.arange(mb.nodes.size)
    sb = _sub(g, p, idx, mb, node_pos, st)
    del node_pos
    # the subset's state, moved round by round and written back once
    start, end, coll = st.start[sb.sel], st.end[sb.sel], st.coll[sb.sel]
    rounds, settled = max_rounds, False
    for r in range(1, max_rounds + 1):
        start, end, coll, moved = _round(sb, mb, start, end, coll, st.t0)
        if not moved:
            rounds, settled = r, True
            break
    st.start[sb.sel] = start
    st.end[sb.sel] = end
    st.coll[sb.sel] = coll
    return rounds, settled


def _chunks(g: RunGraph) -> list[I64]:
    """The nodes of each step in step order (steps by their earliest observed start), then the
    rest: replaying step by step settles each in few rounds."""
    w = np.where((g.window >= 0) & (g.window < len(g.step_labels)), g.window, -1)
    if len(g.step_labels) < 2:
        return []
    t = np.full(len(g.step_labels), np.iinfo(np.int64).max, dtype=np.int64)
    ok = w >= 0
    np.minimum.at(t, w[ok], g.start_ns[ok])
    rank = np.empty(t.size, dtype=np.int64)
    rank[np.argsort(t, kind="stable")] = np.arange(t.size)
    key = np.where(ok, rank[np.maximum(w, 0)], -1)
    order = np.argsort(key, kind="stable")  # stable: lane order kept inside every chunk
    bounds = np.searchsorted(key[order], np.arange(-1, t.size + 1))
    return [np.sort(order[bounds[i] : bounds[i + 1]]) for i in range(bounds.size - 1)]


def replay(g: RunGraph, p: Params, max_rounds: int = MAX_ROUNDS) -> Schedule:
    """The earliest-start schedule of the graph under ``p``: step by step, then the whole run
    until nothing moves (starts only grow from a lower bound, so this is the least fixpoint)."""
    n = g.start_ns.size
    if n == 0:
        z = np.zeros(0, np.int64)
        return Schedule(z, z, 0, True)
    mb = _members(g)
    start = np.maximum(p.floor_ns, int(g.start_ns.min())).astype(np.int64)
    st = _State(start, start + p.dur_ns, np.full(n, NEG, dtype=np.int64), int(start.min()))
    rounds = 0
    for idx in _chunks(g):
        if idx.size:
            rounds += _settle(g, p, idx, mb, st, max_rounds)[0]
    r, settled = _settle(g, p, np.arange(n), mb, st, max_rounds)
    return Schedule(st.start, st.end, rounds + r, settled)


@dataclass(frozen=True)
class StepTimes:
    """Per (unit, global step): observed and replayed step time (ns; -1 where the unit has no
    such step). ``run_*``: per step, the mean over the units that have it."""

    observed_ns: I64
    replayed_ns: I64
    run_observed_ns: npt.NDArray[np.float64]
    run_replayed_ns: npt.NDArray[np.float64]


def step_times(g: RunGraph, s: Schedule, other: Schedule | None = None) -> StepTimes:
    """A step's replayed time: its observed time moved by how much its last activity end and
    first activity start moved (the margins around them are kept).

    A unit's later steps begin where its previous step ended; its first step at its first
    start. ``other``: a second schedule of the same graph (a scenario and the identity replay,
    either way round) whose steps are to be compared with these. A unit that meets its peers
    in a matched collective in its first step is synchronised with them: a late first start
    there is lateness from before the capture that its peers waited for, its own time. Its
    first step is then measured from the earlier of its first starts in the two schedules, in
    both, so that a unit the scenario starts earlier (begun with its peers) is not read as a
    longer step, nor one it starts later as a shorter one. A unit that meets no peer there
    is measured from its own first start in each (an offset nobody waited for buys nothing)."""
    nu, ns = g.win_start_ns.shape
    act = (g.kind != 3) & (g.window >= 0)
    idx = g.unit[act] * ns + g.window[act]
    big = np.iinfo(np.int64).max

    def span(start: I64, end: I64) -> tuple[I64, I64]:
        lo = np.full(nu * ns, big, dtype=np.int64)
        hi = np.full(nu * ns, NEG, dtype=np.int64)
        np.minimum.at(lo, idx, start[act])
        np.maximum.at(hi, idx, end[act])
        return lo.reshape(nu, ns), hi.reshape(nu, ns)

    olo, ohi = span(g.start_ns, g.end_ns)
    rlo, rhi = span(s.start_ns, s.end_ns)
    if other is not None:
        met = np.zeros(nu * ns, dtype=bool)
        m = (g.inst >= 0) & (g.window >= 0)
        met[g.unit[m] * ns + g.window[m]] = True
        rlo = np.where(
            met.reshape(nu, ns), np.minimum(rlo, span(other.start_ns, other.end_ns)[0]), rlo
        )
    present = g.win_start_ns >= 0
    observed = np.where(present, g.win_end_ns - g.win_start_ns, -1).astype(np.int64)
    has = present & (ohi != NEG)
    moved_end = np.where(has, rhi - ohi, 0)
    # a step begins where the unit's previous step ended (its first step: at its first start),
    # so the steps of a unit sum to its whole replayed run
    moved_begin = np.where(has, rlo - olo, 0)
    order = np.argsort(np.where(present, g.win_start_ns, np.iinfo(np.int64).max), axis=1)
    rows = np.arange(nu)
    last = np.full(nu, -1, dtype=np.int64)
    for k in range(ns):
        w = order[:, k]
        ok = has[rows, w]
        prev_ok = ok & (last >= 0)
        moved_begin[rows[prev_ok], w[prev_ok]] = moved_end[rows[prev_ok], last[prev_ok]]
        last = np.where(ok, w, last)
    replayed = np.where(has, observed + moved_end - moved_begin, observed).astype(np.int64)
    cnt = present.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        run_obs = np.where(cnt > 0, np.where(present, observed, 0).sum(axis=0) / cnt, np.nan)
        run_rep = np.where(cnt > 0, np.where(present, replayed, 0).sum(axis=0) / cnt, np.nan)
    return StepTimes(observed, replayed, run_obs, run_rep)


__all__ = ["Params", "Schedule", "StepTimes", "observed_params", "replay", "step_times"]
