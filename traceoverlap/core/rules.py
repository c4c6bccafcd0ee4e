"""Name -> kind rules, as data (applied by :mod:`traceoverlap.rank.classify`).

The defaults follow the metrics contract (docs/metrics.md "Activities and kinds"), extended with
the communication libraries that do not carry "nccl" in their kernel names
(:data:`KNOWN_COMM_FAMILIES`).

GPU units (the unit has at least one kernel / memcpy / memset):
  - comm: a kernel whose name contains ``nccl`` or starts with ``rccl`` / ``hccl`` (any case),
    or matches one of the known communication families, or a user pattern
  - memory: memcpy and memset activities
  - compute: every other kernel
  - everything else (sync records, launches, host ops, ranges): not activity (``none``)

CPU units (e.g. gloo on CPU):
  - comm: events named ``gloo:*`` (the work of gloo's ``pt_gloo_runloop`` threads)
  - compute: ``cpu_op`` events on other threads, except the ops that launch or wait for
    communication (``c10d::*``, ``record_param_comms``, ``nccl:*``, ``gloo:*``)
  - a unit with no ``cpu_op`` at all (NVTX ranges only: a CPU run under Nsight Systems): compute
    is the phases the program marks (``forward``, ``backward``, ``optimizer``:
    :attr:`Rules.cpu_compute_ranges`), comm the ``gloo:*`` ranges it marks around its
    collectives; when such an Nsight Systems unit has none, :func:`unseen_comm_note` says the
    capture cannot show communication (rather than none happening).

Users extend the rules with ``--comm-pattern REGEX`` or a TOML config (:mod:`traceoverlap.core.options`).
Patterns are Python regexes matched with ``re.search``; they are evaluated once per distinct
name (the name column is categorical), never per event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ._lazyre import lazy_compile
from .options import compile_regex
from .vocab import COMPUTE_PHASES

#: Communication kernels that do not carry "nccl" in their names: (family, regex, where the
#: names come from). Matched case-insensitively anywhere in the kernel name.
KNOWN_COMM_FAMILIES: tuple[tuple[str, str, str], ...] = (
    (
        "NCCL / RCCL / HCCL",
        r"nccl|^rccl|^hccl",
        "metrics.md: ncclKernel_*, ncclDevKernel_*, "
        "ncclSymkDevKernel_*; rccl*/hccl* kernels of AMD RCCL and Habana HCCL",
    ),
    (
        "DeepEP all-to-all",
        r"deep_ep::|dpsk::ep::",
        "deepseek-ai/DeepEP: intranode/internode "
        "dispatch and combine kernels (deep_ep::internode::dispatch, dpsk::ep::...)",
    ),
    (
        "PyTorch symmetric memory",
        r"multimem_all_reduce|multimem_all_gather|multimem_one_shot|"
        r"multimem_reduce_scatter|one_shot_all_reduce|two_shot_all_reduce|symmetric_memory::",
        "pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu "
        "(multimem_all_reduce_kernel, one_shot_all_reduce_kernel, two_shot_all_reduce_kernel)",
    ),
    (
        "vLLM / SGLang custom all-reduce",
        r"cross_device_reduce",
        "vllm csrc/custom_all_reduce.cuh "
        "(vllm::cross_device_reduce_1stage / _2stage), copied by SGLang",
    ),
    (
        "TensorRT-LLM all-reduce",
        r"ar_fusion::|allreduce_?fusion|oneShotAllReduce|"
        r"twoShotAllReduce|twoshot_?allreduce|lamport_?all_?reduce|customAllReduce",
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/customAllReduceKernels.cu and "
        "communicationKernels/allReduceFusionKernels.cu",
    ),
    ("NVSHMEM", r"nvshmem", "NVIDIA NVSHMEM device collectives and put/get kernels (nvshmemi_*)"),
    (
        "MSCCL / MSCCL++",
        r"msccl",
        "microsoft/msccl and microsoft/mscclpp kernels (mscclKernel_*, mscclpp::*)",
    ),
)

#: Loose shapes of communication names, only used to SUGGEST patterns in a note.
LOOKS_LIKE_COMM = lazy_compile(
    r"(?i)all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|alltoall|broadcast|sendrecv|"
    r"(^|_|::)(send|recv|dispatch|combine)(_|$|<|\()|p2p|multimem|nvshmem|cross_device|"
    r"(^|_)comm(_|$)|collective"
)


@dataclass(frozen=True)
class Rules:
    """Classification rules. Every field is a tuple of regexes (``re.search``, as written)."""

    gpu_comm: tuple[str, ...] = tuple(f"(?i){rx}" for _, rx, _ in KNOWN_COMM_FAMILIES)
    cpu_comm: tuple[str, ...] = (r"^gloo:",)
    cpu_compute_exclude: tuple[str, ...] = (
        r"^c10d::",
        r"^record_param_comms$",
        r"^nccl:",
        r"^gloo:",
    )
    #: threads whose ops are communication work, never compute
    cpu_comm_threads: tuple[str, ...] = (r"pt_gloo_runloop",)
    #: host ranges during which a CPU compute thread is blocked in communication (diagnosis.md §3)
    cpu_comm_calls: tuple[str, ...] = (
        r"^c10d::",
        r"^record_param_comms$",
        r"^nccl:",
        r"^gloo:",
        r"(?i)wait",
    )
    #: device activities recorded as kernels that are memory transfers (MTIA's DMA requests)
    gpu_memory: tuple[str, ...] = (r"^dma_request$",)
    #: user patterns added with --comm-pattern: comm on both GPU and CPU units
    extra_comm: tuple[str, ...] = field(default=())
    # host ranges that are compute on CPU ranks without any cpu_op (NVTX-only captures: a CPU
    # run under Nsight Systems has no PyTorch profiler ops): the phases the program marks
    cpu_compute_ranges: tuple[str, ...] = (f"^({'|'.join(COMPUTE_PHASES)})$",)

    def with_comm_patterns(self, patterns: Sequence[str]) -> Rules:
        pats = tuple(patterns)
        for p in pats:
            compile_regex(p, "comm patterns")
        return replace(self, extra_comm=self.extra_comm + pats)
