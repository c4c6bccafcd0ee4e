"""Counterfactuals (docs/whatif.md §3): change durations or gaps of the run graph, replay, and
report the run's step time (per step the mean over ranks, then the median over steps).

The scenarios, what they change and when they run: :mod:`traceoverlap.whatif.registry`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core.errors import TraceFormatError, UsageError
from ..core.model import Kind, Timeline
from ..core.options import AnalyzeOptions
from ..core.vocab import SHARED_CPU_MARK
from ..rank.graph import UnitGraph
from ..run.results import Analysis
from . import registry
from .graph import RunGraph, join_graphs, run_graph
from .replay import Params, Schedule, StepTimes, observed_params, replay, step_times
from .transforms import no_tax

I64 = npt.NDArray[np.int64]
#: Said where a scenario runs compute beside communication that the trace did not (whatif.md
#: §5): at least this share of the run's time (every rank's steps) more than the trace.
CONTENTION_MIN_RATIO = 0.01


def beside_ns(g: RunGraph, start: I64, end: I64) -> int:
    """Run total over units of the compute that ran beside communication (compute time: the
    nodes less the communication calls inside them, as ``overlap_ns`` counts it), with the nodes
    at ``start`` / ``end`` (the trace's, or a replay's: each piece moves with its node and ends
    no later than it)."""
    from ..core import intervals as iv
    from .tax import compute_pieces

    n = g.n_units
    node, ps, pe = compute_pieces(g)
    shift = start[node] - g.start_ns[node]
    ps, pe = ps + shift, np.minimum(pe + shift, end[node])
    comm = g.kind == Kind.COMM
    a = iv.grouped_union(g.unit[node], ps, pe, n)
    b = iv.grouped_union(g.unit[comm], start[comm], end[comm], n)
    return int(iv.grouped_length(iv.grouped_intersect(a, b, n), n).sum())


def contention(g: RunGraph, s: Schedule, replay_beside_ns: int) -> tuple[int, str]:
    """How much more compute the scenario's replay runs beside communication than the identity
    replay (a straggler gone, transfers moved), and the caveat that says so when it is at least
    :data:`CONTENTION_MIN_RATIO` of the run's time: the slowdown of that contention (the
    overlap tax, §4) is beyond replay and left out of the prediction. (0, "") otherwise."""
    more = beside_ns(g, s.start_ns, s.end_ns) - replay_beside_ns
    present = g.win_start_ns >= 0
    total = int((g.win_end_ns - g.win_start_ns)[present].sum())  # the run: every rank's steps
    if more <= 0 or more < CONTENTION_MIN_RATIO * total:
        return 0, ""
    return more, (
        f"runs {more / 1e6:.1f} ms more compute beside communication than the trace "
        f"({replay_beside_ns / 1e6:.1f} -> {(replay_beside_ns + more) / 1e6:.1f} ms, all "
        "ranks and steps): the slowdown of that contention is left out of the prediction"
    )


#: Said for CPU ranks sharing a host where a scenario shortens the step by at least this much.
SHARED_CPU_MIN_SPEEDUP = 1.05


def _rank_list(ranks: Sequence[int]) -> str:
    """``0-3`` for consecutive ranks, else ``0,2,5``."""
    rs = sorted(set(ranks))
    if len(rs) > 2 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"{rs[0]}-{rs[-1]}"
    return ",".join(str(r) for r in rs)


def shared_cpu_hosts(g: RunGraph) -> list[tuple[str, list[int]]]:
    """(host, ranks) for each host (``TraceInfo.host``) where two or more ranks compute on CPU:
    their compute and their gloo transfers share the host's cores."""
    by_host: dict[str, list[int]] = {}
    for u, host in enumerate(g.unit_host):
        if host is not None and u < g.unit_gpu.size and not g.unit_gpu[u]:
            by_host.setdefault(host, []).append(int(g.unit_rank[u]))
    return [(h, rs) for h, rs in by_host.items() if len(set(rs)) >= 2]


def shared_cpu_note(g: RunGraph, speedup: float | None) -> str:
    """whatif.md §5: a scenario that shortens the step of CPU ranks sharing a host runs the same
    work (the replay keeps every op's duration) more densely on the same cores, a contention the
    replay cannot see (a straggler's sleep left them free; removing it makes the others collide).
    The caveat where the speedup is at least :data:`SHARED_CPU_MIN_SPEEDUP`, else ""."""
    if speedup is None or speedup < SHARED_CPU_MIN_SPEEDUP:
        return ""
    hosts = shared_cpu_hosts(g)
    if not hosts:
        return ""
    where = "; ".join(f"ranks {_rank_list(rs)} {SHARED_CPU_MARK} {h}" for h, rs in hosts)
    return (
        f"{where} (compute and communication threads): the faster step runs the same work more "
        "densely on them, and the slowdown of that contention is left out of the prediction"
    )


@dataclass(frozen=True)
class ScenarioResult:
    name: str
    step_ns: float | None
    speedup: float | None
    changed: str
    ranks: tuple[int, ...] = ()
    collectives: tuple[str, ...] = ()
    steps_ns: tuple[float | None, ...] = ()
    note: str = ""
    #: how much more compute ran beside communication in this replay than in the identity
    #: replay, when that is enough for the note (ns, run total; 0 otherwise)
    contention_ns: int = 0
    #: what the scenario does with the observed slack (delays the graph does not explain):
    #: ``kept``, ``peers`` (the peers' median at each position), ``zeroed-host`` or ``zeroed``
    slack: str = "kept"
    #: the identity replay's step measured as this scenario's (every rank's first step from
    #: the earlier of its first starts in the two): what ``speedup`` divides; the replay's own
    #: step unless the scenario starts a rank earlier or later than the trace did
    baseline_ns: float | None = None


@dataclass(frozen=True)
class WhatIf:
    """The identity replay's error and every scenario asked."""

    step_labels: tuple[str, ...]
    observed_ns: tuple[float | None, ...]
    replayed_ns: tuple[float | None, ...]
    error_ratio: tuple[float | None, ...]
    median_error_ratio: float | None
    max_error_ratio: float | None
    scenarios: tuple[ScenarioResult, ...]
    fix_rank: tuple[ScenarioResult, ...]
    notes: tuple[str, ...] = field(default=())
    rounds: int = 0
    #: overlap tax (§4): run total, the comm-covered compute it is part of, per family, and per
    #: step the mean over ranks; findings when the tax eats a quarter of the saving
    tax_ns: int = 0
    tax_overlap_ns: int = 0
    tax_by_family_ns: tuple[tuple[str, int], ...] = ()
    tax_steps_ns: tuple[float | None, ...] = ()
    findings: tuple[str, ...] = ()
    #: per (rank, step) with compute under communication: (rank, step, overlap_tax_ns, overlap)
    tax_rank_steps: tuple[tuple[int, str, int, int], ...] = ()
    #: compute under communication whose tax could not be measured (no alone instances)
    tax_unmeasured_ns: int = 0
    #: the part of ``tax_ns`` estimated on that compute (its excess over its kernel's median
    #: instance, :mod:`traceoverlap.whatif.tax`)
    tax_estimated_ns: int = 0
    #: per step: how much of the step (mean over ranks) is slack, delays the graph does not
    #: explain (the identity replay less the replay with every slack zeroed); and its median
    #: share of the step
    slack_ns: tuple[float | None, ...] = ()
    slack_ratio: float | None = None
    #: the ``ideal`` scenario's slowdown S: the run without launch delays over the ideal run
    ideal_slowdown: float | None = None
    #: the ``ideal`` scenario's attribution (docs/whatif.md §3): per op type and per rank, the
    #: ideal run's step with that type / rank back at its observed durations, as a slowdown
    #: over the ideal (S_t, S_w of the published method); most first
    ideal_by_type: tuple[tuple[str, float], ...] = ()
    ideal_by_rank: tuple[tuple[int, float], ...] = ()
    #: the rank ``analyze`` names as the straggler (None: none, or not known here)
    straggler: int | None = None
    #: what the tax stands on: measured or estimated, from how many instances (tax.TaxBasis)
    tax_basis: dict[str, object] = field(default_factory=dict)
    #: ``tax_basis`` as the label every output puts on the tax ("estimated (...): ...")
    tax_label: str = ""


def load_graph(
    paths: str | Path | Sequence[str | Path],
    step_regex: str | None = None,
    jobs: int | None = None,
    options: AnalyzeOptions | None = None,
) -> RunGraph:
    """The run graph of the input, read as ``analyze`` reads it (the map per file, or per
    process of a large export; files that are not traces skipped, ranks joined into one run, the
    options obeyed): ``analyze(paths, options)`` with every unit's graph, then
    :func:`analysis_graph`. ``step_regex`` and ``jobs`` set those fields of ``options``."""
    from ..run.analysis import analyze

    opts = options or AnalyzeOptions()
    if step_regex is not None:
        opts = replace(opts, step_regex=step_regex)
    if jobs is not None:
        opts = replace(opts, jobs=jobs)
    return analysis_graph(analyze(paths, replace(opts, graph=True, graph_max_nodes=None)))


def analysis_graph(analysis: Analysis) -> RunGraph:
    """The run graph of an analysis made with ``AnalyzeOptions(graph=True)``
    (:func:`traceoverlap.whatif.graph.run_graph`); an error saying why where it has none."""
    g = run_graph(analysis)
    if g is not None:
        return g
    if analysis.run_graph_nodes:
        raise UsageError(
            f"the run graph ({analysis.run_graph_nodes:,} activities) was left out past "
            "graph_max_nodes; analyse without that limit to replay it"
        )
    paths = list(dict.fromkeys(t.path for t in analysis.traces)) or ["<timeline>"]
    where = paths[0] if len(paths) == 1 else f"{len(paths)} inputs ({paths[0]}, ...)"
    raise TraceFormatError(
        where,
        "no run graph to replay (no step found, or the analysis was made without its graph)",
        "check the step regex; analyse with AnalyzeOptions(graph=True)",
    )


def graph_of(timelines: Sequence[Timeline], step_regex: str | None = None) -> RunGraph:
    """The run graph of in-memory Timelines (one per rank, or one holding several)."""
    from ..core.model import split_units
    from ..core.options import build_options
    from ..core.rules import Rules
    from ..rank.classify import comm_call_mask, kinds
    from ..rank.graph import unit_graph
    from ..rank.hostwait import lane_calls
    from ..rank.steps import assign_steps
    from ..rank.unit import p2p_spans

    options = build_options(step_regex=step_regex)
    rules = Rules()
    units = []
    ranges: list[tuple[str, int]] = []  # of the units without a step marker
    matched = False
    for t in timelines:
        for u in split_units(t):
            kind = kinds(u, rules)
            steps = assign_steps(u, kind, options)
            matched = matched or steps.markers_found > 0
            if steps.markers_found == 0:
                ev = u.events
                ann = ev["name"][(ev["category"] == "annotation").to_numpy()].astype(str)
                ranges += [(str(k), int(v)) for k, v in ann.value_counts().head(8).items()]
            cpu = not steps.gpu
            calls = comm_call_mask(u, rules) if cpu else None
            ivs = lane_calls(u, kind, rules) if cpu else None
            span = p2p_spans(u, kind, rules) if cpu else None
            units.append(unit_graph(u, kind, steps, calls, ivs, span))
    if step_regex is not None and units and not matched:
        # as analyze refuses it: else the whole capture would be replayed as one "step"
        from ..run.analysis import regex_matched_nothing

        raise UsageError(regex_matched_nothing(ranges, step_regex, ["<timeline>"]))
    return _joined(units, "<timeline>")


def _joined(units: list[UnitGraph], where: str) -> RunGraph:
    units.sort(key=lambda u: (u.trace.rank, -1 if u.trace.device is None else u.trace.device))
    if not units or not any(u.labels for u in units):
        raise TraceFormatError(where, "no step found to replay", "check the step regex")
    return join_graphs(units)


def _median(x: npt.NDArray[np.float64]) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.median(x)) if x.size else None


def scenario_params(g: RunGraph, p: Params, name: str, tax: I64 | None = None) -> Params:
    """The parameters of one named scenario (:mod:`traceoverlap.whatif.registry`); ``tax``: the
    overlap tax per node (``no-overlap-tax``; default none)."""
    s, arg = registry.check(g, name)
    return s.apply(g, p, arg, tax if tax is not None else no_tax(g))


def _run(g: RunGraph, p: Params) -> tuple[StepTimes, Schedule]:
    s = replay(g, p)
    return step_times(g, s), s


def default_scenarios(g: RunGraph) -> list[str]:
    """Every scenario that applies to the run (each registry entry's ``defaults``): replay,
    no-straggler (2+ ranks), one hide per family, comm-speed:2, no-host-gaps, no-overlap-tax."""
    return registry.default_names(g)


def _compared(g: RunGraph, p: Params, ident: Schedule) -> tuple[StepTimes, StepTimes, Schedule]:
    """A scenario's replay (``p``) and its step times, with the identity replay's step times
    measured the same way: every unit's first step from the earlier of its first starts in
    the two (:func:`~traceoverlap.whatif.replay.step_times`), so a rank the scenario starts
    earlier than the trace (late from before the capture, begun with its peers) is measured
    from there in both."""
    s = replay(g, p)
    return step_times(g, s, ident), step_times(g, ident, s), s


def _result(
    g: RunGraph,
    name: str,
    run: tuple[StepTimes, StepTimes, Schedule],
    beside: int,
) -> ScenarioResult:
    st, base_st, sched = run
    step = _median(st.run_replayed_ns)
    base = _median(base_st.run_replayed_ns)
    speedup = base / step if base is not None and step else None
    scenario, arg = registry.parse(name)
    changed, ranks, colls = scenario.changed(g, arg)
    per = tuple(None if not np.isfinite(v) else float(v) for v in st.run_replayed_ns)
    more, note = contention(g, sched, beside)
    note = "; ".join(n for n in (note, shared_cpu_note(g, speedup)) if n)
    return ScenarioResult(
        name, step, speedup, changed, ranks, colls, per, note, more, scenario.slack, base
    )


#: At most this many ranks get a "fixing rank R buys" row.
FIX_RANK_ROWS = 8


def waiting_credit(g: RunGraph) -> dict[int, int]:
    """Per rank: the waiting it caused in the trace, the time the other members of each matched
    collective waited from their arrival (first node's start) to the last arrival, credited to
    the last to arrive (as analyze credits waiting, docs/diagnosis.md §6)."""
    from .replay import _members

    mb = _members(g)
    out = {int(r): 0 for r in np.unique(g.unit_rank).tolist()}
    if mb.n_inst == 0:
        return out
    first = np.full(mb.pair_inst.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, mb.pair, g.start_ns[mb.nodes])
    pair_unit = np.zeros(mb.pair_inst.size, dtype=np.int64)
    pair_unit[mb.pair] = g.unit[mb.nodes]
    order = np.lexsort((pair_unit, first, mb.pair_inst))  # per instance, the last arrival last
    last = np.ones(order.size, dtype=bool)
    last[:-1] = mb.pair_inst[order][1:] != mb.pair_inst[order][:-1]
    last_pair = order[last]
    arrival = np.full(mb.n_inst, 0, dtype=np.int64)
    arrival[mb.pair_inst[last_pair]] = first[last_pair]
    waited = arrival[mb.pair_inst] - first
    caused = np.bincount(mb.pair_inst, weights=waited, minlength=mb.n_inst)
    by_unit = np.bincount(
        pair_unit[last_pair], weights=caused[mb.pair_inst[last_pair]], minlength=g.n_units
    )
    for u, v in enumerate(by_unit.tolist()):
        out[int(g.unit_rank[u])] += int(v)
    return out


def ranks_that_matter(
    g: RunGraph, p: Params, n: int = FIX_RANK_ROWS, credit: Mapping[int, int] | None = None
) -> list[int]:
    """The ``n`` ranks that cause the most waiting (``credit``, default :func:`waiting_credit`):
    the ones whose fixing can buy the most; ties (ranks that cause none) by their own work
    (durations and gaps of their non-collective nodes), longest first."""
    own = (g.inst < 0).astype(np.int64)
    work = np.bincount(g.unit, weights=(p.dur_ns + p.slack_ns) * own, minlength=g.n_units)
    per_rank = pd.Series(work).groupby(g.unit_rank).sum()
    caused = credit if credit is not None else waiting_credit(g)
    ranks = sorted(
        (int(r) for r in per_rank.index),
        key=lambda r: (-int(caused.get(r, 0)), -float(per_rank[r]), r),
    )
    return ranks[:n]


def slack_steps(g: RunGraph, p: Params, replayed: StepTimes) -> npt.NDArray[np.float64]:
    """Per step (mean over ranks): how much of the identity replay's step is slack, the delays
    the graph does not explain (host think time, launch latency, waits it does not read): the
    identity replay less the replay with every slack zeroed."""
    z = Params(p.dur_ns, np.zeros_like(p.slack_ns), p.post_ns, p.floor_ns)
    bare, _ = _run(g, z)
    return np.maximum(replayed.run_replayed_ns - bare.run_replayed_ns, 0.0)


def _merge_notes(notes: Sequence[str]) -> list[str]:
    """Per-rank notes that say the same thing, said once with the ranks listed."""
    same: dict[str, list[str]] = {}
    out: list[str] = []
    for note in notes:
        m = re.match(r"^rank (\d+): (.*)$", note)
        if m is None:
            out.append(note)
            continue
        if m.group(2) not in same:
            same[m.group(2)] = []
            out.append(m.group(2))
        same[m.group(2)].append(m.group(1))
    return [f"rank(s) {', '.join(same[x])}: {x}" if x in same else x for x in out]


def _error_notes(g: RunGraph, err: npt.NDArray[np.float64]) -> list[str]:
    """Steps the identity replay misses by more than 5 %, and why where the graph says."""
    from .replay import broken_edges

    bad = np.flatnonzero(np.nan_to_num(err) > 0.05)
    if bad.size == 0:
        return []
    b = broken_edges(g)
    ok = g.window >= 0
    per = np.bincount(g.window[ok], weights=b[ok], minlength=len(g.step_labels))
    parts = [
        f"step {g.step_labels[k]}: {int(per[k])} activities started before an edge allowed"
        for k in bad.tolist()
    ]
    return [
        "identity replay misses by more than 5 % (" + "; ".join(parts) + "): the trace breaks "
        "its own order there (host/device clock skew, overlapping ops on a lane, a clipped "
        "capture) or holds a dependency the graph does not read (cross-stream syncs)"
    ]


#: Said where the time one rank's transfers (after the last arrival) were under way varies between
#: steps by at least this share of the median step: half the closed-loop tolerance of whatif.md §5 (20 %).
TRANSFER_SPREAD_MIN_RATIO = 0.10
#: ... over at least this many steps with matched collectives on that rank.
TRANSFER_SPREAD_MIN_STEPS = 3


#: Added to the transfer-spread note of a CPU rank (docs/whatif.md, Measured; docs/workloads.md).
GLOO_LOOP_HINT = (
    "; on CPU, gloo's TCP loop threads poll during a transfer and a thread they wake can wait a "
    "scheduler tick behind them on a shared core: the reference workloads' --gloo-loop idle "
    "steadies the transfers (docs/workloads.md)"
)


def transfer_busy_ns(g: RunGraph, p: Params) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Per unit and step window (``(n_units, n_steps)``): how long some matched collective's
    transfer after its last arrival (``post_ns``: the node's [end - post, end)) was under way on
    that unit, the union of those intervals (two at once count once, so it never exceeds the
    step); and whether the unit had any there."""
    from ..core import intervals as iv

    nw = len(g.step_labels)
    n = g.n_units * nw
    sel = (g.inst >= 0) & (g.window >= 0) & (p.post_ns > 0)
    key = g.unit[sel] * nw + g.window[sel]
    end = g.end_ns[sel]
    busy = iv.grouped_length(iv.grouped_union(key, end - p.post_ns[sel], end, n), n)
    has = np.bincount(key, minlength=n) > 0
    return busy.reshape(g.n_units, nw).astype(np.int64), has.reshape(g.n_units, nw)


def transfer_spread_note(g: RunGraph, p: Params, step_ns: float | None) -> str:
    """whatif.md §5: every scenario keeps each matched collective's transfer after its last
    arrival as the trace shows it in that step. Per rank and step, the time some transfer was
    under way (:func:`transfer_busy_ns`). Where that varies between steps by at least
    :data:`TRANSFER_SPREAD_MIN_RATIO` of the median replayed step (``step_ns``), the per-step
    predictions carry that variation: say so, with the widest rank's range. "" otherwise."""
    busy, has = transfer_busy_ns(g, p)
    if not step_ns or not has.any():
        return ""
    best: tuple[int, int, int, int] | None = None
    for u in range(g.n_units):
        t = busy[u, has[u]]
        if t.size >= TRANSFER_SPREAD_MIN_STEPS and (best is None or np.ptp(t) > best[0]):
            best = (int(np.ptp(t)), u, int(t.min()), int(t.max()))
    if best is None or best[0] < TRANSFER_SPREAD_MIN_RATIO * step_ns:
        return ""
    _, u, lo, hi = best
    cpu = g.unit_gpu.size > u and not bool(g.unit_gpu[u])
    return (
        f"transfers vary from step to step (rank {int(g.unit_rank[u])}: {lo / 1e6:.1f}-"
        f"{hi / 1e6:.1f} ms a step after the last arrivals, against a median step of "
        f"{step_ns / 1e6:.1f} ms): every scenario keeps each step's own transfers, so compare its "
        "median step with the median of several measured steps, not with one"
        + (GLOO_LOOP_HINT if cpu else "")
    )


def _unmeasured_note(
    unmeasured_ns: int,
    overlap_ns: int,
    shaped: bool = False,
    estimated_ns: int = 0,
    unestimated_ns: int = 0,
) -> str:
    """``shaped``: some nodes have a shape (GPU kernels' grid and block, CPU ops' input sizes),
    so the same kernel is the same name and shape for them (:func:`traceoverlap.whatif.tax.same_kernel`);
    ``estimated_ns``: the tax estimated on that compute (:mod:`traceoverlap.whatif.tax`)."""
    share = f" ({100 * unmeasured_ns / overlap_ns:.0f} %)" if overlap_ns else ""
    which = (
        "kernels and ops that never ran alone 3 or more times (the same name and shape, a "
        "kernel's grid and block or an op's input sizes, where the trace has one, else the same "
        "n-th call in its step)"
        if shaped
        else "ops that never ran alone in 3 or more steps (the same op, same n-th call in its "
        "step: a regular program overlaps it every step)"
    )
    text = (
        f"overlap tax: {unmeasured_ns / 1e6:.1f} ms of the {overlap_ns / 1e6:.1f} ms of compute "
        f"under communication{share} is in {which}: nothing alone to compare it with"
    )
    if unmeasured_ns > unestimated_ns:
        text += (
            f"; its tax there ({estimated_ns / 1e6:.1f} ms of the total) is estimated as each "
            "instance's excess over the median instance of its op: it sees instances that "
            "stalled beside communication, not a slowdown every instance shares, and counts "
            "ordinary jitter as tax"
        )
    if unestimated_ns:
        text += (
            f"; {unestimated_ns / 1e6:.1f} ms of it is not estimated either (ops that make a "
            "communication call, whose time includes waiting for their peers, or that ran "
            "fewer than 5 times): the tax is a lower bound there"
        )
    return text


#: The ideal's attribution per op type covers at most this many types (those whose observed
#: durations differ most from the ideal's, in total).
IDEAL_TYPES = 8


def ideal_attribution(
    g: RunGraph,
    p: Params,
    ideal_step: float | None,
    ranks: Sequence[int] | None = None,
    attribute: bool = True,
) -> tuple[float | None, tuple[tuple[str, float], ...], tuple[tuple[int, float], ...]]:
    """The published method's slowdown S (the run without launch delays over the ideal run) and
    its attribution: S_t per op type (the ideal with that type's nodes at their observed
    durations, over the ideal; the :data:`IDEAL_TYPES` types that differ most) and S_w per rank
    of ``ranks`` (default every rank; the ideal with that rank's nodes at theirs). One replay
    each: ``attribute=False`` gives S alone."""
    from .transforms import bare, ideal

    if not ideal_step:
        return None, (), ()
    base = _median(_run(g, bare(g, p))[0].run_replayed_ns)
    s = base / ideal_step if base else None
    if not attribute:
        return s, (), ()
    ip = ideal(g, p)
    dev = pd.Series(np.abs(p.dur_ns - ip.dur_ns)).groupby(g.name).sum()
    types = [int(t) for t in dev.sort_values(ascending=False).index[:IDEAL_TYPES] if dev[t] > 0]
    by_type = []
    for t in types:
        step = _median(_run(g, ideal(g, p, g.name == t))[0].run_replayed_ns)
        if step:
            by_type.append((g.names[t], step / ideal_step))
    by_rank = []
    for r in run_ranks_of(g) if ranks is None else ranks:
        step = _median(_run(g, ideal(g, p, g.unit_rank[g.unit] == r))[0].run_replayed_ns)
        if step:
            by_rank.append((r, step / ideal_step))
    return (
        s,
        tuple(sorted(by_type, key=lambda kv: -kv[1])),
        tuple(sorted(by_rank, key=lambda kv: -kv[1])),
    )


def run_ranks_of(g: RunGraph) -> list[int]:
    return sorted({int(r) for r in g.unit_rank.tolist()})


def straggler_of(analysis: Analysis) -> tuple[int | None, dict[int, int] | None]:
    """The rank ``analyze`` names as the straggler, and the waiting it credits to each rank (its
    blame chains' roots where it has them): what orders the "fixing rank R buys" rows."""
    coll = analysis.collectives
    if coll is None or coll.stragglers.empty:
        return None, None
    st = coll.stragglers
    col = "root_waited_for_ns" if "root_waited_for_ns" in st.columns else "exposed_waited_for_ns"
    credit = {int(r): int(v) for r, v in zip(st["rank"], st[col], strict=True)}
    return coll.top_straggler, credit


def what_if(
    g: RunGraph,
    scenarios: Iterable[str] | None = None,
    sync_tolerance_ns: int | None = None,
    straggler: int | None = None,
    credit: Mapping[int, int] | None = None,
    attribution: bool = True,
) -> WhatIf:
    """Identity replay (its error per step) and the scenarios (default: :func:`default_scenarios`),
    plus one ``fix-rank:R`` per rank that matters. ``sync_tolerance_ns``: how far the trace may
    contradict a guessed cross-stream sync edge before it is dropped (default
    :data:`~traceoverlap.whatif.graph.SYNC_TOLERANCE_NS`); ``straggler`` and ``credit``: the rank
    ``analyze`` names and the waiting it credits per rank (:func:`straggler_of`; default: the
    waiting credited in the graph, :func:`waiting_credit`); ``attribution``: the ``ideal``
    scenario's S_t / S_w (up to :data:`IDEAL_TYPES` types and the ranks of the fix-rank rows,
    a replay each; analyze's "What to try" leaves them out)."""
    from .graph import SYNC_TOLERANCE_NS, tolerate_guesses
    from .tax import tax_table

    names = list(scenarios) if scenarios else default_scenarios(g)
    for n in names:  # every name known before any is checked against the run
        registry.parse(n)
    for n in names:
        registry.check(g, n)
    tol = SYNC_TOLERANCE_NS if sync_tolerance_ns is None else sync_tolerance_ns
    g, sync_note = tolerate_guesses(g, tol)
    p = observed_params(g)
    ident, s = _run(g, p)
    obs = ident.run_observed_ns
    rep = ident.run_replayed_ns
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.where(obs > 0, np.abs(rep - obs) / obs, np.nan)
    base = _median(rep)
    tt = tax_table(g)  # the per-node tax once: the scenarios' and the tables'
    tax = tt.node_tax_ns
    beside = beside_ns(g, s.start_ns, s.end_ns)  # the identity replay's
    results = [_result(g, n, _compared(g, scenario_params(g, p, n, tax), s), beside) for n in names]
    # the identity schedule stays: each scenario is measured against it from the same first
    # starts (:func:`_compared`)
    rounds, settled = s.rounds, s.settled
    fix = []
    caused = dict(credit) if credit is not None else waiting_credit(g)
    if straggler is None and caused and max(caused.values()) > 0:
        straggler = max(caused, key=lambda r: (caused[r], -r))
    if np.unique(g.unit_rank).size >= 2:
        for r in ranks_that_matter(g, p, credit=caused):
            n = f"fix-rank:{r}"
            fix.append(_result(g, n, _compared(g, scenario_params(g, p, n, tax), s), beside))
    fix.sort(key=lambda r: -(r.speedup or 0))
    slack = slack_steps(g, p, ident)
    with np.errstate(invalid="ignore", divide="ignore"):
        slack_share = _median(np.where(rep > 0, slack / rep, np.nan))
    by_type: tuple[tuple[str, float], ...] = ()
    by_rank: tuple[tuple[int, float], ...] = ()
    ideal_s = None
    ideal_row = next((r for r in results if r.name == "ideal"), None)
    if ideal_row is not None:
        fixed = [int(r.name.split(":")[1]) for r in fix]
        ideal_s, by_type, by_rank = ideal_attribution(
            g, p, ideal_row.step_ns, fixed or None, attribution
        )
    present = g.win_start_ns >= 0
    cnt = present.sum(axis=0)
    tax_steps = tuple(
        float(t) / int(c) if c else None
        for t, c in zip(np.where(present, tt.step_tax_ns, 0).sum(axis=0), cnt, strict=True)
    )
    notes = _merge_notes(g.notes)
    notes += _straggler_notes(
        sync_note, _straggler_note(g, fix, straggler, caused), ideal_s, ideal_row
    )
    notes += _baseline_notes([*results, *fix], base)
    notes += _error_notes(g, err)
    spread = transfer_spread_note(g, p, base)
    if spread:
        notes.append(spread)
    if tt.unmeasured_ns:
        shaped = bool((g.shape >= 0).any())
        notes.append(
            _unmeasured_note(
                tt.unmeasured_ns,
                int(tt.step_overlap_ns.sum()),
                shaped,
                tt.estimated_ns,
                tt.unestimated_ns,
            )
        )
    hosts = shared_cpu_hosts(g) if tt.step_overlap_ns.any() else []
    if hosts:
        where = "; ".join(f"ranks {_rank_list(rs)} {SHARED_CPU_MARK} {h}" for h, rs in hosts)
        notes.append(
            f"overlap tax: {where}: their compute also slows beside the other ranks' threads, "
            "which the tax (compute beside its own rank's communication) does not count"
        )
    if not settled:
        notes.append(f"the replay did not settle in {rounds} rounds: its times are a lower bound")

    def opt(x: float) -> float | None:
        return float(x) if np.isfinite(x) else None

    return WhatIf(
        step_labels=g.step_labels,
        observed_ns=tuple(opt(x) for x in obs),
        replayed_ns=tuple(opt(x) for x in rep),
        error_ratio=tuple(opt(x) for x in err),
        median_error_ratio=_median(err),
        max_error_ratio=float(np.nanmax(err)) if np.isfinite(err).any() else None,
        scenarios=tuple(results),
        fix_rank=tuple(fix),
        notes=tuple(notes),
        rounds=rounds,
        tax_ns=int(tt.step_tax_ns.sum()),
        tax_overlap_ns=int(tt.step_overlap_ns.sum()),
        tax_unmeasured_ns=tt.unmeasured_ns,
        tax_estimated_ns=tt.estimated_ns,
        tax_basis=tt.basis.as_dict() if tt.basis is not None else {},
        tax_label=tt.basis.text() if tt.basis is not None else "",
        tax_by_family_ns=tuple(sorted(tt.family_tax_ns.items(), key=lambda kv: -kv[1])),
        tax_steps_ns=tax_steps,
        findings=tt.findings,
        tax_rank_steps=tuple(
            (
                int(g.unit_rank[u]),
                g.step_labels[k],
                int(tt.step_tax_ns[u, k]),
                int(tt.step_overlap_ns[u, k]),
            )
            for u, k in zip(*np.nonzero(present & (tt.step_overlap_ns > 0)), strict=True)
        ),
        slack_ns=tuple(opt(x) for x in slack),
        slack_ratio=slack_share,
        ideal_slowdown=ideal_s,
        ideal_by_type=by_type,
        ideal_by_rank=by_rank,
        straggler=straggler,
    )


def _straggler_notes(
    sync_note: str, agree: str, ideal_s: float | None, ideal_row: ScenarioResult | None = None
) -> list[str]:
    """The sync-tolerance note, the analyze/whatif agreement note and the ideal's slowdown,
    with its speedup against the replay split into its two factors: removing every launch
    delay and host gap (the replay keeps them as slack; on a host-bound trace most of the
    step), and evening the durations (S, the published method's straggler measure)."""
    notes = [n for n in (sync_note, agree) if n]
    if ideal_s is not None:
        split = ""
        if ideal_row is not None and ideal_row.speedup and ideal_s:
            split = (
                f"; its {ideal_row.speedup:.2f}x against the replay is "
                f"{ideal_row.speedup / ideal_s:.2f}x from removing every launch delay and host "
                f"gap (the slack the replay keeps) times that {ideal_s:.2f}x: compare S, not "
                "that speedup, for stragglers"
            )
        notes.append(
            f"ideal: the run without launch delays is {ideal_s:.2f}x the ideal run (the published "
            f"method's slowdown S; its attribution per op type and per rank in the JSON){split}"
        )
    return notes


#: Rows named in the note on the replay measured from the same first starts.
BASELINE_NOTE_ROWS = 4


def _baseline_notes(rows: Sequence[ScenarioResult], base: float | None) -> list[str]:
    """Where a scenario starts a rank earlier (or later) than the trace did, its speedup is
    against the replay measured from the same first starts (``baseline_ns``), not against the
    replay's own step: say so, with those baselines (one note)."""
    if base is None:
        return []
    moved = [
        (r.name, r.baseline_ns)
        for r in rows
        if r.baseline_ns is not None and abs(r.baseline_ns - base) >= 1
    ]
    if not moved:
        return []
    shown = ", ".join(f"{n} {b / 1e6:.2f} ms" for n, b in moved[:BASELINE_NOTE_ROWS])
    more = f" and {len(moved) - BASELINE_NOTE_ROWS} more" if len(moved) > BASELINE_NOTE_ROWS else ""
    return [
        f"{shown}{more}: these scenarios start some ranks at another time than the trace did "
        "(a rank late from before the capture begins with its peers), so their speedup is "
        f"against the replay measured from the same first starts, not its {base / 1e6:.2f} ms: "
        "a rank that starts earlier has not got a longer step (JSON baseline_ns)"
    ]


def runner_up(g: RunGraph, rank: int) -> tuple[list[int], float | None, int]:
    """Of the matched collectives where ``rank`` arrived last: the ranks that arrived next to
    last most often (up to 3), the median time between that arrival and ``rank``'s (ns), and
    how many such collectives there are. Fixing ``rank`` alone can buy no more than that time
    at each of them."""
    from .replay import _members

    mb = _members(g)
    if mb.n_inst == 0:
        return [], None, 0
    first = np.full(mb.pair_inst.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, mb.pair, g.start_ns[mb.nodes])
    pair_unit = np.zeros(mb.pair_inst.size, dtype=np.int64)
    pair_unit[mb.pair] = g.unit[mb.nodes]
    order = np.lexsort((pair_unit, first, mb.pair_inst))
    inst, t, who = mb.pair_inst[order], first[order], g.unit_rank[pair_unit[order]]
    last = np.ones(order.size, dtype=bool)
    last[:-1] = inst[1:] != inst[:-1]
    second = np.zeros(order.size, dtype=bool)
    second[:-1] = last[1:] & (inst[:-1] == inst[1:])
    mine = np.flatnonzero(last & (who == rank))
    mine = mine[second[np.maximum(mine - 1, 0)] & (mine > 0)]
    if mine.size == 0:
        return [], None, 0
    gaps = t[mine] - t[mine - 1]
    ranks = pd.Series(who[mine - 1]).value_counts().index[:3]
    return [int(r) for r in ranks], float(np.median(gaps)), int(mine.size)


def _straggler_note(
    g: RunGraph,
    fix: Sequence[ScenarioResult],
    straggler: int | None,
    caused: Mapping[int, int],
) -> str:
    """docs/whatif.md §3: the straggler ``analyze`` names is the top "fixing rank R buys" row,
    else the output says why not ("" where it is, or there is none): where it arrived last, the
    next ranks arrived close behind it (fixing it alone buys only that gap: it then waits for
    them)."""
    if straggler is None or not fix:
        return ""
    top = fix[0]
    mine = next((r for r in fix if r.name == f"fix-rank:{straggler}"), None)
    if mine is not None and (mine is top or (mine.speedup or 0) >= (top.speedup or 0)):
        return ""
    waited = caused.get(straggler, 0)
    if mine is None:
        return (
            f"analyze names rank {straggler} as the straggler ({waited / 1e6:.1f} ms of waiting "
            "traced to it) but it is not among the ranks replayed here"
        )
    why = (
        "the replay finds that rank's own time already at its peers' median at most positions, "
        "so its lateness comes from waits the graph reads as slack or from positions its peers "
        "do not share"
    )
    others, gap, n = runner_up(g, straggler)
    if others and gap is not None:
        who = ", ".join(str(r) for r in others)
        why = (
            f"where it arrived last ({n} collective(s)), rank(s) {who} arrived a median "
            f"{gap / 1e6:.2f} ms before it, so fixing it alone buys at most that there: it then "
            "waits for them (fix those ranks too, or compare no-straggler)"
        )
    return (
        f"analyze names rank {straggler} as the straggler ({waited / 1e6:.1f} ms of waiting "
        f"traced to it), but fixing it buys {_sx(mine.speedup)} against {_sx(top.speedup)} for "
        f"{top.name}: {why}"
    )


def _sx(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


__all__ = [
    "WhatIf",
    "ScenarioResult",
    "analysis_graph",
    "graph_of",
    "load_graph",
    "what_if",
    "scenario_params",
]
