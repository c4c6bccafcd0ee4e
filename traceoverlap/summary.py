"""Summaries over steps: statistics of every metric, totals, aggregate ratios, verdict counts."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from .diagnosis import BOTTLENECKS
from .metrics import NS_METRICS, RATIO_METRICS
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
    dev = row["device"]
    return StepRef(
        rank=int(row["rank"]),
        device=None if dev is None or pd.isna(dev) else int(dev),
        step=row["step"],
        step_ns=int(row["step_ns"]),
        exposed_comm_ns=int(row["exposed_comm_ns"]),
        bottleneck=str(row["bottleneck"]),
        reason=str(row["reason"]),
    )


def summarize(df: pd.DataFrame) -> Summary:
    """Mean / median / p90 / min / max of each metric over the steps of ``df``, totals, aggregate
    ratios (total over total; None when the denominator is 0), verdict counts, the dominant
    verdict (ties: the earlier class in :data:`BOTTLENECKS`), the most exposed and slowest step."""
    if df.empty:
        return Summary(n_steps=0)
    metrics = {col: _stats(df[col]) for col in NS_METRICS + RATIO_METRICS if col in df.columns}
    totals = {col: int(df[col].astype(np.int64).sum()) for col in NS_METRICS if col in df.columns}
    tc, ts, ti = totals["comm_ns"], totals["step_ns"], totals["ideal_ns"]
    counts = df["bottleneck"].value_counts()
    bottlenecks = {b: int(counts.get(b, 0)) for b in BOTTLENECKS if counts.get(b, 0)}
    dominant = max(BOTTLENECKS, key=lambda b: (int(counts.get(b, 0)), -BOTTLENECKS.index(b)))
    worst = df.loc[df["exposed_comm_ns"].astype(np.int64).idxmax()]
    slowest = df.loc[df["step_ns"].astype(np.int64).idxmax()]
    return Summary(
        n_steps=int(len(df)),
        metrics=metrics,
        totals=totals,
        overlap_ratio=totals["overlap_ns"] / tc if tc else None,
        exposed_comm_ratio=totals["exposed_comm_ns"] / ts if ts else None,
        idle_ratio=totals["idle_ns"] / ts if ts else None,
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
        dev = df["device"].astype(object)
        keyed = df.assign(_d=dev.where(dev.notna(), -1))
        n_units = keyed.groupby("rank")["_d"].nunique()
        for (rank, d), g in keyed.groupby(["rank", "_d"], sort=True):
            several = int(n_units[rank]) > 1
            per[unit_key(int(rank), None if d == -1 else int(d), several)] = summarize(g)
    return RunSummary(run=summarize(df), ranks=per)
