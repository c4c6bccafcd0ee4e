"""Nsight Systems exports that are damaged, odd or still being written (issue 11): each read either
gives the right numbers with a note saying what was dropped or degraded, or one clear
TraceFormatError naming the file; never a TypeError, never a silently wrong number."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import WORKLOAD_FIXTURES

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nsys_writer import MS, NVTX_MARK, NsysExport, global_pid, global_tid  # noqa: E402

from traceoverlap import analyze  # noqa: E402
from traceoverlap.core.errors import TraceFormatError
from traceoverlap.core.model import make_events
from traceoverlap.readers.nsys import read_nsys  # noqa: E402

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


def _one_step(tmp_path: Path, name: str = "run.sqlite", **kw: object) -> Path:
    # ProfilerStep#1 [0, 1 ms) launches two kernels: [2, 5) and [6, 10) ms. Step = [2, 10) ms,
    # compute 7 ms, idle 1 ms.
    x = NsysExport(**kw)  # type: ignore[arg-type]
    x.process(7, "python3")
    x.thread(7, 7, "python3")
    x.nvtx(7, 0, MS, "ProfilerStep#1")
    x.kernel(7, 0, 7, 2 * MS, 5 * MS, "gemm", launch=100_000)
    x.kernel(7, 0, 7, 6 * MS, 10 * MS, "gemm", launch=200_000)
    return x.write(tmp_path / name)


def _step(path: Path):  # type: ignore[no-untyped-def]
    (row,) = analyze(path).steps.itertuples()
    return row


def _notes(path: Path) -> list[str]:
    return [n for t in read_nsys(path).traces for n in t.notes]


# ---------------------------------------------------------------------------------------------
# opened properly: read-only with SQLite's locks, WAL honoured (no immutable=1)


def test_rows_committed_to_a_wal_are_read(tmp_path: Path) -> None:
    # A third kernel [10, 12) ms committed while the writer keeps the database open in WAL mode:
    # the row is in the -wal file only. It belongs to the step: step [2, 12) ms, compute 9 ms.
    path = _one_step(tmp_path)
    writer = sqlite3.connect(path)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute(
        f"INSERT INTO {KERNEL} SELECT 10000000, 12000000, deviceId, contextId, streamId, 103, "
        f"globalPid, demangledName, shortName, mangledName, gridX, gridY, gridZ, blockX, blockY, "
        f"blockZ FROM {KERNEL} LIMIT 1"
    )
    writer.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT 300000, 302000, eventClass, globalTid, "
        "103, nameId, returnValue FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1"
    )
    writer.commit()
    try:
        assert Path(f"{path}-wal").stat().st_size > 0
        r = _step(path)
        assert (r.step_ns, r.compute_ns) == (10 * MS, 9 * MS)
    finally:
        writer.close()


def test_a_file_being_written_is_a_clear_error_not_a_half_read(tmp_path: Path) -> None:
    # A writer in the middle of a big transaction with a tiny cache spills pages into the file
    # (holding SQLite's exclusive lock): the file is half-written. The reader must not read it.
    path = _one_step(tmp_path)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA cache_size = 1")
    writer.execute("BEGIN")
    writer.executemany(
        f"INSERT INTO {KERNEL} (start, end, deviceId, contextId, streamId, correlationId, "
        "globalPid, demangledName, shortName) VALUES (?, ?, 0, 1, 7, -1, ?, 1, 1)",
        [(20 * MS + i, 20 * MS + i + 1, global_pid(7)) for i in range(20000)],
    )
    try:
        with pytest.raises(TraceFormatError) as err:
            read_nsys(path)
        msg = str(err.value)
        assert str(path) in msg and "locked" in msg and "being written" in msg
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert _step(path).step_ns == 8 * MS  # and once the writer is gone, the committed file reads


def test_a_writer_that_died_mid_write_is_a_clear_error(tmp_path: Path) -> None:
    # A writer process exits in the middle of a transaction that spilled pages into the file:
    # the file is half-written and a hot -journal beside it holds the original pages. A
    # read-only reader cannot roll it back: one clear error, not the half-written rows.
    path = _one_step(tmp_path)
    code = (
        "import os, sqlite3, sys\n"
        "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "con.execute('PRAGMA cache_size = 1')\n"
        "con.execute('BEGIN')\n"
        f"con.executemany('INSERT INTO {KERNEL} (start, end, deviceId, contextId, streamId, "
        "correlationId, globalPid, demangledName, shortName) VALUES (?, ?, 0, 1, 7, -1, 1, 1, 1)',"
        " [(i, i + 1) for i in range(20000)])\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    assert Path(f"{path}-journal").stat().st_size > 0
    with pytest.raises(TraceFormatError) as err:
        read_nsys(path)
    msg = str(err.value)
    assert str(path) in msg and "unfinished write" in msg and "-journal" in msg


# ---------------------------------------------------------------------------------------------
# start / end that are not integers: dropped and counted, never CAST to 0


@pytest.mark.parametrize("bad", ["'12abc'", "X'0011'", "1.5", "NULL"])
def test_kernels_whose_start_is_not_an_integer_are_dropped_with_a_note(
    tmp_path: Path, bad: str
) -> None:
    # A third kernel of the step with a text / blob / real / NULL start: CAST would make it start
    # at 0 and span the whole capture. It is dropped; the step keeps its 8 ms window.
    path = _one_step(tmp_path)
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE k2 AS SELECT * FROM {KERNEL}")  # same columns, no NOT NULL
    con.execute(f"DROP TABLE {KERNEL}")
    con.execute(f"ALTER TABLE k2 RENAME TO {KERNEL}")
    con.execute(
        f"INSERT INTO {KERNEL} SELECT {bad}, 9000000, deviceId, contextId, streamId, "
        f"correlationId, globalPid, demangledName, shortName, mangledName, gridX, gridY, gridZ, "
        f"blockX, blockY, blockZ FROM {KERNEL} LIMIT 1"
    )
    con.commit()
    con.close()
    r = _step(path)
    assert (r.step_ns, r.compute_ns) == (8 * MS, 7 * MS)
    assert any(
        "Dropped 1 GPU activities of CUPTI_ACTIVITY_KIND_KERNEL whose start or end is not an "
        "integer" in n
        for n in _notes(path)
    )


def test_host_rows_whose_times_are_not_integers_are_dropped_with_a_note(tmp_path: Path) -> None:
    # A launch with a text end and an NVTX range with a blob start: both dropped and counted.
    path = _one_step(tmp_path)
    con = sqlite3.connect(path)
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (5, 'late', 0, ?, 999, 1, 0)",
        (global_tid(7, 7),),
    )
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, text) "
        "VALUES (X'01', 50, 59, ?, 'odd')",
        (global_tid(7, 7),),
    )
    con.commit()
    con.close()
    notes = _notes(path)
    assert any("Dropped 1 CUDA API calls of CUPTI_ACTIVITY_KIND_RUNTIME" in n for n in notes)
    assert any("Dropped 1 NVTX ranges of NVTX_EVENTS whose start or end" in n for n in notes)
    assert "odd" not in set(read_nsys(path).events["name"].astype(str))
    assert _step(path).step_ns == 8 * MS


# ---------------------------------------------------------------------------------------------
# metadata with text / NULL where an integer is expected: never a TypeError


METADATA_DAMAGE = {
    "session start text": (
        "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 'soon'",
        "utcEpochNs is not an integer",
    ),
    "system clock text": (
        "UPDATE TARGET_INFO_SESSION_START_TIME SET systemClockNs = 'x'",
        "systemClockNs is not an integer",
    ),
    "schema version NULL": ("UPDATE META_DATA_EXPORT SET value = NULL", None),
    "process pid text": ("UPDATE PROCESSES SET pid = 'seven'", None),
    "thread name id NULL": (
        "CREATE TABLE tn AS SELECT * FROM ThreadNames; DROP TABLE ThreadNames; "
        "ALTER TABLE tn RENAME TO ThreadNames; UPDATE ThreadNames SET nameId = NULL",
        "threads are shown unnamed",
    ),
    "thread id text": ("UPDATE ThreadNames SET globalTid = 'main'", "threads are shown unnamed"),
    "gpu id text": ("INSERT INTO TARGET_INFO_GPU VALUES ('zero', 'GPU', '', 1)", None),
    "cuda device NULLs": (
        "CREATE TABLE d AS SELECT * FROM TARGET_INFO_CUDA_DEVICE; DROP TABLE "
        "TARGET_INFO_CUDA_DEVICE; ALTER TABLE d RENAME TO TARGET_INFO_CUDA_DEVICE; "
        "INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES ('a', NULL, 7, 'u', 1)",
        None,
    ),
    "event type enum text": (
        "CREATE TABLE ENUM_NSYS_EVENT_TYPE (id, name); "
        "INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES ('59', 'NvtxPushPopRange'), "
        "(NULL, 'NvtxStartEndRange'), (X'00', 'NvtxMark')",
        None,
    ),
    "event class enum text": (
        "CREATE TABLE ENUM_NSYS_EVENT_CLASS (id, name); "
        "INSERT INTO ENUM_NSYS_EVENT_CLASS VALUES ('one', 'TRACE_PROCESS_EVENT_CUDA_DRIVER')",
        None,
    ),
    "memcpy enum text": (
        "CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id, label); "
        "INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES ('1', 'HtoD'), (2, NULL)",
        None,
    ),
    "mpi ranks text": (
        "CREATE TABLE MPI_RANKS (globalTid, rank); INSERT INTO MPI_RANKS VALUES ('t', 'zero')",
        None,
    ),
    "environment pid text": (
        "CREATE TABLE PROCESS_ENV (pid, name, value); "
        "INSERT INTO PROCESS_ENV VALUES ('x', 'RANK', '3'), (7, 'RANK', NULL)",
        None,
    ),
    "string id text": (
        "CREATE TABLE s2 (id, value); INSERT INTO s2 SELECT id, value FROM StringIds; "
        "INSERT INTO s2 VALUES ('nine', 'stray'), (NULL, 'none'); DROP TABLE StringIds; "
        "ALTER TABLE s2 RENAME TO StringIds",
        "rows have no integer id and were ignored",
    ),
}


@pytest.mark.parametrize("case", sorted(METADATA_DAMAGE))
def test_metadata_of_the_wrong_type_degrades_with_a_note(tmp_path: Path, case: str) -> None:
    # The step's numbers never depend on the damaged metadata (a relative clock at worst).
    sql, note = METADATA_DAMAGE[case]
    path = _one_step(tmp_path, session_start_utc_ns=1_700_000_000_000_000_000)
    x = NsysExport()
    con = sqlite3.connect(path)
    con.executescript(sql)
    con.commit()
    con.close()
    del x
    tl = read_nsys(path)
    r = _step(path)
    assert (r.step_ns, r.compute_ns) == (8 * MS, 7 * MS)
    if note is not None:
        assert any(note in n for t in tl.traces for n in t.notes), tl.traces[0].notes


# ---------------------------------------------------------------------------------------------
# optional nsys data: degrade with a note, never "damaged"


def test_nvtx_without_event_type_is_read_with_a_note(tmp_path: Path) -> None:
    # NVTX_EVENTS without eventType: rows with an end are ranges (the step), a row without one a
    # mark ("rank 4": the rank still comes from it).
    path = tmp_path / "noetype.sqlite"
    x = NsysExport()
    x.kernel(7, 0, 7, 2 * MS, 5 * MS, "gemm", launch=100_000)
    x.write(path, omit=["NVTX_EVENTS"])
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, text TEXT, globalTid INTEGER)"
    )
    con.executemany(
        "INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?)",
        [(0, MS, "ProfilerStep#1", global_tid(7, 7)), (10, None, "rank 4", global_tid(7, 7))],
    )
    con.commit()
    con.close()
    tl = read_nsys(path)
    assert [(t.rank, t.rank_source) for t in tl.traces] == [(4, "nvtx")]
    assert any("has no eventType column" in n for n in tl.traces[0].notes)
    assert analyze(path).steps["step"].tolist() == ["1"]


def test_strings_that_are_not_utf8_are_shown_replaced_with_a_note(tmp_path: Path) -> None:
    # The kernel's StringIds name and an inline NVTX text hold invalid UTF-8 bytes.
    path = _one_step(tmp_path)
    con = sqlite3.connect(path)
    con.execute("UPDATE StringIds SET value = CAST(X'67656DFF6D' AS TEXT) WHERE value = 'gemm'")
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, text) "
        "VALUES (100, 200, 59, ?, CAST(X'6F70FE' AS TEXT))",
        (global_tid(7, 7),),
    )
    con.commit()
    con.close()
    tl = read_nsys(path)
    names = set(tl.events["name"].astype(str))
    assert "gem\ufffdm" in names and "op\ufffd" in names
    notes = tl.traces[0].notes
    assert any("1 StringIds strings are not valid UTF-8" in n for n in notes)
    assert any("1 NVTX texts are not valid UTF-8" in n for n in notes)
    assert _step(path).compute_ns == 7 * MS


def test_rank_marks_still_name_ranks(tmp_path: Path) -> None:
    x = NsysExport()
    x.nvtx(7, 10, None, "rank 2", event_type=NVTX_MARK)
    x.kernel(7, 0, 7, 100, 200, "k", launch=50)
    tl = read_nsys(x.write(tmp_path / "r.sqlite"))
    assert [(t.rank, t.rank_source) for t in tl.traces] == [(2, "nvtx")]


# ---------------------------------------------------------------------------------------------
# one run from a Kineto file and an nsys export


def test_timeline_dtypes_are_the_models(tmp_path: Path) -> None:
    # what make_events builds from strings (on pandas 3 the categories are "str", not object:
    # mixing the two made concatenating a Kineto and an nsys timeline fail)
    ref = make_events(
        1,
        {"start_ns": [0], "end_ns": [1], "category": ["kernel"], "name": ["k"], "lane": ["l"]},
    )
    ev = read_nsys(_one_step(tmp_path)).events
    assert list(ev.columns) == list(ref.columns)
    for c in ref.columns:
        if isinstance(ref[c].dtype, pd.CategoricalDtype):
            assert isinstance(ev[c].dtype, pd.CategoricalDtype), c
            assert ev[c].cat.categories.dtype == ref[c].cat.categories.dtype, c
        else:
            assert ev[c].dtype == ref[c].dtype, c


def test_a_folder_with_a_kineto_trace_and_an_nsys_export_is_one_run(tmp_path: Path) -> None:
    # rank 0: the bucketed Kineto fixture (steps 2-4); rank 1: an nsys export named rank1 (one
    # step of 8 ms). Both read into one run, each with its own numbers.
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(WORKLOAD_FIXTURES / "bucketed" / "rank0.json.gz", run / "rank0.json.gz")
    _one_step(run, name="rank1.sqlite")
    res = analyze(run)
    assert [(t.rank, t.format) for t in res.traces] == [(0, "kineto"), (1, "nsys")]
    assert res.steps[res.steps["rank"] == 0]["step"].tolist() == ["2", "3", "4"]
    r1 = res.steps[res.steps["rank"] == 1].iloc[0]
    assert (r1.step, r1.step_ns, r1.compute_ns) == ("1", 8 * MS, 7 * MS)
    assert np.isfinite(res.steps["step_ns"].astype(float)).all()
