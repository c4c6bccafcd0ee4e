"""diagnosis.md §7: steps whose device work overlaps (pipelined input, a device running behind the
host). Every number is derived in the comments; times in ns."""

from __future__ import annotations

from builders import gpu_timeline

from traceoverlap import analyze

PARTS = [
    "compute_only_ns",
    "overlap_ns",
    "exposed_wait_ns",
    "exposed_transfer_ns",
    "memory_only_ns",
    "other_steps_ns",
    "idle_ns",
]


def test_other_steps_work_is_neither_idle_nor_lost():
    # Markers: step 1 [0, 100), step 2 [100, 200), step 3 [200, 300) on the host.
    # Step 1 launches A [0, 40) and A2 [150, 160) (launched at 0: its window is [0, 160)).
    # Step 2 launches B [60, 140) (launched at 100): a pipelined input stage that runs on the
    # device while step 1 is still running. Step 3 launches C [300, 310).
    # Step 1, window [0, 160) = 160: its own work A ∪ A2 = 40 + 10 = 50 (compute only);
    #   B covers [60, 140) = 80 of the window while step 1 has nothing there: other_steps 80;
    #   nothing at all ran in [40, 60) and [140, 150): idle 30. 50 + 80 + 30 = 160.
    #   lost = 160 - 50 - 80 = 30 = 18.75 % >= 10 % -> the largest lost part is idle: idle-bound
    #   idle 30 = 18.75 % (without §7 it would read idle 110 = 68.75 %).
    # Step 2, window [60, 140) = 80, all B: compute only 80, other 0, idle 0 -> compute-bound.
    # iteration_ns: marker start to next marker start: 100, 100, and None for the last.
    tl = gpu_timeline(
        [("A", 7, 0, 40), ("A2", 7, 150, 160), ("B", 8, 60, 140), ("C", 7, 300, 310)],
        [("ProfilerStep#1", 0, 100), ("ProfilerStep#2", 100, 200), ("ProfilerStep#3", 200, 300)],
        launch_at=[0, 0, 100, 200],
    )
    res = analyze(tl)
    rows = {int(r["step"]): r for r in res.steps.to_dict("records")}
    one, two, three = rows[1], rows[2], rows[3]
    assert (one["step_ns"], one["compute_only_ns"], one["other_steps_ns"], one["idle_ns"]) == (
        160,
        50,
        80,
        30,
    )
    assert one["bottleneck"] == "idle-bound" and "18.8%" in one["reason"]
    assert (two["step_ns"], two["other_steps_ns"], two["idle_ns"]) == (80, 0, 0)
    assert two["bottleneck"] == "compute-bound"
    for r in (one, two, three):
        assert sum(int(r[p]) for p in PARTS) == r["step_ns"]
    assert [one["iteration_ns"], two["iteration_ns"], three["iteration_ns"]] == [100, 100, None]
    # the note gives the overlapped time: 80 ns = 0.00 ms here, so look for its words
    assert any("other steps' work" in n for n in res.notes)


def test_no_overlap_no_other_steps():
    # Two steps one after the other: A [0, 40) in step 1, B [100, 130) in step 2; nothing of one
    # lies in the other's window: other_steps 0 everywhere and no note.
    tl = gpu_timeline(
        [("A", 7, 0, 40), ("B", 7, 100, 130)],
        [("ProfilerStep#1", 0, 100), ("ProfilerStep#2", 100, 200)],
        launch_at=[0, 100],
    )
    res = analyze(tl)
    assert res.steps["other_steps_ns"].tolist() == [0, 0]
    assert not any("other steps' work" in n for n in res.notes)


def test_mtia_dma_request_is_memory_placed_by_time():
    # MTIA records device DMA as kernel events named dma_request with no launch record. Step 1
    # [0, 100) launches gemm [0, 40); a dma_request [40, 70) has no launch: it is memory, and
    # goes to step 1 by its start (40 is inside the marker [0, 100)). Window [0, 70): compute 40,
    # memory only 30, idle 0; the note says how it was placed.
    from traceoverlap.core.model import Timeline

    tl = gpu_timeline(
        [("gemm", 7, 0, 40), ("dma_request", 9, 40, 70)], [("ProfilerStep#1", 0, 100)]
    )
    ev = tl.events
    drop = (ev["category"] == "runtime").to_numpy() & (ev["correlation"] == 2).to_numpy()
    res = analyze(Timeline(ev[~drop].reset_index(drop=True), tl.traces))
    (r,) = res.steps.to_dict("records")
    assert (r["step_ns"], r["compute_ns"], r["memory_only_ns"], r["idle_ns"]) == (70, 40, 30, 0)
    assert any("placed in steps by their start time" in n for n in res.notes)


def test_copy_launched_before_the_capture_is_in_no_step():
    # Issue 35 (metrics.md "Steps"). Steps 1 [0, 100) and 2 [100, 200) ms on the host; step 1
    # launches gemm at 10 (runs [50, 90)), step 2 launches gemm at 110 (runs [130, 170)); their
    # correlation ids are 1 and 2. A memcpy [20, 35) has correlation 0 and no launch record: 0 is
    # below every launch in the trace, it was launched before the capture began. Its GPU start
    # 20 lies in step 1's host range, but the device runs behind the host: it is an earlier
    # step's copy, in no step. Step 1 = [50, 90) = 40 ms (not [20, 90) = 70); step 2 =
    # [130, 170) = 40. The note counts 1 activity, 15.00 ms, launched before the capture.
    from traceoverlap.core.model import Timeline

    ms = 1_000_000
    tl = gpu_timeline(
        [("gemm", 7, 50 * ms, 90 * ms), ("gemm", 7, 130 * ms, 170 * ms)],
        [("ProfilerStep#1", 0, 100 * ms), ("ProfilerStep#2", 100 * ms, 200 * ms)],
        launch_at=[10 * ms, 110 * ms, 0],
        memcpy=[(7, 20 * ms, 35 * ms)],
    )
    ev = tl.events
    # the builder gave the memcpy correlation 3 and a launch row: drop the row, renumber it 0
    is_copy_launch = (ev["category"] == "runtime").to_numpy() & (ev["correlation"] == 3).to_numpy()
    ev = ev[~is_copy_launch].reset_index(drop=True)
    ev.loc[(ev["category"] == "memcpy").to_numpy(), "correlation"] = 0
    res = analyze(Timeline(ev, tl.traces))
    rows = {int(r["step"]): r for r in res.steps.to_dict("records")}
    assert (rows[1]["start_ns"], rows[1]["end_ns"], rows[1]["step_ns"]) == (
        50 * ms,
        90 * ms,
        40 * ms,
    )
    assert rows[1]["memory_ns"] == 0 and rows[2]["step_ns"] == 40 * ms
    (note,) = [n for n in res.notes if "no launch record" in n]
    assert note.startswith("rank 0: 1 GPU activities have no launch record")
    assert "15.00 ms of device time left out of every step" in note
    assert "1 launched before the capture began" in note
    assert res.unassigned == {"0": 1}
