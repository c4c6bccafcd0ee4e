"""Per (unit, step) interval sets and the numbers of docs/metrics.md and docs/diagnosis.md §1.

With C = union of compute intervals, M = union of comm intervals, Y = union of memcpy/memset, all
clipped to the step window W, and |X| the total length of X:

  step_ns          |W|
  compute_ns       |C|            comm_ns |M|          memory_ns |Y|
  overlap_ns       |C ∩ M|        communication hidden behind computation
  exposed_comm_ns  |M - C|        communication nothing hid (= |M| - |C ∩ M|)
  compute_only_ns  |C - M|
  memory_only_ns   |Y - C - M|
  other_steps_ns   |(W ∩ D) - (C ∪ M ∪ Y)|  D = every device activity of the unit: time in the
                   window when only other steps' work ran (overlapping steps, diagnosis.md §7)
  idle_ns          |W - D|        nothing at all ran on the device
  iteration_ns     the marker's start to the next marker's start (-1 inside: none, null outside)
  ideal_ns         step - exposed + max(0, |M| - |C|)

compute_only + overlap + exposed + memory_only + other_steps + idle = step, exactly (the parts are disjoint);
the exposed part is split further into waiting and transfer across ranks (collectives.py) and
into causes (diagnosis.py).

Everything is computed for all windows of a unit at once with the grouped (packed) interval
algebra of :mod:`traceoverlap.core.intervals`; nothing loops over events in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..core import intervals as iv
from ..core.intervals import GroupedIntervals
from ..core.model import Kind
from ..core.schema import (
    COMM_NS,
    COMPUTE_NS,
    COMPUTE_ONLY_NS,
    EXPOSED_COMM_NS,
    IDEAL_NS,
    IDLE_NS,
    ITERATION_NS,
    MEMORY_NS,
    MEMORY_ONLY_NS,
    OTHER_STEPS_NS,
    OVERLAP_NS,
    STEP_NS,
)
from .steps import UnitSteps

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ActivityRows:
    """Activity intervals per window: ``group`` = window index, ``kind`` code, start/end (ns)
    (CPU windows: clipped to the window), and ``event_row``: the row in the unit's event table."""

    group: I64
    kind: npt.NDArray[np.int8]
    start_ns: I64
    end_ns: I64
    event_row: I64

    def select(self, mask: npt.NDArray[np.bool_]) -> ActivityRows:
        return ActivityRows(
            self.group[mask],
            self.kind[mask],
            self.start_ns[mask],
            self.end_ns[mask],
            self.event_row[mask],
        )


def activity_rows(
    start: I64, end: I64, kind: npt.NDArray[np.int8], steps: UnitSteps
) -> ActivityRows:
    """Every activity of every window of one unit as (window, kind, start, end, row).

    GPU units: the activities assigned to a window (by launch). CPU units (and the ``all``
    window of any unit): every activity overlapping the window, clipped to it; one activity
    may fall in several windows when markers overlap.
    """
    is_act = kind < Kind.NONE
    if steps.gpu:
        sel = np.flatnonzero(is_act & (steps.event_window >= 0))
        return ActivityRows(
            steps.event_window[sel], kind[sel], start[sel], end[sel], sel.astype(np.int64)
        )
    cand = np.flatnonzero(is_act)
    ws, we = steps.start_ns, steps.end_ns
    if cand.size == 0 or ws.size == 0:
        z = np.zeros(0, np.int64)
        return ActivityRows(z, np.zeros(0, np.int8), z, z, z)
    order, sws, swe, lo, hi = _window_join(start[cand], end[cand], ws, we)
    a, b = start[cand], end[cand]
    act, j = iv.range_pairs(lo, hi)
    s = np.maximum(a[act], sws[j])
    e = np.minimum(b[act], swe[j])
    ok = e > s
    rows = cand[act[ok]]
    return ActivityRows(
        order[j[ok]].astype(np.int64), kind[rows], s[ok], e[ok], rows.astype(np.int64)
    )


def _window_join(a: I64, b: I64, ws: I64, we: I64) -> tuple[I64, I64, I64, I64, I64]:
    """Windows sorted by start (``order``, starts, ends) and, per activity [a, b), the range
    [lo, hi) of sorted windows it may overlap: ws_j < b (a prefix) and we_j > a (from the first
    whose running max end > a)."""
    order = np.argsort(ws, kind="stable")
    sws, swe = ws[order], we[order]
    hi = np.searchsorted(sws, b, side="left")
    lo = np.searchsorted(np.maximum.accumulate(swe), a, side="right")
    return order, sws, swe, lo, hi


def window_pairs(start: I64, end: I64, kind: npt.NDArray[np.int8], steps: UnitSteps) -> int:
    """How many (activity, window) candidate pairs :func:`activity_rows` builds for a CPU unit
    (about one per activity when markers do not overlap; activities x markers when they nest):
    what the per-window interval algebra costs, in time and memory."""
    cand = np.flatnonzero(kind < Kind.NONE)
    if steps.gpu or cand.size == 0 or len(steps.start_ns) == 0:
        return int(cand.size)
    _, _, _, lo, hi = _window_join(start[cand], end[cand], steps.start_ns, steps.end_ns)
    return int(np.maximum(hi - lo, 0).sum())


@dataclass(frozen=True)
class StepSets:
    """Grouped disjoint interval sets per window (group = window index)."""

    compute: GroupedIntervals
    comm: GroupedIntervals
    memory: GroupedIntervals
    busy: GroupedIntervals
    overlap: GroupedIntervals
    exposed: GroupedIntervals
    compute_only: GroupedIntervals
    memory_only: GroupedIntervals


def step_sets(acts: ActivityRows, n_windows: int) -> StepSets:
    """C, M, Y, C ∪ M ∪ Y, C ∩ M, M − C, C − M and Y − C − M for every window at once."""

    def union_of(code: Kind) -> GroupedIntervals:
        m = acts.kind == code
        return iv.grouped_union(acts.group[m], acts.start_ns[m], acts.end_ns[m], n_windows)

    compute, comm, memory = union_of(Kind.COMPUTE), union_of(Kind.COMM), union_of(Kind.MEMORY)
    cm = iv.grouped_union(
        np.concatenate((compute[0], comm[0])),
        np.concatenate((compute[1], comm[1])),
        np.concatenate((compute[2], comm[2])),
        n_windows,
    )
    if bool((acts.kind > Kind.MEMORY).any() or (acts.kind < 0).any()):
        busy = iv.grouped_union(acts.group, acts.start_ns, acts.end_ns, n_windows)
    else:
        # every activity is compute, comm or memory (as activity_rows gives them): the union
        # of all is C ∪ M ∪ Y, taken from the three sets' (far fewer) intervals
        busy = iv.grouped_union(
            np.concatenate((cm[0], memory[0])),
            np.concatenate((cm[1], memory[1])),
            np.concatenate((cm[2], memory[2])),
            n_windows,
        )
    return StepSets(
        compute=compute,
        comm=comm,
        memory=memory,
        busy=busy,
        overlap=iv.grouped_intersect(compute, comm, n_windows),
        exposed=iv.grouped_subtract(comm, compute, n_windows),
        compute_only=iv.grouped_subtract(compute, comm, n_windows),
        memory_only=iv.grouped_subtract(memory, cm, n_windows),
    )


def device_covered(start: I64, end: I64, kind: npt.NDArray[np.int8], steps: UnitSteps) -> I64:
    """|W ∩ D| per window (ns): D = the union of every activity of the unit, whatever step it
    belongs to (or none). GPU windows hold other steps' work when steps overlap; on CPU units
    every activity is clipped into each window it meets, so this equals |C ∪ M ∪ Y| there."""
    act = np.flatnonzero(kind < Kind.NONE)
    n = len(steps)
    d = iv.union(start[act], end[act])
    g = np.zeros(d[0].size, dtype=np.int64)
    q = np.zeros(n, dtype=np.int64)
    return iv.grouped_covered((g, d[0], d[1]), q, steps.start_ns, steps.end_ns, 1)


def step_parts(sets: StepSets, steps: UnitSteps, device_ns: I64 | None = None) -> dict[str, I64]:
    """The per-window numbers of the module docstring (ns), one array per metric.
    ``device_ns``: :func:`device_covered` (None: no other steps' work, |D ∩ W| = |C ∪ M ∪ Y|)."""
    n = len(steps)

    def size(s: GroupedIntervals) -> I64:
        return iv.grouped_length(s, n)

    step = (steps.end_ns - steps.start_ns).astype(np.int64)
    compute, comm = size(sets.compute), size(sets.comm)
    overlap = size(sets.overlap)
    exposed = comm - overlap
    busy = size(sets.busy)
    covered = busy if device_ns is None else np.maximum(device_ns, busy)
    return {
        STEP_NS.name: step,
        COMPUTE_NS.name: compute,
        COMM_NS.name: comm,
        MEMORY_NS.name: size(sets.memory),
        OVERLAP_NS.name: overlap,
        EXPOSED_COMM_NS.name: exposed,
        IDLE_NS.name: step - covered,
        OTHER_STEPS_NS.name: covered - busy,
        ITERATION_NS.name: steps.iteration_ns,
        IDEAL_NS.name: step - exposed + np.maximum(0, comm - compute),
        COMPUTE_ONLY_NS.name: size(sets.compute_only),
        MEMORY_ONLY_NS.name: size(sets.memory_only),
    }


def ratio(num: npt.ArrayLike, den: npt.ArrayLike) -> list[float | None]:
    """num / den per row, None (never NaN) where den is 0."""
    return [
        float(a) / float(b) if b > 0 else None
        for a, b in zip(np.asarray(num).tolist(), np.asarray(den).tolist(), strict=True)
    ]
