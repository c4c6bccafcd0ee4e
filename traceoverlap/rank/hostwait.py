"""CPU units: the time a thread spends inside a communication call is not compute on it.

metrics.md "Activities and kinds": on a CPU unit compute is the ``cpu_op`` events except the
ops that launch or wait for communication. A call made inside an enclosing op (a custom
``torch.autograd.Function`` such as Megatron's ``_ReduceFromTP`` or FSDP's linear, its
``...Backward`` node) would otherwise count the call, and the wait in it, as compute. So, per
lane (thread): compute = (union of the lane's compute ops) − (union of the lane's communication
calls), where a communication call is

- a ``cpu_op`` the compute rule excludes (``c10d::*``, ``record_param_comms``, ``nccl:*``,
  ``gloo:*`` and the user's ``--comm-pattern`` names), and
- a blocked wait: a stretch of the lane between two consecutive host-event boundaries (starts
  or ends of its ``cpu_op`` / range events), the first of them an end where no event starts
  (the thread is between ops, never inside a leaf op), in which a communication activity of the unit ends,
  when the next boundary follows that end within 1 % of the communication's duration, or within
  1 ms when the gap opened at a communication call's return (diagnosis.md §8's blocked rule,
  whose floor survives the OS's wake-up latency without turning every pause between two compute
  ops that a background collective ends in into a wait): the wait is [max(gap start,
  communication start), next boundary), or [gap start, next boundary) when the gap opened at a
  call's return (the thread blocked on what it called, gloo work queued or not, §11). A blocking
  ``Work.wait()`` is no operator: it leaves only such a gap, ending right after the awaited
  ``gloo:*`` work.

The compute activity rows are cut into pieces around these calls; every piece keeps the
``event_row`` of its op. A unit without ``cpu_op`` (NVTX ranges only) is not cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..core import intervals as iv
from ..core.intervals import GroupedIntervals
from ..core.model import Kind, Timeline
from ..core.rules import Rules
from ..core.vocab import BLOCKED_FLOOR_NS, BLOCKED_PER
from .classify import name_mask
from .metrics import ActivityRows

I64 = npt.NDArray[np.int64]


def lane_codes(unit: Timeline) -> I64:
    """Per event: its thread's code (0..n-1), one per distinct (pid, tid), numbered in (pid,
    tid) order."""
    ev = unit.events
    if len(ev) == 0:
        return np.zeros(0, np.int64)
    return pair_codes(ev["pid"].to_numpy(np.int64), ev["tid"].to_numpy(np.int64))


def pair_codes(a: I64, b: I64) -> I64:
    """Per row: the rank of (a, b) among the distinct pairs in (a, b) order (what
    ``np.unique(np.stack((a, b), 1), axis=0, return_inverse=True)`` gives, without its sort of
    whole rows). Rows come in runs of one thread: the pairs are found per run, then spread."""
    n = a.size
    if n == 0:
        return np.zeros(0, np.int64)
    cut = np.flatnonzero((a[1:] != a[:-1]) | (b[1:] != b[:-1])) + 1
    first = np.concatenate((np.zeros(1, np.int64), cut))
    ra, rb = a[first], b[first]
    order = np.lexsort((rb, ra))
    sa, sb = ra[order], rb[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])
    code = np.empty(order.size, np.int64)
    code[order] = np.cumsum(new) - 1
    return np.repeat(code, np.diff(np.append(first, n)))


def _waits(
    lane: I64,
    start: I64,
    end: I64,
    host: npt.NDArray[np.bool_],
    kind: npt.NDArray[np.int8],
    named: npt.NDArray[np.bool_],
) -> tuple[I64, I64, I64, I64]:
    """Blocked waits (lane, start, end, row of the communication waited for) on the lanes that
    have compute. ``named``: the host events that are communication calls by name
    (``cpu_comm_calls``: ``c10d::*``, ``record_param_comms``, ``nccl:*``, ``gloo:*``,
    ``*wait*``)."""
    z = np.zeros(0, np.int64)
    comp_lanes = iv.unique_values(lane[kind == Kind.COMPUTE])
    comm = np.flatnonzero(kind == Kind.COMM)
    if comp_lanes.size == 0 or comm.size == 0:
        return z, z.copy(), z.copy(), z.copy()
    on = host & np.isin(lane, comp_lanes)
    bk = np.concatenate((lane[on], lane[on]))
    bt = np.concatenate((start[on], end[on]))
    # at one instant, ends before starts: the last boundary before a time is a start when an
    # op starts there (the thread is then inside that op)
    is_start = np.repeat(np.array([True, False]), int(on.sum()))
    # ... and among the ends, a communication call's last: the gap opened at a call's return
    call_end = np.concatenate((np.zeros(int(on.sum()), dtype=bool), named[on]))
    order = np.lexsort((call_end, is_start, bt, bk))
    bk, bt, is_start, call_end = bk[order], bt[order], is_start[order], call_end[order]
    # every (communication end, compute lane) pair
    q_lane = np.tile(comp_lanes, comm.size)
    ce = np.repeat(end[comm], comp_lanes.size)
    dur = np.repeat(end[comm] - start[comm], comp_lanes.size)
    j = iv.next_at_or_after(q_lane, ce, bk, bt)
    prev = j - 1
    # the gap opens where an op returned (never inside a leaf op: after its start)
    ok = (j > 0) & (bk[np.maximum(prev, 0)] == q_lane) & ~is_start[np.maximum(prev, 0)]
    gap = bt[np.maximum(j, 0)] - ce
    cs = np.repeat(start[comm], comp_lanes.size)
    after_call = call_end[np.maximum(prev, 0)]
    # within 1 % of the duration; or, when the gap opened at a communication call's return (the
    # thread blocked on what it had just called, then woke late), within the floor: not a short
    # pause between two compute ops that a background collective happened to end in
    tol = (gap * BLOCKED_PER <= dur) | ((gap <= BLOCKED_FLOOR_NS) & after_call)
    # opened at a call's return and idle through the communication's end: blocked on it until
    # that end however late the thread woke (a synchronous collective, whose wait PyTorch does
    # not record, on a loaded host): the wait ends at the communication's end, and a wake-up
    # beyond the tolerance stays the thread's own time (§11: a late wake-up never turns a whole
    # blocked collective into host)
    late = ok & ~tol & after_call
    ok &= tol | after_call
    # the wait: from the gap's start to the resumption; from the communication's start when
    # that is later, unless the gap opened at a call's return (blocked since, §11)
    b1 = bt[np.maximum(prev, 0)]
    ws = np.where(after_call, b1, np.maximum(b1, cs))
    we = np.where(late, ce, bt[np.maximum(j, 0)])
    row = np.repeat(comm, comp_lanes.size).astype(np.int64)
    return q_lane[ok], ws[ok], we[ok], row[ok]


@dataclass(frozen=True)
class CallParts:
    """A CPU unit's communication calls before they are merged per lane: the excluded ops on its
    compute lanes (``op_lane``, ``op_start``, ``op_end``, ``op_row``: their event rows) and its
    blocked waits (``wait_lane``,
    ``wait_start``, ``wait_end`` and ``wait_row``: the event row of the communication waited
    for)."""

    op_lane: I64
    op_start: I64
    op_end: I64
    op_row: I64
    wait_lane: I64
    wait_start: I64
    wait_end: I64
    wait_row: I64
    n_lanes: int

    def merged(self) -> GroupedIntervals:
        """Per lane (group = lane code): the union of its calls and waits."""
        return iv.grouped_union(
            np.concatenate((self.op_lane, self.wait_lane)),
            np.concatenate((self.op_start, self.wait_start)),
            np.concatenate((self.op_end, self.wait_end)),
            self.n_lanes,
        )


def call_parts(unit: Timeline, kind: npt.NDArray[np.int8], rules: Rules | None = None) -> CallParts:
    """The unit's communication calls and blocked waits (see the module doc), unmerged."""
    rules = rules or Rules()
    ev = unit.events
    cat = ev["category"]
    host = (cat == "cpu_op").to_numpy() | (cat == "annotation").to_numpy()
    is_op = (cat == "cpu_op").to_numpy()
    z = np.zeros(0, np.int64)
    if not is_op.any():
        # NVTX-only capture (a CPU run under nsys): compute is the marked phases and the
        # `gloo:*` ranges are the collectives in flight, not calls: nothing to cut
        return CallParts(z, z, z, z, z, z, z, z, 0)
    lane = lane_codes(unit)
    comp_lanes = iv.unique_values(lane[kind == Kind.COMPUTE])
    call = name_mask(ev["name"], rules.cpu_compute_exclude + rules.extra_comm, is_op)
    call &= np.isin(lane, comp_lanes)
    start = ev["start_ns"].to_numpy().astype(np.int64)
    end = ev["end_ns"].to_numpy().astype(np.int64)
    named = name_mask(ev["name"], rules.cpu_comm_calls + rules.extra_comm, host)
    wl, ws, we, wr = _waits(lane, start, end, host, kind, named)
    n_lanes = int(lane.max()) + 1 if lane.size else 0
    rows = np.flatnonzero(call).astype(np.int64)
    return CallParts(lane[rows], start[rows], end[rows], rows, wl, ws, we, wr, n_lanes)


def lane_calls(
    unit: Timeline, kind: npt.NDArray[np.int8], rules: Rules | None = None
) -> GroupedIntervals:
    """Per lane that has compute (group = lane code): the union of its communication calls (see
    the module doc)."""
    return call_parts(unit, kind, rules).merged()


def host_starts(unit: Timeline, kind: npt.NDArray[np.int8]) -> I64:
    """The starts of every host event (``cpu_op`` or range, of any name) on the lanes that have
    compute, sorted and distinct: where a compute thread resumed (diagnosis.md §8 / §11: the
    blocked rule reads the thread's next host event of any kind)."""
    ev = unit.events
    if len(ev) == 0:
        return np.zeros(0, np.int64)
    cat = ev["category"]
    host = (cat == "cpu_op").to_numpy() | (cat == "annotation").to_numpy()
    lane = lane_codes(unit)
    on = host & np.isin(lane, iv.unique_values(lane[kind == Kind.COMPUTE]))
    return iv.unique_values(ev["start_ns"].to_numpy().astype(np.int64)[on])


def split_compute(
    acts: ActivityRows, lane: npt.NDArray[np.signedinteger[Any]], calls: GroupedIntervals
) -> ActivityRows:
    """``acts`` with every compute row cut around its lane's communication calls (``calls``:
    disjoint per lane, sorted by lane then start); other rows unchanged. Pieces keep the row's
    window, kind and ``event_row``; empty pieces vanish."""
    cg, cs, ce = calls
    comp = acts.kind == Kind.COMPUTE
    if cg.size == 0 or not comp.any():
        return acts
    rows = np.flatnonzero(comp)
    la = lane[acts.event_row[rows]].astype(np.int64, copy=False)
    s, e = acts.start_ns[rows], acts.end_ns[rows]
    # overlapping calls of the lane: indices lo..hi-1 (end > s and start < e)
    lo = iv.next_at_or_after(la, s + 1, cg, ce)
    hi = iv.next_at_or_after(la, e, cg, cs)
    hi = np.where(hi < 0, np.searchsorted(cg, la, side="right"), hi)
    lo = np.where(lo < 0, hi, np.minimum(lo, hi))
    # piece k of a row (k = lo..hi): from s or the end of call k-1 to the start of call k or e
    r, k = iv.range_pairs(lo, hi + 1)
    ps = np.where(k == lo[r], s[r], ce[np.maximum(k - 1, 0)])
    pe = np.where(k == hi[r], e[r], cs[np.minimum(k, cs.size - 1)])
    keep = pe > ps
    r, ps, pe = r[keep], ps[keep], pe[keep]
    other = np.flatnonzero(~comp)
    src = np.concatenate((rows[r], other))
    order = np.argsort(src, kind="stable")
    return ActivityRows(
        acts.group[src][order],
        acts.kind[src][order],
        np.concatenate((ps, acts.start_ns[other]))[order],
        np.concatenate((pe, acts.end_ns[other]))[order],
        acts.event_row[src][order],
    )
