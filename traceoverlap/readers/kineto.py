"""Reader for PyTorch profiler (Kineto) Chrome-trace JSON: ``.json`` and ``.json.gz``, one rank per file.

Speed and memory are the point: a rank trace is often hundreds of MB. The bytes are decoded once
by msgspec into small typed structs that name only the fields the analysis needs (unknown fields
are skipped by the C decoder without building Python objects), then turned into numpy columns and
categoricals batch by batch, so no per-event Python object outlives the reader and the peak holds
the raw bytes plus one batch of structs.

Times become exact integer nanoseconds: ``ts``/``dur`` are float microseconds with three decimals
(relative to ``baseTimeNanoseconds``) or, in older traces, integer absolute epoch microseconds.
See :func:`us_to_ns` for why the conversion is exact.

Robustness is handled on the failure path only, so that well-formed traces pay nothing: bare
``N/A`` / ``NaN`` words are replaced by ``null``, invalid UTF-8 is replaced, and values of an
unexpected type send the file through a lenient decoder.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ..errors import TraceFormatError
from ..model import CATEGORIES, Timeline, TraceInfo, make_events

__all__ = ["read_kineto", "us_to_ns", "rank_from_filename", "DTYPE_BYTES"]

#: Kineto ``cat`` -> :data:`traceoverlap.model.CATEGORIES`. Anything else is dropped.
CATEGORY_MAP: dict[str, str] = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_sync": "sync",
    "cuda_runtime": "runtime",
    "cuda_driver": "driver",
    "cpu_op": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    # PyTorch 1.8-1.9 traces used capitalised names (and put ProfilerStep#N under "Operator").
    "Operator": "cpu_op",
    "Kernel": "kernel",
    "Memcpy": "memcpy",
    "Memset": "memset",
    "Runtime": "runtime",
}
#: Categories whose Kineto ``pid`` is the GPU and ``tid`` the stream.
_GPU_SIDE = frozenset({"kernel", "memcpy", "memset", "sync", "gpu_annotation"})
_GPU_ACTIVITY = frozenset({"kernel", "memcpy", "memset"})
#: Categories that take a correlation id from an ac2g flow when ``args.correlation`` is absent.
_FLOW_TARGETS = frozenset({"kernel", "memcpy", "memset", "sync", "runtime", "driver"})
_FLOW_CATS = frozenset({"ac2g", "async_cpu_to_gpu"})

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

# Above this, a ts without baseTimeNanoseconds can only be absolute epoch microseconds
# (1e15 us = 2001-09-09); relative traces start near 0 or at a monotonic clock (days, not decades).
_EPOCH_US_THRESHOLD = 1e15
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


# --------------------------------------------------------------------------------------------
# Decoding: typed structs naming only what we need.


# gc=False: the structs hold no cycles, and untracked objects keep the collector from rescanning
# hundreds of thousands of them (measured: ~3x faster decode). Ints default to -1 ("none") so the
# common path builds numpy arrays without per-value None checks; a null or a string where an int
# is expected fails validation and sends the batch to the lenient decoder below.
class _Args(msgspec.Struct, gc=False, frozen=True):
    device: int = -1
    stream: int = -1
    correlation: int = -1
    name: str | None = None  # "M" metadata: thread / process name
    coll_name: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
    dtype: str | None = None
    group_size: int | None = msgspec.field(default=None, name="Group size")
    pg_name: str | None = msgspec.field(default=None, name="Process Group Name")
    seq: int | None = msgspec.field(default=None, name="Seq")
    seq_lower: int | None = msgspec.field(default=None, name="seq")


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = math.nan
    dur: float = 0.0
    id: int | str | None = None
    args: _Args = _NO_ARGS  # shared, frozen: events without args (flows...) allocate nothing


class _FlowEvent(msgspec.Struct, gc=False):
    """Only what binds a flow end to an event; decoded in a second pass, when needed."""

    ph: str = ""
    cat: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = math.nan
    id: int | str | None = None


# The lenient twins: any JSON value anywhere, for traces whose values have unexpected types
# (a string ts, a huge int in a field we read...). Slower, only used when the typed decode fails.
class _LooseArgs(msgspec.Struct, gc=False):
    device: Any = -1
    stream: Any = -1
    correlation: Any = -1
    name: Any = None
    coll_name: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    group_size: Any = msgspec.field(default=None, name="Group size")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    seq: Any = msgspec.field(default=None, name="Seq")
    seq_lower: Any = msgspec.field(default=None, name="seq")


class _LooseEvent(msgspec.Struct, gc=False):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = -1
    tid: Any = -1
    ts: Any = math.nan
    dur: Any = 0.0
    id: Any = None
    args: _LooseArgs | None = msgspec.field(default_factory=_LooseArgs)


_LOOSE_EMPTY = _LooseArgs()


class _Head(msgspec.Struct):
    """Top level. The events stay one raw byte span (msgspec validates and skips it without
    building objects); they are decoded afterwards in chunks, see :func:`_event_batches`."""

    traceEvents: msgspec.Raw = msgspec.Raw(b"")
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None


_HEAD = msgspec.json.Decoder(_Head)
_RAW = msgspec.json.Decoder(msgspec.Raw)
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_EVENTS = msgspec.json.Decoder(list[_Event])
_FLOWS = msgspec.json.Decoder(list[_FlowEvent])
_LOOSE_EVENTS = msgspec.json.Decoder(list[_LooseEvent])

#: Bytes of JSON decoded at once: bounds the live structs to one chunk's worth (~40k events).
_CHUNK_BYTES = 8 << 20
# A boundary between two events written one per line (Kineto's layout): "}" "," newline "{".
# A raw newline cannot occur inside a JSON string, so a match is structural; one at the wrong
# depth (inside an event) leaves a chunk with unbalanced brackets, which fails to decode and
# sends the rest of the array to the per-event path, so a wrong guess costs time, never data.
_EVENT_SPLIT = re.compile(rb"\}[ \t\r]*,[ \t\r]*\n[ \t\r\n]*\{")

_LEADING_WS = re.compile(rb"\s*")
_BAREWORD = re.compile(rb"(?<=[\[:,])(\s*)(?:N/A|-?NaN|-?Infinity|-?nan|-?inf)(?=\s*[,\]}])")


# --------------------------------------------------------------------------------------------
# Public helpers


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """Float microseconds -> exact integer nanoseconds (int64).

    ``round(us * 1000)`` in float64 is not exact for Kineto's ``ts`` (~4.5e12 us: the product
    ~4.5e15 has an ulp of 0.5-1 ns). Splitting off the integer part first is: ``floor`` and the
    subtraction are exact, the fraction times 1000 is tiny, and the integer part is multiplied in
    int64. The result is the decimal ns value written in the file whenever the parse error of
    ``us`` is below 0.5 ns, i.e. for ``us < 2**43`` (with three decimals) and for any integer
    ``us < 2**53`` (older absolute epoch-microsecond traces).
    """
    us = np.asarray(us, dtype=np.float64)
    ip = np.floor(us)
    frac = us - ip
    return ip.astype(np.int64) * 1000 + np.rint(frac * 1000.0).astype(np.int64)


_RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])rank[-_]?(\d+)(?![0-9])", re.IGNORECASE)


def rank_from_filename(path: str | Path) -> int | None:
    """The rank written in a file name (``rank-3``, ``rank3``, ``_rank3``, ``rank_3``), else None."""
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


# --------------------------------------------------------------------------------------------
# Reading bytes


#: What the JSON lives in: a memory map (plain files), bytes, or a bytearray (gunzipped).
_Buffer = bytes | bytearray | mmap.mmap


def _gunzip(raw: bytes) -> bytearray:
    """Decompress (possibly multi-member) gzip into one buffer sized from the gzip trailer.

    ``gzip.decompress`` grows its output as it goes and peaks at about twice the result; the
    trailer's ISIZE (size mod 2**32 of the last member) is exact for the usual single-member
    file under 4 GiB, and a wrong guess only costs a resize. Raises EOFError if truncated.
    """
    out = bytearray(int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else 0)
    pos = 0
    src = memoryview(raw)
    step = 1 << 20
    while len(src):
        d = zlib.decompressobj(wbits=31)
        fed = 0
        while fed < len(src) and not d.eof:
            chunk = d.decompress(src[fed : fed + step])
            fed += step
            out[pos : pos + len(chunk)] = chunk
            pos += len(chunk)
        if not d.eof:
            raise EOFError("compressed stream ended before the end-of-stream marker")
        # The next member (if any) starts in what this one did not consume.
        rest = d.unused_data + bytes(src[fed:]) if fed < len(src) else d.unused_data
        src = memoryview(rest.lstrip(b"\x00"))  # members may be followed by zero padding
    del out[pos:]
    return out


def _read_bytes(path: Path) -> _Buffer:
    """The JSON bytes of ``path``: a read-only memory map for plain files (no copy of a large
    trace; ~10% less CPU than reading it), decompressed bytes for gzip."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            magic = f.read(3)
            if size == 0:
                data: _Buffer = b""
            elif magic[:2] == b"\x1f\x8b" or magic == b"\xef\xbb\xbf":
                data = magic + f.read()
            else:
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise TraceFormatError(path, "file not found", "check the path") from None
    except IsADirectoryError:
        raise TraceFormatError(
            path,
            "is a directory, not a trace file",
            "pass the folder to `analyze`, which expands it",
        ) from None
    except (OSError, ValueError) as exc:
        raise TraceFormatError(path, f"cannot read the file: {exc}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = _gunzip(data)  # type: ignore[arg-type]
        except EOFError:
            raise TraceFormatError(
                path,
                "gzip stream ends early (truncated): the rank may have crashed or been killed mid-write",
                "re-collect the trace, or use another rank's file",
            ) from None
        except (OSError, zlib.error) as exc:
            raise TraceFormatError(
                path, f"corrupt gzip data ({exc})", "re-copy or re-collect the trace file"
            ) from None
    if data[:3] == b"\xef\xbb\xbf":  # UTF-8 BOM (Windows editors): not valid JSON
        data = bytes(data[3:])
    if len(data) == 0 or _LEADING_WS.match(data).end() == len(data):  # type: ignore[union-attr]
        raise TraceFormatError(
            path,
            "file is empty",
            "the profiler may not have finished writing it; re-collect the trace",
        )
    return data


def _first_byte(data: _Buffer) -> bytes:
    """First non-whitespace byte, without copying the (large) buffer."""
    m = _LEADING_WS.match(data)
    end = m.end() if m else 0
    return bytes(data[end : end + 1])


def _decode_error(path: Path, data: _Buffer, exc: Exception) -> TraceFormatError:
    msg = str(exc)
    if "truncated" in msg:
        return TraceFormatError(
            path,
            "JSON ends early (truncated): the rank may have crashed or been killed mid-write",
            "re-collect the trace, or analyze the other ranks without this file",
        )
    head = _first_byte(data)
    if head not in (b"{", b"["):
        return TraceFormatError(
            path,
            "not JSON (expected a Kineto / Chrome trace starting with '{')",
            "pass a PyTorch profiler .json / .json.gz trace or an nsys .sqlite export",
        )
    return TraceFormatError(
        path, f"invalid JSON ({msg})", "the file is damaged; re-collect or re-export the trace"
    )


def _decode_head(path: Path, data: _Buffer) -> tuple[_Head, _Buffer]:
    """Decode the top level, repairing bare words / invalid UTF-8 only if the first try fails."""
    repaired = False
    while True:
        try:
            if _first_byte(data) == b"[":  # Chrome "JSON array format": just the events
                return _Head(traceEvents=_RAW.decode(data)), data
            return _HEAD.decode(data), data
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            if repaired:
                raise _decode_error(path, data, exc) from None
            repaired = True
            fixed = _BAREWORD.sub(rb"\1null", data)  # a copy (bytes) even from a memory map
            try:
                fixed.decode("utf-8")
            except UnicodeDecodeError:
                fixed = fixed.decode("utf-8", errors="replace").encode("utf-8")
            if len(fixed) == len(data) and fixed == bytes(data):
                raise _decode_error(path, data, exc) from None
            data = fixed


def _address(buf: Any) -> int:
    return int(np.frombuffer(buf, np.uint8).ctypes.data) if len(buf) else 0


def _span(data: _Buffer, raw: msgspec.Raw) -> tuple[_Buffer, int, int]:
    """(buffer, start, end) of ``raw`` inside ``data`` (msgspec's Raw references its input;
    a copy only if it does not lie in ``data``)."""
    view = memoryview(raw)
    off = _address(view) - _address(data)
    if 0 <= off and off + len(view) <= len(data):
        return data, off, off + len(view)
    return bytes(view), 0, len(view)


def _event_batches(
    path: Path,
    data: _Buffer,
    start: int,
    end: int,
    typed: msgspec.json.Decoder = _EVENTS,
) -> Iterator[tuple[list[Any], bool]]:
    """Decode the events array ``data[start:end]`` chunk by chunk: (events, lenient?) per chunk.

    Chunks are cut at event boundaries found by :data:`_EVENT_SPLIT`, so no per-event raw
    object is made; traces not written one event per line fall back to per-event raw slices.
    """
    view = memoryview(data)
    pos, end = start + 1, end - 1  # inside the brackets
    while pos < end:
        m = _EVENT_SPLIT.search(data, pos + _CHUNK_BYTES, end) if pos + _CHUNK_BYTES < end else None
        stop = m.start() + 1 if m else end
        try:
            yield _decode_chunk(path, b"".join((b"[", view[pos:stop], b"]")), typed)
        except msgspec.DecodeError:
            break  # a boundary inside an event: per-event slices for the rest
        if m is None:
            return
        pos = m.end() - 1
    if pos >= end:
        return
    try:
        raws = _RAW_LIST.decode(b"".join((b"[", view[pos:end], b"]")))
    except msgspec.DecodeError as exc:
        raise _decode_error(path, data, exc) from None
    step = 32768
    for i in range(0, len(raws), step):
        yield _decode_chunk(path, b"[" + b",".join(raws[i : i + step]) + b"]", typed)


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_TAIL_PREFIX = b'{"traceEvents": ['


def _read_kineto_layout(path: Path, data: _Buffer, cols: _Columns) -> tuple[_Head, int, int] | None:
    """One pass for files laid out as Kineto writes them; None (and nothing trusted) otherwise.

    The general path first validates the whole document to find ``traceEvents`` (~0.1 s per
    150 MB), then decodes the events. Here the header before ``"traceEvents"`` is decoded on its
    own (closing it with ``[]}`` only parses if the key is at the top level), the events are
    decoded chunk by chunk as they are cut, and the rest of the file (the last events, the
    array's end and the fields after it, such as ``baseTimeNanoseconds``) is decoded as the
    object ``{"traceEvents": [<rest>``. Every byte is still validated, once. Any surprise
    returns None; the caller then starts over on the general path, which explains errors.
    Returns (head, start, end) with the events array at ``data[start:end]``.
    """
    i = data.find(b'"traceEvents"')
    m = _EVENTS_KEY.match(data, i) if i >= 0 else None
    if m is None:
        return None
    view = memoryview(data)
    try:
        head = _HEAD.decode(b"".join((view[:i], b'"traceEvents": []}')))
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return None
    start = m.end() - 1
    pos, size = start + 1, len(data)
    while pos + _CHUNK_BYTES < size:
        cut = _EVENT_SPLIT.search(data, pos + _CHUNK_BYTES)
        if cut is None:
            break
        try:
            events, loose = _decode_chunk(path, b"".join((b"[", view[pos : cut.start() + 1], b"]")))
        except msgspec.DecodeError:
            return None
        cols.add(events, loose)
        del events
        pos = cut.end() - 1
    if size - pos > 2 * _CHUNK_BYTES:  # not one event per line: leave it to the general path
        return None
    rest = b"".join((_TAIL_PREFIX, view[pos:]))
    try:
        tail = _HEAD.decode(rest)
        events, loose = _decode_chunk(path, bytes(memoryview(tail.traceEvents)))
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return None
    cols.add(events, loose)
    del events
    for name in ("schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds"):
        if getattr(head, name) is None:
            setattr(head, name, getattr(tail, name))
    tail_events = memoryview(tail.traceEvents)
    end = pos + (_address(tail_events) - _address(rest) - len(_TAIL_PREFIX)) + len(tail_events)
    return head, start, end


def _decode_chunk(
    path: Path, buf: bytes, typed: msgspec.json.Decoder = _EVENTS
) -> tuple[list[Any], bool]:
    """Typed-decode a JSON array of events; returns (events, whether the lenient twin was used).

    Raises ``msgspec.DecodeError`` if ``buf`` is not valid JSON (the caller's chunking guessed
    wrong), :class:`TraceFormatError` if the events are not Chrome-trace events.
    """
    try:
        return typed.decode(buf), False
    except UnicodeDecodeError:
        buf = buf.decode("utf-8", errors="replace").encode("utf-8")
        try:
            return typed.decode(buf), False
        except msgspec.ValidationError:
            pass
    except msgspec.ValidationError:
        pass
    try:
        return _LOOSE_EVENTS.decode(buf), True
    except msgspec.ValidationError as exc:
        raise TraceFormatError(
            path, f"unexpected trace event layout ({exc})", "is this a Chrome trace?"
        ) from None


# --------------------------------------------------------------------------------------------
# Value conversion (fast path: np.array on a homogeneous list; slow path only on odd values)


def _to_int(v: Any, default: int) -> int:
    if type(v) is int:
        return v if _INT64_MIN <= v <= _INT64_MAX else default
    if isinstance(v, float) and v == v and abs(v) < 9.2e18:
        return int(v)
    if isinstance(v, str):
        m = re.search(r"-?\d+", v)
        if m:
            return _to_int(int(m.group(0)), default)
    return default


def _id_array(values: list[Any]) -> np.ndarray:
    """Flow ids: ints as they are; other ids (strings...) hashed to a consistent int >= 2**62."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array(
            [
                v if type(v) is int and 0 <= v < 2**62 else (hash(str(v)) % 2**61) + 2**62
                for v in values
            ],
            dtype=np.int64,
        )


def _int_array(values: list[Any], default: int) -> np.ndarray:
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array([_to_int(v, default) for v in values], dtype=np.int64)


def _to_float(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return float("nan")
    return float("nan")


def _float_array(values: list[Any]) -> np.ndarray:
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([_to_float(v) for v in values], dtype=np.float64)


def _str_list(values: list[Any]) -> list[str]:
    return [v if type(v) is str else ("" if v is None else str(v)) for v in values]


# --------------------------------------------------------------------------------------------
# Batch -> columns


def _normalise_loose(events: list[Any]) -> None:
    """Leniently decoded events may hold any JSON value anywhere: make ph / cat / args usable."""
    for e in events:
        if type(e.ph) is not str:
            e.ph = str(e.ph)
        if type(e.cat) is not str:
            e.cat = str(e.cat)
        if not isinstance(e.args, _LooseArgs):
            e.args = _LOOSE_EMPTY


class _Columns:
    """Accumulates compact per-batch column chunks (numpy arrays, name codes) of kept events.

    Each batch's structs are dropped as soon as its columns are taken, so the only Python objects
    that accumulate are the distinct names of each batch and the few flow / metadata / collective
    rows.
    """

    def __init__(self) -> None:
        self.cat: list[np.ndarray] = []
        self.name_codes: list[np.ndarray] = []
        self.name_uniques: list[np.ndarray] = []
        self.ts: list[np.ndarray] = []
        self.dur: list[np.ndarray] = []
        self.pid: list[np.ndarray] = []
        self.tid: list[np.ndarray] = []
        self.device: list[np.ndarray] = []
        self.stream: list[np.ndarray] = []
        self.corr: list[np.ndarray] = []
        self.coll: list[tuple[np.ndarray, list[Any]]] = []  # (row numbers, their args)
        self.offset = 0
        # Flows: columns (is_finish, id, pid, tid, ts µs), one chunk per batch that has any.
        self.flows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.meta: list[tuple[str, Any, Any, Any]] = []  # (name, pid, tid, args.name)

    def add_flows(self, events: list[Any], loose: bool) -> None:
        if loose:
            _normalise_loose(events)
        flows = [e for e in events if e.cat in _FLOW_CATS and (e.ph == "s" or e.ph == "f")]
        if flows:
            self.flows.append(
                (
                    np.array([e.ph == "f" for e in flows], dtype=bool),
                    _id_array([e.id for e in flows]),
                    _int_array([e.pid for e in flows], -1),
                    _int_array([e.tid for e in flows], -1),
                    _float_array([e.ts for e in flows]),
                )
            )

    def lacks_correlation(self) -> bool:
        """Whether a launch or GPU row has no ``args.correlation`` (then flows may supply it)."""
        codes = [_CAT_NAMES.index(c) for c in _FLOW_TARGETS]
        return any(
            bool((np.isin(c, codes) & (k < 0)).any())
            for c, k in zip(self.cat, self.corr, strict=True)
        )

    def add(self, events: list[Any], loose: bool) -> None:
        cat_code = _CAT_CODE
        if loose:
            _normalise_loose(events)
        kept = [e for e in events if e.cat in cat_code and e.ph == "X"]
        for e in events:
            if e.ph == "M" and e.name in ("thread_name", "process_name") and e.args is not None:
                self.meta.append((e.name, e.pid, e.tid, e.args.name))
        if not kept:
            return
        n = len(kept)
        self.cat.append(np.array([cat_code[e.cat] for e in kept], dtype=np.int8))
        names = [e.name for e in kept]
        if loose:
            names = _str_list(names)
        codes, uniques = pd.factorize(np.array(names, dtype=object))
        self.name_codes.append(codes.astype(np.int32))
        self.name_uniques.append(np.asarray(uniques, dtype=object))
        del names
        self.ts.append(_float_array([e.ts for e in kept]))
        self.dur.append(_float_array([e.dur for e in kept]))
        self.pid.append(_int_array([e.pid for e in kept], -1))
        self.tid.append(_int_array([e.tid for e in kept], -1))
        args = [e.args for e in kept]
        del kept
        self.device.append(_int_array([a.device for a in args], -1))
        self.stream.append(_int_array([a.stream for a in args], -1))
        self.corr.append(_int_array([a.correlation for a in args], -1))
        coll_rows = [i for i, a in enumerate(args) if a.coll_name is not None]
        if coll_rows:
            self.coll.append(
                (np.array(coll_rows, dtype=np.int64) + self.offset, [args[i] for i in coll_rows])
            )
        self.offset += n


_CAT_NAMES: tuple[str, ...] = CATEGORIES
_STEP_MARKER = re.compile(r"^ProfilerStep#\d+$")
_CAT_CODE: dict[str, int] = {k: _CAT_NAMES.index(v) for k, v in CATEGORY_MAP.items()}


def _merge_names(codes: list[np.ndarray], uniques: list[np.ndarray]) -> pd.Categorical:
    """One categorical from per-batch (codes, distinct names): re-code against the union."""
    all_uniques = np.concatenate(uniques)
    gcodes, gnames = pd.factorize(all_uniques)
    out = np.empty(sum(len(c) for c in codes), dtype=np.int32)
    pos = ofs = 0
    for c, u in zip(codes, uniques, strict=True):
        out[pos : pos + len(c)] = gcodes[ofs : ofs + len(u)][c]
        pos += len(c)
        ofs += len(u)
    return _from_codes(out, categories=gnames)


def _from_codes(codes: np.ndarray, categories: Any) -> pd.Categorical:
    # Same category dtype as make_events (pandas infers it), so timelines concatenate.
    return pd.Categorical.from_codes(codes, categories=pd.Index(list(categories)))


def _mode(values: np.ndarray) -> int | None:
    if len(values) == 0:
        return None
    uniq, counts = np.unique(values, return_counts=True)
    return int(uniq[np.argmax(counts)])


_THREAD_LABEL = re.compile(r"^thread\s+\d+\s+\((.*)\)\s*$")


def _thread_name(label: str) -> str:
    """Kineto labels threads ``thread 1234 (pt_main_thread)``; the name is the part in brackets."""
    m = _THREAD_LABEL.match(label)
    return m.group(1) if m else label.strip()


# --------------------------------------------------------------------------------------------
# The reader


def read_kineto(path: str | Path) -> Timeline:
    """Read one PyTorch profiler (Kineto) Chrome-trace JSON file (``.json`` / ``.json.gz``).

    One file is one rank. Returns a :class:`Timeline` whose events follow the column contract of
    :mod:`traceoverlap.model` (integer ns; unix-epoch ns when the trace has
    ``baseTimeNanoseconds`` or absolute epoch-µs timestamps, see ``TraceInfo.clock``).
    Raises :class:`TraceFormatError` naming the file for anything that is not a readable trace.
    """
    p = Path(path)
    data = _read_bytes(p)
    cols = _Columns()
    fast = _read_kineto_layout(p, data, cols) if _first_byte(data) == b"{" else None
    if fast is not None:
        head, start, end = fast
    else:
        cols = _Columns()
        head, data = _decode_head(p, data)
        if bytes(memoryview(head.traceEvents)[:1]) != b"[":  # a Raw spans exactly its value
            raise TraceFormatError(
                p,
                "JSON without a `traceEvents` list: not a Chrome / Kineto trace",
                "pass the file written by torch.profiler (export_chrome_trace / "
                "tensorboard_trace_handler)",
            )
        data, start, end = _span(data, head.traceEvents)
        for events, loose in _event_batches(p, data, start, end):
            cols.add(events, loose)
            del events
    head.traceEvents = msgspec.Raw(b"")
    if cols.lacks_correlation():
        # Older traces link launches to GPU work only through flow events: a second, light
        # pass reads them. Newer traces (args.correlation everywhere) never pay for it.
        for events, loose in _event_batches(p, data, start, end, _FLOWS):
            cols.add_flows(events, loose)
            del events
    if isinstance(data, mmap.mmap):
        try:
            data.close()
        except BufferError:  # a view still alive somewhere: the map goes with its last user
            pass
    del data
    return _build(p, head, cols)


def _build(p: Path, head: _Head, cols: _Columns) -> Timeline:
    n = cols.offset
    if n == 0:
        raise TraceFormatError(
            p,
            "no events this tool reads (no kernel, memcpy, memset, CUDA runtime, cpu_op or "
            "user_annotation events)",
            "profile with activities=[CPU, CUDA] (CPU alone for gloo runs) and record at least one step",
        )
    cat = np.concatenate(cols.cat)
    cols.cat = []
    ts = np.concatenate(cols.ts)
    dur = np.concatenate(cols.dur)
    cols.ts = cols.dur = []
    device = np.concatenate(cols.device)
    stream = np.concatenate(cols.stream)
    corr = np.concatenate(cols.corr)
    cols.device = cols.stream = cols.corr = []
    notes: list[str] = []

    bad_ts = ~np.isfinite(ts)
    if bad_ts.any():
        notes.append(f"{int(bad_ts.sum())} events without a usable timestamp were dropped.")
    dur = np.where(np.isfinite(dur), dur, 0.0)
    base = head.baseTimeNanoseconds
    base_ns = _to_int(base, 0) if base is not None else None
    ts_ok = ts[~bad_ts]
    if base_ns is not None:
        clock = "unix"
    elif len(ts_ok) and float(np.median(ts_ok)) > _EPOCH_US_THRESHOLD:
        clock = "unix"
    else:
        clock = "relative"
    start = us_to_ns(np.where(bad_ts, 0.0, ts))
    neg = dur < 0
    if neg.any():
        notes.append(f"{int(neg.sum())} events with a negative duration were given duration 0.")
        dur = np.where(neg, 0.0, dur)
    end = start + us_to_ns(dur)
    if base_ns:
        start += base_ns
        end += base_ns

    gpu_side = np.isin(cat, [_CAT_NAMES.index(c) for c in _GPU_SIDE])
    pid_raw = np.concatenate(cols.pid)
    tid_raw = np.concatenate(cols.tid)
    cols.pid = cols.tid = []

    # Old traces: correlation from ac2g / async_cpu_to_gpu flows, matched on the raw (pid, tid).
    flow_note = _apply_flows(cols.flows, cat, corr, pid_raw, tid_raw, start, end, base_ns or 0)
    if flow_note:
        notes.append(flow_note)

    # Host pid of the rank: GPU events carry the device as pid in Kineto; give them the process
    # that launched them so (pid, correlation) joins kernels to launches.
    launch = np.isin(cat, [_CAT_NAMES.index("runtime"), _CAT_NAMES.index("driver")])
    host_pid = _mode(pid_raw[launch & (pid_raw >= 0)])
    if host_pid is None:
        host_pid = _mode(pid_raw[~gpu_side & (pid_raw >= 0)])
    if host_pid is None:
        host_pid = 0
    device = np.where(gpu_side & (device < 0), pid_raw, device)
    stream = np.where(gpu_side & (stream < 0), tid_raw, stream)
    pid = np.where(gpu_side, host_pid, pid_raw)
    tid = np.where(gpu_side, -1, tid_raw)
    device = np.where(gpu_side, device, -1)
    stream = np.where(gpu_side, stream, -1)

    tnames = _thread_names(cols.meta)
    lane, thread_name = _lanes(gpu_side, pid, tid, device, stream, tnames)

    coll_bytes = np.full(n, -1, dtype=np.int64)
    seq = np.full(n, -1, dtype=np.int64)
    group_size = np.full(n, -1, dtype=np.int64)
    coll_codes = np.zeros(n, dtype=np.int32)
    pg_codes = np.zeros(n, dtype=np.int32)
    coll_cats: dict[str, int] = {"": 0}
    pg_cats: dict[str, int] = {"": 0}
    for rows, args in cols.coll:
        for r, a in zip(rows.tolist(), args, strict=True):
            cname = str(a.coll_name)
            coll_codes[r] = coll_cats.setdefault(cname, len(coll_cats))
            if a.pg_name is not None:
                pg_codes[r] = pg_cats.setdefault(str(a.pg_name), len(pg_cats))
            nel = max(_to_int(a.in_nelems, -1), _to_int(a.out_nelems, -1))
            size = DTYPE_BYTES.get(str(a.dtype), -1)
            coll_bytes[r] = nel * size if nel >= 0 and size > 0 else -1
            s = a.seq if a.seq is not None else a.seq_lower
            seq[r] = _to_int(s, -1) if s is not None else -1
            group_size[r] = _to_int(a.group_size, -1) if a.group_size is not None else -1
    cols.coll = []

    names = _merge_names(cols.name_codes, cols.name_uniques)
    cols.name_codes = cols.name_uniques = []
    # Older traces record ProfilerStep#N as an operator; it is the profiler's step range.
    step_codes = [i for i, v in enumerate(names.categories) if _STEP_MARKER.match(str(v))]
    if step_codes:
        is_step = np.isin(names.codes, step_codes) & (cat == _CAT_NAMES.index("cpu_op"))
        cat[is_step] = _CAT_NAMES.index("annotation")
    keep = ~bad_ts
    category = _from_codes(cat.astype(np.int32), categories=list(_CAT_NAMES))

    info = _trace_info(p, head, cat, device, host_pid, clock, notes)
    columns: dict[str, Any] = {
        "rank": info.rank,
        "pid": pid,
        "device": device,
        "stream": stream,
        "tid": tid,
        "lane": lane,
        "thread_name": thread_name,
        "category": category,
        "name": names,
        "start_ns": start,
        "end_ns": end,
        "correlation": corr,
        "coll_name": _from_codes(coll_codes, categories=list(coll_cats)),
        "coll_bytes": coll_bytes,
        "process_group": _from_codes(pg_codes, categories=list(pg_cats)),
        "seq": seq,
        "group_size": group_size,
    }
    events = make_events(n, columns)
    if not keep.all():
        events = events[keep].reset_index(drop=True)
    return Timeline(events, (info,))


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
            seen.setdefault((_to_int(mpid, -1), _to_int(mtid, -1)), []).append(_thread_name(mname))
    out: dict[tuple[int, int], str] = {}
    for (mpid, mtid), names in seen.items():
        inherited = set(seen.get((mpid, mpid), ())) if mtid != mpid else set()
        own = [n for n in names if n not in inherited]
        out[(mpid, mtid)] = own[-1] if own else names[-1]
    return out


def _factorize_pairs(a: np.ndarray, b: np.ndarray) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Distinct (a, b) pairs (in order of appearance) and each row's pair number (hash-based:
    much faster than ``np.unique(axis=0)``, which sorts)."""
    ca, ua = pd.factorize(a)
    cb, ub = pd.factorize(b)
    codes, upair = pd.factorize(ca.astype(np.int64) * max(len(ub), 1) + cb)
    pairs = [(int(ua[k // max(len(ub), 1)]), int(ub[k % max(len(ub), 1)])) for k in upair.tolist()]
    return pairs, codes.astype(np.int64)


def _lanes(
    gpu_side: np.ndarray,
    pid: np.ndarray,
    tid: np.ndarray,
    device: np.ndarray,
    stream: np.ndarray,
    tnames: dict[tuple[int, int], str],
) -> tuple[pd.Categorical, pd.Categorical]:
    """Lane and thread-name categoricals, built per distinct (pid, tid) / (device, stream)."""
    n = len(pid)
    several_devices = len(pd.unique(device[gpu_side])) > 1
    lane_codes = np.zeros(n, dtype=np.int64)
    tname_codes = np.zeros(n, dtype=np.int64)
    lane_labels: list[str] = []
    tname_labels: list[str] = [""]
    host = ~gpu_side
    if host.any():
        uniq, inv = _factorize_pairs(pid[host], tid[host])
        tn_idx = []
        for kp, kt in uniq:
            tn = tnames.get((kp, kt), "")
            lane_labels.append(f"thread {kt}" + (f" ({tn})" if tn else ""))
            if tn not in tname_labels:
                tname_labels.append(tn)
            tn_idx.append(tname_labels.index(tn))
        lane_codes[host] = inv
        tname_codes[host] = np.array(tn_idx, dtype=np.int64)[inv]
    if gpu_side.any():
        uniq, inv = _factorize_pairs(device[gpu_side], stream[gpu_side])
        first = len(lane_labels)
        for kd, ks in uniq:
            lane_labels.append((f"gpu {kd} " if several_devices else "") + f"stream {ks}")
        lane_codes[gpu_side] = inv + first
    # Two host processes may share a tid label: merge identical labels into one category.
    label_codes, label_uniques = pd.factorize(np.array(lane_labels, dtype=object))
    lane = _from_codes(label_codes[lane_codes].astype(np.int32), categories=label_uniques)
    tname = _from_codes(tname_codes.astype(np.int32), categories=tname_labels)
    return lane, tname


def _apply_flows(
    flows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    cat: np.ndarray,
    corr: np.ndarray,
    pid_raw: np.ndarray,
    tid_raw: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    base_ns: int,
) -> str | None:
    """Fill missing correlation ids (in place) from ac2g / async_cpu_to_gpu flow events.

    A flow's ``s`` end sits on the launch, its ``f`` end on the GPU activity; both carry the same
    ``id``. Each end binds to the X event on the same (pid, tid) that starts at the flow's ts, else
    to the one that encloses it (the latest-starting one). Returns a note, or None if unused.
    """
    targets = np.isin(cat, [_CAT_NAMES.index(c) for c in _FLOW_TARGETS]) & (corr < 0)
    if not flows or not targets.any():
        return None
    fid = np.concatenate([f[1] for f in flows])
    fpid = np.concatenate([f[2] for f in flows])
    ftid = np.concatenate([f[3] for f in flows])
    fts = np.concatenate([f[4] for f in flows])
    ok = np.isfinite(fts)
    fns = us_to_ns(np.where(ok, fts, 0.0)) + base_ns
    tidx = np.flatnonzero(targets)
    bound = 0
    for kp, kt in set(zip(fpid[ok].tolist(), ftid[ok].tolist(), strict=True)):
        cand = tidx[(pid_raw[tidx] == kp) & (tid_raw[tidx] == kt)]
        if len(cand) == 0:
            continue
        cand = cand[np.argsort(start[cand], kind="stable")]
        cs = start[cand]
        sel = np.flatnonzero(ok & (fpid == kp) & (ftid == kt))
        pos = np.searchsorted(cs, fns[sel], side="right") - 1
        good = pos >= 0
        posg = np.where(good, pos, 0)
        hit = cand[posg]
        good &= end[hit] >= fns[sel]
        corr[hit[good]] = fid[sel[good]]
        bound += int(good.sum())
    if bound == 0:
        return None
    return f"Correlation ids of {bound} launches/GPU activities were taken from ac2g flow events."


def _trace_info(
    p: Path,
    head: _Head,
    cat: np.ndarray,
    device: np.ndarray,
    host_pid: int,
    clock: str,
    notes: list[str],
) -> TraceInfo:
    dist = head.distributedInfo if isinstance(head.distributedInfo, dict) else None
    rank: int | None = None
    world: int | None = None
    backend: str | None = None
    groups: tuple[dict[str, Any], ...] = ()
    if dist is not None:
        r = dist.get("rank")
        rank = _to_int(r, -1) if r is not None else None
        if rank is not None and rank < 0:
            rank = None
        w = dist.get("world_size")
        world = _to_int(w, -1) if w is not None else None
        if world is not None and world < 1:
            world = None
        b = dist.get("backend")
        backend = str(b) if b is not None else None
        pgs = dist.get("pg_config")
        if isinstance(pgs, list):
            groups = tuple(g for g in pgs if isinstance(g, dict))
    if rank is not None:
        source = "distributedInfo"
    else:
        rank = rank_from_filename(p)
        if rank is not None:
            source = "filename"
            notes.insert(
                0, f"Rank {rank} taken from the file name (the trace has no distributedInfo)."
            )
        else:
            rank, source = 0, "default"
            notes.insert(
                0,
                "The trace and its file name say no rank: assumed rank 0 (name files rank<N>.json).",
            )
    gpu_rows = np.isin(cat, [_CAT_NAMES.index(c) for c in _GPU_ACTIVITY])
    device_kind = "gpu" if gpu_rows.any() else "cpu"
    used = sorted(set(np.unique(device[gpu_rows]).tolist())) if gpu_rows.any() else []
    devices: list[str] = []
    props = head.deviceProperties if isinstance(head.deviceProperties, list) else []
    for d in props:
        if not isinstance(d, dict):
            continue
        did = _to_int(d.get("id"), -1)
        if used and did not in used:
            continue
        name = str(d.get("name", f"device {did}"))
        mem = d.get("totalGlobalMem")
        if isinstance(mem, (int, float)) and mem > 0:
            name += f" ({mem / 1e9:.1f} GB)"
        devices.append(name)
    version = head.schemaVersion
    return TraceInfo(
        path=str(p),
        format="kineto",
        rank=rank,
        world_size=world,
        backend=backend,
        rank_source=source,
        device_kind=device_kind,
        devices=tuple(devices),
        format_version=None if version is None else str(version),
        clock=clock,
        pid=host_pid,
        device=used[0] if used else None,
        process_groups=groups,
        notes=tuple(notes),
    )
