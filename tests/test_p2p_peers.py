"""Point-to-point pairs from the peer and tag the trace records (diagnosis.md §6): in a group of
more than two ranks a ``c10d::send`` / ``c10d::recv_`` names its peer (a rank of its group) and
tag in ``Concrete Inputs``; the n-th send of rank a to rank b with tag t meets the n-th recv of b
from a with tag t, exactly, before the end-time fallback. Answers derived by hand in each test's
docstring (times in ms)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from builders import gloo_rank

from traceoverlap import analyze
from traceoverlap.core.model import Timeline, TraceInfo, concat_timelines, make_events
from traceoverlap.readers import read_trace
from traceoverlap.run.matching import Collectives

MS = 1_000_000
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "workloads"

#: gloo worker threads of the hand-built ranks (tid 1: the main thread)
WORKERS = (10, 11)
G3 = (("0", (0, 1, 2)),)


def _rank(
    rank: int,
    rows: list[tuple[Any, ...]],
    groups: tuple[tuple[str, tuple[int, ...]], ...] = G3,
    world: int = 3,
) -> Timeline:
    return gloo_rank(rank, rows, ((1, 0, 50),), world, groups, WORKERS)


def _send(
    s: int, e: int, peer: int, tag: int = 0, op_end: int | None = None
) -> list[tuple[Any, ...]]:
    """A send: its ``c10d::send`` op [s, op_end) naming ``peer`` / ``tag`` and the ``gloo:send``
    record [s, e) it starts (the op returns at once when non-blocking)."""
    return [
        ("cpu_op", "c10d::send", 1, s, op_end if op_end is not None else e, -1, peer, tag),
        ("annotation", "gloo:send", 1, s, e),
    ]


def _recv(
    s: int, e: int, peer: int, tag: int = 0, op_end: int | None = None
) -> list[tuple[Any, ...]]:
    return [
        ("cpu_op", "c10d::recv_", 1, s, op_end if op_end is not None else e, -1, peer, tag),
        ("annotation", "gloo:recv", 1, s, e),
    ]


def _pairs(c: Collectives) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """Matched send/recv instances as (src, dst, [(rank, start ms)...]), by the sender's
    start."""
    inst = c.instances[c.instances["matched"].astype(bool)]
    pr = c.per_rank.set_index("instance")
    out = []
    for _, row in inst.iterrows():
        rows = pr.loc[[row["instance"]]]
        who = sorted((int(r), int(s) // MS) for r, s in zip(rows["rank"], rows["start_ns"]))
        if pd.isna(row["src_rank"]):  # a collective
            continue
        out.append((int(row["src_rank"]), int(row["dst_rank"]), who))
    return sorted(out, key=lambda p: (p[0], p[2]))


def _wait_ms(c: Collectives, rank: int, start_ms: int) -> float:
    pr = c.per_rank
    sel = (pr["rank"] == rank) & (pr["start_ns"] == start_ms * MS)
    return float(pr.loc[sel, "wait_ns"].iloc[0]) / MS


def _crossing_run(peers: bool = True) -> list[Timeline]:
    """3 ranks in one group '0' = {0,1,2}. Rank 2 posts two irecvs: from rank 1 at 2 (its
    ``gloo:recv`` [2,21), waited on till 21) and from rank 0 at 3 ([3,30)); rank 0 sends to rank
    2 [10,20), rank 1 sends to rank 2 [12,30). End times mislead: send 0 (end 20) is within 1 ms
    of the recv from rank 1 (end 21), send 1 (end 30) ends with the recv from rank 0 (30)."""
    p = (lambda x: x) if peers else (lambda x: -1)
    r0 = _rank(0, _send(10, 20, p(2)))
    r1 = _rank(1, _send(12, 30, p(2)))
    r2 = _rank(2, [*_recv(2, 21, p(1), op_end=3), *_recv(3, 30, p(0), op_end=4)])
    return [r0, r1, r2]


def test_recorded_peers_pair_exactly_where_end_times_mislead() -> None:
    """With the peers recorded: send 0 -> 2 meets rank 2's recv from 0 (posted at 3), send
    1 -> 2 its recv from 1 (posted at 2). Waits (time before the peer started, unix clocks): the
    recv from 0 waits [3,10) = 7, the recv from 1 [2,12) = 10; the sends 0 (their peer posted
    first). Both pairs from the recorded peers, none by end time."""
    a = analyze(concat_timelines(_crossing_run()))
    c = a.collectives
    assert c is not None
    assert _pairs(c) == [(0, 2, [(0, 10), (2, 3)]), (1, 2, [(1, 12), (2, 2)])]
    assert _wait_ms(c, 2, 3) == 7 and _wait_ms(c, 2, 2) == 10
    assert _wait_ms(c, 0, 10) == 0 and _wait_ms(c, 1, 12) == 0
    assert any("2 send/recv pair(s)" in n and "Concrete Inputs" in n for n in c.notes)
    assert not any("paired by end time" in n for n in c.notes)
    assert c.per_rank["unmatched_why"].isna().all()


def test_without_recorded_peers_end_times_pair_them() -> None:
    """The same run without the inputs (record_shapes off): the fallback pairs by end time,
    closest ends first: send 1 (end 30) with the recv ending at 30 (rank 2's from rank 0,
    posted at 3): |30-30| = 0; then send 0 (end 20) with the recv ending at 21 (posted at 2):
    1 ms. Wrong pairs, which only the recorded peers can tell (the note says how they were
    made)."""
    c = analyze(concat_timelines(_crossing_run(peers=False))).collectives
    assert c is not None
    assert _pairs(c) == [(0, 2, [(0, 10), (2, 2)]), (1, 2, [(1, 12), (2, 3)])]
    assert any("2 send/recv pair(s)" in n and "paired by end time" in n for n in c.notes)


def test_tags_and_order_decide_which_send_meets_which_recv() -> None:
    """Rank 0 sends twice to rank 1 (non-blocking, each op [s, s+1)): tag 5 [5,20), then tag 7
    [6,25). Rank 1 posts its irecvs the other way round: tag 7 [1,25), tag 5 [2,20); then a
    blocking send to rank 2 [30,40) that rank 2 receives [26,40). By (src, dst, tag, n): tag 5
    meets tag 5 ((0,5) with (1,2)), tag 7 tag 7 ((0,6) with (1,1)), and 1 -> 2 ((1,30) with
    (2,26)); by end time alone tag 5 and 7 would pair the same here, so the order inside each
    tag is what is checked: a third send of tag 5 [8,45) to rank 1, whose recv on rank 1 is
    posted after the others [3,45), is the second of its stream on both sides."""
    r0 = _rank(
        0,
        [
            *_send(5, 20, 1, 5, op_end=6),
            *_send(6, 25, 1, 7, op_end=7),
            *_send(8, 45, 1, 5, op_end=9),
        ],
    )
    r1 = _rank(
        1,
        [
            *_recv(1, 25, 0, 7, op_end=2),
            *_recv(2, 20, 0, 5, op_end=3),
            *_recv(3, 45, 0, 5, op_end=4),
            *_send(30, 40, 2, 0),
        ],
    )
    r2 = _rank(2, _recv(26, 40, 1, 0))
    c = analyze(concat_timelines([r0, r1, r2])).collectives
    assert c is not None
    assert _pairs(c) == [
        (0, 1, [(0, 5), (1, 2)]),
        (0, 1, [(0, 6), (1, 1)]),
        (0, 1, [(0, 8), (1, 3)]),
        (1, 2, [(1, 30), (2, 26)]),
    ]


def test_group_ranks_map_to_global_ranks_through_pg_config() -> None:
    """4 ranks; group '1' = {1,2,3} (pg_config; new_group sorts its ranks: group ranks 0, 1, 2
    are global 1, 2, 3), group '0' the world. Rank 1 sends to group rank 2 (global 3) [10,20);
    rank 3 receives from group rank 0 (global 1) [5,20). Rank 2 is in the group and runs a
    world all-reduce as everyone [30,40) (so it has a trace there): the pair is 1 -> 3, and the
    recv waits [5,10) = 5."""
    world = ("0", (0, 1, 2, 3))
    sub = ("1", (1, 2, 3))
    ar = ("annotation", "gloo:all_reduce", 10, 30, 40)
    p = ("annotation", "gloo:send", 20, 10, 20)
    r0 = gloo_rank(0, [ar], ((1, 0, 50),), 4, (world,), (10, 11))
    r1 = gloo_rank(
        1,
        [ar, ("cpu_op", "c10d::send", 20, 10, 20, -1, 2, 0), p],
        ((1, 0, 50),),
        4,
        (world, sub),
        (10, 11, 20, 21),
    )
    r2 = gloo_rank(2, [ar], ((1, 0, 50),), 4, (world, sub), (10, 11, 20, 21))
    r3 = gloo_rank(
        3,
        [
            ar,
            ("cpu_op", "c10d::recv_", 20, 5, 20, -1, 0, 0),
            ("annotation", "gloo:recv", 20, 5, 20),
        ],
        ((1, 0, 50),),
        4,
        (world, sub),
        (10, 11, 20, 21),
    )
    c = analyze(concat_timelines([r0, r1, r2, r3])).collectives
    assert c is not None
    assert _pairs(c) == [(1, 3, [(1, 10), (3, 5)])]
    assert _wait_ms(c, 3, 5) == 5


def test_a_stream_whose_counts_differ_is_not_paired_by_count() -> None:
    """Rank 0 sends to rank 2 twice ([10,20), [30,40)); rank 2's trace holds one recv from
    rank 0, [25,40) (the other cut by the capture window): which send it meets cannot be told
    by counting. It falls to the end-time fallback, which keeps to the recorded peers: the recv
    (end 40) pairs with the send ending at 40; the send [10,20) has no recv and says why.
    Rank 1 sends to rank 2 [10,15), received [5,15): paired by count."""
    r0 = _rank(0, [*_send(10, 20, 2), *_send(30, 40, 2)])
    r1 = _rank(1, _send(10, 15, 2))
    r2 = _rank(2, [*_recv(5, 15, 1), *_recv(25, 40, 0)])
    c = analyze(concat_timelines([r0, r1, r2])).collectives
    assert c is not None
    assert _pairs(c) == [(0, 2, [(0, 30), (2, 25)]), (1, 2, [(1, 10), (2, 5)])]
    assert any("1 send/recv pair(s)" in n and "Concrete Inputs" in n for n in c.notes)
    assert any("1 send/recv pair(s)" in n and "paired by end time" in n for n in c.notes)
    why = c.per_rank.set_index(["rank", "start_ns"])["unmatched_why"]
    assert why.loc[(0, 10 * MS)] == (
        "a send to rank 2 (the peer it records) that no recv on rank 2 names back"
    )


# --------------------------------------------------------------------------------------------
# a recorded 4-stage pipeline (fixtures/workloads/pipeline4)


def _ranges(path: Path) -> list[tuple[int, int, str]]:
    """The workload's own ``pp_send`` / ``pp_recv`` ranges of one rank (start ns, end ns, name),
    whose name says the peer (``peer=N``): the answer, written by the workload itself."""
    ev = read_trace(str(path)).events
    sel = ev["name"].astype(str).str.startswith(("pp_send", "pp_recv")).to_numpy()
    return sorted(
        zip(
            ev.loc[sel, "start_ns"].tolist(),
            ev.loc[sel, "end_ns"].tolist(),
            ev.loc[sel, "name"].astype(str).tolist(),
            strict=True,
        )
    )


@pytest.mark.skipif(not (FIXTURES / "pipeline4").is_dir(), reason="no pipeline4 fixture")
def test_recorded_pipeline_pairs_every_send_with_the_recv_its_ranges_name() -> None:
    """GPipe over 4 ranks in the world group, 4 micro-batches, 3 steps: per step each adjacent
    pair of stages exchanges 4 activations and 4 gradients, so 3 x 4 x 2 = 24 transfers between
    0-1, 1-2 and 2-3: 72 pairs, all from the recorded peers. Each matched side starts inside the
    workload's own ``pp_send`` / ``pp_recv`` range, which names the other side as its peer."""
    paths = sorted((FIXTURES / "pipeline4").glob("rank*.json.gz"))
    c = analyze(paths).collectives
    assert c is not None
    m = c.instances[c.instances["matched"].astype(bool) & (c.instances["src_rank"] >= 0)]
    assert len(m) == 72
    pairs = {(int(s), int(d)) for s, d in zip(m["src_rank"], m["dst_rank"], strict=True)}
    assert pairs == {(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)}
    assert any("72 send/recv pair(s)" in n and "Concrete Inputs" in n for n in c.notes)
    ranges = {int(p.name[4:-8]): _ranges(p) for p in paths}
    pr = c.per_rank.set_index("instance")
    for _, row in m.iterrows():
        sides = pr.loc[[row["instance"]]]
        assert len(sides) == 2
        for rank, start in zip(sides["rank"].tolist(), sides["start_ns"].tolist(), strict=True):
            send = rank == row["src_rank"]
            other = int(row["dst_rank"] if send else row["src_rank"])
            hit = [n for s, e, n in ranges[rank] if s <= start < e]
            assert len(hit) == 1, (rank, start)
            assert hit[0].startswith("pp_send" if send else "pp_recv")
            assert f" peer={other} " in hit[0]


def test_reader_gives_the_peer_columns() -> None:
    """The reader's columns on a recorded rank (pipeline4 rank 1: it receives from stage 0 and
    sends to stage 2 in forward, the other way in backward): every c10d::send / c10d::recv_
    names peer 0 or 2 with tag 0, and nothing else has a peer."""
    path = FIXTURES / "pipeline4" / "rank1.json.gz"
    if not path.exists():
        pytest.skip("no pipeline4 fixture")
    ev = read_trace(str(path)).events
    p2p = ev["name"].isin(["c10d::send", "c10d::recv_"]).to_numpy()
    assert p2p.sum() == 48
    assert set(ev.loc[p2p, "peer_rank"].tolist()) == {0, 2}
    assert set(ev.loc[p2p, "p2p_tag"].tolist()) == {0}
    assert (ev.loc[~p2p, "peer_rank"] == -1).all()


def _nccl_rank(rank: int, calls: list[tuple[str, int, int, int, int]]) -> Timeline:
    """A GPU (NCCL) rank of a 3-rank world, group '0' = {0,1,2} (pg_config): per call (op,
    peer, op start ms, kernel start ms, kernel end ms) a ``c10d::send`` / ``c10d::recv_`` op
    [start, start+2) naming ``peer`` (tag 0), the ``cudaLaunchKernel`` inside it at start+1 and
    its ``ncclDevKernel_SendRecv`` kernel (collective name send / recv) on stream 20; one
    ``ProfilerStep#1`` over [0, 50)."""
    rows: list[dict[str, Any]] = [
        dict(category="annotation", name="ProfilerStep#1", s=0, e=50, tid=1, corr=-1)
    ]
    for i, (op, peer, s, ks, ke) in enumerate(calls):
        rows.append(dict(category="cpu_op", name=op, s=s, e=s + 2, tid=1, corr=-1, peer=peer))
        rows.append(dict(category="runtime", name="cudaLaunchKernel", s=s + 1, e=s + 2, tid=1))
        rows[-1]["corr"] = i + 1
        kind = "send" if op == "c10d::send" else "recv"
        rows.append(
            dict(
                category="kernel",
                name="ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
                s=ks,
                e=ke,
                tid=-1,
                corr=i + 1,
                stream=20,
                device=0,
                coll=kind,
            )
        )
    ev = make_events(
        len(rows),
        {
            "rank": rank,
            "pid": 100 + rank,
            "category": [r["category"] for r in rows],
            "name": [r["name"] for r in rows],
            "tid": [r["tid"] for r in rows],
            "lane": [f"stream {r['stream']}" if "stream" in r else "thread 1" for r in rows],
            "start_ns": np.array([r["s"] for r in rows], dtype=np.int64) * MS,
            "end_ns": np.array([r["e"] for r in rows], dtype=np.int64) * MS,
            "correlation": [r["corr"] for r in rows],
            "stream": [r.get("stream", -1) for r in rows],
            "device": [r.get("device", -1) for r in rows],
            "coll_name": [r.get("coll", "") for r in rows],
            "peer_rank": [r.get("peer", -1) for r in rows],
            "p2p_tag": [0 if "peer" in r else -1 for r in rows],
        },
    )
    info = TraceInfo(
        path=f"rank{rank}.json",
        format="kineto",
        rank=rank,
        world_size=3,
        backend="nccl",
        rank_source="distributedInfo",
        clock="unix",
        device_kind="gpu",
        process_groups=(("0", (0, 1, 2)),),
    )
    return Timeline(ev, (info,))


def test_nccl_kernels_take_the_peer_of_the_op_that_launched_them() -> None:
    """NCCL in one group '0' = {0,1,2}: each send/recv kernel takes the peer of the c10d op its
    launch lies in. Rank 1 receives from rank 0 (op at 1, kernel [3,20)) then from rank 2 (op at
    4, kernel [21,30)); rank 0 sends to 1 (op at 10, kernel [12,20)); rank 2 sends to 1 (op at 5,
    kernel [22,30)). Pairs: 0 -> 1 (rank 0's kernel with rank 1's first) and 2 -> 1 (rank 2's
    with rank 1's second), from the recorded peers, not by end time. The first recv waits for its
    peer's kernel: [3,12) = 9 ms; the second [21,22) = 1."""
    r0 = _nccl_rank(0, [("c10d::send", 1, 10, 12, 20)])
    r1 = _nccl_rank(1, [("c10d::recv_", 0, 1, 3, 20), ("c10d::recv_", 2, 4, 21, 30)])
    r2 = _nccl_rank(2, [("c10d::send", 1, 5, 22, 30)])
    c = analyze(concat_timelines([r0, r1, r2])).collectives
    assert c is not None
    assert _pairs(c) == [(0, 1, [(0, 12), (1, 3)]), (2, 1, [(1, 21), (2, 22)])]
    assert _wait_ms(c, 1, 3) == 9 and _wait_ms(c, 1, 21) == 1
    assert any("2 send/recv pair(s)" in n and "Concrete Inputs" in n for n in c.notes)
    assert not any("paired by end time" in n for n in c.notes)


def test_a_partial_run_pairs_sends_with_recvs_not_with_sends() -> None:
    """Ranks 2 and 3 of a 4-rank world group (ranks 0, 1 not given). Rank 2 receives from rank 1
    [0,10) and sends to rank 3 twice ([10,20), [30,40)); rank 3 receives from rank 2 [5,20),
    [25,40). Only 2 of the group's 4 ranks are given, yet the group is wider than two: each send
    meets the recv that names it (2 -> 3 twice: (2,10) with (3,5), (2,30) with (3,25)). Matched
    as a collective of the two ranks given (by count per kind: a send only ever meets a send)
    nothing paired. Rank 2's recv from rank 1, whose trace is not given, stays unmatched."""
    g4 = (("0", (0, 1, 2, 3)),)
    r2 = _rank(2, [*_recv(0, 10, 1), *_send(10, 20, 3), *_send(30, 40, 3)], g4, 4)
    r3 = _rank(3, [*_recv(5, 20, 2), *_recv(25, 40, 2)], g4, 4)
    c = analyze(concat_timelines([r2, r3])).collectives
    assert c is not None
    assert _pairs(c) == [(2, 3, [(2, 10), (3, 5)]), (2, 3, [(2, 30), (3, 25)])]
    why = c.per_rank.set_index(["rank", "start_ns"])["unmatched_why"]
    assert why.loc[(2, 0)] == (
        "a recv from rank 1 (the peer it records) that no send on rank 1 names back"
    )


def test_the_what_if_graph_pairs_by_the_recorded_peers_too() -> None:
    # the 4-stage GPipe fixture records every send's and recv's peer: the analysis pairs all 72
    # pairs by them (test above), and the run graph must pair the same 144 sends and recvs (2
    # nodes an instance); paired by end time instead, 46 of its nodes stayed unmatched and kept
    # their waiting as duration, which no what-if scenario can remove

    from traceoverlap.whatif.scenarios import load_graph

    g = load_graph(Path(__file__).parent.parent / "fixtures" / "workloads" / "pipeline4")
    comm = g.kind == 1
    assert int(comm.sum()) == 144
    assert bool((g.inst[comm] >= 0).all())
    assert np.unique(g.inst[comm]).size == 72
