"""One step's detail, on demand: what the HTML report's timeline of one step draws, and
:func:`report_parts`, everything the report draws beyond the analysis.

:func:`step_detail` takes a finished :class:`~traceoverlap.run.results.Analysis` and builds the
:class:`~traceoverlap.rank.detail.StepDetail` of one (rank, step): its activities per lane, the
unions and the overlapped / exposed spans, the exposed spans by cause, the phases. The analysis
keeps no events, so the one unit drawn is read again: from the Timeline the analysis was made
from (:attr:`Analysis.source`), else from its rank file (one file's events in memory, only for
the steps a report draws). Nothing here changes a number of the analysis.

:func:`report_parts` is the data half of ``traceoverlap report`` (and ``analyze --html``): the
one-rank timeline, then the same step across ranks when there are several and their files can be
read again; :func:`traceoverlap.reporters.html_report.render_parts` draws them::

    parts = report_parts(result, step="5")
    html = render_parts(result, parts)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import UsageError
from ..core.model import Timeline, TraceInfo, split_units
from ..core.options import describe_steps
from ..core.rules import Rules
from ..core.schema import STEP_NS
from ..rank.detail import StepDetail
from ..rank.unit import read_units, unit_step_detail
from ..readers.paths import part_of
from .across import StepAcross, step_across
from .results import Analysis


@dataclass(frozen=True)
class ReportParts:
    """What the HTML report draws beyond the analysis (:func:`report_parts`)."""

    #: the step drawn as a timeline, on one rank
    detail: StepDetail
    #: that step on every rank on one clock; None with one rank, or when the rank files cannot be
    #: read again (standard input)
    across: StepAcross | None


def report_parts(
    analysis: Analysis,
    *,
    step: Any = None,
    rank: int | None = None,
    jobs: int | None = None,
) -> ReportParts:
    """The parts of the HTML report of ``analysis``: the timeline of ``step`` on ``rank``
    (:func:`step_detail`; None: the lowest rank's median step), and the same step across ranks
    (:func:`traceoverlap.run.across.step_across`, reading the rank files again in ``jobs``
    processes) when the analysis has several ranks and their files are there to read.

    Raises :class:`UsageError` when the rank or step is not in the analysis."""
    detail = step_detail(analysis, rank, step)
    across = None
    # the step across ranks reads the rank files again: not possible from standard input
    if analysis.multi_rank and all(Path(t.path).is_file() for t in analysis.traces):
        across = step_across(analysis, step, detail=detail, jobs=jobs)
    return ReportParts(detail=detail, across=across)


def step_detail(
    analysis: Analysis, rank: int | None = None, step: Any = None, *, device: int | None = None
) -> StepDetail:
    """The :class:`StepDetail` of ``step`` on ``rank`` (and ``device``, for a process that drove
    several GPUs).

    ``rank`` None: the lowest rank in the step table; ``step`` None: that unit's median step by
    step time (the lower median; :attr:`StepDetail.chosen` says ``median``, else ``asked``).
    Raises :class:`UsageError` when the rank or step is not in the analysis."""
    unit, window, label = _choose(analysis, rank, step, device)
    t = analysis.traces[unit]
    rules = analysis.rules or Rules().with_comm_patterns(analysis.options.comm_patterns)
    timelines = (
        split_units(analysis.source)
        if analysis.source is not None
        else read_units(part_of(t.path, t.pid), analysis.options, rules)
    )
    local = unit_step_detail(_same_unit(timelines, t), analysis.options, rules, str(label))
    if local is None:  # the same options on the same file: cannot happen unless it changed
        raise UsageError(f"{t.path}: step {label} of rank {t.rank} not found on reading it again")
    spans = analysis.exposed_spans or {}
    by_cause = {c: (s[1][s[0] == window], s[2][s[0] == window]) for c, s in spans.items()}
    return replace(
        local,
        rank=t.rank,
        window=window,
        exposed_by_cause=by_cause,
        chosen="median" if step is None else "asked",
    )


def _choose(
    analysis: Analysis, rank: int | None, step: Any, device: int | None
) -> tuple[int, int, Any]:
    """(unit index, global window, step label) of the step asked for."""
    win = analysis.windows
    if win is None or win.empty:
        raise UsageError("no steps in the analysis: no step to draw")
    if rank is None:
        rank = int(analysis.steps["rank"].min())
    m = (win["rank"] == rank).to_numpy()
    if device is not None:
        m &= (win["device"] == device).to_numpy()
    if not m.any():
        shown = sorted({int(r) for r in win["rank"].tolist()})
        raise UsageError(f"timeline rank {rank}: no such rank (ranks: {shown})")
    unit = int(win["unit"].to_numpy()[m][0])
    mine = (win["unit"] == unit).to_numpy()
    rows = win[mine]
    if step is None:
        # the step table's rows are the windows' rows, in the same order
        step_ns = analysis.steps[STEP_NS.name].to_numpy(np.int64)[mine]
        pos = int(np.argsort(step_ns, kind="stable")[(len(step_ns) - 1) // 2])
    else:
        hits = np.flatnonzero((rows["step"].astype(str) == str(step)).to_numpy())
        if hits.size == 0:
            raise UsageError(
                f"timeline step {step}: rank {rank} has no such step "
                f"(steps: {describe_steps(list(rows['step']))})"
            )
        pos = int(hits[0])
    return unit, int(rows["window"].iloc[pos]), rows["step"].iloc[pos]


def _same_unit(units: Sequence[Timeline], t: TraceInfo) -> Timeline:
    """The unit read again that is the analysis' unit ``t``: same process and device (a rank
    only guessed may have been renumbered since), the same rank first."""
    same = [u for u in units if (u.traces[0].pid, u.traces[0].device) == (t.pid, t.device)]
    same.sort(key=lambda u: u.traces[0].rank != t.rank)
    if not same:
        raise UsageError(f"{t.path}: rank {t.rank} not found on reading it again")
    return same[0]
