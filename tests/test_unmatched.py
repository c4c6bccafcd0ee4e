"""Unknown is not transfer (docs/diagnosis.md §12, issue 36): ``exposed_unmatched_ns``.

Hand-built gloo runs (times in ms, every rank one ProfilerStep#1 over [0, 100)); each expected
number is derived in the test's docstring from diagnosis.md §1-2 and §12.
"""

from __future__ import annotations

import pandas as pd
from builders import gloo_rank

from traceoverlap import analyze
from traceoverlap.core.model import Timeline, concat_timelines
from traceoverlap.core.schema import PARTS, STEP_NS

MS = 1_000_000
GLOO = (10, 11)  # the gloo worker threads; tid 1 is the main thread, 2 a compute thread


def _rank(rank: int, rows: list[tuple[str, str, int, int, int, int]], world: int = 2) -> Timeline:
    """A CPU (gloo) rank of group '0' = all ranks (builders.gloo_rank): rows (category, name,
    tid, start ms, end ms, bytes or -1); one ProfilerStep#1 marker over [0, 100)."""
    return gloo_rank(rank, rows, world=world)


def _unpaired() -> list[Timeline]:
    """Rank 0 computes [0,10) and sends twice on its main thread: [10,20) and [20,90); rank 1
    receives once, [10,20), then computes [20,100). Send #1 pairs with the recv (§6); send #2
    has no recv on rank 1: unmatched."""
    r0 = [
        ("cpu_op", "aten::mm", 2, 0, 10, -1),
        ("annotation", "gloo:send", 1, 10, 20, -1),
        ("annotation", "gloo:send", 1, 20, 90, -1),
    ]
    r1 = [
        ("annotation", "gloo:recv", 1, 10, 20, -1),
        ("cpu_op", "aten::mm", 2, 20, 100, -1),
    ]
    return [_rank(0, r0), _rank(1, r1)]


def _parts_sum(steps: pd.DataFrame) -> None:
    for _, r in steps.iterrows():
        assert sum(int(r[p.name]) for p in PARTS) == int(r[STEP_NS.name])


def test_unpaired_send_is_unmatched_not_transfer() -> None:
    """Rank 0: C = [0,10) = 10, M = [10,90) = 80, all exposed. Send #1 and the recv both start
    at 10: no wait, transfer [10,20) = 10. Send #2 [20,90) = 70 has no peer: unmatched, not
    transfer. Idle [90,100) = 10. Parts: 10 + 0 + 0 + 10 + 70 + 0 + 0 + 10 = 100. Lost = 90 >=
    10 % of 100; the largest lost part is unmatched (70): `exposed-communication` although
    |M| 80 > |C| 10 (the old rule, transfer 80, said `communication-bound`); the reason says
    wait vs transfer is unknown and why (no matching recv on rank 1)."""
    a = analyze(concat_timelines(_unpaired()))
    _parts_sum(a.steps)
    r0 = a.steps.set_index("rank").loc[0]
    assert int(r0["exposed_wait_ns"]) == 0
    assert int(r0["exposed_transfer_ns"]) == 10 * MS
    assert int(r0["exposed_unmatched_ns"]) == 70 * MS
    assert int(r0["idle_ns"]) == 10 * MS
    assert r0["bottleneck"] == "exposed-communication"
    assert "cannot be told from transfer" in r0["reason"]
    assert "no matching recv on rank 1" in r0["reason"]
    # no bandwidth advice from it (§12): no window is communication-bound
    assert not any(f.kind == "transfer-bound" for f in a.findings)
    for f in a.findings:
        assert "interconnect" not in f.advice and "fewer bytes" not in f.advice
    c = a.collectives
    assert c is not None
    pr = c.per_rank.set_index(["rank", "start_ns"])
    row = pr.loc[(0, 20 * MS)]
    assert not bool(row["matched"])
    assert int(row["exposed_unmatched_ns"]) == 70 * MS
    assert row["unmatched_why"] == "no matching recv on rank 1"


def test_single_rank_keeps_the_transfer_rule() -> None:
    """Rank 0 alone (§12, last paragraph): no peers to match with, so everything past the
    wait (0) is transfer, flagged unknown: transfer = 80, unmatched = 0, and |M| 80 > |C| 10
    makes it `communication-bound` with the one-rank hedge."""
    a = analyze(_unpaired()[0])
    r0 = a.steps.iloc[0]
    assert int(r0["exposed_transfer_ns"]) == 80 * MS
    assert int(r0["exposed_unmatched_ns"]) == 0
    assert not bool(r0["wait_known"])
    assert r0["bottleneck"] == "communication-bound"
    assert "one rank only" in r0["reason"]


def _starved(last_on_rank1: tuple[int, int] = (18, 60)) -> list[Timeline]:
    """Two ranks, five all-reduces of 4 MB each on worker 10. #1-#4: [0,2), [2,4), [4,6),
    [6,8) on both ranks. #5: rank 0 [8,60), rank 1 (starved of CPU: its side of the collective
    is slow) ``last_on_rank1``. Both compute [60,100) on their main thread."""
    b = 4_000_000
    common = [
        *(("annotation", "gloo:all_reduce", 10, 2 * k, 2 * k + 2, b) for k in range(4)),
        ("cpu_op", "aten::mm", 1, 60, 100, -1),
    ]
    r0 = [*common, ("annotation", "gloo:all_reduce", 10, 8, 60, b)]
    r1 = [*common, ("annotation", "gloo:all_reduce", 10, *last_on_rank1, b)]
    return [_rank(0, r0), _rank(1, r1)]


def test_transfer_the_bytes_do_not_explain_is_not_bandwidth() -> None:
    """§12, second half. Transfer estimates (shortest duration across ranks): #1-#4 2 ms, #5
    min(52, 42) = 42 ms. Same family and bytes, 5 instances, median 2 ms: #5 is 21x the median
    (> 3x), so only the median, its last 2 ms [58,60), is transfer; the rest of its transfer
    part, [18,58) = 40 ms, is unknown.
    Rank 0: C = [60,100) = 40, M = [0,60) = 60, all exposed. Wait part of #5 = 52 - 42 = 10:
    [8,18). Transfer [0,8) + [58,60) = 10; unmatched [18,58) = 40. 40 + 10 + 10 + 40 = 100.
    Lost 60; largest unmatched 40 -> `exposed-communication` (the old rule: transfer 50 with
    |M| 60 > |C| 40, `communication-bound`, bucket and bandwidth advice).
    Rank 1: M = [0,8) + [18,60) = 50; no wait; transfer 10; unmatched 40; idle [8,18) = 10;
    40 + 10 + 40 + 10 = 100: `exposed-communication` too."""
    a = analyze(concat_timelines(_starved()))
    _parts_sum(a.steps)
    s = a.steps.set_index("rank")
    want = {0: (10, 10, 40, 0), 1: (0, 10, 40, 10)}
    for rank, (wait, transfer, unmatched, idle) in want.items():
        row = s.loc[rank]
        got = (
            int(row["exposed_wait_ns"]),
            int(row["exposed_transfer_ns"]),
            int(row["exposed_unmatched_ns"]),
            int(row["idle_ns"]),
        )
        assert got == (wait * MS, transfer * MS, unmatched * MS, idle * MS), rank
        assert row["bottleneck"] == "exposed-communication", row["reason"]
        assert "21.0x the median of the 5 AllReduce instances of its size" in row["reason"]
    assert not any(f.kind == "transfer-bound" for f in a.findings)
    c = a.collectives
    assert c is not None
    inst = c.instances.sort_values("start_ns")
    assert inst["transfer_outlier"].tolist() == [False] * 4 + [True]
    assert inst["transfer_ns"].tolist()[-1] == 42 * MS  # the estimate itself is kept


def test_no_outlier_below_three_times_the_median() -> None:
    """The same run with #5 on rank 1 at [55,60): transfer 5 ms = 2.5x the median 2 ms (not
    > 3x): all of it stays transfer. Rank 0: wait 52 - 5 = 47 [8,55), transfer [0,8) + [55,60)
    = 13, unmatched 0."""
    a = analyze(concat_timelines(_starved((55, 60))))
    r0 = a.steps.set_index("rank").loc[0]
    assert int(r0["exposed_wait_ns"]) == 47 * MS
    assert int(r0["exposed_transfer_ns"]) == 13 * MS
    assert int(r0["exposed_unmatched_ns"]) == 0


def test_no_outlier_among_fewer_than_five() -> None:
    """Without #4 (a 4 MB all-reduce [6,8) on both ranks) the family and size has 4 instances:
    too few for the median to say what the size explains, so #5's 42 ms stays transfer. Rank 0:
    wait [8,18) = 10, transfer [0,6) + [18,60) = 48, unmatched 0."""
    runs = []
    for t in _starved():
        ev = t.events
        drop = (ev["start_ns"] == 6 * MS).to_numpy()
        runs.append(Timeline(ev[~drop].reset_index(drop=True), t.traces))
    a = analyze(concat_timelines(runs))
    r0 = a.steps.set_index("rank").loc[0]
    assert int(r0["exposed_wait_ns"]) == 10 * MS
    assert int(r0["exposed_transfer_ns"]) == 48 * MS
    assert int(r0["exposed_unmatched_ns"]) == 0


def test_a_collective_in_two_nested_cpu_steps_counts_its_ns_once() -> None:
    """Found by the oracle property test with the bound check: rank 1 of a 3-rank gloo run has
    nested markers train_step0 [0,196) and train_step1 [0,426); its all-reduce [49,50) is
    clipped into both windows (metrics.md: on CPU units every activity is clipped into each
    window it meets). Per step it is exposed in each (1 ns each, nothing computes), but its
    collective row (step: the window of its first piece) has dur 1, so its exposed_ns is 1,
    not 2 summed over both windows."""
    from oracle import Ev
    from test_job_model import check_collective_bounds
    from timeline_gen import to_timeline

    def ev(cat: str, name: str, s: int, e: int, rank: int, pg: str = "", seq: int = -1) -> Ev:
        # step markers on the main thread; the gloo work and a copy on the gloo worker
        main = name.startswith("train_step")
        tid, thread = (11, "python") if main else (12, "pt_gloo_runloop")
        return Ev(cat, name, s, e, rank, 1000 + 17 * rank, tid=tid, thread=thread, pg=pg, seq=seq)

    events = [
        ev("annotation", "train_step0", 0, 196, 1),
        ev("annotation", "train_step1", 0, 426, 1),
    ]
    for r in range(3):
        events.append(ev("cpu_op", "aten::copy_", 0, 1, r))
        events.append(ev("annotation", "gloo:all_reduce", 49, 50, r, "0", 0))
    from traceoverlap import AnalyzeOptions

    a = analyze(to_timeline(events, "cpu", 3), AnalyzeOptions(step_regex=r"^train_step(\d*)$"))
    c = a.collectives
    assert c is not None
    check_collective_bounds(c)
    r1 = c.per_rank[c.per_rank["rank"] == 1]
    assert r1["exposed_ns"].tolist() == [1]
    steps = a.steps[a.steps["rank"] == 1]
    assert steps["exposed_comm_ns"].tolist() == [1, 1]


def test_a_group_whose_peers_are_missing_names_them() -> None:
    """Ranks 0 and 2 of test_job_model's 4-rank TP run (TP groups '1' = {0,1}, '2' = {2,3},
    global '0' = {0,1,2,3}; everyone computes [0,10) and [60,100)). Each TP all-reduce has no
    peer given: unmatched. The global all-reduce matches on ranks 0 and 2: rank 0 [15,60), rank
    2 [55,60): rank 0's wait [15,55) = 40 (a peer given was late). Its group's ranks 1 and 3 are
    not in the trace, so its last 5 ms may be waiting for them: not transfer but unmatched (§12).
    Rank 0: exposed [10,60) = 50 = unmatched [10,15) 5 + wait 40 + unmatched [55,60) 5; 50 + 10 +
    40 = 100; peer-wait-bound (40 > 10).
    Rank 2: TP all-reduce [10,55) unmatched 45, global [55,60) unmatched 5; 50 + 50 = 100;
    `exposed-communication`, the reason naming rank 3 as the missing peer, and the hedge."""
    from test_job_model import _tp_run

    run = _tp_run()
    a = analyze(concat_timelines([run[0], run[2]]))
    _parts_sum(a.steps)
    s = a.steps.set_index("rank")
    got = {
        r: tuple(
            int(s.loc[r, c]) // MS
            for c in ("exposed_unmatched_ns", "exposed_wait_ns", "exposed_transfer_ns")
        )
        for r in (0, 2)
    }
    assert got == {0: (10, 40, 0), 2: (50, 0, 0)}
    assert s.loc[0, "bottleneck"] == "peer-wait-bound"
    assert s.loc[2, "bottleneck"] == "exposed-communication"
    reason = str(s.loc[2, "reason"])
    assert "its group's other rank 3 is not in the trace" in reason
    assert "2 of 4 ranks given" in reason


def test_json_report_carries_why_a_row_is_unmatched() -> None:
    """The unpaired send of :func:`_unpaired` in the JSON report: its row on rank 0 says why
    (a text column among the nullable ones, which used to be compared with 0 and crash), and the
    paired send's row has no reason (null)."""
    import json

    from traceoverlap.reporters.json_report import render

    doc = json.loads(render(analyze(concat_timelines(_unpaired()))))
    rows = [c["per_rank"]["0"] for c in doc["collectives"] if "0" in c["per_rank"]]
    whys = [r["unmatched_why"] for r in rows]
    assert None in whys
    assert any(isinstance(w, str) and "recv" in w for w in whys)
