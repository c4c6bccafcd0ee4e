"""What an optimisation changed: a baseline run and a candidate run, side by side.

Medians are taken over every (rank, step) row of a run (the run summary's medians), so runs with a
different number of ranks or steps still compare. All times are integer nanoseconds in, float
nanoseconds out for medians (a median of two rows may fall between them).

  - ``metrics``: one row per metric (step, compute, comm, overlap ratio, exposed comm and its
    split into waiting / transfer and causes, memory, idle): baseline median, candidate median,
    ``delta`` = candidate - baseline, ``change_ratio`` = delta / baseline (None when baseline is
    0 or either side is missing).
  - ``step_speedup`` = baseline median step / candidate median step (> 1: the candidate is faster).
  - ``main_change``: the time metric (other than the step itself) whose median moved most.
  - the dominant verdict of each run and whether it changed.
  - ``collectives``: collectives whose exposure changed most. A collective is identified across
    runs by its kind and its position among the collectives of that kind within a step
    (``all_reduce #3``), since the instances themselves differ between runs; its exposure is the
    median over (rank, step) of that collective's exposed ns (0 where a run does not have it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .results import Analysis
from .vocab import CAUSE_WORDS, Cause

#: (step column, label) in report order.
COMPARED_METRICS: tuple[tuple[str, str], ...] = (
    ("step_ns", "step"),
    ("compute_ns", "compute"),
    ("comm_ns", "comm"),
    ("overlap_ratio", "overlap ratio"),
    ("exposed_comm_ns", "exposed comm"),
    ("exposed_wait_ns", f"  {CAUSE_WORDS[Cause.WAIT]}"),
    ("exposed_tail_ns", f"  {CAUSE_WORDS[Cause.TAIL]}"),
    ("exposed_dependency_ns", f"  {CAUSE_WORDS[Cause.DEPENDENCY]}"),
    ("exposed_host_ns", f"  {CAUSE_WORDS[Cause.HOST]}"),
    ("memory_only_ns", "memory only"),
    ("idle_ns", "idle"),
)
#: Metrics a main change is chosen from.
MAIN_CHANGE_METRICS = ("compute_ns", "comm_ns", "exposed_comm_ns", "memory_only_ns", "idle_ns")

METRIC_COLUMNS = ("metric", "label", "baseline", "candidate", "delta", "change_ratio")
COLLECTIVE_COLUMNS = (
    "collective",
    "name",
    "position",
    "baseline_exposed_ns",
    "candidate_exposed_ns",
    "delta_ns",
    "baseline_count",
    "candidate_count",
)


@dataclass(frozen=True)
class Comparison:
    """Baseline vs candidate (see the module docstring). ``top`` collectives are kept."""

    baseline: Analysis
    candidate: Analysis
    baseline_label: str
    candidate_label: str
    metrics: pd.DataFrame
    step_speedup: float | None
    main_change: str | None
    baseline_bottleneck: str | None
    candidate_bottleneck: str | None
    collectives: pd.DataFrame
    notes: tuple[str, ...]
    baseline_bottlenecks: dict[str, int]
    candidate_bottlenecks: dict[str, int]

    @property
    def bottleneck_changed(self) -> bool:
        return self.baseline_bottleneck != self.candidate_bottleneck

    def metric(self, name: str) -> dict[str, Any]:
        row = self.metrics[self.metrics["metric"] == name]
        if row.empty:
            raise KeyError(name)
        return {str(k): (None if _nan(v) else v) for k, v in row.iloc[0].to_dict().items()}


def _nan(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def _median(steps: pd.DataFrame, col: str) -> float | None:
    if col not in steps.columns:
        return None
    v = pd.to_numeric(steps[col], errors="coerce").dropna()
    return float(v.median()) if len(v) else None


def _collective_profile(analysis: Analysis) -> pd.DataFrame:
    """Per (kind, position within the step): median exposed ns over (rank, step), and count."""
    coll = analysis.collectives
    if coll is None or coll.per_rank.empty:
        return pd.DataFrame(columns=["name", "position", "exposed_ns", "count"])
    df = coll.per_rank.sort_values(["unit", "window", "start_ns"], kind="stable")
    df = df.assign(position=df.groupby(["unit", "window", "name"]).cumcount() + 1)
    g = df.groupby(["name", "position"], sort=True)
    return pd.DataFrame(
        {"exposed_ns": g["exposed_ns"].median(), "count": g["exposed_ns"].size()}
    ).reset_index()


def _per_step_counts(analysis: Analysis) -> dict[str, int]:
    """Per collective kind: how many a step issues (median over (rank, step) of the count)."""
    coll = analysis.collectives
    if coll is None or coll.per_rank.empty:
        return {}
    n = coll.per_rank.groupby(["name", "unit", "window"]).size()
    return {str(k): int(v) for k, v in n.groupby(level="name").median().items()}


def _pairing_notes(baseline: Analysis, candidate: Analysis) -> list[str]:
    """Collectives are paired by position within a step (``all_reduce #6`` with ``#6``): when
    the runs issue a different number of a kind per step (30 per-parameter all-reduces vs 3
    buckets), the pairs are not the same collective, and the comparison says so."""
    b, c = _per_step_counts(baseline), _per_step_counts(candidate)
    out = []
    for name in sorted(set(b) & set(c)):
        if b[name] != c[name]:
            out.append(
                f"the runs issue different {name} collectives per step ({b[name]} vs {c[name]}): "
                f"'{name} #N' pairs the N-th of each step, not the same collective; compare the "
                "totals (exposed comm) rather than the pairs"
            )
    return out


def _main_change(metrics: pd.DataFrame) -> str | None:
    m = metrics[metrics["metric"].isin(MAIN_CHANGE_METRICS)]
    m = m[m["delta"].notna() & (m["delta"] != 0)]
    if m.empty:
        return None
    return str(m.iloc[int(np.argmax(m["delta"].abs().to_numpy()))]["metric"])


def compare(
    baseline: Analysis,
    candidate: Analysis,
    *,
    baseline_label: str = "baseline",
    candidate_label: str = "candidate",
    top: int = 10,
) -> Comparison:
    """Compare two analysed runs (see the module docstring)."""
    rows = []
    both_multi = baseline.multi_rank and candidate.multi_rank
    for col, label in COMPARED_METRICS:
        if col == "exposed_wait_ns" and not both_multi:
            continue  # waiting for peers only compares between two multi-rank runs
        b, c = _median(baseline.steps, col), _median(candidate.steps, col)
        if b is None and c is None:
            continue
        delta = None if b is None or c is None else c - b
        rows.append(
            {
                "metric": col,
                "label": label,
                "baseline": b,
                "candidate": c,
                "delta": delta,
                "change_ratio": (delta / b) if (delta is not None and b) else None,
            }
        )
    metrics = pd.DataFrame(rows, columns=list(METRIC_COLUMNS)).astype(object)
    metrics = metrics.where(metrics.notna(), None)
    b_step, c_step = _median(baseline.steps, "step_ns"), _median(candidate.steps, "step_ns")
    speedup = b_step / c_step if b_step is not None and c_step else None

    bp, cp = _collective_profile(baseline), _collective_profile(candidate)
    both = bp.merge(cp, on=["name", "position"], how="outer", suffixes=("_b", "_c"))
    both = both.fillna({"exposed_ns_b": 0.0, "exposed_ns_c": 0.0, "count_b": 0, "count_c": 0})
    both["delta"] = both["exposed_ns_c"] - both["exposed_ns_b"]
    both["abs"] = both["delta"].abs()
    both = both.sort_values(["abs", "name", "position"], ascending=[False, True, True])
    both = both[both["abs"] > 0].head(top)
    collectives = pd.DataFrame(
        {
            "collective": [
                f"{n} #{p}" for n, p in zip(both["name"], both["position"], strict=True)
            ],
            "name": both["name"].astype(str).to_numpy(),
            "position": both["position"].to_numpy().astype(np.int64),
            "baseline_exposed_ns": both["exposed_ns_b"].to_numpy().astype(float),
            "candidate_exposed_ns": both["exposed_ns_c"].to_numpy().astype(float),
            "delta_ns": both["delta"].to_numpy().astype(float),
            "baseline_count": both["count_b"].to_numpy().astype(np.int64),
            "candidate_count": both["count_c"].to_numpy().astype(np.int64),
        },
        columns=list(COLLECTIVE_COLUMNS),
    )
    notes = [f"{baseline_label}: {n}" for n in baseline.notes]
    notes += [f"{candidate_label}: {n}" for n in candidate.notes]
    notes[:0] = _pairing_notes(baseline, candidate) if not collectives.empty else []
    nb, nc = len(baseline.traces), len(candidate.traces)
    if nb != nc:
        notes.insert(
            0,
            f"the runs have different rank counts ({nb} vs {nc}): medians are over every "
            "(rank, step) of each run",
        )
    return Comparison(
        baseline=baseline,
        candidate=candidate,
        baseline_label=baseline_label,
        candidate_label=candidate_label,
        metrics=metrics,
        step_speedup=speedup,
        main_change=_main_change(metrics),
        baseline_bottleneck=baseline.summary.run.dominant_bottleneck,
        candidate_bottleneck=candidate.summary.run.dominant_bottleneck,
        collectives=collectives,
        notes=tuple(notes),
        baseline_bottlenecks=dict(baseline.summary.run.bottlenecks),
        candidate_bottlenecks=dict(candidate.summary.run.bottlenecks),
    )
