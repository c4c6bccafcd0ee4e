"""CPU units: the numbers and sets of every step window without an (activity, window) table.

A CPU step counts everything inside its own marker range (docs/metrics.md "Steps"): an activity
falls in every window around it, so nested or overlapping markers would make the per-window
algebra of :mod:`traceoverlap.rank.metrics` cost activities x markers (4,000 nested markers over
4,000 ops: 16M rows, 3.2 GB). Every set it builds is a set of the whole unit clipped to the
window, since clipping commutes with union, intersection and difference:

    C_W = C ∩ W,  M_W = M ∩ W,  (M_W − C_W) = (M − C) ∩ W,  ...

so each set is built once for the unit (compute cut around its lane's communication calls, as
:func:`traceoverlap.rank.hostwait.split_compute` does), and ``|X ∩ W|`` per window is two binary
searches in its prefix sums (:func:`traceoverlap.core.intervals.grouped_covered`). What stays per
window is what the later stages carry per window anyway: the exposed set and the communication
calls clipped to each window (the local causes split them), and the communication activities of
each window (the collective pieces). The local causes also read compute starts per window: the
last one (the tail zone) and, for each communication of the window, the first one at or after
its end (blocked waits); only those are kept (:func:`cpu_windows` says why they suffice).

Cost: O(n log n) in the unit's events plus the size of those per-window outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..core import intervals as iv
from ..core.intervals import GroupedIntervals
from ..core.model import Kind
from ..core.schema import (
    COMM_NS,
    COMPUTE_NS,
    COMPUTE_ONLY_NS,
    EXPOSED_COMM_NS,
    IDEAL_NS,
    IDLE_NS,
    ITERATION_NS,
    MEMORY_NS,
    MEMORY_ONLY_NS,
    OTHER_STEPS_NS,
    OVERLAP_NS,
    STEP_NS,
)
from .hostwait import CallParts, split_compute
from .metrics import ActivityRows, StepSets, _window_join, activity_rows, step_sets
from .steps import UnitSteps

I64 = npt.NDArray[np.int64]
Intervals = tuple[I64, I64]


@dataclass(frozen=True)
class CpuWindows:
    """Per window of a CPU unit: ``parts`` (the numbers of
    :func:`traceoverlap.rank.metrics.step_parts`, ns), ``exposed`` (M − C, grouped by window),
    ``calls`` (the communication calls, grouped by window) and ``acts``: the communication
    activities of every window (clipped to it) and, as compute rows, only the compute starts the
    local causes read (their ``end_ns`` is the window's end)."""

    parts: dict[str, I64]
    exposed: GroupedIntervals
    calls: GroupedIntervals
    acts: ActivityRows


def clip_to_windows(x: Intervals, ws: I64, we: I64) -> GroupedIntervals:
    """A disjoint sorted set clipped to every window ``[ws, we)``, grouped by window (the pieces
    of one window sorted, the empty ones dropped)."""
    xs, xe = x
    lo = np.searchsorted(xe, ws, side="right")  # first interval ending after the window starts
    hi = np.searchsorted(xs, we, side="left")  # first interval starting at or after its end
    w, j = iv.range_pairs(lo.astype(np.int64), hi.astype(np.int64))
    s = np.maximum(xs[j], ws[w])
    e = np.minimum(xe[j], we[w])
    ok = e > s
    return w[ok].astype(np.int64), s[ok], e[ok]


def _length_in(x: Intervals, ws: I64, we: I64) -> I64:
    """``|x ∩ [ws, we)|`` per window, for a disjoint sorted set ``x``."""
    z = np.zeros(ws.size, dtype=np.int64)
    return iv.grouped_covered((np.zeros(x[0].size, np.int64), x[0], x[1]), z, ws, we, 1)


@dataclass(frozen=True)
class CallComm:
    """The time compute threads spent inside communication calls or blocked on them that no
    communication activity of the unit covers (docs/metrics.md, diagnosis.md §11): communication
    too. Pieces (ns, possibly overlapping one another), each with ``row``: the event row of the
    communication activity whose instance it belongs to (-1: none; its call touches no
    activity), and ``own``: the row it is drawn with (``row``, else the call's own op)."""

    start: I64
    end: I64
    row: I64
    own: I64

    @staticmethod
    def empty() -> CallComm:
        z = np.zeros(0, np.int64)
        return CallComm(z, z, z, z)

    def attributed(self) -> CallComm:
        keep = self.row >= 0
        return CallComm(self.start[keep], self.end[keep], self.row[keep], self.own[keep])


def _outside(s: I64, e: I64, idx: I64, g: Intervals) -> tuple[I64, I64, I64]:
    """The pieces of every interval ``[s, e)`` outside the disjoint sorted set ``g``, each with
    its interval's ``idx``."""
    cs, ce = iv.complement(g)
    lo = np.searchsorted(ce, s, side="right")
    hi = np.searchsorted(cs, e, side="left")
    i, j = iv.range_pairs(lo.astype(np.int64), hi.astype(np.int64))
    ps, pe = np.maximum(s[i], cs[j]), np.minimum(e[i], ce[j])
    keep = pe > ps
    return ps[keep], pe[keep], idx[i[keep]]


def _touching(t: I64, at: I64, rows: I64) -> I64:
    """Per time ``t``: the first of ``rows`` whose ``at`` equals it (-1: none)."""
    order = np.lexsort((rows, at))
    a, r = at[order], rows[order]
    k = np.searchsorted(a, t, side="left")
    kk = np.minimum(k, max(a.size - 1, 0))
    hit = (k < a.size) & (a[kk] == t) if a.size else np.zeros(t.size, dtype=bool)
    return np.where(hit, r[kk] if a.size else -1, -1).astype(np.int64)


def call_comm(
    parts: CallParts,
    start: I64,
    end: I64,
    kind: npt.NDArray[np.int8],
    p2p: npt.NDArray[np.bool_] | None = None,
) -> CallComm:
    """The communication calls and blocked waits of ``parts`` outside every communication
    activity of the unit (G), and the instance each piece belongs to: a blocked wait's to the
    activity it waited for (one per resumption: the one that ended last); a call's to the
    activity it runs into (one starting where the piece ends: a ``c10d::recv_`` blocked until
    its ``gloo:recv`` began), else the one it follows (ending where the piece starts), else none.
    Only point-to-point activities (``p2p``, per event row; None: all) take pieces: their
    instance is the call, its wait the time before the peer started (diagnosis.md §6), while a
    collective's wait and transfer are its activities' durations across ranks, which a piece
    outside them would exceed; its pieces stay in no instance.
    """
    comm = np.flatnonzero(kind == Kind.COMM).astype(np.int64)
    g = iv.union(start[comm], end[comm])
    # waits: one per (lane, resumption), the one for the communication that ended last
    wl, ws, we, wr = parts.wait_lane, parts.wait_start, parts.wait_end, parts.wait_row
    order = np.lexsort((-end[wr], we, wl))
    first = np.ones(order.size, dtype=bool)
    first[1:] = (wl[order][1:] != wl[order][:-1]) | (we[order][1:] != we[order][:-1])
    keep = order[first]
    w_s, w_e, w_r = _outside(ws[keep], we[keep], wr[keep], g)
    # calls: outside G and the waits
    gw = iv.union(np.concatenate((g[0], ws)), np.concatenate((g[1], we)))
    o_s, o_e, o_row = _outside(parts.op_start, parts.op_end, parts.op_row, gw)
    into = _touching(o_e, start[comm], comm)
    after = _touching(o_s, end[comm], comm)
    o_r = np.where(into >= 0, into, after)
    w_own = w_r
    if p2p is not None:
        w_r = np.where(p2p[w_r], w_r, -1)
        o_r = np.where((o_r >= 0) & p2p[np.maximum(o_r, 0)], o_r, -1)
    return CallComm(
        np.concatenate((w_s, o_s)).astype(np.int64),
        np.concatenate((w_e, o_e)).astype(np.int64),
        np.concatenate((w_r, o_r)).astype(np.int64),
        np.concatenate((w_own, np.where(o_r >= 0, o_r, o_row))).astype(np.int64),
    )


def comm_rows_in_windows(cc: CallComm, steps: UnitSteps) -> ActivityRows:
    """The pieces of ``cc`` as communication rows of every window they meet (clipped to it),
    each with the event row of its instance's activity."""
    ws, we = steps.start_ns, steps.end_ns
    z = np.zeros(0, np.int64)
    if cc.start.size == 0 or ws.size == 0:
        return ActivityRows(z, np.zeros(0, np.int8), z, z, z)
    order, sws, swe, lo, hi = _window_join(cc.start, cc.end, ws, we)
    i, j = iv.range_pairs(lo, hi)
    s = np.maximum(cc.start[i], sws[j])
    e = np.minimum(cc.end[i], swe[j])
    ok = e > s
    return ActivityRows(
        order[j[ok]].astype(np.int64),
        np.full(int(ok.sum()), Kind.COMM, np.int8),
        s[ok],
        e[ok],
        cc.own[i[ok]],
    )


@dataclass(frozen=True)
class UnitSets:
    """A CPU unit's sets, each disjoint and sorted (ns): ``sets`` (compute C, comm M, memory Y,
    busy, overlap C ∩ M, exposed M − C, compute_only, memory_only), ``calls`` (its
    communication calls, blocked waits included), ``pieces``: its compute cut around its lane's
    communication calls, and ``call_comm``: the calls' time no communication activity covers,
    part of M (:func:`call_comm`)."""

    sets: dict[str, Intervals]
    calls: Intervals
    pieces: ActivityRows
    call_comm: CallComm = CallComm.empty()

    def window_pieces(self, ws: I64, we: I64) -> int:
        """How many pieces the exposed and call sets make once clipped to every window
        ``[ws, we)`` (what :func:`cpu_windows` builds for them)."""
        n = 0
        for xs, xe in (self.sets["exposed"], self.calls):
            lo = np.searchsorted(xe, ws, side="right")
            hi = np.searchsorted(xs, we, side="left")
            n += int(np.maximum(hi - lo, 0).sum())
        return n


def unit_sets(
    start: I64,
    end: I64,
    kind: npt.NDArray[np.int8],
    lane: I64,
    lane_calls: GroupedIntervals,
    call_mask: npt.NDArray[np.bool_],
    cc: CallComm | None = None,
) -> UnitSets:
    """The unit's sets (:class:`UnitSets`). ``lane`` / ``lane_calls``: each event's thread and
    each thread's communication calls (:mod:`traceoverlap.rank.hostwait`); ``call_mask``: the events
    that are communication calls (:func:`traceoverlap.rank.classify.comm_call_mask`); ``cc``: the
    calls' time outside every communication activity (:func:`call_comm`), added to M."""
    cc = cc if cc is not None else CallComm.empty()
    act = np.flatnonzero(kind < Kind.NONE)
    rows = ActivityRows(
        np.zeros(act.size, np.int64), kind[act], start[act], end[act], act.astype(np.int64)
    )
    rows = split_compute(rows, lane, lane_calls)

    def union_of(m: npt.NDArray[np.bool_]) -> Intervals:
        s, e = iv.union(rows.start_ns[m], rows.end_ns[m])
        return s, e

    c = union_of(rows.kind == Kind.COMPUTE)
    g = union_of(rows.kind == Kind.COMM)
    m = iv.union(np.concatenate((g[0], cc.start)), np.concatenate((g[1], cc.end)))
    y = union_of(rows.kind == Kind.MEMORY)
    cm = iv.union(np.concatenate((c[0], m[0])), np.concatenate((c[1], m[1])))
    busy = union_of(np.ones(rows.kind.size, dtype=bool))
    sets = {
        "compute": c,
        "comm": m,
        "memory": y,
        "busy": iv.union(np.concatenate((busy[0], cc.start)), np.concatenate((busy[1], cc.end))),
        "overlap": iv.intersect(c, m),
        "exposed": iv.subtract(m, c),
        "compute_only": iv.subtract(c, m),
        "memory_only": iv.subtract(y, cm),
    }
    _, lcs, lce = lane_calls
    calls = iv.union(np.concatenate((start[call_mask], lcs)), np.concatenate((end[call_mask], lce)))
    return UnitSets(sets, calls, rows.select(rows.kind == Kind.COMPUTE), cc)


def _compute_starts(
    pieces: ActivityRows, comm: ActivityRows, ws: I64, we: I64, has_compute: npt.NDArray[np.bool_]
) -> ActivityRows:
    """Per window, the compute starts the local causes read (diagnosis.local_causes): the latest
    (max(window start, the last piece start before the window's end), where the window holds
    compute) and, per communication row, the first piece start at or after its end that is
    before the window's end. Pieces starting before a window are clipped to its start, which is
    before every communication end of the window, so neither answer changes when the other
    starts are left out."""
    order = np.argsort(pieces.start_ns, kind="stable")
    ps, prow = pieces.start_ns[order], pieces.event_row[order]
    k = np.searchsorted(ps, we, side="left") - 1
    tail_w = np.flatnonzero(has_compute & (k >= 0))
    tail_s = np.maximum(ws[tail_w], ps[k[tail_w]])
    j = np.searchsorted(ps, comm.end_ns, side="left")
    jj = np.minimum(j, max(ps.size - 1, 0))
    nxt = (j < ps.size) & (ps[jj] < we[comm.group]) if ps.size else np.zeros(0, dtype=bool)
    g = np.concatenate((tail_w, comm.group[nxt])).astype(np.int64)
    s = np.concatenate((tail_s, ps[jj[nxt]])).astype(np.int64)
    row = np.concatenate((prow[k[tail_w]], prow[jj[nxt]])).astype(np.int64)
    return ActivityRows(g, np.full(g.size, Kind.COMPUTE, np.int8), s, we[g], row)


_ROW_FIELDS = ("group", "kind", "start_ns", "end_ns", "event_row")


def cpu_windows(
    unit: UnitSets, start: I64, end: I64, kind: npt.NDArray[np.int8], steps: UnitSteps
) -> CpuWindows:
    """The per-window numbers and sets of a CPU unit whose sets are ``unit`` (see the module
    docstring)."""
    ws, we = steps.start_ns.astype(np.int64), steps.end_ns.astype(np.int64)
    size = {k: _length_in(v, ws, we) for k, v in unit.sets.items()}
    step = (we - ws).astype(np.int64)
    compute, comm, overlap = size["compute"], size["comm"], size["overlap"]
    exposed = comm - overlap
    parts = {
        STEP_NS.name: step,
        COMPUTE_NS.name: compute,
        COMM_NS.name: comm,
        MEMORY_NS.name: size["memory"],
        OVERLAP_NS.name: overlap,
        EXPOSED_COMM_NS.name: exposed,
        IDLE_NS.name: step - size["busy"],
        OTHER_STEPS_NS.name: np.zeros(ws.size, dtype=np.int64),
        ITERATION_NS.name: steps.iteration_ns,
        IDEAL_NS.name: step - exposed + np.maximum(0, comm - compute),
        COMPUTE_ONLY_NS.name: size["compute_only"],
        MEMORY_ONLY_NS.name: size["memory_only"],
    }
    comm_rows = activity_rows(start, end, np.where(kind == Kind.COMM, kind, Kind.NONE), steps)
    extra = comm_rows_in_windows(unit.call_comm.attributed(), steps)
    comm_rows = ActivityRows(
        *(np.concatenate((getattr(comm_rows, f), getattr(extra, f))) for f in _ROW_FIELDS)
    )
    starts = _compute_starts(unit.pieces, comm_rows, ws, we, compute > 0)
    acts = ActivityRows(
        np.concatenate((comm_rows.group, starts.group)),
        np.concatenate((comm_rows.kind, starts.kind)),
        np.concatenate((comm_rows.start_ns, starts.start_ns)),
        np.concatenate((comm_rows.end_ns, starts.end_ns)),
        np.concatenate((comm_rows.event_row, starts.event_row)),
    )
    return CpuWindows(
        parts=parts,
        exposed=clip_to_windows(unit.sets["exposed"], ws, we),
        calls=clip_to_windows(unit.calls, ws, we),
        acts=acts,
    )


def window_detail_rows(
    start: I64,
    end: I64,
    kind: npt.NDArray[np.int8],
    steps: UnitSteps,
    window: int,
    lane: I64,
    lane_calls: GroupedIntervals,
    cc: CallComm | None = None,
) -> tuple[ActivityRows, StepSets]:
    """Every activity of one window (clipped, compute cut around the calls, the calls' time no
    communication activity covers as communication: ``cc``) and its sets, grouped as ``window``:
    what a step's detail (its timeline) draws."""
    from dataclasses import replace

    one = replace(
        steps,
        labels=(steps.labels[window],),
        start_ns=steps.start_ns[window : window + 1],
        end_ns=steps.end_ns[window : window + 1],
    )
    acts = split_compute(activity_rows(start, end, kind, one), lane, lane_calls)
    if cc is not None and cc.start.size:
        extra = comm_rows_in_windows(cc, one)
        acts = ActivityRows(
            *(np.concatenate((getattr(acts, f), getattr(extra, f))) for f in _ROW_FIELDS)
        )
    sets = step_sets(acts, 1)

    def regroup(s: GroupedIntervals) -> GroupedIntervals:
        return np.full(s[0].size, window, dtype=np.int64), s[1], s[2]

    acts = ActivityRows(
        np.full(acts.group.size, window, dtype=np.int64),
        acts.kind,
        acts.start_ns,
        acts.end_ns,
        acts.event_row,
    )
    regrouped = StepSets(**{f: regroup(getattr(sets, f)) for f in StepSets.__dataclass_fields__})
    return acts, regrouped
