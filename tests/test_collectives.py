"""Collectives matched across ranks: wait vs transfer, exposure, stragglers."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REAL_TRACES, examples
from hypothesis import given, settings
from hypothesis import strategies as st

from traceoverlap import AnalyzeOptions, analyze
from traceoverlap.core.model import Timeline, TraceInfo, concat_timelines, make_events
from traceoverlap.core.options import Thresholds
from traceoverlap.core.vocab import collective_kind
from traceoverlap.run.matching import Collectives

MS = 1_000_000


def _cpu_rank(
    rank: int, marker: tuple[int, int], compute: list, comm: list, clock: str = "unix"
) -> Timeline:
    """One CPU (gloo) rank: a ProfilerStep#1 marker, cpu_op compute, gloo:all_reduce work items."""
    rows = [("annotation", "ProfilerStep#1", 1, "python", *marker)]
    rows += [("cpu_op", "aten::mm", 1, "python", s, e) for s, e in compute]
    rows += [("annotation", "gloo:all_reduce", 2, "pt_gloo_runloop", s, e) for s, e in comm]
    cat, name, tid, tname, start, end = (list(x) for x in zip(*rows, strict=True))
    ev = make_events(
        len(rows),
        {
            "rank": rank,
            "category": cat,
            "name": name,
            "tid": tid,
            "thread_name": tname,
            "start_ns": np.array(start) * MS,
            "end_ns": np.array(end) * MS,
        },
    )
    return Timeline(
        ev, (TraceInfo(path=f"rank{rank}.json", format="kineto", rank=rank, clock=clock),)
    )


def _coll(a: object) -> Collectives:
    c = a.collectives  # type: ignore[attr-defined]
    assert c is not None
    return c


def _matched(c: Collectives) -> pd.DataFrame:
    return c.instances[c.instances["matched"].astype(bool)].reset_index(drop=True)


def _two_cpu_ranks(clock: str = "unix") -> Timeline:
    # rank 0 arrives early at both all-reduces; rank 1 computes longer and arrives last
    r0 = _cpu_rank(0, (0, 100), [(0, 40), (75, 90)], [(20, 60), (70, 80)], clock)
    r1 = _cpu_rank(1, (0, 110), [(0, 45), (80, 95)], [(45, 60), (72, 80)], clock)
    return concat_timelines([r0, r1])


def test_hand_built_two_ranks() -> None:
    """Derivation (ms):
    all-reduce #1: rank 0 [20,60) 40, rank 1 [45,60) 15 -> transfer 15; wait r0 25, r1 0; last rank 1
    all-reduce #2: rank 0 [70,80) 10, rank 1 [72,80) 8   -> transfer 8;  wait r0 2,  r1 0; last rank 1
    exposure, rank 0: compute [0,40)+[75,90): #1 [20,60) minus compute = [40,60) 20; #2 [70,75) 5
    exposure, rank 1: compute [0,45)+[80,95): #1 [45,60) 15; #2 [72,80) 8
    rank 0 step: exposed E = [40,60)+[70,75) = 25; waiting W = [20,45)+[70,72);
      E ∩ W = [40,45)+[70,72) = 7 -> exposed_wait 7, exposed_transfer 18
    rank 1 step: waits 0 -> exposed_wait 0, exposed_transfer 23 (= its exposed 15 + 8)
    stragglers: rank 1 last twice, others waited 25 + 2 = 27 ms for it; of that, 7 ms is exposed
      (rank 0's exposed_wait), 7 / (100 + 110) = 3.3 % of the run's step time: below the 5 %
      of diagnosis.md §14, so no straggler is named; with a 3 % threshold rank 1 is
    step skew: rank 1's window 110 vs rank 0's 100 -> slowest rank 1, skew 10
    """
    a = analyze(_two_cpu_ranks())
    c = _coll(a)
    inst = c.instances
    assert inst["name"].tolist() == ["all_reduce", "all_reduce"]
    assert inst["transfer_ns"].tolist() == [15 * MS, 8 * MS]
    assert inst["wait_ns"].tolist() == [25 * MS, 2 * MS]
    assert inst["last_rank"].tolist() == [1, 1]
    pr = c.per_rank.set_index(["instance", "rank"])
    assert pr.loc[(0, 0), "wait_ns"] == 25 * MS and pr.loc[(0, 1), "wait_ns"] == 0
    assert pr.loc[(0, 0), "exposed_ns"] == 20 * MS and pr.loc[(1, 0), "exposed_ns"] == 5 * MS
    assert pr.loc[(0, 1), "exposed_ns"] == 15 * MS and pr.loc[(1, 1), "exposed_ns"] == 8 * MS
    # wait + transfer == duration on every rank
    inst_t = inst.set_index("instance")["transfer_ns"]
    assert (
        c.per_rank["wait_ns"] + inst_t.reindex(c.per_rank["instance"]).to_numpy()
        == c.per_rank["dur_ns"]
    ).all()

    assert c.top_straggler is None
    assert c.verdict.wait_ratio == pytest.approx(7 / 210)
    low = AnalyzeOptions(thresholds=Thresholds(straggler_ratio=0.03))
    assert _coll(analyze(_two_cpu_ranks(), low)).top_straggler == 1
    s = c.stragglers.set_index("rank")
    assert s.loc[1, "last_count"] == 2 and s.loc[1, "waited_for_ns"] == 27 * MS
    assert s.loc[0, "last_count"] == 0 and s.loc[0, "wait_ns"] == 27 * MS
    sk = c.step_skew.iloc[0]
    assert (sk["slowest_rank"], sk["skew_ns"]) == (1, 10 * MS)

    steps = a.steps.set_index("rank")
    assert (
        steps.loc[0, "exposed_wait_ns"] == 7 * MS and steps.loc[0, "exposed_transfer_ns"] == 18 * MS
    )
    assert steps.loc[1, "exposed_wait_ns"] == 0 and steps.loc[1, "exposed_transfer_ns"] == 23 * MS
    assert (
        steps["exposed_wait_ns"] + steps["exposed_transfer_ns"] == steps["exposed_comm_ns"]
    ).all()


def test_relative_clocks_are_aligned_on_collective_end_times() -> None:
    # rank 1's clock starts 1 s later (relative clocks, no unix time): every time on rank 1 is
    # shifted by +1000 ms. Collectives end together, so the offset is the median end difference
    # (1000 ms); after removing it the arrival order is the one of the unix case: rank 1 last.
    r0 = _cpu_rank(0, (0, 100), [(0, 40), (75, 90)], [(20, 60), (70, 80)], "relative")
    r1 = _cpu_rank(
        1, (1000, 1110), [(1000, 1045), (1080, 1095)], [(1045, 1060), (1072, 1080)], "relative"
    )
    c = _coll(analyze(concat_timelines([r0, r1])))
    assert c.clock == "estimated"
    assert c.instances["transfer_ns"].tolist() == [15 * MS, 8 * MS]
    assert c.instances["last_rank"].tolist() == [1, 1]
    # 7 ms of exposed waiting in 210 ms of steps (test_hand_built_two_ranks): named at 3 %
    low = AnalyzeOptions(thresholds=Thresholds(straggler_ratio=0.03))
    assert _coll(analyze(concat_timelines([r0, r1]), low)).top_straggler == 1


def test_mismatched_counts_match_the_prefix() -> None:
    # rank 1 lost its second all-reduce: only the first (present on both) is matched
    r0 = _cpu_rank(0, (0, 100), [(0, 40)], [(20, 60), (70, 80)])
    r1 = _cpu_rank(1, (0, 100), [(0, 45)], [(45, 60)])
    c = _coll(analyze(concat_timelines([r0, r1])))
    assert len(_matched(c)) == 1
    # rank 0's second all-reduce stays an (unmatched) instance of rank 0 alone
    assert c.instances["matched"].tolist() == [True, False]
    note = next(n for n in c.notes if "counts differ" in n)
    assert "rank 0: 2" in note and "rank 1: 1" in note


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "AllReduce"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "AllReduce"),
        ("ncclDevKernel_SendRecv", "SendRecv"),
        ("ncclSymkDevKernel_AllGather_LL", "AllGather"),
        ("gloo:all_reduce", "all_reduce"),
        ("my_custom_comm", "my_custom_comm"),
    ],
)
def test_collective_kind(name: str, kind: str) -> None:
    assert collective_kind(name) == kind


def _gpu_rank(rank: int, comm_stream: int, kernels: list, with_meta: bool) -> Timeline:
    """One GPU rank: a ProfilerStep#1 host range [0,100), one launch per kernel (correlation i+1)."""
    n = len(kernels)
    cats = ["annotation"] + ["runtime"] * n + ["kernel"] * n
    names = ["ProfilerStep#1"] + ["cudaLaunchKernel"] * n + [k[0] for k in kernels]
    start = [0] + [1 + i for i in range(n)] + [k[1] for k in kernels]
    end = [100] + [2 + i for i in range(n)] + [k[2] for k in kernels]
    corr = [-1] + list(range(1, n + 1)) * 2
    is_nccl = [k[0].startswith("nccl") for k in kernels]
    stream = [-1] * (n + 1) + [comm_stream if c else 7 for c in is_nccl]
    meta = with_meta and True
    ev = make_events(
        len(cats),
        {
            "rank": rank,
            "pid": 100 + rank,
            "category": cats,
            "name": names,
            "start_ns": np.array(start) * MS,
            "end_ns": np.array(end) * MS,
            "correlation": corr,
            "stream": stream,
            "device": [-1] * (n + 1) + [0] * n,
            "process_group": [""] * (n + 1) + [("0" if c and meta else "") for c in is_nccl],
            "seq": [-1] * (n + 1) + [(0 if c and meta else -1) for c in is_nccl],
            "coll_name": [""] * (n + 1) + [("allreduce" if c and meta else "") for c in is_nccl],
        },
    )
    info = TraceInfo(
        path=f"rank{rank}.json", format="kineto", rank=rank, clock="unix", device_kind="gpu"
    )
    return Timeline(ev, (info,))


@pytest.mark.parametrize("with_meta", [True, False])
def test_gpu_nccl_kernels_matched(with_meta: bool) -> None:
    """Matched by (process group "0", seq 0) with metadata, else by NCCL stream order (the comm
    stream is 13 on rank 0 and 20 on rank 1: stream ids differ, their order of use does not).
    Derivation (ms): rank 0 AllReduce [30,70) 40, rank 1 [55,70) 15 -> transfer 15, wait r0 25,
    last rank 1. Rank 0: compute [10,50)+[70,80); exposed [50,70) 20; wait [30,55) ∩ exposed =
    [50,55) 5 -> exposed_wait 5, transfer 15. Rank 1: compute [10,60)+[70,85); exposed [60,70) 10,
    no wait -> exposed_wait 0, transfer 10.
    """
    k = "ncclKernel_AllReduce_RING_LL_Sum_float"
    r0 = _gpu_rank(0, 13, [("gemm", 10, 50), (k, 30, 70), ("gemm", 70, 80)], with_meta)
    r1 = _gpu_rank(1, 20, [("gemm", 10, 60), (k, 55, 70), ("gemm", 70, 85)], with_meta)
    a = analyze(concat_timelines([r0, r1]))
    c = _coll(a)
    assert len(c.instances) == 1
    row = c.instances.iloc[0]
    assert row["name"] == ("allreduce" if with_meta else "AllReduce")
    # null (<NA> in the Int64 / string columns) without the collective's metadata
    assert (row["seq"] == 0) if with_meta else row["seq"] is pd.NA
    assert (row["process_group"] == "0") if with_meta else row["process_group"] is pd.NA
    assert (row["transfer_ns"], row["wait_ns"], row["last_rank"]) == (15 * MS, 25 * MS, 1)
    pr = c.per_rank.set_index("rank")
    assert pr.loc[0, "exposed_ns"] == 20 * MS and pr.loc[1, "exposed_ns"] == 10 * MS
    steps = a.steps.set_index("rank")
    assert steps.loc[0, ["exposed_wait_ns", "exposed_transfer_ns"]].tolist() == [5 * MS, 15 * MS]
    assert steps.loc[1, ["exposed_wait_ns", "exposed_transfer_ns"]].tolist() == [0, 10 * MS]
    assert (
        steps["exposed_wait_ns"] + steps["exposed_transfer_ns"] == steps["exposed_comm_ns"]
    ).all()


# --- real 2-rank gloo CPU fixtures (fixtures/workloads, generated by the reference workloads) -----


WORKLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"
STRATEGIES = ["naive", "flat", "overlap", "bucketed", "ddp", "bucketed_slow"]


def _fixture(name: str) -> Path:
    p = WORKLOADS / name
    if not (p / "rank0.json.gz").exists():
        pytest.skip(f"fixture {p} absent")
    return p


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_fixture_collectives_consistent(strategy: str) -> None:
    # structure only (timings vary run to run): every matched instance has both ranks, the same
    # number of instances per rank, wait + transfer = duration, exposed wait + transfer = exposed
    a = analyze(_fixture(strategy))
    c = _coll(a)
    assert len(_matched(c)) > 0 and c.n_inconsistent == 0
    assert (_matched(c)["n_ranks"] == 2).all()
    per_rank = c.per_rank[c.per_rank["matched"]].groupby("rank").size()
    assert per_rank.index.tolist() == [0, 1] and per_rank.nunique() == 1
    transfer = c.instances.set_index("instance")["transfer_ns"].reindex(c.per_rank["instance"])
    assert (c.per_rank["wait_ns"].to_numpy() + transfer.to_numpy() == c.per_rank["dur_ns"]).all()
    assert (c.per_rank["wait_ns"] >= 0).all()
    assert (c.per_rank["exposed_ns"] <= c.per_rank["dur_ns"]).all()
    s = a.steps
    parts = s["exposed_wait_ns"] + s["exposed_transfer_ns"] + s["exposed_unmatched_ns"]
    assert (parts == s["exposed_comm_ns"]).all()
    assert (s["exposed_wait_ns"] >= 0).all() and (s["exposed_transfer_ns"] >= 0).all()
    assert (s["exposed_unmatched_ns"] >= 0).all()
    assert c.aligned and set(_matched(c)["last_rank"]) <= {0, 1, None}


def test_slow_rank_is_the_straggler() -> None:
    # bucketed_slow: rank 1 sleeps 20 ms before every backward, so rank 0's gradient all-reduces
    # start first and wait for it: rank 1 is the rank the others waited for
    c = analyze(_fixture("bucketed_slow")).collectives
    assert c is not None
    assert c.top_straggler == 1
    s = c.stragglers.set_index("rank")
    assert s.loc[1, "waited_for_ns"] > s.loc[0, "waited_for_ns"]
    assert s.loc[1, "last_count"] > s.loc[0, "last_count"]
    # and rank 0 is the one that spent its collective time waiting
    assert s.loc[0, "wait_ns"] > s.loc[1, "wait_ns"]


def test_fixture_json_has_collectives_and_stragglers() -> None:
    import json

    from traceoverlap.reporters.json_report import render

    d = json.loads(render(analyze(_fixture("bucketed_slow"))))
    first = d["collectives"][0]
    assert set(first) >= {"name", "process_group", "seq", "bytes", "ranks", "transfer_ns"}
    assert set(first) >= {"wait_ns", "last_rank", "per_rank", "matched", "family"}
    assert first["ranks"] == [0, 1] and set(first["per_rank"]) == {"0", "1"}
    assert set(first["per_rank"]["0"]) >= {"start_ns", "dur_ns", "wait_ns", "exposed_ns"}
    assert set(first["per_rank"]["0"]) >= {
        "exposed_wait_ns",
        "exposed_tail_ns",
        "exposed_dependency_ns",
        "exposed_host_ns",
        "same_stream",
        "queued_ns",
    }
    assert first["wait_ns"] == sum(v["wait_ns"] for v in first["per_rank"].values())
    assert d["stragglers"]["ranks"][0]["rank"] == 1
    assert {"exposed_wait_ns", "exposed_transfer_ns"} <= set(d["steps"][0])


def test_mismatched_folder_says_which_ranks_differ(tmp_path: Path) -> None:
    # rank 0 of the naive run (one all-reduce per parameter) next to rank 1 of the bucketed run
    # (one per bucket): the counts cannot agree, and the note says so per rank
    shutil.copy(_fixture("naive") / "rank0.json.gz", tmp_path / "rank0.json.gz")
    shutil.copy(_fixture("bucketed") / "rank1.json.gz", tmp_path / "rank1.json.gz")
    a = analyze(tmp_path)
    note = next(n for n in a.notes if "counts differ" in n)
    assert "rank 0:" in note and "rank 1:" in note and "matched the" in note
    assert (_matched(_coll(a))["n_ranks"] == 2).all()


def test_missing_rank_folder_is_noted(tmp_path: Path) -> None:
    # only rank 1 of a world of 2: analysed alone, with a note that says so
    shutil.copy(_fixture("bucketed") / "rank1.json.gz", tmp_path / "rank1.json.gz")
    a = analyze(tmp_path)
    assert a.ranks == [1]
    assert any("rank 1 is the only rank given of a world of 2" in n for n in a.notes)
    assert _coll(a).n_matched == 0  # nothing to match against
    assert not a.steps["wait_known"].any()


def test_duplicate_rank_folder_is_refused(tmp_path: Path) -> None:
    # two files both saying they are rank 1 cannot be one run (diagnosis.md §5): one clear error
    from traceoverlap.core.errors import UsageError

    for f in ("rank0.json.gz", "rank1.json.gz"):
        shutil.copy(_fixture("bucketed") / f, tmp_path / f)
    shutil.copy(_fixture("bucketed") / "rank1.json.gz", tmp_path / "rank1_copy.json.gz")
    with pytest.raises(UsageError, match="rank 1 appears in two traces"):
        analyze(tmp_path)


def test_parallel_map_equals_sequential() -> None:
    from traceoverlap.reporters.json_report import render

    one = render(analyze(_fixture("bucketed"), AnalyzeOptions(jobs=1)))
    two = render(analyze(_fixture("bucketed"), AnalyzeOptions(jobs=2)))
    assert one == two


def test_parallel_map_reports_bad_file(tmp_path: Path) -> None:
    from traceoverlap.core.errors import TraceFormatError

    shutil.copy(_fixture("bucketed") / "rank0.json.gz", tmp_path / "rank0.json.gz")
    bad = tmp_path / "rank1.json"
    bad.write_text("{not json")
    with pytest.raises(TraceFormatError, match="rank1.json"):
        analyze([tmp_path / "rank0.json.gz", bad], AnalyzeOptions(jobs=2))


REAL = REAL_TRACES


def test_real_nsys_two_gpus_sendrecv_matched() -> None:
    # a real 2-GPU FSDP Nsight export: 33 ncclDevKernel_SendRecv kernels per rank, one NCCL stream
    # each (stream 7 on GPU 0, stream 15 on GPU 1), no process group or seq in the export, so
    # they match by order on the rank's NCCL stream. Every instance has both ranks; the rank that
    # started last never waits (its duration is the shortest: it arrives when the peer is ready)
    path = REAL / "nsys" / "fsdp_2gpu_h100.sqlite"
    if not path.exists():
        pytest.skip(f"real traces absent ({path})")
    a = analyze(path)
    c = _coll(a)
    assert c.aligned
    # most SendRecv kernels run inside NCCL's "nccl:all_to_all" ranges: an all-to-all of the
    # two ranks; the ones whose launch fell outside the 300 ms cut keep their kernel's name
    m = _matched(c)
    assert len(m) == 33 and set(m["name"]) == {"all_to_all", "SendRecv"}
    assert c.per_rank[c.per_rank["matched"]].groupby("rank").size().tolist() == [33, 33]
    pr = c.per_rank[c.per_rank["matched"]].merge(
        m[["instance", "last_rank", "transfer_ns"]], on="instance"
    )
    assert (pr["wait_ns"] + pr["transfer_ns"] == pr["dur_ns"]).all()
    last = pr[pr["last_rank"].notna()]
    last = last[last["rank"] == last["last_rank"].astype(int)]
    assert (last["wait_ns"] == 0).all()
    s = a.steps
    assert (s["exposed_wait_ns"] + s["exposed_transfer_ns"] == s["exposed_comm_ns"]).all()


def test_named_group_on_one_rank_is_not_matched() -> None:
    # process group "7" (with seq numbers) only on rank 0: nothing to pair it with; the group
    # "0" all-reduce present on both ranks is still matched (one instance)
    k = "ncclKernel_AllReduce_RING_LL_Sum_float"
    r0 = _gpu_rank(0, 13, [("gemm", 10, 50), (k, 30, 70), ("gemm", 70, 80)], True)
    r1 = _gpu_rank(1, 20, [("gemm", 10, 60), (k, 55, 70), ("gemm", 70, 85)], True)
    ev = r0.events.copy()
    extra = ev.iloc[[-2]].copy()  # a second NCCL kernel on rank 0, in another group
    extra["process_group"] = extra["process_group"].cat.add_categories(["7"])
    extra.loc[:, "process_group"] = "7"
    ev["process_group"] = ev["process_group"].cat.add_categories(["7"])
    r0 = Timeline(pd.concat([ev, extra], ignore_index=True), r0.traces)
    c = _coll(analyze(concat_timelines([r0, r1])))
    assert _matched(c)["process_group"].tolist() == ["0"]
    assert any("group '7' appear only on rank 0" in n for n in c.notes)


def test_tied_latest_start_names_no_last_rank() -> None:
    # both ranks start the all-reduce at 20 ms: no one arrived last, so no straggler;
    # durations 40 and 30 -> transfer 30, rank 0 wait 10 (durations still split)
    r0 = _cpu_rank(0, (0, 100), [(0, 20)], [(20, 60)])
    r1 = _cpu_rank(1, (0, 100), [(0, 20)], [(20, 50)])
    c = _coll(analyze(concat_timelines([r0, r1])))
    assert c.instances["last_rank"].tolist() == [pd.NA]
    assert c.instances["transfer_ns"].tolist() == [30 * MS]
    assert c.top_straggler is None


def test_text_report_names_the_straggler() -> None:
    from traceoverlap.reporters.text import render

    text = render(analyze(_fixture("bucketed_slow")))
    assert "Across ranks: " in text and "straggler: rank 1 " in text
    section = text[text.index("Across ranks: ") :].splitlines()
    assert all(len(line) <= 80 for line in section)


# --- properties on random 2-rank CPU runs ------------------------------------------------------


_iv = st.tuples(st.integers(0, 95), st.integers(1, 30)).map(lambda t: (t[0], min(100, t[0] + t[1])))


@settings(max_examples=examples(40), deadline=None)
@given(
    comp0=st.lists(_iv, max_size=4),
    comp1=st.lists(_iv, max_size=4),
    comm0=st.lists(_iv, min_size=1, max_size=4),
    comm1=st.lists(_iv, min_size=1, max_size=4),
)
def test_split_properties(comp0: list, comp1: list, comm0: list, comm1: list) -> None:
    # whatever the layout (overlapping comm on one rank, unequal counts): wait + transfer is each
    # rank's duration, exposure never exceeds the duration, and per (rank, step) the exposed
    # wait, transfer and unmatched (diagnosis.md §12: pairs left unmatched, by unequal counts or
    # spans that never overlap) add up exactly to the metrics' exposed communication
    r0 = _cpu_rank(0, (0, 100), comp0, comm0)
    r1 = _cpu_rank(1, (0, 100), comp1, comm1)
    a = analyze(concat_timelines([r0, r1]))
    c = _coll(a)
    # matched by order: each pair is used or, when its spans never overlap, counted inconsistent
    assert c.n_matched + c.n_inconsistent == min(len(comm0), len(comm1))
    t = c.instances.set_index("instance")["transfer_ns"].reindex(c.per_rank["instance"])
    assert (c.per_rank["wait_ns"].to_numpy() + t.to_numpy() == c.per_rank["dur_ns"]).all()
    assert (c.per_rank["exposed_ns"] <= c.per_rank["dur_ns"]).all()
    s = a.steps
    parts = s["exposed_wait_ns"] + s["exposed_transfer_ns"] + s["exposed_unmatched_ns"]
    assert (parts == s["exposed_comm_ns"]).all()
    assert (s["exposed_wait_ns"] >= 0).all() and (s["exposed_transfer_ns"] >= 0).all()
    assert (s["exposed_unmatched_ns"] >= 0).all()


def test_rank_notes_name_the_missing_ranks() -> None:
    # 3 of a world of 4 given: rank 2 is named; ranks beyond the world are flagged
    from traceoverlap.run.analysis import rank_notes

    def tl(ranks: list[int], world: int) -> list[TraceInfo]:
        return [TraceInfo(path=f"r{r}", format="kineto", rank=r, world_size=world) for r in ranks]

    notes = rank_notes(tl([0, 1, 3], 4))
    assert notes == [
        "rank traces missing from the input: rank 2 (world size 4, 3 rank traces given); "
        "the others are analysed and collectives matched across them: waiting and "
        "stragglers are among the ranks given"
    ]
    assert rank_notes(tl([0, 1], 2)) == []
    assert any(
        "outside the declared world size 2: ranks [5]" in n for n in rank_notes(tl([0, 1, 5], 2))
    )
    # a world of 10^8 costs nothing: the missing ranks are counted, 20 named
    huge = rank_notes(tl([0, 1], 100_000_000))
    assert "ranks 2, 3, 4" in huge[0] and "..." in huge[0]
