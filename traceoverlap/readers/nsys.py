"""Nsight Systems reader: ``nsys export --type sqlite`` files (and ``.nsys-rep`` through ``nsys``).

What it reads (tables and columns are discovered from ``sqlite_master`` / ``PRAGMA table_info``,
never assumed; exports of Nsight Systems 2022.4 (schema 3.0) to 2026.2 (schema 3.25) are read):

- ``CUPTI_ACTIVITY_KIND_KERNEL`` -> category ``kernel``, name = ``shortName`` (what classification
  matches on); ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET`` -> ``memcpy`` / ``memset``. GPU rows get
  ``pid`` from ``globalPid``, ``device`` = ``deviceId``, ``stream`` = ``streamId``, lane
  ``"stream {streamId}"``.
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` -> ``runtime`` (eventClass 0) or ``driver`` (eventClass 1), with
  ``correlation`` = ``correlationId``: every row, whatever the API name (NCCL launches with
  ``cuLaunchKernelEx``), because correlation ids, not names, tie launches to GPU work.
- ``NVTX_EVENTS`` push/pop and start/end ranges with an end -> ``annotation`` on the thread that
  started them (a start/end range that another thread of the same process ended: on that thread,
  ``endGlobalTid``), name = ``COALESCE(text, StringIds.value)``: step markers
  (``ProfilerStep#N``), phases (``forward``, ``backward``, ``grad_sync``, ``optimizer``) and any
  other range.
- Host rows get ``pid``/``tid`` from ``globalTid`` (bits 24-47 / 0-23), thread names from
  ``ThreadNames``.

GPU captures: GPU work is grouped by (pid, device) and each group is a rank; host rows of a process
belong to every rank of that process. CPU captures (no CUDA activity at all, e.g. gloo ranks traced
with ``nsys profile -t nvtx``): every process that recorded NVTX ranges is a rank
(``device_kind="cpu"``), and its NVTX ranges are its whole timeline. Ranks come from the export
when it records them (``MPI_RANKS``, a ``RANK`` environment variable per process, or one
``rank N`` NVTX text per process), else from the file name for a one-process export
(``rank3.sqlite``), else from ordering the groups by device then pid
(``rank_source="process-order"``, said in the notes).

Communication on a CPU capture: Nsight Systems does not see gloo's work, and without the PyTorch
profiler there are no ``gloo:*`` events. What the tool can see is what the program marks: the
reference workloads open an NVTX start/end range named ``gloo:<collective>`` when they issue a
collective and close it when the collective completes (the completion callback of its future, on
gloo's ``pt_gloo_runloop`` thread, whose lane the range is then drawn on, as Kineto draws gloo's
work items), so communication means *the collective in flight*, from issue to completion, which
includes time queued behind earlier collectives. Such ranges are classified like gloo's own work items
(:mod:`traceoverlap.classify`); a CPU capture without any says so in its notes instead of
reporting zero communication.

Times are integer nanoseconds as the export stores them, shifted to unix-epoch nanoseconds when
``TARGET_INFO_SESSION_START_TIME`` says when the capture started (``TraceInfo.clock == "unix"``):
``unix = t - systemClockNs + utcEpochNs`` (schema 3.25: timestamps on the system clock); exports
without ``systemClockNs`` (schema 3.0, Nsight Systems 2022.4) count from the session start, so
``unix = t + utcEpochNs`` (checked against the wall clock of a traced process).

Robustness: rows whose start or end is not an integer (text, real, blob, NULL) or is negative
(before the capture start) are dropped with a counted note; metadata with unexpected types is
ignored with a note; optional data (NVTX ``eventType``, thread names, ``StringIds``) degrades with
a note; texts that are not UTF-8 are decoded with replacement characters. The file is opened
read-only with SQLite's locking (a WAL's committed rows count; a file being written is a clear
error), inside one read transaction.

Speed: the big tables are decoded straight from the file's pages into numpy columns
(:mod:`._sqlite_columns`), then names become categorical codes with hash lookups; no per-row
Python object except one ``str`` per NVTX text, and with ``keep_range`` (what ``analyze``
passes) not even that for the ranges it refuses: they are tested a block of texts at a time as
they are decoded and never held. Rows come out grouped by rank, so units are slices of the
table. ``benchmarks/bench_nsys.py`` and docs/performance.md have the figures.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..errors import TraceFormatError
from ..model import CATEGORIES, Timeline, TraceInfo, make_events, per_category
from ._input import rank_from_filename
from ._sqlite_columns import INT, OTHER, REFUSED, Columns, read_columns

__all__ = ["read_nsys", "read_nsys_rep", "SQLITE_MAGIC"]

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
Obj = npt.NDArray[np.object_]

#: First 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"

_KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
_MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
_MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
_RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
_NVTX = "NVTX_EVENTS"
_STRINGS = "StringIds"

_CAPTURE_HINT = "re-run `nsys profile --trace=cuda,nvtx ...` (or `-t cuda,nvtx`) and export again"
_EXPORT_HINT = (
    "export the report with `nsys export --type sqlite --output report.sqlite report.nsys-rep`"
)
#: Seconds to wait for a writer's lock before saying the file is being written.
_BUSY_TIMEOUT_S = 2.0
#: Seconds `nsys export` may take before it is abandoned (large reports take minutes).
_EXPORT_TIMEOUT_S = 3600.0

# NVTX event types (ENUM_NSYS_EVENT_TYPE) used when the export does not carry the enum table;
# the same numbers in the 2022.4 and 2026.2 schemas.
_NVTX_RANGE_TYPES_DEFAULT = (59, 60)
_NVTX_RANGE_TYPE_NAMES = ("NvtxPushPopRange", "NvtxStartEndRange")
_NVTX_MARK_TYPES_DEFAULT = (34,)
_NVTX_MARK_TYPE_NAMES = ("NvtxMark",)

# Labels of CUPTI memcpy kinds, used when the export has no ENUM_CUDA_MEMCPY_OPER table.
_MEMCPY_LABELS = {
    1: "Host-to-Device",
    2: "Device-to-Host",
    8: "Device-to-Device",
    9: "Host-to-Host",
    10: "Peer-to-Peer",
}

_RANK_TEXT = re.compile(r"^\s*\[?\s*rank\s*[:=#_ ]?\s*(\d+)\s*\]?\s*$", re.IGNORECASE)
# Communication ranges a CPU program marks (the reference workloads' gloo:<collective>).
_GLOO_RANGE = re.compile(r"^gloo:")

_CAT_CODE = {c: i for i, c in enumerate(CATEGORIES)}


# ---------------------------------------------------------------------------------------------
# public entry points


#: Which NVTX range names to keep (True: keep); None keeps every range.
RangeFilter = Callable[[str], bool]


def read_nsys(path: str | os.PathLike[str], keep_range: RangeFilter | None = None) -> Timeline:
    """Read an Nsight Systems SQLite export into a :class:`Timeline` (one rank per (pid, GPU), or
    per process on a CPU capture).

    All times are integer nanoseconds (unix epoch when the export records the session start).
    ``keep_range``: only the NVTX ranges whose name it accepts are kept (the analysis passes the
    step, phase and communication patterns: an ``emit_nvtx`` capture's million unique op ranges
    are never read into the Timeline); the others are counted in a note. None keeps every range.
    Raises :class:`TraceFormatError` for anything that is not a usable nsys export.
    """
    return _read_export(Path(path), Path(path), keep_range)


def read_nsys_rep(path: str | os.PathLike[str], keep_range: RangeFilter | None = None) -> Timeline:
    """Read an ``.nsys-rep`` report by exporting it to SQLite with ``nsys`` (which must be on PATH).

    The export is cached next to the report (``report.sqlite``) when that folder is writable (and
    reused while it is ours and newer than the report), else in the per-user cache
    ``$XDG_CACHE_HOME/traceoverlap/nsys`` (mode 0700) under the report's content hash; with a
    cached export ``nsys`` is not needed.
    """
    p = Path(path)
    if not p.is_file():
        raise TraceFormatError(p, "no such file", "check the path")
    cache = _export_cache_path(p)
    if not _fresh(cache, p):
        nsys = shutil.which("nsys")
        if nsys is None:
            raise TraceFormatError(
                p,
                "reading an .nsys-rep needs Nsight Systems (`nsys` is not on PATH)",
                "install Nsight Systems, or run `nsys export --type sqlite "
                f"--output {p.with_suffix('.sqlite').name} {p.name}` where it is installed "
                "and pass the .sqlite file",
            )
        _run_nsys_export(nsys, p, cache)
    return _read_export(cache, p, keep_range)


def _lenient_text(raw: bytes) -> str:
    # metadata texts that are not UTF-8 must not abort the read (the big text columns are
    # decoded by _sqlite_columns, which counts them)
    return raw.decode("utf-8", "replace")


def _read_export(export: Path, shown: Path, keep_range: RangeFilter | None = None) -> Timeline:
    """Read the SQLite file ``export``; errors and TraceInfo name ``shown`` (the user's file)."""
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
        raise TraceFormatError(shown, f"cannot open the SQLite file: {exc}", _EXPORT_HINT) from exc
    con.text_factory = _lenient_text
    try:
        # one read transaction for the whole read: no writer can commit under it
        con.execute("BEGIN")
        _check_integrity(con, shown)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return _Reader(shown, export, con, keep_range).read()
    except sqlite3.OperationalError as exc:
        raise _sqlite_error(shown, exc) from exc
    except sqlite3.DatabaseError as exc:
        raise TraceFormatError(
            shown, f"the SQLite file is damaged or incomplete ({exc})", _EXPORT_HINT
        ) from exc
    finally:
        con.close()


def _check_integrity(con: sqlite3.Connection, shown: Path) -> None:
    """``PRAGMA quick_check``: b-tree damage (pages out of order, wrong cell counts, free-list
    errors) would otherwise be read as data. One scan of the file; it is then in the page cache
    for the read that follows."""
    found = con.execute("PRAGMA quick_check(1)").fetchone()
    verdict = str(found[0]) if found else "ok"
    if verdict != "ok":
        verdict = " ".join(verdict.replace("*** in database main ***", "").split())
        raise TraceFormatError(
            shown,
            f"the SQLite file is damaged (quick_check: {verdict[:200]})",
            "re-export it: " + _EXPORT_HINT,
        )


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
    return TraceFormatError(
        shown, f"the SQLite file is damaged or incomplete ({msg})", _EXPORT_HINT
    )


# ---------------------------------------------------------------------------------------------
# .nsys-rep export


def _fresh(export: Path, report: Path) -> bool:
    return _ours(export) and export.stat().st_mtime >= report.stat().st_mtime


def _ours(p: Path) -> bool:
    """Whether ``p`` is a regular file (not a link) that belongs to the user running us: an
    export somebody else planted beside a report in a shared folder is never trusted."""
    try:
        st = p.lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()


def _export_cache_path(report: Path) -> Path:
    """Where the SQLite export of ``report`` lives: beside it (``report.sqlite``, what ``nsys
    export`` writes by default) when that is ours and fresh, or can be written there; else the
    per-user cache (:func:`_user_cache_dir`), named by the report's content (:func:`_content_key`),
    so the name can neither be predicted by others nor go stale when the report is replaced."""
    beside = report.with_suffix(".sqlite")
    if _fresh(beside, report):
        return beside
    if os.access(report.parent, os.W_OK) and (_ours(beside) or not os.path.lexists(beside)):
        return beside
    return _user_cache_dir(report) / f"{_content_key(report)}.sqlite"


def _content_key(report: Path) -> str:
    """SHA-256 of the report's bytes, with its size: the cache key of its export."""
    try:
        with report.open("rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
            size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise TraceFormatError(report, f"cannot read the report: {exc.strerror or exc}") from None
    return f"{size}-{digest}"


def _user_cache_dir(report: Path) -> Path:
    """``$XDG_CACHE_HOME/traceoverlap/nsys`` (default ``~/.cache``), created with mode 0700;
    refused unless it is a real folder owned by us that nobody else can write or read."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    top = Path(base) / "traceoverlap"
    for folder in (top, top / "nsys"):
        try:
            folder.mkdir(mode=0o700, parents=folder is top, exist_ok=True)
            st = folder.lstat()
        except OSError as exc:
            raise TraceFormatError(
                report,
                f"cannot create the export cache folder {folder}: {exc.strerror or exc}",
                "set XDG_CACHE_HOME to a folder of yours, or export the report to SQLite "
                "yourself and pass the .sqlite file",
            ) from None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise TraceFormatError(
                report,
                f"the export cache folder {folder} is not a private folder of yours (it must be "
                "a directory owned by you with mode 0700); refusing to trust what is in it",
                f"remove it, or `chmod 700 {folder}` if it is yours, or set XDG_CACHE_HOME",
            )
    return top / "nsys"


def _export_command(nsys: str, report: Path, sqlite: Path) -> list[str]:
    """``nsys export`` of ``report`` (an .nsys-rep) to the SQLite file ``sqlite``."""
    return [
        nsys,
        "export",
        "--type",
        "sqlite",
        "--force-overwrite",
        "true",
        "--output",
        str(sqlite),
        str(report),
    ]


def _run_nsys_export(nsys: str, report: Path, cache: Path) -> None:
    # written into a fresh private folder (tempfile: no predictable name) beside the cache and
    # renamed: an interrupted export never looks fresh, and nobody can plant or race the file
    try:
        work = Path(tempfile.mkdtemp(prefix=".traceoverlap-export-", dir=cache.parent))
    except OSError as exc:
        raise TraceFormatError(
            report, f"cannot write the export beside {cache}: {exc.strerror or exc}", _EXPORT_HINT
        ) from None
    try:
        partial = work / cache.name
        _export_into(nsys, report, partial)
        os.replace(partial, cache)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _export_into(nsys: str, report: Path, partial: Path) -> None:
    cmd = _export_command(nsys, report, partial)
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
            timeout=_EXPORT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise TraceFormatError(
            report, f"`nsys export` did not finish in {_EXPORT_TIMEOUT_S:g} s", _EXPORT_HINT
        ) from None
    except OSError as exc:
        raise TraceFormatError(report, f"could not run `nsys export`: {exc}", _EXPORT_HINT) from exc
    if proc.returncode != 0 or not partial.is_file():
        lines = [
            ln for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()
        ]  # the last line is nsys's own reason
        last = lines[-1].strip()[-300:] if lines else f"exit status {proc.returncode}"
        raise TraceFormatError(report, f"`nsys export --type sqlite` failed: {last}", _EXPORT_HINT)


# ---------------------------------------------------------------------------------------------
# small helpers


def _check_sqlite_file(p: Path, shown: Path) -> None:
    if not p.exists():
        raise TraceFormatError(shown, "no such file", "check the path")
    if not p.is_file():
        raise TraceFormatError(shown, "not a file", "pass an `nsys export --type sqlite` file")
    with p.open("rb") as fh:
        head = fh.read(len(SQLITE_MAGIC))
    if head != SQLITE_MAGIC:
        raise TraceFormatError(
            shown, "not an SQLite file", f"pass an Nsight Systems SQLite export ({_EXPORT_HINT})"
        )


def _q(name: str) -> str:
    """Quote an SQL identifier (table and column names come from the file itself)."""
    return '"' + name.replace('"', '""') + '"'


def _int(v: Any) -> int | None:
    """An integer metadata value, or None for NULL, text, reals and blobs."""
    return v if type(v) is int else None


def _sel(values: I64, keep: npt.NDArray[np.intp] | None) -> I64:
    return values if keep is None else values[keep]


def _ending_threads(cols: Columns, gtid: I64, is_range: npt.NDArray[np.bool_]) -> I64:
    """A start/end range that another thread of its process ended belongs to that thread: a
    collective marked from issue to completion ends on the worker thread that did the work."""
    if "endGlobalTid" not in cols.ints:
        return gtid
    end_tid = cols.ints["endGlobalTid"]
    moved = (
        is_range
        & (cols.kinds["endGlobalTid"] == INT)
        & (end_tid != gtid)
        & (_pid_of(end_tid) == _pid_of(gtid))
    )
    return np.where(moved, end_tid, gtid)


def _pid_of(global_id: I64) -> I64:
    return (global_id >> 24) & 0xFFFFFF


def _tid_of(global_id: I64) -> I64:
    return global_id & 0xFFFFFF


def _categorical(codes: I32, categories: pd.Index) -> pd.Categorical:
    """``pd.Categorical.from_codes`` for categories unique by construction: pandas' own check
    hashes every category again (1.7 s for the 1.6 M distinct NVTX texts of a 540 MB export)."""
    fast = getattr(pd.CategoricalDtype, "_from_fastpath", None)
    if fast is None:  # pragma: no cover - a pandas without the fast path
        return pd.Categorical.from_codes(codes, categories=categories)
    return pd.Categorical.from_codes(codes, dtype=fast(categories, False), validate=False)


def _index(values: Obj) -> pd.Index:
    """Categories with the dtype :func:`traceoverlap.model.make_events` gives (str on pandas 3),
    so that timelines of every reader concatenate."""
    return pd.Index(values if len(values) else np.zeros(0, dtype=object))


# ---------------------------------------------------------------------------------------------
# string columns built as categorical codes


class _Strings:
    """Categorical codes for one string column built from several sources.

    Each ``add_*`` call returns global int32 codes for its rows; :meth:`categorical` turns any
    selection of such codes into a ``pd.Categorical`` with unique categories. Hash-based
    (``pd.factorize``) or binary-search lookups only: never a sort of the rows.
    """

    def __init__(self) -> None:
        self._cats: list[Obj] = []
        self._unique: list[bool] = []
        self._n = 0
        self._pool_offset: int | None = None
        self._consts: dict[str, int] = {}

    def _block(self, categories: Obj, unique: bool = False) -> int:
        off = self._n
        self._cats.append(categories)
        self._unique.append(unique)
        self._n += len(categories)
        return off

    def const(self, value: str) -> int:
        if value not in self._consts:
            cats = np.empty(1, dtype=object)
            cats[0] = value
            self._consts[value] = self._block(cats, unique=True)
        return self._consts[value]

    def add_const(self, value: str, n: int) -> I32:
        return np.full(n, self.const(value), dtype=np.int32)

    def add_codes(
        self, codes: npt.NDArray[np.integer], categories: Obj, unique: bool = False
    ) -> I32:
        """Rows whose string is ``categories[codes]`` (``unique``: no category repeats)."""
        return (codes + self._block(categories, unique)).astype(np.int32)

    def add_values(self, values: Obj) -> I32:
        codes, uniques = pd.factorize(values)
        return self.add_codes(codes, np.asarray(uniques, dtype=object), unique=True)

    def add_string_ids(self, pool: _StringIds, ids: I64, missing: str) -> I32:
        """Rows named by StringIds ids; ids absent from the table get ``missing``."""
        if self._pool_offset is None:
            self._pool_offset = self._block(pool.values)
        out = np.full(ids.size, self.const(missing), dtype=np.int32)
        pos, hit = pool.find(ids)
        out[hit] = pos[hit] + self._pool_offset
        return out

    def categorical(self, codes: I32) -> pd.Categorical:
        """The strings of ``codes``, as a categorical of the categories in use.

        The largest block known to be unique (the NVTX texts of an ``emit_nvtx`` capture: one
        per range) is not hashed again, only looked up among the other blocks' strings."""
        used = np.bincount(codes, minlength=self._n).astype(bool)
        offsets = np.cumsum([0] + [len(c) for c in self._cats]).astype(np.int64)
        sizes = [len(c) if u else -1 for c, u in zip(self._cats, self._unique, strict=True)]
        big = int(np.argmax(sizes)) if sizes and max(sizes) > 0 else -1
        rest = [b for b in range(len(self._cats)) if b != big]
        lut = np.full(self._n, -1, dtype=np.int64)
        categories = np.zeros(0, dtype=object)
        if rest:
            pos = np.concatenate([np.arange(offsets[b], offsets[b + 1]) for b in rest])
            vals = np.concatenate([self._cats[b] for b in rest])
            in_use = used[pos]
            remap, uniques = pd.factorize(vals[in_use])
            lut[pos[in_use]] = remap
            categories = np.asarray(uniques, dtype=object)
        if big >= 0:
            pos = np.arange(offsets[big], offsets[big + 1])
            in_use = used[pos]
            vals = self._cats[big][in_use]
            known = (
                pd.Index(categories).get_indexer(vals)
                if categories.size
                else np.full(vals.size, -1, dtype=np.int64)
            )
            new = known < 0
            lut[pos[in_use]] = np.where(new, np.cumsum(new) - 1 + categories.size, known)
            categories = np.concatenate([categories, vals[new]])
        return _categorical(lut[codes].astype(np.int32), _index(categories))


class _StringIds:
    """The export's ``StringIds`` table, as arrays sorted by id for vectorised lookups."""

    def __init__(self, ids: I64, values: Obj) -> None:
        order = np.argsort(ids, kind="stable")
        self.ids: I64 = ids[order]
        self.values: Obj = values[order]

    def find(self, ids: I64) -> tuple[I64, npt.NDArray[np.bool_]]:
        """Position of each id in the table, and whether it is there."""
        if self.ids.size == 0 or ids.size == 0:
            return np.zeros(ids.size, dtype=np.int64), np.zeros(ids.size, dtype=bool)
        pos = np.minimum(np.searchsorted(self.ids, ids), self.ids.size - 1)
        return pos, self.ids[pos] == ids

    def lookup(self, ids: I64, missing: str = "") -> Obj:
        """Strings for ``ids`` (a few ids: thread names, ...)."""
        out = np.empty(ids.size, dtype=object)
        out[:] = missing
        pos, hit = self.find(ids)
        out[hit] = self.values[pos[hit]]
        return out


# ---------------------------------------------------------------------------------------------
# the reader


@dataclass
class _Rows:
    """A block of events as numpy columns; string columns hold :class:`_Strings` codes."""

    start: I64
    end: I64
    pid: I64
    device: I32
    stream: I64
    tid: I64
    correlation: I64
    category: I32
    name: I32
    lane: I32
    thread_name: I32

    def take(self, idx: npt.NDArray[np.intp]) -> _Rows:
        return _Rows(**{k: v[idx] for k, v in self.__dict__.items()})

    @staticmethod
    def concat(blocks: Sequence[_Rows]) -> _Rows:
        """Stack blocks column by column, emptying the blocks' columns as it goes, so that the
        peak holds one extra column rather than a second copy of everything."""
        if len(blocks) == 1:
            return blocks[0]
        if not blocks:
            return _Rows.empty()
        out: dict[str, npt.NDArray[Any]] = {}
        for k in _Rows.__annotations__:
            out[k] = np.concatenate([getattr(b, k) for b in blocks])
            for b in blocks:
                setattr(b, k, np.empty(0, dtype=getattr(b, k).dtype))  # a [:0] view would pin it
        return _Rows(**out)

    def group_by(self, rank: I32) -> I32:
        """Reorder the rows (in place, one column at a time) so that each rank's rows are
        contiguous, keeping their order within a rank (a stable sort): then
        :func:`traceoverlap.model.split_units` cuts units as views instead of copies."""
        if rank.size < 2 or bool((rank[1:] >= rank[:-1]).all()):
            return rank
        order = np.argsort(rank, kind="stable")
        for k in _Rows.__annotations__:
            setattr(self, k, getattr(self, k)[order])
        return rank[order]

    @staticmethod
    def empty() -> _Rows:
        z, z32 = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        return _Rows(z, z, z, z32, z, z, z, z32, z32, z32, z32)

    def __len__(self) -> int:
        return int(self.start.size)


@dataclass
class _Nvtx:
    """NVTX rows read once: the ranges (as host rows) and, per row of the table that names a
    rank (``rank N``), that rank and its process."""

    ranges: _Rows
    rank_pid: I64
    rank_value: I64


def _rank_numbers(values: Obj) -> I64:
    """Per string: N when it reads ``rank N``, else -1 (the pattern only where "rank" appears)."""
    out = np.full(len(values), -1, dtype=np.int64)
    if len(values) == 0:
        return out
    hint = np.fromiter(("ank" in v or "ANK" in v for v in values.tolist()), bool, len(values))
    for i in np.flatnonzero(hint).tolist():
        m = _RANK_TEXT.match(values[i])
        if m is not None:
            out[i] = int(m.group(1))
    return out


def _ranks_running(events: pd.DataFrame, category: str, pattern: re.Pattern[str]) -> set[int]:
    """Ranks with events of ``category`` whose name matches ``pattern``."""
    cat_mask = (events["category"] == category).to_numpy()
    matches = per_category(
        events["name"], lambda n: pattern.search(n) is not None, rows=cat_mask, dtype=bool
    )
    hit = cat_mask & matches[events["name"].cat.codes.to_numpy()]
    return {int(r) for r in pd.unique(events["rank"].to_numpy()[hit])}


_NCCL = re.compile(r"nccl", re.IGNORECASE)


class _Reader:
    def __init__(
        self,
        path: Path,
        file: Path,
        con: sqlite3.Connection,
        keep_range: RangeFilter | None = None,
    ) -> None:
        self.path = path
        self.keep_range = keep_range
        self.file = file
        self.con = con
        self.notes: list[str] = []
        self.tables = [
            str(name)
            for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        self._columns: dict[str, list[str]] = {}
        self.names = _Strings()
        self.lanes = _Strings()
        self.thread_names = _Strings()
        self.strings = _StringIds(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object))
        self._thread_names: tuple[I64, I64] | None = None
        self.gpu_pids: list[int] = []

    # -- schema discovery -------------------------------------------------------------------

    def table(self, name: str) -> str | None:
        """The table's name as stored (case-insensitive match), or None when absent."""
        if name in self.tables:
            return name
        low = name.lower()
        return next((t for t in self.tables if t.lower() == low), None)

    def columns(self, table: str) -> list[str]:
        if table not in self._columns:
            rows = self.con.execute(f"PRAGMA table_info({_q(table)})").fetchall()
            self._columns[table] = [str(r[1]) for r in rows]
        return self._columns[table]

    def has(self, table: str, *cols: str) -> bool:
        return set(cols) <= set(self.columns(table))

    def require(self, table: str, cols: Sequence[str]) -> None:
        missing = [c for c in cols if c not in self.columns(table)]
        if missing:
            raise TraceFormatError(
                self.path,
                f"table {table} lacks column(s) {', '.join(missing)}: "
                "not an nsys SQLite export schema this reader knows",
                _EXPORT_HINT + " with a recent Nsight Systems",
            )

    def usable(self, table: str, cols: Sequence[str]) -> bool:
        """An optional table (launches, NVTX) lacking columns is skipped with a note, not fatal."""
        missing = [c for c in cols if c not in self.columns(table)]
        if missing:
            self.notes.append(
                f"Table {table} lacks column(s) {', '.join(missing)} and was not read."
            )
        return not missing

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """A small metadata query (types are checked by the caller with :func:`_int`)."""
        return self.con.execute(sql, tuple(params)).fetchall()

    def scan(
        self,
        table: str,
        int_cols: Sequence[str],
        text_cols: Sequence[str] = (),
        text_keep: RangeFilter | None = None,
    ) -> Columns:
        """The columns of ``table`` that it has (absent ones are simply missing from the result)."""
        have = set(self.columns(table))
        return read_columns(
            self.con,
            self.file,
            table,
            [c for c in int_cols if c in have],
            [c for c in text_cols if c in have],
            text_keep,
        )

    def nvtx_text_keep(self) -> RangeFilter | None:
        """The inline NVTX texts worth decoding: the ranges ``keep_range`` wants, and the texts
        :func:`_rank_numbers` looks at for ``rank N`` (those with "ank" or "ANK")."""
        wanted = self.keep_range
        if wanted is None:
            return None
        including = getattr(wanted, "including", None)  # a namefilter.NameTest
        if including is not None:
            return cast(RangeFilter, including("ank", "ANK"))
        return lambda t: "ank" in t or "ANK" in t or wanted(t)

    def int_column(self, cols: Columns, table: str, name: str, default: int) -> I64:
        """Column ``name`` with ``default`` where it is NULL, absent or not an integer (the last
        counted in a note)."""
        if name not in cols.ints:
            return np.full(cols.n, default, dtype=np.int64)
        values, kinds = cols.ints[name], cols.kinds[name]
        bad = kinds != INT
        if bad.any():
            other = int(np.count_nonzero(kinds == OTHER))
            if other:
                self.notes.append(
                    f"{other} {table}.{name} values are not integers and were read as {default}."
                )
            values[bad] = default  # in place: the scan's arrays are ours, read once
        return values

    def valid_times(self, cols: Columns, table: str, what: str) -> npt.NDArray[np.bool_]:
        """Rows whose start and end are integers; the others are counted in a note."""
        ok = np.ones(cols.n, dtype=bool)
        for c in ("start", "end"):
            if c in cols.kinds:
                ok &= cols.kinds[c] == INT
        bad = int(ok.size - np.count_nonzero(ok))
        if bad:
            self.notes.append(
                f"Dropped {bad} {what} of {table} whose start or end is not an integer "
                "(NULL, text, real or blob)."
            )
        return ok

    # -- top level --------------------------------------------------------------------------

    def read(self) -> Timeline:
        strings = self.table(_STRINGS)
        is_nsys = (
            strings is not None
            or self.table("META_DATA_EXPORT") is not None
            or self.table("EXPORT_META_DATA") is not None
            or any(t.upper().startswith("CUPTI_ACTIVITY_KIND_") for t in self.tables)
            or self.table(_NVTX) is not None
        )
        if not is_nsys:
            raise TraceFormatError(
                self.path,
                "an SQLite file but not an Nsight Systems export "
                "(no StringIds, META_DATA_EXPORT or CUPTI_ACTIVITY_KIND_* tables)",
                _EXPORT_HINT,
            )
        if strings is not None:
            self.strings = self.read_string_ids(strings)
        version = self.format_version()
        offset, clock = self.clock_offset()

        gpu = self.read_gpu()
        self.gpu_pids = [int(p) for p in sorted(pd.unique(gpu.pid))]
        nvtx = self.read_nvtx()
        if len(gpu):
            groups, ranks, rank_source, world_size = self.assign_ranks(gpu, nvtx)
            host = _Rows.concat([self.read_runtime(sorted({p for p, _ in groups})), nvtx.ranges])
            device_kind = "gpu"
        else:
            if len(nvtx.ranges) == 0:
                raise TraceFormatError(
                    self.path,
                    "the export has no GPU activity and no NVTX ranges: nothing to analyze",
                    "trace CUDA (`nsys profile -t cuda,nvtx`), or on CPU runs mark steps and "
                    "phases with NVTX ranges (`nsys profile -t nvtx`)",
                )
            groups, ranks, rank_source, world_size = self.assign_cpu_ranks(nvtx)
            host = nvtx.ranges
            device_kind = "cpu"
            self.notes.append(
                "CPU capture (no CUDA activity in the export): each process's NVTX ranges are its "
                "timeline (if the program did use a GPU, trace it: `nsys profile -t cuda,nvtx`)."
            )
        del nvtx
        rows, rank = self.place(gpu, host, groups, ranks)
        del host, gpu
        rank = rows.group_by(rank)

        category = pd.Categorical.from_codes(
            rows.category, categories=_index(np.array(CATEGORIES, dtype=object))
        )
        if offset:
            rows.start += offset
            rows.end += offset
        events = make_events(
            len(rows),
            {
                "rank": rank,
                "pid": rows.pid,
                "device": rows.device,
                "stream": rows.stream,
                "tid": rows.tid,
                "lane": self.lanes.categorical(rows.lane),
                "thread_name": self.thread_names.categorical(rows.thread_name),
                "category": category.remove_unused_categories(),
                "name": self.names.categorical(rows.name),
                "start_ns": rows.start,
                "end_ns": rows.end,
                "correlation": rows.correlation,
            },
        )
        traces = self.trace_infos(
            groups, ranks, rank_source, world_size, version, clock, device_kind
        )
        if device_kind == "gpu":
            nccl = _ranks_running(events, "kernel", _NCCL)
            traces = tuple(replace(t, backend="nccl") if t.rank in nccl else t for t in traces)
        else:
            gloo = _ranks_running(events, "annotation", _GLOO_RANGE)
            traces = tuple(replace(t, backend="gloo") if t.rank in gloo else t for t in traces)
        return Timeline(events, traces)

    def place(
        self, gpu: _Rows, host: _Rows, groups: list[tuple[int, int]], ranks: list[int]
    ) -> tuple[_Rows, I32]:
        """All rows with their rank: GPU rows by (pid, device); host rows by pid, copied to every
        rank of a process that drives several GPUs; host rows of processes outside the groups go."""
        keys = np.array([(p << 32) | (d & 0xFFFFFFFF) for p, d in groups], dtype=np.int64)
        order = np.argsort(keys)
        gkey = (gpu.pid << 32) | (gpu.device.astype(np.int64) & 0xFFFFFFFF)
        if gkey.size:
            gpu_rank = np.asarray(ranks, dtype=np.int32)[order][np.searchsorted(keys[order], gkey)]
        else:
            gpu_rank = np.zeros(0, dtype=np.int32)

        by_pid: dict[int, list[int]] = {}
        for (pid, _), r in zip(groups, ranks, strict=True):
            by_pid.setdefault(pid, []).append(r)
        pids = np.array(sorted(by_pid), dtype=np.int64)
        first = np.array([by_pid[int(p)][0] for p in pids], dtype=np.int32)
        pos = np.minimum(np.searchsorted(pids, host.pid), max(pids.size - 1, 0))
        mine = pids[pos] == host.pid
        if not mine.all():
            host = host.take(np.flatnonzero(mine))
            pos = pos[mine]
        blocks, rank_parts = [gpu, host], [gpu_rank, first[pos]]
        for pid, rs in by_pid.items():
            if len(rs) > 1:
                idx = np.flatnonzero(host.pid == pid)
                for r in rs[1:]:
                    blocks.append(host.take(idx))
                    rank_parts.append(np.full(idx.size, r, dtype=np.int32))
        return _Rows.concat(blocks), np.concatenate(rank_parts)

    # -- metadata ---------------------------------------------------------------------------

    def read_string_ids(self, table: str) -> _StringIds:
        if not self.has(table, "id", "value"):
            self.notes.append(f"Table {table} lacks id/value columns: names were not resolved.")
            return _StringIds(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object))
        cols = self.scan(table, ["id"], ["value"])
        ok = cols.kinds["id"] == INT
        values = cols.texts["value"]
        if not ok.all():
            self.notes.append(
                f"{int(np.count_nonzero(~ok))} {table} rows have no integer id and were ignored."
            )
        values = values[ok]
        values[pd.isna(values)] = ""
        if cols.bad_utf8:
            self.notes.append(
                f"{cols.bad_utf8} {table} strings are not valid UTF-8: shown with replacement "
                "characters."
            )
        return _StringIds(cols.ints["id"][ok], values)

    def format_version(self) -> str | None:
        # META_DATA_EXPORT since schema 3.x of 2023; EXPORT_META_DATA in 2022.4 (schema 3.0)
        for name in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            meta = self.table(name)
            if meta is not None and self.has(meta, "name", "value"):
                row = self.rows(
                    f"SELECT value FROM {_q(meta)} WHERE name = 'EXPORT_SCHEMA_VERSION' LIMIT 1"
                )
                if row and row[0][0] is not None:
                    return str(row[0][0])
                return None
        self.notes.append("The export has no META_DATA_EXPORT table: schema version unknown.")
        return None

    def clock_offset(self) -> tuple[int, str]:
        """Nanoseconds to add to export timestamps to get unix-epoch time, and the clock name.

        ``utcEpochNs`` is the UTC time at the session start. Since schema 3.x of 2023 the export
        also has ``systemClockNs``, its own timestamp of that instant (timestamps are on the
        system clock): ``unix = t - systemClockNs + utcEpochNs``. Without it (2022.4) timestamps
        count from the session start: ``unix = t + utcEpochNs``.
        """
        sess = self.table("TARGET_INFO_SESSION_START_TIME")
        utc: int | None = None
        base = 0
        if sess is not None and self.has(sess, "utcEpochNs"):
            has_sys = self.has(sess, "systemClockNs")
            sel = "utcEpochNs, " + ("systemClockNs" if has_sys else "NULL")
            found = self.rows(f"SELECT {sel} FROM {_q(sess)} LIMIT 1")
            if found:
                utc = _int(found[0][0])
                sysclk = _int(found[0][1])
                if found[0][0] is not None and utc is None:
                    self.notes.append(
                        f"{sess}.utcEpochNs is not an integer ({found[0][0]!r}): times are "
                        "relative to the capture."
                    )
                if has_sys and found[0][1] is not None and sysclk is None:
                    self.notes.append(
                        f"{sess}.systemClockNs is not an integer ({found[0][1]!r}): times are "
                        "relative to the capture."
                    )
                    utc = None
                base = sysclk or 0
        if utc is not None and utc <= 0:
            # an export of a session whose start was not recorded writes 0: not 1 January 1970
            self.notes.append(
                f"{sess}.utcEpochNs is {utc}, not a real start time: times are relative to the "
                "capture."
            )
            return 0, "relative"
        if utc is None:
            self.notes.append(
                "The export does not record when the capture started "
                "(TARGET_INFO_SESSION_START_TIME): times are relative to the capture."
            )
            return 0, "relative"
        return utc - base, "unix"

    def enum_ids(self, table: str, names: Sequence[str], default: Sequence[int]) -> list[int]:
        """Ids of enum entries by name (the export's own enum table), else the known defaults."""
        t = self.table(table)
        if t is None or not self.has(t, "id", "name"):
            return list(default)
        marks = ",".join("?" for _ in names)
        found = [
            _int(r[0]) for r in self.rows(f"SELECT id FROM {_q(t)} WHERE name IN ({marks})", names)
        ]
        ids = sorted(i for i in found if i is not None)
        return ids if ids else list(default)

    # -- GPU activity -----------------------------------------------------------------------

    def read_gpu(self) -> _Rows:
        blocks: list[_Rows] = []
        dropped = 0
        for table_name, category in ((_KERNEL, "kernel"), (_MEMCPY, "memcpy"), (_MEMSET, "memset")):
            t = self.table(table_name)
            if t is None:
                continue
            self.require(t, ("start", "end", "deviceId", "streamId"))
            name_col: str | None = None
            if category == "kernel":
                # shortName is what classification matches (demangled names carry templates)
                name_col = next(
                    (
                        c
                        for c in ("shortName", "demangledName", "mangledName")
                        if c in self.columns(t)
                    ),
                    None,
                )
                if name_col is None:
                    self.require(t, ("shortName",))
            elif category == "memcpy":
                name_col = "copyKind"
            wanted = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid"]
            cols = self.scan(t, wanted + ([name_col] if name_col else []))
            if cols.n == 0:
                continue
            ok = self.valid_times(cols, t, "GPU activities")
            start, end = cols.ints["start"], cols.ints["end"]
            n_valid = int(np.count_nonzero(ok))
            ok &= (start >= 0) & (end >= start)
            dropped += n_valid - int(np.count_nonzero(ok))
            if "globalPid" in cols.ints:
                gpid = self.int_column(cols, t, "globalPid", 0)
            else:
                gpid = np.full(cols.n, self.sole_host_global_pid(t), dtype=np.int64)
            keep = None if ok.all() else np.flatnonzero(ok)

            start, end = _sel(start, keep), _sel(end, keep)
            dev = _sel(self.int_column(cols, t, "deviceId", -1), keep)
            stream = _sel(self.int_column(cols, t, "streamId", -1), keep)
            corr = _sel(self.int_column(cols, t, "correlationId", -1), keep)
            gpid = _sel(gpid, keep)
            name_id = _sel(self.int_column(cols, t, name_col, -1), keep) if name_col else None
            del cols
            n = start.size
            if category == "kernel":
                assert name_id is not None
                if self.table(_STRINGS) is None:
                    raise TraceFormatError(
                        self.path,
                        "the export has no StringIds table, so kernel and range names cannot be "
                        "resolved",
                        _EXPORT_HINT,
                    )
                names = self.names.add_string_ids(self.strings, name_id, "<unnamed kernel>")
            elif category == "memcpy":
                assert name_id is not None
                labels = self.memcpy_labels()
                codes, kinds = pd.factorize(name_id)
                cats = np.empty(len(kinds), dtype=object)
                cats[:] = [f"Memcpy {labels.get(int(k), f'kind {int(k)}')}" for k in kinds]
                names = self.names.add_codes(codes, cats)
            else:
                names = self.names.add_const("Memset", n)
            codes, streams = pd.factorize(stream)
            lane_names = np.empty(len(streams), dtype=object)
            lane_names[:] = [f"stream {int(s)}" for s in streams]
            blocks.append(
                _Rows(
                    start=start,
                    end=end,
                    pid=_pid_of(gpid),
                    device=dev.astype(np.int32),
                    stream=stream,
                    tid=np.full(n, -1, dtype=np.int64),
                    correlation=corr,
                    category=np.full(n, _CAT_CODE[category], dtype=np.int32),
                    name=names,
                    lane=self.lanes.add_codes(codes, lane_names),
                    thread_name=self.thread_names.add_const("", n),
                )
            )
        if dropped:
            self.notes.append(
                f"Dropped {dropped} GPU activities with negative timestamps "
                "(before the capture start) or an end before their start."
            )
        return _Rows.concat(blocks)

    def sole_host_global_pid(self, table: str) -> int:
        """For a GPU table without globalPid: the one process that made CUDA calls, if only one."""
        rt = self.table(_RUNTIME)
        pids: set[int] = set()
        if rt is not None and "globalTid" in self.columns(rt):
            for (g,) in self.rows(
                f'SELECT DISTINCT "globalTid" >> 24 FROM {_q(rt)} '
                "WHERE typeof(\"globalTid\") = 'integer' LIMIT 2"
            ):
                if _int(g) is not None:
                    pids.add(int(g) & 0xFFFFFF)
        if len(pids) == 1:
            return next(iter(pids)) << 24
        self.notes.append(f"Table {table} has no globalPid: its GPU work was given pid 0.")
        return 0

    def memcpy_labels(self) -> dict[int, str]:
        t = self.table("ENUM_CUDA_MEMCPY_OPER")
        if t is None or not self.has(t, "id", "label"):
            return dict(_MEMCPY_LABELS)
        out = {}
        for i, lab in self.rows(f"SELECT id, label FROM {_q(t)}"):
            if _int(i) is not None and lab is not None:
                out[int(i)] = str(lab)
        return out or dict(_MEMCPY_LABELS)

    # -- host rows: CUDA API calls and NVTX ranges ------------------------------------------

    def thread_ids(self, cols: Columns, table: str, gpu_pids: Sequence[int]) -> I64 | None:
        """A host table's globalTid per row; without the column, the rows belong to the only GPU
        process when there is one (a minimal export), else the table cannot be placed (None)."""
        if "globalTid" in cols.ints:
            return self.int_column(cols, table, "globalTid", 0)
        if len(gpu_pids) == 1:
            self.notes.append(
                f"Table {table} has no globalTid: its rows were given to process {gpu_pids[0]}, "
                "the only one with GPU work."
            )
            return np.full(cols.n, int(gpu_pids[0]) << 24, dtype=np.int64)
        self.notes.append(
            f"Table {table} has no globalTid and the export holds "
            + ("several GPU processes" if gpu_pids else "no GPU process")
            + ": it was not read."
        )
        return None

    def read_runtime(self, gpu_pids: Sequence[int]) -> _Rows:
        rt = self.table(_RUNTIME)
        if rt is None or not self.usable(rt, ("start", "end", "correlationId")):
            return _Rows.empty()
        cols = self.scan(rt, ["start", "end", "globalTid", "correlationId", "eventClass", "nameId"])
        gtid = self.thread_ids(cols, rt, gpu_pids)
        if gtid is None or cols.n == 0:
            return _Rows.empty()
        ok = self.valid_times(cols, rt, "CUDA API calls")
        start, end = cols.ints["start"], cols.ints["end"]
        n_int = int(np.count_nonzero(ok))
        ok &= (start >= 0) & (end >= start)
        dropped = n_int - int(np.count_nonzero(ok))
        keep = np.flatnonzero(ok)
        corr = self.int_column(cols, rt, "correlationId", -1)[keep]
        cls = self.int_column(cols, rt, "eventClass", 0)[keep]
        name_id = self.int_column(cols, rt, "nameId", -1)[keep]
        start, end, gtid = start[keep], end[keep], gtid[keep]
        del cols
        if dropped:
            self.notes.append(
                f"Dropped {dropped} CUDA API calls with negative timestamps "
                "(before the capture start) or an end before their start."
            )
        # every API row is kept (launches are found by correlation, never by API name)
        driver = self.enum_ids("ENUM_NSYS_EVENT_CLASS", ("TRACE_PROCESS_EVENT_CUDA_DRIVER",), (1,))
        category = np.where(np.isin(cls, driver), _CAT_CODE["driver"], _CAT_CODE["runtime"])
        names = self.names.add_string_ids(self.strings, name_id, "<CUDA API>")
        return self._host_block(start, end, gtid, corr, category.astype(np.int32), names)

    def read_nvtx(self) -> _Nvtx:
        """Every NVTX range of every process (placed later), and the ``rank N`` texts."""
        empty = _Nvtx(_Rows.empty(), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        nv = self.table(_NVTX)
        if nv is None or not self.usable(nv, ("start", "end")):
            return empty
        cols = self.scan(
            nv,
            ["start", "end", "eventType", "globalTid", "endGlobalTid", "textId"],
            ["text"],
            self.nvtx_text_keep(),
        )
        if cols.n == 0:
            return empty
        start, end = cols.ints["start"], cols.ints["end"]
        start_ok = cols.kinds["start"] == INT
        is_range, is_mark = self.nvtx_types(cols, nv)
        self.note_unfinished(cols, nv, is_range & ~is_mark & start_ok)
        is_range &= self.valid_ranges(cols, nv, is_range)
        gtid = self.thread_ids(cols, nv, self.gpu_pids)
        if gtid is None:
            return empty
        gtid = _ending_threads(cols, gtid, is_range)
        text = cols.texts.get("text")
        text_id = self.int_column(cols, nv, "textId", -1)
        if cols.bad_utf8:
            self.notes.append(
                f"{cols.bad_utf8} NVTX texts are not valid UTF-8: shown with replacement "
                "characters."
            )
        del cols
        # inline texts are factorized once, for the names and for the rank texts
        cand = np.flatnonzero((is_mark | is_range) & start_ok)
        text_code = np.full(is_range.size, -1, dtype=np.int64)
        uniques = np.zeros(0, dtype=object)
        if text is not None and cand.size:
            codes, found = pd.factorize(text[cand])  # None -> -1
            text_code[cand] = codes
            uniques = np.asarray(found, dtype=object)
        del text
        rank_pid, rank_value = self.rank_texts(text_code[cand], uniques, text_id[cand], gtid[cand])
        del cand
        if self.keep_range is not None:
            text_code, uniques = self.filter_ranges(is_range, text_code, uniques, text_id)
        # NVTX names: COALESCE(text, StringIds.value)
        keep = np.flatnonzero(is_range)
        names = self.names.add_string_ids(self.strings, text_id[keep], "")
        kept_code = text_code[keep]
        inline = np.flatnonzero(kept_code >= 0)
        if inline.size:
            names[inline] = self.names.add_codes(kept_code[inline], uniques, unique=True)
        del text_code
        n = keep.size
        ranges = self._host_block(
            start[keep],
            end[keep],
            gtid[keep],
            np.full(n, -1, dtype=np.int64),
            np.full(n, _CAT_CODE["annotation"], dtype=np.int32),
            names,
        )
        return _Nvtx(ranges, rank_pid, rank_value)

    def filter_ranges(
        self,
        is_range: npt.NDArray[np.bool_],
        text_code: I64,
        uniques: Obj,
        text_id: I64,
    ) -> tuple[I64, Obj]:
        """Clear ``is_range`` (in place) for the ranges whose name ``keep_range`` refuses, each
        distinct name tested once, and count them in a note; the inline texts come back compacted
        to the ones still in use, so the refused ones are freed."""
        assert self.keep_range is not None
        test = self.keep_range
        per_text = np.fromiter(
            (t != REFUSED and test(t) for t in uniques.tolist()), bool, len(uniques)
        )
        inline = text_code >= 0
        keep = np.where(inline, np.r_[per_text, False][text_code], False)
        pooled = is_range & ~inline
        if pooled.any():
            ids, inverse = np.unique(text_id[pooled], return_inverse=True)
            names = self.strings.lookup(ids)
            per_id = np.fromiter((test(str(t)) for t in names.tolist()), bool, ids.size)
            keep[pooled] = per_id[inverse]
        dropped = int(np.count_nonzero(is_range & ~keep))
        is_range &= keep
        if dropped:
            self.notes.append(
                f"{dropped} NVTX ranges were not read: their names match no step, phase, "
                "communication or wait pattern (the analysis uses no other range)."
            )
        used = np.flatnonzero(
            per_text
            & np.bincount(text_code[is_range & inline], minlength=len(uniques)).astype(bool)
        )
        remap = np.full(len(uniques) + 1, -1, dtype=np.int64)
        remap[used] = np.arange(used.size)
        return remap[text_code], uniques[used]

    def nvtx_types(
        self, cols: Columns, nv: str
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """Which rows are ranges and which are marks; without the eventType column (or its value)
        every row with an end is a range, and rows without one are marks."""
        has_end = cols.kinds["end"] == INT
        if "eventType" not in cols.ints:
            self.notes.append(
                f"Table {nv} has no eventType column: every row with an end was read as a range."
            )
            return np.ones(cols.n, dtype=bool), ~has_end
        etype = cols.ints["eventType"]
        etype_ok = cols.kinds["eventType"] == INT
        range_types = self.enum_ids(
            "ENUM_NSYS_EVENT_TYPE", _NVTX_RANGE_TYPE_NAMES, _NVTX_RANGE_TYPES_DEFAULT
        )
        mark_types = self.enum_ids(
            "ENUM_NSYS_EVENT_TYPE", _NVTX_MARK_TYPE_NAMES, _NVTX_MARK_TYPES_DEFAULT
        )
        untyped = int(np.count_nonzero(~etype_ok))
        if untyped:
            self.notes.append(
                f"{untyped} {nv} rows have no integer eventType: those with an end were read "
                "as ranges."
            )
        return (
            np.where(etype_ok, np.isin(etype, range_types), True),
            np.where(etype_ok, np.isin(etype, mark_types), ~has_end),
        )

    def note_unfinished(self, cols: Columns, nv: str, is_range: npt.NDArray[np.bool_]) -> None:
        """Count, in a note, the ranges never closed (``end`` NULL: a push without a pop, or a
        capture stopped inside the range): they are dropped like those with ``end = -1``."""
        from ._sqlite_columns import NULL

        open_ = np.flatnonzero(is_range & (cols.kinds["end"] == NULL))
        if not open_.size:
            return
        some = open_[:50]
        text = cols.texts.get("text")
        named = [] if text is None else [str(t) for t in text[some] if t is not None]
        if "textId" in cols.ints:
            pos, hit = self.strings.find(cols.ints["textId"][some])
            named += [str(v) for v in self.strings.values[pos[hit]]]
        shown = f" ({', '.join(sorted(set(named))[:3])})" if named else ""
        self.notes.append(
            f"Dropped {open_.size} NVTX ranges of {nv} that were never closed{shown}: no end (a "
            "push without a pop, or the capture stopped inside them)."
        )

    def valid_ranges(
        self, cols: Columns, nv: str, is_range: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.bool_]:
        """Ranges with integer, non-negative, ordered times; the others are counted in notes
        (ranges without an end are unfinished: not ranges, and not counted)."""
        start, end = cols.ints["start"], cols.ints["end"]
        start_ok = cols.kinds["start"] == INT
        has_end = cols.kinds["end"] == INT
        bad_time = int(np.count_nonzero(is_range & has_end & ~start_ok))
        end_bad = int(np.count_nonzero(is_range & start_ok & (cols.kinds["end"] == OTHER)))
        if bad_time + end_bad:
            self.notes.append(
                f"Dropped {bad_time + end_bad} NVTX ranges of {nv} whose start or end is not an "
                "integer (text, real or blob)."
            )
        ok = has_end & start_ok
        negative = is_range & ok & ((start < 0) | (end < start))
        if negative.any():
            self.notes.append(
                f"Dropped {int(np.count_nonzero(negative))} NVTX ranges with negative timestamps "
                "(before the capture start) or an end before their start."
            )
        return np.asarray(ok & ~negative, dtype=bool)

    def rank_texts(self, text_code: I64, uniques: Obj, text_id: I64, gtid: I64) -> tuple[I64, I64]:
        """(pid, N) of the NVTX rows (marks and ranges) whose text says ``rank N``: inline texts
        by their factorized codes, registered ones through StringIds."""
        per_text = np.r_[_rank_numbers(uniques), -1]  # code -1 (no inline text) picks the -1
        rank = per_text[text_code]
        pool_rank = _rank_numbers(self.strings.values)
        if (pool_rank >= 0).any():
            pos, hit = self.strings.find(text_id)
            rank = np.where((text_code < 0) & hit, pool_rank[pos], rank)
        found = rank >= 0
        return _pid_of(gtid[found]), rank[found]

    def _host_block(
        self, start: I64, end: I64, gtid: I64, corr: I64, category: I32, names: I32
    ) -> _Rows:
        """Host rows; lane ``"thread {tid} ({name})"`` and thread_name from ThreadNames."""
        n = start.size
        codes, threads = pd.factorize(gtid)
        threads = np.asarray(threads, dtype=np.int64)
        thread_names = self.thread_name_table(threads)
        lanes = np.empty(threads.size, dtype=object)
        lanes[:] = [
            f"thread {int(g) & 0xFFFFFF}" + (f" ({name})" if name else "")
            for g, name in zip(threads, thread_names, strict=True)
        ]
        return _Rows(
            start=start,
            end=end,
            pid=_pid_of(gtid),
            device=np.full(n, -1, dtype=np.int32),
            stream=np.full(n, -1, dtype=np.int64),
            tid=_tid_of(gtid),
            correlation=corr,
            category=category,
            name=names,
            lane=self.lanes.add_codes(codes, lanes),
            thread_name=self.thread_names.add_codes(codes, thread_names),
        )

    def thread_name_table(self, gtids: I64) -> Obj:
        """Name of each thread in ``gtids`` (globalTid values), ``""`` when unnamed."""
        out = np.empty(gtids.size, dtype=object)
        out[:] = ""
        if gtids.size == 0:
            return out
        if self._thread_names is None:
            gt: list[int] = []
            ids: list[int] = []
            t = self.table("ThreadNames")
            if t is not None and self.has(t, "nameId", "globalTid"):
                unnamed = 0
                for g, i in self.rows(f"SELECT globalTid, nameId FROM {_q(t)}"):
                    if _int(g) is None or _int(i) is None:
                        unnamed += 1
                        continue
                    gt.append(g)
                    ids.append(i)
                if unnamed:
                    self.notes.append(
                        f"{unnamed} {t} rows have no integer thread id or name id: those threads "
                        "are shown unnamed."
                    )
            g_arr = np.array(gt, dtype=np.int64)
            i_arr = np.array(ids, dtype=np.int64)
            # a thread renamed later has several rows: the last one recorded wins
            order = np.argsort(g_arr, kind="stable")
            g_arr, i_arr = g_arr[order], i_arr[order]
            last = np.r_[g_arr[1:] != g_arr[:-1], True] if g_arr.size else np.zeros(0, dtype=bool)
            self._thread_names = (g_arr[last], i_arr[last])
        g_sorted, name_id = self._thread_names
        if g_sorted.size == 0:
            return out
        pos = np.minimum(np.searchsorted(g_sorted, gtids), g_sorted.size - 1)
        hit = g_sorted[pos] == gtids
        out[hit] = self.strings.lookup(name_id[pos[hit]])
        return out

    def process_names(self) -> dict[int, str]:
        t = self.table("PROCESSES")
        if t is None or not self.has(t, "pid", "name"):
            return {}
        out = {}
        for p, n in self.rows(f"SELECT pid, name FROM {_q(t)}"):
            if _int(p) is not None and n is not None:
                out[int(p)] = str(n)
        return out

    # -- ranks ------------------------------------------------------------------------------

    def assign_ranks(
        self, gpu: _Rows, nvtx: _Nvtx
    ) -> tuple[list[tuple[int, int]], list[int], str, int | None]:
        """(pid, device) groups ordered by device then pid, their ranks, and where ranks came from."""
        keys = pd.unique((gpu.device.astype(np.int64) << 32) | gpu.pid)
        groups = [(int(k) & 0xFFFFFFFF, int(k) >> 32) for k in np.sort(keys)]
        return self._ranks(groups, nvtx)

    def assign_cpu_ranks(
        self, nvtx: _Nvtx
    ) -> tuple[list[tuple[int, int]], list[int], str, int | None]:
        """One group per process that recorded NVTX ranges, ordered by pid (device -1)."""
        pids = np.sort(pd.unique(nvtx.ranges.pid))
        return self._ranks([(int(p), -1) for p in pids], nvtx)

    def _ranks(
        self, groups: list[tuple[int, int]], nvtx: _Nvtx
    ) -> tuple[list[tuple[int, int]], list[int], str, int | None]:
        pids = sorted({p for p, _ in groups})
        one_group_each = len(pids) == len(groups)
        env_ranks, world = self.ranks_from_environment(pids)
        if one_group_each and env_ranks is not None:
            return groups, [env_ranks[p] for p, _ in groups], "environment", world
        nvtx_ranks = self.ranks_from_nvtx(pids, nvtx) if one_group_each else None
        if nvtx_ranks is not None:
            return groups, [nvtx_ranks[p] for p, _ in groups], "nvtx", None
        named = rank_from_filename(self.path)
        if named is not None and len(groups) == 1:
            # one export per rank, named after it (rank3.sqlite): common with torchrun + nsys
            return groups, [named], "filename", None
        return groups, list(range(len(groups))), "process-order", None

    def ranks_from_environment(self, pids: list[int]) -> tuple[dict[int, int] | None, int | None]:
        """Rank per process from the launch environment, when the export has it: ``MPI_RANKS``
        (globalTid -> MPI rank, written when nsys traces MPI), else a ``RANK`` variable in an
        environment table keyed by process."""
        mpi = self.ranks_from_mpi(pids)
        if mpi is not None:
            return mpi, None
        for t in self.tables:
            if "ENV" not in t.upper():
                continue
            cols = self.columns(t)
            key = next((c for c in ("pid", "globalPid", "processId") if c in cols), None)
            if key is None or not {"name", "value"} <= set(cols):
                continue
            found, world = self.ranks_from_env_table(t, key)
            if all(p in found for p in pids) and len({found[p] for p in pids}) == len(pids):
                return {p: found[p] for p in pids}, world
        return None, None

    def ranks_from_mpi(self, pids: list[int]) -> dict[int, int] | None:
        mpi = self.table("MPI_RANKS")
        if mpi is None or not self.has(mpi, "globalTid", "rank"):
            return None
        by_pid: dict[int, set[int]] = {}
        for g, rank in self.rows(f"SELECT DISTINCT globalTid, rank FROM {_q(mpi)}"):
            if _int(g) is not None and _int(rank) is not None:
                by_pid.setdefault((int(g) >> 24) & 0xFFFFFF, set()).add(int(rank))
        one = {p: next(iter(r)) for p, r in by_pid.items() if len(r) == 1}
        if all(p in one for p in pids) and len({one[p] for p in pids}) == len(pids):
            return {p: one[p] for p in pids}
        return None

    def ranks_from_env_table(self, table: str, key: str) -> tuple[dict[int, int], int | None]:
        """pid -> RANK (processes with one value), and the one WORLD_SIZE when there is one."""
        found_rows = self.rows(
            f"SELECT {_q(key)}, name, value FROM {_q(table)} WHERE name IN ('RANK', 'WORLD_SIZE')"
        )
        ranks: dict[int, set[int]] = {}
        worlds: set[int] = set()
        for k, name, value in found_rows:
            k_int = _int(k)
            try:
                v = int(str(value).strip())
            except (TypeError, ValueError):
                continue
            if k_int is None:
                continue
            pid = k_int if key != "globalPid" else (k_int >> 24) & 0xFFFFFF
            if name == "RANK":
                ranks.setdefault(pid, set()).add(v)
            else:
                worlds.add(v)
        found = {p: next(iter(r)) for p, r in ranks.items() if len(r) == 1}
        return found, (worlds.pop() if len(worlds) == 1 else None)

    @staticmethod
    def ranks_from_nvtx(pids: list[int], nvtx: _Nvtx) -> dict[int, int] | None:
        """One ``rank N`` NVTX text (mark or range) per process, when the program emitted one."""
        ranks: dict[int, set[int]] = {}
        for p, r in set(zip(nvtx.rank_pid.tolist(), nvtx.rank_value.tolist(), strict=True)):
            ranks.setdefault(p, set()).add(r)
        found = {p: next(iter(r)) for p, r in ranks.items() if len(r) == 1}
        if all(p in found for p in pids) and len({found[p] for p in pids}) == len(pids):
            return {p: found[p] for p in pids}
        return None

    # -- per-rank descriptions --------------------------------------------------------------

    def gpu_names(self) -> dict[tuple[int, int], str]:
        """(pid, CUDA device ordinal) -> GPU name, when the export describes its GPUs.

        ``TARGET_INFO_CUDA_DEVICE`` maps each process's CUDA ordinal (``cudaId``, what kernels
        carry as ``deviceId``) to a GPU (``gpuId``): under ``CUDA_VISIBLE_DEVICES`` two processes'
        device 0 can be different GPUs. ``TARGET_INFO_GPU`` names the GPUs (``id``, ``name``).
        """
        gpu = self.table("TARGET_INFO_GPU")
        if gpu is None or not self.has(gpu, "id", "name"):
            return {}
        names = {
            int(i): str(n)
            for i, n in self.rows(f"SELECT id, name FROM {_q(gpu)}")
            if _int(i) is not None and n
        }
        out: dict[tuple[int, int], str] = {}
        cuda = self.table("TARGET_INFO_CUDA_DEVICE")
        if cuda is not None and self.has(cuda, "gpuId", "cudaId", "pid"):
            for pid, cuda_id, gpu_id in self.rows(f"SELECT pid, cudaId, gpuId FROM {_q(cuda)}"):
                if None not in (_int(pid), _int(cuda_id), _int(gpu_id)) and gpu_id in names:
                    out[(int(pid), int(cuda_id))] = names[int(gpu_id)]
        if not out and len(set(names.values())) == 1:
            # one GPU model in the machine: every device is that model
            only = next(iter(names.values()))
            out = {(-1, -1): only}
        return out

    def trace_infos(
        self,
        groups: list[tuple[int, int]],
        ranks: list[int],
        rank_source: str,
        world_size: int | None,
        version: str | None,
        clock: str,
        device_kind: str,
    ) -> tuple[TraceInfo, ...]:
        gpu_names = self.gpu_names() if device_kind == "gpu" else {}
        procs = self.process_names()
        infos = []
        for (pid, device), rank in zip(groups, ranks, strict=True):
            notes = list(dict.fromkeys(self.notes))
            proc = f"process {pid}" + (f" ({procs[pid]})" if pid in procs else "")
            if rank_source == "filename":
                notes.append(
                    f"The rank ({rank}) was taken from the file name: the export does not record it."
                )
            if rank_source == "process-order":
                where = f"on GPU {device}" if device_kind == "gpu" else "with NVTX ranges"
                order = "GPU, then pid" if device_kind == "gpu" else "pid"
                notes.append(
                    f"{proc[0].upper()}{proc[1:]} {where} was numbered rank {rank}: the export "
                    f"does not record ranks, so processes are numbered by {order}."
                )
            name = gpu_names.get((pid, device), gpu_names.get((-1, -1)))
            infos.append(
                TraceInfo(
                    path=str(self.path),
                    format="nsys",
                    rank=rank,
                    world_size=world_size,
                    rank_source=rank_source,
                    device_kind=device_kind,
                    devices=(name,) if name else (),
                    format_version=version,
                    clock=clock,
                    pid=pid,
                    device=device if device_kind == "gpu" else None,
                    notes=tuple(notes),
                )
            )
        return tuple(sorted(infos, key=lambda t: t.rank))
