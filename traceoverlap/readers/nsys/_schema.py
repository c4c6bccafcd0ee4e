"""What the export holds: tables and columns discovered, never assumed; the shared reader state."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...core.errors import TraceFormatError
from ._columns import INT, OTHER, Columns, Where, pid_sql
from ._export import EXPORT_HINT
from ._scan import read_columns
from ._strings import StringIds, Strings

I64 = npt.NDArray[np.int64]

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
STRINGS = "StringIds"


#: Which NVTX range names to keep (True: keep); None keeps every range.
RangeFilter = Callable[[str], bool]


def quote(name: str) -> str:
    """Quote an SQL identifier (table and column names come from the file itself)."""
    return '"' + name.replace('"', '""') + '"'


def int_or_none(v: Any) -> int | None:
    """An integer metadata value, or None for NULL, text, reals and blobs."""
    return v if type(v) is int else None


class Schema:
    def __init__(
        self,
        path: Path,
        file: Path,
        con: sqlite3.Connection,
        keep_range: RangeFilter | None = None,
        process: int | None = None,
    ) -> None:
        self.path = path
        #: read only this process's rows (pid), or every row (None)
        self.process = process
        #: when set, the rows every scan reads (instead of the process's)
        self.only: Where | None = None
        #: the file's integrity check, when this read is the one to run it
        self.check: Callable[[], None] | None = None
        self.keep_range = keep_range
        self.file = file
        self.con = con
        self.notes: list[str] = []
        # views too (a post-processed export may expose a table as a view): they are read
        # through SQLite (the page decoder reads tables only)
        self.tables = [
            str(name)
            for (name,) in con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
            )
        ]
        self._columns: dict[str, list[str]] = {}
        self.names = Strings()
        self.lanes = Strings()
        self.thread_names = Strings()
        self.strings = StringIds(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object))
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
            rows = self.con.execute(f"PRAGMA table_info({quote(table)})").fetchall()
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
                EXPORT_HINT + " with a recent Nsight Systems",
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
        """A small metadata query (types are checked by the caller with :func:`int_or_none`)."""
        return self.con.execute(sql, tuple(params)).fetchall()

    def scan(
        self,
        table: str,
        int_cols: Sequence[str],
        text_cols: Sequence[str] = (),
        text_keep: RangeFilter | None = None,
    ) -> Columns:
        """The columns of ``table`` that it has (absent ones are simply missing from the result):
        every row, or with :attr:`process` set, that process's rows (by ``globalPid`` or
        ``globalTid``)."""
        have = set(self.columns(table))
        where = self.only
        key = next((k for k in ("globalPid", "globalTid") if k in have), None)
        if where is None and self.process is not None and key is not None:
            where = (f"{pid_sql(key)} = ?", (self.process,))
        return read_columns(
            self.con,
            self.file,
            table,
            [c for c in int_cols if c in have],
            [c for c in text_cols if c in have],
            text_keep,
            where,
        )

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

    def enum_ids(self, table: str, names: Sequence[str], default: Sequence[int]) -> list[int]:
        """Ids of enum entries by name (the export's own enum table), else the known defaults."""
        t = self.table(table)
        if t is None or not self.has(t, "id", "name"):
            return list(default)
        marks = ",".join("?" for _ in names)
        found = [
            int_or_none(r[0])
            for r in self.rows(f"SELECT id FROM {quote(t)} WHERE name IN ({marks})", names)
        ]
        ids = sorted(i for i in found if i is not None)
        return ids if ids else list(default)
