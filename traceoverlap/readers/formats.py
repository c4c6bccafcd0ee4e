"""The input formats: one :class:`Format` entry each in :data:`FORMATS`, the one place that knows
which formats exist.

Everything format-specific that is not the reading itself comes from here: how a file is
recognised (:func:`sniff_bytes`), which reader reads it (imported only then, so reading one
format never pays for the others), which file names a folder's trace files end with, whether a
pipe can hold it, whether a large file is cut into one map unit per process, and the list of
supported formats that errors print. A new input format is a reader package ``readers/<fmt>/``
and one entry here; what the analysis must know about what the capture can show travels on the
:class:`~traceoverlap.core.model.TraceInfo` its reader returns, never as a format name.

Two kinds of input (:attr:`Format.kind`): ``"trace"`` (a profiler trace, read one file at a time
into a :class:`Timeline` that ``analyze`` reads) and ``"dumps"`` (PyTorch Flight Recorder dumps:
one file per rank, read as a set into :class:`~traceoverlap.core.flightrec.FlightRecords` by
``traceoverlap hang``; never a Timeline). The list of supported trace formats and a folder's trace
suffixes are the traces' alone.
"""

from __future__ import annotations

import enum
import importlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ..core._lazyre import lazy_compile
from ..core.errors import NotATraceError
from ..core.model import Timeline
from ._bytes import is_blank, label, starts_json

__all__ = [
    "FORMATS",
    "FLIGHTREC_KEYS",
    "Format",
    "Sniffed",
    "SNIFF_BYTES",
    "flightrec_head",
    "format_named",
    "sniff_bytes",
]

#: How many of a file's first bytes the sniffs see.
SNIFF_BYTES = 64
#: Nsight Systems exports of several GPU processes are one map unit per process from this size on
#: (below it, the extra SQL scans of a split cost more than the memory they save).
NSYS_SPLIT_MIN_BYTES = 16 * 1024 * 1024


class Sniffed(enum.IntEnum):
    """How sure a sniff is; the surest wins (the first entry of :data:`FORMATS` on a tie)."""

    #: nothing contradicts it (whitespace only so far): the reader judges the rest
    GUESS = 1
    #: the file name says so (a binary format without a magic number of its own)
    NAME = 2
    #: the bytes say so (a magic number, the first character of a JSON text)
    CONTENT = 3
    #: the bytes name the format's own keys (a JSON text or pickle of a dict whose first keys
    #: are a Flight Recorder dump's): surer than a JSON text's first character
    KEYS = 4


Sniff = Callable[[bytes, str], Sniffed | None]


def magic(prefix: bytes) -> Sniff:
    """A sniff for files that start with ``prefix``."""
    return lambda head, name: Sniffed.CONTENT if head.startswith(prefix) else None


def named(*suffixes: str) -> Sniff:
    """A sniff for files whose name ends with one of ``suffixes`` (as written)."""
    return lambda head, name: Sniffed.NAME if name.endswith(suffixes) else None


def _json(head: bytes, name: str) -> Sniffed | None:
    """JSON text in any Unicode encoding, or gzip (which the JSON reader inflates); whitespace
    only so far is a guess (the JSON reader says what is wrong with it)."""
    if starts_json(head):
        return Sniffed.CONTENT
    return Sniffed.GUESS if is_blank(head) else None


#: The top-level keys of a Flight Recorder dump (every schema version): ``nccl_version`` up to 2.7,
#: ``comm_lib_version`` from 2.8 on.
FLIGHTREC_KEYS = (
    "version", "entries", "pg_config", "pg_status", "comm_lib_version", "nccl_version",
    "nccl_comm_state",
)  # fmt: skip
_FR_JSON_FIRST = re.compile(
    rb'\A(?:\xef\xbb\xbf)*\s*\{\s*"(' + "|".join(FLIGHTREC_KEYS).encode() + rb')"\s*:'
)
# EMPTY_DICT, its memo (BINPUT / LONG_BINPUT / MEMOIZE), MARK, the first key (BINUNICODE /
# SHORT_BINUNICODE)
_FR_PICKLE_FIRST = lazy_compile(
    rb"\}(?:q.|r.{4}|\x94)?\(?(?:X.{4}|\x8c.)(" + "|".join(FLIGHTREC_KEYS).encode() + rb")",
    re.DOTALL,
)


def flightrec_head(head: bytes) -> bool:
    """Whether a file's first bytes start a Flight Recorder dump: a pickle (protocol 2-5) of a
    dict whose first key is a dump's, or a JSON object whose first key is (a second one too when
    that is the common word ``version``)."""
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        body = head[11:] if head[2:3] == b"\x95" else head[2:]  # protocol 4+: a FRAME first
        return _FR_PICKLE_FIRST.match(body) is not None
    m = _FR_JSON_FIRST.match(head)
    if m is None:
        return False
    if m.group(1) != b"version":
        return True
    rest = head[m.end() :]
    return any(b'"%s"' % k.encode() in rest for k in FLIGHTREC_KEYS if k != "version")


def _flightrec(head: bytes, name: str) -> Sniffed | None:
    return Sniffed.KEYS if flightrec_head(head) else None


@dataclass(frozen=True)
class Format:
    """One input format: how it is recognised, read, found in a folder and cut into units."""

    #: what :func:`traceoverlap.readers.sniff_format` answers for it
    name: str
    #: how the list of supported formats (:func:`supported`) names it: the tool that writes it
    #: (said once for consecutive entries of one tool) and what the file is
    tool: str
    what: str
    #: how an error names one file of it
    noun: str
    #: the names of its files end with one of these (lower case): a folder's trace files, the
    #: files :attr:`processes` may cut
    suffixes: tuple[str, ...]
    #: how much a file's first :data:`SNIFF_BYTES` bytes and its name say it is this format
    sniff: Sniff
    #: ``"package:function"`` in ``readers/``: the reader, ``function(path, **kwargs)`` ->
    #: :class:`Timeline`, with ``keep_range=`` when :attr:`filters_ranges`, ``process=`` when
    #: :attr:`processes`, ``data=`` (a pipe's bytes, ``path`` only naming it) when
    #: :attr:`from_pipe`
    reader: str
    #: the reader can drop the host ranges the analysis does not need (``keep_range``), and says
    #: so in ``TraceInfo.ranges_filtered``
    filters_ranges: bool = False
    #: it can come from standard input or a pipe (read to the end into memory first)
    from_pipe: bool = False
    #: ``"package:function"``: ``function(path)`` -> the processes (pids) that the reader can
    #: read one at a time (``process=``), each a unit of the map; [] when the file is not cut
    processes: str | None = None
    #: a file smaller than this is read whole, never cut into processes
    split_min_bytes: int = 0
    #: a file of this format with this suffix instead of its own beside it (same stem) is its
    #: export: a folder holding both reads only that one
    read_instead: str | None = None
    #: ``"trace"``: a profiler trace, :attr:`reader` returns a :class:`Timeline`; ``"dumps"``:
    #: per-rank Flight Recorder dumps, read as a set (:attr:`reader` takes the list of paths and
    #: returns :class:`~traceoverlap.core.flightrec.FlightRecords`) by ``traceoverlap hang``;
    #: :meth:`read` refuses them (:class:`NotATraceError`, naming the command)
    kind: str = "trace"

    def read(
        self,
        path: str | os.PathLike[str],
        keep_range: Callable[[str], bool] | None = None,
        process: int | None = None,
        data: bytearray | None = None,
    ) -> Timeline:
        """Read ``path`` with this format's reader, passing it only the arguments it takes; a file
        of a format that is not a trace (:attr:`kind`) is refused, naming what reads it."""
        if self.kind != "trace":
            raise NotATraceError(
                label(os.fspath(path)),
                f"{self.noun}, not a trace",
                "run `traceoverlap hang` on the folder of dumps, one file per rank",
            )
        kwargs: dict[str, Any] = {}
        if keep_range is not None and self.filters_ranges:
            kwargs["keep_range"] = keep_range
        if process is not None and self.processes is not None:
            kwargs["process"] = process
        if data is not None:
            kwargs["data"] = data
        return cast(Timeline, _function(self.reader)(path, **kwargs))

    def split(self, path: Path) -> list[int]:
        """The processes of ``path`` to read one at a time ([] when it is read whole)."""
        if self.processes is None:
            return []
        return cast(list[int], _function(self.processes)(path))


def _function(ref: str) -> Callable[..., Any]:
    """``"package:function"`` of ``readers/``, imported now (a reader's modules load only when a
    file of its format is read)."""
    package, _, name = ref.partition(":")
    return cast(
        Callable[..., Any], getattr(importlib.import_module(f"{__package__}.{package}"), name)
    )


#: Every input format, in the order the list of supported formats gives them.
FORMATS: tuple[Format, ...] = (
    Format(
        "kineto", "PyTorch profiler / Kineto", "Chrome-trace JSON", "a Kineto trace",
        (".json", ".json.gz"), _json, "kineto:read_kineto", from_pipe=True,
    ),
    Format(
        "nsys-sqlite", "Nsight Systems", "SQLite export", "an Nsight Systems export", (".sqlite",),
        magic(b"SQLite format 3\x00"), "nsys:read_nsys", filters_ranges=True,
        processes="nsys:nsys_processes", split_min_bytes=NSYS_SPLIT_MIN_BYTES,
    ),
    Format(
        "nsys-rep", "Nsight Systems", "report", "an Nsight Systems report", (".nsys-rep",),
        named(".nsys-rep", ".qdrep"), "nsys:read_nsys_rep", filters_ranges=True,
        read_instead=".sqlite",
    ),
    Format(
        "flightrec", "PyTorch Flight Recorder", "dump (pickle or JSON)",
        "a PyTorch Flight Recorder dump", (), _flightrec, "flightrec:read_flight_records",
        kind="dumps",
    ),
)  # fmt: skip


def format_named(name: str) -> Format:
    """The entry of :data:`FORMATS` called ``name``."""
    for fmt in FORMATS:
        if fmt.name == name:
            return fmt
    raise KeyError(name)


def sniff_bytes(head: bytes, name: str = "") -> Format | None:
    """The format of a file from its first bytes (and its name, for a binary format without a
    magic number): the surest sniff of :data:`FORMATS`, None when none matches."""
    best: tuple[Sniffed, Format] | None = None
    for fmt in FORMATS:
        sure = fmt.sniff(head, name)
        if sure is not None and (best is None or sure > best[0]):
            best = (sure, fmt)
    return None if best is None else best[1]


def trace_suffixes() -> tuple[str, ...]:
    """Every trace format's file suffixes, in registry order: what a folder's trace files end
    with."""
    return tuple(s for fmt in FORMATS if fmt.kind == "trace" for s in fmt.suffixes)


def supported() -> str:
    """The supported formats in words, for errors: ``A (.x), B (.y) or C (.z)``, a tool named
    once for its consecutive formats."""
    items, tool = [], None
    for fmt in (f for f in FORMATS if f.kind == "trace"):
        what = fmt.what if fmt.tool == tool else f"{fmt.tool} {fmt.what}"
        items.append(f"{what} ({', '.join(fmt.suffixes)})")
        tool = fmt.tool
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"
