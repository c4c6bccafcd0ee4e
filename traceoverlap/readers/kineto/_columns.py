"""A chunk's structs -> compact numpy columns (:class:`Columns`), accumulated over the chunks of
a document; the collective metadata of the few rows that carry it (:class:`CollectiveColumns`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any

import msgspec
import numpy as np

from .._shape import input_dims_codes, shape_codes
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
from ._decode import LOOSE_EMPTY, NO_DIMS, Chunk, LooseArgs
from ._values import INT64_MAX, MAX_WORLD_SIZE, float_array, id_array, int_array, int_field, to_int


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
        self.coll_names = Codes({"": 0})
        self.pg_names = Codes({"": 0})
        self.offset = 0
        # Flows: columns (is_finish, id, pid, tid, ts µs), one chunk per batch that has any.
        self.flows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.meta: list[tuple[str, Any, Any, Any]] = []  # (name, pid, tid, args.name)
        self.bad_args = 0
        self.too_deep = 0

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
        lut = model_lut(self.src)
        return any(
            bool((np.isin(lut[c], FLOW_TARGET_CODES) & (k < 0)).any())
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
        self.offset += len(kept)

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

    def _add_collectives(self, kept: list[Any], model: np.ndarray, name: np.ndarray) -> None:
        """The collective args of the kept events that have them. PyTorch writes them on
        ``record_param_comms`` ops, and Kineto copies them onto the kernels (and MTIA ``hccl::``
        events) those ops launch: only those rows are looked at."""
        rpc = self.names.get("record_param_comms", -1)
        cand = np.flatnonzero((model == MODEL_CODE["kernel"]) | (name == rpc))
        if not len(cand):
            return
        cargs = list(map(_GET_ARGS, _pick(kept, cand)))
        has = [i for i, a in enumerate(cargs) if a.coll_name is not None]
        if has:
            args = [cargs[i] for i in has]
            values = collective_values(args, self.coll_names, self.pg_names)
            self.coll.append((cand[has] + self.offset, *values))


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


def collective_values(
    args: list[Any], coll_names: Codes, pg_names: Codes
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(coll_name codes, bytes, process_group codes, seq, group_size) of rows whose args name a
    collective. Values that do not fit their column (a group size beyond
    :data:`MAX_WORLD_SIZE`, a byte count beyond int64) are left unknown (-1)."""
    m = len(args)
    codes = np.zeros(m, dtype=np.int32)
    pgs = np.zeros(m, dtype=np.int32)
    nbytes = np.full(m, -1, dtype=np.int64)
    seq = np.full(m, -1, dtype=np.int64)
    group = np.full(m, -1, dtype=np.int64)
    for r, a in enumerate(args):
        codes[r] = coll_names[str(a.coll_name)]
        if a.pg_name is not None:
            pgs[r] = pg_names[str(a.pg_name)]
        nel = max(to_int(a.in_nelems, -1), to_int(a.out_nelems, -1))
        size = DTYPE_BYTES.get(str(a.dtype), -1)
        total = nel * size if nel >= 0 and size > 0 else -1
        nbytes[r] = total if total <= INT64_MAX else -1
        s = a.seq if a.seq is not None else a.seq_lower
        seq[r] = to_int(s, -1) if s is not None else -1
        gs = int_field(a.group_size, 1, MAX_WORLD_SIZE) if a.group_size is not None else None
        group[r] = -1 if gs is None else gs
    return codes, nbytes, pgs, seq, group


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
