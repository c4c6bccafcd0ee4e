"""Step markers, step windows, and which step each activity belongs to.

Rules (docs "Steps"):
  - A step marker is a host range (category ``annotation``) whose name matches the step regex
    (default ``^ProfilerStep#(\\d+)$``; ``--step-regex`` for ranges like ``train_step``).
    The step's label is the regex's first group when it is a number, else the marker's ordinal.
  - GPU ranks: a GPU activity (kernel / memcpy / memset) belongs to step N when the runtime/driver
    call that launched it (same ``pid`` and ``correlation``) starts inside N's marker range
    (half-open ``[start, end)``). The window is [first start, last end] of the step's activities.
  - CPU ranks: the window is the marker range itself; activities are clipped to it (metrics.py).
  - No markers on a rank: one window labelled ``all`` spanning that rank's activities.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from .errors import UsageError
from .model import GPU_ACTIVITY_CATEGORIES, LAUNCH_CATEGORIES, Timeline

DEFAULT_STEP_REGEX = r"^ProfilerStep#(\d+)$"

WINDOW_COLUMNS = (
    "rank",
    "step",
    "step_index",
    "start_ns",
    "end_ns",
    "marker_start_ns",
    "marker_end_ns",
)


@dataclass(frozen=True)
class StepTable:
    """Step windows and the step of every event.

    ``windows``: one row per (rank, step) with ``step`` (int marker number or ``"all"``),
    ``step_index`` (row number, used as group id everywhere), ``start_ns``/``end_ns`` (the window),
    and the marker range (``-1`` for ``all`` windows).
    ``event_step``: per event row of the timeline, the ``step_index`` it belongs to, or -1.
    ``no_launch``: rank -> GPU activities whose launch row was not found (cannot be placed in a step).
    ``outside``: rank -> GPU activities whose launch lies outside every step marker.
    """

    windows: pd.DataFrame
    event_step: npt.NDArray[np.int64]
    no_launch: dict[int, int] = field(default_factory=dict)
    outside: dict[int, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def parse_step_range(spec: str | None) -> tuple[int, int] | None:
    """``"3-7"`` -> (3, 7); ``"5"`` -> (5, 5); None -> None."""
    if spec is None or spec == "":
        return None
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", spec)
    if not m:
        raise UsageError(f"--steps {spec!r}: expected N or N-M (e.g. 3-7)")
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) is not None else lo
    if hi < lo:
        raise UsageError(f"--steps {spec!r}: the range is empty ({hi} < {lo})")
    return lo, hi


def _labels(names: list[str], rx: re.Pattern[str]) -> list[Any]:
    labels: list[Any] = []
    for name in names:
        m = rx.search(name)
        g = m.group(1) if m is not None and m.groups() else None
        labels.append(int(g) if g is not None and g.isdigit() else None)
    if any(lbl is None for lbl in labels) or len(set(labels)) != len(labels):
        return list(range(len(names)))  # ordinal when the marker carries no unique number
    return labels


def _join_key(pid: npt.NDArray[np.int64], corr: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    # correlation ids repeat across processes: key on (pid, correlation)
    return (pid.astype(np.int64) << np.int64(32)) ^ (corr.astype(np.int64) & np.int64(0xFFFFFFFF))


def assign_steps(
    timeline: Timeline,
    step_regex: str | None = None,
    step_range: tuple[int, int] | None = None,
) -> StepTable:
    """Find the step windows of every rank and the step of every event (see module docstring)."""
    pattern = step_regex or DEFAULT_STEP_REGEX
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"--step-regex {pattern!r} is not a valid regex: {exc}") from None

    ev = timeline.events
    n = len(ev)
    event_step = np.full(n, -1, dtype=np.int64)
    rows: list[dict[str, Any]] = []
    no_launch: dict[int, int] = {}
    outside: dict[int, int] = {}
    notes: list[str] = []

    rank_arr = ev["rank"].to_numpy()
    cat_arr = ev["category"].to_numpy(dtype=object)
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    kind = ev["kind"].to_numpy(dtype=object) if "kind" in ev.columns else None

    name_cats = ev["name"].cat.categories
    is_marker_name = np.fromiter(
        (rx.search(str(s)) is not None for s in name_cats), bool, len(name_cats)
    )
    codes = ev["name"].cat.codes.to_numpy()
    is_marker = (cat_arr == "annotation") & np.where(
        codes >= 0, is_marker_name[np.maximum(codes, 0)], False
    )
    is_gpu_act = np.isin(cat_arr, GPU_ACTIVITY_CATEGORIES)
    is_launch = np.isin(cat_arr, LAUNCH_CATEGORIES)
    if kind is not None:
        is_activity = kind != "none"
    else:
        is_activity = is_gpu_act

    for rank in sorted(np.unique(rank_arr).tolist()):
        on_rank = rank_arr == rank
        gpu_rank = bool((on_rank & is_gpu_act).any())
        midx = np.flatnonzero(on_rank & is_marker)
        midx = midx[np.argsort(start[midx], kind="stable")]
        if midx.size == 0:
            act = np.flatnonzero(on_rank & (is_gpu_act if gpu_rank else is_activity))
            if act.size == 0:
                notes.append(f"rank {rank}: no activity found; rank skipped")
                continue
            idx = len(rows)
            rows.append(
                {
                    "rank": rank,
                    "step": "all",
                    "step_index": idx,
                    "start_ns": int(start[act].min()),
                    "end_ns": int(end[act].max()),
                    "marker_start_ns": -1,
                    "marker_end_ns": -1,
                }
            )
            event_step[act] = idx
            notes.append(
                f"rank {rank}: no step markers matching {pattern!r}; the whole capture is one window 'all'"
            )
            continue

        labels = _labels([str(ev["name"].iat[i]) for i in midx], rx)
        ms, me = start[midx], end[midx]
        keep_m = np.ones(midx.size, dtype=bool)
        if step_range is not None:
            keep_m = np.array(
                [isinstance(lbl, int) and step_range[0] <= lbl <= step_range[1] for lbl in labels],
                bool,
            )
        base = len(rows)
        # marker i -> global step_index (or -1 when filtered out)
        m_index = np.full(midx.size, -1, dtype=np.int64)
        m_index[keep_m] = base + np.arange(int(keep_m.sum()))

        def marker_of(
            t: npt.NDArray[np.int64], ms: Any = ms, me: Any = me
        ) -> npt.NDArray[np.int64]:
            i = np.searchsorted(ms, t, side="right") - 1
            ok = (i >= 0) & (t < me[np.maximum(i, 0)])
            return np.where(ok, i, -1)

        if gpu_rank:
            lidx = np.flatnonzero(on_rank & is_launch & (ev["correlation"].to_numpy() >= 0))
            gidx = np.flatnonzero(on_rank & is_gpu_act)
            corr = ev["correlation"].to_numpy()
            pid = ev["pid"].to_numpy()
            lkey = _join_key(pid[lidx], corr[lidx])
            order = np.argsort(lkey, kind="stable")
            lkey_sorted = lkey[order]
            gkey = _join_key(pid[gidx], corr[gidx])
            found = np.zeros(gidx.size, dtype=bool)
            launch_rows = np.zeros(gidx.size, dtype=np.int64)
            if lkey_sorted.size:
                pos = np.minimum(np.searchsorted(lkey_sorted, gkey), lkey_sorted.size - 1)
                found = (lkey_sorted[pos] == gkey) & (corr[gidx] >= 0)
                launch_rows = lidx[order[pos]]
            mk = np.full(gidx.size, -1, dtype=np.int64)
            if found.any():
                mk[found] = marker_of(start[launch_rows[found]])
            step_of = np.where(mk >= 0, m_index[np.maximum(mk, 0)], -1)
            event_step[gidx] = step_of
            missing = int((~found).sum())
            if missing:
                no_launch[rank] = missing
            n_out = int((found & (mk < 0)).sum())
            if n_out:
                outside[rank] = n_out
            for j in np.flatnonzero(keep_m):
                sel = gidx[step_of == m_index[j]]
                if sel.size == 0:
                    notes.append(
                        f"rank {rank}: step {labels[j]} launched no GPU work; step skipped"
                    )
                    continue
                rows.append(
                    {
                        "rank": rank,
                        "step": labels[j],
                        "step_index": int(m_index[j]),
                        "start_ns": int(start[sel].min()),
                        "end_ns": int(end[sel].max()),
                        "marker_start_ns": int(ms[j]),
                        "marker_end_ns": int(me[j]),
                    }
                )
        else:
            aidx = np.flatnonzero(on_rank & is_activity)
            mk = marker_of(start[aidx])
            event_step[aidx] = np.where(mk >= 0, m_index[np.maximum(mk, 0)], -1)
            for j in np.flatnonzero(keep_m):
                rows.append(
                    {
                        "rank": rank,
                        "step": labels[j],
                        "step_index": int(m_index[j]),
                        "start_ns": int(ms[j]),
                        "end_ns": int(me[j]),
                        "marker_start_ns": int(ms[j]),
                        "marker_end_ns": int(me[j]),
                    }
                )

    windows = pd.DataFrame(rows, columns=list(WINDOW_COLUMNS))
    # step_index must be the row number: renumber densely (skipped steps leave holes)
    if len(windows):
        remap = np.full(int(windows["step_index"].max()) + 1, -1, dtype=np.int64)
        remap[windows["step_index"].to_numpy()] = np.arange(len(windows))
        valid = event_step >= 0
        event_step[valid] = remap[event_step[valid]]
        windows["step_index"] = np.arange(len(windows))
    else:
        event_step[:] = -1
    windows["step"] = windows["step"].astype(object)
    for col in ("rank", "step_index", "start_ns", "end_ns", "marker_start_ns", "marker_end_ns"):
        windows[col] = windows[col].astype(np.int64)
    return StepTable(windows, event_step, no_launch, outside, tuple(notes))
