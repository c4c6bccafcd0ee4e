"""Summaries over steps: statistics of every metric, totals, aggregate ratios, verdict counts."""

from __future__ import annotations

from collections import Counter
from typing import TypeVar, cast

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

_T = TypeVar("_T", bound=np.generic)


def _as_float(values: pd.Series) -> npt.NDArray[np.float64]:
    """A metric column as floats, None -> NaN (ratio columns hold None where undefined)."""
    if values.dtype != object:  # numpy, or nullable Float64 / Int64 (<NA> -> NaN)
        return np.asarray(values.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
    return np.array([np.nan if v is None else float(v) for v in values.tolist()], dtype=float)


def _stats(values: pd.Series) -> Stats:
    return _float_stats(_as_float(values))


def _float_stats(a: npt.NDArray[np.float64]) -> Stats:
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


class _Columns:
    """The step table's columns that the summaries read, taken out of the frame once: a unit's
    summary is then computed on its rows' positions (no sub-frame per unit)."""

    def __init__(self, df: pd.DataFrame) -> None:
        self.n = len(df)
        self.ns_cols = [col for col in NS_METRICS if col in df.columns]
        self.ns = (
            np.stack([df[col].to_numpy(np.int64) for col in self.ns_cols]) if self.ns_cols else None
        )
        self.ratios = {col: _as_float(df[col]) for col in RATIO_METRICS if col in df.columns}
        self.exposed = df[EXPOSED_COMM_NS.name].astype(np.int64).to_numpy()
        self.step_ns = df[STEP_NS.name].astype(np.int64).to_numpy()
        self.rank = df[RANK.name].tolist()
        self.device = df[DEVICE.name].tolist()
        self.step = df[STEP.name].tolist()
        self.bottleneck = df[BOTTLENECK.name].tolist()
        self.reason = df[REASON.name].tolist()

    def ref(self, i: int) -> StepRef:
        """:class:`StepRef` of row ``i`` (a position)."""
        dev = self.device[i]
        return StepRef(
            rank=int(self.rank[i]),
            device=None if dev is None or pd.isna(dev) else int(dev),
            step=as_label(self.step[i]),
            step_ns=int(self.step_ns[i]),
            exposed_comm_ns=int(self.exposed[i]),
            bottleneck=str(self.bottleneck[i]),
            reason=str(self.reason[i]),
        )


def summarize(df: pd.DataFrame) -> Summary:
    """Mean / median / p90 / min / max of each metric over the steps of ``df``, totals, aggregate
    ratios (total over total; None when the denominator is 0), verdict counts, the dominant
    verdict (ties: the earlier class in :data:`BOTTLENECKS`), the most exposed and slowest step."""
    if df.empty:
        return Summary(n_steps=0)
    return _summarize(_Columns(df), None)


def _summarize(c: _Columns, rows: npt.NDArray[np.int64] | None) -> Summary:
    """:func:`summarize` of the rows at positions ``rows`` (in order; None: all of them)."""

    def at(a: npt.NDArray[_T]) -> npt.NDArray[_T]:
        return a if rows is None else a[..., rows]

    pos = list(range(c.n)) if rows is None else rows.tolist()
    ns = at(c.ns) if c.ns is not None else None
    metrics = _ns_stats(c.ns_cols, ns)
    for col, values in c.ratios.items():
        metrics[col] = _float_stats(at(values))
    totals = dict(zip(c.ns_cols, ns.sum(axis=1).tolist(), strict=True)) if ns is not None else {}
    tc, ts, ti = totals[COMM_NS.name], totals[STEP_NS.name], totals[IDEAL_NS.name]
    counts = Counter(c.bottleneck[i] for i in pos)
    bottlenecks = {b: int(counts.get(b, 0)) for b in BOTTLENECKS if counts.get(b, 0)}
    dominant = max(BOTTLENECKS, key=lambda b: (int(counts.get(b, 0)), -BOTTLENECKS.index(b)))
    # argmax: the first row holding the maximum, as idxmax
    worst = pos[int(np.argmax(at(c.exposed)))]
    slowest = pos[int(np.argmax(at(c.step_ns)))]
    return Summary(
        n_steps=len(pos),
        metrics=metrics,
        totals=totals,
        overlap_ratio=totals[OVERLAP_NS.name] / tc if tc else None,
        exposed_comm_ratio=totals[EXPOSED_COMM_NS.name] / ts if ts else None,
        idle_ratio=totals[IDLE_NS.name] / ts if ts else None,
        potential_speedup=ts / ti if ti else None,
        bottlenecks=bottlenecks,
        dominant_bottleneck=dominant,
        worst_step=c.ref(worst),
        slowest_step=c.ref(slowest),
    )


def unit_key(rank: int, device: int | None, several: bool) -> str:
    """How a unit is named in per-rank summaries: ``"3"``, or ``"3:1"`` (rank 3's GPU 1) when the
    rank's process drove several GPUs."""
    return f"{rank}:{device}" if several and device is not None else str(rank)


def summarize_run(df: pd.DataFrame) -> RunSummary:
    """The run summary and one per unit."""
    per: dict[str, Summary] = {}
    if df.empty:
        return RunSummary(run=summarize(df), ranks=per)
    c = _Columns(df)
    dev = df[DEVICE.name].astype(object)
    units = list(zip(c.rank, dev.where(dev.notna(), -1).tolist(), strict=True))
    rows: dict[tuple[object, object], list[int]] = {}
    for i, k in enumerate(units):
        rows.setdefault(k, []).append(i)
    devices: dict[object, set[object]] = {}
    for rank, d in rows:
        devices.setdefault(rank, set()).add(d)
    keys = sorted(rows, key=lambda k: (k[0], k[1]))  # as groupby([rank, device], sort=True)
    if len(keys) == 1:
        # one unit: its summary is the run's (the same rows, in order), computed once
        rank, d = keys[0]
        run = _summarize(c, None)
        several = len(devices[rank]) > 1
        per[unit_key(int(cast(int, rank)), None if d == -1 else int(cast(int, d)), several)] = run
        return RunSummary(run=run, ranks=per)
    for rank, d in keys:
        several = len(devices[rank]) > 1
        got = _summarize(c, np.asarray(rows[(rank, d)], dtype=np.int64))
        per[unit_key(int(cast(int, rank)), None if d == -1 else int(cast(int, d)), several)] = got
    return RunSummary(run=_summarize(c, None), ranks=per)
