"""The Nsight Systems reader's fast paths against the SQL they replace (issue 40): each gives the
same answer, on random tables holding every kind of value SQLite can store."""

from __future__ import annotations

import os
import random
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from traceoverlap.readers.nsys import _memo, _process

TABLES = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"]


def _value(rng: random.Random, small: list[int]) -> Any:
    """An integer most of the time (a few recurring ones, negatives, 64-bit extremes), else NULL,
    a real, a text or a blob."""
    r = rng.random()
    if r < 0.6:
        return rng.choice(small)
    if r < 0.75:
        return rng.choice([-1, 0, 2**31, 2**32 + 3, -(2**31) - 1, 2**63 - 1, -(2**63)])
    return rng.choice([None, 1.5, "7", b"\x01", 3.0])


def _export(path: Path, seed: int, typed: bool) -> None:
    """Two GPU tables of random rows; ``typed``: the columns declared INTEGER (SQLite converts
    what it can on insert), else untyped (values stored as given)."""
    rng = random.Random(seed)
    decl = " INTEGER" if typed else ""
    con = sqlite3.connect(path)
    pids = [rng.randrange(1, 2**24) << 24 | rng.randrange(2**24) for _ in range(3)]
    for t in TABLES:
        con.execute(
            f"CREATE TABLE {t} (start{decl}, end{decl}, deviceId{decl}, other TEXT, "
            f"globalPid{decl})"
        )
        n = rng.choice([0, 1, 5, 200, 3000])
        rows = []
        for _ in range(n):
            s = _value(rng, [0, 5, 10, 100])
            e = _value(rng, [0, 5, 10, 100, 1000])
            rows.append((s, e, _value(rng, [0, 1, 7]), "x" * rng.randrange(20), _value(rng, pids)))
        con.executemany(f"INSERT INTO {t} VALUES (?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()


def _open(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    con.execute("BEGIN")
    return con


@pytest.mark.parametrize("typed", [True, False])
def test_groups_decoded_off_the_pages_are_sqlites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, typed: bool
) -> None:
    # the SQL (SELECT DISTINCT of pid / device with typeof per row) is the definition; the
    # decoded columns must give exactly its groups, in its order (device, then pid)
    for seed in range(8):
        path = tmp_path / f"e{seed}_{typed}.sqlite"
        _export(path, seed, typed)
        con = _open(path)
        try:
            want = _process._groups_sql(con, TABLES)
            with monkeypatch.context() as m:  # the pages answer, not the fallback
                m.setattr(_process, "_groups_sql", None)
                got = _process._groups(con, TABLES, path)
        finally:
            con.close()
            _memo.forget()
        assert got == want, seed


def test_groups_of_a_view_are_sqlites(tmp_path: Path) -> None:
    # a view has no pages to decode: SQLite answers, the same groups as of the table
    path = tmp_path / "v.sqlite"
    _export(path, 3, True)
    con = sqlite3.connect(path)
    con.execute(f"CREATE VIEW v AS SELECT * FROM {TABLES[0]}")
    con.commit()
    con.close()
    con = _open(path)
    try:
        assert _process._groups(con, ["v"], path) == _process._groups_sql(con, [TABLES[0]])
    finally:
        con.close()
        _memo.forget()


def test_groups_of_a_table_without_a_column_are_sqlites(tmp_path: Path) -> None:
    # SQLite reads a missing double-quoted column as its name, a text: no globalPid is pid 0
    # for every row; the decoder is not asked
    path = tmp_path / "m.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (start, end, deviceId)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", [(1, 2, 3), (1, 2, 4), (5, 1, 6)])
    con.commit()
    con.close()
    con = _open(path)
    try:
        assert _process._groups(con, ["t"], path) == _process._groups_sql(con, ["t"])
        assert _process._groups_sql(con, ["t"]) == [(0, 3), (0, 4)]  # row 3 ends before start
    finally:
        con.close()


@pytest.mark.parametrize("registered", [True, False])
def test_a_process_read_finds_every_processs_rank_text_inline_or_registered(
    tmp_path: Path, registered: bool
) -> None:
    # "rank N" marks either inline (NVTX text) or registered (StringIds, through textId): with
    # no StringIds value that may say "rank", the textId test is left out of the row selection;
    # each process read alone must still see the other processes' texts: pid 300 says rank 0,
    # 200 rank 1, 100 rank 2 (not the process order)
    sys.path.insert(0, str(Path(__file__).parent))
    from nsys_writer import MS, NVTX_MARK, NsysExport

    from traceoverlap.readers.nsys import read_nsys

    x = NsysExport(session_start_utc_ns=1_700_000_000 * 10**9)
    for pid, rank, dev in ((100, 2, 0), (200, 1, 1), (300, 0, 2)):
        x.process(pid)
        x.thread(pid, pid, "python3")
        x.nvtx(pid, 0, None, f"rank {rank}", registered=registered, event_type=NVTX_MARK)
        x.nvtx(pid, 0, 10 * MS, "ProfilerStep#0", registered=not registered)
        x.kernel(pid, dev, 7, 1 * MS, 7 * MS, "gemm_kernel", launch=100)
    path = x.write(tmp_path / "job.sqlite")
    _memo.forget()
    try:
        for pid, rank in ((100, 2), (200, 1), (300, 0)):
            (info,) = read_nsys(path, process=pid).traces
            assert (info.rank, info.rank_source) == (rank, "nvtx")
    finally:
        _memo.forget()


def test_a_split_plan_of_a_file_truncated_while_decoded_is_one_line(tmp_path: Path) -> None:
    # planning the split decodes the GPU tables' pages through a memory map: a file truncated
    # under it (the stand-in truncates it as the decode starts) is the reader's one line and
    # exit status 2, not "Bus error"
    import subprocess

    sys.path.insert(0, str(Path(__file__).parent))
    from nsys_writer import MS, NsysExport

    x = NsysExport()
    for pid, dev in ((100, 0), (200, 1)):
        x.process(pid)
        x.kernel(pid, dev, 7, 1 * MS, 7 * MS, "gemm_kernel", launch=100)
    path = x.write(tmp_path / "job.sqlite")
    code = f"""
import os
from dataclasses import replace
from pathlib import Path
import traceoverlap.readers.formats as formats
formats.FORMATS = tuple(replace(f, split_min_bytes=0) for f in formats.FORMATS)
from traceoverlap.readers.nsys import _process
class Truncating(_process.PageReader):
    def read(self, *args, **kwargs):
        os.truncate(self.path, 0)
        return super().read(*args, **kwargs)
    def read_blocks(self, *args, **kwargs):  # what the plan reads its columns with
        os.truncate(self.path, 0)
        return super().read_blocks(*args, **kwargs)
_process.PageReader = Truncating
from traceoverlap.readers.paths import map_units
map_units([Path({str(path)!r})])
"""
    root = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"traceoverlap: error: {path}: the file was truncated")


def test_the_rank_texts_read_leaves_the_process_reads_range_filter_alone(tmp_path: Path) -> None:
    # each process marks its rank and one step (ProfilerStep#0): every process read keeps its
    # step marker, so its ranges stay filtered as the whole read's are (ranges_filtered), and no
    # read notes that the file's filtered ranges lack a step marker (the rank marks alone lack
    # one: that note made every later process's read decode every NVTX text again)
    sys.path.insert(0, str(Path(__file__).parent))
    from nsys_writer import MS, NVTX_MARK, NsysExport

    from traceoverlap.core.options import AnalysisOptions
    from traceoverlap.rank.classify import Rules
    from traceoverlap.rank.unit import range_filter
    from traceoverlap.readers.nsys import read_nsys

    x = NsysExport(session_start_utc_ns=1_700_000_000 * 10**9)
    for pid, rank, dev in ((100, 1, 0), (200, 0, 1)):
        x.process(pid)
        x.thread(pid, pid, "python3")
        x.nvtx(pid, 0, None, f"rank {rank}", event_type=NVTX_MARK)
        x.nvtx(pid, 0, 10 * MS, "ProfilerStep#0")
        x.kernel(pid, dev, 7, 1 * MS, 7 * MS, "gemm_kernel", launch=100)
    path = x.write(tmp_path / "job.sqlite")
    keep = range_filter(AnalysisOptions(), Rules())
    _memo.forget()
    try:
        whole = {t.pid: t for t in read_nsys(path, keep_range=keep).traces}
        assert {p: (t.rank, t.ranges_filtered) for p, t in whole.items()} == {
            100: (1, True),
            200: (0, True),
        }
        for pid in (100, 200):
            (info,) = read_nsys(path, keep_range=keep, process=pid).traces
            assert (info.rank, info.rank_source, info.ranges_filtered) == (
                whole[pid].rank,
                "nvtx",
                True,
            )
            assert _memo.recall(path, ("no step marker", "NVTX_EVENTS")) is None
    finally:
        _memo.forget()


def test_a_process_read_with_mpi_ranks_reads_no_rank_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MPI_RANKS says the ranks (pid 100 -> 1, pid 200 -> 0, against the "rank N" marks, which
    # the environment outranks): a process read takes them as the whole read does, without
    # the scan of every process's NVTX texts
    sys.path.insert(0, str(Path(__file__).parent))
    from nsys_writer import MS, NVTX_MARK, NsysExport, global_tid

    from traceoverlap.readers.nsys import read_nsys

    x = NsysExport()
    for pid, dev in ((100, 0), (200, 1)):
        x.process(pid)
        x.thread(pid, pid, "python3")
        x.nvtx(pid, 0, None, f"rank {pid // 100 - 1}", event_type=NVTX_MARK)
        x.kernel(pid, dev, 7, 1 * MS, 7 * MS, "gemm_kernel", launch=100)
    path = x.write(tmp_path / "job.sqlite")
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE MPI_RANKS (globalTid INTEGER NOT NULL, rank INTEGER NOT NULL)")
    con.executemany(
        "INSERT INTO MPI_RANKS VALUES (?, ?)",
        [(global_tid(100, 100), 1), (global_tid(200, 200), 0)],
    )
    con.commit()
    con.close()
    _memo.forget()
    try:
        whole = {t.pid: (t.rank, t.rank_source) for t in read_nsys(path).traces}
        assert whole == {100: (1, "environment"), 200: (0, "environment")}

        def unread(self: Any) -> None:
            raise AssertionError("rank texts read")

        monkeypatch.setattr(_process.ProcessPart, "all_rank_texts", unread)
        for pid in (100, 200):
            (info,) = read_nsys(path, process=pid).traces
            assert (info.rank, info.rank_source) == whole[pid]
    finally:
        _memo.forget()
