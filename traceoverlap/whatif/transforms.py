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
    return np.asarray(g.unit_rank[g.unit] == rank)


def family_nodes(g: RunGraph, family: str) -> Mask:
    """The nodes of the collective ``family`` (case-insensitive; none where the run has none)."""
    codes = [i for i, f in enumerate(g.families) if f.lower() == family.lower()]
    return np.isin(g.family, codes) if codes else np.zeros(g.pos.size, dtype=bool)


def _peer_median(g: RunGraph, values: I64, peers: Mask) -> I64:
    """Per node: the median of ``values`` over the ``peers`` nodes at the same position
    (its own value where no peer has that position)."""
    df = pd.DataFrame({"pos": g.pos[peers], "v": values[peers]})
    med = df.groupby("pos")["v"].median()
    out = pd.Series(g.pos).map(med).to_numpy(dtype=np.float64)
    return np.where(np.isnan(out), values, np.round(out)).astype(np.int64)


def like_peers(g: RunGraph, p: Params, target: Mask, peers_of: str) -> Params:
    """Durations and host gaps of the ``target`` nodes replaced by the median of their peers
    (``all`` ranks, or the ``others``) at the same position. Matched collectives keep theirs:
    their waiting comes out of the replay."""
    change = target & (g.inst < 0)
    if peers_of == "all":
        peers = np.ones(g.pos.size, dtype=bool)
    else:
        peers = ~target
    dur = np.where(change, _peer_median(g, p.dur_ns, peers), p.dur_ns)
    slack = np.where(target, _peer_median(g, p.slack_ns, peers), p.slack_ns)
    return Params(
        dur.astype(np.int64), slack.astype(np.int64), p.post_ns, _floors(g, p, target, peers)
    )


def _floors(g: RunGraph, p: Params, target: Mask, peers: Mask) -> I64:
    """The observed starts of the ``target`` lanes' first nodes (their gap from the run's first
    start, which the trace began with: a rank still late from before the capture) replaced by
    the median of the ``peers`` at the same position, where a peer has one and it is earlier."""
    own = p.floor_ns > NEG
    if not (target & own).any():
        return p.floor_ns
    t0 = int(g.start_ns.min())
    rel = np.where(own, p.floor_ns - t0, 0).astype(np.int64)
    with_floor = peers & own
    med = _peer_median(g, rel, with_floor)
    has_peer = np.zeros(g.pos.size, dtype=bool)
    if with_floor.any():
        has_peer = np.isin(g.pos, g.pos[with_floor])
    change = target & own & has_peer
    # only ever earlier: a unit's first step is measured from its first start, so a later start
    # would read as a shorter step (a rank that began early is not what the scenario fixes)
    return np.where(change, np.minimum(t0 + med, p.floor_ns), p.floor_ns).astype(np.int64)


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
