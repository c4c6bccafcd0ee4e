"""Per (rank, step) overlap metrics and the bottleneck of each step.

With C = union of compute intervals, M = union of comm intervals, B = union of all activities
(compute, comm, memory) of the step, and |X| the total length of X (docs "Per (rank, step)"):

  step_ns          window length
  compute_ns       |C|            comm_ns |M|          memory_ns |union of memory|
  overlap_ns       |C ∩ M|        (communication hidden behind computation)
  exposed_comm_ns  |M| - |C ∩ M|  (communication nothing hid)
  overlap_ratio    overlap / comm; None when comm is 0
  idle_ns          step - |B|
  ideal_ns         step - exposed + max(0, |M| - |C|)
  potential_speedup step / ideal; None when ideal is 0
  exposed_comm_ratio exposed / step, idle_ratio idle / step (None when step is 0)

Bottleneck, first match wins:
  communication-bound    |M| > |C|
  exposed-communication  exposed >= exposed_ratio x step   (default 10 %)
  idle-bound             idle >= idle_ratio x step         (default 20 %)
  compute-bound          otherwise
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from . import intervals as iv
from .model import Timeline
from .steps import StepTable

KIND_CODES = {"compute": 0, "comm": 1, "memory": 2}

STEP_COLUMNS = (
    "rank",
    "step",
    "step_ns",
    "compute_ns",
    "comm_ns",
    "memory_ns",
    "overlap_ns",
    "exposed_comm_ns",
    "idle_ns",
    "overlap_ratio",
    "ideal_ns",
    "potential_speedup",
    "exposed_comm_ratio",
    "idle_ratio",
    "bottleneck",
    "reason",
    "start_ns",
    "end_ns",
)

NS_METRICS = (
    "step_ns",
    "compute_ns",
    "comm_ns",
    "memory_ns",
    "overlap_ns",
    "exposed_comm_ns",
    "idle_ns",
    "ideal_ns",
)
RATIO_METRICS = ("overlap_ratio", "potential_speedup", "exposed_comm_ratio", "idle_ratio")

BOTTLENECKS = ("communication-bound", "exposed-communication", "idle-bound", "compute-bound")


@dataclass(frozen=True)
class Thresholds:
    """Bottleneck thresholds, as shares of the step (0-1)."""

    exposed_ratio: float = 0.10
    idle_ratio: float = 0.20


@dataclass(frozen=True)
class ActivityRows:
    """Activity intervals per step window: group = step_index, kind code, start/end (ns).

    ``event_row`` is the row in the timeline's event table each interval came from.
    """

    group: npt.NDArray[np.int64]
    kind: npt.NDArray[np.int8]
    start_ns: npt.NDArray[np.int64]
    end_ns: npt.NDArray[np.int64]
    event_row: npt.NDArray[np.int64]


def activity_rows(
    timeline: Timeline, steps: StepTable, only: list[int] | None = None
) -> ActivityRows:
    """Every activity of every window as (window, kind, start, end), CPU windows clipped.

    GPU windows take the activities assigned to them (by launch); CPU windows take every
    activity of the rank that overlaps the marker range, clipped to it.
    """
    ev = timeline.events
    kind_all = (
        ev["kind"].cat.codes.to_numpy().astype(np.int8)
    )  # compute 0, comm 1, memory 2, none 3
    is_act = kind_all < 3
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    rank = ev["rank"].to_numpy()
    win = steps.windows
    if only is not None:
        win = win[win["step_index"].isin(only)]
    gpu_ranks = set(timeline.gpu_ranks().tolist())

    parts: list[tuple[Any, ...]] = []
    gpu_win = win[win["rank"].isin(gpu_ranks) | (win["step"].astype(str) == "all")]
    if len(gpu_win):
        sel = np.flatnonzero(is_act & np.isin(steps.event_step, gpu_win["step_index"].to_numpy()))
        parts.append((steps.event_step[sel], kind_all[sel], start[sel], end[sel], sel))
    cpu_win = win[~win.index.isin(gpu_win.index)]
    for r, group in cpu_win.groupby("rank", sort=True):
        cand = np.flatnonzero(is_act & (rank == r))
        cs, ce = start[cand], end[cand]
        for w_idx, ws, we in zip(
            group["step_index"].to_numpy(),
            group["start_ns"].to_numpy(),
            group["end_ns"].to_numpy(),
            strict=True,
        ):
            m = (cs < we) & (ce > ws)
            sel = cand[m]
            parts.append(
                (
                    np.full(sel.size, w_idx, dtype=np.int64),
                    kind_all[sel],
                    np.maximum(cs[m], ws),
                    np.minimum(ce[m], we),
                    sel,
                )
            )
    if not parts:
        z = np.zeros(0, np.int64)
        return ActivityRows(z, np.zeros(0, np.int8), z, z, z)
    return ActivityRows(
        np.concatenate([p[0] for p in parts]).astype(np.int64),
        np.concatenate([p[1] for p in parts]).astype(np.int8),
        np.concatenate([p[2] for p in parts]).astype(np.int64),
        np.concatenate([p[3] for p in parts]).astype(np.int64),
        np.concatenate([p[4] for p in parts]).astype(np.int64),
    )


GroupedSet = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]


def grouped_sets(acts: ActivityRows, n_groups: int) -> dict[str, GroupedSet]:
    """Grouped disjoint interval sets per window: compute, comm, memory, busy, overlap, exposed."""
    out: dict[str, GroupedSet] = {}
    for name, code in KIND_CODES.items():
        m = acts.kind == code
        out[name] = iv.grouped_union(acts.group[m], acts.start_ns[m], acts.end_ns[m], n_groups)
    out["busy"] = iv.grouped_union(acts.group, acts.start_ns, acts.end_ns, n_groups)
    out["overlap"] = iv.grouped_intersect(out["compute"], out["comm"], n_groups)
    out["exposed"] = iv.grouped_subtract(out["comm"], out["compute"], n_groups)
    return out


def _measure(s: GroupedSet, n_groups: int) -> npt.NDArray[np.int64]:
    g, a, b = s
    return np.bincount(g, weights=(b - a), minlength=n_groups).astype(np.int64)


def _ms(ns: int | float) -> str:
    return f"{ns / 1e6:.2f} ms"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def classify_bottleneck(
    step_ns: int, compute_ns: int, comm_ns: int, exposed_ns: int, idle_ns: int, th: Thresholds
) -> tuple[str, str]:
    """The bottleneck class of one step and a one-line reason with the numbers that decided it."""
    if comm_ns > compute_ns:
        return (
            "communication-bound",
            f"comm {_ms(comm_ns)} > compute {_ms(compute_ns)}: even perfect overlap leaves "
            f"{_ms(comm_ns - compute_ns)} exposed",
        )
    if step_ns > 0 and exposed_ns >= th.exposed_ratio * step_ns:
        return (
            "exposed-communication",
            f"exposed comm {_ms(exposed_ns)} = {_pct(exposed_ns / step_ns)} of the step "
            f"(>= {_pct(th.exposed_ratio)}) while compute {_ms(compute_ns)} >= comm {_ms(comm_ns)}: "
            "schedule comm earlier / smaller or reordered buckets",
        )
    if step_ns > 0 and idle_ns >= th.idle_ratio * step_ns:
        return (
            "idle-bound",
            f"idle {_ms(idle_ns)} = {_pct(idle_ns / step_ns)} of the step (>= {_pct(th.idle_ratio)}): "
            "the device waits for the host or a peer",
        )
    exp_share = exposed_ns / step_ns if step_ns else 0.0
    idle_share = idle_ns / step_ns if step_ns else 0.0
    return (
        "compute-bound",
        f"compute {_ms(compute_ns)} >= comm {_ms(comm_ns)}, exposed {_pct(exp_share)} < "
        f"{_pct(th.exposed_ratio)}, idle {_pct(idle_share)} < {_pct(th.idle_ratio)}",
    )


def _ratio(num: npt.NDArray[np.int64], den: npt.NDArray[np.int64]) -> list[float | None]:
    return [
        float(a) / float(b) if b > 0 else None
        for a, b in zip(num.tolist(), den.tolist(), strict=True)
    ]


def compute_step_metrics(
    timeline: Timeline, steps: StepTable, thresholds: Thresholds | None = None
) -> pd.DataFrame:
    """One row per step window with the columns of :data:`STEP_COLUMNS` (see module docstring)."""
    th = thresholds or Thresholds()
    win = steps.windows
    n = len(win)
    if n == 0:
        return pd.DataFrame(columns=list(STEP_COLUMNS))
    acts = activity_rows(timeline, steps)
    sets = grouped_sets(acts, n)
    compute = _measure(sets["compute"], n)
    comm = _measure(sets["comm"], n)
    memory = _measure(sets["memory"], n)
    busy = _measure(sets["busy"], n)
    overlap = _measure(sets["overlap"], n)
    step = (win["end_ns"].to_numpy() - win["start_ns"].to_numpy()).astype(np.int64)
    exposed = comm - overlap
    idle = step - busy
    ideal = step - exposed + np.maximum(0, comm - compute)
    bottleneck, reason = zip(
        *(
            classify_bottleneck(s, c, m, e, i, th)
            for s, c, m, e, i in zip(
                step.tolist(),
                compute.tolist(),
                comm.tolist(),
                exposed.tolist(),
                idle.tolist(),
                strict=True,
            )
        ),
        strict=True,
    )
    df = pd.DataFrame(
        {
            "rank": win["rank"].to_numpy(),
            "step": win["step"].to_numpy(dtype=object),
            "step_ns": step,
            "compute_ns": compute,
            "comm_ns": comm,
            "memory_ns": memory,
            "overlap_ns": overlap,
            "exposed_comm_ns": exposed,
            "idle_ns": idle,
            "overlap_ratio": pd.array(_ratio(overlap, comm), dtype=object),
            "ideal_ns": ideal,
            "potential_speedup": pd.array(_ratio(step, ideal), dtype=object),
            "exposed_comm_ratio": pd.array(_ratio(exposed, step), dtype=object),
            "idle_ratio": pd.array(_ratio(idle, step), dtype=object),
            "bottleneck": list(bottleneck),
            "reason": list(reason),
            "start_ns": win["start_ns"].to_numpy(),
            "end_ns": win["end_ns"].to_numpy(),
        },
        columns=list(STEP_COLUMNS),
    )
    return df


def step_sets(
    timeline: Timeline, steps: StepTable, step_index: int
) -> dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]:
    """Disjoint interval sets of one step, for drawing: compute, comm, memory, busy, overlap, exposed."""
    acts = activity_rows(timeline, steps, only=[step_index])
    m = acts.group == step_index
    sub = ActivityRows(
        np.zeros(int(m.sum()), np.int64),
        acts.kind[m],
        acts.start_ns[m],
        acts.end_ns[m],
        acts.event_row[m],
    )
    sets = grouped_sets(sub, 1)
    return {k: (v[1], v[2]) for k, v in sets.items()}


# --- summaries ----------------------------------------------------------------------------


def _stats(values: pd.Series) -> dict[str, float | int | None]:
    v = pd.to_numeric(values, errors="coerce").dropna().astype(float)
    if v.empty:
        return {"mean": None, "median": None, "p90": None, "min": None, "max": None}
    return {
        "mean": float(v.mean()),
        "median": float(v.median()),
        "p90": float(np.percentile(v.to_numpy(), 90)),
        "min": float(v.min()),
        "max": float(v.max()),
    }


def summarize(df: pd.DataFrame) -> dict[str, Any]:
    """Mean / median / p90 / min / max of each metric over steps, totals, aggregate ratios,
    bottleneck counts, the worst (most exposed) and slowest step."""
    out: dict[str, Any] = {"n_steps": int(len(df))}
    if df.empty:
        return out
    metrics: dict[str, Any] = {}
    for col in NS_METRICS + RATIO_METRICS:
        metrics[col] = _stats(df[col])
    out["metrics"] = metrics
    totals = {col: int(df[col].sum()) for col in NS_METRICS}
    out["totals"] = totals
    tc, ts = totals["comm_ns"], totals["step_ns"]
    out["overlap_ratio"] = totals["overlap_ns"] / tc if tc else None
    out["exposed_comm_ratio"] = totals["exposed_comm_ns"] / ts if ts else None
    out["idle_ratio"] = totals["idle_ns"] / ts if ts else None
    out["potential_speedup"] = ts / totals["ideal_ns"] if totals["ideal_ns"] else None
    counts = df["bottleneck"].value_counts()
    out["bottlenecks"] = {b: int(counts.get(b, 0)) for b in BOTTLENECKS if counts.get(b, 0)}
    # ties resolve in BOTTLENECKS order: the more actionable class first
    out["dominant_bottleneck"] = max(
        BOTTLENECKS, key=lambda b: (int(counts.get(b, 0)), -BOTTLENECKS.index(b))
    )
    worst = df.loc[df["exposed_comm_ns"].astype(np.int64).idxmax()]
    slowest = df.loc[df["step_ns"].astype(np.int64).idxmax()]
    out["worst_step"] = {
        "rank": int(worst["rank"]),
        "step": worst["step"],
        "exposed_comm_ns": int(worst["exposed_comm_ns"]),
        "step_ns": int(worst["step_ns"]),
        "bottleneck": worst["bottleneck"],
        "reason": worst["reason"],
    }
    out["slowest_step"] = {
        "rank": int(slowest["rank"]),
        "step": slowest["step"],
        "step_ns": int(slowest["step_ns"]),
    }
    return out
