"""Two shapes of export the page decoder and the reader once read wrong (issue 41): records
written before ``ALTER TABLE ... ADD COLUMN ... DEFAULT`` (shorter than the table: SQLite reads
the missing column as its DEFAULT, the page decoder read NULL), and a table exposed as a VIEW
(skipped as absent: 0 ms of compute, exit 0)."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nsys_writer import NsysExport  # noqa: E402

from traceoverlap.readers.nsys import _scan as scan  # noqa: E402
from traceoverlap.readers.nsys import nsys_processes, read_nsys  # noqa: E402
from traceoverlap.readers.nsys._columns import INT, NULL, OTHER, Unsupported  # noqa: E402
from traceoverlap.readers.nsys._pages import column_default  # noqa: E402
from traceoverlap.readers.nsys._scan import _read_via_sql, read_columns  # noqa: E402

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
COLS = ["start_ns", "end_ns", "pid", "device", "name"]


def _columns_both_ways(path: Path, table: str, ints: list[str], texts: list[str]):  # type: ignore[no-untyped-def]
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    con.execute("BEGIN")
    try:
        fast = read_columns(con, path, table, ints, texts)
        info = con.execute(f'PRAGMA table_xinfo("{table}")').fetchall()
        slow = _read_via_sql(con, table, info, ints, texts)
    finally:
        con.close()
    return fast, slow


# -- 3. short records read as the column's DEFAULT ---------------------------------------------


@pytest.mark.parametrize(
    ("sql", "value"),
    [
        (None, None),
        ("NULL", None),
        ("1", 1),
        ("-5", -5),
        ("(7)", 7),
        ("0x10", 16),
        ("0xffffffffffffffff", -1),  # SQLite: a 64-bit two's complement pattern
        ("TRUE", 1),
        ("1.5", 1.5),
        ("'abc'", "abc"),
        ("'it''s'", "it's"),
    ],
)
def test_column_default_literals(sql: str | None, value: object) -> None:
    assert column_default(sql) == value
    if sql is not None:  # what SQLite itself makes of it
        assert sqlite3.connect(":memory:").execute(f"SELECT {sql}").fetchone()[0] == value


@pytest.mark.parametrize("sql", ["CURRENT_TIMESTAMP", "x'00'", "1 + 1", "'a' || 'b'"])
def test_column_default_that_is_not_a_literal_is_left_to_sqlite(sql: str) -> None:
    with pytest.raises(Unsupported):
        column_default(sql)


def test_short_records_read_their_default_on_both_paths(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(300)])
    con.execute("ALTER TABLE t ADD COLUMN dev INTEGER NOT NULL DEFAULT 1")
    con.execute("ALTER TABLE t ADD COLUMN neg INTEGER DEFAULT -3")
    con.execute("ALTER TABLE t ADD COLUMN nul INTEGER")
    con.execute("ALTER TABLE t ADD COLUMN real INTEGER DEFAULT 2.5")
    con.execute("ALTER TABLE t ADD COLUMN label TEXT DEFAULT 'old'")
    con.executemany(
        "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)", [(i, 0, 4, 5, 6, "new") for i in range(200)]
    )
    con.commit()
    con.close()
    ints, texts = ["a", "dev", "neg", "nul", "real"], ["label"]
    fast, slow = _columns_both_ways(path, "t", ints, texts)
    assert fast.via == "pages" and slow.via == "sql"
    # by hand: the 300 rows written first lack the added columns and read as their DEFAULT
    # (dev 1, neg -3, nul NULL, real 2.5: not an integer, label 'old'); the 200 after hold them
    assert fast.ints["dev"].tolist() == [1] * 300 + [0] * 200
    assert fast.ints["neg"].tolist() == [-3] * 300 + [4] * 200
    assert fast.kinds["nul"].tolist() == [NULL] * 300 + [INT] * 200
    assert fast.kinds["real"].tolist() == [OTHER] * 300 + [INT] * 200
    assert fast.texts["label"].tolist() == ["old"] * 300 + ["new"] * 200
    for c in ints:
        np.testing.assert_array_equal(fast.kinds[c], slow.kinds[c], err_msg=c)
        ok = slow.kinds[c] == INT
        np.testing.assert_array_equal(fast.ints[c][ok], slow.ints[c][ok], err_msg=c)
    assert fast.texts["label"].tolist() == slow.texts["label"].tolist()


def _kernel_table_without_device(path: Path) -> None:
    """Rebuild the kernel table as an export upgraded in place would have it: the rows of device
    1 written before ``deviceId`` existed (``ADD COLUMN ... DEFAULT 1``), those of device 0
    after, with the column."""
    con = sqlite3.connect(path)
    cols = [str(r[1]) for r in con.execute(f"PRAGMA table_info({KERNEL})")]
    rest = [c for c in cols if c != "deviceId"]
    decl = ", ".join(f"{c} INTEGER" for c in rest)
    names = ", ".join(rest)
    con.execute(f"CREATE TABLE k2 ({decl})")
    con.execute(f"INSERT INTO k2 SELECT {names} FROM {KERNEL} WHERE deviceId = 1 ORDER BY rowid")
    con.execute("ALTER TABLE k2 ADD COLUMN deviceId INTEGER NOT NULL DEFAULT 1")
    con.execute(
        f"INSERT INTO k2 ({names}, deviceId) SELECT {names}, deviceId FROM {KERNEL} "
        "WHERE deviceId = 0 ORDER BY rowid"
    )
    con.execute(f"DROP TABLE {KERNEL}")
    con.execute(f"ALTER TABLE k2 RENAME TO {KERNEL}")
    con.commit()
    con.close()


def _two_processes(path: Path) -> Path:
    x = NsysExport()
    for i in range(3):  # process 5 on GPU 1: 3 kernels of 100 ns
        x.kernel(5, 1, 7, 1000 + 200 * i, 1100 + 200 * i, "gemm", launch=900 + 200 * i)
    for i in range(2):  # process 6 on GPU 0: 2 kernels of 50 ns
        x.kernel(6, 0, 7, 1000 + 200 * i, 1050 + 200 * i, "relu", launch=900 + 200 * i)
    return x.write(path)


def test_export_with_short_kernel_records_reads_alike_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _two_processes(tmp_path / "upgraded.sqlite")
    _kernel_table_without_device(path)
    fast = read_nsys(path)

    class NoPages:
        def __init__(self, *a: object) -> None:
            raise Unsupported("test: through SQLite")

    monkeypatch.setattr(scan, "PageReader", NoPages)
    slow = read_nsys(path)
    # by hand: two ranks, (pid 5, GPU 1) with 3 gemm kernels and (pid 6, GPU 0) with 2 relu;
    # no kernel on device -1 (the page decoder read the missing deviceId as NULL)
    for tl in (fast, slow):
        k = tl.events[tl.events["category"] == "kernel"]
        assert (
            sorted(zip(k["pid"].tolist(), k["device"].tolist(), k["name"].tolist()))
            == [(5, 1, "gemm")] * 3 + [(6, 0, "relu")] * 2
        )
        assert sorted((t.pid, t.device) for t in tl.traces) == [(5, 1), (6, 0)]
    kf = fast.events[fast.events["category"] == "kernel"].reset_index(drop=True)
    ks = slow.events[slow.events["category"] == "kernel"].reset_index(drop=True)
    assert kf[COLS].equals(ks[COLS])


# -- 4. a table that is a view --------------------------------------------------------------------


def test_kernel_table_exposed_as_a_view_is_read(tmp_path: Path) -> None:
    plain = _two_processes(tmp_path / "plain.sqlite")
    viewed = _two_processes(tmp_path / "viewed.sqlite")
    con = sqlite3.connect(viewed)
    con.execute(f"ALTER TABLE {KERNEL} RENAME TO kernels_raw")
    con.execute(f"CREATE VIEW {KERNEL} AS SELECT * FROM kernels_raw")
    con.commit()
    con.close()
    a, b = read_nsys(plain), read_nsys(viewed)
    ka = a.events[a.events["category"] == "kernel"].reset_index(drop=True)
    kb = b.events[b.events["category"] == "kernel"].reset_index(drop=True)
    # by hand: 3 + 2 kernels, 3 x 100 + 2 x 50 = 400 ns of kernel time, as from the table
    assert len(kb) == 5 and int((kb["end_ns"] - kb["start_ns"]).sum()) == 400
    assert ka[COLS].equals(kb[COLS])
    assert nsys_processes(viewed) == nsys_processes(plain) == [5, 6]
