"""The Nsight Systems reader's fast paths against the code they replace (issue 40).

- ``_npage.texts_memo`` (a block's distinct texts looked up in the texts of the scan's earlier
  blocks, kept in an ``_npage.Memo``) against ``_npage.texts`` (every block on its own), and the
  whole reader with it against the numpy decoder (``TRACEOVERLAP_NPAGE=0``) over many blocks;
- its needles (``NameTest.needles``): the ASCII texts refused unasked are those whose lowered
  text holds no needle, and a name a NameTest passes holds one;
- a process's rows selected from the pids of its table's column, decoded once per file
  (``PageReader.pids``, kept in ``._memo``), against SQLite's own selection.
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
from nsys_writer import page_read

from traceoverlap.rank.namefilter import NameTest
from traceoverlap.readers.nsys import _memo, _pages
from traceoverlap.readers.nsys._columns import REFUSED, Unsupported, pid_sql
from traceoverlap.readers.nsys._scan import read_columns

needs_c = pytest.mark.skipif(_pages._npage is None, reason="the C page decoder is not built")
_names = itertools.count()

# short byte strings, some not UTF-8, many repeated
_text = st.binary(max_size=5).map(lambda b: bytes(x % 4 + 0x61 if x < 0xF0 else x for x in b))


def _texts_args(rows: list[bytes | None]) -> tuple[Any, Any, Any, Any]:
    """The texts of ``rows`` (None: NULL) laid end to end, as the decoder's ``texts`` takes
    them: the bytes, each row's offset and length, and its NULL flag."""
    buf = b"".join(r or b"" for r in rows)
    mm = np.frombuffer(buf + b"\x00", dtype=np.uint8)
    ln = np.array([len(r or b"") for r in rows], dtype=np.int64)
    off = np.cumsum(ln) - ln
    null = np.array([r is None for r in rows], dtype=np.uint8)
    return mm, off, ln, null


def _keep(text: str) -> bool:
    return len(text) % 2 == 1


@needs_c
@settings(max_examples=150, deadline=None)
@given(
    blocks=st.lists(st.lists(st.one_of(st.none(), _text), max_size=30), max_size=6),
    limit=st.integers(0, 12),
    ask=st.booleans(),
)
def test_texts_memo_reads_what_texts_reads(
    blocks: list[list[bytes | None]], limit: int, ask: bool
) -> None:
    # each block's rows (None: NULL) at their offsets in one buffer; with a memo of `limit`
    # texts shared by the blocks, every row decodes to what texts() gives it, the same uniques
    # in the same order, the same count of rows that are not UTF-8; a verdict the memo gives
    # (known 0 / 1) is the one settled for that text in an earlier block
    from traceoverlap.readers.nsys import _npage

    memo = _npage.Memo(limit)
    settled: dict[str, bool] = {}
    for rows in blocks:
        mm, off, ln, null = _texts_args(rows)
        codes, uniques, bad = _npage.texts(mm, off, ln, null)
        had = len(memo)
        mcodes, muniques, mbad, known, found = _npage.texts_memo(mm, off, ln, null, memo)
        assert muniques == uniques and mbad == bad and mcodes == codes
        verdict = np.frombuffer(known, dtype=np.int8)
        assert verdict.size == len(uniques) and set(verdict.tolist()) <= {0, 1, 2}
        for u, v in zip(uniques, verdict.tolist(), strict=True):
            if v != 2:
                assert settled[u] is bool(v)
        assert found <= min(had, len(uniques)) and len(memo) <= limit
        pending = [u for u, v in zip(uniques, verdict.tolist(), strict=True) if v == 2]
        if ask:
            answers = np.array([_keep(u) for u in pending], dtype=bool)
            memo.settle(answers.view(np.uint8))
            settled.update(zip(pending, answers.tolist(), strict=True))
        with pytest.raises(ValueError):
            memo.settle(np.zeros(len(pending) + 1, dtype=np.uint8))


def _write(path: Path, rows: list[tuple[int, Any]]) -> None:
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 1024")
    con.execute("CREATE TABLE t (a INTEGER, s TEXT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", rows)
    con.commit()
    con.close()


def _read(path: Path, decoder: str, keep: Any) -> Any:
    old = _pages.DECODER
    _pages.DECODER = decoder
    try:
        cols: Any = page_read(path, keep)[1]
        return cols.ints["a"].tolist(), cols.texts["s"].tolist(), cols.bad_utf8
    except Unsupported:
        return "unsupported"
    finally:
        _pages.DECODER = old


@needs_c
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    texts=st.lists(
        st.one_of(st.none(), st.text("abBé", max_size=6), st.binary(min_size=1, max_size=3)),
        min_size=1,
        max_size=12,
    ),
    picks=st.lists(st.integers(0, 11), max_size=400),
    block=st.sampled_from([16, 64, 256]),
    limit=st.integers(0, 8),
    keep=st.sampled_from([None, "odd", "names"]),
)
def test_reader_with_the_memo_reads_what_the_numpy_decoder_reads(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    texts: list[Any],
    picks: list[int],
    block: int,
    limit: int,
    keep: str | None,
) -> None:
    # a column of a few texts (some not UTF-8) repeated over many blocks of `block` bytes,
    # with a memo of `limit` texts: the C path reads the numpy decoder's column
    monkeypatch.setattr(_pages, "_TEXT_BLOCK_BYTES", block)
    monkeypatch.setattr(_pages, "_KEPT_MEMO_TEXTS", limit)
    rows = [(i, texts[p % len(texts)]) for i, p in enumerate(picks)]
    path = tmp_path / f"t{next(_names)}.sqlite"
    _write(path, rows)
    test = {None: None, "odd": _keep, "names": NameTest(["^ab", "(?i)B", "é"])}[keep]
    c = _read(path, "c", test)
    assert c == _read(path, "numpy", test)
    if c != "unsupported" and test is not None:
        assert all(t is None or t is REFUSED or test(t) for t in c[1])
    path.unlink()


def test_a_process_s_rows_come_from_one_decode_of_the_pid_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pid_sql(globalTid) = ?: (value >> 24) & 0xFFFFFF of integers, 0 for anything else. The
    # column's pids are decoded once for the file: every process's selection (memo kept between
    # them) is SQLite's own answer to the same condition.
    calls: list[Any] = []
    real = _pages.PageReader.pids
    monkeypatch.setattr(
        _pages.PageReader, "pids", lambda self, *a: calls.append(a) or real(self, *a)
    )
    path = tmp_path / "p.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (v INTEGER, globalTid INTEGER)")
    tids = [(7 << 24) | 5, (9 << 24) | 1, -((7 << 24) | 3), (1 << 48) | (7 << 24), None, "x"]
    tids += [2.5, 0, 7 << 24, (0xFFFFFF << 24) | 2]
    con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(tids)))
    con.commit()
    con.close()
    _memo.forget()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    con.execute("BEGIN")
    try:
        for pid in (7, 9, 0, 0xFFFFFF, (-((7 << 24) | 3) >> 24) & 0xFFFFFF, 12345):
            where = (f"{pid_sql('globalTid')} = ?", (pid,))
            want = [
                r[0]
                for r in con.execute(f"SELECT v FROM t WHERE {where[0]} ORDER BY rowid", (pid,))
            ]
            got = read_columns(con, path, "t", ["v"], [], where=where)
            assert got.via == "pages"
            assert got.ints["v"].tolist() == want, pid
    finally:
        con.close()
        _memo.forget()
    assert len(calls) == 1  # one decode of the column for the six processes


_needle_text = st.binary(max_size=8).map(
    lambda b: bytes(x % 6 + 0x41 + (x & 0x20) if x < 0xF0 else x for x in b)
)


@needs_c
@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.one_of(st.none(), _needle_text), max_size=40),
    needles=st.lists(st.text("abcdef", max_size=3), max_size=4),
    use_memo=st.booleans(),
)
def test_texts_memo_refuses_unasked_only_ascii_texts_without_a_needle(
    rows: list[bytes | None], needles: list[str], use_memo: bool
) -> None:
    # letters A-F / a-f (upper and lower case), some bytes not ASCII: a distinct text comes
    # back refused unasked (None, verdict 0) exactly when it is ASCII and its lowered text
    # holds none of the needles; every other one as texts() decodes it, to be asked
    from traceoverlap.readers.nsys import _npage

    mm, off, ln, null = _texts_args(rows)
    codes, uniques, bad = _npage.texts(mm, off, ln, null)
    memo = _npage.Memo(8) if use_memo else None
    got = _npage.texts_memo(mm, off, ln, null, memo, tuple(n.encode() for n in needles))
    assert got[0] == codes and got[2] == bad
    distinct = list(dict.fromkeys(r for r in rows if r is not None))
    assert len(distinct) == len(uniques) == len(got[1])
    for raw, text, mine, verdict in zip(distinct, uniques, got[1], got[3], strict=True):
        refused = raw.isascii() and not any(n in raw.decode().lower() for n in needles)
        assert verdict == (0 if refused else 2)
        assert mine == (None if refused else text)


@settings(max_examples=300, deadline=None)
@given(
    patterns=st.lists(
        st.sampled_from(
            ["^ab", "(?i)b:", "x?y", "(?i)forward|backward", "nccl", "^Step#\\d", "é", "Z"]
        ),
        min_size=1,
        max_size=4,
    ),
    name=st.text("abxyBZ:#1é fwdorFW", max_size=12),
)
def test_a_name_a_name_test_passes_holds_one_of_its_needles(patterns: list[str], name: str) -> None:
    # the premise of the refusals above: an ASCII name the test passes, once lowered,
    # holds one of the test's needles
    test = NameTest(patterns)
    needles = test.needles
    if needles is not None and name.isascii() and test(name):
        assert any(n in name.lower() for n in needles)


@settings(max_examples=300, deadline=None)
@given(
    picks=st.lists(st.tuples(st.integers(0, 6), st.booleans()), max_size=40),
)
def test_factorize_texts_by_object_is_factorize_by_value(picks: list[tuple[int, bool]]) -> None:
    # rows drawn from a few texts (None, REFUSED, "" among them), each row either the shared
    # object or a fresh equal copy: factorizing the objects first (by address) gives the codes
    # and uniques of factorizing the rows' values (_factorize_distinct: the code it replaces)
    from traceoverlap.readers.nsys._nvtx import _factorize_distinct, _factorize_texts

    pool: list[str | None] = ["a", "b", REFUSED, None, "", "rank 1", "é"]
    rows = np.empty(len(picks), dtype=object)
    for i, (k, copy) in enumerate(picks):
        t = pool[k]
        rows[i] = t if t is None or not copy else "".join(list(t))  # equal, another object
    codes, uniques = _factorize_texts(rows)
    want_codes, want_uniques = _factorize_distinct(rows.copy())
    assert codes.dtype == want_codes.dtype == np.int64
    assert codes.tolist() == want_codes.tolist()
    assert uniques.dtype == want_uniques.dtype
    assert uniques.tolist() == want_uniques.tolist()


# -- round 4: the rank texts' `"text" LIKE '%ank%'` selection off the pages --------------------


def _like_sql(path: Path, needle: str, column: str = "s") -> list[int]:
    """The reference: the positions (rowid - 1) SQLite's own LIKE selects."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        sql = f"SELECT rowid - 1 FROM t WHERE \"{column}\" LIKE '%{needle}%' ORDER BY rowid"
        return [int(r[0]) for r in con.execute(sql)]
    finally:
        con.close()


def _selected(path: Path, needle: str, c: bool, column: str = "s", direct: bool = False) -> Any:
    """``PageReader.selected_rows`` of ``"s" LIKE '%needle%'``: the C scan (``c``) or, with the
    C loops off, the code it replaces (SQLite's group_concat of the rowids). ``direct``: the C
    scan itself (``like_rows``, no fallback), "unsupported" where it refuses."""
    from traceoverlap.readers.nsys import _memo

    _memo.forget()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        con.execute("BEGIN")
        info = con.execute("PRAGMA table_xinfo(t)").fetchall()
        (n,) = con.execute("SELECT count(*) FROM t").fetchone()
        reader = _pages.PageReader(con, path)
        if not c:
            reader.c = None
        where = (f"\"{column}\" LIKE '%{needle}%'", ())
        if direct:
            try:
                rows = reader.like_rows("t", info, column, needle.lower().encode())
            except Unsupported:
                return "unsupported"
        else:
            rows = reader.selected_rows("t", int(n), where, info)
        return [int(x) for x in rows.tolist()]
    finally:
        con.close()


# values of the text column: texts with the needle's letters in any case, NULs, non-ASCII and
# control characters, bytes that are not UTF-8 (stored as text and as blobs), numbers
_like_text = st.text(alphabet="aAnNkKrR \x00\x01é\u2028x", max_size=12)
_like_value = st.one_of(
    st.none(),
    _like_text,
    _like_text.map(lambda s: s.encode("utf-8", "surrogateescape")),  # a blob
    st.binary(max_size=8).map(lambda b: b.replace(b"q", b"ank")),  # a blob, often not UTF-8
)


def _write_texts(path: Path, values: list[Any], as_text: list[bool]) -> None:
    """Table t (a, s) of ``values`` in 1 KB pages; a bytes value stored as TEXT where
    ``as_text`` says so (not UTF-8, as a writer can store), else as a BLOB."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 1024")
    con.execute("CREATE TABLE t (a INTEGER, s TEXT)")
    for i, (v, txt) in enumerate(zip(values, as_text, strict=True)):
        if isinstance(v, bytes) and txt:
            con.execute("INSERT INTO t VALUES (?, CAST(? AS TEXT))", (i, v))
        else:
            con.execute("INSERT INTO t VALUES (?, ?)", (i, v))
    con.commit()
    con.close()


@needs_c
@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    values=st.lists(_like_value, max_size=300),
    as_text=st.one_of(st.just([True] * 300), st.lists(st.booleans(), min_size=300, max_size=300)),
    needle=st.sampled_from(["ank", "ANK", "a", "nk", "kan", "rank"]),
)
def test_like_rows_select_what_sqlite_like_selects(
    tmp_path: Path, values: list[Any], as_text: list[bool], needle: str
) -> None:
    # the rows SQLite's own `s LIKE '%needle%'` selects (its letters in either case, before the
    # first NUL, of texts, UTF-8 or not; blobs as this SQLite's build matches them: the scan
    # leaves a column with blobs to SQLite), over many 1 KB pages: the C scan selects them, and
    # so does the code it replaces (group_concat of the rowids)
    path = tmp_path / f"like{next(_names)}.sqlite"
    _write_texts(path, values, as_text[: len(values)])
    expected = _like_sql(path, needle)
    assert _selected(path, needle, c=True) == expected
    assert _selected(path, needle, c=False) == expected
    blobs = any(isinstance(v, bytes) and not t for v, t in zip(values, as_text, strict=False))
    assert _selected(path, needle, c=True, direct=True) == ("unsupported" if blobs else expected)


@needs_c
def test_like_rows_leave_numbers_and_defaults_to_sqlite(tmp_path: Path) -> None:
    # numbers in the text column, a record lacking the column whose DEFAULT is a text that holds
    # the needle (rows written before ALTER TABLE ADD COLUMN) or NULL: the same rows as SQLite,
    # whether the scan refuses (numbers, the text default) or reads them (NULL default)
    # (a column declared without a type keeps numbers: TEXT would turn them into texts)
    for default, extra in (("'Rank 0'", None), ("NULL", None), ("NULL", 12.5), ("NULL", 7)):
        path = tmp_path / f"dflt{next(_names)}.sqlite"
        con = sqlite3.connect(path)
        con.execute("PRAGMA page_size = 1024")
        con.execute("CREATE TABLE t (a INTEGER)")
        con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(200)])
        decl = "TEXT" if extra is None else ""
        con.execute(f"ALTER TABLE t ADD COLUMN s {decl} DEFAULT {default}")
        con.executemany(
            "INSERT INTO t VALUES (?, ?)", [(i, "rank 3" if i % 3 else extra) for i in range(50)]
        )
        con.commit()
        con.close()
        expected = _like_sql(path, "ank")
        assert _selected(path, "ank", c=True) == expected
        assert _selected(path, "ank", c=False) == expected
        scanned = _selected(path, "ank", c=True, direct=True)
        assert scanned == ("unsupported" if (default, extra) != ("NULL", None) else expected)


def test_like_rows_empty_table(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    _write_texts(path, [], [])
    assert _selected(path, "ank", c=True) == [] == _selected(path, "ank", c=False)


def test_like_column_recognises_only_a_plain_substring_like() -> None:
    info = [(0, "text", "TEXT", 0, None, 0, 0), (1, 'we"ird', "TEXT", 0, None, 0, 0)]
    assert _pages._like_column(("\"text\" LIKE '%ank%'", ()), info) == ("text", b"ank")
    assert _pages._like_column(("\"text\" LIKE '%ANK%'", ()), info) == ("text", b"ank")
    assert _pages._like_column(('"we""ird" LIKE \'%Ab%\'', ()), info) == ('we"ird', b"ab")
    for cond, params in (
        ("\"text\" LIKE '%a_k%'", ()),  # a wildcard
        ("\"text\" LIKE '%an%k%'", ()),
        ("\"text\" LIKE 'ank%'", ()),  # anchored
        ("\"text\" LIKE '%ank%'", (1,)),
        ("\"text\" LIKE '%é%'", ()),  # not ASCII: LIKE folds no case there
        ('"text" LIKE \'%ank%\' OR "textId" IN (SELECT 1)', ()),
        ("\"other\" LIKE '%ank%'", ()),  # not a column of the table
        ("\"text\" GLOB '*ank*'", ()),
    ):
        assert _pages._like_column((cond, params), info) is None
    assert _pages._like_column(("\"text\" LIKE '%ank%'", ()), None) is None


@needs_c
@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=40),
    needle=st.text(alphabet="ankrz", min_size=1, max_size=4),
)
def test_containing_is_a_case_folded_find_before_the_first_nul(
    rows: list[bytes | None], needle: str
) -> None:
    # _npage.containing against its definition in Python: the row's bytes up to the first NUL,
    # ASCII letters lowered (bytes.lower folds nothing else), hold the needle; NULL, and a blob
    # (an even serial type, the same bytes): no
    from traceoverlap.readers.nsys import _npage

    mm, off, ln, null = _texts_args(rows)
    serial = np.where(null.astype(bool), 0, 12 + 2 * ln + 1).astype(np.int64)  # texts
    got = np.frombuffer(_npage.containing(mm, serial, off, needle.encode()), dtype=np.uint8)
    want = [r is not None and needle.encode() in r.split(b"\x00")[0].lower() for r in rows]
    assert got.astype(bool).tolist() == want
    blob = np.where(serial > 0, serial - 1, 0)
    assert not any(_npage.containing(mm, blob, off, needle.encode()))
    with pytest.raises(ValueError):
        _npage.containing(mm, serial, off, b"a_k")
    if any(rows):
        with pytest.raises(ValueError):  # a value past the end of the buffer
            _npage.containing(mm, serial, off + mm.size, needle.encode())


def _place_concatenated(
    gpu: Any, host: Any, groups: list[tuple[int, int]], ranks: list[int], syncs: Any
) -> tuple[Any, np.ndarray]:
    """``Reader.place`` as it was, on the host blocks it was handed concatenated (the reader
    concatenated the CUDA calls and the NVTX ranges first)."""
    from traceoverlap.readers.nsys._rows import Rows

    host = Rows.concat(host)
    keys = np.array([(p << 32) | (d & 0xFFFFFFFF) for p, d in groups], dtype=np.int64)
    order = np.argsort(keys)

    def rank_of(rows: Rows) -> np.ndarray:
        gkey = (rows.pid << 32) | (rows.device.astype(np.int64) & 0xFFFFFFFF)
        if gkey.size == 0:
            return np.zeros(0, dtype=np.int32)
        return np.asarray(ranks, dtype=np.int32)[order][np.searchsorted(keys[order], gkey)]

    gpu_rank = rank_of(gpu)
    by_pid: dict[int, list[int]] = {}
    for (pid, _), r in zip(groups, ranks, strict=True):
        by_pid.setdefault(pid, []).append(r)
    pids = np.array(sorted(by_pid), dtype=np.int64)
    first = np.array([by_pid[int(p)][0] for p in pids], dtype=np.int32)
    one = int(host.pid[0]) if host.pid.size and pids.size else None
    if one is not None and bool((host.pid == one).all()):
        if one not in by_pid:
            host = host.take(np.zeros(0, dtype=np.intp))
        host_rank = np.full(len(host), by_pid.get(one, [0])[0], dtype=np.int32)
    else:
        pos = np.minimum(np.searchsorted(pids, host.pid), max(pids.size - 1, 0))
        mine = pids[pos] == host.pid
        if not mine.all():
            host = host.take(np.flatnonzero(mine))
            pos = pos[mine]
        host_rank = first[pos]
    blocks, rank_parts = [gpu, host], [gpu_rank, host_rank]
    if syncs is not None and len(syncs):
        blocks.append(syncs)
        rank_parts.append(rank_of(syncs))
    for pid, rs in by_pid.items():
        if len(rs) > 1:
            idx = np.flatnonzero(host.pid == pid)
            for r in rs[1:]:
                blocks.append(host.take(idx))
                rank_parts.append(np.full(idx.size, r, dtype=np.int32))
    return Rows.concat(blocks, trim=True), np.concatenate(rank_parts)


@settings(max_examples=150, deadline=None)
@given(
    gpu_rows=st.lists(st.sampled_from([(1, 0), (1, 1), (2, 0)]), max_size=8),
    host_pids=st.lists(st.lists(st.sampled_from([1, 2, 3]), max_size=8), min_size=1, max_size=3),
    constant=st.booleans(),
    sync_rows=st.lists(st.sampled_from([(1, 0), (2, 0)]), max_size=3),
    groups=st.sampled_from(
        [[(1, 0), (2, 0)], [(1, 0), (1, 1), (2, 0)], [(2, 0)], [(1, 0), (1, 1)], [(3, 0)]]
    ),
)
def test_place_of_host_blocks_is_place_of_their_concatenation(
    gpu_rows: list[tuple[int, int]],
    host_pids: list[list[int]],
    constant: bool,
    sync_rows: list[tuple[int, int]],
    groups: list[tuple[int, int]],
) -> None:
    # the host rows handed to place as their blocks (CUDA calls, NVTX ranges; some empty), of
    # one process or several, inside the groups or not, one GPU or two per process, with and
    # without sync rows: the rows, their order and ranks of place on the blocks concatenated
    from traceoverlap.readers.nsys._reader import Reader
    from traceoverlap.readers.nsys._rows import Rows

    def rows(pids: list[int], devices: list[int], base: int) -> Rows:
        n = len(pids)
        i64 = np.arange(base, base + n, dtype=np.int64)
        i32 = np.arange(base, base + n, dtype=np.int32)
        return Rows(
            start=i64 * 10, end=i64 * 10 + 5, pid=np.array(pids, dtype=np.int64),
            device=np.array(devices, dtype=np.int32), stream=i64, tid=i64, correlation=i64,
            category=i32 % 3, name=i32, lane=i32, thread_name=i32, shape=i32,
        )  # fmt: skip

    gpu_rows = [g for g in gpu_rows if g in groups]
    sync_rows = [g for g in sync_rows if g in groups]
    if constant:
        host_pids = [[host_pids[0][0] if host_pids[0] else 1] * len(p) for p in host_pids]
    ranks = list(range(len(groups)))[::-1]

    def inputs() -> tuple[Rows, list[Rows], Rows]:  # fresh ones: a concatenation empties them
        gpu = rows([p for p, _ in gpu_rows], [d for _, d in gpu_rows], 0)
        host = [rows(p, [-1] * len(p), 100 * (k + 1)) for k, p in enumerate(host_pids)]
        syncs = rows([p for p, _ in sync_rows], [d for _, d in sync_rows], 900)
        return gpu, host, syncs

    gpu, host, syncs = inputs()
    want_rows, want_rank = _place_concatenated(gpu, host, groups, ranks, syncs)
    gpu, host, syncs = inputs()
    got_rows, got_rank = Reader.place(Reader.__new__(Reader), gpu, host, groups, ranks, syncs)
    assert got_rank.dtype == want_rank.dtype and got_rank.tolist() == want_rank.tolist()
    for k, v in want_rows.__dict__.items():
        assert getattr(got_rows, k).tolist() == v.tolist(), k
        assert getattr(got_rows, k).dtype == v.dtype, k


@pytest.mark.parametrize("typed", [True, False])
def test_pid_codes_kept_by_the_groups_are_those_of_a_decode_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, typed: bool
) -> None:
    # the split's groups keep each GPU table's pid codes (its globalPid column read for the
    # groups); a process's read selects its rows from them. They are what PageReader.pids gives
    # on a decode of its own (the code it replaces), on random tables of every kind of value
    # (rows with bad times or a globalPid that is not an integer included), and a process's rows
    # from them are the rows SQLite's own condition selects
    import test_fast_paths_nsysgroups as g

    from traceoverlap.readers.nsys import _process

    for seed in range(6):
        path = tmp_path / f"p{seed}_{typed}.sqlite"
        g._export(path, seed, typed)
        con = g._open(path)
        try:
            _memo.forget()
            with monkeypatch.context() as m:  # the pages answer, not the fallback
                m.setattr(_process, "_groups_sql", None)
                _process._groups(con, g.TABLES, path)
            for t in g.TABLES:
                info = con.execute(f"PRAGMA table_xinfo({t})").fetchall()
                kept = _memo.recall(path, ("pids", t, "globalPid"))
                _memo.forget()
                codes, code_of = _pages.PageReader(con, path).pids(t, info, "globalPid")
                assert kept is not None, (seed, t)
                assert kept[0].dtype == codes.dtype and kept[0].tolist() == codes.tolist()
                assert kept[1] == code_of and not kept[0].flags.writeable
                for pid in [*code_of, 12345]:
                    where = (f"{pid_sql('globalPid')} = ?", (pid,))
                    sql = f"SELECT rowid - 1 FROM {t} WHERE {where[0]} ORDER BY rowid"
                    want = [r[0] for r in con.execute(sql, (pid,))]
                    _memo.forget()
                    _process._groups(con, g.TABLES, path)
                    got = _pages.PageReader(con, path).pid_rows(t, info, "globalPid", pid)
                    assert got.tolist() == want, (seed, t, pid)
        finally:
            con.close()
            _memo.forget()


@pytest.mark.parametrize("decoder", ["c", "numpy"])
@pytest.mark.parametrize("typed", [True, False])
def test_read_blocks_end_to_end_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decoder: str, typed: bool
) -> None:
    # the split's groups read their four columns a block of pages at a time
    # (PageReader.read_blocks, blocks of 64 rows here) instead of two whole-column reads: the
    # blocks end to end are PageReader.read's columns, values and kinds, with either decoder,
    # on random tables of every kind of value
    import test_fast_paths_nsysgroups as g

    if decoder == "c" and _pages._npage is None:
        pytest.skip("the C page decoder is not built")
    monkeypatch.setattr(_pages, "DECODER", decoder)
    monkeypatch.setattr(_pages, "_BLOCK_ROWS", 64)
    cols = ["start", "end", "deviceId", "globalPid"]
    for seed in range(6):
        path = tmp_path / f"b{seed}_{typed}_{decoder}.sqlite"
        g._export(path, seed, typed)
        con = g._open(path)
        try:
            for t in g.TABLES:
                info = con.execute(f"PRAGMA table_xinfo({t})").fetchall()
                _memo.forget()
                whole = _pages.PageReader(con, path).read(t, info, cols, [])
                _memo.forget()
                blocks = list(_pages.PageReader(con, path).read_blocks(t, info, cols))
                assert sum(b.n for b in blocks) == whole.n
                assert whole.n < 200 or len(blocks) > 1
                for c in cols:
                    got = np.concatenate([b.ints[c] for b in blocks]) if blocks else []
                    kinds = np.concatenate([b.kinds[c] for b in blocks]) if blocks else []
                    assert list(got) == whole.ints[c].tolist(), (seed, t, c)
                    assert list(kinds) == whole.kinds[c].tolist(), (seed, t, c)
        finally:
            con.close()
            _memo.forget()


@pytest.mark.parametrize(
    ("rows", "period"),
    [(0, 1), (10, 3), (70_000, 1), (70_000, 9_400), (70_000, 12_287), (70_000, 12_288),
     (70_000, 16_384), (70_000, 70_000), (200_000, 8_000)],
)  # fmt: skip
def test_factorize_addresses_is_pandas_factorize(rows: int, period: int) -> None:
    # the addresses' codes whatever size the hash table starts with (the sample of the first
    # rows, now 16 384 of them, decides it: all distinct, a step of `period` names repeated,
    # just under and over the three quarters that count as mostly distinct), against
    # pd.factorize itself; the addresses in a shuffled order, so codes follow first appearance
    import pandas as pd

    from traceoverlap.readers.nsys import _nvtx

    rng = np.random.default_rng(rows + period)
    names = rng.permutation(period).astype(np.intp) * 48 + 2**40  # like object addresses
    addr = names[np.arange(rows) % period]
    want = pd.factorize(addr)[0]
    got = _nvtx._factorize_addresses(addr)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 70), max_size=60),
    ids=st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 70), max_size=12),
)
def test_isin_ids_is_np_isin(values: list[int], ids: list[int]) -> None:
    # an enum's ids compared one by one (up to 8; more: np.isin itself), against np.isin: no
    # id, repeated ids, negative and 64-bit extreme values
    from traceoverlap.readers.nsys._rows import isin_ids

    arr = np.array(values, dtype=np.int64)
    got = isin_ids(arr, ids)
    assert got.dtype == np.bool_ and got.tolist() == np.isin(arr, ids).tolist()


def test_host_rows_constant_columns_concatenate_as_the_arrays_they_replace() -> None:
    # the host rows' one-value columns (device, stream; the NVTX ranges' correlation and
    # category) are that value viewed n times: placed with the GPU rows, the event rows are
    # those of the full arrays they replace, writable, of the same dtypes
    from traceoverlap.readers.nsys._reader import Reader
    from traceoverlap.readers.nsys._rows import Rows

    def block(n: int, pid: int, device: Any, stream: Any, corr: Any, cat: Any) -> Rows:
        i64 = np.arange(n, dtype=np.int64)
        i32 = np.arange(n, dtype=np.int32)
        return Rows(
            start=i64, end=i64 + 1, pid=np.full(n, pid, dtype=np.int64), device=device,
            stream=stream, tid=i64, correlation=corr, category=cat, name=i32, lane=i32,
            thread_name=i32, shape=np.broadcast_to(np.int32(-1), (n,)),
        )  # fmt: skip

    def rows(view: bool) -> list[Rows]:
        def const(n: int, v: int, dtype: Any) -> Any:
            return np.broadcast_to(dtype(v), (n,)) if view else np.full(n, v, dtype=dtype)

        gpu = block(3, 1, np.zeros(3, np.int32), np.arange(3), np.arange(3), np.zeros(3, np.int32))
        hosts = [
            block(n, 1, const(n, -1, np.int32), const(n, -1, np.int64), c, k)
            for n, c, k in (
                (4, np.arange(4), np.ones(4, np.int32)),
                (5, const(5, -1, np.int64), const(5, 7, np.int32)),
            )
        ]
        return [gpu, *hosts]

    groups, ranks = [(1, 0), (1, 1)], [0, 1]  # one process, two GPUs: its host rows copied
    want, want_rank = Reader.place(
        Reader.__new__(Reader), rows(False)[0], rows(False)[1:], groups, ranks
    )
    got, got_rank = Reader.place(
        Reader.__new__(Reader), rows(True)[0], rows(True)[1:], groups, ranks
    )
    assert got_rank.tolist() == want_rank.tolist()
    for k, v in want.__dict__.items():
        col = getattr(got, k)
        assert col.dtype == v.dtype and col.tolist() == v.tolist(), k
        assert col.flags.writeable and col.strides == v.strides, k


@needs_c
def test_like_rows_leave_another_like_to_sqlite(tmp_path: Path) -> None:
    # a connection whose LIKE is not SQLite's ASCII-case-insensitive one (PRAGMA
    # case_sensitive_like; a like() of the application's, here one that folds every case): the
    # scan refuses, and the selection is SQLite's own
    from traceoverlap.readers.nsys import _memo

    path = tmp_path / "like.sqlite"
    _write_texts(path, ["rank 1", "RANK 2", "x", "Ünk", "ünk", "ran\u212a"], [True] * 6)
    for setup in ("PRAGMA case_sensitive_like = 1", "unicode"):
        _memo.forget()
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        try:
            if setup == "unicode":
                con.create_function(
                    "like",
                    2,
                    lambda p, s: s is not None and p.strip("%").casefold() in s.casefold(),
                )
            else:
                con.execute(setup)
            con.execute("BEGIN")
            info = con.execute("PRAGMA table_xinfo(t)").fetchall()
            reader = _pages.PageReader(con, path)
            with pytest.raises(Unsupported):
                reader.like_rows("t", info, "s", b"ank")
            where = ("\"s\" LIKE '%ANK%'", ())
            got = reader.selected_rows("t", 6, where, info).tolist()
            want = [r[0] for r in con.execute("SELECT rowid - 1 FROM t WHERE s LIKE '%ANK%'")]
            assert got == want and want != [0, 1]  # not what the scan would select
        finally:
            con.close()
