"""The Kineto / Chrome-trace JSON reader on hand-built traces (answers derived in comments) and on
the shared real A100 trace (skipped when absent)."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REAL_TRACES

from traceoverlap.core.errors import TraceFormatError
from traceoverlap.readers.kineto import rank_from_filename, read_kineto, us_to_ns

REAL = REAL_TRACES / "kineto" / "a100_nccl_allreduce_rank0.json.gz"

BASE = 1_711_964_646_000_000_000  # baseTimeNanoseconds of the real trace, reused here


def _write(tmp_path: Path, doc: Any, name: str = "trace.json") -> Path:
    p = tmp_path / name
    text = json.dumps(doc) if not isinstance(doc, str) else doc
    if name.endswith(".gz"):
        p.write_bytes(gzip.compress(text.encode()))
    else:
        p.write_text(text)
    return p


def _x(cat: str, name: str, pid: Any, tid: Any, ts: Any, dur: Any, **args: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid}
    ev["ts"] = ts
    ev["dur"] = dur
    if args:
        ev["args"] = args
    return ev


def _row(events: Any, name: str) -> Any:
    rows = events[events["name"] == name]
    assert len(rows) == 1, f"expected one {name!r}, found {len(rows)}"
    return rows.iloc[0]


# ---------------------------------------------------------------------------------------------
# A new-style GPU trace: float µs relative to baseTimeNanoseconds, args.correlation everywhere.

HOST_PID, MAIN_TID, BWD_TID = 2910249, 2910249, 2919752


def _new_style_doc() -> dict[str, Any]:
    ev = [
        {"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0, "args": {"name": "python"}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": HOST_PID,
            "tid": MAIN_TID,
            "args": {"name": f"thread {MAIN_TID} (pt_main_thread)"},
        },
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        _x("user_annotation", "ProfilerStep#3", HOST_PID, MAIN_TID, 4455129191000.000, 1000.5),
        _x("cpu_op", "aten::mm", HOST_PID, MAIN_TID, 4455129191100.25, 20.0),
        _x(
            "cuda_runtime",
            "cudaLaunchKernel",
            HOST_PID,
            MAIN_TID,
            4455129191110.001,
            5.25,
            correlation=101,
        ),
        # The kernel checked to the nanosecond below: 4455129191346.443 µs is a value where the
        # naive float64 round(ts * 1000) gives ...346444 instead of ...346443.
        _x(
            "kernel",
            "sm80_gemm",
            0,
            7,
            4455129191346.443,
            20.001,
            device=0,
            stream=7,
            correlation=101,
        ),
        _x(
            "cuda_driver",
            "cuLaunchKernelEx",
            HOST_PID,
            BWD_TID,
            4455129191200.0,
            3.0,
            correlation=102,
        ),
        _x(
            "kernel",
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
            0,
            40,
            4455129191400.5,
            100.0,
            device=0,
            stream=40,
            correlation=102,
            **{
                "Collective name": "allreduce",
                "In msg nelems": 1000,
                "Out msg nelems": 1000,
                "dtype": "BFloat16",
                "Group size": 2,
                "Process Group Name": "0",
                "Seq": 5,
            },
        ),
        _x(
            "cpu_op",
            "record_param_comms",
            HOST_PID,
            BWD_TID,
            4455129191190.0,
            12.0,
            **{
                "Collective name": "allgather",
                "In msg nelems": 10,
                "Out msg nelems": 20,
                "dtype": "Float",
                "Group size": 2,
                "Process Group Name": "1",
                "seq": 7,
            },
        ),
        _x(
            "gpu_memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            0,
            7,
            4455129191500.0,
            1.0,
            device=0,
            stream=7,
            correlation=103,
        ),
        _x("gpu_memset", "Memset (Device)", 0, 7, 4455129191502.0, 1.0, device=0, stream=7),
        _x("cuda_sync", "Stream Sync", 0, 7, 4455129191503.0, 1.0, device=0, stream=7),
        _x("gpu_user_annotation", "## forward ##", 0, 7, 4455129191300.0, 50.0, device=0),
        # Dropped: python stack, instants, flows, the profiler's own span with string pid/tid.
        _x("python_function", "train.py(12): step", HOST_PID, MAIN_TID, 4455129191000.0, 5.0),
        {"ph": "i", "name": "Iteration Start", "pid": "Traces", "tid": "x", "ts": 1.0, "s": "g"},
        {
            "ph": "s",
            "id": 101,
            "cat": "ac2g",
            "name": "ac2g",
            "pid": HOST_PID,
            "tid": MAIN_TID,
            "ts": 4455129191110.001,
        },
        _x("Trace", "PyTorch Profiler (0)", "Spans", "PyTorch Profiler", 4455129190000.0, 9e3),
        _x("overhead", "Instrumentation", HOST_PID, MAIN_TID, 4455129191000.0, 1.0),
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_899_345_920},
            {"id": 1, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_899_345_920},
        ],
        "distributedInfo": {
            "backend": "nccl",
            "rank": 1,
            "world_size": 4,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 4}],
        },
        "traceEvents": ev,
        "baseTimeNanoseconds": BASE,
    }


@pytest.mark.parametrize("name", ["rank7_trace.json", "rank7_trace.json.gz"])
def test_new_style_trace(tmp_path: Path, name: str) -> None:
    tl = read_kineto(_write(tmp_path, _new_style_doc(), name))
    ev = tl.events
    # Kept: the 11 X events of mapped categories (step, mm, launch, gemm, driver launch, nccl,
    # record_param_comms, memcpy, memset, sync, gpu annotation); the python_function, instant,
    # flow, Trace span, overhead and metadata rows are dropped.
    assert len(ev) == 11
    counts = ev["category"].value_counts()
    assert counts["kernel"] == 2 and counts["runtime"] == 1 and counts["driver"] == 1
    assert counts["cpu_op"] == 2 and counts["annotation"] == 1 and counts["memcpy"] == 1
    assert counts["memset"] == 1 and counts["sync"] == 1 and counts["gpu_annotation"] == 1

    k = _row(ev, "sm80_gemm")
    # ts 4455129191346.443 µs = 4455129191346443 ns after the base; dur 20.001 µs = 20001 ns.
    assert k["start_ns"] == BASE + 4_455_129_191_346_443
    assert k["end_ns"] == BASE + 4_455_129_191_346_443 + 20_001
    assert round(4455129191346.443 * 1000) == 4_455_129_191_346_444  # why the split is needed
    # GPU rows: device/stream from args, pid = the host process that launched them (joins on
    # (pid, correlation) with the launch), tid -1, lane "stream 7" (one device only).
    assert (k["device"], k["stream"], k["pid"], k["tid"]) == (0, 7, HOST_PID, -1)
    assert k["lane"] == "stream 7" and k["thread_name"] == ""
    launch = _row(ev, "cudaLaunchKernel")
    assert launch["correlation"] == k["correlation"] == 101
    assert (launch["pid"], launch["tid"], launch["device"], launch["stream"]) == (
        HOST_PID,
        MAIN_TID,
        -1,
        -1,
    )
    # 4455129191110.001 µs -> ...110001 ns; 5.25 µs -> 5250 ns.
    assert launch["start_ns"] == BASE + 4_455_129_191_110_001
    assert launch["end_ns"] - launch["start_ns"] == 5_250
    assert launch["lane"] == f"thread {MAIN_TID} (pt_main_thread)"
    assert launch["thread_name"] == "pt_main_thread"
    # The backward thread has no thread_name metadata: bare lane, empty thread name.
    drv = _row(ev, "cuLaunchKernelEx")
    assert drv["lane"] == f"thread {BWD_TID}" and drv["thread_name"] == ""
    assert _row(ev, "Memset (Device)")["correlation"] == -1  # no args.correlation, no flow

    # Collective metadata on the kernel: 1000 BFloat16 elements = 1000 * 2 = 2000 bytes.
    nccl = _row(ev, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
    assert nccl["coll_name"] == "allreduce" and nccl["coll_bytes"] == 2000
    assert nccl["group_size"] == 2 and nccl["process_group"] == "0" and nccl["seq"] == 5
    assert nccl["lane"] == "stream 40"
    # record_param_comms: max(10, 20) Float elements = 20 * 4 = 80 bytes; lowercase "seq".
    rpc = _row(ev, "record_param_comms")
    assert rpc["coll_name"] == "allgather" and rpc["coll_bytes"] == 80
    assert rpc["process_group"] == "1" and rpc["seq"] == 7
    mm = _row(ev, "aten::mm")
    assert (mm["coll_name"], mm["coll_bytes"], mm["seq"], mm["group_size"]) == ("", -1, -1, -1)

    (info,) = tl.traces
    # distributedInfo wins over the "rank7" in the file name.
    assert (info.rank, info.world_size, info.backend) == (1, 4, "nccl")
    assert info.rank_source == "distributedInfo" and info.notes == ()
    assert (ev["rank"] == 1).all()
    assert info.device_kind == "gpu" and info.clock == "unix" and info.format == "kineto"
    assert info.format_version == "1" and info.pid == HOST_PID and info.device == 0
    # Only device 0 runs anything: 85899345920 B = 85.9 GB.
    assert info.devices == ("NVIDIA A100-SXM4-80GB (85.9 GB)",)
    assert info.path.endswith(name)
    assert (ev["end_ns"] >= ev["start_ns"]).all()


def test_several_devices_prefix_gpu_lanes(tmp_path: Path) -> None:
    ev = [
        _x("kernel", "a", 0, 7, 10.0, 1.0, device=0, stream=7, correlation=1),
        _x("kernel", "b", 1, 7, 10.0, 1.0, device=1, stream=7, correlation=2),
    ]
    tl = read_kineto(_write(tmp_path, {"traceEvents": ev}))
    assert sorted(tl.events["lane"].astype(str)) == ["gpu 0 stream 7", "gpu 1 stream 7"]


# ---------------------------------------------------------------------------------------------
# Older traces: integer absolute epoch µs, no correlation in args, flows carry the link.


@pytest.mark.parametrize("flow_cat", ["ac2g", "async_cpu_to_gpu"])
def test_old_style_epoch_us_and_flows(tmp_path: Path, flow_cat: str) -> None:
    t0 = 1_650_000_000_000_000  # integer epoch µs (2022-04-15), > 1e15: absolute unix time
    ev = [
        _x("cpu_op", "aten::add", 500, 501, t0, 30),
        _x("cuda_runtime", "cudaLaunchKernel", 500, 501, t0 + 10, 5),
        _x("kernel", "add_kernel", 0, 7, t0 + 40, 8, device=0, stream=7),
        # The "s" end sits at the launch's start, the "f" end at the kernel's start (same id).
        {"ph": "s", "id": 33, "cat": flow_cat, "name": flow_cat, "pid": 500, "tid": 501},
        {"ph": "f", "id": 33, "cat": flow_cat, "name": flow_cat, "pid": 0, "tid": 7, "bp": "e"},
        # A second launch whose "s" end is inside it (t0+52 in [t0+50, t0+56]): enclosing match.
        _x("cuda_runtime", "cudaMemcpyAsync", 500, 501, t0 + 50, 6),
        _x("gpu_memcpy", "Memcpy DtoD", 0, 7, t0 + 60, 2, device=0, stream=7),
        {"ph": "s", "id": 34, "cat": flow_cat, "name": flow_cat, "pid": 500, "tid": 501},
        {"ph": "f", "id": 34, "cat": flow_cat, "name": flow_cat, "pid": 0, "tid": 7},
        # fwdbwd flows are not launch links.
        {"ph": "s", "id": 99, "cat": "fwdbwd", "name": "fwdbwd", "pid": 500, "tid": 501},
    ]
    ev[3]["ts"], ev[4]["ts"] = t0 + 10, t0 + 40
    ev[7]["ts"], ev[8]["ts"] = t0 + 52, t0 + 60
    ev[9]["ts"] = t0
    tl = read_kineto(_write(tmp_path, {"traceEvents": ev}, "worker_rank-3.json"))
    e = tl.events
    # t0 µs = 1650000000000000 * 1000 ns exactly; dur 8 µs = 8000 ns.
    k = _row(e, "add_kernel")
    assert k["start_ns"] == 1_650_000_000_000_040_000 and k["end_ns"] == 1_650_000_000_000_048_000
    assert _row(e, "cudaLaunchKernel")["correlation"] == 33 and k["correlation"] == 33
    assert _row(e, "cudaMemcpyAsync")["correlation"] == 34
    assert _row(e, "Memcpy DtoD")["correlation"] == 34
    assert _row(e, "aten::add")["correlation"] == -1  # flows bind only to launches / GPU work
    (info,) = tl.traces
    assert info.clock == "unix"
    # No distributedInfo: rank 3 from "rank-3" in the file name, and a note says so.
    assert (info.rank, info.rank_source, info.world_size) == (3, "filename", None)
    assert any("file name" in n for n in info.notes)
    assert any("flow" in n for n in info.notes)
    assert k["pid"] == 500  # the launching process, from the launches' pid


def test_pytorch_18_layout(tmp_path: Path) -> None:
    # PyTorch 1.8 Chrome traces: a bare JSON array, capitalised categories, string tids,
    # "stream 7" tids on GPU rows, ProfilerStep#1 recorded as an "Operator".
    doc = [
        _x("Operator", "ProfilerStep#1", 13721, "123", 50, 400),
        _x("Operator", "aten::mm", 13721, "456", 100, 100),
        _x("Runtime", "cudaLaunchKernel", 13721, "456", 130, 20, correlation=335),
        _x("Kernel", "gemm", 0, "stream 7", 220, 8, correlation=335, device=0),
    ]
    tl = read_kineto(_write(tmp_path, doc, "trace.pt.trace.json"))
    e = tl.events
    assert _row(e, "ProfilerStep#1")["category"] == "annotation"
    assert _row(e, "aten::mm")["category"] == "cpu_op"
    k = _row(e, "gemm")
    # Relative µs (ts 220 < 1e15, no base): 220 µs = 220000 ns, clock relative.
    assert (k["start_ns"], k["end_ns"], k["stream"], k["device"]) == (220_000, 228_000, 7, 0)
    assert k["pid"] == 13721 and k["lane"] == "stream 7"
    assert _row(e, "cudaLaunchKernel")["tid"] == 456
    (info,) = tl.traces
    assert info.clock == "relative"
    # "trace.pt.trace.json" names no rank: assumed 0, with a note.
    assert (info.rank, info.rank_source) == (0, "default") and info.notes


def _tname(pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def test_cpu_only_gloo_trace(tmp_path: Path) -> None:
    ev = [
        # As in our gloo workload traces: the gloo worker is named twice, its own name first,
        # then the name it inherited from the main thread ("python"). The own name wins.
        _tname(9, 11, "thread 11 (pt_gloo_runloop)"),
        _tname(9, 9, "thread 9 (python)"),
        _tname(9, 11, "thread 11 (python)"),
        # The real A100 trace's order for an autograd worker: inherited name first.
        _tname(9, 12, "thread 12 (python)"),
        _tname(9, 12, "thread 12 (pt_autograd_0)"),
        _x("cpu_op", "autograd::engine::evaluate_function", 9, 12, 2.0, 3.0),
        _x("cpu_op", "aten::add", 9, 9, 2.0, 3.0),
        _x("user_annotation", "ProfilerStep#0", 9, 10, 0.0, 100.0),
        _x("cpu_op", "aten::mm", 9, 10, 1.0, 50.0),
        _x("user_annotation", "gloo:all_reduce", 9, 11, 10.0, 80.0),
    ]
    tl = read_kineto(_write(tmp_path, {"traceEvents": ev, "distributedInfo": {"rank": 0}}))
    (info,) = tl.traces
    assert info.device_kind == "cpu" and info.device is None and info.devices == ()
    g = _row(tl.events, "gloo:all_reduce")
    assert g["lane"] == "thread 11 (pt_gloo_runloop)" and g["thread_name"] == "pt_gloo_runloop"
    assert g["device"] == -1 and g["stream"] == -1 and g["pid"] == 9
    assert _row(tl.events, "autograd::engine::evaluate_function")["thread_name"] == "pt_autograd_0"
    assert _row(tl.events, "aten::add")["lane"] == "thread 9 (python)"
    # 80 µs = 80000 ns from 10 µs = 10000 ns.
    assert (g["start_ns"], g["end_ns"]) == (10_000, 90_000)


# ---------------------------------------------------------------------------------------------
# Robustness: the odd things real traces contain.


def test_bare_na_invalid_utf8_and_huge_ints(tmp_path: Path) -> None:
    text = (
        '{"traceEvents": ['
        '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.5, '
        '"dur": 2, "args": {"Input type": N/A, "Comms Id": 18446744073709551615000, '
        '"Seq": N/A}},'
        '{"ph": "X", "cat": "kernel", "name": "k\xff\xfeX", "pid": 0, "tid": 7, "ts": 3, '
        '"dur": 1, "args": {"stream": 7, "correlation": 18446744073709551615}},'
        '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, '
        '"ts": 2, "dur": 0.5, "args": {"correlation": 4}}'
        "]}"
    )
    p = tmp_path / "odd.json"
    # latin-1 keeps \xff\xfe as raw bytes: invalid UTF-8 inside a name.
    p.write_bytes(text.encode("latin-1"))
    tl = read_kineto(p)
    e = tl.events
    mm = _row(e, "aten::mm")
    # ts 1.5 µs = 1500 ns, dur 2 µs = 2000 ns; "Seq": N/A -> no sequence number.
    assert (mm["start_ns"], mm["end_ns"], mm["seq"]) == (1_500, 3_500, -1)
    names = set(e["name"].astype(str))
    assert "k\ufffd\ufffdX" in names  # each undecodable byte became U+FFFD
    k = e[e["category"] == "kernel"].iloc[0]
    # A correlation of 2**64 - 1 does not fit int64: recorded as "none" (-1), not wrapped.
    assert k["correlation"] == -1 and k["stream"] == 7
    assert _row(e, "cudaLaunchKernel")["correlation"] == 4


def test_huge_int_in_a_field_we_read_goes_through_the_lenient_path(tmp_path: Path) -> None:
    ev = [_x("kernel", "k", 0, 7, 1.0, 1.0, stream=7, correlation=10**30)]
    ev.append(_x("cuda_runtime", "cudaLaunchKernel", 5, 5, 0.5, 0.25, correlation="12"))
    # Odd shapes in the same batch: a list as category, null args, a numeric name, a string ts.
    ev.append({"ph": "X", "cat": ["x"], "name": "odd", "pid": 5, "tid": 5, "ts": 1, "dur": 1})
    ev.append(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": 7,
            "pid": 5,
            "tid": 5,
            "ts": "2.5",
            "dur": "1",
            "args": None,
        }
    )
    # No dur at all: dropped and counted, never given duration 0.
    ev.append({"ph": "X", "cat": "cpu_op", "name": "no_dur", "pid": 5, "tid": 5, "ts": 3})
    tl = read_kineto(_write(tmp_path, {"traceEvents": ev}))
    # 10**30 overflows even uint64 -> -1; the string "12" is still the integer 12.
    assert _row(tl.events, "k")["correlation"] == -1
    assert _row(tl.events, "cudaLaunchKernel")["correlation"] == 12
    # The list-category event is dropped; the op named 7 keeps its name as text, ts "2.5" µs
    # -> 2500 ns, dur "1" µs -> end 3500 ns.
    names = set(tl.events["name"].astype(str))
    assert "odd" not in names and "no_dur" not in names
    op = _row(tl.events, "7")
    assert (op["start_ns"], op["end_ns"], op["correlation"]) == (2_500, 3_500, -1)
    (info,) = tl.traces
    assert any(n.startswith("dropped 1 events with unusable ts/dur") for n in info.notes)


@pytest.mark.parametrize(
    "odd",
    [
        [],  # every other phase decodes to an empty struct on the typed path
        [{"ph": "Z", "cat": "cpu_op", "name": "z", "pid": 5, "tid": 5, "ts": 1, "dur": 1}],
        [{"cat": "cpu_op", "name": "no_ph", "pid": 5, "tid": 5, "ts": 1, "dur": 1}],
    ],
    ids=["known phases", "unknown phase", "no ph"],
)
def test_phases_other_than_x_and_m_add_no_rows(tmp_path: Path, odd: list[Any]) -> None:
    # ph is the tag msgspec picks the struct from: flows (s / f), instants (i), counters (C)
    # and async events (b / e) carry the same fields as the X rows but are never rows; an
    # unknown phase or a missing ph sends the chunk to the lenient decoder, which must read the
    # same rows (the two X events) and the thread name from the M event.
    rows = [
        _x("cpu_op", "aten::mm", 5, 6, 1.0, 2.0),
        _x("cuda_runtime", "cudaLaunchKernel", 5, 6, 1.5, 0.5, correlation=3),
    ]
    other = [
        {"ph": "M", "name": "thread_name", "pid": 5, "tid": 6, "args": {"name": "worker"}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "pid": 5, "tid": 6, "ts": 1.5, "id": 3},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 2, "id": 3, "bp": "e"},
        {"ph": "i", "name": "Iteration Start", "pid": 5, "tid": 6, "ts": 1, "s": "t"},
        {"ph": "C", "cat": "cpu_op", "name": "mem", "pid": 5, "ts": 1, "args": {"bytes": 7}},
        {"ph": "b", "cat": "cpu_op", "name": "async", "pid": 5, "tid": 6, "ts": 1, "id": 9},
        {"ph": "e", "cat": "cpu_op", "name": "async", "pid": 5, "tid": 6, "ts": 2, "id": 9},
    ]
    tl = read_kineto(_write(tmp_path, {"traceEvents": other + rows + odd}))
    e = tl.events
    assert e["name"].astype(str).tolist() == ["aten::mm", "cudaLaunchKernel"]
    # ts 1.0 µs -> 1000 ns, dur 2.0 µs -> end 3000 ns; the launch from 1500 to 2000 ns.
    assert e["start_ns"].tolist() == [1_000, 1_500] and e["end_ns"].tolist() == [3_000, 2_000]
    assert e["correlation"].tolist() == [-1, 3]
    assert e["thread_name"].astype(str).tolist() == ["worker", "worker"]


def test_us_to_ns_is_exact() -> None:
    # Decimal reference: ns = ts * 1000 computed exactly from the decimal text.
    texts = ["4455129191346.443", "4433508589109.605", "4468844205959.227", "0.001", "1.5"]
    got = us_to_ns(np.array([float(t) for t in texts]))
    want = [int(Decimal(t) * 1000) for t in texts]
    assert got.tolist() == want
    # Integer epoch µs up to 2**53 are exact too.
    assert us_to_ns(np.array([1_650_000_000_123_456.0])).tolist() == [1_650_000_000_123_456_000]


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("rank-3.json.gz", 3),
        ("rank3.json", 3),
        ("worker_rank3.json", 3),
        ("run_rank_12.pt.trace.json", 12),
        ("Rank-0.json", 0),
        ("trace.json", None),
        ("frank3.json", None),
    ],
)
def test_rank_from_filename(name: str, rank: int | None) -> None:
    assert rank_from_filename(name) == rank


# ---------------------------------------------------------------------------------------------
# Bad input: a TraceFormatError naming the file and saying what is wrong.


def _bad(tmp_path: Path, data: bytes, name: str = "bad.json") -> TraceFormatError:
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(TraceFormatError) as info:
        read_kineto(p)
    assert str(p) in str(info.value)
    return info.value


def test_bad_inputs(tmp_path: Path) -> None:
    good = json.dumps({"traceEvents": [_x("cpu_op", "a", 1, 1, 1.0, 1.0)]}).encode()
    assert "empty" in _bad(tmp_path, b"").reason
    assert "empty" in _bad(tmp_path, b"  \n").reason
    assert "crashed" in _bad(tmp_path, good[: len(good) // 2]).reason
    assert "not JSON" in _bad(tmp_path, b"hello, world\n").reason
    assert "traceEvents" in _bad(tmp_path, b'{"schemaVersion": 1}').reason
    assert "no events" in _bad(tmp_path, b'{"traceEvents": []}').reason
    only_python = {"traceEvents": [_x("python_function", "f", 1, 1, 1.0, 1.0)]}
    assert "no events" in _bad(tmp_path, json.dumps(only_python).encode()).reason
    assert "invalid JSON" in _bad(tmp_path, b'{"traceEvents": [}').reason
    gz = gzip.compress(good)
    assert "gzip" in _bad(tmp_path, gz[:-30], "t.json.gz").reason
    assert "gzip" in _bad(tmp_path, gz[:10] + b"\x00" * 40 + gz[50:], "u.json.gz").reason
    assert "crashed" in _bad(tmp_path, gzip.compress(good[:-5]), "v.json.gz").reason


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="not found"):
        read_kineto(tmp_path / "nope.json")


# ---------------------------------------------------------------------------------------------
# The real A100 trace.


@pytest.mark.skipif(not REAL.exists(), reason=f"shared real traces not present ({REAL})")
def test_real_a100_trace() -> None:
    tl = read_kineto(REAL)
    ev = tl.events
    with gzip.open(REAL, "rt") as f:
        raw = json.load(f, parse_float=Decimal)
    # Expected counts straight from the raw JSON (ph "X" per category).
    want: dict[str, int] = {}
    cat_map = {
        "kernel": "kernel",
        "gpu_memcpy": "memcpy",
        "gpu_memset": "memset",
        "cuda_runtime": "runtime",
        "cpu_op": "cpu_op",
        "user_annotation": "annotation",
        "gpu_user_annotation": "gpu_annotation",
    }
    for e in raw["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in cat_map:
            want[cat_map[e["cat"]]] = want.get(cat_map[e["cat"]], 0) + 1
    got = {k: int(v) for k, v in ev["category"].value_counts().items() if v}
    assert got == want
    # As counted when this test was written: 2700 kernels, 960 memcpy, 114 memset, 8740 runtime.
    assert (got["kernel"], got["memcpy"], got["memset"], got["runtime"]) == (2700, 960, 114, 8740)

    (info,) = tl.traces
    assert (info.rank, info.world_size, info.backend) == (0, 2, "nccl")
    assert info.rank_source == "distributedInfo" and info.device_kind == "gpu"

    # One kernel by hand. Raw JSON: the first ncclKernel_AllReduce has
    #   "ts": 4458677009853.422, "dur": 2636.669, "args": {"correlation": 60047, "stream": 40,
    #   "In msg nelems": 6637568, "dtype": "Float", ...}; baseTimeNanoseconds 1711964646000000000.
    # start = 1711964646000000000 + 4458677009853422 = 1716423323009853422 ns
    # end   = start + 2636669 = 1716423323012490091 ns; bytes = 6637568 * 4 = 26550272.
    k = ev[(ev["correlation"] == 60047) & (ev["category"] == "kernel")].iloc[0]
    assert k["start_ns"] == 1_716_423_323_009_853_422
    assert k["end_ns"] == 1_716_423_323_012_490_091
    assert k["stream"] == 40 and k["coll_name"] == "allreduce" and k["coll_bytes"] == 26_550_272
    assert str(k["name"]).startswith("ncclKernel_AllReduce_RING_LL_Sum_float")
    # Every kernel of this trace has a launch in the same process with the same correlation.
    kern = ev[ev["category"] == "kernel"]
    launches = ev[ev["category"] == "runtime"]
    assert set(kern["correlation"]) <= set(launches["correlation"])
    assert (kern["pid"] == info.pid).all()
    # And every start/end is the exact decimal value: check all kernels against Decimal.
    raw_k = [e for e in raw["traceEvents"] if e.get("cat") == "kernel"]
    base = int(raw["baseTimeNanoseconds"])
    exp_start = sorted(base + int(e["ts"] * 1000) for e in raw_k)
    exp_end = sorted(base + int(e["ts"] * 1000) + int(e["dur"] * 1000) for e in raw_k)
    assert sorted(kern["start_ns"].tolist()) == exp_start
    assert sorted(kern["end_ns"].tolist()) == exp_end


def test_chunked_decode_cuts_only_between_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceoverlap.readers.kineto import _document

    # 300 kernels written one per line as Kineto does; every 7th has a nested args list of
    # objects laid out as "},\n{" too, a boundary look-alike inside an event.
    lines = []
    for i in range(300):
        args: dict[str, Any] = {"stream": 7, "correlation": i}
        ev = json.dumps(_x("kernel", f"k{i}", 0, 7, float(i), 0.5, **args))
        if i % 7 == 3:
            ev = ev[:-2] + ', "shapes": [{"a": 1},\n {"b": 2}]}}'
        lines.append(ev)
    text = '{"traceEvents": [\n' + ",\n".join(lines) + "\n]}"
    p = tmp_path / "t.json"
    p.write_text(text)
    # Tiny chunks: many cuts, some landing on the look-alike (their chunk fails to decode and
    # the rest goes through per-event slices). Either way: the same 300 rows, in file order.
    monkeypatch.setattr(_document, "CHUNK_BYTES", 500)
    ev = read_kineto(p).events
    assert ev["name"].astype(str).tolist() == [f"k{i}" for i in range(300)]
    assert ev["correlation"].tolist() == list(range(300))
    # ts i µs -> i * 1000 ns; dur 0.5 µs -> 500 ns.
    assert ev["start_ns"].tolist() == [i * 1000 for i in range(300)]
    assert (ev["end_ns"] - ev["start_ns"]).eq(500).all()


@pytest.mark.parametrize("decoy", [False, True])
def test_one_pass_layout_path_equals_general_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decoy: bool
) -> None:
    from traceoverlap.readers.kineto import _document

    # Kineto's layout: header, one event per line, then more fields after the array
    # (baseTimeNanoseconds comes last in real traces). The decoy puts a nested "traceEvents"
    # key first: the one-pass path must notice it is not the top-level one and step aside.
    head = '{"schemaVersion": 1,\n'
    if decoy:
        head += ' "meta": {"traceEvents": [{"ph": "X"}]},\n'
    events = [
        json.dumps(_x("kernel", f"k{i}", 0, 7, 1000.0 + i, 0.25, stream=7, correlation=i))
        for i in range(200)
    ]
    tail = (
        '\n  ],\n  "distributedInfo": {"backend": "nccl", "rank": 2, "world_size": 8},\n'
        '  "baseTimeNanoseconds": 1000000000000000000\n}\n'
    )
    p = tmp_path / "t.json"
    p.write_text(head + '  "traceEvents": [\n  ' + ",\n  ".join(events) + tail)
    monkeypatch.setattr(_document, "CHUNK_BYTES", 1000)
    calls: list[bool] = []
    one_pass = _document.read_kineto_layout

    def spy(*a: Any) -> Any:
        out = one_pass(*a)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(_document, "read_kineto_layout", spy)
    fast = read_kineto(p)
    assert calls == [not decoy]
    monkeypatch.setattr(_document, "read_kineto_layout", lambda *a: None)
    slow = read_kineto(p)
    for tl in (fast, slow):
        ev = tl.events
        # ts 1000 + i µs after a base of 1e18 ns: 1e18 + (1000 + i) * 1000 ns; dur 250 ns.
        assert ev["start_ns"].tolist() == [10**18 + (1000 + i) * 1000 for i in range(200)]
        assert (ev["end_ns"] - ev["start_ns"]).eq(250).all()
        assert ev["correlation"].tolist() == list(range(200))
        (info,) = tl.traces
        assert (info.rank, info.world_size, info.clock) == (2, 8, "unix")
    assert fast.traces == slow.traces


def test_multi_member_gzip(tmp_path: Path) -> None:
    # `cat a.gz b.gz` is a valid gzip file whose content is the concatenation: the trace text
    # split in two members (plus zero padding, which gzip tools tolerate) reads as one trace.
    text = json.dumps({"traceEvents": [_x("cpu_op", "aten::mm", 1, 1, 2.0, 3.0)]}).encode()
    p = tmp_path / "rank5.json.gz"
    p.write_bytes(gzip.compress(text[:20]) + gzip.compress(text[20:]) + b"\x00" * 8)
    ev = read_kineto(p).events
    # ts 2 µs -> 2000 ns, dur 3 µs -> end 5000 ns.
    assert ev["start_ns"].tolist() == [2_000] and ev["end_ns"].tolist() == [5_000]
