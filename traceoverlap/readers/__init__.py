"""Trace readers, one package per input format, and :func:`read_trace`, which picks one by content.

The formats are declared once, in :data:`.formats.FORMATS`; the format is sniffed from the first
bytes, not the file extension (rank files are often renamed, ``.pt.trace.json`` / ``.json.gz`` /
no extension at all):

- gzip magic ``1f 8b`` or JSON (``{`` / ``[``, in UTF-8, UTF-16 or UTF-32, with or without a
  byte order mark): PyTorch profiler (Kineto) Chrome trace;
- ``SQLite format 3\\0``: an Nsight Systems SQLite export (``nsys export --type=sqlite``);
- an ``.nsys-rep`` file: an Nsight Systems report, exported through ``nsys``.
- a pickle or JSON text whose first key is a Flight Recorder dump's (``version``, ``entries``,
  ``pg_config``...): a PyTorch Flight Recorder dump, which is not a trace: :func:`read_trace`
  refuses it naming ``traceoverlap hang``, and :mod:`.flightrec` reads a set of them.

``-`` (standard input) and pipes (``<(zcat rank0.json.gz)``, a named FIFO) are read to their end
into memory, and the format is sniffed from those bytes: a pipe can be read only once. Only
formats that say so (:attr:`.formats.Format.from_pipe`: Kineto JSON) can come that way (SQLite
needs a file).

Readers are imported lazily, so reading one format never pays for the others.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..core._collector import resume
from ..core.errors import TraceFormatError
from ..core.model import Timeline
from . import formats
from ._bytes import STDIN, file_error, is_stream, label, read_stream

F = TypeVar("F", bound=Any)

__all__ = ["read_trace", "sniff_format", "SUPPORTED", "STDIN", "STREAM"]

#: What to tell a user whose file we cannot read.
SUPPORTED = formats.supported()
#: What :func:`sniff_format` answers for standard input and pipes (not a format: their bytes are
#: sniffed once read).
STREAM = "stream"


def sniff_format(path: str | Path) -> str:
    """The name of the file's format (:data:`.formats.FORMATS`: ``"kineto"``, ``"nsys-sqlite"``,
    ``"nsys-rep"``) from its first bytes (and name); :data:`STREAM` for ``-`` and pipes, which
    are not opened here (reading would consume them).

    Raises :class:`TraceFormatError` for a missing, empty, unreadable or unrecognised file.
    """
    if is_stream(path):
        return STREAM
    p = Path(path)
    if p.is_dir():
        raise file_error(p, "directory")
    if p.exists() and not p.is_file():
        raise file_error(p, "device")
    try:
        with open(p, "rb") as f:
            head = f.read(formats.SNIFF_BYTES)
    except FileNotFoundError:
        raise file_error(p, "missing") from None
    except OSError as exc:
        raise TraceFormatError(p, f"cannot read the file: {exc.strerror or exc}") from None
    if not head:
        raise file_error(p, "empty")
    fmt = formats.sniff_bytes(head, p.name)
    if fmt is None:
        raise TraceFormatError(p, "unrecognised file format", f"supported: {SUPPORTED}")
    return fmt.name


def read_trace(
    path: str | Path,
    keep_range: Callable[[str], bool] | None = None,
    process: int | None = None,
) -> Timeline:
    """Read one trace of any supported format into a :class:`Timeline` (format sniffed).

    ``path`` may be ``-`` for standard input, or a pipe. ``keep_range``: a reader that can
    (:attr:`.formats.Format.filters_ranges`: Nsight Systems) keeps only the host ranges whose
    name it accepts (see :func:`.nsys.read_nsys`). ``process``: only that process of a file that
    is cut into processes (:attr:`.formats.Format.processes`: a Nsight Systems SQLite export)."""
    resume()  # the command's modules are loaded (traceoverlap.core._collector)
    name = sniff_format(path)
    if name != STREAM:
        return formats.format_named(name).read(path, keep_range, process)
    data = read_stream(path)
    fmt = formats.sniff_bytes(bytes(data[: formats.SNIFF_BYTES]))  # no name: a pipe has none
    shown = label(path)
    if fmt is None:
        raise TraceFormatError(shown, "unrecognised data format", f"supported: {SUPPORTED}")
    if not fmt.from_pipe and fmt.kind == "trace":  # not a trace at all: its read says so
        raise TraceFormatError(
            shown,
            f"{fmt.noun} cannot be read from a pipe or standard input",
            "save it to a file and pass the file",
        )
    return fmt.read(path, data=data)


def _safe_reader(read: F) -> F:
    """``read`` (:func:`read_trace`) under the guard that turns a SIGBUS (a memory-mapped file
    truncated while read) into one line naming it (:mod:`._sigbus`), its Timeline without GPU
    activities timed far outside the capture (:mod:`._glitch`, with a note)."""
    import functools

    @functools.wraps(read)
    def wrapper(path: str | Path, *args: Any, **kwargs: Any) -> Timeline:
        from ._glitch import drop_clock_glitches
        from ._sigbus import guard

        with guard(label(path)):
            return drop_clock_glitches(read(path, *args, **kwargs))

    return wrapper  # type: ignore[return-value]


read_trace = _safe_reader(read_trace)
