"""What an analysis produces: typed, frozen results that reporters only format.

- :class:`Analysis`: the step table (one row per (rank, device, step), columns
  :data:`STEP_COLUMNS`), the run and per-rank :class:`Summary`, the matched
  :class:`~traceoverlap.run.matching.Collectives`, the :class:`~traceoverlap.run.findings.Finding`
  list (what to try) and the notes.
- :class:`~traceoverlap.rank.detail.StepDetail` (everything the timeline of one step shows) is
  built on demand from an analysis by :func:`traceoverlap.run.detail.step_detail`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core.model import Timeline, TraceInfo
from ..core.options import AnalysisOptions
from ..core.schema import RATIO_METRICS, STEPS

if TYPE_CHECKING:
    from ..core.rules import Rules
    from ..rank.graph import UnitGraph
    from .findings import Finding
    from .matching import Collectives

I64 = npt.NDArray[np.int64]
Spans = tuple[I64, I64]

#: Step-row columns, in output order (:data:`traceoverlap.core.schema.STEPS`).
STEP_COLUMNS: tuple[str, ...] = STEPS.names


@dataclass(frozen=True)
class Stats:
    """Mean / median / p90 / min / max of one metric over steps (None when no step has it)."""

    mean: float | None = None
    median: float | None = None
    p90: float | None = None
    min: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class StepRef:
    """One step singled out by a summary (the most exposed, the slowest)."""

    rank: int
    device: int | None
    step: int | str
    step_ns: int
    exposed_comm_ns: int
    bottleneck: str
    reason: str


@dataclass(frozen=True)
class Summary:
    """Over a set of steps (a run, or one rank): statistics of every metric, totals, aggregate
    ratios (total / total; None when the denominator is 0), bottleneck counts, and the most
    exposed and slowest steps."""

    n_steps: int
    metrics: Mapping[str, Stats] = field(default_factory=dict)
    totals: Mapping[str, int] = field(default_factory=dict)
    overlap_ratio: float | None = None
    exposed_comm_ratio: float | None = None
    idle_ratio: float | None = None
    potential_speedup: float | None = None
    bottlenecks: Mapping[str, int] = field(default_factory=dict)
    dominant_bottleneck: str | None = None
    worst_step: StepRef | None = None
    slowest_step: StepRef | None = None

    def median(self, metric: str) -> float | None:
        s = self.metrics.get(metric)
        return None if s is None else s.median

    def stat(self, metric: str, stat: str = "median") -> float | None:
        s = self.metrics.get(metric)
        return None if s is None else getattr(s, stat)

    def aggregate(self, ratio: str) -> float | None:
        """A run aggregate ratio by name (``overlap_ratio``, ``exposed_comm_ratio``...)."""
        if ratio not in RATIO_METRICS:
            raise KeyError(ratio)
        value: float | None = getattr(self, ratio)
        return value


@dataclass(frozen=True)
class RunSummary:
    """The run's summary and one per unit (keyed by the unit's label: ``"0"``, or ``"0:1"`` for
    rank 0's GPU 1 when a process drove several GPUs)."""

    run: Summary
    ranks: Mapping[str, Summary]


@dataclass(frozen=True)
class Analysis:
    """Everything one analysis produced. Reporters only format this.

    ``traces``: one :class:`TraceInfo` per analysis unit (a rank, or one GPU of a process that
    drove several), in (rank, device) order. ``steps``: one row per (unit, step), columns
    :data:`STEP_COLUMNS`. ``summary``: run and per-unit :class:`Summary`. ``collectives``: the
    collective instances (matched across ranks when there are several). ``findings``: what to
    try, most important first. ``notes``: caveats a reader must know. ``unassigned``: per unit
    label, GPU activities in no step (launch missing or outside every marker). ``exposed_spans``: per cause (wait, tail,
    dependency, host), the exposed spans of every step as (global window, start ns, end ns) on
    each unit's own clock (``windows`` maps a window to its unit; the Perfetto export draws them).
    ``source``: the Timeline analysed when the input was one (a reference, not a copy), else None
    (the rank files named in ``traces`` are read again); ``rules``: the classification rules used.
    Both serve :func:`traceoverlap.run.detail.step_detail`, which draws one step on demand.
    """

    traces: tuple[TraceInfo, ...]
    steps: pd.DataFrame
    summary: RunSummary
    collectives: Collectives | None
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    options: AnalysisOptions
    unassigned: Mapping[str, int] = field(default_factory=dict)
    windows: pd.DataFrame | None = None
    exposed_spans: Mapping[str, tuple[I64, I64, I64]] | None = None
    source: Timeline | None = field(default=None, repr=False, compare=False)
    rules: Rules | None = field(default=None, repr=False, compare=False)
    #: every unit's run graph (docs/whatif.md §1) built in the same read, when analyze was asked
    #: for it (:func:`traceoverlap.whatif.graph.run_graph` joins them); their node count (also
    #: when they were left out for passing ``graph_max_nodes``)
    unit_graphs: tuple[UnitGraph, ...] | None = field(default=None, repr=False, compare=False)
    run_graph_nodes: int = 0

    @property
    def ranks(self) -> list[int]:
        return sorted({t.rank for t in self.traces})

    @property
    def multi_rank(self) -> bool:
        return len(self.traces) > 1

    def step_row(self, rank: int, step: Any, device: int | None = None) -> pd.Series:
        df = self.steps
        m = (df["rank"] == rank) & (df["step"].astype(str) == str(step))
        if device is not None:
            m &= df["device"] == device
        rows = df[m]
        if rows.empty:
            from ..core.errors import UsageError

            raise UsageError(f"no step {step} on rank {rank}")
        return rows.iloc[0]
