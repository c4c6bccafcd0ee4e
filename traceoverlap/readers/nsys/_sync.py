"""CUDA synchronization records (``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``) as ``sync`` rows, and
what a stream wait waits on, from the event records (``CUPTI_ACTIVITY_KIND_CUDA_EVENT``).

Each synchronization record becomes a ``sync`` row as Kineto writes a ``cuda_sync`` row (named as
Kineto names them: ``Event Sync``, ``Stream Wait Event``, ``Stream Sync``, ``Context Sync``,
``Unknown Sync``) on its stream (``stream -1`` for the event and context syncs, which name none),
with the ``correlationId`` of its API call. They are never activity: the analysis does not use
them, the what-if graph reads the stream waits among them (:mod:`traceoverlap.rank.graph`).

A stream wait (syncType 2, ``cudaStreamWaitEvent``) names the waiting stream and the event
(``eventId``, and ``eventSyncId`` on recent exports), not the stream that recorded it. That comes
from the event records, which nsys writes only when asked (``nsys profile
--cuda-event-trace=true``): the record of the same event (process, context, ``eventId``; and the
same ``eventSyncId`` where both sides have one: that names the record instance) whose call came
last before the wait's call (correlation ids grow with every API call of a process). It gives
the event columns Kineto's ``wait_on_stream`` / ``wait_on_cuda_event_record_corr_id`` give:
``wait_stream`` (the record's ``streamId``) and ``wait_corr`` (its ``correlationId``). A wait
without such a record keeps -1: its edge is then guessed, as on Kineto's bare sync rows.

Old exports: a missing table means no rows (no note); a table lacking the columns it needs is
skipped with a note; ``syncType`` absent or 0 falls back to ``deprecatedSyncType`` (what reports
of older Nsight Systems versions fill). The device is not the records' ``deviceId`` (0 on both
processes of the FSDP export, the second of which ran on device 1) but the process's only GPU, or
for a process driving several, the GPU its stream's activity ran on (else ``deviceId``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from ._activity import Activity
from ._rows import CAT_CODE, Rows, pid_of, select

I64 = npt.NDArray[np.int64]

SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
CUDA_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"

#: ENUM_CUPTI_SYNC_TYPE ids (CUpti_ActivitySynchronizationType) and the names Kineto gives them.
EVENT_SYNC, STREAM_WAIT, STREAM_SYNC, CONTEXT_SYNC = 1, 2, 3, 4
SYNC_NAMES = {
    EVENT_SYNC: "Event Sync",
    STREAM_WAIT: "Stream Wait Event",
    STREAM_SYNC: "Stream Sync",
    CONTEXT_SYNC: "Context Sync",
}
_UNKNOWN = "Unknown Sync"
#: streamId / eventId of "none" (CUPTI's uint32 -1)
_NONE_U32 = 0xFFFFFFFF


def _u32_or_none(v: I64) -> I64:
    """-1 where a CUPTI id reads as "none" (uint32 -1 or negative)."""
    return np.where((v < 0) | (v == _NONE_U32), -1, v).astype(np.int64)


class Waits:
    """The stream waits resolved to their event record, per (pid, wait call correlation)."""

    def __init__(self, pid: I64, corr: I64, stream: I64, record_corr: I64) -> None:
        self.pid, self.corr, self.stream, self.record_corr = pid, corr, stream, record_corr

    def __len__(self) -> int:
        return int(self.pid.size)

    def columns(
        self, pid: I64, corr: I64, is_sync: npt.NDArray[np.bool_]
    ) -> tuple[I64, I64] | None:
        """``wait_stream`` / ``wait_corr`` of every event row (rows of category sync matched by
        pid and correlation), or None when no row has them."""
        if len(self) == 0:
            return None
        key = (self.pid << 32) | self.corr
        order = np.argsort(key, kind="stable")
        key = key[order]
        rows = np.flatnonzero(is_sync & (corr >= 0) & (corr <= _NONE_U32))
        want = (pid[rows] << 32) | corr[rows]
        i = np.minimum(np.searchsorted(key, want), key.size - 1)
        hit = key[i] == want
        if not hit.any():
            return None
        n = pid.size
        ws = np.full(n, -1, dtype=np.int64)
        wc = np.full(n, -1, dtype=np.int64)
        ws[rows[hit]] = self.stream[order][i[hit]]
        wc[rows[hit]] = self.record_corr[order][i[hit]]
        return ws, wc


def wait_columns(
    waits: Waits | None, pid: I64, corr: I64, category: pd.Categorical
) -> dict[str, I64]:
    """The event table's ``wait_stream`` / ``wait_corr`` columns ({} when no row has them: the
    table then shares one read-only -1)."""
    if waits is None or len(waits) == 0 or "sync" not in category.categories:
        return {}
    is_sync = np.asarray(category.codes == category.categories.get_loc("sync"), dtype=bool)
    got = waits.columns(pid, corr, is_sync)
    return {} if got is None else {"wait_stream": got[0], "wait_corr": got[1]}


def _no_waits() -> Waits:
    z = np.zeros(0, dtype=np.int64)
    return Waits(z, z, z, z)


def _last_before(
    w_keys: list[I64], w_corr: I64, r_keys: list[I64], r_corr: I64
) -> npt.NDArray[np.intp]:
    """Per wait (keys ``w_keys``, call ``w_corr``): the position of the last record (rows in
    ``r_corr`` order, ties in their order) with the same keys whose call came strictly before,
    -1 when none: ``pd.merge_asof(direction="backward", allow_exact_matches=False)`` by the
    keys. One sort of waits and records together, by keys, then call, a wait before the records
    of its own call, records in their order: a wait's record is the last record before it, when
    that has its keys."""
    nw, nr = w_corr.size, r_corr.size
    keys = [np.concatenate([w, r]) for w, r in zip(w_keys, r_keys, strict=True)]
    is_rec = np.r_[np.zeros(nw, dtype=np.int8), np.ones(nr, dtype=np.int8)]
    order = np.lexsort(
        (np.arange(nw + nr), is_rec, np.concatenate([w_corr, r_corr]), *reversed(keys))
    )
    rec_at = np.where(is_rec[order] == 1, np.arange(nw + nr), -1)
    last = np.maximum.accumulate(rec_at)  # per sorted row: the last record at or before it
    at = np.empty(nw, dtype=np.intp)
    at[order[order < nw]] = np.flatnonzero(order < nw)  # each wait's place in the sort
    cand = last[at]
    ok = cand >= 0
    row = order[np.where(ok, cand, 0)]
    for k in keys:
        ok &= k[row] == k[:nw]
    return np.where(ok, row - nw, -1)


def latest_records(wait: tuple[I64, I64, I64, I64, I64], rec: tuple[I64, ...]) -> Waits:
    """The stream waits ``wait`` (pid, context, event, eventSyncId, call correlation) resolved
    to their event record among ``rec`` (pid, context, event, eventSyncId, call correlation,
    stream): the same record instance (eventSyncId on both sides), else, where either side has
    none, the latest record of the event (process, context) before the wait. Waits in call
    order; only those resolved."""
    pid, ctx, event, sid, corr = wait
    r_pid, r_ctx, r_event, r_sid, r_corr, r_stream = rec
    keep = np.flatnonzero((r_event >= 0) & (r_corr >= 0) & (r_stream >= 0))
    keep = keep[np.argsort(r_corr[keep], kind="stable")]
    r_pid, r_ctx, r_event, r_sid = r_pid[keep], r_ctx[keep], r_event[keep], r_sid[keep]
    r_corr, r_stream = r_corr[keep], r_stream[keep]
    rows = np.flatnonzero((event >= 0) & (corr >= 0))
    rows = rows[np.argsort(corr[rows], kind="stable")]
    pid, ctx, event, sid, corr = pid[rows], ctx[rows], event[rows], sid[rows], corr[rows]
    if not (ctx >= 0).any() or not (r_ctx >= 0).any():  # a table without contextId
        ctx, r_ctx = np.full(ctx.size, -1, dtype=np.int64), np.full(r_ctx.size, -1, dtype=np.int64)
    found = np.full(rows.size, -1, dtype=np.intp)
    with_sid = np.flatnonzero(r_sid >= 0)
    exact = (sid >= 0) & (with_sid.size > 0)
    for sel, recs, by_sid in ((exact, with_sid, True), (~exact, np.arange(r_corr.size), False)):
        w = np.flatnonzero(sel)
        if w.size == 0 or recs.size == 0:
            continue
        w_keys = [pid[w], ctx[w], event[w]] + ([sid[w]] if by_sid else [])
        r_keys = [r_pid[recs], r_ctx[recs], r_event[recs]] + ([r_sid[recs]] if by_sid else [])
        at = _last_before(w_keys, corr[w], r_keys, r_corr[recs])
        ok = at >= 0
        found[w[ok]] = recs[at[ok]]
    hit = np.flatnonzero(found >= 0)
    return Waits(pid[hit], corr[hit], r_stream[found[hit]], r_corr[found[hit]])


class SyncReader(Activity):
    def read_syncs(self, gpu: Rows, groups: list[tuple[int, int]]) -> tuple[Rows, Waits]:
        """The synchronization records of the GPU ``groups`` as ``sync`` rows, and the stream
        waits among them resolved to the stream and record call they wait on. ``gpu``: the GPU
        activity rows (which device each (process, stream) ran on)."""
        t = self.table(SYNC)
        if t is None:
            return Rows.empty(), _no_waits()
        have = set(self.columns(t))
        type_col = [c for c in ("syncType", "deprecatedSyncType") if c in have]
        if not self.usable(t, ("start", "end", "streamId")) or not type_col:
            if not type_col:
                self.notes.append(f"Table {t} lacks column syncType and was not read.")
            return Rows.empty(), _no_waits()
        wanted = ["start", "end", "deviceId", "contextId", "streamId", "correlationId"]
        wanted += ["globalPid", "syncType", "deprecatedSyncType", "eventId", "eventSyncId"]
        cols = self.scan(t, wanted)
        if cols.n == 0:
            return Rows.empty(), _no_waits()
        ok = self.valid_times(cols, t, "synchronization records")
        start, end = cols.ints["start"], cols.ints["end"]
        ok &= (start >= 0) & (end >= start)
        if "globalPid" in cols.ints:
            gpid = self.int_column(cols, t, "globalPid", 0)
        else:
            gpid = np.full(cols.n, self.sole_host_global_pid(t), dtype=np.int64)
        pid = pid_of(gpid)
        stream = _u32_or_none(self.int_column(cols, t, "streamId", -1))
        kind = self.int_column(cols, t, "syncType", 0)
        old = self.int_column(cols, t, "deprecatedSyncType", 0)
        kind = np.where(kind > 0, kind, old)
        device = self._sync_devices(
            pid, stream, self.int_column(cols, t, "deviceId", -1), gpu, groups
        )
        ok &= device >= 0  # a process outside the analysed GPUs
        keep = None if ok.all() else np.flatnonzero(ok)
        start, end, pid = select(start, keep), select(end, keep), select(pid, keep)
        stream, kind, device = select(stream, keep), select(kind, keep), select(device, keep)
        corr = select(self.int_column(cols, t, "correlationId", -1), keep)
        ctx = select(self.int_column(cols, t, "contextId", -1), keep)
        event = select(_u32_or_none(self.int_column(cols, t, "eventId", -1)), keep)
        sync_id = select(self.int_column(cols, t, "eventSyncId", -1), keep)
        del cols
        n = start.size
        waits = kind == STREAM_WAIT
        resolved = self._resolve_waits(
            pid[waits], corr[waits], ctx[waits], event[waits], sync_id[waits]
        )
        names_of = np.array([*SYNC_NAMES.values(), _UNKNOWN], dtype=object)
        name_code = np.searchsorted(np.array(list(SYNC_NAMES)), kind)
        name_code = np.where(np.isin(kind, list(SYNC_NAMES)), name_code, len(SYNC_NAMES))
        lane_codes, streams = pd.factorize(stream)
        lane_names = np.empty(len(streams), dtype=object)
        lane_names[:] = [f"stream {int(s)}" for s in streams]
        rows = Rows(
            start=start,
            end=end,
            pid=pid,
            device=device.astype(np.int32),
            stream=stream,
            tid=np.full(n, -1, dtype=np.int64),
            correlation=corr,
            category=np.full(n, CAT_CODE["sync"], dtype=np.int32),
            name=self.names.add_codes(name_code.astype(np.int32), names_of),
            lane=self.lanes.add_codes(lane_codes.astype(np.int32), lane_names),
            thread_name=self.thread_names.add_const("", n),
            shape=np.broadcast_to(np.int32(-1), (n,)),
        )
        return rows, resolved

    def _sync_devices(
        self, pid: I64, stream: I64, device_id: I64, gpu: Rows, groups: list[tuple[int, int]]
    ) -> I64:
        """The device of each record: its process's GPU when it has one group (no look at the
        GPU rows), else the device its (process, stream) ran activity on, else its
        ``deviceId`` when that is one of the process's groups; -1 (not kept) otherwise."""
        out = np.full(pid.size, -1, dtype=np.int64)
        devices: dict[int, list[int]] = {}
        for p, d in groups:
            devices.setdefault(p, []).append(d)
        for p in np.unique(pid).tolist():
            at = pid == p
            ds = devices.get(int(p), [])
            if len(ds) == 1:
                out[at] = ds[0]
                continue
            got = np.where(np.isin(device_id[at], ds), device_id[at], -1)
            mine = np.flatnonzero(gpu.pid == p)  # a process driving several GPUs
            if ds and mine.size:
                streams, first = np.unique(gpu.stream[mine], return_index=True)
                i = np.minimum(np.searchsorted(streams, stream[at]), streams.size - 1)
                hit = (streams[i] == stream[at]) & (stream[at] >= 0)
                got[hit] = gpu.device[mine[first[i[hit]]]]
            out[at] = got
        return out

    def _resolve_waits(self, pid: I64, corr: I64, ctx: I64, event: I64, sync_id: I64) -> Waits:
        """Per stream wait: the stream and the correlation id of the record of its event whose
        call came last before the wait's (:mod:`._sync`). Waits left unresolved (no event
        records: what nsys writes by default) keep -1; the what-if counts them in a note. A
        table of event records lacking the columns needed is noted here."""
        if pid.size == 0:
            return _no_waits()
        t = self.table(CUDA_EVENT)
        if t is None or not self.usable(t, ("streamId", "correlationId", "eventId")):
            return _no_waits()
        cols = self.scan(
            t, ["contextId", "streamId", "correlationId", "globalPid", "eventId", "eventSyncId"]
        )
        if cols.n == 0:
            return _no_waits()
        if "globalPid" in cols.ints:
            r_pid = pid_of(self.int_column(cols, t, "globalPid", 0))
        else:
            r_pid = pid_of(np.full(cols.n, self.sole_host_global_pid(t), dtype=np.int64))
        r_ctx = self.int_column(cols, t, "contextId", -1)
        r_event = _u32_or_none(self.int_column(cols, t, "eventId", -1))
        r_sid = self.int_column(cols, t, "eventSyncId", -1)
        r_corr = self.int_column(cols, t, "correlationId", -1)
        r_stream = _u32_or_none(self.int_column(cols, t, "streamId", -1))
        del cols
        return latest_records(
            (pid, ctx, event, sync_id, corr), (r_pid, r_ctx, r_event, r_sid, r_corr, r_stream)
        )
