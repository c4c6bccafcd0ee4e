"""Per-step metrics on hand-built timelines; every expected number is derived in a comment."""

import pandas as pd
import pytest
from builders import MS, cpu_timeline, gpu_timeline

from traceoverlap import AnalyzeOptions, Thresholds, analyze

NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def _row(result, step=None):
    df = result.steps
    if step is not None:
        df = df[df["step"] == str(step)]  # step labels are a string column
    assert len(df) == 1
    return df.iloc[0]


def test_exercise_1_bucketed_backward():
    # metrics.md exercise: 10 layers x 5 ms backward (stream 7), buckets of two layers; bucket b's
    # 6 ms all-reduce (stream 20) starts when its 2nd layer ends (10, 20, 30, 40, 50 ms), no queueing
    # since 6 ms < 10 ms. Backward ends at 50, last all-reduce [50, 56).
    # step = 56; compute = 50; comm = 5 x 6 = 30; overlap = 4 x 6 = 24 (the first four buckets lie
    # under compute), exposed = 6, ratio = 24/30 = 0.8, idle = 56 - |B| = 56 - 56 = 0,
    # ideal = 56 - 6 + max(0, 30 - 50) = 50, speedup = 56/50 = 1.12; exposed 6/56 = 10.7 % >= 10 %
    # -> exposed-communication. Sequential would be 50 + 30 = 80.
    kernels = [(f"bwd{i}", 7, i * 5 * MS, (i + 1) * 5 * MS) for i in range(10)]
    kernels += [(NCCL, 20, (2 * b + 2) * 5 * MS, (2 * b + 2) * 5 * MS + 6 * MS) for b in range(5)]
    r = _row(analyze(gpu_timeline(kernels, steps=[("ProfilerStep#7", 0, MS)])))
    assert r["step"] == "7"
    assert (r.step_ns, r.compute_ns, r.comm_ns, r.overlap_ns, r.exposed_comm_ns) == (
        56 * MS,
        50 * MS,
        30 * MS,
        24 * MS,
        6 * MS,
    )
    assert r.overlap_ratio == pytest.approx(0.80)
    assert (r.idle_ns, r.ideal_ns, r.memory_ns) == (0, 50 * MS, 0)
    assert r.potential_speedup == pytest.approx(1.12)
    assert r.bottleneck == "exposed-communication"
    assert "6.00 ms" in r.reason and "10.7%" in r.reason


def test_exercise_1_sequential_is_80ms():
    # same work, all-reduces after backward back to back: [50,56) ... [74,80): step 80, overlap 0,
    # exposed 30 = 37.5 % of step -> exposed-communication; ideal = 80 - 30 + 0 = 50.
    kernels = [(f"bwd{i}", 7, i * 5 * MS, (i + 1) * 5 * MS) for i in range(10)]
    kernels += [(NCCL, 20, 50 * MS + b * 6 * MS, 56 * MS + b * 6 * MS) for b in range(5)]
    r = _row(analyze(gpu_timeline(kernels, steps=[("ProfilerStep#1", 0, MS)])))
    assert (r.step_ns, r.overlap_ns, r.exposed_comm_ns, r.ideal_ns) == (
        80 * MS,
        0,
        30 * MS,
        50 * MS,
    )
    assert r.overlap_ratio == 0.0


def test_exercise_2_communication_bound():
    # compute [0,80), comm [20,140): step 140, compute 80, comm 120, overlap [20,80) = 60,
    # ratio 60/120 = 0.5, exposed 60, idle 0, ideal = 140 - 60 + max(0, 120 - 80) = 120,
    # comm 120 > compute 80 -> communication-bound.
    kernels = [("gemm", 7, 0, 80 * MS), (NCCL, 20, 20 * MS, 140 * MS)]
    r = _row(analyze(gpu_timeline(kernels, steps=[("ProfilerStep#2", 0, MS)])))
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
    assert r.potential_speedup == pytest.approx(140 / 120)


def test_no_comm_gives_null_ratio_and_idle_bound():
    # kernels [0,10) and [30,40) ms: step 40, compute 20, busy 20, idle 20 = 50 % >= 20 % -> idle-bound;
    # no comm -> overlap_ratio null (<NA>: not 0, not NaN); exposed 0; ideal 40; speedup 1.0
    r = _row(
        analyze(
            gpu_timeline(
                [("a", 7, 0, 10 * MS), ("b", 7, 30 * MS, 40 * MS)], steps=[("ProfilerStep#0", 0, 1)]
            )
        )
    )
    assert r.overlap_ratio is pd.NA
    assert (r.idle_ns, r.exposed_comm_ns, r.ideal_ns) == (20 * MS, 0, 40 * MS)
    assert r.bottleneck == "idle-bound"
    assert r.potential_speedup == pytest.approx(1.0)


def test_memory_counts_as_busy_not_compute():
    # gemm [0,10), memcpy [10,14), nccl [12,15): step 15, compute 10, memory 4, comm 3,
    # overlap with compute 0 -> exposed 3 (20 % of step) ; busy = [0,15) -> idle 0.
    # comm 3 <= compute 10, exposed 20 % >= 10 % -> exposed-communication
    r = _row(
        analyze(
            gpu_timeline(
                [("gemm", 7, 0, 10 * MS), (NCCL, 20, 12 * MS, 15 * MS)],
                steps=[("ProfilerStep#0", 0, 1)],
                memcpy=[(7, 10 * MS, 14 * MS)],
            )
        )
    )
    assert (r.step_ns, r.compute_ns, r.memory_ns, r.comm_ns, r.exposed_comm_ns, r.idle_ns) == (
        15 * MS,
        10 * MS,
        4 * MS,
        3 * MS,
        3 * MS,
        0,
    )
    assert r.bottleneck == "exposed-communication"


def test_thresholds_override():
    # same as above: compute only [0,10) = 10, overlap 0, so the device did not compute for
    # 15 - 10 = 5 ms = 33.3 % of the step: >= 10 % by default (exposed-communication), but
    # < 40 % with lost_ratio 0.4 -> compute-bound
    tl = gpu_timeline(
        [("gemm", 7, 0, 10 * MS), (NCCL, 20, 12 * MS, 15 * MS)],
        steps=[("ProfilerStep#0", 0, 1)],
        memcpy=[(7, 10 * MS, 14 * MS)],
    )
    assert _row(analyze(tl)).bottleneck == "exposed-communication"
    r = _row(analyze(tl, AnalyzeOptions(thresholds=Thresholds(lost_ratio=0.4))))
    assert r.bottleneck == "compute-bound"
    assert "5.00 ms = 33.3%" in r.reason


def test_gpu_work_goes_to_the_step_of_its_launch():
    # markers step 1 [0,10) and step 2 [10,20) (host time). Kernel A launched at 5 runs [30,40);
    # kernel B launched at 15 runs [38,50): A belongs to step 1, B to step 2 even though they overlap
    # in GPU time. Kernel C launched at 25 (no marker) is outside every step.
    tl = gpu_timeline(
        [("A", 7, 30, 40), ("B", 7, 38, 50), ("C", 7, 60, 70)],
        steps=[("ProfilerStep#1", 0, 10), ("ProfilerStep#2", 10, 20)],
        launch_at=[5, 15, 25],
    )
    res = analyze(tl)
    s1, s2 = _row(res, 1), _row(res, 2)
    assert (s1.step_ns, s1.compute_ns) == (10, 10)  # window [30,40)
    assert (s2.step_ns, s2.compute_ns) == (12, 12)  # window [38,50)
    assert any("1 GPU activities were launched outside every step marker" in n for n in res.notes)


def test_gpu_activity_without_launch_is_counted_and_noted():
    tl = gpu_timeline([("A", 7, 0, 10), ("B", 7, 10, 20)], steps=[("ProfilerStep#1", 0, 100)])
    ev = tl.events.copy()
    # break B's launch: its runtime row now has another correlation id
    runtime_b = ev.index[(ev["category"] == "runtime") & (ev["correlation"] == 2)][0]
    ev.loc[runtime_b, "correlation"] = 99
    from traceoverlap.core.model import Timeline

    res = analyze(Timeline(ev, tl.traces))
    assert res.unassigned == {"0": 1}
    assert any("1 GPU activities have no launch record" in n for n in res.notes)
    assert _row(res).compute_ns == 10


def test_no_markers_gives_one_window_all():
    # kernels [5,10) and [20,30): window [5,30) = 25, compute 15, idle 10
    res = analyze(gpu_timeline([("A", 7, 5, 10), ("B", 7, 20, 30)]))
    r = _row(res)
    assert r.step == "all" and (r.step_ns, r.compute_ns, r.idle_ns) == (25, 15, 10)
    assert any("one window 'all'" in n for n in res.notes)


def test_cpu_timeline_gloo_clipped_to_step():
    # CPU run: step marker [100, 200). Main-thread cpu_ops: aten::mm [90,150) (clipped to [100,150)),
    # aten::add nested [120,130) (inside mm: union unchanged), c10d::allreduce_ [150,155) (excluded:
    # launches comm). gloo thread: gloo:all_reduce [140,180) (comm), a cpu_op on the gloo thread
    # [160,170) (never compute). The main thread is between ops from 155 (the launch returned)
    # and its next host boundary is the step range's end at 200, 20 ns after the gloo work ends:
    # within the 1 ms floor of the blocked rule (diagnosis.md §8), so it was blocked on it,
    # [max(155, 140), 200) = [155, 200), and that time is communication where gloo does not
    # cover it (§11): [180, 200). compute = [100,150) = 50, comm = [140,200) = 60, overlap
    # [140,150) = 10, exposed 50, busy = [100,200) = 100, idle 0, ideal = 100 - 50 + (60 - 50)
    # = 60. Parts: compute only [100,140) = 40, overlap 10, exposed 50: not computing 50 %; the
    # largest lost part is exposed transfer (50, one rank) and comm 60 > compute 50 ->
    # communication-bound. Cause: the last compute start is 120 (aten::add), so every exposed ns
    # in [150,200) has no compute starting after it: tail 50.
    tl = cpu_timeline(
        [
            ("annotation", "ProfilerStep#3", "", 100, 200),
            ("cpu_op", "aten::mm", "", 90, 150),
            ("cpu_op", "aten::add", "", 120, 130),
            ("cpu_op", "c10d::allreduce_", "", 150, 155),
            ("annotation", "gloo:all_reduce", "pt_gloo_runloop", 140, 180),
            ("cpu_op", "aten::copy_", "pt_gloo_runloop", 160, 170),
        ]
    )
    r = _row(analyze(tl))
    assert r.step == "3"
    assert (
        r.step_ns,
        r.compute_ns,
        r.comm_ns,
        r.overlap_ns,
        r.exposed_comm_ns,
        r.idle_ns,
        r.ideal_ns,
    ) == (
        100,
        50,
        60,
        10,
        50,
        0,
        60,
    )
    assert r.bottleneck == "communication-bound"
    assert (r.compute_only_ns, r.memory_only_ns, r.exposed_tail_ns) == (40, 0, 50)


def test_cpu_comm_call_inside_a_compute_op_is_not_compute():
    # A custom autograd Function (`_AllToAll`, a cpu_op [10,1100) on the main thread) makes a
    # blocking all-to-all: it launches `c10d::alltoall_base_` [20,25), the gloo worker runs
    # `gloo:all_to_all` [22,1022), the main thread waits (no event: a gap) and resumes with
    # `aten::cat` [1030,1040). Step marker [0,2000); `aten::empty` [12,15) before the launch.
    # Main-thread boundaries around the comm's end 1022: the last before it is 25 (c10d's end,
    # an op return), the next 1030 (cat's start): 8 ns, within 1 % of 1000 (and the 1 ms
    # floor) -> blocked wait [max(25, 22), 1030). The lane's communication calls: [20,25) u
    # [25,1030) = [20,1030). compute = [10,1100) - [20,1030) = [10,20) u [1030,1100) = 80 (not
    # 1090: the wait is no compute). comm (diagnosis.md §11) = gloo [22,1022) u the calls' time
    # it does not cover, [20,22) (the launch) and [1022,1030) (the wake-up) = [20,1030) = 1010;
    # overlap 0, exposed 1010; busy [10,1100) = 1090, idle 910. Causes: the last compute start
    # is 1030 -> tail zone [1030,2000), no exposed there; every exposed ns lies in the thread's
    # communication calls [20,1030) -> dependency 1010, host 0.
    tl = cpu_timeline(
        [
            ("annotation", "ProfilerStep#1", "", 0, 2000),
            ("cpu_op", "_AllToAll", "", 10, 1100),
            ("cpu_op", "aten::empty", "", 12, 15),
            ("cpu_op", "c10d::alltoall_base_", "", 20, 25),
            ("annotation", "gloo:all_to_all", "pt_gloo_runloop", 22, 1022),
            ("cpu_op", "aten::cat", "", 1030, 1040),
        ]
    )
    r = _row(analyze(tl))
    assert (r.step_ns, r.compute_ns, r.comm_ns, r.overlap_ns, r.exposed_comm_ns, r.idle_ns) == (
        2000,
        80,
        1010,
        0,
        1010,
        910,
    )
    assert r.compute_only_ns + r.overlap_ns + r.exposed_comm_ns + r.idle_ns == r.step_ns
    assert (r.exposed_tail_ns, r.exposed_dependency_ns, r.exposed_host_ns) == (0, 1010, 0)


def test_cpu_gap_inside_a_leaf_op_stays_compute():
    # An async all-reduce [5,1000) ends while the main thread is inside a leaf op `aten::mm`
    # [10,1002) (no child op): the thread computes, it does not wait, although mm ends 2 ns
    # (<= 1 % of 995) after the comm's end. The last boundary before 1000 is mm's start, not an
    # op's return -> no blocked wait. Calls: `c10d::allreduce_` [2,4), outside every compute op
    # and every gloo activity: communication too (diagnosis.md §11).
    # compute = [10,1002) = 992, comm = [2,4) u [5,1000) = 997, overlap [10,1000) = 990,
    # exposed 7.
    tl = cpu_timeline(
        [
            ("annotation", "ProfilerStep#1", "", 0, 2000),
            ("cpu_op", "c10d::allreduce_", "", 2, 4),
            ("annotation", "gloo:all_reduce", "pt_gloo_runloop", 5, 1000),
            ("cpu_op", "aten::mm", "", 10, 1002),
        ]
    )
    r = _row(analyze(tl))
    assert (r.compute_ns, r.comm_ns, r.overlap_ns, r.exposed_comm_ns) == (992, 997, 990, 7)


def test_step_regex_and_range_filter():
    # user ranges "train_step" (no number): labelled by ordinal 0, 1, 2; --steps 1-2 keeps two
    tl = cpu_timeline(
        [("annotation", "train_step", "", i * 100, i * 100 + 50) for i in range(3)]
        + [("cpu_op", "aten::mm", "", i * 100, i * 100 + 10) for i in range(3)]
    )
    res = analyze(tl, AnalyzeOptions(step_regex="^train_step", steps="1-2"))
    assert res.steps["step"].tolist() == ["1", "2"]
    assert res.steps["compute_ns"].tolist() == [10, 10]
    # each step: window 50, compute 10, idle 40 (80 %) -> idle-bound
    assert set(res.steps["bottleneck"]) == {"idle-bound"}


def test_user_comm_pattern():
    # a custom all-gather kernel without "nccl" in its name becomes comm with --comm-pattern
    tl = gpu_timeline(
        [("gemm", 7, 0, 10), ("myAllGatherKernel", 9, 5, 15)], steps=[("ProfilerStep#0", 0, 1)]
    )
    assert _row(analyze(tl)).comm_ns == 0
    r = _row(analyze(tl, AnalyzeOptions(comm_patterns=["AllGather"])))
    # comm [5,15) = 10, overlap [5,10) = 5
    assert (r.comm_ns, r.overlap_ns) == (10, 5)


def test_one_options_object_reused():
    # the same options (patterns given as a generator) analyse two timelines alike: comm
    # [5,15) = 10 and overlap [5,10) = 5 each time, as above; no options = every default
    opts = AnalyzeOptions(comm_patterns=(p for p in ["AllGather"]))
    tl = gpu_timeline(
        [("gemm", 7, 0, 10), ("myAllGatherKernel", 9, 5, 15)], steps=[("ProfilerStep#0", 0, 1)]
    )
    for _ in range(2):
        r = _row(analyze(tl, opts))
        assert (r.comm_ns, r.overlap_ns) == (10, 5)
    assert analyze(tl).steps.equals(analyze(tl, AnalyzeOptions()).steps)


def test_summary_median_and_worst_step():
    # steps with exposed comm 0, 4, 2 (ms): worst = step 2 (4 ms); median step time of 10, 14, 12 = 12
    kernels, steps, launch = [], [], []
    for i, exp in enumerate([0, 4, 2]):
        base = i * 100 * MS
        steps.append((f"ProfilerStep#{i + 1}", base, base + MS))
        kernels += [
            ("gemm", 7, base, base + 10 * MS),
            (NCCL, 20, base + 10 * MS - 0, base + 10 * MS + exp * MS),
        ]
        launch += [base, base]
    res = analyze(gpu_timeline(kernels, steps=steps, launch_at=launch))
    run = res.summary.run
    assert run.worst_step is not None
    assert run.worst_step.step == 2 and run.worst_step.exposed_comm_ns == 4 * MS
    assert run.median("step_ns") == 12 * MS
    # aggregate overlap ratio: total overlap 0 / total comm 6 ms = 0.0 ; step 1 has no comm -> None
    assert run.overlap_ratio == 0.0
    assert res.steps["overlap_ratio"].tolist()[0] is pd.NA  # null in the DataFrame: <NA>


def test_busy_set_is_the_union_of_every_activity() -> None:
    # step_sets takes busy from the compute, comm and memory sets; it must be the union of the
    # activities themselves: window 0: compute [0,5) comm [3,9) memory [20,22), window 1:
    # comm [0,2) memory [1,4) [10,11) -> busy [0,9) [20,22) and [0,4) [10,11)
    import numpy as np

    from traceoverlap.core import intervals as iv
    from traceoverlap.rank.metrics import ActivityRows, step_sets

    g = np.array([0, 0, 0, 1, 1, 1], dtype=np.int64)
    kind = np.array([0, 1, 2, 1, 2, 2], dtype=np.int8)
    s = np.array([0, 3, 20, 0, 1, 10], dtype=np.int64)
    e = np.array([5, 9, 22, 2, 4, 11], dtype=np.int64)
    sets = step_sets(ActivityRows(g, kind, s, e, np.arange(6, dtype=np.int64)), 2)
    assert [x.tolist() for x in sets.busy] == [[0, 0, 1, 1], [0, 20, 0, 10], [9, 22, 4, 11]]
    want = iv.grouped_union(g, s, e, 2)
    assert all(a.tolist() == b.tolist() for a, b in zip(sets.busy, want, strict=True))
