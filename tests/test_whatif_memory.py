"""The replay's memory layout (issue 37): int32 per-node columns, rounds a block of nodes at a
time, collective ends kept only where set. Hand-built graphs, the schedule derived in comments;
the block size shrunk so that lanes and edges cross block boundaries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from traceoverlap.core.errors import UsageError
from traceoverlap.whatif import graph as graph_mod
from traceoverlap.whatif import replay as replay_mod
from traceoverlap.whatif.graph import RunGraph
from traceoverlap.whatif.replay import NEG, Params, replay
from traceoverlap.whatif.scenarios import load_graph

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "workloads"


def _two_lanes() -> RunGraph:
    """Lane 0: nodes 0-3; lane 1: nodes 4-5; node 5 starts after node 1 ends (an edge from
    lane 0 into lane 1); one step, no collectives."""
    i32 = np.int32
    z = np.zeros(0, np.int64)
    return RunGraph(
        unit=np.zeros(6, i32),
        lane=np.array([0, 0, 0, 0, 1, 1], i32),
        start_ns=np.zeros(6, np.int64),
        end_ns=np.zeros(6, np.int64),
        kind=np.zeros(6, np.int8),
        window=np.zeros(6, i32),
        name=np.zeros(6, i32),
        pos=np.arange(6, dtype=i32),
        inst=np.full(6, -1, i32),
        family=np.full(6, -1, i32),
        lane_host=np.zeros(2, bool),
        lane_comm=np.zeros(2, bool),
        src=np.array([1], np.int64),
        dst=np.array([5], np.int64),
        src_start=np.zeros(1, bool),
        gap=np.zeros(1, np.int64),
        esrc=z,
        edst=z,
        egap=z,
        names=("k",),
        families=(),
        step_labels=("0",),
        unit_rank=np.zeros(1, np.int64),
        win_start_ns=np.zeros((1, 1), np.int64),
        win_end_ns=np.ones((1, 1), np.int64),
        notes=(),
    )


def _params(floor1: int) -> Params:
    """Durations 10 on lane 0 and 5 on lane 1, slack 1 and 2; lane 0 may start at 0, lane 1 at
    ``floor1``."""
    return Params(
        dur_ns=np.array([10, 10, 10, 10, 5, 5], np.int64),
        slack_ns=np.array([1, 1, 1, 1, 2, 2], np.int64),
        post_ns=np.zeros(6, np.int64),
        floor_ns=np.array([0, NEG, NEG, NEG, floor1, NEG], np.int64),
    )


@pytest.mark.parametrize("block", [3, replay_mod._BLOCK])
def test_lane_and_edge_across_blocks(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    # blocks of 3: lane 0 goes on from the first block (nodes 0-2) into the second (3-5), and
    # node 5's edge comes from node 1 in the first block.
    monkeypatch.setattr(replay_mod, "_BLOCK", block)
    s = replay(_two_lanes(), _params(0))
    # lane 0: each starts 1 after the one before ends: 1, 12, 23, 34 (ends 11, 22, 33, 44)
    # lane 1: node 4 at 0 + 2 = 2 (ends 7); node 5 after max(7, node 1's end 22) + 2 = 24
    assert s.start_ns.tolist() == [1, 12, 23, 34, 2, 24]
    assert s.end_ns.tolist() == [11, 22, 33, 44, 7, 29]
    # round 1 moves every node from its floor (node 5 reads node 1's first end, 0 + 10 = 10:
    # 12); round 2 moves node 5 (node 1 now ends at 22); round 3 moves nothing
    assert (s.rounds, s.settled) == (3, True)


def test_lanes_too_far_apart_for_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    # lane 1 may start only at 2**61: the two lanes' values span more than one shifted pass can
    # hold (span x (lanes + 1) >= 2**62), so the lanes' maxima are taken per lane (this failed
    # before: a read-only array)
    monkeypatch.setattr(replay_mod, "_BLOCK", 3)
    far = 2**61
    s = replay(_two_lanes(), _params(far))
    # lane 0 as before; node 4 at 2**61 + 2; node 5 at max(2**61 + 7, 22) + 2 = 2**61 + 9
    assert s.start_ns.tolist() == [1, 12, 23, 34, far + 2, far + 9]
    assert s.settled


def test_run_graph_columns_are_int32() -> None:
    g = load_graph(FIXTURES / "naive4_slow")
    for col in (g.unit, g.lane, g.window, g.name, g.pos, g.inst, g.family, g.role):
        assert col.dtype == np.int32
    assert g.start_ns.dtype == np.int64 and g.end_ns.dtype == np.int64


def test_a_graph_past_int32_ids_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_mod, "INT32_NODES", 10)
    with pytest.raises(UsageError, match="more than the replay's 9"):
        load_graph(FIXTURES / "naive4_slow")
