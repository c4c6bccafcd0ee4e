"""Reader for PyTorch profiler (Kineto) Chrome-trace JSON: ``.json`` and ``.json.gz``, one rank per
file (or a pipe / standard input, see :mod:`._input`).

Speed and memory are the point: a rank trace is often hundreds of MB. The bytes are decoded once
by msgspec into small typed structs that name only the fields the analysis needs (unknown fields
are skipped by the C decoder without building Python objects), chunk by chunk, straight from the
memory map (the chunk's brackets are patched in place, so no chunk is copied); each chunk's
structs become numpy columns at once and are dropped, and the map's pages are handed back as soon
as they are read, so the peak holds one chunk of input, one chunk of structs and the columns.
A ``.json.gz`` is decompressed piece by piece into the same chunked decoding, so the whole
document (often 10x the file) is never in memory either (see :func:`_read_gzip_layout`).

Times become exact integer nanoseconds: ``ts``/``dur`` are float microseconds with three decimals
(relative to ``baseTimeNanoseconds``) or, in older traces, integer absolute epoch microseconds.
See :func:`us_to_ns` for why the conversion is exact. An event whose ``ts``/``dur`` is missing,
null, NaN, not a number or whose nanoseconds would not fit int64 is dropped and counted in a
note, never given a made-up time.

Robustness is handled on the failure path only, so that well-formed traces pay nothing: bare
``N/A`` / ``NaN`` words are replaced by ``null``, invalid UTF-8 is replaced, values of an
unexpected type send the chunk through a lenient decoder, an event whose ``args`` is not an
object loses its args (counted), and an event nested too deeply for the decoder is dropped
(counted).

Accelerators other than CUDA / ROCm: Kineto names its activity categories in
``libkineto/include/ActivityType.h`` (``toString``); :data:`CATEGORY_MAP` maps each category whose
meaning is defined there to the model's categories, and device events of any other category are
counted in a note, never dropped silently.
"""

from __future__ import annotations

import math
import mmap
import re
from collections import Counter
from collections.abc import Iterator
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ..errors import NotATraceError, TraceFormatError
from ..model import CATEGORIES, Timeline, TraceInfo, make_events
from ._input import (
    Buffer,
    _unicode_encoding,
    gunzip_pieces,
    is_gzip,
    label,
    prepare,
    read_raw,
)

__all__ = [
    "read_kineto",
    "us_to_ns",
    "rank_from_filename",
    "DTYPE_BYTES",
    "CATEGORY_MAP",
    "MAX_WORLD_SIZE",
]

#: Kineto ``cat`` -> :data:`traceoverlap.model.CATEGORIES`.
#:
#: The category strings are ``toString(ActivityType)`` of pytorch/kineto
#: ``libkineto/include/ActivityType.h`` (the ``_activityTypeNames`` table; earlier versions kept
#: it in ``libkineto/src/ActivityType.cpp``). Their meaning, where this map relies on it:
#:
#: - ``kernel`` (CONCURRENT_KERNEL, "on-device kernels"), ``gpu_memcpy``, ``gpu_memset``: device
#:   activity of every backend that uses them: CUDA (CUPTI), ROCm (roctracer), Intel XPU
#:   (``libkineto/src/plugin/xpupti/XpuptiActivityHandlers.cpp`` emits CONCURRENT_KERNEL /
#:   GPU_MEMCPY / GPU_MEMSET with args ``device`` / ``correlation``, pid = device, tid = SYCL
#:   queue), and PrivateUse1 backends (``kPrivateUse1Types`` in PyTorch's
#:   ``torch/csrc/profiler/kineto_shim.cpp``).
#: - ``cuda_runtime`` / ``cuda_driver`` ("host side cuda runtime / driver events"),
#:   ``xpu_runtime`` / ``xpu_driver`` ("host side xpu runtime / driver events"),
#:   ``mtia_runtime`` ("host side MTIA runtime events"), ``privateuse1_runtime`` /
#:   ``privateuse1_driver`` ("host side privateUse1 runtime / driver events"), ``glow_runtime``
#:   ("host side glow runtime events"), ``hpu_op`` ("HPU host side runtime event"): host-side
#:   API calls, i.e. launches, joined to device work by ``args.correlation`` / ac2g flows. The
#:   pytorch/kineto pull request #1212 (commit f5deaf20, "enable generic event types") says the
#:   same in code: MTIA_RUNTIME, GLOW_RUNTIME, HPU_OP, XPU_RUNTIME and PRIVATEUSE1_RUNTIME become
#:   aliases of RUNTIME, CUDA_DRIVER / PRIVATEUSE1_DRIVER aliases of DRIVER.
#: - ``mtia_ccp_events`` ("MTIA ondevice CCP events"): device activity; the same pull request
#:   makes MTIA_CCP_EVENTS an alias of CONCURRENT_KERNEL, and ``libkineto/src/output_json.cpp``
#:   writes it like a kernel (pid = device, tid = resource; ``hccl::*`` ones carry the
#:   collective metadata of their ``record_param_comms`` op).
#: - ``cuda_sync`` ("synchronization events between runtime and kernels"), ``xpu_sync`` ("XPU
#:   synchronization events"), ``cuda_event`` (cudaEventRecord marks on a stream, 1 ns long,
#:   ``CudaEventActivity`` in ``libkineto/src/CuptiActivity.h``): device-side records that are
#:   never activity.
#: - ``cpu_op``, ``user_annotation``, ``gpu_user_annotation``: host ops, host ranges, and ranges
#:   projected on device lanes.
#: - PyTorch 1.8-1.9 traces used capitalised names (and put ProfilerStep#N under "Operator").
#:
#: ``hpu_op`` events that sit on a device's pid rather than the host process's are device work
#: whose meaning Kineto does not define: they are counted in a note, as are ``mtia_insight``
#: (MTIA Insight events) and ``collective_comm`` (XPU communication records) and any category
#: not named here that lies on a device's pid.
CATEGORY_MAP: dict[str, str] = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "mtia_ccp_events": "kernel",
    "cuda_sync": "sync",
    "xpu_sync": "sync",
    "cuda_event": "sync",
    "cuda_runtime": "runtime",
    "cuda_driver": "driver",
    "xpu_runtime": "runtime",
    "xpu_driver": "driver",
    "mtia_runtime": "runtime",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "driver",
    "glow_runtime": "runtime",
    "hpu_op": "runtime",
    "cpu_op": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "Operator": "cpu_op",
    "Kernel": "kernel",
    "Memcpy": "memcpy",
    "Memset": "memset",
    "Runtime": "runtime",
}
#: Categories that are never device work (host-side, display-only or counters): not kept, and
#: not worth a note. ``Trace`` is Kineto's whole-capture span; ``ac2g`` / ``fwdbwd`` /
#: ``async_cpu_to_gpu`` are flows (read separately when needed).
_IGNORED_CATS = frozenset(
    {
        "",
        "python_function",
        "overhead",
        "cpu_instant_event",
        "external_correlation",
        "cuda_profiler_range",
        "xpu_scope_profiler",
        "hardware_counters",
        "mtia_counters",
        "Trace",
        "ac2g",
        "fwdbwd",
        "async_cpu_to_gpu",
    }
)
#: Known device-side categories with no defined meaning as kernel / copy / launch: always noted.
_UNMAPPED_DEVICE_CATS = frozenset({"mtia_insight", "collective_comm"})
#: Categories of accelerators other than CUDA / ROCm: a note says how their events were read.
_ACCELERATOR_CATS = frozenset(
    {
        "mtia_ccp_events",
        "mtia_runtime",
        "xpu_runtime",
        "xpu_driver",
        "xpu_sync",
        "privateuse1_runtime",
        "privateuse1_driver",
        "glow_runtime",
        "hpu_op",
    }
)
_AS_WHAT = {"kernel": "as kernels", "runtime": "as launches", "driver": "as launches"}
_AS_WHAT.update({"memcpy": "as copies", "memset": "as copies", "sync": "as sync records"})

#: Model categories whose Kineto ``pid`` is the device and ``tid`` the stream.
_GPU_SIDE = frozenset({"kernel", "memcpy", "memset", "sync", "gpu_annotation"})
_GPU_ACTIVITY = frozenset({"kernel", "memcpy", "memset"})
#: Model categories whose rows need ``args.correlation`` (and may take it from ac2g flows).
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

#: Largest world size (and rank + 1) believed: anything larger is a damaged field, and building
#: per-rank structures for it downstream would cost memory for nothing.
MAX_WORLD_SIZE = 1 << 20

# Above this, a ts without baseTimeNanoseconds can only be absolute epoch microseconds
# (1e15 us = 2001-09-09); relative traces start near 0 or at a monotonic clock (days, not decades).
_EPOCH_US_THRESHOLD = 1e15
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)
_INT32_MAX = 2**31 - 1


# --------------------------------------------------------------------------------------------
# Decoding: typed structs naming only what we need.


# gc=False: the structs hold no cycles, and untracked objects keep the collector from rescanning
# hundreds of thousands of them (measured: ~3x faster decode). Ints default to -1 ("none") so the
# common path builds numpy arrays without per-value None checks; a null or a string where an int
# is expected fails validation and sends the chunk to the lenient decoder below.
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
    pg_name: str | int | None = msgspec.field(default=None, name="Process Group Name")
    seq: int | None = msgspec.field(default=None, name="Seq")
    seq_lower: int | None = msgspec.field(default=None, name="seq")


_NO_ARGS = _Args()


# No ``id``: only flows need it, and they are read in a second pass, only by traces that need
# them. ts / dur default to NaN: an event without them is dropped, never given time 0.
class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = math.nan
    dur: float = math.nan
    args: _Args = _NO_ARGS  # shared, frozen: events without args (flows...) allocate nothing


class _FlowEvent(msgspec.Struct, gc=False):
    """Only what binds a flow end to an event; decoded in a second pass, when needed."""

    ph: str = ""
    cat: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = math.nan
    id: int | str | None = None


# The lenient twins: any JSON value anywhere, for chunks whose values have unexpected types
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


_LOOSE_EMPTY = _LooseArgs()


class _LooseEvent(msgspec.Struct, gc=False):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = -1
    tid: Any = -1
    ts: Any = math.nan
    dur: Any = math.nan
    id: Any = None
    args: _LooseArgs | None = msgspec.field(default_factory=_LooseArgs)


class _RawArgsEvent(msgspec.Struct, gc=False):
    """The last resort for a chunk where some event has a value even the lenient decoder cannot
    take (``args`` that is not an object, a number beyond float range such as ``1e400``): every
    field kept raw and decoded on its own; what cannot be read becomes "missing" (an event
    without a usable ts / dur is then dropped and counted, bad args are ignored and counted)."""

    ph: msgspec.Raw = msgspec.Raw(b'""')
    cat: msgspec.Raw = msgspec.Raw(b'""')
    name: msgspec.Raw = msgspec.Raw(b'""')
    pid: msgspec.Raw = msgspec.Raw(b"-1")
    tid: msgspec.Raw = msgspec.Raw(b"-1")
    ts: msgspec.Raw = msgspec.Raw(b"null")
    dur: msgspec.Raw = msgspec.Raw(b"null")
    id: msgspec.Raw = msgspec.Raw(b"null")
    args: msgspec.Raw = msgspec.Raw(b"null")


class _Head(msgspec.Struct):
    """Top level. The events stay one raw byte span (msgspec validates and skips it without
    building objects); they are decoded afterwards in chunks, see :func:`_event_batches`. The
    metadata fields stay raw too (empty when absent), decoded one by one by :class:`_Meta`, so
    that one unreadable value (a number beyond float range...) costs only that field."""

    traceEvents: msgspec.Raw = msgspec.Raw(b"")
    schemaVersion: msgspec.Raw = msgspec.Raw(b"")
    deviceProperties: msgspec.Raw = msgspec.Raw(b"")
    distributedInfo: msgspec.Raw = msgspec.Raw(b"")
    baseTimeNanoseconds: msgspec.Raw = msgspec.Raw(b"")


_META_FIELDS = ("schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds")
_UNREADABLE = object()  # a metadata value present but not decodable


class _Meta:
    """The top-level metadata, decoded: None when absent, :data:`_UNREADABLE` when present but
    not decodable (its raw bytes must not outlive the input buffer)."""

    def __init__(self, head: _Head) -> None:
        values: dict[str, Any] = {}
        for name in _META_FIELDS:
            raw = getattr(head, name)
            if not len(raw):
                values[name] = None
                continue
            value = _any_or_none(raw, _UNREADABLE)
            values[name] = value
            setattr(head, name, msgspec.Raw(b""))
        self.schemaVersion: Any = values["schemaVersion"]
        self.deviceProperties: Any = values["deviceProperties"]
        self.distributedInfo: Any = values["distributedInfo"]
        self.baseTimeNanoseconds: Any = values["baseTimeNanoseconds"]


_HEAD = msgspec.json.Decoder(_Head)
_ANY = msgspec.json.Decoder()
_RAW = msgspec.json.Decoder(msgspec.Raw)
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_EVENTS = msgspec.json.Decoder(list[_Event])
_FLOWS = msgspec.json.Decoder(list[_FlowEvent])
_LOOSE_EVENTS = msgspec.json.Decoder(list[_LooseEvent])
_RAW_ARGS_EVENTS = msgspec.json.Decoder(list[_RawArgsEvent])
_LOOSE_ARGS = msgspec.json.Decoder(_LooseArgs | None)

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
    ``us < 2**53`` (older absolute epoch-microsecond traces). Values must be finite and small
    enough for the result to fit int64: see :func:`_checked_ns` for the reader's guarded use.
    """
    us = np.asarray(us, dtype=np.float64)
    ip = np.floor(us)
    frac = us - ip
    return ip.astype(np.int64) * 1000 + np.rint(frac * 1000.0).astype(np.int64)


# floor(us) at or above this cannot overflow when multiplied by 1000:
# -(2**63 // 1000) * 1000 = -9223372036854775000 >= -2**63.
_US_FLOOR_MIN = -(2**63 // 1000)


def _checked_ns(us: np.ndarray, base: int) -> tuple[np.ndarray, np.ndarray]:
    """(``us_to_ns(us) + base``, ok) with ok False where ``us`` is not finite or the exact result
    would not fit int64; those rows get 0. ``base`` must lie in [0, 2**63 - 1].

    Exact bounds, in integers: with ip = floor(us) and r = rint(frac * 1000) in [0, 1000], the
    result ip * 1000 + r + base fits iff ip >= -(2**63 // 1000) (then ip * 1000 >= -2**63 + 808
    and base >= 0) and ip <= (2**63 - 1 - base - r) // 1000.
    """
    us = np.asarray(us, dtype=np.float64)
    ok = np.isfinite(us) & (np.abs(us) < 2.0**62)  # |us| >= 2**62 can never fit; astype is safe
    u = np.where(ok, us, 0.0)
    ip = np.floor(u)
    r = np.rint((u - ip) * 1000.0).astype(np.int64)
    ipi = ip.astype(np.int64)
    ok &= (ipi >= _US_FLOOR_MIN) & (ipi <= (np.int64(_INT64_MAX - base) - r) // 1000)
    ipi = np.where(ok, ipi, 0)
    ns = ipi * 1000 + np.where(ok, r, 0)
    if base:
        ns = np.where(ok, ns + base, 0)
    return ns, ok


_RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])rank[-_]?(\d+)(?![0-9])", re.IGNORECASE)


def rank_from_filename(path: str | Path) -> int | None:
    """The rank written in a file name (``rank-3``, ``rank3``, ``_rank3``, ``rank_3``), else None."""
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


# --------------------------------------------------------------------------------------------
# Decoding the document


def _first_byte(data: Any) -> bytes:
    """First non-whitespace byte, without copying the (large) buffer."""
    m = _LEADING_WS.match(data)
    end = m.end() if m else 0
    return bytes(data[end : end + 1])


def _too_deep(path: str) -> TraceFormatError:
    return TraceFormatError(
        path,
        "JSON nested too deeply for the decoder (over ~1000 levels of lists / objects)",
        "the file is damaged or not a profiler trace; re-collect or re-export it",
    )


def _decode_error(path: str, data: Any, exc: Exception) -> TraceFormatError:
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


def _decode_head(path: str, data: Any) -> tuple[_Head, Any]:
    """Decode the top level, repairing bare words / invalid UTF-8 only if the first try fails."""
    repaired = False
    while True:
        try:
            if _first_byte(data) == b"[":  # Chrome "JSON array format": just the events
                return _Head(traceEvents=_RAW.decode(data)), data
            return _HEAD.decode(data), data
        except RecursionError:
            raise _too_deep(path) from None
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


def _span(data: Any, raw: msgspec.Raw) -> tuple[Any, int, int]:
    """(buffer, start, end) of ``raw`` inside ``data`` (msgspec's Raw references its input;
    a copy only if it does not lie in ``data``)."""
    view = memoryview(raw)
    off = _address(view) - _address(data)
    if 0 <= off and off + len(view) <= len(data):
        return data, off, off + len(view)
    return bytes(view), 0, len(view)


class _Chunk:
    """One decoded chunk: the events, whether the lenient decoder was needed, and how many events
    lost their args (not an object) or were dropped (nested too deeply)."""

    __slots__ = ("events", "loose", "bad_args", "too_deep")

    def __init__(self, events: list[Any], loose: bool, bad_args: int = 0, too_deep: int = 0):
        self.events = events
        self.loose = loose
        self.bad_args = bad_args
        self.too_deep = too_deep


def _decode_loose(path: str, buf: Any) -> _Chunk:
    """Lenient decode of a JSON array of events (any value types; args that are not objects
    are dropped and counted)."""
    try:
        return _Chunk(_LOOSE_EVENTS.decode(buf), True)
    except msgspec.ValidationError:
        pass
    try:
        events = _RAW_ARGS_EVENTS.decode(buf)
    except msgspec.ValidationError as exc:
        raise TraceFormatError(
            path, f"unexpected trace event layout ({exc})", "is this a Chrome trace?"
        ) from None
    out: list[Any] = []
    bad = 0
    for e in events:
        try:
            args = _LOOSE_ARGS.decode(e.args) or _LOOSE_EMPTY
        except (msgspec.ValidationError, msgspec.DecodeError):
            args = _LOOSE_EMPTY
            bad += 1
        f = _any_or_none
        out.append(
            _LooseEvent(
                f(e.ph), f(e.cat), f(e.name), f(e.pid), f(e.tid), f(e.ts), f(e.dur), f(e.id), args
            )
        )
    return _Chunk(out, True, bad_args=bad)


def _any_or_none(raw: msgspec.Raw, default: Any = None) -> Any:
    """One raw JSON value decoded (invalid UTF-8 replaced), else ``default``."""
    try:
        return _ANY.decode(raw)
    except UnicodeDecodeError:
        try:
            return _ANY.decode(bytes(raw).decode("utf-8", errors="replace").encode("utf-8"))
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            return default
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return default


def _decode_chunk(
    path: str, buf: Any, typed: msgspec.json.Decoder = _EVENTS, split_deep: bool = True
) -> _Chunk:
    """Decode a JSON array of events: typed, else lenient.

    Raises ``msgspec.DecodeError`` if ``buf`` is not valid JSON (the caller's chunking guessed
    wrong), :class:`TraceFormatError` if the events are not Chrome-trace events. A chunk too deep
    for the decoder is split into events (``split_deep``), else ``RecursionError`` propagates.
    """
    try:
        return _decode_typed_or_loose(path, buf, typed)
    except RecursionError:
        if not split_deep:
            raise
        return _decode_deep(path, buf, typed)


def _decode_typed_or_loose(path: str, buf: Any, typed: msgspec.json.Decoder) -> _Chunk:
    try:
        return _typed_else_loose(path, buf, typed)
    except UnicodeDecodeError:  # invalid UTF-8 (in a name...): replaced, as Kineto's viewer does
        fixed = bytes(buf).decode("utf-8", errors="replace").encode("utf-8")
        return _typed_else_loose(path, fixed, typed)


def _typed_else_loose(path: str, buf: Any, typed: msgspec.json.Decoder) -> _Chunk:
    try:
        return _Chunk(typed.decode(buf), False)
    except msgspec.ValidationError:
        return _decode_loose(path, buf)


def _decode_deep(path: str, buf: Any, typed: msgspec.json.Decoder) -> _Chunk:
    """A chunk holding an event nested deeper than the decoder's recursion limit: decode it
    event by event (cut at Kineto's one-event-per-line boundaries), dropping the deep ones."""
    data = bytes(buf)
    cuts = [m.start() + 1 for m in _EVENT_SPLIT.finditer(data)]
    starts = [1] + [data.index(b"{", c) for c in cuts]
    ends = cuts + [data.rindex(b"]")]
    events: list[Any] = []
    loose = False
    bad = deep = 0
    for s, e in zip(starts, ends, strict=True):
        piece = b"[" + data[s:e] + b"]"
        try:
            part = _decode_chunk(path, piece, typed, split_deep=False)
        except msgspec.DecodeError:
            raise _too_deep(path) from None  # a cut inside an event: cannot isolate it
        except RecursionError:
            deep += 1
            continue
        events.extend(part.events)
        bad += part.bad_args
        loose |= part.loose
    if loose:  # one chunk, one struct family: re-type the typed ones
        events = [_as_loose(e) for e in events]
    return _Chunk(events, loose, bad_args=bad, too_deep=deep)


def _as_loose(e: Any) -> Any:
    if isinstance(e, _Event):
        a = e.args
        args = _LooseArgs(
            a.device,
            a.stream,
            a.correlation,
            a.name,
            a.coll_name,
            a.in_nelems,
            a.out_nelems,
            a.dtype,
            a.group_size,
            a.pg_name,
            a.seq,
            a.seq_lower,
        )
        return _LooseEvent(e.ph, e.cat, e.name, e.pid, e.tid, e.ts, e.dur, None, args)
    return e


def _event_batches(
    path: str,
    data: Any,
    start: int,
    end: int,
    typed: msgspec.json.Decoder = _EVENTS,
) -> Iterator[_Chunk]:
    """Decode the events array ``data[start:end]`` chunk by chunk (the general path: copies).

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
    except RecursionError:
        raise _too_deep(path) from None
    except msgspec.DecodeError as exc:
        raise _decode_error(path, data, exc) from None
    step = 32768
    for i in range(0, len(raws), step):
        yield _decode_chunk(path, b"[" + b",".join(raws[i : i + step]) + b"]", typed)


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_TAIL_PREFIX = b'{"traceEvents": ['
_OPEN, _CLOSE, _COMMA = 0x5B, 0x5D, 0x2C  # "[", "]", ","


def _release(data: Any, upto: int, done: int) -> int:
    """Hand back the memory map's pages below ``upto`` (read, not needed again: a later pass
    would fault them back in from the file); returns the new released boundary."""
    if not isinstance(data, mmap.mmap):
        return done
    end = upto - upto % mmap.PAGESIZE
    if end > done:
        try:
            data.madvise(mmap.MADV_DONTNEED, done, end - done)
        except (OSError, ValueError, AttributeError):  # not Linux: the pages go at close
            return done
        return end
    return done


def _last_boundary(data: Any, pos: int, size: int) -> re.Match[bytes] | None:
    """The last event boundary (``}, {`` across a newline) in ``data[pos:size]``, found from the
    end: the document's tail holds a few ``}`` (the last event's, its args', the top level's)
    before the boundary that precedes the last event. None if there is none nearby."""
    at = size
    for _ in range(64):
        at = data.rfind(b"}", pos, at)
        if at < 0:
            return None
        m = _EVENT_SPLIT.match(data, at)
        if m is not None:
            return m
    return None


def _decode_in_place(path: str, data: Any, pos: int, cut: re.Match[bytes]) -> _Chunk:
    """Decode the events from ``data[pos]`` (``[`` or whitespace) to the boundary ``cut`` without
    copying them: the comma of the cut becomes ``]`` and ``data[pos]`` becomes ``[`` while the
    chunk is decoded, then both are restored. Raises ``msgspec.DecodeError`` if the chunk is
    not a JSON array (a cut inside an event)."""
    comma = data.find(b",", cut.start(), cut.end())
    was = data[pos]
    data[pos] = _OPEN
    data[comma] = _CLOSE
    try:
        return _decode_chunk(path, memoryview(data)[pos : comma + 1])
    finally:
        data[pos] = was
        data[comma] = _COMMA


def _decode_tail(
    path: str, head: _Head, data: Any, pos: int, cols: _Columns
) -> tuple[int, int] | None:
    """Decode ``data[pos + 1:]``, the last event(s), the end of the events array and the fields
    after it, as the object ``{"traceEvents": [<rest>``; fill the header fields it holds. Returns
    (offset, length) of the events array's end part within ``data``, None if it does not parse."""
    rest = b"".join((_TAIL_PREFIX, memoryview(data)[pos + 1 :]))
    try:
        tail = _HEAD.decode(rest)
        chunk = _decode_chunk(path, memoryview(tail.traceEvents))
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        return None
    cols.add(chunk)
    del chunk
    for name in _META_FIELDS:
        if not len(getattr(head, name)):
            setattr(head, name, msgspec.Raw(bytes(getattr(tail, name))))
    tail_events = memoryview(tail.traceEvents)
    skip = _address(tail_events) - _address(rest) - len(_TAIL_PREFIX)
    length = len(tail_events)
    tail_events.release()
    return pos + 1 + skip, length


def _decode_header(data: Any, i: int) -> _Head | None:
    """The top level before ``"traceEvents"`` at ``data[i]``, closed with ``"traceEvents": []}``:
    None unless that parses, i.e. unless the key is at the top level."""
    try:
        return _HEAD.decode(b"".join((memoryview(data)[:i], b'"traceEvents": []}')))
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        return None


def _read_kineto_layout(path: str, data: Buffer, cols: _Columns) -> tuple[_Head, int, int] | None:
    """One pass for files laid out as Kineto writes them; None (and nothing trusted) otherwise.

    The general path first validates the whole document to find ``traceEvents`` (~0.1 s per
    150 MB), then decodes the events from copies. Here the header before ``"traceEvents"`` is
    decoded on its own (:func:`_decode_header`), and the events are decoded chunk by chunk
    straight from the buffer (:func:`_decode_in_place`). The rest of the file (the last event,
    the array's end and the fields after it, such as ``baseTimeNanoseconds``) is decoded by
    :func:`_decode_tail`. Every byte is still validated, once. Any surprise returns None;
    the caller then starts over on the general path, which explains errors.
    Returns (head, start, end) with the events array at ``data[start:end]``.
    """
    i = data.find(b'"traceEvents"')
    m = _EVENTS_KEY.match(data, i) if i >= 0 else None
    head = _decode_header(data, i) if m is not None else None
    if m is None or head is None:
        return None
    start = m.end() - 1  # the array's "["
    pos, size, released = start, len(data), 0
    while True:
        cut = _EVENT_SPLIT.search(data, pos + _CHUNK_BYTES) if pos + _CHUNK_BYTES < size else None
        if cut is None:
            # The rest: all its events but the last in one more chunk, so that the tail
            # decoded below holds a single event (and little else can go wrong there).
            if size - pos > 2 * _CHUNK_BYTES:  # not one event per line: the general path
                return None
            cut = _last_boundary(data, pos, size)
            if cut is None:
                break
        try:
            chunk = _decode_in_place(path, data, pos, cut)
        except msgspec.DecodeError:
            return None
        cols.add(chunk)
        del chunk
        pos = cut.end() - 2  # whitespace just before the next event's "{"
        released = _release(data, pos, released)
    tail = _decode_tail(path, head, data, pos, cols)
    if tail is None:
        return None
    return head, start, tail[0] + tail[1]


#: Read this far into a gzip stream at most looking for ``"traceEvents"`` before giving up.
_HEADER_MAX = 64 << 20


def _read_gzip_layout(path: str, raw: bytearray, cols: _Columns) -> _Head | None:
    """:func:`_read_kineto_layout` on a gzip file decompressed piece by piece: only the part of
    the JSON not decoded yet is held (a chunk and a piece), never the whole document, which is
    often 10x the file. None (nothing trusted) for anything but Kineto's layout in UTF-8; the
    caller then decompresses the whole file and takes the general path."""
    pieces = gunzip_pieces(raw, path)
    buf = bytearray()
    eof = False

    def more() -> None:
        nonlocal eof
        piece = next(pieces, None)
        if piece is None:
            eof = True
        else:
            buf.extend(piece)

    while len(buf) < 4 and not eof:
        more()
    if _unicode_encoding(bytes(buf[:4])) is not None or bytes(buf[:3]) == b"\xef\xbb\xbf":
        return None
    while True:  # the header
        i = buf.find(b'"traceEvents"')
        m = _EVENTS_KEY.match(buf, i) if i >= 0 else None
        if m is not None:
            break
        if eof or len(buf) > _HEADER_MAX:
            return None
        more()
    head = _decode_header(buf, i)
    if head is None or _first_byte(buf) != b"{":
        return None
    pos = m.end() - 1
    while True:
        # A chunk and some slack in which to find the boundary that ends it.
        while not eof and len(buf) - pos < _CHUNK_BYTES + max(_CHUNK_BYTES // 8, 1 << 16):
            more()
        size = len(buf)
        cut = _EVENT_SPLIT.search(buf, pos + _CHUNK_BYTES) if pos + _CHUNK_BYTES < size else None
        if cut is None:
            if not eof:
                if size - pos > 4 * _CHUNK_BYTES:  # not one event per line
                    return None
                more()
                continue
            if size - pos > 2 * _CHUNK_BYTES:
                return None
            cut = _last_boundary(buf, pos, size)
            if cut is None:
                break
        try:
            chunk = _decode_in_place(path, buf, pos, cut)
        except msgspec.DecodeError:
            return None
        cols.add(chunk)
        del chunk
        pos = cut.end() - 2
        del buf[:pos]  # cheap: a bytearray drops its front by moving its start
        pos = 0
    if _decode_tail(path, head, buf, pos, cols) is None:
        return None
    for _ in pieces:  # a truncated stream raises here, like the whole-file path
        pass
    return head


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
    if all(type(v) is int for v in values):
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    return np.array(
        [
            v if type(v) is int and 0 <= v < 2**62 else (hash(str(v)) % 2**61) + 2**62
            for v in values
        ],
        dtype=np.int64,
    )


def _int_array(values: list[Any], default: int, loose: bool = False) -> np.ndarray:
    """int64 column; odd values (strings, floats, out of range) through :func:`_to_int`.
    ``loose``: values from the lenient decoder, where a JSON ``true`` must not become 1."""
    if not (loose and any(type(v) is not int for v in values)):
        try:
            return np.array(values, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            pass
    return np.array([_to_int(v, default) for v in values], dtype=np.int64)


def _to_float(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        try:
            return float(v)
        except OverflowError:  # an int beyond float range
            return math.nan
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return math.nan
    return math.nan


def _float_array(values: list[Any]) -> np.ndarray:
    """float64 column from leniently decoded values: numbers as they are, numeric strings
    parsed, anything else (null, true, text, a list...) NaN."""
    if all(type(v) is float or type(v) is int for v in values):
        try:
            return np.array(values, dtype=np.float64)
        except OverflowError:
            pass
    return np.array([_to_float(v) for v in values], dtype=np.float64)


def _int_column(items: list[Any], get: attrgetter[Any], n: int, loose: bool) -> np.ndarray:
    """An int64 column of one attribute; -1 (or the digits of a string) for odd values."""
    if not loose:
        try:
            return np.fromiter(map(get, items), np.int64, n)
        except (TypeError, ValueError, OverflowError):
            pass
    return _int_array(list(map(get, items)), -1, loose)


def _str_list(values: list[Any]) -> list[str]:
    return [v if type(v) is str else ("" if v is None else str(v)) for v in values]


def _pick(items: list[Any], idx: np.ndarray) -> list[Any]:
    """``[items[i] for i in idx]``, at C speed."""
    if len(idx) == 0:
        return []
    if len(idx) == 1:
        return [items[int(idx[0])]]
    return list(itemgetter(*idx.tolist())(items))


# --------------------------------------------------------------------------------------------
# Chunk -> columns


class _Codes(dict[str, int]):
    """str -> consecutive code, a new code for each new key (``codes[key]`` never fails)."""

    def __missing__(self, key: str) -> int:
        code = len(self)
        self[key] = code
        return code


_CAT_NAMES: tuple[str, ...] = CATEGORIES
_STEP_MARKER = re.compile(r"^ProfilerStep#\d+$")
_MODEL_CODE: dict[str, int] = {c: i for i, c in enumerate(_CAT_NAMES)}
_SRC_CATS: tuple[str, ...] = tuple(CATEGORY_MAP)  # source categories known by name, codes 0..
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


def _model_lut(src: _Codes) -> np.ndarray:
    """Source category code -> model category code (-1: a category with no mapping)."""
    return np.array([_MODEL_CODE.get(CATEGORY_MAP.get(c, ""), -1) for c in src], dtype=np.int8)


_KNOWN_LUT = _model_lut(_Codes({c: i for i, c in enumerate(_SRC_CATS)}))
_NEEDS_CORR = np.array([_MODEL_CODE[c] for c in _FLOW_TARGETS], dtype=np.int8)
_NEEDS_DEVICE = np.array([_MODEL_CODE[c] for c in _GPU_SIDE], dtype=np.int8)


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
    """Accumulates compact per-chunk column arrays of kept events.

    Each chunk's structs are dropped as soon as its columns are taken, so the only Python objects
    that accumulate are the distinct names and categories and the few flow / metadata /
    collective rows. Source categories and names are coded against tables shared by all chunks.
    """

    def __init__(self) -> None:
        self.src = _Codes({c: i for i, c in enumerate(_SRC_CATS)})
        self.names = _Codes()
        self.cat: list[np.ndarray] = []  # source category codes (int16)
        self.name: list[np.ndarray] = []
        self.ts: list[np.ndarray] = []
        self.dur: list[np.ndarray] = []
        self.pid: list[np.ndarray] = []
        self.tid: list[np.ndarray] = []
        self.device: list[np.ndarray] = []
        self.stream: list[np.ndarray] = []
        self.corr: list[np.ndarray] = []
        # Collective args of the few rows that have them, as arrays (no struct outlives its
        # chunk: kept ones would pin the allocator's pools and scatter later chunks' objects):
        # (rows, coll_name codes, bytes, process_group codes, seq, group_size).
        self.coll: list[tuple[np.ndarray, ...]] = []
        self.coll_names = _Codes({"": 0})
        self.pg_names = _Codes({"": 0})
        self.offset = 0
        # Flows: columns (is_finish, id, pid, tid, ts µs), one chunk per batch that has any.
        self.flows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.meta: list[tuple[str, Any, Any, Any]] = []  # (name, pid, tid, args.name)
        self.bad_args = 0
        self.too_deep = 0

    def add_flows(self, chunk: _Chunk) -> None:
        events = chunk.events
        if chunk.loose:
            _normalise_loose(events)
        flows = [e for e in events if e.cat in _FLOW_CATS and (e.ph == "s" or e.ph == "f")]
        if flows:
            self.flows.append(
                (
                    np.array([e.ph == "f" for e in flows], dtype=bool),
                    _id_array([e.id for e in flows]),
                    _int_array([e.pid for e in flows], -1, chunk.loose),
                    _int_array([e.tid for e in flows], -1, chunk.loose),
                    _float_array([e.ts for e in flows]),
                )
            )

    def lacks_correlation(self) -> bool:
        """Whether a launch or device row has no ``args.correlation`` (flows may supply it)."""
        lut = _model_lut(self.src)
        return any(
            bool((np.isin(lut[c], _NEEDS_CORR) & (k < 0)).any())
            for c, k in zip(self.cat, self.corr, strict=True)
        )

    def add(self, chunk: _Chunk) -> None:
        """Take the columns of one chunk."""
        events = chunk.events
        loose = chunk.loose
        self.bad_args += chunk.bad_args
        self.too_deep += chunk.too_deep
        if loose:
            _normalise_loose(events)
        for e in [e for e in events if e.ph == "M"]:
            if e.name in ("thread_name", "process_name") and e.args is not None:
                self.meta.append((e.name, e.pid, e.tid, e.args.name))
        ignored = _IGNORED_CATS
        kept = [e for e in events if e.ph == "X" and e.cat not in ignored]
        n = len(kept)
        if not n:
            return
        cat = np.fromiter(map(self.src.__getitem__, map(_GET_CAT, kept)), np.int16, n)
        names = list(map(_GET_NAME, kept))
        if loose:
            names = _str_list(names)
        self.name.append(np.fromiter(map(self.names.__getitem__, names), np.int32, n))
        del names
        if loose:
            self.ts.append(_float_array(list(map(_GET_TS, kept))))
            self.dur.append(_float_array(list(map(_GET_DUR, kept))))
        else:
            self.ts.append(np.fromiter(map(_GET_TS, kept), np.float64, n))
            self.dur.append(np.fromiter(map(_GET_DUR, kept), np.float64, n))
        self.pid.append(_int_column(kept, _GET_PID, n, loose))
        self.tid.append(_int_column(kept, _GET_TID, n, loose))
        # args: correlation only for launches and device rows, device / stream only for device
        # rows (the rest keep -1); unknown categories (lut -1) are dropped later, skip them too.
        lut = _KNOWN_LUT if len(self.src) == len(_SRC_CATS) else _model_lut(self.src)
        model = lut[cat]
        corr = np.full(n, -1, dtype=np.int64)
        device = np.full(n, -1, dtype=np.int64)
        stream = np.full(n, -1, dtype=np.int64)
        sel = np.flatnonzero(np.isin(model, _NEEDS_CORR))
        if len(sel):
            picked = _pick(kept, sel)
            corr[sel] = _int_column(picked, _GET_CORR, len(sel), loose)
            gpu = np.isin(model[sel], _NEEDS_DEVICE)
            if gpu.any():
                g = _pick(picked, np.flatnonzero(gpu))
                device[sel[gpu]] = _int_column(g, _GET_DEVICE, len(g), loose)
                stream[sel[gpu]] = _int_column(g, _GET_STREAM, len(g), loose)
            del picked
        rest = np.flatnonzero(~np.isin(model, _NEEDS_CORR) & np.isin(model, _NEEDS_DEVICE))
        if len(rest):  # gpu_user_annotation: on device lanes, no correlation needed
            r = _pick(kept, rest)
            device[rest] = _int_column(r, _GET_DEVICE, len(r), loose)
            stream[rest] = _int_column(r, _GET_STREAM, len(r), loose)
        self.corr.append(corr)
        self.device.append(device)
        self.stream.append(stream)
        self.cat.append(cat)
        # Collective args: PyTorch writes them on record_param_comms ops, and Kineto copies
        # them onto the kernels (and MTIA hccl:: events) those ops launch; look only there.
        rpc = self.names.get("record_param_comms", -1)
        cand = np.flatnonzero((model == _MODEL_CODE["kernel"]) | (self.name[-1] == rpc))
        if len(cand):
            cargs = list(map(_GET_ARGS, _pick(kept, cand)))
            has = [i for i, a in enumerate(cargs) if a.coll_name is not None]
            if has:
                args = [cargs[i] for i in has]
                self.coll.append(
                    (cand[has] + self.offset,)
                    + _collective_values(args, self.coll_names, self.pg_names)
                )
                del args
            del cargs
        self.offset += n


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


def _from_codes(codes: np.ndarray, categories: Any) -> pd.Categorical:
    # Same category dtype as make_events (pandas infers it), so timelines concatenate.
    return pd.Categorical.from_codes(codes, categories=pd.Index(list(categories)))


def _short(v: Any) -> str:
    if v is _UNREADABLE:
        return "(unreadable: a number beyond float range?)"
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _int_field(v: Any, lo: int, hi: int) -> int | None:
    """An integer metadata field within [lo, hi] (an int, an integral float or a string of
    digits), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    elif isinstance(v, str) and v.strip().isdigit():
        v = int(v.strip())
    if type(v) is int and lo <= v <= hi:
        return v
    return None


def _base_ns(head: _Meta, notes: list[str]) -> tuple[int, bool]:
    """(baseTimeNanoseconds, whether it is usable). Absent or 0: (0, False), silently (the
    timestamps may be absolute); present but not an integer in [1, 2**63 - 1]: (0, False) and a
    note, since the clock can then not be trusted to be unix time."""
    v = head.baseTimeNanoseconds
    if v is None:
        return 0, False
    base = _int_field(v, 0, _INT64_MAX) if not isinstance(v, str) else None
    if base is None:
        notes.append(
            f"baseTimeNanoseconds {_short(v)} is not a usable time (an integer number of ns "
            "since 1970 is expected): times are relative to the trace's own clock, not unix "
            "time, and cannot be aligned with other ranks"
        )
        return 0, False
    return base, base > 0


def _count_note(counts: Counter[str]) -> str:
    return ", ".join(
        f"{k} ({v})" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def _build(p: str, head: _Meta, cols: _Columns) -> Timeline:
    n = cols.offset
    if n == 0:
        raise TraceFormatError(
            p,
            "no events this tool reads (no kernel, memcpy, memset, CUDA runtime, cpu_op or "
            "user_annotation events)",
            "profile with activities=[CPU, CUDA] (CPU alone for gloo runs) and record at least one step",
        )
    notes: list[str] = []
    src = np.concatenate(cols.cat)
    src_names = list(cols.src)
    cat = _model_lut(cols.src)[src]  # model category code, -1 for a category with no mapping
    ts = np.concatenate(cols.ts)
    dur = np.concatenate(cols.dur)
    pid_raw = np.concatenate(cols.pid)
    tid_raw = np.concatenate(cols.tid)
    device = np.concatenate(cols.device)
    stream = np.concatenate(cols.stream)
    corr = np.concatenate(cols.corr)
    name_codes = np.concatenate(cols.name)
    cols.cat = cols.ts = cols.dur = cols.pid = cols.tid = []
    cols.device = cols.stream = cols.corr = cols.name = []
    coll = _collective_columns(n, cols)

    # Times: exact int64 ns, or the event is dropped (counted) -- never a made-up time.
    base, base_ok = _base_ns(head, notes)
    start, ok = _checked_ns(ts, base)
    neg = dur < 0  # NaN compares False
    dur_ns, ok_dur = _checked_ns(np.where(neg, 0.0, dur), 0)
    ok &= ok_dur & (dur_ns <= _INT64_MAX - np.maximum(start, 0))
    end = start + np.where(ok, dur_ns, 0)
    known = cat >= 0
    bad_time = ~ok & known
    if bad_time.any():
        by_cat = Counter(_CAT_NAMES[c] for c in cat[bad_time].tolist())
        notes.append(
            f"dropped {int(bad_time.sum())} events with unusable ts/dur (null, NaN, "
            f"non-numeric or out of range): {_count_note(by_cat)}"
        )
    neg &= ok & known
    if neg.any():
        notes.append(f"{int(neg.sum())} events with a negative duration were given duration 0.")

    # Device events this tool cannot place: categories with no mapping that lie on a device's
    # pid (or are known to be device-side), and hpu_op events on a device's pid.
    hpu = src == cols.src["hpu_op"]
    hpu_dev = np.zeros(n, dtype=bool)
    not_analysed = hpu_dev
    if not known.all() or hpu.any():
        host_cats = np.isin(cat, [_MODEL_CODE["cpu_op"], _MODEL_CODE["annotation"]])
        launch = np.isin(cat, [_MODEL_CODE["runtime"], _MODEL_CODE["driver"]])
        host_pids = pd.unique(pid_raw[host_cats | (launch & ~hpu)])
        off_host = ~np.isin(pid_raw, host_pids) if len(host_pids) else np.ones(n, dtype=bool)
        device_cats = [cols.src.get(c, -1) for c in _UNMAPPED_DEVICE_CATS]
        unmapped_dev = ~known & (off_host | np.isin(src, device_cats))
        hpu_dev = hpu & off_host & bool(len(host_pids))
        not_analysed = unmapped_dev | hpu_dev
    if not_analysed.any():
        by_src = Counter(src_names[c] for c in src[not_analysed].tolist())
        notes.append(
            f"{int(not_analysed.sum())} device events in categories {_count_note(by_src)} were "
            "not analysed (Kineto does not define them as kernels, copies or launches)"
        )
    keep = ok & known & ~hpu_dev
    accel = keep & np.isin(src, [cols.src[c] for c in _ACCELERATOR_CATS])
    if accel.any():
        by_src = Counter(src_names[c] for c in src[accel].tolist())
        parts = [
            f"{k} ({v} {_AS_WHAT.get(CATEGORY_MAP[k], 'as ' + CATEGORY_MAP[k])})"
            for k, v in sorted(by_src.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
        notes.append("device work read from Kineto categories " + ", ".join(parts))
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
    if not keep.all():
        cat, src, ts, start, end = cat[keep], src[keep], ts[keep], start[keep], end[keep]
        pid_raw, tid_raw, device, stream = pid_raw[keep], tid_raw[keep], device[keep], stream[keep]
        corr, name_codes = corr[keep], name_codes[keep]
        cc, ccats, cb, pc, pcats, sq, gs = coll
        coll = (cc[keep], ccats, cb[keep], pc[keep], pcats, sq[keep], gs[keep])
        n = int(keep.sum())
    if n == 0:
        raise TraceFormatError(
            p,
            "no usable events: every event this tool reads was dropped (see why above)"
            if not notes
            else "no usable events: " + "; ".join(notes),
            "check how the trace was written; re-collect it",
        )
    del keep, ok, known

    if base_ok:
        clock = "unix"
    elif head.baseTimeNanoseconds is None or head.baseTimeNanoseconds == 0:
        # No base: absolute epoch-µs timestamps (older traces) are unix time by themselves.
        clock = "unix" if float(np.median(ts)) > _EPOCH_US_THRESHOLD else "relative"
    else:
        clock = "relative"  # a base was given but is unusable (said in a note)
    del ts

    gpu_side = np.isin(cat, [_MODEL_CODE[c] for c in _GPU_SIDE])
    # Old traces: correlation from ac2g / async_cpu_to_gpu flows, matched on the raw (pid, tid).
    flow_note = _apply_flows(cols.flows, cat, corr, pid_raw, tid_raw, start, end, base)
    if flow_note:
        notes.append(flow_note)

    # Host pid of the rank: GPU events carry the device as pid in Kineto; give them the process
    # that launched them so (pid, correlation) joins kernels to launches.
    launch = np.isin(cat, [_MODEL_CODE["runtime"], _MODEL_CODE["driver"]])
    host_pid = _mode(pid_raw[launch & (pid_raw >= 0)])
    if host_pid is None:
        host_pid = _mode(pid_raw[~gpu_side & (pid_raw >= 0)])
    if host_pid is None:
        host_pid = 0
    device = np.where(gpu_side & (device < 0), pid_raw, device)
    stream = np.where(gpu_side & (stream < 0), tid_raw, stream)
    bad_dev = gpu_side & (device > _INT32_MAX)
    if bad_dev.any():
        notes.append(
            f"{int(bad_dev.sum())} device events have a device id beyond int32; given device -1"
        )
        device = np.where(bad_dev, -1, device)
    pid = np.where(gpu_side, host_pid, pid_raw)
    tid = np.where(gpu_side, -1, tid_raw)
    device = np.where(gpu_side, device, -1)
    stream = np.where(gpu_side, stream, -1)
    del pid_raw, tid_raw

    tnames = _thread_names(cols.meta)
    lane, thread_name = _lanes(gpu_side, pid, tid, device, stream, tnames)

    coll_codes, coll_cats, coll_bytes, pg_codes, pg_cats, seq, group_size = coll
    filled = _collective_args_from_launching_op(
        cat, pid, tid, start, end, corr, host_pid, coll_codes, coll_bytes, pg_codes, seq, group_size
    )
    if filled:
        notes.append(
            f"collective metadata of {filled} kernels taken from the record_param_comms op "
            "that launched them"
        )

    categories = list(cols.names)
    # Older traces record ProfilerStep#N as an operator; it is the profiler's step range.
    step_codes = [i for i, v in enumerate(categories) if _STEP_MARKER.match(v)]
    if step_codes:
        is_step = np.isin(name_codes, step_codes) & (cat == _MODEL_CODE["cpu_op"])
        cat[is_step] = _MODEL_CODE["annotation"]
    names = _from_codes(name_codes, categories=categories)
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
        "coll_name": _from_codes(coll_codes, categories=coll_cats),
        "coll_bytes": coll_bytes,
        "process_group": _from_codes(pg_codes, categories=pg_cats),
        "seq": seq,
        "group_size": group_size,
    }
    return Timeline(make_events(n, columns), (info,))


_CollColumns = tuple[
    np.ndarray, list[str], np.ndarray, np.ndarray, list[str], np.ndarray, np.ndarray
]


def _collective_values(
    args: list[Any], coll_names: _Codes, pg_names: _Codes
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
        nel = max(_to_int(a.in_nelems, -1), _to_int(a.out_nelems, -1))
        size = DTYPE_BYTES.get(str(a.dtype), -1)
        total = nel * size if nel >= 0 and size > 0 else -1
        nbytes[r] = total if total <= _INT64_MAX else -1
        s = a.seq if a.seq is not None else a.seq_lower
        seq[r] = _to_int(s, -1) if s is not None else -1
        gs = _int_field(a.group_size, 1, MAX_WORLD_SIZE) if a.group_size is not None else None
        group[r] = -1 if gs is None else gs
    return codes, nbytes, pgs, seq, group


def _collective_columns(n: int, cols: _Columns) -> _CollColumns:
    """The collective columns for all ``n`` rows, from the per-chunk values of the few rows that
    have any (see :func:`_collective_values`)."""
    coll_codes = np.zeros(n, dtype=np.int32)
    pg_codes = np.zeros(n, dtype=np.int32)
    coll_bytes = np.full(n, -1, dtype=np.int64)
    seq = np.full(n, -1, dtype=np.int64)
    group_size = np.full(n, -1, dtype=np.int64)
    for rows, codes, nbytes, pgs, sq, group in cols.coll:
        coll_codes[rows] = codes
        coll_bytes[rows] = nbytes
        pg_codes[rows] = pgs
        seq[rows] = sq
        group_size[rows] = group
    cols.coll = []
    return (
        coll_codes,
        list(cols.coll_names),
        coll_bytes,
        pg_codes,
        list(cols.pg_names),
        seq,
        group_size,
    )


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
    targets = np.isin(cat, [_MODEL_CODE[c] for c in _FLOW_TARGETS]) & (corr < 0)
    if not flows or not targets.any():
        return None
    fid = np.concatenate([f[1] for f in flows])
    fpid = np.concatenate([f[2] for f in flows])
    ftid = np.concatenate([f[3] for f in flows])
    fns, ok = _checked_ns(np.concatenate([f[4] for f in flows]), base_ns)
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


#: How many enclosing ops to step back through when collective ops nest on one thread.
_NEST_DEPTH = 8


def _collective_args_from_launching_op(
    cat: np.ndarray,
    pid: np.ndarray,
    tid: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    corr: np.ndarray,
    host_pid: int,
    coll_codes: np.ndarray,
    coll_bytes: np.ndarray,
    pg_codes: np.ndarray,
    seq: np.ndarray,
    group_size: np.ndarray,
) -> int:
    """Give kernels without collective metadata that of the ``record_param_comms`` op that
    launched them (in place); returns how many kernels got it.

    ROCm traces name every RCCL kernel ``ncclDevKernel_Generic`` and copy no collective args
    onto it; the launching CPU op carries them (Collective name, In/Out msg nelems, dtype, Group
    size, Process Group Name, Seq). The kernel's launch (same correlation, the host process)
    lies inside that op on the same thread: for each launch, the latest-starting collective op
    on its thread that starts before it is found by binary search and kept if it also ends after
    it; when ops nest, up to :data:`_NEST_DEPTH` enclosing ones are tried.
    """
    kern = np.flatnonzero((cat == _MODEL_CODE["kernel"]) & (coll_codes == 0) & (corr >= 0))
    ops = np.flatnonzero((cat == _MODEL_CODE["cpu_op"]) & (coll_codes > 0) & (pid == host_pid))
    if len(kern) == 0 or len(ops) == 0:
        return 0
    launch = np.flatnonzero(
        np.isin(cat, [_MODEL_CODE["runtime"], _MODEL_CODE["driver"]])
        & (corr >= 0)
        & (pid == host_pid)
    )
    if len(launch) == 0:
        return 0
    order = np.argsort(corr[launch], kind="stable")
    lcorr = corr[launch][order]
    at = np.minimum(np.searchsorted(lcorr, corr[kern]), len(lcorr) - 1)
    has = lcorr[at] == corr[kern]
    kern, lrow = kern[has], launch[order][at[has]]
    if len(kern) == 0:
        return 0
    filled = 0
    for t in np.unique(tid[lrow]).tolist():
        on = lrow[tid[lrow] == t]
        kon = kern[tid[lrow] == t]
        o = ops[tid[ops] == t]
        if len(o) == 0:
            continue
        o = o[np.argsort(start[o], kind="stable")]
        ostart, oend = start[o], end[o]
        pos = np.searchsorted(ostart, start[on], side="right") - 1
        found = np.full(len(on), -1, dtype=np.int64)
        for _ in range(_NEST_DEPTH):
            look = (found < 0) & (pos >= 0)
            if not look.any():
                break
            p = np.where(look, pos, 0)
            inside = look & (oend[p] >= end[on])
            found[inside] = o[p[inside]]
            pos = np.where(look & ~inside, pos - 1, -1)
        ok = found >= 0
        dst, srcs = kon[ok], found[ok]
        coll_codes[dst] = coll_codes[srcs]
        coll_bytes[dst] = coll_bytes[srcs]
        pg_codes[dst] = pg_codes[srcs]
        seq[dst] = seq[srcs]
        group_size[dst] = group_size[srcs]
        filled += int(ok.sum())
    return filled


def _trace_info(
    p: str,
    head: _Meta,
    cat: np.ndarray,
    device: np.ndarray,
    host_pid: int,
    clock: str,
    notes: list[str],
) -> TraceInfo:
    dist = head.distributedInfo if isinstance(head.distributedInfo, dict) else None
    if head.distributedInfo is not None and dist is None:
        notes.append(f"distributedInfo {_short(head.distributedInfo)} is not an object; ignored")
    rank: int | None = None
    world: int | None = None
    backend: str | None = None
    if dist is not None:
        r = dist.get("rank")
        if r is not None:
            rank = _int_field(r, 0, MAX_WORLD_SIZE - 1)
            if rank is None:
                notes.append(
                    f"distributedInfo.rank {_short(r)} is not a usable rank (an integer from 0 "
                    f"to {MAX_WORLD_SIZE - 1} is expected); ignored"
                )
        w = dist.get("world_size")
        if w is not None:
            world = _int_field(w, 1, MAX_WORLD_SIZE)
            if world is None:
                notes.append(
                    f"distributedInfo.world_size {_short(w)} is not a usable world size (an "
                    f"integer from 1 to {MAX_WORLD_SIZE} is expected); ignored"
                )
        b = dist.get("backend")
        backend = str(b) if b is not None else None
    if rank is not None:
        source = "distributedInfo"
    else:
        rank = rank_from_filename(p)
        if rank is not None and rank >= MAX_WORLD_SIZE:
            rank = None
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
    gpu_rows = np.isin(cat, [_MODEL_CODE[c] for c in _GPU_ACTIVITY])
    device_kind = "gpu" if gpu_rows.any() else "cpu"
    used = sorted(set(np.unique(device[gpu_rows]).tolist())) if gpu_rows.any() else []
    names = _device_names(head.deviceProperties)
    devices = tuple(names.get(d, f"device {d}") for d in used)
    version = head.schemaVersion
    return TraceInfo(
        path=p,
        format="kineto",
        rank=rank,
        world_size=world,
        backend=backend,
        rank_source=source,
        device_kind=device_kind,
        devices=devices,
        device_ids=tuple(used),
        format_version=None if version is None else str(version),
        clock=clock,
        pid=host_pid,
        device=used[0] if used else None,
        notes=tuple(notes),
    )


def _device_names(props: Any) -> dict[int, str]:
    """device id -> ``name (memory GB)`` from ``deviceProperties`` (an entry without ``id`` is
    the device of its position in the list, as in traces written before Kineto added it)."""
    out: dict[int, str] = {}
    if not isinstance(props, list):
        return out
    for i, d in enumerate(props):
        if not isinstance(d, dict):
            continue
        did = _int_field(d.get("id", i), 0, _INT32_MAX)
        if did is None or did in out:
            continue
        name = str(d.get("name", f"device {did}"))
        mem = d.get("totalGlobalMem")
        if isinstance(mem, (int, float)) and not isinstance(mem, bool) and 0 < mem < 1e18:
            name += f" ({mem / 1e9:.1f} GB)"
        out[did] = name
    return out


# --------------------------------------------------------------------------------------------
# The reader


def read_kineto(path: str | Path, data: bytes | bytearray | None = None) -> Timeline:
    """Read one PyTorch profiler (Kineto) Chrome-trace JSON file (``.json`` / ``.json.gz``).

    One file is one rank. ``path`` may be ``-`` (standard input) or a pipe; ``data``, when given,
    is the file's content already read (gzip or not) and ``path`` only names it. Returns a
    :class:`Timeline` whose events follow the column contract of :mod:`traceoverlap.model`
    (integer ns; unix-epoch ns when the trace has ``baseTimeNanoseconds`` or absolute epoch-µs
    timestamps, see ``TraceInfo.clock``). Raises :class:`TraceFormatError` naming the file for
    anything that is not a readable trace.
    """
    p = label(path)
    raw: Buffer = read_raw(path) if data is None else _as_bytearray(data)
    if is_gzip(raw):
        cols = _Columns()
        head = _read_gzip_layout(p, raw, cols)  # type: ignore[arg-type]
        if head is not None and not cols.lacks_correlation():
            return _build(p, _Meta(head), cols)
        del cols, head  # start over on the whole document (flows need a second pass)
    buf = prepare(raw, p)
    del raw
    try:
        meta, cols = _read_events(p, buf)
    finally:
        if isinstance(buf, mmap.mmap):
            try:
                buf.close()  # the input goes before the table is built: it is not needed again
            except BufferError:  # a view still alive somewhere: the map goes with its last user
                pass
        del buf
    return _build(p, meta, cols)


def _as_bytearray(data: bytes | bytearray) -> bytearray:
    return data if isinstance(data, bytearray) else bytearray(data)


def _read_events(p: str, data: Buffer) -> tuple[_Meta, _Columns]:
    cols = _Columns()
    fast = _read_kineto_layout(p, data, cols) if _first_byte(data) == b"{" else None
    src: Any = data
    if fast is not None:
        head, start, end = fast
    else:
        cols = _Columns()
        head, src = _decode_head(p, data)
        if bytes(memoryview(head.traceEvents)[:1]) != b"[":  # a Raw spans exactly its value
            raise NotATraceError(
                p,
                "JSON without a `traceEvents` list: not a Chrome / Kineto trace",
                "pass the file written by torch.profiler (export_chrome_trace / "
                "tensorboard_trace_handler)",
            )
        src, start, end = _span(src, head.traceEvents)
        head.traceEvents = msgspec.Raw(b"")
        for chunk in _event_batches(p, src, start, end):
            cols.add(chunk)
            del chunk
    head.traceEvents = msgspec.Raw(b"")
    if cols.lacks_correlation():
        # Older traces link launches to GPU work only through flow events: a second, light
        # pass reads them. Newer traces (args.correlation everywhere) never pay for it.
        for chunk in _event_batches(p, src, start, end, _FLOWS):
            cols.add_flows(chunk)
            del chunk
    return _Meta(head), cols
