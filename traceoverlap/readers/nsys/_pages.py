"""Whole columns of an SQLite table as numpy arrays, decoded from the database file's own pages.

Why: an Nsight Systems export is a few tables of millions of integer rows. Every way of getting
them through Python's ``sqlite3`` module pays per value: a Python object per row and column when
fetching rows (5-6x one C-level SQLite scan of the same columns), or SQLite rendering each integer
as text that numpy parses back (``group_concat`` + ``np.fromstring``: 2.5-4x the scan). Decoding
the table's b-tree leaf pages with numpy costs about what SQLite's own scan does (numbers in
``benchmarks/bench_nsys.py``).

How (https://www.sqlite.org/fileformat2.html): the table's root page is found through SQLite
(``sqlite_master``); interior pages are walked to the ordered list of leaf pages; every cell of
every leaf page is decoded at once with vectorised varint and big-endian reads: the record header
gives each column's serial type, the running sum of their sizes each value's offset. A record
shorter than the table (written before ``ALTER TABLE ... ADD COLUMN ... DEFAULT``) has the
column's DEFAULT where it lacks the column, as SQLite reads it (:func:`column_default`). Rows
come out in rowid order, as ``SELECT ... FROM table`` returns them.

Only files whose committed state is exactly what the pages say are decoded this way, and only
while the caller holds a read transaction (no writer can commit under it). Anything else is read
through SQLite instead (same result, slower): a WAL database or a journal beside the file, UTF-16
text, a row too large for its page (overflow pages), generated columns, unexpected page types,
offsets outside their page, a row count that differs from SQLite's ``count(*)``, or a column
default that is not a literal. SQLite's own
errors (a damaged or locked file) surface from the SQLite path as ``sqlite3.DatabaseError``.
"""

from __future__ import annotations

import mmap
import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from numpy.lib.stride_tricks import as_strided

from ._columns import (
    INT,
    NULL,
    OTHER,
    REFUSED,
    Columns,
    Unsupported,
    Where,
    _q,
    pid_sql,
    rowid_alias,
)
from ._memo import remembered

I64 = npt.NDArray[np.int64]
Obj = npt.NDArray[np.object_]


def _load_decoder() -> Any:
    """The C loops (_npage.c), built at install where a C compiler is available; else None."""
    try:
        from . import _npage
    except ImportError:  # pragma: no cover - installs without a compiler
        return None
    return _npage


_npage = _load_decoder()

#: Which loops decode the pages: "c" (_npage.c) or "numpy" (no extension built, or
#: ``TRACEOVERLAP_NPAGE=0``). Both give the same columns and refuse the same pages (tested
#: against each other in tests/test_npage.py).
DECODER = (
    "c" if _npage is not None and os.environ.get("TRACEOVERLAP_NPAGE", "1") != "0" else "numpy"
)


# Byte size of the values of serial types 0-11 (12+ are blobs / texts of (N - 12) // 2 bytes).
_FIXED_SIZE = np.array([0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0], dtype=np.int64)
_SMALL_SIZE = np.concatenate([_FIXED_SIZE, (np.arange(12, 128, dtype=np.int64) - 12) >> 1])
# Per serial type (clipped to 12): right shift that turns 8 big-endian bytes read at the value's
# offset into the value (63 where the value takes no bytes), the kind, and the constant that
# types 8 and 9 stand for.
_SHIFT = np.array([63, 56, 48, 40, 32, 16, 0, 63, 63, 63, 63, 63, 63], dtype=np.int64)
_KIND = np.array([1, 0, 0, 0, 0, 0, 0, 2, 0, 0, 2, 2, 2], dtype=np.int8)
_CONST = np.array([0, -1, -1, -1, -1, -1, -1, 0, 0, 1, 0, 0, 0], dtype=np.int64)
# Page headers read at a time before their pages are handed back.
_HEADER_PAGES = 4096
# Rows decoded per block of leaf pages.
_BLOCK_ROWS = 1 << 15
# Texts are decoded this many bytes at a time (the gather index is int64 per byte: 2 MB here;
# 1 MB blocks made it 8 MB, and a one-process read's peak RSS 163 MB instead of 145 MB).
_TEXT_BLOCK_BYTES = 1 << 18
# The C path's text blocks are this many times larger (see PageReader.texts_c).
_C_TEXT_SCALE = 16
# Selected row numbers are asked of SQLite for this many rowids at a time.
_SQL_ROWS = 1 << 20
# The C path's text filter: a block's distinct texts go through the substring prefilter from
# this many (its fixed cost, a 65536-bin count and a lookup per needle, is ~0.5 ms), else one
# by one (~1-2 us each).
_PREFILTER_TEXTS = 512
# The C path keeps this many distinct texts of one scan, decoded, with the text filter's
# verdicts (_npage.Memo: a column's names recur in every block: the FSDP export's 4 000 in each
# of its ~40, decoded and asked once instead of once per block, their rows sharing one str): a
# bound, so that a capture of a million distinct names the filter refuses is not held here
# instead (and once a block's texts are nearly all new, the scan stops looking them up: the FSDP
# export's second block has 27 % new, each of the synthetic emit_nvtx capture's 100 %).
_KEPT_MEMO_TEXTS = 1 << 14
# Serial types above this are refused (as _npage.c does).
_MAX_SERIAL = 1 << 40


def _size(st: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Byte size of the values of serial types ``st`` (any shape)."""
    size = _SMALL_SIZE[np.minimum(st, 127)]
    big = st > 127
    if big.any():
        size[big] = (st[big] - 12) >> 1
    return size


def _windows(mm: npt.NDArray[np.uint8], width: int) -> npt.NDArray[np.uint8]:
    """Row i = bytes [i, i + width) of ``mm``: a gather of rows reads ``width`` bytes per index."""
    return as_strided(mm, shape=(mm.size - width + 1, width), strides=(1, 1), writeable=False)


_INT_LITERAL = re.compile(r"([+-]?)\s*(0[xX][0-9a-fA-F]{1,16}|[0-9]+)")
_REAL_LITERAL = re.compile(r"[+-]?\s*(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def column_default(sql: Any) -> int | float | str | None:
    """The value of a column's DEFAULT (``PRAGMA table_xinfo``'s ``dflt_value``: its SQL text)
    for a record that lacks the column: None (NULL, or no default), an int, a float or a str.
    Only literals are decoded here; anything else (an expression, a blob) is read through SQLite
    (:class:`Unsupported`)."""
    if sql is None:
        return None
    t = str(sql).strip()
    while t.startswith("(") and t.endswith(")"):
        t = t[1:-1].strip()
    up = t.upper()
    if up == "NULL":
        return None
    if up in ("TRUE", "FALSE"):
        return int(up == "TRUE")
    m = _INT_LITERAL.fullmatch(t)
    if m is not None:
        sign, digits = m.groups()
        if digits[:2].lower() == "0x":  # a 64-bit two's complement pattern, as SQLite reads it
            v = int(digits, 16)
            v = v - (1 << 64) if v >= 1 << 63 else v
        else:
            v = int(digits)
        v = -v if sign == "-" else v
        if -(1 << 63) <= v < 1 << 63:
            return v
        raise Unsupported("integer default outside 64 bits")
    if _REAL_LITERAL.fullmatch(t):
        return float(t.replace(" ", ""))
    if len(t) >= 2 and t[0] == t[-1] == "'" and "'" not in t[1:-1].replace("''", ""):
        return t[1:-1].replace("''", "'")
    raise Unsupported("a column default that is not a literal")


def _pid_column(where: Where, info: list[tuple[Any, ...]] | None) -> str | None:
    """The column of ``where`` when it is a process's rows (``pid_sql(column) = ?`` with an
    integer parameter), one the table has; else None."""
    cond, params = where
    if info is None or len(params) != 1 or type(params[0]) is not int:
        return None
    if not -(2**63) <= params[0] < 2**63:
        return None
    for r in info:
        if cond == f"{pid_sql(str(r[1]))} = ?":
            return str(r[1])
    return None


#: What :func:`_like_column` recognises: a column's name (quoted as :func:`_q` quotes it) and a
#: needle of ASCII letters, ``"column" LIKE '%needle%'``.
_LIKE = re.compile(r'("(?:[^"]|"")+") LIKE \'%([A-Za-z]+)%\'')


#: What SQLite's LIKE answers on this connection, for :meth:`PageReader.like_rows` to give its
#: answers: ASCII letters of either case match, nothing else is folded (an ICU build folds the
#: Kelvin sign to k, and é to É), a text ends at its first NUL; and the answers it must give.
_LIKE_PROBE = (
    "SELECT 'xANKx' LIKE '%ank%', char(8490) LIKE 'k', 'é' LIKE 'É', "
    "CAST(x'00616e6b' AS TEXT) LIKE '%ank%'"
)
_LIKE_EXPECTED = (1, 0, 0, 0)


def _like_column(where: Where, info: list[tuple[Any, ...]] | None) -> tuple[str, bytes] | None:
    """The column of ``where`` and its needle (lowered) when it is ``"column" LIKE
    '%needle%'`` (no parameters, a needle of ASCII letters: SQLite's LIKE folds their case, and
    nothing else in it is special), on a column the table has; else None."""
    cond, params = where
    m = _LIKE.fullmatch(cond)
    if info is None or params or m is None:
        return None
    for r in info:
        if m.group(1) == _q(str(r[1])):
            return str(r[1]), m.group(2).lower().encode("ascii")
    return None


def pid_codes(
    values: I64, kinds: npt.NDArray[np.int8]
) -> tuple[npt.NDArray[np.integer], dict[int, int]]:
    """What :meth:`PageReader.pids` keeps of a whole ``globalPid`` / ``globalTid`` column (its
    ``values`` and ``kinds``, rewritten in place): per row the pid (:func:`pid_sql`) as a code
    into the distinct pids, uint8 where there are fewer than 256, read-only, and each pid's
    code."""
    return pid_code_table(pid_values(values, kinds))


def pid_values(values: I64, kinds: npt.NDArray[np.int8]) -> I64:
    """The pid of each value of a ``globalPid`` / ``globalTid`` column as :func:`pid_sql` says
    (0 where it is not an integer), in place."""
    values >>= 24
    values &= 0xFFFFFF
    values[kinds != INT] = 0
    return values


def pid_code_table(
    pids: npt.NDArray[np.integer],
) -> tuple[npt.NDArray[np.integer], dict[int, int]]:
    """:func:`pid_codes` of the rows' pids ``pids``."""
    codes, distinct = pd.factorize(pids)
    small = np.uint8 if distinct.size < 256 else np.uint16 if distinct.size < 65536 else np.int32
    narrow = codes.astype(small)
    narrow.flags.writeable = False
    return narrow, {int(p): k for k, p in enumerate(distinct.tolist())}


def _ascii_needles(keep: Callable[[str], bool] | None) -> tuple[bytes, ...] | None:
    """The ASCII ``needles`` of a text filter that has them (see
    :attr:`traceoverlap.rank.namefilter.NameTest.needles`: an ASCII text that holds none, once
    lowered, is refused), as bytes for _npage.texts_memo; else None. A needle that is not ASCII
    is in no ASCII text."""
    needles = getattr(keep, "needles", None)
    if needles is None:
        return None
    return tuple(n.encode("ascii") for n in needles if n.isascii())


def _blocks(ncell: I64) -> list[tuple[int, int, int, int]]:
    """The leaf pages (cell counts ``ncell``) cut into blocks of about :data:`_BLOCK_ROWS` rows,
    each at least one page: per block (first page, page past its last, first row, row past its
    last)."""
    ends = np.cumsum(ncell)
    n = int(ends[-1]) if ends.size else 0
    out: list[tuple[int, int, int, int]] = []
    lo_page, lo_row = 0, 0
    while lo_row < n:
        hi_page = int(np.searchsorted(ends, lo_row + _BLOCK_ROWS, side="right"))
        hi_page = min(max(hi_page, lo_page + 1), ends.size)
        hi_row = int(ends[hi_page - 1])
        out.append((lo_page, hi_page, lo_row, hi_row))
        lo_page, lo_row = hi_page, hi_row
    return out


def _narrow(rows: I64, n: int) -> npt.NDArray[np.integer]:
    """Row positions below ``n`` as int32 when every position fits, else as they are."""
    return rows.astype(np.int32) if n < 2**31 else rows


class PageReader:
    def __init__(self, con: sqlite3.Connection, path: Path) -> None:
        self.con = con
        self.path = path
        self.text_keep: Callable[[str], bool] | None = None
        #: the texts of this reader's scan so far, with ``text_keep``'s verdicts
        #: (:meth:`text_memo`: an _npage.Memo of at most :data:`_KEPT_MEMO_TEXTS`)
        self.kept_memo: Any = None
        self.kept_memo_of: Callable[[str], bool] | None = None
        self.kept_memo_used = True
        #: the C loops (_npage.c) when built and not turned off, else None: numpy decodes
        self.c: Any = _npage if DECODER == "c" else None
        #: column -> the SQL text of its DEFAULT (PRAGMA table_xinfo), of the table being read
        self.defaults: dict[str, Any] = {}
        mode = con.execute("PRAGMA journal_mode").fetchone()
        if mode is None or str(mode[0]).lower() == "wal":
            raise Unsupported("WAL database: its pages may be newer in the -wal file")
        for suffix in ("-journal", "-wal"):
            try:
                side = os.stat(f"{path}{suffix}").st_size
            except OSError:  # none (what Path.exists says of one it cannot stat)
                continue
            if side > 0:
                raise Unsupported(f"{Path(f'{path}{suffix}').name} beside the file")
        try:
            size = os.stat(path).st_size
        except OSError as exc:
            raise Unsupported(str(exc)) from None
        if size < 512:
            raise Unsupported("too small")
        # +16 zero bytes of padding cannot be had from a read-only map: reads near the end of the
        # file go through a padded copy of its last page (see _read_be).
        # a plain ndarray over the map (np.memmap's own indexing costs a Python call per access,
        # and making one a third of a millisecond: a reader is made per column scan)
        with open(path, "rb") as fh:
            self.map: mmap.mmap | None = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.mm: npt.NDArray[np.uint8] = np.frombuffer(self.map, dtype=np.uint8)
        head = self.mm[:100].tobytes()
        if head[:16] != b"SQLite format 3\x00":
            raise Unsupported("no SQLite header")
        page = int.from_bytes(head[16:18], "big")
        self.page_size = 65536 if page == 1 else page
        if self.page_size < 512 or self.page_size & (self.page_size - 1):
            raise Unsupported("bad page size")
        self.usable = self.page_size - head[20]
        if int.from_bytes(head[56:60], "big") not in (0, 1):
            raise Unsupported("text is not UTF-8")
        self.n_pages = self.mm.size // self.page_size
        # every offset as the start of a big-endian int64 (unaligned, overlapping): a gather of
        # 8-byte values in one indexing operation
        self.be64: npt.NDArray[np.int64] = np.ndarray(
            shape=(self.mm.size - 7,), dtype=">i8", buffer=self.mm, strides=(1,)
        )
        self.be16: npt.NDArray[np.uint16] = np.ndarray(
            shape=(self.mm.size - 1,), dtype=">u2", buffer=self.mm, strides=(1,)
        )
        tail = self.mm[max(0, self.mm.size - self.page_size) :]
        self.tail_start = self.mm.size - tail.size
        self.tail = np.concatenate([np.asarray(tail), np.zeros(16, dtype=np.uint8)])

    # -- the b-tree -------------------------------------------------------------------------

    def _page_header(self, page: int) -> int:
        return (page - 1) * self.page_size + (100 if page == 1 else 0)

    def header_bytes(self, pages: I64, at: tuple[int, ...]) -> npt.NDArray[np.uint8]:
        """Bytes ``at`` of the b-tree page header of each of ``pages`` (row k: byte ``at[k]``):
        a few thousand pages at a time, each handed back once read (a byte brings its whole page
        in: read all at once, every leaf of the table would count in this process's memory; the
        bytes wanted of a page are read in one pass: each pass faults the page in again)."""
        out = np.empty((len(at), pages.size), dtype=np.uint8)
        for a in range(0, pages.size, _HEADER_PAGES):
            part = pages[a : a + _HEADER_PAGES]
            hdr = (part - 1) * self.page_size + np.where(part == 1, 100, 0)
            for k, byte in enumerate(at):
                out[k, a : a + part.size] = self.mm[hdr + byte]
            self.release(part)
        return out

    def leaf_pages(self, root: int) -> tuple[I64, I64]:
        """The table's leaf pages, in key order, and their cell counts."""
        level = [root]
        for _ in range(32):  # deeper than any real table: a cycle in a damaged file
            if any(not 1 <= p <= self.n_pages for p in level):
                raise Unsupported("page number out of range")
            types, hi, lo = self.header_bytes(np.array(level, dtype=np.int64), (0, 3, 4))
            if (types == 13).all():
                return np.array(level, dtype=np.int64), (hi.astype(np.int64) << 8) | lo
            if not (types == 5).all():
                raise Unsupported("not a rowid table b-tree")
            children: list[int] = []
            for p in level:
                base = (p - 1) * self.page_size
                h = self._page_header(p)
                n = int(self.mm[h + 3]) << 8 | int(self.mm[h + 4])
                if h + 12 + 2 * n > base + self.usable:
                    raise Unsupported("cell pointer array outside the page")
                ptr = self.mm[h + 12 : h + 12 + 2 * n].astype(np.int64)
                cells = base + ((ptr[0::2] << 8) | ptr[1::2])
                if n and (cells.min() < h + 12 or cells.max() + 4 > base + self.usable):
                    raise Unsupported("cell outside the page")
                kids = _windows(self.mm, 4)[cells].astype(np.int64)
                children.extend(
                    ((kids[:, 0] << 24) | (kids[:, 1] << 16) | (kids[:, 2] << 8) | kids[:, 3])
                    .astype(np.int64)
                    .tolist()
                )
                children.append(int.from_bytes(self.mm[h + 8 : h + 12].tobytes(), "big"))
            level = children
        raise Unsupported("b-tree too deep")

    def cells(self, leaves: I64, ncell: I64) -> tuple[I64, I64]:
        """File offset of every cell of ``leaves`` (key order) and the end of its page's usable
        area."""
        base = (leaves - 1) * self.page_size
        hdr = base + np.where(leaves == 1, 100, 0)
        total = int(ncell.sum())
        # the k-th cell pointer of a page is at hdr + 8 + 2k; row i of the block is cell
        # i - (cells before its page) of its page: per-page terms repeated, plus 2i
        at = np.repeat(hdr + 8 - 2 * (np.cumsum(ncell) - ncell), ncell)
        at += 2 * np.arange(total, dtype=np.int64)
        cell = self.be16[at].astype(np.int64)  # one 2-byte big-endian read per cell
        del at
        cell += np.repeat(base, ncell)
        limit = np.repeat(base + self.usable, ncell)
        if total and ((cell < np.repeat(hdr + 8 + 2 * ncell, ncell)) | (cell >= limit)).any():
            raise Unsupported("cell outside the page")
        return cell, limit

    def table_leaves(self, table: str) -> tuple[I64, I64]:
        """The table's leaf pages (key order) and their cell counts, checked against SQLite's
        own row count."""
        row = self.con.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()
        if row is None or type(row[0]) is not int or row[0] < 1:
            raise Unsupported("no root page")
        leaves, ncell = self.leaf_pages(int(row[0]))
        hdr = (leaves - 1) * self.page_size + np.where(leaves == 1, 100, 0)
        if (hdr + 8 + 2 * ncell > (leaves - 1) * self.page_size + self.usable).any():
            raise Unsupported("cell pointer array outside the page")
        (expected,) = self.con.execute(f"SELECT count(*) FROM {_q(table)}").fetchone()
        if int(ncell.sum()) != expected:
            raise Unsupported("row count differs from SQLite's")
        return leaves, ncell

    def selected_rows(
        self, table: str, n: int, where: Where, info: list[tuple[Any, ...]] | None = None
    ) -> I64:
        """Positions (0-based, in rowid order) of the rows ``where`` selects. Position is
        ``rowid - 1``, which holds when the rowids are exactly 1..n (an export's tables are only
        ever appended to); else the table is read through SQLite. A process's rows (``where``
        is :func:`pid_sql` of a column ``= ?``, the table's ``info`` given) are found from that
        column read off the pages (:meth:`pid_rows`), else SQLite finds them."""
        # two subqueries: SQLite answers a lone min(rowid) / max(rowid) from the b-tree's ends,
        # but both in one SELECT scan the whole table
        lo, hi = self.con.execute(
            f"SELECT (SELECT min(rowid) FROM {_q(table)}), (SELECT max(rowid) FROM {_q(table)})"
        ).fetchone()
        if n and (lo, hi) != (1, n):
            raise Unsupported("rowids are not 1..n")
        cond, params = where
        column = _pid_column(where, info)
        if column is not None and info is not None:
            try:
                return self.pid_rows(table, info, column, int(params[0]))
            except Unsupported:  # a row the decoders refuse, perhaps not this process's
                pass
        like = _like_column(where, info)
        if like is not None and info is not None and self.c is not None:
            try:
                return self.like_rows(table, info, *like)
            except Unsupported:  # SQLite selects them
                pass
        parts: list[I64] = []
        # a range of rowids at a time, as one text: a Python object per row would cost more
        # than SQLite's scan itself
        for lo in range(0, n, _SQL_ROWS):
            (text,) = self.con.execute(
                f"SELECT group_concat(rowid - 1) FROM {_q(table)} "
                f"WHERE rowid > ? AND rowid <= ? AND ({cond})",
                (lo, lo + _SQL_ROWS, *params),
            ).fetchone()
            if text:
                parts.append(np.fromstring(str(text), dtype=np.int64, sep=","))
        rows = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        if rows.size > 1 and not bool((rows[1:] > rows[:-1]).all()):
            rows = np.sort(rows)  # a table scan gives rowid order; a query plan might not
            if not bool((rows[1:] > rows[:-1]).all()):
                # a damaged b-tree: SQLite gave a rowid twice (the pages cannot be trusted)
                raise Unsupported("a row selected twice")
        if rows.size and (rows[0] < 0 or rows[-1] >= n):
            raise Unsupported("a selected row outside 1..n")
        return rows

    def like_rows(self, table: str, info: list[tuple[Any, ...]], column: str, needle: bytes) -> I64:
        """Positions of the rows whose ``column`` is a text holding ``needle`` (lowercase
        ASCII letters) with its letters in either case, before any NUL: the rows SQLite's
        ``"column" LIKE '%needle%'`` selects (C, _npage.containing), from the column's serial
        types and offsets decoded off the pages, no text decoded, a block at a time (the rank
        texts of an export: a scan that selects few rows, 2-3x faster than SQLite evaluating
        LIKE on each record). Numbers or blobs in the column, a record lacking it whose DEFAULT
        is not NULL, or a connection whose LIKE is another (:data:`_LIKE_PROBE`), are left to
        SQLite (:class:`Unsupported`)."""
        names = [str(r[1]) for r in info]
        if any(r[6] for r in info):
            raise Unsupported("generated columns")
        if tuple(self.con.execute(_LIKE_PROBE).fetchone()) != _LIKE_EXPECTED:
            # a case-sensitive LIKE (PRAGMA case_sensitive_like, a build option), an ICU one
            raise Unsupported("LIKE is not ASCII-case-insensitive here")
        j = names.index(column)
        if column == rowid_alias(info):
            raise Unsupported("the rowid as text")
        leaves, ncell = remembered(self.path, ("leaves", table), lambda: self.table_leaves(table))
        found: list[I64] = []
        for lo_page, hi_page, lo_row, hi_row in _blocks(ncell):
            m = hi_row - lo_row
            held = np.empty(m, dtype=np.int64)
            st = np.empty(m, dtype=np.int64)
            off = np.empty(m, dtype=np.int64)
            reason = self.c.decode(
                self.mm,
                self.page_size,
                self.usable,
                leaves[lo_page:hi_page],
                ncell[lo_page:hi_page],
                None,
                j + 1,
                None,
                held,
                [],
                [(j, st, off)],
            )
            if reason is not None:
                raise Unsupported(reason)
            if not bool(((st == 0) | ((st >= 13) & (st % 2 == 1))).all()):
                # whether LIKE matches a blob depends on how SQLite was built
                # (SQLITE_LIKE_DOESNT_MATCH_BLOBS)
                raise Unsupported("numbers or blobs in a text column")
            if m and int(held.min()) <= j and self.defaults_of(info, column) is not None:
                raise Unsupported("a text column's default")
            hit = np.flatnonzero(
                np.frombuffer(self.c.containing(self.mm, st, off, needle), np.bool_)
            )
            if hit.size:
                found.append(hit + lo_row)
            self.release(leaves[lo_page:hi_page])
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    @staticmethod
    def defaults_of(info: list[tuple[Any, ...]], column: str) -> int | float | str | None:
        """The DEFAULT that a record lacking ``column`` reads as (:func:`column_default`)."""
        return column_default(next(r[4] for r in info if str(r[1]) == column))

    def pid_rows(self, table: str, info: list[tuple[Any, ...]], column: str, pid: int) -> I64:
        """Positions of the rows whose ``column`` is an integer of pid ``pid`` (as
        :func:`pid_sql` says: ``(value >> 24) & 0xFFFFFF``, 0 when not an integer): the column
        read off the pages, one decode instead of SQLite evaluating the condition per row and
        writing each selected rowid as text. The column's pids are found once per file
        (:mod:`._memo`): the next process's read of the table selects its rows from them."""
        codes, code_of = remembered(
            self.path, ("pids", table, column), lambda: self.pids(table, info, column)
        )
        if pid not in code_of:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(codes == code_of[pid]).astype(np.int64, copy=False)

    def pids(
        self, table: str, info: list[tuple[Any, ...]], column: str
    ) -> tuple[npt.NDArray[np.integer], dict[int, int]]:
        """Per row, the pid of ``column`` as :func:`pid_sql` says, as a code into the distinct
        pids (uint8 where there are fewer than 256: a byte per row kept for the file), and the
        code of each pid."""
        saved = self.defaults, self.text_keep
        self.text_keep = None
        try:
            cols = self.read(table, info, [column], [])
        finally:
            self.defaults, self.text_keep = saved
        return pid_codes(cols.ints[column], cols.kinds[column])

    def release(self, pages: I64) -> None:
        """Hand the map's copies of ``pages`` (decoded, not needed again) back to the system:
        they would otherwise count in this process's memory until the whole table is read. A
        page read again is faulted back in from the file. One call from the first page to the
        last: the pages between (other tables', untouched by this reader, or a page of this
        table to be read later) are not mapped, or are mapped again when read (a call per run
        of consecutive pages cost a sort and a dozen numpy calls per block)."""
        if self.map is None or pages.size == 0:
            return
        os_page = mmap.PAGESIZE
        # widened to whole system pages inside the span
        start = -(-(int(pages.min()) - 1) * self.page_size // os_page) * os_page
        end = int(pages.max()) * self.page_size // os_page * os_page
        if end > start:
            try:
                self.map.madvise(mmap.MADV_DONTNEED, start, end - start)
            except (OSError, ValueError, AttributeError):  # not Linux: they go at close
                return

    # -- decoding ---------------------------------------------------------------------------

    def varint(self, pos: I64, value_needed: bool = True) -> tuple[I64, I64]:
        """(value, byte length) of the varint at each offset; one-byte varints are the fast path.
        Without ``value_needed`` only the lengths are right (values of long varints are not
        assembled)."""
        if pos.size and int(pos.max()) >= self.mm.size:
            raise Unsupported("varint past the end of the file")
        value = self.mm[pos].astype(np.int64)
        length = np.ones(pos.size, dtype=np.int64)
        big = np.flatnonzero(value >= 0x80)
        if big.size:
            p = pos[big]
            if p.max() + 9 > self.mm.size:
                raise Unsupported("varint past the end of the file")
            w = _windows(self.mm, 9)[p]
            stop = w[:, :8] < 0x80
            n = np.where(stop.any(axis=1), stop.argmax(axis=1) + 1, 9)
            length[big] = n
            if value_needed:
                w64 = w.astype(np.int64)
                v = np.zeros(big.size, dtype=np.int64)
                for i in range(int(n.max())):
                    more = i < n
                    byte = w64[:, i] if i == 8 else w64[:, i] & 0x7F
                    v = np.where(more, (v << (8 if i == 8 else 7)) | byte, v)
                value[big] = v
        return value, length

    def read_ints(self, off: I64, st: I64) -> tuple[I64, npt.NDArray[np.int8]]:
        """Values and kinds of integer-typed column values (serial types ``st``) at ``off``: one
        8-byte big-endian read per value, shifted right to its size."""
        t = np.minimum(st, 12)
        if off.size and int(off.max()) + 8 > self.mm.size:
            near_end = off + 8 > self.mm.size
            raw = _windows(self.mm, 8)[np.where(near_end, 0, off)]
            idx = np.flatnonzero(near_end)
            raw[idx] = _windows(self.tail, 8)[off[idx] - self.tail_start]
            v = raw.view(">i8")[:, 0].astype(np.int64)
        else:
            v = self.be64[off].astype(np.int64)
        v >>= _SHIFT[t]
        const = _CONST[t]
        v = np.where(const >= 0, const, v)
        return v, _KIND[t]

    def read(
        self,
        table: str,
        info: list[tuple[Any, ...]],
        int_cols: list[str],
        text_cols: list[str],
        where: Where | None = None,
    ) -> Columns:
        position, alias = self.columns_of(table, info, int_cols + text_cols)
        # what does not depend on the read is found once per file (._memo): a second read of
        # the file, or of another of its processes, walks no b-tree and counts nothing again
        leaves, ncell = remembered(self.path, ("leaves", table), lambda: self.table_leaves(table))
        n = int(ncell.sum())
        wanted = None
        if where is not None:
            cond, params = where
            wanted = remembered(
                self.path,
                ("selected", table, cond, tuple(params)),
                # kept as int32 where the rows fit: half the memory it holds after the read
                lambda: _narrow(self.selected_rows(table, n, where, info), n),
            )
        m = n if wanted is None else wanted.size
        out = Columns(n=m)
        for c in int_cols:
            out.ints[c] = np.empty(m, dtype=np.int64)
            out.kinds[c] = np.empty(m, dtype=np.int8)
        for c in text_cols:
            out.texts[c] = np.empty(m, dtype=object)
        self.decode_blocks(out, leaves, ncell, wanted, position, alias, int_cols, text_cols)
        return out

    def columns_of(
        self, table: str, info: list[tuple[Any, ...]], wanted: list[str]
    ) -> tuple[dict[str, int], str | None]:
        """Each column's position in the record, and the column that is the rowid (if any), of
        a table whose columns ``wanted`` are read; the columns' DEFAULTs noted."""
        if any(r[6] for r in info):  # hidden / generated columns are not all stored
            raise Unsupported("generated columns")
        names = [str(r[1]) for r in info]
        alias = rowid_alias(info)
        # what a record too short to hold a column reads as (SQL text; decoded when needed)
        self.defaults = {str(r[1]): r[4] for r in info}
        position = {c: i for i, c in enumerate(names)}
        for c in wanted:
            if c not in position:
                raise KeyError(f"{table} has no column {c}")
        return position, alias

    def read_blocks(
        self, table: str, info: list[tuple[Any, ...]], int_cols: list[str]
    ) -> Iterator[Columns]:
        """:meth:`read` of every row of ``int_cols``, a block of leaf pages at a time: each
        block's rows as its own :class:`Columns` (their concatenation is what :meth:`read`
        gives), so that a caller reducing the rows as they come holds a block, not the
        columns."""
        position, alias = self.columns_of(table, info, int_cols)
        leaves, ncell = remembered(self.path, ("leaves", table), lambda: self.table_leaves(table))
        for lo_page, hi_page, lo_row, hi_row in _blocks(ncell):
            m = hi_row - lo_row
            out = Columns(n=m)
            for c in int_cols:
                out.ints[c] = np.empty(m, dtype=np.int64)
                out.kinds[c] = np.empty(m, dtype=np.int8)
            self.decode_block(
                out,
                slice(0, m),
                leaves[lo_page:hi_page],
                ncell[lo_page:hi_page],
                None,
                position,
                alias,
                int_cols,
                [],
            )
            self.release(leaves[lo_page:hi_page])
            yield out

    def decode_block(
        self,
        out: Columns,
        rows: slice,
        leaves: I64,
        ncell: I64,
        pick: I64 | None,
        position: dict[str, int],
        alias: str | None,
        int_cols: list[str],
        text_cols: list[str],
    ) -> None:
        """The cells of one block of ``leaves`` (those of ``pick`` only, when given) into rows
        ``rows`` of ``out``: in C (:meth:`decode_c`) or with numpy."""
        if self.c is not None:
            self.decode_c(out, rows, leaves, ncell, pick, position, alias, int_cols, text_cols)
            return
        cell, limit = self.cells(leaves, ncell)
        if pick is not None:
            cell, limit = cell[pick], limit[pick]
        if cell.size:
            self.decode(out, rows, cell, limit, position, alias, int_cols, text_cols)

    def decode_blocks(
        self,
        out: Columns,
        leaves: I64,
        ncell: I64,
        wanted: npt.NDArray[np.integer] | None,
        position: dict[str, int],
        alias: str | None,
        int_cols: list[str],
        text_cols: list[str],
    ) -> None:
        """The rows ``wanted`` (all when None) of the table's ``leaves`` into ``out``, a block of
        leaf pages at a time: the temporaries stay small and are reused, only the output columns
        are allocated at full size."""
        blocks = _blocks(ncell)
        if wanted is not None:
            # the selected rows of each block, found at once (a search per block cast the whole
            # selection to int64 each time); a block with none is not read at all
            cut = np.searchsorted(wanted, np.array([b[3] for b in blocks], dtype=wanted.dtype))
        done = 0
        for k, (lo_page, hi_page, lo_row, hi_row) in enumerate(blocks):
            pick = None
            if wanted is not None:  # only the selected rows of the block
                a, b = (int(cut[k - 1]) if k else 0), int(cut[k])
                if a == b:
                    continue
                pick = np.subtract(wanted[a:b], lo_row, dtype=np.int64)
            count = hi_row - lo_row if pick is None else pick.size
            rows = slice(done, done + count)
            self.decode_block(
                out,
                rows,
                leaves[lo_page:hi_page],
                ncell[lo_page:hi_page],
                pick,
                position,
                alias,
                int_cols,
                text_cols,
            )
            done += count
            self.release(leaves[lo_page:hi_page])

    def decode_c(
        self,
        out: Columns,
        rows: slice,
        leaves: I64,
        ncell: I64,
        pick: I64 | None,
        position: dict[str, int],
        alias: str | None,
        int_cols: list[str],
        text_cols: list[str],
    ) -> None:
        """:meth:`cells` then :meth:`decode`, in C (_npage.c): rows ``rows`` of ``out`` from
        the cells of ``leaves`` (those of ``pick`` only, when given)."""
        m = rows.stop - rows.start
        ncol = max((position[c] for c in int_cols + text_cols), default=-1) + 1
        held = np.empty(m, dtype=np.int64)
        rowid = out.ints[alias][rows] if alias in int_cols else None
        ints = [
            (position[c], out.ints[c][rows], out.kinds[c][rows]) for c in int_cols if c != alias
        ]
        texts = [
            (position[c], np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64))
            for c in text_cols
        ]
        reason = self.c.decode(
            self.mm,
            self.page_size,
            self.usable,
            leaves,
            ncell,
            pick,
            ncol,
            rowid,
            held,
            ints,
            texts,
        )
        if reason is not None:
            raise Unsupported(reason)
        if m == 0:
            return
        if alias in int_cols:
            out.kinds[alias][rows] = INT
        # records lacking a column (written before it was added) are rare: the fewest columns a
        # record of the block holds says at once which columns can have any
        least = int(held.min())
        for c, (j, values, kinds) in zip([c for c in int_cols if c != alias], ints, strict=True):
            if least <= j:
                self.int_defaults(c, held <= j, values, kinds)
        for c, (j, st, off) in zip(text_cols, texts, strict=True):
            strs, bad = self.texts(st, off, out.texts[c][rows])  # in place, a view
            if least <= j:
                self.text_defaults(c, held <= j, strs)
            out.bad_utf8 += bad

    def decode(
        self,
        out: Columns,
        rows: slice,
        cell: I64,
        limit: I64,
        position: dict[str, int],
        alias: str | None,
        int_cols: list[str],
        text_cols: list[str],
    ) -> None:
        """Decode the cells at ``cell`` (rows ``rows`` of the table) into ``out``."""
        payload, l1 = self.varint(cell)
        # rows larger than the page keep their tail on overflow pages
        if (payload > self.usable - 35).any():
            raise Unsupported("overflow pages")
        rowid, l2 = self.varint(cell + l1, value_needed=alias in int_cols)
        rec = cell + l1 + l2
        record_end = rec + payload
        if (record_end > limit).any():
            raise Unsupported("record outside the page")
        hsize, l3 = self.varint(rec)
        header_end = rec + hsize
        # hsize > payload: the header's end past the record's (never a sum that can overflow)
        if ((hsize < l3) | (hsize > payload)).any():
            raise Unsupported("bad record header")
        last = max((position[c] for c in int_cols + text_cols), default=-1)
        serial, ncols = self.serial_types(rec + l3, header_end, last + 1)  # (column, row)
        wanted = {position[c] for c in int_cols + text_cols}
        # where column j's value starts: the header's end plus the sizes of columns 0..j-1
        offset: dict[int, I64] = {}
        body = header_end
        for j in range(last + 1):
            if j in wanted:
                offset[j] = body
            body = body + _size(serial[j])
        if (body > record_end).any():
            raise Unsupported("record longer than its cell")
        for c in int_cols:
            if c == alias:
                out.ints[c][rows] = rowid
                out.kinds[c][rows] = INT
                continue
            j = position[c]
            values, kinds = self.read_ints(offset[j], serial[j])
            self.int_defaults(c, ncols <= j, values, kinds)
            out.ints[c][rows], out.kinds[c][rows] = values, kinds
        for c in text_cols:
            j = position[c]
            texts, bad = self.texts(serial[j], offset[j])
            self.text_defaults(c, ncols <= j, texts)
            out.texts[c][rows] = texts
            out.bad_utf8 += bad

    def int_defaults(
        self, column: str, short: npt.NDArray[np.bool_], values: I64, kinds: npt.NDArray[np.int8]
    ) -> None:
        """The DEFAULT of ``column`` (an integer one) in the rows of ``short`` (records written
        before the column was added), in place."""
        if not short.any():
            return
        default = column_default(self.defaults.get(column))
        if type(default) is int:
            values[short], kinds[short] = default, INT
        else:
            values[short], kinds[short] = 0, NULL if default is None else OTHER

    def text_defaults(self, column: str, short: npt.NDArray[np.bool_], texts: Obj) -> None:
        """The DEFAULT of ``column`` (a text one) in the rows of ``short``, in place."""
        if not short.any():
            return
        default = column_default(self.defaults.get(column))
        if default is not None and not isinstance(default, str):
            raise Unsupported("a number as a text column's default")
        if default is not None and self.text_keep is not None and not self.text_keep(default):
            default = REFUSED  # as the texts read from the records (and the SQLite path)
        texts[short] = default

    def serial_types(self, start: I64, end: I64, ncol: int) -> tuple[npt.NDArray[np.int64], I64]:
        """Serial types of the first ``ncol`` columns of each record, as a (column, row) array
        (0 for the columns a short record lacks), its header running from ``start`` to ``end``,
        and how many of those ``ncol`` columns each record holds (fewer: a record written before
        columns were added, which then read as their DEFAULT). Fast path: every serial type one
        byte (integers, short texts), read as one ``ncol``-byte row per record."""
        n = start.size
        out = np.zeros((ncol, n), dtype=np.int64)
        held = np.full(n, ncol, dtype=np.int64)
        if ncol == 0 or n == 0:
            return out, held
        slow: npt.NDArray[np.bool_]
        if int((start + ncol).max()) > self.mm.size:
            slow = np.ones(n, dtype=bool)
        else:
            head = np.ascontiguousarray(_windows(self.mm, ncol)[start].T)
            count = end - start  # serial types in the header when each is one byte
            held = np.minimum(count, ncol)
            slow = np.zeros(n, dtype=bool)
            for j in range(ncol):
                present = count > j
                slow |= (head[j] >= 0x80) & present
                out[j] = np.where(present, head[j], 0)
        idx = np.flatnonzero(slow)
        if idx.size:
            p = start[idx]
            stop = end[idx]
            counted = np.zeros(idx.size, dtype=np.int64)
            for j in range(ncol):
                has = p < stop
                counted += has
                st = np.zeros(idx.size, dtype=np.int64)
                ln = np.zeros(idx.size, dtype=np.int64)
                k = np.flatnonzero(has)
                if k.size:
                    st[k], ln[k] = self.varint(p[k])
                out[j, idx] = st
                p = p + ln
            if (p > stop).any():
                raise Unsupported("record header longer than declared")
            held[idx] = counted
            # no value that large fits a page (and the running sum of sizes cannot overflow)
            if ((out[:, idx] < 0) | (out[:, idx] > _MAX_SERIAL)).any():
                raise Unsupported("serial type out of range")
        return out, held

    def texts(self, st: I64, off: I64, into: Obj | None = None) -> tuple[Obj, int]:
        """Decoded texts (and blobs) of one column; None for NULL. Numbers are not expected in a
        text column: read through SQLite when there are any. The C path writes them ``into``
        (an object column of ``st.size`` Nones) when given."""
        is_null = st == 0
        is_str = st >= 12
        if not (is_null | is_str).all():
            raise Unsupported("numbers in a text column")
        length = np.where(is_str, (st - 12) >> 1, 0)
        if self.c is not None:
            return self.texts_c(off, length, is_null, into)
        out = np.empty(st.size, dtype=object)
        bad = 0
        start = 0
        cum = np.cumsum(length + 1)
        while start < st.size:
            # rows [start, stop): at most _TEXT_BLOCK_BYTES bytes, at least one row
            base = int(cum[start - 1]) if start else 0
            stop = int(np.searchsorted(cum, base + _TEXT_BLOCK_BYTES, side="right"))
            stop = min(max(stop, start + 1), st.size)
            ln = length[start:stop]
            sep = cum[start:stop] - base - 1  # where each text's terminating NUL goes
            first = sep - ln
            idx = np.repeat(off[start:stop] - first, ln + 1)
            idx += np.arange(int(sep[-1]) + 1)  # in place: one index-sized temporary less
            idx[sep] = 0
            buf = self.mm[idx]
            buf[sep] = 0
            raw = buf.tobytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("utf-8", "replace")
                bad += self._count_bad(raw, sep, ln)
            parts = text.split("\x00")
            if len(parts) != stop - start + 1:
                # a text with an embedded NUL: split it row by row
                parts = [
                    bytes(buf[a : a + k]).decode("utf-8", "replace")
                    for a, k in zip(first.tolist(), ln.tolist(), strict=True)
                ]
            chunk = np.empty(stop - start, dtype=object)
            chunk[:] = parts[: stop - start]
            if self.text_keep is not None:  # every text of the block is a str here
                chunk[~self.kept(text, sep, parts[: stop - start])] = REFUSED
            del parts, text
            out[start:stop] = chunk
            start = stop
        out[is_null] = None
        return out, bad

    def texts_c(
        self, off: I64, length: I64, is_null: npt.NDArray[np.bool_], into: Obj | None = None
    ) -> tuple[Obj, int]:
        """:meth:`texts` in C (_npage.c), a block of rows at a time as there: per block, each
        distinct text is decoded once (and asked of ``text_keep`` once), its rows share it; a
        text of an earlier block of the scan (:meth:`text_memo`) is not decoded or asked
        again. The blocks are :data:`_C_TEXT_SCALE` times those of the numpy path (no index per
        byte here: a block's temporaries are ~40 bytes per row; the per-block work on its
        distinct texts is what a block costs). Written ``into`` when given."""
        n = off.size
        out = np.empty(n, dtype=object) if into is None else into
        bad = 0
        start = 0
        cum = np.cumsum(length + 1)
        null = is_null.view(np.uint8)
        keep = self.text_keep
        needles = _ascii_needles(keep)
        block = _TEXT_BLOCK_BYTES * _C_TEXT_SCALE
        while start < n:
            base = int(cum[start - 1]) if start else 0
            stop = n
            if int(cum[-1]) - base > block:
                stop = int(np.searchsorted(cum, base + block, side="right"))
                stop = min(max(stop, start + 1), n)
            memo = self.text_memo()
            known = None
            if memo is None and needles is None:
                codes, uniques, b = self.c.texts(
                    self.mm, off[start:stop], length[start:stop], null[start:stop]
                )
            else:
                had = 0 if memo is None else len(memo)
                codes, uniques, b, known, found = self.c.texts_memo(
                    self.mm, off[start:stop], length[start:stop], null[start:stop], memo, needles
                )
                if had and 4 * (len(uniques) - found) > 3 * len(uniques):
                    # nearly all new (an emit_nvtx capture's op names): the lookups cost more
                    # than they save, for the rest of the scan
                    self.kept_memo_used = False
                    self.kept_memo = None
            bad += b
            # the last entry, None, is what a NULL's code (-1) picks
            table = np.empty(len(uniques) + 1, dtype=object)
            table[:-1] = uniques
            if keep is not None and uniques:
                if known is None:
                    ok = self.kept_new(uniques)
                else:
                    verdict = np.frombuffer(known, dtype=np.int8)
                    ok = verdict == 1
                    ask = np.flatnonzero(verdict == 2)  # not asked in an earlier block
                    if ask.size:
                        fresh = self.kept_new([uniques[i] for i in ask.tolist()])
                        ok[ask] = fresh
                        if memo is not None:
                            memo.settle(fresh.view(np.uint8))
                table[:-1][~ok] = REFUSED
            # straight into the column (mode "wrap": code -1 is the last entry, and no buffer)
            np.take(table, np.frombuffer(codes, dtype=np.int32), out=out[start:stop], mode="wrap")
            del table, uniques, codes
            start = stop
        return out, bad

    def text_memo(self) -> Any:
        """The texts (and ``text_keep``'s verdicts) of this scan's earlier blocks
        (_npage.Memo: at most :data:`_KEPT_MEMO_TEXTS`), or None once a block's texts were
        nearly all new (:attr:`kept_memo_used`)."""
        if self.kept_memo_of is not self.text_keep:  # verdicts of another test
            self.kept_memo, self.kept_memo_of = None, self.text_keep
            self.kept_memo_used = True
        if not self.kept_memo_used:
            return None
        if self.kept_memo is None:
            self.kept_memo = self.c.Memo(_KEPT_MEMO_TEXTS)
        return self.kept_memo

    def kept_new(self, texts: list[str]) -> npt.NDArray[np.bool_]:
        """``text_keep`` of each of ``texts``: many at once through :meth:`kept` (its substring
        prefilter pays for its fixed cost there), a few one by one."""
        if len(texts) >= _PREFILTER_TEXTS:
            ends = np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)) + 1) - 1
            return self.kept("\x00".join(texts) + "\x00", ends, texts)
        assert self.text_keep is not None
        return np.fromiter(map(self.text_keep, texts), bool, len(texts))

    def kept(self, text: str, sep: I64, parts: list[str]) -> npt.NDArray[np.bool_]:
        """``text_keep`` of each of ``parts`` (the NUL-separated texts of ``text``, each ending
        at ``sep``); a keep test with a ``candidates(text, sep)`` method (see
        :class:`traceoverlap.rank.namefilter.NameTest`) is asked only about the texts that can pass."""
        keep = self.text_keep
        assert keep is not None
        find = getattr(keep, "candidates", None)
        cand = find(text, sep) if find is not None else None
        if cand is None:
            return np.fromiter(map(keep, parts), bool, len(parts))
        idx = np.flatnonzero(cand)
        ok = np.zeros(len(parts), dtype=bool)
        ok[idx] = [keep(parts[i]) for i in idx.tolist()]
        return ok

    @staticmethod
    def _count_bad(raw: bytes, sep: I64, ln: I64) -> int:
        """How many of the texts in ``raw`` are not valid UTF-8 (only when some are not)."""
        bad = 0
        for end, k in zip(sep.tolist(), ln.tolist(), strict=True):
            try:
                raw[end - k : end].decode("utf-8")
            except UnicodeDecodeError:
                bad += 1
        return bad
