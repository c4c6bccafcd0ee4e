"""Where the events are in the document, and cutting them into chunks to decode.

Two ways through a document:

- the one pass (:func:`read_kineto_layout`, :func:`read_gzip_layout`), for files laid out as
  Kineto writes them (a header, then one event per line): the events are decoded chunk by chunk
  straight from the buffer, or from a gzip stream decompressed piece by piece;
- the general path (:func:`decode_head`, then :func:`event_batches`) for anything else: the whole
  document is validated first, bare ``N/A`` / ``NaN`` words and invalid UTF-8 repaired if needed,
  and the errors explained.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np

from ...core._lazyre import lazy_compile
from ...core.errors import TraceFormatError
from .._bytes import Buffer, gunzip_pieces, is_plain_utf8
from ._columns import Columns
from ._decode import (
    EVENT_SPLIT,
    EVENTS,
    HEAD,
    META_FIELDS,
    RAW,
    RAW_LIST,
    Chunk,
    EventsDecoder,
    Head,
    decode_chunk,
    too_deep,
)

#: Bytes of JSON decoded at once: bounds the live structs to one chunk's worth (~9k events).
#: Small enough that a chunk's structs are still in the CPU's cache when their columns are
#: taken and when they are freed: reading the 145 MB benchmark trace costs ~8% less CPU than
#: with 8 MB chunks (measured at 1, 2 and 8 MB: 0.53, 0.53, 0.59 s).
CHUNK_BYTES = 2 << 20
#: Read this far into a gzip stream at most looking for ``"traceEvents"`` before giving up.
_HEADER_MAX = 64 << 20

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_ANY_EVENTS_KEY = lazy_compile(rb'"traceEvents"\s*:\s*')  # to the value, whatever it is
_TAIL_PREFIX = b'{"traceEvents": ['
_OPEN, _CLOSE, _COMMA = 0x5B, 0x5D, 0x2C  # "[", "]", ","
_LEADING_WS = lazy_compile(rb"\s*")
# Words some writers put where JSON wants a number: made null, only after a failed decode.
_BAREWORD = lazy_compile(rb"(?<=[\[:,])(\s*)(?:N/A|-?NaN|-?Infinity|-?nan|-?inf)(?=\s*[,\]}])")


def read_kineto_layout(path: str, data: Buffer, cols: Columns) -> tuple[Head, int, int] | None:
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
    return _read_in_place(path, _WholeBuffer(data), cols)


def read_gzip_layout(path: str, raw: Buffer, cols: Columns) -> Head | None:
    """:func:`read_kineto_layout` on a gzip file decompressed piece by piece (:class:`_GzipStream`).
    None (nothing trusted) for anything but Kineto's layout in UTF-8; the caller then
    decompresses the whole file and takes the general path."""
    src = _GzipStream(raw, path)
    while len(src.data) < 4 and not src.eof:
        src.more()
    if not is_plain_utf8(bytes(src.data[:4])):
        return None
    found = _read_in_place(path, src, cols)
    return None if found is None else found[0]


def _read_in_place(
    path: str, src: _WholeBuffer | _GzipStream, cols: Columns
) -> tuple[Head, int, int] | None:
    """The header, the events chunk by chunk, then the tail; (head, start, end) with the events
    array at ``[start, end)`` of the document, None if the layout is not Kineto's."""
    key = _find_events_key(src)
    head = _decode_header(src.data, key.start()) if key is not None else None
    if key is None or head is None:  # no "traceEvents" list, or not at the top level
        return None
    start = key.end() - 1  # the array's "["
    pos = _decode_chunks_in_place(path, src, start, cols)
    tail = _decode_tail(path, head, src.data, pos, cols) if pos is not None else None
    if tail is None:
        return None
    src.finish()
    return head, start, src.dropped + tail[0] + tail[1]


def _find_events_key(src: _WholeBuffer | _GzipStream) -> re.Match[bytes] | None:
    """``"traceEvents": [`` at the first occurrence of the key (a stream is read until it shows
    up, at most :data:`_HEADER_MAX` bytes); None if it is not there or not followed by a list."""
    while True:
        data = src.data
        i = data.find(b'"traceEvents"')
        key = _EVENTS_KEY.match(data, i) if i >= 0 else None
        if key is not None or src.eof or len(data) > _HEADER_MAX:
            return key
        src.more()


def _decode_header(data: Any, i: int) -> Head | None:
    """The top level before ``"traceEvents"`` at ``data[i]``, closed with ``"traceEvents": []}``:
    None unless that parses, i.e. unless the key is at the top level."""
    try:
        return HEAD.decode(b"".join((memoryview(data)[:i], b'"traceEvents": []}')))
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        return None


def _decode_chunks_in_place(
    path: str, src: _WholeBuffer | _GzipStream, pos: int, cols: Columns
) -> int | None:
    """Decode the events array that opens at ``data[pos]`` into ``cols`` chunk by chunk, in place
    (:func:`_decode_in_place`), all but the last event. Returns where the rest starts (the last
    event, the array's end and what follows it), None if the events are not one per line."""
    while True:
        src.fill(pos)
        data, size = src.data, len(src.data)
        cut = EVENT_SPLIT.search(data, pos + CHUNK_BYTES) if pos + CHUNK_BYTES < size else None
        if cut is None and not src.eof:
            if size - pos > 4 * CHUNK_BYTES:  # no boundary in four chunks' worth
                return None
            src.more()
            continue
        if cut is None:
            # The rest: all its events but the last in one more chunk, so that the tail holds a
            # single event (and little else can go wrong there).
            if size - pos > 2 * CHUNK_BYTES:
                return None
            cut = _last_boundary(data, pos, size)
            if cut is None:
                return pos
        try:
            _take_in_place(path, data, pos, cut, cols)
        except msgspec.DecodeError:
            return None
        pos = src.done_with(cut.end() - 2)  # whitespace just before the next event's "{"


def _take_in_place(path: str, data: Any, pos: int, cut: re.Match[bytes], cols: Columns) -> None:
    """Take the events from ``data[pos]`` (``[`` or whitespace) to the boundary ``cut`` into
    ``cols`` without copying them: the comma of the cut becomes ``]`` and ``data[pos]`` becomes
    ``[`` while the chunk is read (by the C scanner, else decoded), then both are restored.
    Raises ``msgspec.DecodeError`` if the chunk is not a JSON array (a cut inside an event)."""
    comma = data.find(b",", cut.start(), cut.end())
    was = data[pos]
    data[pos] = _OPEN
    data[comma] = _CLOSE
    try:
        view = memoryview(data)[pos : comma + 1]
        if not cols.add_scanned(view):
            cols.add(decode_chunk(path, view))
        del view
    finally:
        data[pos] = was
        data[comma] = _COMMA


def _last_boundary(data: Any, pos: int, size: int) -> re.Match[bytes] | None:
    """The last event boundary (``}, {`` across a newline) in ``data[pos:size]``, found from the
    end: the document's tail holds a few ``}`` (the last event's, its args', the top level's)
    before the boundary that precedes the last event. None if there is none nearby."""
    at = size
    for _ in range(64):
        at = data.rfind(b"}", pos, at)
        if at < 0:
            return None
        m = EVENT_SPLIT.match(data, at)
        if m is not None:
            return m
    return None


def _decode_tail(
    path: str, head: Head, data: Any, pos: int, cols: Columns
) -> tuple[int, int] | None:
    """Decode ``data[pos + 1:]``, the last event(s), the end of the events array and the fields
    after it, as the object ``{"traceEvents": [<rest>``; fill the header fields it holds. Returns
    (offset, length) of the events array's end part within ``data``, None if it does not parse."""
    rest = b"".join((_TAIL_PREFIX, memoryview(data)[pos + 1 :]))
    try:
        tail = HEAD.decode(rest)
        chunk = decode_chunk(path, memoryview(tail.traceEvents))
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        return None
    cols.add(chunk)
    del chunk
    for name in META_FIELDS:
        if not len(getattr(head, name)):
            setattr(head, name, msgspec.Raw(bytes(getattr(tail, name))))
    tail_events = memoryview(tail.traceEvents)
    skip = _address(tail_events) - _address(rest) - len(_TAIL_PREFIX)
    if skip != -1:  # not the list opened by _TAIL_PREFIX: a later "traceEvents" key won
        tail_events.release()
        raise duplicate_events_key(path)
    length = len(tail_events)
    tail_events.release()
    return pos + 1 + skip, length


class _WholeBuffer:
    """The whole document in one buffer, for the one-pass decode: nothing more to read, and the
    memory map's pages below the decoded chunks are handed back (:func:`_release`)."""

    eof = True
    dropped = 0

    def __init__(self, data: Buffer) -> None:
        self.data = data
        self._released = 0

    def more(self) -> None:
        pass

    def fill(self, pos: int) -> None:
        pass

    def done_with(self, pos: int) -> int:
        self._released = _release(self.data, pos, self._released)
        return pos

    def finish(self) -> None:
        pass


class _GzipStream:
    """A gzip document decompressed piece by piece, for the one-pass decode: ``data`` holds only
    the part not decoded yet (a chunk and a piece), never the whole document, which is often 10x
    the file."""

    def __init__(self, raw: Buffer, path: str) -> None:
        self._pieces = gunzip_pieces(raw, path)
        self.data = bytearray()
        self.eof = False
        self.dropped = 0  # bytes of the document dropped from the front of ``data``

    def more(self) -> None:
        piece = next(self._pieces, None)
        if piece is None:
            self.eof = True
        else:
            self.data.extend(piece)

    def fill(self, pos: int) -> None:
        """Read until ``data[pos:]`` holds a chunk and some slack in which to find the boundary
        that ends it."""
        want = CHUNK_BYTES + max(CHUNK_BYTES // 8, 1 << 16)
        while not self.eof and len(self.data) - pos < want:
            self.more()

    def done_with(self, pos: int) -> int:
        del self.data[:pos]  # cheap: a bytearray drops its front by moving its start
        self.dropped += pos
        return 0

    def finish(self) -> None:
        for _ in self._pieces:  # a truncated stream raises here, like the whole-file path
            pass


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


def duplicate_events_key(path: str) -> TraceFormatError:
    """The error for a document whose top level holds ``traceEvents`` twice. Neither list is
    the trace more than the other (a JSON decoder keeps the last, a streaming reader would
    read both), so the file is refused on every path rather than read one way or the other."""
    return TraceFormatError(
        path,
        "the top level holds the key `traceEvents` twice: which list is the trace is ambiguous",
        "keep one traceEvents list, holding every event",
    )


def check_one_events_key(path: str, data: Any, at: int) -> None:
    """Raise :func:`duplicate_events_key` unless the first top-level ``"traceEvents"`` key of
    ``data`` is the one whose value starts at ``data[at]`` (the decoder's, which is the last
    such key): occurrences before that are tried in order, the first one at the top level
    (:func:`_decode_header` parses up to it) decides. Only strings in the header come before
    the first key, so this costs a few small decodes."""
    i = data.find(b'"traceEvents"')
    while 0 <= i < at:
        key = _ANY_EVENTS_KEY.match(data, i)
        if key is not None and _decode_header(data, i) is not None:
            if key.end() != at:
                raise duplicate_events_key(path)
            return
        i = data.find(b'"traceEvents"', i + 1)


def decode_head(path: str, data: Any) -> tuple[Head, Any]:
    """Decode the top level, repairing bare words / invalid UTF-8 only if the first try fails."""
    repaired = False
    while True:
        try:
            if first_byte(data) == b"[":  # Chrome "JSON array format": just the events
                return Head(traceEvents=RAW.decode(data)), data
            return HEAD.decode(data), data
        except RecursionError:
            raise too_deep(path) from None
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


def _decode_error(path: str, data: Any, exc: Exception) -> TraceFormatError:
    msg = str(exc)
    if "truncated" in msg:
        return TraceFormatError(
            path,
            "JSON ends early (truncated): the rank may have crashed or been killed mid-write",
            "re-collect the trace, or analyze the other ranks without this file",
        )
    head = first_byte(data)
    if head not in (b"{", b"["):
        return TraceFormatError(
            path,
            "not JSON (expected a Kineto / Chrome trace starting with '{')",
            "pass a PyTorch profiler .json / .json.gz trace or an nsys .sqlite export",
        )
    return TraceFormatError(
        path, f"invalid JSON ({msg})", "the file is damaged; re-collect or re-export the trace"
    )


def first_byte(data: Any) -> bytes:
    """First non-whitespace byte, without copying the (large) buffer."""
    m = _LEADING_WS.match(data)
    end = m.end() if m else 0
    return bytes(data[end : end + 1])


def span(data: Any, raw: msgspec.Raw) -> tuple[Any, int, int]:
    """(buffer, start, end) of ``raw`` inside ``data`` (msgspec's Raw references its input;
    a copy only if it does not lie in ``data``)."""
    view = memoryview(raw)
    off = _address(view) - _address(data)
    if 0 <= off and off + len(view) <= len(data):
        return data, off, off + len(view)
    return bytes(view), 0, len(view)


def _address(buf: Any) -> int:
    return int(np.frombuffer(buf, np.uint8).ctypes.data) if len(buf) else 0


def event_batches(
    path: str,
    data: Any,
    start: int,
    end: int,
    typed: EventsDecoder = EVENTS,
    scan_into: Columns | None = None,
) -> Iterator[Chunk]:
    """Decode the events array ``data[start:end]`` chunk by chunk (the general path: copies).

    Chunks are cut at event boundaries found by :data:`EVENT_SPLIT`, so no per-event raw
    object is made; traces not written one event per line fall back to per-event raw slices.
    ``scan_into``: the chunks the C scanner reads go straight into these columns
    (:meth:`Columns.add_scanned`); only the others are yielded, decoded.
    """

    def decoded(buf: bytes) -> Chunk | None:
        if scan_into is not None and scan_into.add_scanned(buf):
            return None
        return decode_chunk(path, buf, typed)

    view = memoryview(data)
    pos, end = start + 1, end - 1  # inside the brackets
    while pos < end:
        m = EVENT_SPLIT.search(data, pos + CHUNK_BYTES, end) if pos + CHUNK_BYTES < end else None
        stop = m.start() + 1 if m else end
        try:
            chunk = decoded(b"".join((b"[", view[pos:stop], b"]")))
        except msgspec.DecodeError:
            break  # a boundary inside an event: per-event slices for the rest
        if chunk is not None:
            yield chunk
        if m is None:
            return
        pos = m.end() - 1
    if pos >= end:
        return
    try:
        raws = RAW_LIST.decode(b"".join((b"[", view[pos:end], b"]")))
    except RecursionError:
        raise too_deep(path) from None
    except msgspec.DecodeError as exc:
        raise _decode_error(path, data, exc) from None
    step = 32768
    for i in range(0, len(raws), step):
        chunk = decoded(b"[" + b",".join(raws[i : i + step]) + b"]")
        if chunk is not None:
            yield chunk
