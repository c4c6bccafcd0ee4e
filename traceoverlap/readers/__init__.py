"""Trace readers, one module per input format, and :func:`read_trace`, which picks one by content.

The format is sniffed from the first bytes, not the file extension (rank files are often renamed,
``.pt.trace.json`` / ``.json.gz`` / no extension at all):

- gzip magic ``1f 8b`` or JSON (``{`` / ``[``, in UTF-8, UTF-16 or UTF-32, with or without a
  byte order mark): PyTorch profiler (Kineto) Chrome trace;
- ``SQLite format 3\\0``: an Nsight Systems SQLite export (``nsys export --type=sqlite``);
- an ``.nsys-rep`` file: an Nsight Systems report, exported through ``nsys``.

``-`` (standard input) and pipes (``<(zcat rank0.json.gz)``, a named FIFO) are read to their end
into memory, and the format is sniffed from those bytes: a pipe can be read only once. Only
Kineto JSON can come that way (SQLite needs a file).

Readers are imported lazily, so reading one format never pays for the others.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..core._collector import resume
from ..core.errors import TraceFormatError
from ..core.model import Timeline
from ._bytes import STDIN, file_error, is_stream, label, read_stream, sniff_bytes

F = TypeVar("F", bound=Any)

__all__ = ["read_trace", "sniff_format", "SUPPORTED", "STDIN"]

#: What to tell a user whose file we cannot read.
SUPPORTED = (
    "PyTorch profiler / Kineto Chrome-trace JSON (.json, .json.gz), "
    "Nsight Systems SQLite export (.sqlite) or report (.nsys-rep)"
)


def sniff_format(path: str | Path) -> str:
    """``"kineto"``, ``"nsys-sqlite"`` or ``"nsys-rep"`` from the file's first bytes (and name);
    ``"stream"`` for ``-`` and pipes, which are not opened here (reading would consume them).

    Raises :class:`TraceFormatError` for a missing, empty, unreadable or unrecognised file.
    """
    if is_stream(path):
        return "stream"
    p = Path(path)
    if p.is_dir():
        raise file_error(p, "directory")
    if p.exists() and not p.is_file():
        raise file_error(p, "device")
    try:
        with open(p, "rb") as f:
            head = f.read(64)
    except FileNotFoundError:
        raise file_error(p, "missing") from None
    except OSError as exc:
        raise TraceFormatError(p, f"cannot read the file: {exc.strerror or exc}") from None
    if not head:
        raise file_error(p, "empty")
    fmt = sniff_bytes(head, p.name)
    if fmt is None:
        raise TraceFormatError(p, "unrecognised file format", f"supported: {SUPPORTED}")
    return fmt


def read_trace(
    path: str | Path,
    keep_range: Callable[[str], bool] | None = None,
    process: int | None = None,
) -> Timeline:
    """Read one trace of any supported format into a :class:`Timeline` (format sniffed).

    ``path`` may be ``-`` for standard input, or a pipe. ``keep_range``: a Nsight Systems export
    keeps only the NVTX ranges whose name it accepts (see :func:`.nsys.read_nsys`). ``process``:
    only that process of a Nsight Systems SQLite export (:func:`.nsys.nsys_processes`)."""
    resume()  # the command's modules are loaded (traceoverlap.core._collector)
    fmt = sniff_format(path)
    if fmt == "stream":
        data = read_stream(path)
        fmt = sniff_bytes(bytes(data[:64])) or "unknown"
        if fmt == "kineto":
            from .kineto import read_kineto

            return read_kineto(path, data)
        shown = label(path)
        if fmt == "nsys-sqlite":  # sniffed without a name: never "nsys-rep"
            raise TraceFormatError(
                shown,
                "an Nsight Systems export cannot be read from a pipe or standard input",
                "save it to a file and pass the file",
            )
        raise TraceFormatError(shown, "unrecognised data format", f"supported: {SUPPORTED}")
    if fmt == "kineto":
        from .kineto import read_kineto

        return read_kineto(path)
    if fmt == "nsys-sqlite":
        from .nsys import read_nsys

        if process is not None:
            return read_nsys(path, keep_range, process)
        return read_nsys(path) if keep_range is None else read_nsys(path, keep_range)
    from .nsys import read_nsys_rep

    return read_nsys_rep(path) if keep_range is None else read_nsys_rep(path, keep_range)


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
