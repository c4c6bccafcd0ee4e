"""The run graph of a run (docs/whatif.md §1): the units' graphs (:mod:`traceoverlap.rank.graph`,
built by the map) joined.

:func:`join_graphs` concatenates the units, puts them on one clock (offsets from collective end
times, as the matching does) and numbers the matched instances across units, matched per process
group by :mod:`traceoverlap.run.matching` through :func:`match_units`, the one adapter.
:func:`run_graph` joins the graphs an analysis kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core.errors import UsageError
from ..core.model import Kind
from ..rank.graph import I32, UnitGraph
from ..run.results import Analysis

I64 = npt.NDArray[np.int64]
#: A run graph holds fewer nodes than this: its node ids, lanes, codes and positions are int32.
INT32_NODES = 2**31


# --- the one adapter to the collective matching -------------------------------------------------


def match_units(graphs: Sequence[UnitGraph]) -> list[I64]:
    """Per unit: for each local instance, its matched key across units (-1 unmatched): the
    process-group-aware matching of :mod:`traceoverlap.collectives` (the only place the replay
    reads it; swap here for the job model's group table)."""
    from ..run.matching import _match

    frames = []
    for u, g in enumerate(graphs):
        if len(g.instances):
            frames.append(g.instances.assign(unit=u))
    if not frames:
        return [np.full(len(g.instances), -1, dtype=np.int64) for g in graphs]
    inst = pd.concat(frames, ignore_index=True)
    labels = {u: f"rank {g.trace.rank}" for u, g in enumerate(graphs)}
    key, _, _ = _match(inst, list(range(len(graphs))), labels, [g.trace for g in graphs])
    out = []
    pos = 0
    for g in graphs:
        n = len(g.instances)
        out.append(key[pos : pos + n].astype(np.int64))
        pos += n
    return out


# --- the reduce: one run graph ------------------------------------------------------------------


@dataclass(frozen=True)
class RunGraph:
    """Every unit's nodes on one clock, sorted by (global lane, start). Per node: ``unit``,
    ``lane`` (global), ``start_ns``/``end_ns``, ``kind``, ``window`` (global step index into
    ``step_labels``; -1 none), ``name`` (global code into ``names``), ``pos`` (position id: the
    same step, lane role, op name and n-th occurrence of that name on every rank), ``inst`` (global matched
    instance, -1 none), ``family`` (code into ``families``, -1 none). ``lane_host`` per lane.
    Edges ``src``/``dst`` with ``src_start``. ``unit_rank`` per unit; ``unit_window_obs_ns``:
    per (unit, global step) the observed step time (-1 absent). The per-node codes and ids are
    int32 (:data:`INT32_NODES`): a large run's graph is most of a replay's memory."""

    unit: I32
    lane: I32
    start_ns: I64
    end_ns: I64
    kind: npt.NDArray[np.int8]
    window: I32
    name: I32
    pos: I32
    inst: I32
    family: I32
    lane_host: npt.NDArray[np.bool_]
    lane_comm: npt.NDArray[np.bool_]
    src: I64
    dst: I64
    src_start: npt.NDArray[np.bool_]
    gap: I64
    esrc: I64
    edst: I64
    egap: I64
    names: tuple[str, ...]
    families: tuple[str, ...]
    step_labels: tuple[str, ...]
    unit_rank: I64
    win_start_ns: I64
    win_end_ns: I64
    notes: tuple[str, ...]
    #: the units' communication calls on compute threads (global lane, start, end; sorted by
    #: lane then start): time inside them is not compute (the overlap tax reads it)
    call_lane: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    call_start_ns: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    call_end_ns: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    #: per node: the kernel's launch shape code, -1 unknown (the overlap tax's "same kernel")
    shape: I32 = field(default_factory=lambda: np.zeros(0, np.int32))
    #: per unit: the machine it ran on (``TraceInfo.host``, None unknown) and whether it computes
    #: on a GPU (else its compute shares the host's CPU cores with the other CPU units there)
    unit_host: tuple[str | None, ...] = ()
    unit_gpu: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, bool))
    #: per edge: a guessed cross-stream sync (:attr:`traceoverlap.rank.graph.UnitGraph.guessed`);
    #: empty: none
    guessed: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, bool))
    #: per node: its lane's role (a code: the same role on every rank, host or device,
    #: communication lane or not, n-th by first use); empty: unknown
    role: I32 = field(default_factory=lambda: np.zeros(0, np.int32))

    @property
    def n_units(self) -> int:
        return int(self.unit_rank.size)


def _offsets(graphs: Sequence[UnitGraph], keys: list[I64]) -> I64:
    """Per unit, its clock offset to the first unit: the median difference of matched collective
    end times (docs/diagnosis.md §5); 0 when every trace claims unix time or nothing matched."""
    n = len(graphs)
    off = np.zeros(n, dtype=np.int64)
    if n < 2 or all(g.trace.clock == "unix" for g in graphs):
        return off
    from ..run.matching import _offsets as coll_offsets

    rows = []
    for u, g in enumerate(graphs):
        m = g.inst >= 0
        if not m.any():
            continue
        k = keys[u][g.inst[m]]
        df = pd.DataFrame({"key": k, "unit": u, "end_ns": g.end_ns[m]})
        rows.append(df[df["key"] >= 0].groupby(["key", "unit"], as_index=False)["end_ns"].max())
    if not rows:
        return off
    m_df = pd.concat(rows, ignore_index=True)
    est = coll_offsets(m_df, np.ones(len(m_df), dtype=bool))
    for u, o in est.items():
        off[u] = o
    return off


def join_graphs(graphs: Sequence[UnitGraph]) -> RunGraph:
    """The run graph of the units (the reduce)."""
    keys = match_units(graphs)
    off = _offsets(graphs, keys)
    step_labels: dict[str, int] = {}
    for g in graphs:
        for lbl in g.labels:
            step_labels.setdefault(str(lbl), len(step_labels))
    names: dict[str, int] = {}
    families: dict[str, int] = {}
    parts: dict[str, list[npt.NDArray[np.generic]]] = {}
    calls: dict[str, list[I64]] = {}
    lane_base = 0
    node_base = 0
    lane_host: list[npt.NDArray[np.bool_]] = []
    lane_comm: list[npt.NDArray[np.bool_]] = []
    role_codes: dict[str, int] = {}
    notes: list[str] = []
    n_steps = len(step_labels)
    wstart = np.full((len(graphs), n_steps), -1, dtype=np.int64)
    wend = np.full((len(graphs), n_steps), -1, dtype=np.int64)
    for u, g in enumerate(graphs):
        n = g.lane.size
        gwin = np.array([step_labels[str(lbl)] for lbl in g.labels], dtype=np.int64)
        wstart[u, gwin] = g.win_start_ns - off[u]
        wend[u, gwin] = g.win_end_ns - off[u]
        name_map = np.array([names.setdefault(s, len(names)) for s in g.names], dtype=np.int64)
        fam_local = np.array(
            [families.setdefault(str(f), len(families)) for f in g.instances.get("family", [])],
            dtype=np.int64,
        )
        role = np.array([role_codes.setdefault(r, len(role_codes)) for r in g.lane_role])
        has_inst = g.inst >= 0
        gk = np.full(n, -1, dtype=np.int64)
        fam = np.full(n, -1, dtype=np.int64)
        if has_inst.any():
            gk[has_inst] = keys[u][g.inst[has_inst]]
            fam[has_inst] = fam_local[g.inst[has_inst]]
        win = np.where(g.window >= 0, gwin[np.maximum(g.window, 0)] if gwin.size else -1, -1)
        # per-node codes and ids as the run graph keeps them (int32: fewer than INT32_NODES)
        parts.setdefault("unit", []).append(np.full(n, u, dtype=np.int32))
        parts.setdefault("lane", []).append((g.lane + lane_base).astype(np.int32))
        parts.setdefault("start", []).append(g.start_ns - off[u])
        parts.setdefault("end", []).append(g.end_ns - off[u])
        parts.setdefault("kind", []).append(g.kind)
        parts.setdefault("window", []).append(win.astype(np.int32))
        parts.setdefault("name", []).append(
            (name_map[g.name] if n else name_map[:0]).astype(np.int32)
        )
        parts.setdefault("shape", []).append(g.shape)
        parts.setdefault("role", []).append((role[g.lane] if n else role[:0]).astype(np.int32))
        parts.setdefault("inst", []).append(gk.astype(np.int32))
        parts.setdefault("family", []).append(fam.astype(np.int32))
        parts.setdefault("src", []).append(g.src + node_base)
        parts.setdefault("dst", []).append(g.dst + node_base)
        parts.setdefault("src_start", []).append(g.src_start)
        parts.setdefault("gap", []).append(g.gap)
        parts.setdefault("guessed", []).append(
            g.guessed if g.guessed.size == g.src.size else np.zeros(g.src.size, dtype=bool)
        )
        parts.setdefault("esrc", []).append(g.esrc + node_base)
        parts.setdefault("edst", []).append(g.edst + node_base)
        parts.setdefault("egap", []).append(g.egap)
        calls.setdefault("lane", []).append(g.call_lane + lane_base)
        calls.setdefault("start", []).append(g.call_start_ns - off[u])
        calls.setdefault("end", []).append(g.call_end_ns - off[u])
        lane_host.append(g.lane_host)
        comm = np.zeros(len(g.lane_names), dtype=bool)
        comm[g.lane[g.kind == Kind.COMM]] = True
        # a compute thread that sits in its blocking sends and recvs is no communication lane
        comm[g.lane[g.kind == Kind.COMPUTE]] &= ~g.lane_host[g.lane[g.kind == Kind.COMPUTE]]
        lane_comm.append(comm)
        lane_base += len(g.lane_names)
        node_base += n
        notes.extend(g.notes)
    # each column's parts freed as it is joined (the units' and the run's columns are not all
    # held twice)
    cat = {k: np.concatenate(parts.pop(k)) for k in list(parts)}
    rg = _sorted_graph(
        cat, graphs, lane_host, lane_comm, names, families, step_labels, wstart, wend, notes
    )
    guessed = cat["guessed"].astype(bool) if "guessed" in cat else np.zeros(0, bool)
    rg = dataclasses.replace(
        rg,
        guessed=guessed if guessed.any() else np.zeros(0, dtype=bool),
        unit_host=tuple(g.trace.host for g in graphs),
        unit_gpu=np.array([g.trace.device_kind == "gpu" for g in graphs], dtype=bool),
    )
    c = {k: np.concatenate(v).astype(np.int64) for k, v in calls.items()}
    if not c or c["lane"].size == 0:
        return rg
    return dataclasses.replace(
        rg, call_lane=c["lane"], call_start_ns=c["start"], call_end_ns=c["end"]
    )


def _positions(unit: I32, window: I32, role: I32, name: I32) -> I32:
    """Per node: a position id equal across ranks for the n-th occurrence of the same op name on
    the same (step, lane role) (docs/whatif.md §3): never "the n-th compute kernel", which is a
    forward on one pipeline stage and a backward on another. Nodes must be in start order within
    each lane."""
    df = pd.DataFrame({"u": unit, "w": window, "r": role, "n": name})
    ordinal = df.groupby(["u", "w", "r", "n"], sort=False).cumcount().to_numpy()
    key = pd.DataFrame({"w": window, "r": role, "n": name, "o": ordinal})
    return np.asarray(key.groupby(["w", "r", "n", "o"], sort=False).ngroup(), dtype=np.int32)


def _sorted_graph(
    cat: dict[str, npt.NDArray[np.generic]],
    graphs: Sequence[UnitGraph],
    lane_host: list[npt.NDArray[np.bool_]],
    lane_comm: list[npt.NDArray[np.bool_]],
    names: dict[str, int],
    families: dict[str, int],
    step_labels: dict[str, int],
    wstart: I64,
    wend: I64,
    notes: list[str],
) -> RunGraph:
    n = cat["unit"].size if "unit" in cat else 0
    if n == 0:
        z = np.zeros(0, np.int64)
        z32 = np.zeros(0, np.int32)
        return RunGraph(
            z32,
            z32,
            z,
            z,
            np.zeros(0, np.int8),
            z32,
            z32,
            z32,
            z32,
            z32,
            np.zeros(0, bool),
            np.zeros(0, bool),
            z,
            z,
            np.zeros(0, bool),
            z,
            z,
            z,
            z,
            (),
            (),
            tuple(step_labels),
            np.array([g.trace.rank for g in graphs]),
            wstart,
            wend,
            tuple(notes),
        )
    if n >= INT32_NODES:
        raise UsageError(
            f"the run graph has {n:,} activities, more than the replay's {INT32_NODES - 1:,} "
            "(int32 ids): replay fewer steps (--steps) or ranks"
        )
    lane = cat["lane"].astype(np.int32, copy=False)
    start = cat["start"].astype(np.int64, copy=False)
    order = np.lexsort((np.arange(n), start, lane))
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)

    def col(key: str, dtype: type[np.generic]) -> npt.NDArray[Any]:
        """A node column in graph order, its unsorted parts freed."""
        return np.asarray(cat.pop(key), dtype=dtype)[order]

    kind = col("kind", np.int8)
    unit = col("unit", np.int32)
    window = col("window", np.int32)
    role = col("role", np.int32)
    name = col("name", np.int32)
    return RunGraph(
        unit=unit,
        lane=lane[order],
        start_ns=start[order],
        end_ns=col("end", np.int64),
        kind=kind,
        window=window,
        name=name,
        pos=_positions(unit, window, role, name),
        inst=col("inst", np.int32),
        family=col("family", np.int32),
        lane_host=np.concatenate(lane_host),
        lane_comm=np.concatenate(lane_comm),
        src=inv[cat["src"].astype(np.int64)],
        dst=inv[cat["dst"].astype(np.int64)],
        src_start=cat["src_start"].astype(bool),
        gap=cat["gap"].astype(np.int64),
        esrc=inv[cat["esrc"].astype(np.int64)],
        edst=inv[cat["edst"].astype(np.int64)],
        egap=cat["egap"].astype(np.int64),
        names=tuple(names),
        families=tuple(families),
        step_labels=tuple(step_labels),
        unit_rank=np.array([g.trace.rank for g in graphs], dtype=np.int64),
        win_start_ns=wstart,
        win_end_ns=wend,
        notes=tuple(notes),
        shape=cat["shape"].astype(np.int32)[order],
        role=role,
    )


#: A guessed cross-stream sync edge the trace contradicts by at most this much (its target started
#: that long before its source ended: clock granularity between streams, launch jitter) is kept
#: (docs/whatif.md §1): dropping it would move the wait it stands for into the target's slack,
#: where no scenario can remove it. Beyond it the guess is wrong and dropped.
SYNC_TOLERANCE_NS = 10_000


def tolerate_guesses(g: RunGraph, tolerance_ns: int = SYNC_TOLERANCE_NS) -> tuple[RunGraph, str]:
    """``g`` without the guessed edges the trace contradicts by more than ``tolerance_ns``, and
    the note that counts the guesses kept as observed, kept within the tolerance, and dropped
    ("" where nothing was guessed)."""
    if g.guessed.size != g.src.size or not g.guessed.any():
        return g, ""
    start, end = g.start_ns, g.end_ns
    src_t = np.where(g.src_start, start[g.src], end[g.src]) + g.gap
    contra = src_t - start[g.dst]  # > 0: the target started before the edge allowed
    drop = g.guessed & (contra > tolerance_ns)
    within = g.guessed & (contra > 0) & ~drop
    n = int(g.guessed.sum())
    worst = int(contra[within].max()) if within.any() else 0
    note = (
        f"{n} cross-stream sync edge(s) guessed from cudaStreamWaitEvent calls: "
        f"{n - int(within.sum()) - int(drop.sum())} agree with the trace, {int(within.sum())} "
        f"contradicted by at most the sync tolerance of {tolerance_ns / 1e3:g} us kept (worst "
        f"{worst / 1e3:.1f} us), {int(drop.sum())} contradicted by more dropped"
    )
    if not drop.any():
        return g, note
    keep = ~drop
    return (
        dataclasses.replace(
            g,
            src=g.src[keep],
            dst=g.dst[keep],
            src_start=g.src_start[keep],
            gap=g.gap[keep],
            guessed=g.guessed[keep],
        ),
        note,
    )


def run_graph(analysis: Analysis) -> RunGraph | None:
    """The run graph of an analysis made with ``AnalyzeOptions(graph=True)``: its units' graphs,
    from the same read, joined; None when it has none (not asked for, no step to replay, or left
    out past ``graph_max_nodes``: ``analysis.run_graph_nodes`` says how many nodes)."""
    return join_graphs(list(analysis.unit_graphs)) if analysis.unit_graphs else None
