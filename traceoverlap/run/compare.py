"""What an optimisation changed: a baseline run and a candidate run, side by side.

Medians are taken over every (rank, step) row of a run (the run summary's medians), so runs with a
different number of ranks or steps still compare. All times are integer nanoseconds in, float
nanoseconds out for medians (a median of two rows may fall between them).

  - ``metrics``: one row per metric (step, compute, comm, overlap ratio, exposed comm and its
    split into waiting / transfer and causes, memory, idle): baseline median, candidate median,
    ``delta`` = candidate - baseline, ``change_ratio`` = delta / baseline (None when baseline is
    0 or either side is missing). The overlap ratio is not a median: it is each run's aggregate
    (total overlap / total comm, docs/metrics.md "Summaries"), the figure ``analyze`` prints as
    "overlap ratio" for the same run: one number, one meaning.
  - ``step_speedup`` = baseline median step / candidate median step (> 1: the candidate is faster).
  - ``main_change``: the time metric (other than the step itself) whose median moved most.
  - the dominant verdict of each run and whether it changed.
  - ``collectives``: collectives whose exposure changed most. The instances themselves differ
    between runs, so a collective is identified by its key (name, purpose, bytes when known) and
    its order among the collectives of that key within a step (``all_reduce #3``;
    ``paired_by`` = "order"); its exposure is the median over (rank, step) of that collective's
    exposed ns (0 where a run does not have it). Pairing needs the runs' collectives to
    correspond: when, within a family, the runs issue different keys or counts per step (30
    per-parameter all-reduces against 3 buckets), that family is compared as a whole
    (``AllReduce (the family per step)``, ``paired_by`` = "family": the median over (rank, step)
    of the family's exposed ns summed per step), and a note says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..core import fmt
from ..core.schema import (
    COMM_NS,
    COMPARE_COLLECTIVES,
    COMPARE_METRICS,
    COMPUTE_NS,
    EXPOSED_COMM_NS,
    EXPOSED_DEPENDENCY_NS,
    EXPOSED_HOST_NS,
    EXPOSED_NS,
    EXPOSED_TAIL_NS,
    EXPOSED_WAIT_NS,
    IDLE_NS,
    MEMORY_ONLY_NS,
    OVERLAP_RATIO,
    RATIO_METRICS,
    STEP_NS,
)
from ..core.vocab import CAUSE_WORDS, PURPOSES, Cause, Purpose
from .results import Analysis

#: (step column, label) in report order.
COMPARED_METRICS: tuple[tuple[str, str], ...] = (
    (STEP_NS.name, "step"),
    (COMPUTE_NS.name, "compute"),
    (COMM_NS.name, "comm"),
    (OVERLAP_RATIO.name, "overlap ratio"),
    (EXPOSED_COMM_NS.name, "exposed comm"),
    (EXPOSED_WAIT_NS.name, f"  {CAUSE_WORDS[Cause.WAIT]}"),
    (EXPOSED_TAIL_NS.name, f"  {CAUSE_WORDS[Cause.TAIL]}"),
    (EXPOSED_DEPENDENCY_NS.name, f"  {CAUSE_WORDS[Cause.DEPENDENCY]}"),
    (EXPOSED_HOST_NS.name, f"  {CAUSE_WORDS[Cause.HOST]}"),
    (MEMORY_ONLY_NS.name, "memory only"),
    (IDLE_NS.name, "idle"),
)
#: Metrics a main change is chosen from.
MAIN_CHANGE_METRICS = tuple(
    c.name for c in (COMPUTE_NS, COMM_NS, EXPOSED_COMM_NS, MEMORY_ONLY_NS, IDLE_NS)
)

METRIC_COLUMNS = COMPARE_METRICS.names
COLLECTIVE_COLUMNS = COMPARE_COLLECTIVES.names


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


def _keyed(analysis: Analysis) -> pd.DataFrame:
    """Every collective of every (rank, step) with its pairing key: ``family``, ``name``,
    ``purpose`` ("" unknown), ``bytes`` (-1 unknown), in start order within its step."""
    coll = analysis.collectives
    cols = ["unit", "window", "start_ns", "family", "name", "purpose", "bytes", EXPOSED_NS.name]
    if coll is None or coll.per_rank.empty:
        return pd.DataFrame(columns=cols)
    df = coll.per_rank.sort_values(["unit", "window", "start_ns"], kind="stable")
    inst = coll.instances.drop_duplicates("instance")
    nbytes = inst.set_index("instance")["bytes"] if "bytes" in inst.columns else None
    b = df["instance"].map(nbytes) if nbytes is not None else pd.Series(np.nan, index=df.index)
    purpose = df["purpose"] if "purpose" in df.columns else pd.Series("", index=df.index)
    return df.assign(
        family=df["family"].astype(str),
        name=df["name"].astype(str),
        purpose=purpose.fillna("").astype(str),
        bytes=pd.to_numeric(b, errors="coerce").fillna(-1).astype(np.int64),
    )[cols]


_KEY = ["name", "purpose", "bytes"]


def _per_step(df: pd.DataFrame) -> dict[str, dict[tuple[str, str, int], int]]:
    """Per family: how many of each (name, purpose, bytes) a step issues (the median over the
    (rank, step)s that issue it)."""
    if df.empty:
        return {}
    n = df.groupby(["family", *_KEY, "unit", "window"]).size()
    med = n.groupby(level=["family", *_KEY]).median()
    out: dict[str, dict[tuple[str, str, int], int]] = {}
    for (fam, name, purpose, nbytes), v in med.items():
        out.setdefault(str(fam), {})[(str(name), str(purpose), int(nbytes))] = int(v)
    return out


def _by_order(df: pd.DataFrame, qualified: set[str]) -> pd.DataFrame:
    """Collectives paired by key and their order within the key in a step: median exposed ns over
    (rank, step) and how many (rank, step) have it. ``qualified``: names shown with purpose
    and size (a run issues that name with several)."""
    cols = ["collective", "name", "position", EXPOSED_NS.name, "count", "paired_by"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    df = df.assign(position=df.groupby(["unit", "window", *_KEY]).cumcount() + 1)
    g = df.groupby([*_KEY, "position"], sort=True)[EXPOSED_NS.name]
    out = pd.DataFrame({EXPOSED_NS.name: g.median(), "count": g.size()}).reset_index()
    out["collective"] = [
        f"{n} ({p or PURPOSES[Purpose.UNKNOWN]}, {fmt.size(b, 'size unknown')}) #{k}"
        if n in qualified
        else f"{n} #{k}"
        for n, p, b, k in zip(
            out["name"], out["purpose"], out["bytes"], out["position"], strict=True
        )
    ]
    return out.assign(paired_by="order")[cols]


def _by_family(df: pd.DataFrame) -> pd.DataFrame:
    """Families compared as a whole: per (rank, step) the family's exposed ns summed, then the
    median over (rank, step), and how many (rank, step) issue the family."""
    cols = ["collective", "name", "position", EXPOSED_NS.name, "count", "paired_by"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    per = df.groupby(["family", "unit", "window"])[EXPOSED_NS.name].sum()
    g = per.groupby(level="family")
    out = pd.DataFrame({EXPOSED_NS.name: g.median(), "count": g.size()}).reset_index()
    return out.assign(
        collective=[f"{f} (the family per step)" for f in out["family"]],
        name=out["family"],
        position=0,
        paired_by="family",
    )[cols]


def _describe(keys: dict[tuple[str, str, int], int]) -> str:
    return ", ".join(
        f"{n} {name}"
        + (f" ({purpose}" + (f", {fmt.size(b)}" if b >= 0 else "") + ")" if purpose else "")
        for (name, purpose, b), n in sorted(keys.items())
    )


def _profiles(
    baseline: Analysis, candidate: Analysis, labels: tuple[str, str]
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Both runs' collective profiles, paired the same way, and the notes saying where the runs'
    collectives do not correspond. A family is paired collective by collective (by name,
    purpose and bytes, then order within the step) when both runs issue the same of each per
    step; else (30 per-parameter all-reduces against 3 buckets) it is compared as a whole."""
    kb, kc = _keyed(baseline), _keyed(candidate)
    sb, sc = _per_step(kb), _per_step(kc)
    whole = sorted(f for f in set(sb) & set(sc) if sb[f] != sc[f])
    notes = [
        f"{labels[0]} has {_describe(sb[f])} a step, {labels[1]} {_describe(sc[f])}: their {f} "
        f"collectives do not correspond one to one, so {f} is compared by family only (its "
        "exposed time per step)"
        for f in whole
    ]
    qualified = set()
    for per in (sb, sc):
        for fam, keys in per.items():
            names = [k[0] for k in keys]
            qualified |= {n for n in names if names.count(n) > 1 and fam not in whole}

    def profile(k: pd.DataFrame) -> pd.DataFrame:
        fam = k["family"].isin(whole)
        parts = [_by_order(k[~fam], qualified), _by_family(k[fam])]
        return pd.concat([p for p in parts if not p.empty] or parts[:1], ignore_index=True)

    return profile(kb), profile(kc), notes


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
        if col == EXPOSED_WAIT_NS.name and not both_multi:
            continue  # waiting for peers only compares between two multi-rank runs
        if col in RATIO_METRICS:
            # the run's aggregate (total / total), as analyze and --fail-if give it
            b, c = baseline.summary.run.aggregate(col), candidate.summary.run.aggregate(col)
        else:
            b, c = _median(baseline.steps, col), _median(candidate.steps, col)
        if b is None and c is None:
            continue
        delta = None if b is None or c is None else c - b
        change = (delta / b) if (delta is not None and b) else None
        rows.append(dict(zip(METRIC_COLUMNS, (col, label, b, c, delta, change), strict=True)))
    metrics = pd.DataFrame(rows, columns=list(METRIC_COLUMNS)).astype(object)
    metrics = metrics.where(metrics.notna(), None)
    b_step, c_step = _median(baseline.steps, STEP_NS.name), _median(candidate.steps, STEP_NS.name)
    speedup = b_step / c_step if b_step is not None and c_step else None

    bp, cp, pairing = _profiles(baseline, candidate, (baseline_label, candidate_label))
    keys = ["collective", "name", "position", "paired_by"]
    both = bp.merge(cp, on=keys, how="outer", suffixes=("_b", "_c"))
    both = both.fillna({"exposed_ns_b": 0.0, "exposed_ns_c": 0.0, "count_b": 0, "count_c": 0})
    both["delta"] = both["exposed_ns_c"] - both["exposed_ns_b"]
    both["abs"] = both["delta"].abs()
    both = both.sort_values(["abs", "name", "position"], ascending=[False, True, True])
    both = both[both["abs"] > 0].head(top)
    collectives = pd.DataFrame(
        {
            "collective": both["collective"].astype(str).to_numpy(),
            "name": both["name"].astype(str).to_numpy(),
            "position": both["position"].to_numpy().astype(np.int64),
            "baseline_exposed_ns": both["exposed_ns_b"].to_numpy().astype(float),
            "candidate_exposed_ns": both["exposed_ns_c"].to_numpy().astype(float),
            "delta_ns": both["delta"].to_numpy().astype(float),
            "baseline_count": both["count_b"].to_numpy().astype(np.int64),
            "candidate_count": both["count_c"].to_numpy().astype(np.int64),
            "paired_by": both["paired_by"].astype(str).to_numpy(),
        },
        columns=list(COLLECTIVE_COLUMNS),
    )
    notes = [f"{baseline_label}: {n}" for n in baseline.notes]
    notes += [f"{candidate_label}: {n}" for n in candidate.notes]
    notes[:0] = pairing
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
