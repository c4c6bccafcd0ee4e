"""A multi-process Nsight Systems export read one process at a time (issue 20).

The per-rank map cuts a large export of several GPU processes into one unit per process
(``paths.map_units``); each unit reads only its process's rows (``read_nsys(process=pid)``),
with the ranks the whole file gives them. Here: the units are the processes, each process's
events are exactly the whole read's rows of that process, and ``analyze`` gives the same numbers
either way (only the counts in the notes differ: a process's read counts its own rows).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from nsys_writer import (  # noqa: E402
    MS,
    NVTX_MARK,
    NsysExport,
    damage_free_list,
    write_synthetic,
)

import traceoverlap.readers.formats as formats  # noqa: E402
from traceoverlap.core.options import AnalyzeOptions
from traceoverlap.readers.nsys import nsys_processes, read_nsys  # noqa: E402
from traceoverlap.readers.nsys._scan import _read_via_sql, read_columns  # noqa: E402
from traceoverlap.readers.paths import ProcessPart, map_units
from traceoverlap.run.analysis import analyze
from traceoverlap.run.detail import step_detail
from traceoverlap.whatif.scenarios import load_graph, what_if


def _split_at_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut every export into processes, however small (the registry's ``split_min_bytes``)."""
    every = tuple(replace(f, split_min_bytes=0) for f in formats.FORMATS)
    monkeypatch.setattr(formats, "FORMATS", every)


def _three_ranks(tmp_path: Path) -> Path:
    """Three processes, one GPU each; each says which rank it is, in an order that is not the
    process order (pid 300 is rank 0), so a process read alone must look at the others' texts.
    Per process, two steps of 10 ms: a 6 ms compute kernel then a 3 ms NCCL all-reduce, with
    one op range per step that no pattern wants (counted in a note)."""
    x = NsysExport(session_start_utc_ns=1_700_000_000 * 10**9)
    for pid, rank, dev in ((100, 2, 0), (200, 1, 1), (300, 0, 2)):
        x.process(pid)
        x.thread(pid, pid, "python3")
        x.nvtx(pid, 0, None, f"rank {rank}", event_type=NVTX_MARK)
        for step in range(2):
            t0 = step * 10 * MS
            x.nvtx(pid, t0, t0 + 10 * MS, f"ProfilerStep#{step}")
            x.nvtx(pid, t0 + 1, t0 + 2, f"aten::op{pid}_{step}", registered=False)
            x.kernel(pid, dev, 7, t0 + 1 * MS, t0 + 7 * MS, "gemm_kernel", launch=t0 + 100)
            x.kernel(
                pid, dev, 20, t0 + 7 * MS, t0 + 10 * MS, "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                launch=t0 + 200,
            )  # fmt: skip
    return x.write(tmp_path / "job.sqlite")


def test_each_process_reads_as_the_whole_files_rows_of_that_process(tmp_path: Path) -> None:
    path = _three_ranks(tmp_path)
    assert nsys_processes(path) == [100, 200, 300]
    whole = read_nsys(path)
    assert {t.pid: t.rank for t in whole.traces} == {100: 2, 200: 1, 300: 0}
    for pid in (100, 200, 300):
        part = read_nsys(path, process=pid)
        (info,) = part.traces
        assert info.pid == pid and info.rank_source == "nvtx"
        assert info.rank == {100: 2, 200: 1, 300: 0}[pid]  # from the other processes' texts too
        mine = whole.events[whole.events["pid"] == pid].reset_index(drop=True)
        assert len(part.events) == len(mine) == 4 + 4 + 4  # kernels, launches, ranges
        for col in mine.columns:
            a, b = mine[col], part.events[col]
            if isinstance(a.dtype, pd.CategoricalDtype):
                assert a.astype(str).tolist() == b.astype(str).tolist(), col
            else:
                assert np.array_equal(a.to_numpy(), b.to_numpy()), col


def test_a_large_export_is_one_map_unit_per_process_with_the_same_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _three_ranks(tmp_path)
    assert map_units([path]) == [path]  # small: read whole
    whole = analyze(path)
    _split_at_any_size(monkeypatch)
    assert map_units([path]) == [ProcessPart(str(path), p) for p in (100, 200, 300)]
    split = analyze(path)
    # in 2 processes
    pd.testing.assert_frame_equal(split.steps, analyze(path, AnalyzeOptions(jobs=2)).steps)
    # per rank and step, on the device: from the first kernel's start (1 ms) to the last one's
    # end (10 ms) = 9 ms, compute 6 ms (1-7), communication 3 ms (7-10) all exposed, no idle;
    # the same from the whole file and from its processes
    pd.testing.assert_frame_equal(whole.steps, split.steps)
    assert split.steps["step_ns"].tolist() == [9 * MS] * 6
    assert split.steps["idle_ns"].tolist() == [0] * 6
    assert split.steps["compute_ns"].tolist() == [6 * MS] * 6
    assert split.steps["exposed_comm_ns"].tolist() == [3 * MS] * 6
    assert [t.rank for t in split.traces] == [0, 1, 2]
    # the op ranges no pattern wants: 2 per process, 6 in the file; a process's read counts its own
    assert any(n.startswith("6 NVTX ranges were not read") for n in whole.traces[0].notes)
    assert any(n.startswith("2 NVTX ranges were not read") for n in split.traces[0].notes)
    # a step drawn from the split run reads that one process again: rank 1's window starts at
    # its first kernel (1 ms), compute [+0, +6) and communication [+6, +9) ms, as from the whole
    for a in (whole, split):
        d = step_detail(a, rank=1)
        lo = d.start_ns
        assert d.rank == 1 and d.end_ns - lo == 9 * MS
        assert [(d.compute[0] - lo).tolist(), (d.compute[1] - lo).tolist()] == [[0], [6 * MS]]
        assert [(d.comm[0] - lo).tolist(), (d.comm[1] - lo).tolist()] == [[6 * MS], [9 * MS]]


def test_whatif_reads_a_large_export_one_process_at_a_time_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the run graph is analyze's (its map builds each unit's graph): split into its three processes,
    # the export gives the same graph (ranks 0-2 from the NVTX texts, 2 kernels + 2 launches a
    # step on each: 3 x 2 x 4 nodes) and the same replay (not exact: the export's two launch
    # calls of a step overlap on their thread, 100-2100 and 200-2200 ns, and the replay keeps
    # lane order, 1.9 us later); the ranks are alike, so no-straggler changes nothing
    import traceoverlap.run.analysis as analysis

    path = _three_ranks(tmp_path)
    whole = load_graph(path)
    _split_at_any_size(monkeypatch)
    seen: list[object] = []
    task = analysis.map_file

    def spy(unit: object, **kw: object) -> object:
        seen.append(unit)
        return task(unit, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(analysis, "map_file", spy)
    split = load_graph(path)
    assert seen == [ProcessPart(str(path), p) for p in (100, 200, 300)]
    assert whole.unit_rank.tolist() == split.unit_rank.tolist() == [0, 1, 2]
    assert whole.start_ns.size == split.start_ns.size == 3 * 2 * 4
    for col in ("start_ns", "end_ns", "kind", "window", "inst"):
        assert np.array_equal(getattr(whole, col), getattr(split, col)), col
    got = []
    for g in (whole, split):
        w = what_if(g, ["replay", "no-straggler"])
        assert w.scenarios[0].step_ns == w.scenarios[1].step_ns
        got.append((w.observed_ns, w.replayed_ns, w.scenarios[0].step_ns))
    assert got[0] == got[1]
    assert got[0][0] == (9 * MS, 9 * MS)  # the first kernel's start (1 ms) to the end (10 ms)


def test_the_synthetic_export_splits_into_equal_processes(tmp_path: Path) -> None:
    # 3 processes x 2 000 kernels (write_synthetic): each process's read holds a third
    path = write_synthetic(tmp_path / "s.sqlite", 6_000, processes=3, kernels_per_step=500)
    whole = read_nsys(path)
    sizes = [len(read_nsys(path, process=p).events) for p in nsys_processes(path)]
    assert sum(sizes) == len(whole.events) and len(set(sizes)) == 1


def test_a_row_selection_reads_the_same_rows_from_the_pages_and_through_sqlite(
    tmp_path: Path,
) -> None:
    import sqlite3

    path = write_synthetic(tmp_path / "s.sqlite", 3_000, processes=3, kernels_per_step=500)
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    con.execute("BEGIN")
    where = ("(globalTid >> 24) & 16777215 = ?", (1001,))
    table = "NVTX_EVENTS"
    info = con.execute(f"PRAGMA table_xinfo({table})").fetchall()
    pages = read_columns(con, path, table, ["start", "globalTid"], ["text"], where=where)
    sql = _read_via_sql(con, table, info, ["start", "globalTid"], ["text"], where)
    con.close()
    assert pages.via == "pages" and sql.via == "sql"
    assert pages.n == sql.n == 1_000 + 2  # one op range per kernel, two step markers
    assert np.array_equal(pages.ints["start"], sql.ints["start"])
    assert set(((pages.ints["globalTid"] >> 24) & 0xFFFFFF).tolist()) == {1001}
    assert pages.texts["text"].tolist() == sql.texts["text"].tolist()


def test_a_damaged_export_is_refused_by_the_read_of_its_first_process(tmp_path: Path) -> None:
    # PRAGMA quick_check scans the whole file: a split runs it once, in its first (lowest pid)
    # process's read, and that error stops the run like any file's
    from traceoverlap.core.errors import TraceFormatError

    path = _three_ranks(tmp_path)
    damage_free_list(path)
    with pytest.raises(TraceFormatError, match="damaged \\(quick_check"):
        read_nsys(path, process=100)
    assert len(read_nsys(path, process=300).traces) == 1  # the check is not repeated
