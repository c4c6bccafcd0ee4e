"""A rank late from before the capture (docs/whatif.md, issue 37): its peers wait for it in
their first collective; fixing it must be the top "fixing rank R buys" row with a speedup above
1, measured from the same first starts in the replay and the scenario; a thread handed the
backward moves with the thread that handed it over. Hand-built gloo runs, answers derived in
the comments (ms)."""

from __future__ import annotations

import numpy as np
import pytest
from builders import MS, gloo_rank

from traceoverlap.core.model import Timeline
from traceoverlap.whatif.scenarios import graph_of, what_if


def _late_rank(rank: int, begin: int, world: int) -> Timeline:
    """One step [begin, 60): mm [b, b+10), the all-reduce call [b+10, b+11), gloo's all-reduce
    [b+11, 50) on thread 10 (every member ends at 50), add [50, 55) on the main thread."""
    b = begin
    rows = [
        ("cpu_op", "aten::mm", 1, b, b + 10),
        ("cpu_op", "c10d::allreduce_", 1, b + 10, b + 11),
        ("annotation", "gloo:all_reduce", 10, b + 11, 50),
        ("cpu_op", "aten::add", 1, 50, 55),
    ]
    return gloo_rank(rank, rows, ((1, b, 60),), world=world)


def test_a_rank_late_from_before_the_capture_is_the_top_row() -> None:
    # ranks begin at 0, 26 and 30 (rank 2 late from before the capture, rank 1 nearly as
    # late): arrivals 11, 37, 41; the last, rank 2's, makes rank 0 wait 30 and rank 1 4 ms.
    # Observed steps 60, 34, 30: replay 124 / 3 = 41.33 ms.
    run = [_late_rank(0, 0, 3), _late_rank(1, 26, 3), _late_rank(2, 30, 3)]
    w = what_if(graph_of(run), ["replay"])
    assert w.max_error_ratio == 0.0
    assert w.scenarios[0].step_ns == pytest.approx(124 / 3 * MS)
    assert w.straggler == 2
    rows = {r.name: r for r in w.fix_rank}
    # fix-rank:2: rank 2 begins at its peers' median start (of 0 and 26 the lower middle value,
    # 0: never their mean, docs/whatif.md): mm [0, 10), arrival 11; the last arrival is now
    # rank 1's, 37: the all-reduce ends at 37 + 9 = 46, 4 ms earlier, and so does every step.
    # Measured from the same first starts (rank 2's: 0, in both): scenario 56 + 30 + 56 = 142 /
    # 3 = 47.33 ms, replay 60 + 34 + 60 = 154 / 3 = 51.33 ms: 154 / 142 = 1.085x. (Rank 2
    # measured from 30 in the replay and from 0 here, its step would read 56 against 30: the
    # run 47.33 against 41.33, 0.87x, "slower", though every rank ends 4 ms earlier.)
    fix2 = rows["fix-rank:2"]
    assert fix2.step_ns == pytest.approx(142 / 3 * MS)
    assert fix2.baseline_ns == pytest.approx(154 / 3 * MS)
    assert fix2.speedup == pytest.approx(154 / 142)
    # fix-rank:1: rank 1 begins at 0 (the lower middle of 0 and 30), arrives at 11, still
    # before rank 2: nothing ends earlier; from 0 in both its step is 60: (60 + 60 + 30) / 3 =
    # 50 ms in both, 1.00x
    assert rows["fix-rank:1"].speedup == pytest.approx(1.0)
    assert rows["fix-rank:1"].baseline_ns == pytest.approx(150 / 3 * MS)
    # fix-rank:0: never a later start, the same durations as its peers: 1.00x
    assert rows["fix-rank:0"].speedup == pytest.approx(1.0)
    assert w.fix_rank[0].name == "fix-rank:2" and (w.fix_rank[0].speedup or 0) > 1
    # the note says the speedup is against the replay measured from the same first starts
    assert any("fix-rank:2 51.33 ms" in n and "same first starts" in n for n in w.notes)


def test_a_late_start_nobody_waited_for_buys_nothing() -> None:
    # two ranks, no communication: rank 0 mm [0, 10) step [0, 15); rank 1 mm [5, 15) step
    # [5, 20). fix-rank:1 starts rank 1 at 0 (its peer's start): mm [0, 10), step end 15. It
    # meets no peer, so each is measured from its own first start: [0, 15) = 15 as before:
    # 1.00x (from rank 1's replayed start in both it would be 20 against 15: a phantom 1.14x)
    run = [
        gloo_rank(0, [("cpu_op", "aten::mm", 1, 0, 10)], ((1, 0, 15),)),
        gloo_rank(1, [("cpu_op", "aten::mm", 1, 5, 15)], ((1, 5, 20),)),
    ]
    w = what_if(graph_of(run), ["replay", "fix-rank:1"])
    fix = w.scenarios[1]
    assert fix.step_ns == pytest.approx(15 * MS) and fix.speedup == pytest.approx(1.0)


def _handing_off(rank: int, begin: int, bwd: tuple[int, int] = (38, 48)) -> Timeline:
    """One step [begin, 55): mm [b, b+10), the call [b+10, b+11), gloo's all-reduce [b+11, 35)
    (thread 10), add [35, 37) on the main thread (blocked until the all-reduce ended); then the
    main thread waits in backward() while thread 2 runs AddmmBackward0 ``bwd`` (default
    [38, 48)); the main thread resumes with the optimizer [49, 51)."""
    b = begin
    rows = [
        ("cpu_op", "aten::mm", 1, b, b + 10),
        ("cpu_op", "c10d::allreduce_", 1, b + 10, b + 11),
        ("annotation", "gloo:all_reduce", 10, b + 11, 35),
        ("cpu_op", "aten::add", 1, 35, 37),
        ("cpu_op", "AddmmBackward0", 2, *bwd),
        ("cpu_op", "Optimizer.step#SGD.step", 1, 49, 51),
    ]
    return gloo_rank(rank, rows, ((1, b, 55),))


def _edges(run: list[Timeline]) -> set[tuple[int, str, str]]:
    g = graph_of(run)
    names = np.asarray(g.names, dtype=object)
    return {
        (int(g.unit_rank[g.unit[d]]), str(names[g.name[s]]), str(names[g.name[d]]))
        for s, d, st in zip(g.src.tolist(), g.dst.tolist(), g.src_start.tolist(), strict=True)
        if not st and g.lane[s] != g.lane[d] and g.kind[s] != 1
    }


def test_a_thread_handed_the_backward_moves_with_the_forward() -> None:
    # per rank: thread 2 works [38, 48) only while the main thread is idle between add (ends
    # 37) and the optimizer (starts 49), 1 ms after the one and 1 ms before the other (within
    # the blocked rule's 1 ms): a hand-off, edges add -> backward and backward -> optimizer
    run = [_handing_off(0, 0), _handing_off(1, 20)]
    edges = _edges(run)
    for r in (0, 1):
        assert (r, "aten::add", "AddmmBackward0") in edges
        assert (r, "AddmmBackward0", "Optimizer.step#SGD.step") in edges
    # rank 1 began at 20 (late from before the capture): arrivals 11 and 31, the all-reduce
    # ends at 35 (4 ms after the last arrival). Replay: steps 55 and 35: 45 ms
    w = what_if(graph_of(run), ["replay", "fix-rank:1", "fix-rank:0"])
    replayed, fix1, fix0 = w.scenarios
    assert w.max_error_ratio == 0.0 and replayed.step_ns == pytest.approx(45 * MS)
    # fix-rank:1: rank 1 begins at 0 too: both arrive at 11, the all-reduce ends at 15, add
    # [15, 17), backward [18, 28) (1 ms after add), optimizer [29, 31): every end 20 ms
    # earlier, steps end at 35. From the same first starts (0 for both): 35 + 35 = 35 ms
    # against 55 + 55 = 55 ms: 55 / 35 = 1.571x. Without the hand-off the backward would keep
    # its observed start (38) and the optimizer its 12 ms after add: [29, 31), the backward
    # [38, 48) last: steps ending 3 ms earlier, 52 against 55: 1.06x
    assert fix1.step_ns == pytest.approx(35 * MS)
    assert fix1.speedup == pytest.approx(55 / 35)
    # fix-rank:0: rank 0 began first (never a later start) and runs like rank 1: 1.00x
    assert fix0.speedup == pytest.approx(1.0)


def test_a_thread_working_beside_the_gaps_gets_no_hand_off() -> None:
    # thread 2 works [40, 45): 3 ms after add ended and 4 ms before the optimizer, over 1 ms
    # and over 1 % of its 5 ms: a thread of its own (a metrics thread), not handed the work
    run = [_handing_off(0, 0, (40, 45)), _handing_off(1, 20, (40, 45))]
    edges = _edges(run)
    assert not any("AddmmBackward0" in (a, b) for _, a, b in edges)
    w = what_if(graph_of(run), ["replay"])
    assert w.max_error_ratio == 0.0


def test_what_to_try_says_the_baseline_of_a_rank_started_earlier() -> None:
    from traceoverlap.reporters.whatif_report import advice_lines
    from traceoverlap.whatif.advice import Advice, best_scenarios

    # the run of the first test: fix-rank:2 47.33 ms, 1.08x against the replay's 51.33 ms
    # from the same first starts, not its 41.33; no-straggler starts rank 2 at the median of
    # all three starts (26): arrivals 11, 37, 37, every step ends 4 ms earlier: 56 + 30 + 30 =
    # 116 / 3 = 38.67 ms against 60 + 34 + 34 = 128 / 3 = 42.67 ms: 1.10x, the first line
    run = [_late_rank(0, 0, 3), _late_rank(1, 26, 3), _late_rank(2, 30, 3)]
    w = what_if(graph_of(run), ["replay", "no-straggler"])  # and the fix-rank rows
    lines = advice_lines(Advice(best_scenarios(w), replay_ns=124 / 3 * MS))
    assert lines[0].startswith(
        "what-if no-straggler: step 38.67 ms, 1.10x against the replay's 42.67 ms from the same "
        "first starts ("
    )
    assert lines[1].startswith(
        "what-if fix-rank:2: step 47.33 ms, 1.08x against the replay's 51.33 ms from the same "
        "first starts ("
    )
    # a line whose baseline is the replay's own step says nothing more
    assert all("same first starts" not in x for x in advice_lines(Advice(best_scenarios(w))))
