"""A chunk's structs -> compact numpy columns (:class:`Columns`), accumulated over the chunks of
a document; the collective metadata of the few rows that carry it (:class:`CollectiveColumns`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any

import msgspec
import numpy as np

from .._shape import input_dims_code, input_dims_codes, shape_codes
from ._categories import (
    FLOW_CATS,
    FLOW_TARGET_CODES,
    GPU_SIDE_CODES,
    IGNORED_CATS,
    KNOWN_LUT,
    MODEL_CODE,
    SRC_CATS,
    model_lut,
)
from ._decode import ANY_EVENT, LOOSE_EMPTY, NO_DIMS, Chunk, LooseArgs
from ._values import INT64_MAX, MAX_WORLD_SIZE, float_array, id_array, int_array, int_field, to_int


def _load_scanner() -> Any:
    """The C scanner (_kscan.c), built at install where a C compiler is available; else None."""
    try:
        from . import _kscan
    except ImportError:  # pragma: no cover - installs without a compiler
        return None
    return _kscan


_kscan = _load_scanner()

#: Which path reads a Kineto document's events: "c" (the columnar scanner, with the msgspec path
#: for what it leaves to it) or "msgspec" (no scanner built, or ``TRACEOVERLAP_KSCAN=0``).
SCANNER = (
    "c" if _kscan is not None and os.environ.get("TRACEOVERLAP_KSCAN", "1") != "0" else "msgspec"
)

_ONE_EVENT = msgspec.json.Decoder(ANY_EVENT)
_ONE_STR = msgspec.json.Decoder(str)
_DECODE_ERRORS = (
    msgspec.ValidationError,
    msgspec.DecodeError,
    UnicodeDecodeError,
    RecursionError,
)


class Codes(dict[str, int]):
    """str -> consecutive code, a new code for each new key (``codes[key]`` never fails)."""

    def __missing__(self, key: str) -> int:
        code = len(self)
        self[key] = code
        return code


_GET_CAT = attrgetter("cat")
_GET_NAME = attrgetter("name")
_GET_TS = attrgetter("ts")
_GET_DUR = attrgetter("dur")
_GET_PID = attrgetter("pid")
_GET_TID = attrgetter("tid")
_GET_ARGS = attrgetter("args")


def _concrete_of(ev: Any) -> Any:
    """An event's ``Concrete Inputs`` (None when it has no args)."""
    return getattr(ev.args, "concrete", None) if ev.args is not None else None


_GET_CORR = attrgetter("args.correlation")
_GET_DEVICE = attrgetter("args.device")
_GET_STREAM = attrgetter("args.stream")
_GET_DIMS = attrgetter("args.grid", "args.block")
_GET_INPUT_DIMS = attrgetter("args.input_dims")


class Columns:
    """Accumulates compact per-chunk column arrays of kept events.

    Each chunk's structs are dropped as soon as its columns are taken, so the only Python objects
    that accumulate are the distinct names and categories and the few flow / metadata /
    collective rows. Source categories and names are coded against tables shared by all chunks.
    """

    def __init__(self) -> None:
        self.src = Codes({c: i for i, c in enumerate(SRC_CATS)})
        self.names = Codes()
        self.cat: list[np.ndarray] = []  # source category codes (int16)
        self.name: list[np.ndarray] = []
        self.ts: list[np.ndarray] = []
        self.dur: list[np.ndarray] = []
        self.pid: list[np.ndarray] = []
        self.tid: list[np.ndarray] = []
        self.device: list[np.ndarray] = []
        self.stream: list[np.ndarray] = []
        self.corr: list[np.ndarray] = []
        # kernels' launch shapes: (rows, n x 6 grid and block dims), -1 where unreadable
        self.shape: list[tuple[np.ndarray, np.ndarray]] = []
        # CPU ops' Input Dims codes (:func:`.._shape.input_dims_codes`): (rows, codes) of the
        # ops that have them
        self.op_shape: list[tuple[np.ndarray, np.ndarray]] = []
        # Collective args of the few rows that have them, as arrays (no struct outlives its
        # chunk: kept ones would pin the allocator's pools and scatter later chunks' objects):
        # (rows, coll_name codes, bytes, process_group codes, seq, group_size).
        self.coll: list[tuple[np.ndarray, ...]] = []
        # Stream waits of the few ``sync`` rows that name what they wait on:
        # (rows, wait_on_stream, wait_on_cuda_event_record_corr_id).
        self.sync: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        # Peer and tag of the point-to-point ops that record them (:func:`p2p_inputs`):
        # (rows, peer rank in the op's group, tag).
        self.p2p: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.coll_names = Codes({"": 0})
        self.pg_names = Codes({"": 0})
        self.offset = 0
        # Flows: columns (is_finish, id, pid, tid, ts µs), one chunk per batch that has any.
        self.flows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.meta: list[tuple[str, Any, Any, Any]] = []  # (name, pid, tid, args.name)
        self.bad_args = 0
        self.too_deep = 0
        self._luts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def add_flows(self, chunk: Chunk) -> None:
        """Take the flow ends (``ac2g``) of one chunk: the second pass, for traces whose launches
        or device rows lack ``args.correlation``."""
        events = chunk.events
        if chunk.loose:
            _normalise_loose(events)
        flows = [e for e in events if e.cat in FLOW_CATS and (e.ph == "s" or e.ph == "f")]
        if flows:
            self.flows.append(
                (
                    np.array([e.ph == "f" for e in flows], dtype=bool),
                    id_array([e.id for e in flows]),
                    int_array([e.pid for e in flows], -1, chunk.loose),
                    int_array([e.tid for e in flows], -1, chunk.loose),
                    float_array([e.ts for e in flows]),
                )
            )

    def lacks_correlation(self) -> bool:
        """Whether a launch or device row has no ``args.correlation`` (flows may supply it)."""
        target = self._model_luts()[1]  # per source category: takes a correlation
        return any(
            bool((target[c.astype(np.intp)] & (k < 0)).any())
            for c, k in zip(self.cat, self.corr, strict=True)
        )

    def add(self, chunk: Chunk) -> None:
        """Take the columns of one chunk."""
        events = chunk.events
        self.bad_args += chunk.bad_args
        self.too_deep += chunk.too_deep
        if chunk.loose:
            _normalise_loose(events)
        self._add_metadata(events)
        kept = [e for e in events if e.ph == "X" and e.cat not in IGNORED_CATS]
        if not kept:
            return
        cat, name = self._add_rows(kept, chunk.loose)
        lut = KNOWN_LUT if len(self.src) == len(SRC_CATS) else model_lut(self.src)
        model = lut[cat]
        self._add_args(kept, model, chunk.loose)
        self._add_shapes(kept, model, chunk.loose)
        self._add_collectives(kept, model, name)
        self._add_p2p([(int(i), _concrete_of(kept[i])) for i in self._p2p_rows(name, model)], name)
        syncs = np.flatnonzero(model == MODEL_CODE["sync"])
        if len(syncs):
            self._add_syncs([(int(i), kept[i]) for i in syncs], model)
        self.offset += len(kept)

    def add_scanned(self, buf: Any) -> bool:
        """Take the columns of one JSON array of events (``buf``) with the C scanner; False,
        having taken nothing, when the msgspec path must read it (no scanner, or a chunk the
        scanner leaves to it: invalid JSON, invalid UTF-8, a value the typed decode refuses).

        The result is the one :meth:`add` gives for the same chunk decoded by
        :data:`._decode.EVENTS`: the scanner returns the common fields as columns and, for the
        events it does not read itself (metadata, odd types, collective args), their byte spans,
        which are decoded here by the same typed decoder and written the same way.
        """
        if SCANNER != "c" or _kscan is None:
            return False
        got = _kscan.scan(buf)
        if got is None:
            return False
        scanned = _Scanned(got)
        flagged: list[tuple[int, Any]] = []
        metas: list[Any] = []
        try:
            for row, start, end in scanned.python:
                event = _ONE_EVENT.decode(buf[start:end])
                if row < 0:
                    metas.append(event)
                else:
                    flagged.append((row, event))
            strings = _decode_strings(scanned.strings)
        except _DECODE_ERRORS:
            return False
        self._add_metadata(metas)
        if scanned.rows == 0:
            return True
        scanned.take_flagged(flagged, strings)
        if IGNORED_CATS.isdisjoint(strings):  # no ignored category in the chunk: every row
            kept = np.arange(scanned.rows, dtype=np.intp)
        else:
            ignored = np.fromiter(map(IGNORED_CATS.__contains__, strings), bool, len(strings))
            kept = np.flatnonzero(~ignored[scanned.cat.astype(np.intp)])  # intp: a fast gather
        if not len(kept):
            return True
        self._add_scanned_rows(scanned, strings, kept, flagged)
        return True

    def _add_scanned_rows(
        self, sc: _Scanned, strings: list[str], kept: np.ndarray, flagged: list[tuple[int, Any]]
    ) -> None:
        """:meth:`add`'s columns of the kept rows of a scanned chunk (``flagged``: the rows the
        scanner left to the typed decode, with their events)."""
        n = len(kept)
        whole = n == sc.rows

        def pick(a: np.ndarray) -> np.ndarray:
            return a if whole else a[kept]

        # rows of the flagged events among the kept ones, in row order, with their events
        fl: list[tuple[int, Any]] = []
        if flagged:
            at = np.full(sc.rows, -1, dtype=np.int64)
            at[kept] = np.arange(n)
            fl = [(int(at[row]), ev) for row, ev in flagged if at[row] >= 0]
        cat = _first_seen_codes(pick(sc.cat), strings, self.src, np.int16)
        name = _first_seen_codes(pick(sc.name), strings, self.names, np.int32)
        self.ts.append(pick(sc.ts))
        self.dur.append(pick(sc.dur))
        self.pid.append(_with_flagged(pick(sc.pid), fl, _GET_PID))
        self.tid.append(_with_flagged(pick(sc.tid), fl, _GET_TID))
        self.cat.append(cat)
        self.name.append(name)
        lut, target_lut, gpu_lut = self._model_luts()
        at_cat = cat.astype(np.intp)  # numpy gathers by intp indices several times faster
        model = lut[at_cat]
        # as _add_args: correlation of launches and device rows; device / stream of device
        # rows, in two groups (with and without a correlation), each decided as one column
        target = target_lut[at_cat]  # per source category, then per row
        gpu = gpu_lut[at_cat]
        corr = np.where(target, pick(sc.corr), -1)
        device = np.where(gpu, pick(sc.device), -1)
        stream = np.where(gpu, pick(sc.stream), -1)
        if fl:
            corr = _with_flagged(corr, [f for f in fl if target[f[0]]], _GET_CORR)
            for group in (target & gpu, ~target & gpu):
                sub = [f for f in fl if group[f[0]]]
                device = _with_flagged(device, sub, _GET_DEVICE)
                stream = _with_flagged(stream, sub, _GET_STREAM)
        self.corr.append(corr)
        self.device.append(device)
        self.stream.append(stream)
        self._add_scanned_shapes(sc, None if whole else kept, model, fl)
        rpc = self.names.get("record_param_comms", -1)
        kernel = model == MODEL_CODE["kernel"]
        coll = [
            (r, ev.args)
            for r, ev in fl
            if (kernel[r] or name[r] == rpc) and ev.args.coll_name is not None
        ]
        if coll:
            rows = np.array([r for r, _ in coll], dtype=np.int64)
            values = collective_values([a for _, a in coll], self.coll_names, self.pg_names)
            self.coll.append((rows + self.offset, *values))
        self._add_syncs(fl, model)
        self._add_scanned_input_bytes(sc, strings, pick, fl)
        self._add_scanned_p2p(sc, pick, name, model, fl)
        self.offset += n

    def _model_luts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per source category code: its model category code, whether its rows take a
        correlation (:data:`FLOW_TARGET_CODES`), whether they are device-side
        (:data:`GPU_SIDE_CODES`); made again only when a chunk brings a new category."""
        if self._luts is None or len(self._luts[0]) != len(self.src):
            lut = KNOWN_LUT if len(self.src) == len(SRC_CATS) else model_lut(self.src)
            self._luts = (lut, np.isin(lut, FLOW_TARGET_CODES), np.isin(lut, GPU_SIDE_CODES))
        return self._luts

    def _p2p_rows(self, name: np.ndarray, model: np.ndarray) -> np.ndarray:
        """The chunk rows of :data:`P2P_OPS` ``cpu_op`` rows (``name``: global name codes)."""
        codes = [self.names[n] for n in P2P_OPS if n in self.names]
        if not codes:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(np.isin(name, codes) & (model == MODEL_CODE["cpu_op"]))

    def _add_p2p(self, rows: list[tuple[int, Any]], name: np.ndarray) -> None:
        """Peer and tag of point-to-point op rows ``(chunk row, Concrete Inputs)`` (raw text,
        or a value decoded leniently): -1 where unreadable; rows with neither are not kept."""
        if not rows:
            return
        names = {self.names[n]: n for n in P2P_OPS if n in self.names}
        got = [p2p_inputs(names[int(name[r])], _concrete_text(c)) for r, c in rows]
        peer = np.array([g[0] for g in got], dtype=np.int32)
        tag = np.array([g[1] for g in got], dtype=np.int64)
        ok = (peer >= 0) | (tag >= 0)
        if ok.any():
            at = np.array([r for r, _ in rows], dtype=np.int64)[ok] + self.offset
            self.p2p.append((at, peer[ok], tag[ok]))

    def _add_scanned_p2p(
        self,
        sc: _Scanned,
        pick: Callable[[np.ndarray], np.ndarray],
        name: np.ndarray,
        model: np.ndarray,
        fl: list[tuple[int, Any]],
    ) -> None:
        """:meth:`_add_p2p` of a scanned chunk: the ``Concrete Inputs`` texts the scanner
        interned, or, for the rows decoded in Python, their events' own."""
        rows = self._p2p_rows(name, model)
        if not rows.size:
            return
        flagged = {r: ev for r, ev in fl}
        ids = pick(sc.concrete)[rows].tolist()
        self._add_p2p(
            [
                (r, _concrete_of(flagged[r]) if r in flagged else (sc.texts[t] if t >= 0 else b""))
                for r, t in zip(rows.tolist(), ids, strict=True)
            ],
            name,
        )

    def _add_scanned_input_bytes(
        self,
        sc: _Scanned,
        strings: list[str],
        pick: Callable[[np.ndarray], np.ndarray],
        fl: list[tuple[int, Any]],
    ) -> None:
        """The bytes of the kept ``gloo:*`` rows from their ``Input Dims`` and ``Input type``
        (:func:`input_bytes`; diagnosis.md §13), where no collective args gave them."""
        if COMM_RANGE_PREFIX not in "".join(strings):  # no gloo:* name (most chunks)
            return
        gloo = np.fromiter(map(_sized_by_inputs, strings), bool, len(strings))
        if not gloo.any():
            return
        local = pick(sc.name)
        rows = np.flatnonzero(gloo[local])
        if not rows.size:
            return
        dims, types = pick(sc.input_dims)[rows], pick(sc.input_type)[rows]
        texts = sc.texts
        nbytes = np.array(
            [
                input_bytes(texts[d], texts[t]) if d >= 0 and t >= 0 else -1
                for d, t in zip(dims.tolist(), types.tolist(), strict=True)
            ],
            dtype=np.int64,
        )
        flagged = {r: ev for r, ev in fl}
        for i, r in enumerate(rows.tolist()):
            if r in flagged:  # decoded in Python: its own args
                a = flagged[r].args
                nbytes[i] = input_bytes(bytes(a.input_dims), bytes(a.input_type))
        self._add_input_bytes(rows, nbytes)

    def _add_input_bytes(self, rows: np.ndarray, nbytes: np.ndarray) -> None:
        """Give chunk rows ``rows`` their message bytes (-1: unknown), as collective columns."""
        ok = nbytes >= 0
        if not ok.any():
            return
        rows, nbytes = rows[ok].astype(np.int64), nbytes[ok]
        k = rows.size
        self.coll.append(
            (
                rows + self.offset,
                np.zeros(k, dtype=np.int32),
                nbytes,
                np.zeros(k, dtype=np.int32),
                np.full(k, -1, dtype=np.int64),
                np.full(k, -1, dtype=np.int64),
            )
        )

    def _add_scanned_shapes(
        self,
        sc: _Scanned,
        kept: np.ndarray | None,
        model: np.ndarray,
        fl: list[tuple[int, Any]],
    ) -> None:
        """As :meth:`_add_shapes`, from the scanned columns (``kept``: the scanned rows of the
        kept ones, None when all are kept)."""

        def scanned_rows(rows: np.ndarray) -> np.ndarray:
            return rows if kept is None else kept[rows]

        kernels = np.flatnonzero(model == MODEL_CODE["kernel"])
        if len(kernels):
            dims = sc.dims[scanned_rows(kernels)]
            sub = [(r, ev) for r, ev in fl if model[r] == MODEL_CODE["kernel"]]
            if sub:
                where = np.searchsorted(kernels, [r for r, _ in sub])
                dims[where] = _dims([_GET_DIMS(ev) for _, ev in sub], False)
            self.shape.append((kernels + self.offset, dims))
        ops = np.flatnonzero(model == MODEL_CODE["cpu_op"])
        if len(ops):
            local = sc.input_dims[scanned_rows(ops)].astype(np.intp)  # intp: a fast gather
            per = _used_input_dims_codes(sc.texts, local)
            codes = np.where(local >= 0, per[np.maximum(local, 0)] if len(per) else -1, -1)
            sub = [(r, ev) for r, ev in fl if model[r] == MODEL_CODE["cpu_op"]]
            if sub:
                where = np.searchsorted(ops, [r for r, _ in sub])
                codes[where] = _input_dims([_GET_INPUT_DIMS(ev) for _, ev in sub], False)
            known = codes >= 0
            if known.any():
                self.op_shape.append((ops[known] + self.offset, codes[known].astype(np.int32)))

    def _add_metadata(self, events: list[Any]) -> None:
        for e in [e for e in events if e.ph == "M"]:
            if e.name in ("thread_name", "process_name") and e.args is not None:
                self.meta.append((e.name, e.pid, e.tid, e.args.name))

    def _add_rows(self, kept: list[Any], loose: bool) -> tuple[np.ndarray, np.ndarray]:
        """Category, name, ts, dur, pid and tid of the kept events; returns the category and
        name codes."""
        n = len(kept)
        cat = np.fromiter(map(self.src.__getitem__, map(_GET_CAT, kept)), np.int16, n)
        names = list(map(_GET_NAME, kept))
        if loose:
            names = _str_list(names)
        name = np.fromiter(map(self.names.__getitem__, names), np.int32, n)
        del names
        if loose:
            self.ts.append(float_array(list(map(_GET_TS, kept))))
            self.dur.append(float_array(list(map(_GET_DUR, kept))))
        else:
            self.ts.append(np.fromiter(map(_GET_TS, kept), np.float64, n))
            self.dur.append(np.fromiter(map(_GET_DUR, kept), np.float64, n))
        self.pid.append(_int_column(kept, _GET_PID, n, loose))
        self.tid.append(_int_column(kept, _GET_TID, n, loose))
        self.cat.append(cat)
        self.name.append(name)
        return cat, name

    def _add_args(self, kept: list[Any], model: np.ndarray, loose: bool) -> None:
        """``args.correlation`` of launches and device rows, ``args.device`` / ``args.stream`` of
        device rows; -1 elsewhere (rows of unknown categories, dropped later, are skipped)."""
        n = len(kept)
        corr = np.full(n, -1, dtype=np.int64)
        device = np.full(n, -1, dtype=np.int64)
        stream = np.full(n, -1, dtype=np.int64)
        sel = np.flatnonzero(np.isin(model, FLOW_TARGET_CODES))
        if len(sel):
            picked = _pick(kept, sel)
            corr[sel] = _int_column(picked, _GET_CORR, len(sel), loose)
            gpu = np.isin(model[sel], GPU_SIDE_CODES)
            if gpu.any():
                g = _pick(picked, np.flatnonzero(gpu))
                device[sel[gpu]] = _int_column(g, _GET_DEVICE, len(g), loose)
                stream[sel[gpu]] = _int_column(g, _GET_STREAM, len(g), loose)
        rest = np.flatnonzero(~np.isin(model, FLOW_TARGET_CODES) & np.isin(model, GPU_SIDE_CODES))
        if len(rest):  # gpu_user_annotation: on device lanes, no correlation needed
            r = _pick(kept, rest)
            device[rest] = _int_column(r, _GET_DEVICE, len(r), loose)
            stream[rest] = _int_column(r, _GET_STREAM, len(r), loose)
        self.corr.append(corr)
        self.device.append(device)
        self.stream.append(stream)

    def _add_shapes(self, kept: list[Any], model: np.ndarray, loose: bool) -> None:
        """The launch shape (``args.grid`` and ``args.block``) of the chunk's kernels, kept as
        (rows, n x 6 dims) and coded once for all chunks by :func:`shape_column`."""
        sel = np.flatnonzero(model == MODEL_CODE["kernel"])
        if len(sel):
            dims = _dims(list(map(_GET_DIMS, _pick(kept, sel))), loose)
            self.shape.append((sel + self.offset, dims))
        ops = np.flatnonzero(model == MODEL_CODE["cpu_op"])
        if len(ops):
            codes = _input_dims(list(map(_GET_INPUT_DIMS, _pick(kept, ops))), loose)
            known = codes >= 0
            if known.any():
                self.op_shape.append((ops[known] + self.offset, codes[known]))

    def _add_syncs(self, rows: list[tuple[int, Any]], model: np.ndarray) -> None:
        """The stream waits among ``rows`` (row, event) of the ``sync`` category that name the
        stream or the event record they wait on (Kineto ``cuda_sync`` rows written with
        ``enable_cuda_sync_events``). The C scanner leaves such events to the typed decode."""
        sync = MODEL_CODE["sync"]
        got = [
            (r, ev.args)
            for r, ev in rows
            if model[r] == sync and ev.args is not None and _names_a_wait(ev.args)
        ]
        if got:
            self.sync.append(
                (
                    np.array([r for r, _ in got], dtype=np.int64) + self.offset,
                    int_array([a.wait_stream for _, a in got], -1, True),
                    int_array([a.wait_corr for _, a in got], -1, True),
                )
            )

    def _add_collectives(self, kept: list[Any], model: np.ndarray, name: np.ndarray) -> None:
        """The collective args of the kept events that have them. PyTorch writes them on
        ``record_param_comms`` ops, and Kineto copies them onto the kernels (and MTIA ``hccl::``
        events) those ops launch: only those rows are looked at."""
        rpc = self.names.get("record_param_comms", -1)
        gloo = [
            i for i, e in enumerate(kept) if isinstance(e.name, str) and _sized_by_inputs(e.name)
        ]
        if gloo:
            a = [kept[i].args for i in gloo]
            self._add_input_bytes(
                np.array(gloo, dtype=np.int64),
                np.array([_input_bytes_of(x.input_dims, x.input_type) for x in a], dtype=np.int64),
            )
        cand = np.flatnonzero((model == MODEL_CODE["kernel"]) | (name == rpc))
        if not len(cand):
            return
        cargs = list(map(_GET_ARGS, _pick(kept, cand)))
        has = [i for i, a in enumerate(cargs) if a.coll_name is not None]
        if has:
            args = [cargs[i] for i in has]
            values = collective_values(args, self.coll_names, self.pg_names)
            self.coll.append((cand[has] + self.offset, *values))


class _Scanned:
    """The C scanner's result for one chunk, as numpy views of its buffers (see _kscan.c)."""

    def __init__(self, got: tuple[Any, ...]) -> None:
        (rows, cat, name, ts, dur, pid, tid, corr, device, stream, dims, idims) = got[:12]
        self.rows: int = rows
        self.strings: list[bytes] = got[12]
        self.texts: list[bytes] = got[13]
        self.python: list[list[int]] = np.frombuffer(got[14], np.int64).reshape(-1, 3).tolist()
        self.cat = np.frombuffer(cat, np.int32)
        self.name = np.frombuffer(name, np.int32)
        self.ts = np.frombuffer(ts, np.float64)
        self.dur = np.frombuffer(dur, np.float64)
        self.pid = np.frombuffer(pid, np.int64)
        self.tid = np.frombuffer(tid, np.int64)
        self.corr = np.frombuffer(corr, np.int64)
        self.device = np.frombuffer(device, np.int64)
        self.stream = np.frombuffer(stream, np.int64)
        self.dims = np.frombuffer(dims, np.int64).reshape(-1, 6)
        self.input_dims = np.frombuffer(idims, np.int32)
        # ``Input type`` ids (a scanner built before it returned fifteen items: none)
        self.input_type = (
            np.frombuffer(got[15], np.int32) if len(got) > 15 else np.full(rows, -1, np.int32)
        )
        # ``Concrete Inputs`` ids (a scanner built before it returned sixteen items: none)
        self.concrete = (
            np.frombuffer(got[16], np.int32) if len(got) > 16 else np.full(rows, -1, np.int32)
        )

    def take_flagged(self, flagged: list[tuple[int, Any]], strings: list[str]) -> None:
        """Overwrite the rows of the events decoded in Python with what the typed decode read:
        category, name (new strings get new local ids), ts, dur and ``Input Dims``. pid, tid,
        correlation, device, stream and dims are taken from the events by the caller, which
        decides their columns as :meth:`Columns.add` does."""
        if not flagged:
            return
        self.cat, self.name = self.cat.copy(), self.name.copy()
        self.ts, self.dur = self.ts.copy(), self.dur.copy()
        index = {s: i for i, s in enumerate(strings)}

        def local(s: str) -> int:
            if s not in index:
                index[s] = len(strings)
                strings.append(s)
            return index[s]

        for row, ev in flagged:
            self.cat[row] = local(ev.cat)
            self.name[row] = local(ev.name)
            self.ts[row] = ev.ts
            self.dur[row] = ev.dur


def _raw_string(raw: bytes) -> str:
    """A JSON string's contents as the scanner found them (UTF-8 checked), decoded."""
    return _ONE_STR.decode(b'"' + raw + b'"') if b"\\" in raw else raw.decode("utf-8")


#: :func:`_raw_string` of the raw texts seen so far: a chunk's strings (names, categories) are
#: mostly the previous chunks' (and, in a run, the other ranks'), decoded once; cleared when
#: full, so it stays small whatever the trace holds (real traces: a few hundred strings).
_STRING_CACHE: dict[bytes, str] = {}
_STRING_CACHE_MAX = 1 << 12


def _decode_strings(raws: list[bytes]) -> list[str]:
    """``[_raw_string(raw) for raw in raws]``, each distinct text decoded once (a text that does
    not decode raises as :func:`_raw_string` does, and is not kept)."""
    cache = _STRING_CACHE
    out: list[Any] = list(map(cache.get, raws))
    if None in out:
        if len(cache) + len(raws) > _STRING_CACHE_MAX:
            cache.clear()
        for i, raw in enumerate(raws):
            if out[i] is None:
                out[i] = cache[raw] = _raw_string(raw)
    return out


def _first_seen_codes(
    local: np.ndarray, strings: list[str], codes: Codes, dtype: Any
) -> np.ndarray:
    """Global codes of a column of local string ids, new codes given in order of first
    appearance (as coding the rows one by one gives them).

    Only the strings not coded yet need that order (after the first chunks, usually none): the
    others are looked up, and the first rows of the new ones found among their rows alone."""
    m = len(strings)
    local = local.astype(np.intp)  # numpy counts and gathers by intp indices several times faster
    present = np.flatnonzero(np.bincount(local, minlength=m))  # O(n): no sort of the rows
    lut = np.zeros(m, dtype=dtype)
    ids = present.tolist()
    got = list(map(codes.get, map(strings.__getitem__, ids)))
    new = [lid for lid, code in zip(ids, got, strict=True) if code is None] if None in got else []
    if new:
        got = [-1 if code is None else code for code in got]
    lut[present] = got
    if new:
        is_new = np.zeros(m, dtype=bool)
        is_new[new] = True
        ids = local[is_new[local]]  # the new strings' rows, in row order
        _, first = np.unique(ids, return_index=True)
        for lid in ids[np.sort(first)].tolist():
            lut[lid] = codes[strings[lid]]
    out: np.ndarray = lut[local]
    return out


def _used_input_dims_codes(texts: list[bytes], local: np.ndarray) -> np.ndarray:
    """Per text id of a scanned chunk: the :func:`.._shape.input_dims_code` of the texts that
    ``local`` (the ops' ``Input Dims`` ids, -1: none) uses, -1 for the others (the chunk's
    ``Input type`` and ``Concrete Inputs`` texts, interned beside them)."""
    per = np.full(len(texts), -1, dtype=np.int32)
    if texts:
        used = np.flatnonzero(np.bincount(local[local >= 0], minlength=len(texts))).tolist()
        per[used] = [input_dims_code(texts[i]) for i in used]
    return per


def _with_flagged(
    column: np.ndarray, fl: list[tuple[int, Any]], get: attrgetter[Any]
) -> np.ndarray:
    """``column`` with the rows of ``fl`` (row, event) set to ``get(event)``, the values decided
    together as :func:`_int_column` decides a column: plain ints as they are, and if any is not
    one, all of them through :func:`.._values.int_array` (the other rows are plain ints, which
    both ways keep)."""
    if not fl:
        return column
    out = column.copy()
    out[[r for r, _ in fl]] = int_array([get(ev) for _, ev in fl], -1, False)
    return out


def _names_a_wait(args: Any) -> bool:
    """Whether ``args`` (typed or lenient) names a stream or an event record waited on."""
    ws, wc = args.wait_stream, args.wait_corr
    return (isinstance(ws, int) and ws >= 0) or (isinstance(wc, int) and wc >= 0)


def _normalise_loose(events: list[Any]) -> None:
    """Leniently decoded events may hold any JSON value anywhere: make ph / cat / args usable."""
    for e in events:
        if type(e.ph) is not str:
            e.ph = str(e.ph)
        if type(e.cat) is not str:
            e.cat = str(e.cat)
        if not isinstance(e.args, LooseArgs):
            e.args = LOOSE_EMPTY


def _int_column(items: list[Any], get: attrgetter[Any], n: int, loose: bool) -> np.ndarray:
    """An int64 column of one attribute; -1 (or the digits of a string) for odd values."""
    if not loose:
        try:
            return np.fromiter(map(get, items), np.int64, n)
        except (TypeError, ValueError, OverflowError):
            pass
    return int_array(list(map(get, items)), -1, loose)


def _input_dims(values: list[Any], loose: bool) -> np.ndarray:
    """Per CPU op: the code of its ``Input Dims`` (:func:`.._shape.input_dims_codes`), -1
    where it has none. Typed decode: raw JSON texts (empty when absent); lenient: values."""
    n = len(values)
    if loose:
        texts = [b"" if v is None else msgspec.json.encode(v) for v in values]
    else:
        if not n or not np.fromiter(map(len, values), np.int64, n).any():
            return np.full(n, -1, dtype=np.int32)
        texts = list(map(bytes, values))
    return input_dims_codes(texts)


def _dims(values: list[tuple[Any, Any]], loose: bool) -> np.ndarray:
    """n x 6 int64 from (``args.grid``, ``args.block``) pairs: three ints each after a typed
    decode; after a lenient one, anything else (a list of another length, strings, floats, a
    value beyond int64) is unknown (-1)."""
    n = len(values)
    if not loose:
        try:
            flat = chain.from_iterable(chain.from_iterable(values))
            return np.fromiter(flat, np.int64, 6 * n).reshape(n, 6)
        except (TypeError, ValueError, OverflowError):
            pass
    six = [(*_three_ints(g), *_three_ints(b)) for g, b in values]
    return np.array(six, dtype=np.int64).reshape(n, 6)


def _three_ints(v: Any) -> tuple[int, int, int]:
    if (
        isinstance(v, (list, tuple))
        and len(v) == 3
        and all(type(x) is int and -INT64_MAX <= x <= INT64_MAX for x in v)
    ):
        return (v[0], v[1], v[2])
    return NO_DIMS


def shape_column(n: int, cols: Columns) -> np.ndarray:
    """The ``shape`` column (int32) of all ``n`` rows: the kernels' codes (:mod:`.._shape`),
    CPU ops' Input Dims codes, -1 elsewhere; ``cols`` lets go of the dims."""
    shape = np.full(n, -1, dtype=np.int32)
    if cols.shape:
        rows = np.concatenate([r for r, _ in cols.shape])
        shape[rows] = shape_codes(np.concatenate([d for _, d in cols.shape]))
    for rows, codes in cols.op_shape:
        shape[rows] = codes
    cols.shape = []
    cols.op_shape = []
    return shape


def _str_list(values: list[Any]) -> list[str]:
    return [v if type(v) is str else ("" if v is None else str(v)) for v in values]


def _pick(items: list[Any], idx: np.ndarray) -> list[Any]:
    """``[items[i] for i in idx]``, at C speed."""
    if len(idx) == 0:
        return []
    if len(idx) == 1:
        return [items[int(idx[0])]]
    return list(itemgetter(*idx.tolist())(items))


#: Bytes per element of the ``dtype`` names PyTorch writes in collective args (c10 ScalarType).
DTYPE_BYTES: dict[str, int] = {
    "Float": 4,
    "Half": 2,
    "BFloat16": 2,
    "Double": 8,
    "Long": 8,
    "Int": 4,
    "Short": 2,
    "Byte": 1,
    "Char": 1,
    "Bool": 1,
    "ComplexHalf": 4,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
    "QInt8": 1,
    "QUInt8": 1,
    "QInt32": 4,
}


_ANY_JSON = msgspec.json.Decoder()


def _sized_by_inputs(name: str) -> bool:
    """Whether a row's inputs are its message (NCCL's size convention): a ``gloo:*`` event, but
    not an all-gather / gather, whose input is one rank's shard of the message."""
    return name.startswith(COMM_RANGE_PREFIX) and "gather" not in name


#: The host ranges whose ``Input Dims`` / ``Input type`` give their message size: gloo's own
#: events (``gloo:all_reduce``...), which carry the tensors they move.
COMM_RANGE_PREFIX = "gloo:"

#: Bytes per element of the ``Input type`` names the profiler writes (C++ type names).
INPUT_TYPE_BYTES: dict[str, int] = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "long": 8,
    "int": 4,
    "short int": 2,
    "short": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
}


@functools.lru_cache(maxsize=4096)
def input_bytes(dims: bytes, types: bytes) -> int:
    """A communication op's message size from its ``Input Dims`` and ``Input type`` texts (raw
    JSON): the sum over its tensor inputs of elements x element size; -1 when a tensor's type or
    shape is not known (a ``TensorList``, a type outside :data:`INPUT_TYPE_BYTES`) or there is
    none (diagnosis.md §13)."""
    try:
        d, t = _ANY_JSON.decode(dims), _ANY_JSON.decode(types)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return -1
    if not isinstance(d, list) or not isinstance(t, list) or len(d) != len(t):
        return -1
    total, seen = 0, False
    for shape, name in zip(d, t, strict=True):
        size = INPUT_TYPE_BYTES.get(name) if isinstance(name, str) else None
        if size is None:
            if isinstance(shape, list) and shape and name not in ("", "Scalar"):
                return -1  # a tensor of an unknown type (or a list of tensors)
            continue
        if not isinstance(shape, list) or not all(type(x) is int and x >= 0 for x in shape):
            return -1
        n = 1
        for x in shape:
            n *= x
        total += n * size
        seen = True
    return total if seen and total <= INT64_MAX else -1


def _input_bytes_of(dims: Any, types: Any) -> int:
    """:func:`input_bytes` of a decoded event's args (raw texts, or values after a lenient
    decode)."""
    if dims is None or types is None:
        return -1
    if isinstance(dims, msgspec.Raw) and isinstance(types, msgspec.Raw):
        if not len(dims) or not len(types):
            return -1
        return input_bytes(bytes(dims), bytes(types))
    try:
        return input_bytes(msgspec.json.encode(dims), msgspec.json.encode(types))
    except (TypeError, msgspec.EncodeError):
        return -1


#: The point-to-point ops whose ``Concrete Inputs`` (``record_shapes=True``) name their peer and
#: tag: per op name, the positions of the peer and of the tag in its schema
#: (``c10d::send(Tensor[] tensors, ProcessGroup pg, int dst, int tag)``,
#: ``c10d::recv_(Tensor[] tensors, ProcessGroup pg, int src, int tag)``,
#: ``c10d::recv_any_source_(Tensor[] tensors, ProcessGroup pg, int tag)``: no peer, -1). The peer
#: is a rank *within the op's process group*.
P2P_OPS: dict[str, tuple[int, int]] = {
    "c10d::send": (2, 3),
    "c10d::recv_": (2, 3),
    "c10d::recv_any_source_": (-1, 2),
}


def _concrete_text(value: Any) -> bytes:
    """A ``Concrete Inputs`` value as raw JSON text (b"" when absent or not encodable)."""
    if value is None:
        return b""
    if isinstance(value, (bytes, msgspec.Raw)):
        return bytes(value)
    try:
        return msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError):
        return b""


@functools.lru_cache(maxsize=4096)
def p2p_inputs(name: str, text: bytes) -> tuple[int, int]:
    """(peer, tag) of a point-to-point op (:data:`P2P_OPS`) from its ``Concrete Inputs`` text
    (raw JSON: a list of strings, ``["", "", "2", "0"]``): the peer's rank in the op's group and
    the tag, each -1 where absent or not a non-negative integer."""
    where = P2P_OPS.get(name)
    if where is None or not text:
        return -1, -1
    try:
        values = _ANY_JSON.decode(text)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return -1, -1
    if not isinstance(values, list):
        return -1, -1

    def at(i: int) -> int:
        if i < 0 or i >= len(values):
            return -1
        v = values[i]
        if isinstance(v, str) and v.isascii() and v.isdigit():
            n = int(v)
        elif type(v) is int:
            n = v
        else:
            return -1
        return n if 0 <= n <= INT64_MAX else -1

    peer, tag = at(where[0]), at(where[1])
    return (peer if peer <= MAX_WORLD_SIZE else -1), tag


def p2p_columns(n: int, cols: Columns) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``n``: the peer (int32) and tag (int64) its point-to-point op recorded, -1
    elsewhere; ``cols`` lets go of them."""
    peer = np.full(n, -1, dtype=np.int32)
    tag = np.full(n, -1, dtype=np.int64)
    for rows, p, t in cols.p2p:
        peer[rows] = p
        tag[rows] = t
    cols.p2p = []
    return peer, tag


def collective_values(
    args: list[Any], coll_names: Codes, pg_names: Codes
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(coll_name codes, bytes, process_group codes, seq, group_size) of rows whose args name a
    collective. Values that do not fit their column (a group size beyond
    :data:`MAX_WORLD_SIZE`, a byte count beyond int64) are left unknown (-1)."""
    codes: list[int] = []
    pgs: list[int] = []
    nbytes: list[int] = []
    seq: list[int] = []
    group: list[int] = []
    for a in args:
        codes.append(coll_names[str(a.coll_name)])
        pgs.append(pg_names[str(a.pg_name)] if a.pg_name is not None else 0)
        nel = max(to_int(a.in_nelems, -1), to_int(a.out_nelems, -1))
        size = DTYPE_BYTES.get(str(a.dtype), -1)
        total = nel * size if nel >= 0 and size > 0 else -1
        nbytes.append(total if total <= INT64_MAX else -1)
        s = a.seq if a.seq is not None else a.seq_lower
        seq.append(to_int(s, -1) if s is not None else -1)
        gs = int_field(a.group_size, 1, MAX_WORLD_SIZE) if a.group_size is not None else None
        group.append(-1 if gs is None else gs)
    return (
        np.array(codes, dtype=np.int32),
        np.array(nbytes, dtype=np.int64),
        np.array(pgs, dtype=np.int32),
        np.array(seq, dtype=np.int64),
        np.array(group, dtype=np.int64),
    )


@dataclass(frozen=True)
class CollectiveColumns:
    """Collective metadata, one entry per row: ``name`` / ``process_group`` are codes into
    ``names`` / ``groups`` (0: none), ``nbytes``, ``seq`` and ``group_size`` are -1 when unknown."""

    name: np.ndarray
    names: list[str]
    nbytes: np.ndarray
    process_group: np.ndarray
    groups: list[str]
    seq: np.ndarray
    group_size: np.ndarray

    def take(self, keep: np.ndarray) -> CollectiveColumns:
        return replace(
            self,
            name=self.name[keep],
            nbytes=self.nbytes[keep],
            process_group=self.process_group[keep],
            seq=self.seq[keep],
            group_size=self.group_size[keep],
        )

    def copy_rows(self, dst: np.ndarray, src: np.ndarray) -> None:
        """Give rows ``dst`` the metadata of rows ``src`` (in place)."""
        for column in (self.name, self.nbytes, self.process_group, self.seq, self.group_size):
            column[dst] = column[src]


def collective_columns(n: int, cols: Columns) -> CollectiveColumns:
    """The collective columns for all ``n`` rows, from the per-chunk values of the few rows that
    have any (see :func:`collective_values`); ``cols`` lets go of them."""
    coll = CollectiveColumns(
        name=np.zeros(n, dtype=np.int32),
        names=list(cols.coll_names),
        nbytes=np.full(n, -1, dtype=np.int64),
        process_group=np.zeros(n, dtype=np.int32),
        groups=list(cols.pg_names),
        seq=np.full(n, -1, dtype=np.int64),
        group_size=np.full(n, -1, dtype=np.int64),
    )
    for rows, codes, nbytes, pgs, seq, group in cols.coll:
        coll.name[rows] = codes
        coll.nbytes[rows] = nbytes
        coll.process_group[rows] = pgs
        coll.seq[rows] = seq
        coll.group_size[rows] = group
    cols.coll = []
    return coll
