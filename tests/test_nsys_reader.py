"""Nsight Systems SQLite reader: hand-built exports (expected numbers derived in comments), the
same run written as Kineto JSON and as an nsys export, the shared real export, and bad input."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import REAL_TRACES

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nsys_writer import (  # noqa: E402
    MS,
    NVTX_MARK,
    NVTX_START_END,
    NsysExport,
    fake_nsys_export,
    global_tid,
)

from traceoverlap import AnalyzeOptions, analyze, load  # noqa: E402
from traceoverlap.core.errors import TraceFormatError
from traceoverlap.readers import read_trace  # noqa: E402
from traceoverlap.readers.nsys import read_nsys, read_nsys_rep  # noqa: E402
from traceoverlap.reporters.json_report import step_records  # noqa: E402

REAL = REAL_TRACES / "nsys" / "fsdp_2gpu_h100.sqlite"

NCCL_AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
METRICS = [
    "step",
    "step_ns",
    "compute_ns",
    "comm_ns",
    "memory_ns",
    "overlap_ns",
    "exposed_comm_ns",
    "idle_ns",
    "overlap_ratio",
    "ideal_ns",
    "bottleneck",
    "start_ns",
    "end_ns",
]

T0 = 10 * MS  # capture-relative time of the first step marker: keeps every timestamp positive


def _exercise_1(x: NsysExport, pid: int, device: int, marker_start: int, gpu_start: int) -> None:
    """metrics.md exercise 1 on GPU, launched from the host at ``marker_start + 0.1 ms * i``.

    10 backward kernels of 5 ms on stream 7 from ``gpu_start``; bucket b (2 layers) all-reduces
    6 ms on stream 20 from gpu_start + 10 (b + 1) ms, launched with the driver API like NCCL does.
    """
    launch = marker_start + 100_000
    for i in range(10):
        x.kernel(
            pid,
            device,
            7,
            gpu_start + 5 * i * MS,
            gpu_start + 5 * (i + 1) * MS,
            f"bwd{i}",
            launch=launch,
        )
        launch += 100_000
    for b in range(5):
        s = gpu_start + 10 * (b + 1) * MS
        x.kernel(
            pid,
            device,
            20,
            s,
            s + 6 * MS,
            NCCL_AR,
            launch=launch,
            api="cuLaunchKernelEx",
            event_class=1,
        )
        launch += 100_000


def _exercise_2(x: NsysExport, pid: int, device: int, marker_start: int, gpu_start: int) -> None:
    """metrics.md exercise 2: compute [0, 80) ms, comm [20, 140) ms from ``gpu_start``."""
    x.kernel(pid, device, 7, gpu_start, gpu_start + 80 * MS, "gemm", launch=marker_start + 10_000)
    x.kernel(
        pid,
        device,
        20,
        gpu_start + 20 * MS,
        gpu_start + 140 * MS,
        NCCL_AR,
        launch=marker_start + 20_000,
        api="cuLaunchKernelEx",
        event_class=1,
    )


def _two_exercises(tmp_path: Path, name: str = "run.sqlite", **kw: object) -> Path:
    # Step 1 (exercise 1): marker [T0, T0+2ms), kernels from T0+1ms to T0+57ms: they run long after
    # the marker ends. Step 2 (exercise 2): marker [T0+40ms, T0+42ms) starts while step 1's kernels
    # still run, its kernels run [T0+60ms, T0+200ms). A step owns the kernels its marker launched.
    x = NsysExport(**kw)  # type: ignore[arg-type]
    x.process(300, "python3")
    x.thread(300, 300, "python3")
    x.nvtx(300, T0, T0 + 2 * MS, "ProfilerStep#1")
    x.nvtx(300, T0 + 40 * MS, T0 + 42 * MS, "ProfilerStep#2")
    # NCCL's own domain: an annotation range that is not a step marker
    x.nvtx(300, T0 + 1_500_000, T0 + 1_600_000, "ncclAllReduce", domain=1)
    _exercise_1(x, 300, 0, T0, T0 + 1 * MS)
    _exercise_2(x, 300, 0, T0 + 40 * MS, T0 + 60 * MS)
    return x.write(tmp_path / name)


def _row(df, step):  # type: ignore[no-untyped-def]
    sel = df[df["step"] == str(step)]  # step labels are a string column
    assert len(sel) == 1
    return sel.iloc[0]


# ---------------------------------------------------------------------------------------------
# what the reader produces


def test_columns_names_lanes_and_unix_clock(tmp_path: Path) -> None:
    # One process (pid 300, GPU 0), a kernel launched at 1000 (runtime API, correlation 101), a
    # memcpy (HtoD) and a memset launched later (correlations 102, 103), one push/pop range with a
    # plain (unregistered) string on the worker thread 301.
    # The session started at unix 1.7e18 when the export's clock read 5e9: unix = t - 5e9 + 1.7e18.
    utc, sysclk = 1_700_000_000_000_000_000, 5_000_000_000
    x = NsysExport(session_start_utc_ns=utc, system_clock_ns=sysclk)
    x.process(300, "python3")
    x.thread(300, 300, "python3")
    x.thread(300, 301, "pt_autograd_0")
    x.kernel(
        300,
        0,
        7,
        sysclk + 5_000,
        sysclk + 9_000,
        "gemm_kernel",
        launch=sysclk + 1_000,
        demangled="void gemm_kernel<float>(float*)",
    )
    x.memcpy(300, 0, 7, sysclk + 9_000, sysclk + 9_500, launch=sysclk + 1_500, copy_kind=1)
    x.memset(300, 0, 9, sysclk + 9_600, sysclk + 9_700, launch=sysclk + 1_800)
    x.nvtx(300, sysclk + 500, sysclk + 20_000, "forward", registered=False, tid=301)
    tl = read_nsys(x.write(tmp_path / "a.sqlite"))
    ev = tl.events
    assert len(tl.traces) == 1
    info = tl.traces[0]
    assert (info.format, info.rank, info.pid, info.device, info.clock) == (
        "nsys",
        0,
        300,
        0,
        "unix",
    )
    assert info.format_version == "3.25.0" and info.device_kind == "gpu"
    assert info.rank_source == "process-order"
    assert info.backend is None  # no NCCL kernel ran

    k = ev[ev["category"] == "kernel"].iloc[0]
    assert k["name"] == "gemm_kernel"  # shortName: what classification matches
    assert (k.start_ns, k.end_ns) == (utc + 5_000, utc + 9_000)
    assert (k.pid, k.device, k.stream, k.tid, k.lane, k.correlation) == (
        300,
        0,
        7,
        -1,
        "stream 7",
        101,
    )
    launch = ev[(ev["category"] == "runtime") & (ev["correlation"] == 101)].iloc[0]
    assert (launch["name"], launch.pid, launch.tid, launch.device) == (
        "cudaLaunchKernel_v7000",
        300,
        300,
        -1,
    )
    assert (launch.start_ns, launch.lane, launch.thread_name) == (
        utc + 1_000,
        "thread 300 (python3)",
        "python3",
    )
    mc = ev[ev["category"] == "memcpy"].iloc[0]
    assert (mc["name"], mc.correlation, mc.stream) == ("Memcpy Host-to-Device", 102, 7)
    ms = ev[ev["category"] == "memset"].iloc[0]
    assert (ms["name"], ms.correlation, ms.stream, ms.lane) == ("Memset", 103, 9, "stream 9")
    ann = ev[ev["category"] == "annotation"].iloc[0]
    assert (ann["name"], ann.tid, ann.lane) == ("forward", 301, "thread 301 (pt_autograd_0)")
    assert (ann.start_ns, ann.end_ns) == (utc + 500, utc + 20_000)
    assert set(ev["category"].astype(str)) == {
        "kernel",
        "memcpy",
        "memset",
        "runtime",
        "annotation",
    }


def test_relative_clock_without_session_start(tmp_path: Path) -> None:
    x = NsysExport()
    x.kernel(5, 0, 7, 100, 200, "k", launch=50)
    tl = read_nsys(x.write(tmp_path / "r.sqlite"))
    assert tl.traces[0].clock == "relative"
    assert tl.events[tl.events["category"] == "kernel"]["start_ns"].tolist() == [100]
    assert any("TARGET_INFO_SESSION_START_TIME" in n for n in tl.traces[0].notes)


def test_negative_timestamps_and_unfinished_ranges_are_dropped(tmp_path: Path) -> None:
    # kernel at -500 (before capture start), its launch at -900: both dropped; one kept kernel.
    # NVTX: a range starting at -10 (dropped), a range without an end (dropped), a mark (not a
    # range: dropped), a start/end range (kept).
    x = NsysExport()
    x.kernel(5, 0, 7, -500, -100, "early", launch=-900)
    x.kernel(5, 0, 7, 1_000, 2_000, "k", launch=100)
    x.nvtx(5, -10, 50, "early_range")
    x.nvtx(5, 60, None, "unfinished")
    x.nvtx(5, 70, None, "a mark", event_type=NVTX_MARK)
    x.nvtx(5, 80, 3_000, "async", event_type=NVTX_START_END)
    tl = read_nsys(x.write(tmp_path / "n.sqlite"))
    ev = tl.events
    assert (ev["start_ns"] >= 0).all()
    assert ev[ev["category"] == "kernel"]["name"].tolist() == ["k"]
    assert len(ev[ev["category"] == "runtime"]) == 1
    assert ev[ev["category"] == "annotation"]["name"].tolist() == ["async"]
    assert any("negative timestamps" in n for n in tl.traces[0].notes)


def test_several_processes_are_ranks_ordered_by_device_then_pid(tmp_path: Path) -> None:
    # pid 900 drives GPU 0, pid 100 drives GPU 1: ordered by device, pid 900 is rank 0.
    # Both processes use correlation ids 101, 102 (counted per process, as nsys does); each
    # kernel must join its own process's launch: rank 0's step covers its launch at 1 ms only.
    x = NsysExport()
    for pid in (900, 100):
        x.process(pid)
    x.nvtx(900, 0, 2 * MS, "ProfilerStep#0")
    x.nvtx(100, 10 * MS, 12 * MS, "ProfilerStep#0")
    x.kernel(900, 0, 7, 3 * MS, 4 * MS, "a", launch=1 * MS)
    x.kernel(900, 0, 7, 4 * MS, 6 * MS, "b", launch=1 * MS + 10_000)
    x.kernel(100, 1, 7, 13 * MS, 15 * MS, "c", launch=11 * MS)
    x.kernel(100, 1, 7, 15 * MS, 20 * MS, "d", launch=11 * MS + 10_000)
    path = x.write(tmp_path / "two.sqlite")
    tl = read_nsys(path)
    assert [(t.rank, t.pid, t.device) for t in tl.traces] == [(0, 900, 0), (1, 100, 1)]
    for rank, pid in ((0, 900), (1, 100)):
        ev = tl.events[tl.events["rank"] == rank]
        assert set(ev["pid"]) == {pid}
    # rank 0: kernels [3,4) and [4,6) ms -> step 3 ms of compute; rank 1: [13,15)+[15,20) -> 7 ms
    steps = analyze(path).steps
    assert steps[["rank", "step", "step_ns", "compute_ns"]].values.tolist() == [
        [0, "0", 3 * MS, 3 * MS],
        [1, "0", 7 * MS, 7 * MS],
    ]


def test_gpu_names_follow_each_process_device_mapping(tmp_path: Path) -> None:
    # CUDA_VISIBLE_DEVICES: pids 20 and 10 both launch on their CUDA device 0, which is GPU 1
    # (an H100) for pid 20 and GPU 0 (an A100) for pid 10. Same device -> ordered by pid.
    x = NsysExport()
    x.gpu(0, "NVIDIA A100-SXM4-80GB")
    x.gpu(1, "NVIDIA H100 80GB HBM3")
    x.cuda_device(20, 0, 1)
    x.cuda_device(10, 0, 0)
    x.kernel(20, 0, 7, 100, 200, "k", launch=50)
    x.kernel(10, 0, 7, 100, 200, "k", launch=50)
    tl = read_nsys(x.write(tmp_path / "gpus.sqlite"))
    assert [(t.rank, t.pid, t.device, t.devices) for t in tl.traces] == [
        (0, 10, 0, ("NVIDIA A100-SXM4-80GB",)),
        (1, 20, 0, ("NVIDIA H100 80GB HBM3",)),
    ]


def test_one_process_two_gpus_gets_two_ranks_sharing_host_rows(tmp_path: Path) -> None:
    # pid 7 drives GPUs 0 and 1: two ranks (device order), each with the process's host rows
    # (launches and the step marker), so each rank's kernels find their launch.
    # rank 0: kernel [1,3) ms; rank 1: kernel [2,6) ms -> step 2 ms and 4 ms.
    x = NsysExport()
    x.nvtx(7, 0, MS // 2, "ProfilerStep#4")
    x.kernel(7, 0, 3, 1 * MS, 3 * MS, "a", launch=100_000)
    x.kernel(7, 1, 3, 2 * MS, 6 * MS, "b", launch=200_000)
    path = x.write(tmp_path / "multi.sqlite")
    tl = read_nsys(path)
    assert [(t.rank, t.pid, t.device) for t in tl.traces] == [(0, 7, 0), (1, 7, 1)]
    for rank in (0, 1):
        ev = tl.events[tl.events["rank"] == rank]
        assert len(ev[ev["category"] == "runtime"]) == 2
        assert len(ev[ev["category"] == "annotation"]) == 1
    steps = analyze(path).steps
    assert steps[["rank", "step", "step_ns"]].values.tolist() == [
        [0, "4", 2 * MS],
        [1, "4", 4 * MS],
    ]


def test_rank_from_nvtx_text_and_file_name(tmp_path: Path) -> None:
    # Each process marks "rank N": pid 100 says rank 1, pid 200 says rank 0.
    x = NsysExport()
    x.nvtx(100, 10, None, "rank 1", event_type=NVTX_MARK)
    x.nvtx(200, 10, None, "rank 0", event_type=NVTX_MARK)
    x.kernel(100, 0, 7, 100, 200, "k", launch=50)
    x.kernel(200, 1, 7, 100, 200, "k", launch=50)
    tl = read_nsys(x.write(tmp_path / "ranks.sqlite"))
    assert [(t.rank, t.pid, t.rank_source) for t in tl.traces] == [
        (0, 200, "nvtx"),
        (1, 100, "nvtx"),
    ]
    # MPI_RANKS (nsys --trace=mpi) maps threads to MPI ranks: pid 100 -> 0, pid 200 -> 1
    con = sqlite3.connect(tmp_path / "ranks.sqlite")
    con.execute("CREATE TABLE MPI_RANKS (globalTid INTEGER NOT NULL, rank INTEGER NOT NULL)")
    con.executemany(
        "INSERT INTO MPI_RANKS VALUES (?, ?)",
        [(global_tid(100, 100), 0), (global_tid(200, 201), 1)],
    )
    con.commit()
    con.close()
    tl = read_nsys(tmp_path / "ranks.sqlite")
    assert [(t.rank, t.pid, t.rank_source) for t in tl.traces] == [
        (0, 100, "environment"),
        (1, 200, "environment"),
    ]
    # one export per rank, named after it
    y = NsysExport()
    y.kernel(42, 0, 7, 100, 200, "k", launch=50)
    tl = read_nsys(y.write(tmp_path / "trace_rank3.sqlite"))
    assert [(t.rank, t.rank_source) for t in tl.traces] == [(3, "filename")]


def test_minimal_older_schema(tmp_path: Path) -> None:
    # Fewer tables and columns than a 2026 export: no META_DATA_EXPORT, no enum / process / thread
    # tables, NVTX with inline text only (no textId), a session start without systemClockNs: as in
    # Nsight Systems 2022.4 exports, timestamps then count from the session start (unix = utc + t;
    # ANALYSIS_DETAILS.startTime = 1000 is no offset). Columns are found, not assumed.
    # Kernel [5000, 9000) launched at 2000 inside "train_step" [1500, 3000): one step of 4000 ns.
    p = tmp_path / "old.sqlite"
    con = sqlite3.connect(p)
    gpid = (1 << 48) | (77 << 24)
    con.executescript(
        """
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO StringIds VALUES (1, 'sgemm'), (2, 'cudaLaunchKernel_v7000');
        CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER);
        INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1600000000000000000);
        CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER, duration INTEGER, startTime INTEGER,
                                       stopTime INTEGER);
        INSERT INTO ANALYSIS_DETAILS VALUES (0, 100000, 1000, 101000);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER,
            streamId INTEGER, correlationId INTEGER, globalPid INTEGER, shortName INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER,
            globalTid INTEGER, correlationId INTEGER, nameId INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT,
            globalTid INTEGER);
        """
    )
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (5000, 9000, 0, 7, 11, ?, 1)", (gpid,)
    )
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (2000, 2100, 0, ?, 11, 2)", (gpid | 77,)
    )
    con.execute("INSERT INTO NVTX_EVENTS VALUES (1500, 3000, 59, 'train_step', ?)", (gpid | 77,))
    con.commit()
    con.close()
    tl = read_nsys(p)
    info = tl.traces[0]
    assert (info.pid, info.device, info.format_version, info.clock) == (77, 0, None, "unix")
    k = tl.events[tl.events["category"] == "kernel"].iloc[0]
    assert (k["name"], k.start_ns) == ("sgemm", 1600000000000000000 + 5000)
    assert k["shape"] == -1  # no gridX..blockZ columns: no launch shape
    r = _row(analyze(p, AnalyzeOptions(step_regex="^train_step$")).steps, 0)
    assert (r.step_ns, r.compute_ns) == (4000, 4000)


def test_bare_synthetic_export_without_ids_or_event_types(tmp_path: Path) -> None:
    # The smallest export a script might write: no globalPid on kernels, no eventType / globalTid
    # on NVTX, no eventClass on launches. One process made the CUDA calls (pid 55), so the
    # kernels and ranges are its own. Exercise 2 under ProfilerStep#3 [0, 1 ms): launches at
    # 0.1 and 0.2 ms; compute [2, 82) ms, comm [22, 142) ms -> step 140, overlap 60, exposed 60.
    p = tmp_path / "bare.sqlite"
    con = sqlite3.connect(p)
    con.executescript(
        """
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        INSERT INTO StringIds VALUES (1, 'gemm'), (2, 'ncclDevKernel_AllReduce_Sum_f32_RING_LL'),
                                     (3, 'cudaLaunchKernel'), (4, 'ProfilerStep#3');
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER,
            streamId INTEGER, correlationId INTEGER, shortName INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, globalTid INTEGER,
            correlationId INTEGER, nameId INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, textId INTEGER, text TEXT);
        """
    )
    gtid = global_tid(55, 55)
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, ?, ?, ?)",
        [(2 * MS, 82 * MS, 7, 1, 1), (22 * MS, 142 * MS, 20, 2, 2)],
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, 3)",
        [(100_000, 110_000, gtid, 1), (200_000, 210_000, gtid, 2)],
    )
    con.execute("INSERT INTO NVTX_EVENTS VALUES (0, ?, 4, NULL)", (MS,))
    con.execute("INSERT INTO NVTX_EVENTS VALUES (5, NULL, NULL, 'a mark')")
    con.commit()
    con.close()
    tl = read_nsys(p)
    assert [(t.pid, t.device) for t in tl.traces] == [(55, 0)]
    assert set(tl.events["pid"]) == {55}
    r = _row(analyze(p).steps, 3)
    assert (r.step_ns, r.overlap_ns, r.exposed_comm_ns) == (140 * MS, 60 * MS, 60 * MS)


def test_registry_dispatches_sqlite(tmp_path: Path) -> None:
    x = NsysExport()
    x.kernel(5, 0, 7, 100, 200, "k", launch=50)
    path = x.write(tmp_path / "renamed.bin")  # sniffed by content, not extension
    assert read_trace(path).traces[0].format == "nsys"


# ---------------------------------------------------------------------------------------------
# metrics: the two metrics.md exercises, steps from registered-string NVTX ranges


def test_metrics_exercises_from_nvtx_steps(tmp_path: Path) -> None:
    res = analyze(_two_exercises(tmp_path))
    df = res.steps
    assert df["step"].tolist() == ["1", "2"]
    # Exercise 1: step = 56 ms (bwd [0,50), last all-reduce [50,56)), compute 50, comm 5 x 6 = 30,
    # overlap = first four buckets = 24, ratio 0.8, exposed 6, idle 0, ideal = 56 - 6 + 0 = 50.
    r = _row(df, 1)
    assert (r.step_ns, r.compute_ns, r.comm_ns, r.overlap_ns, r.exposed_comm_ns, r.idle_ns) == (
        56 * MS,
        50 * MS,
        30 * MS,
        24 * MS,
        6 * MS,
        0,
    )
    assert r.overlap_ratio == pytest.approx(0.80)
    assert r.ideal_ns == 50 * MS
    # Exercise 2: compute [0,80), comm [20,140): step 140, overlap 60, ratio 0.5, exposed 60,
    # ideal = 140 - 60 + (120 - 80) = 120; comm 120 > compute 80 -> communication-bound.
    r = _row(df, 2)
    assert (r.step_ns, r.compute_ns, r.comm_ns, r.overlap_ns, r.exposed_comm_ns, r.ideal_ns) == (
        140 * MS,
        80 * MS,
        120 * MS,
        60 * MS,
        60 * MS,
        120 * MS,
    )
    assert r.overlap_ratio == pytest.approx(0.5)
    assert r.bottleneck == "communication-bound"
    # windows start at the first kernel of each step (T0 + 1 ms, T0 + 60 ms; relative clock)
    assert df["start_ns"].tolist() == [T0 + 1 * MS, T0 + 60 * MS]
    # JSON step rows of nsys inputs say which process and GPU the rank was
    recs = step_records(res)
    assert [(r["step"], r["pid"], r["device"]) for r in recs] == [(1, 300, 0), (2, 300, 0)]


def test_custom_step_regex_with_unregistered_text(tmp_path: Path) -> None:
    # Exercise 2 under a "train_step" start/end range written as plain text (NVTX_EVENTS.text).
    # No number in the marker: the step is labelled by its ordinal, 0.
    x = NsysExport()
    x.nvtx(9, T0, T0 + MS, "train_step", registered=False, event_type=NVTX_START_END)
    _exercise_2(x, 9, 0, T0, T0 + 5 * MS)
    path = x.write(tmp_path / "ts.sqlite")
    r = _row(analyze(path, AnalyzeOptions(step_regex=r"^train_step$")).steps, 0)
    assert (r.step_ns, r.overlap_ns, r.exposed_comm_ns, r.ideal_ns) == (
        140 * MS,
        60 * MS,
        60 * MS,
        120 * MS,
    )
    # without the regex there are no ProfilerStep markers: one window 'all', same numbers here
    r = _row(analyze(path).steps, "all")
    assert (r.step_ns, r.overlap_ns) == (140 * MS, 60 * MS)


def test_no_nvtx_table_gives_one_window_all(tmp_path: Path) -> None:
    # Exercise 1 without any NVTX table: one window 'all' = [first kernel start, last end].
    x = NsysExport()
    _exercise_1(x, 300, 0, T0, T0 + MS)
    path = x.write(tmp_path / "nonvtx.sqlite", omit=["NVTX_EVENTS"])
    r = _row(analyze(path).steps, "all")
    assert (r.step_ns, r.comm_ns, r.overlap_ns, r.exposed_comm_ns) == (
        56 * MS,
        30 * MS,
        24 * MS,
        6 * MS,
    )


# ---------------------------------------------------------------------------------------------
# equivalence with the Kineto reader


def _dims(i: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """The launch shape (grid, block) of the i-th GPU activity of the equivalence run."""
    return (1 + i % 3, 2, 1), (128 if i % 2 else 256, 1, 1)


def _kineto_json(path: Path, base_ns: int, spec: dict[str, list[tuple]]) -> Path:  # type: ignore[type-arg]
    """A minimal Chrome trace: ProfilerStep#N user annotations, cuda_runtime launches, kernels and
    a memcpy with args.correlation / stream / device (kernels: grid / block, :func:`_dims`).
    ``ts`` are µs relative to base_ns."""
    us = lambda ns: ns / 1000.0  # noqa: E731
    ev: list[dict[str, object]] = []
    for name, s, e in spec["steps"]:
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": name,
                "pid": 300,
                "tid": 300,
                "ts": us(s),
                "dur": us(e - s),
            }
        )
    for corr, (cat, name, stream, s, e, launch) in enumerate(spec["gpu"], start=1):
        api = "cudaLaunchKernel" if cat == "kernel" else "cudaMemcpyAsync"
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": api,
                "pid": 300,
                "tid": 300,
                "ts": us(launch),
                "dur": 2.0,
                "args": {"correlation": corr},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": 0,
                "tid": stream,
                "ts": us(s),
                "dur": us(e - s),
                "args": {"correlation": corr, "stream": stream, "device": 0},
            }
        )
        if cat == "kernel":
            grid, block = _dims(corr)
            ev[-1]["args"].update(grid=list(grid), block=list(block))  # type: ignore[attr-defined]
    path.write_text(json.dumps({"traceEvents": ev, "baseTimeNanoseconds": base_ns}))
    return path


def test_same_run_as_kineto_and_nsys_gives_identical_metrics(tmp_path: Path) -> None:
    # One hand-built run (exercise 1 as step 1, exercise 2 plus a 2 ms HtoD memcpy as step 2),
    # written once as Kineto JSON and once as an nsys export with the same clock (session start
    # at unix U when the export clock read 0; Kineto base U): every per-step number must match.
    base = 1_700_000_000_000_000_000
    gpu: list[tuple] = []  # type: ignore[type-arg]
    launch = T0 + 100_000
    g1 = T0 + MS
    for i in range(10):
        gpu.append(("kernel", f"bwd{i}", 7, g1 + 5 * i * MS, g1 + 5 * (i + 1) * MS, launch))
        launch += 100_000
    for b in range(5):
        s = g1 + 10 * (b + 1) * MS
        gpu.append(("kernel", NCCL_AR, 20, s, s + 6 * MS, launch))
        launch += 100_000
    g2, m2 = T0 + 60 * MS, T0 + 40 * MS
    gpu.append(("kernel", "gemm", 7, g2, g2 + 80 * MS, m2 + 10_000))
    gpu.append(("kernel", NCCL_AR, 20, g2 + 20 * MS, g2 + 140 * MS, m2 + 20_000))
    gpu.append(("gpu_memcpy", "Memcpy HtoD", 9, g2 + 150 * MS, g2 + 152 * MS, m2 + 30_000))
    spec = {
        "steps": [("ProfilerStep#1", T0, T0 + 2 * MS), ("ProfilerStep#2", m2, m2 + 2 * MS)],
        "gpu": gpu,
    }

    kpath = _kineto_json(tmp_path / "run.json", base, spec)
    x = NsysExport(session_start_utc_ns=base, system_clock_ns=0)
    x.process(300)
    for name, s, e in spec["steps"]:
        x.nvtx(300, s, e, name)
    for i, (cat, name, stream, s, e, launch) in enumerate(gpu, start=1):
        if cat == "kernel":
            grid, block = _dims(i)
            x.kernel(300, 0, stream, s, e, name, launch=launch, grid=grid, block=block)
        else:
            x.memcpy(300, 0, stream, s, e, launch=launch)
    npath = x.write(tmp_path / "run.sqlite")

    k = analyze(kpath).steps[METRICS].reset_index(drop=True)
    n = analyze(npath).steps[METRICS].reset_index(drop=True)
    assert k.to_dict("records") == n.to_dict("records")
    # and they are the hand-derived ones: step 2 = [g2, g2+152): memory 2, idle 152 - 142 = 10
    r = _row(n, 2)
    assert (r.step_ns, r.memory_ns, r.idle_ns, r.overlap_ns) == (152 * MS, 2 * MS, 10 * MS, 60 * MS)
    assert (r.start_ns, r.end_ns) == (base + g2, base + g2 + 152 * MS)
    # the launch shape code is the same function of (grid, block) in both readers: per kernel
    # (in start order) the same code; 6 distinct (grid, block) pairs (grid x 1..3, block 128 or
    # 256: i % 3 and i % 2 cycle through all 6 over 17 kernels); memcpy and host rows -1
    ke, ne = read_trace(kpath).events, read_trace(npath).events
    ks, ns = (e[e["category"] == "kernel"].sort_values("start_ns")["shape"] for e in (ke, ne))
    assert ks.tolist() == ns.tolist() and ks.nunique() == 6 and (ks >= 0).all()
    assert set(ke.loc[ke["category"] != "kernel", "shape"]) == {-1}
    assert set(ne.loc[ne["category"] != "kernel", "shape"]) == {-1}


# ---------------------------------------------------------------------------------------------
# .nsys-rep


def test_nsys_rep_without_nsys_says_how_to_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rep = tmp_path / "report.nsys-rep"
    rep.write_bytes(b"\x00binary report")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(TraceFormatError) as err:
        read_trace(rep)
    msg = str(err.value)
    assert "report.nsys-rep" in msg and "Nsight Systems" in msg
    assert "nsys export --type=sqlite --force-overwrite=true --output=report.sqlite" in msg


def test_nsys_rep_with_its_export_beside_needs_no_nsys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rep = tmp_path / "report.nsys-rep"
    rep.write_bytes(b"\x00binary report")
    old = time.time() - 100
    os.utime(rep, (old, old))
    x = NsysExport()
    x.kernel(5, 0, 7, 100, 200, "k", launch=50)
    prepared = x.write(tmp_path / "prepared.db")
    bindir = fake_nsys_export(tmp_path, prepared)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    read_trace(rep)  # exported once, by traceoverlap: the export records which report it is of
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    tl = read_trace(rep)
    assert tl.traces[0].path == str(rep)
    assert tl.events[tl.events["category"] == "kernel"]["name"].tolist() == ["k"]


def test_nsys_rep_with_a_hand_made_export_beside_and_no_nsys_says_to_pass_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `nsys export` run by hand (newer than the report): nothing records that it is of this
    # report (issue 41: a report replaced by an older copy kept its old numbers), so it is not
    # read in the report's name; the error says to pass it
    rep = tmp_path / "report.nsys-rep"
    rep.write_bytes(b"\x00binary report")
    old = time.time() - 100
    os.utime(rep, (old, old))
    x = NsysExport()
    x.kernel(5, 0, 7, 100, 200, "k", launch=50)
    x.write(tmp_path / "report.sqlite")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(TraceFormatError, match="pass report.sqlite itself") as err:
        read_trace(rep)
    assert "report.nsys-rep" in str(err.value) and "\n" not in str(err.value)
    assert read_trace(tmp_path / "report.sqlite").events["name"].tolist().count("k") == 1


def test_nsys_rep_exported_once_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in `nsys` that "exports" by copying a prepared SQLite file to --output and counts
    # its calls: the second read must reuse the cache (newer than the report).
    x = NsysExport()
    x.kernel(5, 0, 7, 100, 200, "k", launch=50)
    prepared = x.write(tmp_path / "prepared.db")
    bindir = fake_nsys_export(tmp_path, prepared)
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    rep = tmp_path / "rep" / "rank2.nsys-rep"
    rep.parent.mkdir()
    rep.write_bytes(b"\x00binary report")
    old = time.time() - 100
    os.utime(rep, (old, old))
    tl = read_nsys_rep(rep)
    assert (rep.parent / "rank2.sqlite").is_file()
    assert tl.traces[0].path == str(rep) and tl.traces[0].rank == 2  # rank from the report's name
    read_trace(rep)
    lines = calls.read_text().splitlines()
    assert len(lines) == 1 and "export --type=sqlite" in lines[0]


# ---------------------------------------------------------------------------------------------
# bad input


def test_not_sqlite(tmp_path: Path) -> None:
    p = tmp_path / "x.sqlite"
    p.write_text("hello, not a database\n")
    with pytest.raises(TraceFormatError, match="not an SQLite file"):
        read_nsys(p)


def test_sqlite_but_not_nsys(tmp_path: Path) -> None:
    p = tmp_path / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(TraceFormatError, match="not an Nsight Systems export"):
        read_trace(p)


def test_no_kernel_table_is_a_cpu_capture_that_names_the_capture_flags(tmp_path: Path) -> None:
    # NVTX ranges but no CUDA table: a CPU capture (nsys -t nvtx); the note says how to trace CUDA
    # in case the program did use a GPU. Step [0, 100) of the one process.
    x = NsysExport()
    x.nvtx(5, 0, 100, "ProfilerStep#1")
    p = x.write(tmp_path / "nocuda.sqlite", omit=["CUPTI_ACTIVITY_KIND_KERNEL"])
    tl = read_nsys(p)
    (info,) = tl.traces
    assert (info.device_kind, info.pid, info.device) == ("cpu", 5, None)
    note = next(n for n in info.notes if n.startswith("CPU capture"))
    assert "no CUDA activity" in note and "-t cuda,nvtx" in note
    assert tl.events["name"].tolist() == ["ProfilerStep#1"]


def test_no_gpu_activity_and_no_nvtx_is_an_error(tmp_path: Path) -> None:
    x = NsysExport()
    x.runtime(5, 10, 20, "cudaGetDevice_v3020")
    p = x.write(tmp_path / "nothing.sqlite", omit=["CUPTI_ACTIVITY_KIND_KERNEL"])
    with pytest.raises(TraceFormatError) as err:
        read_nsys(p)
    msg = str(err.value)
    assert "nothing.sqlite" in msg and "no GPU activity and no NVTX ranges" in msg
    assert "-t cuda,nvtx" in msg


def test_missing_string_ids(tmp_path: Path) -> None:
    x = NsysExport()
    x.kernel(5, 0, 7, 100, 200, "k", launch=50)
    p = x.write(tmp_path / "nostrings.sqlite", omit=["StringIds"])
    with pytest.raises(TraceFormatError, match="StringIds"):
        read_nsys(p)


def test_empty_gpu_tables(tmp_path: Path) -> None:
    x = NsysExport()
    x.runtime(5, 10, 20, "cudaGetDevice_v3020")
    with pytest.raises(TraceFormatError, match="no GPU activity and no NVTX ranges"):
        read_nsys(x.write(tmp_path / "idle.sqlite"))


def test_truncated_sqlite(tmp_path: Path) -> None:
    x = NsysExport()
    for i in range(2000):
        x.kernel(5, 0, 7, 100 + i * 10, 105 + i * 10, f"k{i}", launch=50)
    full = x.write(tmp_path / "full.sqlite").read_bytes()
    p = tmp_path / "cut.sqlite"
    p.write_bytes(full[: len(full) // 2])
    with pytest.raises(TraceFormatError, match="damaged"):
        read_nsys(p)


# ---------------------------------------------------------------------------------------------
# the shared real export (Nsight Systems 2026.2, 2 processes x 1 H100, NCCL SendRecv, no steps)


def _union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _length(iv: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in iv)


def _intersection_length(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def test_real_fsdp_export() -> None:
    if not REAL.is_file():
        pytest.skip(f"shared real nsys export not present at {REAL}")
    t = time.perf_counter()
    tl = read_nsys(REAL)
    print(f"read_nsys({REAL.name}): {time.perf_counter() - t:.3f} s, {len(tl)} events")
    assert [(i.rank, i.pid, i.device, i.rank_source) for i in tl.traces] == [
        (0, 144, 0, "process-order"),
        (1, 145, 1, "process-order"),
    ]
    assert all(i.format_version == "3.25.0" and i.clock == "unix" for i in tl.traces)
    assert all(i.backend == "nccl" for i in tl.traces)  # both ran ncclDevKernel_SendRecv
    res = analyze(REAL)
    timeline = load(REAL)
    assert res.steps["step"].tolist() == ["all", "all"]

    # Independent numbers: plain sqlite3 and the small union above, per process.
    con = sqlite3.connect(f"file:{REAL}?mode=ro", uri=True)
    for rank, pid in ((0, 144), (1, 145)):
        k = con.execute(
            "SELECT k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.shortName "
            "WHERE (k.globalPid >> 24) & 16777215 = ? AND k.start >= 0",
            (pid,),
        ).fetchall()
        mem = con.execute(
            "SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE (globalPid >> 24) & 16777215 = ? "
            "UNION ALL SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET "
            "WHERE (globalPid >> 24) & 16777215 = ?",
            (pid, pid),
        ).fetchall()
        comm = _union([(s, e) for s, e, n in k if "nccl" in n.lower()])
        compute = _union([(s, e) for s, e, n in k if "nccl" not in n.lower()])
        memory = _union(mem)
        busy = _union(comm + compute + memory)
        everything = [(s, e) for s, e, _ in k] + mem
        step = max(e for _, e in everything) - min(s for s, _ in everything)
        n_sendrecv = sum(1 for *_, n in k if n == "ncclDevKernel_SendRecv")
        assert n_sendrecv > 0

        ev = timeline.events
        mine = ev[(ev["rank"] == rank) & (ev["name"] == "ncclDevKernel_SendRecv")]
        assert len(mine) == n_sendrecv and set(mine["kind"]) == {"comm"}
        r = res.steps[res.steps["rank"] == rank].iloc[0]
        overlap = _intersection_length(compute, comm)
        assert (r.step_ns, r.compute_ns, r.comm_ns, r.memory_ns, r.overlap_ns) == (
            step,
            _length(compute),
            _length(comm),
            _length(memory),
            overlap,
        )
        assert r.exposed_comm_ns == _length(comm) - overlap
        assert r.idle_ns == step - _length(busy)
    con.close()
    assert np.isfinite(res.steps["overlap_ratio"].astype(float)).all()
