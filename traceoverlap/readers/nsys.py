"""Nsight Systems reader: ``nsys export --type sqlite`` files (and ``.nsys-rep`` through ``nsys``).

What it reads (tables and columns are discovered from ``sqlite_master`` / ``PRAGMA table_info``,
never assumed; see ``docs/formats.md``):

- ``CUPTI_ACTIVITY_KIND_KERNEL`` -> category ``kernel``, name = ``shortName`` (what classification
  matches on); ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET`` -> ``memcpy`` / ``memset``. GPU rows get
  ``pid`` from ``globalPid``, ``device`` = ``deviceId``, ``stream`` = ``streamId``, lane
  ``"stream {streamId}"``.
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` -> ``runtime`` (eventClass 0) or ``driver`` (eventClass 1), with
  ``correlation`` = ``correlationId``: every row, whatever the API name (NCCL launches with
  ``cuLaunchKernelEx``), because correlation ids, not names, tie launches to GPU work.
- ``NVTX_EVENTS`` push/pop and start/end ranges with an end -> ``annotation``, name =
  ``COALESCE(text, StringIds.value)``; step markers are among these.
- Host rows get ``pid``/``tid`` from ``globalTid`` (bits 24-47 / 0-23), thread names from
  ``ThreadNames``.

One export may hold several processes: GPU work is grouped by (pid, device) and each group is a
rank. Host rows of a process belong to every rank of that process. Ranks come from the export when
it records them (a ``RANK`` environment variable per process, or one ``rank N`` NVTX text per
process), else from the file name for a one-process export (``rank3.sqlite``), else from ordering
the groups by device then pid (``rank_source="process-order"``, said in the notes).

Times are integer nanoseconds as the export stores them, shifted to unix-epoch nanoseconds when
``TARGET_INFO_SESSION_START_TIME`` says when the capture started (``TraceInfo.clock == "unix"``).
Rows that start or end before the capture start (negative timestamps) are dropped.

Columns are read with SQL straight into numpy arrays, a bounded chunk of rows at a time (one scan
per chunk, each column rendered by SQLite as one comma-separated string that numpy parses): no
per-row Python object outlives its chunk except NVTX texts, which become categories. Measured on a
10 M-row, 0.5 GB synthetic export: about 20 s on one core, peak RSS about twice the Timeline.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..errors import TraceFormatError
from ..model import CATEGORIES, Timeline, TraceInfo, make_events

__all__ = ["read_nsys", "read_nsys_rep", "SQLITE_MAGIC"]

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]

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

# Rows are fetched this many at a time, so that the text SQLite hands back stays small.
_CHUNK_ROWS = 1 << 20

# NVTX event types (ENUM_NSYS_EVENT_TYPE) used when the export does not carry the enum table.
_NVTX_RANGE_TYPES_DEFAULT = (59, 60)
_NVTX_RANGE_TYPE_NAMES = ("NvtxPushPopRange", "NvtxStartEndRange")
_NVTX_ANY_TEXT_TYPES_DEFAULT = (34, 59, 60)
_NVTX_ANY_TEXT_TYPE_NAMES = ("NvtxMark", "NvtxPushPopRange", "NvtxStartEndRange")

# Labels of CUPTI memcpy kinds, used when the export has no ENUM_CUDA_MEMCPY_OPER table.
_MEMCPY_LABELS = {
    1: "Host-to-Device",
    2: "Device-to-Host",
    8: "Device-to-Device",
    9: "Host-to-Host",
    10: "Peer-to-Peer",
}

# Same spelling as the Kineto reader accepts: rank-3, rank3, _rank3, rank_3.
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])rank[-_]?(\d+)(?![0-9])", re.IGNORECASE)
_RANK_TEXT = re.compile(r"^\s*\[?\s*rank\s*[:=#_ ]?\s*(\d+)\s*\]?\s*$", re.IGNORECASE)

_CAT_CODE = {c: i for i, c in enumerate(CATEGORIES)}


# ---------------------------------------------------------------------------------------------
# public entry points


def read_nsys(path: str | os.PathLike[str]) -> Timeline:
    """Read an Nsight Systems SQLite export into a :class:`Timeline` (one rank per (pid, GPU)).

    All times are integer nanoseconds (unix epoch when the export records the session start).
    Raises :class:`TraceFormatError` for anything that is not a usable nsys export.
    """
    return _read_export(Path(path), Path(path))


def read_nsys_rep(path: str | os.PathLike[str]) -> Timeline:
    """Read an ``.nsys-rep`` report by exporting it to SQLite with ``nsys`` (which must be on PATH).

    The export is cached next to the report (``report.sqlite``) when that folder is writable, else
    in the temp folder, and reused while it is newer than the report (then ``nsys`` is not needed).
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
    return _read_export(cache, p)


def _read_export(export: Path, shown: Path) -> Timeline:
    """Read the SQLite file ``export``; errors and TraceInfo name ``shown`` (the user's file)."""
    _check_sqlite_file(export, shown)
    try:
        con = sqlite3.connect(f"{export.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error as exc:  # pragma: no cover - unopenable after the header check
        raise TraceFormatError(shown, f"cannot open the SQLite file: {exc}", _EXPORT_HINT) from exc
    try:
        return _Reader(shown, con).read()
    except sqlite3.DatabaseError as exc:
        raise TraceFormatError(
            shown, f"the SQLite file is damaged or incomplete ({exc})", _EXPORT_HINT
        ) from exc
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# .nsys-rep export


def _fresh(export: Path, report: Path) -> bool:
    return export.is_file() and export.stat().st_mtime >= report.stat().st_mtime


def _export_cache_path(report: Path) -> Path:
    """Where the SQLite export of ``report`` lives: beside it (``report.sqlite``, what ``nsys
    export`` writes by default) when that exists or the folder is writable, else the temp folder."""
    beside = report.with_suffix(".sqlite")
    if _fresh(beside, report):
        return beside
    if os.access(report.parent, os.W_OK) and (beside.is_file() or not beside.exists()):
        return beside
    digest = hashlib.sha1(str(report.resolve()).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "traceoverlap-nsys"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{report.stem}-{digest}.sqlite"


def _run_nsys_export(nsys: str, report: Path, cache: Path) -> None:
    cmd = [
        nsys,
        "export",
        "--type",
        "sqlite",
        "--force-overwrite",
        "true",
        "--output",
        str(cache),
        str(report),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise TraceFormatError(report, f"could not run `nsys export`: {exc}", _EXPORT_HINT) from exc
    if proc.returncode != 0 or not cache.is_file():
        lines = (proc.stderr or proc.stdout or "").strip().splitlines()
        last = lines[-1] if lines else f"exit status {proc.returncode}"
        raise TraceFormatError(report, f"`nsys export --type sqlite` failed: {last}", _EXPORT_HINT)


# ---------------------------------------------------------------------------------------------
# low-level SQLite helpers


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


def _rowid_chunks(con: sqlite3.Connection, table: str) -> list[tuple[int, int]]:
    """Half-open rowid ranges ``(lo, hi]`` of at most ``_CHUNK_ROWS`` rows each, covering the table.

    Exports have no indexes but every table has a rowid b-tree, so these ranges are cheap to find
    and make each chunk's query a bounded range scan.
    """
    t = _q(table)
    (hi,) = con.execute(f"SELECT max(rowid) FROM {t}").fetchone()
    if hi is None:
        return []
    (lo,) = con.execute(f"SELECT min(rowid) FROM {t}").fetchone()
    chunks: list[tuple[int, int]] = []
    prev = int(lo) - 1
    while prev < hi:
        row = con.execute(
            f"SELECT rowid FROM {t} WHERE rowid > ? ORDER BY rowid LIMIT 1 OFFSET ?",
            (prev, _CHUNK_ROWS - 1),
        ).fetchone()
        upper = int(row[0]) if row is not None else int(hi)
        chunks.append((prev, upper))
        prev = upper
    return chunks


def _read_ints(
    con: sqlite3.Connection, table: str, exprs: Sequence[str], where: str = ""
) -> list[I64]:
    """Integer SQL expressions over ``table`` (rows passing ``where``) as int64 arrays, rowid order.

    Each expression must not yield NULL (wrap nullable columns in ``COALESCE``). One scan per chunk
    renders every column as a comma-separated string (one ``group_concat`` each: the aggregates
    see the same rows in the same order, so the columns stay aligned) that numpy parses in one
    call: several times faster than a Python tuple per row, and nothing per row outlives a chunk.
    """
    t = _q(table)
    cond = f" AND ({where})" if where else ""
    sel = ", ".join(f"group_concat(CAST(({e}) AS INTEGER))" for e in exprs)
    parts: list[list[I64]] = [[] for _ in exprs]
    for lo, hi in _rowid_chunks(con, table):
        texts = con.execute(
            f"SELECT {sel} FROM {t} WHERE rowid > ? AND rowid <= ?{cond}", (lo, hi)
        ).fetchone()
        arrays = [
            np.fromstring(x, dtype=np.int64, sep=",") if x else np.zeros(0, dtype=np.int64)
            for x in texts
        ]
        if len({a.size for a in arrays}) > 1:
            raise sqlite3.DatabaseError(f"non-integer values in integer columns of {table}")
        for j, arr in enumerate(arrays):
            parts[j].append(arr)
        del texts
    return [np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for p in parts]


def _fetch_object_column(
    con: sqlite3.Connection, table: str, key_expr: str, value_expr: str, where: str
) -> tuple[I64, npt.NDArray[np.object_]]:
    """``(keys, values)`` for the rows passing ``where``: for the few text columns we need."""
    keys: list[I64] = []
    vals: list[npt.NDArray[np.object_]] = []
    cur = con.execute(f"SELECT {key_expr}, {value_expr} FROM {_q(table)} WHERE {where}")
    while True:
        rows = cur.fetchmany(1 << 16)
        if not rows:
            break
        k, v = zip(*rows, strict=True)
        keys.append(np.asarray(k, dtype=np.int64))
        arr = np.empty(len(v), dtype=object)
        arr[:] = v
        vals.append(arr)
    if not keys:
        return np.zeros(0, np.int64), np.zeros(0, dtype=object)
    return np.concatenate(keys), np.concatenate(vals)


# ---------------------------------------------------------------------------------------------
# string columns built as categorical codes


class _Strings:
    """Categorical codes for one string column built from several sources.

    Each ``add_*`` call returns global int32 codes for its rows; :meth:`categorical` turns any
    selection of such codes into a ``pd.Categorical`` with unique categories. Hash-based
    (``pd.factorize``) or binary-search lookups only: never a sort of the rows.
    """

    def __init__(self) -> None:
        self._cats: list[npt.NDArray[np.object_]] = []
        self._n = 0
        self._pool_offset: int | None = None

    def _block(self, categories: npt.NDArray[np.object_]) -> int:
        off = self._n
        self._cats.append(categories)
        self._n += len(categories)
        return off

    def add_const(self, value: str, n: int) -> I32:
        cats = np.empty(1, dtype=object)
        cats[0] = value
        return np.full(n, self._block(cats), dtype=np.int32)

    def add_codes(self, codes: npt.NDArray[np.integer], categories: npt.NDArray[np.object_]) -> I32:
        """Rows whose string is ``categories[codes]`` (codes of a small lookup table)."""
        return (codes + self._block(categories)).astype(np.int32)

    def add_values(self, values: npt.NDArray[np.object_]) -> I32:
        codes, uniques = pd.factorize(values)
        return self.add_codes(codes, np.asarray(uniques, dtype=object))

    def add_string_ids(self, pool: _StringIds, ids: I64, missing: str) -> I32:
        """Rows named by StringIds ids; ids absent from the table get ``missing``."""
        if self._pool_offset is None:
            self._pool_offset = self._block(pool.values)
        out = np.full(ids.size, self.add_const(missing, 1)[0], dtype=np.int32)
        if pool.ids.size and ids.size:
            pos = np.minimum(np.searchsorted(pool.ids, ids), pool.ids.size - 1)
            hit = pool.ids[pos] == ids
            out[hit] = pos[hit] + self._pool_offset
        return out

    def categorical(self, codes: I32) -> pd.Categorical:
        cats = np.concatenate(self._cats) if self._cats else np.zeros(0, dtype=object)
        remap, uniques = pd.factorize(cats)
        # keep only the categories in use (most of StringIds names nothing we kept), densely
        present = np.bincount(codes, minlength=len(cats)).astype(bool)
        used = np.zeros(len(uniques), dtype=bool)
        used[remap[present]] = True
        lut = (np.cumsum(used, dtype=np.int32) - 1)[remap]
        categories = pd.Index(np.asarray(uniques, dtype=object)[used], dtype=object)
        return pd.Categorical.from_codes(lut[codes], categories=categories)


class _StringIds:
    """The export's ``StringIds`` table, sorted by id for vectorised lookups."""

    def __init__(self, con: sqlite3.Connection, table: str) -> None:
        ids, values = _fetch_object_column(
            con, table, "id", "COALESCE(value, '')", "id IS NOT NULL"
        )
        order = np.argsort(ids, kind="stable")
        self.ids: I64 = ids[order]
        self.values: npt.NDArray[np.object_] = values[order]

    def lookup(self, ids: I64, missing: str = "") -> npt.NDArray[np.object_]:
        """Strings for ``ids`` (a few ids: thread names, ...)."""
        out = np.empty(ids.size, dtype=object)
        out[:] = missing
        if self.ids.size and ids.size:
            pos = np.minimum(np.searchsorted(self.ids, ids), self.ids.size - 1)
            hit = self.ids[pos] == ids
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
        out: dict[str, npt.NDArray[Any]] = {}
        for k in _Rows.__annotations__:
            out[k] = np.concatenate([getattr(b, k) for b in blocks])
            for b in blocks:
                setattr(b, k, np.empty(0, dtype=getattr(b, k).dtype))  # a [:0] view would pin it
        return _Rows(**out)

    @staticmethod
    def empty() -> _Rows:
        z, z32 = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        return _Rows(z, z, z, z32, z, z, z, z32, z32, z32, z32)

    def __len__(self) -> int:
        return int(self.start.size)


def _ranks_running_nccl(events: pd.DataFrame) -> set[int]:
    """Ranks that ran NCCL kernels: the export's only word on the communication backend."""
    names = events["name"].cat
    is_nccl = np.asarray(names.categories.str.contains("nccl", case=False, regex=False), bool)
    codes = names.codes.to_numpy()
    hit = (events["category"] == "kernel").to_numpy() & (codes >= 0)
    hit[hit] = is_nccl[codes[hit]]
    return {int(r) for r in np.unique(events["rank"].to_numpy()[hit])}


def _pid_of(global_id: I64) -> I64:
    return (global_id >> 24) & 0xFFFFFF


def _tid_of(global_id: I64) -> I64:
    return global_id & 0xFFFFFF


class _Reader:
    def __init__(self, path: Path, con: sqlite3.Connection) -> None:
        self.path = path
        self.con = con
        self.notes: list[str] = []
        self.tables = [
            str(name)
            for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        self._columns: dict[str, set[str]] = {}
        self.names = _Strings()
        self.lanes = _Strings()
        self.thread_names = _Strings()

    # -- schema discovery -------------------------------------------------------------------

    def table(self, name: str) -> str | None:
        """The table's name as stored (case-insensitive match), or None when absent."""
        if name in self.tables:
            return name
        low = name.lower()
        return next((t for t in self.tables if t.lower() == low), None)

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            rows = self.con.execute(f"PRAGMA table_info({_q(table)})").fetchall()
            self._columns[table] = {r[1] for r in rows}
        return self._columns[table]

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

    def col_or(self, table: str, col: str, default: str = "-1") -> str:
        """SQL for a column that may be NULL or absent: NULL/absent -> ``default``."""
        if col in self.columns(table):
            return f"COALESCE({_q(col)}, {default})"
        return default

    @staticmethod
    def valid(cols: list[I64]) -> tuple[list[I64], int]:
        """Drop rows (``cols[start_at]``...) that start before the capture (negative timestamps)
        or end before they start; filtering here rather than in SQL spares a counting scan."""
        start, end = cols[0], cols[1]
        ok = (start >= 0) & (end >= start)
        if ok.all():
            return cols, 0
        return [c[ok] for c in cols], int(ok.size - ok.sum())

    # -- top level --------------------------------------------------------------------------

    def read(self) -> Timeline:
        kernel = self.table(_KERNEL)
        strings = self.table(_STRINGS)
        is_nsys = (
            strings is not None
            or self.table("META_DATA_EXPORT") is not None
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
        if kernel is None:
            raise TraceFormatError(
                self.path,
                "the export has no CUDA kernel table (CUPTI_ACTIVITY_KIND_KERNEL): "
                "the capture did not trace CUDA",
                _CAPTURE_HINT,
            )
        if strings is None:
            raise TraceFormatError(
                self.path,
                "the export has no StringIds table, so kernel and range names cannot be resolved",
                _EXPORT_HINT,
            )
        self.strings = _StringIds(self.con, strings)
        version = self.format_version()
        offset, clock = self.clock_offset()

        gpu = self.read_gpu()
        if len(gpu) == 0:
            raise TraceFormatError(
                self.path,
                "the export has no GPU activity (its kernel, memcpy and memset tables are empty)",
                "profile a range in which the program runs CUDA work, with " + _CAPTURE_HINT,
            )
        groups, ranks, rank_source, world_size = self.assign_ranks(gpu)
        host = self.read_host(sorted({p for p, _ in groups}))
        rows, rank = self.place(gpu, host, groups, ranks)
        del host
        del gpu

        category = pd.Categorical.from_codes(rows.category, categories=pd.Index(CATEGORIES))
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
        traces = self.trace_infos(groups, ranks, rank_source, world_size, version, clock)
        nccl = _ranks_running_nccl(events)
        traces = tuple(replace(t, backend="nccl") if t.rank in nccl else t for t in traces)
        return Timeline(events, traces)

    def place(
        self, gpu: _Rows, host: _Rows, groups: list[tuple[int, int]], ranks: list[int]
    ) -> tuple[_Rows, I32]:
        """All rows with their rank: GPU rows by (pid, device); host rows by pid, copied to every
        rank of a process that drives several GPUs; host rows of processes without GPU work go."""
        keys = np.array([(p << 32) | (d & 0xFFFFFFFF) for p, d in groups], dtype=np.int64)
        order = np.argsort(keys)
        gkey = (gpu.pid << 32) | (gpu.device.astype(np.int64) & 0xFFFFFFFF)
        gpu_rank = np.asarray(ranks, dtype=np.int32)[order][np.searchsorted(keys[order], gkey)]

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

    def format_version(self) -> str | None:
        meta = self.table("META_DATA_EXPORT")
        if meta is None or not {"name", "value"} <= self.columns(meta):
            self.notes.append("The export has no META_DATA_EXPORT table: schema version unknown.")
            return None
        row = self.con.execute(
            f"SELECT value FROM {_q(meta)} WHERE name = 'EXPORT_SCHEMA_VERSION' LIMIT 1"
        ).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def clock_offset(self) -> tuple[int, str]:
        """Nanoseconds to add to export timestamps to get unix-epoch time, and the clock name.

        ``utcEpochNs`` is the UTC time at capture start and ``systemClockNs`` the export's own
        timestamp of that same instant (``ANALYSIS_DETAILS.startTime`` says it too), so
        ``unix = t - systemClockNs + utcEpochNs``.
        """
        sess = self.table("TARGET_INFO_SESSION_START_TIME")
        utc: int | None = None
        base: int | None = None
        if sess is not None and "utcEpochNs" in self.columns(sess):
            has_sys = "systemClockNs" in self.columns(sess)
            sel = "utcEpochNs, " + ("systemClockNs" if has_sys else "NULL")
            row = self.con.execute(f"SELECT {sel} FROM {_q(sess)} LIMIT 1").fetchone()
            if row is not None and row[0] is not None:
                utc = int(row[0])
                base = None if row[1] is None else int(row[1])
        if utc is None:
            self.notes.append(
                "The export does not record when the capture started "
                "(TARGET_INFO_SESSION_START_TIME): times are relative to the capture."
            )
            return 0, "relative"
        details = self.table("ANALYSIS_DETAILS")
        if base is None and details is not None and "startTime" in self.columns(details):
            row = self.con.execute(f"SELECT startTime FROM {_q(details)} LIMIT 1").fetchone()
            if row is not None and row[0] is not None:
                base = int(row[0])
        return utc - (base or 0), "unix"

    def enum_ids(self, table: str, names: Sequence[str], default: Sequence[int]) -> list[int]:
        """Ids of enum entries by name (the export's own enum table), else the known defaults."""
        t = self.table(table)
        if t is None or not {"id", "name"} <= self.columns(t):
            return list(default)
        marks = ",".join("?" for _ in names)
        rows = self.con.execute(
            f"SELECT id FROM {_q(t)} WHERE name IN ({marks})", tuple(names)
        ).fetchall()
        return sorted(int(r[0]) for r in rows) if rows else list(default)

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
            cols, n_bad = self.valid(
                _read_ints(
                    self.con,
                    t,
                    [
                        self.col_or(t, "start"),
                        self.col_or(t, "end"),
                        self.col_or(t, "deviceId"),
                        self.col_or(t, "streamId"),
                        self.col_or(t, "correlationId"),
                        self.col_or(t, "globalPid", "0")
                        if "globalPid" in self.columns(t)
                        else self.sole_host_global_pid(t),
                        self.col_or(t, name_col) if name_col else "0",
                    ],
                )
            )
            dropped += n_bad
            start, end, dev, stream, corr, gpid, name_id = cols
            del cols
            n = start.size
            if category == "kernel":
                names = self.names.add_string_ids(self.strings, name_id, "<unnamed kernel>")
            elif category == "memcpy":
                labels = self.memcpy_labels()
                codes, kinds = pd.factorize(name_id)
                cats = np.empty(len(kinds), dtype=object)
                cats[:] = [f"Memcpy {labels.get(int(k), f'kind {int(k)}')}" for k in kinds]
                names = self.names.add_codes(codes, cats)
            else:
                names = self.names.add_const("Memset", n)
            del name_id
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
        return _Rows.concat(blocks) if blocks else _Rows.empty()

    def sole_host_global_pid(self, table: str) -> str:
        """For a GPU table without globalPid: the one process that made CUDA calls, if only one."""
        rt = self.table(_RUNTIME)
        pids: list[int] = []
        if rt is not None and "globalTid" in self.columns(rt):
            pids = [
                int(r[0])
                for r in self.con.execute(
                    f'SELECT DISTINCT ("globalTid" >> 24) & 16777215 FROM {_q(rt)} '
                    'WHERE "globalTid" IS NOT NULL LIMIT 2'
                ).fetchall()
            ]
        if len(pids) == 1:
            return str(pids[0] << 24)
        self.notes.append(f"Table {table} has no globalPid: its GPU work was given pid 0.")
        return "0"

    def memcpy_labels(self) -> dict[int, str]:
        t = self.table("ENUM_CUDA_MEMCPY_OPER")
        if t is None or not {"id", "label"} <= self.columns(t):
            return dict(_MEMCPY_LABELS)
        rows = self.con.execute(f"SELECT id, label FROM {_q(t)}").fetchall()
        return {int(i): str(lab) for i, lab in rows if i is not None and lab is not None}

    # -- host rows: CUDA API calls and NVTX ranges ------------------------------------------

    def thread_expr(self, table: str, gpu_pids: Sequence[int]) -> str | None:
        """SQL for a host table's globalTid; without the column, the rows belong to the only GPU
        process when there is one (a minimal export), else the table cannot be placed (None)."""
        if "globalTid" in self.columns(table):
            return 'COALESCE("globalTid", 0)'
        if len(gpu_pids) == 1:
            self.notes.append(
                f"Table {table} has no globalTid: its rows were given to process {gpu_pids[0]}, "
                "the only one with GPU work."
            )
            return str(int(gpu_pids[0]) << 24)
        self.notes.append(
            f"Table {table} has no globalTid and the export holds several GPU processes: "
            "it was not read."
        )
        return None

    def read_host(self, gpu_pids: Sequence[int]) -> _Rows:
        blocks: list[_Rows] = []
        dropped = 0
        rt = self.table(_RUNTIME)
        rt_thread = None
        if rt is not None and self.usable(rt, ("start", "end", "correlationId")):
            rt_thread = self.thread_expr(rt, gpu_pids)
        if rt is not None and rt_thread is not None:
            cols, n_bad = self.valid(
                _read_ints(
                    self.con,
                    rt,
                    [
                        self.col_or(rt, "start"),
                        self.col_or(rt, "end"),
                        rt_thread,
                        self.col_or(rt, "correlationId"),
                        self.col_or(rt, "eventClass", "0"),
                        self.col_or(rt, "nameId"),
                    ],
                )
            )
            dropped += n_bad
            start, end, gtid, corr, cls, name_id = cols
            del cols
            # every API row is kept (launches are found by correlation, never by API name)
            driver = self.enum_ids(
                "ENUM_NSYS_EVENT_CLASS", ("TRACE_PROCESS_EVENT_CUDA_DRIVER",), (1,)
            )
            category = np.where(
                np.isin(cls, driver), _CAT_CODE["driver"], _CAT_CODE["runtime"]
            ).astype(np.int32)
            names = self.names.add_string_ids(self.strings, name_id, "<CUDA API>")
            blocks.append(self._host_block(start, end, gtid, corr, category, names))
        nv = self.table(_NVTX)
        nv_thread = None
        if nv is not None and self.usable(nv, ("start", "end")):
            nv_thread = self.thread_expr(nv, gpu_pids)
        if nv is not None and nv_thread is not None:
            # "end" is an SQL keyword: quoted wherever it is written by hand. Marks have no end.
            ranges = '"end" IS NOT NULL'
            if "eventType" in self.columns(nv):
                types = self.enum_ids(
                    "ENUM_NSYS_EVENT_TYPE", _NVTX_RANGE_TYPE_NAMES, _NVTX_RANGE_TYPES_DEFAULT
                )
                ranges += f' AND "eventType" IN ({",".join(str(int(x)) for x in types)})'
            cols, n_bad = self.valid(
                _read_ints(
                    self.con,
                    nv,
                    [
                        self.col_or(nv, "start"),
                        self.col_or(nv, "end"),
                        "rowid",
                        nv_thread,
                        self.col_or(nv, "textId"),
                    ],
                    ranges,
                )
            )
            dropped += n_bad
            start, end, rowid, gtid, text_id = cols
            del cols
            names = self._nvtx_names(nv, ranges, rowid, text_id)
            n = start.size
            blocks.append(
                self._host_block(
                    start,
                    end,
                    gtid,
                    np.full(n, -1, dtype=np.int64),
                    np.full(n, _CAT_CODE["annotation"], dtype=np.int32),
                    names,
                )
            )
        if dropped:
            self.notes.append(
                f"Dropped {dropped} CUDA API calls / NVTX ranges with negative timestamps "
                "(before the capture start) or an end before their start."
            )
        return _Rows.concat(blocks) if blocks else _Rows.empty()

    def _nvtx_names(self, nv: str, where: str, rowid: I64, text_id: I64) -> I32:
        """``COALESCE(text, StringIds.value)`` per row, as name codes."""
        names = self.names.add_string_ids(self.strings, text_id, "")
        if "text" in self.columns(nv) and rowid.size:
            keys, texts = _fetch_object_column(
                self.con, nv, "rowid", "text", f"{where} AND text IS NOT NULL"
            )
            if keys.size:
                pos = np.minimum(np.searchsorted(rowid, keys), rowid.size - 1)
                hit = rowid[pos] == keys
                names[pos[hit]] = self.names.add_values(texts[hit])
        return names

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

    def thread_name_table(self, gtids: I64) -> npt.NDArray[np.object_]:
        """Name of each thread in ``gtids`` (globalTid values), ``""`` when unnamed."""
        out = np.empty(gtids.size, dtype=object)
        out[:] = ""
        t = self.table("ThreadNames")
        if t is None or not {"nameId", "globalTid"} <= self.columns(t) or gtids.size == 0:
            return out
        if not hasattr(self, "_thread_names"):
            gt, name_id = _read_ints(self.con, t, ["COALESCE(globalTid, -1)", "nameId"])
            # a thread renamed later has several rows: the last one recorded wins
            order = np.argsort(gt, kind="stable")
            gt, name_id = gt[order], name_id[order]
            last = np.r_[gt[1:] != gt[:-1], True] if gt.size else np.zeros(0, dtype=bool)
            self._thread_names = (gt[last], name_id[last])
        gt, name_id = self._thread_names
        if gt.size == 0:
            return out
        pos = np.minimum(np.searchsorted(gt, gtids), gt.size - 1)
        hit = gt[pos] == gtids
        out[hit] = self.strings.lookup(name_id[pos[hit]])
        return out

    def process_names(self) -> dict[int, str]:
        t = self.table("PROCESSES")
        if t is None or not {"pid", "name"} <= self.columns(t):
            return {}
        rows = self.con.execute(f"SELECT pid, name FROM {_q(t)}").fetchall()
        return {int(p): str(n) for p, n in rows if p is not None and n is not None}

    # -- ranks ------------------------------------------------------------------------------

    def assign_ranks(self, gpu: _Rows) -> tuple[list[tuple[int, int]], list[int], str, int | None]:
        """(pid, device) groups ordered by device then pid, their ranks, and where ranks came from."""
        keys = pd.unique((gpu.device.astype(np.int64) << 32) | gpu.pid)
        groups = [(int(k) & 0xFFFFFFFF, int(k) >> 32) for k in np.sort(keys)]
        pids = sorted({p for p, _ in groups})
        one_device_each = len(pids) == len(groups)

        env_ranks, world = self.ranks_from_environment(pids)
        if one_device_each and env_ranks is not None:
            return groups, [env_ranks[p] for p, _ in groups], "environment", world
        nvtx_ranks = self.ranks_from_nvtx(pids) if one_device_each else None
        if nvtx_ranks is not None:
            return groups, [nvtx_ranks[p] for p, _ in groups], "nvtx", None
        m = _RANK_IN_NAME.search(self.path.name)
        if m is not None and len(groups) == 1:
            # one export per rank, named after it (rank3.sqlite): common with torchrun + nsys
            return groups, [int(m.group(1))], "filename", None
        return groups, list(range(len(groups))), "process-order", None

    def ranks_from_environment(self, pids: list[int]) -> tuple[dict[int, int] | None, int | None]:
        """Rank per process from the launch environment, when the export has it: ``MPI_RANKS``
        (globalTid -> MPI rank, written when nsys traces MPI), else a ``RANK`` variable in an
        environment table keyed by process."""
        mpi = self.table("MPI_RANKS")
        if mpi is not None and {"globalTid", "rank"} <= self.columns(mpi):
            rows = self.con.execute(
                f"SELECT DISTINCT (globalTid >> 24) & 16777215, rank FROM {_q(mpi)} "
                "WHERE globalTid IS NOT NULL AND rank IS NOT NULL"
            ).fetchall()
            by_pid: dict[int, set[int]] = {}
            for pid, rank in rows:
                by_pid.setdefault(int(pid), set()).add(int(rank))
            one = {p: next(iter(r)) for p, r in by_pid.items() if len(r) == 1}
            if all(p in one for p in pids) and len({one[p] for p in pids}) == len(pids):
                return {p: one[p] for p in pids}, None
        for t in self.tables:
            if "ENV" not in t.upper():
                continue
            cols = self.columns(t)
            key = next((c for c in ("pid", "globalPid", "processId") if c in cols), None)
            if key is None or not {"name", "value"} <= cols:
                continue
            rows = self.con.execute(
                f"SELECT {_q(key)}, name, value FROM {_q(t)} WHERE name IN ('RANK', 'WORLD_SIZE')"
            ).fetchall()
            ranks: dict[int, set[int]] = {}
            worlds: set[int] = set()
            for k, name, value in rows:
                try:
                    v = int(str(value).strip())
                    pid = int(k) if key != "globalPid" else (int(k) >> 24) & 0xFFFFFF
                except (TypeError, ValueError):
                    continue
                if name == "RANK":
                    ranks.setdefault(pid, set()).add(v)
                else:
                    worlds.add(v)
            found = {p: next(iter(r)) for p, r in ranks.items() if len(r) == 1}
            if all(p in found for p in pids) and len({found[p] for p in pids}) == len(pids):
                return {p: found[p] for p in pids}, (worlds.pop() if len(worlds) == 1 else None)
        return None, None

    def ranks_from_nvtx(self, pids: list[int]) -> dict[int, int] | None:
        """One ``rank N`` NVTX text (mark or range) per process, when the program emitted one."""
        nv = self.table(_NVTX)
        if nv is None or "globalTid" not in self.columns(nv):
            return None
        types = self.enum_ids(
            "ENUM_NSYS_EVENT_TYPE", _NVTX_ANY_TEXT_TYPE_NAMES, _NVTX_ANY_TEXT_TYPES_DEFAULT
        )
        type_list = ",".join(str(int(x)) for x in types)
        cols = self.columns(nv)
        text = "e.text" if "text" in cols else "NULL"
        strings = self.table(_STRINGS)
        if "textId" in cols and strings is not None:
            value = f"COALESCE({text}, s.value)"
            join = f"LEFT JOIN {_q(strings)} s ON s.id = e.textId"
        else:
            value, join = text, ""
        # The few distinct candidates are matched in Python: the rank pattern is not SQL.
        rows = self.con.execute(
            f"SELECT DISTINCT (e.globalTid >> 24) & 16777215, {value} FROM {_q(nv)} e {join} "
            f"WHERE e.eventType IN ({type_list}) AND {value} LIKE '%rank%'"
        ).fetchall()
        ranks: dict[int, set[int]] = {}
        for pid, found_text in rows:
            m = _RANK_TEXT.match(str(found_text)) if found_text is not None else None
            if m and pid is not None:
                ranks.setdefault(int(pid), set()).add(int(m.group(1)))
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
        if gpu is None or not {"id", "name"} <= self.columns(gpu):
            return {}
        names = {
            int(i): str(n)
            for i, n in self.con.execute(f"SELECT id, name FROM {_q(gpu)}").fetchall()
            if i is not None and n
        }
        out: dict[tuple[int, int], str] = {}
        cuda = self.table("TARGET_INFO_CUDA_DEVICE")
        if cuda is not None and {"gpuId", "cudaId", "pid"} <= self.columns(cuda):
            rows = self.con.execute(f"SELECT pid, cudaId, gpuId FROM {_q(cuda)}").fetchall()
            for pid, cuda_id, gpu_id in rows:
                if None not in (pid, cuda_id, gpu_id) and int(gpu_id) in names:
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
    ) -> tuple[TraceInfo, ...]:
        gpu_names = self.gpu_names()
        procs = self.process_names()
        infos = []
        for (pid, device), rank in zip(groups, ranks, strict=True):
            notes = list(self.notes)
            proc = f"process {pid}" + (f" ({procs[pid]})" if pid in procs else "")
            if rank_source == "filename":
                notes.append(
                    f"The rank ({rank}) was taken from the file name: the export does not record it."
                )
            if rank_source == "process-order":
                notes.append(
                    f"{proc[0].upper()}{proc[1:]} on GPU {device} was numbered rank {rank}: the "
                    "export does not record ranks, so processes are numbered by GPU, then pid."
                )
            name = gpu_names.get((pid, device), gpu_names.get((-1, -1)))
            infos.append(
                TraceInfo(
                    path=str(self.path),
                    format="nsys",
                    rank=rank,
                    world_size=world_size,
                    rank_source=rank_source,
                    device_kind="gpu",
                    devices=(name,) if name else (),
                    format_version=version,
                    clock=clock,
                    pid=pid,
                    device=device,
                    notes=tuple(notes),
                )
            )
        return tuple(sorted(infos, key=lambda t: t.rank))
