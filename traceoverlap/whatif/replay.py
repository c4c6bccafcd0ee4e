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

from ..core import intervals as iv
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


def _lane_first(lane: npt.NDArray[np.signedinteger[Any]]) -> npt.NDArray[np.bool_]:
    first = np.ones(lane.size, dtype=bool)
    first[1:] = lane[1:] != lane[:-1]
    return first


@dataclass(frozen=True)
class _Members:
    """Matched collective nodes (``nodes``, sorted) and per matched node its dense instance
    (``inst``) and its (instance, unit) pair id; per pair its instance."""

    nodes: I64
    inst: I64
    pair: I64
    pair_inst: I64
    n_inst: int

    def by_instance(self) -> tuple[I64, I64]:
        """The members grouped by instance (ascending within one): instance ``i``'s are
        ``order[bounds[i]:bounds[i + 1]]``."""
        bounds = np.zeros(self.n_inst + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.inst, minlength=self.n_inst), out=bounds[1:])
        return np.argsort(self.inst, kind="stable").astype(np.int64), bounds


def _members(g: RunGraph) -> _Members:
    m = np.flatnonzero(g.inst >= 0)
    if m.size == 0:
        z = np.zeros(0, np.int64)
        return _Members(z, z, z, z, 0)
    keys, inv = np.unique(g.inst[m], return_inverse=True)
    inv = inv.astype(np.int64)
    pk, pair = np.unique(inv * max(g.n_units, 1) + g.unit[m], return_inverse=True)
    return _Members(
        m, inv, pair.astype(np.int64), (pk // max(g.n_units, 1)).astype(np.int64), keys.size
    )


@dataclass(frozen=True)
class _Arrivals:
    """What a subset's rounds need for the arrivals of its collective instances (the latest
    over their units of the unit's first member start), from those instances' members alone
    (a round over the subset read every member of the run: the run's collectives times its
    rounds): ``members`` (into ``_Members.nodes``, sorted), their pairs (``pair``, numbered
    ``0 .. n_pairs``) and each pair's instance (``pair_inst``, numbered ``0 .. n_inst``); per
    member of the subset (``mpos``) where it is among ``members`` (``mloc``) and its
    instance's number (``m_d``)."""

    members: I64
    pair: I64
    pair_inst: I64
    n_pairs: int
    n_inst: int
    mloc: I64
    m_d: I64

    @staticmethod
    def of(mb: _Members, mpos: IX, by_instance: tuple[I64, I64]) -> _Arrivals:
        """``by_instance``: ``mb.by_instance()``."""
        m_inst = mb.inst[mpos]
        need = np.unique(m_inst)
        if need.size == 0:
            z = np.zeros(0, np.int64)
            return _Arrivals(z, z, z, 0, 0, z, z)
        order, bounds = by_instance
        members = np.sort(order[iv.range_pairs(bounds[need], bounds[need + 1])[1]])
        pk, pair = np.unique(mb.pair[members], return_inverse=True)
        return _Arrivals(
            members,
            pair.astype(np.int64),
            np.searchsorted(need, mb.pair_inst[pk]),
            pk.size,
            need.size,
            np.searchsorted(members, mpos),
            np.searchsorted(need, m_inst),
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


def observed_params(g: RunGraph) -> Params:
    """The parameters that make the replay reproduce the trace (the identity). Per node arrays
    are built in place: the four it returns and a mask (a large run's graph is most of the
    memory already)."""
    start, end = g.start_ns, g.end_ns
    n = start.size
    mb = _members(g)
    arrival = _arrivals_of(mb, start)
    post = np.zeros(n, dtype=np.int64)
    post[mb.nodes] = end[mb.nodes] - arrival[mb.inst]
    # the nodes that end no earlier than a collective's end or an end edge allows: matched
    # collective nodes and edge targets (few), their duration what follows that floor
    k = np.unique(np.concatenate([mb.nodes, g.edst]))
    floor_end = np.full(k.size, NEG, dtype=np.int64)
    floor_end[np.searchsorted(k, mb.nodes)] = end[mb.nodes]
    if g.edst.size:
        np.maximum.at(floor_end, np.searchsorted(k, g.edst), end[g.esrc] + g.egap)
    has = floor_end != NEG
    k, floor_end = k[has], floor_end[has]
    dur = end - start
    dur[k] = np.maximum(end[k] - np.maximum(start[k], floor_end), 0)
    first = _lane_first(g.lane)
    ready = _observed_ready(g, start, end, first)
    has_edge = np.zeros(n, dtype=bool)
    has_edge[g.dst] = True
    t0 = int(start.min()) if n else 0
    floor = np.full(n, NEG, dtype=np.int64)
    floor[first] = np.where(has_edge[first], t0, start[first])
    del has_edge
    np.maximum(ready, floor, out=ready)
    slack = np.subtract(start, ready, out=ready)
    np.maximum(slack, 0, out=slack)
    return Params(dur.astype(np.int64, copy=False), slack, post, floor)


def _observed_ready(g: RunGraph, start: I64, end: I64, first: npt.NDArray[np.bool_]) -> I64:
    """Per node, when the trace's own times allow it to start: its lane predecessor's end
    (none for a lane's ``first`` node) and every edge into it."""
    ready = np.empty_like(end)
    ready[0:1] = NEG
    ready[1:] = end[:-1]
    ready[first] = NEG
    if g.src.size:
        val = np.where(g.src_start, start[g.src], end[g.src]) + g.gap
        np.maximum.at(ready, g.dst, val)
    return ready


def broken_edges(g: RunGraph) -> I64:
    """Per node: 1 where the trace started it before its lane predecessor ended or before an
    edge allowed (clock skew between host and device, overlapping ops on a lane, a clipped
    capture): there the replay follows the edge and departs from the trace."""
    start, end = g.start_ns, g.end_ns
    first = _lane_first(g.lane)
    ready = _observed_ready(g, start, end, first)
    return (start < ready).astype(np.int64)


def _lane_prefix(p: Params, first: npt.NDArray[np.bool_]) -> I64:
    """P_i: the lane's running sum of slack (to i) and durations (before i). One array: the
    running sum over the subset, less the largest running sum before a lane's first node up to
    the node's lane (per lane, then spread a block at a time)."""
    c = np.empty_like(p.dur_ns)
    c[0:1] = 0
    c[1:] = p.dur_ns[:-1]
    c[first] = 0
    c += p.slack_ns
    np.cumsum(c, out=c)
    fidx = np.flatnonzero(first)
    before = np.zeros(fidx.size, dtype=np.int64)
    before[fidx > 0] = c[fidx[fidx > 0] - 1]
    lane_base = np.maximum.accumulate(before)
    done = 0  # lanes begun before the block
    for a in range(0, c.size, _BLOCK):
        f = first[a : a + _BLOCK]
        seg = np.cumsum(f, dtype=np.intp)
        seg += done - 1
        c[a : a + _BLOCK] -= lane_base[seg]
        done += int(np.count_nonzero(f))
    return c.astype(np.int64, copy=False)


@dataclass
class _State:
    """The schedule so far: per node ``start``, ``end``; a node's collective end ``coll`` only
    where one can be set (matched collective nodes and ``edst`` targets, ``kall``, sorted)."""

    start: I64
    end: I64
    kall: I64
    coll: I64
    t0: int

    def coll_at(self, x: npt.NDArray[np.signedinteger[Any]]) -> I64:
        """The collective ends of the nodes ``x`` (NEG where none)."""
        if self.kall.size == 0:
            return np.full(x.size, NEG, dtype=np.int64)
        j = np.minimum(np.searchsorted(self.kall, x), self.kall.size - 1)
        return np.where(self.kall[j] == x, self.coll[j], NEG)


IX = npt.NDArray[np.signedinteger[Any]]


def _index_dtype(n: int) -> type[np.signedinteger[Any]]:
    """Positions among ``n`` nodes: int32 where they fit (half the memory of the per-node maps
    a settle builds over the whole graph)."""
    return np.int32 if n < 2**31 else np.int64


#: A round goes over this many nodes at a time: its temporaries are a block's, not the whole
#: run's, and a block's arrays stay in the cache between its passes (1 MB each).
_BLOCK = 1 << 17


@dataclass(frozen=True)
class _Sub:
    """What the rounds over a subset (lane-ordered nodes) reuse. Nothing outside the subset moves
    while it settles, so what comes from outside is read once: the lane floors (with the lane
    predecessors in earlier subsets), the edges from outside (their largest value per target),
    the other collective nodes' starts. Inside: the subset's parameters, its lane prefix, the
    edges between its nodes by position.

    ``sel``: the subset as an index array, or as a slice when it is one run of nodes (the whole
    graph: views, no copies). A node's collective end (``coll``) is set only at the subset's
    matched collective nodes and the targets of ``esrc``/``edst`` edges, ``knodes`` (positions,
    sorted; ``kglob``: the same nodes in the graph): the rounds keep it there alone, and a
    node's end is ``max(start + dur, coll)``, so it is read only where an edge reads it."""

    sel: IX | slice
    first: npt.NDArray[np.bool_]
    floor: I64
    ext_ready: I64 | None
    src_pos: IX
    src_start: npt.NDArray[np.bool_]
    src_dur: I64
    src_ke: IX
    src_kk: IX
    gap: I64
    e_pos: IX
    knodes: IX
    kglob: IX
    nxt_pos: IX
    nxt_k: IX
    ext_coll: I64
    esrc_pos: IX
    esrc_dur: I64
    esrc_ke: IX
    esrc_kk: IX
    egap: I64
    ee_k: IX
    slack: I64
    dur: I64
    prefix: I64
    seg: IX | None
    n_lanes: int
    m_pos: IX
    m_k: IX
    m_d: IX
    mloc: IX
    post: I64
    member_start: I64
    rel_pair: IX
    rel_pair_inst: IX
    n_rel_pairs: int
    n_rel_inst: int


def _pos_in(sel: IX | slice, m: int, x: IX) -> IX:
    """Per node id in ``x``: its position in the subset ``sel`` (of ``m`` nodes), -1 outside."""
    if isinstance(sel, slice):
        a = int(sel.start)
        return np.where((x >= a) & (x < a + m), x - a, -1)
    j = np.minimum(np.searchsorted(sel, x), max(m - 1, 0))
    return np.where(sel[j] == x, j, -1) if m else np.full(x.size, -1, dtype=np.int64)


def _in_k(knodes: IX, x: IX) -> tuple[IX, IX]:
    """Of the positions ``x``: which are among ``knodes`` (indices into ``x``) and where."""
    if knodes.size == 0 or x.size == 0:
        z = np.zeros(0, np.int64)
        return z, z
    j = np.minimum(np.searchsorted(knodes, x), knodes.size - 1)
    hit = np.flatnonzero(knodes[j] == x)
    return hit, j[hit]


@dataclass(frozen=True)
class _Plan:
    """What a replay's settles look up, found once per replay (a settle looked among every
    edge and every collective member of the graph: times the steps, and times the rounds, the
    most of a what-if): per node its chunk (:func:`_chunks`) and its position there; per edge
    set (``dst``/``src``, ``edst``/``esrc``) the edge ids grouped by their target's chunk,
    ascending within a chunk (``bounds[c]`` to ``bounds[c + 1]``); the collective members by
    instance (:meth:`_Members.by_instance`)."""

    chunk_of: IX
    pos_of: IX
    order: IX
    bounds: I64
    e_order: IX
    e_bounds: I64
    by_instance: tuple[I64, I64]

    def into(self, c: int, dst: IX, src: IX, edges: str) -> tuple[IX, IX, IX]:
        """Chunk ``c``'s edges (``edges``: "d" for dst/src, "e" for edst/esrc): their ids
        (ascending), their targets' positions in the chunk, their sources' (-1 outside it)."""
        order, bounds = (self.order, self.bounds) if edges == "d" else (self.e_order, self.e_bounds)
        e_in = order[bounds[c] : bounds[c + 1]]
        d_in = self.pos_of[dst[e_in]]
        s = src[e_in]
        return e_in, d_in, np.where(self.chunk_of[s] == c, self.pos_of[s], -1)


def _plan(g: RunGraph, chunks: list[IX], mb: _Members) -> _Plan:
    n = g.start_ns.size
    ix = _index_dtype(max(n, g.dst.size, g.edst.size))  # (int32: half the memory)
    chunk_of = np.full(n if chunks else 0, -1, dtype=np.int32)  # (every node is in one)
    pos_of = np.zeros(n if chunks else 0, dtype=ix)
    for c, idx in enumerate(chunks):
        chunk_of[idx] = c
        pos_of[idx] = np.arange(idx.size, dtype=ix)

    def grouped(dst: IX) -> tuple[IX, I64]:
        if not chunks:
            return np.zeros(0, dtype=ix), np.zeros(1, dtype=np.int64)
        key = chunk_of[dst]
        bounds = np.zeros(len(chunks) + 1, dtype=np.int64)
        np.cumsum(np.bincount(key, minlength=len(chunks)), out=bounds[1:])
        return np.argsort(key, kind="stable").astype(ix, copy=False), bounds

    order, bounds = grouped(g.dst)
    e_order, e_bounds = grouped(g.edst)
    return _Plan(chunk_of, pos_of, order, bounds, e_order, e_bounds, mb.by_instance())


def _edges_into(sel: IX | slice, m: int, dst: IX, src: IX) -> tuple[IX, IX, IX]:
    """The edges into the subset ``sel`` (of ``m`` nodes), found among all: their ids
    (ascending), their targets' positions, their sources' (-1 outside it)."""
    dpos = _pos_in(sel, m, dst)
    e_in = np.flatnonzero(dpos >= 0)
    return e_in, dpos[e_in], _pos_in(sel, m, src[e_in])


def _sub(
    g: RunGraph,
    p: Params,
    sel_in: IX | slice,
    mb: _Members,
    st: _State,
    plan: _Plan,
    chunk: int | None = None,
) -> _Sub:
    """``chunk``: the subset is that chunk of ``plan``'s (its edges found by it), else they
    are found among all edges (the whole run's settle: all of them)."""
    sel: IX | slice = sel_in
    if not isinstance(sel, slice) and sel.size and int(sel[0]) + sel.size - 1 == int(sel[-1]):
        sel = slice(int(sel[0]), int(sel[0]) + sel.size)
    lane = g.lane[sel]
    m = lane.size
    first = _lane_first(lane)
    # a subset's first node of a lane follows that lane's previous node (in an earlier subset,
    # which does not move while this one settles)
    if isinstance(sel, slice):
        a = int(sel.start)
        cpos = np.array([0] if a > 0 and m and g.lane[a - 1] == lane[0] else [], dtype=np.int64)
        pc = cpos + a - 1
    else:
        prev = sel - 1
        carried = first & (prev >= 0) & (g.lane[np.maximum(prev, 0)] == lane)
        cpos = np.flatnonzero(carried)
        pc = prev[cpos]
    floor = p.floor_ns[sel]
    if cpos.size:
        floor = floor.copy()
        floor[cpos] = np.maximum(np.maximum(floor[cpos], st.end[pc]), st.coll_at(pc))
    # edges into the subset: from outside, their value now (fixed) folded per target; from
    # inside, read from the subset's state each round
    if chunk is not None:
        e_in, d_in, e_src = plan.into(chunk, g.dst, g.src, "d")
        ee_in, ed_in, ee_src = plan.into(chunk, g.edst, g.esrc, "e")
    else:
        e_in, d_in, e_src = _edges_into(sel, m, g.dst, g.src)
        ee_in, ed_in, ee_src = _edges_into(sel, m, g.edst, g.esrc)
    inner = e_src >= 0
    ext_ready = None
    e_out = e_in[~inner]
    if e_out.size:
        ext_ready = np.full(m, NEG, dtype=np.int64)
        val = np.where(g.src_start[e_out], st.start[g.src[e_out]], st.end[g.src[e_out]])
        np.maximum.at(ext_ready, d_in[~inner], val + g.gap[e_out])
    # by target: the rounds go over the subset a block of nodes at a time
    by_dst = np.argsort(d_in[inner], kind="stable")
    src_pos = e_src[inner][by_dst]
    e_in = e_in[inner][by_dst]
    e_pos = d_in[inner][by_dst]
    ee_inner = ee_src >= 0
    ee_out = ee_in[~ee_inner]
    ee_in = ee_in[ee_inner]
    ed_out, ed_in = ed_in[~ee_inner], ed_in[ee_inner]
    if isinstance(sel, slice):
        lo, hi = np.searchsorted(mb.nodes, [int(sel.start), int(sel.start) + m])
        mpos = np.arange(lo, hi)
        m_glob = mb.nodes[lo:hi]
        m_pos = m_glob - int(sel.start)
    else:
        j = np.minimum(np.searchsorted(mb.nodes, sel), max(mb.nodes.size - 1, 0))
        m_pos = np.flatnonzero(mb.nodes[j] == sel) if mb.nodes.size else j[:0]
        mpos = j[m_pos]
        m_glob = sel[m_pos]
    knodes = np.unique(np.concatenate([m_pos, ed_out, ed_in]))
    kglob = knodes + int(sel.start) if isinstance(sel, slice) else sel[knodes]
    ext_coll = np.full(knodes.size, NEG, dtype=np.int64)
    if ee_out.size:
        kk = np.searchsorted(knodes, ed_out)
        np.maximum.at(ext_coll, kk, st.end[g.esrc[ee_out]] + g.egap[ee_out])
    nxt = knodes + 1
    ok = nxt < m
    ok[ok] = ~first[nxt[ok]]
    slack = p.slack_ns[sel]
    dur = p.dur_ns[sel]
    rel = _Arrivals.of(mb, mpos, plan.by_instance)
    src_ke, src_kk = _in_k(knodes, src_pos)
    esrc_pos = ee_src[ee_inner]
    esrc_ke, esrc_kk = _in_k(knodes, esrc_pos)
    return _Sub(
        sel=sel,
        first=first,
        floor=floor,
        ext_ready=ext_ready,
        src_pos=src_pos,
        src_start=g.src_start[e_in],
        src_dur=dur[src_pos],
        src_ke=src_ke,
        src_kk=src_kk,
        gap=g.gap[e_in],
        e_pos=e_pos,
        knodes=knodes,
        kglob=kglob,
        nxt_pos=nxt[ok],
        nxt_k=np.flatnonzero(ok),
        ext_coll=ext_coll,
        esrc_pos=esrc_pos,
        esrc_dur=dur[esrc_pos],
        esrc_ke=esrc_ke,
        esrc_kk=esrc_kk,
        egap=g.egap[ee_in],
        ee_k=np.searchsorted(knodes, ed_in),
        slack=slack,
        dur=dur,
        prefix=_lane_prefix(Params(dur, slack, p.post_ns[sel], floor), first),
        # a step's rounds are many: its lane numbers kept (int32); the whole run's are few (and
        # its lane numbers a whole-run array): made per round
        seg=None if isinstance(sel, slice) else np.cumsum(first, dtype=_index_dtype(m)),
        n_lanes=int(np.count_nonzero(first)),
        m_pos=m_pos,
        m_k=np.searchsorted(knodes, m_pos),
        m_d=rel.m_d,
        mloc=rel.mloc,
        post=p.post_ns[m_glob],
        member_start=st.start[mb.nodes[rel.members]],
        rel_pair=rel.pair,
        rel_pair_inst=rel.pair_inst,
        n_rel_pairs=rel.n_pairs,
        n_rel_inst=rel.n_inst,
    )


def _lane_cummax(blk: I64, first: npt.NDArray[np.bool_], seg: IX | None) -> None:
    """Cumulative maximum of ``blk`` in place, restarting where ``first`` (lanes are
    contiguous): one pass, each lane shifted above the one before. ``seg``: the running count
    of ``first`` over the block, where kept."""
    lo, hi = int(blk.min()), int(blk.max())
    span = hi - lo + 1
    off = seg.astype(np.int64) if seg is not None else np.cumsum(first, dtype=np.int64)
    if span * (int(off[-1]) + 2) < 2**62:
        off -= off[0]
        off *= span
        blk -= lo
        blk += off
        np.maximum.accumulate(blk, out=blk)
        blk -= off
        blk += lo
        return
    # the lane ids only matter for grouping: the lane starts numbered group the same rows
    blk[:] = pd.Series(blk).groupby(off, sort=False).cummax().to_numpy()


def _ends_at(start: I64, coll: I64, pos: IX, dur: I64, ke: IX, kk: IX) -> I64:
    """The ends of the nodes at positions ``pos`` (durations ``dur``): start + dur, or their
    collective end where later (``ke``: which of them have one, ``kk``: where in ``coll``)."""
    e = start[pos] + dur
    if ke.size:
        e[ke] = np.maximum(e[ke], coll[kk])
    return e


def _round(sb: _Sub, mb: _Members, start: I64, coll: I64, t0: int) -> tuple[I64, bool]:
    """One round over a subset, from its state (``start``; ``coll`` at ``sb.knodes``: the last
    round's): edges and collectives read from that state, lanes by one cumulative maximum.
    What the edges read from the old state is read first; then the new starts go into
    ``start`` in place, a block of nodes at a time (a lane that goes on into the next block
    carries its maximum so far). Returns the new collective ends and whether anything moved."""
    val = np.zeros(0, np.int64)
    if sb.src_pos.size:
        end = _ends_at(start, coll, sb.src_pos, sb.src_dur, sb.src_ke, sb.src_kk)
        val = np.where(sb.src_start, start[sb.src_pos], end) + sb.gap
    ee_val = np.zeros(0, np.int64)
    if sb.esrc_pos.size:
        end = _ends_at(start, coll, sb.esrc_pos, sb.esrc_dur, sb.esrc_ke, sb.esrc_kk)
        ee_val = end + sb.egap
    nxt_val = coll[sb.nxt_k]  # the lane successor of a collective's node: the collective's end
    m = start.size
    moved = False
    carry = 0
    for a in range(0, m, _BLOCK):
        b = min(a + _BLOCK, m)
        # every start is >= the run's first start: clamping keeps the lane maxima in a narrow
        # range
        ready = np.maximum(sb.floor[a:b], t0)
        if sb.ext_ready is not None:
            np.maximum(ready, sb.ext_ready[a:b], out=ready)
        i0, i1 = np.searchsorted(sb.e_pos, [a, b])
        if i1 > i0:
            np.maximum.at(ready, sb.e_pos[i0:i1] - a, val[i0:i1])
        j0, j1 = np.searchsorted(sb.nxt_pos, [a, b])
        if j1 > j0:
            at = sb.nxt_pos[j0:j1] - a
            ready[at] = np.maximum(ready[at], nxt_val[j0:j1])
        ready += sb.slack[a:b]
        ready -= sb.prefix[a:b]
        if a and not sb.first[a]:
            ready[0] = max(int(ready[0]), carry)
        _lane_cummax(ready, sb.first[a:b], None if sb.seg is None else sb.seg[a:b])
        carry = int(ready[-1])
        ready += sb.prefix[a:b]
        if not moved and not np.array_equal(ready, start[a:b]):
            moved = True
        start[a:b] = ready
    new_coll = np.full(coll.size, NEG, dtype=np.int64)
    if mb.n_inst and sb.m_pos.size:
        # the arrivals of the subset's instances alone, from their members (some outside it)
        ms = sb.member_start.copy()
        ms[sb.mloc] = start[sb.m_pos]
        first = np.full(sb.n_rel_pairs, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, sb.rel_pair, ms)
        arrival = np.full(sb.n_rel_inst, NEG, dtype=np.int64)
        np.maximum.at(arrival, sb.rel_pair_inst, first)
        new_coll[sb.m_k] = arrival[sb.m_d] + sb.post
    np.maximum(new_coll, sb.ext_coll, out=new_coll)
    if ee_val.size:
        np.maximum.at(new_coll, sb.ee_k, ee_val)
    moved = moved or not np.array_equal(new_coll, coll)
    return new_coll, moved


def _settle(
    g: RunGraph,
    p: Params,
    sel: IX | slice,
    mb: _Members,
    st: _State,
    max_rounds: int,
    plan: _Plan,
    chunk: int | None = None,
) -> tuple[int, bool]:
    sb = _sub(g, p, sel, mb, st, plan, chunk)
    # the subset's state, moved round by round in place (the whole run's: the schedule's own
    # arrays) and written back once
    start = st.start[sb.sel]
    k_st = np.searchsorted(st.kall, sb.kglob)  # the subset's collective ends in the state
    coll = st.coll[k_st]
    rounds, settled = max_rounds, False
    for r in range(1, max_rounds + 1):
        coll, moved = _round(sb, mb, start, coll, st.t0)
        if not moved:
            rounds, settled = r, True
            break
    if isinstance(sb.sel, slice) and st.end.size == 0:
        st.end = start + sb.dur
    elif isinstance(sb.sel, slice):
        np.add(start, sb.dur, out=st.end[sb.sel])
    else:
        st.start[sb.sel] = start
        st.end[sb.sel] = start + sb.dur
    st.end[sb.kglob] = np.maximum(st.end[sb.kglob], coll)
    st.coll[k_st] = coll
    return rounds, settled


def _chunks(g: RunGraph) -> list[IX]:
    """The nodes of each step in step order (steps by their earliest observed start), then the
    rest: replaying step by step settles each in few rounds. Views of one index array (a stable
    sort keeps each chunk in lane order)."""
    ns = len(g.step_labels)
    if ns < 2:
        return []
    ok = (g.window >= 0) & (g.window < ns)
    w = g.window[ok]
    t = np.full(ns, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(t, w, g.start_ns[ok])
    rank = np.empty(t.size, dtype=np.int32)
    rank[np.argsort(t, kind="stable")] = np.arange(t.size)
    key = np.full(g.window.size, -1, dtype=np.int32)
    key[ok] = rank[w]
    del ok, w
    bounds = np.zeros(ns + 2, dtype=np.int64)
    np.cumsum(np.bincount(key + 1, minlength=ns + 1), out=bounds[1:])
    order = np.argsort(key, kind="stable")
    del key
    idx = order.astype(_index_dtype(order.size))
    del order
    return [idx[bounds[i] : bounds[i + 1]] for i in range(bounds.size - 1)]


def replay(g: RunGraph, p: Params, max_rounds: int = MAX_ROUNDS) -> Schedule:
    """The earliest-start schedule of the graph under ``p``: step by step, then the whole run
    until nothing moves (starts only grow from a lower bound, so this is the least fixpoint)."""
    n = g.start_ns.size
    if n == 0:
        z = np.zeros(0, np.int64)
        return Schedule(z, z, 0, True)
    mb = _members(g)
    start = np.maximum(p.floor_ns, int(g.start_ns.min())).astype(np.int64, copy=False)
    kall = np.unique(np.concatenate([mb.nodes, g.edst])).astype(np.int64)
    coll = np.full(kall.size, NEG, dtype=np.int64)
    st = _State(start, start + p.dur_ns, kall, coll, int(start.min()))
    rounds = 0
    chunks = _chunks(g)
    plan = _plan(g, chunks, mb)
    c = 0
    while chunks:
        idx = chunks.pop(0)
        if idx.size:
            rounds += _settle(g, p, idx, mb, st, max_rounds, plan, c)[0]
        c += 1
    # the whole run's settle reads no end (no node is outside it) and writes every one: the
    # ends are made again from its starts (room for its rounds)
    st.end = np.zeros(0, np.int64)
    r, settled = _settle(g, p, slice(0, n), mb, st, max_rounds, plan)
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
