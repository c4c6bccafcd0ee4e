"""Collective instances of one unit: the map's half of the collectives (docs/diagnosis.md §5-6).

Exposed communication on one rank is often another rank's late arrival. This module finds every
collective *instance* of a unit (:func:`unit_instances`); :mod:`traceoverlap.run.matching`
matches them across the units of a run.

Instances of a unit (its ``comm`` activities):
  - When an activity carries a process group and a sequence number (newer Kineto copies
    ``Process Group Name`` and ``Seq`` onto NCCL kernels), the instance is (process group, seq);
    several kernels of one (group, seq) form one instance.
  - Otherwise the n-th activity of the same collective kind in the same group is one instance.
    The kind is the trace's collective name when given, else parsed from the activity name
    (``ncclKernel_AllReduce_RING_LL_Sum_float`` / ``ncclDevKernel_AllReduce_...`` ->
    ``AllReduce``, ``gloo:all_reduce`` -> ``all_reduce``). On GPU units without a process group
    the NCCL stream stands in for it (streams numbered per unit in order of first use).

Groups (diagnosis.md §6, docs/job-model.md): an activity's group comes from the trace's args, the
rank's only ``pg_config`` group, its gloo worker pool (CPU) or its NCCL stream (GPU, one group);
otherwise it is :data:`UNKNOWN_GROUP` and never matched.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core import intervals as iv
from ..core.intervals import GroupedIntervals
from ..core.model import Kind, Timeline, TraceInfo, in_categories, per_category, values_at
from ..core.vocab import (
    NCCL_RANGE,
    Family,
    collective_kind,
    family_of,
    norm_kind,
)
from .metrics import ActivityRows
from .steps import NO_LAUNCH, UnitSteps, cat_codes, codes_values

I64 = npt.NDArray[np.int64]

#: Columns of a unit's local instance table (map side).
LOCAL_COLUMNS = (
    "local",
    "group_key",
    "kind_key",
    "seq",
    "ordinal",
    "label",
    "kernel",
    "family",
    "p2p",
    "process_group",
    "bytes",
    "lane",
    "start_ns",
    "end_ns",
    "window",
    "same_stream",
    "queued_ns",
    "behind_comm_ns",
    "peer_rank",
    "p2p_tag",
)
# --- map side: one unit's instances ------------------------------------------------------------


def _enclosing_collective(ev: pd.DataFrame, launch_rows: I64) -> npt.NDArray[np.object_]:
    """For each launch row (-1: none): the collective named by the ``nccl:<collective>`` host
    range around it on the same thread (``nccl:all_to_all`` around a SendRecv kernel that
    implements an all-to-all), "" when none."""
    out = np.full(launch_rows.size, "", dtype=object)
    names = ev["name"]
    ann = in_categories(ev["category"], ("annotation",))
    coll_of = per_category(names, lambda c: m.group(1) if (m := NCCL_RANGE.match(c)) else "", ann)
    codes = cat_codes(names)
    is_range = (coll_of != "")[codes] & ann  # tested per name: no object per row
    ridx = np.flatnonzero(is_range)
    ok = launch_rows >= 0
    if ridx.size == 0 or not ok.any():
        return out
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    tid = ev["tid"].to_numpy()
    where = np.flatnonzero(ok)
    lr = launch_rows[where]
    for t in np.unique(tid[lr]).tolist():
        mine = ridx[tid[ridx] == t]
        if mine.size == 0:
            continue
        mine = mine[np.argsort(start[mine], kind="stable")]
        q = where[tid[lr] == t]
        ts = start[launch_rows[q]]
        k = np.searchsorted(start[mine], ts, side="right") - 1
        inside = (k >= 0) & (ts < end[mine[np.maximum(k, 0)]])
        out[q[inside]] = coll_of[codes[mine[k[inside]]]]
    return out


def p2p_peers(ev: pd.DataFrame, rows: I64, launch_row: I64) -> tuple[I64, I64]:
    """Per communication activity row: the peer (its rank *in the op's group*) and tag its
    point-to-point op recorded (``peer_rank`` / ``p2p_tag``, from ``c10d::send`` /
    ``c10d::recv_`` ``Concrete Inputs``; diagnosis.md §6), -1 when none. The op is the row itself
    when it carries them, else the one on the same thread whose call holds the activity's start
    (``gloo:send`` begins inside ``c10d::send``) or, for a kernel, its launch's start."""
    peer = np.full(rows.size, -1, dtype=np.int64)
    tag = np.full(rows.size, -1, dtype=np.int64)
    if "peer_rank" not in ev or rows.size == 0:
        return peer, tag
    raw_peer, raw_tag = ev["peer_rank"].to_numpy(), ev["p2p_tag"].to_numpy()
    if raw_peer.strides == raw_tag.strides == (0,) and raw_peer[0] < 0 and raw_tag[0] < 0:
        return peer, tag  # one shared -1 each (no op recorded any): no copy of a row each
    all_peer = raw_peer.astype(np.int64)
    all_tag = raw_tag.astype(np.int64)
    ops = np.flatnonzero((all_peer >= 0) | (all_tag >= 0))
    if ops.size == 0:
        return peer, tag
    launch = launch_row[rows] if launch_row.size else np.full(rows.size, -1, np.int64)
    anchor = np.where(launch >= 0, launch, rows)
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    tid = ev["tid"].to_numpy()
    pid = ev["pid"].to_numpy()
    op = np.full(rows.size, -1, dtype=np.int64)
    own = (all_peer[anchor] >= 0) | (all_tag[anchor] >= 0)
    op[own] = anchor[own]
    for p, t in {(int(a), int(b)) for a, b in zip(pid[ops], tid[ops], strict=True)}:
        mine = ops[(pid[ops] == p) & (tid[ops] == t)]
        mine = mine[np.argsort(start[mine], kind="stable")]
        q = np.flatnonzero(~own & (pid[anchor] == p) & (tid[anchor] == t))
        if q.size == 0:
            continue
        ts = start[anchor[q]]
        k = np.searchsorted(start[mine], ts, side="right") - 1
        inside = (k >= 0) & (ts < end[mine[np.maximum(k, 0)]])
        op[q[inside]] = mine[k[inside]]
    hit = op >= 0
    peer[hit] = all_peer[op[hit]]
    tag[hit] = all_tag[op[hit]]
    return peer, tag


def _group_sizes_first(keys: I64) -> tuple[I64, I64]:
    """For keys sorted ascending: start index of each run and the run id of every element."""
    new = np.ones(keys.size, dtype=bool)
    new[1:] = keys[1:] != keys[:-1]
    starts = np.flatnonzero(new)
    return starts, np.cumsum(new) - 1


def unit_instances(
    unit: Timeline,
    kind: npt.NDArray[np.int8],
    steps: UnitSteps,
    acts: ActivityRows,
    launch_row: I64,
    span: tuple[I64, I64] | None = None,
) -> tuple[pd.DataFrame, GroupedIntervals, I64]:
    """The collective instances of one unit (:data:`LOCAL_COLUMNS`), their pieces (the union of
    each instance's activities per window, as a grouped set whose group is
    ``local * n_windows + window``) and, per piece, its local instance id. ``span``: per event
    row, the span of the calls an activity belongs to (CPU units, diagnosis.md §11): a
    point-to-point instance takes it as its own.

    Columnar throughout: names are parsed once per distinct name, groups are found by sorting."""
    cols, pieces, piece_local = instance_columns(unit, kind, steps, acts, launch_row, span)
    if cols is None:
        return pd.DataFrame(columns=list(LOCAL_COLUMNS)), pieces, piece_local
    return instance_frame(cols), pieces, piece_local


@dataclass(frozen=True)
class CommKeys:
    """A unit's communication activities keyed (:func:`_comm_keys`) and numbered into local
    instances (:func:`_number_instances`): what the analysis's instance table and the run
    graph's (:func:`traceoverlap.rank.graph.instance_rows`) both start from, found once."""

    c: _CommRows
    local: I64
    order: I64
    firsts: I64


def comm_keys(
    unit: Timeline, kind: npt.NDArray[np.int8], steps: UnitSteps, launch_row: I64 | None = None
) -> CommKeys | None:
    """The unit's :class:`CommKeys` (``launch_row``: ``steps.launch_row`` unless given), None
    when it has no communication activity."""
    if not (kind == Kind.COMM).any():
        return None
    lr = steps.launch_row if launch_row is None else launch_row
    info = unit.traces[0] if unit.traces else None
    c = _comm_keys(unit.events, kind, steps.gpu, lr, info)
    local, order, firsts = _number_instances(c)
    return CommKeys(c, local, order, firsts)


def instance_columns(
    unit: Timeline,
    kind: npt.NDArray[np.int8],
    steps: UnitSteps,
    acts: ActivityRows,
    launch_row: I64,
    span: tuple[I64, I64] | None = None,
    keys: CommKeys | None = None,
) -> tuple[dict[str, npt.NDArray[Any]] | None, GroupedIntervals, I64]:
    """:func:`unit_instances` as numpy columns (:data:`LOCAL_COLUMNS`, in order; None when the
    unit has no communication activity), for a caller that adds columns before it makes the
    frame (:func:`instance_frame`) once. ``keys``: the unit's :func:`comm_keys`, when found
    already (with the same ``launch_row``)."""
    ev = unit.events
    n_win = max(len(steps), 1)
    z = np.zeros(0, np.int64)
    if keys is None:
        keys = comm_keys(unit, kind, steps, launch_row)
    if keys is None:
        return None, (z, z.copy(), z.copy()), z.copy()
    c, local, order, firsts = keys.c, keys.local, keys.order, keys.firsts
    inst = _instance_table(ev, kind, c, order, firsts, span)
    head = order[firsts]
    pieces, piece_local = _instance_pieces(acts, c.rows, local, len(ev), n_win)
    window = _instance_windows(pieces, piece_local, firsts.size, n_win)
    inst["window"] = window
    inst["same_stream"] = _same_stream(
        ev,
        acts,
        window,
        c.rows[head],
        inst["end_ns"].astype(np.int64),
        steps.launch_start_ns,
    )
    queued, behind = _queueing(ev, c, head, launch_row, steps.gpu)
    inst["queued_ns"] = queued
    inst["behind_comm_ns"] = behind
    with_p2p_peers(inst, ev, c.rows[head], launch_row)
    return {k: inst[k] for k in LOCAL_COLUMNS}, pieces, piece_local


@functools.cache
def _text_dtype() -> Any:
    """The dtype a DataFrame built from a column of Python strings gets (pandas 3: ``str``;
    before: ``object``)."""
    return pd.DataFrame({"x": np.array(["x"], dtype=object)}).dtypes.iloc[0]


def instance_frame(cols: Mapping[str, npt.NDArray[Any]]) -> pd.DataFrame:
    """``pd.DataFrame(cols)``, cheaper: the text columns (object or unicode arrays of
    strings) are made the array of the dtype the frame would infer for them first (inferring
    costs a pass over every column)."""
    text = _text_dtype()
    if text == np.dtype(object):
        return pd.DataFrame(dict(cols))
    return pd.DataFrame(
        {k: pd.array(v, dtype=text) if v.dtype.kind in "OU" else v for k, v in cols.items()},
        copy=False,
    )


def with_p2p_peers(
    inst: MutableMapping[str, Any], ev: pd.DataFrame, heads: I64, launch_row: I64
) -> None:
    """``peer_rank`` and ``p2p_tag`` of a local instance table (in place: a frame or its
    columns; ``heads``: each instance's first activity row): what its point-to-point op
    recorded (:func:`p2p_peers`), -1 for collectives. The analysis and the what-if graph pair
    sends and recvs by them."""
    peer, tag = p2p_peers(ev, heads, launch_row)
    p2p = np.asarray(inst["p2p"], dtype=bool)
    inst["peer_rank"] = np.where(p2p, peer, -1)
    inst["p2p_tag"] = np.where(p2p, tag, -1)


@dataclass(frozen=True)
class _CommRows:
    """A unit's communication activities in start order (then trace order), and the key that
    makes them instances: (``pair`` = (group, kind), ``seq``, ``ordinal``).

    Per activity: ``rows`` (its row in the unit's event table); ``label`` (the collective's name:
    as the trace gives it, else the ``nccl:`` range around its launch, else parsed from the
    activity name) and ``label_code`` (its code among the distinct labels ``label_uniq``);
    ``kind_key`` (the label normalised: spellings of one kind are equal); ``process_group``
    ("" when none); ``group_key`` (the process group; on GPU units without one, the NCCL stream
    numbered by first use); ``pair`` (group and kind as one int code); ``seq`` (the trace's
    sequence number when it has a group and one, else -1); ``ordinal`` (else the n-th activity
    of its pair on this unit, else -1); ``stream``; ``name_codes`` (codes of the event name).
    """

    rows: I64
    label: npt.NDArray[np.object_]
    label_code: I64
    label_uniq: npt.NDArray[np.object_]
    kind_key: npt.NDArray[np.object_]
    process_group: npt.NDArray[np.object_]
    group_key: npt.NDArray[np.object_]
    pair: I64
    seq: I64
    ordinal: I64
    stream: I64
    name_codes: npt.NDArray[np.integer[Any]]


def _comm_keys(
    ev: pd.DataFrame,
    kind: npt.NDArray[np.int8],
    gpu: bool,
    launch_row: I64,
    info: TraceInfo | None = None,
) -> _CommRows:
    """The unit's communication activities, sorted, with their labels and instance keys."""
    start = ev["start_ns"].to_numpy()
    rows = np.flatnonzero(kind == Kind.COMM)
    rows = rows[np.lexsort((rows, start[rows]))]  # by start, then trace order
    name_col, coll_col, pg_col = ev["name"], ev["coll_name"], ev["process_group"]
    name_codes = cat_codes(name_col)[rows]
    # names parsed once per distinct name of these rows (per_category over the comm rows)
    parsed = codes_values(name_col, name_codes, collective_kind)
    given = codes_values(coll_col, cat_codes(coll_col)[rows], str)
    if gpu:
        around = _enclosing_collective(ev, launch_row[rows])
        given = np.where(given == "", around, given)
    label = np.where(given != "", given, parsed)
    label_code, label_uniq = pd.factorize(label)
    kind_uniq = np.array([norm_kind(str(x)) for x in label_uniq], dtype=object)
    kind_key = kind_uniq[label_code]
    kind_code, _ = pd.factorize(kind_key)
    pg = codes_values(pg_col, cat_codes(pg_col)[rows], str)
    seq = ev["seq"].to_numpy()[rows].astype(np.int64)
    stream = ev["stream"].to_numpy()[rows].astype(np.int64)
    tid = ev["tid"].to_numpy()[rows].astype(np.int64)
    group_key = _group_keys(pg, stream, gpu, tid, info)
    group_code, _ = pd.factorize(group_key)
    pair = group_code.astype(np.int64) * (int(kind_code.max()) + 1) + kind_code
    use_seq = (seq >= 0) & (pg != "")
    return _CommRows(
        rows=rows,
        label=label,
        label_code=label_code,
        label_uniq=np.asarray(label_uniq, dtype=object),
        kind_key=kind_key,
        process_group=pg,
        group_key=group_key,
        pair=pair,
        seq=np.where(use_seq, seq, -1),
        ordinal=np.where(use_seq, -1, _ordinals(pair)),
        stream=stream,
        name_codes=name_codes,
    )


#: Threads in one gloo worker pool (ProcessGroupGloo's default).
GLOO_POOL_SIZE = 2


def gloo_pools(tids: I64) -> I64:
    """Per gloo worker thread id (ascending): its pool, numbered in creation order. A pool's
    threads are created back to back (consecutive ids) and a pool holds at most
    :data:`GLOO_POOL_SIZE`; a thread that left no trace of its pool mate is a pool alone."""
    pool = np.zeros(tids.size, dtype=np.int64)
    size = 1
    for i in range(1, tids.size):
        same = tids[i] - tids[i - 1] == 1 and size < GLOO_POOL_SIZE
        pool[i] = pool[i - 1] + (0 if same else 1)
        size = size + 1 if same else 1
    return pool


#: Group key of an activity whose process group cannot be told in a run of several groups: such
#: activities are never matched (diagnosis.md §6).
UNKNOWN_GROUP = "\x00unknown"


def _group_keys(
    pg: npt.NDArray[np.object_],
    stream: I64,
    gpu: bool,
    tid: I64 | None = None,
    info: TraceInfo | None = None,
) -> npt.NDArray[np.object_]:
    """Per activity: its process group (diagnosis.md §6), from, in order: the trace's args
    (``Process Group Name``); the rank's only group (``pg_config`` lists one); on CPU units the
    gloo worker thread that ran it (each group runs its own pool of ``pt_gloo_runloop`` threads,
    created in ``pg_config`` order: pools by :func:`gloo_pools`, the k-th of P pools is the
    k-th of the last P groups); on GPU units, where the rank has at most one group, its NCCL stream
    (``"\\x00stream#i"``, streams numbered by first use). Otherwise :data:`UNKNOWN_GROUP`."""
    group_key = pg.copy()
    groups = info.process_groups if info is not None else ()
    no_pg = pg == ""
    if len(groups) == 1:
        group_key[no_pg] = groups[0][0]
        return group_key
    if len(groups) > 1:
        group_key[no_pg] = UNKNOWN_GROUP
        threads = info.gloo_threads if info is not None else ()
        if not gpu and tid is not None and threads:
            t_arr = np.asarray(threads, dtype=np.int64)
            pool = gloo_pools(t_arr)
            n_pools = int(pool.max()) + 1
            if n_pools > len(groups) and t_arr.size <= GLOO_POOL_SIZE * len(groups):
                # ids interleaved with other processes' threads: pair them in order
                pool = np.arange(t_arr.size, dtype=np.int64) // GLOO_POOL_SIZE
                n_pools = int(pool.max()) + 1
            if n_pools <= len(groups):
                # pools in creation order; groups whose pool left no thread in the trace are
                # taken to be the earliest created (the default group, idle during the steps)
                names = np.array([g for g, _ in groups][len(groups) - n_pools :], dtype=object)
                pos = np.searchsorted(t_arr, tid)
                on_worker = (pos < t_arr.size) & (t_arr[np.minimum(pos, t_arr.size - 1)] == tid)
                hit = no_pg & on_worker
                group_key[hit] = names[pool[pos[hit]]]
        return group_key
    if gpu:
        no_pg = pg == ""
        if no_pg.any():
            ordinal, first = pd.factorize(stream[no_pg])  # codes in order of first use
            names = np.array([f"\x00stream#{i}" for i in range(len(first))], dtype=object)
            group_key[no_pg] = names[ordinal]
    return group_key


def _ordinals(pair: I64) -> I64:
    """Per activity (in start order): the n-th activity of its (group, kind) ``pair``, from 0."""
    order = np.argsort(pair, kind="stable")
    run_start, run_id = _group_sizes_first(pair[order])
    ordinal = np.empty(pair.size, dtype=np.int64)
    ordinal[order] = np.arange(pair.size) - run_start[run_id]
    return ordinal


def _number_instances(c: _CommRows) -> tuple[I64, I64, I64]:
    """Local instance ids: one per distinct (group, kind, seq, ordinal), numbered in key order.

    Returns, per activity, its instance id (``local``); ``order``, the activities sorted by
    (key, start order); and ``firsts``, the position in ``order`` where each instance starts:
    ``order[firsts]`` is every instance's first (earliest) activity."""
    n = c.rows.size
    pos = np.arange(n)
    order = np.lexsort((pos, c.ordinal, c.seq, c.pair))
    new = np.ones(n, dtype=bool)
    new[1:] = (
        (c.pair[order][1:] != c.pair[order][:-1])
        | (c.seq[order][1:] != c.seq[order][:-1])
        | (c.ordinal[order][1:] != c.ordinal[order][:-1])
    )
    local = np.empty(n, dtype=np.int64)
    local[order] = np.cumsum(new) - 1
    return local, order, np.flatnonzero(new)


def _instance_table(
    ev: pd.DataFrame,
    kind: npt.NDArray[np.int8],
    c: _CommRows,
    order: I64,
    firsts: I64,
    span: tuple[I64, I64] | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """One row per local instance, as columns: its key and names from its first activity,
    ``bytes`` (the largest of its activities), ``lane`` (its first activity's),
    ``start_ns``/``end_ns`` (the earliest start, latest end of its activities), ``p2p`` (point to
    point)."""
    head = order[firsts]
    first_row = c.rows[head]
    rows_sorted = c.rows[order]
    family_uniq = np.array([family_of(str(x)) for x in c.label_uniq], dtype=object)
    name_col = ev["name"]
    inst: dict[str, npt.NDArray[Any]] = {
        "local": np.arange(firsts.size, dtype=np.int64),
        "group_key": c.group_key[head],
        "kind_key": c.kind_key[head],
        "seq": c.seq[head],
        "ordinal": c.ordinal[head],
        "label": c.label[head].astype(str),
        "kernel": codes_values(name_col, c.name_codes[head], str).astype(str),
        "family": family_uniq[c.label_code[head]],
        "process_group": c.process_group[head],
        "bytes": np.maximum.reduceat(ev["coll_bytes"].to_numpy()[rows_sorted], firsts),
        "lane": values_at(ev["lane"], first_row).astype(str),
        "start_ns": np.minimum.reduceat(ev["start_ns"].to_numpy()[rows_sorted], firsts),
        "end_ns": np.maximum.reduceat(ev["end_ns"].to_numpy()[rows_sorted], firsts),
    }
    # per distinct label, not per row of the text column
    p2p = np.asarray(family_uniq == Family.SEND_RECV, dtype=bool)[c.label_code[head]]
    inst["p2p"] = p2p
    if span is not None:
        # point-to-point (diagnosis.md §6, §11): the instance is the call, and its wait is the
        # time before the peer started, so its span is the call's; a collective's wait and
        # transfer keep its activities' span (its durations across ranks)
        for col, op, arr in (("start_ns", np.minimum, span[0]), ("end_ns", np.maximum, span[1])):
            wide = op.reduceat(arr[rows_sorted], firsts)
            inst[col] = np.where(p2p, wide, inst[col])
    return inst


def _instance_pieces(
    acts: ActivityRows, rows: I64, local: I64, n_events: int, n_win: int
) -> tuple[GroupedIntervals, I64]:
    """Each instance's activities per window, unioned (ns): a grouped set whose group is
    ``local * n_win + window``, and per piece its local instance id. ``rows``/``local``: the
    event row of every communication activity and its instance."""
    comm = acts.kind == Kind.COMM
    local_of_row = np.full(n_events, -1, dtype=np.int64)
    local_of_row[rows] = local
    p_local = local_of_row[acts.event_row[comm]]
    p_win = acts.group[comm]
    ok = p_local >= 0
    # one group per (instance, window) pair that occurs: dense ids, so the grouped algebra never
    # allocates instances x windows slots
    pair_key, dense = np.unique(p_local[ok] * n_win + p_win[ok], return_inverse=True)
    dg, ds, de = iv.grouped_union(
        dense, acts.start_ns[comm][ok], acts.end_ns[comm][ok], pair_key.size
    )
    pieces = (pair_key[dg], ds, de)
    return pieces, pieces[0] // n_win


def _instance_windows(pieces: GroupedIntervals, piece_local: I64, k: int, n_win: int) -> I64:
    """Per instance (``k`` of them): its step, the window of its first piece (-1: outside every
    analysed step)."""
    window = np.full(k, -1, dtype=np.int64)
    if piece_local.size:
        firsts_p = np.unique(piece_local, return_index=True)[1]
        window[piece_local[firsts_p]] = pieces[0][firsts_p] % n_win
    return window


#: A lane whose compute in the window is under this share of its communication is the
#: communication library's own stream running helper kernels (DeepEP's casts), not a compute
#: stream (diagnosis.md §10).
SAME_STREAM_MIN_COMPUTE_SHARE = 0.1


def _same_stream(
    ev: pd.DataFrame,
    acts: ActivityRows,
    window: I64,
    first_row: I64,
    end_ns: I64,
    launch_start: I64,
) -> npt.NDArray[np.bool_]:
    """Per instance: was compute on its lane (its first activity's) actually delayed behind it
    in its window (diagnosis.md §10)? The first compute activity of that lane and window that
    starts at or after the instance's end was launched before that end (it sat queued behind the
    communication), and the lane is a compute stream: its compute in the window is at least
    :data:`SAME_STREAM_MIN_COMPUTE_SHARE` of its communication."""
    comp = acts.kind == Kind.COMPUTE
    if not comp.any():
        return np.zeros(window.size, dtype=bool)
    lane_codes = cat_codes(ev["lane"]).astype(np.int64)
    n_lanes = int(lane_codes.max()) + 2
    comm = acts.kind == Kind.COMM
    key = acts.group * n_lanes + lane_codes[acts.event_row] + 1
    q_key = window * n_lanes + lane_codes[first_row] + 1
    # time per (window, lane) key: compute and communication (activity sums; enough for a share)
    dur = acts.end_ns - acts.start_ns
    keys, inv = iv.unique_inverse(key)
    comp_t = np.bincount(inv, weights=np.where(comp, dur, 0), minlength=keys.size)
    comm_t = np.bincount(inv, weights=np.where(comm, dur, 0), minlength=keys.size)
    k = np.searchsorted(keys, q_key)
    kk = np.minimum(k, keys.size - 1)
    known = (k < keys.size) & (keys[kk] == q_key)
    compute_lane = known & (comp_t[kk] >= SAME_STREAM_MIN_COMPUTE_SHARE * comm_t[kk])
    ci = np.flatnonzero(comp)
    j = iv.next_at_or_after(q_key, end_ns, key[ci], acts.start_ns[ci])
    launch = launch_start[acts.event_row[ci[np.maximum(j, 0)]]]
    delayed = (j >= 0) & (launch != NO_LAUNCH) & (launch < end_ns)
    return np.asarray((window >= 0) & compute_lane & delayed, dtype=bool)


def known_ns(ns: I64) -> pd.arrays.IntegerArray:
    """ns with -1 (unknown) as <NA>: a nullable ``Int64`` column (docs/python-api.md)."""
    return pd.arrays.IntegerArray(ns.astype(np.int64), ns < 0)


def _queueing(
    ev: pd.DataFrame, c: _CommRows, head: I64, launch_row: I64, gpu: bool
) -> tuple[I64, I64]:
    """Per instance (``head``: its first activity's position in ``c``), in ns, -1 when unknown
    (no launch record, CPU units):

    ``queued_ns`` = start - max(end of its launch call, end of the previous comm on its lane);
    ``behind_comm_ns`` = min(start, end of that previous comm) - end of the launch call, >= 0
    (how long it waited behind earlier communication)."""
    k = head.size
    if not gpu:
        return np.full(k, -1, dtype=np.int64), np.full(k, -1, dtype=np.int64)
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    rows, stream, n = c.rows, c.stream, c.rows.size
    by_stream = np.lexsort((np.arange(n), start[rows], stream))
    prev_end = np.full(n, NO_LAUNCH, dtype=np.int64)
    same = stream[by_stream][1:] == stream[by_stream][:-1]
    prev_end[by_stream[1:][same]] = end[rows][by_stream[:-1][same]]
    first_row = rows[head]
    lrow = launch_row[first_row]
    launched = lrow >= 0
    lend = np.where(launched, end[np.maximum(lrow, 0)], NO_LAUNCH)
    ready = np.maximum(lend, prev_end[head])
    queued = np.where(launched, np.maximum(start[first_row] - ready, 0), -1).astype(np.int64)
    pe = prev_end[head]
    held = np.where(
        (pe == NO_LAUNCH) | ~launched,
        0,
        np.minimum(start[first_row], pe) - np.where(launched, lend, 0),
    )
    behind = np.where(launched, np.maximum(held, 0), -1).astype(np.int64)
    return queued, behind
