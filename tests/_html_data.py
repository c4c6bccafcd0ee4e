"""Hand-built DDP-like timelines for the HTML report tests (see test_html_report.py)."""

from __future__ import annotations

import numpy as np

from traceoverlap.core.model import Timeline, TraceInfo, concat_timelines, make_events

MS = 1_000_000


def ddp_rank(rank: int, allreduce_ms: int = 6, steps: int = 2, memcpy_ms: int = 2) -> Timeline:
    """The metrics.md worked example, once per step, on a GPU rank.

    Per step (times from the step's origin t0, ms): 10 backward kernels of 5 ms on stream 7,
    [0, 50); after every second layer a bucket all-reduce of ``allreduce_ms`` on stream 40 starting
    when the bucket is ready: at 10, 20, 30, 40, 50. From step 2 on, a memcpy of ``memcpy_ms`` on
    stream 7 right after the last all-reduce ends. Each GPU activity has a launch (runtime row,
    same pid and correlation) 1 ms before the kernel, inside the ProfilerStep marker
    [t0 - 2, t0 + 70). Steps are 100 ms apart. Phase ranges on the GPU: "## backward ##" [0, 50).
    """
    names, cats, starts, ends, streams, tids, corrs, colls, nbytes, lanes = ([] for _ in range(10))
    corr = 1

    def add(name, cat, s, e, stream=-1, tid=-1, c=-1, coll="", nb=-1, lane=""):
        names.append(name)
        cats.append(cat)
        starts.append(s)
        ends.append(e)
        streams.append(stream)
        tids.append(tid)
        corrs.append(c)
        colls.append(coll)
        nbytes.append(nb)
        lanes.append(lane)

    for k in range(steps):
        t0 = 1_000 * MS + k * 100 * MS
        step_no = k + 1
        add(
            f"ProfilerStep#{step_no}",
            "annotation",
            t0 - 2 * MS,
            t0 + 70 * MS,
            tid=11,
            lane="thread 11",
        )
        add("## backward ##", "gpu_annotation", t0, t0 + 50 * MS, stream=7, lane="stream 7")
        acts = [
            (
                f"void backward_layer_kernel<float, {i}>(float*, int)",
                t0 + 5 * i * MS,
                t0 + 5 * (i + 1) * MS,
                7,
                "",
                -1,
                "kernel",
            )
            for i in range(10)
        ]
        for b in range(5):
            s = t0 + 10 * (b + 1) * MS
            acts.append(
                (
                    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                    s,
                    s + allreduce_ms * MS,
                    40,
                    "allreduce",
                    4 * 2**20 * (b + 1),
                    "kernel",
                )
            )
        if k >= 1 and memcpy_ms:
            s = t0 + (50 + allreduce_ms) * MS
            acts.append(
                ("Memcpy DtoH (Device -> Pinned)", s, s + memcpy_ms * MS, 7, "", -1, "memcpy")
            )
        for name, s, e, stream, coll, nb, cat in acts:
            add(
                "cudaLaunchKernel",
                "runtime",
                s - MS,
                s - MS + 10_000,
                tid=11,
                c=corr,
                lane="thread 11",
            )
            add(name, cat, s, e, stream=stream, c=corr, coll=coll, nb=nb, lane=f"stream {stream}")
            corr += 1
    n = len(names)
    ev = make_events(
        n,
        {
            "rank": rank,
            "pid": 100 + rank,
            "device": np.where(np.array(streams) >= 0, rank, -1),
            "stream": streams,
            "tid": tids,
            "lane": lanes,
            "category": cats,
            "name": names,
            "start_ns": starts,
            "end_ns": ends,
            "correlation": corrs,
            "coll_name": colls,
            "coll_bytes": nbytes,
            "group_size": np.where(np.array(colls) != "", 2, -1),
        },
    )
    info = TraceInfo(
        path=f"run/rank{rank}.json.gz",
        format="kineto",
        rank=rank,
        world_size=2,
        backend="nccl",
        rank_source="distributedInfo",
        device_kind="gpu",
        devices=("NVIDIA A100-SXM4-80GB",),
        format_version="1.0.1",
        clock="unix",
    )
    return Timeline(ev, (info,))


def ddp_run(n_ranks: int = 2, steps: int = 2) -> Timeline:
    """``n_ranks`` ranks; rank r's all-reduces take 6 + r ms (rank 1 exposes more)."""
    return concat_timelines([ddp_rank(r, 6 + r, steps) for r in range(n_ranks)])


def dense_rank(n_kernels: int = 100_000, comm_every: int = 1000) -> Timeline:
    """One step of ``n_kernels`` compute kernels of 2 µs with 1 µs gaps on stream 7 (kernel i at
    3i µs), and a 50 µs all-reduce on stream 40 starting with every ``comm_every``-th kernel.
    Every activity has a launch 1 µs before it inside the ProfilerStep#1 marker."""
    us = 1_000
    t0 = 10**12
    i = np.arange(n_kernels, dtype=np.int64)
    ks = t0 + 3 * us * i
    ke = ks + 2 * us
    c = i[::comm_every]
    cs = t0 + 3 * us * c
    ce = cs + 50 * us
    n_act = n_kernels + c.size
    starts = np.concatenate((ks, cs))
    ends = np.concatenate((ke, ce))
    corr = np.arange(1, n_act + 1, dtype=np.int64)
    marker_end = int(ends.max()) + us
    n = 2 * n_act + 1
    kernel_names = np.array(
        ["void dense_kernel<float>(float*, int)"] * n_kernels
        + ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"] * c.size,
        dtype=object,
    )
    return Timeline(
        make_events(
            n,
            {
                "rank": 0,
                "pid": 7,
                "device": np.concatenate((np.zeros(n_act, np.int64), np.full(n_act + 1, -1))),
                "stream": np.concatenate(
                    (np.full(n_kernels, 7), np.full(c.size, 40), np.full(n_act + 1, -1))
                ),
                "tid": np.concatenate((np.full(n_act, -1), np.full(n_act + 1, 11))),
                "lane": np.concatenate(
                    (
                        np.array(["stream 7"] * n_kernels + ["stream 40"] * c.size, dtype=object),
                        np.array(["thread 11"] * (n_act + 1), dtype=object),
                    )
                ),
                "category": np.array(
                    ["kernel"] * n_act + ["runtime"] * n_act + ["annotation"], dtype=object
                ),
                "name": np.concatenate(
                    (
                        kernel_names,
                        np.array(["cudaLaunchKernel"] * n_act + ["ProfilerStep#1"], dtype=object),
                    )
                ),
                "start_ns": np.concatenate((starts, starts - us, [t0 - 2 * us])),
                "end_ns": np.concatenate((ends, starts - us + 500, [marker_end])),
                "correlation": np.concatenate((corr, corr, [-1])),
            },
        ),
        (TraceInfo(path="dense.json", format="kineto", rank=0, device_kind="gpu", clock="unix"),),
    )
