"""Hypothesis strategies for random traceoverlap Timelines, with the same events in the oracle's
plain form (tests/oracle.py), so a property test can compare ``analyze`` with the oracle.

A :class:`Scenario` holds the plain events (trace order = the Timeline's row order) and what each
rank's trace says about itself; :meth:`Scenario.timeline` builds the Timeline with
``traceoverlap.core.model.make_events``. Times are small (within ~0..2500 ns of each rank's clock
offset) so the oracle's per-nanosecond masks stay cheap.

What the strategies cover is switched by feature names (:data:`FEATURES`), so a test can leave out
what the tool is known not to handle yet and switch it back on with a one-line change.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st
from oracle import Ev, marker_report, oracle_steps

from traceoverlap.core.model import Timeline, TraceInfo, make_events

#: Everything the generator can produce; a scenario strategy takes a subset.
FEATURES = frozenset(
    {
        "gpu",  # GPU ranks: kernels on several streams, memcpy/memset, launches by correlation id
        "cpu",  # CPU (gloo) ranks: cpu_op compute, gloo:* work on pt_gloo_runloop, c10d/wait calls
        "multi_rank",  # 2-3 ranks, collectives matched by (process group, seq)
        "clock_offsets",  # each rank's clock shifted (small, or unix-epoch sized)
        "nested_markers",  # overlapping / nested / zero-length / same-start markers (CPU runs)
        "nested_markers_gpu",  # ... also on GPU runs
        "empty_markers",  # GPU step markers that launch nothing (single-rank runs)
        "empty_markers_multi_rank",  # ... also on runs of several ranks
        "dup_steps",  # a ProfilerStep number used twice on one rank
        "corr64",  # correlation ids >= 2**32 (some equal to a small id modulo 2**32)
        "custom_regex",  # --step-regex train_step(\d*): numbered or ordinal labels
        "no_launch",  # GPU activities whose launch record is missing
        "zero_length_acts",  # GPU activities of duration 0
        "multi_device",  # one process driving two GPUs (two units, same rank)
        "shared_pid",  # every rank's process has the same pid (processes on different hosts)
        # CPU: the thread blocked in a c10d call before the gloo work starts, a next host event
        # of any kind (op, call, range) after the wake-up, gloo records on the calling thread
        # (diagnosis.md §11)
        "blocked_calls",
        # scenarios where a reading the contract does not take would give other numbers
        # (oracle_steps' switches); without the feature, such scenarios are filtered out
        "unstepped_comm",  # a collective instance lies in no step on some unit (several units)
        "cross_step_wait",  # a step's exposed comm meets the wait part of another step's instance
        "unmatched_comm",  # an instance missing on some units: unmatched where it ran (§12)
    }
)

T = 2000  # the true-time range of a rank's events, ns
UNIX_BASE = 1_700_000_000_000_000_000

# compute, including names that only look like communication (rccl/hccl count only at the start)
COMPUTE_KERNELS = (
    "volta_sgemm_128x64_nn",
    "vectorized_elementwise_kernel",
    "reduce_kernel",
    "fused_rccl_lookalike",
    "dma_request",  # MTIA DMA: a kernel record that is memory (placed by time with no launch)
    "my_hccl_prep",
)
COMM_KERNELS = (
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
    "ncclDevKernel_AllGather_RING_LL",
    "ncclDevKernel_SendRecv",
    "rcclReduceScatter",
    "HCCL_AllReduce",
    "void at::NCCLKERNEL_Wrapper",
)
GLOO_ITEMS = ("gloo:all_reduce", "gloo:broadcast", "gloo:all_gather")
# compute ops (aten::wait_tensor is compute though it "waits"; the exclusion list is anchored)
CPU_COMPUTE_OPS = (
    "aten::mm",
    "aten::add_",
    "aten::linear",
    "aten::wait_tensor",
    "record_param_comms_v2",
)
CPU_COMM_CALLS = (
    ("cpu_op", "c10d::allreduce_"),
    ("cpu_op", "record_param_comms"),
    ("cpu_op", "nccl:all_reduce"),
    ("annotation", "wait"),
    ("annotation", "c10d::wait"),
)
CUSTOM_REGEX = r"^train_step(\d*)$"

MAIN_TID, GLOO_TID, OTHER_TID = 11, 12, 13


@dataclass
class Scenario:
    """Plain events (in trace order) plus per-rank trace facts; builds the matching Timeline."""

    events: list[Ev]
    kind: str  # "gpu" | "cpu"
    n_ranks: int
    step_regex: str | None = None
    offsets: dict[int, int] = field(default_factory=dict)

    def timeline(self) -> Timeline:
        return to_timeline(self.events, self.kind, self.n_ranks)


def _lane(e: Ev) -> str:
    if e.device >= 0:
        return f"stream {e.stream}"
    return f"thread {e.tid} ({e.thread})" if e.thread else f"thread {e.tid}"


def to_timeline(events: list[Ev], kind: str, n_ranks: int) -> Timeline:
    """The Timeline of these plain events: one row per event, in list order."""
    cols: dict[str, Any] = {
        "rank": [e.rank for e in events],
        "pid": [e.pid for e in events],
        "device": [e.device for e in events],
        "stream": [e.stream for e in events],
        "tid": [e.tid for e in events],
        "lane": [_lane(e) for e in events],
        "thread_name": [e.thread for e in events],
        "category": [e.cat for e in events],
        "name": [e.name for e in events],
        "start_ns": np.array([e.start for e in events], dtype=np.int64),
        "end_ns": np.array([e.end for e in events], dtype=np.int64),
        "correlation": np.array([e.corr for e in events], dtype=np.int64),
        "process_group": [e.pg for e in events],
        "seq": [e.seq for e in events],
        "coll_name": [_coll_name(e) for e in events],
    }
    ev = make_events(len(events), cols)
    pids = {e.rank: e.pid for e in events}
    infos = tuple(
        TraceInfo(
            path=f"rank{r}.json",
            format="kineto",
            rank=r,
            world_size=n_ranks,
            backend="nccl" if kind == "gpu" else "gloo",
            rank_source="distributedInfo",
            device_kind=kind,
            clock="unix",
            pid=pids.get(r),
        )
        for r in range(n_ranks)
    )
    return Timeline(ev, infos)


def _coll_name(e: Ev) -> str:
    if e.seq < 0:
        return ""
    n = e.name.lower()
    for k in ("allreduce", "all_reduce", "allgather", "all_gather", "sendrecv", "broadcast"):
        if k in n:
            return k.replace("_", "")
    return "reducescatter" if "reducescatter" in n else "allreduce"


@dataclass
class _Inst:
    """A collective instance shared by all units: its true end and per-unit durations."""

    pg: str
    seq: int
    name_index: int
    end: int
    durs: list[int]
    skip: frozenset[int] = frozenset()  # unit indices (rank * devices + device) without it


def _markers(
    draw: Any, feats: frozenset[str], custom: bool, zero_ok: bool
) -> list[tuple[str, int, int]]:
    """(name, start, end) of one rank's step markers, true time."""
    n = draw(st.integers(0, 4))
    spans: list[tuple[int, int]] = []
    if "nested_markers" in feats:
        for _ in range(n):
            if spans and draw(st.integers(0, 3)) == 0:
                s = draw(st.sampled_from([a for a, _ in spans]))  # same start as another
            else:
                s = draw(st.integers(0, T - 1))
            zero = zero_ok and draw(st.integers(0, 3)) == 0  # zero-length: contains nothing
            length = 0 if zero else draw(st.integers(1, T))
            spans.append((s, min(s + length, T + 500)))
    elif n and draw(st.booleans()):  # back to back, as prof.step() records them
        cuts = sorted(
            draw(st.lists(st.integers(0, T + 400), min_size=n + 1, max_size=n + 1, unique=True))
        )
        spans = [(cuts[i], cuts[i + 1]) for i in range(n)]
    elif n:  # disjoint, with gaps
        cuts = sorted(
            draw(st.lists(st.integers(0, T), min_size=2 * n, max_size=2 * n, unique=True))
        )
        spans = [(cuts[2 * i], cuts[2 * i + 1]) for i in range(n)]
    base = draw(st.integers(0, 20))
    order = sorted(range(n), key=lambda i: spans[i])
    numbers: list[int | None] = [0] * n
    for k, i in enumerate(order):
        numbers[i] = base + k
    if "dup_steps" in feats and n >= 2 and draw(st.booleans()):
        i, j = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
        numbers[j] = numbers[i]
    if custom:
        plain = draw(st.booleans())  # some markers without a number -> ordinals for all
        out = []
        for i in range(n):
            drop = plain and draw(st.booleans())
            out.append((f"train_step{'' if drop else numbers[i]}", *spans[i]))
        return out
    return [(f"ProfilerStep#{numbers[i]}", *spans[i]) for i in range(n)]


@st.composite
def scenarios(draw: Any, features: Iterable[str] = FEATURES) -> Scenario:
    """A random run: 1-3 GPU ranks or 1-3 CPU (gloo) ranks, as plain events and a Timeline."""
    feats = frozenset(features)
    unknown = feats - FEATURES
    if unknown:
        raise ValueError(f"unknown generator features {sorted(unknown)}")
    kinds = [k for k in ("gpu", "cpu") if k in feats]
    kind = draw(st.sampled_from(kinds))
    n_ranks = draw(st.integers(1, 3)) if "multi_rank" in feats else 1
    if n_ranks > 1 and "empty_markers_multi_rank" not in feats:
        feats = feats - {"empty_markers"}
    if kind == "gpu" and "nested_markers_gpu" not in feats:
        feats = feats - {"nested_markers"}
    devices = [0, 1] if kind == "gpu" and "multi_device" in feats and draw(st.booleans()) else [0]
    n_units = n_ranks * len(devices)
    custom = "custom_regex" in feats and draw(st.integers(0, 3)) == 0

    # collective instances, present on every unit; a collective ends at the same true time everywhere
    insts: list[_Inst] = []
    seqs: dict[str, int] = {}
    for _ in range(draw(st.integers(0, 4))):
        pg = draw(st.sampled_from(["0", "1"]))
        seqs[pg] = seqs.get(pg, -1) + 1
        end = draw(st.integers(50, T))
        durs = [draw(st.integers(1, min(400, end))) for _ in range(n_units)]
        skip: frozenset[int] = frozenset()
        if "unmatched_comm" in feats and n_units >= 2 and draw(st.integers(0, 2)) == 0:
            # diagnosis.md §12: the instance runs on some units only (a missing peer)
            skip = frozenset(
                draw(st.sets(st.integers(0, n_units - 1), min_size=1, max_size=n_units - 1))
            )
        insts.append(
            _Inst(pg, seqs[pg], draw(st.integers(0, len(COMM_KERNELS) - 1)), end, durs, skip)
        )

    # clock offsets: a run-wide base (0 or unix-epoch sized) plus a per-rank skew small enough
    # that the ranks' captures still overlap in time (traces that cannot be one run are refused)
    base = draw(st.sampled_from([0, 1234, UNIX_BASE])) if "clock_offsets" in feats else 0
    offsets: dict[int, int] = {}
    events: list[Ev] = []
    for r in range(n_ranks):
        skew = draw(st.integers(0, T * 3 // 4)) if "clock_offsets" in feats else 0
        off = base + skew
        offsets[r] = off
        pid = 4242 if "shared_pid" in feats and draw(st.booleans()) else 1000 + 17 * r
        markers = _markers(draw, feats, custom, kind == "cpu" or "empty_markers" in feats)
        if kind == "gpu":
            rank_events = _gpu_rank(draw, feats, r, pid, devices, markers, insts)
        else:
            rank_events = _cpu_rank(draw, feats, r, pid, markers, insts)
        rng = draw(st.randoms(use_true_random=False))
        rng.shuffle(rank_events)  # trace order is arbitrary; the contract's ties use it
        events.extend(_shift(e, off) for e in rank_events)

    regex = CUSTOM_REGEX if custom else None
    report = marker_report(events, regex)
    if kind == "gpu" and "empty_markers" not in feats:
        assume(report["empty_gpu_markers"] == 0)
    if n_units >= 2 and "unstepped_comm" not in feats:
        assume(report["unstepped_comm"] == 0)
    if n_units >= 2 and "cross_step_wait" not in feats:
        assume(oracle_steps(events, regex, own_waits=True) == oracle_steps(events, regex))
    return Scenario(events, kind, n_ranks, regex, offsets)


def _shift(e: Ev, off: int) -> Ev:
    if off == 0:
        return e
    return Ev(**{**e.__dict__, "start": e.start + off, "end": e.end + off})


def _gpu_rank(
    draw: Any,
    feats: frozenset[str],
    rank: int,
    pid: int,
    devices: list[int],
    markers: list[tuple[str, int, int]],
    insts: list[_Inst],
) -> list[Ev]:
    out: list[Ev] = [
        Ev("annotation", name, s, e, rank, pid, tid=MAIN_TID, thread="python")
        for name, s, e in markers
    ]
    # noise: a non-step range, host ops, and the profiler's GPU copies of the step ranges
    out.append(Ev("annotation", "forward", 0, T // 2, rank, pid, tid=MAIN_TID, thread="python"))
    out.append(Ev("cpu_op", "aten::mm", 5, 40, rank, pid, tid=MAIN_TID, thread="python"))
    # a runtime call without correlation id: must not join activities that have none either
    out.append(Ev("runtime", "cudaGetDevice", 12, 14, rank, pid, tid=MAIN_TID, thread="python"))
    for name, s, e in markers[:2]:
        out.append(Ev("gpu_annotation", name, s, e + 3, rank, pid, device=devices[0], stream=7))

    # (unit device, kind category, name, stream, start, end, launch-or-None, pg, seq)
    acts: list[tuple[int, str, str, int, int, int, int | None, str, int]] = []

    def launch_time() -> int:
        inside = [(s, e) for _, s, e in markers if e > s]
        if inside and draw(st.integers(0, 2)) > 0:
            s, e = draw(st.sampled_from(inside))
            return draw(st.integers(s, e - 1))
        return draw(st.integers(0, T))

    def one_activity(dev: int, t: int | None) -> None:
        cat = draw(st.sampled_from(["kernel", "kernel", "kernel", "memcpy", "memset"]))
        name = {"memcpy": "Memcpy HtoD (Pageable -> Device)", "memset": "Memset (Device)"}.get(
            cat
        ) or draw(st.sampled_from(COMPUTE_KERNELS))
        stream = draw(st.sampled_from([7, 7, 13, 20]))
        launch = t if t is not None else launch_time()
        if draw(st.integers(0, 5)) == 0:
            start = draw(st.integers(0, T))  # GPU clock ran ahead of the launch (any order)
        else:
            start = launch + draw(st.integers(0, 300))
        lo = 0 if "zero_length_acts" in feats and draw(st.integers(0, 5)) == 0 else 1
        dur = draw(st.integers(lo, 400)) if lo else 0
        has_launch = not ("no_launch" in feats and draw(st.integers(0, 6)) == 0)
        acts.append(
            (dev, cat, name, stream, start, start + dur, launch if has_launch else None, "", -1)
        )

    for dev in devices:
        if "empty_markers" not in feats:
            for _, s, e in markers:  # one launch inside every marker (not enough when nested)
                if e > s:
                    one_activity(dev, draw(st.integers(s, e - 1)))
        for _ in range(draw(st.integers(0, 6))):
            one_activity(dev, None)
    for dev in devices:
        for inst in insts:
            if rank * len(devices) + dev in inst.skip:
                continue
            dur = inst.durs[rank * len(devices) + dev]
            start = inst.end - dur
            launch = max(0, start - draw(st.integers(0, 300)))
            inside = [(s, e) for _, s, e in markers if e > s]
            if "unstepped_comm" not in feats and inside:
                s, e = draw(st.sampled_from(inside))  # keep every instance in a step
                launch = draw(st.integers(s, e - 1))
            elif draw(st.booleans()):
                launch = min(launch_time(), start)
            acts.append(
                (
                    dev,
                    "kernel",
                    COMM_KERNELS[inst.name_index],
                    draw(st.sampled_from([21, 22, 7])),  # 7: on the compute stream
                    start,
                    inst.end,
                    launch,
                    inst.pg,
                    inst.seq,
                )
            )

    # correlation ids, unique in the process; with corr64 some are >= 2**32 and equal mod 2**32
    n = len(acts) + 2
    if "corr64" in feats:
        pool = st.one_of(
            st.integers(1, 40), st.integers(1, 40).map(lambda x: 2**32 + x), st.just(2**40 + 7)
        )
    else:
        pool = st.integers(1, 10**6)
    ids = draw(st.lists(pool, min_size=n, max_size=n, unique=True))
    for k, (dev, cat, name, stream, s, e, launch, pg, seq) in enumerate(acts):
        corr = ids[k]
        if launch is not None:
            api = {"memcpy": "cudaMemcpyAsync", "memset": "cudaMemsetAsync"}.get(cat)
            lcat, lname = (
                ("runtime", api)
                if api
                else draw(
                    st.sampled_from([("runtime", "cudaLaunchKernel"), ("driver", "cuLaunchKernel")])
                )
            )
            tid, thread = draw(st.sampled_from([(MAIN_TID, "python"), (OTHER_TID, "")]))
            out.append(
                Ev(
                    lcat,
                    lname,
                    launch,
                    launch + draw(st.integers(1, 8)),
                    rank,
                    pid,
                    tid=tid,
                    thread=thread,
                    corr=corr,
                )
            )
        elif draw(st.booleans()):
            corr = -1  # no correlation at all; else an id that no launch carries
        out.append(
            Ev(cat, name, s, e, rank, pid, device=dev, stream=stream, corr=corr, pg=pg, seq=seq)
        )
    # a host sync call with its GPU sync record (not activity), correlation ids of their own
    t = draw(st.integers(0, T))
    out.append(
        Ev(
            "runtime",
            "cudaStreamSynchronize",
            t,
            t + 30,
            rank,
            pid,
            tid=MAIN_TID,
            thread="python",
            corr=ids[-1],
        )
    )
    out.append(
        Ev(
            "sync",
            "Stream Sync",
            t + 5,
            t + 30,
            rank,
            pid,
            device=devices[0],
            stream=7,
            corr=ids[-1],
        )
    )
    return out


def _cpu_rank(
    draw: Any,
    feats: frozenset[str],
    rank: int,
    pid: int,
    markers: list[tuple[str, int, int]],
    insts: list[_Inst],
) -> list[Ev]:
    def ev(cat: str, name: str, s: int, e: int, tid: int, thread: str, **kw: Any) -> Ev:
        return Ev(cat, name, s, e, rank, pid, tid=tid, thread=thread, **kw)

    out = [ev("annotation", name, s, e, MAIN_TID, "python") for name, s, e in markers]
    span = st.tuples(st.integers(0, T), st.integers(1, 400))
    for _ in range(draw(st.integers(0, 6))):
        s, d = draw(span)
        tid, thread = draw(st.sampled_from([(MAIN_TID, "python")] * 3 + [(OTHER_TID, "")]))
        out.append(ev("cpu_op", draw(st.sampled_from(CPU_COMPUTE_OPS)), s, s + d, tid, thread))
    for _ in range(draw(st.integers(0, 3))):
        s, d = draw(span)
        cat, name = draw(st.sampled_from(CPU_COMM_CALLS))
        tid, thread = draw(
            st.sampled_from([(MAIN_TID, "python")] * 3 + [(GLOO_TID, "pt_gloo_runloop")])
        )
        out.append(ev(cat, name, s, s + d, tid, thread))
    # ops on the gloo thread never compute
    s, d = draw(span)
    out.append(ev("cpu_op", "aten::copy_", s, s + d, GLOO_TID, "pt_gloo_runloop"))
    for inst in insts:
        if rank in inst.skip:
            continue
        dur = inst.durs[rank]
        on_main = "blocked_calls" in feats and draw(st.integers(0, 3)) == 0
        if "blocked_calls" in feats and draw(st.integers(0, 2)) == 0:
            # a blocking call: `c10d::allreduce_` from before the gloo work starts to just
            # before, at or after its start (blocked in the call), then a wake-up gap and the
            # thread's next host event, of any kind
            ws = inst.end - dur
            lead = draw(st.integers(1, 60))
            over = draw(st.integers(-8, 8))
            out.append(ev("cpu_op", "c10d::allreduce_", ws - lead, ws + over, MAIN_TID, "python"))
            gap = draw(st.integers(0, 40))
            cat, name = draw(
                st.sampled_from(
                    [
                        ("cpu_op", "aten::add_"),
                        ("cpu_op", "c10d::allreduce_"),
                        ("annotation", "optimizer"),
                        ("annotation", "c10d::wait"),
                    ]
                )
            )
            d = draw(st.integers(1, 20))
            out.append(ev(cat, name, inst.end + gap, inst.end + gap + d, MAIN_TID, "python"))
        elif draw(st.booleans()):
            # the call made inside an enclosing op (a custom autograd Function: `_AllToAll`):
            # launch op before the gloo work starts, then a gap (the wait), then a resuming op
            # `gap` ns after the work ends, inside the enclosing op or after it
            ws = inst.end - dur
            launch = draw(st.integers(0, 40))
            gap = draw(st.integers(0, 30))
            outer = ws - launch - draw(st.integers(0, 20))
            out.append(
                ev("cpu_op", "c10d::alltoall_base_", ws - launch, ws + 5, MAIN_TID, "python")
            )
            out.append(
                ev("cpu_op", "aten::cat", inst.end + gap, inst.end + gap + 7, MAIN_TID, "python")
            )
            tail = draw(st.integers(-gap - 10, 20))
            out.append(
                ev("cpu_op", "_AllToAll", outer, inst.end + gap + 7 + tail, MAIN_TID, "python")
            )
        tid, thread = (MAIN_TID, "python") if on_main else (GLOO_TID, "pt_gloo_runloop")
        out.append(
            ev(
                "annotation",
                GLOO_ITEMS[inst.name_index % len(GLOO_ITEMS)],
                inst.end - dur,
                inst.end,
                tid,
                thread,
                pg=inst.pg,
                seq=inst.seq,
            )
        )
    return out
