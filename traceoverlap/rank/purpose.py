"""What a collective is for (docs/diagnosis.md §10): the rules that give a purpose (the words:
:data:`traceoverlap.core.vocab.PURPOSES`) to each collective instance of a unit.

The purpose comes from where the instance was launched: the host ranges around its launch (GPU:
its launch call's start; CPU units: its start, and the last ``c10d::*`` call before it, which is
the op that queued it), read as the phase (forward / backward / optimizer), the launching op
(DDP's reducer, FSDP's all-gather, TorchRec's embedding all-to-all, MoE dispatch / combine, a
tensor-parallel all-reduce of an inference forward, pipeline send / recv, gloo's reduce-scatter
run as an all-reduce) and the strategy the unit shows (DDP, bucketed all-reduces during backward).
A purpose no rule gives is ``unknown``: said, never guessed.

Everything is computed per unit with one interval union per pattern and binary searches; names
are matched once per distinct name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core import intervals as iv
from ..core.model import Kind, Timeline, in_categories, values_at
from ..core.vocab import Family, Phase, Purpose
from .steps import NO_LAUNCH, UnitSteps

I64 = npt.NDArray[np.int64]

#: Host-range patterns, by what they tell (matched on the names of ranges around the launch).
PATTERNS: dict[str, re.Pattern[str]] = {
    Phase.FORWARD: re.compile(r"(?i)## forward ##|\.forward$|^forward$|_forward\b"),
    Phase.BACKWARD: re.compile(
        r"(?i)## backward ##|^backward$|autograd::engine::evaluate_function"
    ),
    Phase.OPTIMIZER: re.compile(r"(?i)^Optimizer\.|## optimizer ##|^optimizer|optimizer_step"),
    "ddp": re.compile(r"DistributedDataParallel|Reducer|reducer|allreduce_hook|comm_hook"),
    "fsdp": re.compile(r"(?i)FSDP|FullyShard|fully_shard|zero_?[123]|deepspeed"),
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
_HOST_CATEGORIES = ("cpu_op", "annotation", "python_function", "user_annotation")


@dataclass(frozen=True)
class UnitStrategy:
    """What the unit's trace shows it already does: ``ddp`` (DDP ranges), ``bucketed`` (DDP, or
    two or more all-reduces launched inside backward in one step), ``backward`` (it trains),
    ``cpu`` (a CPU unit)."""

    ddp: bool
    bucketed: bool
    backward: bool
    cpu: bool


def _query_times(
    ev: pd.DataFrame, kind: npt.NDArray[np.int8], inst: pd.DataFrame, steps: UnitSteps
) -> I64:
    """Per instance: when it was launched (GPU: the launch call's start of the comm activity
    that starts it; CPU, or no launch: its start), ns."""
    t: I64 = np.asarray(inst["start_ns"].to_numpy(), dtype=np.int64)
    if not steps.gpu or inst.empty:
        return t
    rows = np.flatnonzero(kind == Kind.COMM)
    # per instance, the first comm activity at its (lane, start), and that activity's launch
    j = first_match(
        (inst["lane"].astype(str).to_numpy(dtype=object), t),
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


class _HostNames:
    """The names of a unit's host rows, for many name tests: the distinct names the rows use are
    found once (:func:`~traceoverlap.core.model.per_category` per test would find them again each
    time), and each test runs once per distinct name. The host rows are grouped by name once,
    so that the rows of the names a test passes are gathered directly: a dozen tests each
    masking every row of the unit cost more than the rest of the purposes together."""

    def __init__(self, col: pd.Series, host: npt.NDArray[np.bool_]) -> None:
        cats = col.cat.categories
        rows = np.flatnonzero(host)
        code = col.cat.codes.to_numpy()[rows]  # -1: a missing name
        counts = np.bincount(code.astype(np.int64) + 1, minlength=len(cats) + 1)
        self.used = np.flatnonzero(counts[1:] > 0)
        self.names = [str(c) for c in cats.to_numpy(dtype=object)[self.used]]
        self.size = len(cats)
        # the host rows by name code (ascending rows within a name; a stable sort of the small
        # integer codes is a radix sort); name code c spans [first[c + 1], first[c + 2]) of it
        self._by_name = rows[np.argsort(code, kind="stable")]
        self._first = np.concatenate(([0], np.cumsum(counts)))

    def test(self, fn: Callable[[str], bool]) -> npt.NDArray[np.bool_]:
        """``fn(name)`` per category code, as :func:`~traceoverlap.core.model.per_category` gives it
        (False for the names the host rows do not use and, last, for a missing name)."""
        out = np.zeros(self.size + 1, dtype=bool)
        if self.used.size:
            out[self.used] = np.array([fn(n) for n in self.names], dtype=bool)
        return out

    def rows(self, fn: Callable[[str], bool]) -> I64:
        """The host rows whose name passes ``fn``, ascending."""
        hit = np.flatnonzero(self.test(fn)[: self.size])
        pos = iv.range_pairs(self._first[hit + 1], self._first[hit + 2])[1]
        return np.sort(self._by_name[pos])


def _inside(
    ev: pd.DataFrame, names: _HostNames, rx: re.Pattern[str], t: I64
) -> npt.NDArray[np.bool_]:
    """Per time in ``t``: inside a host range whose name matches ``rx``?"""
    rows = names.rows(lambda s: bool(rx.search(s)))
    if rows.size == 0 or t.size == 0:
        return np.zeros(t.size, dtype=bool)
    s, e = iv.union(ev["start_ns"].to_numpy()[rows], ev["end_ns"].to_numpy()[rows])
    k = np.searchsorted(s, t, side="right") - 1
    return (k >= 0) & (t < e[np.maximum(k, 0)])


def _last_call_names(ev: pd.DataFrame, names: _HostNames, t: I64) -> npt.NDArray[np.object_]:
    """CPU units: per time, the name of the last ``c10d::*`` call starting at or before it."""
    out = np.full(t.size, "", dtype=object)
    idx = names.rows(lambda s: bool(_COMM_CALL.search(s)))
    if idx.size == 0 or t.size == 0:
        return out
    st = ev["start_ns"].to_numpy()[idx]
    order = np.argsort(st, kind="stable")
    idx, st = idx[order], st[order]
    k = np.searchsorted(st, t, side="right") - 1
    ok = k >= 0
    names_col = values_at(ev["name"], idx)
    out[ok] = [str(names_col[j]) for j in k[ok].tolist()]
    return out


def unit_purposes(
    unit: Timeline, kind: npt.NDArray[np.int8], steps: UnitSteps, inst: pd.DataFrame
) -> tuple[npt.NDArray[np.object_], UnitStrategy]:
    """The purpose of every local instance of a unit (``inst``: its instance table, with
    ``family``, ``label``, ``kernel``, ``lane``, ``start_ns``, ``window``) and the unit's
    strategy."""
    ev = unit.events
    host = in_categories(ev["category"], _HOST_CATEGORIES) & (
        ev["end_ns"].to_numpy() > ev["start_ns"].to_numpy()
    )
    names = _HostNames(ev["name"], host)
    has_ddp = bool(names.test(lambda s: "DistributedDataParallel" in s).any())
    has_bwd = bool(names.test(lambda s: bool(PATTERNS[Phase.BACKWARD].search(s))).any())
    if inst.empty:
        return np.zeros(0, dtype=object), UnitStrategy(has_ddp, has_ddp, has_bwd, not steps.gpu)
    t = _query_times(ev, kind, inst, steps)
    flag = {k: _inside(ev, names, rx, t) for k, rx in PATTERNS.items()}
    if not steps.gpu:
        last = _last_call_names(ev, names, t)
        flag["reduce_scatter_base"] |= np.array(
            [bool(PATTERNS["reduce_scatter_base"].search(s)) for s in last], dtype=bool
        )
    fam = inst["family"].astype(str).to_numpy()
    text = (inst["label"].astype(str) + " " + inst["kernel"].astype(str)).to_numpy()
    in_bwd_ar = (fam == Family.ALL_REDUCE) & flag[Phase.BACKWARD]
    win = inst["window"].to_numpy()
    per_win = (
        np.bincount(win[in_bwd_ar & (win >= 0)], minlength=1) if in_bwd_ar.any() else np.zeros(1)
    )
    bucketed = has_ddp or bool((per_win >= 2).any())
    out = np.array(
        [_purpose(i, fam[i], text[i], flag, has_ddp, has_bwd) for i in range(len(inst))],
        dtype=object,
    )
    return out, UnitStrategy(has_ddp, bucketed, has_bwd, not steps.gpu)


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
    fsdp = bool(flag["fsdp"][i]) or "all_gather_base" in low or "allgather_into_tensor" in low
    if not fsdp and not ("reduce_scatter_base" in low or "reducescatter_tensor" in low):
        return Purpose.UNKNOWN
    gather = "gather" in low.replace("reducescatter", "").replace("reduce_scatter", "")
    return Purpose.FSDP_ALLGATHER if gather else Purpose.FSDP_REDUCESCATTER


def _allreduce_purpose(i: int, flag: dict[str, npt.NDArray[np.bool_]], ddp: bool, bwd: bool) -> str:
    if bool(flag["tensor_parallel"][i]) or (bool(flag[Phase.FORWARD][i]) and not bwd):
        return Purpose.TP_ALLREDUCE
    if bool(flag["ddp"][i]) or (ddp and bool(flag[Phase.BACKWARD][i])):
        return Purpose.DDP_GRADIENT_ALLREDUCE
    if bool(flag[Phase.OPTIMIZER][i]):
        return Purpose.OPTIMIZER_COLLECTIVE
    if bwd and not bool(flag[Phase.FORWARD][i]):
        return Purpose.GRADIENT_ALLREDUCE
    return Purpose.UNKNOWN
