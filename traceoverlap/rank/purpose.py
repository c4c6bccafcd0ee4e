"""What a collective is for (docs/diagnosis.md §10): the rules that give a purpose (the words:
:data:`traceoverlap.core.vocab.PURPOSES`) to each collective instance of a unit.

The purpose comes from where the instance was launched: the host ranges around its launch (GPU:
its launch call's start; CPU units: its start, and the last ``c10d::*`` call before it, which is
the op that queued it), read as the phase (forward / backward / optimizer), the launching op
(DDP's reducer, FSDP's all-gather, TorchRec's embedding all-to-all, MoE dispatch / combine, a
tensor-parallel all-reduce of an inference forward, pipeline send / recv, gloo's reduce-scatter
run as an all-reduce) and the strategy the unit shows (DDP, bucketed all-reduces during backward).
A purpose no rule gives is ``unknown``: said, never guessed.

Evidence, not names (diagnosis.md §13): an all-gather / reduce-scatter is FSDP's only with FSDP
evidence (its ranges or modules around the launch: ``FullyShardedDataParallel``, ``FSDP::``,
``fsdp``, ``unshard`` / ``reshard``, ZeRO / DeepSpeed); without it, one launched inside the
optimizer is the optimizer's, and any other is ``unknown``. On a CPU unit, a collective launched
from a thread other than the training main thread (a side thread: metrics, heartbeats, a
checkpoint writer) is read from that thread's own ranges only, and is a gradient sync only when
they say so (DDP's reducer, FSDP): the main thread's ``backward`` around it says nothing about it.

Everything is computed per unit with one interval union per pattern and binary searches; names
are matched once per distinct name and pattern, and a pattern runs only on the names that hold one
of its literals (:class:`~traceoverlap.rank.namefilter.NameBlock`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core import intervals as iv
from ..core.model import Kind, Timeline, in_categories, values_at
from ..core.vocab import STEP_MARKER_PREFIX, Family, Phase, Purpose, family_of
from .namefilter import NameBlock
from .steps import NO_LAUNCH, UnitSteps, cat_codes

I64 = npt.NDArray[np.int64]

#: Host-range patterns, by what they tell (matched on the names of ranges around the launch).
PATTERNS: dict[str, re.Pattern[str]] = {
    Phase.FORWARD: re.compile(r"(?i)## forward ##|\.forward$|^forward$|_forward\b"),
    Phase.BACKWARD: re.compile(
        r"(?i)## backward ##|^backward$|autograd::engine::evaluate_function"
    ),
    Phase.OPTIMIZER: re.compile(r"(?i)^Optimizer\.|## optimizer ##|^optimizer|optimizer_step"),
    "ddp": re.compile(r"DistributedDataParallel|Reducer|reducer|allreduce_hook|comm_hook"),
    "fsdp": re.compile(
        r"(?i)FSDP|FullyShard|fully_shard|zero_?[123]|deepspeed|\bunshard|\breshard|"
        r"_?pre_?forward_unshard|post_backward_reshard"
    ),
    "reduce_scatter_base": re.compile(r"_reduce_scatter_base|reduce_scatter_tensor"),
    "torchrec": re.compile(
        r"(?i)torchrec|KJT|sparse_data_dist|All2All_Pooled|All2All_Seq|all2all_data|"
        r"alltoall_(fwd|bwd)_single|ShardedEmbedding|EmbeddingBagCollection|input_dist|"
        r"output_dist"
    ),
    "moe_dispatch": re.compile(r"(?i)dispatch"),
    "moe_combine": re.compile(r"(?i)combine"),
    "moe": re.compile(r"(?i)deep_ep|\bmoe\b|moe_|expert"),
    "sequence_parallel": re.compile(r"(?i)AllToAll4D|ulysses|SeqAllToAll|all_to_all_4d"),
    "tensor_parallel": re.compile(
        r"(?i)vllm|tensor_model_parallel|RowParallel|ColumnParallel|custom_all_reduce|"
        r"tensor_parallel|ModelParallelRegion|FromTP\b|ToTP(Backward)?\b|(^|[^a-z])tp_"
    ),
    "pipeline": re.compile(
        r"(?i)pipe|stage|c10d::send|c10d::recv|isend|irecv|batch_isend_irecv|\bp2p\b"
    ),
}
_COMM_CALL = re.compile(r"^c10d::|^record_param_comms$")
#: Names only PyTorch writes (diagnosis.md §13: an MPI or other non-PyTorch program has none).
_PYTORCH = re.compile(
    r"^(aten::|c10d::|autograd::|" + re.escape(STEP_MARKER_PREFIX) + r"|record_param_comms$|"
    r"Optimizer\.|torch[._]|"
    r"DistributedDataParallel|FullyShardedDataParallel|nccl:\w+, op_id)"
)
_HOST_CATEGORIES = ("cpu_op", "annotation", "python_function", "user_annotation")


#: diagnosis.md §13: a unit prefetches its FSDP all-gathers when at least this share of them
#: were issued while compute still ran (:func:`_under_compute`). Not a majority: on a CPU unit an
#: all-gather that ends before the thread's next op starts shows nothing either way (a loaded
#: host may finish it inside the launching call), while a blocking one never has compute under it.
PREFETCH_SHARE = 0.25
#: ... "under compute" on a CPU unit: the thread's next op starts before the last
#: 1/PREFETCH_MARGIN of the instance (not in the few µs between the worker signalling the end
#: and recording it)
PREFETCH_MARGIN = 10


@dataclass(frozen=True)
class UnitStrategy:
    """What the unit's trace shows it already does: ``ddp`` (DDP ranges), ``bucketed`` (DDP, or
    two or more all-reduces launched inside backward in one step), ``backward`` (it trains),
    ``cpu`` (a CPU unit), ``pytorch`` (the trace shows PyTorch at all: profiler ops, ATen /
    c10d names, step markers; diagnosis.md §13: no PyTorch advice without it), ``prefetch``
    (most of its FSDP all-gathers are issued while compute still runs: :func:`_under_compute`)."""

    ddp: bool
    bucketed: bool
    backward: bool
    cpu: bool
    pytorch: bool = True
    #: the FSDP all-gathers run under the previous layer's compute (prefetch is on); None
    #: when the unit has none
    prefetch: bool | None = None
    #: the families of the collectives of unknown purpose launched from a side thread (no
    #: gradient sync: their advice presumes no training strategy)
    side_families: tuple[str, ...] = ()


def _query_times(
    ev: pd.DataFrame,
    kind: npt.NDArray[np.int8],
    inst: Mapping[str, npt.NDArray[Any]],
    steps: UnitSteps,
) -> I64:
    """Per instance (``inst``: its columns): when it was launched (GPU: the launch call's start
    of the comm activity that starts it; CPU, or no launch: its start), ns."""
    t: I64 = np.asarray(inst["start_ns"], dtype=np.int64)
    if not steps.gpu or t.size == 0:
        return t
    rows = np.flatnonzero(kind == Kind.COMM)
    # per instance, the first comm activity at its (lane, start), and that activity's launch
    j = first_match(
        (_texts(inst["lane"]), t),
        (values_at(ev["lane"], rows).astype(str), ev["start_ns"].to_numpy()[rows]),
    )
    ok = j >= 0
    launch = np.asarray(steps.launch_start_ns, dtype=np.int64)[rows][np.maximum(j, 0)]
    out: I64 = t.copy()
    if ok.all():
        vals = launch
    else:  # through float64, as the merge's column with gaps was
        vals = np.where(ok, launch.astype(np.float64), NO_LAUNCH).astype(np.int64)
    has = ok & (vals != NO_LAUNCH)
    out[has] = vals[has]
    return out


def first_match(query: tuple[npt.NDArray[Any], ...], cand: tuple[npt.NDArray[Any], ...]) -> I64:
    """Per query row, the index of the first candidate row (in candidate order) whose key
    columns all equal the query's, -1 when none: pandas' ``drop_duplicates`` then a left
    ``merge``, without a Python object per row. The columns (ints or strings) are coded
    together, column by column, into one int key per row."""
    nq = len(query[0])
    key = np.zeros(nq + len(cand[0]), dtype=np.int64)
    for q, c in zip(query, cand, strict=True):
        codes, uniques = pd.factorize(np.concatenate((np.asarray(q), np.asarray(c))))
        key = pd.factorize(key * (len(uniques) + 1) + codes)[0].astype(np.int64)
    ck, qk = key[nq:], key[:nq]
    uniq, first = np.unique(ck, return_index=True)  # the first candidate of each key
    out = np.full(nq, -1, dtype=np.int64)
    if uniq.size:
        at = np.minimum(np.searchsorted(uniq, qk), uniq.size - 1)
        ok = uniq[at] == qk
        out[ok] = first[at[ok]]
    return out


#: The patterns whose answers per name :data:`_MEMO` keeps: bit ``i`` of an entry says pattern
#: ``i`` was tested on the name, bit ``i + 32`` that it matched.
_MEMO_BIT: dict[re.Pattern[str], int] = {
    rx: i for i, rx in enumerate((*PATTERNS.values(), _COMM_CALL, _PYTORCH))
}
#: Per host name, the purpose patterns' answers (:data:`_MEMO_BIT`), shared by every unit of the
#: process (the ranks of a run name the same ops); it stops growing at a bound (an export of
#: unique range names).
_MEMO: dict[str, int] = {}
_MEMO_NAMES = 200_000


def _remember(names: list[str], values: list[int]) -> None:
    """``_MEMO[name] = value`` for each pair in order, a new name only while :data:`_MEMO` has
    fewer than :data:`_MEMO_NAMES` (a name it holds is updated whatever its size)."""
    if len(_MEMO) + len(names) <= _MEMO_NAMES:  # room for all, even if every name is new
        _MEMO.update(zip(names, values, strict=True))
        return
    room = _MEMO_NAMES - len(_MEMO)
    for name, v in zip(names, values, strict=True):
        if name in _MEMO:
            _MEMO[name] = v
        elif room > 0:
            _MEMO[name] = v
            room -= 1


class _HostNames:
    """The names of a unit's host rows, for many name tests: the distinct names the rows use are
    found once (:func:`~traceoverlap.core.model.per_category` per test would find them again each
    time), and each test runs once per distinct name (and once per process for the purpose
    patterns: :data:`_MEMO`). The host rows are grouped by name (when a test first passes
    some), so that the rows of the names a test passes are gathered directly: a dozen tests each
    masking every row of the unit cost more than the rest of the purposes together."""

    def __init__(self, col: pd.Series, host: npt.NDArray[np.bool_]) -> None:
        arr = col.array
        assert isinstance(arr, pd.Categorical)
        cats = arr.categories
        self._rows_in = np.flatnonzero(host)
        self._code = cat_codes(col)[self._rows_in]  # -1: a missing name
        counts = np.bincount(self._code.astype(np.int64) + 1, minlength=len(cats) + 1)
        self.used = np.flatnonzero(counts[1:] > 0)
        self.names = [str(c) for c in cats.take(self.used).tolist()]
        self.size = len(cats)
        self._first = np.concatenate(([0], np.cumsum(counts)))
        self._by_name_rows: I64 | None = None
        self._bits: I64 | None = None
        self._block: NameBlock | None = None
        self._matching: dict[re.Pattern[str], npt.NDArray[np.bool_]] = {}
        self._rows: dict[re.Pattern[str], I64] = {}

    @property
    def _by_name(self) -> I64:
        """The host rows by name code (ascending rows within a name; a stable sort of the small
        integer codes is a radix sort); name code c spans [first[c + 1], first[c + 2]) of it."""
        if self._by_name_rows is None:
            self._by_name_rows = self._rows_in[np.argsort(self._code, kind="stable")]
        return self._by_name_rows

    def test(self, fn: Callable[[str], bool]) -> npt.NDArray[np.bool_]:
        """``fn(name)`` per category code, as :func:`~traceoverlap.core.model.per_category` gives it
        (False for the names the host rows do not use and, last, for a missing name)."""
        out = np.zeros(self.size + 1, dtype=bool)
        if self.used.size:
            out[self.used] = np.array([fn(n) for n in self.names], dtype=bool)
        return out

    def matching(self, rx: re.Pattern[str]) -> npt.NDArray[np.bool_]:
        """``bool(rx.search(name))`` per category code, as :meth:`test` gives it, once per
        pattern (:class:`~traceoverlap.rank.namefilter.NameBlock`: the pattern runs only on
        the names that hold one of its literals)."""
        got = self._matching.get(rx)
        if got is None:
            got = np.zeros(self.size + 1, dtype=bool)
            if self.used.size:
                got[self.used] = self._search(rx)
            self._matching[rx] = got
        return got

    def _search(self, rx: re.Pattern[str]) -> npt.NDArray[np.bool_]:
        """``bool(rx.search(name))`` per name of :attr:`names`: from :data:`_MEMO` for a purpose
        pattern, searched (and remembered) for the names it has not seen."""
        b = _MEMO_BIT.get(rx)
        if b is None:
            return self.block().search(rx)
        bits = self._memo_bits()
        hit: npt.NDArray[np.bool_] = ((bits >> (b + 32)) & 1).astype(bool)
        todo = np.flatnonzero(((bits >> b) & 1) == 0)
        if todo.size:
            names = self.names
            if todo.size == len(names):
                found = self.block().search(rx)
                todo_names = names
            elif 2 * todo.size >= len(names):
                # most names unseen (a unit of unique range names after another): the unit's
                # block, built once for every pattern, not a block of the rest per pattern
                found = self.block().search(rx)[todo]
                todo_names = [names[i] for i in todo.tolist()]
            else:
                todo_names = [names[i] for i in todo.tolist()]
                found = NameBlock(todo_names).search(rx)
            hit[todo] = found
            bits[todo] |= (1 << b) | (found.astype(np.int64) << (b + 32))
            _remember(todo_names, bits[todo].tolist())
        return hit

    def _memo_bits(self) -> I64:
        if self._bits is None:
            get = _MEMO.get
            self._bits = np.array([get(n, 0) for n in self.names], dtype=np.int64)
        return self._bits

    def any(self, rx: re.Pattern[str]) -> bool:
        """``self.matching(rx).any()``, stopping at the first name that matches."""
        got = self._matching.get(rx)
        if got is not None:
            return bool(got.any())
        b = _MEMO_BIT.get(rx)
        if b is not None and self.names:
            bits = self._memo_bits()
            if bool((((bits >> b) & 1) == 1).all()):  # every name's answer is remembered
                return bool(((bits >> (b + 32)) & 1).any())
        return self.block().any(rx)

    def block(self) -> NameBlock:
        if self._block is None:
            self._block = NameBlock(self.names)
        return self._block

    def rows(self, rx: re.Pattern[str]) -> I64:
        """The host rows whose name ``rx`` matches, ascending (once per pattern)."""
        got = self._rows.get(rx)
        if got is None:
            hit = np.flatnonzero(self.matching(rx)[: self.size])
            if hit.size == 0:
                got = self._rows[rx] = np.zeros(0, dtype=np.int64)
                return got
            pos = iv.range_pairs(self._first[hit + 1], self._first[hit + 2])[1]
            got = self._rows[rx] = np.sort(self._by_name[pos])
        return got


def _inside(
    ev: pd.DataFrame, names: _HostNames, rx: re.Pattern[str], t: I64, tid: int | None = None
) -> npt.NDArray[np.bool_]:
    """Per time in ``t``: inside a host range whose name matches ``rx`` (on thread ``tid`` only,
    when given)?"""
    rows = names.rows(rx)
    if tid is not None and rows.size:
        rows = rows[ev["tid"].to_numpy()[rows] == tid]
    if rows.size == 0 or t.size == 0:
        return np.zeros(t.size, dtype=bool)
    s, e = iv.union(ev["start_ns"].to_numpy()[rows], ev["end_ns"].to_numpy()[rows])
    k = np.searchsorted(s, t, side="right") - 1
    return (k >= 0) & (t < e[np.maximum(k, 0)])


def _last_calls(
    ev: pd.DataFrame, names: _HostNames, t: I64, fam: npt.NDArray[Any]
) -> tuple[npt.NDArray[np.object_], I64]:
    """CPU units: per time, the name and the row of the last ``c10d::*`` call starting at or
    before it, of the instance's family when one is (several threads may issue calls: the call
    of another family is another thread's); ("", -1) when none."""
    out = np.full(t.size, "", dtype=object)
    row = np.full(t.size, -1, dtype=np.int64)
    idx = names.rows(_COMM_CALL)
    if idx.size == 0 or t.size == 0:
        return out, row
    st = ev["start_ns"].to_numpy()[idx]
    order = np.argsort(st, kind="stable")
    idx, st = idx[order], st[order]
    names_col = values_at(ev["name"], idx)
    call_fam = np.array([family_of(str(n).removeprefix("c10d::")) for n in names_col], dtype=object)
    k = np.searchsorted(st, t, side="right") - 1
    for f in np.unique(fam).tolist():
        mine = fam == f
        same = np.flatnonzero(call_fam == f)
        if same.size:  # the last call of the same family, else any last call
            kk = np.searchsorted(st[same], t[mine], side="right") - 1
            pick = np.where(kk >= 0, same[np.maximum(kk, 0)], k[mine])
        else:
            pick = k[mine]
        got = np.full(pick.size, -1, dtype=np.int64)
        got[pick >= 0] = idx[pick[pick >= 0]]
        row[mine] = got
        out[np.flatnonzero(mine)[pick >= 0]] = [str(names_col[j]) for j in pick[pick >= 0]]
    return out, row


def _main_thread(ev: pd.DataFrame, host: npt.NDArray[np.bool_]) -> int | None:
    """The training main thread of a CPU unit: the host thread with the most ``cpu_op`` s outside
    gloo's workers (as :func:`~traceoverlap.rank.hostranges.host_ranges` reads it)."""
    ops = host & in_categories(ev["category"], ("cpu_op",))
    if "thread_name" in ev.columns:
        ops &= ~in_categories(ev["thread_name"], ("pt_gloo_runloop",))
    if not ops.any():
        return None
    t_ids, counts = np.unique(ev["tid"].to_numpy()[ops], return_counts=True)
    return int(t_ids[np.argmax(counts)])


def _texts(values: npt.ArrayLike) -> npt.NDArray[np.object_]:
    """A text column as an object array of ``str`` (``Series.astype(str).to_numpy()``)."""
    out: npt.NDArray[np.object_] = np.asarray(values).astype(str).astype(object)
    return out


def unit_purposes(
    unit: Timeline,
    kind: npt.NDArray[np.int8],
    steps: UnitSteps,
    inst: Mapping[str, npt.NDArray[Any]],
) -> tuple[npt.NDArray[np.object_], UnitStrategy]:
    """The purpose of every local instance of a unit (``inst``: its instance table's columns as
    arrays, an empty mapping when it has none, with ``family``, ``label``, ``kernel``,
    ``lane``, ``start_ns``, ``end_ns``, ``window``) and the unit's strategy."""
    cols = dict(inst)
    n = len(cols["start_ns"]) if cols else 0
    ev = unit.events
    host = in_categories(ev["category"], _HOST_CATEGORIES) & (
        ev["end_ns"].to_numpy() > ev["start_ns"].to_numpy()
    )
    names = _HostNames(ev["name"], host)
    has_ddp = bool(names.test(lambda s: "DistributedDataParallel" in s).any())
    has_bwd = names.any(PATTERNS[Phase.BACKWARD])
    # a Kineto trace is the PyTorch profiler's; an Nsight Systems one shows PyTorch only by its
    # names (an MPI / CUDA program shows none)
    torch = unit.traces[0].pytorch_capture or names.any(_PYTORCH)
    if n == 0:
        return np.zeros(0, dtype=object), UnitStrategy(
            has_ddp, has_ddp, has_bwd, not steps.gpu, torch
        )
    t = _query_times(ev, kind, cols, steps)
    fam = _texts(cols["family"])
    flag = {k: _inside(ev, names, rx, t) for k, rx in PATTERNS.items()}
    side = np.zeros(n, dtype=bool)
    if not steps.gpu:
        last, call_row = _last_calls(ev, names, t, fam)
        flag["reduce_scatter_base"] |= np.array(
            [bool(PATTERNS["reduce_scatter_base"].search(s)) for s in last], dtype=bool
        )
        main = _main_thread(ev, host)
        tids = np.where(call_row >= 0, ev["tid"].to_numpy()[np.maximum(call_row, 0)], -1)
        side = (call_row >= 0) & (main is not None) & (tids != (main if main is not None else -1))
        # a side thread's instance: its own thread's ranges only (the main thread's phase
        # around it says nothing about it)
        for tid in np.unique(tids[side]).tolist():
            mine = side & (tids == tid)
            for k, rx in PATTERNS.items():
                if k != "reduce_scatter_base":
                    flag[k][mine] = _inside(ev, names, rx, t[mine], int(tid))
    else:
        call_row = np.full(n, -1, dtype=np.int64)
    flag["side"] = side
    # diagnosis.md §13: an all-to-all of a unit whose code path shows experts (an `expert` / MoE
    # range anywhere on it, around the all-to-all or beside it in its step: `dispatch` -> `expert`
    # -> `combine`) is MoE's, though its own ranges name no expert
    if (fam == Family.ALL_TO_ALL).any() and names.any(PATTERNS["moe"]):
        flag["moe"] = flag["moe"] | (fam == Family.ALL_TO_ALL)
    in_bwd_ar = (fam == Family.ALL_REDUCE) & flag[Phase.BACKWARD] & ~side
    win = np.asarray(cols["window"])
    per_win = (
        np.bincount(win[in_bwd_ar & (win >= 0)], minlength=1) if in_bwd_ar.any() else np.zeros(1)
    )
    bucketed = has_ddp or bool((per_win >= 2).any())
    out = _purposes(fam, (_texts(cols["label"]), _texts(cols["kernel"])), flag, has_ddp, has_bwd)
    ag = out == Purpose.FSDP_ALLGATHER
    prefetch = None
    if ag.any():
        i_start = np.asarray(cols["start_ns"], dtype=np.int64)
        i_end = np.asarray(cols["end_ns"], dtype=np.int64)
        under = _under_compute(ev, kind, i_start, i_end, steps, call_row)[ag]
        prefetch = bool(int(under.sum()) >= PREFETCH_SHARE * under.size)
    side_fam = tuple(sorted(set(fam[side & (out == Purpose.UNKNOWN)].tolist())))
    return out, UnitStrategy(has_ddp, bucketed, has_bwd, not steps.gpu, torch, prefetch, side_fam)


def _under_compute(
    ev: pd.DataFrame,
    kind: npt.NDArray[np.int8],
    i_start: I64,
    i_end: I64,
    steps: UnitSteps,
    call_row: I64,
) -> npt.NDArray[np.bool_]:
    """Per instance: was it issued while compute still ran (diagnosis.md §13, prefetch)? GPU:
    a compute activity was running when it started (the previous layer's kernels). CPU: its
    thread went on computing after the call returned and before the instance ended (an
    asynchronous launch with work under it), rather than blocking until it was done."""
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    if steps.gpu:
        rows = np.flatnonzero(kind == Kind.COMPUTE)
        if rows.size == 0:
            return np.zeros(i_start.size, dtype=bool)
        s, e = iv.union(start[rows], end[rows])
        k = np.searchsorted(s, i_start, side="right") - 1
        return np.asarray((k >= 0) & (i_start < e[np.maximum(k, 0)]), dtype=bool)
    out = np.zeros(i_start.size, dtype=bool)
    ok = call_row >= 0
    if not ok.any():
        return out
    tid = ev["tid"].to_numpy()
    op_rows = np.flatnonzero(in_categories(ev["category"], ("cpu_op",)))
    op_names = values_at(ev["name"], op_rows).astype(str)
    op_rows = op_rows[~np.array([bool(_COMM_CALL.search(n)) for n in op_names], dtype=bool)]
    for t in np.unique(tid[call_row[ok]]).tolist():
        mine = np.flatnonzero(ok & (tid[np.maximum(call_row, 0)] == t))
        st = np.sort(start[op_rows[tid[op_rows] == t]])
        lo = np.searchsorted(st, end[call_row[mine]], side="left")
        margin = (i_end[mine] - i_start[mine]) // PREFETCH_MARGIN
        hi = np.searchsorted(st, i_end[mine] - margin, side="left")
        out[mine] = hi > lo
    return out


#: Fewest instances for which :func:`_purposes` asks per distinct signature, not per row.
_PER_ROW_BELOW = 1024


def _purposes(
    fam: npt.NDArray[np.object_],
    texts: tuple[npt.NDArray[np.object_], npt.NDArray[np.object_]],
    flag: dict[str, npt.NDArray[np.bool_]],
    ddp: bool,
    bwd: bool,
) -> npt.NDArray[np.object_]:
    """:func:`_purpose` of every instance (``texts``: its label and kernel), asked once per
    distinct (family, label, kernel, flags): what it reads of an instance, so its answer."""
    label, kernel = texts
    if fam.size < _PER_ROW_BELOW:  # a few rows: the codes cost more than the rules
        return np.array(
            [
                _purpose(i, fam[i], f"{label[i]} {kernel[i]}", flag, ddp, bwd)
                for i in range(fam.size)
            ],
            dtype=object,
        )
    bits = np.zeros(fam.size, dtype=np.int64)
    for j, k in enumerate(flag):  # fewer than 63 flags: one bit each
        bits |= flag[k].astype(np.int64) << j
    key = np.zeros(fam.size, dtype=np.int64)
    for c in (fam, label, kernel):  # one code per distinct row so far, then per next column
        code, distinct = pd.factorize(c)
        key = key * (len(distinct) + 1) + np.asarray(code, dtype=np.int64)
        key = np.asarray(pd.factorize(key)[0], dtype=np.int64)
    _, first, at = np.unique((key << len(flag)) | bits, return_index=True, return_inverse=True)
    per = [_purpose(i, fam[i], f"{label[i]} {kernel[i]}", flag, ddp, bwd) for i in first.tolist()]
    out: npt.NDArray[np.object_] = np.array(per, dtype=object)[at.reshape(-1)]
    return out


def _purpose(
    i: int, fam: str, text: str, flag: dict[str, npt.NDArray[np.bool_]], ddp: bool, bwd: bool
) -> str:
    """The rules of the module docstring for instance ``i``, first match wins."""
    low = text.lower()
    if fam == Family.ALL_REDUCE and bool(flag["reduce_scatter_base"][i]):
        return Purpose.REDUCESCATTER_AS_ALLREDUCE
    if fam == Family.ALL_TO_ALL or "deep_ep" in low:
        return _alltoall_purpose(i, flag, low)
    if fam == Family.SEND_RECV:
        return Purpose.PIPELINE_P2P if bool(flag["pipeline"][i]) else Purpose.UNKNOWN
    if fam == Family.ALL_GATHER_REDUCE_SCATTER:
        return _fsdp_purpose(i, flag, low)
    if fam == Family.ALL_REDUCE:
        return _allreduce_purpose(i, flag, ddp, bwd)
    if "broadcast" in low and ddp:
        return Purpose.DDP_BROADCAST
    if bool(flag[Phase.OPTIMIZER][i]):
        return Purpose.OPTIMIZER_COLLECTIVE
    return Purpose.UNKNOWN


def _alltoall_purpose(i: int, flag: dict[str, npt.NDArray[np.bool_]], low: str) -> str:
    if bool(flag["torchrec"][i]):
        return Purpose.EMBEDDING_ALLTOALL
    if bool(flag["sequence_parallel"][i]):
        return Purpose.SEQUENCE_PARALLEL_ALLTOALL
    moe = bool(flag["moe"][i]) or "deep_ep" in low or "moe" in low
    if "dispatch" in low or (moe and bool(flag["moe_dispatch"][i])):
        return Purpose.MOE_DISPATCH
    if "combine" in low or (moe and bool(flag["moe_combine"][i])):
        return Purpose.MOE_COMBINE
    return Purpose.MOE_ALLTOALL if moe else Purpose.UNKNOWN


def _fsdp_purpose(i: int, flag: dict[str, npt.NDArray[np.bool_]], low: str) -> str:
    """FSDP's only with FSDP evidence around the launch (or in the name); else the optimizer's
    when launched inside it (a Distributed Shampoo / ZeRO-1 style parameter gather), else
    unknown: ``_allgather_base`` is what any code calls (diagnosis.md §13)."""
    if not (bool(flag["fsdp"][i]) or "fsdp" in low):
        return Purpose.OPTIMIZER_COLLECTIVE if bool(flag[Phase.OPTIMIZER][i]) else Purpose.UNKNOWN
    gather = "gather" in low.replace("reducescatter", "").replace("reduce_scatter", "")
    return Purpose.FSDP_ALLGATHER if gather else Purpose.FSDP_REDUCESCATTER


def _allreduce_purpose(i: int, flag: dict[str, npt.NDArray[np.bool_]], ddp: bool, bwd: bool) -> str:
    if bool(flag["side"][i]):
        # a side thread: a gradient sync only when its own ranges say so
        if bool(flag["ddp"][i]):
            return Purpose.DDP_GRADIENT_ALLREDUCE
        if bool(flag[Phase.OPTIMIZER][i]):
            return Purpose.OPTIMIZER_COLLECTIVE
        return Purpose.GRADIENT_ALLREDUCE if bool(flag[Phase.BACKWARD][i]) else Purpose.UNKNOWN
    if bool(flag["tensor_parallel"][i]) or (bool(flag[Phase.FORWARD][i]) and not bwd):
        return Purpose.TP_ALLREDUCE
    if bool(flag["ddp"][i]) or (ddp and bool(flag[Phase.BACKWARD][i])):
        return Purpose.DDP_GRADIENT_ALLREDUCE
    if bool(flag[Phase.OPTIMIZER][i]):
        return Purpose.OPTIMIZER_COLLECTIVE
    if bwd and not bool(flag[Phase.FORWARD][i]):
        return Purpose.GRADIENT_ALLREDUCE
    return Purpose.UNKNOWN
