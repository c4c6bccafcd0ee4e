"""What to try (docs/diagnosis.md §4, §9-10): the findings of a run, across ranks.

:func:`findings` chooses advice by cause and collective family (and purpose, bandwidth evidence,
strategy), naming the collectives and the numbers behind it (``same_stream`` first: the classic
bug). The causes themselves come from :mod:`traceoverlap.rank.causes` (per unit) and
:mod:`traceoverlap.run.matching` (waiting, across units); the verdicts from
:mod:`traceoverlap.run.verdicts`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core.fmt import ms_unit as _ms
from ..core.fmt import pct as _pct
from ..core.schema import (
    COMM_NS,
    COMPUTE_NS,
    COMPUTE_ONLY_NS,
    EXPOSED_COMM_NS,
    EXPOSED_HOST_NS,
    EXPOSED_NS,
    EXPOSED_TRANSFER_NS,
    EXPOSED_WAIT_NS,
    IDLE_NS,
    MEMORY_ONLY_NS,
    OVERLAP_NS,
    STEP_NS,
    WAITED_FOR_RANK,
)
from ..core.vocab import (
    PURPOSES,
    Bottleneck,
    Cause,
    Family,
    FindingKind,
    Purpose,
)
from .bandwidth import FamilyBandwidth
from .job import blame_line

I64 = npt.NDArray[np.int64]


# --- findings: what to try, by cause and collective family -------------------------------------

#: What to try per (cause or ``transfer-bound``, collective family from :func:`family_of`).
_ADVICE: dict[tuple[str, str], str] = {
    (Cause.TAIL, Family.ALL_REDUCE): (
        "the last gradient all-reduce runs after backward with nothing left to compute: make the "
        "final bucket small (DDP bucket_cap_mb, or a smaller first bucket), order parameters so "
        "their gradients are ready in bucket order, and overlap the optimizer step with the "
        "remaining all-reduces"
    ),
    (Cause.TAIL, Family.ALL_GATHER_REDUCE_SCATTER): (
        "the last reduce-scatter / all-gather of the step has no compute after it: with FSDP/ZeRO "
        "prefetch the next unit's all-gather earlier (backward_prefetch=BACKWARD_PRE, "
        "forward_prefetch=True) and keep the last layer's gradients reduce-scattered under the "
        "optimizer"
    ),
    (Cause.TAIL, Family.SEND_RECV): (
        "pipeline bubble at the end of the step: nothing computes while activations/gradients "
        "move between stages; use more micro-batches or an interleaved (virtual-stage) schedule "
        "to shrink the drain"
    ),
    (Cause.TAIL, Family.ALL_TO_ALL): (
        "the final expert-parallel combine has no compute after it: overlap dispatch/combine with "
        "computation of another micro-batch (two-batch overlap) or with shared-expert compute"
    ),
    (Cause.DEPENDENCY, Family.ALL_REDUCE): (
        "compute was launched but waited for an all-reduce result (a synchronous all-reduce before "
        "the optimizer, or a stream wait on it): launch the all-reduces during backward (bucketed "
        "/ DDP), use gradient_as_bucket_view=True, and only wait where the result is needed"
    ),
    (Cause.DEPENDENCY, Family.ALL_GATHER_REDUCE_SCATTER): (
        "compute waited for the parameters being all-gathered (FSDP/ZeRO without prefetch): "
        "enable forward/backward prefetch, consider reshard_after_forward=False for the layers "
        "used again soon, or a larger FSDP unit"
    ),
    (Cause.DEPENDENCY, Family.SEND_RECV): (
        "a pipeline stage waited for its input from the previous stage: rebalance the stages, "
        "use a 1F1B or interleaved schedule and more micro-batches so each stage has other work "
        "while it waits"
    ),
    (Cause.DEPENDENCY, Family.ALL_TO_ALL): (
        "experts waited for the token dispatch: overlap dispatch/combine with computation (DeepEP "
        "hook-based overlap, two-batch overlap) and check the capacity factor / load balance"
    ),
    (Cause.HOST, "*"): (
        "the host had not launched the next compute yet while communication ran: remove Python "
        "overhead and host syncs from the step (.item(), .cpu(), printing tensors), use CUDA "
        "graphs or torch.compile for launch-bound stretches, and more DataLoader workers / "
        "pin_memory for the input pipeline"
    ),
    (Cause.WAIT, "*"): (
        "ranks sat inside collectives waiting for a late peer: find why that rank is slow (its "
        "own step time, data loading, a slower or throttled GPU, uneven work per rank) and "
        "balance the load; faster communication would not help"
    ),
    (FindingKind.TRANSFER_BOUND, Family.ALL_REDUCE): (
        "there is more all-reduce than compute, so no schedule can hide it: move fewer bytes "
        "(bf16/fp16 or PowerSGD communication hooks), all-reduce less often (gradient "
        "accumulation with no_sync()), a larger per-GPU batch, or a faster interconnect"
    ),
    (FindingKind.TRANSFER_BOUND, Family.ALL_GATHER_REDUCE_SCATTER): (
        "FSDP/ZeRO traffic exceeds compute: shard over fewer ranks (hybrid sharding within a "
        "node), keep parameters gathered longer (reshard_after_forward=False), lower-precision "
        "all-gather, or a larger batch per step"
    ),
    (FindingKind.TRANSFER_BOUND, Family.SEND_RECV): (
        "pipeline transfers exceed compute: fewer, larger micro-batches or fewer pipeline stages "
        "(more work per stage), or compress activations sent between stages"
    ),
    (FindingKind.TRANSFER_BOUND, Family.ALL_TO_ALL): (
        "expert-parallel all-to-all exceeds compute: lower the capacity factor, use fewer "
        "expert-parallel ranks per all-to-all (hierarchical / node-local dispatch), or "
        "low-precision dispatch"
    ),
    (FindingKind.TRANSFER_BOUND, Family.OTHER): (
        "communication exceeds compute: move fewer bytes or move them faster"
    ),
}


#: Advice by (cause, purpose) (diagnosis.md §10): what to try given what the collective is for;
#: it wins over the family's advice. ``transfer-bound`` entries here never ask to move fewer bytes:
#: that needs bandwidth evidence (see :func:`advice`).
_PURPOSE_ADVICE: dict[tuple[str, str], str] = {
    (Cause.TAIL, Purpose.DDP_GRADIENT_ALLREDUCE): (
        "DDP's last bucket is reduced after backward with nothing left to compute: make that "
        "bucket small (bucket_cap_mb; the last bucket holds the first layers' gradients) and run "
        "the optimizer per bucket as buckets finish (a DDP comm hook, or "
        "ZeroRedundancyOptimizer(overlap_with_ddp=True))"
    ),
    (Cause.DEPENDENCY, Purpose.DDP_GRADIENT_ALLREDUCE): (
        "the step waited for DDP's last buckets (the reducer's finalize waits for every bucket "
        "before the optimizer): a smaller last bucket (bucket_cap_mb), gradient_as_bucket_view="
        "True (no copy back after the wait), and the optimizer run per bucket as buckets finish"
    ),
    (FindingKind.TRANSFER_BOUND, Purpose.DDP_GRADIENT_ALLREDUCE): (
        "DDP already overlaps its buckets with backward and there is still more all-reduce than "
        "compute: all-reduce less often (gradient accumulation with no_sync()) or give each rank "
        "more work per step (a larger per-rank batch)"
    ),
    (Cause.TAIL, Purpose.GRADIENT_ALLREDUCE): (
        "the gradient all-reduces run after backward with nothing left to compute: launch them "
        "from gradient hooks during backward, a bucket at a time (or wrap the model in DDP), so "
        "they overlap the rest of backward"
    ),
    (Cause.DEPENDENCY, Purpose.GRADIENT_ALLREDUCE): (
        "compute waited for a synchronous gradient all-reduce: launch the all-reduces "
        "asynchronously from gradient hooks during backward, in buckets (or use DDP), and wait "
        "for them only before the optimizer"
    ),
    (FindingKind.TRANSFER_BOUND, Purpose.GRADIENT_ALLREDUCE): (
        "there is more gradient all-reduce than compute: all-reduce less often (gradient "
        "accumulation) or give each rank more work per step (a larger per-rank batch)"
    ),
    (Cause.TAIL, Purpose.EMBEDDING_ALLTOALL): (
        "the embedding all-to-all (TorchRec input / output dist) ends the step with nothing "
        "left to compute: pipeline it with the next batch's dense compute "
        "(TrainPipelineSparseDist) so the sparse data distribution runs a batch ahead"
    ),
    (Cause.DEPENDENCY, Purpose.EMBEDDING_ALLTOALL): (
        "the dense part waited for the embedding all-to-all (TorchRec input / output dist): "
        "pipeline the sparse data distribution a batch ahead (TrainPipelineSparseDist), and "
        "check that the sharding plan balances lookups across ranks (an uneven plan makes "
        "every rank wait for the busiest)"
    ),
    (FindingKind.TRANSFER_BOUND, Purpose.EMBEDDING_ALLTOALL): (
        "the embedding all-to-all takes longer than the compute: pipeline it a batch ahead "
        "(TrainPipelineSparseDist) and rebalance the sharding plan (table-wise / row-wise / "
        "column-wise) so no rank's lookups dominate"
    ),
    (Cause.TAIL, Purpose.SEQUENCE_PARALLEL_ALLTOALL): (
        "the attention all-to-all (sequence parallel, Ulysses) has nothing to compute under it: "
        "overlap it with another head group or micro-batch, or use a smaller sequence-parallel "
        "degree"
    ),
    (Cause.DEPENDENCY, Purpose.SEQUENCE_PARALLEL_ALLTOALL): (
        "attention waited for the sequence-parallel all-to-all (Ulysses): overlap the "
        "all-to-all of one head group with the attention of another, or use ring attention / a "
        "smaller sequence-parallel degree"
    ),
    (FindingKind.TRANSFER_BOUND, Purpose.SEQUENCE_PARALLEL_ALLTOALL): (
        "the sequence-parallel all-to-all takes longer than the attention it feeds: a smaller "
        "sequence-parallel degree (more of the sequence per rank), or ring attention, which "
        "overlaps its transfers with the attention blocks"
    ),
    (Cause.TAIL, Purpose.TP_ALLREDUCE): (
        "the tensor-parallel all-reduce ends the forward with nothing to compute under it: fuse "
        "it with what follows (all-reduce + norm fusion), or a smaller tensor-parallel degree"
    ),
    (Cause.DEPENDENCY, Purpose.TP_ALLREDUCE): (
        "each layer waits for its tensor-parallel all-reduce (it sits between the layer's "
        "matmuls): overlap it with the GEMMs (async / sequence-parallel TP: reduce-scatter + "
        "all-gather), fuse it with the next op, use a one-shot / custom all-reduce for small "
        "messages, or a smaller tensor-parallel degree"
    ),
    (FindingKind.TRANSFER_BOUND, Purpose.TP_ALLREDUCE): (
        "the tensor-parallel all-reduces take longer than the layers' compute: a smaller "
        "tensor-parallel degree (or TP only within a node), larger batches per forward so each "
        "all-reduce carries more work"
    ),
    (Cause.TAIL, Purpose.REDUCESCATTER_AS_ALLREDUCE): (
        "gloo has no reduce-scatter: c10d::_reduce_scatter_base_ runs a full all-reduce and "
        "keeps a shard, so every rank receives all the data; with nothing left to compute it "
        "ends the step: run the sharded strategy on a backend with a native reduce-scatter "
        "(NCCL on GPUs), or shard over fewer ranks"
    ),
    (Cause.DEPENDENCY, Purpose.REDUCESCATTER_AS_ALLREDUCE): (
        "compute waited for a reduce-scatter that gloo runs as a full all-reduce "
        "(c10d::_reduce_scatter_base_): launch it asynchronously and wait only where the shard "
        "is needed; on a backend with a native reduce-scatter it moves (n-1)/n of the data "
        "instead of 2(n-1)/n"
    ),
    (FindingKind.TRANSFER_BOUND, Purpose.REDUCESCATTER_AS_ALLREDUCE): (
        "the reduce-scatters (run by gloo as full all-reduces) take longer than the compute: a "
        "native reduce-scatter (NCCL) halves the traffic; or shard over fewer ranks"
    ),
    (Cause.TAIL, Purpose.DDP_BROADCAST): (
        "DDP broadcasts its buffers at every forward (broadcast_buffers=True): set "
        "broadcast_buffers=False when buffers (BatchNorm statistics) need not match every step"
    ),
    (Cause.DEPENDENCY, Purpose.DDP_BROADCAST): (
        "the forward waited for DDP's buffer broadcast (broadcast_buffers=True): set "
        "broadcast_buffers=False when buffers (BatchNorm statistics) need not match every step"
    ),
    (Cause.TAIL, Purpose.OPTIMIZER_COLLECTIVE): (
        "the optimizer's collective (a parameter or preconditioner gather, a global norm) ends "
        "the step with nothing left to compute: issue it asynchronously and overlap it with "
        "the next step's forward, or compute it less often"
    ),
    (FindingKind.TRANSFER_BOUND, Purpose.OPTIMIZER_COLLECTIVE): (
        "the optimizer's collectives take longer than the compute: run them less often (a "
        "preconditioner update every few steps), in lower precision, or over fewer ranks"
    ),
    (Cause.DEPENDENCY, Purpose.OPTIMIZER_COLLECTIVE): (
        "the optimizer step waited for a collective (a global norm for clipping, a ZeRO "
        "parameter gather): overlap it with the next forward (ZeRO overlap_comm) or compute it "
        "from values reduced during backward"
    ),
}

#: All-to-all advice when nothing says it is MoE (no experts, no capacity factor).
_ALLTOALL_ADVICE: dict[str, str] = {
    Cause.TAIL: (
        "the last all-to-all of the step has no compute after it: start it earlier or overlap "
        "it with independent work of the next micro-batch"
    ),
    Cause.DEPENDENCY: (
        "compute waited for an all-to-all result: launch it asynchronously as early as its "
        "input is ready and wait only where its output is needed; check that every rank sends "
        "about the same amount (an uneven exchange makes all ranks wait for the largest)"
    ),
}

#: Advice for a run that already launches its gradient all-reduces during backward, in buckets.
_BUCKETED_ADVICE: dict[tuple[str, str], str] = {
    (Cause.TAIL, Purpose.GRADIENT_ALLREDUCE): (
        "the all-reduces are already launched during backward; the last ones have nothing left "
        "to compute under them: make the last bucket smaller and run the optimizer for each "
        "bucket as it finishes"
    ),
    (Cause.DEPENDENCY, Purpose.GRADIENT_ALLREDUCE): (
        "compute waited for all-reduces that are already launched during backward: wait for "
        "each only where its result is needed (the optimizer step per bucket as buckets "
        "finish), and make the last bucket smaller"
    ),
}

#: CPU runs: what the host cause and idle mean there (no CUDA graphs, no pinned memory).
_CPU_ADVICE: dict[str, str] = {
    Cause.HOST: (
        "the main thread had not started the next op while the communication ran: Python "
        "overhead, host-side work or data loading between the ops; move that work out of the "
        "step (more DataLoader workers, fewer per-step Python calls)"
    ),
    Bottleneck.IDLE: (
        "the process neither computed nor communicated: data loading, Python overhead, sleeps or "
        "blocking calls between the ops (more DataLoader workers, move that work out of the step)"
    ),
}

#: Transfer-bound advice by bandwidth evidence (diagnosis.md §9).
_LATENCY_ADVICE = (
    "durations do not grow with bytes, so this is latency or waiting, not bandwidth: coalesce "
    "small collectives (larger buckets, fewer calls), and look for missing ranks or late peers "
    "the trace does not show"
)
_NO_BW_EVIDENCE = (
    "the message sizes in the trace do not show whether bandwidth or latency limits it: compare "
    "its bus bandwidth with what the interconnect reaches (nccl-tests) before moving fewer bytes"
)

#: Advice that only fits runs that do not already bucket their all-reduces during backward.
_BUCKETING_ADVICE = (
    "compute was launched but waited for an all-reduce result: only wait for each all-reduce "
    "where its result is needed, and use gradient_as_bucket_view=True with DDP"
)


#: Programs without PyTorch in the trace (an MPI / NCCL application, diagnosis.md §13): what each
#: cause means there, in the program's own terms (no DDP, FSDP, torch.compile or PyTorch APIs).
_NON_TORCH_ADVICE: dict[str, str] = {
    Cause.TAIL: (
        "the last collective of the step has nothing left to compute under it: start it "
        "earlier (a non-blocking collective issued as soon as its input is ready) or split it "
        "so the computation of the next phase runs under its parts"
    ),
    Cause.DEPENDENCY: (
        "compute waited for a collective's result: issue the collective as a non-blocking call "
        "as early as its input is ready (on its own stream on a GPU), and wait for it only "
        "where its result is needed"
    ),
    Cause.HOST: (
        "the host had not launched the next compute yet while communication ran: remove host "
        "work and synchronisation between the launches, and batch many small kernel launches "
        "(CUDA graphs)"
    ),
    FindingKind.TRANSFER_BOUND: (
        "more communication than compute, so no schedule can hide it: give each rank more work "
        "per communication (larger messages, fewer collectives)"
    ),
    Bottleneck.IDLE: (
        "nothing ran on the device: launch overhead (many tiny kernels: CUDA graphs), host "
        "synchronisation, slow input, or a late peer the trace cannot show"
    ),
}

#: FSDP advice for a run whose all-gathers already run under the previous layer's compute
#: (prefetch is on, read from the trace, diagnosis.md §13).
_PREFETCH_ON_ADVICE: dict[str, str] = {
    Cause.DEPENDENCY: (
        "compute waited for the all-gathered parameters although each all-gather already runs "
        "under the previous layer's compute (prefetch is on): the all-gather takes longer than "
        "a layer computes: larger FSDP units (more compute per all-gather), shard over fewer "
        "ranks (hybrid sharding within a node), or a lower-precision all-gather"
    ),
    Cause.TAIL: (
        "the last all-gather / reduce-scatter of the step has no compute after it, though "
        "prefetch is already on: keep the last layers unsharded after forward "
        "(reshard_after_forward=False) and reduce-scatter their gradients under the optimizer"
    ),
}


def _read_advice(
    cause: str,
    family: str,
    purpose: str | None,
    pytorch: bool,
    prefetch: bool,
    bandwidth: str | None,
    side: bool = False,
) -> str | None:
    """The advice that what the trace shows decides (diagnosis.md §13), None when it decides
    nothing: no PyTorch in the trace, FSDP prefetch already on, an all-gather / reduce-scatter
    without FSDP evidence or a side thread's collective of unknown purpose (``side``): what its
    cause means, without a strategy it may not use."""
    if not pytorch and cause in _NON_TORCH_ADVICE:
        plain = _NON_TORCH_ADVICE[cause]
        if cause == FindingKind.TRANSFER_BOUND and bandwidth != "bandwidth":
            plain += "; " + _NO_BW_EVIDENCE
        return plain
    fsdp = purpose in (Purpose.FSDP_ALLGATHER, Purpose.FSDP_REDUCESCATTER)
    if prefetch and fsdp and cause in _PREFETCH_ON_ADVICE:
        return _PREFETCH_ON_ADVICE[cause]
    if (
        purpose == Purpose.UNKNOWN
        and (family == Family.ALL_GATHER_REDUCE_SCATTER or side)
        and cause in _NON_TORCH_ADVICE
        and cause != FindingKind.TRANSFER_BOUND
    ):
        return _NON_TORCH_ADVICE[cause]
    return None


def advice(
    cause: str,
    family: str,
    purpose: str | None = None,
    *,
    cpu: bool = False,
    bucketed: bool = False,
    bandwidth: str | None = None,
    pytorch: bool = True,
    prefetch: bool = False,
    side: bool = False,
) -> str:
    """The advice text for a cause (or ``transfer-bound``) on a collective family, chosen by
    purpose first (§10), then family; CPU runs get CPU advice; a bucketed run is not told to
    bucket; ``transfer-bound`` advice asks to move fewer bytes only when ``bandwidth`` is
    ``"bandwidth"`` (§9) and says latency or waiting when it is ``"latency"``. A program
    without PyTorch (``pytorch`` false) gets no PyTorch advice; a run that already prefetches
    its FSDP all-gathers (``prefetch``) is not told to enable prefetch (§13)."""
    if cpu and cause in _CPU_ADVICE:
        return _CPU_ADVICE[cause]
    if cause == FindingKind.TRANSFER_BOUND and bandwidth == "latency":
        return _LATENCY_ADVICE
    read = _read_advice(cause, family, purpose, pytorch, prefetch, bandwidth, side)
    if read is not None:
        return read
    text = None
    if bucketed:
        text = _BUCKETED_ADVICE.get((cause, purpose or ""))
    text = text or _PURPOSE_ADVICE.get((cause, purpose or ""))
    if text is None and family == Family.ALL_TO_ALL and not (purpose or "").startswith("moe"):
        if cause != FindingKind.TRANSFER_BOUND:
            text = _ALLTOALL_ADVICE.get(cause)
        elif bandwidth == "bandwidth":
            text = (
                "the all-to-all is bandwidth-bound and exceeds compute: send fewer bytes per "
                "exchange (lower precision, fewer features per rank) or use a faster interconnect"
            )
    if text is None and bucketed and (cause, family) == (Cause.DEPENDENCY, Family.ALL_REDUCE):
        text = _BUCKETING_ADVICE
    if text is None:
        text = (
            _ADVICE.get((cause, family))
            or _ADVICE.get((cause, "*"))
            or _ADVICE.get((cause, Family.OTHER))
            or (
                "a better schedule could hide this communication: start it earlier, split it, "
                "or reorder it so compute runs under it"
            )
        )
        if cause == FindingKind.TRANSFER_BOUND and bandwidth != "bandwidth":
            text = _NO_BYTES_TRANSFER.get(family, _NO_BYTES_TRANSFER[Family.OTHER])
    if cause == FindingKind.TRANSFER_BOUND and bandwidth != "bandwidth":
        text += "; " + _NO_BW_EVIDENCE
    return text


#: A family's transfer-bound advice without what needs bandwidth evidence (§9).
_NO_BYTES_TRANSFER: dict[str, str] = {
    Family.ALL_REDUCE: (
        "there is more all-reduce than compute, so no schedule can hide it: all-reduce less "
        "often (gradient accumulation with no_sync()) or give each rank more work per step (a "
        "larger per-rank batch)"
    ),
    Family.ALL_GATHER_REDUCE_SCATTER: (
        "FSDP/ZeRO traffic exceeds compute: shard over fewer ranks (hybrid sharding within a "
        "node), keep parameters gathered longer (reshard_after_forward=False), or a larger batch "
        "per step"
    ),
    Family.SEND_RECV: (
        "pipeline transfers exceed compute: fewer, larger micro-batches or fewer pipeline stages "
        "(more work per stage)"
    ),
    Family.ALL_TO_ALL: (
        "the all-to-all exceeds compute: fewer ranks per all-to-all (node-local / hierarchical "
        "dispatch) or more compute per exchanged token"
    ),
    Family.OTHER: (
        "more communication than compute, so no schedule can hide it: give each rank more work "
        "per communication (a larger per-rank batch, fewer or larger collectives)"
    ),
}


@dataclass(frozen=True)
class Finding:
    """One thing to try, with the evidence that picked it.

    ``kind``: ``same_stream``, ``wait``, ``tail``, ``dependency``, ``host``, ``transfer-bound``,
    ``memory-bound`` or ``idle-bound``; ``family``: the collective family carrying the time (None
    for memory/idle); ``exposed_ns``: the exposed communication (or idle / memory time) behind
    it, summed over ranks and steps; ``share_ratio``: of all exposed communication (of all step
    time for idle/memory); ``collectives``: the collectives concerned, most exposed first
    (e.g. ``AllReduce #7 (rank 0 step 5)``); ``evidence``: the numbers a reader can check.
    """

    kind: str
    title: str
    advice: str
    family: str | None
    exposed_ns: int
    share_ratio: float | None
    collectives: tuple[str, ...] = ()
    evidence: Mapping[str, Any] = field(default_factory=dict)
    #: what the collectives behind it are for (:data:`traceoverlap.rank.purpose.PURPOSES`), None for
    #: findings that are not about communication
    purpose: str | None = None


@dataclass(frozen=True)
class AdviceContext:
    """What advice must know beyond the numbers: a CPU run (no CUDA advice), whether the run
    already buckets its all-reduces or prefetches its all-gathers, whether it is PyTorch at all
    (§13), and the bytes-vs-duration evidence per family (§9)."""

    cpu: bool = False
    bucketed: bool = False
    bandwidth: Mapping[str, FamilyBandwidth] = field(default_factory=dict)
    #: the trace shows PyTorch (diagnosis.md §13: no DDP / FSDP / torch.compile advice without it)
    pytorch: bool = True
    #: the FSDP all-gathers already run under the previous layer's compute (prefetch is on)
    prefetch: bool = False
    #: families whose collectives of unknown purpose come from a side thread (§13)
    side: frozenset[str] = frozenset()

    def verdict(self, family: str) -> str | None:
        bw = self.bandwidth.get(family)
        return None if bw is None else bw.verdict


def _names(df: pd.DataFrame, col: str = EXPOSED_NS.name, limit: int = 3) -> tuple[str, ...]:
    """The collectives behind a finding, most exposed first: ``AllReduce #7 (rank 0 step 5,
    2.10 ms)``."""
    values, start = df[col], df["start_ns"]
    if all(isinstance(c.dtype, np.dtype) and c.dtype.kind == "i" for c in (values, start)):
        # a stable lexsort of the rows with some, most first, then the earlier start: a loc and
        # sort_values of a frame cost more than the whole answer on a few hundred rows
        v = values.to_numpy()
        hit = np.flatnonzero(v > 0)
        order = hit[np.lexsort((start.to_numpy()[hit], -v[hit]))][:limit]
        display, where = df["display"].to_numpy(dtype=object), df["where"].to_numpy(dtype=object)
        return tuple(f"{display[i]} ({where[i]}, {_ms(v[i].item())})" for i in order.tolist())
    # only the four columns used, and no itertuples (a namedtuple type per call)
    cols = list(dict.fromkeys(("display", "where", col, "start_ns")))
    hit = df.loc[(df[col] > 0).to_numpy(), cols]
    top = hit.sort_values([col, "start_ns"], ascending=[False, True], kind="stable").head(limit)
    return tuple(
        f"{d} ({w}, {_ms(v)})"
        for d, w, v in zip(
            top["display"].tolist(), top["where"].tolist(), top[col].tolist(), strict=True
        )
    )


def findings(
    steps: pd.DataFrame,
    per_instance: pd.DataFrame,
    family_causes: pd.DataFrame,
    *,
    straggler: int | None = None,
    straggler_text: str | None = None,
    limit: int = 8,
    straggler_ns: int | None = None,
    partial: str | None = None,
    blame: pd.DataFrame | None = None,
    context: AdviceContext | None = None,
    straggler_note: str | None = None,
) -> tuple[Finding, ...]:
    """What to try, most important first (diagnosis.md §4).

    ``steps``: the step rows with their verdicts and exposed-cause columns. ``family_causes``:
    exposed ns per (window, collective family, cause), each ns counted once per family — the
    numbers of every finding come from here or from the step rows. ``per_instance``: one row
    per (collective, rank) with ``display``, ``where``, ``family``, ``start_ns``,
    ``exposed_*_ns`` and ``same_stream``, used only to NAME the collectives behind a finding.
    ``straggler``: the rank most waited for, ``straggler_text`` how the ``wait`` finding names it
    (``"1"``, or ``"1 (the latest among the 2 ranks given of 128)"``); ``straggler_note``: the
    run's straggler verdict in words (diagnosis.md §14: "no straggler: ...", "the late rank
    moves: ..."), said by the ``wait`` finding when no straggler is named.

    ``same_stream`` comes first whatever its size (the classic bug); the others follow by
    exposed ns, largest first (ties keep the order they are built in below).
    """
    ctx = context or AdviceContext()
    if len(per_instance) and "purpose" not in per_instance.columns:
        per_instance = per_instance.assign(purpose=Purpose.UNKNOWN)
    total_exposed = int(steps[EXPOSED_COMM_NS.name].sum()) if len(steps) else 0
    total_step = int(steps[STEP_NS.name].sum()) if len(steps) else 0
    bound = set(np.flatnonzero((steps["bottleneck"] == Bottleneck.COMMUNICATION).to_numpy()))
    first = _same_stream_finding(per_instance, family_causes, total_exposed)
    ranked = [
        *_wait_finding(
            steps,
            per_instance,
            total_exposed,
            straggler,
            straggler_text,
            straggler_ns,
            blame,
            None if straggler is not None else straggler_note,
        ),
        *_cause_findings(Cause.TAIL, family_causes, per_instance, bound, total_exposed, ctx),
        *_cause_findings(Cause.DEPENDENCY, family_causes, per_instance, bound, total_exposed, ctx),
        *_host_finding(steps, per_instance, total_exposed, ctx),
        *_transfer_bound_finding(
            steps, family_causes, per_instance, bound, total_exposed, ctx, partial
        ),
        *_class_findings(steps, total_step, ctx),
    ]
    ranked.sort(key=lambda f: -f.exposed_ns)
    return tuple((first + ranked)[:limit])


def _share(ns: int, of: int) -> float | None:
    """``ns / of`` as a ratio, None when ``of`` is 0."""
    return ns / of if of else None


def _same_stream_finding(pi: pd.DataFrame, fc: pd.DataFrame, total_exposed: int) -> list[Finding]:
    """The ``same_stream`` finding (0 or 1): collectives whose lane also ran compute in their
    step; its ns are the exposed ns of those collectives per family (``same_stream_ns`` of
    ``family_causes``), its share of all exposed communication."""
    if not (len(pi) and bool(pi["same_stream"].astype(bool).any())):
        return []
    same = pi[pi["same_stream"].astype(bool)]
    ns = int(fc["same_stream_ns"].sum()) if len(fc) else 0
    lanes = sorted(set(same["lane"].astype(str)))
    return [
        Finding(
            kind=FindingKind.SAME_STREAM,
            title=(
                f"communication runs on a compute stream ({', '.join(lanes[:3])}): "
                f"{len(same)} collective(s) cannot overlap compute by construction, "
                f"{_ms(ns)} exposed"
            ),
            advice=(
                "launch collectives on their own stream (PyTorch's NCCL process groups do so; "
                "a collective or custom communication kernel on the compute stream "
                "serialises with every kernel around it), and wait for it only where its "
                "result is needed"
            ),
            family=_top_family(same, EXPOSED_NS.name),
            exposed_ns=ns,
            share_ratio=_share(ns, total_exposed),
            collectives=_names(same) or _names(same.assign(one=1), "one"),
            evidence={
                "collectives": int(len(same)),
                "same_stream_exposed_ns": ns,
                "lanes": lanes,
            },
        )
    ]


def _wait_finding(
    steps: pd.DataFrame,
    pi: pd.DataFrame,
    total_exposed: int,
    straggler: int | None,
    straggler_text: str | None,
    straggler_ns: int | None = None,
    blame: pd.DataFrame | None = None,
    note: str | None = None,
) -> list[Finding]:
    """The ``wait`` finding (0 or 1): all exposed waiting ns of the steps (``exposed_wait_ns``),
    naming the rank most waited for and the part of it credited to that rank
    (``straggler_ns``, docs/job-model.md: never more than the whole); its share of all exposed
    communication."""
    wait = int(steps[EXPOSED_WAIT_NS.name].sum())
    if wait <= 0:
        return []
    if straggler is not None and straggler_ns is not None:
        title = (
            f"waiting for a late peer: {_ms(wait)} of exposed communication"
            f"{_share_text(wait, total_exposed)} was ranks sitting in collectives until the last "
            f"one arrived; {_ms(min(straggler_ns, wait))} of it traces back to rank "
            f"{straggler_text or straggler}"
        )
    else:
        who = f"rank {straggler_text or straggler}" if straggler is not None else "a late peer"
        title = (
            f"waiting for {who}: {_ms(wait)} of exposed communication"
            f"{_share_text(wait, total_exposed)} was other ranks sitting in collectives "
            "until it arrived"
        )
    if note:
        title += f" ({note})"
    chains = [] if blame is None or blame.empty else blame.to_dict("records")
    lines = "; ".join(blame_line(b) for b in chains)
    return [
        Finding(
            kind=Cause.WAIT,
            title=title,
            advice=(f"{lines}; " if lines else "") + advice(Cause.WAIT, "*"),
            family=_top_family(pi, EXPOSED_WAIT_NS.name) if len(pi) else None,
            exposed_ns=wait,
            share_ratio=_share(wait, total_exposed),
            collectives=_names(pi, EXPOSED_WAIT_NS.name) if len(pi) else (),
            evidence={
                EXPOSED_WAIT_NS.name: wait,
                EXPOSED_COMM_NS.name: total_exposed,
                WAITED_FOR_RANK.name: straggler,
                "exposed_waited_for_ns": straggler_ns,
                "straggler": note,
                "blame": [{**b, "chain": list(b["chain"]), "line": blame_line(b)} for b in chains],
            },
        )
    ]


def _cause_findings(
    cause: str,
    fc: pd.DataFrame,
    pi: pd.DataFrame,
    bound: set[Any],
    total_exposed: int,
    ctx: AdviceContext,
) -> list[Finding]:
    """One ``tail`` or ``dependency`` finding per collective family, in family order: the
    family's exposed ns of that cause (``family_causes``) outside communication-bound windows
    (``bound``; those get the ``transfer-bound`` finding), its share of all exposed
    communication."""
    if not len(fc):
        return []
    col = f"exposed_{cause}_ns"
    per_family = fc[~fc["window"].isin(bound)].groupby("family")[col].sum()
    out: list[Finding] = []
    for fam, ns in per_family.items():
        if int(ns) <= 0:
            continue
        mine = pi[pi["family"] == fam] if len(pi) else pi
        purpose = _top_purpose(mine, col)
        out.append(
            Finding(
                kind=cause,
                title=_cause_title(cause, str(fam), int(ns), total_exposed, purpose),
                advice=advice(
                    cause,
                    str(fam),
                    purpose,
                    cpu=ctx.cpu,
                    bucketed=ctx.bucketed,
                    pytorch=ctx.pytorch,
                    prefetch=ctx.prefetch,
                    side=str(fam) in ctx.side,
                ),
                family=str(fam),
                exposed_ns=int(ns),
                share_ratio=_share(int(ns), total_exposed),
                collectives=_names(mine, col) if len(mine) else (),
                evidence={col: int(ns), EXPOSED_COMM_NS.name: total_exposed},
                purpose=purpose,
            )
        )
    return out


def _host_finding(
    steps: pd.DataFrame, pi: pd.DataFrame, total_exposed: int, ctx: AdviceContext
) -> list[Finding]:
    """The ``host`` finding (0 or 1): all exposed ns whose next compute was not launched yet
    (``exposed_host_ns`` of the steps), advised for the family carrying most of it."""
    host = int(steps[EXPOSED_HOST_NS.name].sum())
    if host <= 0:
        return []
    fam = _top_family(pi, EXPOSED_HOST_NS.name) if len(pi) else Family.OTHER
    purpose = (
        _top_purpose(pi[pi["family"] == fam], EXPOSED_HOST_NS.name) if len(pi) else Purpose.UNKNOWN
    )
    return [
        Finding(
            kind=Cause.HOST,
            title=_cause_title(Cause.HOST, fam, host, total_exposed, purpose),
            advice=advice(
                Cause.HOST,
                fam,
                purpose,
                cpu=ctx.cpu,
                bucketed=ctx.bucketed,
                pytorch=ctx.pytorch,
                prefetch=ctx.prefetch,
                side=str(fam) in ctx.side,
            ),
            purpose=purpose,
            family=fam,
            exposed_ns=host,
            share_ratio=_share(host, total_exposed),
            collectives=_names(pi, EXPOSED_HOST_NS.name) if len(pi) else (),
            evidence={
                EXPOSED_HOST_NS.name: host,
                EXPOSED_COMM_NS.name: total_exposed,
                "top_family": fam,
            },
        )
    ]


def _transfer_bound_finding(
    steps: pd.DataFrame,
    fc: pd.DataFrame,
    pi: pd.DataFrame,
    bound: set[Any],
    total_exposed: int,
    ctx: AdviceContext,
    partial: str | None = None,
) -> list[Finding]:
    """The ``transfer-bound`` finding (0 or 1): the exposed transfer ns of the
    communication-bound windows (``bound``), advised for the family with the most exposed ns in
    them; the evidence sums those steps' comm and compute ns. On a partial run (``partial``, the
    hedge) the title and the advice say first that it may be waiting for a missing rank."""
    if not bound:
        return []
    rows = steps.iloc[sorted(bound)]
    ns = int(rows[EXPOSED_TRANSFER_NS.name].sum())
    in_bound = fc[fc["window"].isin(bound)] if len(fc) else fc
    fam = (
        str(in_bound.groupby("family")[EXPOSED_NS.name].sum().idxmax())
        if len(in_bound)
        else Family.OTHER
    )
    mine = pi[pi["window"].isin(bound)] if len(pi) else pi
    purpose = (
        _top_purpose(mine[mine["family"] == fam], EXPOSED_NS.name) if len(mine) else Purpose.UNKNOWN
    )
    bw = ctx.bandwidth.get(fam)
    bw_text = f"; {bw.text()}" if bw is not None else "; message sizes unknown"
    return [
        Finding(
            kind=FindingKind.TRANSFER_BOUND,
            title=(
                f"{fam} ({_purpose_words(purpose)}): more communication than compute in "
                f"{len(rows)} step(s) (comm {_ms(rows['comm_ns'].sum())} vs compute "
                f"{_ms(rows['compute_ns'].sum())}), {_ms(ns)} exposed transfer{bw_text}"
                + ("" if partial is None else f" ({partial})")
            ),
            advice=(
                "" if partial is None else f"{partial} before acting on this; if it is transfer: "
            )
            + advice(
                FindingKind.TRANSFER_BOUND,
                fam,
                purpose,
                cpu=ctx.cpu,
                bucketed=ctx.bucketed,
                pytorch=ctx.pytorch,
                prefetch=ctx.prefetch,
                side=str(fam) in ctx.side,
                bandwidth=None if bw is None else bw.verdict,
            ),
            purpose=purpose,
            family=fam,
            exposed_ns=ns,
            share_ratio=_share(ns, total_exposed),
            collectives=_names(mine) if len(mine) else (),
            evidence={
                "steps": int(len(rows)),
                COMM_NS.name: int(rows[COMM_NS.name].sum()),
                COMPUTE_NS.name: int(rows[COMPUTE_NS.name].sum()),
                EXPOSED_TRANSFER_NS.name: ns,
                "bandwidth": None if bw is None else bw.verdict,
            },
        )
    ]


#: The verdict classes that are not about communication: (class, the lost part in ns that
#: decides it, the advice).
_CLASS_ADVICE: tuple[tuple[str, str, str], ...] = (
    (
        Bottleneck.MEMORY,
        MEMORY_ONLY_NS.name,
        "memcpy/memset with no compute or communication under them: avoid host-device copies "
        "in the step (keep tensors on the device, pin_memory + non_blocking copies, fuse "
        "small copies) or overlap them with compute on a separate stream",
    ),
    (
        Bottleneck.IDLE,
        IDLE_NS.name,
        "nothing ran on the device: launch overhead (many tiny kernels: CUDA graphs, "
        "torch.compile), host synchronisation (.item(), .cpu()), a slow input pipeline "
        "(DataLoader workers, pin_memory), or a late peer the trace cannot show",
    ),
)


def _class_findings(steps: pd.DataFrame, total_step: int, ctx: AdviceContext) -> list[Finding]:
    """A ``memory-bound`` and an ``idle-bound`` finding when steps have that verdict: the
    memcpy/memset-alone (or idle) ns of those steps, its share of all step time."""
    out: list[Finding] = []
    verdict = steps["bottleneck"].to_numpy(dtype=object)
    for cls, col, text in _CLASS_ADVICE:
        # a mask and column sums, where a boolean selection of the frame costs a millisecond
        sel = verdict == cls
        if not sel.any():
            continue
        ns = _sum_where(steps, col, sel)
        step_ns = _sum_where(steps, STEP_NS.name, sel)
        computing = _sum_where(steps, COMPUTE_ONLY_NS.name, sel) + _sum_where(
            steps, OVERLAP_NS.name, sel
        )
        what = "idle" if cls == Bottleneck.IDLE else "memcpy/memset alone"
        out.append(
            Finding(
                kind=cls,
                title=_class_title(cls, what, (int(sel.sum()), step_ns, computing), ns),
                advice=advice(cls, "*", cpu=True)
                if ctx.cpu and cls == Bottleneck.IDLE
                else text
                if ctx.pytorch or cls != Bottleneck.IDLE
                else _NON_TORCH_ADVICE[Bottleneck.IDLE],
                family=None,
                exposed_ns=ns,
                share_ratio=_share(ns, total_step),
                evidence={
                    col: ns,
                    STEP_NS.name: step_ns,
                    "steps": int(sel.sum()),
                },
            )
        )
    return out


def _sum_where(frame: pd.DataFrame, col: str, sel: npt.NDArray[np.bool_]) -> int:
    """``int(frame[sel][col].sum())``: numpy on an int64 column, else the Series' sum (it
    skips nulls)."""
    values = frame[col]
    if values.dtype == np.int64:
        return int(values.to_numpy()[sel].sum())
    return int(values[sel].sum())


def _class_title(cls: str, what: str, rows: tuple[int, int, int], ns: int) -> str:
    """``idle-bound in 3 step(s): idle 9.00 ms = 60.0% of those steps``; when those steps
    computed most of their time the title says so, naming the loss as their largest (§2).
    ``rows``: those steps' count, step ns and computing (compute-only + overlap) ns."""
    n_rows, step_ns, computing = rows
    step = max(step_ns, 1)
    head = f"{cls} in {n_rows} step(s): {what} {_ms(ns)} = {_pct(ns / step)} of those steps"
    if 2 * computing >= step:
        head += f", their largest loss (they computed {_pct(computing / step)} of the time)"
    return head


def _share_text(ns: int, total: int) -> str:
    return f" ({_pct(ns / total)} of all exposed)" if total else ""


def _top_family(df: pd.DataFrame, col: str) -> str:
    if df.empty:
        return Family.OTHER
    values = df[col]
    if values.dtype == np.int64:
        # per family (sorted; nulls left out) the sum, the first largest: what the groupby
        # sum and stable sort gave, in a dict
        sums: dict[Any, int] = {}
        for f, v in zip(df["family"].tolist(), values.tolist(), strict=True):
            if f is None or (isinstance(f, float) and f != f):
                continue
            sums[f] = sums.get(f, 0) + v
        if sums:
            fams = sorted(sums)
            best = fams[0]
            for f in fams[1:]:
                if sums[f] > sums[best]:
                    best = f
            return str(best)
    s = df.groupby("family")[col].sum().sort_values(ascending=False, kind="stable")
    return str(s.index[0])


def _purpose_words(purpose: str | None) -> str:
    """How a title names a purpose: its words, or that it is unknown."""
    if not purpose or purpose == Purpose.UNKNOWN:
        return PURPOSES[Purpose.UNKNOWN]
    return PURPOSES.get(purpose, purpose)


def _top_purpose(df: pd.DataFrame, col: str) -> str:
    """The purpose carrying most of ``col`` in ``df`` (``unknown`` when none)."""
    if df.empty or "purpose" not in df.columns or col not in df.columns:
        return Purpose.UNKNOWN
    s = df.groupby("purpose")[col].sum().sort_values(ascending=False, kind="stable")
    if s.empty or s.iloc[0] <= 0:
        s = df.groupby("purpose").size().sort_values(ascending=False, kind="stable")
    return str(s.index[0]) if len(s) else Purpose.UNKNOWN


def _cause_title(cause: str, family: str, ns: int, total: int, purpose: str | None = None) -> str:
    what = {
        Cause.TAIL: "nothing was left to compute under it",
        Cause.DEPENDENCY: "compute was queued but waited for its result",
        Cause.HOST: "the host had not launched the next compute yet",
    }[cause]
    return (
        f"{family} ({_purpose_words(purpose)}): {_ms(ns)} exposed because {what}"
        f"{_share_text(ns, total)}"
    )
