"""What Kineto's category names mean, and their codes in the event table.

Kineto names its activity categories in ``libkineto/include/ActivityType.h`` (``toString``):
:data:`CATEGORY_MAP` maps each category whose meaning is defined there to the model's categories;
device events of any other category are counted in a note, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ...core.model import CATEGORIES

#: Kineto ``cat`` -> :data:`traceoverlap.core.model.CATEGORIES`.
#:
#: The category strings are ``toString(ActivityType)`` of pytorch/kineto
#: ``libkineto/include/ActivityType.h`` (the ``_activityTypeNames`` table; earlier versions kept
#: it in ``libkineto/src/ActivityType.cpp``). Their meaning, where this map relies on it:
#:
#: - ``kernel`` (CONCURRENT_KERNEL, "on-device kernels"), ``gpu_memcpy``, ``gpu_memset``: device
#:   activity of every backend that uses them: CUDA (CUPTI), ROCm (roctracer), Intel XPU
#:   (``libkineto/src/plugin/xpupti/XpuptiActivityHandlers.cpp`` emits CONCURRENT_KERNEL /
#:   GPU_MEMCPY / GPU_MEMSET with args ``device`` / ``correlation``, pid = device, tid = SYCL
#:   queue), and PrivateUse1 backends (``kPrivateUse1Types`` in PyTorch's
#:   ``torch/csrc/profiler/kineto_shim.cpp``).
#: - ``cuda_runtime`` / ``cuda_driver`` ("host side cuda runtime / driver events"),
#:   ``xpu_runtime`` / ``xpu_driver`` ("host side xpu runtime / driver events"),
#:   ``mtia_runtime`` ("host side MTIA runtime events"), ``privateuse1_runtime`` /
#:   ``privateuse1_driver`` ("host side privateUse1 runtime / driver events"), ``glow_runtime``
#:   ("host side glow runtime events"), ``hpu_op`` ("HPU host side runtime event"): host-side
#:   API calls, i.e. launches, joined to device work by ``args.correlation`` / ac2g flows. The
#:   pytorch/kineto pull request #1212 (commit f5deaf20, "enable generic event types") says the
#:   same in code: MTIA_RUNTIME, GLOW_RUNTIME, HPU_OP, XPU_RUNTIME and PRIVATEUSE1_RUNTIME become
#:   aliases of RUNTIME, CUDA_DRIVER / PRIVATEUSE1_DRIVER aliases of DRIVER.
#: - ``mtia_ccp_events`` ("MTIA ondevice CCP events"): device activity; the same pull request
#:   makes MTIA_CCP_EVENTS an alias of CONCURRENT_KERNEL, and ``libkineto/src/output_json.cpp``
#:   writes it like a kernel (pid = device, tid = resource; ``hccl::*`` ones carry the
#:   collective metadata of their ``record_param_comms`` op).
#: - ``cuda_sync`` ("synchronization events between runtime and kernels"), ``xpu_sync`` ("XPU
#:   synchronization events"), ``cuda_event`` (cudaEventRecord marks on a stream, 1 ns long,
#:   ``CudaEventActivity`` in ``libkineto/src/CuptiActivity.h``): device-side records that are
#:   never activity.
#: - ``cpu_op``, ``user_annotation``, ``gpu_user_annotation``: host ops, host ranges, and ranges
#:   projected on device lanes.
#: - PyTorch 1.8-1.9 traces used capitalised names (and put ProfilerStep#N under "Operator").
#:
#: ``hpu_op`` events that sit on a device's pid rather than the host process's are device work
#: whose meaning Kineto does not define: they are counted in a note, as are ``mtia_insight``
#: (MTIA Insight events) and ``collective_comm`` (XPU communication records) and any category
#: not named here that lies on a device's pid.
CATEGORY_MAP: dict[str, str] = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "mtia_ccp_events": "kernel",
    "cuda_sync": "sync",
    "xpu_sync": "sync",
    "cuda_event": "sync",
    "cuda_runtime": "runtime",
    "cuda_driver": "driver",
    "xpu_runtime": "runtime",
    "xpu_driver": "driver",
    "mtia_runtime": "runtime",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "driver",
    "glow_runtime": "runtime",
    "hpu_op": "runtime",
    "cpu_op": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "Operator": "cpu_op",
    "Kernel": "kernel",
    "Memcpy": "memcpy",
    "Memset": "memset",
    "Runtime": "runtime",
}
#: Categories that are never device work (host-side, display-only or counters): not kept, and
#: not worth a note. ``Trace`` is Kineto's whole-capture span; ``ac2g`` / ``fwdbwd`` /
#: ``async_cpu_to_gpu`` are flows (read separately when needed).
IGNORED_CATS = frozenset(
    {
        "",
        "python_function",
        "overhead",
        "cpu_instant_event",
        "external_correlation",
        "cuda_profiler_range",
        "xpu_scope_profiler",
        "hardware_counters",
        "mtia_counters",
        "Trace",
        "ac2g",
        "fwdbwd",
        "async_cpu_to_gpu",
    }
)
#: Known device-side categories with no defined meaning as kernel / copy / launch: always noted.
UNMAPPED_DEVICE_CATS = frozenset({"mtia_insight", "collective_comm"})
#: Categories of accelerators other than CUDA / ROCm: a note says how their events were read.
ACCELERATOR_CATS = frozenset(
    {
        "mtia_ccp_events",
        "mtia_runtime",
        "xpu_runtime",
        "xpu_driver",
        "xpu_sync",
        "privateuse1_runtime",
        "privateuse1_driver",
        "glow_runtime",
        "hpu_op",
    }
)
#: How the accelerator note says each model category was read.
AS_WHAT = {
    "kernel": "as kernels",
    "runtime": "as launches",
    "driver": "as launches",
    "memcpy": "as copies",
    "memset": "as copies",
    "sync": "as sync records",
}
#: Flows that bind a launch to its device work (``async_cpu_to_gpu`` in older traces).
FLOW_CATS = frozenset({"ac2g", "async_cpu_to_gpu"})

#: Model category -> its code in the event table.
MODEL_CODE: dict[str, int] = {c: i for i, c in enumerate(CATEGORIES)}
#: The source categories known by name take codes 0.. in every trace, so that one lookup table
#: (:data:`KNOWN_LUT`) serves every chunk of a trace that has no other category.
SRC_CATS: tuple[str, ...] = tuple(CATEGORY_MAP)


def model_lut(src: Iterable[str]) -> np.ndarray:
    """Source category code -> model category code (-1: a category with no mapping), from the
    source categories in code order."""
    return np.array([MODEL_CODE.get(CATEGORY_MAP.get(c, ""), -1) for c in src], dtype=np.int8)


def _codes(*categories: str) -> np.ndarray:
    return np.array([MODEL_CODE[c] for c in categories], dtype=np.int8)


KNOWN_LUT = model_lut(SRC_CATS)
#: Model categories whose Kineto ``pid`` is the device and ``tid`` the stream.
GPU_SIDE_CODES = _codes("kernel", "memcpy", "memset", "sync", "gpu_annotation")
#: Device work: kernels and copies.
GPU_ACTIVITY_CODES = _codes("kernel", "memcpy", "memset")
#: Model categories whose rows need ``args.correlation`` (and may take it from ac2g flows).
FLOW_TARGET_CODES = _codes("kernel", "memcpy", "memset", "sync", "runtime", "driver")
#: Launches: host-side API calls, joined to the device work by correlation.
LAUNCH_CODES = _codes("runtime", "driver")


def codes_in(codes: np.ndarray, wanted: Iterable[int]) -> np.ndarray:
    """``np.isin(codes, wanted)`` for the handful of codes a category test names: one
    comparison per wanted code (``np.isin`` sorts or builds a table: ~6 ms per 430 000 int8
    codes, against ~0.1 ms). Many wanted codes take ``np.isin``."""
    w = [int(x) for x in wanted]
    if len(w) > 8:
        return np.isin(codes, w)
    out = np.zeros(codes.shape, dtype=bool)
    for x in w:
        out |= codes == x
    return out
