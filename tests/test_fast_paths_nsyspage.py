"""The Nsight Systems page reader's fast paths against the code they replace (issue 40, round 3).

- the leaf pages cut into blocks once, each block's selected rows found by one search of the
  whole selection (:func:`_pages._blocks`), against the per-block loop and searches it replaces;
  a block none of whose rows is selected is not read, and the columns read are SQLite's.
- the C path's texts gathered straight into the output column (``np.take(..., out=...,
  mode="wrap")``) against the gather and copy it replaces.
- _npage.c's text hash, 8 bytes at a time: texts that share their first words and differ in the
  tail are told apart (decoded once each, every row its own), with and without the memo.
- release(): one madvise over a block's span of pages (was one per run of consecutive pages):
  the decoded pages are still handed back.
"""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceoverlap.readers.nsys import _memo, _pages
from traceoverlap.readers.nsys._columns import Unsupported
from traceoverlap.readers.nsys._scan import _read_via_sql

_names = itertools.count()


def _old_picks(ncell: np.ndarray, wanted: np.ndarray | None, rows: int) -> list[Any]:
    """The loop read() had: per block (pages, rows, picked positions in the block)."""
    out: list[Any] = []
    ends = np.cumsum(ncell)
    n = int(ends[-1]) if ends.size else 0
    lo_page, lo_row = 0, 0
    while lo_row < n:
        hi_page = int(np.searchsorted(ends, lo_row + rows, side="right"))
        hi_page = min(max(hi_page, lo_page + 1), ncell.size)
        hi_row = int(ends[hi_page - 1])
        pick = None
        if wanted is not None:
            a, b = np.searchsorted(wanted, [lo_row, hi_row])
            pick = (wanted[a:b].astype(np.int64) - lo_row).tolist()
        out.append((lo_page, hi_page, lo_row, hi_row, pick))
        lo_page, lo_row = hi_page, hi_row
    return out


@settings(max_examples=200, deadline=None)
@given(
    ncell=st.lists(st.integers(0, 40), max_size=30),
    rows=st.integers(1, 90),
    data=st.data(),
)
def test_blocks_cut_and_pick_as_the_loop_they_replace(
    ncell: list[int], rows: int, data: Any
) -> None:
    cells = np.array(ncell, dtype=np.int64)
    n = int(cells.sum())
    chosen = data.draw(st.none() | st.sets(st.integers(0, max(n - 1, 0)), max_size=n))
    wanted = None
    if chosen is not None and n:
        wanted = np.array(sorted(chosen), dtype=data.draw(st.sampled_from([np.int32, np.int64])))
    old = _old_picks(cells, wanted, rows)
    saved = _pages._BLOCK_ROWS
    _pages._BLOCK_ROWS = rows
    try:
        blocks = _pages._blocks(cells)
    finally:
        _pages._BLOCK_ROWS = saved
    assert blocks == [b[:4] for b in old]
    if wanted is not None and blocks:
        # read()'s picks: one search of every block's end, a block's rows between two ends
        cut = np.searchsorted(wanted, np.array([b[3] for b in blocks], dtype=wanted.dtype))
        for k, b in enumerate(old):
            lo = int(cut[k - 1]) if k else 0
            assert np.subtract(wanted[lo : cut[k]], b[2], dtype=np.int64).tolist() == b[4]


def _table(path: Path, n: int, page_size: int) -> None:
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {page_size}")
    con.execute("CREATE TABLE t (a INTEGER, b INTEGER, s TEXT)")
    con.executemany(
        "INSERT INTO t VALUES (?, ?, ?)",
        [(i, i % 7 if i % 5 else None, f"s{i % 13}" if i % 4 else None) for i in range(n)],
    )
    con.commit()
    con.close()


@pytest.mark.parametrize("decoder", ["c", "numpy"])
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    n=st.integers(0, 400),
    lo=st.integers(0, 400),
    width=st.integers(0, 60),
    block=st.sampled_from([7, 50, 1 << 15]),
)
def test_selected_rows_of_some_blocks_read_as_sqlite_selects_them(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    decoder: str,
    n: int,
    lo: int,
    width: int,
    block: int,
) -> None:
    # a selection of one run of rows: the blocks before and after it hold none (not read)
    if decoder == "c" and _pages._npage is None:
        pytest.skip("the C page decoder is not built")
    monkeypatch.setattr(_pages, "DECODER", decoder)
    monkeypatch.setattr(_pages, "_BLOCK_ROWS", block)
    path = tmp_path / f"t{next(_names)}.sqlite"
    _table(path, n, 512)
    where = ("rowid > ? AND rowid <= ?", (lo, lo + width))
    _memo.forget()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        con.execute("BEGIN")
        info = con.execute("PRAGMA table_xinfo(t)").fetchall()
        try:
            got = _pages.PageReader(con, path).read("t", info, ["a", "b"], ["s"], where)
        except Unsupported:
            pytest.fail("pages refused")
        want = _read_via_sql(con, "t", info, ["a", "b"], ["s"], where)
    finally:
        con.close()
    path.unlink()
    assert got.n == want.n == len(range(lo, min(lo + width, n)))
    for c in ("a", "b"):
        assert got.kinds[c].tolist() == want.kinds[c].tolist()
        ok = want.kinds[c] == 0
        assert got.ints[c][ok].tolist() == want.ints[c][ok].tolist()
    assert got.texts["s"].tolist() == want.texts["s"].tolist()


@settings(max_examples=200, deadline=None)
@given(
    uniques=st.lists(st.one_of(st.text(max_size=3), st.none()), max_size=8),
    data=st.data(),
)
def test_take_wrap_into_a_column_is_the_gather_it_replaces(
    uniques: list[str | None], data: Any
) -> None:
    # texts_c: np.take(table, codes, out=column[a:b], mode="wrap") for
    # column[a:b] = table[codes]: code -1 (NULL) picks the table's last entry, None
    table = np.empty(len(uniques) + 1, dtype=object)
    table[:-1] = uniques
    codes = np.array(
        data.draw(st.lists(st.integers(-1, len(uniques) - 1), max_size=30)), dtype=np.int32
    )
    a = data.draw(st.integers(0, 5))
    old = np.empty(codes.size + 9, dtype=object)
    old[a : a + codes.size] = table[codes]
    new = np.empty(codes.size + 9, dtype=object)
    np.take(table, codes, out=new[a : a + codes.size], mode="wrap")
    assert new.tolist() == old.tolist()
    assert all(x is y for x, y in zip(new.tolist(), old.tolist(), strict=True))


_needs_c = pytest.mark.skipif(_pages._npage is None, reason="the C page decoder is not built")


@_needs_c
@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.one_of(st.none(), st.binary(max_size=21).map(lambda b: bytes(0x61 + x % 2 for x in b))),
        max_size=60,
    )
)
def test_texts_hashed_a_word_at_a_time_still_tell_every_text_apart(
    rows: list[bytes | None],
) -> None:
    # _npage.c's span_hash reads 8 bytes at a time and the last 0-7 as one more word (FNV-1a,
    # a byte at a time, before): texts of two letters, 0-21 bytes, most sharing their first
    # words, differing in the tail. Each distinct text is one unique, in order of first row,
    # and every row's code points at its own bytes (the hash only finds candidates: equal
    # texts are told by their bytes), so whatever the hash, the decode is dict-order dedup.
    from traceoverlap.readers.nsys import _npage

    buf = b"".join(r or b"" for r in rows)
    mm = np.frombuffer(buf + b"\x00", dtype=np.uint8)
    ln = np.array([len(r or b"") for r in rows], dtype=np.int64)
    off = np.cumsum(ln) - ln
    null = np.array([r is None for r in rows], dtype=np.uint8)
    want = list(dict.fromkeys(r.decode() for r in rows if r is not None))
    codes, uniques, bad = _npage.texts(mm, off, ln, null)
    assert uniques == want and bad == 0
    got = [None if c < 0 else uniques[c] for c in np.frombuffer(codes, dtype=np.int32).tolist()]
    assert got == [None if r is None else r.decode() for r in rows]
    memo = _npage.Memo(8)
    for half in (slice(0, len(rows) // 2), slice(len(rows) // 2, None)):
        codes, uniques, bad, _known, _found = _npage.texts_memo(
            mm, off[half], ln[half], null[half], memo, None
        )
        got = [None if c < 0 else uniques[c] for c in np.frombuffer(codes, dtype=np.int32)]
        assert got == [None if r is None else r.decode() for r in rows[half]]


def _mapped_kb(path: Path) -> int | None:
    """Resident kB of this process's maps of ``path`` (/proc/self/smaps), None off Linux."""
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return None
    total, inside = 0, False
    for line in lines:
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            inside = line.endswith(str(path))
        elif inside and head and head[0] == "Rss:":
            total += int(head[1])
    return total


def test_a_read_hands_back_the_pages_it_decoded(tmp_path: Path) -> None:
    # release(): one madvise from a block's first page to its last (was one per run of
    # consecutive pages). After a read of 2000 rows of ~400 bytes on 1 KB pages (about 1000
    # leaf pages, 8 blocks of 256 rows), what stays mapped is not the table: the interior pages
    # the walk read, the header page, nothing like the ~1 MB of leaves.
    path = tmp_path / "big.sqlite"
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 1024")
    con.execute("CREATE TABLE t (a INTEGER, s TEXT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, "x" * 400) for i in range(2000)])
    con.commit()
    con.close()
    _memo.forget()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        con.execute("BEGIN")
        info = con.execute("PRAGMA table_xinfo(t)").fetchall()
        reader = _pages.PageReader(con, path)
        saved = _pages._BLOCK_ROWS
        _pages._BLOCK_ROWS = 256
        try:
            got = reader.read("t", info, ["a"], ["s"])
        finally:
            _pages._BLOCK_ROWS = saved
        kb = _mapped_kb(path)
        if kb is None or reader.map is None:
            pytest.skip("no /proc/self/smaps")
        leaves, _ = reader.table_leaves("t")
        assert leaves.size > 900
        assert got.ints["a"].tolist() == list(range(2000))
        assert kb * 1024 < leaves.size * 1024 // 4  # under a quarter of the leaves still mapped
    finally:
        con.close()
