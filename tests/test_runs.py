"""Real runs as they come (issue 12): several GPUs in one process, traces that cannot be one run,
partial ranks, no step markers, custom communication kernels."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from builders import MS, gpu_timeline

from traceoverlap import analyze
from traceoverlap.core.errors import UsageError
from traceoverlap.core.model import Timeline, TraceInfo, concat_timelines, make_events

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _two_gpus_one_process() -> Timeline:
    """One process (rank 0) launching on two GPUs from one thread, ProfilerStep#1 [0, 100):
    GPU 0: compute [0,40), all-reduce [30,50) on stream 20;
    GPU 1: compute [0,20), all-reduce [60,80) on stream 21.
    Launches (host, correlation i+1) at 1 ns each."""
    acts = [
        ("gemm", 0, 7, 0, 40),
        (NCCL, 0, 20, 30, 50),
        ("gemm", 1, 8, 0, 20),
        (NCCL, 1, 21, 60, 80),
    ]
    n = len(acts)
    cats = ["annotation"] + ["runtime"] * n + ["kernel"] * n
    names = ["ProfilerStep#1"] + ["cudaLaunchKernel"] * n + [a[0] for a in acts]
    start = [0] + [1] * n + [a[3] for a in acts]
    end = [100] + [2] * n + [a[4] for a in acts]
    corr = [-1] + list(range(1, n + 1)) * 2
    device = [-1] * (n + 1) + [a[1] for a in acts]
    stream = [-1] * (n + 1) + [a[2] for a in acts]
    ev = make_events(
        len(cats),
        {
            "rank": 0,
            "pid": 42,
            "category": cats,
            "name": names,
            "start_ns": start,
            "end_ns": end,
            "correlation": corr,
            "device": device,
            "stream": stream,
            "tid": [1] * (n + 1) + [-1] * n,
            "lane": ["thread 1"] * (n + 1) + [f"stream {a[2]}" for a in acts],
        },
    )
    info = TraceInfo(
        path="two_gpus.json",
        format="kineto",
        rank=0,
        device_kind="gpu",
        pid=42,
        devices=("GPU-A", "GPU-B"),
    )
    return Timeline(ev, (info,))


def test_each_gpu_of_a_process_is_its_own_timeline() -> None:
    # per device: GPU 0 overlap [30,40) = 10 of comm 20 (ratio 0.5); GPU 1 overlap 0 of 20.
    # Unioned across the two devices (the old behaviour), the window would be [0,80) with compute
    # [0,40) and comm [30,50)+[60,80): one mixed row whose overlap belongs to neither GPU.
    res = analyze(_two_gpus_one_process())
    s = res.steps.set_index("device")
    assert list(res.steps["rank"]) == [0, 0] and sorted(s.index) == [0, 1]
    assert (s.loc[0, "compute_ns"], s.loc[0, "comm_ns"], s.loc[0, "overlap_ns"]) == (40, 20, 10)
    assert (s.loc[1, "compute_ns"], s.loc[1, "comm_ns"], s.loc[1, "overlap_ns"]) == (20, 20, 0)
    assert s.loc[0, "overlap_ratio"] == pytest.approx(0.5) and s.loc[1, "overlap_ratio"] == 0
    assert any("drove 2 GPUs" in n for n in res.notes)
    assert [t.device for t in res.traces] == [0, 1]
    assert set(res.summary.ranks) == {"0:0", "0:1"}


def _rank(rank: int, world: int | None, clock: str, shift: int = 0, path: str = "") -> Timeline:
    tl = gpu_timeline(
        [("gemm", 7, shift, shift + 10 * MS), (NCCL, 20, shift + 5 * MS, shift + 12 * MS)],
        [("ProfilerStep#1", shift, shift + 20 * MS)],
        launch_at=[shift + 1, shift + 1],
        rank=rank,
    )
    info = replace(
        tl.traces[0],
        world_size=world,
        clock=clock,
        path=path or f"rank{rank}.json",
        rank_source="distributedInfo",
    )
    return Timeline(tl.events, (info,))


def test_different_world_sizes_are_refused() -> None:
    tl = concat_timelines([_rank(0, 2, "unix"), _rank(1, 4, "unix")])
    with pytest.raises(UsageError, match="disagree on the world size"):
        analyze(tl)


def test_captures_far_apart_in_time_are_refused() -> None:
    # two unix-clock captures an hour apart cannot be one run (four unrelated exports look so)
    hour = 3600 * 1_000_000_000
    tl = concat_timelines([_rank(0, None, "unix"), _rank(1, None, "unix", shift=hour)])
    with pytest.raises(UsageError, match="do not overlap in time"):
        analyze(tl)


def test_partial_ranks_say_among_the_ranks_given() -> None:
    """Ranks 0 and 1 of a world of 128 (ms): rank 0's all-reduce [5,12) (7), rank 1's [8,12)
    (4) on the same clock: transfer 4, rank 0 waits 3 ([5,8), under its compute [0,10): so none
    of it is exposed). The latest to arrive is rank 1 - among the two given; the report must not
    call it the straggler as a fact."""
    r0 = _rank(0, 128, "unix")
    r1 = gpu_timeline(
        [("gemm", 7, 0, 10 * MS), (NCCL, 20, 8 * MS, 12 * MS)],
        [("ProfilerStep#1", 0, 20 * MS)],
        launch_at=[1, 1],
        rank=1,
    )
    r1 = Timeline(r1.events, (replace(r1.traces[0], world_size=128, clock="unix"),))
    res = analyze(concat_timelines([r0, r1]))
    c = res.collectives
    assert c is not None and c.partial and c.ranks_given == 2 and c.world_size == 128
    from traceoverlap.reporters.text import render

    text = render(res)
    assert "among the 2 ranks given of a world of 128" in text
    assert "straggler: rank" not in text
    assert any("world size 128, 2 rank traces given" in n for n in res.notes)
    row0 = res.steps.set_index("rank").loc[0]
    assert (row0["exposed_wait_ns"], row0["exposed_comm_ns"]) == (0, 2 * MS)
    assert c.per_rank.set_index("rank").loc[0, "wait_ns"] == 3 * MS


def test_custom_communication_kernels_are_known() -> None:
    # vLLM's custom all-reduce and a DeepEP dispatch count as communication by default
    names = [
        "void vllm::cross_device_reduce_1stage<float, 8>(...)",
        "void deep_ep::internode::dispatch<8>(...)",
        "c10d::symmetric_memory::one_shot_all_reduce_kernel<float>",
    ]
    for name in names:
        tl = gpu_timeline([("gemm", 7, 0, 10), (name, 20, 10, 30)], [("ProfilerStep#1", 0, 1)])
        assert analyze(tl).steps.iloc[0]["comm_ns"] == 20, name


def test_a_rank_of_a_world_without_communication_gets_a_hint() -> None:
    # a rank of a world of 8 whose "comm" kernel has a name no rule knows: under 1 % comm, and a
    # note names the kernel that looks like communication with the pattern to add
    tl = gpu_timeline(
        [("gemm", 7, 0, 100), ("my_team::all_gather_kernel", 20, 100, 150)],
        [("ProfilerStep#1", 0, 1)],
    )
    tl = Timeline(tl.events, (replace(tl.traces[0], world_size=8),))
    res = analyze(tl)
    assert res.steps.iloc[0]["comm_ns"] == 0
    note = next(n for n in res.notes if "look like communication" in n)
    assert "my_team::all_gather_kernel" in note and "--comm-pattern" in note


def test_no_markers_suggests_the_repeating_ranges() -> None:
    # four "step[DECODE bs=32]" host ranges and no ProfilerStep: one window 'all', and the note
    # suggests the regex that would make them steps
    tl = gpu_timeline([("gemm", 7, 0, 10)])
    ev = tl.events
    extra = make_events(
        4,
        {
            "category": "annotation",
            "name": ["step[DECODE bs=32]"] * 4,
            "start_ns": np.arange(4) * 100,
            "end_ns": np.arange(4) * 100 + 50,
            "tid": 1,
        },
    )
    from traceoverlap.core.model import concat_timelines as cat

    both = cat([Timeline(ev, tl.traces), Timeline(extra, tl.traces)])
    res = analyze(Timeline(both.events, tl.traces))
    assert res.steps.iloc[0]["step"] == "all"
    note = next(n for n in res.notes if "one window 'all'" in n)
    assert "step[" in note and "--step-regex '^step\\['" in note


def test_a_far_away_activity_does_not_break_the_packing() -> None:
    # 1,100 steps of one kernel each, plus one kernel whose clock glitched to ~1e16 ns (launched in
    # the last step) and one launched at 0 in the first: the grouped interval algebra packs each
    # step in its own slot, so one huge window costs nothing to the others (it used to fail with
    # "interval groups too wide to pack")
    n = 1_100
    kernels = [("k", 7, 1_000 * i + 10, 1_000 * i + 20) for i in range(n)]
    kernels.append(("glitch", 7, 10**16, 10**16 + 5))
    kernels.append(("early", 7, 0, 1))
    launch = [1_000 * i + 1 for i in range(n)] + [1_000 * (n - 1) + 2, 2]
    steps = [(f"ProfilerStep#{i}", 1_000 * i, 1_000 * i + 500) for i in range(n)]
    res = analyze(gpu_timeline(kernels, steps, launch_at=launch))
    s = res.steps.set_index("step")
    assert len(s) == n
    assert s.loc[str(n - 1), "step_ns"] == 10**16 + 5 - (1_000 * (n - 1) + 10)
    assert s.loc["0", "step_ns"] == 20 and s.loc["5", "step_ns"] == 10


def _cpu_rank(
    rank: int, comm: list[tuple[int, int]], shift: int = 0, step_end: int = 10_000
) -> Timeline:
    rows = [("annotation", "ProfilerStep#1", 0 + shift, step_end + shift, 1, "python")]
    rows += [
        ("annotation", "gloo:all_reduce", s + shift, e + shift, 2, "pt_gloo_runloop")
        for s, e in comm
    ]
    cat, name, start, end, tid, thread = (list(x) for x in zip(*rows, strict=True))
    ev = make_events(
        len(rows),
        {
            "rank": rank,
            "category": cat,
            "name": name,
            "start_ns": start,
            "end_ns": end,
            "tid": tid,
            "thread_name": thread,
        },
    )
    info = TraceInfo(
        path=f"r{rank}.json",
        format="kineto",
        rank=rank,
        clock="unix",
        world_size=128,
        rank_source="distributedInfo",
    )
    return Timeline(ev, (info,))


def test_order_matches_that_cannot_overlap_in_time_are_not_used() -> None:
    # two ranks of a 128-rank job whose captures began at different collectives: matched by
    # order, rank 1's n-th all-reduce is rank 0's (n+1)-th. The all-reduces are irregularly
    # spaced (rank 0 at 0, 1, 5, 6, 20 ms, each 100 us), so no single clock offset lines the
    # pairs up: end-time differences are 1, 4, 1, 14, 10 ms, median 4 ms (under the 10 ms unix
    # skew limit, so tried), which makes only pair 2 (1 ms vs 5 ms) share an instant; zero
    # offsets make none. So 1 consistent match; 4 are counted as inconsistent and not used.
    starts0 = [0, 1, 5, 6, 20]
    starts1 = [1, 5, 6, 20, 30]
    r0 = _cpu_rank(0, [(s * MS, s * MS + 100_000) for s in starts0], step_end=40 * MS)
    r1 = _cpu_rank(1, [(s * MS, s * MS + 100_000) for s in starts1], step_end=40 * MS)
    res = analyze(concat_timelines([r0, r1]))
    c = res.collectives
    assert c is not None
    assert (c.n_inconsistent, c.n_matched) == (4, 1)
    assert any("not consistent in time" in n for n in res.notes)
    assert (res.steps["exposed_wait_ns"] == 0).all()


def test_point_to_point_in_a_large_group_is_not_matched() -> None:
    # three GPU ranks each running a SendRecv kernel with no process group: a transfer pairs two
    # ranks and the trace does not say which, so none is matched across the three
    kern = [("gemm", 7, 0, 10 * MS), ("ncclDevKernel_SendRecv", 20, 5 * MS, 15 * MS)]
    ranks = []
    for r in range(3):
        tl = gpu_timeline(kern, [("ProfilerStep#1", 0, 20 * MS)], [1, 1], rank=r)
        ranks.append(Timeline(tl.events, (replace(tl.traces[0], clock="unix"),)))
    res = analyze(concat_timelines(ranks))
    assert res.collectives is not None and res.collectives.n_matched == 0
    assert any("point-to-point" in n for n in res.notes)
    # with exactly two ranks, the pair is matched
    res2 = analyze(concat_timelines(ranks[:2]))
    assert res2.collectives is not None and res2.collectives.n_matched == 1


def test_identical_notes_of_many_ranks_are_grouped() -> None:
    # 6 ranks without step markers: one note "ranks 0-5: no step markers ...", not six
    ranks = [gpu_timeline([("gemm", 7, 0, 10)], rank=r) for r in range(6)]
    res = analyze(concat_timelines(ranks))
    marker_notes = [n for n in res.notes if "no step markers" in n]
    assert len(marker_notes) == 1 and marker_notes[0].startswith("ranks 0-5: ")
