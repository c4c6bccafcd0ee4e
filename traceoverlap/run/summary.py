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


def _ns_stats(cols: list[str], ns: npt.NDArray[np.int64] | None) -> dict[str, Stats]:
    """:func:`_stats` of each row of ``ns`` (one nanosecond metric per row, never missing), the
    rows at once: each row is reduced as the 1-D column would be (a contiguous row of floats,
    the same partition and interpolation), so the figures are the same to the bit."""
    if ns is None or ns.shape[1] == 0:
        return {col: Stats() for col in cols}
    a = np.ascontiguousarray(ns, dtype=np.float64)
    mean, median = a.mean(axis=1), np.median(a, axis=1)
    p90, lo, hi = np.percentile(a, 90, axis=1), a.min(axis=1), a.max(axis=1)
    return {
        col: Stats(
            mean=float(mean[i]),
            median=float(median[i]),
            p90=float(p90[i]),
            min=float(lo[i]),
            max=float(hi[i]),
        )
        for i, col in enumerate(cols)
    }


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
    ns_cols = [col for col in NS_METRICS if col in df.columns]
    ns = np.stack([df[col].to_numpy(np.int64) for col in ns_cols]) if ns_cols else None
    metrics = _ns_stats(ns_cols, ns)
    for col in RATIO_METRICS:
        if col in df.columns:
            metrics[col] = _stats(df[col])
    totals = dict(zip(ns_cols, ns.sum(axis=1).tolist(), strict=True)) if ns is not None else {}
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
