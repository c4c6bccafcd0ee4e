"""One step across every rank on one clock (issue 23): the analysis side and the report section."""

from __future__ import annotations

import numpy as np
import pytest
from _html_data import ddp_run
from builders import MS, gpu_timeline
from conftest import REAL_TRACES
from test_job_model import _rank

from traceoverlap import analyze, step_detail
from traceoverlap.core.fmt import duration
from traceoverlap.core.model import concat_timelines
from traceoverlap.reporters import _html_across
from traceoverlap.reporters.html_report import render
from traceoverlap.run.across import step_across

AR = "ncclKernel_AllReduce_RING_LL_Sum_float"
DLRM = REAL_TRACES / "kineto" / "dlrm_v100_8rank"


def skewed_pair():
    """Two ranks, one all-reduce; rank 1's clock reads 5 ms more than rank 0's.

    On rank 0's clock (the run's clock): both steps are [0, 100) ms, compute [0, 40) on each;
    rank 0 starts the all-reduce at 10, rank 1 at 40 (late), both end at 50.
    Rank 1 records everything 5 ms later: step [5, 105), compute [5, 45), all-reduce [45, 55).
    """
    r0 = gpu_timeline(
        [("compute_kernel", 7, 0, 40 * MS), (AR, 20, 10 * MS, 50 * MS)],
        steps=[("ProfilerStep#1", 0, 100 * MS)],
        rank=0,
    )
    r1 = gpu_timeline(
        [("compute_kernel", 7, 5 * MS, 45 * MS), (AR, 20, 45 * MS, 55 * MS)],
        steps=[("ProfilerStep#1", 5 * MS, 105 * MS)],
        rank=1,
    )
    return concat_timelines([r0, r1])


def test_skewed_pair_on_one_clock():
    tl = skewed_pair()
    a = analyze(tl)
    x = step_across(a, source=tl)
    # the offset comes from the all-reduce's end: 55 - 50 = 5 ms on rank 1 (estimated clocks)
    assert x.clock == "estimated"
    assert [(r.rank, r.offset_ns) for r in x.ranks] == [(0, 0), (1, 5 * MS)]
    # a GPU step's window spans its activities (metrics.md): [0, 50) ms on both ranks once
    # rank 1's 5 ms are removed; rank 1's compute is [0, 40)
    assert (x.origin_ns, x.end_ns) == (0, 50 * MS)
    assert [(r.start_ns, r.end_ns) for r in x.ranks] == [(0, 50 * MS), (0, 50 * MS)]
    assert x.ranks[1].compute[0].tolist() == [0] and x.ranks[1].compute[1].tolist() == [40 * MS]
    # the all-reduce: transfer = the shortest duration = rank 1's 10 ms; rank 0 waits 40 - 10 =
    # 30 ms, its wait part [10, 40) ms; rank 1 arrived last (latest aligned start: 40 > 10)
    inst = x.instances.sort_values("rank")
    assert inst["start_ns"].tolist() == [10 * MS, 40 * MS]
    assert inst["end_ns"].tolist() == [50 * MS, 50 * MS]
    assert inst["wait_ns"].tolist() == [30 * MS, 0]
    assert inst["transfer_ns"].tolist() == [10 * MS, 10 * MS]
    assert inst["last_rank"].tolist() == [1, 1]
    # all communication of the step is that one instance: nothing left as "other communication"
    assert all(r.other_comm[0].size == 0 for r in x.ranks)
    assert x.ranks[0].comm[0].tolist() == [10 * MS] and x.ranks[0].comm[1].tolist() == [50 * MS]
    assert inst["waited_for_rank"].tolist()[0] == 1  # the job model: rank 0 waited for rank 1
    # rank 0's wait [10, 40) lies under its compute [0, 40): no exposed waiting to credit
    assert x.waited_for.empty


def test_report_section_draws_wait_and_transfer_with_hover():
    tl = skewed_pair()
    a = analyze(tl)
    x = step_across(a, source=tl)
    page = render(a, plotlyjs="cdn", across=x)
    assert "Step 1 across ranks" in page and "(the median step of rank 0;" in page
    assert "the other ranks waited most for" not in page  # no exposed waiting (see above)
    assert "Clocks aligned on collective end times" in page and "rank 1 −5.00 ms" in page
    data = [t.to_plotly_json() for t in _html_across.across_figure(x).fig.data]
    wait = [t for t in data if t.get("name") == _html_across.WAIT_LABEL]
    transfer = [t for t in data if t.get("name") == _html_across.TRANSFER_LABEL]
    # one wait part (rank 0: [10, 40) ms), two transfer parts ([40, 50) ms on each rank)
    assert len(wait) == 1 and list(wait[0]["base"]) == [10.0] and list(wait[0]["x"]) == [30.0]
    assert sorted(b for t in transfer for b in t["base"]) == [40.0, 40.0]
    hover = wait[0]["hovertext"][0]
    assert "last arrival: rank 1" in hover and f"waited {duration(30 * MS)}" in hover
    assert f"waited {duration(30 * MS)} for rank 1, transfer {duration(10 * MS)}" in hover


def test_many_ranks_collapse_to_one_row_each():
    tl = ddp_run(20, steps=2)
    a = analyze(tl)
    x = step_across(a, source=tl)
    d = _html_across.across_figure(x)
    assert d.collapsed
    assert len(d.fig.layout.yaxis.ticktext) == 20
    page = render(a, plotlyjs="cdn", across=x)
    assert "20 ranks: one row per rank" in page


def test_eight_ranks_row_groups():
    tl = ddp_run(8, steps=3)  # the median step, 2, has a memcpy
    a = analyze(tl)
    d = _html_across.across_figure(step_across(a, source=tl))
    assert not d.collapsed
    ticks = list(d.fig.layout.yaxis.ticktext)
    # per rank: phases, compute, communication, memory
    assert len(ticks) == 8 * 4
    assert ticks[:4] == ["<b>rank 0</b>  phases", "compute", "communication", "memory"]


def test_asked_step_and_missing_step():
    tl = ddp_run(2, steps=3)
    a = analyze(tl)
    x = step_across(a, "3", source=tl)
    assert str(x.step) == "3" and x.chosen == "asked" and not x.missing
    with pytest.raises(Exception, match="no rank has such a step"):
        step_across(a, "9", source=tl)


@pytest.mark.skipif(not DLRM.exists(), reason="shared real traces not present")
def test_dlrm_median_step_across_8_ranks():
    a = analyze(DLRM)
    x = step_across(a)
    assert len(x.ranks) == 8 and str(x.step) == str(step_detail(a).step)
    # every matched instance of the step is on all 8 ranks and ends together (unix clocks)
    m = x.instances[x.instances["matched"]]
    assert (m.groupby("instance")["rank"].nunique() == 8).all()
    spread = m.groupby("instance")["end_ns"].agg(lambda e: int(np.ptp(e.to_numpy())))
    assert (spread <= 10_000).all()
    # the step's waits are the analysis' own: sum of wait parts per rank = per_rank's
    pr = a.collectives.per_rank
    pr = pr[pr["step"].astype(str) == str(x.step)]
    assert int(m["wait_ns"].sum()) == int(pr.loc[pr["matched"], "wait_ns"].sum())
    # the job model's blame of the step, most waiting first: rank 1's 9.09 ms for rank 7 leads
    assert not x.blame.empty
    top = x.blame.iloc[0]
    assert (int(top["rank"]), int(top["waited_for_rank"])) == (1, 7)
    assert x.blame["exposed_wait_ns"].is_monotonic_decreasing
    page = render(a, plotlyjs="cdn", across=x)
    assert "Who waited for whom" in page and "waited" in x.blame["line"].iloc[0]


def test_report_with_the_step_across_ranks_is_deterministic():
    tl = skewed_pair()
    a = analyze(tl)
    one = render(a, plotlyjs="cdn", across=step_across(a, source=tl))
    two = render(a, plotlyjs="cdn", across=step_across(a, source=tl))
    assert one == two


def concurrent_all_reduces():
    """Three CPU ranks, two all-reduces of the world group at once on rank 0 (gloo threads 10
    and 11), ms: A (seq 0): rank 0 [10,100), rank 1 [70,100), rank 2 [68,100); B (seq 1):
    rank 0 [40,100), rank 1 [72,100), rank 2 [75,100). Every rank computes [0,10) only."""
    spans = {0: ((10, 100), (40, 100)), 1: ((70, 100), (72, 100)), 2: ((68, 100), (75, 100))}
    ranks = []
    for r, (a, b) in spans.items():
        rows = [("cpu_op", "aten::mm", 1, 0, 10)]
        rows += [
            ("annotation", "gloo:all_reduce", 10, *a),
            ("annotation", "gloo:all_reduce", 11, *b),
        ]
        ranks.append(_rank(r, rows, (("0", (0, 1, 2)),), 3, threads=(10, 11)))
    return concat_timelines(ranks)


def test_across_names_whom_the_job_model_credits():
    # A: last arrival rank 1 (70), transfer 30: waits rank 0 [10,70) 60, rank 2 [68,70) 2.
    # B: last arrival rank 2 (75), transfer 25: waits rank 0 [40,75) 35, rank 1 [72,75) 3.
    # Summed by last arrival (what the view used to show): rank 1 60 + 2 = 62 > rank 2 35 + 3 = 38.
    # The job model credits each exposed-wait ns once: on rank 0, [40,70) lies in both wait parts
    # and goes to B, whose last arrival came later (75 > 70): rank 1 gets [10,40) 30, rank 2
    # [40,75) 35; plus rank 2's 2 (for rank 1) and rank 1's 3 (for rank 2). Nothing computes after
    # 10 ms, so every wait ns is exposed: rank 2 38, rank 1 32. Rank 2 was waited for most.
    a = analyze(concurrent_all_reduces())
    x = step_across(a)
    assert x.waited_for.to_dict("records") == [
        {"rank": 2, "instances": 1, "exposed_waited_for_ns": 38 * MS},
        {"rank": 1, "instances": 1, "exposed_waited_for_ns": 32 * MS},
    ]
    top = x.blame.iloc[0]  # the chains below the sentence say the same
    assert (int(top["rank"]), int(top["waited_for_rank"])) == (0, 2)
    page = render(a, plotlyjs="cdn", across=x)
    assert (
        "the other ranks waited most for <b>rank 2</b>: <b>"
        + duration(38 * MS)
        + "</b> of exposed waiting (summed over ranks) in 1 of 2 matched collectives"
    ) in page
