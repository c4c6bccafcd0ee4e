"""The columns read -> the :class:`~traceoverlap.core.model.Timeline` of one rank.

Times become exact integer ns; a row whose time is unusable, or that is device work this tool
cannot place, is dropped and counted in a note; GPU rows are put on the rank's host process (so
that (pid, correlation) joins kernels to launches), lanes are named, and the collective metadata
is completed from the launching ops.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd

from ...core.errors import TraceFormatError
from ...core.model import CATEGORIES, Timeline, make_events
from ...core.vocab import STEP_RE
from .._shape import inherit_nested
from ._categories import (
    ACCELERATOR_CATS,
    AS_WHAT,
    CATEGORY_MAP,
    GPU_ACTIVITY_CODES,
    GPU_SIDE_CODES,
    LAUNCH_CODES,
    MODEL_CODE,
    UNMAPPED_DEVICE_CATS,
    codes_in,
    model_lut,
)
from ._columns import (
    Codes,
    CollectiveColumns,
    Columns,
    collective_columns,
    p2p_columns,
    shape_column,
)
from ._joins import collective_args_from_launching_op, fill_correlation_from_flows
from ._metadata import Meta, base_ns, trace_info
from ._values import INT32_MAX, INT64_MAX, checked_ns, to_int

# Above this, a ts without baseTimeNanoseconds can only be absolute epoch microseconds
# (1e15 us = 2001-09-09); relative traces start near 0 or at a monotonic clock (days, not decades).
_EPOCH_US_THRESHOLD = 1e15
_THREAD_LABEL = re.compile(r"^thread\s+\d+\s+\((.*)\)\s*$")


@dataclass(frozen=True)
class _Rows:
    """The rows read (``X`` events of the categories not ignored), one entry per row, as written:
    GPU-side rows have the device as ``pid`` and the stream as ``tid``."""

    src: np.ndarray  # Kineto category: code into Columns.src
    cat: np.ndarray  # model category: code into CATEGORIES, -1 for a category with no mapping
    name: np.ndarray  # code into Columns.names
    ts: np.ndarray  # float µs, NaN when missing or unreadable
    dur: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    device: np.ndarray  # args.device, -1: none
    stream: np.ndarray  # args.stream, -1: none
    corr: np.ndarray  # args.correlation, -1: none
    shape: np.ndarray  # kernels' launch shape code (int32), -1: none
    coll: CollectiveColumns
    # point-to-point ops' peer rank in their group (int32) and their tag (int64), -1: none;
    # None when no row has either (most traces: no two column-sized arrays of -1)
    peer: np.ndarray | None
    tag: np.ndarray | None
    #: the stream waits of the few sync rows that have them: (rows, wait_stream, wait_corr)
    sync: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @classmethod
    def take_columns(cls, cols: Columns) -> _Rows:
        """The per-chunk columns concatenated (``cols`` lets go of them)."""
        src = np.concatenate(cols.cat)
        peer, tag = p2p_columns(len(src), cols) if cols.p2p else (None, None)
        rows = cls(
            src=src,
            cat=model_lut(cols.src)[src],
            name=np.concatenate(cols.name),
            ts=np.concatenate(cols.ts),
            dur=np.concatenate(cols.dur),
            pid=np.concatenate(cols.pid),
            tid=np.concatenate(cols.tid),
            device=np.concatenate(cols.device),
            stream=np.concatenate(cols.stream),
            corr=np.concatenate(cols.corr),
            shape=shape_column(len(src), cols),
            coll=collective_columns(len(src), cols),
            peer=peer,
            tag=tag,
            sync=tuple(np.concatenate(c) for c in zip(*cols.sync, strict=True))  # type: ignore[arg-type]
            if cols.sync
            else None,
        )
        cols.sync = []
        cols.cat = cols.ts = cols.dur = cols.pid = cols.tid = []
        cols.device = cols.stream = cols.corr = cols.name = []
        return rows

    def take(self, keep: np.ndarray) -> _Rows:
        """The rows where ``keep`` is True."""
        arrays: dict[str, Any] = {
            f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[keep]
            for f in fields(self)
            if f.name not in ("coll", "sync")
        }
        sync = None
        if self.sync is not None:
            rows, ws, wc = self.sync
            at = np.cumsum(keep) - 1
            k = keep[rows]
            sync = (at[rows[k]], ws[k], wc[k])
        return _Rows(**arrays, coll=self.coll.take(keep), sync=sync)


def build_timeline(p: str, head: Meta, cols: Columns) -> Timeline:
    """The event table of one rank from the columns read: exact integer ns times, rows that cannot
    be used dropped (and counted in a note), GPU rows placed on the rank's host process, lanes,
    and the collective metadata completed."""
    if cols.offset == 0:
        raise TraceFormatError(
            p,
            "no events this tool reads (no kernel, memcpy, memset, CUDA runtime, cpu_op or "
            "user_annotation events)",
            "profile with activities=[CPU, CUDA] (CPU alone for gloo runs) and record at least one step",
        )
    notes: list[str] = []
    base, base_ok = base_ns(head, notes)
    rows = _Rows.take_columns(cols)
    start, end, timed = _times_ns(rows, base, notes)
    keep = timed & (rows.cat >= 0) & ~_unanalysed_device_rows(rows, cols.src, notes)
    _refuse_untimed_device_side(p, rows, timed)
    _note_accelerators(rows, cols.src, keep, notes)
    _note_decoding(cols, notes)
    if not keep.all():
        rows, start, end = rows.take(keep), start[keep], end[keep]
    if len(start) == 0:
        raise TraceFormatError(
            p,
            "no usable events: every event this tool reads was dropped (see why above)"
            if not notes
            else "no usable events: " + "; ".join(notes),
            "check how the trace was written; re-collect it",
        )
    del keep, timed
    clock = _clock(head, base_ok, rows.ts)

    # Old traces: correlation from ac2g / async_cpu_to_gpu flows, matched on the raw (pid, tid).
    flow_note = fill_correlation_from_flows(
        cols.flows, rows.cat, rows.corr, rows.pid, rows.tid, start, end, base
    )
    if flow_note:
        notes.append(flow_note)
    _note_uncorrelated(rows, notes)
    gpu_side = codes_in(rows.cat, GPU_SIDE_CODES)
    host_pid = _host_pid(rows, gpu_side)
    rows = _on_host_process(rows, gpu_side, host_pid, notes)
    thread_names = _thread_names(cols.meta)
    lane, thread_name = _lanes(gpu_side, rows.pid, rows.tid, rows.device, rows.stream, thread_names)
    gloo_threads = tuple(
        sorted(t for (pid, t), n in thread_names.items() if pid == host_pid and n == GLOO_THREAD)
    )
    filled = collective_args_from_launching_op(
        rows.cat, rows.pid, rows.tid, start, end, rows.corr, host_pid, rows.coll
    )
    if filled:
        notes.append(
            f"collective metadata of {filled} kernels taken from the record_param_comms op "
            "that launched them"
        )
    names = list(cols.names)
    _steps_as_annotations(rows.cat, rows.name, names)

    info = trace_info(p, head, rows.cat, rows.device, host_pid, clock, notes, gloo_threads)
    columns: dict[str, Any] = {
        # one value: a stride-0 view, not a column of copies (as the nsys reader does)
        "rank": np.broadcast_to(np.int64(info.rank), (len(start),)),
        "pid": rows.pid,
        "device": rows.device,
        "stream": rows.stream,
        "tid": rows.tid,
        "lane": lane,
        "thread_name": thread_name,
        "category": _from_codes(rows.cat.astype(np.int32), categories=list(CATEGORIES)),
        "name": _from_codes(rows.name, categories=names),
        "start_ns": start,
        "end_ns": end,
        "correlation": rows.corr,
        "coll_name": _from_codes(rows.coll.name, categories=rows.coll.names),
        "coll_bytes": rows.coll.nbytes,
        "process_group": _from_codes(rows.coll.process_group, categories=rows.coll.groups),
        "seq": rows.coll.seq,
        "group_size": rows.coll.group_size,
        "shape": _op_shapes(rows, lane, start, end),
    }
    if (
        rows.peer is not None
        and rows.tag is not None
        and ((rows.peer >= 0).any() or (rows.tag >= 0).any())
    ):
        columns["peer_rank"] = rows.peer
        columns["p2p_tag"] = rows.tag
    if rows.sync is not None:
        at, ws, wc = rows.sync
        columns["wait_stream"] = np.full(len(start), -1, dtype=np.int64)
        columns["wait_corr"] = np.full(len(start), -1, dtype=np.int64)
        columns["wait_stream"][at] = ws
        columns["wait_corr"][at] = wc
    return Timeline(make_events(len(start), columns), (info,))


def _op_shapes(rows: _Rows, lane: pd.Categorical, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The shape column: CPU ops without ``Input Dims`` of their own take their first nested
    op's on their thread (``lane``: one code per host (pid, tid), :func:`_lanes`;
    :func:`.._shape.inherit_nested`); nothing to do in traces without shapes."""
    is_op = rows.cat == MODEL_CODE["cpu_op"]
    if not (rows.shape[is_op] >= 0).any():
        return rows.shape
    return inherit_nested(rows.shape, is_op, np.asarray(lane.codes, dtype=np.int64), start, end)


def _times_ns(
    rows: _Rows, base: int, notes: list[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start_ns, end_ns, ok): exact int64 ns, ``ok`` False where ``ts`` / ``dur`` is unusable
    (the row is then dropped, never given a made-up time); a negative duration becomes 0."""
    start, ok = checked_ns(rows.ts, base)
    neg = rows.dur < 0  # NaN compares False
    dur_ns, ok_dur = checked_ns(np.where(neg, 0.0, rows.dur) if neg.any() else rows.dur, 0)
    if ok.all() and ok_dur.all() and int(dur_ns.max()) <= INT64_MAX - max(int(start.max()), 0):
        # every row fits (the row-by-row test below would pass them all); dur_ns becomes end
        end = np.add(start, dur_ns, out=dur_ns)
    else:
        ok &= ok_dur & (dur_ns <= INT64_MAX - np.maximum(start, 0))
        end = start + np.where(ok, dur_ns, 0)
    known = rows.cat >= 0
    bad_time = ~ok & known
    if bad_time.any():
        by_cat = Counter(CATEGORIES[c] for c in rows.cat[bad_time].tolist())
        notes.append(
            f"dropped {int(bad_time.sum())} events with unusable ts/dur (null, NaN, "
            f"non-numeric or out of range): {_count_note(by_cat)}"
        )
    neg &= ok & known
    if neg.any():
        notes.append(f"{int(neg.sum())} events with a negative duration were given duration 0.")
    return start, end, ok


def _refuse_untimed_device_side(p: str, rows: _Rows, timed: np.ndarray) -> None:
    """Refuse a trace whose GPU activity (kernels, copies, memsets) was all dropped for an
    unusable ``ts`` / ``dur``: read without it, a GPU run would be told its device side was not
    captured (or be read as a CPU run), when it was captured and is damaged."""
    gpu = codes_in(rows.cat, GPU_ACTIVITY_CODES)
    if not gpu.any() or (gpu & timed).any():
        return
    by_cat = Counter(CATEGORIES[c] for c in rows.cat[gpu].tolist())
    raise TraceFormatError(
        p,
        f"all {int(gpu.sum()):,} GPU activities ({_count_note(by_cat)}) have an unusable ts/dur "
        "(null, NaN, non-numeric or out of range) and were dropped: nothing on the device can "
        "be measured",
        "the trace's device events are damaged; re-collect or re-export the trace",
    )


def _note_uncorrelated(rows: _Rows, notes: list[str]) -> None:
    """Count the kernels with no usable correlation id (missing, null, not an integer, and none
    from a flow): nothing ties them to the launch that places them in a step. Every kernel is
    launched, so this is damage; copies and memsets may be queued by the device itself (no
    launch, no id) and are placed by their start time instead."""
    none = (rows.cat == MODEL_CODE["kernel"]) & (rows.corr < 0)
    if none.any():
        notes.append(
            f"{int(none.sum())} kernels have no usable correlation id (args.correlation "
            "missing, null or not an integer, and no flow event): nothing ties them to the "
            "launch that places them in a step"
        )


def _unanalysed_device_rows(rows: _Rows, src_codes: Codes, notes: list[str]) -> np.ndarray:
    """Device rows this tool cannot place (counted in a note): categories with no mapping that lie
    on a device's pid (or are known to be device-side), and ``hpu_op`` rows on a device's pid."""
    hpu = rows.src == src_codes["hpu_op"]
    known = rows.cat >= 0
    if known.all() and not hpu.any():
        return np.zeros(len(rows.cat), dtype=bool)
    host_cats = codes_in(rows.cat, [MODEL_CODE["cpu_op"], MODEL_CODE["annotation"]])
    launch = codes_in(rows.cat, LAUNCH_CODES)
    host_pids = pd.unique(rows.pid[host_cats | (launch & ~hpu)])
    if len(host_pids):
        off_host = ~np.isin(rows.pid, host_pids)
    else:
        off_host = np.ones(len(rows.pid), dtype=bool)
    device_cats = [src_codes.get(c, -1) for c in UNMAPPED_DEVICE_CATS]
    unmapped = ~known & (off_host | codes_in(rows.src, device_cats))
    not_analysed: np.ndarray = unmapped | (hpu & off_host & bool(len(host_pids)))
    if not_analysed.any():
        src_names = list(src_codes)
        by_src = Counter(src_names[c] for c in rows.src[not_analysed].tolist())
        notes.append(
            f"{int(not_analysed.sum())} device events in categories {_count_note(by_src)} were "
            "not analysed (Kineto does not define them as kernels, copies or launches)"
        )
    return not_analysed


def _note_accelerators(rows: _Rows, src_codes: Codes, keep: np.ndarray, notes: list[str]) -> None:
    """Say how the kept events of accelerators other than CUDA / ROCm were read."""
    accel = keep & codes_in(rows.src, [src_codes[c] for c in ACCELERATOR_CATS])
    if accel.any():
        src_names = list(src_codes)
        by_src = Counter(src_names[c] for c in rows.src[accel].tolist())
        parts = [
            f"{k} ({v} {AS_WHAT.get(CATEGORY_MAP[k], 'as ' + CATEGORY_MAP[k])})"
            for k, v in sorted(by_src.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
        notes.append("device work read from Kineto categories " + ", ".join(parts))


def _note_decoding(cols: Columns, notes: list[str]) -> None:
    """Say what the decoder had to give up: unreadable args, events nested too deeply."""
    if cols.bad_args:
        notes.append(
            f"{cols.bad_args} events had args that could not be read (not a JSON object, or a "
            "number beyond float range); their args were ignored"
        )
    if cols.too_deep:
        notes.append(
            f"dropped {cols.too_deep} events nested too deeply for the JSON decoder (over ~1000 "
            "levels)"
        )


def _clock(head: Meta, base_ok: bool, ts: np.ndarray) -> str:
    """``"unix"`` when the times are unix-epoch ns, else ``"relative"``."""
    if base_ok:
        return "unix"
    if head.baseTimeNanoseconds is None or head.baseTimeNanoseconds == 0:
        # No base: absolute epoch-µs timestamps (older traces) are unix time by themselves.
        return "unix" if float(np.median(ts)) > _EPOCH_US_THRESHOLD else "relative"
    return "relative"  # a base was given but is unusable (said in a note)


def _host_pid(rows: _Rows, gpu_side: np.ndarray) -> int:
    """The rank's host process: the pid of most launches, else of most host rows, else 0."""
    pid = rows.pid
    host_pid = _mode(pid[codes_in(rows.cat, LAUNCH_CODES) & (pid >= 0)])
    if host_pid is None:
        host_pid = _mode(pid[~gpu_side & (pid >= 0)])
    return 0 if host_pid is None else host_pid


def _on_host_process(rows: _Rows, gpu_side: np.ndarray, host_pid: int, notes: list[str]) -> _Rows:
    """GPU-side rows moved onto the process that launched them, so that (pid, correlation) joins
    kernels to launches: Kineto gives them the device as pid and the stream as tid, used when
    ``args`` has no device / stream. Host rows get device and stream -1."""
    # in place: the columns are this table's own (a fresh copy per column costs page faults)
    host = ~gpu_side
    device, stream = rows.device, rows.stream
    np.copyto(device, rows.pid, where=gpu_side & (device < 0))
    np.copyto(stream, rows.tid, where=gpu_side & (stream < 0))
    bad_dev = gpu_side & (device > INT32_MAX)
    if bad_dev.any():
        notes.append(
            f"{int(bad_dev.sum())} device events have a device id beyond int32; given device -1"
        )
        device[bad_dev] = -1
    rows.pid[gpu_side] = host_pid
    rows.tid[gpu_side] = -1
    device[host] = -1
    stream[host] = -1
    return rows


def _steps_as_annotations(cat: np.ndarray, name: np.ndarray, names: list[str]) -> None:
    """Older traces record ``ProfilerStep#N`` as an operator; it is the profiler's step range:
    recategorised as an annotation (in place)."""
    step_codes = [i for i, v in enumerate(names) if STEP_RE.match(v)]
    if step_codes:
        is_step = codes_in(name, step_codes) & (cat == MODEL_CODE["cpu_op"])
        cat[is_step] = MODEL_CODE["annotation"]


def _lanes(
    gpu_side: np.ndarray,
    pid: np.ndarray,
    tid: np.ndarray,
    device: np.ndarray,
    stream: np.ndarray,
    tnames: dict[tuple[int, int], str],
) -> tuple[pd.Categorical, pd.Categorical]:
    """Lane and thread-name categoricals, built per distinct (pid, tid) / (device, stream).

    Rows come in runs on one lane (a thread's ops, a stream's kernels: ~1 000 runs in 430 000
    rows): the pairs are found among the first rows of the runs (a pair's first appearance is
    always one, so the order of appearance is kept) and each run's codes repeated, in the codes'
    final width, with no per-row copy of the four columns."""
    n = len(pid)
    several_devices = len(pd.unique(device[gpu_side])) > 1
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = gpu_side[1:] != gpu_side[:-1]
        for col in (pid, tid, device, stream):
            new[1:] |= col[1:] != col[:-1]
    heads = np.flatnonzero(new)
    lengths = np.diff(np.append(heads, n))
    on_gpu = gpu_side[heads]
    run_lane = np.zeros(heads.size, dtype=np.int64)
    run_tname = np.zeros(heads.size, dtype=np.int64)
    lane_labels: list[str] = []
    tname_labels: list[str] = [""]
    host = heads[~on_gpu]
    if host.size:
        uniq, inv = _factorize_rows(pid[host], tid[host])
        tn_idx = []
        for kp, kt in uniq:
            tn = tnames.get((kp, kt), "")
            lane_labels.append(f"thread {kt}" + (f" ({tn})" if tn else ""))
            if tn not in tname_labels:
                tname_labels.append(tn)
            tn_idx.append(tname_labels.index(tn))
        run_lane[~on_gpu] = inv
        run_tname[~on_gpu] = np.array(tn_idx, dtype=np.int64)[inv]
    gpu = heads[on_gpu]
    if gpu.size:
        uniq, inv = _factorize_rows(device[gpu], stream[gpu])
        first = len(lane_labels)
        for kd, ks in uniq:
            lane_labels.append((f"gpu {kd} " if several_devices else "") + f"stream {ks}")
        run_lane[on_gpu] = inv + first
    # Two host processes may share a tid label: merge identical labels into one category.
    label_codes, label_uniques = pd.factorize(np.array(lane_labels, dtype=object))
    lane_codes = _narrow(label_codes[run_lane], len(label_uniques))
    tname_codes = _narrow(run_tname, len(tname_labels))
    lane = _from_codes(np.repeat(lane_codes, lengths), categories=label_uniques)
    tname = _from_codes(np.repeat(tname_codes, lengths), categories=tname_labels)
    return lane, tname


def _narrow(codes: np.ndarray, n_categories: int) -> np.ndarray:
    """Codes in the width pandas gives a categorical of ``n_categories`` (it would convert
    wider ones, another column-sized copy)."""
    for dtype in (np.int8, np.int16, np.int32):
        if n_categories < np.iinfo(dtype).max:
            return codes.astype(dtype)
    return codes.astype(np.int64)


def _factorize_rows(a: np.ndarray, b: np.ndarray) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Distinct (a, b) pairs (in order of appearance) and each row's pair number (hash-based:
    much faster than ``np.unique(axis=0)``, which sorts)."""
    ca, ua = pd.factorize(a)
    cb, ub = pd.factorize(b)
    nb = max(len(ub), 1)
    key = ca.astype(np.int64) * nb + cb
    if len(ua) * nb <= 1 << 20:  # few distinct values (the usual case): a dense table
        first = np.full(len(ua) * nb, len(key), dtype=np.int64)
        np.minimum.at(first, key, np.arange(len(key), dtype=np.int64))
        upair = np.flatnonzero(first < len(key))
        upair = upair[np.argsort(first[upair], kind="stable")]  # order of appearance
        lut = np.empty(len(ua) * nb, dtype=np.int64)
        lut[upair] = np.arange(len(upair), dtype=np.int64)
        codes = lut[key]
    else:
        codes, upair = pd.factorize(key)
    pairs = [(int(ua[k // nb]), int(ub[k % nb])) for k in upair.tolist()]
    return pairs, codes.astype(np.int64)


#: The name of gloo's worker threads (each process group runs its own).
GLOO_THREAD = "pt_gloo_runloop"


def _thread_names(meta: list[tuple[str, Any, Any, Any]]) -> dict[tuple[int, int], str]:
    """(pid, tid) -> thread name from ``thread_name`` metadata.

    Kineto may record several names for one thread (the name it had when first seen and after a
    rename), in either order: a gloo worker appears as both ``python`` and ``pt_gloo_runloop``,
    an autograd worker as ``pt_main_thread`` then ``pt_autograd_0``. Linux threads inherit their
    creator's name, so the meaningful one is the name that differs from the main thread's
    (tid == pid); the last such wins.
    """
    seen: dict[tuple[int, int], list[str]] = {}
    for kind, mpid, mtid, mname in meta:
        if kind == "thread_name" and isinstance(mname, str):
            seen.setdefault((to_int(mpid, -1), to_int(mtid, -1)), []).append(_thread_name(mname))
    out: dict[tuple[int, int], str] = {}
    for (mpid, mtid), names in seen.items():
        inherited = set(seen.get((mpid, mpid), ())) if mtid != mpid else set()
        own = [n for n in names if n not in inherited]
        out[(mpid, mtid)] = own[-1] if own else names[-1]
    return out


def _thread_name(label: str) -> str:
    """Kineto labels threads ``thread 1234 (pt_main_thread)``; the name is the part in brackets."""
    m = _THREAD_LABEL.match(label)
    return m.group(1) if m else label.strip()


def _from_codes(codes: np.ndarray, categories: Any) -> pd.Categorical:
    # Same category dtype as make_events (pandas infers it), so timelines concatenate.
    # validate=False: the codes are made here, every one within the categories (checking
    # costs a pass over the column)
    return pd.Categorical.from_codes(codes, categories=pd.Index(list(categories)), validate=False)


def _mode(values: np.ndarray) -> int | None:
    """The most common value (the smallest of a tie), None when there is none."""
    if len(values) == 0:
        return None
    uniq, counts = np.unique(values, return_counts=True)
    return int(uniq[np.argmax(counts)])


def _count_note(counts: Counter[str]) -> str:
    """``name (count)``, the most frequent first."""
    return ", ".join(
        f"{k} ({v})" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )
