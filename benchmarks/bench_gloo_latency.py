"""Benchmark: how steady a small gloo transfer is on this machine (docs/whatif.md, Measured).

Run: ``python benchmarks/bench_gloo_latency.py [--kb 133] [--iters 150]`` (needs torch: the
``workloads`` extra).

A what-if keeps each collective's transfer after its last arrival as the trace shows it. Where
the machine itself makes that transfer vary (scheduling of gloo's threads, wake-ups of idle
vCPUs), a slow-rank run and its rerun without the straggler differ by more than the straggler.
This prints, for two local gloo processes: a plain TCP ping-pong of the same size (the link),
then a gloo all-reduce back to back, after both processes sleep 3 ms, with two in flight at once,
and a send/recv pair. Per case: median, 90th percentile and max (ms), and how many of the timed
iterations took over 2 ms. Not a test: the numbers describe the machine.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from typing import Any

CASES = ("allreduce", "allreduce-after-idle", "two-in-flight", "send-recv")
SLOW_MS = 2.0


def _summary(name: str, ms: list[float]) -> str:
    ms = sorted(ms)
    slow = sum(x > SLOW_MS for x in ms)
    return (
        f"  {name:<26} median {statistics.median(ms):6.2f}  p90 {ms[int(0.9 * len(ms))]:6.2f}  "
        f"max {ms[-1]:6.2f} ms   over {SLOW_MS:g} ms: {slow}/{len(ms)}"
    )


def _tcp_ping_pong(nbytes: int, iters: int) -> list[float]:
    """Round trip of ``nbytes`` each way between two processes over loopback TCP."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    data = b"x" * nbytes

    def recv_all(s: socket.socket) -> None:
        buf = bytearray(nbytes)
        view, got = memoryview(buf), 0
        while got < nbytes:
            got += s.recv_into(view[got:])

    pid = os.fork()
    if pid == 0:
        c = socket.create_connection(("127.0.0.1", port))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(iters):
            recv_all(c)
            c.sendall(data)
        os._exit(0)
    s, _ = srv.accept()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    for _ in range(iters):
        t = time.perf_counter()
        s.sendall(data)
        recv_all(s)
        out.append((time.perf_counter() - t) * 1e3)
        time.sleep(0.003)
    os.waitpid(pid, 0)
    return out


def _worker(rank: int, port: int, kb: int, iters: int, loop: str, q: Any) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    if loop == "idle":
        from traceoverlap_workloads.train import idle_gloo_loops

        idle_gloo_loops()
    a, b = torch.ones(kb * 256), torch.ones(kb * 256)  # kb KiB of float32 each
    results = {}
    for case in CASES:
        times = []
        for _ in range(iters + 2):
            dist.barrier()
            if case == "allreduce-after-idle":
                time.sleep(0.003)
            t = time.perf_counter()
            if case == "two-in-flight":
                works = [dist.all_reduce(x, async_op=True) for x in (a, b)]
                for w in works:
                    w.wait()
            elif case == "send-recv":
                if rank == 0:
                    dist.send(a, 1)
                    dist.recv(a, 1)
                else:
                    dist.recv(a, 0)
                    dist.send(a, 0)
            else:
                dist.all_reduce(a)
            times.append((time.perf_counter() - t) * 1e3)
        results[case] = times[2:]  # the first two warm the connections up
    if rank == 0:
        q.put(results)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--kb",
        type=int,
        default=133,
        help="transfer size, KiB (default: a DDP "
        "bucket of the default GPT workload, 33,216 floats)",
    )
    ap.add_argument("--iters", type=int, default=150, help="timed iterations per case")
    ap.add_argument("--port", type=int, default=29541)
    ap.add_argument(
        "--loop",
        choices=("default", "idle"),
        default="default",
        help="idle: the gloo TCP loop threads at SCHED_IDLE (the workloads' --gloo-loop idle)",
    )
    args = ap.parse_args()
    try:
        import torch.multiprocessing as mp
    except ImportError:
        sys.exit("bench_gloo_latency: needs torch (pip install -e '.[workloads]')")
    print(
        f"{os.cpu_count()} cores; {args.kb} KiB, {args.iters} iterations per case; "
        f"gloo loop threads: {args.loop}"
    )
    print(_summary("tcp ping-pong", _tcp_ping_pong(args.kb * 1024, args.iters)))
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(r, args.port, args.kb, args.iters, args.loop, q))
        for r in range(2)
    ]
    for p in procs:
        p.start()
    results = q.get()
    for p in procs:
        p.join()
    for case in CASES:
        print(_summary(f"gloo {case}", results[case]))


if __name__ == "__main__":
    main()
