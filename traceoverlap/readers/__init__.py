"""Trace readers, one module per input format, and :func:`read_trace`, which picks one by content.

The format is sniffed from the first bytes, not the file extension (rank files are often renamed,
``.pt.trace.json`` / ``.json.gz`` / no extension at all):

- gzip magic ``1f 8b`` or JSON (``{`` / ``[``): PyTorch profiler (Kineto) Chrome trace;
- ``SQLite format 3\\0``: an Nsight Systems SQLite export (``nsys export --type sqlite``);
- an ``.nsys-rep`` file: an Nsight Systems report, exported through ``nsys``.

Readers are imported lazily, so reading one format never pays for the others.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TraceFormatError
from ..model import Timeline

__all__ = ["read_trace", "sniff_format", "SUPPORTED"]

#: What to tell a user whose file we cannot read.
SUPPORTED = (
    "PyTorch profiler / Kineto Chrome-trace JSON (.json, .json.gz), "
    "Nsight Systems SQLite export (.sqlite) or report (.nsys-rep)"
)

_SQLITE_MAGIC = b"SQLite format 3\x00"
_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"


def sniff_format(path: str | Path) -> str:
    """``"kineto"``, ``"nsys-sqlite"`` or ``"nsys-rep"`` from the file's first bytes (and name).

    Raises :class:`TraceFormatError` for a missing, empty, unreadable or unrecognised file.
    """
    p = Path(path)
    if p.is_dir():
        raise TraceFormatError(
            p, "is a directory, not a trace file", "pass the folder to `analyze`, which expands it"
        )
    try:
        with open(p, "rb") as f:
            head = f.read(64)
    except FileNotFoundError:
        raise TraceFormatError(p, "file not found", "check the path") from None
    except OSError as exc:
        raise TraceFormatError(p, f"cannot read the file: {exc.strerror or exc}") from None
    if not head:
        raise TraceFormatError(
            p,
            "file is empty",
            "the profiler may not have finished writing it; re-collect the trace",
        )
    if head.startswith(_SQLITE_MAGIC):
        return "nsys-sqlite"
    if head.startswith(_GZIP_MAGIC):
        return "kineto"
    text = head[len(_BOM) :] if head.startswith(_BOM) else head
    if text.lstrip()[:1] in (b"{", b"["):
        return "kineto"
    if p.name.endswith(".nsys-rep") or p.name.endswith(".qdrep"):
        return "nsys-rep"
    if not text.strip():
        # Whitespace only in the first 64 bytes: let the JSON reader judge the rest.
        return "kineto"
    raise TraceFormatError(p, "unrecognised file format", f"supported: {SUPPORTED}")


def read_trace(path: str | Path) -> Timeline:
    """Read one trace file of any supported format into a :class:`Timeline` (format sniffed)."""
    fmt = sniff_format(path)
    if fmt == "kineto":
        from .kineto import read_kineto

        return read_kineto(path)
    if fmt == "nsys-sqlite":
        from .nsys import read_nsys

        return read_nsys(path)
    from .nsys import read_nsys_rep

    return read_nsys_rep(path)
