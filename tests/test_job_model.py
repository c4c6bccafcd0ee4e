"""The model of the job (docs/job-model.md, diagnosis.md §6): process groups, send/recv pairs,
waiting credited once, partial runs, selection after matching. Answers derived by hand in each
test's docstring (times in ms)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from builders import gloo_rank
from conftest import REAL_TRACES, examples, sample
from hypothesis import example, given, settings
from hypothesis import strategies as st

from traceoverlap import AnalyzeOptions, analyze
from traceoverlap.core import intervals as iv
from traceoverlap.core.model import Timeline, TraceInfo, concat_timelines
from traceoverlap.run.job import credit_segments
from traceoverlap.run.matching import Collectives
from traceoverlap.run.results import Analysis

MS = 1_000_000


def _blame_by_rank(a: Analysis) -> pd.DataFrame:
    """The analysis's wait-blame table, one row per rank (the run has collectives)."""
    c = a.collectives
    assert c is not None
    return c.blame.set_index("rank")


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

#: gloo worker threads: the default group's (created first: lower ids), then the TP group's
DEFAULT_T, TP_T = (10, 11), (20, 21)


def _rank(
    rank: int,
    rows: list[tuple[str, str, int, int, int]],
    groups: tuple[tuple[str, tuple[int, ...]], ...],
    world: int,
    threads: tuple[int, ...] = DEFAULT_T + TP_T,
    step: tuple[int, int] = (0, 100),
) -> Timeline:
    """A CPU (gloo) rank (builders.gloo_rank): rows (category, name, tid, start ms, end ms); tid
    1 is the main thread, ``threads`` are gloo workers; one ProfilerStep#1 marker over ``step``."""
    return gloo_rank(rank, rows, ((1, *step),), world, groups, threads)


def _tp_run(rank2_global: int = 55, rank3_global: int = 56) -> list[Timeline]:
    """4 ranks, TP groups '1' = {0,1} and '2' = {2,3}, then a global all-reduce (group '0').
    Every rank computes [0,10) and [60,100). Rank 3 sleeps [10,50) (``straggler_sleep`` on its
    main thread) before its TP all-reduce. TP all-reduce: ranks 0,1 [10,15); rank 2 [10,55),
    rank 3 [50,55). Global all-reduce ends at 60 everywhere: ranks 0,1 start at 15, rank 2 at
    ``rank2_global``, rank 3 at ``rank3_global``."""
    world = (("0", (0, 1, 2, 3)),)
    out = []
    for r in range(4):
        tp = ("1", (0, 1)) if r < 2 else ("2", (2, 3))
        rows: list[tuple[str, str, int, int, int]] = [
            ("cpu_op", "aten::mm", 1, 0, 10),
            ("cpu_op", "aten::mm", 1, 60, 100),
        ]
        if r < 2:
            rows += [("annotation", "gloo:all_reduce", 20, 10, 15)]
            rows += [("annotation", "gloo:all_reduce", 10, 15, 60)]
        else:
            rows += [("annotation", "gloo:all_reduce", 20, 10 if r == 2 else 50, 55)]
            g = rank2_global if r == 2 else rank3_global
            rows += [("annotation", "gloo:all_reduce", 10, g, 60)]
        if r == 3:
            rows += [("annotation", "straggler_sleep", 1, 10, 50)]
        out.append(_rank(r, rows, (world[0], tp), 4))
    return out


def test_tp_groups_rank2_waited_for_rank3() -> None:
    """TP all-reduce of group '2': rank 2 [10,55) 45, rank 3 [50,55) 5 -> transfer 5, rank 2
    waits [10,50) = 40 for rank 3 (last arrival, 50). Global: ranks 0,1 [15,60) 45, rank 2
    [55,60) 5, rank 3 [56,60) 4 -> transfer 4; waits r0 = r1 = 41 ([15,56)), r2 = 1 ([55,56)),
    r3 = 0; last arrival rank 3 (56). Nothing computes in [10,60) on any rank, so every wait ns
    is exposed: exposed_wait r0 41, r1 41, r2 40 + 1 = 41, r3 0; all 123 credited to rank 3.
    Matched within groups: 3 instances (TP '1' on ranks 0,1; TP '2' on ranks 2,3; global on
    all four); rank 2 is a waiter, not a straggler."""
    a = analyze(concat_timelines(_tp_run()))
    c = a.collectives
    assert c is not None
    m = c.instances[c.instances["matched"].astype(bool)]
    assert sorted(map(tuple, m["ranks"])) == [(0, 1), (0, 1, 2, 3), (2, 3)]
    assert sorted(m["group"]) == ["0", "1", "2"]
    steps = a.steps.set_index("rank")
    assert steps["exposed_wait_ns"].tolist() == [41 * MS, 41 * MS, 41 * MS, 0]
    assert steps.loc[2, "waited_for_rank"] == 3
    assert steps.loc[2, "bottleneck"] == "peer-wait-bound"
    assert c.credit["exposed_wait_ns"].sum() == 123 * MS
    assert set(c.credit["waited_for_rank"]) == {3}
    st = c.stragglers.set_index("rank")
    assert st.loc[3, "exposed_waited_for_ns"] == 123 * MS
    assert st.loc[2, "exposed_waited_for_ns"] == 0
    assert c.top_straggler == 3


def test_rank_selection_matches_every_rank() -> None:
    """--rank 2 shows rank 2 only, but matching used all four: same 41 ms waiting for rank 3
    as in the full run (above); the summary and findings see rank 2's row only."""
    a = analyze(concat_timelines(_tp_run()), AnalyzeOptions(ranks=[2]))
    assert a.steps["rank"].tolist() == [2]
    row = a.steps.iloc[0]
    assert row["exposed_wait_ns"] == 41 * MS and row["waited_for_rank"] == 3
    assert row["bottleneck"] == "peer-wait-bound"
    wait = [f for f in a.findings if f.kind == "wait"]
    assert wait and wait[0].exposed_ns == 41 * MS


def test_activity_of_unknown_group_is_not_matched() -> None:
    """Ranks with two groups and no worker-thread list: the group of a gloo activity cannot be
    told, so nothing is matched (never across groups) and a note counts the activities
    (2 per rank x 4 ranks = 8)."""
    run = [
        Timeline(t.events, (TraceInfo(**{**t.traces[0].__dict__, "gloo_threads": ()}),))
        for t in _tp_run()
    ]
    a = analyze(concat_timelines(run))
    c = a.collectives
    assert c is not None
    assert not c.instances["matched"].astype(bool).any()
    assert any(n.startswith("8 communication activities whose process group") for n in c.notes)
    assert int(a.steps["exposed_wait_ns"].sum()) == 0


def test_partial_run_is_hedged() -> None:
    """Ranks 0 and 1 of the 4-rank run: their global all-reduce [15,60) matches on both with
    no wait (same durations), so the exposed time looks like transfer; with 2 of 4 ranks given
    the reason says waiting for a missing rank cannot be ruled out."""
    a = analyze(concat_timelines(_tp_run()[:2]))
    assert int(a.steps["exposed_wait_ns"].sum()) == 0
    for reason in a.steps["reason"]:
        assert "2 of 4 ranks given: waiting for a missing rank cannot be ruled out" in reason
    bound = [f for f in a.findings if f.kind == "transfer-bound"]
    for f in bound:
        assert f.advice.startswith("2 of 4 ranks given")


def _pipeline() -> list[Timeline]:
    """2 stages, one group '0' = {0,1}; sends and recvs run on the main thread (gloo's p2p).
    Rank 0: compute [0,30), send [30,32), compute [32,62), send [62,64); step [0,70).
    Rank 1: recv [5,32), compute [32,60), recv [60,64), compute [64,70); step [0,70).
    Pairs: send #1 with recv #1, send #2 with recv #2 (never send with send)."""
    g = (("0", (0, 1)),)
    r0 = [
        ("cpu_op", "aten::mm", 2, 0, 30),
        ("annotation", "gloo:send", 1, 30, 32),
        ("cpu_op", "aten::mm", 2, 32, 62),
        ("annotation", "gloo:send", 1, 62, 64),
    ]
    r1 = [
        ("annotation", "gloo:recv", 1, 5, 32),
        ("cpu_op", "aten::mm", 2, 32, 60),
        ("annotation", "gloo:recv", 1, 60, 64),
        ("cpu_op", "aten::mm", 2, 64, 70),
    ]
    return [
        _rank(0, r0, g, 2, threads=DEFAULT_T, step=(0, 70)),
        _rank(1, r1, g, 2, threads=DEFAULT_T, step=(0, 70)),
    ]


def test_pipeline_send_pairs_with_recv() -> None:
    """recv #1's wait part is the bubble before send #1 started: [5,30) = 25; recv #2's
    [60,62) = 2; sends wait 0 (their peer was already there). Rank 1 computes [32,60) and
    [64,70): both waits are exposed, 27 ms, credited to rank 0 (the sending stage)."""
    a = analyze(concat_timelines(_pipeline()))
    c = a.collectives
    assert c is not None
    m = c.instances[c.instances["matched"].astype(bool)]
    assert len(m) == 2
    assert m["src_rank"].tolist() == [0, 0] and m["dst_rank"].tolist() == [1, 1]
    pr = c.per_rank[c.per_rank["matched"].astype(bool)]
    for _, grp in pr.groupby("instance"):
        assert sorted(grp["name"]) == ["recv", "send"]
    recv = pr[pr["name"] == "recv"].sort_values("start_ns")
    assert recv["wait_ns"].tolist() == [25 * MS, 2 * MS]
    assert pr[pr["name"] == "send"]["wait_ns"].tolist() == [0, 0]
    steps = a.steps.set_index("rank")
    assert steps.loc[1, "exposed_wait_ns"] == 27 * MS
    assert steps.loc[1, "waited_for_rank"] == 0
    assert c.credit.groupby("waited_for_rank")["exposed_wait_ns"].sum().to_dict() == {0: 27 * MS}


def test_concurrent_waits_credit_the_latest_last_arrival() -> None:
    """Rank 0 sits in two all-reduces at once, in groups '1' = {0,1} ([0,50) on worker 20) and
    '0' = {0,2} ([10,60) on worker 10); rank 1 arrives at 40 in '1' ([40,50)), rank 2 at 55 in
    '0' ([55,60)). Waits on rank 0: '1' [0,40) (dur 50 - transfer 10), '0' [10,55) (50 - 5).
    Nothing computes: exposed wait = [0,55) = 55. Where both wait parts hold ([10,40)) the ns go
    to the instance whose last arrival came latest ('0', rank 2 at 55): rank 2 gets [10,55) = 45,
    rank 1 gets [0,10) = 10; 55 in all, each ns once."""
    groups0 = (("0", (0, 2)), ("1", (0, 1)))
    r0 = _rank(
        0,
        [
            ("annotation", "gloo:all_reduce", 20, 0, 50),
            ("annotation", "gloo:all_reduce", 10, 10, 60),
        ],
        groups0,
        3,
    )
    r1 = _rank(1, [("annotation", "gloo:all_reduce", 20, 40, 50)], (("1", (0, 1)),), 3)
    r2 = _rank(2, [("annotation", "gloo:all_reduce", 10, 55, 60)], (("0", (0, 2)),), 3)
    a = analyze(concat_timelines([r0, r1, r2]))
    c = a.collectives
    assert c is not None
    assert int(a.steps.set_index("rank").loc[0, "exposed_wait_ns"]) == 55 * MS
    got = c.credit.groupby("waited_for_rank")["exposed_wait_ns"].sum().to_dict()
    assert got == {1: 10 * MS, 2: 45 * MS}


# --- the credited-once property on every fixture and real trace -------------------------------


def _inputs() -> list[Path]:
    out = sorted(p for p in (FIXTURES / "workloads").iterdir() if p.is_dir())
    out += sorted((FIXTURES / "nsys").glob("*.sqlite"))
    if REAL_TRACES.is_dir():
        out += sorted(REAL_TRACES.glob("kineto/*.json.gz"))
        out += sorted(p for p in (REAL_TRACES / "kineto").iterdir() if p.is_dir())
        out += sorted(REAL_TRACES.glob("nsys/*.sqlite"))
    return out


def check_collective_bounds(c: Collectives) -> None:
    """Every per-collective figure within what it is part of (issue 36): per (instance, rank)
    0 <= exposed_wait <= wait <= dur, exposed <= dur, its exposed time outside the wait part
    within its transfer part (exposed - exposed_wait <= dur - wait), the unmatched part within
    that, the causes summing to its exposed time; per instance the sums likewise."""
    pr = c.per_rank
    if pr.empty:
        return
    dur = pr["dur_ns"].astype("int64")
    wait = pr["wait_ns"].astype("int64")
    exp = pr["exposed_ns"].astype("int64")
    ew = pr["exposed_wait_ns"].astype("int64")
    um = pr["exposed_unmatched_ns"].astype("int64")
    causes = sum(
        pr[f"exposed_{k}_ns"].astype("int64") for k in ("wait", "tail", "dependency", "host")
    )
    for name, ok in (
        ("0 <= exposed_wait <= wait", (ew >= 0) & (ew <= wait)),
        ("0 <= wait <= dur", (wait >= 0) & (wait <= dur)),
        ("exposed <= dur", exp <= dur),
        ("exposed transfer <= transfer", exp - ew <= dur - wait),
        ("0 <= unmatched <= exposed - exposed_wait", (um >= 0) & (um <= exp - ew)),
        ("causes sum to exposed", causes == exp),
    ):
        bad = pr[~ok.to_numpy()]
        assert bad.empty, (name, bad[["instance", "rank", "dur_ns", "wait_ns", "exposed_ns"]])
    inst = c.instances.set_index("instance")
    sums = pr.groupby("instance")[["dur_ns", "wait_ns", "exposed_ns"]].sum()
    assert (inst.loc[sums.index, "wait_ns"].astype("int64") == sums["wait_ns"]).all()
    assert (inst.loc[sums.index, "exposed_ns"].astype("int64") <= sums["dur_ns"]).all()
    assert (inst["transfer_ns"].astype("int64") >= 0).all()


def _check_bounded(path: Path, ranks: list[int] | None = None) -> None:
    a = analyze(path, AnalyzeOptions(ranks=ranks))
    c = a.collectives
    assert c is not None
    check_collective_bounds(c)
    steps = a.steps
    total_wait = int(steps["exposed_wait_ns"].sum())
    total_exposed = int(steps["exposed_comm_ns"].sum())
    cr = c.credit
    shown = cr[cr["rank"].isin(set(steps["rank"]))]
    if ranks is None:
        # every exposed-wait ns credited once: per window and in all
        assert int(cr["exposed_wait_ns"].sum()) == total_wait
        assert int(c.stragglers["exposed_waited_for_ns"].sum()) == total_wait
        per_w = cr.groupby("window")["exposed_wait_ns"].sum()
        w = pd.Series(steps["exposed_wait_ns"].to_numpy(), index=a.windows["window"].to_numpy())
        assert per_w.reindex(w.index, fill_value=0).tolist() == w.tolist()
    else:
        assert int(shown["exposed_wait_ns"].sum()) == total_wait
    # exposed waiting is part of all waiting (hidden or not)
    assert c.stragglers["exposed_waited_for_ns"].sum() <= c.stragglers["waited_for_ns"].sum()
    for f in a.findings:
        if f.kind == "wait":
            assert f.exposed_ns <= total_exposed
            got = f.evidence.get("exposed_waited_for_ns")
            assert got is None or got <= int(cr["exposed_wait_ns"].sum())
        if f.share_ratio is not None:
            assert 0 <= f.share_ratio <= 1 + 1e-12, (path, f.kind, f.share_ratio)


@pytest.mark.parametrize("path", sample(_inputs(), 8), ids=lambda p: p.name)
def test_waiting_credited_once(path: Path) -> None:
    _check_bounded(path)


def test_waiting_credited_once_with_a_rank_selected() -> None:
    """--rank 0 of the slow_rank fixture: the wait shown is rank 0's, credited in full."""
    _check_bounded(FIXTURES / "workloads" / "slow_rank", ranks=[0])


def test_blame_follows_the_chain_to_the_root() -> None:
    """The TP run with rank 2 arriving at the global all-reduce at 57 and rank 3 at 56: the
    global's last arrival is rank 2, so rank 0 waits [15,57) = 42 (dur 45 - transfer 3) for
    rank 2. Rank 2's lateness in it is [15,57) (first arrival: rank 0 at 15) = 42; since its
    step began (0) rank 2 waited 40 ([10,50), TP, for rank 3) and rank 0 waited 0 before 15:
    40 - 0 >= 42 / 2, so follow to rank 3, late in the TP all-reduce by [10,50) = 40 (its early
    peer rank 2 arrived at 10). Since their steps began, rank 3 ran ``straggler_sleep`` 40 in
    [0,50) and ``aten::mm`` 10; rank 2 ran ``aten::mm`` 10 in [0,10): the sleep ran 40 longer,
    40 of 40 ms, 100 % explained. Rank 2's own row: it waited 40 for rank 3, same cause."""
    a = analyze(concat_timelines(_tp_run(rank2_global=57, rank3_global=56)))
    b = _blame_by_rank(a)
    assert b.loc[0, "waited_for_rank"] == 2 and b.loc[0, "exposed_wait_ns"] == 42 * MS
    assert b.loc[0, "chain"] == (2, 3) and b.loc[0, "root_rank"] == 3
    assert b.loc[0, "cause"] == "straggler_sleep"
    assert (b.loc[0, "lateness_ns"], b.loc[0, "cause_ns"]) == (40 * MS, 40 * MS)
    assert b.loc[2, "chain"] == (3,) and b.loc[2, "cause"] == "straggler_sleep"
    wait = next(f for f in a.findings if f.kind == "wait")
    assert (
        "rank 0 waited 42.00 ms for rank 2 <- rank 2 was itself waiting for rank 3 <- rank 3's "
        "`straggler_sleep` ran 40.00 ms longer than its early peer's, of its 40.00 ms lateness "
        "(100.0% explained)"
    ) in wait.advice
    assert wait.evidence["blame"][0]["chain"] == [2, 3]


def test_blame_says_unexplained_below_half() -> None:
    """Without the sleep range, rank 3's 40 ms lateness [10,50) has nothing open on its main
    thread (its ops are [0,10) and [60,100)): cause None, "unexplained"."""
    run = _tp_run()
    ev = run[3].events
    run[3] = Timeline(
        ev[ev["name"].astype(str) != "straggler_sleep"].reset_index(drop=True), run[3].traces
    )
    a = analyze(concat_timelines(run))
    b = _blame_by_rank(a)
    assert b.loc[2, "root_rank"] == 3 and b.loc[2, "cause"] is pd.NA
    wait = next(f for f in a.findings if f.kind == "wait")
    assert "rank 3 was late by 40.00 ms: unexplained" in wait.advice


# --- real gloo runs with a planted straggler (fixtures/workloads/README.md) -------------------

WORK = FIXTURES / "workloads"


def _blame_of(a: object, rank: int) -> pd.DataFrame:
    c = a.collectives  # type: ignore[attr-defined]
    b = c.blame
    return b[b["rank"] == rank]


def _largest_wait_per_step(a: object, rank: int) -> pd.DataFrame:
    """Per step of ``rank``: its blame row of the peer it waited for longest. Smaller waits
    for other peers are real too (a rank arriving a few ms late on a loaded host); they lie
    inside the autograd ops that make the calls (``_ReduceFromTP``, ``_AllToAll``), so they
    show since waits in communication calls are not compute."""
    b = _blame_of(a, rank)
    return b.loc[b.groupby("step")["exposed_wait_ns"].idxmax()]


def test_tp_slow_chain_to_rank3_sleep() -> None:
    """tp_slow: rank 3 sleeps 40 ms (``straggler_sleep``) before its TP all-reduce; rank 2
    (its TP peer) waits for it, then rank 0 waits for rank 2 in their data-parallel all-reduce
    and rank 1 for rank 3 in theirs. Every step: rank 0's chain is 2 <- 3, rank 1's is 3, the
    root's cause ``straggler_sleep`` explains at least half; the straggler named is rank 3 (the
    root), not rank 2."""
    a = analyze(WORK / "tp_slow")
    c = a.collectives
    assert c is not None and c.top_straggler == 3
    b0, b1 = _largest_wait_per_step(a, 0), _largest_wait_per_step(a, 1)
    assert len(b0) == 3 and set(b0["chain"]) == {(2, 3)}
    assert len(b1) == 3 and set(b1["chain"]) == {(3,)}
    for b in (b0, b1):
        assert set(b["cause"]) == {"straggler_sleep"}
        assert (b["explained_ratio"] >= 0.5).all()
    assert set(a.steps.loc[a.steps["rank"] == 0, "waited_for_rank"]) == {2}
    assert set(a.steps.loc[a.steps["rank"] == 1, "waited_for_rank"]) == {3}
    # pg_config groups: TP {0,1} {2,3}, DP {0,2} {1,3}; nothing matched across them
    m = c.instances[c.instances["matched"].astype(bool)]
    assert set(m["ranks"]) == {(0, 1), (2, 3), (0, 2), (1, 3)}


def test_tp_slow_rank_selected_keeps_the_diagnosis() -> None:
    """--rank 0 on tp_slow: rank 0's steps, the same waiting (matched over all four ranks) and
    the same chain to rank 3's sleep as the full run."""
    full = analyze(WORK / "tp_slow")
    one = analyze(WORK / "tp_slow", AnalyzeOptions(ranks=[0]))
    assert set(one.steps["rank"]) == {0}
    f0 = full.steps[full.steps["rank"] == 0].reset_index(drop=True)
    assert one.steps["exposed_wait_ns"].tolist() == f0["exposed_wait_ns"].tolist()
    assert one.steps["bottleneck"].tolist() == f0["bottleneck"].tolist()
    wait = next(f for f in one.findings if f.kind == "wait")
    assert "rank 0 waited" in wait.advice and "rank 3's `straggler_sleep`" in wait.advice
    assert "rank 1 waited" not in wait.advice


def test_tp_slow_subset_is_hedged() -> None:
    """Ranks 0 and 1 of tp_slow (the straggler's group not given): every reason decided by
    exposed transfer says 2 of 4 ranks given, and no finding states a faster interconnect as a
    fact (the transfer-bound advice starts with the hedge)."""
    a = analyze([WORK / "tp_slow" / "rank0.json.gz", WORK / "tp_slow" / "rank1.json.gz"])
    comm = a.steps[a.steps["bottleneck"].isin(["communication-bound", "exposed-communication"])]
    assert len(comm)
    assert all("2 of 4 ranks given" in r for r in comm["reason"])
    for f in a.findings:
        if "interconnect" in f.advice:
            assert f.advice.startswith("2 of 4 ranks given")


def test_pipeline_slow_last_stage() -> None:
    """pipeline_slow_last: stage 1 sleeps 10 ms in each micro-batch forward; stage 0 waits for
    it (blocking sends, then recvs of the gradients). Sends pair with recvs only; rank 1 is
    the straggler and its ``straggler_sleep`` explains rank 0's waiting."""
    a = analyze(WORK / "pipeline_slow_last")
    c = a.collectives
    assert c is not None and c.top_straggler == 1
    pr = c.per_rank[c.per_rank["matched"].astype(bool)]
    assert len(pr)
    for _, grp in pr.groupby("instance"):
        assert sorted(grp["name"]) == ["recv", "send"]
    b0 = _blame_of(a, 0)
    assert len(b0) and set(b0["cause"]) == {"straggler_sleep"}
    assert set(a.steps.loc[a.steps["rank"] == 0, "bottleneck"]) == {"peer-wait-bound"}


@pytest.mark.parametrize("folder", ["moe_slow", "moe_slow_regen"])
def test_moe_slow_root_is_rank2(folder: str) -> None:
    """moe_slow: rank 2 sleeps 30 ms before its all-to-all; whatever rank the others waited
    for directly, every chain of ranks 0, 1 and 3 ends at rank 2's ``straggler_sleep``.
    ``moe_slow_regen`` is the same plant, generated again: its peers' waits lie inside
    ``_AllToAll`` cpu_ops, so it reads right only when the time in communication calls is not
    compute (metrics.md "Kinds"); it was read as "straggler: rank 3" before."""
    a = analyze(WORK / folder)
    c = a.collectives
    assert c is not None and c.top_straggler == 2
    for r in (0, 1, 3):
        b = _blame_of(a, r)
        assert len(b)
        # most of each rank's waiting traces to rank 2's sleep (the rest: a few ms of waits
        # for peers arriving late on a loaded host, see _largest_wait_per_step)
        planted = (b["root_rank"] == 2) & (b["cause"] == "straggler_sleep")
        assert b.loc[planted, "exposed_wait_ns"].sum() >= 0.8 * b["exposed_wait_ns"].sum()


# --- the credit rule against a per-ns brute force (hypothesis) ---------------------------------

_part = st.tuples(
    st.integers(0, 2), st.integers(0, 40), st.integers(1, 20), st.integers(0, 5), st.integers(0, 3)
)


@settings(max_examples=examples(150), deadline=None)
@given(parts=st.lists(_part, min_size=0, max_size=8), cut=st.lists(st.integers(0, 60), max_size=6))
def test_credit_segments_match_brute_force(parts: list, cut: list) -> None:
    """Per ns t of the exposed-wait set of window w: the covering part with the highest
    (priority, row) gets it. The exposed-wait set is the union of the parts minus some cuts
    ([c, c+3) for each c in ``cut``): every ns of it lies in a part, as in the analysis."""
    w = np.array([p[0] for p in parts], dtype=np.int64)
    s = np.array([p[1] for p in parts], dtype=np.int64)
    e = s + np.array([p[2] for p in parts], dtype=np.int64)
    prio = np.array([p[3] for p in parts], dtype=np.int64)
    row = np.array([p[4] for p in parts], dtype=np.int64)
    brute: dict[tuple[int, int], int] = {}
    ex_g, ex_s = [], []
    for win in range(3):
        for t in range(80):
            if any(c <= t < c + 3 for c in cut):
                continue
            cover = [i for i in range(len(parts)) if w[i] == win and s[i] <= t < e[i]]
            if not cover:
                continue
            ex_g.append(win)
            ex_s.append(t)
            best = max(cover, key=lambda i: (prio[i], row[i]))
            k = (win, int(row[best]))
            brute[k] = brute.get(k, 0) + 1
    g = np.array(ex_g, dtype=np.int64)
    t0 = np.array(ex_s, dtype=np.int64)
    exposed = iv.grouped_union(g, t0, t0 + 1, 3)
    gw, gr, gns = credit_segments(row, w, s, e, prio, exposed, 3)
    got = {(int(a), int(b)): int(c) for a, b, c in zip(gw, gr, gns, strict=True)}
    assert got == brute


def test_gloo_pools_from_thread_ids() -> None:
    """Pools: consecutive ids, at most 2 a pool. (10, 11, 20, 21) -> pools 0 0 1 1;
    (10, 11, 12) -> 0 0 1 (a third thread starts a new pool); (10, 20) -> 0 1 (lone threads)."""
    from traceoverlap.rank.instances import gloo_pools

    def pools(t: list[int]) -> list[int]:
        return gloo_pools(np.array(t, dtype=np.int64)).tolist()

    assert pools([10, 11, 20, 21]) == [0, 0, 1, 1]
    assert pools([10, 11, 12]) == [0, 0, 1]
    assert pools([10, 20]) == [0, 1]


def test_interleaved_worker_ids_pair_in_order() -> None:
    """Worker ids interleaved with other processes' threads (10, 12, 20, 23: four 'pools' by
    consecutive ids for 2 groups) are paired in order: (10, 12) default group, (20, 23) the TP
    group; the TP run then matches as with consecutive ids (3 matched instances)."""
    run = []
    for t in _tp_run():
        ev = t.events.copy()
        tid = ev["tid"].to_numpy().copy()
        tid[tid == 11] = 12
        tid[tid == 21] = 23
        ev["tid"] = tid
        info = TraceInfo(**{**t.traces[0].__dict__, "gloo_threads": (10, 12, 20, 23)})
        run.append(Timeline(ev, (info,)))
    c = analyze(concat_timelines(run)).collectives
    assert c is not None
    assert int(c.instances["matched"].astype(bool).sum()) == 3


def test_sends_in_a_wider_group_pair_by_end_time() -> None:
    """3 stages in one group '0' = {0,1,2}, no peer in the trace: rank 0 send [10,20), rank 1
    recv [5,20) then send [30,40), rank 2 recv [25,40). Ends 20/20 and 40/40 (within 1 ms)
    pair send 0 -> recv 1 and send 1 -> recv 2. Recv waits: rank 1 [5,10) = 5 for rank 0,
    rank 2 [25,30) = 5 for rank 1; nothing computes, so both are exposed and credited so."""
    g = (("0", (0, 1, 2)),)
    r0 = _rank(0, [("annotation", "gloo:send", 1, 10, 20)], g, 3, DEFAULT_T, (0, 50))
    r1 = _rank(
        1,
        [("annotation", "gloo:recv", 1, 5, 20), ("annotation", "gloo:send", 1, 30, 40)],
        g,
        3,
        DEFAULT_T,
        (0, 50),
    )
    r2 = _rank(2, [("annotation", "gloo:recv", 1, 25, 40)], g, 3, DEFAULT_T, (0, 50))
    a = analyze(concat_timelines([r0, r1, r2]))
    c = a.collectives
    assert c is not None
    m = c.instances[c.instances["matched"].astype(bool)].sort_values("start_ns")
    assert list(zip(m["src_rank"], m["dst_rank"], strict=True)) == [(0, 1), (1, 2)]
    got = c.credit.groupby("waited_for_rank")["exposed_wait_ns"].sum().to_dict()
    assert got == {0: 5 * MS, 1: 5 * MS}
    # paired, they have their peer: no row says why it is unmatched (§12)
    assert c.per_rank["unmatched_why"].isna().all()
    assert int(a.steps["exposed_unmatched_ns"].sum()) == 0


@settings(max_examples=examples(40), deadline=None)
@example(a=[0, 0], b=[0, 43], ends=(61, 61), comp=[(27, 15), (41, 20)])
@given(
    a=st.lists(st.integers(0, 59), min_size=2, max_size=2),
    b=st.lists(st.integers(0, 59), min_size=2, max_size=2),
    ends=st.tuples(st.integers(61, 90), st.integers(61, 90)),
    comp=st.lists(st.tuples(st.integers(0, 95), st.integers(1, 20)), max_size=3),
)
def test_credit_end_to_end_against_brute_force(
    a: list[int], b: list[int], ends: tuple[int, int], comp: list[tuple[int, int]]
) -> None:
    """Rank 0 runs two all-reduces at once: group '1' = {0,1} (rank 0 arrives a[0], rank 1
    a[1], both end at ends[0]) and group '0' = {0,2} (b[0], b[1], end ends[1]); rank 0 also
    computes ``comp`` on its main thread. Per ms (every time is whole ms), from the rules alone:
    a member's wait part is [its start, the latest start of its instance); an exposed ms of
    rank 0 (a collective runs, nothing computes) inside a wait part is credited to the last
    arrival of the instance whose last arrival came latest. The tool's credit must agree.

    The ops are laid end to end on the main thread (each starts no earlier than the previous
    ended; their union is that of ``comp``): a thread's ops never partly overlap, and with
    nesting the blocked-wait rule (metrics.md "Kinds": the stretch after a nested op returns,
    up to an all-reduce's end, is a wait inside the enclosing op, not compute) would apply,
    which this brute force leaves out. Hypothesis found both: ops [27, 42) and [41, 61) and an
    all-reduce ending at 61 gave a wait [42, 61) inside the second op."""
    last1, last0 = max(a), max(b)
    if last1 == last0:  # the latest-last-arrival rule needs distinct last arrivals here
        return
    groups0 = (("0", (0, 2)), ("1", (0, 1)))
    rows0: list[tuple[str, str, int, int, int]] = [
        ("annotation", "gloo:all_reduce", 20, a[0], ends[0]),
        ("annotation", "gloo:all_reduce", 10, b[0], ends[1]),
    ]
    reached = 0
    for s, e in sorted((s, min(s + d, 100)) for s, d in comp):
        if max(s, reached) < e:
            rows0.append(("cpu_op", "aten::mm", 1, max(s, reached), e))
        reached = max(reached, e)
    r0 = _rank(0, rows0, groups0, 3)
    r1 = _rank(1, [("annotation", "gloo:all_reduce", 20, a[1], ends[0])], (("1", (0, 1)),), 3)
    r2 = _rank(2, [("annotation", "gloo:all_reduce", 10, b[1], ends[1])], (("0", (0, 2)),), 3)
    got_a = analyze(concat_timelines([r0, r1, r2]))
    c = got_a.collectives
    assert c is not None
    check_collective_bounds(c)  # concurrent instances: one's wait is not the other's
    got = (
        c.credit[c.credit["rank"] == 0].groupby("waited_for_rank")["exposed_wait_ns"].sum() // MS
    ).to_dict()
    # brute force, rank 0
    who1 = 1 if a[1] > a[0] else None  # the last arrival other than rank 0 (rank 0 waits 0 else)
    who0 = 2 if b[1] > b[0] else None
    want: dict[int, int] = {}
    for t in range(100):
        if any(s <= t < min(s + d, 100) for s, d in comp):
            continue
        in1 = who1 is not None and a[0] <= t < last1
        in0 = who0 is not None and b[0] <= t < last0
        if not (in1 or in0):
            continue
        if in1 and in0:
            pick = who1 if last1 > last0 else who0
        else:
            pick = who1 if in1 else who0
        assert pick is not None
        want[pick] = want.get(pick, 0) + 1
    assert got == want


def test_blame_line_words() -> None:
    from traceoverlap.run.job import blame_line

    base = {"rank": 0, "exposed_wait_ns": 3_220_000, "chain": (1,), "cause": "grad_sync"}
    # a root with no measured lateness (ratio NaN, as pandas gives back a None) is not explained
    # by the range that happened to be open: "0.00 ms longer ... (- explained)" said nothing
    line = blame_line({**base, "lateness_ns": 0, "cause_ns": 0, "explained_ratio": float("nan")})
    assert line == "rank 0 waited 3.22 ms for rank 1 <- rank 1 was not measurably late: unexplained"
    # 40 ms late, 38 ms of it in the range: 95 % explained
    line = blame_line(
        {**base, "lateness_ns": 40_000_000, "cause_ns": 38_000_000, "explained_ratio": 0.95}
    )
    assert line.endswith(
        "rank 1's `grad_sync` ran 38.00 ms longer than its early peer's, of its "
        "40.00 ms lateness (95.0% explained)"
    )
    # 40 ms late, 10 ms explained (25 % < 50 %): unexplained
    line = blame_line(
        {**base, "lateness_ns": 40_000_000, "cause_ns": 10_000_000, "explained_ratio": 0.25}
    )
    assert line.endswith("rank 1 was late by 40.00 ms: unexplained")
    # late_at_start_ns as a nullable Int64 column gives it back: NA (not known) or a value; the
    # capture clause only when it is at least half the lateness (30 of 40 ms: 75 %)
    late = {**base, "lateness_ns": 40_000_000, "cause_ns": 0, "explained_ratio": 0.0}
    assert blame_line({**late, "late_at_start_ns": pd.NA}).endswith("40.00 ms: unexplained")
    assert blame_line({**late, "late_at_start_ns": 10_000_000}).endswith("40.00 ms: unexplained")
    assert blame_line({**late, "late_at_start_ns": 30_000_000}).endswith(
        "(it began its step 30.00 ms after its peer, before the first collective of the two "
        "that the trace holds: the cause precedes the capture)"
    )


def test_text_across_ranks_waiting_is_the_credited_total() -> None:
    # bucketed: several all-reduces in flight at once on the gloo threads. The cross-rank text
    # used to sum the instances' exposed waits (26.60 ms: ns where two instances were exposed
    # together counted twice) next to per-rank credits summing to 21.36 ms. One number: the
    # step parts' exposed wait, which the per-rank credits add up to exactly.
    from traceoverlap.core import fmt
    from traceoverlap.reporters.across_ranks import across_ranks_lines

    a = analyze(WORK / "bucketed")
    c = a.collectives
    assert c is not None
    ew = int(a.steps["exposed_wait_ns"].sum())
    assert int(c.stragglers["exposed_waited_for_ns"].sum()) == ew
    line = next(x for x in across_ranks_lines(c, a.steps) if "exposed communication" in x)
    assert f"{fmt.ms(ew)} ms waiting" in line


def _optimizer_sleep_run(first_step: bool = True) -> list[Timeline]:
    """2 ranks (one group), rank 1 sleeping in its optimizer, after its step's last collective:
    its next step starts late, so it arrives late at the next collective. Main thread (tid 1):
    ``aten::mm`` and an ``optimizer`` range; the all-reduces on gloo thread 10.

    rank 0: step A [0,60): mm [0,40), all-reduce [40,50), optimizer [50,60);
            step B [60,145): mm [60,100), all-reduce [100,135), optimizer [135,145).
    rank 1: step A [0,90): mm [0,40), all-reduce [40,50), optimizer [50,90) holding
            ``straggler_sleep`` [55,85); step B [90,145): mm [90,130), all-reduce [130,135),
            optimizer [135,145).

    ``first_step=False`` drops step A (a capture that begins at step B)."""
    out = []
    for r in (0, 1):
        b0 = 60 if r == 0 else 90
        rows: list[tuple[str, str, int, int, int]] = [
            ("cpu_op", "aten::mm", 1, b0, b0 + 40),
            ("annotation", "gloo:all_reduce", 10, b0 + 40 if r == 0 else 130, 135),
            ("annotation", "optimizer", 1, 135, 145),
        ]
        if first_step:
            rows += [
                ("annotation", "ProfilerStep#2", 1, b0, 145),
                ("cpu_op", "aten::mm", 1, 0, 40),
                ("annotation", "gloo:all_reduce", 10, 40, 50),
                ("annotation", "optimizer", 1, 50, b0),
            ]
            if r == 1:
                rows += [("annotation", "straggler_sleep", 1, 55, 85)]
        step = (0, b0) if first_step else (b0, 145)
        out.append(_rank(r, rows, (("0", (0, 1)),), 2, threads=(10, 11), step=step))
    return out


def test_blame_finds_a_sleep_after_the_last_collective_of_the_step() -> None:
    """Step B's all-reduce: rank 0 arrives at 100, rank 1 at 130 (lateness 30); rank 0 waits
    [100,130) = 30 for rank 1. Since their step B began (rank 0 at 60, rank 1 at 90) both ran
    mm 40 and nothing else: no range ran longer. The lateness was there at step B's start: it
    built up since the two were last in step, at the end of step A's all-reduce (50 on both).
    Since 50: rank 1 ran optimizer 40 (the sleep 30 inside it) and mm 40; rank 0 optimizer 10
    and mm 40. Excess: optimizer 30, straggler_sleep 30; the innermost (least time: 30 < 40)
    is named: straggler_sleep, 30 of 30 ms, 100 % explained."""
    a = analyze(concat_timelines(_optimizer_sleep_run()))
    c = a.collectives
    assert c is not None
    b = c.blame[c.blame["step"] == "2"].set_index("rank")
    assert b.loc[0, "waited_for_rank"] == 1 and b.loc[0, "exposed_wait_ns"] == 30 * MS
    assert b.loc[0, "cause"] == "straggler_sleep"
    assert (b.loc[0, "lateness_ns"], b.loc[0, "cause_ns"]) == (30 * MS, 30 * MS)
    assert pd.isna(b.loc[0, "late_at_start_ns"])  # an earlier shared collective was there
    wait = next(f for f in a.findings if f.kind == "wait")
    assert "rank 1's `straggler_sleep` ran 30.00 ms longer than its early peer's" in wait.advice


def test_blame_says_when_the_lateness_began_before_the_capture() -> None:
    """The same run captured from step B: no earlier collective of the two, so the windows are
    the step starts, where both ran mm 40: unexplained. Rank 1 began step B at 90, rank 0 at 60:
    30 ms late already, all of its 30 ms lateness, so the line says the cause precedes the
    capture (late_at_start_ns = 30 ms)."""
    a = analyze(concat_timelines(_optimizer_sleep_run(first_step=False)))
    b = _blame_by_rank(a)
    assert b.loc[0, "cause"] is None or b.loc[0, "explained_ratio"] < 0.5
    assert b.loc[0, "late_at_start_ns"] == 30 * MS
    wait = next(f for f in a.findings if f.kind == "wait")
    assert (
        "rank 1 was late by 30.00 ms: unexplained (it began its step 30.00 ms after its peer, "
        "before the first collective of the two that the trace holds: the cause precedes the "
        "capture)"
    ) in wait.advice


def test_ddp_optimizer_slow_names_the_sleep_after_the_last_collective() -> None:
    """ddp_optimizer_slow: rank 1 sleeps 30 ms in its optimizer, after its step's last bucket
    (fixtures/workloads/README.md). Rank 0 waits for it in each step's first bucket. Steps 3
    and 4: the cause is rank 1's ``straggler_sleep``, at least half of the lateness. Step 2, the
    first captured: the sleep came before the capture (rank 1 began the step late, no earlier
    collective in the trace): late_at_start_ns is at least half the lateness and the line says
    the cause precedes the capture."""
    a = analyze(WORK / "ddp_optimizer_slow")
    b0 = _largest_wait_per_step(a, 0).set_index("step")
    assert sorted(b0.index) == ["2", "3", "4"] and set(b0["root_rank"]) == {1}
    later = b0.loc[["3", "4"]]
    assert set(later["cause"]) == {"straggler_sleep"}
    assert (later["explained_ratio"] >= 0.5).all()
    first = b0.loc["2"]
    assert 2 * int(first["late_at_start_ns"]) >= int(first["lateness_ns"])
    wait = next(f for f in a.findings if f.kind == "wait")
    assert "rank 1's `straggler_sleep` ran" in wait.advice
    assert "the cause precedes the capture" in wait.advice
