"""What the built-in scenarios do to the replay's parameters (docs/whatif.md §3): the array work
behind the entries of :mod:`traceoverlap.whatif.registry`, which imports this module only when a
scenario runs (listing the scenarios needs no numpy)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core.model import Kind
from .graph import RunGraph
from .replay import NEG, Params

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


def every_node(g: RunGraph) -> Mask:
    return np.ones(g.pos.size, dtype=bool)


def rank_nodes(g: RunGraph, rank: int) -> Mask:
    """The nodes of ``rank`` (all its units)."""
    return np.isin(g.unit, np.flatnonzero(g.unit_rank == rank))


def family_nodes(g: RunGraph, family: str) -> Mask:
    """The nodes of the collective ``family`` (case-insensitive; none where the run has none)."""
    codes = [i for i, f in enumerate(g.families) if f.lower() == family.lower()]
    return np.isin(g.family, codes) if codes else np.zeros(g.pos.size, dtype=bool)


#: :func:`_peer_median` sorts at most about this many peer rows at once.
_MEDIAN_ROWS = 1 << 21


def _peer_median(
    g: RunGraph,
    values: I64,
    peers: Mask,
    at: Mask | None = None,
    own: OwnTime | None = None,
) -> I64:
    """Per node: the median of ``values`` over the ``peers`` nodes at the same position (its own
    value where no peer has that position). ``at``: only there (elsewhere its own value): the
    medians of those positions alone (one rank's are a few of a large run's), a range of
    positions at a time. Of an even count, one of the two middle values, never their mean: with
    two ranks, a straggler and its peer, the mean would keep half of the straggler's delay in
    "every rank runs like the typical one" (docs/whatif.md §3). Which one: the value of the node
    whose unit had less ``own`` time in that step (:class:`OwnTime`; the faster rank's); without
    it the lower value. Taking the lower value at every position would run each step as the
    minimum of its ranks' noise, faster than any rank ran."""
    res = values.astype(np.int64, copy=True)
    idx = np.flatnonzero(at) if at is not None else np.arange(values.size)
    if idx.size == 0 or g.pos.size == 0:
        return res
    n_pos = int(g.pos.max()) + 1
    want = np.zeros(n_pos, dtype=bool)
    want[g.pos[idx]] = True
    use = np.flatnonzero(peers & want[g.pos])
    del want
    med = np.zeros(n_pos, dtype=np.int64)
    has = np.zeros(n_pos, dtype=bool)
    if use.size:
        # position ranges of about _MEDIAN_ROWS peer rows each (a position is within one)
        per_pos = np.bincount(g.pos[use], minlength=n_pos)
        cum = np.cumsum(per_pos)
        cuts = np.searchsorted(cum, np.arange(_MEDIAN_ROWS, int(cum[-1]), _MEDIAN_ROWS))
        edges = np.unique(np.r_[0, cuts + 1, n_pos])
        one = edges.size == 2
        pu = g.pos[use]
        for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
            sel = use if one else use[(pu >= lo) & (pu < hi)]
            if sel.size == 0:
                continue
            pos, v = g.pos[sel].astype(np.int64), values[sel]
            order, first, count = _position_groups(pos, v)
            pos_s, v_s = pos[order], v[order]
            lo_i = first + (count - 1) // 2
            m = v_s[lo_i]
            if own is not None:
                hi_i = np.minimum(lo_i + 1, pos_s.size - 1)
                node = sel[order]
                sc_lo, sc_hi = own.of(g, node[lo_i]), own.of(g, node[hi_i])
                m = np.where((count % 2 == 0) & (sc_hi < sc_lo), v_s[hi_i], m)
            med[pos_s[first]] = m
            has[pos_s[first]] = True
            del sel, pos, v, order, pos_s, v_s
        del pu
    pi = g.pos[idx]
    res[idx] = np.where(has[pi], med[pi], values[idx])
    return res


def _position_groups(pos: I64, v: I64) -> tuple[I64, I64, I64]:
    """The order that sorts by (position, value), ties in their order, and per distinct
    position the start of its run in that order and its count (empty for no rows): one sort
    key where (position, value) fits in 62 bits, else a two-key sort."""
    if pos.size == 0:
        z = np.zeros(0, np.int64)
        return z, z.copy(), z.copy()
    p0, v0 = int(pos.min()), int(v.min())
    span = int(v.max()) - v0 + 1
    if (int(pos.max()) - p0 + 1) * span < 1 << 62:
        order = np.argsort((pos - p0) * span + (v - v0), kind="stable")
    else:
        order = np.lexsort((v, pos))
    ps = pos[order]
    first = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]])
    return order, first, np.diff(np.r_[first, ps.size])


class OwnTime:
    """Per (unit, step): the unit's own time there, its nodes' durations and slack summed
    (waiting in a matched collective is the replay's, in neither): what tells the faster of two
    ranks at one position apart (:func:`_peer_median`)."""

    def __init__(self, g: RunGraph, p: Params) -> None:
        self.nw = len(g.step_labels) + 1
        key = g.unit.astype(np.int64) * self.nw + (g.window.astype(np.int64) + 1)
        w = p.dur_ns.astype(np.float64) + p.slack_ns
        self.total = np.bincount(key, weights=w, minlength=g.n_units * self.nw)

    def of(self, g: RunGraph, nodes: I64) -> npt.NDArray[np.float64]:
        key = g.unit[nodes].astype(np.int64) * self.nw + (g.window[nodes].astype(np.int64) + 1)
        out: npt.NDArray[np.float64] = self.total[key]
        return out


def like_peers(g: RunGraph, p: Params, target: Mask, peers_of: str) -> Params:
    """Durations and host gaps of the ``target`` nodes replaced by the median of their peers
    (``all`` ranks, or the ``others``) at the same position. Matched collectives keep theirs:
    their waiting comes out of the replay."""
    change = target & (g.inst < 0)
    if peers_of == "all":
        peers = np.ones(g.pos.size, dtype=bool)
    else:
        peers = ~target
    own = OwnTime(g, p)
    dur = _peer_median(g, p.dur_ns, peers, change, own)
    slack = _peer_median(g, p.slack_ns, peers, target, own)
    del change, own
    dur, slack = _unshared_work(g, p, dur, slack, target, peers_of)
    return Params(
        dur.astype(np.int64, copy=False),
        slack.astype(np.int64, copy=False),
        p.post_ns,
        _floors(g, p, target, peers),
    )


def _unshared_work(
    g: RunGraph, p: Params, dur: I64, slack: I64, target: Mask, peers_of: str
) -> tuple[I64, I64]:
    """The work of a ``target`` unit at positions no peer has (a pipeline stage with more
    layers than its peers: its n-th linear op has no peer past the peers' count), scaled so
    that the unit's work per (step, lane role), once its shared positions run like its peers',
    is at most its peers' median work there: running like its peers evens out a long stage
    (docs/whatif.md §3); never scaled up. Their gaps: the peers' median gap before the same op.
    Only ops the peers run there too (more of the same work), not the unit's own (the last
    stage's loss); matched collectives keep theirs. Unchanged where the graph has no lane
    roles."""
    if g.role.size != g.pos.size or not target.any():
        return dur, slack
    movable = (g.inst < 0) & (g.window >= 0)
    if peers_of == "all":
        # a unit has at most one node per position (its n-th occurrence of the op)
        shared = np.bincount(g.pos)[g.pos] >= 2
        peer_units = np.unique(g.unit)
    else:
        at = np.zeros(int(g.pos.max()) + 1 if g.pos.size else 0, dtype=bool)
        at[g.pos[~target]] = True
        shared = at[g.pos]
        peer_units = np.unique(g.unit[~target])
    if not (target & movable & ~shared).any():
        return dur, slack
    # more of what the peers do (an n-th linear op past their count), not an op of the unit's own
    # that no peer runs in that step and lane role (the last stage's loss): that is its part
    n_names = int(g.name.max()) + 1 if g.name.size else 1
    n_roles = int(g.role.max()) + 1 if g.role.size else 1
    op = (g.window.astype(np.int64) * n_roles + g.role) * n_names + g.name
    known = np.isin(op, op[shared] if peers_of == "all" else op[~target])
    extra = target & movable & ~shared & known
    if not extra.any() or peer_units.size == 0:
        return dur, slack
    # per (window, role): the peers' median work (their observed durations, summed per unit)
    mine = movable & np.isin(g.unit, peer_units)
    per_unit = (
        pd.DataFrame({"w": g.window[mine], "r": g.role[mine], "u": g.unit[mine]})
        .assign(d=p.dur_ns[mine])
        .groupby(["w", "r", "u"])["d"]
        .sum()
    )
    typical = per_unit.groupby(level=["w", "r"]).median()
    # per target (unit, window, role): its work once shared positions run like the peers'
    sel = target & movable
    df = pd.DataFrame(
        {
            "u": g.unit[sel],
            "w": g.window[sel],
            "r": g.role[sel],
            "d": dur[sel],
            "x": np.where(extra[sel], dur[sel], 0),
        }
    )
    work = df.groupby(["u", "w", "r"])[["d", "x"]].sum()
    peer = typical.reindex(
        pd.MultiIndex.from_arrays(
            [work.index.get_level_values("w"), work.index.get_level_values("r")]
        )
    )
    room = np.maximum(peer.to_numpy(dtype=np.float64) - (work["d"] - work["x"]).to_numpy(), 0)
    x = work["x"].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        f = np.where(np.isnan(room) | (x <= 0), 1.0, np.minimum(room / x, 1.0))
    scale = pd.Series(f, index=work.index)
    keys = pd.MultiIndex.from_arrays([g.unit[extra], g.window[extra], g.role[extra]])
    fx = scale.reindex(keys).to_numpy(dtype=np.float64)
    fx = np.where(np.isnan(fx), 1.0, fx)
    dur, slack = dur.copy(), slack.copy()
    dur[extra] = np.round(dur[extra] * fx).astype(np.int64)
    # their gaps: the peers' median gap before the same op in that step and lane role (a sleep
    # before the n-th linear op is no more the peers' than one before a shared one)
    peer_op = ~target if peers_of != "all" else shared
    med = pd.Series(p.slack_ns[peer_op]).groupby(op[peer_op]).median()
    ms = pd.Series(op[extra]).map(med).to_numpy(dtype=np.float64)
    slack[extra] = np.where(np.isnan(ms), slack[extra], np.round(ms)).astype(np.int64)
    return dur, slack


def _floors(g: RunGraph, p: Params, target: Mask, peers: Mask) -> I64:
    """The observed starts of the ``target`` lanes' first nodes (their gap from the run's first
    start, which the trace began with: a rank still late from before the capture) replaced by
    the median of the ``peers`` at the same position, where a peer has one and it is earlier."""
    own = np.flatnonzero(p.floor_ns > NEG)  # lanes' first nodes: few
    mine = target[own]
    if not mine.any():
        return p.floor_ns
    t0 = int(g.start_ns.min())
    rel = (p.floor_ns[own] - t0).astype(np.int64)
    with_floor = peers[own]
    # the peers' median start at each position (of an even count the lower middle value: the
    # earlier, never the mean, as :func:`_peer_median`)
    pk, pv = g.pos[own[with_floor]].astype(np.int64), rel[with_floor]
    order, first, count = _position_groups(pk, pv)
    keys, med = pk[order][first], pv[order][first + (count - 1) // 2]
    q = g.pos[own[mine]].astype(np.int64)
    at = np.minimum(np.searchsorted(keys, q), max(keys.size - 1, 0))
    has_peer = (keys[at] == q) if keys.size else np.zeros(q.size, dtype=bool)
    ch = own[mine][has_peer]
    # only ever earlier: a unit's first step is measured from its first start, so a later start
    # would read as a shorter step (a rank that began early is not what the scenario fixes)
    new = np.minimum(t0 + med[at[has_peer]], p.floor_ns[ch])
    if np.array_equal(new, p.floor_ns[ch]):
        return p.floor_ns
    out = p.floor_ns.copy()
    out[ch] = new
    return out


def comm_scaled(g: RunGraph, p: Params, which: Mask, factor: float) -> Params:
    """The transfer part of the ``which`` communication nodes divided by ``factor`` (inf: 0)."""
    comm = which & (g.kind == Kind.COMM)
    dur = np.where(comm, (p.dur_ns / factor).astype(np.int64), p.dur_ns)
    post = np.where(comm & (g.inst >= 0), (p.post_ns / factor).astype(np.int64), p.post_ns)
    return Params(dur.astype(np.int64), p.slack_ns, post.astype(np.int64), p.floor_ns)


def no_host_gaps(g: RunGraph, p: Params) -> Params:
    """Host gaps on host lanes without communication set to 0."""
    host = g.lane_host[g.lane] & ~g.lane_comm[g.lane]
    return Params(p.dur_ns, np.where(host, 0, p.slack_ns).astype(np.int64), p.post_ns, p.floor_ns)


def less(p: Params, tax_ns: I64) -> Params:
    """Every duration less its node's overlap tax (:func:`traceoverlap.whatif.tax.tax_table`)."""
    return Params((p.dur_ns - tax_ns).astype(np.int64), p.slack_ns, p.post_ns, p.floor_ns)


def no_tax(g: RunGraph) -> I64:
    """A per-node overlap tax of 0 (a scenario asked for without the tax table)."""
    return np.zeros(g.pos.size, dtype=np.int64)


def ideal(g: RunGraph, p: Params, keep: Mask | None = None) -> Params:
    """The straggler-free run of the published method (docs/whatif.md §3, ByteDance's
    StragglerAnalysis): every compute (and memory, and launch call) node at the mean duration of
    its type (its op name) over all ranks and steps, every communication node at the median of
    its type (both its part after the last arrival and its transfer), every slack (launch delay,
    host gap) zero. ``keep``: nodes that keep their observed durations (the attribution: S_t keeps
    one op type, S_w one rank), still without slack."""
    comm = g.kind == Kind.COMM
    df = pd.DataFrame({"name": g.name, "dur": p.dur_ns, "post": p.post_ns, "comm": comm})
    by = df.groupby(["comm", "name"], sort=False)
    mean = by["dur"].transform("mean").to_numpy(dtype=np.float64)
    med = by["dur"].transform("median").to_numpy(dtype=np.float64)
    med_post = by["post"].transform("median").to_numpy(dtype=np.float64)
    dur = np.round(np.where(comm, med, mean)).astype(np.int64)
    post = np.where(comm & (g.inst >= 0), np.round(med_post).astype(np.int64), p.post_ns)
    if keep is not None:
        dur = np.where(keep, p.dur_ns, dur)
        post = np.where(keep, p.post_ns, post)
    return Params(
        dur.astype(np.int64),
        np.zeros_like(p.slack_ns),
        post.astype(np.int64),
        _floors_zeroed(g, p),
    )


def _floors_zeroed(g: RunGraph, p: Params) -> I64:
    """Every lane's first node may start at the run's first start (no launch delay before it)."""
    own = p.floor_ns > NEG
    return np.where(own, int(g.start_ns.min()) if g.start_ns.size else 0, p.floor_ns).astype(
        np.int64
    )


def bare(g: RunGraph, p: Params) -> Params:
    """Every slack zero, durations kept: the base the ideal's slowdown is measured against (the
    published method's "no launch delay" run)."""
    return Params(p.dur_ns, np.zeros_like(p.slack_ns), p.post_ns, _floors_zeroed(g, p))
