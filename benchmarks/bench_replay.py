"""Benchmark: replay of a synthetic run graph (docs/whatif.md §5, scale).

Run: ``python benchmarks/bench_replay.py [--ranks 1024] [--steps 10] [--acts 2000]``.

Per rank and step: ``--acts`` activities, of which 20 collectives on a communication stream
(each matched across every rank) and the rest kernels on a compute stream; every collective
waits for the kernel before it (an event record / stream wait) and the kernel after it waits for
the collective. Rank 7 runs its kernels 30 % slower (a straggler). The graph is built as arrays
(no trace files: the analysis of such a job is the map's business, see bench_scale.py), its
"observed" times made by one replay, then timed: the identity replay and ``fix-rank:7``.
Prints wall time and peak RSS. Not a test: numbers depend on the machine.

``--compare-with CHECKOUT``: also replays the same graph and parameters with that checkout's
``traceoverlap/whatif/replay.py`` (loaded from its file, in this process), and prints both CPU
times side by side and whether the schedules are identical.

Targets (issue 40): under 30 s and 3 GB at 1,024 x 10 x 2,000, linear in nodes. Time is rounds x
nodes per step (a round is a few numpy passes over one step's nodes; a step needs about two
rounds per cross-lane dependency on its critical path, 41 here), so it is linear in ranks and
in activities for a fixed program. Memory is not the replay's: the graph holds nine int64
columns per node (``RunGraph``, 1.5 GB at 20.5 M nodes), the observed parameters four more
(0.66 GB), each scenario's parameters four and each schedule two: this script holds the graph,
two parameter sets and two schedules (3.5 GB) before a replay allocates anything. Under 3 GB
needs narrower graph columns (int32 ids, windows, names, positions), a change of the graph's
layout, not of the replay.
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np

from traceoverlap.whatif.graph import RunGraph
from traceoverlap.whatif.replay import Params, observed_params, replay
from traceoverlap.whatif.scenarios import scenario_params

COLLS = 20


def _graph(ranks: int, steps: int, acts: int, start: np.ndarray, end: np.ndarray) -> RunGraph:
    per = acts * steps
    n = ranks * per
    unit = np.repeat(np.arange(ranks, dtype=np.int64), per)
    j = np.tile(np.arange(per, dtype=np.int64), ranks)
    step = j // acts
    k = j % acts
    is_comm = k >= acts - COLLS
    lane = unit * 2 + is_comm
    # node order: (lane, start); within a rank-step compute kernels then collectives
    comm_i = np.where(is_comm, k - (acts - COLLS), -1)
    inst = np.where(is_comm, step * COLLS + comm_i, -1)
    kind = is_comm.astype(np.int8)
    order = np.lexsort((j, lane))
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    # edges: collective c of a step after compute kernel (c+1)*stride-1; kernel after it waits
    stride = (acts - COLLS) // COLLS
    base = unit * per + step * acts
    cpos = np.flatnonzero(is_comm)
    before = base[cpos] + (comm_i[cpos] + 1) * stride - 1
    after = before + 1
    has_after = after < base[cpos] + acts - COLLS  # the last collective: nothing waits for it
    src = np.concatenate([before, cpos[has_after]])
    dst = np.concatenate([cpos, after[has_after]])
    z = np.zeros(0, np.int64)
    return RunGraph(
        unit=unit[order],
        lane=lane[order],
        start_ns=start[order],
        end_ns=end[order],
        kind=kind[order],
        window=step[order],
        name=(k % 50)[order],
        pos=j[order],
        inst=inst[order],
        family=np.where(is_comm, 0, -1)[order],
        lane_host=np.zeros(2 * ranks, dtype=bool),
        lane_comm=np.tile(np.array([False, True]), ranks),
        src=inv[src],
        dst=inv[dst],
        src_start=np.zeros(src.size, dtype=bool),
        gap=np.zeros(src.size, dtype=np.int64),
        esrc=z,
        edst=z,
        egap=z,
        names=tuple(f"k{i}" for i in range(50)),
        families=("AllReduce",),
        step_labels=tuple(str(s) for s in range(steps)),
        unit_rank=np.arange(ranks, dtype=np.int64),
        win_start_ns=np.zeros((ranks, steps), dtype=np.int64),
        win_end_ns=np.ones((ranks, steps), dtype=np.int64),
        notes=(),
    )


def _other_replay(checkout: Path) -> ModuleType:
    """``traceoverlap/whatif/replay.py`` of another checkout, as a module of this package (its
    relative imports resolve here: the graph and its types are this checkout's)."""
    path = checkout / "traceoverlap" / "whatif" / "replay.py"
    spec = importlib.util.spec_from_file_location("traceoverlap.whatif._other_replay", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _side_by_side(other: ModuleType, g: RunGraph, params: dict[str, Params]) -> None:
    for name, q in params.items():
        t = time.process_time()
        a = replay(g, q)
        t1 = time.process_time()
        b = other.replay(g, other.Params(q.dur_ns, q.slack_ns, q.post_ns, q.floor_ns))
        t2 = time.process_time()
        same = bool((a.start_ns == b.start_ns).all() and (a.end_ns == b.end_ns).all()) and (
            a.rounds,
            a.settled,
        ) == (b.rounds, b.settled)
        print(
            f"{name}: CPU {t1 - t:.2f} s here, {t2 - t1:.2f} s there; identical schedules: {same}"
        )


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--acts", type=int, default=2000)
    ap.add_argument("--compare-with", type=Path, help="another checkout: its replay, side by side")
    a = ap.parse_args()
    n = a.ranks * a.steps * a.acts
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    zero = np.zeros(n, dtype=np.int64)
    g0 = _graph(a.ranks, a.steps, a.acts, zero, zero)
    dur = rng.lognormal(np.log(20_000), 0.5, n).astype(np.int64)
    dur[g0.kind == 1] = 200_000
    dur[(g0.unit == 7) & (g0.kind == 0)] = dur[(g0.unit == 7) & (g0.kind == 0)] * 13 // 10
    first = np.ones(n, dtype=bool)
    first[1:] = g0.lane[1:] != g0.lane[:-1]
    floor = np.where(first, 0, -(2**62)).astype(np.int64)
    post = np.where(g0.kind == 1, 200_000, 0).astype(np.int64)
    slack = rng.integers(1_000, 5_000, n).astype(np.int64)
    s0 = replay(g0, Params(dur, slack, post, floor))
    g = RunGraph(**{**g0.__dict__, "start_ns": s0.start_ns, "end_ns": s0.end_ns})
    del g0, s0
    print(
        f"built {n:,} nodes ({a.ranks} ranks x {a.steps} steps x {a.acts}) in "
        f"{time.perf_counter() - t:.1f} s, peak RSS {_peak_mb():,.0f} MB"
    )
    t = time.perf_counter()
    p = observed_params(g)
    s = replay(g, p)
    err = np.abs(s.end_ns - g.end_ns).max()
    print(
        f"identity replay: {time.perf_counter() - t:.1f} s, {s.rounds} rounds, "
        f"settled={s.settled}, max end error {err} ns, peak RSS {_peak_mb():,.0f} MB"
    )
    t = time.perf_counter()
    s7 = replay(g, scenario_params(g, p, "fix-rank:7"))
    print(
        f"fix-rank:7 replay: {time.perf_counter() - t:.1f} s, {s7.rounds} rounds, "
        f"run {(s.end_ns.max() - s.start_ns.min()) / 1e6:.1f} ms -> "
        f"{(s7.end_ns.max() - s7.start_ns.min()) / 1e6:.1f} ms, "
        f"peak RSS {_peak_mb():,.0f} MB"
    )
    if a.compare_with is not None:
        del s, s7
        q7 = scenario_params(g, p, "fix-rank:7")
        _side_by_side(_other_replay(a.compare_with.resolve()), g, {"identity": p, "fix-rank:7": q7})


if __name__ == "__main__":
    main()
