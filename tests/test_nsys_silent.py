"""Nsight Systems exports that used to be read silently wrong (issue 21): a session start of 0
taken for a unix clock, NVTX ranges never closed dropped without a note, b-tree damage that
``PRAGMA quick_check`` reports read as data."""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from conftest import WORKLOAD_FIXTURES

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nsys_writer import MS, NsysExport, damage_free_list  # noqa: E402

from traceoverlap.core.errors import TraceFormatError
from traceoverlap.readers.nsys import read_nsys  # noqa: E402

FIXTURE = WORKLOAD_FIXTURES.parent / "nsys" / "bucketed_cpu_2rank.sqlite"


def _export(tmp_path: Path, name: str = "run.sqlite", kernels: int = 2) -> Path:
    x = NsysExport()
    x.process(7, "python3")
    x.thread(7, 7, "python3")
    x.nvtx(7, 0, MS, "ProfilerStep#1")
    for i in range(kernels):
        x.kernel(7, 0, 7, 2 * MS + i * 1000, 2 * MS + i * 1000 + 500, "gemm", launch=100_000 + i)
    return x.write(tmp_path / name)


def test_session_start_zero_is_not_a_unix_clock(tmp_path: Path) -> None:
    p = _export(tmp_path)
    con = sqlite3.connect(p)
    con.execute("DROP TABLE IF EXISTS TARGET_INFO_SESSION_START_TIME")
    con.execute(
        "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, systemClockNs INTEGER)"
    )
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (0, 0)")
    con.commit()
    con.close()
    tl = read_nsys(p)
    assert tl.traces[0].clock == "relative"
    assert any("utcEpochNs is 0, not a real start time" in n for n in tl.traces[0].notes)
    # times as stored: the kernel at 2 ms stays at 2 ms
    assert tl.events[tl.events["category"] == "kernel"]["start_ns"].min() == 2 * MS


@pytest.mark.skipif(not FIXTURE.is_file(), reason="bundled nsys fixture absent")
def test_nvtx_range_never_closed_gets_a_note(tmp_path: Path) -> None:
    p = tmp_path / "unfinished.sqlite"
    shutil.copy(FIXTURE, p)
    con = sqlite3.connect(p)
    con.execute(
        "UPDATE NVTX_EVENTS SET end = NULL WHERE textId IN "
        "(SELECT id FROM StringIds WHERE value = 'ProfilerStep#3')"
    )
    changed = con.total_changes
    con.commit()
    con.close()
    assert changed == 2  # ProfilerStep#3 on both ranks
    tl = read_nsys(p)
    for info in tl.traces:
        notes = [n for n in info.notes if "never closed" in n]
        assert notes == [
            "Dropped 2 NVTX ranges of NVTX_EVENTS that were never closed (ProfilerStep#3): no "
            "end (a push without a pop, or the capture stopped inside them)."
        ]
    steps = set(tl.events[tl.events["name"].astype(str).str.startswith("ProfilerStep")]["name"])
    assert "ProfilerStep#3" not in steps


def test_quick_check_damage_is_refused(tmp_path: Path) -> None:
    p = _export(tmp_path, kernels=300)
    damage_free_list(p)
    with pytest.raises(TraceFormatError) as err:
        read_nsys(p)
    msg = str(err.value)
    assert msg.startswith(f"{p}: the SQLite file is damaged (quick_check: Main freelist: size is")
    assert "\n" not in msg
