"""The Nsight Systems page reader's fast paths against the code they replace (issue 40, round 3).

- the leaf pages cut into blocks once, each block's selected rows found by one search of the
  whole selection (:func:`_pages._blocks`), against the per-block loop and searches it replaces;
  a block none of whose rows is selected is not read, and the columns read are SQLite's.
- the C path's texts gathered straight into the output column (``np.take(..., out=...,
  mode="wrap")``) against the gather and copy it replaces.
- _npage.c's text hash, 8 bytes at a time: texts that share their first words and differ in the
  tail are told apart (decoded once each, every row its own), with and without the memo.
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
