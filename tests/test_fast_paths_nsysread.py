"""The Nsight Systems reader's fast paths against the code they replace (issue 40).

- a process's rows selected from the pids of its table's column, decoded once per file
  (``PageReader.pids``, kept in ``._memo``), against SQLite's own selection.
"""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from traceoverlap.readers.nsys import _memo, _pages
from traceoverlap.readers.nsys._columns import pid_sql
from traceoverlap.readers.nsys._scan import read_columns

needs_c = pytest.mark.skipif(_pages._npage is None, reason="the C page decoder is not built")
_names = itertools.count()

# short byte strings, some not UTF-8, many repeated
_text = st.binary(max_size=5).map(lambda b: bytes(x % 4 + 0x61 if x < 0xF0 else x for x in b))


def _keep(text: str) -> bool:
    return len(text) % 2 == 1


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
