"""Bytes, latency or waiting (docs/diagnosis.md §9), from the matched instance table.

Per collective instance with known bytes (Kineto ``In msg nelems`` x element size of ``dtype``,
nsys NCCL tables) and a transfer time (the shortest duration across the ranks that ran it;
its own duration when unmatched):

- ``algbw_gbps`` = bytes / transfer_ns (1 byte per ns is 1 GB/s);
- ``busbw_gbps`` = algbw x NCCL's factor for the collective over n ranks: all-reduce 2(n-1)/n;
  all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast, reduce, send/recv 1. n is the
  number of ranks the instance was matched on when two or more, else the trace's world size;
  null when neither is known or the collective is not one of these.

Per family, :func:`family_bandwidth` decides whether the transfer time follows the bytes:

- ``latency``: the large messages carry at least 4x the bytes of the small ones but take less
  than 1.5x their time (durations do not grow with bytes: latency-bound, or waiting for ranks the
  trace does not show);
- ``bandwidth``: the large messages carry at least 2x the bytes of the small ones, their time
  grew at least half as fast as the bytes, and the bus bandwidth of the large messages is at least
  half the best the family reaches in the run (near the best: the link is what limits them);
- ``unknown``: otherwise (no bytes, one message size, too few instances).

Instances whose transfer estimate the message size does not explain (``transfer_outlier``,
docs/diagnosis.md §12: more than 3x the median of the same family and bytes) are no evidence.

"Small" and "large" are the instances at or below the family's 25th and at or above its 75th
byte percentile; their bytes and transfer times are the medians of those sets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.vocab import kind_key

#: Ratios of the bytes-vs-duration check (see the module docstring).
LATENCY_BYTES_RATIO = 4.0
LATENCY_TIME_RATIO = 1.5
BANDWIDTH_BYTES_RATIO = 2.0
BANDWIDTH_GROWTH = 0.5
BANDWIDTH_NEAR_BEST = 0.5
MIN_INSTANCES = 4


def bus_factor(name: str, n: int | None) -> float | None:
    """NCCL's bus-bandwidth factor for a collective over ``n`` ranks (None: unknown)."""
    key = kind_key(name)
    if "allreduce" in key:
        return None if not n or n < 1 else 2 * (n - 1) / n
    if any(k in key for k in ("allgather", "reducescatter", "alltoall")):
        return None if not n or n < 1 else (n - 1) / n
    if any(k in key for k in ("broadcast", "send", "recv", "reduce", "p2p")):
        return 1.0
    return None


def add_bandwidth(instances: pd.DataFrame, world_size: int | None) -> pd.DataFrame:
    """``instances`` with ``group_ranks`` (the n used), ``algbw_gbps`` and ``busbw_gbps`` (None
    where bytes or transfer are unknown)."""
    df = instances.copy()
    if df.empty:
        return df.assign(group_ranks=[], algbw_gbps=[], busbw_gbps=[])
    nbytes = pd.to_numeric(df["bytes"], errors="coerce").fillna(-1).to_numpy(np.float64)
    transfer = pd.to_numeric(df["transfer_ns"], errors="coerce").fillna(0).to_numpy(np.float64)
    n_ranks = df["n_ranks"].astype(np.int64).to_numpy()
    matched = df["matched"].astype(bool).to_numpy()
    group = [
        int(k) if (m and k >= 2) else world_size
        for k, m in zip(n_ranks.tolist(), matched.tolist(), strict=True)
    ]
    ok = (nbytes > 0) & (transfer > 0)
    alg = np.where(ok, nbytes / np.where(transfer > 0, transfer, 1), np.nan)
    # the factor once per distinct (name, n): a few collectives' names repeat
    factor_of: dict[tuple[str, int | None], float | None] = {}
    factors: list[float | None] = []
    for nm, g in zip(df["name"].to_numpy(dtype=object).tolist(), group, strict=True):
        k = (str(nm), g)
        if k not in factor_of:
            factor_of[k] = bus_factor(k[0], g)
        factors.append(factor_of[k])
    algs, oks = alg.tolist(), ok.tolist()
    bus = [
        None if (not o or f is None) else float(a * f)
        for a, f, o in zip(algs, factors, oks, strict=True)
    ]
    df["group_ranks"] = pd.array(group, dtype=object)
    df["algbw_gbps"] = pd.array(
        [a if o else None for a, o in zip(algs, oks, strict=True)], dtype=object
    )
    df["busbw_gbps"] = pd.array(bus, dtype=object)
    return df


@dataclass(frozen=True)
class FamilyBandwidth:
    """The bytes-vs-duration evidence of one family (see the module docstring)."""

    family: str
    verdict: str  # "bandwidth", "latency" or "unknown"
    instances: int
    small_bytes: int | None = None
    large_bytes: int | None = None
    small_transfer_ns: int | None = None
    large_transfer_ns: int | None = None
    large_busbw_gbps: float | None = None
    best_busbw_gbps: float | None = None

    def text(self) -> str:
        """The numbers behind the verdict, in words."""
        if self.small_bytes is None or self.large_bytes is None:
            return "message sizes unknown: bandwidth cannot be judged"
        sizes = (
            f"{_mb(self.small_bytes)} in {_ms(self.small_transfer_ns)} vs "
            f"{_mb(self.large_bytes)} in {_ms(self.large_transfer_ns)}"
        )
        if self.verdict == "latency":
            return (
                f"{sizes}: {self.large_bytes / max(self.small_bytes, 1):.1f}x the "
                "bytes in about the same time: latency or waiting, not bandwidth"
            )
        bus = ""
        if self.large_busbw_gbps is not None and self.best_busbw_gbps is not None:
            bus = (
                f", bus bandwidth {self.large_busbw_gbps:.1f} GB/s (best in the run "
                f"{self.best_busbw_gbps:.1f} GB/s)"
            )
        if self.verdict == "bandwidth":
            return f"{sizes}: time grows with bytes{bus}: bandwidth-bound"
        return f"{sizes}{bus}: not enough size spread to tell bandwidth from latency"


def _mb(b: int | None) -> str:
    return "?" if b is None else f"{b / 1e6:.2f} MB"


def _ms(ns: int | None) -> str:
    return "?" if ns is None else f"{ns / 1e6:.2f} ms"


def family_bandwidth(instances: pd.DataFrame) -> dict[str, FamilyBandwidth]:
    """Per family of ``instances`` (with :func:`add_bandwidth`'s columns): the evidence."""
    out: dict[str, FamilyBandwidth] = {}
    if "transfer_outlier" in instances:  # a transfer its bytes do not explain (§12): no evidence
        instances = instances[~instances["transfer_outlier"].astype(bool).to_numpy()]
    if instances.empty:
        return out
    for fam, g in instances.groupby("family", sort=True):
        out[str(fam)] = _one_family(str(fam), g)
    return out


def _one_family(fam: str, g: pd.DataFrame) -> FamilyBandwidth:
    nbytes = pd.to_numeric(g["bytes"], errors="coerce").fillna(-1).to_numpy(np.float64)
    transfer = pd.to_numeric(g["transfer_ns"], errors="coerce").fillna(0).to_numpy(np.float64)
    ok = (nbytes > 0) & (transfer > 0)
    if int(ok.sum()) < MIN_INSTANCES:
        return FamilyBandwidth(fam, "unknown", int(ok.sum()))
    b, t = nbytes[ok], transfer[ok]
    bus = np.array(
        [np.nan if v is None else float(v) for v in g["busbw_gbps"].to_numpy()[ok]], np.float64
    )
    q1, q3 = np.percentile(b, 25), np.percentile(b, 75)
    small, large = b <= q1, b >= q3
    sb, lb = float(np.median(b[small])), float(np.median(b[large]))
    st, lt = float(np.median(t[small])), float(np.median(t[large]))
    best = float(np.nanmax(bus)) if np.isfinite(bus).any() else None
    lbus = float(np.nanmedian(bus[large])) if np.isfinite(bus[large]).any() else None
    bytes_ratio, time_ratio = lb / sb, lt / st
    verdict = "unknown"
    if bytes_ratio >= LATENCY_BYTES_RATIO and time_ratio < LATENCY_TIME_RATIO:
        verdict = "latency"
    elif (
        bytes_ratio >= BANDWIDTH_BYTES_RATIO
        and time_ratio - 1 >= BANDWIDTH_GROWTH * (bytes_ratio - 1)
        and lbus is not None
        and best is not None
        and lbus >= BANDWIDTH_NEAR_BEST * best
    ):
        verdict = "bandwidth"
    return FamilyBandwidth(
        fam,
        verdict,
        int(ok.sum()),
        int(sb),
        int(lb),
        int(st),
        int(lt),
        lbus,
        best,
    )
