"""Reading one process of a multi-process export (a unit of the per-rank map).

A process's rows are found by SQLite (``globalPid`` / ``globalTid`` -> pid, one C-level scan of
that column) and only they are decoded, so reading one process holds that process's rows, not
the file's. What the ranks are still depends on the whole file: the (pid, GPU) groups come from
one ``SELECT DISTINCT`` over the GPU tables with the reader's own validity rules, and the
``rank N`` NVTX texts of every process from the NVTX rows whose text may say so (``LIKE
'%ank%'``), read through the same code as a whole read, so a process gets the rank it gets when
the file is read whole. The notes of a process's read count that process's rows.

:func:`gpu_processes` plans the split: the pids of a GPU capture with several processes, when
every table the reader splits has the column that names the process.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ._activity import Activity
from ._columns import INT, Columns, Unsupported, pid_sql
from ._memo import remembered
from ._nvtx import NvtxReader
from ._pages import PageReader, pid_code_table, pid_values
from ._rows import NvtxRows
from ._schema import KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME, STRINGS, quote
from ._strings import Strings

I64 = npt.NDArray[np.int64]

#: The GPU tables, whose ``globalPid`` names the process of each row.
GPU_TABLES = (KERNEL, MEMCPY, MEMSET)
#: The columns the groups are found from.
_GROUP_COLUMNS = frozenset({"start", "end", "deviceId", "globalPid"})
_VALID_TIMES = (
    "typeof(\"start\") = 'integer' AND typeof(\"end\") = 'integer' "
    'AND "start" >= 0 AND "end" >= "start"'
)


def _groups_sql(con: sqlite3.Connection, tables: list[str]) -> list[tuple[int, int]]:
    """:func:`_groups` through SQLite: one ``SELECT DISTINCT`` per table (a view, a table the
    page decoder refuses, or no file to decode)."""
    dev = '(CASE WHEN typeof("deviceId") = \'integer\' THEN "deviceId" ELSE -1 END)'
    found: set[tuple[int, int]] = set()
    for t in tables:
        sql = f"SELECT DISTINCT {pid_sql('globalPid')}, {dev} FROM {quote(t)} WHERE {_VALID_TIMES}"
        # the device as read_gpu keeps it: int32 (wrapping, as astype does)
        found.update((int(p), (int(d) + 2**31) % 2**32 - 2**31) for p, d in con.execute(sql))
    return sorted(found, key=lambda g: (g[1], g[0]))


def valid_rows(times: Columns) -> npt.NDArray[np.bool_]:
    """Rows of a GPU table's ``start`` and ``end`` columns that :func:`_groups_sql` keeps: both
    integers, start >= 0, end >= start."""
    start, end = times.ints["start"], times.ints["end"]
    ok: npt.NDArray[np.bool_] = times.kinds["start"] == INT
    ok &= times.kinds["end"] == INT
    ok &= start >= 0
    ok &= end >= start
    return ok


def group_keys(ok: npt.NDArray[np.bool_], ids: Columns) -> I64:
    """The distinct (pid, device) groups of the rows ``ok`` of one GPU table's ``deviceId`` and
    ``globalPid`` columns ``ids``, as :func:`_groups_sql` selects them (pid 0 where globalPid is
    not an integer, device -1 where deviceId is not, wrapped to int32), each as ``device << 32 |
    pid``: sorted by device, then pid. The columns are rewritten in place."""
    dev, gpid = ids.ints["deviceId"], ids.ints["globalPid"]
    dkind, gkind = ids.kinds["deviceId"], ids.kinds["globalPid"]
    if not ok.all():
        keep = np.flatnonzero(ok)
        dev, gpid, dkind, gkind = dev[keep], gpid[keep], dkind[keep], gkind[keep]
        del keep
    # the device as int32 keeps it (wrapping, as astype does), -1 where not an integer
    dev += 2**31
    dev &= 0xFFFFFFFF
    dev -= 2**31
    dev[dkind != INT] = -1
    dev <<= 32
    gpid >>= 24
    gpid &= 0xFFFFFF
    gpid[gkind != INT] = 0
    dev |= gpid
    key = dev
    if key.size > 1:  # rows come in runs of one group: only each run's first is looked at
        run = np.flatnonzero(key[1:] != key[:-1])
        key = np.concatenate([key[:1], key[run + 1]])
    return np.unique(key)


def _groups(
    con: sqlite3.Connection, tables: list[str], path: Path | None = None
) -> list[tuple[int, int]]:
    """(pid, device) of the GPU rows with valid times (as read_gpu keeps them), by device, pid.
    The four columns are decoded off the file's pages (``path``: the file ``con`` reads, inside
    a read transaction), one C-level pass instead of SQLite's per-row ``typeof``; a table the
    decoder refuses is asked of SQLite (:func:`_groups_sql`), the same groups. A block of rows
    at a time, reduced to its groups as it comes: what planning holds is a block's columns and
    the pids of the largest table (two passes of two columns held two int64 columns of it).
    Each GPU table's pid codes (:func:`._pages.pid_codes` of its whole ``globalPid`` column) are
    kept for the file, as :meth:`._pages.PageReader.pid_rows` keeps them: the reads of its
    processes select their rows from them instead of decoding the column again."""
    if path is None:
        return _groups_sql(con, tables)
    keys: list[I64] = []
    for t in tables:
        info = con.execute(f"PRAGMA table_xinfo({quote(t)})").fetchall()
        if not _GROUP_COLUMNS <= {str(r[1]) for r in info}:
            return _groups_sql(con, tables)  # SQLite reads a missing "column" as a text
        pids: list[npt.NDArray[np.int32]] = []  # 24 bits each
        try:
            pages = PageReader(con, path)
            for cols in pages.read_blocks(t, info, ["start", "end", "deviceId", "globalPid"]):
                # the block's pids, before group_keys rewrites the column
                gpid = pid_values(cols.ints["globalPid"].copy(), cols.kinds["globalPid"])
                pids.append(gpid.astype(np.int32))
                del gpid
                keys.append(group_keys(valid_rows(cols), cols))
        except Unsupported:
            return _groups_sql(con, tables)
        _keep_pids(path, t, pids)
        del pids
    found = np.unique(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)
    return [(int(k) & 0xFFFFFFFF, int(k) >> 32) for k in found.tolist()]


def _keep_pids(path: Path, table: str, pids: list[npt.NDArray[np.int32]]) -> None:
    """The pid codes of a GPU table (``pids``: its rows' pids, a block at a time), kept for the
    file under the key :meth:`._pages.PageReader.pid_rows` looks them up by."""
    remembered(
        path,
        ("pids", table, "globalPid"),
        lambda: pid_code_table(np.concatenate(pids) if pids else np.zeros(0, dtype=np.int32)),
    )


def _file_groups(
    con: sqlite3.Connection, path: Path | None, tables: list[str]
) -> list[tuple[int, int]]:
    """:func:`_groups`, found once per file (:mod:`._memo`): the plan of the split and every
    process's read share it."""
    if path is None:
        return _groups(con, tables)
    return list(
        remembered(path, ("groups", tuple(tables)), lambda: tuple(_groups(con, tables, path)))
    )


def gpu_processes(con: sqlite3.Connection, path: Path | None = None) -> list[int]:
    """The pids of the GPU processes when the export can be read one process at a time (GPU
    tables with ``globalPid``, host tables with ``globalTid``) and has several; else [].
    ``path``: the file ``con`` reads (what it finds is then kept for the reads that follow)."""
    tables = {
        str(n).lower(): str(n)
        for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
    }

    def cols(t: str) -> set[str]:
        return {str(r[1]) for r in con.execute(f"PRAGMA table_info({quote(t)})")}

    gpu = [tables[t.lower()] for t in GPU_TABLES if t.lower() in tables]
    host = [tables[t.lower()] for t in (RUNTIME, NVTX) if t.lower() in tables]
    need = {"start", "end", "deviceId", "globalPid"}
    if not gpu or any(not need <= cols(t) for t in gpu):
        return []
    if any("globalTid" not in cols(t) for t in host) or STRINGS.lower() not in tables:
        return []
    pids = sorted({p for p, _ in _file_groups(con, path, gpu)})
    return pids if len(pids) > 1 else []


def processes_of(path: Path) -> list[int]:
    """:func:`gpu_processes` of the export at ``path``; [] when it cannot be opened as one (the
    read that follows says what is wrong)."""
    try:
        con = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=2.0, isolation_level=None
        )
    except sqlite3.Error:
        return []
    try:
        con.execute("BEGIN")  # one read transaction: what the page decoder needs (._pages)
        return gpu_processes(con, path)
    except sqlite3.Error:
        return []
    finally:
        con.close()


class ProcessPart(NvtxReader, Activity):
    """What a one-process read needs from the whole file."""

    def all_groups(self) -> list[tuple[int, int]]:
        """Every (pid, device) group of the file, ordered as :meth:`assign_ranks` orders them."""
        return _file_groups(
            self.con, self.file, [t for t in (self.table(n) for n in GPU_TABLES) if t]
        )

    def all_rank_texts(self) -> NvtxRows:
        """The ``rank N`` NVTX texts of every process: the rows whose text, inline or in
        StringIds, may contain "rank", read as a whole read reads them (its notes and names are
        not this read's)."""
        nv = self.table(NVTX)
        if nv is None:
            return self.read_nvtx()  # nothing to read: empty
        have = set(self.columns(nv))
        cond = []
        if "text" in have:
            cond.append("\"text\" LIKE '%ank%'")
        strings = self.table(STRINGS)
        if "textId" in have and strings is not None and self.has(strings, "id", "value"):
            ids = f'SELECT "id" FROM {quote(strings)} WHERE "value" LIKE \'%ank%\''
            # a test per NVTX row (~20 % of the condition's scan) that selects none when no
            # string may contain "rank" (NULL IN () is false too): asked once per file
            if remembered(
                self.file, ("rank strings", strings), lambda: bool(self.rows(f"{ids} LIMIT 1"))
            ):
                cond.append(f'"textId" IN ({ids})')
        saved = (self.notes, self.names, self.lanes, self.thread_names, self.only, self.keep_range)
        self.notes, self.names, self.lanes, self.thread_names = [], Strings(), Strings(), Strings()
        self.only = (" OR ".join(cond) or "0", ())
        # every selected text is read: the range filter keeps every text that may say "rank"
        # (those with "ank" or "ANK", all that ``rank N`` is looked for in), so the rank texts
        # are the same; with it, these rows (rank marks, no step marker) made the read note in
        # ._memo that the file's filtered ranges hold no step marker, and each later process's
        # read then read every NVTX text again, and cleared this read's filter (ranges_filtered)
        self.keep_range = None
        try:
            return self.read_nvtx()
        finally:
            (
                self.notes,
                self.names,
                self.lanes,
                self.thread_names,
                self.only,
                self.keep_range,
            ) = saved
