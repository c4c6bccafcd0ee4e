"""Issue 12, the Kineto reader's side: device work that is not CUDA/ROCm (MTIA, XPU, HPU,
PrivateUse1), RCCL kernels that carry no collective args, several GPUs in one process.

The category names are Kineto's (``toString(ActivityType)`` in pytorch/kineto
``libkineto/include/ActivityType.h``); see ``CATEGORY_MAP`` for what each one means."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import real_trace

import traceoverlap
from traceoverlap.readers.kineto import read_kineto

HOST, TID = 4242, 4243


def _x(
    cat: str, name: str, pid: Any, tid: Any, ts: float, dur: float, **args: Any
) -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid}
    ev.update(ts=ts, dur=dur)
    if args:
        ev["args"] = args
    return ev


def _write(
    tmp_path: Path, events: list[dict[str, Any]], name: str = "rank0.json", **top: Any
) -> Path:
    p = tmp_path / name
    doc = {"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 1}, **top}
    p.write_text(json.dumps(doc))
    return p


def _row(events: Any, name: str) -> Any:
    rows = events[events["name"] == name]
    assert len(rows) == 1, f"expected one {name!r}, found {len(rows)}"
    return rows.iloc[0]


# ---------------------------------------------------------------------------------------------
# MTIA


def _mtia_events() -> list[dict[str, Any]]:
    rpc = {
        "Collective name": "allreduce",
        "dtype": "Float",
        "In msg nelems": 256,
        "Out msg nelems": 256,
        "Group size": 2,
        "Process Group Name": "0",
    }
    return [
        _x("user_annotation", "ProfilerStep#1", HOST, TID, 0.0, 100.0),
        _x("cpu_op", "aten::mm", HOST, TID, 1.0, 10.0),
        _x("mtia_runtime", "launch", HOST, TID, 2.0, 1.0, correlation=1),
        _x("cpu_op", "record_param_comms", HOST, TID, 20.0, 10.0, **rpc),
        _x("mtia_runtime", "launch_comm", HOST, TID, 21.0, 1.0, correlation=2),
        # Device work: pid = device 0, tid = its resource, as output_json.cpp writes it.
        _x("mtia_ccp_events", "mm_kernel", 0, 1, 10.0, 30.0, correlation=1),
        _x("mtia_ccp_events", "hccl::all_reduce", 0, 2, 30.0, 20.0, correlation=2),
        # MTIA Insight events: device-side, no meaning as kernels: counted, not analysed.
        _x("mtia_insight", "insight", 0, 9, 10.0, 5.0),
        _x("mtia_insight", "insight", 0, 9, 20.0, 5.0),
    ]


def test_mtia_device_work_is_read_as_kernels_and_launches(tmp_path: Path) -> None:
    tl = read_kineto(_write(tmp_path, _mtia_events()))
    ev = tl.events
    k = _row(ev, "mm_kernel")
    assert k["category"] == "kernel" and (k["device"], k["stream"], k["pid"]) == (0, 1, HOST)
    assert _row(ev, "launch")["category"] == "runtime"
    # The hccl kernel gets the collective args of the record_param_comms op around its launch:
    # 256 Float elements = 1024 bytes.
    c = _row(ev, "hccl::all_reduce")
    assert (c["coll_name"], c["coll_bytes"], c["group_size"]) == ("allreduce", 1024, 2)
    assert "insight" not in set(ev["name"].astype(str))
    (info,) = tl.traces
    assert info.device_kind == "gpu" and info.device_ids == (0,)
    assert (
        "2 device events in categories mtia_insight (2) were not analysed (Kineto does not "
        "define them as kernels, copies or launches)" in info.notes
    )
    assert (
        "device work read from Kineto categories mtia_ccp_events (2 as kernels), "
        "mtia_runtime (2 as launches)" in info.notes
    )


def test_mtia_rank_is_analysed_as_a_device_rank(tmp_path: Path) -> None:
    result = traceoverlap.analyze(_write(tmp_path, _mtia_events()))
    (row,) = result.steps.to_dict("records")
    # Step window = [first start, last end] of the device work launched in the step:
    # [10, 50] µs. Compute = mm_kernel [10, 40] = 30 µs; comm = hccl [30, 50] = 20 µs
    # (the default rules take ^hccl as communication); overlap [30, 40] = 10 µs.
    assert row["step_ns"] == 40_000
    assert row["compute_ns"] == 30_000 and row["comm_ns"] == 20_000
    assert row["overlap_ns"] == 10_000


# ---------------------------------------------------------------------------------------------
# Intel XPU, PrivateUse1, Gaudi HPU


def test_xpu_trace(tmp_path: Path) -> None:
    # XPUPTI: kernels / copies under the common categories, pid = device, tid = SYCL queue;
    # launches under xpu_runtime / xpu_driver with the same correlation; xpu_sync records.
    queue = 94_000_000_001
    events = [
        _x("xpu_runtime", "urEnqueueKernelLaunch", HOST, TID, 1.0, 2.0, correlation=11),
        _x("xpu_driver", "zeCommandListAppendMemoryCopy", HOST, TID, 4.0, 2.0, correlation=12),
        _x("kernel", "gemm_xpu_kernel", 0, queue, 10.0, 5.0, device=0, correlation=11),
        _x("gpu_memcpy", "Memcpy M2D", 0, queue, 16.0, 1.0, device=0, correlation=12),
        _x("xpu_sync", "Event Sync", 0, queue, 17.0, 1.0, device=0, correlation=13),
    ]
    tl = read_kineto(_write(tmp_path, events))
    ev = tl.events
    k = _row(ev, "gemm_xpu_kernel")
    assert (k["category"], k["device"], k["stream"], k["correlation"]) == ("kernel", 0, queue, 11)
    assert _row(ev, "urEnqueueKernelLaunch")["category"] == "runtime"
    assert _row(ev, "zeCommandListAppendMemoryCopy")["category"] == "driver"
    assert _row(ev, "Event Sync")["category"] == "sync"
    assert (
        "device work read from Kineto categories xpu_driver (1 as launches), xpu_runtime (1 as launches), xpu_sync (1 as sync records)"
        in tl.traces[0].notes
    )


def test_privateuse1_trace(tmp_path: Path) -> None:
    events = [
        _x("privateuse1_runtime", "aclrtLaunch", HOST, TID, 1.0, 2.0, correlation=5),
        _x("privateuse1_driver", "drvLaunch", HOST, TID, 3.0, 1.0, correlation=6),
        _x("kernel", "npu_kernel", 0, 3, 10.0, 5.0, device=0, stream=3, correlation=5),
    ]
    ev = read_kineto(_write(tmp_path, events)).events
    assert _row(ev, "aclrtLaunch")["category"] == "runtime"
    assert _row(ev, "drvLaunch")["category"] == "driver"
    assert _row(ev, "npu_kernel")["correlation"] == 5


def test_hpu_ops_on_the_device_are_counted_not_taken_as_launches(tmp_path: Path) -> None:
    # hpu_op is "HPU host side runtime event": on the host process it is a launch. Gaudi traces
    # also put hpu_op events on a device's pid (0 here), whose meaning Kineto does not define:
    # counted in a note, not read as launches. An unknown category on the device pid is too;
    # one on the host pid is host work of no interest (dropped without a note).
    events = [
        _x("cpu_op", "aten::add", HOST, TID, 0.0, 10.0),
        _x("hpu_op", "synLaunch", HOST, TID, 1.0, 2.0),
        _x("hpu_op", "TPC add_fwd_bf16", 0, 1, 5.0, 3.0),
        _x("hpu_op", "MME gemm", 0, 2, 6.0, 4.0),
        _x("hpu_device_trace", "DMA down", 0, 3, 5.0, 1.0),
        _x("my_host_category", "whatever", HOST, TID, 5.0, 1.0),
    ]
    tl = read_kineto(_write(tmp_path, events))
    names = sorted(tl.events["name"].astype(str))
    assert names == ["aten::add", "synLaunch"]
    assert _row(tl.events, "synLaunch")["category"] == "runtime"
    (info,) = tl.traces
    assert info.device_kind == "cpu"
    assert (
        "3 device events in categories hpu_op (2), hpu_device_trace (1) were not analysed "
        "(Kineto does not define them as kernels, copies or launches)" in info.notes
    )


# ---------------------------------------------------------------------------------------------
# RCCL: ncclDevKernel_Generic with the args of its launching record_param_comms op


def _rpc(
    ts: float, dur: float, tid: int, coll: str, nelems: int, dtype: str, seq: int
) -> dict[str, Any]:
    args = {
        "Collective name": coll,
        "In msg nelems": nelems,
        "Out msg nelems": nelems,
        "dtype": dtype,
        "Group size": 8,
        "Process Group Name": "0",
        "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]",
        "Seq": seq,
    }
    return _x("cpu_op", "record_param_comms", HOST, tid, ts, dur, **args)


def test_rccl_generic_kernels_take_the_args_of_their_launching_op(tmp_path: Path) -> None:
    g = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
    events = [
        # Thread 639: allreduce seq 4 [100, 150] launches correlation 1 at [110, 116].
        _rpc(100.0, 50.0, 639, "allreduce", 1000, "BFloat16", 4),
        _x("cuda_runtime", "hipExtLaunchKernel", HOST, 639, 110.0, 6.0, correlation=1),
        # Thread 542: broadcast seq 2 [200, 260] nests a coalesced allgather seq 3 [205, 230];
        # correlation 2 [210, 215] is in both: the innermost (allgather) wins; correlation 3
        # [240, 245] is only in the broadcast (the latest-starting op ended before it).
        _rpc(200.0, 60.0, 542, "broadcast", 20, "Long", 2),
        _rpc(205.0, 25.0, 542, "allgather", 64, "Float", 3),
        _x("cuda_runtime", "hipExtLaunchKernel", HOST, 542, 210.0, 5.0, correlation=2),
        _x("cuda_runtime", "hipExtLaunchKernel", HOST, 542, 240.0, 5.0, correlation=3),
        # Correlation 4: launched outside any collective op; correlation 5: never launched in
        # the capture (its launch predates it); correlation 6: the kernel has its own args.
        _x("cuda_runtime", "hipLaunchKernel", HOST, 639, 300.0, 5.0, correlation=4),
        _x("cuda_runtime", "hipExtLaunchKernel", HOST, 639, 120.0, 5.0, correlation=6),
        _x("kernel", "k1", 2, 4, 400.0, 10.0, device=2, stream=4, correlation=1),
        _x("kernel", "k2", 2, 4, 410.0, 10.0, device=2, stream=4, correlation=2),
        _x("kernel", "k3", 2, 4, 420.0, 10.0, device=2, stream=4, correlation=3),
        _x("kernel", "k4", 2, 4, 430.0, 10.0, device=2, stream=4, correlation=4),
        _x("kernel", "k5", 2, 4, 440.0, 10.0, device=2, stream=4, correlation=5),
        _x(
            "kernel",
            "k6",
            2,
            4,
            450.0,
            10.0,
            device=2,
            stream=4,
            correlation=6,
            **{"Collective name": "reduce_scatter", "dtype": "Float", "In msg nelems": 1},
        ),
    ]
    for e in events:
        if e["name"].startswith("k"):
            e["name"] = g + e["name"][1]  # distinguishable, all "Generic"
    tl = read_kineto(_write(tmp_path, events))
    ev = tl.events

    def k(i: int) -> Any:
        return _row(ev, g + str(i))

    # k1: allreduce, 1000 BFloat16 = 2000 bytes, group 8, pg "0", seq 4.
    assert (k(1)["coll_name"], k(1)["coll_bytes"], k(1)["seq"]) == ("allreduce", 2000, 4)
    assert (k(1)["group_size"], k(1)["process_group"]) == (8, "0")
    # k2: the inner allgather, 64 Float = 256 bytes, seq 3.
    assert (k(2)["coll_name"], k(2)["coll_bytes"], k(2)["seq"]) == ("allgather", 256, 3)
    # k3: the outer broadcast, 20 Long = 160 bytes, seq 2.
    assert (k(3)["coll_name"], k(3)["coll_bytes"], k(3)["seq"]) == ("broadcast", 160, 2)
    for i in (4, 5):
        assert (k(i)["coll_name"], k(i)["coll_bytes"], k(i)["seq"]) == ("", -1, -1)
    # k6 keeps its own args (1 Float = 4 bytes), although its launch lies in the allreduce op.
    assert (k(6)["coll_name"], k(6)["coll_bytes"]) == ("reduce_scatter", 4)
    assert (
        "collective metadata of 3 kernels taken from the record_param_comms op that launched them"
        in tl.traces[0].notes
    )


def test_real_mi300x_rccl_kernels_get_their_collective_args() -> None:
    path = real_trace("kineto/amd_mi300x_ddp8_resnet_actckpt_rccl_rank0.json.gz")
    with gzip.open(path, "rt") as f:
        raw = json.load(f)["traceEvents"]
    # Independent derivation, event by event: each ncclDevKernel_Generic's launch (same
    # correlation, a cuda_runtime event) and the record_param_comms op on the launch's thread
    # that contains it.
    launches = {
        e["args"]["correlation"]: e
        for e in raw
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    ops = [e for e in raw if e.get("name") == "record_param_comms" and e.get("ph") == "X"]
    want: dict[int, tuple[str, int]] = {}
    for e in raw:
        if e.get("cat") != "kernel" or not e["name"].startswith("ncclDevKernel_Generic"):
            continue
        corr = e["args"]["correlation"]
        launch = launches.get(corr)
        inside = [
            o
            for o in ops
            if launch is not None
            and o["tid"] == launch["tid"]
            and o["ts"] <= launch["ts"]
            and launch["ts"] + launch["dur"] <= o["ts"] + o["dur"]
        ]
        if inside:
            o = max(inside, key=lambda o: o["ts"])
            nel = max(o["args"]["In msg nelems"], o["args"]["Out msg nelems"])
            size = {"BFloat16": 2, "Long": 8}[o["args"]["dtype"]]  # the dtypes of this trace
            want[corr] = (o["args"]["Collective name"], nel * size)
        else:
            want[corr] = ("", -1)
    # As counted when this test was written: 17 RCCL kernels, 12 launched in the capture.
    assert len(want) == 17 and sum(1 for v in want.values() if v[0]) == 12
    tl = read_kineto(path)
    ev = tl.events
    rccl = ev[ev["name"].astype(str).str.startswith("ncclDevKernel_Generic")]
    got = {
        int(r.correlation): (str(r.coll_name), int(r.coll_bytes))
        for r in rccl.itertuples(index=False)
    }
    assert got == want
    named = rccl[rccl["coll_name"] != ""]
    assert set(named["process_group"].astype(str)) == {"0"} and set(named["group_size"]) == {8}
    # e.g. the allreduce of 2,873,320 BFloat16 elements = 5,746,640 bytes.
    assert ("allreduce", 5_746_640) in got.values()
    (info,) = tl.traces
    assert info.devices == ("AMD Instinct MI300X (206.1 GB)",) and info.device_ids == (2,)


# ---------------------------------------------------------------------------------------------
# Several GPUs in one process


def test_several_gpus_in_one_process_keep_their_device_and_name(tmp_path: Path) -> None:
    events = [
        _x("cuda_runtime", "cudaLaunchKernel", HOST, TID, 1.0, 1.0, correlation=1),
        _x("cuda_runtime", "cudaLaunchKernel", HOST, TID, 2.0, 1.0, correlation=2),
        _x("cuda_runtime", "cudaMemcpyAsync", HOST, TID, 3.0, 1.0, correlation=3),
        _x("kernel", "on_gpu1", 1, 7, 10.0, 5.0, device=1, stream=7, correlation=1),
        _x("kernel", "on_gpu3", 3, 7, 10.0, 5.0, device=3, stream=7, correlation=2),
        # No args.device: the pid (Kineto writes the device there) says device 3.
        _x("gpu_memcpy", "copy_on_gpu3", 3, 9, 16.0, 1.0, correlation=3),
    ]
    props = [
        {"id": 3, "name": "NVIDIA H100", "totalGlobalMem": 80_000_000_000},
        {"id": 0, "name": "unused", "totalGlobalMem": 1},
        {"id": 1, "name": "NVIDIA A100", "totalGlobalMem": 40_000_000_000},
    ]
    tl = read_kineto(_write(tmp_path, events, deviceProperties=props))
    ev = tl.events
    assert _row(ev, "on_gpu1")["device"] == 1 and _row(ev, "on_gpu3")["device"] == 3
    assert _row(ev, "copy_on_gpu3")["device"] == 3 and _row(ev, "copy_on_gpu3")["stream"] == 9
    assert _row(ev, "on_gpu1")["lane"] == "gpu 1 stream 7"
    (info,) = tl.traces
    # Every device used, in id order, with its own name; the unused one is left out.
    assert info.device_ids == (1, 3)
    assert info.devices == ("NVIDIA A100 (40.0 GB)", "NVIDIA H100 (80.0 GB)")
    assert info.device == 1


def test_device_properties_without_ids_are_in_list_order(tmp_path: Path) -> None:
    events = [
        _x("cuda_runtime", "cudaLaunchKernel", HOST, TID, 1.0, 1.0, correlation=1),
        _x("kernel", "k", 1, 7, 10.0, 5.0, device=1, stream=7, correlation=1),
    ]
    props = [{"name": "GPU zero"}, {"name": "GPU one"}]
    info = read_kineto(_write(tmp_path, events, deviceProperties=props)).traces[0]
    assert info.devices == ("GPU one",) and info.device_ids == (1,)


def test_a_cpu_rank_lists_no_gpu(tmp_path: Path) -> None:
    events = [_x("cpu_op", "aten::mm", HOST, TID, 1.0, 1.0)]
    props = [{"id": 0, "name": "NVIDIA A100", "totalGlobalMem": 1}]
    info = read_kineto(_write(tmp_path, events, deviceProperties=props)).traces[0]
    assert (info.device_kind, info.devices, info.device_ids) == ("cpu", (), ())


@pytest.mark.parametrize("worker", range(8))
def test_real_dlrm_ranks(worker: int) -> None:
    folder = real_trace("kineto/dlrm_v100_8rank")
    (path,) = sorted(folder.glob(f"worker{worker}_*.pt.trace.json.gz"))
    tl = read_kineto(path)
    (info,) = tl.traces
    assert (info.rank, info.world_size, info.clock) == (worker, 8, "unix")
    assert info.devices and all("V100" in d for d in info.devices)
    assert len(info.devices) == len(info.device_ids) == 1
    k = tl.events[tl.events["category"] == "kernel"]
    assert (k["device"] == info.device).all()
