"""The library entry points: :func:`load` a trace (or a run) and :func:`analyze` it.

    >>> import traceoverlap
    >>> result = traceoverlap.analyze("fixtures/workloads/bucketed")
    >>> result.steps[["rank", "step", "overlap_ratio", "exposed_comm_ns", "bottleneck"]]

Flow: files -> per-rank map (:mod:`traceoverlap.rank.unit`: read, classify, steps, metrics, local
causes, collective instances) -> cross-rank reduce (here: check the files can be one run, match
collectives across ranks, split waiting from transfer, verdicts, summaries, findings) ->
:class:`~traceoverlap.run.results.Analysis` -> reporters. Peak memory is bounded by the largest
rank file (times the number of parallel jobs), not by the job.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core import intervals as iv
from ..core._collector import resume
from ..core.errors import TraceFormatError, UsageError
from ..core.intervals import GroupedIntervals
from ..core.model import Timeline, TraceInfo, concat_timelines
from ..core.options import AnalysisOptions, AnalyzeOptions, Thresholds, describe_steps
from ..core.rules import Rules
from ..core.schema import (
    BOTTLENECK,
    COMM_NS,
    DEVICE,
    EXPOSED_BY_CAUSE,
    EXPOSED_COMM_NS,
    EXPOSED_COMM_RATIO,
    EXPOSED_TRANSFER_NS,
    EXPOSED_UNMATCHED_NS,
    EXPOSED_WAIT_NS,
    IDEAL_NS,
    IDLE_NS,
    IDLE_RATIO,
    ITERATION_NS,
    OVERLAP_NS,
    OVERLAP_RATIO,
    PID,
    POTENTIAL_SPEEDUP,
    RANK,
    REASON,
    ROOT_WAITED_FOR_NS,
    STEP,
    STEP_NS,
    STEPS,
    WAIT_KNOWN,
    WAITED_FOR_RANK,
    Table,
    conform,
)
from ..core.vocab import CAUSES, Cause
from ..rank.metrics import ratio
from ..rank.unit import FileResult, UnitResult, map_file, map_timeline, require_device_activity
from ..readers.paths import Inputs, expand_paths, made_by_this_run, map_units, resolve_inputs
from .bandwidth import add_bandwidth, family_bandwidth
from .findings import AdviceContext, findings
from .job import blame_table, empty_blame, straggler_verdict, top_blame
from .matching import CauseSets, Collectives, match_collectives
from .onerun import one_run
from .parallel import run_map
from .purpose import attach_purposes, prefetching
from .results import STEP_COLUMNS, Analysis
from .summary import summarize_run, unit_key
from .verdicts import partial_hedge, verdict

if TYPE_CHECKING:
    from ..rank.graph import UnitGraph

PathLike = str | Path
I64 = npt.NDArray[np.int64]
_R = TypeVar("_R")


def load(
    paths: PathLike | Sequence[PathLike], rules: Rules | None = None, jobs: int | None = None
) -> Timeline:
    """Read one trace, several, or a folder of rank traces into one classified Timeline (all
    events in memory: for exploring a trace in Python; :func:`analyze` never needs this)."""
    from ..rank.classify import classify
    from ..readers import read_trace

    files = expand_paths(paths)
    timelines = [read_trace(f) for f in files]
    return classify(concat_timelines(timelines), rules)


def analyze(
    source: PathLike | Sequence[PathLike] | Timeline, options: AnalyzeOptions | None = None
) -> Analysis:
    """Analyze a trace, several rank traces, a folder, or a Timeline; see :class:`Analysis`.

    ``options``: step selection, thresholds, extra communication patterns, ranks shown, parallel
    map (:class:`~traceoverlap.core.options.AnalyzeOptions`; default: all defaults). One step's
    timeline is drawn afterwards, on demand: :func:`traceoverlap.run.detail.step_detail`.
    """
    resume()  # the command's modules are loaded (traceoverlap.core._collector)
    opts = options or AnalyzeOptions()
    aopts = opts.analysis_options()
    rules = (opts.rules or Rules()).with_comm_patterns(aopts.comm_patterns)
    skipped: list[str] = []
    timeline: Timeline | None
    if isinstance(source, Timeline):
        names, timeline = ["<timeline>"], source
    else:
        inputs = resolve_inputs(source)  # once: the folders listed, the files checked
        names, timeline = inputs.names, _lone_stream(inputs)
    if timeline is not None:
        mapped = FileResult(names[0], map_timeline(timeline, aopts, rules, opts.graph))
        results = list(_graphs_capped([mapped], opts.graph_max_nodes))
    else:
        results = _map_files(inputs, aopts, rules, opts, skipped)
    units = _merge(results)
    if aopts.ranks is not None:
        present = sorted({u.trace.rank for u in units})
        missing = [r for r in aopts.ranks if r not in present]
        if missing:
            raise UsageError(f"ranks {missing}: not in the input (ranks present: {present})")
    # every rank given is matched; --rank only chooses what is shown (diagnosis.md §6)
    units.sort(key=lambda u: (u.trace.rank, -1 if u.trace.device is None else u.trace.device))
    if aopts.step_regex is not None and units and not any(u.markers_found for u in units):
        raise UsageError(_regex_matched_nothing(units, aopts.step_regex, names))
    result = _reduce(units, aopts, skipped, names)
    result = replace(result, source=timeline, rules=rules)
    return _with_run_graph(result, units)


def _graphs_capped(results: Iterable[_R], limit: int | None) -> Iterator[_R]:
    """The map's results; once the run graphs seen so far pass ``limit`` nodes, each unit's
    graph is dropped (its node count kept): the run graph will be left out anyway, and what is
    held stays about ``limit`` nodes plus one file's."""
    total = 0
    for res in results:
        if limit is not None and isinstance(res, FileResult):
            total += sum(u.graph_nodes for u in res.units)
            if total > limit:
                units = tuple(replace(u, graph=None) for u in res.units)
                res = cast(_R, replace(res, units=units))
        yield res


def _with_run_graph(result: Analysis, units: Sequence[UnitResult]) -> Analysis:
    """The units' run graphs (docs/whatif.md §1), when the map built them, kept for the what-if
    stage to join (none when no unit has a step to replay, or when some were dropped)."""
    nodes = sum(u.graph_nodes for u in units)
    if any(u.graph is None and u.graph_nodes for u in units):
        return replace(result, run_graph_nodes=nodes)
    graphs = [_as_numbered(u.graph, u.trace) for u in units if u.graph is not None]
    if not any(g.labels for g in graphs):
        return result
    return replace(result, unit_graphs=tuple(graphs), run_graph_nodes=nodes)


def _as_numbered(graph: UnitGraph, trace: TraceInfo) -> UnitGraph:
    """A unit's graph under the rank :func:`one_run` gave the unit (``trace``): where a guessed
    rank was renumbered, the graph's notes say the new rank, and why."""
    old, new = graph.trace.rank, trace.rank
    if old == new:
        return graph
    notes = tuple(
        f"rank {new}: {n[len(f'rank {old}: ') :]}" if n.startswith(f"rank {old}: ") else n
        for n in graph.notes
    )
    return replace(graph, trace=trace, notes=(*notes, f"rank {new}: {trace.notes[-1]}"))


def _lone_stream(inputs: Inputs) -> Timeline | None:
    """A single input that is standard input or a pipe is read here, once, and analysed as a
    Timeline (kept, so that :func:`traceoverlap.run.detail.step_detail` can draw a step of it: a
    stream cannot be read again); None for any other input."""
    from ..readers import read_trace
    from ..readers._bytes import is_stream

    if len(inputs.files) != 1 or not is_stream(inputs.files[0]):
        return None
    timeline = read_trace(inputs.files[0])
    require_device_activity(timeline, str(inputs.files[0]))
    return timeline


def _map_files(
    inputs: Inputs,
    options: AnalysisOptions,
    rules: Rules,
    opts: AnalyzeOptions,
    skipped: list[str],
) -> list[FileResult]:
    """The map over the input files: their results; files of a folder that are not traces (or
    are empty outputs of this very run) are skipped with a note in ``skipped``."""
    listed = inputs.listed
    work = map_units(inputs.files)  # a file its format cuts into processes: one unit each
    task = functools.partial(map_file, options=options, rules=rules, graph=opts.graph)
    results = []
    answers = run_map(work, task, jobs=opts.jobs, scheduler=opts.scheduler, notes=skipped)
    for res in _graphs_capped(answers, opts.graph_max_nodes):
        assert isinstance(res, FileResult)
        if res.error is not None:
            path, reason, hint = res.error
            if res.path in listed and res.not_a_trace:
                skipped.append(f"skipped {path}: {reason}")
                continue
            if res.path in listed and made_by_this_run(res.path):
                skipped.append(f"skipped {path}: empty, created by this run (a redirect?)")
                continue
            raise TraceFormatError(path, reason, hint)
        results.append(res)
    return results


# --- one run from several files ------------------------------------------------------------------


def _merge(results: Sequence[FileResult]) -> list[UnitResult]:
    """The units of every file as one run (:func:`traceoverlap.run.onerun.one_run`)."""
    return one_run([res.units for res in results], _unit_span)


def _unit_span(u: UnitResult) -> tuple[int, int] | None:
    if not u.n_windows:
        return None
    return int(u.parts["start_ns"].min()), int(u.parts["end_ns"].max())


# --- the reduce ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RunWindows:
    """The windows of every unit in one global numbering: window ``w`` of unit ``i`` is global
    window ``offsets[i] + w``.

    ``offsets``: the first global window of each unit, then the total (``len(units) + 1``
    values); ``unit_of``: per global window, its unit's index; ``labels``: per global window,
    its step label; ``parts``: per global window, the unit's parts columns (``step_ns``,
    ``compute_ns``, ... ``start_ns``, ``end_ns``; int64 ns).
    """

    offsets: I64
    unit_of: I64
    labels: list[Any]
    parts: dict[str, I64]

    @property
    def n(self) -> int:
        return int(self.offsets[-1])


def _reduce(
    units: list[UnitResult], options: AnalysisOptions, skipped: list[str], names: list[str]
) -> Analysis:
    """The run's :class:`Analysis` from its units: collectives matched across ranks, exposed
    time split by cause, the step table with verdicts, findings and notes."""
    traces = tuple(u.trace for u in units)
    win = _run_windows(units)
    if win.n == 0:
        raise UsageError(_no_steps_message(units, options, names))
    prelim = pd.DataFrame(
        {
            "rank": [traces[u].rank for u in win.unit_of],
            "step": win.labels,
            STEP_NS.name: win.parts[STEP_NS.name],
        }
    )
    local = _gather_instances(units, win)
    coll, sets, family_causes = match_collectives(
        local,
        _gather_pieces(units, win),
        _gather_causes(units, win),
        win.n,
        traces,
        win.labels,
        prelim,
    )
    world = max((t.world_size or 0 for t in traces), default=0) or None
    inst, per_rank = attach_purposes(add_bandwidth(coll.instances, world), coll.per_rank, local)
    coll = replace(coll, instances=inst, per_rank=per_rank)
    blame = _blame(units, coll, win)
    coll = replace(coll, blame=blame, stragglers=_with_roots(coll.stragglers, blame))
    df = _step_table(units, win, coll, sets, options.thresholds)
    coll = replace(
        coll,
        verdict=straggler_verdict(coll.blame, df, options.thresholds.straggler_ratio)
        if coll.aligned
        else None,
    )
    shown = _shown_windows(df, options)
    if not shown.any():
        raise UsageError(
            f"ranks {list(options.ranks or ())}: no steps to analyze on them (the other ranks "
            "given have some); check --steps / --step-regex"
        )
    df, family_causes, rows = _select_shown(
        df, family_causes, _finding_rows(coll, df, traces), shown
    )
    top = coll.top_straggler
    fnd = findings(
        df,
        rows,
        family_causes,
        straggler=top,
        straggler_text=None if top is None else _among(str(top), coll),
        straggler_ns=None if top is None else _root_ns(coll, top),
        straggler_note=None if coll.verdict is None else coll.verdict.text(),
        partial=partial_hedge(coll.ranks_given, coll.world_size),
        blame=_shown_blame(coll.blame, df),
        context=AdviceContext(
            cpu=bool(units) and all(u.trace.device is None for u in units),
            bucketed=any(u.strategy is not None and u.strategy.bucketed for u in units),
            bandwidth=family_bandwidth(coll.instances),
            pytorch=any(u.strategy is None or u.strategy.pytorch for u in units),
            prefetch=prefetching(units),
            side=frozenset(f for u in units if u.strategy for f in u.strategy.side_families),
        ),
    )
    analysis = Analysis(
        traces=traces,
        steps=conform(df.reset_index(drop=True), STEPS),
        summary=summarize_run(df),
        collectives=coll.conformed(),
        findings=fnd,
        notes=_notes(units, coll, skipped),
        options=options,
        unassigned=_unassigned(units),
        windows=conform(_windows_frame(units, win)[shown].reset_index(drop=True), WINDOWS),
        exposed_spans=sets.by_name(),
    )
    return analysis


#: ``Analysis.windows``: no output table, only columns the step table shares
WINDOWS = Table("windows", "Analysis.windows", ())


def _blame(units: Sequence[UnitResult], coll: Collectives, win: _RunWindows) -> pd.DataFrame:
    """Blame chains and root causes (docs/job-model.md) from the credit and the units' ranges."""
    pr = coll.per_rank
    if coll.credit.empty or pr.empty:
        return empty_blame()
    m = pr[pr["matched"].astype(bool).to_numpy()]
    off = (m["start_ns"] - m["aligned_start_ns"]).groupby(m["unit"]).first()
    unit_of_rank: dict[int, int] = {}
    for i, u in enumerate(units):
        unit_of_rank.setdefault(u.trace.rank, i)
    return blame_table(
        coll.credit,
        pr,
        {i: u.host_ranges for i, u in enumerate(units)},
        unit_of_rank,
        {int(k): int(v) for k, v in off.items()},
        win.parts["start_ns"],
    )


def _root_ns(coll: Collectives, rank: int) -> int:
    """The exposed waiting that traces back to ``rank`` (its blame chains' roots), else the
    exposed waiting credited to it directly."""
    row = coll.stragglers.set_index("rank").loc[rank]
    root = int(row.get(ROOT_WAITED_FOR_NS.name, 0))
    return root if root > 0 else int(row["exposed_waited_for_ns"])


def _with_roots(st: pd.DataFrame, blame: pd.DataFrame) -> pd.DataFrame:
    """The straggler table with ``root_waited_for_ns`` (the exposed waiting whose blame chain
    ends at the rank; sums to the run's exposed wait like the credit), most blamed first."""
    roots = (
        blame.groupby("root_rank")[EXPOSED_WAIT_NS.name].sum()
        if len(blame)
        else pd.Series(dtype=np.int64)
    )
    st = st.assign(
        root_waited_for_ns=roots.reindex(st["rank"].to_numpy(), fill_value=0).to_numpy(np.int64)
    )
    st = st.sort_values(
        [ROOT_WAITED_FOR_NS.name, "exposed_waited_for_ns", "last_count", "rank"],
        ascending=[False, False, False, True],
        kind="stable",
    )
    return st.reset_index(drop=True)


def _shown_blame(blame: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """The blame rows of the shown ranks, summed for the findings (:func:`job.top_blame`)."""
    if blame.empty:
        return blame
    return top_blame(blame[blame["rank"].isin(set(df["rank"].tolist()))])


def _shown_windows(df: pd.DataFrame, options: AnalysisOptions) -> npt.NDArray[np.bool_]:
    """Per global window: is it shown (its rank selected; all when no ranks were asked)?"""
    if options.ranks is None:
        return np.ones(len(df), dtype=bool)
    return np.asarray(df["rank"].isin(set(options.ranks)).to_numpy(), dtype=bool)


def _select_shown(
    df: pd.DataFrame, fc: pd.DataFrame, rows: pd.DataFrame, shown: npt.NDArray[np.bool_]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The step rows, family causes and per-collective rows of the shown windows, with windows
    renumbered to positions in the shown step table (the findings index steps by position)."""
    if shown.all():
        return df, fc, rows
    keep = np.flatnonzero(shown)
    pos = np.full(len(df), -1, dtype=np.int64)
    pos[keep] = np.arange(keep.size)
    fc = fc[fc["window"].isin(keep)] if len(fc) else fc
    fc = fc.assign(window=pos[fc["window"].to_numpy(np.int64)]) if len(fc) else fc
    rows = rows[rows["window"].isin(keep)] if len(rows) else rows
    rows = rows.assign(window=pos[rows["window"].to_numpy(np.int64)]) if len(rows) else rows
    return df.iloc[keep].reset_index(drop=True), fc, rows


def _run_windows(units: Sequence[UnitResult]) -> _RunWindows:
    """The units' windows, labels and parts columns concatenated in unit order."""
    offsets = np.cumsum([0] + [u.n_windows for u in units]).astype(np.int64)
    cols: dict[str, list[Any]] = {}
    for u in units:
        for k, v in u.parts.items():
            cols.setdefault(k, []).append(v)
    return _RunWindows(
        offsets=offsets,
        unit_of=np.repeat(np.arange(len(units)), [u.n_windows for u in units]),
        labels=[lbl for u in units for lbl in u.labels],
        parts={k: np.concatenate(v).astype(np.int64) for k, v in cols.items()},
    )


def _gather_instances(units: Sequence[UnitResult], win: _RunWindows) -> pd.DataFrame:
    """All units' local collective instances in one frame, with their ``unit`` index and their
    ``window`` in global numbering (-1: outside every analysed step)."""
    # a unit without instances has an untyped empty frame: concatenated with the others it would
    # turn their integer columns into objects (pandas 3)
    typed = [i for i, u in enumerate(units) if len(u.instances)]
    if not typed:
        frames = []
        for i, u in enumerate(units):
            w = u.instances["window"]
            frames.append(u.instances.assign(unit=i, window=np.where(w >= 0, w, -1)))
        if not frames:
            return pd.DataFrame(columns=["unit", "window"])
        return pd.concat(frames, ignore_index=True)
    # concatenated first, the unit and global window set once (not an assign per unit)
    sizes = [len(units[i].instances) for i in typed]
    out = pd.concat([units[i].instances for i in typed], ignore_index=True)
    w = out["window"].to_numpy()
    off = np.repeat(win.offsets[typed], sizes)
    return out.assign(
        unit=np.repeat(np.asarray(typed, dtype=np.int64), sizes),
        window=np.where(w >= 0, w + off, -1),
    )


def _cat(arrays: Sequence[Any]) -> I64:
    """Int64 arrays concatenated (an empty one for none)."""
    return np.concatenate(arrays).astype(np.int64) if arrays else np.zeros(0, np.int64)


def _gather_pieces(units: Sequence[UnitResult], win: _RunWindows) -> tuple[I64, I64, I64, I64]:
    """Every instance piece of the run as (instance row in :func:`_gather_instances`' frame,
    global window, start ns, end ns)."""
    rows0 = np.cumsum([0] + [len(u.instances) for u in units])
    inst, window, start, end = [], [], [], []
    for i, u in enumerate(units):
        pg, ps, pe = u.pieces
        inst.append(u.piece_instance + int(rows0[i]))
        # a piece's group is local instance * n_windows + window (n_windows at least 1)
        window.append(pg % max(u.n_windows, 1) + int(win.offsets[i]))
        start.append(ps)
        end.append(pe)
    return _cat(inst), _cat(window), _cat(start), _cat(end)


def _gather_causes(units: Sequence[UnitResult], win: _RunWindows) -> dict[str, GroupedIntervals]:
    """The units' local cause sets (tail / dependency / host, ns) grouped by global window."""
    out: dict[str, GroupedIntervals] = {}
    for c in CAUSES[1:]:
        sets = [u.causes[c] for u in units]
        out[c] = (
            _cat([g + int(win.offsets[i]) for i, (g, _, _) in enumerate(sets)]),
            _cat([s for _, s, _ in sets]),
            _cat([e for _, _, e in sets]),
        )
    return out


def _wait_known(
    units: Sequence[UnitResult], win: _RunWindows, coll: Collectives
) -> npt.NDArray[np.bool_]:
    """Per global window: can waiting be told apart from transfer? Only with several units, on
    a unit whose collectives were matched across ranks (or that has no communication at all)."""
    multi = len(units) > 1
    matched_units = set(coll.per_rank.loc[coll.per_rank["matched"].astype(bool), "unit"].tolist())
    has_comm = (
        np.bincount(win.unit_of, weights=win.parts[COMM_NS.name] > 0, minlength=len(units)) > 0
    )
    known = np.array([multi and (u in matched_units or not has_comm[u]) for u in range(len(units))])
    return np.asarray(known[win.unit_of])


def _step_table(
    units: Sequence[UnitResult],
    win: _RunWindows,
    coll: Collectives,
    sets: CauseSets,
    thresholds: Thresholds,
) -> pd.DataFrame:
    """The step table (:data:`STEP_COLUMNS`), one row per global window: the units' parts, the
    exposed ns split by cause across ranks, the ratios, and each step's verdict."""
    traces = [u.trace for u in units]
    unit_of, base = win.unit_of, win.parts
    cause_ns = {c: iv.grouped_length(s, win.n) for c, s in sets.by_name().items()}
    unmatched_ns = iv.grouped_length(sets.unmatched, win.n)
    unmatched_why = _unmatched_why(coll, win.n)
    wait_known = _wait_known(units, win, coll)
    waited_for = _waited_for(coll, win.n)
    step = base[STEP_NS.name]
    exposed_ns = base[EXPOSED_COMM_NS.name]
    cols: dict[str, Any] = {
        **{k: v for k, v in base.items() if k in STEP_COLUMNS},
        RANK.name: np.array([traces[u].rank for u in unit_of], dtype=np.int64),
        DEVICE.name: pd.array([traces[u].device for u in unit_of], dtype=object),
        PID.name: pd.array([traces[u].pid for u in unit_of], dtype=object),
        STEP.name: pd.array(win.labels, dtype=object),
        **{col.name: cause_ns[c] for c, col in EXPOSED_BY_CAUSE.items()},
        EXPOSED_TRANSFER_NS.name: exposed_ns - cause_ns[Cause.WAIT] - unmatched_ns,
        EXPOSED_UNMATCHED_NS.name: unmatched_ns,
        OVERLAP_RATIO.name: pd.array(
            ratio(base[OVERLAP_NS.name], base[COMM_NS.name]), dtype="Float64"
        ),
        POTENTIAL_SPEEDUP.name: pd.array(ratio(step, base[IDEAL_NS.name]), dtype="Float64"),
        EXPOSED_COMM_RATIO.name: pd.array(ratio(exposed_ns, step), dtype="Float64"),
        IDLE_RATIO.name: pd.array(ratio(base[IDLE_NS.name], step), dtype="Float64"),
        ITERATION_NS.name: pd.arrays.IntegerArray(
            base[ITERATION_NS.name].astype(np.int64), base[ITERATION_NS.name] < 0
        ),
        BOTTLENECK.name: "",
        REASON.name: "",
        WAITED_FOR_RANK.name: pd.array(waited_for, dtype=object),
        WAIT_KNOWN.name: wait_known.astype(bool),
    }
    df = pd.DataFrame({c: cols[c] for c in STEP_COLUMNS})
    verdicts = [
        verdict(
            row,
            thresholds,
            None if wf is None else _among(str(wf), coll),
            bool(wk),
            partial_hedge(coll.ranks_given, coll.world_size),
            unmatched_why=why,
        )
        for row, wf, wk, why in zip(
            _plain_rows({c: cols[c] for c in STEP_COLUMNS}),
            waited_for,
            wait_known.tolist(),
            unmatched_why,
            strict=True,
        )
    ]
    df[BOTTLENECK.name] = [v.bottleneck for v in verdicts]
    df[REASON.name] = [v.reason for v in verdicts]
    return df


def _plain_rows(cols: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of the numpy columns of ``cols`` as plain Python values, the other columns left out:
    what ``pd.DataFrame(cols).to_dict("records")`` gives for those columns (the verdicts read
    the integer ``_ns`` parts), at a fraction of its cost."""
    plain = [c for c, v in cols.items() if isinstance(v, np.ndarray)]
    return [
        dict(zip(plain, row, strict=True))
        for row in zip(*(cols[c].tolist() for c in plain), strict=True)
    ]


def _windows_frame(units: Sequence[UnitResult], win: _RunWindows) -> pd.DataFrame:
    """One row per global window: its unit, rank, device, step, window (ns) and the marker
    range that defined it (-1 for ``all``)."""
    return pd.DataFrame(
        {
            "unit": win.unit_of,
            "rank": np.array([units[u].trace.rank for u in win.unit_of], dtype=np.int64),
            "device": pd.array([units[u].trace.device for u in win.unit_of], dtype=object),
            "step": pd.array(win.labels, dtype=object),
            "window": np.arange(win.n),
            "start_ns": win.parts["start_ns"],
            "end_ns": win.parts["end_ns"],
            "marker_start_ns": np.concatenate([u.marker_start_ns for u in units]),
            "marker_end_ns": np.concatenate([u.marker_end_ns for u in units]),
        }
    )


def _unassigned(units: Sequence[UnitResult]) -> dict[str, int]:
    """Per unit (keyed as the summary keys it): its GPU activities in no step for want of a
    launch record."""
    per_rank = Counter(u.trace.rank for u in units)
    return {
        unit_key(u.trace.rank, u.trace.device, per_rank[u.trace.rank] > 1): u.no_launch
        for u in units
    }


def _among(rank: str, coll: Collectives) -> str:
    if coll.partial:
        return f"{rank} (the latest among the {coll.ranks_given} ranks given of {coll.world_size})"
    return rank


def _unmatched_why(coll: Collectives, n_windows: int) -> list[str | None]:
    """Per window: why its unmatched exposed time has no wait / transfer split (diagnosis.md
    §12), the reasons carrying most of it first (at most two, with the collectives' names and
    ranks), None when it has none."""
    out: list[str | None] = [None] * n_windows
    pr = coll.per_rank
    if pr.empty or EXPOSED_UNMATCHED_NS.name not in pr:
        return out
    ns = pr[EXPOSED_UNMATCHED_NS.name].to_numpy(np.int64)
    sel = np.flatnonzero(ns > 0)
    if not sel.size:
        return out
    # (ns, count) per (window, text), summed in dicts: a groupby and sort cost milliseconds
    acc: dict[int, dict[str, list[int]]] = {}
    why = pr["unmatched_why"]
    for w, name, rank, y, missing, n in zip(
        pr["window"].to_numpy(np.int64)[sel].tolist(),
        pr["name"].to_numpy(object)[sel].tolist(),
        pr["rank"].to_numpy()[sel].tolist(),
        why.to_numpy(object)[sel].tolist(),
        why.isna().to_numpy(bool)[sel].tolist(),
        ns[sel].tolist(),
        strict=True,
    ):
        text = f"{name} on rank {rank}: " + ("no peer to match it with" if missing else str(y))
        cell = acc.setdefault(w, {}).setdefault(text, [0, 0])
        cell[0] += n
        cell[1] += 1
    for w, texts in acc.items():
        # most ns first, ties by text (each text once in its window)
        ranked = sorted(texts.items(), key=lambda kv: (-kv[1][0], kv[0]))
        said = [(f"{c}x " if c > 1 else "") + t for t, (_, c) in ranked[:2]]
        more = len(ranked) - len(said)
        out[w] = "; ".join(said) + (f"; and {more} more" if more > 0 else "")
    return out


def _waited_for(coll: Collectives, n_windows: int) -> list[int | None]:
    """Per window: the rank credited with most of its exposed waiting (docs/job-model.md;
    ties: the lower rank), None when it has none."""
    out: list[int | None] = [None] * n_windows
    cr = coll.credit
    if cr.empty:
        return out
    # ns per (window, rank) summed in a dict, then per window the most (ties: the lower rank)
    tot: dict[tuple[int, int], int] = {}
    for key in zip(
        cr["window"].to_numpy(np.int64).tolist(),
        cr[WAITED_FOR_RANK.name].to_numpy(np.int64).tolist(),
        cr[EXPOSED_WAIT_NS.name].to_numpy(np.int64).tolist(),
        strict=True,
    ):
        tot[key[:2]] = tot.get(key[:2], 0) + key[2]
    best: dict[int, tuple[int, int]] = {}
    for (w, r), ns in tot.items():
        got = best.get(w)
        if got is None or ns > got[0] or (ns == got[0] and r < got[1]):
            best[w] = (ns, r)
    for w in sorted(best):  # in window order, as the sorted frame (-1 writes the last first)
        out[w] = best[w][1]
    return out


def _finding_rows(coll: Collectives, df: pd.DataFrame, traces: Sequence[TraceInfo]) -> pd.DataFrame:
    pr = coll.per_rank
    if pr.empty:
        return pr.assign(display=[], where=[])
    several = len(traces) > 1
    keys = [pr[c] for c in ("unit", "window", "name")]
    names = keys[2].tolist()
    # groupby leaves null keys out (never in practice); an integer column has none
    if any(
        not (isinstance(k.dtype, np.dtype) and k.dtype.kind in "iub")
        and bool(k.isna().to_numpy().any())
        for k in keys
    ):
        pos = (pr.groupby(["unit", "window", "name"]).cumcount() + 1).tolist()
    else:  # the n-th row of its (unit, window, name), counted on key codes
        # (factorize tells keys apart by ==, as the dict it replaces did)
        pos = _cumcount(
            *(np.asarray(pd.factorize(k.to_numpy())[0], dtype=np.int64) for k in keys)
        ).tolist()
    sizes = _size_words(coll, pr)
    short: dict[str, str] = {}  # per distinct name (a few collectives' names repeat)
    for n in set(map(str, names)):
        short[n] = short_name(n)
    return pr.assign(
        display=[f"{short[str(n)]} #{p}{z}" for n, p, z in zip(names, pos, sizes, strict=True)],
        where=_where_words(pr["rank"].to_numpy(), pr["step"].to_numpy(dtype=object), several),
    )


def _cumcount(*codes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Per row, 1 + how many rows before it have the same codes (a groupby's cumcount + 1)."""
    n = len(codes[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(n), *codes[::-1]))  # stable: rows in order within a key
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for c in codes:
        cs = c[order]
        new[1:] |= cs[1:] != cs[:-1]
    starts = np.flatnonzero(new)
    run = np.arange(n, dtype=np.int64) - np.repeat(starts, np.diff(np.append(starts, n)))
    out = np.empty(n, dtype=np.int64)
    out[order] = run + 1
    return out


def _where_words(rank: npt.NDArray[Any], step: npt.NDArray[np.object_], several: bool) -> list[str]:
    """Per row ``rank R step S`` (``step S`` of one unit), formatted once per distinct pair
    when the steps are texts (equal texts format alike; 0 and 0.0 or True would not)."""
    code, distinct = pd.factorize(step, sort=False)
    if (
        rank.dtype.kind not in "iu"
        or bool((code < 0).any())  # a null step: None and NaN print apart
        or not all(type(s) is str for s in distinct.tolist())
    ):
        return [
            (f"rank {r} step {s}" if several else f"step {s}")
            for r, s in zip(rank.tolist(), step.tolist(), strict=True)
        ]
    ranks, r_code = np.unique(rank, return_inverse=True)
    pair = r_code.reshape(-1).astype(np.int64) * (len(distinct) + 1) + code
    pairs, at = np.unique(pair, return_inverse=True)
    texts = distinct.tolist()
    words = np.array(
        [
            (
                f"rank {ranks[p // (len(distinct) + 1)]} step {texts[p % (len(distinct) + 1)]}"
                if several
                else f"step {texts[p % (len(distinct) + 1)]}"
            )
            for p in pairs.tolist()
        ],
        dtype=object,
    )
    return list(words[at.reshape(-1)])


def short_name(name: str, limit: int = 48) -> str:
    """A collective or kernel name cut for a ``where:`` line: no template arguments or parameter
    list (a demangled signature can run to hundreds of characters), at most ``limit`` chars."""
    head = name.split("(", 1)[0].split("<", 1)[0].strip() or name
    return head if len(head) <= limit else head[: limit - 1] + "…"


def _size_words(coll: Collectives, pr: pd.DataFrame) -> list[str]:
    """Per per-rank row: `` [8.20 MB, 11.4 GB/s bus]`` when its instance's bytes are known."""
    inst = coll.instances
    if "busbw_gbps" not in inst.columns or inst.empty:
        return [""] * len(pr)
    ids = inst["instance"].to_numpy()
    want = pr["instance"].to_numpy()
    if ids.dtype.kind in "iu" and want.dtype.kind in "iu" and ids.size:
        # the first row of each instance by a stable unique, looked up by a search
        distinct, first = np.unique(ids, return_index=True)
        at = np.minimum(np.searchsorted(distinct, want), distinct.size - 1)
        found = distinct[at] == want
        nbytes = inst["bytes"].to_numpy(dtype=object)[first].tolist()
        busbw = inst["busbw_gbps"].to_numpy(dtype=object)[first].tolist()
        per = np.array(
            [*_size_texts(nbytes, busbw), ""], dtype=object
        )  # the last: an instance not in the table
        return list(per[np.where(found, at, distinct.size)])
    # the first row of each instance, looked up by dict (a reindex costs more at this size)
    of: dict[Any, tuple[Any, Any]] = {}
    for i, nb, bw in zip(
        inst["instance"].tolist(), inst["bytes"].tolist(), inst["busbw_gbps"].tolist(), strict=True
    ):
        of.setdefault(i, (nb, bw))
    got = [of.get(i, (None, None)) for i in pr["instance"].tolist()]
    return _size_texts([x for x, _ in got], [x for _, x in got])


def _size_texts(nbytes: list[Any], busbw: list[Any]) -> list[str]:
    """`` [8.20 MB, 11.4 GB/s bus]`` per (bytes, bus bandwidth); "" where the bytes are not
    known."""
    size = np.array([_float_or_nan(x) for x in nbytes], dtype=np.float64)
    bus = np.array([_float_or_nan(x) for x in busbw], dtype=np.float64)
    return [
        ""
        if not b > 0
        else f" [{int(b) / 1e6:.2f} MB" + ("]" if w != w else f", {w:.1f} GB/s bus]")
        for b, w in zip(size.tolist(), bus.tolist(), strict=True)
    ]


def _float_or_nan(x: Any) -> float:
    """``to_numpy(dtype=float64, na_value=nan)`` of one value: None / NA / NaN -> NaN."""
    return np.nan if x is None or x is pd.NA or (isinstance(x, float) and x != x) else float(x)


def _regex_matched_nothing(units: Sequence[UnitResult], regex: str, names: list[str]) -> str:
    return regex_matched_nothing([r for u in units for r in u.range_names], regex, names)


def regex_matched_nothing(
    range_names: Iterable[tuple[str, int]], regex: str, names: Sequence[str]
) -> str:
    """The error of a step regex that matched no range: where, and the most frequent ranges
    (``range_names``: (name, count) per unit) to pick one from. Every command says this."""
    counts: dict[str, int] = {}
    for name, n in range_names:
        counts[name] = counts.get(name, 0) + n
    where = names[0] if len(names) == 1 else f"{len(names)} inputs"
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:6]
    found = "; ".join(f"{n!r} x{c}" for n, c in top) or "none"
    return (
        f"step regex {regex!r} matches no range in {where}; the most frequent ranges are: {found}"
    )


def _no_steps_message(
    units: Sequence[UnitResult], options: AnalysisOptions, names: list[str]
) -> str:
    where = names[0] if len(names) == 1 else f"{len(names)} inputs ({names[0]}, ...)"
    if options.steps is not None:
        found = [
            f"rank {u.trace.rank}: {describe_steps(list(u.labels_found))}"
            for u in units
            if u.labels_found
        ]
        shown = "; ".join(dict.fromkeys(found[:4])) or "no step markers at all"
        return (
            f"no steps to analyze in {where}: steps {options.steps.text} matches none of the "
            f"steps in the trace (steps found: {shown})"
        )
    why = "; ".join(dict.fromkeys(n for u in units for n in u.notes)) or "no activity found"
    # what the readers dropped or could not use is often why (a step "launched no GPU work"
    # when its kernels' correlation ids were null): the run fails, so the notes go in the error
    read = "; ".join(dict.fromkeys(n for u in units for n in u.trace.notes))
    return f"no steps to analyze in {where}: {why}" + (
        f"; the reader noted: {read}" if read else ""
    )


def rank_notes(traces: Sequence[TraceInfo]) -> list[str]:
    """Caveats about which ranks the run has: ranks missing from the world the traces declare
    (counted, never materialised: a world of 10^8 costs nothing), ranks beyond it."""
    present = sorted({t.rank for t in traces})
    sizes = {t.world_size for t in traces if t.world_size}
    notes: list[str] = []
    if not sizes:
        return notes
    world = max(sizes)
    inside = [r for r in present if 0 <= r < world]
    n_missing = world - len(inside)
    if n_missing and len(present) == 1:
        notes.append(
            f"rank {present[0]} is the only rank given of a world of {world}: per-rank "
            "numbers only, no collectives matched across ranks"
        )
    elif n_missing:
        shown: list[int] = []
        have = set(inside)
        r = 0
        while len(shown) < 20 and r < world:
            if r not in have:
                shown.append(r)
            r += 1
        more = " ..." if n_missing > len(shown) else ""
        notes.append(
            f"rank traces missing from the input: rank{'s' if n_missing > 1 else ''} "
            f"{', '.join(map(str, shown))}{more} (world size {world}, {len(present)} rank traces "
            "given); the others are analysed and collectives matched across them: waiting and "
            "stragglers are among the ranks given"
        )
    extra = [r for r in present if r >= world]
    if extra:
        notes.append(f"rank traces outside the declared world size {world}: ranks {extra}")
    return notes


def _notes(
    units: Sequence[UnitResult], coll: Collectives, skipped: Sequence[str]
) -> tuple[str, ...]:
    """Caveats, each said once: identical notes of several ranks are grouped ("ranks 0-127: ...")."""
    by_note: dict[str, list[int]] = {}
    plain: list[str] = list(skipped)
    for u in units:
        for n in u.trace.notes + u.notes:
            if n.startswith("rank "):
                plain.append(n)
            else:
                by_note.setdefault(n, []).append(u.trace.rank)
    no_launch = {u.trace.rank: u.no_launch for u in units if u.no_launch}
    if no_launch:
        plain.append(_no_launch_note(units, no_launch))
    out = list(dict.fromkeys(plain))
    out.extend(rank_notes([u.trace for u in units]))
    for note, ranks in by_note.items():
        out.append(f"{_rank_list(sorted(set(ranks)))}: {note}")
    out.extend(coll.notes)
    return tuple(dict.fromkeys(out))


def _no_launch_note(units: Sequence[UnitResult], no_launch: dict[int, int]) -> str:
    """metrics.md "Steps": GPU activities whose launch is not in the trace are in no step; say
    how many, how much device time, and why (launched before the capture, or not recorded)."""
    total = sum(no_launch.values())
    lo, hi = min(no_launch.values()), max(no_launch.values())
    per = (
        ""
        if len(no_launch) == 1
        else f" ({lo:,} per rank)"
        if lo == hi
        else f" ({lo:,}-{hi:,} per rank)"
    )
    ns = sum(u.no_launch_ns for u in units)
    before = sum(u.before_capture for u in units)
    why = []
    if before:
        why.append(
            f"{before:,} launched before the capture began (correlation id below every launch "
            "recorded)"
        )
    if total - before:
        why.append(f"{total - before:,} by a call the trace did not record")
    return (
        f"{_rank_list(sorted(no_launch))}: {total:,} GPU activities have no launch record in the "
        f"trace and are in no step{per}: {ns / 1e6:.2f} ms of device time left out of every "
        f"step; {', '.join(why)}; their GPU start cannot place them (the device runs behind "
        "the host)"
    )


def _rank_list(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    runs: list[str] = []
    start = prev = ranks[0]
    for r in ranks[1:] + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        runs.append(f"{start}-{prev}" if prev != start else str(start))
        if r is not None:
            start = prev = r
    return "ranks " + ", ".join(runs)
