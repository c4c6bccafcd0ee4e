"""A JSON array of events -> typed structs naming only what the analysis needs.

msgspec's C decoder skips every field the structs do not name without building Python objects.
Values of an unexpected type send the chunk through lenient twins of the structs (any JSON value
anywhere), and, if even those fail, through raw per-field decoding; invalid UTF-8 is replaced; an
event nested too deeply for the decoder is dropped and counted. Well-formed chunks pay for none of
this.
"""

# no `from __future__ import annotations`: msgspec would evaluate every annotation string of
# every struct (and of the 25 skipped-phase structs) at import, ~10 ms

import math
import re
from typing import Any, ClassVar, Union

import msgspec

from ...core.errors import TraceFormatError

#: ``args.grid`` / ``args.block`` when absent
NO_DIMS = (-1, -1, -1)
#: ``args["Input Dims"]`` when absent (profiles without ``record_shapes``)
NO_INPUT_DIMS = msgspec.Raw(b"")


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
    # kernels' launch shape (only kernels and some launches carry them): three ints each
    grid: tuple[int, int, int] = NO_DIMS
    block: tuple[int, int, int] = NO_DIMS
    # CPU ops' input shapes (``record_shapes=True``), kept raw: only hashed, per distinct text
    input_dims: msgspec.Raw = msgspec.field(default=NO_INPUT_DIMS, name="Input Dims")
    # ``cuda_sync`` stream waits (``enable_cuda_sync_events``): the stream and the event record
    # call waited on
    wait_stream: int = msgspec.field(default=-1, name="wait_on_stream")
    wait_corr: int = msgspec.field(default=-1, name="wait_on_cuda_event_record_corr_id")
    # and their element types (``Input type``): raw, read only for communication ops' bytes
    input_type: msgspec.Raw = msgspec.field(default=NO_INPUT_DIMS, name="Input type")
    # the scalar inputs' values (``Concrete Inputs``): raw, read only for the peer and tag of the
    # point-to-point ops (``c10d::send`` / ``c10d::recv_``)
    concrete: msgspec.Raw = msgspec.field(default=NO_INPUT_DIMS, name="Concrete Inputs")


_NO_ARGS = _Args()


# No ``id``: only flows need it, and they are read in a second pass, only by traces that need
# them. ts / dur default to NaN: an event without them is dropped, never given time 0.
#
# ``ph`` is the tag of a tagged union: msgspec picks the struct from it, so an ``X`` event gets
# the columns' fields, an ``M`` event the metadata's, and every other phase (a third of a
# trace's events are ``s`` / ``f`` flow ends) an empty struct whose fields the C decoder skips
# without building a single string (measured: ~40% less decode time, and less to free). A phase
# outside :data:`PHASES`, or an event without ``ph``, fails validation and sends its chunk to
# the lenient decoder, which reads it as before. ``ph`` stays readable as a class attribute.
class _Event(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    ph: ClassVar[str] = "X"
    cat: str = ""
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = math.nan
    dur: float = math.nan
    args: _Args = _NO_ARGS  # shared, frozen: events without args allocate nothing


class _MetaEvent(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    """A metadata event: the thread / process names."""

    ph: ClassVar[str] = "M"
    cat: ClassVar[str] = ""
    ts: ClassVar[float] = math.nan
    dur: ClassVar[float] = math.nan
    name: str = ""
    pid: int | str = -1
    tid: int | str = -1
    args: _Args = _NO_ARGS


class _Skipped(msgspec.Struct, gc=False, frozen=True):
    """An event of a phase the read does not use: no field is decoded; it reads as an event
    with every field missing."""

    ph: ClassVar[str] = ""
    cat: ClassVar[str] = ""
    name: ClassVar[str] = ""
    pid: ClassVar[int] = -1
    tid: ClassVar[int] = -1
    ts: ClassVar[float] = math.nan
    dur: ClassVar[float] = math.nan
    args: ClassVar[_Args] = _NO_ARGS


#: The phases of the Chrome trace event format (its "Event Descriptions"), legacy ones included.
PHASES = tuple("BEXiICbneSTpFstfPONDMVvRc()")
_SKIPPED = tuple(
    msgspec.defstruct(
        f"_Skipped{ord(ph)}",
        [],
        bases=(_Skipped,),
        namespace={"ph": ph},
        tag_field="ph",
        tag=ph,
        gc=False,
        frozen=True,
    )
    for ph in PHASES
    if ph not in ("X", "M")
)
ANY_EVENT: Any = Union[(_Event, _MetaEvent, *_SKIPPED)]  # noqa: UP007 (a runtime union)


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
class LooseArgs(msgspec.Struct, gc=False):
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
    grid: Any = NO_DIMS
    block: Any = NO_DIMS
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    wait_stream: Any = msgspec.field(default=-1, name="wait_on_stream")
    wait_corr: Any = msgspec.field(default=-1, name="wait_on_cuda_event_record_corr_id")
    input_type: Any = msgspec.field(default=None, name="Input type")
    concrete: Any = msgspec.field(default=None, name="Concrete Inputs")


LOOSE_EMPTY = LooseArgs()


class _LooseEvent(msgspec.Struct, gc=False):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = -1
    tid: Any = -1
    ts: Any = math.nan
    dur: Any = math.nan
    id: Any = None
    args: LooseArgs | None = msgspec.field(default_factory=LooseArgs)


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


class Head(msgspec.Struct):
    """Top level. The events stay one raw byte span (msgspec validates and skips it without
    building objects); they are decoded afterwards in chunks (:mod:`._document`). The metadata
    fields stay raw too (empty when absent), decoded one by one by :class:`._metadata.Meta`, so
    that one unreadable value (a number beyond float range...) costs only that field."""

    traceEvents: msgspec.Raw = msgspec.Raw(b"")
    schemaVersion: msgspec.Raw = msgspec.Raw(b"")
    deviceProperties: msgspec.Raw = msgspec.Raw(b"")
    distributedInfo: msgspec.Raw = msgspec.Raw(b"")
    baseTimeNanoseconds: msgspec.Raw = msgspec.Raw(b"")
    host_name: msgspec.Raw = msgspec.Raw(b"")


#: The top-level fields read besides the events.
META_FIELDS = (
    "schemaVersion",
    "deviceProperties",
    "distributedInfo",
    "baseTimeNanoseconds",
    "host_name",
)

HEAD = msgspec.json.Decoder(Head)
_ANY = msgspec.json.Decoder()
RAW = msgspec.json.Decoder(msgspec.Raw)
RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
EVENTS = msgspec.json.Decoder(list[ANY_EVENT])
FLOWS = msgspec.json.Decoder(list[_FlowEvent])
_LOOSE_EVENTS = msgspec.json.Decoder(list[_LooseEvent])
_RAW_ARGS_EVENTS = msgspec.json.Decoder(list[_RawArgsEvent])
_LOOSE_ARGS = msgspec.json.Decoder(LooseArgs | None)

#: A decoder of a JSON array of events: :data:`EVENTS` (the read) or :data:`FLOWS` (the flows'
#: second pass); the chunk holds its structs or, after a fallback, the lenient ones.
EventsDecoder = msgspec.json.Decoder[list[Any]]


# A boundary between two events written one per line (Kineto's layout): "}" "," newline "{".
# A raw newline cannot occur inside a JSON string, so a match is structural; one at the wrong
# depth (inside an event) leaves a chunk with unbalanced brackets, which fails to decode and
# sends the rest of the array to the per-event path, so a wrong guess costs time, never data.
EVENT_SPLIT = re.compile(rb"\}[ \t\r]*,[ \t\r]*\n[ \t\r\n]*\{")


def too_deep(path: str) -> TraceFormatError:
    return TraceFormatError(
        path,
        "JSON nested too deeply for the decoder (over ~1000 levels of lists / objects)",
        "the file is damaged or not a profiler trace; re-collect or re-export it",
    )


class Chunk:
    """One decoded chunk: the events, whether the lenient decoder was needed, and how many events
    lost their args (not an object) or were dropped (nested too deeply)."""

    __slots__ = ("events", "loose", "bad_args", "too_deep")

    def __init__(self, events: list[Any], loose: bool, bad_args: int = 0, too_deep: int = 0):
        self.events = events
        self.loose = loose
        self.bad_args = bad_args
        self.too_deep = too_deep


def decode_chunk(
    path: str, buf: Any, typed: EventsDecoder = EVENTS, split_deep: bool = True
) -> Chunk:
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


def _decode_typed_or_loose(path: str, buf: Any, typed: EventsDecoder) -> Chunk:
    try:
        return _typed_else_loose(path, buf, typed)
    except UnicodeDecodeError:  # invalid UTF-8 (in a name...): replaced, as Kineto's viewer does
        fixed = bytes(buf).decode("utf-8", errors="replace").encode("utf-8")
        return _typed_else_loose(path, fixed, typed)


def _typed_else_loose(path: str, buf: Any, typed: EventsDecoder) -> Chunk:
    try:
        return Chunk(typed.decode(buf), False)
    except msgspec.ValidationError:
        return _decode_loose(path, buf)


def _decode_loose(path: str, buf: Any) -> Chunk:
    """Lenient decode of a JSON array of events (any value types; args that are not objects
    are dropped and counted)."""
    try:
        return Chunk(_LOOSE_EVENTS.decode(buf), True)
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
            args = _LOOSE_ARGS.decode(e.args) or LOOSE_EMPTY
        except (msgspec.ValidationError, msgspec.DecodeError):
            args = LOOSE_EMPTY
            bad += 1
        f = any_or_none
        out.append(
            _LooseEvent(
                f(e.ph), f(e.cat), f(e.name), f(e.pid), f(e.tid), f(e.ts), f(e.dur), f(e.id), args
            )
        )
    return Chunk(out, True, bad_args=bad)


def _decode_deep(path: str, buf: Any, typed: EventsDecoder) -> Chunk:
    """A chunk holding an event nested deeper than the decoder's recursion limit: decode it
    event by event (cut at Kineto's one-event-per-line boundaries), dropping the deep ones."""
    data = bytes(buf)
    cuts = [m.start() + 1 for m in EVENT_SPLIT.finditer(data)]
    starts = [1] + [data.index(b"{", c) for c in cuts]
    ends = cuts + [data.rindex(b"]")]
    events: list[Any] = []
    loose = False
    bad = deep = 0
    for s, e in zip(starts, ends, strict=True):
        piece = b"[" + data[s:e] + b"]"
        try:
            part = decode_chunk(path, piece, typed, split_deep=False)
        except msgspec.DecodeError:
            raise too_deep(path) from None  # a cut inside an event: cannot isolate it
        except RecursionError:
            deep += 1
            continue
        events.extend(part.events)
        bad += part.bad_args
        loose |= part.loose
    if loose:  # one chunk, one struct family: re-type the typed ones
        events = [_as_loose(e) for e in events]
    return Chunk(events, loose, bad_args=bad, too_deep=deep)


def _as_loose(e: Any) -> Any:
    if isinstance(e, (_Event, _MetaEvent, _Skipped)):
        a = e.args
        args = LooseArgs(
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
            a.grid,
            a.block,
            _raw_value(a.input_dims),
            a.wait_stream,
            a.wait_corr,
            _raw_value(a.input_type),
            _raw_value(a.concrete),
        )
        return _LooseEvent(e.ph, e.cat, e.name, e.pid, e.tid, e.ts, e.dur, None, args)
    return e


def _raw_value(raw: msgspec.Raw) -> Any:
    """A raw value decoded (None when absent or unreadable)."""
    return any_or_none(raw) if len(raw) else None


def any_or_none(raw: msgspec.Raw, default: Any = None) -> Any:
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
