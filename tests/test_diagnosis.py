"""The diagnosis (docs/diagnosis.md) on hand-built timelines: every part, class and cause.

Every expected number is derived in the test's comment from the construction. Times are in ns
unless a test says ms (MS); "t" is the nanosecond [t, t+1).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import MS, cpu_timeline, gpu_timeline

from traceoverlap import AnalyzeOptions, analyze
from traceoverlap.core.model import Timeline, concat_timelines
from traceoverlap.core.vocab import family_of
from traceoverlap.run.findings import advice

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
PARTS = [
    "compute_only_ns",
    "overlap_ns",
    "exposed_wait_ns",
    "exposed_transfer_ns",
    "memory_only_ns",
    "other_steps_ns",
    "idle_ns",
]
CAUSES = ["exposed_wait_ns", "exposed_tail_ns", "exposed_dependency_ns", "exposed_host_ns"]


def _row(tl: Timeline, **kw: object):
    res = analyze(tl, AnalyzeOptions(**kw))
    assert len(res.steps) == 1
    return res, res.steps.iloc[0]


def _check_sums(row) -> None:
    assert sum(int(row[p]) for p in PARTS) == row["step_ns"]
    assert sum(int(row[c]) for c in CAUSES) == row["exposed_comm_ns"]


def test_compute_bound_when_almost_everything_computes():
    # compute [0,100), comm [10,30) under it: overlap 20, exposed 0, compute only 80; the device
    # computed all the time: lost 0 < 10 % -> compute-bound
    _, r = _row(gpu_timeline([("gemm", 7, 0, 100), (NCCL, 20, 10, 30)], [("ProfilerStep#1", 0, 1)]))
    _check_sums(r)
    assert (r.compute_only_ns, r.overlap_ns, r.idle_ns) == (80, 20, 0)
    assert r.bottleneck == "compute-bound" and "0.00 ms = 0.0%" in r.reason


def test_dependency_compute_was_launched_and_waited():
    # compute A [0,10), all-reduce [10,30) on its own stream, compute B [30,40) launched by the host
    # at t=1 (all launches at 1, inside the marker [0, 50)). Exposed = [10,30) = 20: for every
    # exposed t the next compute to start is B (at 30), whose launch (1) started before t ->
    # dependency 20. Parts: compute only 20, exposed transfer 20 (one rank: no waiting), idle 0:
    # lost 20 = 50 % -> the largest lost part is transfer, comm 20 <= compute 20 ->
    # exposed-communication.
    tl = gpu_timeline(
        [("A", 7, 0, 10), (NCCL, 20, 10, 30), ("B", 7, 30, 40)],
        [("ProfilerStep#1", 0, 50)],
        launch_at=[1, 1, 1],
    )
    res, r = _row(tl)
    _check_sums(r)
    assert (r.exposed_dependency_ns, r.exposed_host_ns, r.exposed_tail_ns) == (20, 0, 0)
    assert r.bottleneck == "exposed-communication"
    assert not r.wait_known  # a single rank: waiting for peers cannot be known
    (inst,) = res.collectives.per_rank.itertuples()
    assert (inst.exposed_dependency_ns, inst.exposed_ns, inst.same_stream) == (20, 20, False)
    assert res.findings[0].kind == "dependency" and res.findings[0].family == "AllReduce"


def test_host_until_the_next_compute_is_launched():
    # as above, but B is launched at t=25: for t <= 25 the next compute was not launched yet
    # (launch start 25 is not before t) -> host [10,26) = 16; for t in [26,30) it was ->
    # dependency 4. Nothing starts after 30 except B, so no tail.
    tl = gpu_timeline(
        [("A", 7, 0, 10), (NCCL, 20, 10, 30), ("B", 7, 30, 40)],
        [("ProfilerStep#1", 0, 50)],
        launch_at=[1, 1, 25],
    )
    _, r = _row(tl)
    _check_sums(r)
    assert (r.exposed_host_ns, r.exposed_dependency_ns, r.exposed_tail_ns) == (16, 4, 0)


def test_tail_when_no_compute_starts_after():
    # compute [0,50) as ten kernels of 5 (the last starts at 45), all-reduce [40,56): overlap
    # [40,50) = 10, exposed [50,56) = 6, and no compute starts after 45 -> tail 6.
    # Parts: compute only 40, overlap 10, transfer 6: lost 6 of 56 = 10.7 % >= 10 % ->
    # exposed-communication (comm 16 <= compute 50). Advice: the AllReduce tail one.
    kernels = [(f"k{i}", 7, 5 * i, 5 * i + 5) for i in range(10)] + [(NCCL, 20, 40, 56)]
    res, r = _row(gpu_timeline(kernels, [("ProfilerStep#1", 0, 1)]))
    _check_sums(r)
    assert (r.exposed_tail_ns, r.exposed_comm_ns) == (6, 6)
    assert r.bottleneck == "exposed-communication"
    f = res.findings[0]
    assert f.kind == "tail" and f.exposed_ns == 6 and "bucket" in f.advice


def test_idle_bound_wins_over_comm_larger_than_compute():
    # "first rule that matches" is not acceptable: compute [0,5) and [95,100) (10), comm [5,20)
    # (15 > 10): idle = 100 - 25 = 75 is the largest lost part (transfer 15) -> idle-bound, not
    # communication-bound. Runner-up transfer 15 < 75 / 2: not named.
    tl = gpu_timeline(
        [("a", 7, 0, 5), (NCCL, 20, 5, 20), ("b", 7, 95, 100)], [("ProfilerStep#1", 0, 1)]
    )
    _, r = _row(tl)
    _check_sums(r)
    assert (r.idle_ns, r.exposed_transfer_ns) == (75, 15)
    assert r.bottleneck == "idle-bound"
    assert "75.0% of the step" in r.reason
    assert "runner-up" not in r.reason


def test_runner_up_named_when_within_a_factor_of_two():
    # compute [0,30), comm [30,60) (exposed transfer 30), idle [60,100) = 40: idle-bound, and the
    # runner-up transfer 30 >= 40 / 2 is named with its share (30 ns of 100 = 30.0 %)
    tl = gpu_timeline(
        [("a", 7, 0, 30), (NCCL, 20, 30, 60), ("b", 7, 99, 100)], [("ProfilerStep#1", 0, 1)]
    )
    _, r = _row(tl)
    assert (r.idle_ns, r.exposed_transfer_ns) == (39, 30)
    assert r.bottleneck == "idle-bound"
    assert "runner-up: exposed communication (transfer)" in r.reason and "30.0%" in r.reason


def test_memory_bound():
    # a memcpy [0,90) then compute [90,100): memory only 90 of 100 -> memory-bound
    tl = gpu_timeline([("gemm", 7, 90, 100)], [("ProfilerStep#1", 0, 1)], memcpy=[(7, 0, 90)])
    res, r = _row(tl)
    _check_sums(r)
    assert (r.memory_only_ns, r.compute_only_ns) == (90, 10)
    assert r.bottleneck == "memory-bound" and "90.0% of the step" in r.reason
    assert any(f.kind == "memory-bound" for f in res.findings)


def test_communication_bound_exercise_2():
    # metrics.md exercise 2: compute [0,80), comm [20,140): parts compute only 20, overlap 60,
    # transfer 60, idle 0; lost 60 of 140; transfer is the largest lost part and comm 120 >
    # compute 80 -> communication-bound. The trace carries no message sizes, so nothing shows
    # the transfer is bandwidth-bound (diagnosis.md §9): no "move fewer bytes", and the advice
    # says how to find out; the purpose cannot be told either (no host ranges): said unknown.
    tl = gpu_timeline([("gemm", 7, 0, 80 * MS), (NCCL, 20, 20 * MS, 140 * MS)], [("P#2", 0, 1)])
    res, r = _row(tl, step_regex=r"^P#(\d+)$")
    _check_sums(r)
    assert r.bottleneck == "communication-bound" and "40.00 ms exposed" in r.reason
    f = next(f for f in res.findings if f.kind == "transfer-bound")
    assert f.family == "AllReduce" and "PowerSGD" not in f.advice and "fewer bytes" in f.advice
    assert "before moving fewer bytes" in f.advice and "nccl-tests" in f.advice
    assert f.purpose == "unknown" and "purpose unknown" in f.title
    assert "message sizes unknown" in f.title


def _unix(tl: Timeline) -> Timeline:
    return Timeline(tl.events, tuple(replace(t, clock="unix") for t in tl.traces))


def test_peer_wait_bound_names_the_late_rank():
    """Two GPU ranks (ms). Rank 0: compute A [0,10), all-reduce [10,60), compute B [60,70);
    rank 1: A [0,45), all-reduce [45,60), B [60,70); every launch at 1 ms.
    The all-reduce ends together at 60; transfer = the shortest duration = 15 (rank 1); rank 0
    waits 50 - 15 = 35: its wait part is [10,45). Rank 1 started last (45 > 10).
    Rank 0: exposed [10,60) = 50 = wait 35 + dependency 15 (B was launched at 1 ms); parts:
      compute only 20, wait 35, transfer 15: lost 50 of 70; wait is the largest ->
      peer-wait-bound naming rank 1; runner-up transfer 15 < 35/2, not named.
    Rank 1: exposed [45,60) = 15, no wait (it is the shortest) -> dependency 15; compute only 55,
      lost 15 of 70 = 21 %: transfer -> exposed-communication (comm 15 <= compute 55).
    """

    def k(a: int, c: int) -> list[tuple[str, int, int, int]]:
        return [("A", 7, 0, a * MS), (NCCL, 20, c * MS, 60 * MS), ("B", 7, 60 * MS, 70 * MS)]

    launch = [MS, MS, MS]
    r0 = _unix(gpu_timeline(k(10, 10), [("ProfilerStep#1", 0, 80 * MS)], launch, rank=0))
    r1 = _unix(gpu_timeline(k(45, 45), [("ProfilerStep#1", 0, 80 * MS)], launch, rank=1))
    res = analyze(concat_timelines([r0, r1]))
    s = res.steps.set_index("rank")
    for rank in (0, 1):
        _check_sums(s.loc[rank])
    assert s.loc[0, "exposed_wait_ns"] == 35 * MS and s.loc[0, "exposed_dependency_ns"] == 15 * MS
    assert s.loc[0, "bottleneck"] == "peer-wait-bound" and s.loc[0, "waited_for_rank"] == 1
    assert "waiting for rank 1 in collectives 35.00 ms = 50.0% of the step" in s.loc[0, "reason"]
    assert "runner-up" not in s.loc[0, "reason"]
    assert s.loc[1, "exposed_wait_ns"] == 0 and s.loc[1, "exposed_dependency_ns"] == 15 * MS
    assert s.loc[1, "bottleneck"] == "exposed-communication"
    assert s["wait_known"].all()
    f = res.findings[0]
    assert f.kind == "wait" and f.exposed_ns == 35 * MS and "rank 1" in f.title
    assert res.summary.run.bottlenecks == {"peer-wait-bound": 1, "exposed-communication": 1}


def test_same_stream_comes_first():
    # the all-reduce runs on the compute stream 7 (the classic bug): compute [0,10), all-reduce
    # [10,20) on stream 7, compute [20,30): it cannot overlap by construction -> same_stream, and
    # that finding comes first whatever else is found
    tl = gpu_timeline(
        [("a", 7, 0, 10), (NCCL, 7, 10, 20), ("b", 7, 20, 30)],
        [("ProfilerStep#1", 0, 40)],
        launch_at=[1, 1, 1],
    )
    res, r = _row(tl)
    (inst,) = res.collectives.per_rank.itertuples()
    assert inst.same_stream
    assert res.findings[0].kind == "same_stream" and "stream 7" in res.findings[0].title


def test_same_stream_only_when_compute_was_delayed():
    # diagnosis.md §10. Stream 7 runs compute a [0,10) and an all-reduce [10,20); compute b
    # [25,30) on stream 7 was launched at 22, after the all-reduce ended (20): nothing on the
    # lane waited behind it -> not same_stream (the lane shares, but delayed nothing).
    tl = gpu_timeline(
        [("a", 7, 0, 10), (NCCL, 7, 10, 20), ("b", 7, 25, 30)],
        [("ProfilerStep#1", 0, 40)],
        launch_at=[1, 1, 22],
    )
    res, _ = _row(tl)
    (inst,) = res.collectives.per_rank.itertuples()
    assert not inst.same_stream
    assert all(f.kind != "same_stream" for f in res.findings)


def test_comm_library_stream_with_helper_kernels_is_not_same_stream():
    # DeepEP-like: stream 27 runs the library's communication kernel [0,100) and a 2 ns cast
    # helper [100,102) launched at 1 (it did sit behind the communication), compute runs on
    # stream 7 [0,90). The lane's compute (2) is under 10 % of its communication (100): it is the
    # library's own stream, not a compute stream -> not same_stream.
    tl = gpu_timeline(
        [("deep_ep::intranode::dispatch", 27, 0, 100), ("fp8_cast", 27, 100, 102), ("g", 7, 0, 90)],
        [("ProfilerStep#1", 0, 200)],
        launch_at=[1, 1, 1],
    )
    res = analyze(tl, AnalyzeOptions(comm_patterns=["deep_ep"]))
    pr = res.collectives.per_rank
    assert len(pr) == 1 and pr["family"].iloc[0] == "AllToAll"
    assert not pr["same_stream"].any()


def test_queued_behind_earlier_communication():
    # two all-reduces on stream 20: the first [10,30) launched at 1 (launch call [1,2)), the second
    # launched at 12 (call [12,13)) but started only at 32, after the first ended at 30.
    # queued = start - max(end of its launch call, end of the previous comm on its lane)
    #        = 32 - max(13, 30) = 2 for the second; 10 - max(2, -) = 8 for the first.
    # behind_comm = min(start, previous comm end) - launch end, at least 0: the time it was held
    # behind earlier communication on its lane = min(32, 30) - 13 = 17; 0 for the first.
    tl = gpu_timeline(
        [("a", 7, 0, 40), (NCCL, 20, 10, 30), (NCCL, 20, 32, 35)],
        [("ProfilerStep#1", 0, 50)],
        launch_at=[1, 1, 12],
    )
    res, _ = _row(tl)
    pr = res.collectives.per_rank.sort_values("start_ns")
    assert pr["queued_ns"].tolist() == [8, 2]
    assert pr["behind_comm_ns"].tolist() == [0, 17]


def test_cpu_dependency_when_blocked_in_a_communication_call():
    # CPU rank, step [0,100). Main thread: aten::mm [0,40), a wait range [40,70) (blocked on the
    # all-reduce), aten::mm [80,100). gloo thread: gloo:all_reduce [30,70) and [85,95).
    # exposed = comm - compute = [40,70) (the second all-reduce is under the mm) = 30, and the
    # main thread was inside "bucket_wait#0" the whole time -> dependency 30; the mm at 80 starts
    # after, so not tail. Host 0.
    tl = cpu_timeline(
        [
            ("annotation", "ProfilerStep#1", "", 0, 100),
            ("cpu_op", "aten::mm", "", 0, 40),
            ("annotation", "bucket_wait#0", "", 40, 70),
            ("cpu_op", "aten::mm", "", 80, 100),
            ("annotation", "gloo:all_reduce", "pt_gloo_runloop", 30, 70),
            ("annotation", "gloo:all_reduce", "pt_gloo_runloop", 85, 95),
        ]
    )
    _, r = _row(tl)
    _check_sums(r)
    assert (r.exposed_comm_ns, r.exposed_dependency_ns, r.exposed_host_ns) == (30, 30, 0)


def test_cpu_host_when_sleeping():
    # the same, but the main thread sleeps in a "host_delay" range (no communication call), in
    # ms this time: step [0,100) ms, mm [0,40), host_delay [40,70), mm [80,100), gloo [30,70).
    # The thread's next host event after the comm's end at 70 starts at 80: 10 ms, past the
    # 1 ms floor and 1 % of the 40 ms all-reduce (diagnosis.md §8): late, not blocked. The last
    # boundary before 70 is host_delay's start, so no blocked wait either: exposed [40,70) = 30 ms
    # is host
    ms = 1_000_000
    tl = cpu_timeline(
        [
            ("annotation", "ProfilerStep#1", "", 0, 100 * ms),
            ("cpu_op", "aten::mm", "", 0, 40 * ms),
            ("annotation", "host_delay", "", 40 * ms, 70 * ms),
            ("cpu_op", "aten::mm", "", 80 * ms, 100 * ms),
            ("annotation", "gloo:all_reduce", "pt_gloo_runloop", 30 * ms, 70 * ms),
        ]
    )
    _, r = _row(tl)
    assert (r.exposed_comm_ns, r.exposed_host_ns, r.exposed_dependency_ns) == (30 * ms, 30 * ms, 0)


@pytest.mark.parametrize(
    ("label", "family"),
    [
        ("AllReduce", "AllReduce"),
        ("allreduce", "AllReduce"),
        ("all_gather", "AllGather/ReduceScatter"),
        ("_reduce_scatter_base", "AllGather/ReduceScatter"),
        ("SendRecv", "SendRecv"),
        ("send", "SendRecv"),
        ("all_to_all", "AllToAll"),
        ("deep_ep::internode::dispatch", "AllToAll"),
        ("Broadcast", "Other"),
    ],
)
def test_collective_families(label: str, family: str) -> None:
    assert family_of(label) == family


def test_sendrecv_never_gets_bucket_advice() -> None:
    for cause in ("tail", "dependency", "transfer-bound"):
        text = advice(cause, "SendRecv").lower()
        assert "bucket" not in text and ("pipeline" in text or "stage" in text)
    for fam in ("AllGather/ReduceScatter", "AllToAll"):
        assert "bucket" not in advice("dependency", fam).lower()


def _blocking_allreduce(next_start: int, comm_end: int = 5000, step: int = 10000, call=False):
    # marker [0, step); main thread: aten::mm [0, 1000), aten::add [next_start, step - 1000); the
    # gloo run-loop thread: gloo:all_reduce [1000, comm_end). No c10d:: range: a plain blocking
    # dist.all_reduce as users write it leaves none around the wait. ``call``: mm ends at 900
    # and `c10d::allreduce_` [900, 1000) launches it (as torch records dist.all_reduce)
    ops = [("cpu_op", "aten::mm", "", 0, 900 if call else 1000)]
    if call:
        ops.append(("cpu_op", "c10d::allreduce_", "", 900, 1000))
    return cpu_timeline(
        [
            ("annotation", "ProfilerStep#1", "", 0, step),
            *ops,
            ("cpu_op", "gloo:all_reduce", "pt_gloo_runloop", 1000, comm_end),
            ("cpu_op", "aten::add", "", next_start, step - 1000),
        ]
    )


def test_cpu_blocked_on_communication_is_dependency():
    # diagnosis.md §8: the next op starts 20 ns after the all-reduce [1000,5000) ends (within
    # 1 % of 4000 and the 1 ms floor): the thread was blocked on it, from mm's return at 1000 to
    # the resumption at 5020; the 20 ns wake-up no gloo event covers is communication too
    # (§11): exposed [1000,5020) = 4020, all dependency, not host (the next compute starts after
    # every exposed ns, so none is tail).
    _, r = _row(_blocking_allreduce(5020))
    _check_sums(r)
    assert (r.exposed_comm_ns, r.exposed_dependency_ns, r.exposed_host_ns) == (4020, 4020, 0)


def test_cpu_late_wake_up_within_the_floor_is_blocked():
    # `c10d::allreduce_` [900,1000) launches a 4 ms all-reduce [1000, 4 ms + 1000); the thread
    # returns from the call and resumes exactly 1 ms after the all-reduce ends: more than 1 %
    # (40 us), but within the 1 ms floor, and the gap opened at the call's return: blocked, a
    # late OS wake-up (§8). The call [900,1000) and the wait [1000, 5 ms + 1000) are the
    # thread's communication calls, and comm where gloo does not cover them (§11): comm =
    # [900, 5 ms + 1000) = 5 ms + 100 ns, all exposed, all dependency
    end = 4 * MS + 1000
    _, r = _row(_blocking_allreduce(end + MS, end, 20 * MS, call=True))
    _check_sums(r)
    got = (r.exposed_comm_ns, r.exposed_dependency_ns, r.exposed_host_ns)
    assert got == (5 * MS + 100, 5 * MS + 100, 0)


def test_cpu_pause_between_compute_ops_is_no_wait():
    # no call: mm returns at 1000, the all-reduce runs [1000, 4 ms + 1000) and the next op starts
    # 0.5 ms after it ends: more than 1 %, and the gap did not open at a communication call's
    # return, so the floor does not make it a wait: the 0.5 ms stay idle, comm is the 4 ms. Its
    # exposed ns are still dependency: the thread's next host event came within 1 ms (§8)
    end = 4 * MS + 1000
    _, r = _row(_blocking_allreduce(end + MS // 2, end, 20 * MS))
    _check_sums(r)
    assert (r.comm_ns, r.exposed_dependency_ns, r.exposed_host_ns) == (4 * MS, 4 * MS, 0)


def test_cpu_late_wake_up_past_the_floor_is_blocked_until_the_end():
    # the next op starts 1 ms + 1 ns after the 4 ms all-reduce ends: past the 1 ms floor and
    # past 1 % of 4 ms. The gap opened at `c10d::allreduce_`'s return [900,1000) and the thread
    # did nothing until the all-reduce ended: blocked on it until its end (§11: a late wake-up
    # never turns a whole blocked collective into host); the wake-up past the floor is the
    # thread's own time. comm: the call [900,1000) and the wait [1000, 4 ms + 1000) = 4 ms +
    # 100 ns, all exposed, all dependency; the wake-up [4 ms + 1000, 5 ms + 1001) stays idle, and
    # so does the step's last 1000 ns after add: idle = 1 ms + 1001 ns
    end = 4 * MS + 1000
    _, r = _row(_blocking_allreduce(end + MS + 1, end, 20 * MS, call=True))
    _check_sums(r)
    got = (r.exposed_comm_ns, r.exposed_dependency_ns, r.exposed_host_ns, r.idle_ns)
    assert got == (4 * MS + 100, 4 * MS + 100, 0, MS + 1001)


def test_cpu_late_host_without_a_call_is_host():
    # no call: mm returns at 1000 and the next op starts 1 ms + 1 ns after the 4 ms all-reduce
    # ends: past 1 % and the gap did not open at a communication call's return, so no wait: the
    # all-reduce is the thread's comm only where gloo ran, and the host was late: its 4 ms are
    # host, the gap [4 ms + 1000, 5 ms + 1001) idle, as is the step's last 1000 ns after add
    end = 4 * MS + 1000
    _, r = _row(_blocking_allreduce(end + MS + 1, end, 20 * MS))
    _check_sums(r)
    got = (r.exposed_comm_ns, r.exposed_dependency_ns, r.exposed_host_ns, r.idle_ns)
    assert got == (4 * MS, 0, 4 * MS, MS + 1001)


def test_cpu_long_collective_allows_one_percent():
    # a 300 ms all-reduce: 1 % is 3 ms, above the floor: a 2.5 ms gap is still blocked.
    # Wait [1000, 302.5 ms + 1000): comm = 302.5 ms, all dependency
    end = 300 * MS + 1000
    _, r = _row(_blocking_allreduce(end + 2_500_000, end, 400 * MS))
    _check_sums(r)
    got = (r.exposed_comm_ns, r.exposed_dependency_ns, r.exposed_host_ns)
    assert got == (302_500_000, 302_500_000, 0)


def test_deepep_cached_notify_is_all_to_all() -> None:
    # DeepEP's notify kernels belong to its dispatch / combine: AllToAll, not "Other"
    assert family_of("deep_ep::intranode::cached_notify_dispatch") == "AllToAll"
    assert family_of("void deep_ep::internode::cached_notify<...>(int)") == "AllToAll"


def test_mostly_computing_step_says_so_and_names_its_largest_loss():
    # compute [0,85), then nothing until the end of the window at 100 (a second kernel [99,100)
    # marks it): compute 86 of 100, idle 14. Lost 14 >= 10 % -> the largest lost part names the
    # class, idle-bound, but the step computed 86 %: the reason says "mostly computing" first.
    tl = gpu_timeline([("gemm", 7, 0, 85), ("tail", 7, 99, 100)], [("ProfilerStep#1", 0, 1)])
    res, r = _row(tl)
    _check_sums(r)
    assert (r.compute_only_ns, r.idle_ns, r.bottleneck) == (86, 14, "idle-bound")
    assert r.reason.startswith("mostly computing (86.0% of the step); largest loss: idle")
    f = next(f for f in res.findings if f.kind == "idle-bound")
    assert "their largest loss (they computed 86.0% of the time)" in f.title


def test_transfer_is_called_transfer():
    # compute [0,50), all-reduce [50,100): exposed 50, all of it transfer on one rank; the reason
    # labels the number as what it is (transfer), not as all exposed communication
    tl = gpu_timeline([("gemm", 7, 0, 50), (NCCL, 20, 50, 100)], [("ProfilerStep#1", 0, 1)])
    _, r = _row(tl)
    assert r.exposed_transfer_ns == 50 and "exposed transfer" in r.reason


def test_a_new_kind_of_lost_time_is_one_registry_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    # verdicts come from the LOST_PARTS registry, not an if-ladder: one more LostPart and a step
    # whose largest loss it is gets its verdict. Step 10 ms, compute alone 2 ms, nothing
    # overlapped: lost = 10 - 2 = 8 ms (80 % >= the 10 % threshold); parts: idle 2 ms and the new
    # part 6 ms, so the new part decides and idle (2 ms, not within 2x of 6) is no runner-up.
    from traceoverlap.core.options import Thresholds
    from traceoverlap.run import verdicts as vd

    extra = vd.LostPart(
        "blocked_ns", "blocked in a call", lambda f: vd.Verdict("blocked", f"blocked {f.share}")
    )
    monkeypatch.setattr(vd, "LOST_PARTS", (*vd.LOST_PARTS, extra))
    ms = 1_000_000
    row = {
        "step_ns": 10 * ms,
        "compute_ns": 2 * ms,
        "comm_ns": 0,
        "compute_only_ns": 2 * ms,
        "overlap_ns": 0,
        "exposed_wait_ns": 0,
        "exposed_transfer_ns": 0,
        "idle_ns": 2 * ms,
        "memory_only_ns": 0,
        "blocked_ns": 6 * ms,
    }
    v = vd.verdict(row, Thresholds())
    assert v.bottleneck == "blocked"
    assert v.reason == "blocked 6.00 ms = 60.0% of the step"
