"""The page decoder's C loops (readers/nsys/_npage.c) against the numpy decoder they speed up.

The property: for any SQLite table (every serial type, NULLs, negative and 8-byte integers,
reals, texts and blobs, invalid UTF-8, rows on overflow pages, records written before a column
was added, a rowid alias, a row selection, a text filter) and for any byte mutation of its leaf
pages, :class:`PageReader` gives the same columns with either decoder, or both refuse the pages
(:class:`Unsupported`: the table is then read through SQLite). And where the pages are decoded,
they read what ``SELECT`` reads.
"""

from __future__ import annotations

import itertools
import os
import random
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import examples
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from nsys_writer import page_read

from traceoverlap.rank.namefilter import NameTest
from traceoverlap.readers.nsys import _memo, _pages
from traceoverlap.readers.nsys._columns import Unsupported
from traceoverlap.readers.nsys._scan import _read_via_sql, _refuse

# random tables per property: 200 in CI, 20 in the fast loop (conftest.examples);
# TRACEOVERLAP_NPAGE_EXAMPLES overrides (.ci/kscan_asan.sh: its own count, each example writes
# and reads an SQLite file, slower than the Kineto scanner's documents)
EXAMPLES = int(os.environ.get("TRACEOVERLAP_NPAGE_EXAMPLES") or examples(200))
_names = itertools.count()  # a new file per example (hypothesis seeds `random`)

needs_c = pytest.mark.skipif(
    _pages._npage is None, reason="the C page decoder is not built (no C compiler at install)"
)


def test_decoder_is_built_where_ci_requires_it() -> None:
    # .ci/run sets TRACEOVERLAP_REQUIRE_NPAGE=1: a CI install that silently lost the extension
    # (no compiler, a build error swallowed by `optional`) fails here instead of running slower
    if os.environ.get("TRACEOVERLAP_REQUIRE_NPAGE") == "1":
        assert _pages._npage is not None
        assert _pages.DECODER == "c"


# ---------------------------------------------------------------------------------------------
# random tables

# integers at every serial type's edges (1, 2, 3, 4, 6, 8 bytes; 0 and 1 are types 8 and 9)
EDGES = [0, 1, -1, 127, 128, -128, -129, 32767, -32769, 2**23, -(2**23) - 1, 2**31, -(2**31) - 1]
EDGES += [2**47 - 1, 2**47, -(2**47) - 1, 2**63 - 1, -(2**63)]

ints = st.one_of(st.sampled_from(EDGES), st.integers(-(2**63), 2**63 - 1))
texts = st.text(st.sampled_from("ab x:#é→\x00"), max_size=40)
# ("sql fragment", parameter): a value as the INSERT writes it
any_value = st.one_of(
    ints.map(lambda v: ("?", v)),
    st.just(("?", None)),
    st.floats(allow_nan=False).map(lambda v: ("?", v)),
    texts.map(lambda v: ("?", v)),
    st.binary(max_size=20).map(lambda v: ("?", v)),
    # a text that is not UTF-8
    st.binary(min_size=1, max_size=8).map(lambda v: ("CAST(? AS TEXT)", v)),
)
int_value = st.one_of(ints.map(lambda v: ("?", v)), st.just(("?", None)))
text_value = st.one_of(
    texts.map(lambda v: ("?", v)),
    st.just(("?", None)),
    st.binary(min_size=1, max_size=8).map(lambda v: ("CAST(? AS TEXT)", v)),
    # now and then a row too large for a small page: it goes on to overflow pages
    st.integers(600, 3000).map(lambda k: ("?", "o" * k)),
)
DEFAULTS = ["NULL", "7", "-3", "0x10", "'dflt'", "1.5", "TRUE"]


@st.composite
def tables(draw: Any) -> dict[str, Any]:
    kinds = draw(st.lists(st.sampled_from(["int", "text", "any"]), min_size=1, max_size=6))
    n = draw(st.integers(0, 120))
    rows = [
        [draw({"int": int_value, "text": text_value, "any": any_value}[k]) for k in kinds]
        for _ in range(n)
    ]
    late = draw(st.none() | st.sampled_from(DEFAULTS))
    more = (
        [[draw(int_value), draw(text_value)] for _ in range(draw(st.integers(0, 20)))]
        if late is not None
        else []
    )
    return {
        "page_size": draw(st.sampled_from([512, 1024, 4096])),
        "alias": draw(st.booleans()),
        "kinds": kinds,
        "rows": rows,
        "late": late,
        "more": more,
        "delete": draw(st.booleans()),
        "where": draw(st.sampled_from([None, ("rowid % 3 = 1", ()), ("c0 IS NULL", ())])),
        "keep": draw(st.sampled_from([None, "odd", "names"])),
        # new texts at once that go through the prefilter (NameTest.candidates) on the C path
        "prefilter": draw(st.sampled_from([1, 512])),
        "mutations": draw(st.lists(st.tuples(st.integers(0, 2**32), st.integers(0, 255)))),
        "seed": draw(st.integers(0, 2**16)),
    }


def _write(path: Path, spec: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The table ``t`` of ``spec``; its integer and text columns to read."""
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {spec['page_size']}")
    decl = {"int": "INTEGER", "text": "TEXT", "any": ""}
    cols = [f"c{j} {decl[k]}" for j, k in enumerate(spec["kinds"])]
    if spec["alias"]:
        cols.insert(0, "id INTEGER PRIMARY KEY")
    con.execute(f"CREATE TABLE t ({', '.join(cols)})")
    names = [f"c{j}" for j in range(len(spec["kinds"]))]

    def insert(names: list[str], row: list[tuple[str, Any]]) -> None:
        con.execute(
            f"INSERT INTO t ({', '.join(names)}) VALUES ({', '.join(s for s, _ in row)})",
            [v for _, v in row],
        )

    for row in spec["rows"]:
        insert(names, row)
    int_cols = [c for c, k in zip(names, spec["kinds"], strict=True) if k != "text"]
    text_cols = [c for c, k in zip(names, spec["kinds"], strict=True) if k == "text"]
    if spec["late"] is not None:
        # rows written before these columns existed: they read as their DEFAULT
        con.execute(f"ALTER TABLE t ADD COLUMN late_i INTEGER DEFAULT {spec['late']}")
        con.execute(f"ALTER TABLE t ADD COLUMN late_t TEXT DEFAULT {spec['late']}")
        for row in spec["more"]:
            insert(["late_i", "late_t"], row)
        int_cols.append("late_i")
        text_cols.append("late_t")
    if spec["delete"]:
        con.execute("DELETE FROM t WHERE rowid % 5 = 2")  # free space; rowids no longer 1..n
    con.commit()
    con.close()
    if spec["alias"]:
        int_cols.insert(0, "id")
    return int_cols, text_cols


def _mutate(path: Path, spec: dict[str, Any]) -> None:
    """Overwrite bytes of the table's leaf pages (never page 1: SQLite's schema)."""
    if not spec["mutations"]:
        return
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        leaves, _ = _pages.PageReader(con, path).table_leaves("t")
    finally:
        con.close()
    size = path.stat().st_size
    page = spec["page_size"]
    data = bytearray(path.read_bytes())
    leaves = leaves[leaves > 1]
    if leaves.size == 0:
        return
    for where, byte in spec["mutations"]:
        p = int(leaves[where % leaves.size])
        at = (p - 1) * page + (where >> 8) % page
        if at < size:
            data[at] = byte
    path.write_bytes(bytes(data))


def _keep(name: str | None) -> Any:
    if name == "odd":
        return lambda t: len(t) % 2 == 1
    if name == "names":
        return NameTest(["^ab", "x:", "é"])  # with a substring prefilter (candidates)
    return None


def _read(
    path: Path, decoder: str, spec: dict[str, Any], int_cols: list[str], text_cols: list[str]
) -> Any:
    """What PageReader reads with ``decoder``: the columns, "unsupported", or "sqlite" (SQLite
    itself refused the file: a mutation it notices)."""
    _memo.forget()
    old = _pages.DECODER, _pages._PREFILTER_TEXTS
    _pages.DECODER = decoder
    _pages._PREFILTER_TEXTS = spec.get("prefilter", 512)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        con.execute("BEGIN")
        info = con.execute("PRAGMA table_xinfo(t)").fetchall()
        reader = _pages.PageReader(con, path)
        assert (reader.c is not None) == (decoder == "c")
        reader.text_keep = _keep(spec["keep"])
        return reader.read("t", info, list(int_cols), list(text_cols), spec["where"])
    except Unsupported:
        return "unsupported"
    except sqlite3.DatabaseError:
        return "sqlite"
    finally:
        con.close()
        _pages.DECODER, _pages._PREFILTER_TEXTS = old


def _state(cols: Any) -> Any:
    if isinstance(cols, str):
        return cols
    return (
        cols.n,
        {c: v.tolist() for c, v in cols.ints.items()},
        {c: v.tolist() for c, v in cols.kinds.items()},
        {c: v.tolist() for c, v in cols.texts.items()},
        cols.bad_utf8,
    )


def _via_sql(path: Path, spec: dict[str, Any], int_cols: list[str], text_cols: list[str]) -> Any:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        info = con.execute("PRAGMA table_xinfo(t)").fetchall()
        out = _read_via_sql(con, "t", info, int_cols, text_cols, spec["where"])
    finally:
        con.close()
    keep = _keep(spec["keep"])
    if keep is not None:
        for arr in out.texts.values():
            _refuse(arr, keep)
    for c, k in out.kinds.items():  # the value of what is not an integer is not defined
        out.ints[c][k != 0] = 0
    return out


@needs_c
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(spec=tables())
def test_c_and_numpy_decoders_agree_on_random_tables(tmp_path: Path, spec: dict[str, Any]) -> None:
    path = tmp_path / f"t{next(_names)}.sqlite"
    int_cols, text_cols = _write(path, spec)
    c = _read(path, "c", spec, int_cols, text_cols)
    py = _read(path, "numpy", spec, int_cols, text_cols)
    assert _state(c) == _state(py)
    event(c if isinstance(c, str) else "read")
    if not isinstance(c, str):
        # and both read what SELECT reads
        for col, kinds in c.kinds.items():
            c.ints[col][kinds != 0] = 0
        sql = _via_sql(path, spec, int_cols, text_cols)
        assert _state(c)[:4] == _state(sql)[:4]
        assert c.bad_utf8 == sql.bad_utf8
    path.unlink()


@needs_c
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(spec=tables())
# a damaged b-tree where SQLite's selection gives a rowid twice: both decoders refuse it (the C
# decoder raised ValueError on the repeated position)
@example(
    spec={
        "page_size": 512,
        "alias": True,
        "kinds": ["int"],
        "rows": [[("?", 0)], [("?", 0)]],
        "late": "NULL",
        "more": [[("?", 0), ("?", "")]] * 3
        + [[("?", 0), ("?", None)]]
        + [[("?", 0), ("?", "")]] * 3
        + [[("?", None), ("?", "")], [("?", 0), ("?", "")], [("?", 0), ("?", ":" * 26)]],
        "delete": False,
        "where": ("rowid % 3 = 1", ()),
        "keep": None,
        "prefilter": 1,
        "mutations": [(2816, 149)],
        "seed": 0,
    }
)
def test_c_and_numpy_decoders_agree_on_mutated_pages(tmp_path: Path, spec: dict[str, Any]) -> None:
    # damaged pages: both decoders refuse them, or both read the same values (never a crash)
    path = tmp_path / f"m{next(_names)}.sqlite"
    int_cols, text_cols = _write(path, spec)
    _mutate(path, spec)
    c = _read(path, "c", spec, int_cols, text_cols)
    assert _state(c) == _state(_read(path, "numpy", spec, int_cols, text_cols))
    event(c if isinstance(c, str) else "read")
    path.unlink()


@needs_c
def test_c_and_numpy_decoders_agree_on_byte_flips_of_a_real_shape(tmp_path: Path) -> None:
    # many small damages of one table with every kind of value: a byte at a time
    spec = {
        "page_size": 1024,
        "alias": True,
        "kinds": ["int", "any", "text"],
        "rows": [
            [("?", EDGES[i % len(EDGES)]), ("?", [None, 2.5, "s", b"b", 1][i % 5]), ("?", f"n{i}")]
            for i in range(300)
        ],
        "late": None,
        "more": [],
        "delete": False,
        "where": None,
        "keep": None,
        "mutations": [],
        "seed": 0,
    }
    base = tmp_path / "base.sqlite"
    int_cols, text_cols = _write(base, spec)
    rng = random.Random(40)
    outcomes = set()
    for k in range(2 * EXAMPLES):
        path = tmp_path / f"f{k}.sqlite"
        path.write_bytes(base.read_bytes())
        _mutate(path, {**spec, "mutations": [(rng.getrandbits(32), rng.getrandbits(8))]})
        c = _read(path, "c", spec, int_cols, text_cols)
        assert _state(c) == _state(_read(path, "numpy", spec, int_cols, text_cols)), k
        outcomes.add(c if isinstance(c, str) else "read")
        path.unlink()
    assert "read" in outcomes  # not every damage is refused: values change, and agree


@needs_c
def test_texts_decodes_each_distinct_text_once() -> None:
    from traceoverlap.readers.nsys import _npage

    mm = np.frombuffer(b"abcab\xff", dtype=np.uint8)
    # rows: "ab", NULL, "ab" (elsewhere in the file), "", "b\xff" (not UTF-8), "ab"
    off = np.array([0, 0, 3, 2, 4, 0], dtype=np.int64)
    ln = np.array([2, 0, 2, 0, 2, 2], dtype=np.int64)
    null = np.array([0, 1, 0, 0, 0, 0], dtype=np.uint8)
    codes, uniques, bad = _npage.texts(mm, off, ln, null)
    assert uniques == ["ab", "", "b\ufffd"]
    assert np.frombuffer(codes, dtype=np.int32).tolist() == [0, -1, 0, 1, 2, 0]
    assert bad == 1  # rows, not distinct texts: one row holds the invalid one
    with pytest.raises(ValueError):
        _npage.texts(mm, np.array([5], dtype=np.int64), np.array([4], dtype=np.int64), null[:1])


@needs_c
@pytest.mark.parametrize(
    ("memo_texts", "prefilter", "distinct"),
    [(1 << 14, 512, 40), (1 << 14, 2, 40), (7, 512, 40), (1 << 14, 512, 3000)],
)
def test_text_filter_verdicts_are_kept_across_blocks(
    tmp_path: Path, monkeypatch: Any, memo_texts: int, prefilter: int, distinct: int
) -> None:
    # 3000 rows cycling through 40 distinct texts (NULL every 11th row), read in blocks of 1 KB
    # (about 40 blocks): each block's distinct texts are asked of the filter only when no
    # earlier block asked (the verdicts kept: at most `memo_texts` of them), through the
    # substring prefilter from `prefilter` texts; the column is SQLite's with the refused
    # texts replaced, as without the memo. With 3000 distinct texts (every block's new) the
    # scan stops looking them up after its second block, with the same column.
    names = [f"{'ab' if i % 3 == 0 else 'zz'}_{i:02d}_" + "q" * (i % 17) for i in range(distinct)]
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER, s TEXT)")
    rows = [(i, None if i % 11 == 0 else names[i % distinct]) for i in range(3000)]
    con.executemany("INSERT INTO t VALUES (?, ?)", rows)
    con.commit()
    con.close()
    asked: list[str] = []
    base = NameTest(["^ab"])  # with candidates(): the prefilter path when enough texts
    keep = NameTest(["^ab"])

    def counted(name: str) -> bool:
        asked.append(name)
        return base.test(name)

    keep.test = counted  # type: ignore[method-assign]
    monkeypatch.setattr(_pages, "_TEXT_BLOCK_BYTES", 1 << 10)
    monkeypatch.setattr(_pages, "_KEPT_MEMO_TEXTS", memo_texts)
    monkeypatch.setattr(_pages, "_PREFILTER_TEXTS", prefilter)
    reader: Any
    got: Any
    reader, got = page_read(path, keep)
    want = np.array([s for _, s in rows], dtype=object)
    _refuse(want, base.test)
    assert got.texts["s"].tolist() == want.tolist()
    assert got.ints["a"].tolist() == list(range(3000))
    # 7 verdicts kept of 40 texts: 33 new in the second block (> 3/4), lookups stopped too
    assert reader.kept_memo_used is (distinct == 40 and memo_texts >= 40)
    if distinct > 40:
        assert len(asked) == len(set(asked))  # every text new: asked once anyway
    elif memo_texts >= 40:
        # every text asked at most once (the prefilter asks only those that can start "ab")
        assert len(asked) == len(set(asked)) and set(asked) <= set(names)
        if prefilter > 40:
            # one by one: every distinct text, once, but for those the C decoder refuses
            # unasked (ASCII without the test's needle "ab": NameTest.needles)
            assert set(asked) == {t for t in names if "ab" in t}
    else:
        assert len(asked) > len(set(asked))  # past the bound: asked again in later blocks
