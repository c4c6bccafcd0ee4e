"""The page decoder of traceoverlap/readers/nsys/_pages.py against SQLite itself: every value
kind and record shape the file format has, in one table, must read exactly as ``SELECT`` reads it
(which the fallback path does); files it does not decode are read through SQLite."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from traceoverlap.readers.nsys import _pages
from traceoverlap.readers.nsys._columns import INT, NULL, OTHER, REFUSED
from traceoverlap.readers.nsys._scan import _read_via_sql, read_columns

# integers of every serial type (1, 2, 3, 4, 6 and 8 bytes, and the constants 0 and 1)
EDGE_INTS = [0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 32767, 32768, -32769, 2**23 - 1, 2**23]
EDGE_INTS += [-(2**23) - 1, 2**31 - 1, 2**31, -(2**31) - 1, 2**47 - 1, 2**47, -(2**47) - 1]
EDGE_INTS += [2**63 - 1, -(2**63), 1_700_000_000_000_000_000]


@pytest.fixture(autouse=True, params=["c", "numpy"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here with each page decoder: the C loops (_npage.c) and the numpy fallback."""
    if request.param == "c" and _pages._npage is None:
        pytest.skip("the C page decoder is not built")
    monkeypatch.setattr(_pages, "DECODER", request.param)
    return str(request.param)


def _values(rng: random.Random, n: int) -> list[object]:
    kinds: list[object] = []
    for i in range(n):
        r = rng.random()
        if r < 0.55:
            kinds.append(
                EDGE_INTS[i % len(EDGE_INTS)] if i < 200 else rng.randrange(-(2**62), 2**62)
            )
        elif r < 0.65:
            kinds.append(None)
        elif r < 0.72:
            kinds.append(rng.random() * 1e6)  # a real: not an integer
        elif r < 0.8:
            kinds.append("x" * rng.randrange(0, 90))  # a text, short and long (2-byte serial type)
        elif r < 0.85:
            kinds.append(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 20))))
        else:
            kinds.append(rng.randrange(0, 2))
    return kinds


def _texts(rng: random.Random, n: int) -> list[object]:
    out: list[object] = []
    for i in range(n):
        r = rng.random()
        if r < 0.1:
            out.append(None)
        elif r < 0.15:
            out.append("")
        elif r < 0.2:
            out.append("é" * rng.randrange(1, 80) + "→✓")
        else:
            out.append(f"aten::op{i % 50}, seq = {i}, op_id = {i}" + "y" * rng.randrange(0, 70))
    return out


def _db(path: Path, n: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 1024")  # small pages: a multi-level b-tree with few rows
    con.execute(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b INTEGER NOT NULL, txt TEXT, c)"
    )
    a, c, txt = _values(rng, n), _values(rng, n), _texts(rng, n)
    rows = [(i * 3 + 1, a[i], i * 1000, txt[i], c[i]) for i in range(n)]
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", rows)
    # rows written before a column was added are shorter than the table: they read as NULL
    con.execute("ALTER TABLE t ADD COLUMN late INTEGER")
    con.executemany(
        "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)",
        [(10**9 + i, i, i, f"late{i}", None, -i) for i in range(50)],
    )
    con.execute("DELETE FROM t WHERE id % 7 = 0")  # free space and freeblocks in the pages
    con.commit()
    con.close()
    return path


def _both(path: Path, table: str, ints: list[str], texts: list[str]):  # type: ignore[no-untyped-def]
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    con.execute("BEGIN")
    con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    try:
        fast = read_columns(con, path, table, ints, texts)
        info = con.execute(f"PRAGMA table_xinfo({table})").fetchall()
        slow = _read_via_sql(con, table, info, ints, texts)
    finally:
        con.close()
    return fast, slow


def _same(fast, slow, ints: list[str], texts: list[str]) -> None:  # type: ignore[no-untyped-def]
    assert fast.n == slow.n
    for c in ints:
        np.testing.assert_array_equal(fast.kinds[c], slow.kinds[c], err_msg=c)
        ok = slow.kinds[c] == INT
        np.testing.assert_array_equal(fast.ints[c][ok], slow.ints[c][ok], err_msg=c)
    for c in texts:
        assert fast.texts[c].tolist() == slow.texts[c].tolist(), c


@pytest.mark.parametrize("n", [0, 1, 3000])
def test_pages_read_exactly_what_select_reads(tmp_path: Path, n: int) -> None:
    path = _db(tmp_path / "t.sqlite", n)
    ints, texts = ["id", "a", "b", "c", "late"], ["txt"]
    fast, slow = _both(path, "t", ints, texts)
    assert fast.via == "pages" and slow.via == "sql"
    _same(fast, slow, ints, texts)
    if n:
        # and what SELECT says, written out: the rowid alias, every kind of value
        con = sqlite3.connect(path)
        ref = con.execute("SELECT id, a, typeof(a), late FROM t ORDER BY rowid").fetchall()
        con.close()
        assert fast.ints["id"].tolist() == [r[0] for r in ref]
        kinds = {"integer": INT, "null": NULL, "real": OTHER, "text": OTHER, "blob": OTHER}
        assert fast.kinds["a"].tolist() == [kinds[r[2]] for r in ref]
        assert [v for v, r in zip(fast.ints["a"].tolist(), ref) if r[2] == "integer"] == [
            r[1] for r in ref if r[2] == "integer"
        ]
        assert fast.kinds["late"][: n // 2].tolist().count(NULL) == len(fast.ints["late"][: n // 2])


def test_texts_that_are_not_utf8_are_replaced_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "u.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE s (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO s VALUES (1, 'fine'), (2, CAST(X'66FF6F' AS TEXT)), (3, NULL)")
    con.commit()
    con.close()
    fast, slow = _both(path, "s", ["id"], ["value"])
    assert fast.texts["value"].tolist() == ["fine", "f\ufffdo", None]
    assert fast.bad_utf8 == slow.bad_utf8 == 1
    _same(fast, slow, ["id"], ["value"])


def test_rows_on_overflow_pages_are_read_through_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "big.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER, txt TEXT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(1, "short"), (2, "z" * 20000), (3, None)])
    con.commit()
    con.close()
    fast, slow = _both(path, "t", ["a"], ["txt"])
    assert fast.via == "sql"  # a 20 kB row does not fit its page
    assert fast.texts["txt"].tolist() == ["short", "z" * 20000, None]
    _same(fast, slow, ["a"], ["txt"])


def test_a_wal_database_is_read_through_sqlite_with_its_committed_rows(tmp_path: Path) -> None:
    path = tmp_path / "w.sqlite"
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("CREATE TABLE t (a INTEGER)")
    writer.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
    writer.commit()  # committed, but only in the -wal file while the writer stays open
    try:
        fast, _ = _both(path, "t", ["a"], [])
        assert fast.via == "sql" and fast.ints["a"].tolist() == list(range(10))
    finally:
        writer.close()


def test_refused_texts_read_as_refused_on_both_paths(tmp_path: Path) -> None:
    # text_keep decides per text; refused ones read as REFUSED, NULL stays None. The 20 kB row
    # sends the second table through SQLite, the first is decoded from its pages.
    path = tmp_path / "keep.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (txt TEXT)")
    con.execute("CREATE TABLE big (txt TEXT)")
    vals = ["ProfilerStep#1", "aten::mm", None, "forward"]
    con.executemany("INSERT INTO t VALUES (?)", [(v,) for v in vals])
    con.executemany("INSERT INTO big VALUES (?)", [(v,) for v in [*vals, "z" * 20000]])
    con.commit()
    con.close()
    keep = ("ProfilerStep#1", "forward").__contains__
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    con.execute("BEGIN")
    try:
        fast = read_columns(con, path, "t", [], ["txt"], keep)
        slow = read_columns(con, path, "big", [], ["txt"], keep)
    finally:
        con.close()
    assert fast.via == "pages" and slow.via == "sql"
    want = ["ProfilerStep#1", REFUSED, None, "forward"]
    assert fast.texts["txt"].tolist() == want
    assert slow.texts["txt"].tolist() == [*want, REFUSED]


def test_a_text_default_is_refused_as_the_texts_are(tmp_path: Path) -> None:
    # rows written before `late` was added read as its DEFAULT 'dflt': text_keep decides on it
    # as on any text (the SQLite path refuses it too)
    path = tmp_path / "d.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.execute("INSERT INTO t VALUES (1)")
    con.execute("ALTER TABLE t ADD COLUMN late TEXT DEFAULT 'dflt'")
    con.execute("INSERT INTO t VALUES (2, 'kept')")
    con.commit()
    con.close()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    con.execute("BEGIN")
    try:
        got = read_columns(con, path, "t", ["a"], ["late"], "kept".__eq__)
    finally:
        con.close()
    assert got.via == "pages"
    assert got.texts["late"].tolist() == [REFUSED, "kept"]


def test_a_process_s_rows_are_selected_as_sqlite_selects_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pid_sql(globalTid) = ?: (value >> 24) & 0xFFFFFF of integers, 0 for anything else. The
    # pages select them (PageReader.pid_rows) without asking SQLite; compared with SQLite's own
    # answer to the same condition.
    from traceoverlap.readers.nsys import _memo
    from traceoverlap.readers.nsys._columns import pid_sql

    calls = []
    real = _pages.PageReader.pid_rows
    monkeypatch.setattr(
        _pages.PageReader, "pid_rows", lambda self, *a: calls.append(a) or real(self, *a)
    )
    path = tmp_path / "p.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (v INTEGER, globalTid INTEGER)")
    tids = [
        (7 << 24) | 5,  # pid 7
        (9 << 24) | 1,  # pid 9
        -((7 << 24) | 3),  # negative: pid of the two's complement, as SQLite shifts it
        (1 << 48) | (7 << 24),  # bits above the pid's 24 are dropped: pid 7
        None,  # NULL: pid 0
        "text",  # not an integer: pid 0
        2.5,  # a real: pid 0
        0,  # pid 0
        7 << 24,  # pid 7
    ]
    con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(tids)))
    con.execute("ALTER TABLE t ADD COLUMN late INTEGER DEFAULT 117440512")  # 7 << 24
    con.execute("INSERT INTO t VALUES (99, 1, 7 << 24)")
    con.commit()
    con.close()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    con.execute("BEGIN")
    try:
        for column in ("globalTid", "late"):
            for pid in (0, 7, 9, (-((7 << 24) | 3) >> 24) & 0xFFFFFF):
                where = (f"{pid_sql(column)} = ?", (pid,))
                want = [
                    r[0]
                    for r in con.execute(f"SELECT v FROM t WHERE {where[0]} ORDER BY rowid", (pid,))
                ]
                _memo.forget()
                got = read_columns(con, path, "t", ["v"], [], where=where)
                assert got.via == "pages"
                assert got.ints["v"].tolist() == want, (column, pid)
    finally:
        con.close()
    assert len(calls) == 8  # every selection was the pages'
