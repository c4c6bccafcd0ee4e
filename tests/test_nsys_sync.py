"""nsys synchronization records (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION) and event records
(CUPTI_ACTIVITY_KIND_CUDA_EVENT): sync rows as Kineto's cuda_sync rows, stream waits resolved to
the stream and record call they wait on, and the what-if graph reading them (docs/whatif.md,
"Cross-stream sync, read")."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import numpy as np
from conftest import real_trace

sys.path.insert(0, str(Path(__file__).parent))
from nsys_writer import (  # noqa: E402
    NO_ID,
    SYNC_CONTEXT,
    SYNC_EVENT,
    SYNC_STREAM,
    SYNC_STREAM_WAIT,
    NsysExport,
)

from traceoverlap.readers.nsys import nsys_processes, read_nsys  # noqa: E402
from traceoverlap.whatif.scenarios import load_graph, what_if  # noqa: E402

US = 1_000
PID, DEV = 100, 1
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
CUDA_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"


def _export(
    path: Path, records: bool = True, wait_sid: int | None = 900, sids: bool = True
) -> Path:
    """One process on GPU 1, times in µs, correlation ids in call order (µs of the call):

    - 101 cudaEventRecord(event 5) on stream 13 at 5 (eventSyncId 899)
    - 102 gemm launched at 10 onto stream 7, runs [100, 300)
    - 103 cudaEventRecord(event 5) on stream 7 at 20 (eventSyncId 900)
    - 104 cudaStreamWaitEvent(stream 20, event 5) at 30 (``wait_sid``)
    - 105 all-reduce launched at 40 onto stream 20, runs [305, 500)
    - 106 tail launched at 50 onto stream 7, runs [310, 400)
    - 107 cudaEventRecord(event 5) on stream 13 at 60 (eventSyncId 901): after the wait
    - 108 cudaStreamSynchronize(stream 7) [70, 502); 109 cudaEventSynchronize(event 5) [503, 504);
      110 cudaDeviceSynchronize [505, 506)

    Every synchronization record says deviceId 0, as the real FSDP export's do (its second
    process ran on device 1). ``records``: write the event records; ``sids``: eventSyncId on
    them (None everywhere otherwise)."""
    x = NsysExport(session_start_utc_ns=None)
    x.process(PID)
    x.nvtx(PID, 0, 600 * US, "ProfilerStep#1")

    def sid(v: int | None) -> int | None:
        return v if sids else None

    def call(name: str, t0: int, t1: int) -> int:
        corr = x.next_correlation(PID)
        x.runtime(PID, t0 * US, t1 * US, name, corr)
        return corr

    rec: list[tuple[int, int, int | None]] = []  # (stream, correlation, eventSyncId)
    rec.append((13, call("cudaEventRecord_v3020", 5, 6), sid(899)))
    x.kernel(PID, DEV, 7, 100 * US, 300 * US, "gemm", launch=10 * US)
    rec.append((7, call("cudaEventRecord_v3020", 20, 21), sid(900)))
    wait = call("cudaStreamWaitEvent_v3020", 30, 32)
    x.sync(PID, 20, 31 * US, 32 * US, SYNC_STREAM_WAIT, wait, 5, sid(wait_sid))
    x.kernel(PID, DEV, 20, 305 * US, 500 * US, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 40 * US)
    x.kernel(PID, DEV, 7, 310 * US, 400 * US, "tail", launch=50 * US)
    rec.append((13, call("cudaEventRecord_v3020", 60, 61), sid(901)))
    ssync = call("cudaStreamSynchronize_v3020", 70, 502)
    x.sync(PID, 7, 70 * US, 501 * US, SYNC_STREAM, ssync)
    esync = call("cudaEventSynchronize_v3020", 503, 504)
    x.sync(PID, NO_ID, 503 * US, 504 * US, SYNC_EVENT, esync, 5, sid(900))
    csync = call("cudaDeviceSynchronize_v3020", 505, 506)
    x.sync(PID, NO_ID, 505 * US, 506 * US, SYNC_CONTEXT, csync)
    if records:
        for stream, corr, s in rec:
            x.cuda_event(PID, DEV, stream, corr, 5, s)
    return x.write(path)


def _syncs(path: Path):  # type: ignore[no-untyped-def]
    ev = read_nsys(path).events
    return ev, ev[(ev["category"] == "sync").to_numpy()].set_index("correlation")


def test_sync_records_are_sync_rows_named_as_kineto_names_them(tmp_path: Path) -> None:
    ev, s = _syncs(_export(tmp_path / "s.sqlite"))
    # one row per record, on the GPU whose stream ran the activity (device 1, not the records'
    # deviceId 0); the event and device syncs name no stream: -1, on the process's only GPU
    assert s["name"].astype(str).to_dict() == {
        104: "Stream Wait Event",
        108: "Stream Sync",
        109: "Event Sync",
        110: "Context Sync",
    }
    assert s["stream"].to_dict() == {104: 20, 108: 7, 109: -1, 110: -1}
    assert (s["device"] == DEV).all() and (s["tid"] == -1).all()
    assert s.loc[108, "start_ns"] == 70 * US and s.loc[108, "end_ns"] == 501 * US
    # the wait (104) waits on the record of event 5 with eventSyncId 900: call 103, on stream 7
    # (not 101, the same event's earlier record, nor 107, recorded after the wait)
    assert (s.loc[104, "wait_stream"], s.loc[104, "wait_corr"]) == (7, 103)
    others = ev[(ev["correlation"] != 104).to_numpy() | (ev["category"] != "sync").to_numpy()]
    assert (others[["wait_stream", "wait_corr"]] == -1).all().all()
    # still one rank: the records' deviceId 0 makes no group of its own
    assert [t.rank for t in read_nsys(tmp_path / "s.sqlite").traces] == [0]


def test_event_sync_id_names_the_record_instance(tmp_path: Path) -> None:
    # the wait says eventSyncId 899: the record 101 on stream 13, though 103 came later
    _, s = _syncs(_export(tmp_path / "s.sqlite", wait_sid=899))
    assert (s.loc[104, "wait_stream"], s.loc[104, "wait_corr"]) == (13, 101)


def test_without_event_sync_ids_the_latest_record_before_the_wait(tmp_path: Path) -> None:
    # no eventSyncId anywhere: of the records of event 5 (calls 101, 103, 107), the last whose
    # call precedes the wait's (104) is 103, on stream 7
    _, s = _syncs(_export(tmp_path / "s.sqlite", sids=False))
    assert (s.loc[104, "wait_stream"], s.loc[104, "wait_corr"]) == (7, 103)


def test_recorded_stream_waits_give_read_edges(tmp_path: Path) -> None:
    # the wait makes the all-reduce (the first activity launched onto stream 20 after the wait
    # call at 30) wait for gemm (the last launched onto stream 7 before the record call at 20):
    # one edge gemm -> all-reduce, read, as Kineto's cuda_sync rows give it; tail (launched at
    # 50, after the record) is no producer
    g = load_graph(_export(tmp_path / "s.sqlite"))
    names = [g.names[g.name[i]] for i in range(g.name.size)]
    edges = {(names[s], names[d]) for s, d in zip(g.src, g.dst, strict=True)}
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    assert ("gemm", nccl) in edges and ("tail", nccl) not in edges
    assert g.guessed.size == 0 or not g.guessed.any()
    assert any("1 cross-stream sync edge(s) read from 1 stream wait(s)" in n for n in g.notes)
    assert not any("stream wait(s) recorded (sync rows) without" in n for n in g.notes)
    w = what_if(g, ["replay"])
    assert not any("guessed" in n for n in w.notes)
    # the identity replay reproduces the step (ProfilerStep#1, 600 µs)
    assert w.max_error_ratio == 0.0


def test_without_event_records_the_edges_stay_guessed(tmp_path: Path) -> None:
    # nsys's default capture: no CUDA_EVENT table. The wait row is kept (wait_stream -1: the
    # table holds no such column of its own), no reader note (nothing is wrong with the file),
    # and the what-if says 1 wait was not read and guesses the edge from the wait call
    tl = read_nsys(_export(tmp_path / "s.sqlite", records=False))
    ev = tl.events
    assert int((ev["category"] == "sync").sum()) == 4
    assert (ev["wait_stream"] == -1).all()
    assert not any("stream wait" in n for t in tl.traces for n in t.notes)
    g = load_graph(tmp_path / "s.sqlite")
    assert any(n.startswith("rank 0: 1 stream wait(s) recorded (sync rows)") for n in g.notes)
    assert g.guessed.any()


def _alter(path: Path, *sql: str) -> Path:
    con = sqlite3.connect(path)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()
    return path


def test_an_older_schema_with_deprecated_sync_type(tmp_path: Path) -> None:
    # older reports: the type in deprecatedSyncType (syncType absent), no eventSyncId or
    # contextId on either table: the wait resolves to the latest record before it (103, stream 7)
    p = _alter(
        _export(tmp_path / "s.sqlite"),
        f"UPDATE {SYNC} SET deprecatedSyncType = syncType",
        f"ALTER TABLE {SYNC} DROP COLUMN syncType",
        f"ALTER TABLE {SYNC} DROP COLUMN eventSyncId",
        f"ALTER TABLE {SYNC} DROP COLUMN contextId",
        f"ALTER TABLE {CUDA_EVENT} DROP COLUMN eventSyncId",
        f"ALTER TABLE {CUDA_EVENT} DROP COLUMN contextId",
    )
    _, s = _syncs(p)
    assert s.loc[104, "name"] == "Stream Wait Event" and s.loc[108, "name"] == "Stream Sync"
    assert (s.loc[104, "wait_stream"], s.loc[104, "wait_corr"]) == (7, 103)


def test_tables_lacking_columns_are_skipped_with_a_note(tmp_path: Path) -> None:
    p = _alter(_export(tmp_path / "s.sqlite"), f"ALTER TABLE {SYNC} DROP COLUMN streamId")
    tl = read_nsys(p)
    assert not (tl.events["category"] == "sync").any()
    assert any(f"Table {SYNC} lacks column(s) streamId" in n for n in tl.traces[0].notes)
    # event records without eventId: the waits stay unresolved, said once
    p = _alter(_export(tmp_path / "e.sqlite"), f"ALTER TABLE {CUDA_EVENT} DROP COLUMN eventId")
    tl = read_nsys(p)
    assert (tl.events["wait_stream"] == -1).all()
    assert any(f"Table {CUDA_EVENT} lacks column(s) eventId" in n for n in tl.traces[0].notes)


def test_an_export_without_sync_tables_reads_as_before(tmp_path: Path) -> None:
    with_syncs = read_nsys(_export(tmp_path / "s.sqlite")).events
    bare = read_nsys(_alter(tmp_path / "s.sqlite", f"DROP TABLE {SYNC}")).events
    assert not (bare["category"] == "sync").any()
    kept = with_syncs[(with_syncs["category"] != "sync").to_numpy()].reset_index(drop=True)
    cols = ["category", "name", "start_ns", "end_ns", "correlation", "stream"]
    assert kept[cols].astype(str).equals(bare[cols].astype(str))


def test_the_real_fsdp_export() -> None:
    # fsdp_2gpu_h100: 133 event syncs (cudaEventQuery), 200 stream waits, 33 stream syncs
    # (sqlite3: SELECT syncType, count(*) ... GROUP BY 1), and no event records: no wait is
    # resolved. Per process (globalPid): 98 waits on the device-0 process (streams 7, 24, 28,
    # 153: 32 + 17 + 17 + 32), 102 on the device-1 one (15, 32, 36, 161: 34 + 17 + 17 + 34)
    path = real_trace("nsys/fsdp_2gpu_h100.sqlite")
    tl = read_nsys(path)
    ev = tl.events
    s = ev[(ev["category"] == "sync").to_numpy()]
    counts = s["name"].astype(str).value_counts().to_dict()
    assert counts == {"Stream Wait Event": 200, "Event Sync": 133, "Stream Sync": 33}
    assert (ev["wait_stream"] == -1).all() and (ev["wait_corr"] == -1).all()
    # every record sits on its process's GPU although its deviceId says 0 throughout
    waits = s[(s["name"] == "Stream Wait Event").to_numpy()]
    assert waits.groupby("device").size().to_dict() == {0: 98, 1: 102}
    assert len(tl.traces) == 2
    # the per-rank map's one-process reads give each process's share
    assert nsys_processes(path) == [144, 145]
    for pid, rank, n in ((144, 0, 98), (145, 1, 102)):
        part = read_nsys(path, process=pid).events
        w = part[((part["category"] == "sync") & (part["name"] == "Stream Wait Event")).to_numpy()]
        assert (len(w), set(w["rank"]), set(w["device"])) == (n, {rank}, {rank})
    g = load_graph(path)
    for rank, n in ((0, 98), (1, 102)):
        assert any(x.startswith(f"rank {rank}: {n} stream wait(s) recorded") for x in g.notes)
    assert np.unique(s["rank"]).tolist() == [0, 1]


def test_a_process_driving_two_gpus_places_records_by_stream(tmp_path: Path) -> None:
    # one process, kernels on GPU 0 (stream 7) and GPU 1 (stream 15): two ranks, (pid, 0) -> 0
    # and (pid, 1) -> 1. A stream sync of stream 15 that says deviceId 0 goes to GPU 1 (its
    # stream's), a context sync (no stream) to its deviceId 0, one whose deviceId 5 is no GPU of
    # the process is not kept
    x = NsysExport()
    x.process(PID)
    x.nvtx(PID, 0, 600 * US, "ProfilerStep#1")
    x.kernel(PID, 0, 7, 100 * US, 200 * US, "gemm", launch=10 * US)
    x.kernel(PID, 1, 15, 100 * US, 200 * US, "gemm", launch=20 * US)
    x.sync(PID, 15, 210 * US, 220 * US, SYNC_STREAM, 501, device=0)
    x.sync(PID, NO_ID, 230 * US, 240 * US, SYNC_CONTEXT, 502, device=0)
    x.sync(PID, NO_ID, 250 * US, 260 * US, SYNC_CONTEXT, 503, device=5)
    tl = read_nsys(x.write(tmp_path / "two.sqlite"))
    s = tl.events[(tl.events["category"] == "sync").to_numpy()].set_index("correlation")
    assert sorted(t.rank for t in tl.traces) == [0, 1]
    assert s["device"].to_dict() == {501: 1, 502: 0}
    assert s["rank"].to_dict() == {501: 1, 502: 0}


def _earlier_event(path: Path, records: bool) -> Path:
    """µs: all-reduce AR1 launched at 10 onto stream 20, runs [100, 200); cudaEventRecord(event
    9) on stream 20 at 15; AR2 launched at 20 onto stream 20, runs [205, 400);
    cudaStreamWaitEvent(stream 7, event 9) at 30; gemm launched at 40 onto stream 7, runs
    [210, 300). The compute stream waits for AR1's event, not for AR2 (which it overlaps)."""
    x = NsysExport()
    x.process(PID)
    x.nvtx(PID, 0, 500 * US, "ProfilerStep#1")
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    x.kernel(PID, DEV, 20, 100 * US, 200 * US, nccl, launch=10 * US)
    rec = x.next_correlation(PID)
    x.runtime(PID, 15 * US, 16 * US, "cudaEventRecord_v3020", rec)
    x.kernel(PID, DEV, 20, 205 * US, 400 * US, nccl, launch=20 * US)
    wait = x.next_correlation(PID)
    x.runtime(PID, 30 * US, 31 * US, "cudaStreamWaitEvent_v3020", wait)
    x.sync(PID, 7, 30 * US, 31 * US, SYNC_STREAM_WAIT, wait, 9, 77)
    x.kernel(PID, DEV, 7, 210 * US, 300 * US, "gemm", launch=40 * US)
    if records:
        x.cuda_event(PID, DEV, 20, rec, 9, 77)
    return x.write(path)


def test_a_read_edge_where_the_guess_is_wrong(tmp_path: Path) -> None:
    # read: the record (call at 15) follows AR1's launch (10) and precedes AR2's (20), so gemm
    # waits for AR1 (ends 200, gemm starts 210: the edge holds with 10 µs to spare). The guess
    # (the last communication launched before the wait call, AR2) says gemm waits for AR2,
    # which ends at 400, 190 µs after gemm started: beyond the 10 µs tolerance, dropped, and
    # gemm is tied to no collective at all
    g = load_graph(_earlier_event(tmp_path / "r.sqlite", records=True))
    pairs = {(int(g.start_ns[s]), int(g.start_ns[d])) for s, d in zip(g.src, g.dst, strict=True)}
    assert (100 * US, 210 * US) in pairs and (205 * US, 210 * US) not in pairs
    assert g.guessed.size == 0 or not g.guessed.any()
    assert what_if(g, ["replay"]).max_error_ratio == 0.0
    h = load_graph(_earlier_event(tmp_path / "b.sqlite", records=False))
    w = what_if(h, ["replay"])
    assert any("1 contradicted by more dropped" in n for n in w.notes)
