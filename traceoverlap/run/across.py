"""One step across every rank, on one clock: what the report's "step across ranks" draws.

:func:`step_across` takes a finished :class:`~traceoverlap.run.results.Analysis` and one step label
(default: the step of the analysis' one-rank timeline, i.e. the lowest rank's median step, or
the step asked for) and builds, per unit that has that step, its compute / communication /
memory unions and its phase ranges, plus every collective instance of the step on every unit
with its wait and transfer parts. Every time is on the run's one clock: each unit's offset
(:attr:`Collectives.offsets_ns`, docs/diagnosis.md §5) is removed, so a collective that ends
together on all ranks ends at one x.

The analysis keeps no events, so the unions are rebuilt here by reading each rank file again
(in parallel like the analysis' map, one file's events in memory per worker); what is kept per
unit is bounded by that step's activities.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core import intervals as iv
from ..core.errors import UsageError
from ..core.model import Timeline, TraceInfo, split_units
from ..core.options import AnalysisOptions
from ..core.rules import Rules
from ..core.schema import (
    EXPOSED_COMM_NS,
    EXPOSED_NS,
    EXPOSED_WAIT_NS,
    STEP_NS,
    WAIT_NS,
    WAITED_FOR_RANK,
)
from ..rank.detail import StepDetail
from ..rank.unit import unit_step_detail
from .results import Analysis

if TYPE_CHECKING:
    from .matching import Collectives

I64 = npt.NDArray[np.int64]
Spans = tuple[I64, I64]

#: Per (instance, unit) columns of :attr:`StepAcross.instances`.
INSTANCE_COLUMNS = (
    "instance",
    "unit",
    "rank",
    "name",
    "family",
    "process_group",
    "seq",
    "start_ns",
    "end_ns",
    WAIT_NS.name,
    "transfer_ns",
    "last_rank",
    WAITED_FOR_RANK.name,
    "n_ranks",
    "matched",
    EXPOSED_NS.name,
)


@dataclass(frozen=True)
class RankStep:
    """One unit's step on the run's clock: its window, the unions C (compute), M (comm), Y
    (memory) and its phase ranges, all ns with the unit's clock offset removed."""

    unit: int
    rank: int
    device: int | None
    offset_ns: int
    start_ns: int
    end_ns: int
    step_ns: int
    exposed_comm_ns: int
    compute: Spans
    comm: Spans
    memory: Spans
    phases: tuple[I64, I64, tuple[str, ...]]
    #: communication outside every collective instance of the step on this unit (M minus the
    #: union of the instances' spans): what the instances do not already show
    other_comm: Spans = (np.zeros(0, np.int64), np.zeros(0, np.int64))


@dataclass(frozen=True)
class StepAcross:
    """One step across the ranks (see the module docstring).

    ``origin_ns`` / ``end_ns``: the earliest aligned window start and the latest aligned end.
    ``instances``: one row per (instance, unit) of the step (:data:`INSTANCE_COLUMNS`), aligned
    ``start_ns`` / ``end_ns``; the wait part is ``[start, start + wait_ns)``, the transfer part
    the rest; ``last_rank``: the last arrival (None: not matched, or a tie); ``waited_for_rank``:
    the rank the job model credits this rank's wait part to (docs/job-model.md: the last
    arrival, a directed send/recv's peer, the latest other member for the last arrival itself;
    None: no wait). ``waited_for``: per rank the others waited for in this step, the job
    model's credit of their exposed waiting (:func:`_waited_for`). ``missing``: ranks
    given that have no such step. ``clock``: how the clocks were aligned (``unix``,
    ``estimated``) or None (not aligned: each rank on its own clock). ``chosen``: ``asked`` or
    ``median`` (the median step by step time of rank ``median_of_rank``).
    """

    step: Any
    chosen: str
    origin_ns: int
    end_ns: int
    ranks: tuple[RankStep, ...]
    instances: pd.DataFrame
    missing: tuple[int, ...]
    clock: str | None
    waited_for: pd.DataFrame
    #: ``chosen`` "median": the rank whose median step this is
    median_of_rank: int | None = None
    #: the job model's blame rows of this step on the drawn ranks (docs/job-model.md), most
    #: exposed waiting first, with ``line``: the chain in one sentence (:func:`job.blame_line`)
    blame: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def n_matched(self) -> int:
        """Matched collective instances in the step."""
        m = self.instances[self.instances["matched"].astype(bool)]
        return int(m["instance"].nunique())


def default_step(analysis: Analysis, detail: StepDetail | None = None) -> Any:
    """The step drawn across ranks when none is asked: the one-rank timeline's step
    (``detail``), else the lowest rank's median step by step time (the lower median)."""
    if detail is not None:
        return detail.step
    df = analysis.steps
    low = df[df["rank"] == df["rank"].min()]
    order = np.argsort(low[STEP_NS.name].to_numpy(np.int64), kind="stable")
    return low["step"].iloc[int(order[(len(order) - 1) // 2])]


def step_across(
    analysis: Analysis,
    step: Any = None,
    *,
    detail: StepDetail | None = None,
    source: Timeline | None = None,
    rules: Rules | None = None,
    jobs: int | None = None,
) -> StepAcross:
    """Step ``step`` (None: :func:`default_step`) of every unit of ``analysis`` on one clock.

    ``detail``: the one-rank timeline drawn beside it (:func:`traceoverlap.run.detail.step_detail`),
    whose step is the default. ``source``: the Timeline the analysis was made from (default
    :attr:`Analysis.source`; None: the rank files named in ``analysis.traces`` are read again)."""
    from pathlib import Path

    from .parallel import run_map

    label = default_step(analysis, detail) if step is None else step
    if step is not None:
        chosen = "asked"
    else:
        chosen = detail.chosen if detail is not None else "median"
    source = source if source is not None else analysis.source
    if rules is not None or analysis.rules is None:
        rules = (rules or Rules()).with_comm_patterns(analysis.options.comm_patterns)
    else:
        rules = analysis.rules  # the analysis' own: its comm patterns already in
    details: list[tuple[TraceInfo, StepDetail | None]] = []
    if source is not None:
        details.extend(_unit_details(source, analysis.options, rules, label))
    else:
        paths = [Path(p) for p in dict.fromkeys(t.path for t in analysis.traces)]
        task = functools.partial(_file_details, options=analysis.options, rules=rules, step=label)
        for res in run_map(paths, task, jobs=jobs):
            assert isinstance(res, list)
            details.extend(res)
    out = _assemble(analysis, label, chosen, details)
    if chosen != "median":
        return out
    rank = detail.rank if detail is not None else int(analysis.steps["rank"].min())
    return replace(out, median_of_rank=rank)


def _unit_details(
    timeline: Timeline, options: AnalysisOptions, rules: Rules, step: Any
) -> list[tuple[TraceInfo, StepDetail | None]]:
    """Per unit of ``timeline``: its TraceInfo and the detail of step ``step`` (None: it has no
    such step), without the step's activity table (not drawn across ranks)."""
    out: list[tuple[TraceInfo, StepDetail | None]] = []
    for u in split_units(timeline):
        t = u.traces[0]
        d = unit_step_detail(u, options, rules, str(step))
        out.append((t, None if d is None else replace(d, activities=d.activities.iloc[:0])))
    return out


def _file_details(
    path: str, options: AnalysisOptions, rules: Rules, step: Any
) -> list[tuple[TraceInfo, StepDetail | None]]:
    """:func:`_unit_details` of one rank file (the map side: runs in a worker)."""
    from pathlib import Path

    from ..readers import read_trace

    return _unit_details(read_trace(Path(path)), options, rules, step)


def _assemble(
    analysis: Analysis,
    label: Any,
    chosen: str,
    details: Sequence[tuple[TraceInfo, StepDetail | None]],
) -> StepAcross:
    coll = analysis.collectives
    offsets = coll.offsets_ns if coll is not None else ()
    unit_of = {(t.path, t.pid, t.device): i for i, t in enumerate(analysis.traces)}
    rows: list[RankStep] = []
    for t, d in details:
        i = unit_of.get((t.path, t.pid, t.device))
        if i is None or d is None:
            continue
        off = int(offsets[i]) if i < len(offsets) else 0
        step = _step_row(analysis, i, d.step)
        if step is not None:  # a rank left out of the step table (--rank) is not drawn
            rows.append(_rank_step(analysis, i, off, d, step))
    rows.sort(key=lambda r: (r.rank, -1 if r.device is None else r.device))
    have = {r.rank for r in rows}
    shown = sorted({int(r) for r in analysis.steps["rank"].tolist()})
    missing = tuple(r for r in shown if r not in have)
    if not rows:
        raise UsageError(f"step {label}: no rank has such a step")
    inst = _instances(analysis, label, {r.unit: r.offset_ns for r in rows})
    rows = [_with_other_comm(r, inst) for r in rows]
    aligned = coll is not None and coll.clock is not None
    waited = _waited_for(coll, label, {r.unit for r in rows}) if aligned else _waited_for(None)
    return StepAcross(
        step=label,
        chosen=chosen,
        origin_ns=min(r.start_ns for r in rows),
        end_ns=max(r.end_ns for r in rows),
        ranks=tuple(rows),
        instances=inst,
        missing=missing,
        clock=None if coll is None else coll.clock,
        waited_for=waited,
        blame=_step_blame(coll, label, {r.rank for r in rows}),
    )


def _step_blame(coll: Collectives | None, label: Any, ranks: set[int]) -> pd.DataFrame:
    """The blame rows of step ``label`` on ``ranks``, most exposed waiting first, each with its
    sentence (``line``)."""
    from .job import blame_line, empty_blame

    b = coll.blame if coll is not None else empty_blame()
    b = b[(b["step"].astype(str) == str(label)).to_numpy() & b["rank"].isin(ranks).to_numpy()]
    b = b.sort_values([EXPOSED_WAIT_NS.name, "rank"], ascending=[False, True], kind="stable")
    b = b.reset_index(drop=True)
    return b.assign(line=[blame_line(r) for r in b.to_dict("records")])


def _waited_for(
    coll: Collectives | None, label: Any = None, units: set[int] | None = None
) -> pd.DataFrame:
    """Per rank the drawn units waited for in step ``label``: ``exposed_waited_for_ns`` (their
    exposed waiting credited to it by the job model, each ns once: docs/job-model.md) and
    ``instances`` (in how many matched instances), most waited for first (then the lower rank).
    The same credit as the blame rows, so the sentence and the chains below it agree."""
    cols = ["rank", "instances", "exposed_waited_for_ns"]
    cr = coll.credit if coll is not None else pd.DataFrame(columns=cols)
    if cr.empty:
        return pd.DataFrame(columns=cols)
    m = (cr["step"].astype(str) == str(label)).to_numpy() & cr["unit"].isin(units or set())
    cr = cr[m.to_numpy() & (cr[EXPOSED_WAIT_NS.name].to_numpy(np.int64) > 0)]
    g = cr.groupby(cr[WAITED_FOR_RANK.name].astype(np.int64))
    out = pd.DataFrame(
        {
            "rank": g.size().index.to_numpy(np.int64),
            "instances": g["instance"].nunique().to_numpy(np.int64),
            "exposed_waited_for_ns": g[EXPOSED_WAIT_NS.name].sum().to_numpy(np.int64),
        },
        columns=cols,
    )
    out = out.sort_values(["exposed_waited_for_ns", "rank"], ascending=[False, True])
    return out.reset_index(drop=True)


def _with_other_comm(r: RankStep, inst: pd.DataFrame) -> RankStep:
    m = inst["unit"].to_numpy(np.int64) == r.unit
    spans = iv.union(inst["start_ns"].to_numpy(np.int64)[m], inst["end_ns"].to_numpy(np.int64)[m])
    return replace(r, other_comm=iv.subtract(r.comm, spans))


def _step_row(analysis: Analysis, unit: int, step: Any) -> pd.Series | None:
    """The step table's row of ``unit``'s step ``step`` (None: not in the table)."""
    t = analysis.traces[unit]
    df = analysis.steps
    m = (df["rank"] == t.rank).to_numpy() & (df["step"].astype(str) == str(step)).to_numpy()
    if t.device is not None:
        m &= (df["device"] == t.device).to_numpy()
    return None if not m.any() else df[m].iloc[0]


def _rank_step(analysis: Analysis, unit: int, off: int, d: StepDetail, row: pd.Series) -> RankStep:
    t = analysis.traces[unit]

    def shift(s: Spans) -> Spans:
        return (s[0] - off, s[1] - off)

    ps, pe, names = d.phases
    return RankStep(
        unit=unit,
        rank=t.rank,
        device=t.device,
        offset_ns=off,
        start_ns=d.start_ns - off,
        end_ns=d.end_ns - off,
        step_ns=int(row[STEP_NS.name]),
        exposed_comm_ns=int(row[EXPOSED_COMM_NS.name]),
        compute=shift(d.compute),
        comm=shift(d.comm),
        memory=shift(d.memory),
        phases=(ps - off, pe - off, names),
    )


def _instances(analysis: Analysis, label: Any, offsets: dict[int, int]) -> pd.DataFrame:
    """The step's collective instances on the drawn units, aligned (see :class:`StepAcross`)."""
    coll = analysis.collectives
    if coll is None or coll.per_rank.empty:
        return pd.DataFrame(columns=list(INSTANCE_COLUMNS))
    pr = coll.per_rank
    pr = pr[(pr["step"].astype(str) == str(label)) & pr["unit"].isin(list(offsets)).to_numpy()]
    info = coll.instances.set_index("instance")
    off = pr["unit"].map(offsets).to_numpy(np.int64)
    matched = pr["matched"].to_numpy(bool)
    transfer = info["transfer_ns"].reindex(pr["instance"]).to_numpy(np.int64)
    return pd.DataFrame(
        {
            "instance": pr["instance"].to_numpy(np.int64),
            "unit": pr["unit"].to_numpy(np.int64),
            "rank": pr["rank"].to_numpy(np.int64),
            "name": pr["name"].to_numpy(),
            "family": pr["family"].to_numpy(),
            "process_group": info["process_group"].reindex(pr["instance"]).to_numpy(),
            "seq": info["seq"].reindex(pr["instance"]).to_numpy(),
            "start_ns": pr["start_ns"].to_numpy(np.int64) - off,
            "end_ns": pr["end_ns"].to_numpy(np.int64) - off,
            WAIT_NS.name: pr[WAIT_NS.name].to_numpy(np.int64),
            # unmatched: nothing to compare with, the whole span counts as transfer
            "transfer_ns": np.where(matched, transfer, pr["dur_ns"].to_numpy(np.int64)),
            "last_rank": info["last_rank"].reindex(pr["instance"]).to_numpy(),
            WAITED_FOR_RANK.name: pr[WAITED_FOR_RANK.name].to_numpy(),
            "n_ranks": info["n_ranks"].reindex(pr["instance"]).to_numpy(np.int64),
            "matched": matched,
            EXPOSED_NS.name: pr[EXPOSED_NS.name].to_numpy(np.int64),
        },
        columns=list(INSTANCE_COLUMNS),
    ).reset_index(drop=True)
