"""Build small Timelines by hand for tests (answers are derived in each test's comments)."""

from __future__ import annotations

from collections.abc import Sequence

from traceoverlap.core.model import Timeline, TraceInfo, make_events

MS = 1_000_000


def gpu_timeline(
    kernels: Sequence[tuple[str, int, int, int] | tuple[str, int, int, int, int]],
    steps: Sequence[tuple[str, int, int]] = (),
    launch_at: Sequence[int] | None = None,
    rank: int = 0,
    memcpy: Sequence[tuple[int, int, int]] = (),
) -> Timeline:
    """kernels: (name, stream, start_ns, end_ns[, shape]) (shape: the launch shape code, default
    -1); steps: (marker name, start_ns, end_ns) host ranges.

    Each kernel/memcpy gets a cudaLaunchKernel row with its own correlation id, launched at
    ``launch_at[i]`` (default: inside the first step marker, or at 0).
    """
    rows: list[dict[str, object]] = []
    for name, s, e in steps:
        rows.append(
            dict(category="annotation", name=name, start_ns=s, end_ns=e, tid=1, lane="thread 1")
        )
    acts = [(k[0], k[1], k[2], k[3], "kernel", k[4] if len(k) > 4 else -1) for k in kernels] + [
        ("Memcpy DtoD", st, s, e, "memcpy", -1) for st, s, e in memcpy
    ]
    default_launch = steps[0][1] if steps else 0
    for i, (name, stream, s, e, cat, shape) in enumerate(acts):
        corr = i + 1
        t = launch_at[i] if launch_at is not None else default_launch
        rows.append(
            dict(
                category="runtime",
                name="cudaLaunchKernel",
                start_ns=t,
                end_ns=t + 1,
                correlation=corr,
                tid=1,
                lane="thread 1",
            )
        )
        rows.append(
            dict(
                category=cat,
                name=name,
                start_ns=s,
                end_ns=e,
                correlation=corr,
                stream=stream,
                device=0,
                lane=f"stream {stream}",
                shape=shape,
            )
        )
    return _timeline(rows, rank, "gpu")


def cpu_timeline(events: Sequence[tuple[str, str, str, int, int]], rank: int = 0) -> Timeline:
    """events: (category, name, thread_name, start_ns, end_ns) host events (gloo-style CPU run)."""
    rows = []
    for cat, name, thread, s, e in events:
        tid = 2 if thread else 1
        rows.append(
            dict(
                category=cat,
                name=name,
                thread_name=thread,
                start_ns=s,
                end_ns=e,
                tid=tid,
                lane=f"thread {tid}",
            )
        )
    return _timeline(rows, rank, "cpu")


def _timeline(rows: list[dict[str, object]], rank: int, device_kind: str) -> Timeline:
    defaults = {
        "correlation": -1,
        "stream": -1,
        "device": -1,
        "tid": -1,
        "lane": "",
        "thread_name": "",
        "shape": -1,
    }
    cols = {
        k: [r.get(k, defaults.get(k)) for r in rows]
        for k in (
            "category",
            "name",
            "start_ns",
            "end_ns",
            "correlation",
            "stream",
            "device",
            "tid",
            "lane",
            "thread_name",
            "shape",
        )
    }
    cols["rank"] = [rank] * len(rows)  # type: ignore[list-item]
    ev = make_events(len(rows), cols)
    info = TraceInfo(
        path=f"hand-built-rank{rank}", format="kineto", rank=rank, device_kind=device_kind
    )
    return Timeline(ev, (info,))


#: the gloo worker threads of :func:`gloo_rank` (tid 1 is the main thread)
GLOO_THREADS = (10, 11)


def gloo_rank(
    rank: int,
    rows: Sequence[tuple],  # type: ignore[type-arg]
    markers: Sequence[tuple[int, int, int]] = ((1, 0, 100),),
    world: int = 2,
    groups: tuple[tuple[str, tuple[int, ...]], ...] | None = None,
    threads: tuple[int, ...] = GLOO_THREADS,
) -> Timeline:
    """A CPU (gloo) rank of a ``world``-rank run: rows (category, name, tid, start ms, end ms[,
    message bytes or -1[, peer rank in the group, tag]]: the peer and tag a ``c10d::send`` /
    ``c10d::recv_`` records, -1 for none), tid 1 the main thread, ``threads`` the gloo workers; markers (step
    number, start ms, end ms) as ``ProfilerStep#N`` ranges on the main thread; ``groups`` its
    ``pg_config`` (default: one group '0' of every rank)."""
    import numpy as np

    marks = [("annotation", f"ProfilerStep#{n}", 1, s, e) for n, s, e in markers]
    full = [(*r, -1, -1, -1)[:8] for r in [*marks, *rows]]
    cat, name, tid, start, end, nbytes, peer, tag = (list(x) for x in zip(*full, strict=True))
    tname = ["pt_gloo_runloop" if t in threads else "python" for t in tid]
    ev = make_events(
        len(full),
        {
            "rank": rank,
            "pid": 100 + rank,
            "category": cat,
            "name": name,
            "tid": tid,
            "thread_name": tname,
            "lane": [f"thread {t} ({n})" for t, n in zip(tid, tname, strict=True)],
            "start_ns": np.array(start, dtype=np.int64) * MS,
            "end_ns": np.array(end, dtype=np.int64) * MS,
            "coll_bytes": np.array(nbytes, dtype=np.int64),
            "peer_rank": np.array(peer, dtype=np.int32),
            "p2p_tag": np.array(tag, dtype=np.int64),
        },
    )
    info = TraceInfo(
        path=f"rank{rank}.json",
        format="kineto",
        rank=rank,
        world_size=world,
        backend="gloo",
        rank_source="distributedInfo",
        clock="unix",
        process_groups=(("0", tuple(range(world))),) if groups is None else groups,
        gloo_threads=threads,
    )
    return Timeline(ev, (info,))
