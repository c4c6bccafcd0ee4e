"""The Timeline: one columnar table of activities that every reader produces.

Readers (Kineto JSON, Nsight Systems SQLite) turn their input into a :class:`Timeline`; everything
downstream (classification, steps, metrics, collectives, reporters) reads only this type.

The event table is a pandas DataFrame, one row per trace event that the analysis may need, with
these columns (all times are integer nanoseconds; absolute unix time when the trace lets us align
clocks, see :attr:`TraceInfo.clock`):

==============  ==========  ===============================================================
column          dtype       meaning
==============  ==========  ===============================================================
rank            int64       distributed rank the event belongs to
pid             int64       OS process that ran / launched it (joins GPU work to launches)
device          int32       GPU index for GPU activity, -1 for host (CPU) events
stream          int64       GPU stream for GPU activity, -1 for host events
tid             int64       host thread id for host events, -1 for GPU activity
lane            category    display lane: ``"stream 7"`` / ``"thread 1234 (pt_gloo_runloop)"``
thread_name     category    host thread name when known, else ``""``
category        category    source category, one of :data:`CATEGORIES`
name            category    event name (kernel short name, op name, range text)
start_ns        int64       start, ns
end_ns          int64       end, ns (``end_ns >= start_ns``)
correlation     int64       launch <-> GPU activity correlation id, -1 when none
coll_name       category    collective name (``allreduce``...) when the trace says, else ``""``
coll_bytes      int64       message size in bytes when known, else -1
process_group   category    process group name/id when known, else ``""``
seq             int64       per-process-group sequence number when known, else -1
group_size      int32       collective group size when known, else -1
shape           int32       kernel launch shape code (grid, block), else -1
                            (:mod:`traceoverlap.readers._shape`: the same in every reader)
wait_stream     int64       ``sync`` rows of a stream wait: the stream waited on (Kineto
                            ``args.wait_on_stream``; nsys: the ``streamId`` of the event's
                            record in ``CUPTI_ACTIVITY_KIND_CUDA_EVENT``), else -1
wait_corr       int64       ``sync`` rows of a stream wait: the correlation id of the event
                            record call waited on (``wait_on_cuda_event_record_corr_id``;
                            nsys: that record's ``correlationId``), else -1
peer_rank       int32       point-to-point ops (``c10d::send`` / ``c10d::recv_``): the peer's
                            rank *within the op's process group*, from ``Concrete Inputs``
                            (``record_shapes``), else -1
p2p_tag         int64       and their tag, else -1
==============  ==========  ===============================================================

:func:`traceoverlap.rank.classify.classify` adds the ``kind`` column (one of :data:`traceoverlap.core.vocab.KINDS`).
No per-event Python objects: build the table from numpy arrays with :func:`make_events`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from .intervals import unique_values

#: Source categories a reader maps its events to.
#:  - kernel / memcpy / memset: GPU activities
#:  - sync: GPU synchronisation records (Kineto ``cuda_sync``): never activity
#:  - runtime / driver: host-side CUDA API calls (launches carry ``correlation``)
#:  - cpu_op: host operators (``aten::mm``...)
#:  - annotation: host ranges (``ProfilerStep#3``, ``record_function``, NVTX ranges, ``gloo:*``)
#:  - gpu_annotation: ranges projected on GPU lanes by the profiler (display only)
#:  - other: anything else kept for display (python functions...)
CATEGORIES: tuple[str, ...] = (
    "kernel",
    "memcpy",
    "memset",
    "sync",
    "runtime",
    "driver",
    "cpu_op",
    "annotation",
    "gpu_annotation",
    "other",
)
GPU_ACTIVITY_CATEGORIES: tuple[str, ...] = ("kernel", "memcpy", "memset")
LAUNCH_CATEGORIES: tuple[str, ...] = ("runtime", "driver")


class Kind(enum.IntEnum):
    """Activity kinds as the int8 codes the analysis stores (``KINDS[code]`` is the name)."""

    COMPUTE = 0
    COMM = 1
    MEMORY = 2
    NONE = 3


_INT_COLUMNS: dict[str, str] = {
    "rank": "int64",
    "pid": "int64",
    "device": "int32",
    "stream": "int64",
    "tid": "int64",
    "start_ns": "int64",
    "end_ns": "int64",
    "correlation": "int64",
    "coll_bytes": "int64",
    "seq": "int64",
    "group_size": "int32",
    "shape": "int32",
    "wait_stream": "int64",
    "wait_corr": "int64",
    "peer_rank": "int32",
    "p2p_tag": "int64",
}
_INT_DEFAULTS: dict[str, int] = {
    "rank": 0,
    "pid": 0,
    "device": -1,
    "stream": -1,
    "tid": -1,
    "correlation": -1,
    "coll_bytes": -1,
    "seq": -1,
    "group_size": -1,
    "shape": -1,
    "wait_stream": -1,
    "wait_corr": -1,
    "peer_rank": -1,
    "p2p_tag": -1,
}
#: Columns that most traces leave at their default: absent, they are one shared read-only value
#: (a stride-0 view), not a column of copies.
_SPARSE_COLUMNS = frozenset({"wait_stream", "wait_corr", "peer_rank", "p2p_tag"})
#: Column order of the event table.
COLUMNS: tuple[str, ...] = (
    "rank",
    "pid",
    "device",
    "stream",
    "tid",
    "lane",
    "thread_name",
    "category",
    "name",
    "start_ns",
    "end_ns",
    "correlation",
    "coll_name",
    "coll_bytes",
    "process_group",
    "seq",
    "group_size",
    "shape",
    "wait_stream",
    "wait_corr",
    "peer_rank",
    "p2p_tag",
)


def per_category(
    col: pd.Series,
    fn: Callable[[str], Any],
    rows: npt.NDArray[np.bool_] | None = None,
    dtype: Any = object,
) -> npt.NDArray[Any]:
    """``fn(name)`` for the categories of a categorical column, indexed by code (the trailing
    entry, picked by code -1, is ``fn``'s value for a missing name: "" / False).

    Only the categories that the selected ``rows`` use are evaluated: a Nsight export can carry
    millions of distinct names (every emit_nvtx range is unique) of which a unit's kernels use a
    few hundred, and evaluating regexes over all of them per unit dominated the analysis."""
    cats = col.cat.categories
    codes = col.cat.codes.to_numpy()
    if rows is not None:
        codes = codes[rows]
    # which categories occur: a bincount, linear (a hash-based unique costs far more here)
    seen = np.bincount(codes.astype(np.int64) + 1, minlength=len(cats) + 1)[1:] > 0
    used = np.flatnonzero(seen)
    empty: Any = False if dtype is bool else ""
    out = np.full(len(cats) + 1, empty, dtype=dtype)
    if used.size:
        names = cats.to_numpy(dtype=object)[used]  # iterating an Index costs ~1 µs per item
        out[used] = np.array([fn(str(c)) for c in names], dtype=dtype)
    return out


def in_categories(col: pd.Series, values: Sequence[str]) -> npt.NDArray[np.bool_]:
    """Per row: is the value one of ``values``? (``col.isin(values)``, a missing value never).

    For a categorical column the test is made on the codes: one comparison per wanted code
    (a table lookup when there are many). pandas' ``Series.isin`` hashes every row's code
    (~5 ms per 430 000 rows against ~0.2 ms), and the analysis asks it of the category column
    several times per unit."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        return np.asarray(col.isin(list(values)).to_numpy(dtype=bool, na_value=False), dtype=bool)
    arr = col.array
    assert isinstance(arr, pd.Categorical)
    cats = arr.categories
    if len(cats) <= 64:  # the category column: a scan of its list (get_indexer: ~80 µs a call)
        wanted = set(values)
        idx = np.array([i for i, c in enumerate(cats.tolist()) if c in wanted], dtype=np.intp)
    else:
        idx = cats.get_indexer(list(values))
        idx = idx[idx >= 0]
    if idx.size <= 8:  # a comparison per code: indexing by int8 codes first widens them
        out = np.zeros(len(arr.codes), dtype=bool)
        for c in idx.tolist():
            out |= arr.codes == c
        return out
    hit = np.zeros(len(arr.categories) + 1, dtype=bool)  # the last entry: code -1, missing
    hit[idx] = True
    lut: npt.NDArray[np.bool_] = hit[arr.codes]
    return lut


def values_at(col: pd.Series, rows: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
    """``col.to_numpy()[rows]`` (row numbers): for a categorical column, the values of those
    rows only, without first turning every row of the column into an object (~5 ms per
    430 000 rows, for the few hundred rows asked)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return np.asarray(col.array.take(rows))
    out: npt.NDArray[Any] = col.to_numpy()[rows]
    return out


def make_events(n: int, columns: Mapping[str, Any]) -> pd.DataFrame:
    """Build an event table of ``n`` rows from column arrays (or scalars broadcast to ``n``).

    Missing optional columns get their defaults (-1 / ``""``); ``start_ns``, ``end_ns``,
    ``category`` and ``name`` are required. String columns become categoricals.
    """
    for req in ("start_ns", "end_ns", "category", "name"):
        if req not in columns:
            raise ValueError(f"make_events: missing required column {req!r}")
    data: dict[str, Any] = {}
    for col in COLUMNS:
        if col in _INT_COLUMNS:
            value = columns.get(col, _INT_DEFAULTS.get(col, 0))
            arr = np.asarray(value, dtype=_INT_COLUMNS[col])
            if arr.ndim == 0 and col in _SPARSE_COLUMNS:
                data[col] = np.broadcast_to(arr, (n,))
            else:
                data[col] = np.broadcast_to(arr, (n,)).copy() if arr.ndim == 0 else arr
        else:
            value = columns.get(col, "")
            if isinstance(value, pd.Categorical):
                data[col] = value
            elif isinstance(value, str):
                data[col] = pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), [value])
            else:
                data[col] = pd.Categorical(np.asarray(value, dtype=object))
    for col, arr in data.items():
        if len(arr) != n:
            raise ValueError(f"make_events: column {col!r} has {len(arr)} rows, expected {n}")
    # copy=False: the arrays were built for this table; copying them doubled the peak on big exports
    return pd.DataFrame(data, columns=list(COLUMNS), copy=False)


def empty_events() -> pd.DataFrame:
    """An event table with no rows and the right dtypes."""
    return make_events(
        0,
        {
            "start_ns": np.zeros(0, np.int64),
            "end_ns": np.zeros(0, np.int64),
            "category": np.zeros(0, object),
            "name": np.zeros(0, object),
        },
    )


@dataclass(frozen=True)
class TraceInfo:
    """What one input said about itself (one per rank; an nsys export may give several).

    ``rank_source`` says where ``rank`` came from: ``distributedInfo``, ``filename``, ``nvtx``,
    ``environment``, ``process-order`` (nsys: processes ordered by device then pid) or
    ``default`` (nothing said; assumed 0). ``clock`` is ``unix`` when ``start_ns`` values are
    absolute unix-epoch nanoseconds (comparable across ranks), ``relative`` otherwise.
    ``notes`` are caveats for the report (one sentence each).
    """

    path: str
    format: str  # "kineto" | "nsys": shown in reports and JSON; decisions use the fields below
    rank: int
    world_size: int | None = None
    backend: str | None = None
    rank_source: str = "default"
    device_kind: str = "cpu"  # "gpu" when the trace has GPU activity, else "cpu"
    devices: tuple[str, ...] = ()
    #: the device id of each entry of ``devices`` (same order), when the reader knows it
    device_ids: tuple[int, ...] = ()
    format_version: str | None = None
    clock: str = "relative"
    pid: int | None = None
    device: int | None = None
    notes: tuple[str, ...] = ()
    #: the process groups this rank belongs to, ``(name, ranks)`` in creation order (Kineto
    #: ``distributedInfo.pg_config``); empty when the trace does not say
    process_groups: tuple[tuple[str, tuple[int, ...]], ...] = ()
    #: thread ids of the host process's gloo worker threads (``pt_gloo_runloop``), ascending
    gloo_threads: tuple[int, ...] = ()
    #: the machine the rank ran on (Kineto ``host_name``), when the trace says
    host: str | None = None
    # What the capture can show, set by its reader: the analysis and the reports decide on these,
    # never on ``format`` (which is only printed), so a new reader states them and nothing
    # downstream changes. Not part of ``to_dict``: they describe the format, not the rank.
    #: host-side communication work shows by itself (Kineto records gloo's work items); False
    #: when only ranges the program marks can show it (Nsight Systems sees no gloo work), so a
    #: CPU unit without communication has it unseen, not absent
    host_comm_seen: bool = True
    #: the capture is the PyTorch profiler's (Kineto), so the program is PyTorch; False for a
    #: capture of any program (Nsight Systems), where PyTorch shows only by its names and a
    #: program without them (MPI, CUDA) gets no PyTorch advice (diagnosis.md §13)
    pytorch_capture: bool = True
    #: the reader kept only the host ranges the analysis's range filter accepted (Nsight Systems:
    #: an ``emit_nvtx`` capture's million op ranges are never read); a unit that finds no step
    #: marker is read again without the filter, for the no-marker hints
    ranges_filtered: bool = False
    #: the input records every process of the profiled command (Nsight Systems), not one rank's
    #: process (Kineto): this unit is one (process, GPU) group of it, told from the others by its
    #: pid and GPU number, which the reports therefore show
    multiprocess_capture: bool = False

    def with_notes(self, *notes: str) -> TraceInfo:
        return replace(self, notes=self.notes + tuple(notes))

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "rank": self.rank,
            "world_size": self.world_size,
            "backend": self.backend,
            "format": self.format,
            "format_version": self.format_version,
            "device_kind": self.device_kind,
            "devices": list(self.devices),
            "rank_source": self.rank_source,
            "clock": self.clock,
            "pid": self.pid,
            "device": self.device,
            "process_groups": [{"name": n, "ranks": list(r)} for n, r in self.process_groups],
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Timeline:
    """All events of one or more ranks, plus what each input said about itself.

    ``events`` follows the column contract in this module's docstring; ``traces`` has one
    :class:`TraceInfo` per rank (sorted by rank). A Timeline is immutable by convention:
    operations return new Timelines.
    """

    events: pd.DataFrame
    traces: tuple[TraceInfo, ...] = field(default_factory=tuple)

    @property
    def ranks(self) -> list[int]:
        return sorted({t.rank for t in self.traces})

    def gpu_ranks(self) -> np.ndarray:
        """Ranks with at least one GPU activity: these follow the GPU rules, the rest the CPU rules."""
        ev = self.events
        return unique_values(
            ev["rank"].to_numpy()[in_categories(ev["category"], GPU_ACTIVITY_CATEGORIES)]
        )

    def select_ranks(self, ranks: Sequence[int]) -> Timeline:
        keep = set(ranks)
        ev = self.events[self.events["rank"].isin(keep)].reset_index(drop=True)
        return Timeline(ev, tuple(t for t in self.traces if t.rank in keep))

    def __len__(self) -> int:
        return len(self.events)


def take_rows(
    ev: pd.DataFrame, rows: npt.NDArray[np.intp], plan: list[_Column] | None = None
) -> pd.DataFrame:
    """``ev.iloc[rows].reset_index(drop=True)`` (ascending row numbers) built column by column
    from numpy: a categorical's codes are taken and wrapped again in its dtype (no check of codes
    that came from a valid column), and a column of one value (a stride-0 view, as the readers
    make them, or a column whose rows all hold the same value) becomes that value shared over
    the new length (no memory per row: the event table never writes its columns). pandas' row
    selection of the whole table cost ~4x this on a process that drove 8 GPUs (its host rows are
    taken once per GPU). ``plan``: :func:`column_plan` of ``ev``, when taking from it again."""
    data: dict[str, Any] = {}
    for col, values, dtype, shared in plan if plan is not None else column_plan(ev):
        if dtype is not None:
            data[col] = pd.Categorical.from_codes(values[rows], dtype=dtype, validate=False)
        elif shared:
            data[col] = np.broadcast_to(values[:1], (rows.size,))
        else:
            data[col] = values[rows]
    return pd.DataFrame(data, columns=ev.columns, copy=False)


#: One column of an event table as :func:`take_rows` takes from it: its name, the codes of a
#: categorical or the values, the categorical's dtype (else None), whether one value is shared.
_Column = tuple[str, npt.NDArray[Any], Any, bool]


def column_plan(ev: pd.DataFrame) -> list[_Column]:
    """How :func:`take_rows` takes each column of ``ev``: read once per table, not once per
    unit taken from it."""
    plan: list[_Column] = []
    for col in ev.columns:
        s = ev[col]
        if isinstance(s.dtype, pd.CategoricalDtype):
            plan.append((col, s.cat.codes.to_numpy(), s.dtype, False))
            continue
        arr = s.to_numpy()
        shared = arr.ndim == 1 and arr.size > 0 and (arr.strides == (0,) or _constant(arr))
        plan.append((col, arr, None, shared))
    return plan


def _constant(arr: npt.NDArray[Any]) -> bool:
    """Whether every value of ``arr`` (not empty) is its first, bit for bit."""
    return bool((arr == arr[0]).all()) if arr.dtype.kind in "iub" else False


def split_units(timeline: Timeline) -> list[Timeline]:
    """One Timeline per analysis unit: each (process, device) is its own timeline.

    Overlap only means something per device, so a rank whose process drove several GPUs becomes
    one unit per GPU: that GPU's activities plus every host event of the process (launch calls,
    step markers and ranges belong to all of its devices), with ``TraceInfo.device`` set and a
    note. A rank with one device (or none: a CPU rank) is one unit, its events untouched.
    Units come out in (rank, device) order.
    """
    ev = timeline.events
    rank = ev["rank"].to_numpy()
    device = ev["device"].to_numpy()
    is_gpu = in_categories(ev["category"], GPU_ACTIVITY_CATEGORIES)
    units: list[Timeline] = []
    # rows grouped by rank (as the nsys reader gives them): a rank's rows are a slice, which
    # pandas shares with the table instead of copying it
    grouped = rank.size < 2 or bool((rank[1:] >= rank[:-1]).all())
    plan: list[_Column] | None = None  # the columns as take_rows reads them, once
    for info in sorted(timeline.traces, key=lambda t: t.rank):
        on_rank = rank == info.rank
        devs = unique_values(device[on_rank & is_gpu])
        single = len(timeline.traces) == 1
        if devs.size <= 1:
            dev = int(devs[0]) if devs.size else info.device
            if single:
                sub = ev
            elif grouped:
                lo = int(np.searchsorted(rank, info.rank, side="left"))
                hi = int(np.searchsorted(rank, info.rank, side="right"))
                sub = ev.iloc[lo:hi].reset_index(drop=True)
            else:
                sub = ev[on_rank].reset_index(drop=True)
            units.append(Timeline(sub, (replace(info, device=dev),)))
            continue
        note = (
            f"process {info.pid if info.pid is not None else '?'} (rank {info.rank}) drove "
            f"{devs.size} GPUs ({', '.join(str(int(d)) for d in devs)}): each GPU is analysed as "
            "its own timeline (overlap only means something per device)"
        )
        host = on_rank & ~is_gpu
        if plan is None:
            plan = column_plan(ev)
        for d in devs.tolist():
            keep = host | (on_rank & is_gpu & (device == d))
            ids = list(info.device_ids)
            name = (
                info.devices[ids.index(d)]
                if d in ids and ids.index(d) < len(info.devices)
                else None
            )
            units.append(
                Timeline(
                    take_rows(ev, np.flatnonzero(keep), plan),
                    (
                        replace(
                            info,
                            device=int(d),
                            devices=(name,) if name else info.devices,
                            device_ids=(int(d),) if name else info.device_ids,
                            notes=info.notes + (note,),
                        ),
                    ),
                )
            )
    return units


def concat_timelines(timelines: Sequence[Timeline]) -> Timeline:
    """Stack several timelines (e.g. one per rank file) into one, categoricals unified."""
    if not timelines:
        return Timeline(empty_events(), ())
    if len(timelines) == 1:
        return timelines[0]
    frames = [t.events for t in timelines]
    cat_cols = [c for c in frames[0].columns if isinstance(frames[0][c].dtype, pd.CategoricalDtype)]
    cats = {
        c: pd.api.types.union_categoricals([f[c] for f in frames], ignore_order=True).categories
        for c in cat_cols
    }
    fixed = [f.assign(**{c: f[c].cat.set_categories(cats[c]) for c in cat_cols}) for f in frames]
    ev = pd.concat(fixed, ignore_index=True)
    traces = tuple(sorted((t for tl in timelines for t in tl.traces), key=lambda t: t.rank))
    return Timeline(ev, traces)
