"""Benchmark: replay of a synthetic run graph (docs/whatif.md §5, scale).

Run: ``python benchmarks/bench_replay.py [--ranks 1024] [--steps 10] [--acts 2000]``.

Per rank and step: ``--acts`` activities, of which 20 collectives on a communication stream
(each matched across every rank) and the rest kernels on a compute stream; every collective
waits for the kernel before it (an event record / stream wait) and the kernel after it waits for
the collective. Rank 7 runs its kernels 30 % slower (a straggler). The graph is built as arrays
(no trace files: the analysis of such a job is the map's business, see bench_scale.py), its
"observed" times made by one replay, then timed: the identity replay and ``fix-rank:7``.
Prints wall and CPU time (each replay with its parameters) and peak RSS. Not a test: numbers
depend on the machine.

``--compare-with CHECKOUT``: also replays the same graph and parameters with that checkout's
``traceoverlap/whatif/replay.py`` (loaded from its file, in this process), and prints both CPU
times side by side and whether the schedules are identical.

Targets (issues 37, 40): under 30 s and 3 GB at 1,024 x 10 x 2,000, linear in nodes. Time is
rounds x nodes per step (a round is a few numpy passes over one step's nodes; a step needs about
two rounds per cross-lane dependency on its critical path, 41 here), so it is linear in ranks
and in activities for a fixed program. Memory, per node: the graph's two int64 times and seven
int32 columns (``RunGraph``, 0.9 GB at 20.5 M nodes), each parameter set four int64 (0.66 GB),
each schedule two; a replay adds about three more (its lane prefix and the state it settles in
place, the new schedule's arrays among them) and block-sized temporaries. This script holds the
graph and the observed parameters throughout, and, as ``what_if`` does, lets the identity
schedule go before a scenario replays: peak 2.6 GB at 1,024 ranks (docs/performance.md).
The builder makes one rank's program and tiles it: the graph is built in less than the replay
needs.
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
    """Built a rank's pattern at a time: every rank has the same program, so each column is one
    rank's (sorted by lane, then position) repeated, each allocated once at its final type."""
    per = acts * steps
    j = np.arange(per, dtype=np.int64)  # position in the rank's program
    step = j // acts
    k = j % acts
    is_comm = k >= acts - COLLS
    comm_i = np.where(is_comm, k - (acts - COLLS), -1)
    inst1 = np.where(is_comm, step * COLLS + comm_i, -1)
    # node order: (lane, start); within a rank-step compute kernels then collectives
    order = np.lexsort((j, is_comm))
    inv = np.empty(per, dtype=np.int64)
    inv[order] = np.arange(per)
    # edges: collective c of a step after compute kernel (c+1)*stride-1; kernel after it waits
    stride = (acts - COLLS) // COLLS
    base = step * acts
    cpos = np.flatnonzero(is_comm)
    before = base[cpos] + (comm_i[cpos] + 1) * stride - 1
    after = before + 1
    has_after = after < base[cpos] + acts - COLLS  # the last collective: nothing waits for it
    rank0 = np.arange(ranks, dtype=np.int64) * per

    def every_rank(e: np.ndarray) -> np.ndarray:
        return np.tile(inv[e], ranks) + np.repeat(rank0, e.size)

    # every rank's "collective after kernel" edges, then every rank's "kernel after collective"
    src = np.concatenate([every_rank(before), every_rank(cpos[has_after])])
    dst = np.concatenate([every_rank(cpos), every_rank(after[has_after])])

    def tile(v: np.ndarray, dtype: type) -> np.ndarray:
        return np.tile(v[order].astype(dtype), ranks)

    unit = np.repeat(np.arange(ranks, dtype=np.int32), per)
    lane = unit * 2
    lane += tile(is_comm, np.int32)
    z = np.zeros(0, np.int64)
    return RunGraph(
        unit=unit,
        lane=lane,
        start_ns=start,
        end_ns=end,
        kind=tile(is_comm, np.int8),
        window=tile(step, np.int32),
        name=tile(k % 50, np.int32),
        pos=tile(j, np.int32),
        inst=tile(inst1, np.int32),
        family=tile(np.where(is_comm, 0, -1), np.int32),
        lane_host=np.zeros(2 * ranks, dtype=bool),
        lane_comm=np.tile(np.array([False, True]), ranks),
        src=src,
        dst=dst,
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
    comm = g0.kind == 1
    dur[comm] = 200_000
    slow = (g0.unit == 7) & ~comm
    dur[slow] = dur[slow] * 13 // 10
    del slow
    first = np.ones(n, dtype=bool)
    first[1:] = g0.lane[1:] != g0.lane[:-1]
    floor = np.full(n, -(2**62), dtype=np.int64)
    floor[first] = 0
    del first
    post = np.zeros(n, dtype=np.int64)
    post[comm] = 200_000
    del comm
    slack = rng.integers(1_000, 5_000, n).astype(np.int64, copy=False)
    s0 = replay(g0, Params(dur, slack, post, floor))
    del dur, slack, post, floor, zero
    g = RunGraph(**{**g0.__dict__, "start_ns": s0.start_ns, "end_ns": s0.end_ns})
    del g0, s0
    print(
        f"built {n:,} nodes ({a.ranks} ranks x {a.steps} steps x {a.acts}) in "
        f"{time.perf_counter() - t:.1f} s, peak RSS {_peak_mb():,.0f} MB"
    )
    t, c = time.perf_counter(), time.process_time()
    p = observed_params(g)
    s = replay(g, p)
    err = np.abs(s.end_ns - g.end_ns).max()
    print(
        f"identity replay: {time.perf_counter() - t:.1f} s ({time.process_time() - c:.1f} s CPU, "
        f"with its parameters), {s.rounds} rounds, "
        f"settled={s.settled}, max end error {err} ns, peak RSS {_peak_mb():,.0f} MB"
    )
    run_ns = int(s.end_ns.max() - s.start_ns.min())
    del s  # as ``what_if`` does: the scenarios replay without the identity's times
    t, c = time.perf_counter(), time.process_time()
    s7 = replay(g, scenario_params(g, p, "fix-rank:7"))
    print(
        f"fix-rank:7 replay: {time.perf_counter() - t:.1f} s ({time.process_time() - c:.1f} s CPU, "
        f"with its parameters), {s7.rounds} rounds, "
        f"run {run_ns / 1e6:.1f} ms -> "
        f"{(s7.end_ns.max() - s7.start_ns.min()) / 1e6:.1f} ms, "
        f"peak RSS {_peak_mb():,.0f} MB"
    )
    if a.compare_with is not None:
        del s7
        q7 = scenario_params(g, p, "fix-rank:7")
        _side_by_side(_other_replay(a.compare_with.resolve()), g, {"identity": p, "fix-rank:7": q7})


if __name__ == "__main__":
    main()
