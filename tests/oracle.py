"""A brute-force, per-nanosecond oracle of the metrics / diagnosis contract.

Written from the team docs (metrics.md, diagnosis.md) and the rules they leave open
(docs/oracle.md), NOT from traceoverlap's code: it imports nothing from traceoverlap, takes a
plain list of events (:class:`Ev`) and decides every nanosecond of every step window literally, on
boolean numpy masks. It is meant to be obviously right, not fast: keep inputs small (times within a
few thousand ns of each other per process; a clock offset shifts a whole rank and costs nothing).

Rules implemented (each is cited where it is used):

- Units: one per (rank, pid, device) for a process with device activity (kernel/memcpy/memset),
  one CPU unit (device -1) for a process with none. A process's host events (launches, markers,
  ranges) belong to each of its device units.
- Kinds. GPU unit: kernels whose name contains ``nccl`` or starts with ``rccl``/``hccl`` (any
  case) are comm; memcpy/memset are memory; other kernels compute; nothing else is activity.
  CPU unit: host events named ``gloo:*`` are comm; ``cpu_op`` events on a thread that is not a
  communication thread (``pt_gloo_runloop``) are compute unless named ``c10d::*``,
  ``record_param_comms``, ``nccl:*`` or ``gloo:*``; each compute op minus its thread's
  communication calls (``_lane_parts``: the excluded host events and the blocked waits). The
  calls' time that no ``gloo:*`` activity covers is comm too (diagnosis.md §11), each piece part
  of the instance of the activity it waited for, runs into or follows (``_call_comm``).
- Markers: host ``annotation`` events matching the step regex; labels = the first group when it is
  all digits (duplicates "N#2", "N#3"... in start order), else ordinals of all the unit's markers by
  start time (stable). GPU: an activity belongs to the innermost marker containing its launch
  call's start (greatest start, then smallest end, then first in the trace; half-open; zero-length
  markers contain nothing); window [min start, max end) of its activities; markers with none give
  no step. CPU: window = marker range, every activity clipped to it. No markers: one ``all`` window
  over the unit's activities.
- Matched collectives: comm activities carrying (process group, seq); an instance is matched when
  every unit that used that process group has exactly one activity with that seq (and there are
  at least two such units; SendRecv only in a group of exactly two: a transfer pairs two ranks).
  transfer = min duration, wait part on u = [s_u, s_u + dur_u - transfer).
- Parts (diagnosis §1), causes (§3 + docs/oracle.md "Causes"), verdict (§2 + docs/oracle.md
  "Parts and verdict"), metrics (metrics.md).
- Unmatched (§12, docs/oracle.md "Parts and verdict"): on two or more units, exposed time in
  neither a wait part nor a matched instance of the step is ``exposed_unmatched_ns``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

DEFAULT_STEP_REGEX = r"^ProfilerStep#(\d+)$"
DEFAULT_LOST_RATIO = 0.10

DEVICE_CATEGORIES = frozenset({"kernel", "memcpy", "memset", "sync", "gpu_annotation"})
GPU_ACTIVITY = frozenset({"kernel", "memcpy", "memset"})
LAUNCH = frozenset({"runtime", "driver"})

GPU_COMM = (re.compile(r"(?i)nccl"), re.compile(r"(?i)^rccl"), re.compile(r"(?i)^hccl"))
CPU_COMM = (re.compile(r"^gloo:"),)
CPU_COMPUTE_EXCLUDE = tuple(
    re.compile(p) for p in (r"^c10d::", r"^record_param_comms$", r"^nccl:", r"^gloo:")
)
CPU_COMM_THREAD = (re.compile(r"pt_gloo_runloop"),)
# docs/oracle.md "Causes" (dependency, CPU): a host event on a compute thread whose name is a communication call
CPU_COMM_CALL = tuple(
    re.compile(p) for p in (r"^c10d::", r"^record_param_comms$", r"^nccl:", r"^gloo:", r"(?i)wait")
)

#: Every per-step field the oracle produces (plus rank, device, step, start_ns, end_ns).
METRICS = (
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


@dataclass(frozen=True)
class Ev:
    """One trace event in plain form. Host events have device -1; GPU events a device >= 0."""

    cat: str  # kernel memcpy memset sync gpu_annotation runtime driver cpu_op annotation other
    name: str
    start: int
    end: int
    rank: int = 0
    pid: int = 0
    device: int = -1
    stream: int = -1
    tid: int = -1
    thread: str = ""
    corr: int = -1
    pg: str = ""
    seq: int = -1


def _any(patterns: Iterable[re.Pattern[str]], s: str) -> bool:
    return any(p.search(s) is not None for p in patterns)


@dataclass
class _Act:
    """An activity of a unit: kind, span, its launch call's start (GPU, or None), trace index.
    ``piece``: a CPU call's time outside every activity (§11), ``inst``: belonging to the
    instance of ``ev`` (False: to none; ``ev`` is then the call's own event)."""

    kind: str
    start: int
    end: int
    launch: int | None
    ev: Ev
    index: int
    piece: bool = False
    inst: bool = True


@dataclass
class _Unit:
    rank: int
    pid: int
    device: int  # -1: CPU unit
    host: list[tuple[int, Ev]] = field(default_factory=list)  # (trace index, event)
    acts: list[_Act] = field(default_factory=list)
    span: tuple[int, int] | None = None  # CPU: [first start, last end) of the ops as recorded
    comp_tids: set[int] = field(default_factory=set)  # CPU: threads with a compute op
    waits: list[tuple[int, int]] = field(default_factory=list)  # CPU: every blocked wait

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.rank, self.pid, self.device)

    @property
    def gpu(self) -> bool:
        return self.device >= 0


def _units(events: Sequence[Ev]) -> list[_Unit]:
    by_proc: dict[tuple[int, int], list[tuple[int, Ev]]] = defaultdict(list)
    for i, e in enumerate(events):
        by_proc[(e.rank, e.pid)].append((i, e))
    units: list[_Unit] = []
    for (rank, pid), evs in sorted(by_proc.items()):
        host = [(i, e) for i, e in evs if e.cat not in DEVICE_CATEGORIES]
        devices = sorted({e.device for _, e in evs if e.cat in GPU_ACTIVITY})
        if not devices:
            u = _Unit(rank, pid, -1, host)
            for i, e in host:
                comm = _any(CPU_COMM, e.name)
                compute = (
                    e.cat == "cpu_op"
                    and not _any(CPU_COMM_THREAD, e.thread)
                    and not _any(CPU_COMPUTE_EXCLUDE, e.name)
                )
                if comm or compute:
                    u.acts.append(_Act("comm" if comm else "compute", e.start, e.end, None, e, i))
            _cut_compute(u)
            units.append(u)
            continue
        # launch calls of this process, by correlation id (64-bit ids compare as Python ints)
        launch: dict[int, int] = {}
        for _, e in host:
            if e.cat in LAUNCH and e.corr != -1 and e.corr not in launch:
                launch[e.corr] = e.start
        for d in devices:
            u = _Unit(rank, pid, d, host)
            for i, e in evs:
                if e.cat not in GPU_ACTIVITY or e.device != d:
                    continue
                # MTIA's DMA requests are kernels that move memory (diagnosis.md §7 notes)
                if e.cat in ("memcpy", "memset") or (e.cat == "kernel" and e.name == "dma_request"):
                    kind = "memory"
                elif _any(GPU_COMM, e.name):
                    kind = "comm"
                else:
                    kind = "compute"
                t = launch.get(e.corr) if e.corr != -1 else None
                u.acts.append(_Act(kind, e.start, e.end, t, e, i))
            units.append(u)
    return units


BLOCKED_FLOOR = 1_000_000  # diagnosis.md §8: or within 1 ms (the OS's wake-up latency)


def _blocked_gap(gap: int, dur: int) -> bool:
    """diagnosis.md §8: a gap within 1 % of the duration or within 1 ms."""
    return gap * 100 <= dur or gap <= BLOCKED_FLOOR


def _lane_parts(
    lane: list[Ev], comms: list[_Act]
) -> tuple[list[tuple[int, int, Ev]], list[tuple[int, int, _Act]]]:
    """metrics.md "Kinds", CPU: a thread's communication calls: the cpu_ops the compute rule
    excludes (span and event), and its blocked waits (the stretch from the last boundary before a
    comm's end, an op's end where nothing starts, to the next boundary at or after the end, when
    that follows within 1 % of the comm's duration, or within 1 ms when the stretch opened at a
    communication call's return (then it starts there, not at the comm's start); with the comm
    waited for)."""
    ops = [
        (e.start, e.end, e) for e in lane if e.cat == "cpu_op" and _any(CPU_COMPUTE_EXCLUDE, e.name)
    ]
    bounds = sorted({b for e in lane for b in (e.start, e.end)})
    waits = []
    for a in comms:
        before = [b for b in bounds if b < a.end]
        after = [b for b in bounds if b >= a.end]
        if not before or not after:
            continue
        prev, nxt = max(before), min(after)
        opened = any(e.end == prev for e in lane) and not any(e.start == prev for e in lane)
        # the gap opened at a communication call's return: blocked on it since (§11), and the
        # 1 ms floor applies (a late wake-up); else from the comm's start, 1 % only
        after_call = any(e.end == prev and _any(CPU_COMM_CALL, e.name) for e in lane)
        gap, dur = nxt - a.end, a.end - a.start
        if opened and (gap * 100 <= dur or (gap <= BLOCKED_FLOOR and after_call)):
            waits.append((prev if after_call else max(prev, a.start), nxt, a))
        elif opened and after_call:
            # §11: opened at a call's return and idle through the comm's end: blocked on it
            # until that end, however late it woke; the late wake-up is the thread's own
            waits.append((prev, a.end, a))
    return ops, waits


def _runs(m: np.ndarray, lo: int) -> list[tuple[int, int]]:
    """The maximal runs of True in a per-ns mask, as [start, end) spans."""
    d = np.diff(np.concatenate(([0], m.astype(np.int8), [0])))
    return [
        (lo + int(s), lo + int(e))
        for s, e in zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1), strict=True)
    ]


def _p2p(e: Ev) -> bool:
    """A send or recv (diagnosis.md §6): ``gloo:send``, ``gloo:recv``, SendRecv."""
    n = e.name.lower().split(":")[-1]
    return n.startswith(("send", "recv", "isend", "irecv")) or "sendrecv" in n


def _call_comm(
    parts: dict[int, tuple[list[tuple[int, int, Ev]], list[tuple[int, int, _Act]]]],
    comms: list[_Act],
    lo: int,
    n: int,
) -> list[_Act]:
    """diagnosis.md §11: the calls' and waits' ns that no comm activity covers, as comm pieces.
    A wait's piece belongs to the comm it waited for (one wait per thread and resumption: for
    the comm that ended last, the first in trace order on a tie); a call's to the comm starting
    where the piece ends, else the one ending where it starts (the first in trace order), else
    to none; and only when that comm is a send or recv (its instance is the call; a
    collective's wait and transfer stay its activity's: docs/diagnosis.md §11)."""
    g = _mask(n, lo, ((a.start, a.end) for a in comms))
    all_waits = _mask(n, lo, ((s, e) for _, w in parts.values() for s, e, _ in w))
    out: list[_Act] = []
    for _tid, (ops, waits) in sorted(parts.items()):
        best: dict[int, tuple[int, int, _Act]] = {}
        for s, e, a in waits:
            b = best.get(e)
            if b is None or (-a.end, a.index) < (-b[2].end, b[2].index):
                best[e] = (s, e, a)
        for s, e, a in best.values():
            for ps, pe in _runs(_mask(n, lo, [(s, e)]) & ~g, lo):
                mine = _p2p(a.ev)
                out.append(_Act("comm", ps, pe, None, a.ev, a.index if mine else -1, True, mine))
        for s, e, op in ops:
            for ps, pe in _runs(_mask(n, lo, [(s, e)]) & ~g & ~all_waits, lo):
                into = [a for a in comms if a.start == pe]
                after = [a for a in comms if a.end == ps]
                tgt = min(into or after, key=lambda a: a.index) if into or after else None
                if tgt is None or not _p2p(tgt.ev):
                    out.append(_Act("comm", ps, pe, None, op, -1, piece=True, inst=False))
                else:
                    out.append(_Act("comm", ps, pe, None, tgt.ev, tgt.index, piece=True))
    return out


def _cut_compute(u: _Unit) -> None:
    """CPU unit: each compute op becomes the pieces of it outside its thread's communication
    calls (the time inside a call is not compute, whatever op encloses it); the calls' time no
    comm activity covers becomes comm (§11)."""
    comp = [a for a in u.acts if a.kind == "compute"]
    if u.acts:  # the `all` window spans the ops as recorded, before the cut
        u.span = (min(a.start for a in u.acts), max(a.end for a in u.acts))
    if not comp:
        return
    host = [e for _, e in u.host if e.cat in ("cpu_op", "annotation")]
    lo = min([e.start for e in host] + [a.start for a in u.acts])
    n = max([e.end for e in host] + [a.end for a in u.acts]) - lo
    comms = [a for a in u.acts if a.kind == "comm"]
    u.comp_tids = {a.ev.tid for a in comp}
    parts = {tid: _lane_parts([e for e in host if e.tid == tid], comms) for tid in u.comp_tids}
    calls = {
        tid: _mask(n, lo, [(s, e) for s, e, _ in ops] + [(s, e) for s, e, _ in waits])
        for tid, (ops, waits) in parts.items()
    }
    u.waits = [(s, e) for _, waits in parts.values() for s, e, _ in waits]
    out = [a for a in u.acts if a.kind != "compute"]
    for a in comp:
        inside = _mask(n, lo, [(a.start, a.end)]) & ~calls[a.ev.tid]
        out += [_Act("compute", s, e, None, a.ev, a.index) for s, e in _runs(inside, lo)]
    u.acts = out + _call_comm(parts, comms, lo, n)


def _labels(markers: list[tuple[int, Ev]], rx: re.Pattern[str]) -> dict[int, Any]:
    """trace index of each marker -> its label (docs/oracle.md "Step markers and labels")."""
    order = sorted(markers, key=lambda m: (m[1].start, m[0]))  # by start time, stable
    numbers: list[str | None] = []
    for _, e in order:
        m = rx.search(e.name)
        g = m.group(1) if m is not None and m.re.groups >= 1 else None
        numbers.append(g if g is not None and g.isdigit() and g.isascii() else None)
    if any(n is None for n in numbers):
        return {i: k for k, (i, _) in enumerate(order)}
    seen: dict[int, int] = defaultdict(int)
    out: dict[int, Any] = {}
    for (i, _), n in zip(order, numbers, strict=True):
        v = int(n)  # type: ignore[arg-type]
        seen[v] += 1
        out[i] = v if seen[v] == 1 else f"{v}#{seen[v]}"
    return out


def _innermost(markers: list[tuple[int, Ev]], t: int) -> int | None:
    """Trace index of the innermost marker whose [start, end) contains t."""
    containing = [(i, e) for i, e in markers if e.start <= t < e.end]
    if not containing:
        return None
    best = min(containing, key=lambda m: (-m[1].start, m[1].end, m[0]))
    return best[0]


@dataclass
class _Window:
    label: Any
    start: int
    end: int
    acts: list[_Act]  # GPU: the step's activities; CPU: every activity clipped (start/end clipped)
    iteration: int | None = None  # §7: marker start to the next marker's (strictly later) start


def _iteration(markers: list[tuple[int, Ev]], e: Ev) -> int | None:
    later = [m.start for _, m in markers if m.start > e.start]
    return min(later) - e.start if later else None


def _device_queued(a: _Act) -> bool:
    """Work the device queues itself, with no host launch: a kernel record that moves memory
    (MTIA dma_request). A memcpy/memset always has a host launch, recorded or not."""
    return a.launch is None and a.kind == "memory" and a.ev.cat == "kernel"


def _windows(u: _Unit, rx: re.Pattern[str]) -> list[_Window]:
    # zero-length markers contain nothing and are ignored everywhere (docs/oracle.md, docs/metrics.md)
    markers = [
        (i, e) for i, e in u.host if e.cat == "annotation" and e.end > e.start and rx.search(e.name)
    ]
    if not markers:
        if not (u.acts if u.gpu else u.span):
            return []
        return [
            _Window(
                "all",
                u.span[0] if u.span else min(a.start for a in u.acts),
                u.span[1] if u.span else max(a.end for a in u.acts),
                list(u.acts),
            )
        ]
    labels = _labels(markers, rx)
    if u.gpu:
        by_marker: dict[int, list[_Act]] = defaultdict(list)
        for a in u.acts:
            # metrics.md "Steps": no launch record -> no step (a copy launched before the
            # capture ran on a device behind the host: its GPU start says nothing about its
            # step), except work the device queues itself (MTIA's dma_request kernels), placed
            # by its start time
            t = a.launch if a.launch is not None else a.start if _device_queued(a) else None
            if t is None:
                continue
            m = _innermost(markers, t)
            if m is not None:
                by_marker[m].append(a)
        out = []
        for i, e in sorted(markers, key=lambda m: (m[1].start, m[0])):
            acts = by_marker.get(i)
            if acts:
                lo, hi = min(a.start for a in acts), max(a.end for a in acts)
                it = _iteration(markers, e)
                out.append(_Window(labels[i], lo, hi, acts, it))
        return out
    out = []
    for i, e in sorted(markers, key=lambda m: (m[1].start, m[0])):
        ws, we = e.start, e.end
        clipped = [
            _Act(a.kind, max(a.start, ws), min(a.end, we), None, a.ev, a.index, a.piece, a.inst)
            for a in u.acts
            if max(a.start, ws) < min(a.end, we)
        ]
        out.append(_Window(labels[i], ws, we, clipped, _iteration(markers, e)))
    return out


def _matched(units: list[_Unit]) -> list[dict[tuple[int, int, int], _Act]]:
    """The matched instances, each as unit -> its activity: the same (process group, seq) on
    every unit of the group and once on each; point-to-point only in a group of two units. A
    call's piece (§11) is part of its instance (it carries the instance's event), not another
    activity of it."""
    spans: dict[tuple[str, int], dict[tuple[int, int, int], list[_Act]]] = defaultdict(
        lambda: defaultdict(list)
    )
    group_units: dict[str, set[tuple[int, int, int]]] = defaultdict(set)
    for u in units:
        for a in u.acts:
            if a.kind == "comm" and not a.piece and a.ev.pg != "" and a.ev.seq >= 0:
                spans[(a.ev.pg, a.ev.seq)][u.key].append(a)
                group_units[a.ev.pg].add(u.key)
    out: list[dict[tuple[int, int, int], _Act]] = []
    for (pg, _seq), per_unit in spans.items():
        members = group_units[pg]
        if len(members) < 2 or set(per_unit) != members:
            continue
        # point-to-point transfers are pairs: matched only in a group of exactly two units
        if len(members) != 2 and any(
            "sendrecv" in a.ev.name.lower() for v in per_unit.values() for a in v
        ):
            continue
        if any(len(v) != 1 for v in per_unit.values()):
            continue
        out.append({key: v[0] for key, v in per_unit.items()})
    return out


def _wait_parts(units: list[_Unit]) -> dict[tuple[int, int, int], list[tuple[int, int, int]]]:
    """Per unit, (start, end, activity index) of the wait parts of its matched instances."""
    out: dict[tuple[int, int, int], list[tuple[int, int, int]]] = defaultdict(list)
    for inst in _matched(units):
        transfer = min(a.end - a.start for a in inst.values())
        for key, a in inst.items():
            wait = (a.end - a.start) - transfer
            if wait > 0:
                out[key].append((a.start, a.start + wait, a.index))
    return out


# --- diagnosis.md §12: unknown is not transfer ---------------------------------------------------


def _matched_acts(units: list[_Unit]) -> set[int]:
    """Trace indices of the comm activities that belong to a matched instance (:func:`_matched`):
    only their exposed time outside the wait part is transfer."""
    return {a.index for inst in _matched(units) for a in inst.values()}


def _unmatched_part(w: _Window, E: np.ndarray, Wt: np.ndarray, matched: set[int] | None) -> int:
    """diagnosis.md §12, per ns: on a run of several units (``matched`` not None), an exposed ns
    in neither the wait part of a matched instance of the step nor inside a matched instance of
    the step (its transfer part) but inside an instance that is not matched has an unknown
    split; on a single unit there is none. A CPU call's piece that belongs to no instance (§11:
    a collective's launch or wake-up, ``index`` -1) is its call's, not an unpaired one's: it
    keeps the transfer rule."""
    if matched is None:
        return 0
    n = E.size
    inside = _mask(n, w.start, ((a.start, a.end) for a in w.acts if a.index in matched))
    unpaired = _mask(
        n,
        w.start,
        (
            (a.start, a.end)
            for a in w.acts
            if a.kind == "comm" and a.index >= 0 and a.index not in matched
        ),
    )
    return int((E & ~Wt & ~inside & unpaired).sum())


def _verdict(row: dict[str, Any], lost_ratio: float) -> str:
    """diagnosis.md §2 with docs/oracle.md's ties: compute-bound when lost < lost_ratio * step."""
    step = row["step_ns"]
    # §7: other steps' work in the window is not lost
    lost = step - row["compute_only_ns"] - row["overlap_ns"] - row["other_steps_ns"]
    # "10 % of the step" read exactly: the option as the decimal the user wrote, no float product
    if step == 0 or Fraction(lost) < Fraction(repr(lost_ratio)) * step:
        return "compute-bound"
    parts = [
        ("exposed_wait_ns", "peer-wait-bound"),
        ("exposed_transfer_ns", None),
        ("exposed_unmatched_ns", "exposed-communication"),  # §12: never communication-bound
        ("idle_ns", "idle-bound"),
        ("memory_only_ns", "memory-bound"),
    ]
    best_col, best_cls = parts[0]
    for col, cls in parts[1:]:
        if row[col] > row[best_col]:
            best_col, best_cls = col, cls
    if best_cls is None:
        return (
            "communication-bound" if row["comm_ns"] > row["compute_ns"] else "exposed-communication"
        )
    return best_cls


def _mask(n: int, lo: int, spans: Iterable[tuple[int, int]]) -> np.ndarray:
    """Boolean per ns of [lo, lo + n): True where any half-open span covers it."""
    m = np.zeros(n, dtype=bool)
    for s, e in spans:
        a, b = max(s - lo, 0), min(e - lo, n)
        if a < b:
            m[a:b] = True
    return m


def _blocked_on(w: _Window, resumes: list[int], t: int) -> bool:
    """diagnosis.md §8, §11 (CPU): t lies in a comm activity of the window (or a call's piece
    that belongs to an instance) after whose end a compute thread's next host event of any kind
    (``resumes``: the starts of the cpu_ops and ranges of the threads that have compute) starts
    within 1 % of its duration or within 1 ms."""
    for a in w.acts:
        if a.kind != "comm" or not a.inst or not a.start <= t < a.end:
            continue
        later = [r for r in resumes if r >= a.end]
        if later and _blocked_gap(min(later) - a.end, a.end - a.start):
            return True
    return False


def _step_row(
    u: _Unit,
    w: _Window,
    waits: list[tuple[int, int, int]],
    lost_ratio: float,
    own_waits: bool,
    matched: set[int] | None = None,
) -> dict[str, Any]:
    ws, we = w.start, w.end
    n = we - ws
    comp = [a for a in w.acts if a.kind == "compute"]
    C = _mask(n, ws, ((a.start, a.end) for a in comp))
    M = _mask(n, ws, ((a.start, a.end) for a in w.acts if a.kind == "comm"))
    Y = _mask(n, ws, ((a.start, a.end) for a in w.acts if a.kind == "memory"))
    if own_waits:  # only the step's own collectives: see ``oracle_steps``
        mine = {a.index for a in w.acts}
        waits = [x for x in waits if x[2] in mine]
    Wt = _mask(n, ws, ((s, e) for s, e, _ in waits))
    E = M & ~C

    # §3: every exposed nanosecond t, literally, first match wins
    causes = {"wait": 0, "tail": 0, "dependency": 0, "host": 0}
    comm_calls = [
        e
        for _, e in u.host
        if e.cat in ("cpu_op", "annotation")
        and not _any(CPU_COMM_THREAD, e.thread)
        and _any(CPU_COMM_CALL, e.name)
    ]
    resumes = [
        e.start for _, e in u.host if e.cat in ("cpu_op", "annotation") and e.tid in u.comp_tids
    ]
    for k in np.flatnonzero(E).tolist():
        t = ws + k
        if Wt[k]:
            causes["wait"] += 1
        elif not any(a.start > t for a in comp):
            causes["tail"] += 1
        elif u.gpu:
            s = min(a.start for a in comp if a.start > t)
            dep = any(a.start == s and a.launch is not None and a.launch < t for a in comp)
            causes["dependency" if dep else "host"] += 1
        else:
            # blocked in a communication call (named, or a blocked wait) or on a comm (§8)
            dep = (
                any(e.start <= t < e.end for e in comm_calls)
                or any(s <= t < e for s, e in u.waits)
                or _blocked_on(w, resumes, t)
            )
            causes["dependency" if dep else "host"] += 1

    step = n
    compute, comm, memory = int(C.sum()), int(M.sum()), int(Y.sum())
    overlap = int((C & M).sum())
    exposed = comm - overlap
    # §7: D = every activity of the unit, of any step or none; idle = nothing at all ran,
    # other_steps = only other steps' work ran
    D = _mask(n, ws, ((a.start, a.end) for a in u.acts)) | C | M | Y
    idle = int((~D).sum())
    other_steps = int((D & ~(C | M | Y)).sum())
    ideal = step - exposed + max(0, comm - compute)
    wait_part = int((E & Wt).sum())
    unmatched_part = _unmatched_part(w, E, Wt, matched)
    row: dict[str, Any] = {
        "rank": u.rank,
        "pid": u.pid,
        "device": u.device,
        "step": w.label,
        "start_ns": ws,
        "end_ns": we,
        "step_ns": step,
        "compute_ns": compute,
        "comm_ns": comm,
        "memory_ns": memory,
        "overlap_ns": overlap,
        "exposed_comm_ns": exposed,
        "idle_ns": idle,
        "other_steps_ns": other_steps,
        "iteration_ns": w.iteration,
        "ideal_ns": ideal,
        "overlap_ratio": overlap / comm if comm else None,
        "potential_speedup": step / ideal if ideal else None,
        "exposed_comm_ratio": exposed / step if step else None,
        "idle_ratio": idle / step if step else None,
        "compute_only_ns": int((C & ~M).sum()),
        "memory_only_ns": int((Y & ~C & ~M).sum()),
        "exposed_wait_ns": wait_part,
        "exposed_transfer_ns": int(E.sum()) - wait_part - unmatched_part,
        "exposed_unmatched_ns": unmatched_part,
        "exposed_tail_ns": causes["tail"],
        "exposed_dependency_ns": causes["dependency"],
        "exposed_host_ns": causes["host"],
    }
    assert causes["wait"] == wait_part  # docs/oracle.md "Causes": the cause equals the part
    row["bottleneck"] = _verdict(row, lost_ratio)
    return row


def oracle_steps(
    events: Sequence[Ev],
    step_regex: str | None = None,
    lost_ratio: float = DEFAULT_LOST_RATIO,
    *,
    own_waits: bool = True,
) -> list[dict[str, Any]]:
    """One dict per (rank, pid, device, step window), in unit then window-start order.

    ``own_waits``: an exposed ns of a step is waiting when it lies in the wait part of a matched
    instance whose activity is in THIS step (diagnosis.md §3: "the wait part of the matched
    collective" - the collective that ns belongs to; docs/diagnosis.md states it). False reads
    it as any matched instance of the unit, which differs only when communication kernels of two
    steps run at the same time.
    """
    rx = re.compile(step_regex or DEFAULT_STEP_REGEX)
    units = _units(events)
    windows = {u.key: _windows(u, rx) for u in units}
    waits = _wait_parts(units)
    matched = _matched_acts(units) if len(units) > 1 else None  # §12: several units
    rows: list[dict[str, Any]] = []
    for u in units:
        for w in windows[u.key]:
            rows.append(_step_row(u, w, waits.get(u.key, []), lost_ratio, own_waits, matched))
    return rows


def marker_report(events: Sequence[Ev], step_regex: str | None = None) -> dict[str, int]:
    """Counts for generators: markers, GPU markers that received no activity (empty steps), and
    comm activities carrying (process group, seq) that lie in no step window of their unit."""
    rx = re.compile(step_regex or DEFAULT_STEP_REGEX)
    markers = empty = unstepped = 0
    for u in _units(events):
        ms = [(i, e) for i, e in u.host if e.cat == "annotation" and rx.search(e.name)]
        markers += len(ms)
        if u.gpu and ms:
            used = {
                _innermost(ms, a.launch if a.launch is not None else a.start)
                for a in u.acts
                if a.launch is not None or _device_queued(a)
            }
            empty += sum(1 for i, _ in ms if i not in used)
        inside = {a.index for w in _windows(u, rx) for a in w.acts}
        unstepped += sum(
            1
            for a in u.acts
            if a.kind == "comm"
            and not a.piece
            and a.ev.pg != ""
            and a.ev.seq >= 0
            and a.index not in inside
        )
    return {"markers": markers, "empty_gpu_markers": empty, "unstepped_comm": unstepped}
