"""``analyze`` against a brute-force per-nanosecond oracle of the contract (issues 10 and 11).

tests/oracle.py decides every nanosecond of every step literally, from metrics.md, diagnosis.md
and docs/oracle.md (it imports nothing from traceoverlap); tests/timeline_gen.py builds
random single- and multi-rank Timelines and the same events in the oracle's plain form.

- ``test_agrees_with_oracle``: random runs without the generator features the tool is known to
  get wrong (:data:`KNOWN_GAPS`); must pass.
- One deterministic, hand-derived reproducer per disagreement class (:data:`REPRO`, strict xfail).
  When a fix lands its reproducer XPASSes (and fails the suite): add its name to FIXED and delete
  its KNOWN_GAPS line, so the property test covers it from then on.
- Diagnosis columns (issue 10): compared when present; set DIAGNOSIS_REQUIRED = True when they land.

``TRACEOVERLAP_FUZZ_EXAMPLES=5000 python -m pytest -q tests/test_oracle.py`` runs a real campaign
(the default keeps the file to a few seconds).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import examples
from hypothesis import HealthCheck, given, settings
from oracle import Ev, oracle_steps
from test_job_model import check_collective_bounds
from timeline_gen import FEATURES, Scenario, scenarios, to_timeline

from traceoverlap import AnalyzeOptions, analyze
from traceoverlap.core.errors import TraceoverlapError

#: Generator features switched off in the must-pass property test, each with the reproducer of
#: the defect it hits (REPRO below). Remove a line when its fix lands.
KNOWN_GAPS: dict[str, tuple[str, str]] = {
    # feature: (its reproducer in REPRO, the defect); every class found so far is fixed
}

#: Step-row columns the tool must have today, compared exactly (ints) or to 1e-9 (ratios).
REQUIRED = (
    "step_ns",
    "compute_ns",
    "comm_ns",
    "memory_ns",
    "overlap_ns",
    "exposed_comm_ns",
    "idle_ns",
    "other_steps_ns",
    "iteration_ns",
    "ideal_ns",
    "overlap_ratio",
    "potential_speedup",
    "exposed_comm_ratio",
    "idle_ratio",
    "start_ns",
    "end_ns",
)
#: Required on runs of two or more ranks.
REQUIRED_MULTI_RANK = ("exposed_wait_ns", "exposed_transfer_ns", "exposed_unmatched_ns")
#: diagnosis.md columns (issue 10): compared whenever present. Flip DIAGNOSIS_REQUIRED when they
#: land; ``bottleneck`` is compared with diagnosis §2 once ``compute_only_ns`` exists (before
#: that the tool still prints metrics.md's first-match verdict, which the oracle does not model).
DIAGNOSIS = (
    "compute_only_ns",
    "memory_only_ns",
    "exposed_wait_ns",
    "exposed_transfer_ns",
    "exposed_unmatched_ns",
    "exposed_tail_ns",
    "exposed_dependency_ns",
    "exposed_host_ns",
    "bottleneck",
)
DIAGNOSIS_REQUIRED = True

#: diagnosis §1: disjoint parts that sum to step_ns; §3: causes that sum to exposed_comm_ns
PARTS = (
    "compute_only_ns",
    "overlap_ns",
    "exposed_wait_ns",
    "exposed_transfer_ns",
    "exposed_unmatched_ns",
    "memory_only_ns",
    "other_steps_ns",
    "idle_ns",
)
CAUSES = ("exposed_wait_ns", "exposed_tail_ns", "exposed_dependency_ns", "exposed_host_ns")
RATIOS = {"overlap_ratio": "comm_ns", "exposed_comm_ratio": "step_ns", "idle_ratio": "step_ns"}


def _norm_step(v: Any) -> str:
    return str(v)


def _norm_device(v: Any) -> int:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return -1
    return int(v)


def _same(a: Any, b: Any) -> bool:
    """Tool value a equals oracle value b: None only for None, ns as integers (never floats),
    ratios to 1e-9, labels as text. The DataFrame's null is pandas' NA (nullable columns)."""
    a = None if a is pd.NA else a
    if a is None or b is None:
        return a is None and b is None
    if isinstance(b, bool) or isinstance(b, str):
        return str(a) == str(b)
    if isinstance(b, int):
        return isinstance(a, int | np.integer) and int(a) == b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)


def _columns(df: pd.DataFrame, n_ranks: int) -> list[str]:
    cols = list(REQUIRED)
    if n_ranks >= 2:
        cols += REQUIRED_MULTI_RANK
    diag_landed = "compute_only_ns" in df.columns
    for c in DIAGNOSIS:
        if c in cols:
            continue
        if DIAGNOSIS_REQUIRED or (c in df.columns and (c != "bottleneck" or diag_landed)):
            cols.append(c)
    return cols


def check_invariants(df: pd.DataFrame) -> None:
    """What must hold on every step row whatever the input."""
    for col in df.columns:
        for v in df[col].tolist():
            assert not (isinstance(v, float) and math.isnan(v)), f"NaN in {col}: {df[col].tolist()}"
    for _, r in df.iterrows():
        assert r["overlap_ns"] <= min(r["compute_ns"], r["comm_ns"]), dict(r)
        assert r["exposed_comm_ns"] == r["comm_ns"] - r["overlap_ns"], dict(r)
        assert 0 <= r["idle_ns"] <= r["step_ns"], dict(r)
        for ratio, denom in RATIOS.items():
            if ratio in r:
                assert (r[ratio] is pd.NA) == (r[denom] == 0), (ratio, dict(r))
        if "potential_speedup" in r:
            assert (r["potential_speedup"] is pd.NA) == (r["ideal_ns"] == 0), dict(r)
        if all(p in r for p in PARTS):
            assert sum(int(r[p]) for p in PARTS) == r["step_ns"], dict(r)
        if "exposed_wait_ns" in r and "exposed_transfer_ns" in r:
            unmatched = int(r.get("exposed_unmatched_ns", 0))
            assert (
                r["exposed_wait_ns"] + r["exposed_transfer_ns"] + unmatched == r["exposed_comm_ns"]
            )
        if all(c in r for c in CAUSES):
            assert sum(int(r[c]) for c in CAUSES) == r["exposed_comm_ns"], dict(r)


def check_oracle_invariants(rows: list[dict[str, Any]]) -> None:
    """The oracle's own bookkeeping (its masks make these true; a slip would show here)."""
    for r in rows:
        assert sum(r[p] for p in PARTS) == r["step_ns"], r
        assert sum(r[c] for c in CAUSES) == r["exposed_comm_ns"], r
        assert r["overlap_ns"] <= min(r["compute_ns"], r["comm_ns"]), r
        assert r["idle_ns"] >= 0 and r["exposed_comm_ns"] == r["comm_ns"] - r["overlap_ns"], r


def disagreements(
    events: list[Ev], kind: str, n_ranks: int, step_regex: str | None = None
) -> list[str]:
    """Every difference between ``analyze`` and the oracle on these events (empty: they agree)."""
    rows = oracle_steps(events, step_regex)
    check_oracle_invariants(rows)
    timeline = to_timeline(events, kind, n_ranks)
    if step_regex is not None and not any(
        e.cat == "annotation" and e.end > e.start and re.search(step_regex, e.name) for e in events
    ):
        # a user's step regex that matches nothing is an error (issue 11), never a silent 'all'
        try:
            analyze(timeline, AnalyzeOptions(step_regex=step_regex))
        except TraceoverlapError:
            return []
        return ["the tool accepted a step regex that matches no range"]
    if not rows:
        try:
            a = analyze(timeline, AnalyzeOptions(step_regex=step_regex))
        except TraceoverlapError:
            return []
        return [f"oracle: no step at all; tool: {len(a.steps)} step rows"]
    a = analyze(timeline, AnalyzeOptions(step_regex=step_regex))
    df = a.steps
    check_invariants(df)
    if a.collectives is not None:
        check_collective_bounds(a.collectives)  # issue 36: no figure exceeds its whole
    by_device = "device" in df.columns

    def okey(r: dict[str, Any]) -> tuple[Any, ...]:
        k = (r["rank"], _norm_device(r["device"])) if by_device else (r["rank"],)
        return k + (_norm_step(r["step"]),)

    def tkey(r: dict[str, Any]) -> tuple[Any, ...]:
        k = (int(r["rank"]), _norm_device(r["device"])) if by_device else (int(r["rank"]),)
        return k + (_norm_step(r["step"]),)

    want: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        assert okey(r) not in want, f"oracle has two rows for {okey(r)}: add a device column"
        want[okey(r)] = r
    got = {tkey(r): r for r in df.to_dict("records")}
    out = []
    for k in sorted(set(want) - set(got), key=str):
        out.append(f"{k}: missing from the tool (oracle step_ns {want[k]['step_ns']})")
    for k in sorted(set(got) - set(want), key=str):
        out.append(f"{k}: the tool has a step the oracle does not (step_ns {got[k]['step_ns']})")
    cols = _columns(df, n_ranks)
    for k in sorted(set(want) & set(got), key=str):
        for c in cols:
            if c not in got[k]:
                out.append(f"column {c} missing from the tool's step rows")
                continue
            if not _same(got[k][c], want[k][c]):
                out.append(f"{k} {c}: tool {got[k][c]!r}, oracle {want[k][c]!r}")
    return sorted(set(out), key=out.index)


def _check(sc: Scenario) -> None:
    diff = disagreements(sc.events, sc.kind, sc.n_ranks, sc.step_regex)
    assert not diff, "analyze disagrees with the oracle:\n" + "\n".join(diff[:30])


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(scenarios(FEATURES - set(KNOWN_GAPS)))
def test_agrees_with_oracle(sc: Scenario) -> None:
    _check(sc)


#: CPU runs with calls blocked before, around and after their gloo work (diagnosis.md §11)
BLOCKED_CPU = {
    "cpu",
    "multi_rank",
    "blocked_calls",
    "clock_offsets",
    "nested_markers",
    "dup_steps",
    "custom_regex",
}


@pytest.mark.slow
@settings(
    max_examples=examples(1000),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(scenarios(BLOCKED_CPU - set(KNOWN_GAPS)))
def test_blocked_cpu_calls_agree_with_oracle(sc: Scenario) -> None:
    # §11 at 1,000 examples under --runslow: per ns, a CPU thread inside a communication call
    # or blocked on one that no gloo:* activity covers is comm (the CPU share of the test above)
    _check(sc)


#: The generator's wake-up gaps are 0-40 ns, always within the real 1 ms floor: with the floor
#: at 20 ns in the tool and the oracle, the same scenarios wake past it about half the time.
_SMALL_FLOOR_NS = 20


@pytest.mark.slow
@settings(
    max_examples=examples(500),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(scenarios(BLOCKED_CPU - set(KNOWN_GAPS)))
def test_late_wake_ups_agree_with_oracle(sc: Scenario) -> None:
    # §11 past the floor: a thread idle from a call's return through the comm's end waited for
    # it until that end, and the late wake-up after it is its own time, per ns in both
    from unittest import mock

    import oracle

    from traceoverlap.rank import causes, hostwait

    with (
        mock.patch.object(hostwait, "BLOCKED_FLOOR_NS", _SMALL_FLOOR_NS),
        mock.patch.object(causes, "BLOCKED_FLOOR_NS", _SMALL_FLOOR_NS),
        mock.patch.object(oracle, "BLOCKED_FLOOR", _SMALL_FLOOR_NS),
    ):
        _check(sc)


def test_known_gaps_have_reproducers() -> None:
    """Every switched-off feature names a real generator feature and a reproducer below."""
    for feature, (repro, _why) in KNOWN_GAPS.items():
        assert feature in FEATURES
        assert repro in REPRO


# --------------------------------------------------------------------------------------------
# Hand-built scenarios: the oracle must give the hand-derived numbers; the tool too (xfail where
# a known defect stops it). Times in ns.

US = 1000  # the worked exercises: 1 ms of the docs = 1000 ns here (keeps the oracle's grid small)


def _gpu(
    rank: int,
    markers: list[tuple[str, int, int]],
    acts: list[tuple[str, int, int, int, int | None]],
    *,
    pid: int | None = None,
    comm: dict[int, tuple[str, int]] | None = None,
    corr: list[int] | None = None,
    device: list[int] | None = None,
) -> list[Ev]:
    """One GPU rank. markers: (name, start, end) host ranges; acts: (name, stream, start, end,
    launch start or None for no launch record). Names starting "Memcpy" are memcpy, else kernels.
    comm: act index -> (process group, seq); corr: correlation ids (default 1, 2, ...); device:
    per act (default 0). Launch calls last 1 ns."""
    pid = 100 + rank if pid is None else pid
    out = [Ev("annotation", n, s, e, rank, pid, tid=1, thread="python") for n, s, e in markers]
    for i, (name, stream, s, e, launch) in enumerate(acts):
        c = corr[i] if corr else i + 1
        pg, seq = (comm or {}).get(i, ("", -1))
        cat = "memcpy" if name.startswith("Memcpy") else "kernel"
        if launch is not None:
            api = "cudaMemcpyAsync" if cat == "memcpy" else "cudaLaunchKernel"
            out.append(
                Ev("runtime", api, launch, launch + 1, rank, pid, tid=1, thread="python", corr=c)
            )
        dev = device[i] if device else 0
        out.append(
            Ev(cat, name, s, e, rank, pid, device=dev, stream=stream, corr=c, pg=pg, seq=seq)
        )
    return out


def _cpu(
    rank: int,
    markers: list[tuple[str, int, int]],
    compute: list[tuple[int, int]] = (),  # type: ignore[assignment]
    gloo: list[tuple[int, int, str, int]] = (),  # type: ignore[assignment]
    calls: list[tuple[str, str, int, int]] = (),  # type: ignore[assignment]
) -> list[Ev]:
    """One CPU (gloo) rank: markers and aten::mm compute on the python thread, gloo:all_reduce
    (start, end, process group, seq) on pt_gloo_runloop, calls (category, name, start, end) on
    the python thread."""
    pid = 100 + rank
    py = dict(rank=rank, pid=pid, tid=1, thread="python")
    out = [Ev("annotation", n, s, e, **py) for n, s, e in markers]  # type: ignore[arg-type]
    out += [Ev("cpu_op", "aten::mm", s, e, **py) for s, e in compute]  # type: ignore[arg-type]
    out += [Ev(c, n, s, e, **py) for c, n, s, e in calls]  # type: ignore[arg-type]
    out += [
        Ev(
            "annotation",
            "gloo:all_reduce",
            s,
            e,
            rank,
            pid,
            tid=2,
            thread="pt_gloo_runloop",
            pg=pg,
            seq=seq,
        )
        for s, e, pg, seq in gloo
    ]
    return out


def _exercise_overlapped() -> list[Ev]:
    # 10 layers x 5 ms of backward on stream 7; bucket k (two layers) is ready at 10(k+1) ms and
    # its 6 ms all-reduce runs on stream 13 from then on
    layers = [("sgemm", 7, 5 * i * US, 5 * (i + 1) * US, 0) for i in range(10)]
    buckets = [("ncclKernel_AllReduce", 13, 10 * k * US, (10 * k + 6) * US, 0) for k in range(1, 6)]
    return _gpu(0, [("ProfilerStep#1", 0, 100 * US)], layers + buckets)  # type: ignore[arg-type]


def _exercise_sequential() -> list[Ev]:
    # the same work without overlap: the five all-reduces one after the other after backward
    layers = [("sgemm", 7, 5 * i * US, 5 * (i + 1) * US, 0) for i in range(10)]
    buckets = [
        ("ncclKernel_AllReduce", 13, (50 + 6 * k) * US, (56 + 6 * k) * US, 0) for k in range(5)
    ]
    return _gpu(0, [("ProfilerStep#1", 0, 100 * US)], layers + buckets)  # type: ignore[arg-type]


def _exercise_comm_bound() -> list[Ev]:
    # compute 80 ms, comm 120 ms, step 140 ms: compute [0,80), comm [20,140)
    acts = [("sgemm", 7, 0, 80 * US, 0), ("ncclKernel_AllReduce", 13, 20 * US, 140 * US, 0)]
    return _gpu(0, [("ProfilerStep#1", 0, 200 * US)], acts)  # type: ignore[arg-type]


#: name -> (events, kind, ranks, {(rank, step): {column: hand-derived value}})
HAND: dict[str, tuple[list[Ev], str, int, dict[tuple[int, Any], dict[str, Any]]]] = {
    # metrics.md exercise 1: overlapped 56 ms; comm 30, overlap 24, ratio 0.80, exposed 6 (the
    # last bucket [50,56)); nothing computes after 50 ms -> the 6 ms are `tail`. ideal = 56 - 6 +
    # max(0, 30 - 50) = 50, speedup 1.12. lost = 56 - compute_only 26 - overlap 24 = 6 >= 5.6
    # (10 %); the largest lost part is exposed transfer, |M| 30 <= |C| 50 -> exposed-communication
    "exercise-overlapped": (
        _exercise_overlapped(),
        "gpu",
        1,
        {
            (0, 1): dict(
                step_ns=56 * US,
                compute_ns=50 * US,
                comm_ns=30 * US,
                overlap_ns=24 * US,
                overlap_ratio=0.80,
                exposed_comm_ns=6 * US,
                idle_ns=0,
                ideal_ns=50 * US,
                potential_speedup=1.12,
                compute_only_ns=26 * US,
                exposed_tail_ns=6 * US,
                exposed_dependency_ns=0,
                exposed_host_ns=0,
                exposed_wait_ns=0,
                exposed_transfer_ns=6 * US,
                bottleneck="exposed-communication",
            )
        },
    ),
    # exercise 1, sequential: 80 ms, no overlap, all 30 ms exposed and `tail`; ideal 80 - 30 = 50
    "exercise-sequential": (
        _exercise_sequential(),
        "gpu",
        1,
        {
            (0, 1): dict(
                step_ns=80 * US,
                compute_ns=50 * US,
                comm_ns=30 * US,
                overlap_ns=0,
                exposed_comm_ns=30 * US,
                ideal_ns=50 * US,
                exposed_tail_ns=30 * US,
                bottleneck="exposed-communication",
            )
        },
    ),
    # metrics.md exercise 2: compute [0,80), comm [20,140): overlap 60, ratio 0.50, exposed 60
    # ([80,140), tail), ideal 140 - 60 + (120 - 80) = 120; lost 60 = exposed transfer, |M| > |C|
    # -> communication-bound
    "exercise-comm-bound": (
        _exercise_comm_bound(),
        "gpu",
        1,
        {
            (0, 1): dict(
                step_ns=140 * US,
                compute_ns=80 * US,
                comm_ns=120 * US,
                overlap_ns=60 * US,
                overlap_ratio=0.50,
                exposed_comm_ns=60 * US,
                ideal_ns=120 * US,
                exposed_tail_ns=60 * US,
                bottleneck="communication-bound",
            )
        },
    ),
}


def _compare_hand(
    rows: list[dict[str, Any]], expected: dict[tuple[Any, ...], dict[str, Any]], who: str
) -> list[str]:
    out = []
    for key, cols in expected.items():
        match = [
            r
            for r in rows
            if (r["rank"],)
            + ((_norm_device(r.get("device")),) if len(key) == 3 else ())
            + (_norm_step(r["step"]),)
            == key[:-1] + (_norm_step(key[-1]),)
        ]
        if len(match) != 1:
            out.append(
                f"{who}: {len(match)} rows for {key}; rows: "
                f"{[(r['rank'], r.get('device'), r['step']) for r in rows]}"
            )
            continue
        for c, v in cols.items():
            if c not in match[0]:
                out.append(f"{who} {key}: no column {c}")
            elif not _same(match[0][c], v):
                out.append(f"{who} {key} {c}: {match[0][c]!r}, expected {v!r}")
    return out


HAND.update(
    {
        # compute [0,100), comm [50,105): lost = 105 - compute_only 50 - overlap 50 = 5 < 10.5
        # -> compute-bound
        "compute-bound": (
            _gpu(
                0,
                [("ProfilerStep#1", 0, 1000)],
                [("sgemm", 7, 0, 100, 0), ("ncclKernel_AllReduce", 13, 50, 105, 0)],
            ),
            "gpu",
            1,
            {
                (0, 1): dict(
                    step_ns=105,
                    overlap_ns=50,
                    exposed_comm_ns=5,
                    exposed_tail_ns=5,
                    bottleneck="compute-bound",
                )
            },
        ),
        # compute [0,27), comm [27,30): lost 3 is exactly 10 % of the 30 ns step, and "lost < 10 %"
        # is false: the largest lost part is exposed transfer 3, |M| 3 <= |C| 27 ->
        # exposed-communication (a float product 0.1 * 30 = 3.0000000000000004 would say
        # compute-bound: the threshold is read as the exact decimal 10 %)
        "verdict-threshold-exact": (
            _gpu(
                0,
                [("ProfilerStep#1", 0, 1000)],
                [("sgemm", 7, 0, 27, 0), ("ncclKernel_AllReduce", 13, 27, 30, 0)],
            ),
            "gpu",
            1,
            {
                (0, 1): dict(
                    step_ns=30,
                    compute_only_ns=27,
                    exposed_comm_ns=3,
                    bottleneck="exposed-communication",
                )
            },
        ),
    }
)


@pytest.mark.parametrize("name", list(HAND))
def test_oracle_on_hand_derivations(name: str) -> None:
    events, _kind, _n, expected = HAND[name]
    rows = oracle_steps(events)
    check_oracle_invariants(rows)
    assert not _compare_hand(rows, expected, "oracle")
    assert len(rows) == len(expected)


# --------------------------------------------------------------------------------------------
# One minimal reproducer per disagreement class found by the property test against main at
# 45bf08e. Each: events, kind, ranks, step regex, hand-derived expectations, and the defect.

G = "sgemm"
NC = "ncclKernel_AllReduce_RING_LL_Sum_float"

REPRO: dict[
    str, tuple[list[Ev], str, int, str | None, dict[tuple[Any, ...], dict[str, Any]], str]
] = {
    # Rank 0 has an extra ProfilerStep#1 that launches nothing; both ranks' ProfilerStep#2 launch
    # one kernel. rank 0 step 2: window [110,150): step 40, compute 40, idle 0; rank 1 step 2:
    # [120,180): step 60, compute 60. No step 1 anywhere (a marker without GPU work is no step).
    "empty-marker-multi-rank": (
        _gpu(0, [("ProfilerStep#1", 0, 100), ("ProfilerStep#2", 100, 200)], [(G, 7, 110, 150, 105)])
        + _gpu(1, [("ProfilerStep#2", 100, 200)], [(G, 7, 120, 180, 101)]),
        "gpu",
        2,
        None,
        {
            (0, 2): dict(step_ns=40, compute_ns=40, idle_ns=0, start_ns=110, end_ns=150),
            (1, 2): dict(step_ns=60, compute_ns=60, idle_ns=0, start_ns=120, end_ns=180),
        },
        "issue 11: multi-rank step collision when a rank other than the last has an empty marker",
    ),
    # ProfilerStep#1 [0,1000) contains ProfilerStep#2 [100,200); a kernel launched at 500 is in #1
    # only (the innermost marker containing 500) -> step 1 = its window [600,700): compute 100
    "nested-marker-ends-before-launch": (
        _gpu(
            0,
            [("ProfilerStep#1", 0, 1000), ("ProfilerStep#2", 100, 200)],
            [(G, 7, 600, 700, 500), (G, 7, 150, 160, 120)],
        ),
        "gpu",
        1,
        None,
        {
            (0, 1): dict(step_ns=100, compute_ns=100, start_ns=600, end_ns=700),
            (0, 2): dict(step_ns=10, compute_ns=10, start_ns=150, end_ns=160),
        },
        "issue 11: a launch in marker A is lost when marker B starts after A and ends before it",
    ),
    # a zero-length ProfilerStep#2 at ProfilerStep#1's start, written after it, contains nothing:
    # the kernel launched at 10 is in step 1: window [20,70), compute 50; no step 2
    "zero-length-marker-same-start": (
        _gpu(0, [("ProfilerStep#1", 0, 1000), ("ProfilerStep#2", 0, 0)], [(G, 7, 20, 70, 10)]),
        "gpu",
        1,
        None,
        {(0, 1): dict(step_ns=50, compute_ns=50, start_ns=20, end_ns=70)},
        "issue 11: a zero-length marker written after A with A's start swallows A's launches",
    ),
    # kernel A (corr 2**32 + 5) launched at 10 inside ProfilerStep#1 [0,100) runs [20,60); kernel
    # B (corr 5) has no launch record: it is in no step. Step 1 = [20,60): step 40, compute 40
    "correlation-id-64-bit": (
        _gpu(
            0,
            [("ProfilerStep#1", 0, 100)],
            [(G, 7, 20, 60, 10), (G, 7, 200, 300, None)],
            corr=[2**32 + 5, 5],
        ),
        "gpu",
        1,
        None,
        {(0, 1): dict(step_ns=40, compute_ns=40, idle_ns=0, start_ns=20, end_ns=60)},
        "issue 11: correlation ids truncated to 32 bits in the launch join",
    ),
    # issue 35: a memcpy (corr 1) launched before the capture has no launch record; its GPU
    # start 30 lies in ProfilerStep#1's host range [0,100) but it is an earlier step's work (the
    # device runs behind the host): in no step. Step 1 launched sgemm at 10 (runs [50,90)) and
    # step 2 launched sgemm at 120 (runs [130,170)). Step 1 = [50,90): 40, not [30,90); step 2
    # = [130,170): 40. A dma_request kernel (corr 4, no launch) is work the device queues itself:
    # placed by its start 180 in step 2 [100,200): step 2 = [130,190): 60, memory_only 10
    "copy-launched-before-capture": (
        _gpu(
            0,
            [("ProfilerStep#1", 0, 100), ("ProfilerStep#2", 100, 200)],
            [
                ("Memcpy HtoD", 7, 30, 45, None),
                (G, 7, 50, 90, 10),
                (G, 7, 130, 170, 120),
                ("dma_request", 9, 180, 190, None),
            ],
        ),
        "gpu",
        1,
        None,
        {
            (0, 1): dict(step_ns=40, start_ns=50, end_ns=90, memory_ns=0, idle_ns=0),
            (0, 2): dict(step_ns=60, start_ns=130, end_ns=190, memory_only_ns=10, idle_ns=10),
        },
        "issue 35: a copy with no launch record was placed in the step around its GPU start",
    ),
    # two ProfilerStep#5 on one CPU rank: labels 5 and "5#2" (docs/oracle.md); compute [0,150):
    # step 5 = [0,100): compute 100; step "5#2" = [100,200): compute 50, idle 50
    "duplicate-step-number": (
        _cpu(0, [("ProfilerStep#5", 0, 100), ("ProfilerStep#5", 100, 200)], compute=[(0, 150)]),
        "cpu",
        1,
        None,
        {
            (0, 5): dict(step_ns=100, compute_ns=100, idle_ns=0),
            (0, "5#2"): dict(step_ns=100, compute_ns=50, idle_ns=50),
        },
        "issue 11: a duplicated ProfilerStep number renumbers the steps 0, 1 (no 'N#2', no note)",
    ),
    # one process driving GPUs 0 and 1: two units (docs/oracle.md "Units"); the step's marker belongs
    # to both. device 0: kernel [10,50) -> step 40, compute 40; device 1: [20,100) -> step 80
    "two-devices-one-process": (
        _gpu(
            0, [("ProfilerStep#1", 0, 200)], [(G, 7, 10, 50, 1), (G, 7, 20, 100, 2)], device=[0, 1]
        ),
        "gpu",
        1,
        None,
        {
            (0, 0, 1): dict(step_ns=40, compute_ns=40, idle_ns=0),
            (0, 1, 1): dict(step_ns=80, compute_ns=80, idle_ns=0),
        },
        "docs/oracle.md Units: one row per (process, device), with a device column (not there yet)",
    ),
    # CPU ranks; all-reduce (pg 0, seq 0): rank 0 [150,200) lies after its only step [0,100),
    # rank 1 [100,200) inside its step [0,300). Matching is by (process group, seq), whatever the
    # steps: transfer = min(50, 100) = 50, rank 1 waits [100,150). Rank 1's step: comm 100, all
    # exposed (no compute) -> exposed_wait 50, exposed_transfer 50
    "instance-outside-steps-still-matched": (
        _cpu(0, [("ProfilerStep#1", 0, 100)], compute=[(0, 100)], gloo=[(150, 200, "0", 0)])
        + _cpu(1, [("ProfilerStep#1", 0, 300)], gloo=[(100, 200, "0", 0)]),
        "cpu",
        2,
        None,
        {
            (0, 1): dict(step_ns=100, compute_ns=100, comm_ns=0, exposed_wait_ns=0),
            (1, 1): dict(
                comm_ns=100, exposed_comm_ns=100, exposed_wait_ns=50, exposed_transfer_ns=50
            ),
        },
        "docs/oracle.md Matching: an instance outside every step on one rank is not matched by the tool",
    ),
    # GPU ranks, ProfilerStep#1 [0,100) and #2 [100,200) each. Instance seq 0 is launched in step
    # 1, seq 1 in step 2. rank 0 (late): seq 0 [380,400), seq 1 [480,500). rank 1: seq 0 [300,400)
    # (wait 80: [300,380)), seq 1 [250,500) on another stream (wait 230: [250,480)).
    # rank 1 step 1 = [300,400): comm 100, exposed 100. An exposed ns is waiting when it lies in
    # the wait part of ITS collective (the step's own instance, docs/diagnosis.md §3): seq 0's
    # wait part [300,380) -> exposed_wait 80, transfer 20 (seq 1's wait part [250,480) also
    # covers [300,400), but seq 1 belongs to step 2: counting it would give 100 / 0)
    "wait-part-of-another-steps-instance": (
        _gpu(
            0,
            [("ProfilerStep#1", 0, 100), ("ProfilerStep#2", 100, 200)],
            [(NC, 13, 380, 400, 10), (NC, 13, 480, 500, 110)],
            comm={0: ("0", 0), 1: ("0", 1)},
        )
        + _gpu(
            1,
            [("ProfilerStep#1", 0, 100), ("ProfilerStep#2", 100, 200)],
            [(NC, 13, 300, 400, 10), (NC, 14, 250, 500, 110)],
            comm={0: ("0", 0), 1: ("0", 1)},
        ),
        "gpu",
        2,
        None,
        {
            (0, 1): dict(step_ns=20, exposed_comm_ns=20, exposed_wait_ns=0, exposed_transfer_ns=20),
            (0, 2): dict(step_ns=20, exposed_comm_ns=20, exposed_wait_ns=0, exposed_transfer_ns=20),
            (1, 1): dict(
                step_ns=100, exposed_comm_ns=100, exposed_wait_ns=80, exposed_transfer_ns=20
            ),
            (1, 2): dict(
                step_ns=250, exposed_comm_ns=250, exposed_wait_ns=230, exposed_transfer_ns=20
            ),
        },
        "causes: only the wait parts of the step's own collectives count",
    ),
}


def _shift(events: list[Ev], off: int) -> list[Ev]:
    return [Ev(**{**e.__dict__, "start": e.start + off, "end": e.end + off}) for e in events]


_ISSUE_10 = "issue 10: diagnosis columns (parts, causes) and the §2 verdict classes not there yet"

REPRO.update(
    {
        # GPU, ProfilerStep#1 [0,1000): compute K1 [0,100) (launched at 0), K2 [200,300) (launched
        # at 150); comm C1 [100,200), C2 [300,350). Window [0,350): compute 200, comm 150, all
        # exposed. t in [100,200): K2 starts next; its launch started at 150 < t for t >= 151 ->
        # dependency [151,200) = 49, host [100,151) = 51. t in [300,350): no compute starts after
        # -> tail 50. lost = 350 - 200 = 150 >= 35; largest part exposed transfer 150, |M| 150 <=
        # |C| 200 -> exposed-communication
        "causes-gpu": (
            _gpu(
                0,
                [("ProfilerStep#1", 0, 1000)],
                [
                    (G, 7, 0, 100, 0),
                    (NC, 13, 100, 200, 50),
                    (G, 7, 200, 300, 150),
                    (NC, 13, 300, 350, 60),
                ],
            ),
            "gpu",
            1,
            None,
            {
                (0, 1): dict(
                    step_ns=350,
                    compute_only_ns=200,
                    overlap_ns=0,
                    exposed_wait_ns=0,
                    exposed_transfer_ns=150,
                    memory_only_ns=0,
                    idle_ns=0,
                    exposed_tail_ns=50,
                    exposed_dependency_ns=49,
                    exposed_host_ns=51,
                    bottleneck="exposed-communication",
                )
            },
            _ISSUE_10,
        ),
        # CPU, ProfilerStep#1 [0,400): aten::mm [0,100), [300,350); gloo [100,250), [360,390);
        # a "wait" range [150,200) on the python thread. Blocked waits (§8: the python thread's
        # next boundary after a comm's end, after an event's end, within 1 % of the comm, or
        # within 1 ms when that end is a communication call's return, the wait then starting
        # there): gloo 1 ends at 250, last boundary 200 (the "wait" range's end: a call), next
        # 300 -> wait [200,300); gloo 2 ends at 390, last boundary 350 (mm's end, no call), next
        # 400: 10 > 1 % of 30 -> no wait. The wait's [250,300) no gloo covers is comm (§11).
        # M = [100,300) + [360,390) = 230, all exposed; compute 150; idle [350,360) +
        # [390,400) = 20. [360,390) after the last compute start 300 -> tail 30; [100,300): in
        # the wait range, the blocked wait, or gloo 1 (the next host event, mm at 300, within
        # 1 ms of its end) -> dependency 200, host 0. lost 250 >= 40; largest part transfer
        # 230; |M| 230 > |C| 150 -> communication-bound
        "causes-cpu": (
            _cpu(
                0,
                [("ProfilerStep#1", 0, 400)],
                compute=[(0, 100), (300, 350)],
                gloo=[(100, 250, "", -1), (360, 390, "", -1)],
                calls=[("annotation", "wait", 150, 200)],
            ),
            "cpu",
            1,
            None,
            {
                (0, 1): dict(
                    step_ns=400,
                    compute_ns=150,
                    comm_ns=230,
                    exposed_comm_ns=230,
                    idle_ns=20,
                    compute_only_ns=150,
                    exposed_transfer_ns=230,
                    exposed_tail_ns=30,
                    exposed_dependency_ns=200,
                    exposed_host_ns=0,
                    bottleneck="communication-bound",
                )
            },
            _ISSUE_10,
        ),
        # two GPU ranks (rank 1's clock 1000 ns ahead), all-reduce (pg 0, seq 0) ending together.
        # rank 0: compute [0,100), all-reduce [100,400) (300); rank 1: compute [0,350), all-reduce
        # [350,400) (50). transfer 50; rank 0 waits [100,350). rank 0: exposed 300 = wait 250 +
        # tail 50; lost 300 >= 40, largest part exposed_wait -> peer-wait-bound. rank 1: exposed
        # 50 (tail), lost 50 >= 40, transfer 50, |M| <= |C| -> exposed-communication
        "peer-wait-bound": (
            _gpu(
                0,
                [("ProfilerStep#1", 0, 1000)],
                [(G, 7, 0, 100, 0), (NC, 13, 100, 400, 10)],
                comm={1: ("0", 0)},
            )
            + _shift(
                _gpu(
                    1,
                    [("ProfilerStep#1", 0, 1000)],
                    [(G, 7, 0, 350, 0), (NC, 13, 350, 400, 10)],
                    comm={1: ("0", 0)},
                ),
                1000,
            ),
            "gpu",
            2,
            None,
            {
                (0, 1): dict(
                    exposed_comm_ns=300,
                    exposed_wait_ns=250,
                    exposed_transfer_ns=50,
                    exposed_tail_ns=50,
                    bottleneck="peer-wait-bound",
                ),
                (1, 1): dict(
                    exposed_comm_ns=50,
                    exposed_wait_ns=0,
                    exposed_transfer_ns=50,
                    exposed_tail_ns=50,
                    bottleneck="exposed-communication",
                ),
            },
            _ISSUE_10,
        ),
        # memcpy [0,900) then compute [900,1000): memory_only 900 of a 1000 ns step -> memory-bound
        "memory-bound": (
            _gpu(
                0,
                [("ProfilerStep#1", 0, 2000)],
                [("Memcpy HtoD", 7, 0, 900, 0), (G, 7, 900, 1000, 1)],
            ),
            "gpu",
            1,
            None,
            {
                (0, 1): dict(
                    step_ns=1000, memory_only_ns=900, compute_only_ns=100, bottleneck="memory-bound"
                )
            },
            _ISSUE_10,
        ),
        # compute [0,10) + [990,1000), comm [10,40): |M| 30 > |C| 20 but idle is 950 of 1000 ns:
        # the largest lost part is idle -> idle-bound (not "first rule wins" communication-bound).
        # The exposed [10,40): the next compute (990) was launched at 1 -> dependency 30
        "idle-bound-beats-comm-bound": (
            _gpu(
                0,
                [("ProfilerStep#1", 0, 2000)],
                [(G, 7, 0, 10, 0), (NC, 13, 10, 40, 0), (G, 7, 990, 1000, 1)],
            ),
            "gpu",
            1,
            None,
            {
                (0, 1): dict(
                    step_ns=1000, idle_ns=950, exposed_dependency_ns=30, bottleneck="idle-bound"
                )
            },
            _ISSUE_10,
        ),
    }
)


#: Reproducers whose fix has landed (they then must pass, and their KNOWN_GAPS line goes).
FIXED: set[str] = {
    "empty-marker-multi-rank",
    "nested-marker-ends-before-launch",
    "zero-length-marker-same-start",
    "correlation-id-64-bit",
    "copy-launched-before-capture",
    "duplicate-step-number",
    "two-devices-one-process",
    "instance-outside-steps-still-matched",
    "wait-part-of-another-steps-instance",
    "causes-gpu",
    "causes-cpu",
    "peer-wait-bound",
    "memory-bound",
    "idle-bound-beats-comm-bound",
}


@pytest.mark.parametrize("name", list(REPRO))
def test_oracle_on_reproducers(name: str) -> None:
    """The hand derivations of the reproducers, checked on the oracle (must pass)."""
    events, _kind, _n, regex, expected, _why = REPRO[name]
    rows = oracle_steps(events, regex)
    check_oracle_invariants(rows)
    assert not _compare_hand(rows, expected, "oracle")
    assert len(rows) == len(expected)


def _tool_rows(
    events: list[Ev], kind: str, n_ranks: int, regex: str | None
) -> list[dict[str, Any]]:
    try:
        a = analyze(to_timeline(events, kind, n_ranks), AnalyzeOptions(step_regex=regex))
    except TraceoverlapError as exc:
        raise AssertionError(f"the tool refused the input: {exc}") from None
    check_invariants(a.steps)
    return a.steps.to_dict("records")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            n,
            marks=()
            if n in FIXED
            else pytest.mark.xfail(strict=True, raises=AssertionError, reason=r[5]),
        )
        for n, r in REPRO.items()
    ],
)
def test_tool_on_reproducers(name: str) -> None:
    events, kind, n, regex, expected, _why = REPRO[name]
    rows = _tool_rows(events, kind, n, regex)
    diff = _compare_hand(rows, expected, "tool")
    assert not diff, "\n".join(diff)
    assert not disagreements(events, kind, n, regex)


@pytest.mark.parametrize("name", list(HAND))
def test_tool_on_hand_derivations(name: str) -> None:
    """The worked exercises on the tool: every column it has today (the rest when they land)."""
    events, kind, n, expected = HAND[name]
    rows = _tool_rows(events, kind, n, None)
    cols = set(_columns(pd.DataFrame(rows), n))
    narrowed = {k: {c: v for c, v in e.items() if c in cols} for k, e in expected.items()}
    assert not _compare_hand(rows, narrowed, "tool")
    assert not disagreements(events, kind, n)
