"""Benchmark: a large real-shaped Kineto trace, read and analyzed, side by side with the parse floor.

Run: ``python benchmarks/bench_analyze.py [--mb 143 527] [--keep DIR] [--repeat 3]``.

For each size it builds a trace from the shared real trace
(``$TRACEOVERLAP_REAL_TRACES/kineto/a100_nccl_allreduce_rank0.json.gz``, default
``../shared/real-traces``) repeated with shifted times, re-numbered correlation / flow / external
ids and step numbers (whole copies: the size lands a little above the target), then measures,
each in its own fresh process (wall, CPU = user + sys, peak RSS):

- the floor: ``python`` + a minimal msgspec typed decode of the same bytes (only the fields the
  analysis needs), with ``gc=False`` structs (the fastest typed decode msgspec offers; the
  issue's "whole-process floor") and with plain structs;
- ``read_kineto`` alone (the reader's own cost, imports included, and in-process);
- ``traceoverlap analyze FILE --format json -o /dev/null`` (the whole command).

and prints the ratios to the floor (target: analyze <= 1.5x the gc=False floor's whole process,
in CPU). Best of ``--repeat`` runs by wall time: the machine is shared, the least disturbed run
is the most telling.

Not a test: it takes minutes and its numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REAL = (
    Path(os.environ.get("TRACEOVERLAP_REAL_TRACES", str(REPO.parent / "shared" / "real-traces")))
    / "kineto"
    / "a100_nccl_allreduce_rank0.json.gz"
)

# The floor: decode exactly the fields the reader needs into typed structs and nothing else.
# argv[2] == "nogc" uses gc=False structs (untracked by the cycle collector), the fastest typed
# decode msgspec offers; the plain one is what "a minimal typed decode" usually means.
FLOOR_CODE = r"""
import sys, time, msgspec
gc_flag = sys.argv[2] != "nogc"
class Args(msgspec.Struct, gc=gc_flag):
    device: int | None = None
    stream: int | None = None
    correlation: int | None = None
    name: str | None = None
class Event(msgspec.Struct, gc=gc_flag):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    id: int | str | None = None
    args: Args | None = None
class Trace(msgspec.Struct):
    traceEvents: list[Event] = []
t0, c0 = time.perf_counter(), time.process_time()
with open(sys.argv[1], "rb") as f:
    data = f.read()
trace = msgspec.json.Decoder(Trace).decode(data)
t1, c1 = time.perf_counter(), time.process_time()
print(f"{t1 - t0:.6f} {len(trace.traceEvents)} {c1 - c0:.6f}")
"""

READER_CODE = r"""
import sys, time
t0 = time.perf_counter()
from traceoverlap.readers.kineto import read_kineto
t1, c1 = time.perf_counter(), time.process_time()
tl = read_kineto(sys.argv[1])
t2, c2 = time.perf_counter(), time.process_time()
print(f"{t2 - t1:.6f} {len(tl.events)} {t1 - t0:.6f} {c2 - c1:.6f}")
"""


def _shift_event(ev: dict[str, Any], k: int, dt_us: int, id_step: int, step_shift: int) -> None:
    if "ts" in ev and ev.get("ph") != "M":
        ev["ts"] = round(ev["ts"] + k * dt_us, 3)
    if "id" in ev and isinstance(ev["id"], int):
        ev["id"] += k * id_step
    args = ev.get("args")
    if isinstance(args, dict):
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int):
                args[key] += k * id_step
    name = ev.get("name", "")
    if isinstance(name, str) and name.startswith("ProfilerStep#"):
        ev["name"] = f"ProfilerStep#{int(name[13:]) + k * step_shift}"


def build_trace(out: Path, target_mb: float) -> tuple[int, int]:
    """Write a ~``target_mb`` MB trace to ``out``; return (copies, events)."""
    with gzip.open(REAL, "rb") as f:
        raw = f.read()
    doc = json.loads(raw)
    events = doc["traceEvents"]
    timed = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    t_min = min(e["ts"] for e in timed)
    t_max = max(e["ts"] + e.get("dur", 0) for e in timed)
    dt_us = int(t_max - t_min) + 1000  # copies follow each other with a 1 ms gap
    ids = [e["id"] for e in events if isinstance(e.get("id"), int)]
    ids += [
        e["args"][k]
        for e in events
        if isinstance(e.get("args"), dict)
        for k in ("correlation", "External id")
        if isinstance(e["args"].get(k), int)
    ]
    id_step = max(ids) + 1
    steps = [
        int(e["name"][13:]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    step_shift = max(steps) - min(steps) + 1
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    n = 0
    copies = 0
    with open(out, "w", encoding="utf-8") as f:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        f.write("{\n")
        for key, value in head.items():
            f.write(f"  {json.dumps(key)}: {json.dumps(value)},\n")
        f.write('  "traceEvents": [\n')
        first = True
        # Whole copies until the target size is reached (the last copy may overshoot a little).
        while f.tell() < target_mb * 1e6:
            k = copies
            for ev in (meta if k == 0 else []) + body:
                e = json.loads(json.dumps(ev)) if k else ev
                if k:
                    _shift_event(e, k, dt_us, id_step, step_shift)
                # Kineto writes one event over several indented lines; keep the byte shape.
                f.write(("  " if first else ",\n  ") + "{\n    " + json.dumps(e)[1:-1] + "\n  }")
                first = False
                n += 1
            copies += 1
        f.write("\n  ]\n}\n")
    return copies, n


class Run:
    """One child process: wall and CPU (user + sys) seconds, peak RSS MB, stdout."""

    def __init__(self, wall: float, cpu: float, rss_mb: float, out: str) -> None:
        self.wall, self.cpu, self.rss_mb, self.out = wall, cpu, rss_mb, out


def _child(argv: list[str]) -> Run:
    # /usr/bin/time -f %M gives each child's own peak RSS; RUSAGE_CHILDREN's ru_maxrss is the
    # max over all children so far, used only when GNU time is missing.
    if os.path.exists("/usr/bin/time"):
        argv = ["/usr/bin/time", "-f", "MAXRSS_KB=%M", *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 3):  # 3: a --fail-if gate, still a full analysis
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"child failed ({proc.returncode}): {' '.join(argv)}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rss_mb = after.ru_maxrss / 1024
    for line in proc.stderr.splitlines():
        if line.startswith("MAXRSS_KB="):
            rss_mb = int(line.split("=", 1)[1]) / 1024
    return Run(wall, cpu, rss_mb, proc.stdout)


def _measure(path: Path, repeat: int, reader_only: bool) -> dict[str, Run]:
    py = sys.executable

    def best(argv: list[str]) -> Run:
        return min((_child(argv) for _ in range(repeat)), key=lambda r: r.wall)

    out: dict[str, Run] = {}
    for flavour in ("nogc", "gc"):
        out[f"floor_{flavour}"] = best([py, "-c", FLOOR_CODE, str(path), flavour])
    out["read"] = best([py, "-c", READER_CODE, str(path)])
    if not reader_only:
        cmd = [py, "-m", "traceoverlap", "analyze", str(path), "--format", "json"]
        out["analyze"] = best([*cmd, "-o", os.devnull])
    return out


def _report(size_mb: float, runs: dict[str, Run]) -> None:
    floor = runs["floor_nogc"]
    print(f"\n== {size_mb:.0f} MB ==")
    print(f"{'':44s} {'wall s':>7s} {'CPU s':>7s} {'RSS MB':>7s} {'x floor CPU':>12s}")
    labels = {
        "floor_nogc": "floor: python + msgspec decode (gc=False)",
        "floor_gc": "floor: python + msgspec decode (plain)",
        "read": "python + import + read_kineto",
        "analyze": "traceoverlap analyze --format json",
    }
    for key, label in labels.items():
        if key in runs:
            r = runs[key]
            print(
                f"{label:44s} {r.wall:7.2f} {r.cpu:7.2f} {r.rss_mb:7.0f} {r.cpu / floor.cpu:11.2f}x"
            )
    wall_s, n_ev, cpu_s = runs["floor_nogc"].out.split()
    rd_s, rd_n, imp_s, rd_cpu = runs["read"].out.split()
    print(
        f"in-process: floor decode {float(cpu_s):.2f} s CPU [{n_ev} events]; read_kineto "
        f"{float(rd_cpu):.2f} s CPU [{rd_n} rows] (+{float(imp_s):.2f} s imports), "
        f"{float(rd_cpu) / float(cpu_s):.2f}x the decode"
    )
    if "analyze" in runs:
        ratio = runs["analyze"].cpu / floor.cpu
        verdict = "meets" if ratio <= 1.5 else "misses"
        print(f"analyze / floor (whole processes, CPU): {ratio:.2f}x -> {verdict} the 1.5x target")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, nargs="+", default=[143.0, 527.0], help="target sizes, MB")
    ap.add_argument("--keep", type=Path, help="write the traces here and keep them")
    ap.add_argument("--reader-only", action="store_true", help="skip the analyze command")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; best is kept")
    opts = ap.parse_args()
    if not REAL.exists():
        raise SystemExit(f"real trace not found: {REAL}")
    tmp = None
    if opts.keep:
        opts.keep.mkdir(parents=True, exist_ok=True)
        folder = opts.keep
    else:
        tmp = tempfile.TemporaryDirectory()
        folder = Path(tmp.name)
    try:
        for mb in opts.mb:
            path = folder / f"big_{mb:.0f}mb_rank0.json"
            if not path.exists():
                t0 = time.perf_counter()
                copies, n = build_trace(path, mb)
                print(
                    f"built {path} ({copies} copies, {n} events) in "
                    f"{time.perf_counter() - t0:.1f} s"
                )
            size_mb = path.stat().st_size / 1e6
            _report(size_mb, _measure(path, opts.repeat, opts.reader_only))
            if tmp is not None:
                path.unlink()
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
