"""Summaries over steps: statistics of every metric, totals, aggregate ratios, verdict counts."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core.schema import (
    BOTTLENECK,
    COMM_NS,
    DEVICE,
    EXPOSED_COMM_NS,
    IDEAL_NS,
    IDLE_NS,
    NS_METRICS,
    OVERLAP_NS,
    RANK,
    RATIO_METRICS,
    REASON,
    STEP,
    STEP_NS,
)
from ..core.vocab import BOTTLENECKS, as_label
from .results import RunSummary, Stats, StepRef, Summary


def _as_float(values: pd.Series) -> npt.NDArray[np.float64]:
    """A metric column as floats, None -> NaN (ratio columns hold None where undefined)."""
    if values.dtype != object:  # numpy, or nullable Float64 / Int64 (<NA> -> NaN)
        return np.asarray(values.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
    return np.array([np.nan if v is None else float(v) for v in values.tolist()], dtype=float)


def _stats(values: pd.Series) -> Stats:
    a = _as_float(values)
    a = a[~np.isnan(a)]
    if a.size == 0:
        return Stats()
    return Stats(
        mean=float(a.mean()),
        median=float(np.median(a)),
        p90=float(np.percentile(a, 90)),
        min=float(a.min()),
        max=float(a.max()),
    )


def _ref(row: pd.Series) -> StepRef:
    dev = row[DEVICE.name]
    return StepRef(
        rank=int(row[RANK.name]),
        device=None if dev is None or pd.isna(dev) else int(dev),
        step=as_label(row[STEP.name]),
        step_ns=int(row[STEP_NS.name]),
        exposed_comm_ns=int(row[EXPOSED_COMM_NS.name]),
        bottleneck=str(row[BOTTLENECK.name]),
        reason=str(row[REASON.name]),
    )


def summarize(df: pd.DataFrame) -> Summary:
    """Mean / median / p90 / min / max of each metric over the steps of ``df``, totals, aggregate
    ratios (total over total; None when the denominator is 0), verdict counts, the dominant
    verdict (ties: the earlier class in :data:`BOTTLENECKS`), the most exposed and slowest step."""
    if df.empty:
        return Summary(n_steps=0)
    metrics = {col: _stats(df[col]) for col in NS_METRICS + RATIO_METRICS if col in df.columns}
    totals = {col: int(df[col].astype(np.int64).sum()) for col in NS_METRICS if col in df.columns}
    tc, ts, ti = totals[COMM_NS.name], totals[STEP_NS.name], totals[IDEAL_NS.name]
    counts = df[BOTTLENECK.name].value_counts()
    bottlenecks = {b: int(counts.get(b, 0)) for b in BOTTLENECKS if counts.get(b, 0)}
    dominant = max(BOTTLENECKS, key=lambda b: (int(counts.get(b, 0)), -BOTTLENECKS.index(b)))
    worst = df.loc[df[EXPOSED_COMM_NS.name].astype(np.int64).idxmax()]
    slowest = df.loc[df[STEP_NS.name].astype(np.int64).idxmax()]
    return Summary(
        n_steps=int(len(df)),
        metrics=metrics,
        totals=totals,
        overlap_ratio=totals[OVERLAP_NS.name] / tc if tc else None,
        exposed_comm_ratio=totals[EXPOSED_COMM_NS.name] / ts if ts else None,
        idle_ratio=totals[IDLE_NS.name] / ts if ts else None,
        potential_speedup=ts / ti if ti else None,
        bottlenecks=bottlenecks,
        dominant_bottleneck=dominant,
        worst_step=_ref(worst),
        slowest_step=_ref(slowest),
    )


def unit_key(rank: int, device: int | None, several: bool) -> str:
    """How a unit is named in per-rank summaries: ``"3"``, or ``"3:1"`` (rank 3's GPU 1) when the
    rank's process drove several GPUs."""
    return f"{rank}:{device}" if several and device is not None else str(rank)


def summarize_run(df: pd.DataFrame) -> RunSummary:
    """The run summary and one per unit."""
    per: dict[str, Summary] = {}
    if not df.empty:
        dev = df[DEVICE.name].astype(object)
        keyed = df.assign(_d=dev.where(dev.notna(), -1))
        n_units = keyed.groupby(RANK.name)["_d"].nunique()
        groups = list(keyed.groupby([RANK.name, "_d"], sort=True))
        if len(groups) == 1 and len(groups[0][1]) == len(df):
            # one unit: its summary is the run's (the same rows, in order), computed once
            (rank, d), _ = groups[0]
            run = summarize(df)
            several = int(n_units[rank]) > 1
            per[unit_key(int(rank), None if d == -1 else int(d), several)] = run
            return RunSummary(run=run, ranks=per)
        for (rank, d), g in groups:
            several = int(n_units[rank]) > 1
            per[unit_key(int(rank), None if d == -1 else int(d), several)] = summarize(g)
    return RunSummary(run=summarize(df), ranks=per)
