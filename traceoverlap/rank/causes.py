"""The local causes of exposed communication (docs/diagnosis.md §3), per unit: the map's half.

Every exposed nanosecond (M - C) of a step has one cause, first match wins: ``wait`` (inside the
wait part of a matched collective: a peer was late; carved out later, across ranks, by
:mod:`traceoverlap.run.matching`), ``tail`` (no compute of the step starts after it),
``dependency`` (the next compute was already launched: it waited for this communication; on CPU
units: the compute thread was blocked in a communication call) and ``host`` (the host had not
launched the next compute yet). :func:`local_causes` splits the exposed set of one unit into
tail / dependency / host.

Precise edges (ns ``t`` is the nanosecond [t, t+1)): ``tail`` when t >= the latest start of a
compute activity of the step; ``dependency`` when the compute activities that start next after
t include one whose launch call started strictly before t.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..core import intervals as iv
from ..core.intervals import GroupedIntervals
from ..core.model import Kind
from ..core.vocab import (
    BLOCKED_FLOOR_NS,
    BLOCKED_PER,
)
from .metrics import ActivityRows
from .steps import NO_LAUNCH, UnitSteps

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class LocalCauses:
    """The exposed set of a unit's windows split into tail / dependency / host (grouped disjoint
    sets, group = window); waiting is carved out of them across ranks."""

    tail: GroupedIntervals
    dependency: GroupedIntervals
    host: GroupedIntervals


def _first_starts(acts: ActivityRows, launch_start: I64) -> tuple[I64, I64, I64]:
    """Distinct (window, start) of compute activities, sorted, and the earliest launch start among
    the activities starting there (int64 max when none of them has a known launch)."""
    comp = acts.kind == Kind.COMPUTE
    g, s = acts.group[comp], acts.start_ns[comp]
    if g.size == 0:
        z = np.zeros(0, np.int64)
        return z, z.copy(), z.copy()
    # activities without a known launch never count as launched: treat as +inf for the min
    ls = launch_start[acts.event_row[comp]]
    ls = np.where(ls == NO_LAUNCH, np.iinfo(np.int64).max, ls)
    order = np.lexsort((s, g))
    g, s, ls = g[order], s[order], ls[order]
    new = np.ones(g.size, dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (s[1:] != s[:-1])
    first = np.flatnonzero(new)
    return g[first], s[first], np.minimum.reduceat(ls, first)


def blocked_comm(
    acts: ActivityRows, ug: I64, us: I64, host: I64 | None = None
) -> tuple[I64, I64, I64]:
    """CPU units (diagnosis.md §8, §11): the comm activities (window, start, end; ns) the compute
    threads were blocked on: their next host event of any kind (``host``: the sorted starts of
    every host event on a compute thread; without it, the next compute op of the window, from
    ``ug``/``us``: the distinct (window, start) of compute, sorted) starts at or after the
    communication's end, within 1 % of its duration or within 1 ms (the OS's wake-up latency on
    a loaded host). A blocking ``all_reduce`` leaves no wait range, and DDP's reducer finalize
    (``copy_bucket_to_grad`` right after the last bucket) reads the same."""
    comm = np.flatnonzero(acts.kind == Kind.COMM)
    z = np.zeros(0, np.int64)
    if comm.size == 0 or (us.size == 0 if host is None else host.size == 0):
        return z, z.copy(), z.copy()
    g, s, e = acts.group[comm], acts.start_ns[comm], acts.end_ns[comm]
    if host is None:
        # per comm activity: the first compute start at or after its end in the same window
        j = iv.next_at_or_after(g, e, ug, us)
        has = j >= 0
        nxt = us[np.maximum(j, 0)]
    else:
        k = np.searchsorted(host, e, side="left")
        has = k < host.size
        nxt = host[np.minimum(k, host.size - 1)]
    gap = nxt - e
    # exact integers: gap <= 1 % of the duration, or <= 1 ms
    hit = has & (gap >= 0) & ((gap * BLOCKED_PER <= e - s) | (gap <= BLOCKED_FLOOR_NS))
    return g[hit], s[hit], e[hit]


def local_causes(
    exposed: GroupedIntervals,
    acts: ActivityRows,
    steps: UnitSteps,
    comm_calls: GroupedIntervals | None = None,
    host_starts: I64 | None = None,
) -> LocalCauses:
    """Split a unit's exposed set (grouped by window) into tail / dependency / host.

    GPU units use the launch times in ``steps``; CPU units use ``comm_calls``: the host ranges
    (grouped by window) during which a compute thread was blocked in a communication call, and
    ``host_starts`` (:func:`blocked_comm`).
    """
    n = len(steps)
    ug, us, ulaunch = _first_starts(acts, steps.launch_start_ns)
    # tail zone: from the last compute start of the window (or the window start) to its end
    last = iv.group_min_max(ug, us, us, n)[1]
    tail_start = np.where(last == np.iinfo(np.int64).min, steps.start_ns, last)
    tail = iv.grouped_union(np.arange(n, dtype=np.int64), tail_start, steps.end_ns, n)
    if steps.gpu:
        # dependency zone before the k-th distinct compute start s_k of a window: the ns t with
        # s_{k-1} <= t < s_k (the next compute starts at s_k) and t > its earliest launch
        prev = np.empty_like(us)
        if us.size:
            prev[0] = steps.start_ns[ug[0]]
            same = ug[1:] == ug[:-1]
            prev[1:] = np.where(same, us[:-1], steps.start_ns[ug[1:]])
        launched = ulaunch != np.iinfo(np.int64).max
        zs = np.maximum(prev, np.where(launched, ulaunch + 1, us))
        zones = iv.grouped_union(ug[launched], zs[launched], us[launched], n)
    else:
        z = np.zeros(0, np.int64)
        calls = comm_calls if comm_calls is not None else (z, z.copy(), z.copy())
        bg, bs, be = blocked_comm(acts, ug, us, host_starts)
        zones = iv.grouped_union(
            np.concatenate((calls[0], bg)),
            np.concatenate((calls[1], bs)),
            np.concatenate((calls[2], be)),
            n,
        )
    tail_e = iv.grouped_intersect(exposed, tail, n)
    rest = iv.grouped_subtract(exposed, tail, n)
    return LocalCauses(
        tail=tail_e,
        dependency=iv.grouped_intersect(rest, zones, n),
        host=iv.grouped_subtract(rest, zones, n),
    )
