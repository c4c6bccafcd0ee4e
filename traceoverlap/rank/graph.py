"""The run graph (docs/whatif.md §1): activities and launch calls as columnar arrays, with the
edges a replay needs.

Per unit (the map side, :func:`unit_graph`): one node per kept activity (compute, comm, memory;
on host threads only the top-level ones: a nested op's time is inside its parent) and, on GPU
units, one node per launch call of a kept activity. Nodes carry their observed start and end; on
CPU units a send or recv spans its call (diagnosis.md §11: a blocking ``dist.send`` sits in
``c10d::send`` / ``gloo:send`` until the peer's recv took it), the call inside it.
Edges:

1. lane order: the nodes of one lane (stream or thread) in start order;
2. launch: a device activity starts no earlier than its launch call starts;
3. cross-stream sync: guessed from the host's ``cudaStreamWaitEvent`` calls (the readers keep no
   stream arguments), counted in a note (:func:`_stream_wait_edges`);
4. collectives: the nodes of a matched instance (matched per process group by
   :mod:`traceoverlap.run.matching`, read through :func:`traceoverlap.whatif.graph.match_units`, the one adapter) end no
   earlier than the last member's arrival + what followed it on that member (transfer);
   point-to-point pairs are instances of two members (a send and its recv, paired per group and
   order), so the recv ends no earlier than the send starts + transfer, and a blocking send no
   earlier than its recv was posted;
5. blocking calls (CPU units, diagnosis.md §8): a thread idle at a communication's end whose
   next host event of any kind starts within 1 % of its duration or within 1 ms after it
   (``BLOCKED_PER``, ``BLOCKED_FLOOR_NS``: the analysis' rule) waited for it: its next node
   depends on that end; a wait call, and an op that launched a collective from inside and
   ended after it, end no earlier than the collective's end (plus what followed it in the
   trace);
6. thread hand-offs (every unit, :func:`_handoff_edges`): where another host thread works only
   while the unit's first thread is idle (the autograd engine's thread during ``backward()``),
   starting just after that thread's last node and ending just before its next (the blocked
   rule's tolerance at both ends), it was handed the work: its first node there depends on
   the end of the node before, and the node after depends on its end.

The join (:func:`traceoverlap.whatif.graph.join_graphs`) concatenates the units, puts them on one
clock (offsets from collective end times, as the matching does) and numbers the matched
instances across units.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core import intervals as iv
from ..core.intervals import GroupedIntervals
from ..core.model import Kind, Timeline, TraceInfo, in_categories
from ..core.vocab import BLOCKED_FLOOR_NS, BLOCKED_MAX_NS, BLOCKED_PER
from .steps import UnitSteps, cat_codes

if TYPE_CHECKING:
    from .instances import CommKeys

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
#: Node kind code of a host launch call (after the three activity kinds).
LAUNCH = 3
#: How far before a comm's recorded end a thread may resume after waiting for it
#: (:func:`_blocking_edges`); after the end, the analysis' blocked rule (diagnosis.md §8:
#: :data:`~traceoverlap.core.vocab.BLOCKED_PER`, :data:`~traceoverlap.core.vocab.BLOCKED_FLOOR_NS`).
BLOCK_MAX_NS = BLOCKED_MAX_NS
#: A node resuming just before a comm's recorded end waited for it when the comm covered this
#: share of the idle stretch before it (:func:`_blocking_edges`).
BLOCK_COVER = 0.9


@dataclass(frozen=True)
class UnitGraph:
    """One unit's nodes and edges (indices are local to the unit).

    Per node: ``lane`` (code into ``lane_names``), ``start_ns``/``end_ns`` (observed),
    ``kind`` (0 compute, 1 comm, 2 memory, 3 launch call), ``window`` (step window, -1 none),
    ``name`` (code into ``names``), ``inst`` (local collective instance, -1 none).
    Per lane: ``lane_host`` (a CPU thread), ``lane_role`` (the same role on every rank: host or
    device, communication lane or not, n-th by first use). Edges ``src``/``dst`` (launch and
    blocking edges; ``src_start``: the edge leaves at the source's start, a launch).
    ``instances``: the local instance table of :mod:`traceoverlap.run.matching`."""

    trace: TraceInfo
    labels: tuple[object, ...]
    win_start_ns: I64
    win_end_ns: I64
    lane: I64
    start_ns: I64
    end_ns: I64
    kind: npt.NDArray[np.int8]
    window: I64
    name: I64
    inst: I64
    lane_names: tuple[str, ...]
    lane_host: npt.NDArray[np.bool_]
    lane_role: tuple[str, ...]
    names: tuple[str, ...]
    src: I64
    dst: I64
    src_start: npt.NDArray[np.bool_]
    gap: I64
    esrc: I64
    edst: I64
    egap: I64
    instances: pd.DataFrame
    notes: tuple[str, ...]
    #: CPU units: the communication calls of each compute thread (:func:`traceoverlap.rank.hostwait.
    #: lane_calls`: launches, waits; disjoint, sorted by lane then start), as (lane, start, end);
    #: the time inside them is not compute (metrics.md), whatever node encloses it
    call_lane: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    call_start_ns: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    call_end_ns: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    #: per node: the kernel's launch shape code (the Timeline's ``shape``), -1 unknown (host
    #: nodes, traces without grids)
    shape: I32 = field(default_factory=lambda: np.zeros(0, np.int32))
    #: per edge (``src``/``dst``): a guessed cross-stream sync (kept by the replay only where the
    #: trace contradicts it by at most the sync tolerance, :mod:`traceoverlap.whatif.graph`);
    #: empty: none guessed
    guessed: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, bool))


#: Host calls that block until device work ends (docs/whatif.md §1, edge 5 on GPU units).
HOST_SYNC_RE = re.compile(r"(?i)^cuda(Stream|Device|Event|Ctx|Thread)Synchronize$|^cudaMemcpy$")
#: How far past a host sync call's end the device work it waited for may be recorded to end
#: (host and device clocks differ by microseconds).
HOST_SYNC_SLOP_NS = 10_000


def _host_syncs(
    ev: pd.DataFrame, start: I64, end: I64, lane_codes: I64, rows: I64, launch_row: I64
) -> tuple[I64, I64]:
    """GPU units: the host calls that block until device work ends (:data:`HOST_SYNC_RE`), and
    per call the device node (index into ``rows``) it waited for: of the activities its thread
    launched before the call, the one that ended last no later than the call's end (+
    :data:`HOST_SYNC_SLOP_NS`) and after its start. Calls with none are left out."""
    z = np.zeros(0, np.int64)
    from ..core.model import per_category

    host_call = in_categories(ev["category"], ("runtime", "driver"))
    is_sync = per_category(ev["name"], lambda n: bool(HOST_SYNC_RE.search(n)), host_call, bool)
    calls = np.flatnonzero(host_call & is_sync[cat_codes(ev["name"])])
    dev = np.flatnonzero(launch_row >= 0)
    if calls.size == 0 or dev.size == 0:
        return z, z
    d_end = end[rows[dev]]
    d_launch = start[launch_row[dev]]
    d_thread = lane_codes[launch_row[dev]]
    order = np.argsort(d_end, kind="stable")
    dev, d_end, d_launch, d_thread = dev[order], d_end[order], d_launch[order], d_thread[order]
    c_start, c_end, c_thread = start[calls], end[calls], lane_codes[calls]
    j = np.searchsorted(d_end, c_end + HOST_SYNC_SLOP_NS, side="right") - 1
    found = _last_launched_before(d_thread, d_launch, j, c_thread, c_start, SYNC_LOOKBACK)
    ok = found >= 0
    ok[ok] = d_end[found[ok]] > c_start[ok]  # it was still running when the call began
    return calls[ok].astype(np.int64), dev[found[ok]].astype(np.int64)


#: How many activities (in end order) back from a sync call's end :func:`_host_syncs` looks
#: for the one it waited for.
SYNC_LOOKBACK = 256


def _last_launched_before(
    d_thread: I64, d_launch: I64, j: I64, c_thread: I64, c_start: I64, lookback: int
) -> I64:
    """Per call: the greatest index ``i`` in ``[j - lookback + 1, j]`` (``i >= 0``) with
    ``d_thread[i] == c_thread`` and ``d_launch[i] < c_start``, -1 when none. Walked back over
    the call's own thread's activities only (sorted by thread, then index, found by one binary
    search): a handful of vector steps, where a walk over every activity took ``lookback`` of
    them when a call's thread had none near."""
    n = d_thread.size
    found = np.full(j.size, -1, dtype=np.int64)
    if n == 0 or j.size == 0:
        return found
    by_thread = np.lexsort((np.arange(n), d_thread))
    t_sorted = d_thread[by_thread]
    key = t_sorted * (n + 1) + by_thread  # (thread, index), ascending
    p = np.searchsorted(key, c_thread * (n + 1) + j, side="right") - 1
    lo = j - lookback + 1
    live = np.flatnonzero(j >= 0)
    while live.size:
        pp = p[live]
        ok = pp >= 0
        pc = np.maximum(pp, 0)
        idx = by_thread[pc]
        ok &= (t_sorted[pc] == c_thread[live]) & (idx >= lo[live])
        live = live[ok]
        pp, idx = pp[ok], idx[ok]
        hit = d_launch[idx] < c_start[live]
        found[live[hit]] = idx[hit]
        live = live[~hit]
        p[live] = pp[~hit] - 1
    return found


def _until_the_thread_resumed(
    own_start: I64, start: I64, end: I64, own_end: I64, kind: npt.NDArray[np.int8], ev: pd.DataFrame
) -> I64:
    """``end`` with every widened row (a send or recv spanning its call) ending no later than the
    first compute op its thread starts after the row's own start: a non-blocking ``isend``'s
    record stays open while the thread computes, and as a node it would hide those ops (nested
    in it); a blocking one ends before the thread computes again, and keeps its end."""
    wide = np.flatnonzero((start != own_start) | (end != own_end))
    comp = np.flatnonzero(kind == Kind.COMPUTE)
    if wide.size == 0 or comp.size == 0:
        return end
    lane = cat_codes(ev["lane"]).astype(np.int64)
    order = np.lexsort((own_start[comp], lane[comp]))
    j = iv.next_at_or_after(
        lane[wide], own_start[wide] + 1, lane[comp][order], own_start[comp][order]
    )
    nxt = np.where(j >= 0, own_start[comp][order][np.maximum(j, 0)], np.iinfo(np.int64).max)
    out = end.copy()
    out[wide] = np.maximum(np.minimum(end[wide], nxt), start[wide])
    return out


def _top_level(lane: I64, start: I64, end: I64) -> npt.NDArray[np.bool_]:
    """Per row (sorted by lane, start, -end): not inside an earlier row of its lane."""
    n = lane.size
    keep = np.ones(n, dtype=bool)
    if n < 2:
        return keep
    # running max of the previous ends within a lane: offset lanes so maxima never cross
    base = start.min() if n else 0
    span = int(max(end.max() - base, 1)) + 1
    shifted = (end - base) + lane * span
    prev = np.maximum.accumulate(shifted)
    keep[1:] = (start[1:] - base) + lane[1:] * span >= prev[:-1]
    return keep


def _windows_of(start: I64, steps: UnitSteps) -> I64:
    """CPU units: the window containing each start (-1 none; the first of overlapping ones)."""
    ws, we = steps.start_ns, steps.end_ns
    if ws.size == 0:
        return np.full(start.size, -1, dtype=np.int64)
    order = np.argsort(ws, kind="stable")
    j = np.searchsorted(ws[order], start, side="right") - 1
    ok = j >= 0
    jj = np.maximum(j, 0)
    inside = ok & (start < we[order][jj])
    return np.where(inside, order[jj], -1).astype(np.int64)


def _lane_roles(
    lane: I64, host: npt.NDArray[np.bool_], has_comm: npt.NDArray[np.bool_], first: I64
) -> tuple[str, ...]:
    """Per lane: ``host|device`` + ``comm|work`` + its order of first use within that class."""
    n = host.size
    roles = [""] * n
    cls = host.astype(np.int64) * 2 + has_comm.astype(np.int64)
    order = np.lexsort((np.arange(n), first, cls))
    counts: dict[int, int] = {}
    for i in order.tolist():
        c = int(cls[i])
        k = counts.get(c, 0)
        counts[c] = k + 1
        roles[i] = f"{'host' if host[i] else 'device'}-{'comm' if c % 2 else 'work'}-{k}"
    return tuple(roles)


def unit_graph(
    unit: Timeline,
    kind: npt.NDArray[np.int8],
    steps: UnitSteps,
    calls: npt.NDArray[np.bool_] | None = None,
    call_ivs: GroupedIntervals | None = None,
    span: tuple[I64, I64] | None = None,
    keys: CommKeys | None = None,
) -> UnitGraph:
    """The graph of one unit (see the module docstring). ``calls`` (CPU units): the host events
    that are communication calls on compute threads (launches, waits), kept as host nodes;
    ``call_ivs``: their time per thread (:func:`traceoverlap.rank.hostwait.lane_calls`, grouped by
    its lane codes), kept for the overlap tax; ``span`` (CPU units): per event row its span, a
    point-to-point activity's widened to the calls of its instance
    (:func:`traceoverlap.rank.unit.p2p_spans`, diagnosis.md §11): its node is the whole call;
    ``keys``: the unit's :func:`~traceoverlap.rank.instances.comm_keys`, when found already."""
    ev = unit.events
    start = ev["start_ns"].to_numpy().astype(np.int64)
    end = ev["end_ns"].to_numpy().astype(np.int64)
    if span is not None and not steps.gpu:
        # a blocking send / recv is its call, blocked until the peer came (c10d::send then
        # gloo:send on the calling thread): one node from the call's start to the transfer's
        # end, so the wait is the node's (a rendezvous with the peer), not the next op's slack
        own_start, own_end = start, end
        start, end = span[0].astype(np.int64), span[1].astype(np.int64)
        end = _until_the_thread_resumed(own_start, start, end, own_end, kind, ev)
    lane_codes = cat_codes(ev["lane"]).astype(np.int64)
    is_act = kind < Kind.NONE
    if steps.gpu:
        rows = np.flatnonzero(is_act & (steps.event_window >= 0))
        window = steps.event_window[rows]
    else:
        call = calls if calls is not None else np.zeros(len(ev), dtype=bool)
        rows = np.flatnonzero(is_act | call)
        # a communication activity first among rows of equal span: the call it widened to is
        # then nested in it, and dropped
        o = np.lexsort((kind[rows] != Kind.COMM, -end[rows], start[rows], lane_codes[rows]))
        rows = rows[o]
        rows = rows[_top_level(lane_codes[rows], start[rows], end[rows])]
        window = _windows_of(start[rows], steps)
        rows, window = rows[window >= 0], window[window >= 0]
    node_kind = kind[rows].astype(np.int8)
    node_kind[node_kind == Kind.NONE] = LAUNCH
    src = dst = np.zeros(0, np.int64)
    launch_rows = np.zeros(0, np.int64)
    if steps.gpu:
        lr = steps.launch_row[rows]
        has = lr >= 0
        launch_rows, inv = np.unique(lr[has], return_inverse=True)
        src = rows.size + inv.astype(np.int64)
        dst = np.flatnonzero(has).astype(np.int64)
    sync_rows = sync_src = np.zeros(0, np.int64)
    if steps.gpu:
        sync_rows, sync_src = _host_syncs(ev, start, end, lane_codes, rows, steps.launch_row[rows])
    all_rows = np.concatenate([rows, launch_rows, sync_rows])
    notes: list[str] = []
    n_launch = launch_rows.size
    lwin = np.full(n_launch, np.iinfo(np.int64).max, dtype=np.int64)
    if n_launch:
        np.minimum.at(lwin, src - rows.size, window[dst])
    all_window = np.concatenate([window, lwin, window[sync_src]]).astype(np.int64)
    all_kind = np.concatenate([node_kind, np.full(n_launch + sync_rows.size, LAUNCH, np.int8)])
    src_start = np.ones(src.size, dtype=bool)
    lane_local, lane_uniq = pd.factorize(lane_codes[all_rows])
    lane_local = lane_local.astype(np.int64)
    cats = ev["lane"].cat.categories.to_numpy(dtype=object)
    lane_names = tuple(str(cats[c]) for c in lane_uniq)
    n_lanes = len(lane_names)
    lane_host = np.zeros(n_lanes, dtype=bool)
    lane_host[lane_local] = ev["stream"].to_numpy()[all_rows] < 0
    has_comm = np.zeros(n_lanes, dtype=bool)
    has_comm[lane_local[all_kind == Kind.COMM]] = True
    # a communication lane is a stream or thread the communication runs on, not a compute
    # thread that sits in its blocking sends and recvs (those nodes are on the thread that
    # called them)
    has_comp = np.zeros(n_lanes, dtype=bool)
    has_comp[lane_local[all_kind == Kind.COMPUTE]] = True
    has_comm &= ~(lane_host & has_comp)
    first = np.full(n_lanes, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, lane_local, start[all_rows])
    roles = _lane_roles(lane_local, lane_host, has_comm, first)
    name_codes, name_uniq = pd.factorize(cat_codes(ev["name"])[all_rows])
    ncats = ev["name"].cat.categories.to_numpy(dtype=object)
    names = tuple(str(ncats[c]) if c >= 0 else "" for c in name_uniq)
    inst_of_row, instances = instance_rows(unit, kind, steps, keys)
    inst = inst_of_row[all_rows]
    esrc = edst = egap = np.zeros(0, np.int64)
    gap = np.zeros(src.size, dtype=np.int64)
    guessed = np.zeros(0, dtype=bool)
    if not steps.gpu:
        nodes = _Nodes(lane_local, start[all_rows], end[all_rows], all_kind, name_codes, names)
        h_lane, h_start = _host_events(ev, lane_codes, lane_uniq)
        bs, bd, bg = _blocking_edges(nodes, h_lane, h_start)
        lp_src, lp_gap = _launch_points(ev, calls, rows, lane_codes, nodes)
        # a call inside a communication node is that node (a blocking send or recv widened to
        # its call): it launches nothing else, and that node needs no launch
        absorbed = nodes.kind[lp_src] == Kind.COMM
        ls, ld, lg = _launch_edges(nodes, lp_src[~absorbed], lp_gap[~absorbed], lp_src[absorbed])
        esrc, edst = _wait_edges(nodes)
        # an op that launched a collective from inside and ended after it (a blocking call
        # inside an autograd Function, a synchronous all_reduce in a module) waited for it
        inside = (nodes.kind[ls] != LAUNCH) & (nodes.end[ld] <= nodes.end[ls])
        esrc = np.concatenate([esrc, ld[inside]])
        edst = np.concatenate([edst, ls[inside]])
        egap = (nodes.end[edst] - nodes.end[esrc]).astype(np.int64)
        src = np.concatenate([src, bs, ls])
        dst = np.concatenate([dst, bd, ld])
        gap = np.concatenate([gap, bg, lg])
        src_start = np.concatenate(
            [src_start, np.zeros(bs.size, dtype=bool), np.ones(ls.size, dtype=bool)]
        )
        if (all_kind == LAUNCH).any() and not (all_kind == Kind.COMM).any():
            notes.append(
                f"rank {unit.traces[0].rank}: communication calls but no communication activity "
                "(gloo point-to-point leaves none): its waits are host gaps to the replay, so "
                "no-host-gaps and the straggler scenarios are not predictions here"
            )
        own = np.setdiff1d(np.flatnonzero(all_kind == Kind.COMM), lp_src[absorbed])
        if ls.size == 0 and own.size:
            notes.append(
                f"rank {unit.traces[0].rank}: communication calls and communication activities "
                "could not be paired in order; communication keeps its observed gaps"
            )
    else:
        gs, gd, note = _read_sync_edges(ev, all_rows, src[: dst.size], dst, start)
        read = bool(note)
        if not read:
            gs, gd, note = _stream_wait_edges(
                ev, lane_codes, all_rows, all_kind, src[: dst.size], dst, start, end
            )
        # a host call that blocked until device work ended (a stream / device synchronize, a
        # copy to the host) ends no earlier than that work: its wait is read, not slack
        n_sync = sync_rows.size
        sync_node = rows.size + n_launch + np.arange(n_sync, dtype=np.int64)
        lnode, dnode = src[: dst.size], dst
        blocking = end[all_rows[lnode]] >= end[all_rows[dnode]]
        esrc = np.concatenate([sync_src, dnode[blocking]]).astype(np.int64)
        edst = np.concatenate([sync_node, lnode[blocking]]).astype(np.int64)
        egap = (end[all_rows[edst]] - end[all_rows[esrc]]).astype(np.int64)
        guessed = np.concatenate([np.zeros(src.size, bool), np.full(gs.size, not read)])
        src, dst = np.concatenate([src, gs]), np.concatenate([dst, gd])
        src_start = np.concatenate([src_start, np.zeros(gs.size, dtype=bool)])
        gap = np.concatenate([gap, np.zeros(gs.size, dtype=np.int64)])
        dev_work = int((~lane_host & ~has_comm).sum())
        dev_comm = int((~lane_host & has_comm).sum())
        if dev_work and dev_comm:
            notes.append(f"rank {unit.traces[0].rank}: {note}")
        unread = _unread_waits(ev)
        if unread:
            notes.append(f"rank {unit.traces[0].rank}: {unread} {UNREAD_WAITS}")
    hs, hd = _handoff_edges(lane_local, start[all_rows], end[all_rows], lane_host & ~has_comm)
    src, dst, src_start, gap, guessed = _appended(src, dst, src_start, gap, guessed, hs, hd)
    return UnitGraph(
        trace=unit.traces[0],
        labels=tuple(steps.labels),
        win_start_ns=steps.start_ns.astype(np.int64),
        win_end_ns=steps.end_ns.astype(np.int64),
        lane=lane_local,
        start_ns=start[all_rows],
        end_ns=end[all_rows],
        kind=all_kind,
        window=all_window,
        name=name_codes.astype(np.int64),
        inst=inst,
        lane_names=lane_names,
        lane_host=lane_host,
        lane_role=roles,
        names=names,
        src=src.astype(np.int64),
        dst=dst.astype(np.int64),
        src_start=src_start,
        gap=gap,
        esrc=esrc.astype(np.int64),
        edst=edst.astype(np.int64),
        egap=egap,
        instances=instances,
        notes=tuple(notes),
        **_calls_on_lanes(unit, call_ivs, lane_uniq),
        shape=ev["shape"].to_numpy()[all_rows].astype(np.int32),
        guessed=guessed if guessed.any() else np.zeros(0, dtype=bool),
    )


def _calls_on_lanes(
    unit: Timeline, call_ivs: GroupedIntervals | None, lane_uniq: npt.ArrayLike
) -> dict[str, I64]:
    """``call_ivs`` (grouped by :func:`traceoverlap.rank.hostwait.lane_codes`) on the graph's local
    lanes; calls on a thread without nodes are dropped."""
    z = np.zeros(0, np.int64)
    if call_ivs is None or call_ivs[0].size == 0:
        return {}
    from .hostwait import lane_codes as thread_codes

    cg, cs, ce = call_ivs
    thread = thread_codes(unit)
    ev_lane = cat_codes(unit.events["lane"]).astype(np.int64)
    # each thread code -> the event lane of its first event -> the graph's local lane
    first = np.full(int(thread.max()) + 1, -1, dtype=np.int64)
    first[thread[::-1]] = np.arange(thread.size)[::-1]
    local = pd.Index(np.asarray(lane_uniq)).get_indexer(ev_lane[first[cg]]).astype(np.int64)
    ok = local >= 0
    if not ok.any():
        return {"call_lane": z, "call_start_ns": z.copy(), "call_end_ns": z.copy()}
    order = np.lexsort((cs[ok], local[ok]))
    return {
        "call_lane": local[ok][order],
        "call_start_ns": cs[ok][order].astype(np.int64),
        "call_end_ns": ce[ok][order].astype(np.int64),
    }


WAIT_RE = re.compile(r"(?i)wait")


@dataclass(frozen=True)
class _Nodes:
    """A unit's nodes while its edges are found (local indices)."""

    lane: I64
    start: I64
    end: I64
    kind: npt.NDArray[np.int8]
    name: I64
    names: tuple[str, ...]

    def is_wait(self) -> npt.NDArray[np.bool_]:
        w = np.array([bool(WAIT_RE.search(s)) for s in self.names], dtype=bool)
        if w.size == 0:
            return np.zeros(self.kind.size, dtype=bool)
        return np.asarray((self.kind == LAUNCH) & w[self.name], dtype=bool)


def _enclosing(nodes: _Nodes, lane: I64, t: I64) -> I64:
    """Per (lane, t): the node of that lane running at t (the latest started), -1 none."""
    if nodes.start.size == 0 or t.size == 0:
        return np.full(t.size, -1, dtype=np.int64)
    base = int(min(nodes.start.min(), t.min()))
    span = int(max(nodes.end.max(), t.max()) - base) + 1
    order = np.lexsort((nodes.start, nodes.lane))
    key = nodes.lane[order] * span + (nodes.start[order] - base)
    j = np.searchsorted(key, lane * span + (t - base), side="right") - 1
    jj = order[np.maximum(j, 0)]
    ok = (j >= 0) & (nodes.lane[jj] == lane) & (nodes.end[jj] >= t)
    return np.where(ok, jj, -1).astype(np.int64)


def _launch_points(
    ev: pd.DataFrame,
    calls: npt.NDArray[np.bool_] | None,
    rows: I64,
    lane_codes: I64,
    nodes: _Nodes,
) -> tuple[I64, I64]:
    """CPU units: every communication call that is not a wait, in start order, as (node, gap):
    the call's own node (gap 0), or the top-level node it ran inside (gap: from that node's
    start to the call's start)."""
    z = np.zeros(0, np.int64)
    if calls is None or not calls.any():
        return z, z
    from ..core.model import per_category

    wait = per_category(ev["name"], lambda s: bool(WAIT_RE.search(s)), calls, bool)
    is_wait = wait[cat_codes(ev["name"])]
    crow = np.flatnonzero(calls & ~is_wait)
    start = ev["start_ns"].to_numpy().astype(np.int64)
    crow = crow[np.argsort(start[crow], kind="stable")]
    local_lane = pd.Index(pd.unique(lane_codes[rows]))
    ln = local_lane.get_indexer(lane_codes[crow]).astype(np.int64)
    enc = np.where(ln >= 0, _enclosing(nodes, np.maximum(ln, 0), start[crow]), -1)
    ok = enc >= 0
    return enc[ok].astype(np.int64), (start[crow][ok] - nodes.start[enc[ok]]).astype(np.int64)


def _launch_edges(
    nodes: _Nodes, lp_src: I64, lp_gap: I64, absorbing: I64 | None = None
) -> tuple[I64, I64, I64]:
    """The n-th launch point -> the n-th communication activity (start order; not those in
    ``absorbing``: nodes that are their own call), when the counts agree and the launch does not
    come after the activity started."""
    z = np.zeros(0, np.int64)
    comm = np.flatnonzero(nodes.kind == Kind.COMM)
    if absorbing is not None and absorbing.size:
        comm = np.setdiff1d(comm, absorbing)
    comm = comm[np.argsort(nodes.start[comm], kind="stable")]
    if comm.size == 0 or lp_src.size != comm.size:
        return z, z, z
    ok = nodes.start[lp_src] + lp_gap <= nodes.start[comm]
    return lp_src[ok], comm[ok].astype(np.int64), lp_gap[ok]


def _wait_edges(nodes: _Nodes) -> tuple[I64, I64]:
    """End edges: a wait call ends no earlier than the communication activity that ended last
    inside it."""
    z = np.zeros(0, np.int64)
    waits = np.flatnonzero(nodes.is_wait())
    comm = np.flatnonzero(nodes.kind == Kind.COMM)
    if waits.size == 0 or comm.size == 0:
        return z, z
    by_end = comm[np.argsort(nodes.end[comm], kind="stable")]
    j = np.searchsorted(nodes.end[by_end], nodes.end[waits], side="right") - 1
    jj = np.maximum(j, 0)
    ok = (j >= 0) & (nodes.end[by_end][jj] >= nodes.start[waits])
    return by_end[jj[ok]].astype(np.int64), waits[ok].astype(np.int64)


def _host_events(ev: pd.DataFrame, lane_codes: I64, lane_uniq: npt.ArrayLike) -> tuple[I64, I64]:
    """CPU units: the starts of every host event (a ``cpu_op`` or a range, of any name) on the
    graph's lanes, as (local lane, start), sorted: where a thread resumed (diagnosis.md §8, as
    :func:`traceoverlap.rank.hostwait.host_starts`, per thread)."""
    host = in_categories(ev["category"], ("cpu_op", "annotation"))
    rows = np.flatnonzero(host)
    local = pd.Index(np.asarray(lane_uniq)).get_indexer(lane_codes[rows]).astype(np.int64)
    t = ev["start_ns"].to_numpy().astype(np.int64)[rows]
    ok = local >= 0
    order = np.lexsort((t[ok], local[ok]))
    return local[ok][order], t[ok][order]


def _blocking_edges(nodes: _Nodes, h_lane: I64, h_start: I64) -> tuple[I64, I64, I64]:
    """diagnosis.md §8: comm node -> the first node of another thread that starts after the
    comm's end when that thread was idle at the end (no node of it running) and its next host
    event of any kind (``h_lane``/``h_start``: :func:`_host_events`) starts within 1 % of the
    comm's duration or within 1 ms after it (``gap * BLOCKED_PER <= duration`` or ``gap <=
    BLOCKED_FLOOR_NS``), or at any gap where its idle stretch opened at a communication call's
    return (the analysis' blocked rule, §11, so the graph waits where the analysis says the
    thread was blocked), gap 0 (the wake-up is the node's slack). A node on the comm's own
    thread (a blocking send or recv) follows it by lane order.

    Also, with a negative gap, the node that starts up to :data:`BLOCK_MAX_NS` *before* the
    comm's recorded end after an idle stretch of its lane, begun before that, that the comm
    covered for at least :data:`BLOCK_COVER` of it: the thread waited while the communication
    ran and resumed when it completed; the communication thread closed its range a moment
    later (measured on gloo runs: 0.09-0.26 ms before the end, more than 1 % of a 7.5 ms
    all-reduce). Without the edge that wait would be host time to the replay, and a straggler
    scenario would copy it to the rank it fixes."""
    lane, start, end, kind = nodes.lane, nodes.start, nodes.end, nodes.kind
    comm_all = np.flatnonzero(kind == Kind.COMM)
    srcs: list[I64] = []
    dsts: list[I64] = []
    gaps: list[I64] = []
    z = np.zeros(0, np.int64)
    if comm_all.size == 0:
        return z, z.copy(), z.copy()
    for ln in iv.unique_values(lane[kind != Kind.COMM]).tolist():  # a loop over lanes, not events
        on = np.flatnonzero(lane == ln)
        comm = comm_all[lane[comm_all] != ln]
        if comm.size == 0:
            continue
        on = on[np.argsort(start[on], kind="stable")]
        s_on = start[on]
        ce, dur = end[comm], end[comm] - start[comm]
        running = np.maximum.accumulate(end[on])
        j = np.searchsorted(s_on, ce, side="left")
        ok = j < on.size
        jj = np.minimum(j, on.size - 1)
        ok &= (j == 0) | (running[np.maximum(j - 1, 0)] <= ce)  # idle at the comm's end
        hs = h_start[h_lane == ln]
        k = np.searchsorted(hs, ce, side="left")
        nxt = np.where(k < hs.size, hs[np.minimum(k, max(hs.size - 1, 0))] if hs.size else 0, 0)
        gap = nxt - ce
        # or the idle stretch opened at a communication call's return (the lane's last node
        # before the end a call): blocked on it until its end however late the thread woke (the
        # analysis' rule, §11); the wake-up is the next node's slack
        pj = np.maximum(j - 1, 0)
        call_before = (j > 0) & (kind[on[pj]] == LAUNCH) & (end[on[pj]] == running[pj])
        tol = (gap * BLOCKED_PER <= dur) | (gap <= BLOCKED_FLOOR_NS)
        ok &= (k < hs.size) & (tol | call_before)
        # just before the end: the first node starting in [end - 0.5 ms, end), after an idle
        # stretch [the end of everything before it, its start) that began before that window
        # and that the comm mostly covered
        early = ce - BLOCK_MAX_NS
        k = np.searchsorted(s_on, early, side="left")
        kk = np.minimum(k, on.size - 1)
        idle_from = running[np.maximum(k - 1, 0)]
        idle = s_on[kk] - idle_from
        covered = s_on[kk] - np.maximum(idle_from, start[comm])
        before = (k > 0) & (k < on.size) & (s_on[kk] < ce) & (idle_from <= early)
        before &= covered >= BLOCK_COVER * idle
        ok &= ~before  # the resumption is the node just before the end, not a later one
        srcs += [comm[ok], comm[before]]
        dsts += [on[jj[ok]], on[kk[before]]]
        gaps += [np.zeros(int(ok.sum()), np.int64), (s_on[kk] - ce)[before]]
    if not srcs:
        return z, z.copy(), z.copy()
    return (
        np.concatenate(srcs).astype(np.int64),
        np.concatenate(dsts).astype(np.int64),
        np.concatenate(gaps).astype(np.int64),
    )


def _handoff_edges(
    lane: I64, start: I64, end: I64, worker: npt.NDArray[np.bool_]
) -> tuple[I64, I64]:
    """Thread hand-offs (edge 6): on the unit's host threads that are no communication lanes
    (``worker``, per lane), the *first* thread (the earliest first node: the one the program
    runs on) and every other one. Where a stretch of another thread's nodes lies inside an idle
    gap of the first thread, beginning within the blocked rule's tolerance after the node before
    the gap ended and ending within it before the node after the gap started (each gap at most
    1 % of the stretch, or at most 1 ms: ``BLOCKED_PER``, ``BLOCKED_FLOOR_NS``, diagnosis.md §8),
    the first thread handed it that work and waited (``backward()`` on the main thread while
    the autograd engine's thread launches the backward): the stretch's first node depends on the
    end of the node before the gap, and the node after the gap on the end of the stretch's
    last-ending node (both gap 0: the wake-ups are those nodes' slack). A thread that works
    beside the first one, or starts or ends far from its gaps (a metrics thread), gets none.

    Without them the other thread's first node kept its observed start (a lane's first node
    with no edge), and a scenario that let the first thread finish its forward earlier could
    not start the backward any earlier; the first thread's gap while it waited was its own
    host time, which ``no-host-gaps`` removed (the optimizer then ran before the backward)."""
    z = np.zeros(0, np.int64)
    lanes = np.flatnonzero(worker)
    if lanes.size < 2 or start.size == 0:
        return z, z.copy()
    on_lane = [np.flatnonzero(lane == ln) for ln in lanes.tolist()]
    firsts = [int(start[ix].min()) if ix.size else np.iinfo(np.int64).max for ix in on_lane]
    main = int(np.argmin(firsts))
    a = on_lane[main]
    a = a[np.lexsort((end[a], start[a]))]
    if a.size < 2:
        return z, z.copy()
    a_start, a_run = start[a], np.maximum.accumulate(end[a])
    srcs: list[I64] = []
    dsts: list[I64] = []
    for i, b in enumerate(on_lane):  # a loop over threads, not events
        if i == main or b.size == 0:
            continue
        b = b[np.lexsort((end[b], start[b]))]
        k = np.searchsorted(a_start, start[b], side="right") - 1  # a's node before b's node
        kk = np.clip(k, 0, a.size - 2)
        inside = (k >= 0) & (k < a.size - 1)
        inside &= (a_run[kk] <= start[b]) & (a_start[kk + 1] >= end[b])
        gid = np.where(inside, k, -1)
        # stretches: runs of consecutive nodes in the same gap
        brk = np.ones(b.size, dtype=bool)
        brk[1:] = gid[1:] != gid[:-1]
        run = np.cumsum(brk) - 1
        first = np.flatnonzero(brk & (gid >= 0))
        if first.size == 0:
            continue
        r = run[first]
        last_end = np.full(int(run[-1]) + 1, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(last_end, run, end[b])
        closer = np.zeros(int(run[-1]) + 1, dtype=np.int64)  # per run: its last-ending node
        order = np.lexsort((end[b], run))
        closer[run[order]] = b[order]
        g = gid[first]
        span = last_end[r] - start[b[first]]
        pre = start[b[first]] - a_run[g]
        post = a_start[g + 1] - last_end[r]
        ok = ((pre * BLOCKED_PER <= span) | (pre <= BLOCKED_FLOOR_NS)) & (
            (post * BLOCKED_PER <= span) | (post <= BLOCKED_FLOOR_NS)
        )
        # the node before the gap: the one that ended last among a's nodes up to it
        before = a[_argmax_upto(end[a], g[ok])]
        srcs += [before, closer[r[ok]]]
        dsts += [b[first[ok]], a[g[ok] + 1]]
    if not srcs:
        return z, z.copy()
    return np.concatenate(srcs).astype(np.int64), np.concatenate(dsts).astype(np.int64)


def _appended(
    src: I64,
    dst: I64,
    src_start: npt.NDArray[np.bool_],
    gap: I64,
    guessed: npt.NDArray[np.bool_],
    new_src: I64,
    new_dst: I64,
) -> tuple[I64, I64, npt.NDArray[np.bool_], I64, npt.NDArray[np.bool_]]:
    """The edges with ``new_src -> new_dst`` appended (from the source's end, gap 0, not
    guessed; ``guessed`` stays empty where no edge was guessed)."""
    if new_src.size == 0:
        return src, dst, src_start, gap, guessed
    n = new_src.size
    if guessed.size:
        guessed = np.concatenate([guessed, np.zeros(n, dtype=bool)])
    return (
        np.concatenate([src, new_src]),
        np.concatenate([dst, new_dst]),
        np.concatenate([src_start, np.zeros(n, dtype=bool)]),
        np.concatenate([gap, np.zeros(n, dtype=np.int64)]),
        guessed,
    )


def _argmax_upto(v: I64, k: I64) -> I64:
    """Per ``k``: the index of the largest of ``v[: k + 1]`` (the latest of them on ties)."""
    best = np.zeros(v.size, dtype=np.int64)
    if v.size:
        run = np.maximum.accumulate(v)
        is_new = np.ones(v.size, dtype=bool)
        is_new[1:] = v[1:] >= run[:-1]
        best = np.maximum.accumulate(np.where(is_new, np.arange(v.size), 0))
    return best[k]


def _read_sync_edges(
    ev: pd.DataFrame, all_rows: I64, launch_node: I64, dev: I64, start: I64
) -> tuple[I64, I64, str]:
    """GPU units: the cross-stream sync edges the trace records (Kineto ``cuda_sync`` rows of
    stream waits, written with ``enable_cuda_sync_events``: ``stream`` waits, ``correlation``
    is its ``cudaStreamWaitEvent`` call, ``wait_stream`` / ``wait_corr`` the stream and the
    event record call it waits on). Per wait: the producer is the last activity launched onto
    the stream waited on before the record call (without a record id: before the wait call),
    the consumer the first activity launched onto the waiting stream after the wait call; the
    consumer starts no earlier than the producer ends. ("", no edges) where the unit has no such
    row: the edges are then guessed (:func:`_stream_wait_edges`)."""
    z = np.zeros(0, np.int64)
    if "wait_stream" not in ev.columns:
        return z, z, ""
    ws_col = ev["wait_stream"].to_numpy()
    rows = np.flatnonzero(in_categories(ev["category"], ("sync",)) & (ws_col >= 0))
    if rows.size == 0:
        return z, z, ""
    corr = ev["correlation"].to_numpy()
    stream = ev["stream"].to_numpy()
    calls = np.flatnonzero(in_categories(ev["category"], ("runtime", "driver")) & (corr >= 0))
    by_corr = pd.Series(start[calls], index=corr[calls])
    by_corr = by_corr[~by_corr.index.duplicated()]
    t_wait = by_corr.reindex(corr[rows]).to_numpy(dtype=np.float64)
    t_record = by_corr.reindex(ev["wait_corr"].to_numpy()[rows]).to_numpy(dtype=np.float64)
    t_before = np.where(np.isnan(t_record), t_wait, t_record)
    ok = ~np.isnan(t_wait)
    none = f"{rows.size} stream wait(s) recorded in the trace (cuda_sync), none between two "
    none += "activities of this unit: no cross-stream sync edge"
    if not ok.any() or dev.size == 0:
        return z, z, none
    # device nodes by (stream, launch time): one sorted key, searched per (stream, time)
    codes, d_code = np.unique(stream[all_rows[dev]], return_inverse=True)
    d_launch = start[all_rows[launch_node]]
    t0 = int(min(d_launch.min(), np.nanmin(t_before[ok])))
    span = int(max(d_launch.max(), np.nanmax(t_wait[ok])) - t0) + 2
    key = d_code.astype(np.int64) * span + (d_launch - t0)
    order = np.argsort(key, kind="stable")
    key, node, code_sorted = key[order], dev[order], d_code[order]

    def code_of(s: I64) -> I64:
        i = np.searchsorted(codes, s)
        return np.where((i < codes.size) & (codes[np.minimum(i, codes.size - 1)] == s), i, -1)

    cw, cp = code_of(stream[rows][ok]), code_of(ws_col[rows][ok])
    tw = t_wait[ok].astype(np.int64) - t0
    tb = t_before[ok].astype(np.int64) - t0
    c = np.searchsorted(key, cw * span + tw, side="right")  # first launched after the wait
    p = np.searchsorted(key, cp * span + tb, side="left") - 1  # last launched before the record
    cc, pp = np.minimum(c, key.size - 1), np.maximum(p, 0)
    good = (cw >= 0) & (cp >= 0) & (c < key.size) & (p >= 0)
    good &= (code_sorted[cc] == cw) & (code_sorted[pp] == cp)
    if not good.any():
        return z, z, none
    pair = np.unique(np.stack([node[pp[good]], node[cc[good]]]), axis=1)
    return (
        pair[0].astype(np.int64),
        pair[1].astype(np.int64),
        f"{pair.shape[1]} cross-stream sync edge(s) read from {rows.size} stream wait(s) the "
        "trace records (cuda_sync rows: the stream and the event record waited on)",
    )


#: What follows the count of stream waits recorded without what they wait on.
UNREAD_WAITS = (
    "stream wait(s) recorded (sync rows) without the stream they wait on (nsys: no "
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT records, `nsys profile --cuda-event-trace=true`; Kineto: "
    "no wait_on_stream, `enable_cuda_sync_events`): their cross-stream edges are not read"
)


def _unread_waits(ev: pd.DataFrame) -> int:
    """How many stream-wait sync rows (``Stream Wait Event``, the name Kineto and the nsys
    reader give them) lack the stream they wait on (``wait_stream`` -1)."""
    rows = in_categories(ev["category"], ("sync",))
    if not rows.any():
        return 0
    rows &= in_categories(ev["name"], ("Stream Wait Event",))
    if "wait_stream" in ev.columns:
        rows &= ev["wait_stream"].to_numpy() < 0
    return int(np.count_nonzero(rows))


STREAM_WAIT_RE = re.compile(r"(?i)streamwaitevent")
NO_SYNC = (
    "no cross-stream sync in the trace (0 sync edges guessed): communication and compute "
    "streams replay independently except through their launches"
)


def unique_pairs(a: I64, b: I64) -> tuple[I64, I64]:
    """The distinct ``(a, b)`` pairs in ascending order (by ``a``, then ``b``), as
    ``np.unique(np.stack([a, b]), axis=1)`` gives them: one lexsort, without the structured
    view and its comparisons that ``np.unique`` along an axis sorts by."""
    order = np.lexsort((b, a))
    sa, sb = a[order], b[order]
    keep = np.ones(sa.size, dtype=bool)
    keep[1:] = (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])
    return sa[keep].astype(np.int64), sb[keep].astype(np.int64)


def _stream_wait_edges(
    ev: pd.DataFrame,
    lane_codes: I64,
    all_rows: I64,
    kind: npt.NDArray[np.int8],
    src: I64,
    dst: I64,
    start: I64,
    end: I64,
) -> tuple[I64, I64, str]:
    """GPU units: cross-stream sync edges guessed from the host's ``cudaStreamWaitEvent`` calls
    (the readers keep no stream arguments). After a wait call, the next activity its thread
    launches waits for the last activity of the other class (communication vs not) that the
    thread launched before the call: PyTorch's pattern around NCCL (the NCCL stream waits for the
    compute stream before a collective, the compute stream for the NCCL stream after). Every guess
    is returned, also those the trace contradicts (the target started before the source ended):
    the replay keeps those within its sync tolerance (clock granularity, launch jitter) and drops
    the rest (:func:`traceoverlap.whatif.graph.tolerate_guesses`), saying how many."""
    z = np.zeros(0, np.int64)
    from ..core.model import per_category

    host_call = in_categories(ev["category"], ("runtime", "driver"))
    is_wait = per_category(ev["name"], lambda n: bool(STREAM_WAIT_RE.search(n)), host_call, bool)
    waits = np.flatnonzero(host_call & is_wait[cat_codes(ev["name"])])
    launch_node = src  # launch node (local index) -> device node, one pair per launched activity
    if waits.size == 0 or launch_node.size == 0:
        return z, z, NO_SYNC
    lrow = all_rows[launch_node]
    t_launch = start[lrow]
    lthread = lane_codes[lrow]
    dev = dst
    is_comm = kind[dev] == Kind.COMM
    gs: list[I64] = []
    gd: list[I64] = []
    for th in iv.unique_values(lthread).tolist():  # a loop over launching threads, not events
        sel = np.flatnonzero(lthread == th)
        sel = sel[np.argsort(t_launch[sel], kind="stable")]
        w = waits[lane_codes[waits] == th]
        if w.size == 0:
            continue
        tw = start[w]
        nxt = np.searchsorted(t_launch[sel], tw, side="left")
        ok = nxt < sel.size
        tgt = sel[nxt[ok]]
        # the last launch before the wait of the other class than the target
        for cls in (True, False):
            pool = sel[is_comm[sel] == cls]
            if pool.size == 0:
                continue
            want = ok.copy()
            want[ok] = is_comm[tgt] != cls
            k = np.searchsorted(t_launch[pool], tw[want], side="left") - 1
            has = k >= 0
            t_want = sel[nxt[want]][has]
            gs.append(dev[pool[k[has]]])
            gd.append(dev[t_want])
    if not gs:
        return z, z, NO_SYNC
    s_all = np.concatenate(gs).astype(np.int64)
    d_all = np.concatenate(gd).astype(np.int64)
    ps, pd_ = unique_pairs(s_all, d_all)
    return (
        ps,
        pd_,
        f"{ps.size} cross-stream sync edge(s) guessed from {waits.size} "
        "cudaStreamWaitEvent call(s) (no stream arguments in the trace)",
    )


# --- the per-unit half of the collective matching -------------------------------------------------


def instance_rows(
    unit: Timeline, kind: npt.NDArray[np.int8], steps: UnitSteps, keys: CommKeys | None = None
) -> tuple[I64, pd.DataFrame]:
    """Per event row of the unit: its local collective instance (-1 none), and the local instance
    table (``local``, ``group_key``, ``kind_key``, ``seq``, ``ordinal``, ``p2p``, ``family``,
    ``label``). Reads :mod:`traceoverlap.run.matching` (today's per-group matching keys).
    ``keys``: the unit's :func:`~traceoverlap.rank.instances.comm_keys`, when the analysis
    found them already."""
    from .instances import _instance_table, comm_keys, instance_frame, with_p2p_peers

    ev = unit.events
    out = np.full(len(ev), -1, dtype=np.int64)
    cols = ["local", "group_key", "kind_key", "seq", "ordinal", "p2p", "family", "label"]
    if keys is None:
        keys = comm_keys(unit, kind, steps)
    if keys is None:
        return out, pd.DataFrame(columns=[*cols, "peer_rank", "p2p_tag"])
    c, order, firsts = keys.c, keys.order, keys.firsts
    inst = _instance_table(ev, kind, c, order, firsts)
    # the peer and tag a point-to-point op records: the analysis pairs by them (§6), so the
    # graph's matching must too, or pairs it pairs by end time differ from the analysis'
    with_p2p_peers(inst, ev, c.rows[order[firsts]], steps.launch_row)
    out[c.rows] = keys.local
    return out, instance_frame(inst)
