"""The per-rank map of a run analysis: one trace file -> compact results per analysis unit.

A whole job is hundreds of rank files; only this map touches a rank's events. It reads the file,
splits it into units (each process and device: :func:`traceoverlap.core.model.split_units`),
classifies, assigns steps, measures the parts of every step, splits the exposed time into local
causes, and extracts the collective instances. What it returns (:class:`UnitResult`) is small:
per-step numbers, interval sets bounded by the number of communication activities, and one row
per collective instance. The cross-rank reduce (:mod:`traceoverlap.run.analysis`) never sees events.

Everything here is a plain function of its arguments and returns picklable values, so the map
runs in this process, in a process pool, or on Dask workers alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core.errors import NotATraceError, TraceFormatError
from ..core.intervals import GroupedIntervals
from ..core.model import (
    GPU_ACTIVITY_CATEGORIES,
    LAUNCH_CATEGORIES,
    Kind,
    Timeline,
    TraceInfo,
    in_categories,
    per_category,
    split_units,
)
from ..core.options import AnalysisOptions, compile_regex
from ..core.rules import LOOKS_LIKE_COMM, Rules
from ..core.schema import COMM_NS, OTHER_STEPS_NS, STEP_NS
from ..core.vocab import KINDS, PHASE_RE, Cause, Family, StepLabel, collective_kind, family_of
from ..readers.paths import ProcessPart
from .causes import local_causes
from .classify import comm_call_mask, kinds, name_mask, unseen_comm_note
from .cpuwindows import CallComm, UnitSets, call_comm, cpu_windows, unit_sets, window_detail_rows
from .detail import StepDetail
from .hostranges import host_ranges, kernel_ranges
from .hostwait import call_parts, host_starts, lane_codes
from .instances import LOCAL_COLUMNS, comm_keys, instance_columns, instance_frame
from .metrics import ActivityRows, StepSets, activity_rows, device_covered, step_parts, step_sets
from .namefilter import NameTest
from .purpose import UnitStrategy, unit_purposes
from .steps import UnitSteps, assign_steps, cat_codes

if TYPE_CHECKING:  # the run graph's module loads only when a what-if asks for graphs
    from .graph import UnitGraph

I64 = npt.NDArray[np.int64]


#: Host ranges that can explain why a rank was late (diagnosis.md §6, blame): data loading, a
#: planted or real sleep, a host delay, a barrier or a host sync, checkpointing. The range filter
#: keeps them so that blame on a filtered Nsight export names the same range as on the full one.
HOST_CAUSE_RE = re.compile(
    r"(?i)data_?loader|straggler|sleep|host_delay|barrier|synchroni[sz]e|checkpoint"
)


@dataclass(frozen=True)
class UnitResult:
    """One unit's compact analysis (see the module docstring)."""

    trace: TraceInfo
    labels: tuple[StepLabel, ...]
    parts: dict[str, I64]
    marker_start_ns: I64
    marker_end_ns: I64
    causes: dict[str, GroupedIntervals]
    instances: pd.DataFrame
    pieces: GroupedIntervals
    piece_instance: I64
    no_launch: int
    outside: int
    markers_found: int
    notes: tuple[str, ...]
    #: when no step marker matched: the most frequent host range names (name, count)
    range_names: tuple[tuple[str, int], ...] = ()
    #: every step marker's label before the step selection
    labels_found: tuple[StepLabel, ...] = ()
    #: the main thread's ranges in the analysed steps (what a late rank was doing: blame)
    host_ranges: pd.DataFrame | None = None
    #: what the unit already does (DDP, bucketing, training, CPU), for advice (diagnosis.md §10)
    strategy: UnitStrategy | None = None
    #: the unit's run graph (docs/whatif.md §1), when the map was asked for it (dropped, its
    #: node count kept, when the run's graphs grow past the caller's limit)
    graph: UnitGraph | None = None
    graph_nodes: int = 0
    #: the device time of the ``no_launch`` activities (ns, overlaps once), and how many of them
    #: were launched before the capture began (correlation id below every launch recorded)
    no_launch_ns: int = 0
    before_capture: int = 0

    @property
    def n_windows(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class FileResult:
    """The map's answer for one file: its units, or the error that stopped it (errors travel as
    plain values across process boundaries)."""

    path: str
    units: tuple[UnitResult, ...] = ()
    error: tuple[str, str, str] | None = None
    not_a_trace: bool = False


def _comm_hint(unit: Timeline, kind: npt.NDArray[np.int8], parts: dict[str, I64]) -> str | None:
    """When a rank of a larger world shows almost no communication, name the kernels whose names
    look like communication (custom all-reduce, expert-parallel dispatch...) that were counted as
    compute, with the --comm-pattern to add."""
    info = unit.traces[0]
    step = int(parts[STEP_NS.name].sum())
    if not info.world_size or info.world_size < 2 or step <= 0:
        return None
    if int(parts[COMM_NS.name].sum()) >= 0.01 * step:
        return None
    ev = unit.events
    comp = np.flatnonzero((kind == Kind.COMPUTE) & in_categories(ev["category"], ("kernel",)))
    if comp.size == 0:
        return None
    names = ev["name"].to_numpy()[comp].astype(str)
    dur = (ev["end_ns"].to_numpy() - ev["start_ns"].to_numpy())[comp]
    df = pd.DataFrame({"name": names, "dur": dur})
    df = df[df["name"].map(lambda s: LOOKS_LIKE_COMM.search(s) is not None)]
    if df.empty:
        return None
    top = df.groupby("name")["dur"].agg(["sum", "size"]).sort_values("sum", ascending=False)
    shown = []
    for name, row in top.head(3).iterrows():
        short = re.split(r"[<(]", str(name), maxsplit=1)[0]
        shown.append(
            f"{short} ({row['sum'] / 1e6:.2f} ms in {int(row['size'])} calls: "
            f"--comm-pattern '{re.escape(short)}')"
        )
    return (
        f"communication is {100 * int(parts['comm_ns'].sum()) / step:.2f}% of step time on a "
        f"rank of a world of {info.world_size}: these kernels look like communication but count "
        f"as compute: {'; '.join(shown)}"
    )


def _phases(
    ev: pd.DataFrame, gpu: bool, lo: int, hi: int, step_rx: re.Pattern[str]
) -> tuple[I64, I64, tuple[str, ...]]:
    cat = "gpu_annotation" if gpu else "annotation"
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    m = (ev["category"] == cat).to_numpy() & (start < hi) & (end > lo)
    if gpu and not m.any():  # no GPU projections: the host ranges still tell the phase
        m = in_categories(ev["category"], ("annotation",)) & (start < hi) & (end > lo)
    idx = np.flatnonzero(m)
    names = ev["name"].to_numpy()[idx].astype(str)
    keep = np.array([bool(PHASE_RE.search(s)) and not step_rx.search(s) for s in names], dtype=bool)
    idx, names = idx[keep], names[keep]
    z = np.zeros(0, np.int64)
    if idx.size == 0:
        return z, z.copy(), ()
    order = np.lexsort((-end[idx], start[idx]))
    rows: list[int] = []
    last_end = np.iinfo(np.int64).min
    for i in order.tolist():
        if start[idx[i]] >= last_end:  # nested ranges (DDP.forward in forward) would hide others
            rows.append(i)
            last_end = int(end[idx[i]])
    sel = idx[rows]
    return (
        np.maximum(start[sel], lo).astype(np.int64),
        np.minimum(end[sel], hi).astype(np.int64),
        tuple(names[rows].tolist()),
    )


def _lane_order(acts: pd.DataFrame) -> tuple[str, ...]:
    """GPU streams first (by stream number), then host threads (by thread id), then the rest."""
    if acts.empty:
        return ()
    g = acts.groupby("lane", sort=True).agg(stream=("stream", "min"), tid=("tid", "min"))
    g = g.reset_index()
    g["host"] = (g["stream"] < 0).astype(int)
    return tuple(
        g.sort_values(["host", "stream", "tid", "lane"], kind="stable")["lane"].astype(str)
    )


def unit_step_detail(
    unit: Timeline, options: AnalysisOptions, rules: Rules, step: str
) -> StepDetail | None:
    """The :class:`StepDetail` of step ``step`` (a label) of one unit (a Timeline with exactly
    one TraceInfo), in the unit's own window numbering, without the exposed spans by cause (they
    need every rank: :func:`traceoverlap.run.detail.step_detail` adds them); None when the unit has
    no such step. Classifies and measures the unit as :func:`analyze_unit` does, nothing more."""
    kind = kinds(unit, rules)
    steps = assign_steps(unit, kind, options)
    hits = [i for i, lbl in enumerate(steps.labels) if str(lbl) == str(step)]
    if not hits:
        return None
    w = hits[0]
    start, end = unit.events["start_ns"].to_numpy(), unit.events["end_ns"].to_numpy()
    if steps.gpu:
        acts = activity_rows(start, end, kind, steps)
        sets = step_sets(acts, len(steps))
    else:  # CPU: the window's own rows, compute cut around the calls (cpuwindows.py)
        parts = call_parts(unit, kind, rules)
        cc = call_comm(
            parts, start.astype(np.int64), end.astype(np.int64), kind, p2p_rows(unit, kind)
        )
        acts, sets = window_detail_rows(
            start, end, kind, steps, w, lane_codes(unit), parts.merged(), cc
        )
    return _detail(unit, steps, acts, sets, w, options)


def _detail(
    unit: Timeline,
    steps: UnitSteps,
    acts_all: ActivityRows,
    sets: StepSets,
    window: int,
    options: AnalysisOptions,
) -> StepDetail:
    ev = unit.events
    sel = acts_all.group == window
    rows = acts_all.event_row[sel]
    cols = ["lane", "stream", "tid", "name", "coll_name", "coll_bytes", "process_group", "seq"]
    cols += ["group_size"]
    acts = ev.iloc[rows][cols].reset_index(drop=True)
    acts["lane"] = acts["lane"].astype(str)
    acts["name"] = acts["name"].astype(str)
    acts["kind"] = np.array(KINDS, dtype=object)[acts_all.kind[sel]]
    acts["start_ns"] = acts_all.start_ns[sel]
    acts["end_ns"] = acts_all.end_ns[sel]

    def pick(s: GroupedIntervals) -> tuple[I64, I64]:
        m = s[0] == window
        return s[1][m], s[2][m]

    lo, hi = int(steps.start_ns[window]), int(steps.end_ns[window])
    info = unit.traces[0]
    return StepDetail(
        rank=info.rank,
        device=info.device,
        step=steps.labels[window],
        window=window,
        start_ns=lo,
        end_ns=hi,
        gpu=steps.gpu,
        activities=acts,
        lanes=_lane_order(acts),
        compute=pick(sets.compute),
        comm=pick(sets.comm),
        memory=pick(sets.memory),
        busy=pick(sets.busy),
        overlap=pick(sets.overlap),
        exposed=pick(sets.exposed),
        exposed_by_cause={},
        phases=_phases(ev, steps.gpu, lo, hi, options.step_re),
    )


#: CPU units keep per window only their communication (its activities, and its exposed stretches
#: and calls clipped to every window they meet: the collective pieces and local causes the
#: cross-rank reduce reads), so nested or overlapping markers cost (communication x markers)
#: there; the rest is O(n log n) (cpuwindows.py). Refused past this many (communication, window)
#: pairs when that is also over :data:`MAX_WINDOWS_PER_ACTIVITY` per communication item (a
#: safety cap: 1M pairs take about 250 MB; compute is never paired now).
MAX_WINDOW_PAIRS = 4_000_000
MAX_WINDOWS_PER_ACTIVITY = 16


def _check_window_load(
    path: str,
    start: npt.NDArray[np.int64],
    end: npt.NDArray[np.int64],
    kind: npt.NDArray[np.int8],
    steps: UnitSteps,
    unit: UnitSets,
) -> None:
    """Refuse a CPU unit whose communication (activities, exposed stretches and calls) would be
    paired with too many windows (:data:`MAX_WINDOW_PAIRS`)."""
    from .metrics import window_pairs

    comm = np.where(kind == Kind.COMM, Kind.COMM, Kind.NONE).astype(np.int8)
    pairs = window_pairs(start, end, comm, steps)
    pairs += unit.window_pieces(steps.start_ns, steps.end_ns)
    items = int((kind == Kind.COMM).sum()) + unit.sets["exposed"][0].size + unit.calls[0].size
    items = max(1, items)
    if pairs > MAX_WINDOW_PAIRS and pairs > MAX_WINDOWS_PER_ACTIVITY * items:
        raise TraceFormatError(
            path,
            f"step markers nest or overlap: {len(steps)} steps hold {pairs:,} (communication, "
            f"step) pairs for {items:,} communication activities, exposed stretches and calls, "
            f"{pairs // items} steps each on average, too many to analyse",
            "select fewer steps, or give a step regex that matches markers that do not nest",
        )


def _out_of_memory(path: str) -> tuple[str, str, str]:
    """(file, reason, hint) for a file whose reading or analysis ran out of memory."""
    from ..core.fmt import size

    try:
        what = f" (the file is {size(Path(path).stat().st_size)})"
    except OSError:
        what = ""
    return (
        path,
        f"out of memory while reading and analysing it{what}",
        "free memory, or analyse it on a machine with more",
    )


def p2p_rows(unit: Timeline, kind: npt.NDArray[np.int8]) -> npt.NDArray[np.bool_]:
    """Per event: a communication activity of the send / recv family (its trace's collective
    name, else its own name: ``gloo:send``, ``gloo:recv``)."""
    ev = unit.events
    is_comm = kind == Kind.COMM
    out = np.zeros(len(ev), dtype=bool)
    if not is_comm.any():
        return out

    def p2p(label: str) -> bool:
        return family_of(collective_kind(label)) == Family.SEND_RECV

    by_name = per_category(ev["name"], p2p, is_comm, dtype=bool)
    by_coll = per_category(ev["coll_name"], p2p, is_comm, dtype=bool)
    given = per_category(ev["coll_name"], lambda c: c != "", is_comm, dtype=bool)
    rows = np.flatnonzero(is_comm)
    nc = cat_codes(ev["name"])[rows]
    cc = cat_codes(ev["coll_name"])[rows]
    out[rows] = np.where(given[cc], by_coll[cc], by_name[nc])
    return out


def _instance_spans(start: I64, end: I64, cc: CallComm) -> tuple[I64, I64]:
    """Per event row: its span, a communication activity's widened by the call pieces that belong
    to its instance (diagnosis.md §11: the instance is the call; a ``recv`` blocked in its call
    before its ``gloo:recv`` began started when the call did)."""
    s, e = start.astype(np.int64).copy(), end.astype(np.int64).copy()
    a = cc.attributed()
    np.minimum.at(s, a.row, a.start)
    np.maximum.at(e, a.row, a.end)
    return s, e


def p2p_spans(
    unit: Timeline, kind: npt.NDArray[np.int8], rules: Rules | None = None
) -> tuple[I64, I64]:
    """CPU units: per event row its span, a point-to-point activity's widened to the calls of
    its instance (what :func:`analyze_unit` gives the instances; the run graph's send and recv
    nodes, :func:`traceoverlap.rank.graph.unit_graph`)."""
    ev = unit.events
    start = ev["start_ns"].to_numpy().astype(np.int64)
    end = ev["end_ns"].to_numpy().astype(np.int64)
    cc = call_comm(call_parts(unit, kind, rules), start, end, kind, p2p_rows(unit, kind))
    return _instance_spans(start, end, cc)


def analyze_unit(
    unit: Timeline, options: AnalysisOptions, rules: Rules, graph: bool = False
) -> UnitResult:
    """The compact analysis of one unit (a Timeline with exactly one TraceInfo); ``graph``: with
    its run graph (:class:`traceoverlap.rank.graph.UnitGraph`) for the what-if."""
    info = unit.traces[0]
    ev = unit.events
    kind = kinds(unit, rules)
    steps = assign_steps(unit, kind, options)
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    n = len(steps)
    mask = call_ivs = None  # CPU units: the communication calls (the run graph keeps them)
    resumes = span = None
    if steps.gpu:
        acts = activity_rows(start, end, kind, steps)
        gpu_sets = step_sets(acts, n)
        parts = step_parts(gpu_sets, steps, device_covered(start, end, kind, steps))
        exposed, calls = gpu_sets.exposed, None
    else:
        # each window's sets are the unit's clipped to it (cpuwindows.py): no (activity,
        # window) table, whatever the markers' nesting; time inside communication calls is not
        # compute, whatever op encloses it, and is communication where no activity covers it
        # (metrics.md, diagnosis.md §11)
        cp = call_parts(unit, kind, rules)
        lanes, by_lane = lane_codes(unit), cp.merged()
        mask, call_ivs = comm_call_mask(unit, rules), by_lane
        cc = call_comm(cp, start.astype(np.int64), end.astype(np.int64), kind, p2p_rows(unit, kind))
        us = unit_sets(start, end, kind, lanes, by_lane, mask, cc)
        _check_window_load(info.path, start, end, kind, steps, us)
        cw = cpu_windows(us, start, end, kind, steps)
        acts, parts, exposed, calls = cw.acts, cw.parts, cw.exposed, cw.calls
        resumes, span = host_starts(unit, kind), _instance_spans(start, end, cc)
    parts["start_ns"] = steps.start_ns
    parts["end_ns"] = steps.end_ns
    lc = local_causes(exposed, acts, steps, calls, resumes)

    # the instances' keys once for the analysis and the run graph; their columns made a frame
    # once, with the purposes
    keys = comm_keys(unit, kind, steps)
    cols, pieces, piece_instance = instance_columns(
        unit, kind, steps, acts, steps.launch_row, span, keys
    )
    purposes, strategy = unit_purposes(unit, kind, steps, cols or {})
    if cols is None:
        instances = pd.DataFrame(columns=list(LOCAL_COLUMNS)).assign(purpose=purposes)
    else:
        instances = instance_frame({**cols, "purpose": purposes})

    notes = list(steps.notes)
    hint = _comm_hint(unit, kind, parts) if n else None
    if hint:
        notes.append(hint)
    other = int(parts[OTHER_STEPS_NS.name].sum()) if n else 0
    if other:
        notes.append(
            f"steps overlap on the device: {other / 1e6:.2f} ms of step windows held only other "
            "steps' work (pipelined input, a device running behind the host); counted as "
            "other_steps, not idle"
        )
    unseen = unseen_comm_note(unit, kind)
    if unseen:
        notes.append(unseen)

    ranges: tuple[tuple[str, int], ...] = ()
    if steps.markers_found == 0:
        ranges = top_names(ev["name"], in_categories(ev["category"], ("annotation",)))
    run_graph = None
    if graph:
        from .graph import unit_graph

        # the run graph of this unit from the same read (docs/whatif.md §1: built in the map)
        run_graph = unit_graph(unit, kind, steps, mask, call_ivs, span, keys)
    return UnitResult(
        graph=run_graph,
        graph_nodes=0 if run_graph is None else int(run_graph.start_ns.size),
        trace=info,
        labels=steps.labels,
        parts=parts,
        marker_start_ns=steps.marker_start_ns,
        marker_end_ns=steps.marker_end_ns,
        causes={Cause.TAIL: lc.tail, Cause.DEPENDENCY: lc.dependency, Cause.HOST: lc.host},
        instances=instances,
        pieces=pieces,
        piece_instance=piece_instance,
        no_launch=steps.no_launch,
        no_launch_ns=steps.no_launch_ns,
        before_capture=steps.before_capture,
        outside=steps.outside,
        markers_found=steps.markers_found,
        notes=tuple(notes),
        range_names=ranges,
        labels_found=steps.labels_found if n == 0 else (),
        host_ranges=_blame_ranges(ev, kind, steps) if n and len(instances) else None,
        strategy=strategy,
    )


def top_names(
    names: pd.Series, rows: npt.NDArray[np.bool_], k: int = 8
) -> tuple[tuple[str, int], ...]:
    """The ``k`` most frequent names of ``rows`` as (name, count), most frequent first, ties in
    order of first occurrence: ``names[rows].astype(str).value_counts().head(k)``, counted on
    the category codes (a string per row cost ~50 ms on an export's 300 000 ranges)."""
    cats = names.cat.categories if isinstance(names.dtype, pd.CategoricalDtype) else None
    codes = cat_codes(names)[rows] if cats is not None else None
    if cats is None or codes is None or cats.inferred_type != "string" or (codes < 0).any():
        top = names[rows].astype(str).value_counts().head(k)
        return tuple((str(n), int(c)) for n, c in top.items())
    used, first, counts = np.unique(codes, return_index=True, return_counts=True)
    order = np.lexsort((first, -counts))[:k]
    labels = cats.to_numpy(dtype=object)[used[order]].tolist()
    return tuple((str(n), int(c)) for n, c in zip(labels, counts[order].tolist(), strict=True))


def _blame_ranges(ev: pd.DataFrame, kind: npt.NDArray[np.int8], steps: UnitSteps) -> pd.DataFrame:
    """What the blame chains compare across ranks (diagnosis.md §14): the main thread's ranges
    and, on a GPU unit, its compute kernels by name and call order within the step."""
    ranges = host_ranges(ev, int(steps.start_ns.min()), int(steps.end_ns.max()))
    if not steps.gpu:
        return ranges
    kernels = kernel_ranges(ev, kind, steps.event_window, int(Kind.COMPUTE))
    if kernels.empty:
        return ranges
    return pd.concat([ranges, kernels], ignore_index=True) if len(ranges) else kernels


#: Launch calls (runtime API) a trace may hold without device activity before it is refused.
LAUNCHES_WITHOUT_ACTIVITY = 100


def require_device_activity(timeline: Timeline, path: str) -> None:
    """Refuse a GPU run captured without device activity: kernel launch calls (many, or on an
    NCCL run) but no kernel, memcpy or memset. Read as a CPU run it would report the host's ops
    as the device's work."""
    ev = timeline.events
    cat = ev["category"]
    if bool(in_categories(cat, GPU_ACTIVITY_CATEGORIES).any()):
        return
    calls = in_categories(cat, LAUNCH_CATEGORIES)
    if not calls.any():
        return
    launches = int(name_mask(ev["name"], (r"(?i)launch",), calls).sum())
    nccl = any((t.backend or "").lower() == "nccl" for t in timeline.traces)
    if launches >= LAUNCHES_WITHOUT_ACTIVITY or (launches and nccl):
        raise TraceFormatError(
            path,
            f"{launches:,} kernel launch calls but no GPU activity (no kernels, memcpy or "
            "memset): the device side was not captured",
            "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] (Kineto), "
            "or nsys with --trace=cuda",
        )


def map_timeline(
    timeline: Timeline, options: AnalysisOptions, rules: Rules, graph: bool = False
) -> tuple[UnitResult, ...]:
    """Every unit of an in-memory Timeline; ``graph``: each with its run graph."""
    return tuple(analyze_unit(u, options, rules, graph) for u in split_units(timeline))


_NCCL_RANGE_RE = r"nccl:"


def range_filter(options: AnalysisOptions, rules: Rules) -> Callable[[str], bool]:
    """The host ranges the analysis can use: step markers, phases (:data:`PHASE_RE`), ranges
    that can explain a late rank (:data:`HOST_CAUSE_RE`), communication, ``nccl:<collective>``, wait and CPU-compute ranges (every name pattern of
    ``rules`` and ``options``). A reader may drop the others (an ``emit_nvtx`` capture's million
    op ranges); only the no-marker hints read every range name, so :func:`map_file` reads again
    unfiltered when a unit finds no step marker."""
    # the step regex was validated by its options, and the phase and cause patterns are ours:
    # only the rules' patterns (a caller may build its own Rules) are checked here
    patterns = [options.step_pattern, PHASE_RE.pattern, HOST_CAUSE_RE.pattern, _NCCL_RANGE_RE]
    for group in (
        rules.cpu_comm,
        rules.extra_comm,
        rules.cpu_compute_exclude,
        rules.cpu_comm_calls,
        rules.cpu_compute_ranges,
    ):
        for p in group:
            compile_regex(p, "range patterns")
        patterns.extend(group)
    return _RangeTest(patterns, options.step_re)


class _RangeTest(NameTest):
    """:func:`range_filter`'s test, plus :meth:`step_marker`: a reader that finds no range kept
    named as a step marker keeps every range at once (as :func:`map_file` would read them
    again), the nsys reader among them (readers/nsys/_nvtx.py)."""

    def __init__(self, patterns: list[str], step_re: re.Pattern[str]) -> None:
        super().__init__(patterns)
        self.step_re = step_re

    def step_marker(self, name: str) -> bool:
        """Is ``name`` a step marker's (the analysis's test: rank/steps.py)?"""
        return self.step_re.search(name) is not None


def _map_units(
    path: str,
    keep_range: Callable[[str], bool] | None,
    options: AnalysisOptions,
    rules: Rules,
    pid: int | None = None,
    graph: bool = False,
) -> list[UnitResult]:
    from ..readers import read_trace

    timeline = read_trace(Path(path), keep_range, pid)
    require_device_activity(timeline, path)
    units = split_units(timeline)
    del timeline
    return [analyze_unit(u, options, rules, graph) for u in units]


def read_units(unit: str | ProcessPart, options: AnalysisOptions, rules: Rules) -> list[Timeline]:
    """The units of one trace file (or one process of an export) read as :func:`map_file` reads
    them (ranges filtered, and all of them where the reader filtered them and a unit found no step
    marker): what a step's detail is drawn from (:func:`traceoverlap.run.detail.step_detail`)."""
    from ..readers import read_trace

    path, pid = (unit.path, unit.pid) if isinstance(unit, ProcessPart) else (unit, None)
    units = split_units(read_trace(Path(path), range_filter(options, rules), pid))
    if any(
        u.traces[0].ranges_filtered and assign_steps(u, kinds(u, rules), options).markers_found == 0
        for u in units
    ):
        units = split_units(read_trace(Path(path), None, pid))
    return units


def map_file(
    unit: str | ProcessPart, options: AnalysisOptions, rules: Rules, graph: bool = False
) -> FileResult:
    """Read one trace file (or one process of an export: :class:`ProcessPart`) and analyse its
    units; ``graph``: each unit with its run graph (docs/whatif.md §1)."""
    args = (options, rules)
    path, pid = (unit.path, unit.pid) if isinstance(unit, ProcessPart) else (unit, None)
    try:
        out = _map_units(path, range_filter(options, rules), *args, pid=pid, graph=graph)
        if any(u.markers_found == 0 and u.trace.ranges_filtered for u in out):
            # the no-marker hints name the ranges that repeat, whatever their names: read all
            out = _map_units(path, None, *args, pid=pid, graph=graph)
        return FileResult(path, tuple(out))
    except MemoryError:
        return FileResult(path, error=_out_of_memory(path))
    except TraceFormatError as exc:
        return FileResult(
            path,
            error=(exc.path, exc.reason, exc.hint),
            not_a_trace=isinstance(exc, NotATraceError),
        )
