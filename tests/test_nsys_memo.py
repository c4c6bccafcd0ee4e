"""What a process keeps of an export between two reads of it (readers/nsys/_memo.py): the
second read reuses the integrity verdict, counts, leaf pages and row selections, and gives what a
first read gives; a file changed between the reads is read afresh."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from nsys_writer import damage_free_list, write_synthetic

from traceoverlap.core.errors import TraceFormatError
from traceoverlap.core.model import Timeline
from traceoverlap.readers.nsys import _memo, _open, nsys_processes, read_nsys


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    _memo.forget()


def _export(tmp_path: Path, processes: int = 2) -> Path:
    # 200 kernels per process, one ProfilerStep range per 50 launches (nsys_writer's shape)
    return write_synthetic(tmp_path / "x.sqlite", 400, processes=processes, kernels_per_step=50)


def _same(a: Timeline, b: Timeline) -> None:
    ea, eb = a.events, b.events
    assert list(ea.columns) == list(eb.columns)
    for c in ea.columns:
        assert np.array_equal(ea[c].to_numpy(), eb[c].to_numpy()), c
    assert a.traces == b.traces


def test_second_read_checks_the_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _export(tmp_path)
    calls: list[int] = []
    real = _open._quick_check

    def counting(con: sqlite3.Connection) -> str:
        calls.append(1)
        return real(con)

    monkeypatch.setattr(_open, "_quick_check", counting)
    first = read_nsys(path)
    second = read_nsys(path)
    # one file, read twice by one process: one integrity check
    assert len(calls) == 1
    _same(first, second)


def test_process_reads_after_a_whole_read_match_fresh_ones(tmp_path: Path) -> None:
    path = _export(tmp_path)
    pids = nsys_processes(path)
    assert len(pids) == 2  # write_synthetic: pids 1000 and 1001, one GPU each
    read_nsys(path)  # fills the memo with the whole file's facts
    remembered = [read_nsys(path, process=p) for p in pids]
    for p, got in zip(pids, remembered, strict=True):
        _memo.forget()
        _same(got, read_nsys(path, process=p))


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = _export(tmp_path, processes=1)
    before = read_nsys(path)
    con = sqlite3.connect(path)
    # one more kernel, a copy of the first one: the file's change counter and size move
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL "
        "WHERE rowid = 1"
    )
    con.commit()
    con.close()
    after = read_nsys(path)
    assert len(after.events) == len(before.events) + 1
    _memo.forget()
    _same(after, read_nsys(path))


def test_damage_after_a_good_read_is_still_found(tmp_path: Path) -> None:
    path = _export(tmp_path, processes=1)
    read_nsys(path)
    damage_free_list(path)
    with pytest.raises(TraceFormatError, match="damaged"):
        read_nsys(path)


def test_remembered_keeps_arrays_read_only_and_not_failures(tmp_path: Path) -> None:
    path = _export(tmp_path, processes=1)
    got = _memo.remembered(path, "a", lambda: np.arange(3))
    assert not got.flags.writeable
    assert _memo.remembered(path, "a", lambda: np.arange(5)) is got  # kept, not recomputed

    def fails() -> int:
        raise ValueError("no")

    with pytest.raises(ValueError):
        _memo.remembered(path, "b", fails)
    assert _memo.remembered(path, "b", lambda: 7) == 7  # a failure was not kept


def test_two_files_read_at_once_keep_their_own_facts(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    # two exports of different sizes (200 and 300 kernels per process): their tables' leaf
    # pages, counts and selections differ, and neither read may be given the other's
    a = write_synthetic(tmp_path / "a.sqlite", 400, processes=2, kernels_per_step=50)
    b = write_synthetic(tmp_path / "b.sqlite", 600, processes=2, kernels_per_step=50)
    alone = {p: read_nsys(p, process=1000) for p in (a, b)}
    _memo.forget()
    with ThreadPoolExecutor(max_workers=2) as pool:
        got = list(pool.map(lambda p: read_nsys(p, process=1000), [a, b, a, b, a, b]))
    for p, t in zip([a, b, a, b, a, b], got, strict=True):
        _same(t, alone[p])
