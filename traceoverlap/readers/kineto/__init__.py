"""Reader for PyTorch profiler (Kineto) Chrome-trace JSON: ``.json`` and ``.json.gz``, one rank per
file (or a pipe / standard input, see :mod:`.._input`).

Speed and memory are the point: a rank trace is often hundreds of MB. The events are read chunk
by chunk, straight from the memory map (the chunk's brackets are patched in place, so no chunk is
copied), and the map's pages are handed back as soon as they are read, so the peak holds one
chunk of input and the columns. Each chunk is read by the C scanner (:mod:`._kscan`, built at
install where a C compiler is available) straight into numpy columns, with no Python object per
event or field; what it does not read itself (metadata events, odd value types, collective args)
it hands, as byte spans, to the msgspec path, and a chunk it cannot read at all (invalid JSON,
invalid UTF-8) goes through that path whole. The msgspec path decodes a chunk into small typed
structs that name only the fields the analysis needs (unknown fields are skipped by the C decoder
without building Python objects), whose values become numpy columns at once; without the scanner
(or with ``TRACEOVERLAP_KSCAN=0``) it reads every chunk, with the same result, about twice as
slowly.
A ``.json.gz`` is decompressed piece by piece into the same chunked decoding, so the whole
document (often 10x the file) is never in memory either (see :func:`._document.read_gzip_layout`).

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

The modules, in the order the bytes flow through them:

- :mod:`._document`: where the events are in the document, and cutting them into chunks;
- :mod:`._kscan` (C): a chunk of JSON events -> numpy columns, where it can;
- :mod:`._decode`: a chunk of JSON events -> typed structs (and the lenient fallbacks);
- :mod:`._columns`: the scanner's columns, or structs -> numpy columns, accumulated over the
  chunks;
- :mod:`._table`: the columns -> the :class:`~traceoverlap.core.model.Timeline` of one rank;
- :mod:`._joins`: correlation ids from flows, collective args from the launching op;
- :mod:`._metadata`: the top-level fields (rank, world size, devices, base time);
- :mod:`._categories` (what Kineto's categories mean) and :mod:`._values` (odd JSON values,
  exact times), used throughout.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any

import msgspec

from ...core.errors import NotATraceError
from ...core.model import Timeline
from .._bytes import Buffer, is_gzip, label, prepare, rank_from_filename, read_raw
from . import _document
from ._categories import CATEGORY_MAP
from ._columns import DTYPE_BYTES, Columns
from ._decode import FLOWS
from ._metadata import Meta
from ._table import build_timeline
from ._values import MAX_WORLD_SIZE, us_to_ns

__all__ = [
    "read_kineto",
    "us_to_ns",
    "rank_from_filename",
    "DTYPE_BYTES",
    "CATEGORY_MAP",
    "MAX_WORLD_SIZE",
]


def read_kineto(path: str | Path, data: bytes | bytearray | None = None) -> Timeline:
    """Read one PyTorch profiler (Kineto) Chrome-trace JSON file (``.json`` / ``.json.gz``).

    One file is one rank. ``path`` may be ``-`` (standard input) or a pipe; ``data``, when given,
    is the file's content already read (gzip or not) and ``path`` only names it. Returns a
    :class:`Timeline` whose events follow the column contract of :mod:`traceoverlap.core.model`
    (integer ns; unix-epoch ns when the trace has ``baseTimeNanoseconds`` or absolute epoch-µs
    timestamps, see ``TraceInfo.clock``). Raises :class:`TraceFormatError` naming the file for
    anything that is not a readable trace.
    """
    p = label(path)
    raw: Buffer = read_raw(path) if data is None else _as_bytearray(data)
    if is_gzip(raw):
        cols = Columns()
        head = _document.read_gzip_layout(p, raw, cols)
        if head is not None and not cols.lacks_correlation():
            return build_timeline(p, Meta(head), cols)
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
    return build_timeline(p, meta, cols)


def _as_bytearray(data: bytes | bytearray) -> bytearray:
    return data if isinstance(data, bytearray) else bytearray(data)


def _read_events(p: str, data: Buffer) -> tuple[Meta, Columns]:
    """The metadata and the columns of every event: in one pass when the document is laid out
    as Kineto writes it, else on the general path (which explains what is wrong)."""
    cols = Columns()
    fast = None
    if _document.first_byte(data) == b"{":  # Chrome's array format (``[``) has no header
        fast = _document.read_kineto_layout(p, data, cols)
    src: Any = data
    if fast is not None:
        head, start, end = fast
    else:
        cols = Columns()  # what a failed one pass took is not trusted
        head, src = _document.decode_head(p, data)
        if len(head.traceEvents):  # a decoder keeps the last of duplicate keys: refuse those
            _document.check_one_events_key(p, src, _document.span(src, head.traceEvents)[1])
        if bytes(memoryview(head.traceEvents)[:1]) != b"[":  # a Raw spans exactly its value
            raise NotATraceError(
                p,
                "JSON without a `traceEvents` list: not a Chrome / Kineto trace",
                "pass the file written by torch.profiler (export_chrome_trace / "
                "tensorboard_trace_handler)",
            )
        src, start, end = _document.span(src, head.traceEvents)
        for chunk in _document.event_batches(p, src, start, end, scan_into=cols):
            cols.add(chunk)
            del chunk
    head.traceEvents = msgspec.Raw(b"")
    if cols.lacks_correlation():
        # Older traces link launches to GPU work only through flow events: a second, light
        # pass reads them. Newer traces (args.correlation everywhere) never pay for it.
        for chunk in _document.event_batches(p, src, start, end, FLOWS):
            cols.add_flows(chunk)
            del chunk
    return Meta(head), cols
