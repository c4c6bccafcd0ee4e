"""The overlap tax (docs/whatif.md §4): compute that ran beside communication, slower.

Per unit, a compute node that ran mostly (>= 50 %) under the unit's communication is compared
with the nodes of the same name, and the same n-th call of that name in their step (the same op
of the same layer: the traces keep no shapes), on the same unit in other steps, that ran alone
(no communication at all during them); with at least :data:`MIN_INSTANCES` on each side, its tax is max(0, duration - the median
alone duration). The tax of a step is the sum over its nodes, capped by the step's overlap (it is
time inside ``overlap_ns``). All steps of the rank are "nearby" (the traces hold a few steps).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from . import intervals as iv
from .model import Kind
from .rungraph import RunGraph

I64 = npt.NDArray[np.int64]
MIN_INSTANCES = 3
UNDER_RATIO = 0.5
#: A finding when the tax eats at least this share of what the overlap saved.
FINDING_RATIO = 0.25


def _covered(starts: I64, ends: I64, us: I64, ue: I64) -> I64:
    """Length of each [start, end) covered by the disjoint sorted set (us, ue)."""
    if us.size == 0:
        return np.zeros(starts.size, dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(ue - us)))

    def upto(t: I64) -> I64:
        j = np.searchsorted(us, t, side="right") - 1
        jj = np.maximum(j, 0)
        inside = np.where(j >= 0, np.clip(t - us[jj], 0, ue[jj] - us[jj]), 0)
        return np.where(j >= 0, cum[jj] + inside, 0).astype(np.int64)

    return (upto(ends) - upto(starts)).astype(np.int64)


def coverage(g: RunGraph) -> I64:
    """Per node: how long its unit's communication ran during it (ns; 0 for non-compute)."""
    cov = np.zeros(g.start_ns.size, dtype=np.int64)
    comm = g.kind == Kind.COMM
    comp = np.flatnonzero(g.kind == Kind.COMPUTE)
    for u in np.unique(g.unit[comp]).tolist():  # a loop over units, not events
        cm = comm & (g.unit == u)
        us, ue = iv.union(g.start_ns[cm], g.end_ns[cm])
        rows = comp[g.unit[comp] == u]
        cov[rows] = _covered(g.start_ns[rows], g.end_ns[rows], us, ue)
    return cov


def node_tax(g: RunGraph) -> I64:
    """Per node: its overlap tax (ns), 0 where it ran alone or no comparison is possible."""
    tax = np.zeros(g.start_ns.size, dtype=np.int64)
    comp = np.flatnonzero(g.kind == Kind.COMPUTE)
    if comp.size == 0:
        return tax
    cov = coverage(g)[comp]
    dur = (g.end_ns - g.start_ns)[comp]
    under = cov >= UNDER_RATIO * np.maximum(dur, 1)
    alone = cov == 0
    df = pd.DataFrame({"u": g.unit[comp], "n": g.name[comp], "w": g.window[comp], "d": dur})
    # the same kernel: same name and the same n-th call of that name in its step (the same layer
    # every step: names alone mix shapes, a first layer's op with a last one's)
    df["o"] = df.groupby(["u", "w", "n"], sort=False).cumcount()
    key = df.groupby(["u", "n", "o"], sort=False).ngroup().to_numpy()
    n_under = np.bincount(key, weights=under).astype(np.int64)
    n_alone = np.bincount(key, weights=alone).astype(np.int64)
    alone_med = df[alone].assign(k=key[alone]).groupby("k")["d"].median()
    med = pd.Series(key).map(alone_med).to_numpy(dtype=np.float64)
    ok = under & (n_under[key] >= MIN_INSTANCES) & (n_alone[key] >= MIN_INSTANCES)
    extra = np.where(ok, np.maximum(dur - np.nan_to_num(med), 0), 0)
    tax[comp] = np.round(extra).astype(np.int64)
    return tax


@dataclass(frozen=True)
class TaxTable:
    """Per (unit, global step): ``overlap_tax_ns`` and the comm-covered compute (``overlap_ns``
    of the graph's compute nodes); per family: tax beside it; ``findings``: one line each."""

    step_tax_ns: I64
    step_overlap_ns: I64
    family_tax_ns: dict[str, int]
    findings: tuple[str, ...]


def tax_table(g: RunGraph) -> TaxTable:
    """The tax per unit and step, per collective family, and the findings of §4."""
    nu, ns = g.win_start_ns.shape
    tax = node_tax(g)
    cov = coverage(g)
    ok = (g.window >= 0) & (g.kind == Kind.COMPUTE)
    idx = g.unit[ok] * ns + g.window[ok]
    step_overlap = np.bincount(idx, weights=cov[ok], minlength=nu * ns).astype(np.int64)
    step_tax = np.bincount(idx, weights=tax[ok], minlength=nu * ns).astype(np.int64)
    step_tax = np.minimum(step_tax, step_overlap)
    fam = _family_tax(g, tax)
    raw = sum(fam.values())
    total_capped = int(step_tax.sum())
    if raw > total_capped > 0:  # the per-step cap applies to the families' shares alike
        fam = {f: v * total_capped // raw for f, v in fam.items()}
    findings = []
    saved = int(step_overlap.sum())
    total = int(step_tax.sum())
    if saved > 0 and total >= FINDING_RATIO * saved:
        who = max(fam, key=lambda f: fam[f]) if fam else "communication"
        findings.append(
            f"{who} hid {saved / 1e6:.1f} ms but compute ran {total / 1e6:.1f} ms slower beside "
            f"it: net gain {(saved - total) / 1e6:.1f} ms (overlap tax, whatif.md §4)"
        )
    return TaxTable(step_tax.reshape(nu, ns), step_overlap.reshape(nu, ns), fam, tuple(findings))


def _family_tax(g: RunGraph, tax: I64) -> dict[str, int]:
    """Each taxed node's tax credited to the family of the communication node of its unit that
    overlaps it the longest (one family per node: the sum is the total)."""
    out: dict[str, int] = {}
    taxed = np.flatnonzero(tax > 0)
    comm = np.flatnonzero((g.kind == Kind.COMM) & (g.family >= 0))
    if taxed.size == 0 or comm.size == 0:
        return out
    for u in np.unique(g.unit[taxed]).tolist():
        t = taxed[g.unit[taxed] == u]
        c = comm[g.unit[comm] == u]
        if c.size == 0:
            continue
        # overlap of every (taxed, comm) pair of this unit: few taxed nodes, few comms per unit
        ov = np.minimum(g.end_ns[t][:, None], g.end_ns[c][None, :]) - np.maximum(
            g.start_ns[t][:, None], g.start_ns[c][None, :]
        )
        best = c[np.argmax(ov, axis=1)]
        for f, v in zip(g.family[best].tolist(), tax[t].tolist(), strict=True):
            name = g.families[f]
            out[name] = out.get(name, 0) + int(v)
    return out
