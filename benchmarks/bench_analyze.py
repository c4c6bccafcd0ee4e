"""Benchmark: a large real-shaped Kineto trace, read and analyzed, side by side with the parse floor.

Run: ``python benchmarks/bench_analyze.py [--mb 143 527] [--keep DIR] [--repeat 3]
[--compare-with CHECKOUT] [--breakdown]``.

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

and prints each ratio to the floor next to its target (analyze <= 1.5x the gc=False floor's
whole process, in CPU). The runs are interleaved (one of each measurement per round, ``--repeat``
rounds) and the best by CPU is kept: the machine is shared, the least disturbed run is the most
telling, and interleaving gives each measurement the same chances.

``--compare-with CHECKOUT`` also runs ``read_kineto`` and ``analyze`` from another source
checkout (e.g. ``git worktree add /tmp/before main``), side by side in the same rounds. Every
child imports its checkout from a neutral working folder with that checkout first on
``PYTHONPATH``, and with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` unset; one untimed
warm-up run each), as after ``pip install``: compiling the package's modules on every run would
add ~0.05 s CPU to each child that a user never pays.

``--breakdown`` then times the phases of ``analyze`` (imports, decode, columns, Timeline,
analysis, reduce, report, exit) in one process per checkout, best of ``--repeat``.

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
#: The floor's typed structs: exactly the fields the reader needs (``gc_flag`` set by the code
#: that includes them). bench_corpus.py's floor decodes with the same structs.
FLOOR_STRUCTS = r"""
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
"""
FLOOR_CODE = (
    r"""
import sys, time, msgspec
gc_flag = sys.argv[2] != "nogc"
"""
    + FLOOR_STRUCTS
    + r"""t0, c0 = time.perf_counter(), time.process_time()
with open(sys.argv[1], "rb") as f:
    data = f.read()
trace = msgspec.json.Decoder(Trace).decode(data)
t1, c1 = time.perf_counter(), time.process_time()
print(f"{t1 - t0:.6f} {len(trace.traceEvents)} {c1 - c0:.6f}")
"""
)

# Prints: read wall s, rows, CPU s of the interpreter's start and the imports, read CPU s.
READER_CODE = r"""
import sys, time
sys.path.insert(0, sys.argv[2])
from traceoverlap.readers.kineto import read_kineto
t1, c1 = time.perf_counter(), time.process_time()
tl = read_kineto(sys.argv[1])
t2, c2 = time.perf_counter(), time.process_time()
print(f"{t2 - t1:.6f} {len(tl.events)} {c1:.6f} {c2 - c1:.6f}")
"""


# ``--breakdown``: where the CPU of ``analyze`` goes, phase by phase, in one process that runs
# the command as ``python -m traceoverlap`` does (its exit included): the modules ``analyze``
# imports before reading are imported first, then the phases are timed by wrapping the
# functions that run them. An exit handler reports; the parent adds the whole process's CPU.
BREAKDOWN_CODE = r"""
import atexit, sys, time
sys.path.insert(0, sys.argv[2])
c0 = time.process_time()
import traceoverlap.cli as cli
try:  # the stage packages (issue 34), or a checkout from before them
    from traceoverlap.run import analysis, gate, parallel
    from traceoverlap.rank import unit as rankmap
except ImportError:
    from traceoverlap import analysis, gate, inputs, rankmap
from traceoverlap.readers import kineto
from traceoverlap.reporters import json_report
c1 = time.process_time()
import traceoverlap.readers as rd
from traceoverlap.readers.kineto import _columns, _document, _table
acc = dict.fromkeys(
    ("scan", "decode", "columns", "table", "read", "unit", "reduce", "render"), 0.0
)
def wrap(owner, name, key):
    f = getattr(owner, name)
    def timed(*a, **k):
        c = time.process_time()
        try:
            return f(*a, **k)
        finally:
            acc[key] += time.process_time() - c
    setattr(owner, name, timed)
if hasattr(_columns.Columns, "add_scanned"):  # a checkout with the C scanner
    wrap(_columns.Columns, "add_scanned", "scan")
wrap(_document, "decode_chunk", "decode")
wrap(_columns.Columns, "add", "columns")
wrap(_table, "build_timeline", "table")
kineto.build_timeline = _table.build_timeline
wrap(rd, "read_trace", "read")
wrap(rankmap, "analyze_unit", "unit")
wrap(analysis, "_reduce", "reduce")
wrap(json_report, "render", "render")
def report():
    acc.update(start=c0, imports=c1 - c0, end=time.process_time())
    sys.stderr.write("PHASES " + " ".join(f"{k}={v:.6f}" for k, v in acc.items()) + "\n")
    sys.stderr.flush()
atexit.register(report)
sys.argv = ["traceoverlap", "analyze", sys.argv[1], "--format", "json", "-o", "/dev/null"]
import traceoverlap.__main__ as entry
getattr(entry, "run", cli.main)()
"""

PHASES = (
    ("interpreter start", "start"),
    ("imports before reading a byte", "imports"),
    ("read: C scanner (events -> columns)", "scan"),
    ("read: msgspec decode of the events", "decode"),
    ("read: structs -> numpy columns", "columns"),
    ("read: the rest (chunk cuts, tail, freeing)", "read_rest"),
    ("read: Timeline build", "table"),
    ("per-rank analysis", "unit"),
    ("reduce (matching, findings, summaries)", "reduce"),
    ("JSON report", "render"),
    ("CLI, writing, the rest", "rest"),
    ("exit (after the exit handlers)", "exit"),
)


def _phases(run: Run, stderr: str) -> dict[str, float]:
    line = next(x for x in stderr.splitlines() if x.startswith("PHASES "))
    d = {k: float(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    d["read_rest"] = d["read"] - d["scan"] - d["decode"] - d["columns"] - d["table"]
    d["rest"] = d["end"] - d["start"] - d["imports"] - d["read"]
    d["rest"] -= d["unit"] + d["reduce"] + d["render"]
    d["exit"] = run.cpu - d["end"]
    return d


def breakdown(path: Path, repeat: int, compare: Path | None) -> None:
    """Print where the CPU of ``analyze`` goes (best whole run by CPU), per checkout."""
    checkouts = [REPO] + ([compare] if compare else [])
    best: dict[Path, tuple[Run, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as cwd:
        for round_ in range(repeat + 1):
            for checkout in checkouts:
                argv = [sys.executable, "-c", BREAKDOWN_CODE, str(path), str(checkout)]
                proc_run, stderr = _child_err(argv, _env(checkout), cwd)
                if round_ and (checkout not in best or proc_run.cpu < best[checkout][0].cpu):
                    best[checkout] = (proc_run, _phases(proc_run, stderr))
    print(f"\n== where the CPU of analyze goes (best of {repeat}) ==")
    head = "".join(f" {c.name[:18]:>18s}" for c in checkouts)
    print(f"{'phase':46s}{head}")
    for label, key in PHASES:
        print(f"{label:46s}" + "".join(f" {best[c][1][key]:18.3f}" for c in checkouts))
    print(f"{'whole process':46s}" + "".join(f" {best[c][0].cpu:18.3f}" for c in checkouts))


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
    """One child process: wall and CPU (user + sys) seconds, peak RSS MB, stdout; ``phases``: its
    CPU by phase where it printed them (benchmarks/phases.py)."""

    def __init__(self, wall: float, cpu: float, rss_mb: float, out: str) -> None:
        self.wall, self.cpu, self.rss_mb, self.out = wall, cpu, rss_mb, out
        self.phases: dict[str, float] | None = None


def _child(argv: list[str], env: dict[str, str], cwd: str) -> Run:
    return _child_err(argv, env, cwd)[0]


def _child_err(argv: list[str], env: dict[str, str], cwd: str) -> tuple[Run, str]:
    # /usr/bin/time -f %M gives each child's own peak RSS; RUSAGE_CHILDREN's ru_maxrss is the
    # max over all children so far, used only when GNU time is missing.
    if os.path.exists("/usr/bin/time"):
        argv = ["/usr/bin/time", "-f", "MAXRSS_KB=%M", *argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
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
    return Run(wall, cpu, rss_mb, proc.stdout), proc.stderr


def _env(checkout: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(checkout)
    return env


def _commands(
    path: Path, reader_only: bool, compare: Path | None
) -> dict[str, tuple[list[str], Path]]:
    """Each measurement: its command and the checkout it imports."""
    py = sys.executable
    cmds = {f"floor_{f}": ([py, "-c", FLOOR_CODE, str(path), f], REPO) for f in ("nogc", "gc")}
    for tag, checkout in (("", REPO), ("_other", compare)):
        if checkout is None:
            continue
        cmds[f"read{tag}"] = ([py, "-c", READER_CODE, str(path), str(checkout)], checkout)
        if not reader_only:
            argv = [py, "-m", "traceoverlap", "analyze", str(path), "--format", "json"]
            cmds[f"analyze{tag}"] = ([*argv, "-o", os.devnull], checkout)
    return cmds


def _measure(path: Path, repeat: int, reader_only: bool, compare: Path | None) -> dict[str, Run]:
    """Each command ``repeat`` times, interleaved round by round; the best run by CPU."""
    cmds = _commands(path, reader_only, compare)
    runs: dict[str, list[Run]] = {key: [] for key in cmds}
    with tempfile.TemporaryDirectory() as cwd:
        for round_ in range(repeat + 1):
            for key, (argv, checkout) in cmds.items():
                run = _child(argv, _env(checkout), cwd)
                if round_:  # round 0 warms the bytecode caches and the page cache
                    runs[key].append(run)
    return {key: min(rs, key=lambda r: r.cpu) for key, rs in runs.items()}


LABELS = {
    "floor_nogc": "floor: python + msgspec decode (gc=False)",
    "floor_gc": "floor: python + msgspec decode (plain)",
    "read": "python + import + read_kineto",
    "analyze": "traceoverlap analyze --format json",
    "read_other": "  the same, --compare-with checkout",
    "analyze_other": "  the same, --compare-with checkout",
}
#: The target of each measurement's whole-process CPU, in floors (None: no target).
TARGETS = {"analyze": 1.5, "analyze_other": 1.5}


def _report(size_mb: float, runs: dict[str, Run], compare: Path | None) -> None:
    floor = runs["floor_nogc"]
    print(f"\n== {size_mb:.0f} MB ==")
    print(f"{'':44s} {'wall s':>7s} {'CPU s':>7s} {'RSS MB':>7s}  CPU / floor")
    order = ["floor_nogc", "floor_gc", "read", "read_other", "analyze", "analyze_other"]
    for key in [k for k in order if k in runs]:
        r = runs[key]
        ratio = r.cpu / floor.cpu
        target = TARGETS.get(key)
        goal = ""
        if target is not None:
            goal = f" (target <= {target}x: {'met' if ratio <= target else 'missed'})"
        print(f"{LABELS[key]:44s} {r.wall:7.2f} {r.cpu:7.2f} {r.rss_mb:7.0f}  {ratio:.2f}x{goal}")
    wall_s, n_ev, cpu_s = runs["floor_nogc"].out.split()
    for key in ("read", "read_other"):
        if key not in runs:
            continue
        rd_s, rd_n, imp_s, rd_cpu = runs[key].out.split()
        who = "" if key == "read" else f" ({compare})"
        print(
            f"in-process{who}: floor decode {float(cpu_s):.2f} s CPU [{n_ev} events]; read_kineto "
            f"{float(rd_cpu):.2f} s CPU [{rd_n} rows] (+{float(imp_s):.2f} s CPU start + imports), "
            f"{float(rd_cpu) / float(cpu_s):.2f}x the decode"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, nargs="+", default=[143.0, 527.0], help="target sizes, MB")
    ap.add_argument("--keep", type=Path, help="write the traces here and keep them")
    ap.add_argument("--reader-only", action="store_true", help="skip the analyze command")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; best is kept")
    ap.add_argument("--compare-with", type=Path, help="another source checkout to run alongside")
    ap.add_argument(
        "--breakdown", action="store_true", help="also time the phases of analyze, per checkout"
    )
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
            compare = opts.compare_with.resolve() if opts.compare_with else None
            _report(size_mb, _measure(path, opts.repeat, opts.reader_only, compare), compare)
            if opts.breakdown:
                breakdown(path, opts.repeat, compare)
            if tmp is not None:
                path.unlink()
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
