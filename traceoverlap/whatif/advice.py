"""What the what-if adds to an analysis's "What to try" (docs/whatif.md §3): the scenarios that
buy the most, replayed on the run graph the analysis built in the same read, or why they were
left out. Data only: the reporters word it (:func:`traceoverlap.reporters.whatif_report.advice_lines`).

    >>> from traceoverlap import AnalyzeOptions, analyze
    >>> from traceoverlap.whatif import MAX_NODES, advise
    >>> a = analyze("runs/job/", AnalyzeOptions(graph=True, graph_max_nodes=MAX_NODES))
    >>> [(r.name, r.speedup) for r in advise(a).scenarios]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import TraceoverlapError
from ..run.results import Analysis
from .graph import run_graph
from .scenarios import ScenarioResult, WhatIf, straggler_of, what_if

#: "What to try" replays the run graph up to this many nodes: about 15 replays (the scenarios and
#: a fix-rank row per rank that matters) at ~4 µs per node each (benchmarks/bench_replay.py: 86 s
#: for 20.5 M nodes on 2 cores): about a minute at the limit. Pass it to ``AnalyzeOptions`` as
#: ``graph_max_nodes`` too, so that a larger run's graphs stop travelling from the map.
MAX_NODES = 1_000_000
#: "What to try" names at most this many scenarios ...
TOP_SCENARIOS = 3
#: ... each buying more than this speedup
MIN_SPEEDUP = 1.01


@dataclass(frozen=True)
class Advice:
    """The what-if part of "What to try". ``scenarios``: the ones that buy the most, best
    first (none but the identity replay's, each name once); ``findings``: the overlap-tax
    findings (:attr:`WhatIf.findings`); ``nodes``: the run graph's size (activities), and
    ``max_nodes`` the limit past which it was left out, not replayed (:attr:`left_out`).
    Empty where the analysis has no run graph (made without ``AnalyzeOptions(graph=True)``, or
    nothing to replay) or the replay refused it."""

    scenarios: tuple[ScenarioResult, ...] = ()
    findings: tuple[str, ...] = ()
    nodes: int = 0
    max_nodes: int = MAX_NODES
    #: what the overlap tax stands on (``measured`` / ``estimated``, :class:`~.tax.TaxBasis`):
    #: the ``no-overlap-tax`` line says it
    tax_kind: str = ""
    #: the identity replay's step (median over steps of the mean over ranks): a line whose
    #: speedup is against another baseline (:attr:`ScenarioResult.baseline_ns`, the replay
    #: measured from the same first starts) says so
    replay_ns: float | None = None

    @property
    def left_out(self) -> bool:
        """The run graph has more than ``max_nodes`` nodes: its replays would take minutes."""
        return self.nodes > self.max_nodes


def best_scenarios(w: WhatIf, n: int = TOP_SCENARIOS) -> tuple[ScenarioResult, ...]:
    """The ``n`` scenarios and fix-rank rows of ``w`` that buy the most (a speedup above
    :data:`MIN_SPEEDUP`), best first, each name once; not ``ideal``, a reference point (every
    launch delay zeroed), not something to try."""
    best = sorted(
        (
            r
            for r in w.scenarios + w.fix_rank
            if r.name not in ("replay", "ideal") and (r.speedup or 0) > MIN_SPEEDUP
        ),
        key=lambda r: -(r.speedup or 0),
    )
    out: dict[str, ScenarioResult] = {}
    for r in best:
        out.setdefault(r.name, r)
        if len(out) == n:
            break
    return tuple(out.values())


def advise(analysis: Analysis, max_nodes: int | None = None, top: int = TOP_SCENARIOS) -> Advice:
    """What the what-if adds to ``analysis``'s "What to try": every scenario that applies
    (:func:`~traceoverlap.whatif.scenarios.what_if`) replayed on the run graph the analysis
    built (``AnalyzeOptions(graph=True)``), the ``top`` best kept; left out past ``max_nodes``
    nodes (default :data:`MAX_NODES`). The graphs are not needed afterwards
    (``dataclasses.replace(analysis, unit_graphs=None)`` lets them go)."""
    limit = MAX_NODES if max_nodes is None else max_nodes
    nodes = analysis.run_graph_nodes
    if nodes > limit:
        return Advice(nodes=nodes, max_nodes=limit)
    g = run_graph(analysis)
    if g is None:
        return Advice(nodes=nodes, max_nodes=limit)
    try:
        straggler, credit = straggler_of(analysis)
        w = what_if(g, straggler=straggler, credit=credit, attribution=False)
    except TraceoverlapError:
        return Advice(nodes=nodes, max_nodes=limit)
    kind = str(w.tax_basis.get("kind", "")) if w.tax_basis else ""
    rep = np.array([np.nan if v is None else v for v in w.replayed_ns], dtype=np.float64)
    base = float(np.nanmedian(rep)) if np.isfinite(rep).any() else None
    return Advice(best_scenarios(w, top), w.findings, nodes, limit, kind, base)
