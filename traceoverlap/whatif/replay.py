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


def _seg_cummax(v: I64, lane: I64, first: npt.NDArray[np.bool_]) -> I64:
    """Cumulative maximum restarting at every lane (lanes are contiguous)."""
    if v.size == 0:
        return v
    lo, hi = int(v.min()), int(v.max())
    n_lanes = int(first.sum())
    span = hi - lo + 1
    if span * (n_lanes + 1) < 2**62:
        seg = np.cumsum(first).astype(np.int64) - 1
        shifted = (v - lo) + seg * span
        return (np.maximum.accumulate(shifted) - seg * span + lo).astype(np.int64)
    out = pd.Series(v).groupby(lane, sort=False).cummax().to_numpy()
    return np.asarray(out, dtype=np.int64)


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


@dataclass(frozen=True)
class _Sub:
    """What a round over the nodes ``idx`` (a lane-ordered subset) reuses: lane starts, the lane
    predecessors in earlier subsets, the edges into the subset (with their targets' positions),
    the lane prefix, and where its collective nodes sit among all collective nodes."""

    idx: I64
    first: npt.NDArray[np.bool_]
    carried: npt.NDArray[np.bool_]
    pc: I64
    e_in: I64
    e_pos: I64
    ee_in: I64
    ee_pos: I64
    prefix: I64
    d: I64
    msel: npt.NDArray[np.bool_]
    mpos: I64


def _sub(g: RunGraph, p: Params, idx: I64, mb: _Members, node_pos: I64) -> _Sub:
    lane = g.lane[idx]
    first = _lane_first(lane)
    prev = idx - 1
    carried = first & (prev >= 0) & (g.lane[np.maximum(prev, 0)] == lane)
    in_sub = np.zeros(g.start_ns.size, dtype=bool)
    in_sub[idx] = True
    e_in = np.flatnonzero(in_sub[g.dst])
    ee_in = np.flatnonzero(in_sub[g.edst])
    sub = Params(p.dur_ns[idx], p.slack_ns[idx], p.post_ns[idx], p.floor_ns[idx])
    d = mb.dense[idx]
    msel = d >= 0
    return _Sub(
        idx=idx,
        first=first,
        carried=carried,
        pc=prev[carried],
        e_in=e_in,
        e_pos=np.searchsorted(idx, g.dst[e_in]),
        ee_in=ee_in,
        ee_pos=np.searchsorted(idx, g.edst[ee_in]),
        prefix=_lane_prefix(sub, first),
        d=d,
        msel=msel,
        mpos=node_pos[idx[msel]],
    )


def _round(g: RunGraph, p: Params, sb: _Sub, mb: _Members, st: _State) -> bool:
    """One round over a subset: edges and collectives read from the current state, lanes by one
    cumulative maximum. Returns whether anything moved."""
    idx = sb.idx
    floor = p.floor_ns[idx].copy()
    # a subset's first node of a lane follows that lane's previous node (in an earlier subset)
    floor[sb.carried] = np.maximum(np.maximum(floor[sb.carried], st.end[sb.pc]), st.coll[sb.pc])
    ready = np.full(idx.size, NEG, dtype=np.int64)
    if sb.e_in.size:
        e = sb.e_in
        val = np.where(g.src_start[e], st.start[g.src[e]], st.end[g.src[e]]) + g.gap[e]
        np.maximum.at(ready, sb.e_pos, val)
    prev_coll = np.empty(idx.size, dtype=np.int64)
    prev_coll[0:1] = NEG
    prev_coll[1:] = st.coll[idx[:-1]]
    prev_coll[sb.first] = NEG
    # every start is >= the run's first start: clamping keeps the lane maxima in a narrow range
    ready = np.maximum(np.maximum(np.maximum(ready, floor), prev_coll), st.t0)
    new_start = sb.prefix + _seg_cummax(ready + p.slack_ns[idx] - sb.prefix, g.lane[idx], sb.first)
    new_coll = np.full(idx.size, NEG, dtype=np.int64)
    if mb.n_inst and sb.msel.any():
        ms = st.start[mb.nodes]
        ms[sb.mpos] = new_start[sb.msel]
        arrival = _arrivals_of_starts(mb, ms)
        new_coll[sb.msel] = arrival[sb.d[sb.msel]] + p.post_ns[idx[sb.msel]]
    if sb.ee_in.size:
        ee = sb.ee_in
        np.maximum.at(new_coll, sb.ee_pos, st.end[g.esrc[ee]] + g.egap[ee])
    moved = not (
        np.array_equal(new_start, st.start[idx]) and np.array_equal(new_coll, st.coll[idx])
    )
    st.start[idx] = new_start
    st.coll[idx] = new_coll
    st.end[idx] = np.maximum(new_start + p.dur_ns[idx], new_coll)
    return moved


def _settle(
    g: RunGraph, p: Params, idx: I64, mb: _Members, st: _State, max_rounds: int
) -> tuple[int, bool]:
    node_pos = np.full(g.start_ns.size, -1, dtype=np.int64)
    node_pos[mb.nodes] = np.arange(mb.nodes.size)
    sb = _sub(g, p, idx, mb, node_pos)
    for r in range(1, max_rounds + 1):
        if not _round(g, p, sb, mb, st):
            return r, True
    return max_rounds, False


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


def step_times(g: RunGraph, s: Schedule) -> StepTimes:
    """A step's replayed time: its observed time moved by how much its last activity end and
    first activity start moved (the margins around them are kept)."""
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
