"""The overlap tax (docs/whatif.md §4): compute that ran beside communication, slower.

A node's time here is its *compute time*: its duration less the communication calls of its
thread inside it (a launch or a wait nested in an op; CPU units), the time the step's
``compute_ns`` counts (metrics.md); "under communication" is how much of that time the unit's
communication covered. Per unit, a compute node that ran mostly (>= 50 %) under communication is
compared with the nodes of the same kernel (:func:`same_kernel`: the same name and launch shape
where the trace gives one, GPU kernels' grid and block, in any layer and step; else the same name
and the same n-th call of that name in its step) on the same unit that ran alone (no
communication at all during them); with at least :data:`MIN_INSTANCES` on each side, its tax is
max(0, compute time - the median alone compute time). The tax of a step is the sum over its
nodes, capped by the step's compute under communication (it is time inside ``overlap_ns``). All
steps of the rank are "nearby" (the traces hold a few steps).

Compute under communication with no such comparison (the kernel ran alone fewer than
:data:`MIN_INSTANCES` times: with per-parameter hooks every backward op overlaps communication
in every step) is reported as *unmeasured*, and its tax is *estimated* from the kernel's own
instances: max(0, compute time - the median compute time of all its instances on the unit),
for kernels that ran at least :data:`MIN_ESTIMATE_INSTANCES` times, except ops that make a
communication call (nested in them: they wait there for their peers, so their excess is not
contention). The estimate sees the instances that stalled beside communication (a core taken
by the gloo threads, a kernel waiting for SMs), not a slowdown shared by every instance, and it
counts the run's ordinary jitter as tax; it is kept apart (:attr:`TaxTable.estimated_ns`) and
named in the output.

How far the tax is a measurement (:func:`tax_basis`): a run whose units also ran steps without
any communication (a workload with communication off in alternate steps,
``--comm alternate``) gives every op instances that ran alone in the same run, same machine,
same minute: there the tax is *measured*. Anywhere else, the within-run closed loop
(docs/whatif.md, Measured) has not shown that the comparison predicts what switching
communication off buys, so every output names the tax *estimated* and from what: how many
instances under communication were compared with how many that ran alone, how many estimated
from their own spread, how many not at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core import intervals as iv
from ..core.model import Kind
from ..rank.hostwait import split_compute
from ..rank.metrics import ActivityRows
from .graph import RunGraph

I64 = npt.NDArray[np.int64]
MIN_INSTANCES = 3
#: The estimate of an unmeasured node needs this many instances of its kernel: the median of
#: three always has one above it, and the estimate would read the spread of three numbers.
MIN_ESTIMATE_INSTANCES = 5
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


def compute_pieces(g: RunGraph) -> tuple[I64, I64, I64]:
    """The compute nodes cut around their lane's communication calls: (node, start, end) per
    piece, in node order (the time the step's ``compute_ns`` counts, metrics.md)."""
    rows = np.flatnonzero(g.kind == Kind.COMPUTE)
    if rows.size == 0:
        z = np.zeros(0, np.int64)
        return z, z.copy(), z.copy()
    acts = ActivityRows(
        np.zeros(rows.size, np.int64),
        g.kind[rows],
        g.start_ns[rows],
        g.end_ns[rows],
        rows.astype(np.int64),
    )
    pieces = split_compute(acts, g.lane, (g.call_lane, g.call_start_ns, g.call_end_ns))
    return pieces.event_row, pieces.start_ns, pieces.end_ns


def compute_time(g: RunGraph) -> tuple[I64, I64]:
    """Per node: its compute time and how much of it ran under its unit's communication (ns; 0
    for non-compute nodes). A node's compute time is its duration less the communication calls
    of its lane inside it (:func:`traceoverlap.rank.hostwait.lane_calls`: a launch or a wait nested in
    an op): the time the step's ``compute_ns`` counts (metrics.md), so the tax measures it too."""
    n = g.start_ns.size
    comp_ns = np.zeros(n, dtype=np.int64)
    cov_ns = np.zeros(n, dtype=np.int64)
    node, ps, pe = compute_pieces(g)
    if node.size == 0:
        return comp_ns, cov_ns
    comp_ns += np.bincount(node, weights=pe - ps, minlength=n).astype(np.int64)
    cov = np.zeros(node.size, dtype=np.int64)
    comm = g.kind == Kind.COMM
    unit = g.unit[node]
    for u in np.unique(unit).tolist():  # a loop over units, not events
        cm = comm & (g.unit == u)
        us, ue = iv.union(g.start_ns[cm], g.end_ns[cm])
        sel = unit == u
        cov[sel] = _covered(ps[sel], pe[sel], us, ue)
    cov_ns += np.bincount(node, weights=cov, minlength=n).astype(np.int64)
    return comp_ns, cov_ns


def same_kernel(g: RunGraph, rows: I64) -> I64:
    """Per row: a code equal for the instances of "the same kernel" (§4: name, and shape or grid
    where known), on the same unit:

    - a node whose launch shape is known (GPU kernels: grid and block, the Timeline's ``shape``)
      is the same kernel as every node of the same name and shape, across layers and steps: the
      same GEMM of every identical layer is one kernel, so the layers that ran alone are the
      reference of those that ran beside communication;
    - a node without one (CPU ops, kernels of traces without grids) is the same kernel as the
      nodes of the same name *and the same n-th call of that name in its step* (counting the
      calls without a shape; the same layer's op every step): name alone mixes shapes (on an MLP's backward the last layer's
      ``AddmmBackward0``, 0.12 ms and before the first all-reduce starts, would be the "alone"
      reference of the hidden layers', 0.37 ms)."""
    shape = g.shape[rows].astype(np.int64)
    known = shape >= 0
    df = pd.DataFrame({"u": g.unit[rows], "n": g.name[rows], "w": g.window[rows], "k": known})
    nth = df.groupby(["u", "w", "n", "k"], sort=False).cumcount().to_numpy()
    # known: (unit, name, shape); unknown: (unit, name, n-th call without a shape in its step)
    df["o"] = np.where(known, shape, nth)
    return np.asarray(df.groupby(["u", "n", "k", "o"], sort=False).ngroup(), dtype=np.int64)


def node_tax(g: RunGraph) -> I64:
    """Per node: its overlap tax (ns), 0 where it ran alone or no reference exists."""
    return node_tax_detail(g).tax_ns


def quiet_windows(g: RunGraph) -> npt.NDArray[np.bool_]:
    """Per (unit, step): the unit has the step, no communication node in it, and communication
    in some other step: a step that ran without communication (``--comm alternate``)."""
    nu, ns = g.win_start_ns.shape
    comm = (g.kind == Kind.COMM) & (g.window >= 0)
    has = np.zeros(nu * ns, dtype=bool)
    has[g.unit[comm] * ns + g.window[comm]] = True
    has2 = has.reshape(nu, ns)
    present = g.win_start_ns >= 0
    return present & ~has2 & has2.any(axis=1, keepdims=True)


class NodeTax(NamedTuple):
    """Per node of the graph (:func:`node_tax_detail`)."""

    #: its tax (ns): measured, or estimated where ``estimated``
    tax_ns: I64
    #: its compute time under its unit's communication (:func:`compute_time`)
    under_comm_ns: I64
    #: it ran mostly under communication with no comparison possible (fewer than
    #: :data:`MIN_INSTANCES` instances of the same kernel on either side)
    unmeasured: npt.NDArray[np.bool_]
    #: an unmeasured node whose tax is estimated: its excess over the median of all the
    #: instances of its kernel (which ran at least :data:`MIN_ESTIMATE_INSTANCES` times)
    estimated: npt.NDArray[np.bool_]
    #: a compared node's compute time less the median alone (ns, signed: negative where it ran
    #: faster beside communication than alone; 0 for the others)
    diff_ns: I64 | None = None


def node_tax_detail(g: RunGraph, usable: npt.NDArray[np.bool_] | None = None) -> NodeTax:
    """Per node: its tax and how it was found (:class:`NodeTax`). ``usable`` (per node): only
    those nodes are taxed or serve as a reference (the closed loop leaves a run's steps without
    communication out, to test the tax as a run without them would give it)."""
    n = g.start_ns.size
    tax = np.zeros(n, dtype=np.int64)
    blind = np.zeros(n, dtype=bool)
    estimated = np.zeros(n, dtype=bool)
    comp_ns, cov_ns = compute_time(g)
    compute = g.kind == Kind.COMPUTE
    comp = np.flatnonzero(compute if usable is None else compute & usable)
    diff = np.zeros(n, dtype=np.int64)
    if comp.size == 0:
        return NodeTax(tax, cov_ns, blind, estimated, diff)
    dur, cov = comp_ns[comp], cov_ns[comp]
    under = (dur > 0) & (cov >= UNDER_RATIO * dur)
    alone = (dur > 0) & (cov == 0)
    key = same_kernel(g, comp)
    n_under = np.bincount(key, weights=under).astype(np.int64)
    n_alone = np.bincount(key, weights=alone).astype(np.int64)
    alone_med = pd.Series(dur[alone]).groupby(key[alone]).median()
    med = pd.Series(key).map(alone_med).to_numpy(dtype=np.float64)
    ok = under & (n_under[key] >= MIN_INSTANCES) & (n_alone[key] >= MIN_INSTANCES)
    # the unmeasured ones: their kernel's median instance (any side) is the reference
    n_all = np.bincount(key, weights=dur > 0).astype(np.int64)
    typical = pd.Series(np.where(dur > 0, dur, np.nan)).groupby(key).transform("median")
    # an op that makes a communication call (nested in it) waits there for its peers: its
    # excess over its median is that waiting as much as contention, so no estimate for it
    calls = comp_ns[comp] < (g.end_ns[comp] - g.start_ns[comp])
    est = under & ~ok & ~calls & (n_all[key] >= MIN_ESTIMATE_INSTANCES)
    ref = np.where(ok, np.nan_to_num(med), typical.to_numpy(dtype=np.float64))
    extra = np.where(ok | est, np.maximum(dur - np.nan_to_num(ref), 0), 0)
    tax[comp] = np.round(extra).astype(np.int64)
    blind[comp] = under & ~ok
    estimated[comp] = est
    diff[comp] = np.round(np.where(ok, dur - np.nan_to_num(med), 0)).astype(np.int64)
    return NodeTax(tax, cov_ns, blind, estimated, diff)


@dataclass(frozen=True)
class TaxTable:
    """Per (unit, global step): ``overlap_tax_ns`` and the comm-covered compute (``overlap_ns``
    of the graph's compute nodes); per family: tax beside it; ``findings``: one line each."""

    step_tax_ns: I64
    step_overlap_ns: I64
    family_tax_ns: dict[str, int]
    findings: tuple[str, ...]
    #: compute under communication (ns, run total) in nodes that ran mostly under it and have
    #: no comparison (the same kernel never ran alone, or too few times)
    unmeasured_ns: int = 0
    #: the part of the tax (ns, run total, capped like the steps') that is the estimate of
    #: unmeasured nodes: their excess over their kernel's median instance
    estimated_ns: int = 0
    #: the part of ``unmeasured_ns`` in nodes with no estimate either (an op that makes a
    #: communication call, or a kernel that ran fewer than :data:`MIN_ESTIMATE_INSTANCES` times)
    unestimated_ns: int = 0
    #: per node of the graph: its tax (:func:`node_tax`), for the replay's ``no-overlap-tax``
    node_tax_ns: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    #: how far the tax is measured (:class:`TaxBasis`)
    basis: TaxBasis | None = None


#: The share of the compute under communication that may lack a comparison with instances
#: alone for the tax of a run with steps without communication to count as measured.
MEASURED_MAX_UNMEASURED_RATIO = 0.1


@dataclass(frozen=True)
class TaxBasis:
    """What the tax stands on: ``kind`` is ``measured`` (the run's units also ran steps without
    communication, :func:`quiet_windows`, and at most :data:`MEASURED_MAX_UNMEASURED_RATIO` of
    the compute under communication lacks a comparison), ``estimated`` (anything else), or
    ``none`` (no compute under communication). Counts are instances (compute nodes)."""

    kind: str
    #: instances that ran mostly (>= 50 %) under communication
    under: int
    #: of those, compared with instances of the same kernel that ran alone (§4)
    compared: int
    #: instances that ran alone of the kernels compared (their references)
    alone: int
    #: of ``under``, estimated from their kernel's own instances (:class:`NodeTax`)
    estimated: int
    #: (unit, step) pairs that ran without communication (:func:`quiet_windows`)
    quiet_steps: int
    #: the compared instances' compute time less their median alone, summed (ns, signed: below
    #: 0 when compute ran faster beside communication in sum; the tax counts only the slower)
    net_ns: int = 0

    def text(self) -> str:
        """``measured ...`` / ``estimated ...``: the label every output puts on the tax."""
        if self.kind == "none":
            return "none (no compute ran under communication)"
        rest = self.under - self.compared - self.estimated
        net = (
            f" (net {self.net_ns / 1e6:+.1f} ms against them"
            + (
                ": in sum faster beside communication, the tax counts only the slower ones)"
                if self.net_ns < 0
                else ")"
            )
            if self.compared
            else ""
        )
        counts = (
            f"{self.compared} of {self.under} compute instances under communication compared "
            f"with {self.alone} instances of the same op alone{net}"
            + (
                f", {self.estimated} from the spread of their own instances"
                if self.estimated
                else ""
            )
            + (f", {rest} not at all" if rest > 0 else "")
        )
        if self.kind == "measured":
            return f"measured against {self.quiet_steps} rank-step(s) run without communication: {counts}"
        why = (
            "too few ops compared"
            if self.quiet_steps
            else "no step of this run ran without communication"
        )
        return f"estimated ({why}; docs/whatif.md §4): {counts}"

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "under": self.under,
            "compared": self.compared,
            "alone": self.alone,
            "estimated": self.estimated,
            "quiet_steps": self.quiet_steps,
            "net_ns": self.net_ns,
        }


def tax_basis(g: RunGraph, d: NodeTax, usable: npt.NDArray[np.bool_] | None = None) -> TaxBasis:
    """What the tax of ``d`` (:func:`node_tax_detail`) stands on (:class:`TaxBasis`)."""
    comp = g.kind == Kind.COMPUTE
    if usable is not None:
        comp = comp & usable
    comp_ns, _ = compute_time(g)
    under = comp & (comp_ns > 0) & (d.under_comm_ns >= UNDER_RATIO * comp_ns)
    alone = comp & (comp_ns > 0) & (d.under_comm_ns == 0)
    compared = under & ~d.unmeasured
    idx = np.flatnonzero(comp)
    key = np.full(g.start_ns.size, -1, dtype=np.int64)
    if idx.size:
        key[idx] = same_kernel(g, idx)
    refs = int(np.isin(key[alone], np.unique(key[compared])).sum()) if compared.any() else 0
    quiet = quiet_windows(g)
    if usable is not None:  # only the steps the usable nodes are in
        seen = np.zeros(quiet.shape, dtype=bool)
        w = usable & (g.window >= 0)
        seen[g.unit[w], g.window[w]] = True
        quiet = quiet & seen
    n_quiet = int(quiet.sum())
    under_ns = int(d.under_comm_ns[under].sum())
    blind_ns = int(d.under_comm_ns[under & d.unmeasured].sum())
    if not under.any():
        kind = "none"
    elif n_quiet and blind_ns <= MEASURED_MAX_UNMEASURED_RATIO * under_ns:
        kind = "measured"
    else:
        kind = "estimated"
    return TaxBasis(
        kind,
        int(under.sum()),
        int(compared.sum()),
        refs,
        int((under & d.estimated).sum()),
        n_quiet,
        int(d.diff_ns[compared].sum()) if d.diff_ns is not None else 0,
    )


def tax_table(g: RunGraph, usable: npt.NDArray[np.bool_] | None = None) -> TaxTable:
    """The tax per unit and step, per collective family, and the findings of §4 (``usable``:
    :func:`node_tax_detail`)."""
    nu, ns = g.win_start_ns.shape
    detail = node_tax_detail(g, usable)
    tax, cov, blind, est = detail.tax_ns, detail.under_comm_ns, detail.unmeasured, detail.estimated
    basis = tax_basis(g, detail, usable)
    ok = (g.window >= 0) & (g.kind == Kind.COMPUTE)
    if usable is not None:
        ok &= usable
    idx = g.unit[ok] * ns + g.window[ok]
    step_overlap = np.bincount(idx, weights=cov[ok], minlength=nu * ns).astype(np.int64)
    raw_tax = np.bincount(idx, weights=tax[ok], minlength=nu * ns).astype(np.int64)
    step_tax = np.minimum(raw_tax, step_overlap)
    # the estimated share of each step's tax, under the same cap (proportionally)
    raw_est = np.bincount(idx, weights=np.where(est, tax, 0)[ok], minlength=nu * ns)
    step_est = raw_est * step_tax / np.maximum(raw_tax, 1)  # raw_est is 0 where raw_tax is
    fam = _family_tax(g, tax)
    raw = sum(fam.values())
    total_capped = int(step_tax.sum())
    if raw > total_capped > 0:  # the per-step cap applies to the families' shares alike
        fam = {f: v * total_capped // raw for f, v in fam.items()}
    findings = []
    saved = int(step_overlap.sum())
    total = int(step_tax.sum())
    estimated = int(np.round(step_est.sum()))
    if saved > 0 and total >= FINDING_RATIO * saved:
        who = max(fam, key=lambda f: fam[f]) if fam else "communication"
        est_ms = f"{estimated / 1e6:.1f}"
        how = f" ({est_ms} ms of it estimated: ops that never ran alone)" if est_ms != "0.0" else ""
        label = "" if basis.kind == "measured" else "an estimated "
        findings.append(
            f"{who} hid {saved / 1e6:.1f} ms but compute ran {label}{total / 1e6:.1f} ms slower "
            f"beside it{how}: net gain {(saved - total) / 1e6:.1f} ms (overlap tax "
            f"{basis.text()}; whatif.md §4)"
        )
    unmeasured = int(cov[ok & blind].sum())
    unestimated = int(cov[ok & blind & ~est].sum())
    return TaxTable(
        step_tax.reshape(nu, ns),
        step_overlap.reshape(nu, ns),
        fam,
        tuple(findings),
        unmeasured,
        estimated,
        unestimated,
        tax,
        basis,
    )


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
