"""Opening an export: the file check, the read-only connection, one read transaction, SQLite's
errors as one line."""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path

from ...core.errors import TraceFormatError
from ...core.model import Timeline
from ._export import EXPORT_HINT
from ._memo import remembered
from ._reader import Reader
from ._schema import RangeFilter

#: First 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"

#: Seconds to wait for a writer's lock before saying the file is being written.
_BUSY_TIMEOUT_S = 2.0


def _lenient_text(raw: bytes) -> str:
    # metadata texts that are not UTF-8 must not abort the read (the big text columns are
    # decoded by ._pages, which counts them)
    return raw.decode("utf-8", "replace")


def read_export(
    export: Path, shown: Path, keep_range: RangeFilter | None = None, process: int | None = None
) -> Timeline:
    """Read the SQLite file ``export``; errors and TraceInfo name ``shown`` (the user's file).
    ``process``: only that process's ranks (see :mod:`._process`)."""
    _check_sqlite_file(export, shown)
    try:
        # read-only, with SQLite's locks: a WAL's committed rows are read, and a file a writer
        # is committing to waits for it (then fails clearly) instead of being read half-written
        con = sqlite3.connect(
            f"{export.resolve().as_uri()}?mode=ro",
            uri=True,
            timeout=_BUSY_TIMEOUT_S,
            isolation_level=None,
        )
    except sqlite3.Error as exc:  # pragma: no cover - unopenable after the header check
        raise TraceFormatError(shown, f"cannot open the SQLite file: {exc}", EXPORT_HINT) from exc
    con.text_factory = _lenient_text
    try:
        # one read transaction for the whole read: no writer can commit under it
        con.execute("BEGIN")
        reader = Reader(shown, export, con, keep_range, process)
        if process is None:
            _check_integrity(con, export, shown)
        else:  # one check of the file per split: by the read of its first process
            reader.check = functools.partial(_check_integrity, con, export, shown)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return reader.read()
    except sqlite3.OperationalError as exc:
        raise _sqlite_error(shown, exc) from exc
    except sqlite3.DatabaseError as exc:
        raise TraceFormatError(
            shown, f"the SQLite file is damaged or incomplete ({exc})", EXPORT_HINT
        ) from exc
    finally:
        con.close()


def _check_integrity(con: sqlite3.Connection, export: Path, shown: Path) -> None:
    """``PRAGMA quick_check``: b-tree damage (pages out of order, wrong cell counts, free-list
    errors) would otherwise be read as data. One scan of the file; it is then in the page cache
    for the read that follows. Once per file: a second read of the same file by this process
    (:mod:`._memo`) reuses the verdict."""
    verdict = remembered(export, "quick_check", lambda: _quick_check(con))
    if verdict != "ok":
        verdict = " ".join(verdict.replace("*** in database main ***", "").split())
        raise TraceFormatError(
            shown,
            f"the SQLite file is damaged (quick_check: {verdict[:200]})",
            "re-export it: " + EXPORT_HINT,
        )


def _quick_check(con: sqlite3.Connection) -> str:
    found = con.execute("PRAGMA quick_check(1)").fetchone()
    return str(found[0]) if found else "ok"


def _sqlite_error(shown: Path, exc: sqlite3.OperationalError) -> TraceFormatError:
    msg = str(exc)
    if "locked" in msg or "busy" in msg:
        return TraceFormatError(
            shown,
            "the file is locked by another process: it is still being written",
            "wait until `nsys export` (or whatever writes it) has finished, then run again",
        )
    if "readonly" in msg or "read-only" in msg or "unable to open" in msg:
        return TraceFormatError(
            shown,
            f"the file has an unfinished write beside it (a -journal or -wal file) that a "
            f"read-only reader cannot resolve ({msg})",
            "wait until the writer has finished, or open it once with `sqlite3` in a writable "
            "folder to recover it",
        )
    return TraceFormatError(shown, f"the SQLite file is damaged or incomplete ({msg})", EXPORT_HINT)


def _check_sqlite_file(p: Path, shown: Path) -> None:
    if not p.exists():
        raise TraceFormatError(shown, "no such file", "check the path")
    if not p.is_file():
        raise TraceFormatError(shown, "not a file", "pass an `nsys export --type=sqlite` file")
    with p.open("rb") as fh:
        head = fh.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise TraceFormatError(
            shown, "not an SQLite file", f"pass an Nsight Systems SQLite export ({EXPORT_HINT})"
        )
