"""The words of traceoverlap, each declared once: collective kinds and families, purposes, the
causes of exposed time and their words, verdict classes, phases, step labels and the step
marker regex, and the default of every threshold.

Everything else imports these names: a search for ``"AllReduce"`` or ``"host not ready"`` finds
its one declaration here. This module sits at the bottom of the flow: it imports nothing from
traceoverlap (tests/test_architecture.py), so readers, the analysis and the reporters can all use
it. The brute-force oracle (tests/oracle.py) keeps its own names on purpose: it checks these.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

# --- activity kinds (metrics.md "Activities and kinds") -----------------------------------------


class ActivityKind:
    """What an event is to the metrics (:class:`traceoverlap.core.model.Kind` holds their codes)."""

    COMPUTE: Final = "compute"
    COMM: Final = "comm"
    MEMORY: Final = "memory"
    NONE: Final = "none"


#: Kinds the metrics use. ``none`` = not an activity (launches, ranges, sync records...).
#: A kind is stored as its index in this tuple (the ``kind`` codes of :class:`~traceoverlap.core.model.Kind`).
KINDS: tuple[str, ...] = (
    ActivityKind.COMPUTE,
    ActivityKind.COMM,
    ActivityKind.MEMORY,
    ActivityKind.NONE,
)

#: The activity kinds in words, as reports label them.
KIND_WORDS: dict[str, str] = {
    ActivityKind.COMPUTE: "compute",
    ActivityKind.COMM: "communication",
    ActivityKind.MEMORY: "memory",
}


# --- collective families (diagnosis.md §4) ----------------------------------------------------


class Family:
    """The collective families advice is chosen by (:func:`family_of`)."""

    ALL_REDUCE: Final = "AllReduce"
    ALL_GATHER_REDUCE_SCATTER: Final = "AllGather/ReduceScatter"
    SEND_RECV: Final = "SendRecv"
    ALL_TO_ALL: Final = "AllToAll"
    OTHER: Final = "Other"


#: Collective families, in the order the findings list them (the last one catches the rest).
FAMILIES: tuple[str, ...] = (
    Family.ALL_REDUCE,
    Family.ALL_GATHER_REDUCE_SCATTER,
    Family.SEND_RECV,
    Family.ALL_TO_ALL,
    Family.OTHER,
)


def norm_kind(label: str) -> str:
    """A collective kind label normalised: ``allreduce`` (Kineto args), ``AllReduce`` (kernel
    name) and ``all_reduce`` (gloo) are one kind."""
    return label.lower().replace("_", "")


def kind_key(label: str) -> str:
    """:func:`norm_kind` without spaces either: what family and bus-factor rules look into."""
    return norm_kind(label).replace(" ", "")


def family_of(label: str) -> str:
    """The advice family of a collective from its kind label (``AllReduce``, ``all_gather``,
    ``ncclDevKernel_SendRecv``, ``deep_ep::internode::dispatch``...)."""
    key = kind_key(label)
    if "allreduce" in key:
        return Family.ALL_REDUCE
    if "allgather" in key or "reducescatter" in key:
        return Family.ALL_GATHER_REDUCE_SCATTER
    if "alltoall" in key or "dispatch" in key or "combine" in key or "deepep" in key:
        return Family.ALL_TO_ALL
    if "sendrecv" in key or key in ("send", "recv", "p2p") or key.startswith(("send", "recv")):
        return Family.SEND_RECV
    return Family.OTHER


# --- collective kinds from names ---------------------------------------------------------------

_NCCL_KERNEL = re.compile(r"(?i)^(?:nccl|rccl|hccl)\w*?Kernel_([A-Za-z]+)")
_LIB_PREFIX = re.compile(r"(?i)^(?:gloo|nccl|rccl|hccl|mpi|ucc)[:_](\w+)")
#: ``nccl:all_to_all`` or PyTorch emit_nvtx's ``nccl:all_to_all, op_id = 12``
NCCL_RANGE = re.compile(r"nccl:(\w*)")


def collective_kind(name: str) -> str:
    """A collective's kind from an activity name: ``AllReduce``, ``all_reduce``, ``SendRecv``...

    Unknown shapes give the name itself (so identical names still match one another).
    """
    m = _NCCL_KERNEL.search(name)
    if m:
        return m.group(1)
    m = _LIB_PREFIX.search(name)
    if m:
        return m.group(1)
    return name


# --- purposes (diagnosis.md §10) ---------------------------------------------------------------


class Purpose:
    """What a collective is for (:mod:`traceoverlap.rank.purpose` decides it)."""

    DDP_GRADIENT_ALLREDUCE: Final = "ddp-gradient-allreduce"
    DDP_BROADCAST: Final = "ddp-broadcast"
    GRADIENT_ALLREDUCE: Final = "gradient-allreduce"
    FSDP_ALLGATHER: Final = "fsdp-allgather"
    FSDP_REDUCESCATTER: Final = "fsdp-reducescatter"
    REDUCESCATTER_AS_ALLREDUCE: Final = "reducescatter-as-allreduce"
    EMBEDDING_ALLTOALL: Final = "embedding-alltoall"
    MOE_DISPATCH: Final = "moe-dispatch"
    MOE_COMBINE: Final = "moe-combine"
    MOE_ALLTOALL: Final = "moe-alltoall"
    SEQUENCE_PARALLEL_ALLTOALL: Final = "sequence-parallel-alltoall"
    TP_ALLREDUCE: Final = "tp-allreduce"
    PIPELINE_P2P: Final = "pipeline-p2p"
    OPTIMIZER_COLLECTIVE: Final = "optimizer-collective"
    UNKNOWN: Final = "unknown"


#: Every purpose, with the words a report uses.
PURPOSES: dict[str, str] = {
    Purpose.DDP_GRADIENT_ALLREDUCE: "DDP gradient buckets in backward",
    Purpose.DDP_BROADCAST: "DDP parameter / buffer broadcast",
    Purpose.GRADIENT_ALLREDUCE: "gradient all-reduce issued by the training loop, not DDP",
    Purpose.FSDP_ALLGATHER: "FSDP / ZeRO parameter all-gather",
    Purpose.FSDP_REDUCESCATTER: "FSDP / ZeRO gradient reduce-scatter",
    Purpose.REDUCESCATTER_AS_ALLREDUCE: "reduce-scatter that gloo runs as an all-reduce",
    Purpose.EMBEDDING_ALLTOALL: "TorchRec embedding all-to-all",
    Purpose.MOE_DISPATCH: "MoE token dispatch",
    Purpose.MOE_COMBINE: "MoE expert combine",
    Purpose.MOE_ALLTOALL: "MoE expert all-to-all",
    Purpose.SEQUENCE_PARALLEL_ALLTOALL: "sequence-parallel attention all-to-all",
    Purpose.TP_ALLREDUCE: "tensor-parallel all-reduce of activations (a forward, or its backward)",
    Purpose.PIPELINE_P2P: "pipeline send / recv between stages",
    Purpose.OPTIMIZER_COLLECTIVE: "collective inside the optimizer step",
    Purpose.UNKNOWN: "purpose unknown",
}


# --- causes of exposed time (diagnosis.md §3) --------------------------------------------------


class Cause:
    """Why an exposed nanosecond of communication was exposed, first match wins."""

    WAIT: Final = "wait"
    TAIL: Final = "tail"
    DEPENDENCY: Final = "dependency"
    HOST: Final = "host"


#: The causes in first-match order.
CAUSES: tuple[str, ...] = (Cause.WAIT, Cause.TAIL, Cause.DEPENDENCY, Cause.HOST)

#: Why communication was exposed, in words, in :data:`CAUSES` order.
CAUSE_WORDS: dict[str, str] = {
    Cause.WAIT: "waiting for a peer",
    Cause.TAIL: "nothing left to compute",
    Cause.DEPENDENCY: "compute waited for it",
    Cause.HOST: "host not ready",
}


# --- verdicts (diagnosis.md §2) and finding kinds ----------------------------------------------


class Bottleneck:
    """The verdict class of a step."""

    PEER_WAIT: Final = "peer-wait-bound"
    COMMUNICATION: Final = "communication-bound"
    EXPOSED_COMMUNICATION: Final = "exposed-communication"
    MEMORY: Final = "memory-bound"
    IDLE: Final = "idle-bound"
    COMPUTE: Final = "compute-bound"


#: Verdict classes, in the order the summary lists them.
BOTTLENECKS: tuple[str, ...] = (
    Bottleneck.PEER_WAIT,
    Bottleneck.COMMUNICATION,
    Bottleneck.EXPOSED_COMMUNICATION,
    Bottleneck.MEMORY,
    Bottleneck.IDLE,
    Bottleneck.COMPUTE,
)

#: Verdict names short enough for an 80-column table.
SHORT_BOTTLENECK: dict[str, str] = {
    Bottleneck.PEER_WAIT: "peer-wait",
    Bottleneck.COMMUNICATION: "comm-bound",
    Bottleneck.EXPOSED_COMMUNICATION: "exposed-comm",
    Bottleneck.MEMORY: "memory-bound",
    Bottleneck.IDLE: "idle-bound",
    Bottleneck.COMPUTE: "compute",
}


class FindingKind:
    """Kinds of findings besides the causes and the memory / idle verdicts."""

    SAME_STREAM: Final = "same_stream"
    TRANSFER_BOUND: Final = "transfer-bound"


# --- phases --------------------------------------------------------------------------------------


class Phase:
    """The phases a training step marks (host ranges)."""

    FORWARD: Final = "forward"
    BACKWARD: Final = "backward"
    OPTIMIZER: Final = "optimizer"
    GRAD_SYNC: Final = "grad_sync"
    ZERO_GRAD: Final = "zero_grad"


#: The phases that are compute on a CPU unit whose only host ranges are the phases it marks.
COMPUTE_PHASES: tuple[str, ...] = (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER)

#: Where the reference workload's slow rank sleeps (``profile --slow-phase``). The workloads
#: package never imports traceoverlap: it keeps its own copy (workloads/__main__.py).
SLOW_PHASES: tuple[str, ...] = (
    "dataloader",
    Phase.FORWARD,
    "pre-backward",
    Phase.BACKWARD,
    Phase.OPTIMIZER,
)

#: ``profile --gloo-loop``: the priority of gloo's TCP loop threads in the reference workload
#: (workloads/__main__.py keeps its own copy, like :data:`SLOW_PHASES`).
GLOO_LOOPS: tuple[str, ...] = ("default", "idle")

#: Ranges drawn as phases (``forward``, ``## backward ##``, ``DistributedDataParallel.forward``,
#: ``Optimizer.step#SGD.step``, ``grad_sync``...).
PHASE_RE: Final = re.compile(
    "(?i)"
    + "|".join((Phase.FORWARD, Phase.BACKWARD, "optimi[sz]er", Phase.ZERO_GRAD, Phase.GRAD_SYNC))
)


# --- steps ---------------------------------------------------------------------------------------

#: What ``torch.profiler``'s ``prof.step()`` names its step ranges: ``ProfilerStep#<number>``.
STEP_MARKER_PREFIX: Final = "ProfilerStep#"
#: Step markers when nothing else is asked.
DEFAULT_STEP_REGEX: Final = rf"^{STEP_MARKER_PREFIX}(\d+)$"
#: :data:`DEFAULT_STEP_REGEX`, compiled once.
STEP_RE: Final = re.compile(DEFAULT_STEP_REGEX)

#: A step label as the step table holds it: the marker's number (``5``), a repeated number in
#: start order (``"5#2"``), an ordinal for unnumbered markers, or :data:`WHOLE_CAPTURE`.
StepLabel = int | str

#: The label of the one window of a trace without step markers.
WHOLE_CAPTURE: Final = "all"

_REPEAT = re.compile(r"(\d+)(?:#(\d+))?")


class StepId(NamedTuple):
    """A step label as a typed value: its number and which occurrence of that number it is
    (1: the first). :meth:`parse` and :attr:`label` are the one place labels are read and
    written; ``all`` (:data:`WHOLE_CAPTURE`) has no number and parses to None."""

    number: int
    repeat: int = 1

    @classmethod
    def parse(cls, label: object) -> StepId | None:
        """``5`` -> StepId(5), ``"5#2"`` -> StepId(5, 2); None for ``all`` or anything else."""
        if isinstance(label, int) and not isinstance(label, bool):
            return cls(label)
        m = _REPEAT.fullmatch(str(label))
        if m is None:
            return None
        return cls(int(m.group(1)), int(m.group(2)) if m.group(2) else 1)

    @property
    def label(self) -> StepLabel:
        """The label the step table holds: the number, or ``"N#k"`` for the k-th repeat."""
        return self.number if self.repeat == 1 else f"{self.number}#{self.repeat}"


def as_label(value: object) -> StepLabel:
    """A step label as the JSON and the summaries give it, from a step column's value (the
    Python API's step columns are ``string``: ``"4"`` -> 4, ``"4#2"`` and ``"all"`` stay)."""
    sid = StepId.parse(value)
    return str(value) if sid is None else sid.label


def step_number(label: object) -> int | None:
    """The number a step label carries (``5``, ``"5#2"`` -> 5), None for ``all``."""
    sid = StepId.parse(label)
    return None if sid is None else sid.number


# --- thresholds (diagnosis.md §2, §8) ------------------------------------------------------------

#: A step is ``compute-bound`` when the time the device was not computing is below this share of
#: the step (``--lost-threshold``, ``[thresholds] lost_ratio``).
LOST_RATIO: Final = 0.10

#: diagnosis.md §14: a straggler is named only when the exposed waiting that traces back to it is
#: at least this share of the run's step time (``--straggler-threshold``,
#: ``[thresholds] straggler_ratio``); below it the run says "no straggler".
STRAGGLER_RATIO: Final = 0.05

#: diagnosis.md §8 / §11: a compute thread whose next host event (of any kind) starts within
#: 1/BLOCKED_PER of a communication's duration after it ends, or within :data:`BLOCKED_FLOOR_NS`
#: whatever the duration, was blocked on it. The floor is the OS's wake-up latency on a loaded
#: host: 0.04-0.45 ms measured after gloo collectives of 3-35 ms (a 1 % tolerance alone turned
#: those blocked collectives into ``host``).
BLOCKED_PER: Final = 100  # 1 %: gap * 100 <= duration
BLOCKED_FLOOR_NS: Final = 1_000_000  # or gap <= 1 ms
#: The what-if run graph's bound on a resumption found just before a communication's recorded end
#: (traceoverlap.rank.graph); the analysis' blocked rule is :data:`BLOCKED_FLOOR_NS`.
BLOCKED_MAX_NS: Final = 500_000


#: The words of the what-if caveat for CPU ranks sharing a host's cores (whatif.md §5) that name
#: it: ``analyze``'s "What to try" line says it shorter.
SHARED_CPU_MARK = "share the CPU cores of host"
