"""Step markers, step windows, and which step each activity of one unit belongs to.

Rules (docs/metrics.md "Steps", docs/diagnosis.md for the precise edges). Everything here works
on ONE unit (one process and device, see :func:`traceoverlap.core.model.split_units`):

  - A step marker is a host range (category ``annotation``) whose name matches the step regex
    (default ``^ProfilerStep#(\\d+)$``). Its label is the regex's first group when that is a
    number; when any marker of the unit lacks one, every marker is labelled by its ordinal
    (0, 1, ... in start order). A number that repeats keeps ``N`` on its first marker; the later
    ones are labelled ``"N#2"``, ``"N#3"``... (a note says so). Zero-length markers are ignored.
  - GPU units: a GPU activity (kernel / memcpy / memset) belongs to the INNERMOST marker
    containing the start of the runtime/driver call that launched it (same ``pid`` and 64-bit
    ``correlation``): among markers with ``start <= t < end``, the greatest start, then the
    smallest end, then the first in the trace. The window is [first start, last end) of the
    step's activities; a marker that launched nothing gives no step (a note names them).
    An activity whose launch is not in the trace (launched before the capture began, or by a
    call the trace did not record) is in no step: its GPU start says nothing about the step,
    the device runs behind the host. The one exception is work the device queues itself with
    no host launch at all (a kernel record the memory rule names: MTIA ``dma_request``),
    placed in the innermost marker around its start.
  - CPU units: the window is the marker range itself; activities are clipped to it (metrics.py).
  - No markers on a unit: one window labelled ``all`` spanning the unit's activities, and a note
    naming the repeating ranges that could be steps.

Cost is linear in events (one sort of the launches, one searchsorted per activity) whatever the
number of steps.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core._lazyre import lazy_compile
from ..core.errors import TraceFormatError
from ..core.intervals import group_min_max, measure
from ..core.model import (
    GPU_ACTIVITY_CATEGORIES,
    LAUNCH_CATEGORIES,
    Kind,
    Timeline,
    in_categories,
    per_category,
    values_at,
)
from ..core.options import AnalysisOptions, describe_steps
from ..core.vocab import WHOLE_CAPTURE, Phase, StepId, StepLabel, step_number

I64 = npt.NDArray[np.int64]
#: Launch start of an activity whose launch is unknown.
NO_LAUNCH = np.iinfo(np.int64).min


@dataclass(frozen=True)
class UnitSteps:
    """The step windows of one unit and the step of each of its GPU activities.

    Per window ``w``: ``labels[w]`` (int marker number, ``"N#k"`` for a repeated number, or
    ``"all"``), ``start_ns``/``end_ns`` (the window), ``marker_start_ns``/``marker_end_ns`` (-1
    for ``all``). Per event row of the unit's table: ``event_window`` (GPU activities: the window
    index, -1 for none; host events and CPU units: -1, CPU activities are clipped to windows by
    the metrics), ``launch_row`` (GPU activities: the row of their launch call, -1 when not
    found) and ``launch_start_ns`` (its start, :data:`NO_LAUNCH` when not found).
    ``no_launch``: GPU activities whose launch is not in the trace and that are in no step
    (device-queued work placed by time is not counted), ``no_launch_ns`` the device time they
    cover (ns, overlaps counted once), ``before_capture`` how many of them carry a correlation id
    below every launch of their process (launched before the capture began); ``outside``:
    launched outside every step marker (both in no step).
    """

    gpu: bool
    labels: tuple[StepLabel, ...]
    start_ns: I64
    end_ns: I64
    marker_start_ns: I64
    marker_end_ns: I64
    event_window: I64
    launch_row: I64
    launch_start_ns: I64
    no_launch: int
    outside: int
    markers_found: int
    notes: tuple[str, ...]
    #: every marker's label, before ``--steps`` selected some (for "no steps" messages)
    labels_found: tuple[StepLabel, ...] = ()
    no_launch_ns: int = 0
    before_capture: int = 0
    #: per window: its marker's start to the next marker's start (ns; -1: no next marker, or
    #: the ``all`` window) (diagnosis.md §7)
    iteration_ns: I64 = field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.labels)


def cat_codes(col: pd.Series) -> npt.NDArray[np.integer[Any]]:
    """The codes of a categorical column, read-only (``col.cat.codes.to_numpy()`` builds a
    Series and copies them: ~100 µs a call on 20 000 rows, against ~20 µs)."""
    arr = col.array
    assert isinstance(arr, pd.Categorical)
    codes: npt.NDArray[np.integer[Any]] = arr.codes
    return codes


#: :func:`codes_values` tables every category when there are at most this many more than four
#: per code given (else it sorts the codes given).
TABLE_SLACK = 4096


def codes_values(
    col: pd.Series, codes: npt.NDArray[np.integer[Any]], fn: Callable[[str], Any]
) -> npt.NDArray[np.object_]:
    """``per_category(col, fn, rows)[codes]`` for ``codes`` that are codes of the selected rows
    (as an object array): ``fn`` evaluated once per distinct code given (``""`` for -1, a missing
    value), without a pass over every row of the column for the codes the rows use."""
    arr = col.array
    assert isinstance(arr, pd.Categorical)
    cats = arr.categories
    if len(cats) <= 4 * codes.size + TABLE_SLACK:
        # few categories: a table over all of them (code -1 reads the last entry, "")
        seen = np.zeros(len(cats) + 1, dtype=bool)
        seen[codes] = True
        used = np.flatnonzero(seen[:-1])
        table = np.full(len(cats) + 1, "", dtype=object)
        if used.size:
            table[used] = np.array([fn(str(c)) for c in cats.take(used).tolist()], dtype=object)
        got: npt.NDArray[np.object_] = table[codes]
        return got
    uniq, inv = np.unique(codes, return_inverse=True)  # many: the codes given, sorted
    vals = np.full(uniq.size, "", dtype=object)
    ok = np.flatnonzero(uniq >= 0)
    if ok.size:
        vals[ok] = np.array([fn(str(c)) for c in cats.take(uniq[ok]).tolist()], dtype=object)
    out: npt.NDArray[np.object_] = vals[inv.reshape(-1)]
    return out


def _name_mask(
    names: pd.Series, rx: re.Pattern[str], rows: npt.NDArray[np.bool_]
) -> npt.NDArray[np.bool_]:
    """Per row: is it one of ``rows`` and does its (categorical) name match ``rx``? Evaluated
    once per distinct name those rows use."""
    per_name = per_category(names, lambda s: rx.search(s) is not None, rows, dtype=bool)
    # only the selected rows look their name up (annotations are a handful of the rows)
    idx = np.flatnonzero(rows)
    out = np.zeros(len(names), dtype=bool)
    out[idx] = per_name[cat_codes(names)[idx]]
    return out


def marker_labels(names: list[str], rx: re.Pattern[str]) -> tuple[list[StepLabel], str | None]:
    """Labels of markers given in start order, and a note when numbers repeat."""
    numbers: list[int | None] = []
    for name in names:
        m = rx.search(name)
        g = m.group(1) if m is not None and m.groups() else None
        numbers.append(int(g) if g is not None and g.isdigit() else None)
    if any(n is None for n in numbers):
        return list(range(len(names))), None
    seen: Counter[int] = Counter()
    labels: list[StepLabel] = []
    for n in numbers:
        assert n is not None
        seen[n] += 1
        labels.append(StepId(n, seen[n]).label)
    repeated = sorted(n for n, c in seen.items() if c > 1)
    note = None
    if repeated:
        shown = ", ".join(f"{n} ({seen[n]}x)" for n in repeated[:5])
        note = (
            f"step numbers repeat ({shown}{', ...' if len(repeated) > 5 else ''}): the repeats are "
            f"labelled N#2, N#3... in start order"
        )
    return labels, note


def _enclosing(ms: I64, me: I64) -> I64:
    """For markers sorted by (start, end descending), the index of the marker with the greatest
    start that is still open when marker i starts (the next candidate outward), or -1."""
    n = ms.size
    enc = np.full(n, -1, dtype=np.int64)
    if n < 2 or bool((ms[1:] >= me[:-1]).all()):
        return enc  # no marker overlaps another: the common case, no walk needed
    stack: list[int] = []
    ms_l, me_l = ms.tolist(), me.tolist()
    for i in range(n):
        while stack and me_l[stack[-1]] <= ms_l[i]:
            stack.pop()
        enc[i] = stack[-1] if stack else -1
        stack.append(i)
    return enc


def innermost_marker(ms: I64, me: I64, enc: I64, t: I64) -> I64:
    """Per time in ``t``: the innermost marker (index into the sorted markers) containing it, -1
    for none. ``ms``/``me`` sorted by (start, end descending, trace order descending)."""
    out = np.full(t.size, -1, dtype=np.int64)
    if ms.size == 0 or t.size == 0:
        return out
    cur = np.searchsorted(ms, t, side="right") - 1
    idx = np.flatnonzero(cur >= 0)
    cur = cur[idx]
    while idx.size:
        inside = me[cur] > t[idx]
        out[idx[inside]] = cur[inside]
        # not inside: walk outward to the next marker that was open when this one started
        nxt = enc[cur[~inside]]
        keep = nxt >= 0
        idx = idx[~inside][keep]
        cur = nxt[keep]
    return out


def join_launches(ev: pd.DataFrame, gidx: I64) -> I64:
    """Per GPU activity row in ``gidx``: the row of the runtime/driver call that launched it
    (joined on pid and the full 64-bit correlation id; the first launch row wins when an id
    repeats), -1 when the trace has none."""
    corr = ev["correlation"].to_numpy()
    pid = ev["pid"].to_numpy()
    lidx = np.flatnonzero(in_categories(ev["category"], LAUNCH_CATEGORIES) & (corr >= 0))
    out = np.full(gidx.size, -1, dtype=np.int64)
    if lidx.size == 0 or gidx.size == 0:
        return out
    gcorr, gpid = corr[gidx], pid[gidx]
    one = bool((gpid == gpid[0]).all())  # one process (the usual case): no sort to find it
    for p in [int(gpid[0])] if one else np.unique(gpid).tolist():
        mine = np.flatnonzero((gpid == p) & (gcorr >= 0))
        lp = lidx[pid[lidx] == p]
        if mine.size == 0 or lp.size == 0:
            continue
        order = np.argsort(corr[lp], kind="stable")
        keys = corr[lp][order]
        pos = np.minimum(np.searchsorted(keys, gcorr[mine], side="left"), keys.size - 1)
        hit = keys[pos] == gcorr[mine]
        out[mine[hit]] = lp[order[pos[hit]]]
    return out


def _name_counts(names: pd.Series, rows: npt.NDArray[np.bool_]) -> list[tuple[str, int]]:
    """(name as text, how many of ``rows`` carry it) for each name the rows use (a missing name
    is not counted, as ``value_counts`` does not): counted on the category codes, never per row
    in Python."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        counts = names[rows].astype(str).value_counts()
        return [(str(n), int(c)) for n, c in counts.items()]
    codes = cat_codes(names)[rows].astype(np.int64) + 1
    bc = np.bincount(codes, minlength=len(names.cat.categories) + 1)
    used = np.flatnonzero(bc[1:]) + 1
    # plain lists: indexing the numpy arrays per name cost most of this on 20 000 names
    labels = np.asarray(names.cat.categories, dtype=object)[used - 1].tolist()
    totals: dict[str, int] = {}
    for label, c in zip(labels, bc[used].tolist(), strict=True):
        n = str(label)
        totals[n] = totals.get(n, 0) + c
    return list(totals.items())


def _no_marker_note(ev: pd.DataFrame, pattern: str) -> str:
    """Say the whole capture is one window, and suggest the repeating ranges that could be steps."""
    text = f"no step markers matching {pattern!r}; the whole capture is one window 'all'"
    is_ann = in_categories(ev["category"], ("annotation",))
    if not is_ann.any():
        return text
    # a step candidate repeats, and is not a phase of every step (forward/backward...)
    cands = [(n, c) for n, c in _name_counts(ev["name"], is_ann) if c >= 3]
    cands = [(n, c) for n, c in cands if not _PHASE_LIKE.search(n)]
    groups: dict[str, int] = {}
    for name, c in cands:
        stem = re.split(r"[\[#(:\s\d]", name, maxsplit=1)[0]
        if len(stem) < 2:
            continue
        sep = name[len(stem) : len(stem) + 1]
        key = stem + (sep if sep and not sep.isdigit() and not sep.isspace() else "")
        groups[key] = groups.get(key, 0) + c
    if not groups:
        return text
    best = sorted(groups.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    hints = ", ".join(f"'{k}...' x{n}: try --step-regex '^{re.escape(k)}'" for k, n in best)
    return f"{text}; ranges that repeat and could be steps: {hints}"


_PHASE_LIKE = lazy_compile(
    r"(?i)^("
    + "|".join((Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER, Phase.GRAD_SYNC, Phase.ZERO_GRAD))
    + r"|## |aten::|autograd|c10d|nccl:|gloo:|record_param_comms|Optimizer\.|DistributedDataParallel)"
)


def assign_steps(
    unit: Timeline,
    kind: npt.NDArray[np.int8],
    options: AnalysisOptions,
) -> UnitSteps:
    """Find the step windows of one unit and the step of each of its GPU activities."""
    pattern = options.step_pattern
    rx = options.step_re
    ev = unit.events
    is_gpu = in_categories(ev["category"], GPU_ACTIVITY_CATEGORIES)
    gpu = bool(is_gpu.any())
    notes: list[str] = []
    midx = _marker_rows(ev, rx, notes)
    launches = _join_gpu_launches(ev, is_gpu)
    if midx.size == 0:
        act = launches.gidx if gpu else np.flatnonzero(kind != Kind.NONE)
        if act.size == 0:
            event_window = np.full(len(ev), -1, dtype=np.int64)
            return _empty(gpu, event_window, launches.row, launches.start_ns, notes, "no activity")
        if options.steps is not None:
            # a step selection on a capture without steps would silently report all of it
            raise TraceFormatError(
                unit.traces[0].path if unit.traces else "<timeline>",
                f"steps {options.steps.text} were asked for, but the trace has no step markers "
                f"matching {pattern!r}",
                "drop the step selection, or give a step regex that matches the step ranges",
            )
        notes.append(_no_marker_note(ev, pattern))
        whole = _whole_capture(ev, act, gpu, launches, notes)
        return replace(whole, iteration_ns=np.full(len(whole), -1, dtype=np.int64))
    names = values_at(ev["name"], midx).astype(str).tolist()
    labels, repeat_note = marker_labels(names, rx)
    if repeat_note:
        notes.append(repeat_note)
    keep = np.ones(midx.size, dtype=bool)
    if options.steps is not None:
        keep = np.array([options.steps.matches(step_number(lbl)) for lbl in labels], dtype=bool)
    if not gpu:
        out = _cpu_windows(ev, midx, labels, keep, launches, notes)
    else:
        # device-queued work: a kernel record the memory rule names (MTIA dma_request); a
        # memcpy/memset always has a host launch, found or not
        queued = (kind == Kind.MEMORY) & in_categories(ev["category"], ("kernel",))
        out = _gpu_windows(ev, midx, labels, keep, launches, notes, queued)
    return replace(
        out, iteration_ns=iterations(out.marker_start_ns, ev["start_ns"].to_numpy()[midx])
    )


def iterations(marker_start: I64, all_starts: I64) -> I64:
    """Per window: its marker's start to the start of the next step marker found (the first that
    starts strictly later, selected or not), in ns; -1 when there is none."""
    s = np.unique(all_starts.astype(np.int64))
    k = np.searchsorted(s, marker_start, side="right")
    nxt = s[np.minimum(k, max(s.size - 1, 0))] if s.size else marker_start
    return np.where(k < s.size, nxt - marker_start, -1).astype(np.int64)


@dataclass(frozen=True)
class _Launches:
    """The launch of every GPU activity of a unit.

    ``gidx``: the rows of the GPU activities (kernel / memcpy / memset); per event row of the
    unit's table: ``row`` (the row of the runtime/driver call that launched it, -1 when not
    found or not a GPU activity) and ``start_ns`` (that call's start, :data:`NO_LAUNCH` when not
    found); ``no_launch``: GPU activities whose launch is not in the trace.
    """

    gidx: I64
    row: I64
    start_ns: I64
    no_launch: int


def _join_gpu_launches(ev: pd.DataFrame, is_gpu: npt.NDArray[np.bool_]) -> _Launches:
    """Join every GPU activity to its launch call (:func:`join_launches`)."""
    n = len(ev)
    launch_row = np.full(n, -1, dtype=np.int64)
    launch_start = np.full(n, NO_LAUNCH, dtype=np.int64)
    gidx = np.flatnonzero(is_gpu)
    no_launch = 0
    if gidx.size:
        rows = join_launches(ev, gidx)
        found = rows >= 0
        launch_row[gidx] = rows
        launch_start[gidx[found]] = ev["start_ns"].to_numpy()[rows[found]]
        no_launch = int((~found).sum())
    return _Launches(gidx, launch_row, launch_start, no_launch)


def _marker_rows(ev: pd.DataFrame, rx: re.Pattern[str], notes: list[str]) -> I64:
    """The rows of the unit's step markers (host ranges of category ``annotation`` whose name
    matches ``rx``), in label order: by start, then trace order. Zero-length markers are
    dropped, with a note."""
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    is_marker = _name_mask(ev["name"], rx, in_categories(ev["category"], ("annotation",)))
    midx = np.flatnonzero(is_marker)
    zero = midx[end[midx] <= start[midx]]
    if zero.size:
        notes.append(f"{zero.size} zero-length step marker(s) ignored")
        midx = midx[end[midx] > start[midx]]
    return midx[np.argsort(start[midx], kind="stable")]


def _whole_capture(
    ev: pd.DataFrame, act: I64, gpu: bool, launches: _Launches, notes: list[str]
) -> UnitSteps:
    """No step marker: one window ``all`` spanning [first start, last end) of the unit's
    activities ``act`` (ns); on GPU units every GPU activity is in it, launched or not."""
    event_window = np.full(len(ev), -1, dtype=np.int64)
    if gpu:
        event_window[act] = 0
    return UnitSteps(
        gpu,
        (WHOLE_CAPTURE,),
        np.array([ev["start_ns"].to_numpy()[act].min()], np.int64),
        np.array([ev["end_ns"].to_numpy()[act].max()], np.int64),
        np.array([-1], np.int64),
        np.array([-1], np.int64),
        event_window,
        launches.row,
        launches.start_ns,
        0,
        0,
        0,
        tuple(notes),
    )


def _cpu_windows(
    ev: pd.DataFrame,
    midx: I64,
    labels: list[StepLabel],
    keep: npt.NDArray[np.bool_],
    launches: _Launches,
    notes: list[str],
) -> UnitSteps:
    """CPU units: each selected marker's range is its window (ns); activities are clipped to
    the windows by the metrics, so no event gets a window here."""
    ms_all = ev["start_ns"].to_numpy()[midx]
    me_all = ev["end_ns"].to_numpy()[midx]
    kept = np.flatnonzero(keep)
    return UnitSteps(
        False,
        tuple(labels[i] for i in kept),
        ms_all[kept].astype(np.int64),
        me_all[kept].astype(np.int64),
        ms_all[kept].astype(np.int64),
        me_all[kept].astype(np.int64),
        np.full(len(ev), -1, dtype=np.int64),
        launches.row,
        launches.start_ns,
        0,
        0,
        int(midx.size),
        tuple(notes) + _overlap_note(ms_all[kept], me_all[kept]),
        tuple(labels),
    )


def _gpu_windows(
    ev: pd.DataFrame,
    midx: I64,
    labels: list[StepLabel],
    keep: npt.NDArray[np.bool_],
    launches: _Launches,
    notes: list[str],
    queued: npt.NDArray[np.bool_] | None = None,
) -> UnitSteps:
    """GPU units: each GPU activity goes to the innermost marker around its launch; a selected
    marker's window is [first start, last end) of its activities (ns); markers that launched
    nothing give no window (a note names them). Activities with no launch record are in no
    step (counted, with their time, in :class:`UnitSteps`), except work the device queues
    itself (``queued``: MTIA ``dma_request``), which goes to the innermost marker around its
    start, with a note."""
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    gidx = launches.gidx
    ms_all, me_all = start[midx], end[midx]
    ls = launches.start_ns[gidx]
    marker = _launch_markers(ms_all, me_all, ls)
    by_time = (ls == NO_LAUNCH) & (queued[gidx] if queued is not None else False)
    placed = 0
    if np.any(by_time):
        marker[by_time] = _launch_markers(ms_all, me_all, start[gidx[by_time]])
        placed = int((marker[by_time] >= 0).sum())
        notes.append(
            f"{placed} memory activities with no launch record (device-queued DMA) were placed "
            "in steps by their start time"
        )
    unplaced = gidx[(ls == NO_LAUNCH) & (marker < 0)]
    no_launch_ns = measure(start[unplaced], end[unplaced])
    before = _before_capture(ev, unplaced)
    outside = int(((ls != NO_LAUNCH) & (marker < 0)).sum())
    if outside:
        notes.append(
            f"{outside} GPU activities were launched outside every step marker (in no step)"
        )
    marker = np.where(marker >= 0, np.where(keep[np.maximum(marker, 0)], marker, -1), -1)
    assigned = marker >= 0
    m_of = marker[assigned]
    lo, hi, has_work = _marker_spans(m_of, start[gidx[assigned]], end[gidx[assigned]], midx.size)
    empty = np.flatnonzero(keep & ~has_work)
    if empty.size:
        shown = describe_steps([labels[i] for i in empty])
        why = ""
        if unplaced.size:
            # the reader's own reason (args unreadable, correlation unusable) is in its notes
            why = (
                f"; {unplaced.size} GPU activities of this rank have no launch record to "
                "place them by (the reader's notes say why)"
            )
        notes.append(
            f"step{'s' if empty.size > 1 else ''} {shown} launched no GPU work "
            f"({empty.size} marker{'s' if empty.size > 1 else ''}); skipped{why}"
        )
    kept = np.flatnonzero(keep & has_work)
    window_of_marker = np.full(midx.size, -1, dtype=np.int64)
    window_of_marker[kept] = np.arange(kept.size)
    event_window = np.full(len(ev), -1, dtype=np.int64)
    event_window[gidx[assigned]] = window_of_marker[m_of]
    return UnitSteps(
        True,
        tuple(labels[i] for i in kept),
        lo[kept],
        hi[kept],
        ms_all[kept].astype(np.int64),
        me_all[kept].astype(np.int64),
        event_window,
        launches.row,
        launches.start_ns,
        int(unplaced.size),
        outside,
        int(midx.size),
        tuple(notes) + _overlap_note(ms_all, me_all),
        tuple(labels),
        no_launch_ns=no_launch_ns,
        before_capture=before,
    )


def _before_capture(ev: pd.DataFrame, rows: I64) -> int:
    """How many GPU activities of ``rows`` (none of them has its launch in the trace) carry a
    correlation id below every launch call of their process: launched before the capture
    began."""
    if rows.size == 0:
        return 0
    corr = ev["correlation"].to_numpy()
    pid = ev["pid"].to_numpy()
    lidx = np.flatnonzero(in_categories(ev["category"], LAUNCH_CATEGORIES) & (corr >= 0))
    n = 0
    for p in np.unique(pid[rows]).tolist():
        lp = corr[lidx[pid[lidx] == p]]
        if lp.size == 0:
            continue
        mine = corr[rows[pid[rows] == p]]
        n += int(((mine >= 0) & (mine < lp.min())).sum())
    return n


def _launch_markers(ms_all: I64, me_all: I64, launch_start: I64) -> I64:
    """Per launch start (ns; :data:`NO_LAUNCH` for none): the innermost marker containing it, as
    an index into the markers in label order (``ms_all``/``me_all``), -1 for none."""
    # innermost_marker wants markers sorted by (start, end descending, trace order descending)
    order = np.lexsort((-np.arange(ms_all.size), -me_all, ms_all))
    ms, me = ms_all[order], me_all[order]
    enc = _enclosing(ms, me)
    has = launch_start != NO_LAUNCH
    sorted_hit = np.full(launch_start.size, -1, dtype=np.int64)
    sorted_hit[has] = innermost_marker(ms, me, enc, launch_start[has])
    return np.where(sorted_hit >= 0, order[np.maximum(sorted_hit, 0)], -1)


def _marker_spans(
    m_of: I64, start: I64, end: I64, n_markers: int
) -> tuple[I64, I64, npt.NDArray[np.bool_]]:
    """Per marker: [min start, max end) of the activities assigned to it (``m_of``: the marker
    of each activity, ``start``/``end`` in ns), and whether it has any."""
    lo, hi = group_min_max(m_of, start, end, n_markers)
    return lo, hi, np.bincount(m_of, minlength=n_markers) > 0


def _overlap_note(ms: I64, me: I64) -> tuple[str, ...]:
    if ms.size < 2:
        return ()
    order = np.argsort(ms, kind="stable")
    s, e = ms[order], me[order]
    prior_end = np.maximum.accumulate(e)[:-1]
    n = int((s[1:] < prior_end).sum())
    if not n:
        return ()
    return (
        f"{n} step marker(s) start inside an earlier one (nested or overlapping markers): GPU "
        "work goes to the innermost marker around its launch; a CPU step counts everything "
        "inside its own range",
    )


def _empty(
    gpu: bool,
    event_window: I64,
    launch_row: I64,
    launch_start: I64,
    notes: list[str],
    why: str,
) -> UnitSteps:
    z = np.zeros(0, np.int64)
    return UnitSteps(
        gpu,
        (),
        z,
        z.copy(),
        z.copy(),
        z.copy(),
        event_window,
        launch_row,
        launch_start,
        0,
        0,
        0,
        tuple(notes) + (f"{why} found; skipped",),
    )
