"""Benchmark: N nested CPU step markers over M ops (issue 21), peak RSS and time of ``analyze``.

Run: ``python benchmarks/bench_nested_steps.py [--markers 4000] [--ops 4000] [--comm]``.

Marker i is ``ProfilerStep#i`` = [i, 2 N + 10 M - i) us, so every marker holds every op
(``aten::mm`` [N + 10 k, N + 10 k + 5) us); ``--comm`` adds one ``gloo:all_reduce`` over all the
ops (M exposed stretches in every window: refused past the cap, docs/robustness.md). Each run is
``traceoverlap analyze FILE --format json -o /dev/null`` in a fresh process; it prints the wall
time, CPU time and peak RSS (``ru_maxrss`` of the child). Measured 24 Nov 2026 on the 2-core
shared machine, 4,000 x 4,000: 96 MB, 0.7 s CPU for the whole command (before: refused past 4M pairs; with
that cap lifted, 3.2 GB and 35 s).

Not a test: its numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_trace(path: Path, markers: int, ops: int, comm: bool) -> None:
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
         "ts": i, "dur": 2 * markers + 10 * ops - 2 * i}
        for i in range(markers)
    ] + [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2,
         "ts": markers + 10 * k, "dur": 5}
        for k in range(ops)
    ]  # fmt: skip
    if comm:
        ev.append(
            {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": 1, "tid": 3,
             "ts": markers, "dur": 10 * ops}
        )  # fmt: skip
    doc = {"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1}, "traceEvents": ev}
    path.write_text(json.dumps(doc))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markers", type=int, default=4000)
    ap.add_argument("--ops", type=int, default=4000)
    ap.add_argument("--comm", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        trace = Path(d) / "nested.json"
        write_trace(trace, args.markers, args.ops, args.comm)
        cmd = [sys.executable, "-m", "traceoverlap", "analyze", str(trace), "--format", "json"]
        cmd += ["-o", os.devnull]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"{args.markers} nested markers x {args.ops} ops{' + 1 collective' if args.comm else ''}")
    print(
        f"exit {proc.returncode}; wall {wall:.2f} s; cpu {ru.ru_utime + ru.ru_stime:.2f} s; "
        f"peak RSS {ru.ru_maxrss / 1024:.0f} MB"
    )
    if proc.returncode:
        print(proc.stderr.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
